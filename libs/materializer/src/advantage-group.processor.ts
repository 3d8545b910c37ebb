import { hash } from 'crypto';
import { ErrorCode, SrpoError, ValidationError } from '@srpo/core';
import { ActiveSet, AdvantageGroup, EventCodec, KafkaCoordinates, ReasonCode, TopicCatalog } from '@srpo/events';
import { ObjectiveConfig } from '@srpo/srpo';
import { groupValues } from './group-values';
import { InputRecord, KeyValueStore, Processor, ProcessorContext } from '@srpo/streams';
import { DEFAULT_MAX_LATENESS_MS } from './active-set-options';
import { setHoldsErased, SweptGenerations, type ErasedContent } from './erased-content';

/**
 * Groups complete active sets (read from the repartition topic, keyed by group
 * key) into advantage groups and emits each ready group once, keyed by policy id.
 *
 * - A group with a declared size G is ready when G distinct sets arrived (SIZE).
 * - Otherwise it closes when stream time passes its first set's event time plus
 *   `groupTtlMs` (DEADLINE). A deadline group with a single set is still emitted,
 *   as a degenerate group (A = 0), so that every set lands in exactly one group.
 * - Sets beyond a declared size start the next group of the same key.
 * - Advantages come from `groupAdvantages` in libs/srpo (progress fallback included).
 * - A set emitted again for a revised outcome (`correction: true`, same set id)
 *   replaces the set in its open group when its outcome is newer (a later offset of the
 *   episode's outcome partition); for a group already emitted, or forgotten, it is counted
 *   (`outcomes_superseded_after_emit_total`) and dropped, never grouped as a new set.
 */
export interface AdvantageGroupProcessorOptions {
  topics: TopicCatalog;
  codec: EventCodec;
  objective: ObjectiveConfig;
  /** Event-time budget for a group to fill (default 120 s). */
  groupTtlMs: number;
  scanIntervalMs: number;
  /**
   * Emitted set ids are remembered this long (stream time after the group's emission) to drop
   * duplicates. Default: the set stage's default lateness allowance (10 min), as the settings
   * derive it (readMaterializerSettings); a shorter window would let a late duplicate set into
   * a second group.
   */
  dedupeRetentionMs: number;
  /**
   * The content keys erased so far (docs/erasure.md): a set holding content sealed under one is
   * counted and left out of its group, which is then valued over the sets left. Left out, none.
   */
  erased?: ErasedContent;
}

/**
 * An open group with its sets. Source-backed: the changelog keeps each set's id and
 * coordinates, and restore re-reads the sets' bytes from the repartition topic. One record
 * per group per transaction, where a store of sets cost a put and a tombstone per set.
 */
interface OpenGroup {
  groupKey: string;
  policyId: string;
  expectedSize: number | null;
  deadlineMs: number;
  sourced: PendingSet[];
}

/** An open group as the previous layout changelogged it: set ids, the sets in a store of their own. */
type LegacyGroup = Omit<OpenGroup, 'sourced'> & { sourced?: PendingSet[]; setIds?: string[] };

/** A set waiting in an open group; its bytes are re-read from the repartition topic on restore. */
interface PendingSet {
  setId: string;
  source: KafkaCoordinates;
  raw?: Buffer;
  /**
   * The set as decoding `raw` yields it, kept from the input record so the group is not
   * built by decoding every set a second time. Never changelogged (like `raw`); after a
   * restore it is absent and `raw` is decoded instead.
   */
  decoded?: ActiveSet;
}

/** The set ids of an emitted group, kept to drop late duplicates until `expiresAtMs` (stream time). */
interface ClosedGroup {
  setIds: string[];
  expiresAtMs: number;
  /** Per set: the offset of the latest revised outcome counted as superseded after emission (a copy is not counted twice). */
  revised?: Record<string, number>;
}

