import type { Kafka } from 'kafkajs';
import type { Logger } from '@srpo/core';
import type { EventCodec } from '@srpo/events';
import type { StreamClient } from './client/stream-client';
import type { InputRecord } from './processor';

/**
 * {@link ConsumerRunner}'s sink mode: records of one topic, decoded and selected, are
 * written in batches to an external, idempotent sink (the learner's database); offsets are
 * committed after the write, outside any transaction.
 */
export interface SinkModeOptions<T> {
  /** Consumer group. Stable across restarts. */
  groupId: string;
  /** kafkajs: the dead-letter producer, and the client unless `client` is given. */
  kafka: Kafka;
  /** The client of the loop (consumer, offset commits); default kafkajs over `kafka`. */
  client?: StreamClient;
  codec: EventCodec;
  topic: string;
  /** Turns a decoded record into a sink item; null skips it (e.g. another policy's group). */
  select(record: InputRecord): T | null;
  /** How many of the pending items form the next batch; 0 waits for more. */
  batchSize(pending: readonly T[]): number;
  /** Writes a batch to the sink. Must be idempotent on item identity: redelivery happens. */
  write(items: readonly T[]): Promise<void>;
  /** Undecodable records go here with a reason; when unset they are logged and skipped. */
  deadLetterTopic?: string;
  /** The `processor` of dead letters (default the group id). */
  processorName?: string;
  logger?: Logger;
  /** Counter sink: `sink_batches_total`, `sink_retries_total`, `sink_consumer_restarts_total`, `deadletter_total`. */
  count?: (metric: string, labels?: Record<string, string>) => void;
  /** Backoff step for retriable sink failures (default 1000 ms, growing linearly to 30 s). */
  retryDelayMs?: number;
  /** Consumer session timeout: how long a crashed member holds its partitions (default 30 s). */
  sessionTimeoutMs?: number;
  /** Wall clock for dead-letter timestamps. */
  now?: () => number;
  /** Largest dead-letter record (default 3 MiB); past it the original bytes are left out. */
  maxDeadLetterBytes?: number;
}

interface Pending<T> {
  item: T;
  offset: number;
}

/** One partition's read-but-not-written items and how far it was read. */
interface PartitionState<T> {
  pending: Pending<T>[];
  /** Offset after the last record read (selected, skipped or dead-lettered); undefined before the first. */
  readUpTo?: number;
}

/**
 * The sink mode's per-partition state between poll and commit: what was read, which of it
 * is pending for the sink, and the offset that may be committed (the first record not yet
 * written, or everything read when nothing is pending). Pure: no client, no timers.
 */
export class SinkPartitions<T> {
  private readonly partitions = new Map<number, PartitionState<T>>();

  constructor(private readonly batchSize: (pending: readonly T[]) => number) {}

  private state(partition: number): PartitionState<T> {
    let s = this.partitions.get(partition);
    if (!s) {
      s = { pending: [] };
      this.partitions.set(partition, s);
    }
    return s;
  }

  /** Whether the record at `offset` was read already (a client's redelivery): skip it. */
  wasRead(partition: number, offset: number): boolean {
    return offset < (this.partitions.get(partition)?.readUpTo ?? 0);
  }

  /** Records one read record: `item` joins the pending items unless null (skipped or dead-lettered). */
  read(partition: number, offset: number, item: T | null): void {
    const s = this.state(partition);
    if (item !== null) s.pending.push({ item, offset });
    s.readUpTo = offset + 1;
  }

  /** The next complete batch of a partition (`batchSize` says how many), or undefined. */
  nextBatch(partition: number): T[] | undefined {
    const pending = this.partitions.get(partition)?.pending ?? [];
    const n = pending.length === 0 ? 0 : this.batchSize(pending.map((p) => p.item));
    return n > 0 ? pending.slice(0, n).map((p) => p.item) : undefined;
  }

  /** The first `count` pending items were written. */
  written(partition: number, count: number): void {
    this.partitions.get(partition)?.pending.splice(0, count);
  }

  /** Whether a partition has items waiting for a complete batch. */
  hasPending(partition: number): boolean {
    return (this.partitions.get(partition)?.pending.length ?? 0) > 0;
  }

  /** The offset to commit: the first pending item's, else the one after everything read; undefined before any read. */
  commitOffset(partition: number): number | undefined {
    const s = this.partitions.get(partition);
    if (!s) return undefined;
    return s.pending.length > 0 ? s.pending[0].offset : s.readUpTo;
  }

  /**
   * Keeps only partitions this member still owns. A kept partition is read again from its
   * committed offset (the first pending item), which `wasRead` skips up to where it was read;
   * a dropped one may move on at another member, so what was read there is forgotten.
   */
  retain(partitions: ReadonlySet<number>): void {
    for (const p of [...this.partitions.keys()]) if (!partitions.has(p)) this.partitions.delete(p);
  }

  /** Forgets everything (a new consumer reads again from the committed offsets). */
  clear(): void {
    this.partitions.clear();
  }
}
