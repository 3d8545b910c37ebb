import { ErrorCode, SrpoError } from '@srpo/core';

/**
 * Processor state. Reads see the task's committed state plus this
 * transaction's own writes; `commit` folds the writes in after the Kafka
 * transaction that carried them (as changelog records) committed, and
 * `rollback` forgets them after an abort, so in-memory state never runs ahead
 * of what the changelog holds.
 */
export interface KeyValueStore<V> {
  get(key: string): V | undefined;
  has(key: string): boolean;
  put(key: string, value: V): void;
  delete(key: string): void;
  /** Committed and pending entries; iteration order is unspecified. */
  entries(): IterableIterator<[string, V]>;
  readonly size: number;
  /**
   * The key of the value that lists `key` under the secondary index `index` (see
   * `StoreIndexes`), in the same view as `get`; undefined when none does.
   */
  lookup(index: string, key: string): string | undefined;
  /**
   * Keys whose value is due at or before `nowMs` by the store's schedule (see
   * `StoreDerivations`), earliest first. A key stays due until a write changes its due
   * time, so a deadline scan touches only what is due instead of every value.
   */
  due(nowMs: number): string[];
}

/**
 * Secondary keys of a store's values, by index name: `lookup(index, k)` finds the
 * value whose `keysOf` lists `k`. An index is derived from the values, so it is
 * never changelogged: restore rebuilds it as it folds in each value. That lets a
 * processor keep a relation (output -> owning episode) inside the value that owns
 * it, written once per transaction with that value, instead of one changelog
 * record per related id in a store of its own.
 *
 * Indexes are unique: a secondary key is meant to belong to one value at a time
 * (the processor refuses a second owner). If two values list it, the later write wins.
 */
export type StoreIndexes<V> = Readonly<Record<string, (value: V) => readonly string[]>>;

/**
 * What a store derives from its values, in memory only: secondary indexes, and a schedule
 * giving each value the event time at which it next needs attention (undefined: never).
 * Both follow every write, rollback and restored record, so they are rebuilt on restore.
 */
export interface StoreDerivations<V> {
  indexes?: StoreIndexes<V>;
  schedule?: (value: V) => number | undefined;
}

/** Whether `keys` starts with every key of `prefix`, in order. */
function hasPrefix(keys: readonly string[], prefix: readonly string[]): boolean {
  if (keys.length < prefix.length) return false;
  for (let i = 0; i < prefix.length; i++) if (keys[i] !== prefix[i]) return false;
  return true;
}

/** The unique secondary indexes of one store, kept in step with its current view. */
export class UniqueIndexes<V> {
  private readonly indexes = new Map<string, { keysOf: (value: V) => readonly string[]; byKey: Map<string, string>; byPrimary: Map<string, string[]> }>();

  constructor(definitions: StoreIndexes<V> = {}) {
    for (const [name, keysOf] of Object.entries(definitions)) this.indexes.set(name, { keysOf, byKey: new Map(), byPrimary: new Map() });
  }

  get empty(): boolean {
    return this.indexes.size === 0;
  }

  lookup(index: string, key: string): string | undefined {
    const ix = this.indexes.get(index);
    if (!ix) throw new SrpoError(ErrorCode.INVARIANT_VIOLATED, `store has no index ${JSON.stringify(index)}`);
    return ix.byKey.get(key);
  }

  /**
   * Re-indexes `primary` as holding `value` (undefined: gone). The keys it was indexed
   * under are remembered, not recomputed from the old value: processors update values
   * in place, so the old value may already be the new one.
   */
  update(primary: string, value: V | undefined): void {
    for (const ix of this.indexes.values()) {
      const before = ix.byPrimary.get(primary);
      const keys = value === undefined ? [] : ix.keysOf(value);
      if (before && hasPrefix(keys, before)) {
        // The common case (a value that only gained keys, such as an episode's ids): index the new ones.
        for (let i = before.length; i < keys.length; i++) {
          ix.byKey.set(keys[i], primary);
          before.push(keys[i]);
        }
        continue;
      }
      if (before) for (const k of before) if (ix.byKey.get(k) === primary) ix.byKey.delete(k);
      for (const k of keys) ix.byKey.set(k, primary);
      if (keys.length > 0) ix.byPrimary.set(primary, [...keys]);
      else ix.byPrimary.delete(primary);
    }
  }
}

/**
 * The due times of a store's values: a binary min-heap of (due, arrival) with lazy deletion.
 * A write pushes an entry only when the value's due time changed; entries that no longer
 * match their key's due time are dropped when they surface, and the heap is rebuilt from the
 * live due times when stale entries outnumber them.
 */
export class DueSchedule<V> {
  private readonly dueByKey = new Map<string, number>();
  private heap: { due: number; seq: number; key: string }[] = [];
  private seq = 0;
  /** Keys the last `due` returned, with the time they were due at: back in the heap only if no write moved them since. */
  private carried = new Map<string, number>();

