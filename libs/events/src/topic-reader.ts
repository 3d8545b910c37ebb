import { randomUUID } from 'crypto';
import { Admin, Kafka } from 'kafkajs';
import { ErrorCode, retry, SrpoError } from '@srpo/core';

export interface RawRecord {
  topic: string;
  partition: number;
  offset: number;
  key: Buffer | null;
  value: Buffer | null;
  timestampMs: number;
}

/**
 * Reads every record of `topics` that exists now (from the beginning up to the
 * high-water marks taken at the start), read_committed, with a throwaway
 * consumer group that commits nothing; sorted by topic, partition and offset.
 * For tools, audits and tests; not a processing loop (that is the consumer runner's job).
 */
export async function readTopicsToEnd(kafka: Kafka, topics: string[], options: { timeoutMs?: number } = {}): Promise<RawRecord[]> {
  const { partitions } = await bulkReadToOffsets(kafka, topics, { timeoutMs: options.timeoutMs ?? 30_000 });
  const position = (key: string) => {
    const i = key.lastIndexOf(':');
    return { topic: key.slice(0, i), partition: Number(key.slice(i + 1)) };
  };
  return [...partitions.entries()]
    .sort(([a], [b]) => {
      const pa = position(a);
      const pb = position(b);
      return pa.topic === pb.topic ? pa.partition - pb.partition : pa.topic < pb.topic ? -1 : 1;
    })
    .flatMap(([, records]) => records);
}

export interface BulkReadOptions {
  /**
   * Stop offsets (exclusive) per `topic:partition`; default: the end offsets when the read starts.
   * With `from` or `onlyListed`, partitions not listed here are not read at all.
   */
  to?: ReadonlyMap<string, number>;
  /** Start offsets per `topic:partition` (default: the start of the log), e.g. a local store's checkpoint. */
  from?: ReadonlyMap<string, number>;
  /** Read only the partitions listed in `to` (the others are paused). */
  onlyListed?: boolean;
  timeoutMs?: number;
  /** Bytes per fetch response and per partition in it (defaults 64 MiB / 16 MiB): few, large fetches. */
  maxBytes?: number;
  maxBytesPerPartition?: number;
  /** Consumer group of the read (it commits nothing); default a fresh random one. */
  groupId?: string;
  /** Called after each fetched batch with the records read so far. */
  onProgress?: (read: number, total: number) => void;
}

export interface BulkReadResult {
  /** Records per `topic:partition`, in offset order, from `from` (default the start of the log) up to `to`. */
  partitions: Map<string, RawRecord[]>;
  /** The stop offsets used. */
  to: Map<string, number>;
  /** Records read (committed data only). */
  count: number;
}

/**
 * Reads whole input ranges in few large fetches: read_committed, a throwaway
 * consumer group that commits nothing, no per-record work beyond keeping the
 * record. For replays of a recorded range; the live path is the ConsumerRunner.
 */
export async function bulkReadToOffsets(kafka: Kafka, topics: readonly string[], options: BulkReadOptions = {}): Promise<BulkReadResult> {
  let to: Map<string, number>;
  if (options.to) to = new Map(options.to);
  else {
    const admin = kafka.admin();
    await admin.connect();
    try {
      to = await endOffsets(admin, [...topics]);
    } finally {
      await admin.disconnect();
    }
  }
  const partitions = new Map<string, RawRecord[]>();
  for (const key of to.keys()) partitions.set(key, []);
  const from = options.from ?? new Map<string, number>();
  const remaining = new Set([...to].filter(([k, end]) => end > (from.get(k) ?? 0)).map(([k]) => k));
  let total = 0;
  for (const [k, end] of to) total += Math.max(0, end - (from.get(k) ?? 0));
  let count = 0;
  if (remaining.size === 0) return { partitions, to, count };
  const consumer = kafka.consumer({
    groupId: options.groupId ?? `srpo-bulk-reader-${randomUUID()}`,
    readUncommitted: false,
    maxWaitTimeInMs: 50,
    maxBytes: options.maxBytes ?? 64 * 1024 * 1024,
    maxBytesPerPartition: options.maxBytesPerPartition ?? 16 * 1024 * 1024,
  });
  await consumer.connect();
  try {
    await consumer.subscribe({ topics: [...topics], fromBeginning: true });
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () =>
          reject(
            new SrpoError(
              ErrorCode.UNAVAILABLE,
              `timed out reading ${[...remaining].join(', ')} to their stop offsets (an open transaction holds read_committed readers back)`,
              { retriable: true },
            ),
          ),
        options.timeoutMs ?? 300_000,
      );
      if (options.from || options.onlyListed) {
        consumer.on(consumer.events.GROUP_JOIN, (e) => {
          for (const [topic, assigned] of Object.entries(e.payload.memberAssignment)) {
            const others = assigned.filter((p) => !to.has(`${topic}:${p}`));
            if (others.length > 0) consumer.pause([{ topic, partitions: others }]);
            for (const p of assigned) {
              const start = from.get(`${topic}:${p}`);
              if (start !== undefined && to.has(`${topic}:${p}`)) consumer.seek({ topic, partition: p, offset: String(start) });
            }
          }
        });
      }
      // Batches of only aborted records or markers never reach eachBatch; their end event still reports progress.
      consumer.on(consumer.events.END_BATCH_PROCESS, (e) => {
        const key = `${e.payload.topic}:${e.payload.partition}`;
        const end = to.get(key);
        if (end !== undefined && Number(e.payload.lastOffset) + 1 >= end) remaining.delete(key);
        if (remaining.size === 0) {
          clearTimeout(timer);
          resolve();
        }
      });
      consumer
        .run({
          autoCommit: false,
          partitionsConsumedConcurrently: 1,
          eachBatch: async ({ batch }) => {
            const key = `${batch.topic}:${batch.partition}`;
            const end = to.get(key) ?? 0;
            const list = partitions.get(key);
            if (!list) return;
            // A rejoin (the group's coordinator moved: a broker stalled or failed) starts the
            // partition again from the beginning, as nothing is committed: what was read is skipped.
            const start = Math.max(from.get(key) ?? 0, list.length > 0 ? list[list.length - 1].offset + 1 : 0);
            for (const m of batch.messages) {
              const offset = Number(m.offset);
              if (offset < start) continue;
              if (offset >= end) break;
              list.push({ topic: batch.topic, partition: batch.partition, offset, key: m.key, value: m.value, timestampMs: Number(m.timestamp) });
              count++;
            }
            options.onProgress?.(count, total);
          },
        })
        .catch(reject);
    });
  } finally {
    await consumer.disconnect();
  }
  return { partitions, to, count };
}

