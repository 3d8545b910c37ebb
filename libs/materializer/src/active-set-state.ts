import { hash } from 'crypto';
import { AgentOutput, EpisodeOutcome, KafkaCoordinates, Transition } from '@srpo/events';
import { InputRecord, KeyValueStore } from '@srpo/streams';

/*
 * What the active-set processor keeps, and how it reads and changes it outside the join's
 * rules: the stored records, the stores and their indexes, content digests, and the move of
 * the previous layout's state into episodes.
 */

/**
 * An output waiting for its set, an item of its episode's `sourced` list. Only these
 * fields reach the changelog; `raw` (the original Avro bytes) is re-read from the
 * agent-outputs topic on restore, so the changelog does not copy every output.
 */
export interface StoredOutput {
  outputId: string;
  source: KafkaCoordinates;
  digest: string;
  episodeId: string;
  agentId: string;
  role: string;
  policyId: string;
  policyVersion: number;
  temperature: number;
  eventTimeMs: number;
  /** The output's data subject; absent in state written before subjects (read as none). */
  subjectId?: string | null;
  /** The content key it is sealed under, null in the clear; absent in state written before erasures (read from `raw`). */
  keyId?: string | null;
  raw?: Buffer;
}

export interface StoredTransition {
  transition: Transition;
  source: KafkaCoordinates;
  digest: string;
  /** Stream time by which every member must have arrived (`eventTimeMs + setTtlMs`). */
  deadlineMs: number;
  /**
   * Stream time until which a set whose members all arrived waits for its episode's outcome:
   * `eventTimeMs + window(rewardSource)` (SRPO_REWARD_WINDOWS); the same time until which an
   * emitted set is held to take a revised outcome. Absent in state written before reward
   * windows: `deadlineMs`.
   */
  rewardDeadlineMs?: number;
}

/**
 * Everything the processor keeps about one episode, in one record: one changelog record
 * per episode per transaction, however many of its events the transaction carried.
 * Source-backed: the waiting outputs' bytes are left out of the changelog and re-read
 * from the agent-outputs topic on restore.
 */
export interface StoredEpisode {
  episodeId: string;
  /** Pending transitions (not yet emitted or invalidated), in arrival order. */
  pending: string[];
  /** The pending transitions by id. */
  transitions: Record<string, StoredTransition>;
  /** Outputs received and not yet in a set or dropped (the source-backed list). */
  sourced: StoredOutput[];
  /** Every output and transition id seen, for duplicate detection after close. */
  outputIds: string[];
  transitionIds: string[];
  /** Observation digests of transitions in arrival order (progress without an outcome). */
  digests: string[];
  outcome: EpisodeOutcome | null;
  outcomeSource: KafkaCoordinates | null;
  outcomeDigest: string | null;
  /**
   * Digests by id of every output and transition accepted, kept until the episode
   * expires: a same-id event with other content must be caught after its set was
   * emitted and the stored copy dropped, not only while it waits.
   */
  outputDigests: Record<string, string>;
  transitionDigests: Record<string, string>;
  /** Claims of this episode's transitions, output id -> transition id; they live as long as the episode. */
  claims: Record<string, string>;
  /** Raw bytes of an outcome that arrived before any other event, for its dead letter. */
  orphanOutcomeRaw: string | null;
  orphanKey: string | null;
  /** Deadline of an orphan outcome, or expiry of a closed episode. */
  expiresAtMs: number | null;
  closed: boolean;
  /** A transition with `done` arrived: with nothing pending, the episode can close. */
  doneSeen: boolean;
  lastEventMs: number;
  /**
   * Sets emitted with the outcome's reward, held (their outputs stay in `sourced`) until the
   * episode's reward window ends, so that a revised outcome re-emits them with the new reward
   * (docs/rewards.md). Absent in state written before revisions: none.
   */
  emitted?: Record<string, StoredTransition>;
  /** The latest reward deadline of the episode's transitions without an immediate reward; null: none. */
  rewardWindowEndMs?: number | null;
  /** A set of the episode went to invalid-sets as REWARD_MISSING_AT_TTL: an outcome after that is late. */
  rewardExpired?: boolean;
  /** Digest of each outcome revision accepted, by revision: an exact copy of any of them is a duplicate. */
  outcomeRevisions?: Record<string, string>;
  /** Outputs sealed under an erased key (docs/erasure.md), by id: never in a set. Absent: none. */
  erasedOutputIds?: string[];
}

/** An episode as changelogs of the previous layout hold it (see `migrateActiveSetState`). */
type LegacyEpisode = Omit<StoredEpisode, 'transitions' | 'sourced' | 'claims' | 'outputDigests' | 'transitionDigests'> &
  Partial<Pick<StoredEpisode, 'transitions' | 'sourced' | 'claims' | 'outputDigests' | 'transitionDigests'>> & { claimedOutputIds?: string[] };

