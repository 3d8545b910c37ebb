import { decodeMemberOutput, openOutput, type AdvantageGroup, type ContentKeySource, type EventCodec } from '@srpo/events';
import { groupWithout } from '@srpo/materializer';
import type { TrainingSet } from './policy-trainer';

/** Content keys by key id, as fetched for a batch ({@link fetchMemberKeys}). */
export type ContentKeys = ReadonlyMap<string, Buffer>;
const NO_KEYS: ContentKeys = new Map();

/**
 * Loads the writer schemas of the members' original AgentOutput bytes: agents writing
 * Confluent-framed events (schema registry) nest those frames inside each set, and the
 * synchronous decode in {@link trainingSetsFromGroup} only knows schemas fetched
 * beforehand. No-op without a registry.
 */
export async function prefetchMemberSchemas(codec: EventCodec, groups: readonly AdvantageGroup[]): Promise<void> {
  await codec.prefetch(groups.flatMap((g) => g.sets.flatMap((gs) => gs.set.members.map((m) => m.output))));
}

/**
 * The key ids of the sealed members of `group`, by set id (sets with none are left out). A member
 * that does not decode names no key: triage refuses its group (`invalid-input`) with the reason,
 * and one bad group must not fail the batch here.
 */
function sealedKeyIds(codec: EventCodec, group: AdvantageGroup): Map<string, string[]> {
  const keyIdOf = (m: AdvantageGroup['sets'][number]['set']['members'][number]): string[] => {
    try {
      const sealed = decodeMemberOutput(codec, m).sealed;
      return sealed ? [sealed.keyId] : [];
    } catch {
      return [];
    }
  };
  const out = new Map<string, string[]>();
  for (const gs of group.sets) {
    const ids = gs.set.members.flatMap(keyIdOf);
    if (ids.length > 0) out.set(gs.set.setId, ids);
  }
  return out;
}

/**
 * The content keys of every sealed member of `groups`, in one query (docs/erasure.md). A key the
 * source does not have is erased; its sets are found by {@link erasedSetIds}. Without a source,
 * no key: every sealed member counts as erased.
 */
export async function fetchMemberKeys(codec: EventCodec, source: ContentKeySource | undefined, groups: readonly AdvantageGroup[]): Promise<ContentKeys> {
  const ids = groups.flatMap((g) => [...sealedKeyIds(codec, g).values()].flat());
  if (ids.length === 0 || source === undefined) return NO_KEYS;
  return source.keysById(ids);
}

/** The sets of `group` with a sealed member whose key is not in `keys`: erased content, never trained on. */
export function erasedSetIds(codec: EventCodec, group: AdvantageGroup, keys: ContentKeys): Set<string> {
  const out = new Set<string>();
  for (const [setId, ids] of sealedKeyIds(codec, group)) if (ids.some((id) => !keys.has(id))) out.add(setId);
  return out;
}

/**
 * The trainer's view of a group: each member's original AgentOutput bytes,
 * decoded (and opened with `keys` when sealed), so the importance ratio's logpOld
 * is exactly what the agent recorded. Shared by the learner, audit and replay,
 * which must feed the trainer the very same sets the learner did. A sealed member
 * whose key is missing throws (SealOpenError): take erased sets out first
 * ({@link erasedSetIds}).
 */
export function trainingSetsFromGroup(codec: EventCodec, group: AdvantageGroup, keys: ContentKeys = NO_KEYS): TrainingSet[] {
  return group.sets.map((gs) => ({
    setId: gs.set.setId,
    advantage: gs.advantage,
    members: gs.set.members.map((m) => {
      const decoded = decodeMemberOutput(codec, m);
      const output = decoded.sealed === null ? decoded : openOutput(decoded, keys.get(decoded.sealed.keyId));
      return {
        outputId: m.outputId,
        contextTokens: output.contextTokenIds,
        responseTokens: output.responseTokenIds,
        logpOld: output.behaviourLogProbs,
        mask: output.lossMask.map((b) => (b ? 1 : 0)),
        temperature: m.temperature,
      };
    }),
  }));
}

/** Groups as they can still be read: erased sets taken out ({@link groupWithout}), with the keys to open the rest. */
export interface ReadableGroups {
  /** The groups with a set left, each renormalized over the sets left. */
  groups: AdvantageGroup[];
  /** Every set left out, in group order. */
  erasedSetIds: string[];
  keys: ContentKeys;
}

/**
 * `groups` without their sets of erased content, for recomputation (audit verify, replay, the
 * rebuild of a lineage after an erasure): one key query, then {@link erasedSetIds} and
 * {@link groupWithout} per group, as the learner does for a live batch.
 */
export async function readableGroups(codec: EventCodec, source: ContentKeySource | undefined, groups: readonly AdvantageGroup[]): Promise<ReadableGroups> {
  const keys = await fetchMemberKeys(codec, source, groups);
  const out: ReadableGroups = { groups: [], erasedSetIds: [], keys };
  for (const g of groups) {
    const erased = erasedSetIds(codec, g, keys);
    out.erasedSetIds.push(...g.sets.map((gs) => gs.set.setId).filter((id) => erased.has(id)));
    const left = groupWithout(g, erased);
    if (left !== null) out.groups.push(left);
  }
  return out;
}