/** High-water marks per `topic:partition`; retries while a fresh topic's leaders settle. */
export async function endOffsets(admin: Admin, topics: string[]): Promise<Map<string, number>> {
  const result = new Map<string, number>();
  for (const topic of topics) {
    const offsets = await retry(() => admin.fetchTopicOffsets(topic), { initialDelayMs: 100, linearStepMs: 100, maxAttempts: 20 });
    for (const p of offsets) result.set(`${topic}:${p.partition}`, Number(p.high));
  }
  return result;
}

export interface OffsetRange {
  partition: number;
  /** First offset to read (inclusive). */
  from: number;
  /** Last offset to read (inclusive). */
  to: number;
}

/**
 * Reads the records of `topic` in the given offset ranges, read_committed, with a
 * throwaway consumer group (kafkajs has no `assign`: it subscribes, seeks each
 * wanted partition and pauses the others). Used to fetch events by their Kafka
 * coordinates: state restore, audits.
 */
export async function readRanges(kafka: Kafka, topic: string, ranges: OffsetRange[], options: { timeoutMs?: number } = {}): Promise<RawRecord[]> {
  const wanted = new Map<number, OffsetRange>();
  for (const r of ranges) {
    const prev = wanted.get(r.partition);
    wanted.set(r.partition, prev ? { partition: r.partition, from: Math.min(prev.from, r.from), to: Math.max(prev.to, r.to) } : r);
  }
  const out: RawRecord[] = [];
  if (wanted.size === 0) return out;
  const remaining = new Set(wanted.keys());
  const consumer = kafka.consumer({ groupId: `srpo-reader-${randomUUID()}`, readUncommitted: false, maxWaitTimeInMs: 200 });
  await consumer.connect();
  try {
    await consumer.subscribe({ topics: [topic], fromBeginning: true });
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new SrpoError(ErrorCode.UNAVAILABLE, `timed out reading ${topic} partitions ${[...remaining].join(',')}`, { retriable: true })),
        options.timeoutMs ?? 30_000,
      );
      const progress = (partition: number, lastOffset: number) => {
        const range = wanted.get(partition);
        if (range && lastOffset >= range.to) remaining.delete(partition);
        if (remaining.size === 0) {
          clearTimeout(timer);
          resolve();
        }
      };
      consumer.on(consumer.events.END_BATCH_PROCESS, (e) => progress(e.payload.partition, Number(e.payload.lastOffset)));
      consumer.on(consumer.events.GROUP_JOIN, (e) => {
        const assigned = e.payload.memberAssignment[topic] ?? [];
        const others = assigned.filter((p) => !wanted.has(p));
        if (others.length > 0) consumer.pause([{ topic, partitions: others }]);
        for (const r of wanted.values()) consumer.seek({ topic, partition: r.partition, offset: String(r.from) });
      });
      consumer
        .run({
          autoCommit: false,
          eachBatch: async ({ batch }) => {
            const range = wanted.get(batch.partition);
            if (!range) return;
            for (const m of batch.messages) {
              const offset = Number(m.offset);
              if (offset < range.from || offset > range.to) continue;
              out.push({ topic, partition: batch.partition, offset, key: m.key, value: m.value, timestampMs: Number(m.timestamp) });
            }
          },
        })
        .catch(reject);
    });
  } finally {
    await consumer.disconnect();
  }
  return out.sort((a, b) => a.partition - b.partition || a.offset - b.offset);
}