  constructor(private readonly schedule?: (value: V) => number | undefined) {}

  get empty(): boolean {
    return this.schedule === undefined;
  }

  update(key: string, value: V | undefined): void {
    if (!this.schedule) return;
    const due = value === undefined ? undefined : this.schedule(value);
    const before = this.dueByKey.get(key);
    if (due === undefined || !Number.isFinite(due)) {
      this.dueByKey.delete(key);
      return;
    }
    this.dueByKey.set(key, due);
    if (before !== due) this.push(due, key);
    if (this.heap.length > 2 * this.dueByKey.size + 1024) this.rebuild();
  }

  due(nowMs: number): string[] {
    // A key returned last time stays due until a write moves it; one deleted or rescheduled
    // since has its new entry already (or none), so it is not put back.
    for (const [key, due] of this.carried) if (this.dueByKey.get(key) === due) this.push(due, key);
    this.carried.clear();
    const out: string[] = [];
    while (this.heap.length > 0 && this.heap[0].due <= nowMs) {
      const top = this.pop();
      if (this.dueByKey.get(top.key) === top.due && !this.carried.has(top.key)) {
        this.carried.set(top.key, top.due);
        out.push(top.key);
      }
    }
    return out;
  }

  private rebuild(): void {
    this.heap = [];
    this.carried.clear();
    for (const [key, due] of this.dueByKey) this.push(due, key);
  }

  private less(a: { due: number; seq: number }, b: { due: number; seq: number }): boolean {
    return a.due < b.due || (a.due === b.due && a.seq < b.seq);
  }

  private push(due: number, key: string): void {
    const h = this.heap;
    h.push({ due, seq: this.seq++, key });
    for (let i = h.length - 1; i > 0;) {
      const parent = (i - 1) >> 1;
      if (!this.less(h[i], h[parent])) break;
      [h[i], h[parent]] = [h[parent], h[i]];
      i = parent;
    }
  }

  private pop(): { due: number; seq: number; key: string } {
    const h = this.heap;
    const top = h[0];
    const last = h.pop() as (typeof h)[number];
    if (h.length > 0) {
      h[0] = last;
      for (let i = 0; ;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < h.length && this.less(h[l], h[m])) m = l;
        if (r < h.length && this.less(h[r], h[m])) m = r;
        if (m === i) break;
        [h[i], h[m]] = [h[m], h[i]];
        i = m;
      }
    }
    return top;
  }
}

/** A store's indexes and schedule together, for the two store implementations. */
export class Derived<V> {
  private readonly indexes: UniqueIndexes<V>;
  private readonly schedule: DueSchedule<V>;
  readonly empty: boolean;

  constructor(derivations: StoreDerivations<V> = {}) {
    this.indexes = new UniqueIndexes(derivations.indexes);
    this.schedule = new DueSchedule(derivations.schedule);
    this.empty = this.indexes.empty && this.schedule.empty;
  }

  lookup(index: string, key: string): string | undefined {
    return this.indexes.lookup(index, key);
  }

  due(nowMs: number): string[] {
    if (this.schedule.empty) throw new SrpoError(ErrorCode.INVARIANT_VIOLATED, 'store has no schedule');
    return this.schedule.due(nowMs);
  }

  update(key: string, value: V | undefined): void {
    if (this.empty) return;
    this.indexes.update(key, value);
    this.schedule.update(key, value);
  }
}

/** What both store implementations share: their derivations, which they keep in step with their view. */
export abstract class DerivingStore<V> {
  protected readonly derived: Derived<V>;

  constructor(derivations: StoreDerivations<V> = {}) {
    this.derived = new Derived(derivations);
  }

  lookup(index: string, key: string): string | undefined {
    return this.derived.lookup(index, key);
  }

  due(nowMs: number): string[] {
    return this.derived.due(nowMs);
  }
}

/** Turns store values into changelog bytes and back. */
export interface StoreSerde<V> {
  serialize(value: V): Buffer;
  deserialize(bytes: Buffer): V;
}

/**
 * Values of source-backed stores: the original bytes travel beside their coordinates,
 * optionally with their decoded form (`decoded`, an in-memory cache of decoding `raw`).
 */
export interface SourceBackedValue {
  source: { topic: string; partition: number; offset: number };
  raw?: Buffer;
  decoded?: unknown;
}

/**
 * A source-backed value holding several input records (an open group's sets): each item
 * of `sourced` is kept, changelogged and restored like a `SourceBackedValue`.
 */
export interface SourceBackedList {
  sourced: SourceBackedValue[];
}

export type SourceBacked = SourceBackedValue | SourceBackedList;

