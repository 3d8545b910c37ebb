import { randomUUID } from 'crypto';
import * as fs from 'fs';
import * as path from 'path';
import { Database, open, RootDatabase } from 'lmdb';
import { ErrorCode, SrpoError } from '@srpo/core';
import { SourceBacked, sourcedItems, StoreDerivations, StoreSerde, StoreIndexes, KeyValueStore } from './key-value-store';

/*
 * Disk-backed processor state under the changelog, as Kafka Streams keeps RocksDB under its
 * changelog topics (the choice of LMDB is argued in docs/state.md).
 *
 * The changelog stays the source of truth. The local copy of a task's stores is an LMDB
 * environment holding every store's committed values, their secondary indexes and their
 * schedules, plus a checkpoint: for each changelog topic, the offset up to which the copy
 * equals the fold of that changelog partition. Writes of a transaction stay pending in
 * memory; after the Kafka transaction that carried them as changelog records commits, they
 * and the new checkpoint go to disk in ONE LMDB transaction, so the copy is always the fold
 * of a changelog prefix. A crash before that leaves the older checkpoint, and restore reads
 * the changelog from there: the records it re-applies are whole values (or tombstones), so
 * applying them again to a copy that may already hold some of them changes nothing.
 *
 * Local commits are not flushed to disk one by one (LMDB's `noSync`): that fsync blocked the
 * event loop for milliseconds per Kafka transaction, for durability the changelog already
 * has. Without it LMDB keeps atomicity and consistency through a process crash (its pages
 * are in the page cache, meta page last), but an operating-system crash can leave a torn
 * file. So each open copy holds a marker file, `unsynced-<pid>-<token>`, made durable before
 * its first unflushed write and naming the boot it was written in; a clean close flushes the
 * file and removes its marker. A copy with a marker of another boot is not opened: it is
 * rebuilt from the whole changelog. Where the boot id cannot be read, every commit is
 * flushed as before.
 */

const DELETED = Symbol('deleted');
type Pending<V> = V | typeof DELETED;

/** Bumped when the local record layout changes: a copy of another format is rebuilt from the changelog. */
const LOCAL_FORMAT = 1;
const CHECKPOINT_KEY = 'checkpoint';

/** Who a local copy belongs to; a copy of another identity is not used. */
export interface LocalStateIdentity {
  appId: string;
  partition: number;
  /** Names of the task's stores (their layout generation). */
  stores: readonly string[];
}

interface Checkpoint {
  format: number;
  appId: string;
  partition: number;
  stores: string[];
  /** Next offset per changelog topic (this task's partition). */
  offsets: Record<string, number>;
  /** The instance that last took the copy over (absent in copies written before owners were recorded). */
  owner?: string;
}

/**
 * The local copy of one task's stores: one LMDB environment in its own directory.
 * `open` reports why a copy was not usable (missing, unreadable, another identity or
 * format), in which case it starts empty and the task restores from the whole changelog.
 */
export class LocalTaskState {
  private readonly stores: PersistentStore<unknown>[] = [];
  private closed = false;
  /** This opening's token; the first commit takes the copy over with it. */
  private readonly owner = randomUUID();
  private claimed = false;

  private constructor(
    readonly dir: string,
    private readonly env: RootDatabase,
    private readonly meta: Database<Checkpoint, string>,
    private readonly identity: LocalStateIdentity,
    /** Next changelog offsets the copy is the fold of; undefined when it starts empty. */
    readonly checkpoint: Record<string, number> | undefined,
    /** Why there was no usable copy (for the log), when `checkpoint` is undefined. */
    readonly discarded: string | undefined,
    private readonly cacheSize: number,
    /** This opening's marker of unflushed writes; undefined when every commit is flushed. */
    private readonly unsynced: string | undefined,
  ) {}

