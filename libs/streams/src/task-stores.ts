import * as path from 'path';
import type { Kafka } from 'kafkajs';
import { ErrorCode, Logger, SrpoError } from '@srpo/core';
import { bulkReadToOffsets, readRanges } from '@srpo/events';
import { jsonSerde, KeyValueStore, SourceBacked, SourceBackedValue, sourceBackedSerde, sourcedItems, StoreSerde, TransactionalStore } from './key-value-store';
import { LocalTaskState } from './local-task-state';
import { PersistentStore } from './persistent-store';
import { Processor, storeDerivationsOf, Stores } from './processor';

export const META_STORE = '__meta';

export function changelogTopic(appId: string, store: string): string {
  return `${appId}.${store}.changelog`;
}

/** A store as the runner drives it: both implementations have these. */
export type RunnerStore = (TransactionalStore<unknown> | PersistentStore<unknown>) & KeyValueStore<unknown>;

/**
 * One task's stores and where their committed state lives: in memory (restored from the
 * whole changelog at every start), or in a local LMDB copy under `stateDir` (restored from
 * the copy plus the changelog since its checkpoint).
 */
export interface TaskStores {
  /** The processor's stores by name. */
  readonly byName: Record<string, RunnerStore>;
  /** The processor's stores, then the task clock's `__meta` store. */
  readonly list: RunnerStore[];
  readonly meta: KeyValueStore<number>;
  /** Records restored from the changelog at start (the tail, with a local copy). */
  readonly restoredRecords: number;
  /**
   * After the Kafka transaction committed: the pending writes become committed state (with a
   * local copy, on disk with the changelog offsets they reached, in one local transaction).
   */
  commit(changelogOffsets: Record<string, number>): void;
  rollback(): void;
  close(): void;
}

export interface RestoreOptions<S extends Stores> {
  kafka: Kafka;
  appId: string;
  processor: Processor<S>;
  serdes?: { [K in keyof S]?: StoreSerde<unknown> };
  /** Local state directory; unset: in-memory stores. */
  stateDir?: string;
  /** Decoded values kept in memory per local store (default 4096). */
  cacheSize?: number;
  /** TEST-ONLY: runs inside each local write, before it commits (crash tests kill the process there). */
  duringLocalWrite?: () => void;
  log: Logger;
}

/** The local copy's directory of a task. */
export function localStateDir(stateDir: string, appId: string, partition: number): string {
  return path.join(stateDir, appId, `task-${partition}`);
}

/**
 * Restores the stores of several tasks, reading every changelog once for all of them:
 * the whole changelog partition for in-memory stores or a local copy that cannot be used
 * (missing, unreadable, of another task generation, or whose checkpoint is outside the
 * changelog's offsets: the changelog was recreated or truncated), else only the records
 * after the copy's checkpoint. Source-backed values restored from the changelog get their
 * bytes back from the input topics; with a local copy the restored state is written to it
 * with the changelog's end offsets before the task processes anything.
 */
