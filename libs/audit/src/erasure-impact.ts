import type { AdvantageGroup } from '@srpo/events';
import * as path from 'path';
import { AuditStore, type ErasureScope, type KeyStore, type PolicyVersionRecord } from '@srpo/store';
import type { AuditService } from './audit.service';
import { adoptionOf, type Adoption } from './lineage-adoption';

/** A trained set that holds the erased data. */
export interface ErasedSetUse {
  setId: string;
  episodeId: string;
  groupId: string;
  updateId: string;
  policyId: string;
}

/** A policy version the data reached: made by an update that trained on it (`direct`) or descended from one. */
export interface ReachedVersion {
  policyId: string;
  version: number;
  direct: boolean;
  weightsHash: string;
  checkpointUri: string;
}

/** `srpo erase --dry-run`'s report: what an erasure of `scope` deletes, and every update and version its data reached. */
export interface ErasureImpact {
  scope: ErasureScope;
  /** Ids of the content keys the erasure deletes (the content they seal becomes unreadable everywhere). */
  keyIds: string[];
  /** Trained sets that hold the data, in update order. */
  sets: ErasedSetUse[];
  /** Updates that trained on such a set, oldest first per policy. */
  updates: { updateId: string; policyId: string; versionBefore: number; versionAfter: number; committedAtMs: number }[];
  /** Every version made by those updates and every later version of the same policy (they start from them). */
  versions: ReachedVersion[];
  /** Per policy: the last version the data never reached, where a rebuilt lineage starts. */
  cleanBefore: { policyId: string; version: number }[];
}

/** Whether a set holds the data of `scope`: its subjects name the subject, or it is of the episode. */
export function holds(scope: ErasureScope, set: AdvantageGroup['sets'][number]['set']): boolean {
  return 'subjectId' in scope ? set.subjectIds.includes(scope.subjectId) : set.episodeId === scope.episodeId;
}

/**
 * Whether an adopted lineage (a replay run, `srpo erase --adopt`) holds the data of `scope`: the
 * version it started from did, or an update of the run trained on a set holding it.
 */
async function adoptedLineageHolds(
  audit: AuditService,
  adoption: Adoption,
  policyId: string,
  scope: ErasureScope,
  reachedAt: ReadonlyMap<number, boolean>,
): Promise<boolean> {
  const run = await AuditStore.open({ kind: 'sqlite', path: path.join(adoption.runDir, adoption.run, 'store.sqlite') });
  try {
    const versions = await run.listVersions(policyId);
    if (versions.length > 0 && reachedAt.get(versions[0].version) === true) return true;
    for (const v of versions) {
      if (v.updateId === null || v.version > adoption.sourceVersion) continue;
      const update = await run.getUpdate(v.updateId);
      if ((await audit.fetchGroups(update.groups)).some((g) => g.sets.some((gs) => holds(scope, gs.set)))) return true;
    }
    return false;
  } finally {
    await run.close();
  }
}

/**
 * The impact of erasing `scope`, from the audit record and the log: every recorded update of every
 * policy (or of `policyId`), its groups read back at their ledger coordinates, and the sets among
 * them that hold the subject's (or episode's) data. A version is reached directly when its update
 * trained on such a set, and through later versions since each starts from the one before; a
 * version adopted from a rebuilt lineage (`srpo erase --adopt`) starts from that lineage instead,
 * and is reached only when it is.
 * Checkpoints and exports made from a reached version are named by its checkpoint URI.
 */
export async function erasureImpact(
  deps: { store: AuditStore; audit: AuditService; keys: KeyStore },
  scope: ErasureScope,
  options: { policyId?: string } = {},
): Promise<ErasureImpact> {
  const impact: ErasureImpact = { scope, keyIds: await deps.keys.keyIdsOf(scope), sets: [], updates: [], versions: [], cleanBefore: [] };
  const policies = options.policyId ? [options.policyId] : (await deps.store.listPolicies()).map((p) => p.policyId);
  for (const policyId of policies) {
    const versions = await deps.store.listVersions(policyId);
    let first: PolicyVersionRecord | undefined;
    /** Per version: whether the data reached it. */
    const reachedAt = new Map<number, boolean>();
    for (const v of versions) {
      if (v.updateId === null) {
        reachedAt.set(v.version, false);
        continue;
      }
      const update = await deps.store.getUpdate(v.updateId);
      const adoption = adoptionOf(update);
      if (adoption) {
        // The version descends from the adopted lineage, not from the one before it.
        const reached = await adoptedLineageHolds(deps.audit, adoption, policyId, scope, reachedAt);
        reachedAt.set(v.version, reached);
        if (reached) {
          first ??= v;
          impact.versions.push({ policyId, version: v.version, direct: false, weightsHash: v.weightsHash, checkpointUri: v.checkpointUri });
        }
        continue;
      }
      const groups = await deps.audit.fetchGroups(update.groups);
      const uses = groups.flatMap((g) =>
        g.sets
          .filter((gs) => holds(scope, gs.set))
          .map((gs) => ({ setId: gs.set.setId, episodeId: gs.set.episodeId, groupId: g.groupId, updateId: update.updateId, policyId })),
      );
      if (uses.length > 0) {
        impact.sets.push(...uses);
        impact.updates.push({
          updateId: update.updateId,
          policyId,
          versionBefore: update.versionBefore,
          versionAfter: update.versionAfter,
          committedAtMs: update.committedAtMs,
        });
        first ??= v;
      }
      const reached = uses.length > 0 || reachedAt.get(update.versionBefore) === true;
      reachedAt.set(v.version, reached);
      if (reached) impact.versions.push({ policyId, version: v.version, direct: uses.length > 0, weightsHash: v.weightsHash, checkpointUri: v.checkpointUri });
    }
    if (first) impact.cleanBefore.push({ policyId, version: first.version - 1 });
  }
  return impact;
}