  /** Opens (or creates) the copy in `dir`; `discard` drops what is there first (a copy the changelog contradicts). */
  static open(dir: string, identity: LocalStateIdentity, options: LocalStateOptions = {}): LocalTaskState {
    let discarded: string | undefined = options.discard ? 'discarded' : undefined;
    const data = path.join(dir, 'data.mdb');
    const boot = (options.bootId ?? currentBootId)();
    // LMDB trusts its file: a damaged one can crash the process instead of failing the open.
    // So a copy is opened only when it starts like an LMDB file, and under a marker that a
    // start which crashed while opening it leaves behind: the next start does not try again.
    const marker = path.join(dir, 'opening');
    if (discarded) {
      // Dropped below, unopened.
    } else if (!fs.existsSync(data)) discarded = 'no local state';
    else if (fs.existsSync(marker)) discarded = 'the previous start crashed while opening the local state';
    else if (!looksLikeLmdb(data)) discarded = 'local state unreadable';
    else if (unsyncedFromAnotherBoot(dir, boot)) discarded = 'the machine restarted while the local state had writes not yet flushed to disk';
    if (!discarded) fs.writeFileSync(marker, String(process.pid));
    const noSync = boot !== undefined;
    let opened = discarded ? undefined : tryOpen(dir, noSync);
    if (!discarded && !opened) discarded = 'local state unreadable';
    let checkpoint: Checkpoint | undefined;
    if (opened) {
      try {
        checkpoint = opened.meta.get(CHECKPOINT_KEY);
      } catch {
        discarded = 'local state unreadable';
      }
      if (!discarded) discarded = mismatch(checkpoint, identity);
      if (discarded) {
        opened.env.close();
        opened = undefined;
      }
    }
    if (opened) fs.rmSync(marker, { force: true });
    if (!opened) {
      // Nothing of an unusable copy is kept: the changelog rebuilds it.
      fs.rmSync(dir, { recursive: true, force: true });
      opened = tryOpen(dir, noSync);
      if (!opened) throw new SrpoError(ErrorCode.ENVIRONMENT, `cannot create the local state store in ${dir}`);
    }
    // Durable before the first unflushed write can reach the file.
    const unsynced = boot === undefined ? undefined : writeUnsyncedMarker(dir, boot);
    return new LocalTaskState(dir, opened.env, opened.meta, identity, discarded ? undefined : checkpoint?.offsets, discarded, options.cacheSize ?? 4096, unsynced);
  }

  /** A store of this task, backed by this copy. */
  store<V>(name: string, serde: StoreSerde<V>, derivations: StoreDerivations<V> = {}, sourceBacked = false): PersistentStore<V> {
    const store = new PersistentStore<V>(name, serde, derivations, this.env, sourceBacked, this.cacheSize);
    this.stores.push(store as PersistentStore<unknown>);
    return store;
  }

  /**
   * Writes every store's pending writes, and the changelog offsets they bring the copy to
   * (topics not named keep theirs), in one LMDB transaction; then the writes are the
   * stores' committed state. Called after the Kafka transaction committed.
   *
   * The first commit takes the copy over (its restore commit). A later one finding that
   * another instance on this machine took the copy over since (the task moved to it while
   * this one was paused) writes nothing and fails with CONFLICT: its values are older than
   * what the new owner restored, and writing them under the new owner's checkpoint would
   * hide newer changelog records from the next restore.
   */
  commit(offsets: Record<string, number>, hooks: { duringWrite?: () => void } = {}): void {
    if (this.closed) throw new SrpoError(ErrorCode.CONFLICT, `local state ${this.dir} is closed`);
    // Read and written in one LMDB write transaction, which LMDB serialises across processes.
    this.env.transactionSync(() => {
      const stored = this.meta.get(CHECKPOINT_KEY);
      if (this.claimed && stored?.owner !== this.owner) throw new SrpoError(ErrorCode.CONFLICT, `local state ${this.dir} was taken over by another instance`);
      const current = stored?.offsets ?? this.checkpoint ?? {};
      for (const s of this.stores) s.writePending();
      hooks.duringWrite?.();
      this.meta.putSync(CHECKPOINT_KEY, {
        format: LOCAL_FORMAT,
        appId: this.identity.appId,
        partition: this.identity.partition,
        stores: [...this.identity.stores].sort(),
        offsets: { ...current, ...offsets },
        owner: this.owner,
      });
    });
    this.claimed = true;
    for (const s of this.stores) s.pendingWritten();
  }

