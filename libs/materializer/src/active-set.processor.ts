import { hash } from 'crypto';
import { ErrorCode, SrpoError, ValidationError } from '@srpo/core';
import {
  ActiveSet,
  AgentOutput,
  EpisodeOutcome,
  KafkaCoordinates,
  ReasonCode,
  SetMember,
  TopicCatalog,
  Transition,
  validateAgentOutput,
  floorLogProbCount,
  validateEpisodeOutcome,
  validateTransition,
  EventLimits,
  DEFAULT_EVENT_LIMITS,
  EventCodec,
} from '@srpo/events';
import { progressCoverage } from '@srpo/srpo';
import { InputRecord, KeyValueStore, Processor, ProcessorContext } from '@srpo/streams';

/**
 * Joins AgentOutput, Transition and EpisodeOutcome events of one episode (they are
 * co-partitioned by episode id) into active sets: the outputs one transition
 * consumed, with their content and reward.
 *
 * - Membership is exactly the transition's `consumedOutputIds`, in that order.
 * - A set is emitted once, when every member arrived and its reward is known: the
 *   transition's immediate reward, or else the episode's outcome reward.
 * - A set still incomplete when stream time passes `transition.eventTimeMs + setTtlMs`
 *   is emitted whole to the invalid-sets topic with the missing ids; never in part.
 * - Duplicates (same id, same content) change nothing; same id with other content
 *   is dead-lettered as CONFLICTING_DUPLICATE. Ids of closed episodes are remembered
 *   for `dedupeRetentionMs` of event time.
 */
export interface ActiveSetProcessorOptions {
  topics: TopicCatalog;
  /** Decodes stored outputs when their set is emitted. */
  codec: EventCodec;
  /** Event-time budget for a set's members and reward to arrive (default 60 s). */
  setTtlMs: number;
  /** How long closed episodes' ids are kept to recognise late duplicates (default 10 min). */
  dedupeRetentionMs: number;
  /** Events this far ahead of stream time are refused as clock skew (default 1 h). */
  maxFutureSkewMs: number;
  /** Events this far behind stream time are refused as clock skew (default 24 h). */
  maxLatenessMs: number;
  /** Deadline scans run at most once per this much stream time (default 1 s). */
  scanIntervalMs: number;
  limits: EventLimits;
  /**
   * The newest version of a policy its learner has published (the PolicyVersion
   * topic), or undefined while none is known. An output sampled with a newer
   * version is dead-lettered as FUTURE_POLICY_VERSION: agents learn of versions
   * only from that topic, so no honest output can be ahead of it. Left out, the
   * check is off (replays, tools).
   */
  latestPolicyVersion?: (policyId: string) => number | undefined;
}

export const DEFAULT_ACTIVE_SET_OPTIONS: Omit<ActiveSetProcessorOptions, 'topics' | 'codec'> = {
  setTtlMs: 60_000,
  dedupeRetentionMs: 600_000,
  maxFutureSkewMs: 3_600_000,
  maxLatenessMs: 86_400_000,
  scanIntervalMs: 1_000,
  limits: DEFAULT_EVENT_LIMITS,
};

/**
 * An output waiting for its set, an item of its episode's `sourced` list. Only these
 * fields reach the changelog; `raw` (the original Avro bytes) is re-read from the
 * agent-outputs topic on restore, so the changelog does not copy every output.
 */
interface StoredOutput {
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
  raw?: Buffer;
}

interface StoredTransition {
  transition: Transition;
  source: KafkaCoordinates;
  digest: string;
  deadlineMs: number;
}

/**
 * Everything the processor keeps about one episode, in one record: one changelog record
 * per episode per transaction, however many of its events the transaction carried.
 * Source-backed: the waiting outputs' bytes are left out of the changelog and re-read
 * from the agent-outputs topic on restore.
 */
interface StoredEpisode {
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
}

/** An episode as changelogs of the previous layout hold it (see `ActiveSetProcessor.migrate`). */
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

const OWNERS = 'owners';
const CLAIMS = 'claims';
const TRANSITIONS = 'transitions';

// One-shot `crypto.hash` (same SHA-256 as createHash) skips building a Hash object per event,
// which cost about as much as hashing an ~870-byte output.
function digestOf(value: unknown): string {
  return hash('sha256', JSON.stringify(value), 'hex').slice(0, 32);
}

