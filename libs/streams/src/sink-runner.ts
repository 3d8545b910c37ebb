import { Consumer, EachBatchPayload, Kafka, Partitioners, Producer } from 'kafkajs';
import { errorMessage, isRetriable, Logger, retry } from '@srpo/core';
import { DecodeError, EventCodec } from '@srpo/events';
import { deadLetterOf, encodeDeadLetter } from './dead-letter';
import type { InputRecord } from './processor';

export interface SinkRunnerOptions<T> {
  groupId: string;
  kafka: Kafka;
  codec: EventCodec;
  topic: string;
  /** Turns a decoded record into a sink item; null skips it (e.g. another policy's group). */
  select(record: InputRecord): T | null;
  /** How many of the pending items form the next batch; 0 waits for more. */
  batchSize(pending: readonly T[]): number;
  /** Writes a batch to the sink. Must be idempotent on item identity: redelivery happens. */
  onBatch(items: readonly T[]): Promise<void>;
  /** Undecodable records go here with a reason; when unset they are logged and skipped. */
  deadLetterTopic?: string;
  processorName?: string;
  logger?: Logger;
  count?: (metric: string, labels?: Record<string, string>) => void;
  /** Backoff for retriable sink failures (default 1000 ms). */
  retryDelayMs?: number;
  /** Consumer session timeout: how long a crashed member holds its partitions (default 30 s). */
  sessionTimeoutMs?: number;
}

interface Pending<T> {
  item: T;
  offset: number;
}

/**
 * The consumer loop for an external, idempotent sink (the learner's database),
 * the sibling of {@link ConsumerRunner} for Kafka-to-Kafka processing.
 *
 * Phases: poll (eachBatch) -> decode (undecodable records are dead-lettered) ->
 * select and accumulate items per partition -> when `batchSize` says a batch
 * is complete, `onBatch` writes it -> commit the offset of the first record
 * not yet written (offsets are committed only after the sink resolved). A
 * crash between the sink write and the commit redelivers the batch, so the
 * sink must recognise items it has already applied. Retriable sink errors are
 * retried with backoff in place; other errors stop the consumer.
 */
export class SinkRunner<T> {
  private consumer?: Consumer;
  private dlqProducer?: Producer;
  private readonly pending = new Map<number, Pending<T>[]>();
  /** Per partition: offset after the last record read (skipped or pending). */
  private readonly readUpTo = new Map<number, number>();
  private readonly log: Logger;
  private paused = false;
  private stopping = false;
  private restarting = false;

  constructor(private readonly options: SinkRunnerOptions<T>) {
    this.log = options.logger ?? new Logger('sink-runner', { groupId: options.groupId, topic: options.topic });
  }

  async start(): Promise<void> {
    const { kafka } = this.options;
    if (this.options.deadLetterTopic) {
      this.dlqProducer = kafka.producer({ idempotent: true, createPartitioner: Partitioners.DefaultPartitioner });
      await this.dlqProducer.connect();
    }
    await this.startConsumer();
  }

  private async startConsumer(): Promise<void> {
    const { kafka, groupId, topic } = this.options;
    const sessionTimeout = this.options.sessionTimeoutMs ?? 30_000;
    this.consumer = kafka.consumer({
      groupId,
      readUncommitted: false,
      maxWaitTimeInMs: 250,
      sessionTimeout,
      heartbeatInterval: Math.min(3_000, Math.floor(sessionTimeout / 3)),
      retry: { retries: 10 },
    });
    this.consumer.on(this.consumer.events.GROUP_JOIN, () => {
      // A rebalance may hand partitions to another member: forget what was read but not written.
      this.pending.clear();
      this.readUpTo.clear();
    });
    this.consumer.on(this.consumer.events.CRASH, (e) => {
      // kafkajs restarts itself after retriable errors only; e.g. a commit refused because the
      // coordinator forgot this member during a broker outage would leave the consumer dead.
      if (!e.payload.restart && !this.stopping) void this.restartConsumer(errorMessage(e.payload.error));
    });
    await this.consumer.connect();
    await this.consumer.subscribe({ topics: [topic], fromBeginning: true });
    await this.consumer.run({ autoCommit: false, eachBatchAutoResolve: false, partitionsConsumedConcurrently: 1, eachBatch: (p) => this.onBatch(p) });
  }

