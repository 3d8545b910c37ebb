import { randomUUID } from 'crypto';
import type { Admin, Consumer, Kafka } from 'kafkajs';
import { ErrorCode, SrpoError } from '@srpo/core';
import type { KafkaCoordinates } from '@srpo/events';

/**
 * A topic every instance reads whole, as a Kafka Streams GlobalKTable: its own consumer group
 * per process (every instance needs every record, and nothing is committed), read from the
 * beginning, committed records only. `apply` sees each record once per process, in partition
 * order; what it builds is the caller's (a map, a set).
 *
 * `catchUp` resolves once every record written before the call was read, so a caller can tie
 * its view to what had been written before it acts (the policy-version bound of the set stage).
 */
export class GlobalTopicReader {
  /** Next offset to read, per partition. */
  private readonly positions = new Map<number, number>();
  private readonly waiters = new Set<() => void>();
  private consumer?: Consumer;
  private admin?: Admin;

  constructor(
    private readonly kafka: Kafka,
    private readonly topic: string,
    /** The group id's prefix (a random suffix is added per process). */
    private readonly groupPrefix: string,
    private readonly apply: (value: Buffer | null, at: KafkaCoordinates) => void,
  ) {}

  async start(): Promise<void> {
    this.admin = this.kafka.admin();
    await this.admin.connect();
    const consumer = this.kafka.consumer({ groupId: `${this.groupPrefix}.${randomUUID()}`, readUncommitted: false, maxWaitTimeInMs: 100 });
    this.consumer = consumer;
    consumer.on(consumer.events.END_BATCH_PROCESS, (e) => {
      // Batches of transaction markers only never reach eachBatch but still move the position.
      this.advance(e.payload.partition, Number(e.payload.lastOffset) + 1);
    });
    await consumer.connect();
    await consumer.subscribe({ topics: [this.topic], fromBeginning: true });
    await consumer.run({
      autoCommit: false,
      eachBatch: async ({ batch }) => {
        for (const m of batch.messages) {
          this.apply(m.value, { topic: batch.topic, partition: batch.partition, offset: Number(m.offset) });
          this.advance(batch.partition, Number(m.offset) + 1);
        }
      },
    });
  }

  /** Resolves once every record written before the call has been read; a retriable error after `timeoutMs`. */
  async catchUp(timeoutMs = 30_000): Promise<void> {
    if (!this.admin) return;
    const ends = await this.admin.fetchTopicOffsets(this.topic);
    const behind = () => ends.some((o) => (this.positions.get(o.partition) ?? 0) < Number(o.high));
    if (!behind()) return;
    await new Promise<void>((resolve, reject) => {
      const check = () => {
        if (behind()) return;
        this.waiters.delete(check);
        clearTimeout(timer);
        resolve();
      };
      const timer = setTimeout(() => {
        this.waiters.delete(check);
        reject(new SrpoError(ErrorCode.UNAVAILABLE, `${this.topic} not read to its end after ${timeoutMs} ms`, { retriable: true }));
      }, timeoutMs);
      this.waiters.add(check);
    });
  }

  async stop(): Promise<void> {
    await this.consumer?.disconnect().catch(() => undefined);
    await this.admin?.disconnect().catch(() => undefined);
    this.consumer = undefined;
    this.admin = undefined;
  }

  private advance(partition: number, next: number): void {
    if (next <= (this.positions.get(partition) ?? 0)) return;
    this.positions.set(partition, next);
    for (const w of [...this.waiters]) w();
  }
}
