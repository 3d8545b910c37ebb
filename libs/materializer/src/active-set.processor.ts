import { AgentOutput, EpisodeOutcome, EventCodec, floorLogProbCount, KafkaCoordinates, ReasonCode, TopicCatalog, Transition } from '@srpo/events';
import { InputRecord, Processor, ProcessorContext } from '@srpo/streams';
import { brokerSkewOf, checkOutcomeEvent, checkOutputEvent, checkTopic, checkTransitionEvent, relationError } from './active-set-checks';
import { dropErasedOutputs, holdsErasedMember } from './active-set-erasure';
import { activeSetOf } from './active-set-event';
import { ActiveSetProcessorOptions, DEFAULT_ACTIVE_SET_OPTIONS, defaultMaxBrokerSkewMs } from './active-set-options';
import {
  ActiveSetStores,
  CLAIMS,
  claimOf,
  digestOf,
  digestOfBytes,
  episodeOf,
  migrateActiveSetState,
  OWNERS,
  StoredEpisode,
  StoredOutput,
  storedOutputOf,
  StoredTransition,
  TRANSITIONS,
  waiting,
} from './active-set-state';
import { isErasedOutput, SweptGenerations } from './erased-content';

// The processor's module is the public one: its options, stores and group key stay importable from here.
export { DEFAULT_ACTIVE_SET_OPTIONS, DEFAULT_MAX_BROKER_SKEW_MS, DEFAULT_MAX_LATENESS_MS } from './active-set-options';
export type { ActiveSetProcessorOptions } from './active-set-options';
export type { ActiveSetStores } from './active-set-state';
export { groupKeyOf } from './active-set-event';

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
 * - A set whose members all arrived and that waits for its episode's outcome waits until
 *   `transition.eventTimeMs + window(transition.rewardSource)` (`rewardWindows`, else
 *   `setTtlMs`); an outcome after that is dead-lettered as OUTCOME_AFTER_WINDOW and counted.
 * - An outcome with a higher `revision` supersedes the episode's outcome until the reward
 *   window ends: pending sets take its reward, and each set already emitted with the earlier
 *   one is emitted again with the new reward, marked `correction: true`, for the
 *   group stage to replace while its group is open (docs/rewards.md). A lower revision with
 *   other content is dead-lettered as SUPERSEDED_OUTCOME.
 * - Duplicates (same id, same content) change nothing; same id with other content
 *   is dead-lettered as CONFLICTING_DUPLICATE. An episode is remembered while stream time
 *   is within `dedupeRetentionMs` of its last event; with a window no shorter than
 *   `maxLatenessMs` (the default), every duplicate that passes the lateness check finds it.
 *
 * The event checks are in active-set-checks.ts, the stored state in active-set-state.ts and
 * the emitted event in active-set-event.ts.
 */
export class ActiveSetProcessor implements Processor<ActiveSetStores> {
  readonly name = 'active-set-materializer';
  readonly storeNames: (keyof ActiveSetStores)[] = ['episodes', 'outputs', 'transitions'];
  /** Stores whose changelog keeps coordinates only; the runner re-reads their bytes. */
  readonly sourceBackedStores: (keyof ActiveSetStores)[] = ['episodes', 'outputs'];
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
  private readonly swept = new SweptGenerations();

  /** Deadline scans run on the runtime's stream-time schedule, at most once per scan interval. */
  readonly punctuationIntervalMs: number;
  /** The layout `migrate` writes (episodes/groups holding their records); later starts skip the scan. */
  readonly stateLayout = 2;

  constructor(options: Partial<ActiveSetProcessorOptions> & { topics: TopicCatalog; codec: EventCodec }) {
    const dedupeRetentionMs = options.dedupeRetentionMs ?? options.maxLatenessMs ?? DEFAULT_ACTIVE_SET_OPTIONS.dedupeRetentionMs;
    const maxBrokerSkewMs = options.maxBrokerSkewMs ?? defaultMaxBrokerSkewMs(options.setTtlMs ?? DEFAULT_ACTIVE_SET_OPTIONS.setTtlMs);
    this.options = { ...DEFAULT_ACTIVE_SET_OPTIONS, ...options, dedupeRetentionMs, maxBrokerSkewMs };
    this.punctuationIntervalMs = this.options.scanIntervalMs;
  }