/**
 * `groups` and `closed` are indexed by set id (`SETS`), so a duplicate is found in any open
 * or recently emitted group without a record per set. `sets` and `emitted` are the previous
 * layout's stores (a record per set), restored only for `migrate` to move their contents.
 */
export type AdvantageGroupStores = {
  groups: KeyValueStore<OpenGroup>;
  closed: KeyValueStore<ClosedGroup>;
  sets: KeyValueStore<Omit<PendingSet, 'setId'>>;
  emitted: KeyValueStore<number>;
};

const SETS = 'sets';

export class AdvantageGroupProcessor implements Processor<AdvantageGroupStores> {
  readonly name = 'advantage-group-materializer';
  /** Deadline scans run on the runtime's stream-time schedule, at most once per scan interval. */
  readonly punctuationIntervalMs: number;
  /** The layout `migrate` writes (episodes/groups holding their records); later starts skip the scan. */
  readonly stateLayout = 2;
  readonly storeNames: (keyof AdvantageGroupStores)[] = ['groups', 'closed', 'sets', 'emitted'];
  readonly sourceBackedStores: (keyof AdvantageGroupStores)[] = ['groups', 'sets'];
  readonly storeIndexes = {
    // A group of the previous layout lists `setIds` until `migrate` rewrites it.
    groups: { [SETS]: (g: OpenGroup) => (g.sourced ? g.sourced.map((x) => x.setId) : ((g as LegacyGroup).setIds ?? [])) },
    closed: { [SETS]: (g: ClosedGroup) => g.setIds },
  };
  readonly storeSchedules = {
    groups: (g: OpenGroup) => g.deadlineMs,
    closed: (g: ClosedGroup) => g.expiresAtMs,
  };
  private readonly options: AdvantageGroupProcessorOptions;
  private readonly swept = new SweptGenerations();

  constructor(options: Pick<AdvantageGroupProcessorOptions, 'topics' | 'objective' | 'codec'> & Partial<AdvantageGroupProcessorOptions>) {
    this.options = { groupTtlMs: 120_000, scanIntervalMs: 1_000, dedupeRetentionMs: DEFAULT_MAX_LATENESS_MS, ...options };
    this.punctuationIntervalMs = this.options.scanIntervalMs;
  }

  eventTime(record: InputRecord): number {
    const t = (record.event.value as { eventTimeMs?: number }).eventTimeMs;
    return typeof t === 'number' ? t : NaN;
  }

  process(record: InputRecord, stores: AdvantageGroupStores, ctx: ProcessorContext): void {
    if (record.event.type !== 'ActiveSet') {
      throw new ValidationError('event', `${record.event.type} events do not belong on ${record.source.topic}`, { reasonCode: ReasonCode.WRONG_EVENT_TYPE });
    }
    const set = record.event.value;
    if (set.status !== 'COMPLETE') {
      throw new ValidationError('ActiveSet.status', `only COMPLETE sets are grouped, got ${set.status}`, { reasonCode: ReasonCode.INVALID_FIELD });
    }
    if (this.swept.due(stores, this.options.erased)) this.sweepErased(stores, ctx);
    if (this.options.erased && setHoldsErased(set, this.options.erased, this.options.codec)) {
      // Emitted before the set stage read the erasure: never grouped.
      ctx.count('sets_erased_total');
      return;
    }
    if (set.correction) return this.onRevised(record, set, stores, ctx);
    if (stores.closed.lookup(SETS, set.setId) !== undefined || stores.groups.lookup(SETS, set.setId) !== undefined) {
      ctx.count('duplicates_total');
      return;
    }
    const open = stores.groups.get(set.groupKey);
    const group: OpenGroup = open ?? {
      groupKey: set.groupKey,
      policyId: set.policyId,
      expectedSize: set.expectedGroupSize,
      deadlineMs: set.eventTimeMs + this.options.groupTtlMs,
      sourced: [],
    };
    group.sourced.push({ setId: set.setId, source: record.source, raw: record.raw, decoded: asDecoded(set) });
    if (group.expectedSize !== null && group.sourced.length >= group.expectedSize) {
      this.emit(group, 'SIZE', stores, ctx);
      stores.groups.delete(group.groupKey);
    } else {
      stores.groups.put(group.groupKey, group);
    }
  }