function digestOfBytes(bytes: Buffer): string {
  return hash('sha256', bytes, 'hex').slice(0, 32);
}

/** A rejected event; the runner dead-letters it under `reason`. */
function relationError(reason: ReasonCode, field: string, message: string): SrpoError {
  return new ValidationError(field, message, { reasonCode: reason });
}

export class ActiveSetProcessor implements Processor<ActiveSetStores> {
  readonly name = 'active-set-materializer';
  readonly storeNames: (keyof ActiveSetStores & string)[] = ['episodes', 'outputs', 'transitions'];
  /** Stores whose changelog keeps coordinates only; the runner re-reads their bytes. */
  readonly sourceBackedStores: (keyof ActiveSetStores & string)[] = ['episodes', 'outputs'];
  readonly storeIndexes = {
    episodes: {
      [OWNERS]: (ep: StoredEpisode) => ep.outputIds,
      // Records of the previous layout have no `claims` until `migrate` rewrites them.
      [CLAIMS]: (ep: StoredEpisode) => (ep.claims ? Object.keys(ep.claims) : []),
      [TRANSITIONS]: (ep: StoredEpisode) => ep.transitionIds,
    },
  };
  readonly storeSchedules = { episodes: (ep: StoredEpisode) => this.dueOf(ep) };
  private readonly options: ActiveSetProcessorOptions;

  /** Deadline scans run on the runtime's stream-time schedule, at most once per scan interval. */
  readonly punctuationIntervalMs: number;
  /** The layout `migrate` writes (episodes/groups holding their records); later starts skip the scan. */
  readonly stateLayout = 2;

  constructor(options: Partial<ActiveSetProcessorOptions> & { topics: TopicCatalog; codec: EventCodec }) {
    this.options = { ...DEFAULT_ACTIVE_SET_OPTIONS, ...options };
    this.punctuationIntervalMs = this.options.scanIntervalMs;
  }

  eventTime(record: InputRecord, streamTimeMs: number): number {
    const t = (record.event.value as { eventTimeMs?: number }).eventTimeMs;
    if (typeof t !== 'number' || !Number.isFinite(t)) return NaN;
    if (streamTimeMs > 0 && t > streamTimeMs + this.options.maxFutureSkewMs) return NaN;
    return t;
  }

  process(record: InputRecord, stores: ActiveSetStores, ctx: ProcessorContext): void {
    const { event } = record;
    this.checkTopic(record);
    switch (event.type) {
      case 'AgentOutput':
        return this.onOutput(record, event.value, stores, ctx);
      case 'Transition':
        return this.onTransition(record, event.value, stores, ctx);
      case 'EpisodeOutcome':
        return this.onOutcome(record, event.value, stores, ctx);
      default:
        throw relationError(ReasonCode.WRONG_EVENT_TYPE, 'event', `${event.type} events do not belong on ${record.source.topic}`);
    }
  }