/**
 * The input records a source-backed value holds. A value with neither `sourced` nor `source`
 * holds none: a store that became source-backed restores its earlier values too.
 */
export function sourcedItems(value: SourceBacked): SourceBackedValue[] {
  if ('sourced' in value) return value.sourced ?? [];
  return 'source' in value && value.source ? [value] : [];
}

/**
 * JSON without the `raw` bytes and their `decoded` form (of the value, or of each item
 * of a `SourceBackedList`); restore puts the bytes back from the source topic, and
 * readers decode them again when `decoded` is absent.
 */
export const sourceBackedSerde = <V extends SourceBacked>(): StoreSerde<V> => ({
  serialize: (value) => {
    const kept = withoutSourceBytes(value);
    if ('sourced' in value) kept.sourced = value.sourced.map(withoutSourceBytes);
    return Buffer.from(JSON.stringify(kept, omitSourceBytes));
  },
  deserialize: (bytes) => JSON.parse(bytes.toString('utf8')) as V,
});

function omitSourceBytes(key: string, value: unknown): unknown {
  return key === 'raw' || key === 'decoded' ? undefined : value;
}

/**
 * A shallow copy without the top-level `raw` and `decoded`. JSON.stringify calls a
 * Buffer's toJSON (an array of one number per byte) before a replacer sees the key, so
 * leaving them to the replacer built and dropped a ~900-element array per changelog record.
 */
function withoutSourceBytes(value: object): Record<string, unknown> {
  const kept: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) if (k !== 'raw' && k !== 'decoded') kept[k] = v;
  return kept;
}

export const jsonSerde = <V>(): StoreSerde<V> => ({
  serialize: (value) => Buffer.from(JSON.stringify(value)),
  deserialize: (bytes) => JSON.parse(bytes.toString('utf8')) as V,
});

const DELETED = Symbol('deleted');

export class TransactionalStore<V> extends DerivingStore<V> implements KeyValueStore<V> {
  private readonly committed = new Map<string, V>();
  private readonly pending = new Map<string, V | typeof DELETED>();

  constructor(
    readonly name: string,
    readonly serde: StoreSerde<V> = jsonSerde<V>(),
    derivations: StoreDerivations<V> = {},
  ) {
    super(derivations);
  }

  get(key: string): V | undefined {
    const p = this.pending.get(key);
    if (p === DELETED) return undefined;
    return p !== undefined ? p : this.committed.get(key);
  }

  has(key: string): boolean {
    return this.get(key) !== undefined;
  }

  put(key: string, value: V): void {
    this.pending.set(key, value);
    this.derived.update(key, value);
  }

  delete(key: string): void {
    this.pending.set(key, DELETED);
    this.derived.update(key, undefined);
  }

  get size(): number {
    let n = this.committed.size;
    for (const [k, v] of this.pending) {
      const had = this.committed.has(k);
      if (v === DELETED && had) n--;
      else if (v !== DELETED && !had) n++;
    }
    return n;
  }

  *entries(): IterableIterator<[string, V]> {
    for (const [k, v] of this.committed) {
      if (!this.pending.has(k)) yield [k, v];
    }
    for (const [k, v] of this.pending) {
      if (v !== DELETED) yield [k, v];
    }
  }

  /**
   * The pending writes as changelog records (null value = tombstone). A delete of a key
   * the committed state does not hold writes nothing: `committed` is the fold of the
   * changelog, so that key's latest changelog record is already absent or a tombstone,
   * and a value put and deleted within one transaction (a set completed in the chunk
   * that opened it) never needs to reach the changelog at all.
   */
  changelogRecords(): { key: string; value: Buffer | null }[] {
    const records: { key: string; value: Buffer | null }[] = [];
    for (const [key, v] of this.pending) {
      if (v !== DELETED) records.push({ key, value: this.serde.serialize(v) });
      else if (this.committed.has(key)) records.push({ key, value: null });
    }
    return records;
  }

  get dirty(): boolean {
    return this.pending.size > 0;
  }

  commit(): void {
    for (const [k, v] of this.pending) {
      if (v === DELETED) this.committed.delete(k);
      else this.committed.set(k, v);
    }
    this.pending.clear();
  }

  rollback(): void {
    if (!this.derived.empty) for (const key of this.pending.keys()) this.derived.update(key, this.committed.get(key));
    this.pending.clear();
  }

  /** Values folded in from the changelog: for heap stores, everything they hold after a restore. */
  restoredValues(): IterableIterator<[string, V]> {
    return this.committed.entries();
  }

  /** Applies one changelog record during restore (no pending state involved). */
  restore(key: string, value: Buffer | null): void {
    const restored = value === null ? undefined : this.serde.deserialize(value);
    if (restored === undefined) this.committed.delete(key);
    else this.committed.set(key, restored);
    this.derived.update(key, restored);
  }
}