  /**
   * A set emitted again with its episode's revised outcome. While its group is open it takes the
   * place of the earlier copy if its outcome is newer (an accepted revision is always further
   * along the episode's outcome partition); otherwise it changes nothing. Once the group was
   * emitted the correction comes too late for training: it is counted, once per revision.
   */
  private onRevised(record: InputRecord, set: ActiveSet, stores: AdvantageGroupStores, ctx: ProcessorContext): void {
    const openKey = stores.groups.lookup(SETS, set.setId);
    const group = openKey === undefined ? undefined : stores.groups.get(openKey);
    if (group) {
      const at = group.sourced.findIndex((p) => p.setId === set.setId);
      const held = group.sourced[at];
      const current = held.decoded ?? (held.raw ? this.options.codec.decodeAs('ActiveSet', held.raw) : undefined);
      if (!newerOutcome(set, current)) {
        ctx.count('duplicates_total');
        return;
      }
      group.sourced[at] = { setId: set.setId, source: record.source, raw: record.raw, decoded: asDecoded(set) };
      stores.groups.put(group.groupKey, group);
      ctx.count('sets_reward_revised_total');
      return;
    }
    const closedId = stores.closed.lookup(SETS, set.setId);
    const closed = closedId === undefined ? undefined : stores.closed.get(closedId);
    const offset = set.outcomeSource?.offset ?? -1;
    if (closed && closedId !== undefined) {
      if ((closed.revised?.[set.setId] ?? -1) >= offset) {
        ctx.count('duplicates_total');
        return;
      }
      stores.closed.put(closedId, { ...closed, revised: { ...closed.revised, [set.setId]: offset } });
    }
    // The group was emitted (still remembered, or already forgotten): trained, or about to be, with the earlier reward.
    ctx.count('outcomes_superseded_after_emit_total');
  }

  punctuate(stores: AdvantageGroupStores, ctx: ProcessorContext): void {
    if (this.swept.due(stores, this.options.erased)) this.sweepErased(stores, ctx);
    const now = ctx.watermarkMs;
    for (const key of stores.groups.due(now)) {
      const group = stores.groups.get(key);
      if (!group) continue;
      this.emit(group, 'DEADLINE', stores, ctx);
      stores.groups.delete(key);
    }
    for (const groupId of stores.closed.due(now)) stores.closed.delete(groupId);
  }

  /**
   * Moves state restored from changelogs of the previous layout: each open group takes its
   * sets (already hydrated) out of the `sets` store, and each emitted set id becomes a
   * closed entry of its own with its expiry. Runs once after restore; on current state it
   * writes nothing.
   */
  migrate(stores: AdvantageGroupStores): void {
    for (const [key, value] of [...stores.groups.entries()]) {
      const group = value as LegacyGroup;
      if (!group.setIds) continue;
      const sourced = group.setIds.map((setId) => {
        const pending = stores.sets.get(setId);
        if (!pending) throw new SrpoError(ErrorCode.INTEGRITY_FAILED, `set ${setId} of group ${group.groupKey} has no stored bytes`);
        stores.sets.delete(setId);
        return { setId, ...pending };
      });
      const { setIds: _setIds, ...rest } = group;
      stores.groups.put(key, { ...rest, sourced: [...(group.sourced ?? []), ...sourced] });
    }
    for (const [setId] of [...stores.sets.entries()]) stores.sets.delete(setId);
    for (const [setId, expiresAtMs] of [...stores.emitted.entries()]) {
      stores.closed.put(`emitted:${setId}`, { setIds: [setId], expiresAtMs });
      stores.emitted.delete(setId);
    }
  }

