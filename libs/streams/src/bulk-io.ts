import { randomUUID } from 'crypto';
import { Kafka, Message, Partitioners } from 'kafkajs';
import { ErrorCode, SrpoError } from '@srpo/core';
import { endOffsets, RawRecord } from '@srpo/events';

export interface BulkReadOptions {
  /** Stop offsets (exclusive) per `topic:partition`; default: the end offsets when the read starts. */
  to?: ReadonlyMap<string, number>;
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
  /** Records per `topic:partition`, in offset order, from the start of the log up to `to`. */
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
  const remaining = new Set([...to].filter(([, end]) => end > 0).map(([k]) => k));
  let total = 0;
  for (const end of to.values()) total += end;
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
        () => reject(new SrpoError(ErrorCode.UNAVAILABLE, `timed out reading ${[...remaining].join(', ')} to their stop offsets (an open transaction holds read_committed readers back)`, { retriable: true })),
        options.timeoutMs ?? 300_000,
      );
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
            for (const m of batch.messages) {
              const offset = Number(m.offset);
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

/** One record to write, with its partition chosen by the caller. */
export interface BulkMessage {
  topic: string;
  partition: number;
  key: string | Buffer | null;
  value: Buffer;
}

/**
 * Writes records in large requests with an idempotent, non-transactional
 * producer (acks=all, one request in flight, so each partition's records land
 * in the order given). For a replay's own topics, which only it writes: their
 * offsets are then known before writing (see {@link OffsetAllocator}).
 */
export async function bulkWrite(
  kafka: Kafka,
  messages: readonly BulkMessage[],
  options: { maxRequestBytes?: number; maxPartitionBytes?: number; onProgress?: (written: number) => void } = {},
): Promise<void> {
  if (messages.length === 0) return;
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1, createPartitioner: Partitioners.DefaultPartitioner, allowAutoTopicCreation: false });
  await producer.connect();
  try {
    const limit = options.maxRequestBytes ?? 2 * 1024 * 1024;
    // One partition's records of a request form one record batch, which the topic's max.message.bytes (4 MiB in the catalog) caps.
    const perPartition = options.maxPartitionBytes ?? 1024 * 1024;
    let i = 0;
    while (i < messages.length) {
      const byTopic = new Map<string, Message[]>();
      const partitionBytes = new Map<string, number>();
      let bytes = 0;
      for (; i < messages.length; i++) {
        const m = messages[i];
        const size = m.value.length + 64;
        const pk = `${m.topic}:${m.partition}`;
        const inPartition = partitionBytes.get(pk) ?? 0;
        if (bytes > 0 && (bytes + size > limit || inPartition + size > perPartition)) break;
        bytes += size;
        partitionBytes.set(pk, inPartition + size);
        const list = byTopic.get(m.topic) ?? [];
        list.push({ key: m.key, value: m.value, partition: m.partition });
        byTopic.set(m.topic, list);
      }
      await producer.sendBatch({ acks: -1, topicMessages: [...byTopic].map(([topic, msgs]) => ({ topic, messages: msgs })) });
      options.onProgress?.(i);
    }
  } finally {
    await producer.disconnect();
  }
}

/**
 * Offsets records will get on topics that only this process writes, starting
 * from their (checked) end offsets: lets a replay put coordinates into events
 * before writing them in bulk.
 */
export class OffsetAllocator {
  private readonly next = new Map<string, number>();

  constructor(start: ReadonlyMap<string, number> = new Map()) {
    for (const [k, v] of start) this.next.set(k, v);
  }

  take(topic: string, partition: number): number {
    const key = `${topic}:${partition}`;
    const offset = this.next.get(key) ?? 0;
    this.next.set(key, offset + 1);
    return offset;
  }

  /** Expected end offset per `topic:partition` once everything taken is written. */
  ends(): Map<string, number> {
    return new Map(this.next);
  }
}

const defaultPartitioner = Partitioners.DefaultPartitioner();

const partitionMetadataBySize = new Map<number, { partitionId: number; leader: number; partitionErrorCode: number; replicas: number[]; isr: number[] }[]>();

/** The partition the live runners' producers (kafkajs DefaultPartitioner, murmur2 of the key) give a keyed record. */
export function keyPartition(topic: string, key: string, partitions: number): number {
  let partitionMetadata = partitionMetadataBySize.get(partitions);
  if (!partitionMetadata) {
    partitionMetadata = Array.from({ length: partitions }, (_, partitionId) => ({ partitionId, leader: 0, partitionErrorCode: 0, replicas: [0], isr: [0] }));
    partitionMetadataBySize.set(partitions, partitionMetadata);
  }
  return defaultPartitioner({ topic, partitionMetadata, message: { key, value: null } });
}