  eventTime(record: InputRecord): number {
    const t = (record.event.value as { eventTimeMs?: number }).eventTimeMs;
    if (typeof t !== 'number' || !Number.isFinite(t)) return NaN;
    // The same bounds as `checkCommon`, which dead-letters the event: it must not move stream time meanwhile.
    if (brokerSkewOf(record, t, this.options) !== undefined) return NaN;
    return t;
  }

  process(record: InputRecord, stores: ActiveSetStores, ctx: ProcessorContext): void {
    const { event } = record;
    checkTopic(record, this.options.topics);
    if (this.swept.due(stores, this.options.erased)) this.sweepErased(stores, ctx);
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
   * Moves state restored from changelogs of the previous layout into episodes (see
   * `migrateActiveSetState`). Runs once after restore; on current state it writes nothing.
   */
  migrate(stores: ActiveSetStores): void {
    migrateActiveSetState(stores);
  }

  private onOutput(record: InputRecord, output: AgentOutput, stores: ActiveSetStores, ctx: ProcessorContext): void {
    checkOutputEvent(record, output, ctx, this.options);
    const digest = digestOfBytes(record.raw);
    const owner = stores.episodes.lookup(OWNERS, output.outputId);
    if (owner !== undefined && owner !== output.episodeId) {
      throw relationError(ReasonCode.CONFLICTING_DUPLICATE, 'AgentOutput.outputId', `output ${output.outputId} was already received for episode ${owner}`);
    }
    const ep = episodeOf(stores, output.episodeId, output.eventTimeMs);
    const known = ep.outputDigests[output.outputId];
    if (known !== undefined || ep.outputIds.includes(output.outputId)) {
      if (known !== undefined && known !== digest) {
        throw relationError(ReasonCode.CONFLICTING_DUPLICATE, 'AgentOutput.outputId', `output ${output.outputId} was already received with different content`);
      }
      ctx.count('duplicates_total', { type: 'AgentOutput' });
      return;
    }
    const claim = claimOf(stores, output.outputId);
    const claimant = claim?.episode.transitions[claim.transitionId];
    if (claimant && claimant.transition.episodeId !== output.episodeId) {
      throw relationError(
        ReasonCode.FOREIGN_EPISODE_OUTPUT,
        'AgentOutput.episodeId',
        `output ${output.outputId} of episode ${output.episodeId} is listed by transition ${claimant.transition.transitionId} of episode ${claimant.transition.episodeId}`,
      );
    }
    if (ep.closed) {
      throw relationError(
        ReasonCode.INVALID_FIELD,
        'AgentOutput.episodeId',
        `episode ${output.episodeId} is closed; output ${output.outputId} arrived after every set of the episode was resolved`,
      );
    }
    countFloorLogProbs(output, ctx);
    if (this.options.erased && isErasedOutput(output, this.options.erased)) {
      // Its ids and digest are kept (duplicates are recognised), its bytes are not; its set is settled as erased.
      (ep.erasedOutputIds ??= []).push(output.outputId);
      ctx.count('erased_outputs_total');
    } else {
      ep.sourced.push(storedOutputOf(record, output, digest));
    }
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
    checkTransitionEvent(record, t, ctx, this.options);
    const ids = t.consumedOutputIds ?? [];
    const digest = digestOf(t);
    const elsewhere = stores.episodes.lookup(TRANSITIONS, t.transitionId);
    if (elsewhere !== undefined && elsewhere !== t.episodeId) {
      throw relationError(
        ReasonCode.CONFLICTING_DUPLICATE,
        'Transition.transitionId',
        `transition ${t.transitionId} was already received for episode ${elsewhere}`,
      );
    }
    const ep = episodeOf(stores, t.episodeId, t.eventTimeMs);
    if (ep.transitionIds.includes(t.transitionId)) {
      const known = ep.transitionDigests[t.transitionId];
      if (known !== undefined && known !== digest) {
        throw relationError(
          ReasonCode.CONFLICTING_DUPLICATE,
          'Transition.transitionId',
          `transition ${t.transitionId} was already received with different content`,
        );
      }
      ctx.count('duplicates_total', { type: 'Transition' });
      return;
    }
    // Relations first: they name the actual fault, where "episode closed" would only describe its timing.
    for (let i = 0; i < ids.length; i++) {
      const owner = stores.episodes.lookup(OWNERS, ids[i]);
      if (owner !== undefined && owner !== t.episodeId) {
        throw relationError(
          ReasonCode.FOREIGN_EPISODE_OUTPUT,
          `Transition.consumedOutputIds[${i}]`,
          `output ${ids[i]} belongs to episode ${owner}, not ${t.episodeId}`,
        );
      }
      const other = claimOf(stores, ids[i]);
      if (other !== undefined && other.transitionId !== t.transitionId) {
        throw relationError(
          ReasonCode.OUTPUT_CLAIMED_TWICE,
          `Transition.consumedOutputIds[${i}]`,
          `output ${ids[i]} is already consumed by transition ${other.transitionId}`,
        );
      }
    }
    if (ep.closed) {
      throw relationError(ReasonCode.INVALID_FIELD, 'Transition.episodeId', `episode ${t.episodeId} is closed; transition ${t.transitionId} arrived too late`);
    }
    const rewardDeadlineMs = t.reward === null ? t.eventTimeMs + this.windowOf(t.rewardSource) : t.eventTimeMs + this.options.setTtlMs;
    ep.transitions[t.transitionId] = { transition: t, source: record.source, digest, deadlineMs: t.eventTimeMs + this.options.setTtlMs, rewardDeadlineMs };
    if (t.reward === null) ep.rewardWindowEndMs = Math.max(ep.rewardWindowEndMs ?? rewardDeadlineMs, rewardDeadlineMs);
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
    checkOutcomeEvent(record, o, ctx, this.options);
    const digest = digestOf(o);
    const ep = episodeOf(stores, o.episodeId, o.eventTimeMs);
    const revision = o.revision ?? 0;
    if (ep.outcomeDigest !== null && ep.outcome !== null) {
      const current = ep.outcome.revision ?? 0;
      const revisions = ep.outcomeRevisions ?? { [current]: ep.outcomeDigest };
      const known = revisions[revision];
      if (known === digest) {
        ctx.count('duplicates_total', { type: 'EpisodeOutcome' });
        return;
      }
      if (known !== undefined || revision === current) {
        throw relationError(
          ReasonCode.CONFLICTING_DUPLICATE,
          'EpisodeOutcome.revision',
          `episode ${o.episodeId} already has a different outcome of revision ${revision}; send a higher revision to correct it`,
        );
      }
      if (revision < current) {
        throw relationError(
          ReasonCode.SUPERSEDED_OUTCOME,
          'EpisodeOutcome.revision',
          `is ${revision} but episode ${o.episodeId} already has revision ${current}`,
        );
      }
      if (ep.rewardWindowEndMs != null && ctx.watermarkMs >= this.revisableUntil(ep)) {
        throw this.late(
          o,
          ctx,
          `revision ${revision} of the outcome of episode ${o.episodeId} came after its reward window ended at ${this.revisableUntil(ep)}`,
        );
      }
      this.revise(record, o, digest, { ...revisions, [revision]: digest }, ep, stores, ctx);
      return;
    }
    if (ep.rewardExpired && !ep.pending.some((id) => ep.transitions[id]?.transition.reward === null)) {
      throw this.late(
        o,
        ctx,
        `episode ${o.episodeId}'s sets went to invalid-sets (REWARD_MISSING_AT_TTL) before its outcome came; its window ended at ${ep.rewardWindowEndMs}`,
      );
    }
    ep.outcomeRevisions = { [revision]: digest };
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
   * A higher revision of the episode's outcome: pending sets will use it, and every set emitted
   * with an earlier revision (held until the episode's reward window ends) goes out again with the
   * new reward and outcome coordinates, marked `correction`. The group stage replaces it in
   * its open group, or counts it as superseded after emission.
   */
  private revise(
    record: InputRecord,
    o: EpisodeOutcome,
    digest: string,
    revisions: Record<string, string>,
    ep: StoredEpisode,
    stores: ActiveSetStores,
    ctx: ProcessorContext,
  ): void {
    ep.outcome = o;
    ep.outcomeSource = record.source;
    ep.outcomeDigest = digest;
    ep.outcomeRevisions = revisions;
    ep.lastEventMs = Math.max(ep.lastEventMs, o.eventTimeMs);
    ctx.count('outcomes_revised_total', { source: this.sourceLabel(o.rewardSource) });
    for (const st of Object.values(ep.emitted ?? {})) {
      const present = st.transition.consumedOutputIds.map((id) => waiting(ep, id));
      if (present.some((x) => x === undefined)) continue;
      const set = { ...activeSetOf(st, ep, present as StoredOutput[], 'COMPLETE', null, []), correction: true };
      ctx.emit({ topic: this.options.topics.activeSets.name, key: set.groupKey, type: 'ActiveSet', value: set });
      ctx.count('sets_revised_total', { workflow: st.transition.workflowKind });
    }
    stores.episodes.put(ep.episodeId, ep);
    for (const id of [...ep.pending]) this.tryComplete(ep, id, stores, ctx);
  }

  /** An outcome after its window: counted by source, and dead-lettered (the error) with its bytes. */
  private late(o: EpisodeOutcome, ctx: ProcessorContext, message: string): Error {
    ctx.count('outcomes_late_total', { source: this.sourceLabel(o.rewardSource) });
    return relationError(ReasonCode.OUTCOME_AFTER_WINDOW, 'EpisodeOutcome.eventTimeMs', message);
  }

  /** A metric label for a reward source: a configured one by name, `none` for none, else `other` (labels stay bounded). */
  private sourceLabel(source: string | null | undefined): string {
    if (!source) return 'none';
    return Object.prototype.hasOwnProperty.call(this.options.rewardWindows, source) ? source : 'other';
  }

  /** How long a set without an immediate reward waits for its outcome (event time after its transition). */
  private windowOf(source: string | null | undefined): number {
    if (source && Object.prototype.hasOwnProperty.call(this.options.rewardWindows, source)) return this.options.rewardWindows[source];
    return this.options.setTtlMs;
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
    if (holdsErasedMember(ep, st)) return this.settleErased(st, ep, stores, ctx);
    const t = st.transition;
    const outputs = t.consumedOutputIds.map((id) => waiting(ep, id));
    if (outputs.some((o) => o === undefined)) return;
    if (t.reward === null && ep.outcome === null) return;
    const present = outputs as StoredOutput[];
    const policies = new Set(present.map((o) => o.policyId));
    if (policies.size > 1) {
      this.emitInvalid(st, ep, present, [], ReasonCode.MIXED_POLICY_SET, ctx);
    } else {
      const set = activeSetOf(st, ep, present, 'COMPLETE', null, []);
      ctx.emit({ topic: this.options.topics.activeSets.name, key: set.groupKey, type: 'ActiveSet', value: set });
      ctx.count('sets_complete_total', { workflow: t.workflowKind });
      // Held with its outputs until the episode's reward window ends: a revised outcome re-emits it.
      if (t.reward === null) (ep.emitted ??= {})[t.transitionId] = st;
    }
    this.resolve(st, ep, stores);
  }

  private emitInvalid(st: StoredTransition, ep: StoredEpisode, present: StoredOutput[], missing: string[], reason: ReasonCode, ctx: ProcessorContext): void {
    const set = activeSetOf(st, ep, present, 'INVALID', reason, missing);
    ctx.emit({ topic: this.options.topics.invalidSets.name, key: set.episodeId, type: 'ActiveSet', value: set });
    ctx.count('sets_invalid_total', { reason });
  }

  /** A set holding erased content is never emitted: it is settled, its members dropped, and counted. */
  private settleErased(st: StoredTransition, ep: StoredEpisode, stores: ActiveSetStores, ctx: ProcessorContext): void {
    ctx.count('sets_erased_total', { workflow: st.transition.workflowKind });
    this.resolve(st, ep, stores);
  }

  /**
   * A new erasure was read (docs/erasure.md): every episode of the task drops its outputs sealed
   * under an erased key, settles its pending sets that held one as erased, and stops holding its
   * emitted sets that did (a revised outcome no longer re-emits them). Ids and digests stay.
   */
  private sweepErased(stores: ActiveSetStores, ctx: ProcessorContext): void {
    const erased = this.options.erased;
    if (!erased) return;
    for (const [, ep] of [...stores.episodes.entries()]) {
      const dropped = dropErasedOutputs(ep, erased, this.options.codec);
      if (dropped === 0) continue;
      for (let i = 0; i < dropped; i++) ctx.count('erased_outputs_total');
      for (const [id, st] of Object.entries(ep.emitted ?? {})) {
        if (!holdsErasedMember(ep, st)) continue;
        delete ep.emitted?.[id];
        ep.sourced = ep.sourced.filter((o) => !st.transition.consumedOutputIds.includes(o.outputId));
      }
      for (const id of [...ep.pending]) {
        const st = ep.transitions[id];
        if (st && holdsErasedMember(ep, st)) this.settleErased(st, ep, stores, ctx);
      }
      stores.episodes.put(ep.episodeId, ep);
    }
  }

  /** The transition is settled: drop it and its members; close the episode when nothing is pending. */
  private resolve(st: StoredTransition, ep: StoredEpisode, stores: ActiveSetStores): void {
    const t = st.transition;
    delete ep.transitions[t.transitionId];
    // Claims stay until the episode expires (see forgetEpisode): a second claim must be refused later too.
    // An emitted set held for revisions keeps its outputs (dropped when the window ends, `expireEmitted`).
    if (!ep.emitted?.[t.transitionId]) ep.sourced = ep.sourced.filter((o) => !t.consumedOutputIds.includes(o.outputId));
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
    ep.expiresAtMs = this.keptUntil(ep) + 1;
  }

  /**
   * The last stream time at which an episode is kept: its dedupe retention after its last event,
   * and after its reward window too, so that a duplicate or revision of its outcome is still
   * recognised and an outcome after the window is told apart (OUTCOME_AFTER_WINDOW) from one of
   * an unknown episode.
   */
  private keptUntil(ep: StoredEpisode): number {
    const window = ep.rewardWindowEndMs ?? null;
    return Math.max(this.retainedUntil(ep.lastEventMs), window === null ? -Infinity : this.retainedUntil(window));
  }

  /**
   * The last stream time at which state of an event at `eventTimeMs` is kept. Inclusive: the
   * lateness check still accepts an event exactly `maxLatenessMs` behind stream time, so with
   * the window equal to the allowance its duplicate must still find the episode then.
   */
  private retainedUntil(eventTimeMs: number): number {
    return eventTimeMs + this.options.dedupeRetentionMs;
  }

  /**
   * The earliest stream time at which `punctuate` has something to do for an episode: a
   * pending set's deadline, its expiry (closed, or an orphan outcome's deadline), the end of
   * its idle window while nothing is pending, or an unclaimed output's retention. Each term
   * is the boundary of the matching test in `punctuate`.
   */
  private dueOf(ep: StoredEpisode): number | undefined {
    let due = Infinity;
    for (const id of ep.pending) {
      const st = ep.transitions?.[id];
      if (st) due = Math.min(due, this.deadlineOf(ep, st));
    }
    if (ep.emitted && Object.keys(ep.emitted).length > 0) due = Math.min(due, this.revisableUntil(ep));
    if (ep.expiresAtMs !== null) due = Math.min(due, ep.expiresAtMs);
    if (!ep.closed && ep.pending.length === 0 && ep.orphanOutcomeRaw === null) due = Math.min(due, this.keptUntil(ep) + 1);
    for (const o of ep.sourced ?? []) if (ep.claims?.[o.outputId] === undefined) due = Math.min(due, this.retainedUntil(o.eventTimeMs) + 1);
    return Number.isFinite(due) ? due : undefined;
  }

  /**
   * When a pending set is settled without its inputs: its members' deadline while one is
   * missing, else (all there, no reward yet) its reward deadline.
   */
  private deadlineOf(ep: StoredEpisode, st: StoredTransition): number {
    const complete = st.transition.consumedOutputIds.every((o) => waiting(ep, o) !== undefined);
    return complete ? (st.rewardDeadlineMs ?? st.deadlineMs) : st.deadlineMs;
  }

  punctuate(stores: ActiveSetStores, ctx: ProcessorContext): void {
    if (this.swept.due(stores, this.options.erased)) this.sweepErased(stores, ctx);
    const now = ctx.watermarkMs;
    // Only episodes due by their schedule (see `dueOf`). Deadlines first: an expired set can
    // close its episode, which may then be due for expiry in the same scan.
    for (const id of stores.episodes.due(now)) {
      const ep = stores.episodes.get(id);
      if (!ep) continue;
      this.expireSets(ep, now, stores, ctx);
      this.expireEmitted(ep, now, stores);
      this.expireEpisode(ep, now, stores, ctx);
    }
  }

  /** Sets whose deadline passed go to invalid-sets whole, with what is missing. */
  private expireSets(ep: StoredEpisode, now: number, stores: ActiveSetStores, ctx: ProcessorContext): void {
    for (const id of [...ep.pending]) {
      const st = ep.transitions[id];
      if (!st || this.deadlineOf(ep, st) > now) continue;
      const t = st.transition;
      const present = t.consumedOutputIds.map((o) => waiting(ep, o)).filter((o): o is StoredOutput => o !== undefined);
      const missing = t.consumedOutputIds.filter((o) => !waiting(ep, o));
      const reason = missing.length > 0 ? ReasonCode.MEMBER_MISSING_AT_TTL : ReasonCode.REWARD_MISSING_AT_TTL;
      if (reason === ReasonCode.REWARD_MISSING_AT_TTL) ep.rewardExpired = true;
      this.emitInvalid(st, ep, present, missing, reason, ctx);
      this.resolve(st, ep, stores);
      // An expired set closes its episode once nothing else is pending.
      if (ep.pending.length === 0 && !ep.closed) {
        this.closeEpisode(ep);
        stores.episodes.put(ep.episodeId, ep);
      }
    }
  }

  /**
   * The stream time from which the episode takes no more revisions (`onOutcome`): the end of its
   * reward window, the latest reward deadline of its sets.
   */
  private revisableUntil(ep: StoredEpisode): number {
    let end = ep.rewardWindowEndMs ?? -Infinity;
    for (const st of Object.values(ep.emitted ?? {})) end = Math.max(end, st.rewardDeadlineMs ?? st.deadlineMs);
    return end;
  }

  /** Once the episode's window has ended its emitted sets take no more revisions: their outputs are dropped. */
  private expireEmitted(ep: StoredEpisode, now: number, stores: ActiveSetStores): void {
    if (!ep.emitted || Object.keys(ep.emitted).length === 0 || this.revisableUntil(ep) > now) return;
    for (const st of Object.values(ep.emitted)) ep.sourced = ep.sourced.filter((o) => !st.transition.consumedOutputIds.includes(o.outputId));
    ep.emitted = {};
    stores.episodes.put(ep.episodeId, ep);
  }

  /** Retention: unclaimed outputs, idle unfinished episodes, orphan outcomes and closed episodes. */
  private expireEpisode(ep: StoredEpisode, now: number, stores: ActiveSetStores, ctx: ProcessorContext): void {
    const id = ep.episodeId;
    // Unclaimed outputs of episodes that never close are dropped after the retention window.
    const orphans = ep.sourced.filter((o) => ep.claims[o.outputId] === undefined && this.retainedUntil(o.eventTimeMs) < now);
    if (orphans.length > 0) {
      ep.sourced = ep.sourced.filter((o) => !orphans.includes(o));
      stores.episodes.put(id, ep);
      for (let i = 0; i < orphans.length; i++) ctx.count('orphan_outputs_expired_total');
    }
    if (!ep.closed && ep.pending.length === 0 && ep.orphanOutcomeRaw === null && this.keptUntil(ep) < now) {
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
        { source: ep.outcomeSource as KafkaCoordinates, key: ep.orphanKey, raw },
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

/** Floor behaviour log-probs (e.g. −9999) are data: accepted and counted (docs/bad-input.md). */
function countFloorLogProbs(output: AgentOutput, ctx: ProcessorContext): void {
  const floorTokens = floorLogProbCount(output);
  if (floorTokens > 0) {
    ctx.count('behaviour_logprob_floor_outputs_total', { policy: output.policyId });
    for (let i = 0; i < floorTokens; i++) ctx.count('behaviour_logprob_floor_tokens_total', { policy: output.policyId });
  }
}