  /**
   * A new erasure was read: each open group drops its sets holding erased content (their bytes
   * leave local state) and is valued over the sets left when it closes; a group left empty is
   * forgotten. Sets already in emitted groups are the learner's to leave out.
   */
  private sweepErased(stores: AdvantageGroupStores, ctx: ProcessorContext): void {
    const erased = this.options.erased;
    if (!erased) return;
    for (const [key, group] of [...stores.groups.entries()]) {
      const kept = group.sourced.filter(
        (p) => !p.raw || !setHoldsErased(p.decoded ?? this.options.codec.decodeAs('ActiveSet', p.raw), erased, this.options.codec),
      );
      if (kept.length === group.sourced.length) continue;
      for (let i = kept.length; i < group.sourced.length; i++) ctx.count('sets_erased_total');
      if (kept.length === 0) stores.groups.delete(key);
      else stores.groups.put(key, { ...group, sourced: kept });
    }
  }

  private emit(group: OpenGroup, reason: AdvantageGroup['closeReason'], stores: AdvantageGroupStores, ctx: ProcessorContext): void {
    const pending = [...group.sourced].sort((a, b) => (a.setId < b.setId ? -1 : a.setId > b.setId ? 1 : 0));
    const sets = pending.map((p) => {
      if (!p.raw) throw new SrpoError(ErrorCode.INTEGRITY_FAILED, `set ${p.setId} of group ${group.groupKey} has no stored bytes`);
      const set = p.decoded ?? this.options.codec.decodeAs('ActiveSet', p.raw);
      // A revised set's note is for this stage only: the group carries the set as trained.
      return { set: set.correction ? { ...set, correction: false } : set, source: p.source };
    });
    const values = groupValues(sets, this.options.objective);
    const ids = sets.map(({ set }) => set.setId);
    const value: AdvantageGroup = {
      groupId: `${group.groupKey}#${hash('sha256', ids.join('\n'), 'hex').slice(0, 16)}`,
      groupKey: group.groupKey,
      policyId: group.policyId,
      closeReason: reason,
      expectedSize: group.expectedSize,
      ...values,
    };
    ctx.emit({ topic: this.options.topics.advantageGroups.name, key: group.policyId, type: 'AdvantageGroup', value });
    // Kept through stream time `emission + dedupeRetentionMs` inclusive, as the set stage keeps an episode.
    stores.closed.put(value.groupId, { setIds: ids, expiresAtMs: ctx.streamTimeMs + this.options.dedupeRetentionMs + 1 });
    ctx.count('groups_ready_total', { reason });
    if (value.degenerate) ctx.count('groups_degenerate_total');
    if (value.sets.some((gs) => gs.advantageFromProgress)) ctx.count('groups_progress_fallback_total');
  }
}

/**
 * A set value handed over with its record, made equal to what decoding the record's bytes
 * returns, so groups do not depend on whether a set was decoded or passed along in-process
 * (a re-materialization feeds the group stage the set processor's value). The only field
 * whose decoded value can differ is the members' `temperature`, an Avro float: decoding
 * yields its float32 rounding. A decoded set (the live runner's) is returned as it is.
 */
export function asDecoded(set: ActiveSet): ActiveSet {
  if (set.members.every((m) => Math.fround(m.temperature) === m.temperature)) return set;
  return { ...set, members: set.members.map((m) => (Math.fround(m.temperature) === m.temperature ? m : { ...m, temperature: Math.fround(m.temperature) })) };
}

/** Whether `set` carries a later outcome of its episode than `current` (same outcome partition, higher offset). */
function newerOutcome(set: ActiveSet, current: ActiveSet | undefined): boolean {
  const next = set.outcomeSource;
  const prev = current?.outcomeSource;
  if (!next) return false;
  if (!prev) return true;
  return next.topic === prev.topic && next.partition === prev.partition && next.offset > prev.offset;
}