export async function restoreTaskStores<S extends Stores>(options: RestoreOptions<S>, partitions: readonly number[]): Promise<Map<number, TaskStores>> {
  const { kafka, appId, processor, log } = options;
  const storeNames = [...processor.storeNames, META_STORE];
  const topics = storeNames.map((n) => changelogTopic(appId, n));
  const bounds = await changelogBounds(kafka, topics);
  const locals = new Map<number, LocalTaskState>();
  const from = new Map<string, number>();
  const to = new Map<string, number>();
  for (const p of partitions) {
    let local = options.stateDir
      ? LocalTaskState.open(localStateDir(options.stateDir, appId, p), { appId, partition: p, stores: storeNames }, { cacheSize: options.cacheSize })
      : undefined;
    let reason = local?.discarded;
    if (local?.checkpoint) {
      const checkpoint = local.checkpoint;
      const outside = topics.find((t) => {
        const b = bounds.get(`${t}:${p}`) ?? { low: 0, high: 0 };
        const c = checkpoint[t] ?? 0;
        return c < b.low || c > b.high;
      });
      if (outside) {
        reason = `checkpoint ${checkpoint[outside] ?? 0} of ${outside} is outside its offsets ${JSON.stringify(bounds.get(`${outside}:${p}`))}`;
        local.close();
        local = LocalTaskState.open(local.dir, { appId, partition: p, stores: storeNames }, { cacheSize: options.cacheSize, discard: true });
      }
    }
    if (local) locals.set(p, local);
    if (local && !local.checkpoint) log.info('local state not used; restoring from the whole changelog', { partition: p, reason });
    for (const t of topics) {
      const b = bounds.get(`${t}:${p}`) ?? { low: 0, high: 0 };
      const start = local?.checkpoint ? (local.checkpoint[t] ?? b.low) : b.low;
      from.set(`${t}:${p}`, start);
      to.set(`${t}:${p}`, b.high);
    }
  }
  const { partitions: read } = await bulkReadToOffsets(kafka, topics, { from, to, onlyListed: true, timeoutMs: 120_000 });
  const result = new Map<number, TaskStores>();
  try {
    for (const p of partitions) {
      const local = locals.get(p);
      const sourceBacked = new Set<string>(processor.sourceBackedStores ?? []);
      const serdeOf = (name: string) => options.serdes?.[name] ?? (sourceBacked.has(name) ? sourceBackedSerde<SourceBacked>() : jsonSerde());
      const list: RunnerStore[] = storeNames.map((name) => {
        const serde = name === META_STORE ? jsonSerde<unknown>() : serdeOf(name);
        const derivations = name === META_STORE ? {} : storeDerivationsOf(processor, name);
        return local ? local.store(name, serde, derivations, sourceBacked.has(name)) : new TransactionalStore(name, serde, derivations);
      });
      let restoredRecords = 0;
      for (const [i, t] of topics.entries()) {
        for (const r of read.get(`${t}:${p}`) ?? []) {
          if (r.key === null) continue;
          list[i].restore(r.key.toString('utf8'), r.value);
          restoredRecords++;
        }
      }
      for (const store of list.filter((s) => sourceBacked.has(s.name))) await hydrate(kafka, store, log);
      if (local) local.commit(Object.fromEntries(topics.map((t) => [t, to.get(`${t}:${p}`) ?? 0])));
      const meta = list[list.length - 1] as unknown as KeyValueStore<number>;
      const byName = Object.fromEntries(list.slice(0, -1).map((s) => [s.name, s]));
      result.set(p, {
        byName,
        list,
        meta,
        restoredRecords,
        commit: (offsets) => {
          if (local) local.commit(offsets, options.duringLocalWrite ? { duringWrite: options.duringLocalWrite } : {});
          else for (const s of list) (s as TransactionalStore<unknown>).commit();
        },
        rollback: () => {
          for (const s of list) s.rollback();
        },
        close: () => local?.close(),
      });
    }
  } catch (e) {
    for (const l of locals.values()) l.close();
    throw e;
  }
  return result;
}

/** Log start and end offsets per `topic:partition`. */
async function changelogBounds(kafka: Kafka, topics: string[]): Promise<Map<string, { low: number; high: number }>> {
  const admin = kafka.admin();
  await admin.connect();
  try {
    const out = new Map<string, { low: number; high: number }>();
    for (const topic of topics)
      for (const o of await admin.fetchTopicOffsets(topic)) out.set(`${topic}:${o.partition}`, { low: Number(o.low), high: Number(o.high) });
    return out;
  } finally {
    await admin.disconnect();
  }
}

/** Puts the original bytes back into values restored from the changelog, read from the input topics by their coordinates. */
async function hydrate(kafka: Kafka, store: RunnerStore, log: Logger): Promise<void> {
  const byPosition = new Map<string, SourceBackedValue>();
  const ranges = new Map<string, Map<number, { partition: number; from: number; to: number }>>();
  for (const [, v] of store.restoredValues()) {
    for (const value of sourcedItems(v as SourceBacked)) {
      if (value.raw) continue;
      const { topic, partition, offset } = value.source;
      byPosition.set(`${topic}:${partition}:${offset}`, value);
      const perTopic = ranges.get(topic) ?? new Map<number, { partition: number; from: number; to: number }>();
      const r = perTopic.get(partition);
      perTopic.set(partition, r ? { partition, from: Math.min(r.from, offset), to: Math.max(r.to, offset) } : { partition, from: offset, to: offset });
      ranges.set(topic, perTopic);
    }
  }
  for (const [topic, perTopic] of ranges) {
    for (const r of await readRanges(kafka, topic, [...perTopic.values()], { timeoutMs: 120_000 })) {
      const value = byPosition.get(`${topic}:${r.partition}:${r.offset}`);
      if (value && r.value) value.raw = r.value;
    }
  }
  const missing = [...byPosition.entries()].filter(([, v]) => !v.raw).map(([k]) => k);
  if (missing.length > 0) {
    throw new SrpoError(ErrorCode.INTEGRITY_FAILED, `store ${store.name}: ${missing.length} source record(s) not found on restore, e.g. ${missing[0]}`);
  }
  if (byPosition.size > 0) log.info('store hydrated from source topic', { store: store.name, records: byPosition.size });
}
