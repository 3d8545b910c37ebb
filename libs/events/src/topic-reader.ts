import { randomUUID } from 'crypto';
import { Admin, Kafka } from 'kafkajs';
import { ErrorCode, SrpoError } from '@srpo/core';

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
 * consumer group that commits nothing. For tools, audits and tests; not a
 * processing loop (that is the consumer runner's job).
 */
export async function readTopicsToEnd(kafka: Kafka, topics: string[], options: { timeoutMs?: number } = {}): Promise<RawRecord[]> {
  const admin = kafka.admin();
  await admin.connect();
  let targets: Map<string, number>;
  try {
    targets = await endOffsets(admin, topics);
  } finally {
    await admin.disconnect();
  }
  const remaining = new Map([...targets].filter(([, end]) => end > 0));
  const out: RawRecord[] = [];
  if (remaining.size === 0) return out;
  const consumer = kafka.consumer({ groupId: `srpo-reader-${randomUUID()}`, readUncommitted: false, maxWaitTimeInMs: 200 });
  await consumer.connect();
  try {
    await consumer.subscribe({ topics, fromBeginning: true });
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new SrpoError(ErrorCode.UNAVAILABLE, `timed out reading ${topics.join(',')}: ${[...remaining.keys()].join(',')} not at end (an open transaction holds read_committed readers back)`, { retriable: true })),
        options.timeoutMs ?? 30_000,
      );
      // Progress comes from the batch events, which kafkajs also emits for batches that held
      // only transaction markers or aborted records and never reach eachBatch.
      consumer.on(consumer.events.END_BATCH_PROCESS, (e) => {
        const key = `${e.payload.topic}:${e.payload.partition}`;
        const end = remaining.get(key);
        if (end !== undefined && Number(e.payload.lastOffset) + 1 >= end) remaining.delete(key);
        if (remaining.size === 0) {
          clearTimeout(timer);
          resolve();
        }
      });
      consumer
        .run({
          autoCommit: false,
          eachBatch: async ({ batch }) => {
            for (const m of batch.messages) {
              out.push({
                topic: batch.topic,
                partition: batch.partition,
                offset: Number(m.offset),
                key: m.key,
                value: m.value,
                timestampMs: Number(m.timestamp),
              });
            }
          },
        })
        .catch(reject);
    });
  } finally {
    await consumer.disconnect();
  }
  return out.sort((a, b) => (a.topic === b.topic ? a.partition - b.partition || a.offset - b.offset : a.topic < b.topic ? -1 : 1));
}

/** High-water marks per `topic:partition`. */
export async function endOffsets(admin: Admin, topics: string[]): Promise<Map<string, number>> {
  const result = new Map<string, number>();
  for (const topic of topics) {
    for (const p of await admin.fetchTopicOffsets(topic)) result.set(`${topic}:${p.partition}`, Number(p.high));
  }
  return result;
}
