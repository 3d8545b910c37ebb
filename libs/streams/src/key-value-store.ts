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
 * JSON without the `raw` bytes and their `decoded` form; restore puts the bytes back
 * from the source topic, and readers decode them again when `decoded` is absent.
 */
export const sourceBackedSerde = <V extends SourceBackedValue>(): StoreSerde<V> => ({
  serialize: (value) => Buffer.from(JSON.stringify(withoutSourceBytes(value), omitSourceBytes)),
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
function withoutSourceBytes(value: SourceBackedValue): Record<string, unknown> {
  const kept: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) if (k !== 'raw' && k !== 'decoded') kept[k] = v;
  return kept;
}

export const jsonSerde = <V>(): StoreSerde<V> => ({
  serialize: (value) => Buffer.from(JSON.stringify(value)),
  deserialize: (bytes) => JSON.parse(bytes.toString('utf8')) as V,
});

const DELETED = Symbol('deleted');

export class TransactionalStore<V> implements KeyValueStore<V> {
  private readonly committed = new Map<string, V>();
  private readonly pending = new Map<string, V | typeof DELETED>();

  constructor(
    readonly name: string,
    readonly serde: StoreSerde<V> = jsonSerde<V>(),
  ) {}

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
  }

  delete(key: string): void {
    this.pending.set(key, DELETED);
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
    this.pending.clear();
  }

  /** Applies one changelog record during restore (no pending state involved). */
  restore(key: string, value: Buffer | null): void {
    if (value === null) this.committed.delete(key);
    else this.committed.set(key, this.serde.deserialize(value));
  }
}
