import { Database, RootDatabase } from 'lmdb';
import { ErrorCode, SrpoError } from '@srpo/core';
import { DELETED, DiskIndex, DiskSchedule } from './disk-derivations';
import { StoreDerivations, StoreSerde, StoreIndexes, KeyValueStore } from './key-value-store';
import { localRecordOf, valueOfLocalRecord } from './local-record-codec';

/*
 * One store of a task over the task's LMDB copy (local-task-state.ts, where the design is
 * described): its values, and through disk-derivations.ts its indexes and schedule.
 */

type Pending<V> = V | typeof DELETED;

/**
 * One store of a task over its LMDB copy, with the same view and transaction rules as
 * `TransactionalStore`: reads see committed state plus this transaction's writes; the
 * writes become committed state only through `LocalTaskState.commit`. Indexes and the
 * schedule live on disk too, with this transaction's changes in overlays, so heap use is
 * the pending writes plus a bounded cache of decoded values, whatever the retention.
 *
 * A value is stored as its changelog bytes (the store's serde, so a copy and a changelog
 * restore give equal values) followed, for source-backed stores, by the original bytes of
 * each input record it holds, which the changelog leaves out.
 */
export class PersistentStore<V> implements KeyValueStore<V> {
  private readonly values: Database<Buffer, string>;
  private readonly pending = new Map<string, Pending<V>>();
  /** Values (or tombstones) that came from the changelog on restore: committed locally, never changelogged again. */
  private readonly restored = new Set<string>();
  /** Serialized changelog bytes of pending values, computed once for the changelog and the local write. */
  private readonly serialized = new Map<string, Buffer>();
  private readonly cache = new Map<string, V>();
  private readonly indexes: DiskIndex[] = [];
  private readonly schedule?: DiskSchedule;
  private readonly indexDefs: StoreIndexes<V>;
  /** The copy held no value of this store when opened (until the first local commit): nothing on disk to look up. */
  private fresh: boolean;

  constructor(
    readonly name: string,
    readonly serde: StoreSerde<V>,
    derivations: StoreDerivations<V>,
    env: RootDatabase,
    private readonly sourceBacked: boolean,
    private readonly cacheSize: number,
  ) {
    this.values = env.openDB<Buffer, string>(`v/${name}`, { encoding: 'binary' });
    this.indexDefs = derivations.indexes ?? {};
    for (const index of Object.keys(this.indexDefs)) this.indexes.push(new DiskIndex(env, name, index));
    if (derivations.schedule) this.schedule = new DiskSchedule(env, name, derivations.schedule as (v: unknown) => number | undefined);
    this.fresh = (this.values.getStats() as { entryCount: number }).entryCount === 0;
  }

  get(key: string): V | undefined {
    const p = this.pending.get(key);
    if (p === DELETED) return undefined;
    if (p !== undefined) return p;
    return this.committed(key);
  }

  has(key: string): boolean {
    return this.get(key) !== undefined;
  }

  put(key: string, value: V): void {
    this.pending.set(key, value);
    this.restored.delete(key);
    this.serialized.delete(key);
    this.derive(key, value);
  }

  delete(key: string): void {
    this.pending.set(key, DELETED);
    this.restored.delete(key);
    this.serialized.delete(key);
    this.derive(key, undefined);
  }

  get size(): number {
    let n = (this.values.getStats() as { entryCount: number }).entryCount;
    for (const [k, v] of this.pending) {
      const had = this.values.doesExist(k);
      if (v === DELETED && had) n--;
      else if (v !== DELETED && !had) n++;
    }
    return n;
  }

  *entries(): IterableIterator<[string, V]> {
    for (const key of this.values.getKeys() as Iterable<string>) {
      if (this.pending.has(key)) continue;
      const v = this.committed(key);
      if (v !== undefined) yield [key, v];
    }
    for (const [k, v] of this.pending) if (v !== DELETED) yield [k, v];
  }

  lookup(index: string, key: string): string | undefined {
    const ix = this.indexes.find((i) => i.index === index);
    if (!ix) throw new SrpoError(ErrorCode.INVARIANT_VIOLATED, `store has no index ${JSON.stringify(index)}`);
    return ix.lookup(key);
  }