  /**
   * Moves state restored from changelogs of the previous layout into episodes: waiting
   * outputs and pending transitions from their own stores, claims from bare ids to
   * id -> transition (a settled transition's id was not kept; only a pending one's matters).
   * Runs once after restore; on current state it writes nothing.
   */
  migrate(stores: ActiveSetStores): void {
    const touched = new Map<string, LegacyEpisode>();
    const episode = (id: string) => {
      const ep = (touched.get(id) ?? stores.episodes.get(id)) as LegacyEpisode | undefined;
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
          claims[outputId] = pending.find((st) => st.transition.consumedOutputIds.includes(outputId))?.transition.transitionId ?? `(a settled transition of episode ${id})`;
        }
        ep.claims = claims;
      }
      delete ep.claimedOutputIds;
      stores.episodes.put(id, ep as StoredEpisode);
    }
  }

  /**
   * Each raw topic carries one event type. Topics are compared by their name without the
   * catalog prefix, because re-materialization feeds records of another prefix's topics.
   */
  private checkTopic(record: InputRecord): void {
    const { topics } = this.options;
    const home: Partial<Record<string, string>> = {
      AgentOutput: topics.agentOutputs.name.slice(topics.prefix.length),
      Transition: topics.transitions.name.slice(topics.prefix.length),
      EpisodeOutcome: topics.episodeOutcomes.name.slice(topics.prefix.length),
    };
    const suffix = home[record.event.type];
    if (suffix !== undefined && !record.source.topic.endsWith(suffix)) {
      throw relationError(ReasonCode.WRONG_EVENT_TYPE, 'event', `${record.event.type} events do not belong on ${record.source.topic}`);
    }
  }

  private checkCommon(record: InputRecord, episodeId: string, eventTimeMs: number, ctx: ProcessorContext, kind: string): void {
    if (record.key !== episodeId) {
      throw relationError(ReasonCode.KEY_MISMATCH, `${kind}.episodeId`, `Kafka key ${JSON.stringify(record.key)} is not the episode id ${JSON.stringify(episodeId)}; co-partitioning needs episode-id keys`);
    }
    const now = ctx.streamTimeMs;
    if (now > 0 && eventTimeMs > now + this.options.maxFutureSkewMs) {
      throw relationError(ReasonCode.CLOCK_SKEW, `${kind}.eventTimeMs`, `${eventTimeMs} is ${eventTimeMs - now} ms ahead of stream time ${now}`);
    }
    if (now > 0 && eventTimeMs < now - this.options.maxLatenessMs) {
      throw relationError(ReasonCode.CLOCK_SKEW, `${kind}.eventTimeMs`, `${eventTimeMs} is ${now - eventTimeMs} ms behind stream time ${now}`);
    }
  }

  private episode(stores: ActiveSetStores, episodeId: string, now: number): StoredEpisode {
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
  private claimOf(stores: ActiveSetStores, outputId: string): { transitionId: string; episode: StoredEpisode } | undefined {
    const episodeId = stores.episodes.lookup(CLAIMS, outputId);
    const episode = episodeId === undefined ? undefined : stores.episodes.get(episodeId);
    return episode ? { transitionId: episode.claims[outputId], episode } : undefined;
  }

  private waiting(ep: StoredEpisode, outputId: string): StoredOutput | undefined {
    return ep.sourced.find((o) => o.outputId === outputId);
  }

  private onOutput(record: InputRecord, output: AgentOutput, stores: ActiveSetStores, ctx: ProcessorContext): void {
    validateAgentOutput(output, this.options.limits);
    this.checkCommon(record, output.episodeId, output.eventTimeMs, ctx, 'AgentOutput');
    const latest = this.options.latestPolicyVersion?.(output.policyId);
    if (latest !== undefined && output.policyVersion > latest) {
      throw relationError(
        ReasonCode.FUTURE_POLICY_VERSION,
        'AgentOutput.policyVersion',
        `is ${output.policyVersion} but the newest version of policy ${output.policyId} its learner published is ${latest}`,
      );
    }
    const digest = digestOfBytes(record.raw);
    const owner = stores.episodes.lookup(OWNERS, output.outputId);
    if (owner !== undefined && owner !== output.episodeId) {
      throw relationError(ReasonCode.CONFLICTING_DUPLICATE, 'AgentOutput.outputId', `output ${output.outputId} was already received for episode ${owner}`);
    }
    const ep = this.episode(stores, output.episodeId, output.eventTimeMs);
    const known = ep.outputDigests[output.outputId];
    if (known !== undefined || ep.outputIds.includes(output.outputId)) {
      if (known !== undefined && known !== digest) {
        throw relationError(ReasonCode.CONFLICTING_DUPLICATE, 'AgentOutput.outputId', `output ${output.outputId} was already received with different content`);
      }
      ctx.count('duplicates_total', { type: 'AgentOutput' });
      return;
    }
    const claim = this.claimOf(stores, output.outputId);
    const claimant = claim?.episode.transitions[claim.transitionId];
    if (claimant && claimant.transition.episodeId !== output.episodeId) {
      throw relationError(
        ReasonCode.FOREIGN_EPISODE_OUTPUT,
        'AgentOutput.episodeId',
        `output ${output.outputId} of episode ${output.episodeId} is listed by transition ${claimant.transition.transitionId} of episode ${claimant.transition.episodeId}`,
      );
    }
    if (ep.closed) {
      throw relationError(ReasonCode.INVALID_FIELD, 'AgentOutput.episodeId', `episode ${output.episodeId} is closed; output ${output.outputId} arrived after every set of the episode was resolved`);
    }
    // Floor behaviour log-probs (e.g. −9999) are data: accepted and counted (docs/bad-input.md).
    const floorTokens = floorLogProbCount(output);
    if (floorTokens > 0) {
      ctx.count('behaviour_logprob_floor_outputs_total', { policy: output.policyId });
      for (let i = 0; i < floorTokens; i++) ctx.count('behaviour_logprob_floor_tokens_total', { policy: output.policyId });
    }
    ep.sourced.push({
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
      raw: record.raw,
    });
    this.adoptOutcome(ep);
    ep.outputIds.push(output.outputId);
    // In place, as `outputIds` above: a copy per event made each episode's arrivals quadratic.
    ep.outputDigests[output.outputId] = digest;
    ep.lastEventMs = Math.max(ep.lastEventMs, output.eventTimeMs);
    stores.episodes.put(ep.episodeId, ep);
    // A pending claimant is of this episode (a foreign one was refused above).
    if (claimant) this.tryComplete(ep, claimant.transition.transitionId, stores, ctx);
  }

  private onTransition(record: InputRecord, t: Transition, stores: ActiveSetStores, ctx: ProcessorContext): void {
    const ids = t.consumedOutputIds ?? [];
    const dup = ids.findIndex((id, i) => ids.indexOf(id) !== i);
    if (dup >= 0) throw relationError(ReasonCode.DUPLICATE_OUTPUT_IN_TRANSITION, `Transition.consumedOutputIds[${dup}]`, `lists output ${ids[dup]} twice`);
    if (t.expectedCardinality !== ids.length) {
      throw relationError(ReasonCode.CARDINALITY_MISMATCH, 'Transition.expectedCardinality', `is ${t.expectedCardinality} but consumedOutputIds lists ${ids.length}`);
    }
    validateTransition(t, this.options.limits);
    this.checkCommon(record, t.episodeId, t.eventTimeMs, ctx, 'Transition');
    const digest = digestOf(t);
    const elsewhere = stores.episodes.lookup(TRANSITIONS, t.transitionId);
    if (elsewhere !== undefined && elsewhere !== t.episodeId) {
      throw relationError(ReasonCode.CONFLICTING_DUPLICATE, 'Transition.transitionId', `transition ${t.transitionId} was already received for episode ${elsewhere}`);
    }
    const ep = this.episode(stores, t.episodeId, t.eventTimeMs);
    if (ep.transitionIds.includes(t.transitionId)) {
      const known = ep.transitionDigests[t.transitionId];
      if (known !== undefined && known !== digest) {
        throw relationError(ReasonCode.CONFLICTING_DUPLICATE, 'Transition.transitionId', `transition ${t.transitionId} was already received with different content`);
      }
      ctx.count('duplicates_total', { type: 'Transition' });
      return;
    }
    // Relations first: they name the actual fault, where "episode closed" would only describe its timing.
    for (let i = 0; i < ids.length; i++) {
      const owner = stores.episodes.lookup(OWNERS, ids[i]);
      if (owner !== undefined && owner !== t.episodeId) {
        throw relationError(ReasonCode.FOREIGN_EPISODE_OUTPUT, `Transition.consumedOutputIds[${i}]`, `output ${ids[i]} belongs to episode ${owner}, not ${t.episodeId}`);
      }
      const other = this.claimOf(stores, ids[i]);
      if (other !== undefined && other.transitionId !== t.transitionId) {
        throw relationError(ReasonCode.OUTPUT_CLAIMED_TWICE, `Transition.consumedOutputIds[${i}]`, `output ${ids[i]} is already consumed by transition ${other.transitionId}`);
      }
    }
    if (ep.closed) {
      throw relationError(ReasonCode.INVALID_FIELD, 'Transition.episodeId', `episode ${t.episodeId} is closed; transition ${t.transitionId} arrived too late`);
    }
    ep.transitions[t.transitionId] = { transition: t, source: record.source, digest, deadlineMs: t.eventTimeMs + this.options.setTtlMs };
    ep.pending.push(t.transitionId);
    this.adoptOutcome(ep);
    ep.transitionIds.push(t.transitionId);
    ep.transitionDigests[t.transitionId] = digest;
    for (const id of ids) ep.claims[id] = t.transitionId;
    ep.digests.push(t.observationDigest);
    ep.doneSeen ||= t.done;
    ep.lastEventMs = Math.max(ep.lastEventMs, t.eventTimeMs);
    stores.episodes.put(ep.episodeId, ep);
    this.tryComplete(ep, t.transitionId, stores, ctx);
  }

  private onOutcome(record: InputRecord, o: EpisodeOutcome, stores: ActiveSetStores, ctx: ProcessorContext): void {
    validateEpisodeOutcome(o, this.options.limits);
    this.checkCommon(record, o.episodeId, o.eventTimeMs, ctx, 'EpisodeOutcome');
    const digest = digestOf(o);
    const ep = this.episode(stores, o.episodeId, o.eventTimeMs);
    if (ep.outcomeDigest !== null) {
      if (ep.outcomeDigest !== digest) throw relationError(ReasonCode.CONFLICTING_DUPLICATE, 'EpisodeOutcome.episodeId', `episode ${o.episodeId} already has a different outcome`);
      ctx.count('duplicates_total', { type: 'EpisodeOutcome' });
      return;
    }
    ep.outcome = o;
    ep.outcomeSource = record.source;
    ep.outcomeDigest = digest;
    ep.lastEventMs = Math.max(ep.lastEventMs, o.eventTimeMs);
    if (ep.transitionIds.length === 0 && ep.outputIds.length === 0) {
      // Events may still be on their way; an outcome with no episode is judged at its deadline.
      ep.orphanOutcomeRaw = record.raw.toString('base64');
      ep.orphanKey = record.key;
      ep.expiresAtMs = o.eventTimeMs + this.options.setTtlMs;
    }
    stores.episodes.put(ep.episodeId, ep);
    for (const id of [...ep.pending]) this.tryComplete(ep, id, stores, ctx);
  }

  /**
   * An outcome that came first is an orphan only until its episode's first event: from then on
   * it is the episode's outcome, and the episode follows the usual close and abandonment rules.
   * Left an orphan, an episode that never sends `done` would never be forgotten.
   */
  private adoptOutcome(ep: StoredEpisode): void {
    if (ep.orphanOutcomeRaw === null || ep.closed) return;
    ep.orphanOutcomeRaw = null;
    ep.orphanKey = null;
    ep.expiresAtMs = null;
  }

  /** Emits the set of `transitionId` when all members and its reward are there. */
  private tryComplete(ep: StoredEpisode, transitionId: string, stores: ActiveSetStores, ctx: ProcessorContext): void {
    const st = ep.transitions[transitionId];
    if (!st) return;
    const t = st.transition;
    const outputs = t.consumedOutputIds.map((id) => this.waiting(ep, id));
    if (outputs.some((o) => o === undefined)) return;
    if (t.reward === null && ep.outcome === null) return;
    const present = outputs as StoredOutput[];
    const policies = new Set(present.map((o) => o.policyId));
    if (policies.size > 1) {
      this.emitInvalid(st, ep, present, [], ReasonCode.MIXED_POLICY_SET, ctx);
    } else {
      const set = this.activeSet(st, ep, present, 'COMPLETE', null, []);
      ctx.emit({ topic: this.options.topics.activeSets.name, key: set.groupKey, type: 'ActiveSet', value: set });
      ctx.count('sets_complete_total', { workflow: t.workflowKind });
    }
    this.resolve(st, ep, stores);
  }

  private emitInvalid(st: StoredTransition, ep: StoredEpisode, present: StoredOutput[], missing: string[], reason: ReasonCode, ctx: ProcessorContext): void {
    const set = this.activeSet(st, ep, present, 'INVALID', reason, missing);
    ctx.emit({ topic: this.options.topics.invalidSets.name, key: set.episodeId, type: 'ActiveSet', value: set });
    ctx.count('sets_invalid_total', { reason });
  }

  /** The transition is settled: drop it and its members; close the episode when nothing is pending. */
  private resolve(st: StoredTransition, ep: StoredEpisode, stores: ActiveSetStores): void {
    const t = st.transition;
    delete ep.transitions[t.transitionId];
    // Claims stay until the episode expires (see forgetEpisode): a second claim must be refused later too.
    ep.sourced = ep.sourced.filter((o) => !t.consumedOutputIds.includes(o.outputId));
    ep.pending = ep.pending.filter((id) => id !== t.transitionId);
    // The three raw topics are read independently, so an outcome can overtake its episode's
    // later transitions: close only once the last transition (`done`) or all `turns` of them arrived.
    if (ep.pending.length === 0 && (ep.doneSeen || (ep.outcome !== null && ep.transitionIds.length >= ep.outcome.turns))) {
      this.closeEpisode(ep);
    }
    stores.episodes.put(ep.episodeId, ep);
  }

  /** Drops an expired episode, and with it (through the indexes) the claims and ownerships it holds. */
  private forgetEpisode(ep: StoredEpisode, stores: ActiveSetStores): void {
    stores.episodes.delete(ep.episodeId);
  }

  private closeEpisode(ep: StoredEpisode): void {
    // Unclaimed outputs of a finished episode will never join a set.
    ep.sourced = ep.sourced.filter((o) => ep.claims[o.outputId] !== undefined);
    ep.closed = true;
    ep.orphanOutcomeRaw = null;
    ep.expiresAtMs = ep.lastEventMs + this.options.dedupeRetentionMs;
  }

  private activeSet(st: StoredTransition, ep: StoredEpisode, present: StoredOutput[], status: ActiveSet['status'], reason: string | null, missing: string[]): ActiveSet {
    const t = st.transition;
    const members = present.map(memberOf);
    const policyId = members[0]?.policyId ?? 'unknown';
    const immediate = t.reward !== null;
    const reward = immediate ? (t.reward as number) : (ep.outcome?.outcomeReward ?? 0);
    const digests = ep.outcome && ep.outcome.observationDigests.length > 0 ? ep.outcome.observationDigests : ep.digests;
    const turns = ep.outcome ? ep.outcome.turns : ep.transitionIds.length;
    // The set exists from the moment its last input arrived.
    const eventTimes = [t.eventTimeMs, ...present.map((o) => o.eventTimeMs), ...(immediate || !ep.outcome ? [] : [ep.outcome.eventTimeMs])];
    return {
      setId: t.transitionId,
      episodeId: t.episodeId,
      taskId: t.taskId,
      step: t.step,
      position: t.position,
      workflowKind: t.workflowKind,
      groupKey: groupKeyOf(t, policyId),
      expectedGroupSize: t.expectedGroupSize,
      policyId,
      status,
      invalidReason: reason,
      missingOutputIds: missing,
      members,
      reward: status === 'COMPLETE' ? reward : 0,
      rewardSource: status !== 'COMPLETE' ? 'NONE' : immediate ? 'IMMEDIATE' : 'OUTCOME',
      success: ep.outcome ? ep.outcome.success : null,
      progress: turns > 0 ? progressCoverage(digests, turns) : null,
      transitionSource: st.source,
      outcomeSource: !immediate && ep.outcomeSource ? ep.outcomeSource : null,
      eventTimeMs: Math.max(...eventTimes),
    };
  }

  /**
   * The earliest stream time at which `punctuate` has something to do for an episode: a
   * pending set's deadline, its expiry (closed, or an orphan outcome's deadline), the end of
   * its idle window while nothing is pending, or an unclaimed output's retention. Each term
   * is the boundary of the matching test in `punctuate`.
   */
  private dueOf(ep: StoredEpisode): number | undefined {
    const retention = this.options.dedupeRetentionMs;
    let due = Infinity;
    for (const id of ep.pending) {
      const st = ep.transitions?.[id];
      if (st) due = Math.min(due, st.deadlineMs);
    }
    if (ep.expiresAtMs !== null) due = Math.min(due, ep.expiresAtMs);
    if (!ep.closed && ep.pending.length === 0 && ep.orphanOutcomeRaw === null) due = Math.min(due, ep.lastEventMs + retention);
    for (const o of ep.sourced ?? []) if (ep.claims?.[o.outputId] === undefined) due = Math.min(due, o.eventTimeMs + retention + 1);
    return Number.isFinite(due) ? due : undefined;
  }

  punctuate(stores: ActiveSetStores, ctx: ProcessorContext): void {
    const now = ctx.watermarkMs;
    // Only episodes due by their schedule (see `dueOf`). Deadlines first: an expired set can
    // close its episode, which may then be due for expiry in the same scan.
    for (const id of stores.episodes.due(now)) {
      const ep = stores.episodes.get(id);
      if (!ep) continue;
      this.expireSets(ep, now, stores, ctx);
      this.expireEpisode(ep, now, stores, ctx);
    }
  }

  /** Sets whose deadline passed go to invalid-sets whole, with what is missing. */
  private expireSets(ep: StoredEpisode, now: number, stores: ActiveSetStores, ctx: ProcessorContext): void {
    for (const id of [...ep.pending]) {
      const st = ep.transitions[id];
      if (!st || st.deadlineMs > now) continue;
      const t = st.transition;
      const present = t.consumedOutputIds.map((o) => this.waiting(ep, o)).filter((o): o is StoredOutput => o !== undefined);
      const missing = t.consumedOutputIds.filter((o) => !this.waiting(ep, o));
      const reason = missing.length > 0 ? ReasonCode.MEMBER_MISSING_AT_TTL : ReasonCode.REWARD_MISSING_AT_TTL;
      this.emitInvalid(st, ep, present, missing, reason, ctx);
      this.resolve(st, ep, stores);
      // An expired set closes its episode once nothing else is pending.
      if (ep.pending.length === 0 && !ep.closed) {
        this.closeEpisode(ep);
        stores.episodes.put(ep.episodeId, ep);
      }
    }
  }

  /** Retention: unclaimed outputs, idle unfinished episodes, orphan outcomes and closed episodes. */
  private expireEpisode(ep: StoredEpisode, now: number, stores: ActiveSetStores, ctx: ProcessorContext): void {
    const id = ep.episodeId;
    // Unclaimed outputs of episodes that never close are dropped after the retention window.
    const orphans = ep.sourced.filter((o) => ep.claims[o.outputId] === undefined && o.eventTimeMs + this.options.dedupeRetentionMs < now);
    if (orphans.length > 0) {
      ep.sourced = ep.sourced.filter((o) => !orphans.includes(o));
      stores.episodes.put(id, ep);
      for (let i = 0; i < orphans.length; i++) ctx.count('orphan_outputs_expired_total');
    }
    if (!ep.closed && ep.pending.length === 0 && ep.orphanOutcomeRaw === null && ep.lastEventMs + this.options.dedupeRetentionMs <= now) {
      // Never finished (no `done` transition, no outcome) and idle for the whole retention
      // window: nothing of it can still complete, and keeping it would leak its ids forever.
      this.closeEpisode(ep);
      this.forgetEpisode(ep, stores);
      ctx.count('episodes_abandoned_total');
      return;
    }
    if (ep.expiresAtMs === null || ep.expiresAtMs > now) return;
    if (ep.orphanOutcomeRaw !== null && ep.transitionIds.length === 0 && ep.outputIds.length === 0) {
      const raw = Buffer.from(ep.orphanOutcomeRaw, 'base64');
      ctx.deadLetter(
        { source: ep.outcomeSource as KafkaCoordinates, key: ep.orphanKey, raw, event: { type: 'EpisodeOutcome', value: ep.outcome as EpisodeOutcome } },
        ReasonCode.UNKNOWN_EPISODE,
        `EpisodeOutcome.episodeId: no output or transition of episode ${id} arrived before its deadline`,
        { field: 'EpisodeOutcome.episodeId' },
      );
      stores.episodes.delete(id);
    } else if (ep.closed) {
      this.forgetEpisode(ep, stores);
    }
  }
}

export function groupKeyOf(t: Transition, policyId: string): string {
  return `${policyId}|${t.groupKey ?? `${t.taskId}/${t.position}`}`;
}

/** The member as it travels: a summary plus the output's original bytes (no decode, no copy of its arrays). */
function memberOf(s: StoredOutput): SetMember {
  if (!s.raw) throw new SrpoError(ErrorCode.INTEGRITY_FAILED, `output at ${s.source.topic}[${s.source.partition}]@${s.source.offset} has no bytes: its store was not hydrated`);
  return {
    outputId: s.outputId,
    agentId: s.agentId,
    role: s.role,
    policyId: s.policyId,
    policyVersion: s.policyVersion,
    temperature: s.temperature,
    output: s.raw,
    source: s.source,
  };
}