  /** Forgets every store's pending writes. */
  rollback(): void {
    for (const s of this.stores) s.rollback();
  }

  /** The checkpoint on disk now (for tests and logs). */
  storedOffsets(): Record<string, number> | undefined {
    return this.meta.get(CHECKPOINT_KEY)?.offsets;
  }

  /** Closes the copy; its writes are flushed to disk first, and then its marker is removed. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    void this.env.close();
    if (this.unsynced) {
      flushFile(path.join(this.dir, 'data.mdb'));
      fs.rmSync(this.unsynced, { force: true });
    }
  }
}

/** Options of `LocalTaskState.open`. */
export interface LocalStateOptions {
  /** Decoded values kept in memory per store (default 4096). */
  cacheSize?: number;
  /** Drop what is there first (a copy the changelog contradicts). */
  discard?: boolean;
  /** This boot's id (default: the kernel's `boot_id`); undefined makes every commit flushed. */
  bootId?: () => string | undefined;
}

const BOOT_ID_FILE = '/proc/sys/kernel/random/boot_id';

/** The kernel's id of this boot, or undefined where there is none to read. */
export function currentBootId(): string | undefined {
  try {
    const id = fs.readFileSync(BOOT_ID_FILE, 'utf8').trim();
    return id.length > 0 ? id : undefined;
  } catch {
    return undefined;
  }
}

const UNSYNCED_PREFIX = 'unsynced-';

/**
 * Whether the copy in `dir` may hold writes that a machine restart tore: a marker of another
 * boot (or any marker when this boot's id is unknown). Markers of this boot whose process is
 * gone (it crashed) are cleared after flushing the file, since their writes sit in this
 * boot's page cache.
 */
function unsyncedFromAnotherBoot(dir: string, boot: string | undefined): boolean {
  const markers = fs.readdirSync(dir).filter((f) => f.startsWith(UNSYNCED_PREFIX));
  let flushed = false;
  for (const name of markers) {
    const file = path.join(dir, name);
    let written: string;
    try {
      written = fs.readFileSync(file, 'utf8').trim();
    } catch {
      continue;
    }
    if (boot === undefined || written !== boot) return true;
    const pid = Number(name.slice(UNSYNCED_PREFIX.length).split('-')[0]);
    if (Number.isInteger(pid) && pid > 0 && !processAlive(pid)) {
      if (!flushed) flushFile(path.join(dir, 'data.mdb'));
      flushed = true;
      fs.rmSync(file, { force: true });
    }
  }
  return false;
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    // EPERM: it exists, under another user.
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Writes this opening's marker and makes it durable (file and directory entry). */
function writeUnsyncedMarker(dir: string, boot: string): string {
  const file = path.join(dir, `${UNSYNCED_PREFIX}${process.pid}-${randomUUID().slice(0, 8)}`);
  const fd = fs.openSync(file, 'w');
  try {
    fs.writeSync(fd, boot);
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
  flushFile(dir);
  return file;
}

/** fsync of a file or directory by path (any descriptor of the inode flushes its dirty pages). */
function flushFile(file: string): void {
  let fd: number | undefined;
  try {
    fd = fs.openSync(file, 'r');
    fs.fsyncSync(fd);
  } catch {
    // A missing file has nothing to flush.
  } finally {
    if (fd !== undefined) fs.closeSync(fd);
  }
}

function tryOpen(dir: string, noSync: boolean): { env: RootDatabase; meta: Database<Checkpoint, string> } | undefined {
  try {
    fs.mkdirSync(dir, { recursive: true });
    // Durability is the changelog's: a lost local transaction only moves the checkpoint back.
    // LMDB stays consistent after a process kill either way (copy-on-write pages, meta page
    // last); an OS crash is caught by the unsynced markers (see the top of this file).
    const env = open({ path: dir, maxDbs: 64, encoding: 'msgpack', compression: false, noSync });
    const meta = env.openDB<Checkpoint, string>('meta', { encoding: 'msgpack' });
    return { env, meta };
  } catch {
    return undefined;
  }
}

/** Whether `file` starts with an LMDB meta page (magic 0xBEEFC0DE after the page header). */
function looksLikeLmdb(file: string): boolean {
  const head = Buffer.alloc(32);
  const fd = fs.openSync(file, 'r');
  try {
    if (fs.readSync(fd, head, 0, 32, 0) < 32) return false;
  } finally {
    fs.closeSync(fd);
  }
  return head.readUInt32LE(16) === 0xbeefc0de || head.readUInt32LE(24) === 0xbeefc0de;
}

function mismatch(c: Checkpoint | undefined, id: LocalStateIdentity): string | undefined {
  if (!c) return 'local state has no checkpoint';
  if (c.format !== LOCAL_FORMAT) return `local state format ${c.format}, expected ${LOCAL_FORMAT}`;
  if (c.appId !== id.appId || c.partition !== id.partition) return `local state belongs to ${c.appId}[${c.partition}]`;
  if (c.stores.join(',') !== [...id.stores].sort().join(',')) return `local state holds stores ${c.stores.join(',')}, the task has ${[...id.stores].sort().join(',')}`;
  return undefined;
}

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

  /** [u32 length][changelog bytes] then, source-backed, per held record [i32 length or -1][bytes]. */
  private localBytes(key: string, v: V): Buffer {
    const head = this.bytesOf(key, v);
    const parts: Buffer[] = [u32(head.length), head];
    if (this.sourceBacked) {
      for (const item of sourcedItems(v as unknown as SourceBacked)) {
        if (item.raw) parts.push(i32(item.raw.length), item.raw);
        else parts.push(i32(-1));
      }
    }
    return Buffer.concat(parts);
  }

  private fromLocal(bytes: Buffer): V {
    const n = bytes.readUInt32LE(0);
    const v = this.serde.deserialize(bytes.subarray(4, 4 + n));
    if (this.sourceBacked) {
      let at = 4 + n;
      for (const item of sourcedItems(v as unknown as SourceBacked)) {
        if (at + 4 > bytes.length) throw new SrpoError(ErrorCode.INTEGRITY_FAILED, `store ${this.name}: local record shorter than its held records`);
        const len = bytes.readInt32LE(at);
        at += 4;
        if (len >= 0) {
          // A copy: LMDB's buffer is reused by the next read.
          item.raw = Buffer.from(bytes.subarray(at, at + len));
          at += len;
        }
      }
    }
    return v;
  }

  private derive(key: string, value: V | undefined): void {
    for (const ix of this.indexes) ix.update(key, value === undefined ? [] : (this.indexDefs[ix.index] as (v: V) => readonly string[])(value), this.fresh);
    this.schedule?.update(key, value);
    if (this.fresh) this.schedule?.markFresh(key);
  }
}

/** A unique secondary index on disk (secondary -> primary, primary -> its keys), with an overlay for the open transaction. */
class DiskIndex {
  private readonly byKey: Database<string, string>;
  private readonly byPrimary: Database<string[], string>;
  private readonly keyOverlay = new Map<string, string | typeof DELETED>();
  private readonly primaryOverlay = new Map<string, string[] | typeof DELETED>();

  constructor(
    env: RootDatabase,
    store: string,
    readonly index: string,
  ) {
    this.byKey = env.openDB<string, string>(`i/${store}/${index}`, { encoding: 'msgpack' });
    this.byPrimary = env.openDB<string[], string>(`p/${store}/${index}`, { encoding: 'msgpack' });
  }

  lookup(key: string): string | undefined {
    const o = this.keyOverlay.get(key);
    if (o === DELETED) return undefined;
    return o ?? this.byKey.get(key);
  }

  /** As `UniqueIndexes.update`: the keys a primary was indexed under are remembered, not recomputed. */
  update(primary: string, keys: readonly string[], fresh = false): void {
    const o = this.primaryOverlay.get(primary);
    const before = o === DELETED ? undefined : (o ?? (fresh ? undefined : this.byPrimary.get(primary)));
    if (before && keys.length >= before.length && before.every((k, i) => keys[i] === k)) {
      if (keys.length === before.length) return;
      for (let i = before.length; i < keys.length; i++) this.keyOverlay.set(keys[i], primary);
      this.primaryOverlay.set(primary, [...keys]);
      return;
    }
    if (before) for (const k of before) if (this.lookup(k) === primary) this.keyOverlay.set(k, DELETED);
    for (const k of keys) this.keyOverlay.set(k, primary);
    this.primaryOverlay.set(primary, keys.length > 0 ? [...keys] : DELETED);
  }

  write(): void {
    for (const [k, p] of this.keyOverlay) {
      if (p === DELETED) this.byKey.removeSync(k);
      else this.byKey.putSync(k, p);
    }
    for (const [p, keys] of this.primaryOverlay) {
      if (keys === DELETED) this.byPrimary.removeSync(p);
      else this.byPrimary.putSync(p, keys);
    }
  }

  written(): void {
    this.rollback();
  }

  rollback(): void {
    this.keyOverlay.clear();
    this.primaryOverlay.clear();
  }
}

/** Due times on disk: (due, key) in order for range scans, key -> due for moves; an overlay for the open transaction. */
class DiskSchedule {
  private readonly byDue: Database<boolean, [number, string]>;
  private readonly dueOf: Database<number, string>;
  private readonly overlay = new Map<string, number | typeof DELETED>();
  /** Keys known to have no due time on disk (written to a fresh copy): no lookup at write. */
  private readonly fresh = new Set<string>();

  constructor(
    env: RootDatabase,
    store: string,
    private readonly schedule: (value: unknown) => number | undefined,
  ) {
    this.byDue = env.openDB<boolean, [number, string]>(`d/${store}`, { encoding: 'msgpack', keyEncoding: 'ordered-binary' });
    this.dueOf = env.openDB<number, string>(`k/${store}`, { encoding: 'msgpack' });
  }

  update(key: string, value: unknown): void {
    const due = value === undefined ? undefined : this.schedule(value);
    this.overlay.set(key, due === undefined || !Number.isFinite(due) ? DELETED : due);
  }

  /** Keys due at or before `nowMs`, earliest first (ties by key); a key stays due until a write moves it. */
  due(nowMs: number): string[] {
    const out: { due: number; key: string }[] = [];
    for (const k of this.byDue.getKeys() as Iterable<[number, string]>) {
      if (k[0] > nowMs) break;
      if (!this.overlay.has(k[1])) out.push({ due: k[0], key: k[1] });
    }
    for (const [key, due] of this.overlay) if (due !== DELETED && due <= nowMs) out.push({ due, key });
    out.sort((a, b) => a.due - b.due || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
    return out.map((e) => e.key);
  }

  markFresh(key: string): void {
    this.fresh.add(key);
  }

  write(): void {
    for (const [key, due] of this.overlay) {
      const before = this.fresh.has(key) ? undefined : this.dueOf.get(key);
      if (before !== undefined) this.byDue.removeSync([before, key]);
      if (due === DELETED) this.dueOf.removeSync(key);
      else {
        this.dueOf.putSync(key, due);
        this.byDue.putSync([due, key], true);
      }
    }
  }

  written(): void {
    this.overlay.clear();
    this.fresh.clear();
  }

  rollback(): void {
    this.overlay.clear();
    this.fresh.clear();
  }
}

function u32(n: number): Buffer {
  const b = Buffer.allocUnsafe(4);
  b.writeUInt32LE(n, 0);
  return b;
}

function i32(n: number): Buffer {
  const b = Buffer.allocUnsafe(4);
  b.writeInt32LE(n, 0);
  return b;
}