  due(nowMs: number): string[] {
    if (!this.schedule) throw new SrpoError(ErrorCode.INVARIANT_VIOLATED, 'store has no schedule');
    return this.schedule.due(nowMs);
  }

  /** Pending writes as changelog records, as `TransactionalStore.changelogRecords` (restored values excluded). */
  changelogRecords(): { key: string; value: Buffer | null }[] {
    const records: { key: string; value: Buffer | null }[] = [];
    for (const [key, v] of this.pending) {
      if (this.restored.has(key)) continue;
      if (v !== DELETED) records.push({ key, value: this.bytesOf(key, v) });
      else if (this.values.doesExist(key)) records.push({ key, value: null });
    }
    return records;
  }

  get dirty(): boolean {
    for (const key of this.pending.keys()) if (!this.restored.has(key)) return true;
    return false;
  }

  rollback(): void {
    for (const key of this.pending.keys()) this.cache.delete(key);
    this.pending.clear();
    this.restored.clear();
    this.serialized.clear();
    for (const ix of this.indexes) ix.rollback();
    this.schedule?.rollback();
  }

  /** Applies one changelog record during restore: pending until the restore is committed locally. */
  restore(key: string, value: Buffer | null): void {
    const v = value === null ? undefined : this.serde.deserialize(value);
    if (v === undefined) this.delete(key);
    else {
      this.put(key, v);
      // The changelog's bytes are the value's serde bytes: no need to serialize it again.
      this.serialized.set(key, value as Buffer);
    }
    this.restored.add(key);
  }

  /** Values restored from the changelog in this restore (those whose source bytes need re-reading). */
  *restoredValues(): IterableIterator<[string, V]> {
    for (const key of this.restored) {
      const v = this.pending.get(key);
      if (v !== undefined && v !== DELETED) yield [key, v];
    }
  }

  /** Inside the local transaction: writes values, index and schedule overlays. */
  writePending(): void {
    for (const [key, v] of this.pending) {
      if (v === DELETED) this.values.removeSync(key);
      else this.values.putSync(key, this.localBytes(key, v));
    }
    for (const ix of this.indexes) ix.write();
    this.schedule?.write();
  }

  /** After the local transaction: pending writes are committed state now. */
  pendingWritten(): void {
    for (const [key, v] of this.pending) {
      // Restored values are not cached: a restore would only push out what processing needs.
      if (v === DELETED || this.restored.has(key)) this.cache.delete(key);
      else this.remember(key, v);
    }
    this.fresh = false;
    this.pending.clear();
    this.restored.clear();
    this.serialized.clear();
    for (const ix of this.indexes) ix.written();
    this.schedule?.written();
  }

  private committed(key: string): V | undefined {
    const cached = this.cache.get(key);
    if (cached !== undefined) {
      // Most recently used last: Map keeps insertion order.
      this.cache.delete(key);
      this.cache.set(key, cached);
      return cached;
    }
    const bytes = this.values.get(key);
    if (bytes === undefined) return undefined;
    const v = this.fromLocal(bytes);
    this.remember(key, v);
    return v;
  }

  private remember(key: string, v: V): void {
    this.cache.delete(key);
    this.cache.set(key, v);
    if (this.cache.size > this.cacheSize) this.cache.delete(this.cache.keys().next().value as string);
  }

  private bytesOf(key: string, v: V): Buffer {
    let b = this.serialized.get(key);
    if (!b) {
      b = this.serde.serialize(v);
      this.serialized.set(key, b);
    }
    return b;
  }

  private localBytes(key: string, v: V): Buffer {
    return localRecordOf(this.bytesOf(key, v), v, this.sourceBacked);
  }

  private fromLocal(bytes: Buffer): V {
    return valueOfLocalRecord(bytes, this.serde, this.sourceBacked, this.name);
  }

  private derive(key: string, value: V | undefined): void {
    for (const ix of this.indexes) ix.update(key, value === undefined ? [] : this.indexDefs[ix.index](value), this.fresh);
    this.schedule?.update(key, value);
    if (this.fresh) this.schedule?.markFresh(key);
  }
}