  /** Replaces a crashed consumer; uncommitted items are read again (the sink is idempotent). */
  private async restartConsumer(reason: string): Promise<void> {
    if (this.restarting) return;
    this.restarting = true;
    this.log.warn('consumer crashed; recreating it', { reason });
    this.options.count?.('sink_consumer_restarts_total');
    try {
      const old = this.consumer;
      this.consumer = undefined;
      await old?.disconnect().catch(() => undefined);
      this.pending.clear();
      this.readUpTo.clear();
      await retry(() => this.startConsumer(), {
        initialDelayMs: 500,
        linearStepMs: 500,
        maxDelayMs: 10_000,
        retryIf: () => true,
        stopped: () => this.stopping,
        onRetry: (e, attempt) => this.log.warn('consumer restart failed; retrying', { attempt, error: errorMessage(e) }),
      })
        .then(() => {
          if (this.paused) this.pause();
        })
        .catch(() => undefined);
    } finally {
      this.restarting = false;
    }
  }

  async stop(): Promise<void> {
    this.stopping = true;
    await this.consumer?.disconnect().catch((e) => this.log.warn('disconnect failed', { error: errorMessage(e) }));
    await this.dlqProducer?.disconnect().catch(() => undefined);
  }

  pause(): void {
    this.paused = true;
    this.consumer?.pause([{ topic: this.options.topic }]);
  }

  resume(): void {
    this.paused = false;
    this.consumer?.resume([{ topic: this.options.topic }]);
  }

  get isPaused(): boolean {
    return this.paused;
  }

  private async onBatch({ batch, resolveOffset, heartbeat, isRunning, isStale }: EachBatchPayload): Promise<void> {
    const { codec, topic } = this.options;
    const partition = batch.partition;
    const queue = this.pending.get(partition) ?? [];
    this.pending.set(partition, queue);
    await codec.prefetch(batch.messages.map((m) => m.value));
    for (const m of batch.messages) {
      if (!isRunning() || isStale() || this.stopping) return;
      const offset = Number(m.offset);
      if (offset < (this.readUpTo.get(partition) ?? 0)) continue;
      const source = { topic, partition, offset };
      try {
        const event = codec.decode(m.value) as InputRecord['event'];
        const item = this.options.select({ source, key: m.key ? m.key.toString('utf8') : null, event, raw: m.value ?? Buffer.alloc(0) });
        if (item !== null) queue.push({ item, offset });
      } catch (e) {
        if (!(e instanceof DecodeError)) throw e;
        await this.deadLetter(m.key, m.value, source, e);
      }
      this.readUpTo.set(partition, offset + 1);
      resolveOffset(m.offset);
      for (let n = this.options.batchSize(queue.map((p) => p.item)); n > 0 && !this.stopping; n = this.options.batchSize(queue.map((p) => p.item))) {
        const taken = queue.slice(0, n);
        await this.writeWithRetry(taken.map((p) => p.item), heartbeat);
        queue.splice(0, n);
        await this.commit(partition);
      }
      await heartbeat();
    }
    if (queue.length === 0) await this.commit(partition);
  }

  /** Commits the first offset whose record is not yet written (or everything read). */
  private async commit(partition: number): Promise<void> {
    const queue = this.pending.get(partition) ?? [];
    const offset = queue.length > 0 ? queue[0].offset : this.readUpTo.get(partition);
    if (offset === undefined) return;
    await this.consumer?.commitOffsets([{ topic: this.options.topic, partition, offset: String(offset) }]);
  }

  private async writeWithRetry(items: T[], heartbeat: () => Promise<void>): Promise<void> {
    const step = this.options.retryDelayMs ?? 1000;
    await retry(() => this.options.onBatch(items), {
      initialDelayMs: step,
      linearStepMs: step,
      maxDelayMs: 30_000,
      // A shutdown ends the retries: the batch stays uncommitted and is read again.
      retryIf: (e) => isRetriable(e) && !this.stopping,
      onRetry: (e, attempt) => {
        this.options.count?.('sink_retries_total');
        this.log.warn('sink write failed; retrying', { attempt, error: errorMessage(e) });
      },
      // Waiting out a write must not cost the group membership.
      sleep: async (ms) => {
        await heartbeat();
        await new Promise((r) => setTimeout(r, ms));
      },
    });
    this.options.count?.('sink_batches_total');
  }

  private async deadLetter(key: Buffer | null, value: Buffer | null, source: InputRecord['source'], e: DecodeError): Promise<void> {
    this.options.count?.('deadletter_total', { reason: e.reasonCode });
    this.log.warn('dead letter', { ...source, reasonCode: e.reasonCode, reason: e.message });
    if (!this.dlqProducer || !this.options.deadLetterTopic) return;
    const dl = deadLetterOf({ key, value, source }, e.reasonCode, e.message, this.options.processorName ?? this.options.groupId, {}, Date.now());
    await this.dlqProducer.send({ topic: this.options.deadLetterTopic, acks: -1, messages: [{ key, value: encodeDeadLetter(this.options.codec, dl).bytes }] });
  }
}
