import { randomUUID } from 'crypto';
import * as fs from 'fs';
import * as path from 'path';
import { Database, open, RootDatabase } from 'lmdb';
import { ErrorCode, SrpoError } from '@srpo/core';
import { StoreDerivations, StoreSerde } from './key-value-store';
import { PersistentStore } from './persistent-store';
import { currentBootId, flushFile, unsyncedFromAnotherBoot, writeUnsyncedMarker } from './unsynced-markers';

export { currentBootId } from './unsynced-markers';

/*
 * Disk-backed processor state under the changelog, as Kafka Streams keeps RocksDB under its
 * changelog topics (the choice of LMDB is argued in docs/state.md). This file is the copy of a
 * task's stores with its checkpoint; persistent-store.ts is one store over it.
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
        void opened.env.close();
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
    return new LocalTaskState(
      dir,
      opened.env,
      opened.meta,
      identity,
      discarded ? undefined : checkpoint?.offsets,
      discarded,
      options.cacheSize ?? 4096,
      unsynced,
    );
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
  if (c.stores.join(',') !== [...id.stores].sort().join(','))
    return `local state holds stores ${c.stores.join(',')}, the task has ${[...id.stores].sort().join(',')}`;
  return undefined;
}