/**
 * All state is in `episodes`, which is indexed by id (derived, never changelogged):
 * - `owners`: output id -> the episode it was received for, kept until that episode expires,
 *   so a transition listing another episode's output is recognised even after the output's
 *   own set was emitted and its bytes dropped;
 * - `claims`: output id -> the episode whose transition listed it;
 * - `transitions`: transition id -> its episode, for same-id transitions of other episodes.
 * The previous layout kept outputs, transitions, claims and ownerships in stores of their
 * own, at one to two changelog records per event each. `outputs` and `transitions` are that
 * layout's stores, restored only for `migrate` to move their contents into episodes.
 */
export type ActiveSetStores = {
  episodes: KeyValueStore<StoredEpisode>;
  outputs: KeyValueStore<StoredOutput>;
  transitions: KeyValueStore<StoredTransition>;
};

/** Names of the episodes store's indexes (see `ActiveSetStores`). */
export const OWNERS = 'owners';
export const CLAIMS = 'claims';
export const TRANSITIONS = 'transitions';

// One-shot `crypto.hash` (same SHA-256 as createHash) skips building a Hash object per event,
// which cost about as much as hashing an ~870-byte output.
export function digestOf(value: unknown): string {
  return hash('sha256', JSON.stringify(value), 'hex').slice(0, 32);
}

export function digestOfBytes(bytes: Buffer): string {
  return hash('sha256', bytes, 'hex').slice(0, 32);
}

/**
 * Moves state restored from changelogs of the previous layout into episodes: waiting
 * outputs and pending transitions from their own stores, claims from bare ids to
 * id -> transition (a settled transition's id was not kept; only a pending one's matters).
 * Runs once after restore; on current state it writes nothing.
 */
export function migrateActiveSetState(stores: ActiveSetStores): void {
  const touched = new Map<string, LegacyEpisode>();
  const episode = (id: string) => {
    const ep = touched.get(id) ?? stores.episodes.get(id);
    if (ep) touched.set(id, ep);
    return ep;
  };
  for (const [id, st] of [...stores.transitions.entries()]) {
    const ep = episode(st.transition.episodeId);
    if (ep) (ep.transitions ??= {})[id] = st;
    stores.transitions.delete(id);
  }
  for (const [id, out] of [...stores.outputs.entries()]) {
    const ep = episode(out.episodeId);
    if (ep) (ep.sourced ??= []).push(out);
    stores.outputs.delete(id);
  }
  for (const [id, value] of stores.episodes.entries()) {
    const ep = value as LegacyEpisode;
    if (!ep.transitions || !ep.sourced || !ep.claims || !ep.outputDigests || !ep.transitionDigests) touched.set(id, ep);
  }
  for (const [id, ep] of touched) {
    ep.transitions ??= {};
    ep.sourced ??= [];
    ep.outputDigests ??= {};
    ep.transitionDigests ??= {};
    if (!ep.claims) {
      const claims: Record<string, string> = {};
      const pending = Object.values(ep.transitions);
      for (const outputId of ep.claimedOutputIds ?? []) {
        claims[outputId] =
          pending.find((st) => st.transition.consumedOutputIds.includes(outputId))?.transition.transitionId ?? `(a settled transition of episode ${id})`;
      }
      ep.claims = claims;
    }
    delete ep.claimedOutputIds;
    stores.episodes.put(id, ep as StoredEpisode);
  }
}

/** The stored episode, or a new one whose first event is at `now`. */
export function episodeOf(stores: ActiveSetStores, episodeId: string, now: number): StoredEpisode {
  return (
    stores.episodes.get(episodeId) ?? {
      episodeId,
      pending: [],
      transitions: {},
      sourced: [],
      outputIds: [],
      transitionIds: [],
      digests: [],
      outcome: null,
      outcomeSource: null,
      outcomeDigest: null,
      outputDigests: {},
      transitionDigests: {},
      claims: {},
      orphanOutcomeRaw: null,
      orphanKey: null,
      expiresAtMs: null,
      closed: false,
      doneSeen: false,
      lastEventMs: now,
    }
  );
}

/** The transition that listed an output, with its episode, while that episode is kept. */
export function claimOf(stores: ActiveSetStores, outputId: string): { transitionId: string; episode: StoredEpisode } | undefined {
  const episodeId = stores.episodes.lookup(CLAIMS, outputId);
  const episode = episodeId === undefined ? undefined : stores.episodes.get(episodeId);
  return episode ? { transitionId: episode.claims[outputId], episode } : undefined;
}

/** The output waiting for its set in `ep`, if it arrived and was not dropped. */
export function waiting(ep: StoredEpisode, outputId: string): StoredOutput | undefined {
  return ep.sourced.find((o) => o.outputId === outputId);
}

/** What is kept of an accepted output until its set is emitted (`raw` never reaches the changelog). */
export function storedOutputOf(record: InputRecord, output: AgentOutput, digest: string): StoredOutput {
  return {
    outputId: output.outputId,
    source: record.source,
    digest,
    episodeId: output.episodeId,
    agentId: output.agentId,
    role: output.role,
    policyId: output.policyId,
    policyVersion: output.policyVersion,
    temperature: output.sampling.temperature,
    eventTimeMs: output.eventTimeMs,
    subjectId: output.subjectId ?? null,
    keyId: output.sealed?.keyId ?? null,
    raw: record.raw,
  };
}
