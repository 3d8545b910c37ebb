import { Kafka, Partitioners, Producer } from 'kafkajs';
import { errorMessage, isRetriable, Logger, retry } from '@srpo/core';
import type { EventCodec } from '@srpo/events';
import type { InputBatch, StreamClient } from './client/stream-client';
import type { LoopContext, LoopMode } from './loop-mode';
import type { InputRecord } from './processor';
import { decodeRecord, DeadLetterOriginal } from './stream-task';

/** What a sink write may use while it runs. */
export interface SinkWriteContext {
  /**
   * Keeps the group membership alive during a long write: heartbeats the group where the
   * client leaves that to the batch handler (kafkajs) and lets the event loop run (timers and
   * I/O: @platformatic/kafka's own heartbeat timer). A write that computes synchronously for
   * long (the learner's update on native TensorFlow) awaits it between pieces of its work, so
   * the session timeout bounds one piece, not the whole write. Never throws: a heartbeat the
   * broker refuses (a rebalance began) is left to the commit that follows the write.
   */
  keepAlive(): Promise<void>;
}

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
  /** Writes a batch to the sink. Must be idempotent on item identity: redelivery happens. A long write awaits `context.keepAlive()` now and then. */
  write(items: readonly T[], context: SinkWriteContext): Promise<void>;
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

/**
 * The sink mode's phases for {@link ConsumerRunner}: select and batch (process), write with
 * retry (flush), and commit the first unwritten offset (commit).
 */
export class SinkMode implements LoopMode {
  private readonly partitions: SinkPartitions<unknown>;
  private dlqProducer?: Producer;

  constructor(
    private readonly options: SinkModeOptions<unknown>,
    private readonly loop: LoopContext,
  ) {
    this.partitions = new SinkPartitions((pending) => options.batchSize(pending));
  }

  /** Sink mode has no changelogs and no idle punctuation: only the dead-letter producer. */
  async open(): Promise<void> {
    const { kafka, deadLetterTopic } = this.options;
    if (deadLetterTopic) {
      this.dlqProducer = kafka.producer({ idempotent: true, createPartitioner: Partitioners.DefaultPartitioner });
      await this.dlqProducer.connect();
    }
  }

  async afterStart(): Promise<void> {}

  onAssignment(partitions: ReadonlySet<number>): void {
    this.partitions.retain(partitions);
  }

  async reset(): Promise<void> {
    this.partitions.clear();
  }

  async stopBackground(): Promise<void> {}

  async close(): Promise<void> {
    await this.dlqProducer?.disconnect().catch(() => undefined);
  }

  /**
   * Phases 1-5 for one fetched batch: each record not read before is decoded,
   * dead-lettered or selected, and resolved (the client fetches on from it); whenever the
   * pending items make a complete batch it is written and the offset of the first record
   * not yet written is committed. Items left pending by an interrupted write (a failure, a
   * rebalance that kept the partition here) are written first.
   */
  async onBatch(batch: InputBatch): Promise<void> {
    const { topic, partition } = batch;
    const { codec } = this.options;
    const state = this.partitions;
    await this.writeCompleteBatches(batch);
    // Confluent-framed input: load unknown writer schemas from the registry first (no-op otherwise).
    await codec.prefetch(batch.records.map((m) => m.value));
    for (const m of batch.records) {
      if (!batch.isActive() || this.loop.stopping()) return;
      if (state.wasRead(partition, m.offset)) {
        batch.resolve(m.offset);
        continue;
      }
      const decoded = decodeRecord(codec, { topic, partition, offset: m.offset, key: m.key, value: m.value, timestampMs: m.timestampMs });
      let item: unknown = null;
      if ('record' in decoded) item = this.options.select(decoded.record);
      else
        await this.sendDeadLetter(
          { key: decoded.failed.key, raw: decoded.failed.value, source: { topic, partition, offset: m.offset } },
          decoded.reasonCode,
          decoded.reason,
        );
      state.read(partition, m.offset, item);
      batch.resolve(m.offset);
      await this.writeCompleteBatches(batch);
      await batch.heartbeat();
    }
    // Nothing waits for the sink: what was read (skipped or dead-lettered) is done.
    if (!state.hasPending(partition)) await this.commit(batch.topic, partition);
  }

  private async writeCompleteBatches(batch: InputBatch): Promise<void> {
    const state = this.partitions;
    for (let items = state.nextBatch(batch.partition); items && !this.loop.stopping(); items = state.nextBatch(batch.partition)) {
      await this.writeWithRetry(items, batch);
      state.written(batch.partition, items.length);
      await this.commit(batch.topic, batch.partition);
    }
  }

  /** Commits the first offset whose record is not yet written (or everything read). */
  private async commit(topic: string, partition: number): Promise<void> {
    const offset = this.partitions.commitOffset(partition);
    if (offset !== undefined) await this.loop.consumer.commit(topic, partition, offset);
  }

  private async writeWithRetry(items: readonly unknown[], batch: InputBatch): Promise<void> {
    const step = this.options.retryDelayMs ?? 1000;
    const heartbeat = () => batch.heartbeat();
    const context: SinkWriteContext = { keepAlive: () => this.keepAlive(batch) };
    await retry(() => this.options.write(items, context), {
      initialDelayMs: step,
      linearStepMs: step,
      maxDelayMs: 30_000,
      // A shutdown ends the retries: the batch stays uncommitted and is read again.
      retryIf: (e) => isRetriable(e) && !this.loop.stopping(),
      onRetry: (e, attempt) => {
        this.loop.count('sink_retries_total');
        this.loop.log.warn('sink write failed; retrying', { attempt, error: errorMessage(e) });
      },
      // Waiting out a write must not cost the group membership.
      sleep: async (ms) => {
        await heartbeat();
        await sleep(ms);
      },
    });
    this.loop.count('sink_batches_total');
  }

  /**
   * {@link SinkWriteContext.keepAlive}: the client's heartbeat (kafkajs sends one when its
   * interval has passed; a no-op for @platformatic/kafka), then one full turn of the event loop,
   * so timers that are due (@platformatic/kafka's heartbeat) and I/O callbacks run. Two
   * immediates: one alone, set from the poll phase, resumes in the same turn's check phase,
   * before any timer; the second, set from the check phase, waits for the next turn's timers
   * and poll. (A zero-delay timer would also do, at 1 ms or more each time; this costs microseconds.)
   */
  private async keepAlive(batch: InputBatch): Promise<void> {
    try {
      await batch.heartbeat();
    } catch (e) {
      this.loop.log.debug('heartbeat during a sink write failed; the commit after it decides', { error: errorMessage(e) });
    }
    await nextImmediate();
    await nextImmediate();
  }

  /** Sink mode's dead letter: written (acks=all) before the record's offset can be committed. */
  private async sendDeadLetter(original: DeadLetterOriginal, reasonCode: string, reason: string): Promise<void> {
    const record = this.loop.deadLetters.record(original, reasonCode, reason, {});
    if (!this.dlqProducer || !record) return;
    await this.dlqProducer.send({ topic: record.topic, acks: -1, messages: [{ key: record.key, value: record.value }] });
  }
}

function nextImmediate(): Promise<void> {
  return new Promise((r) => setImmediate(r));
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
