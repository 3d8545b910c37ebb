import { Logger } from '@srpo/core';
import type { InputBatch } from './client/stream-client';
import { KafkajsStreamClient } from './client/kafkajs-stream-client';
import { LoopConsumer } from './loop-consumer';
import { LoopDeadLetters } from './loop-dead-letters';
import type { CountMetric, LoopContext, LoopMode } from './loop-mode';
import { Stores } from './processor';
import { ConsumerRunnerOptions, ProcessorMode } from './processor-mode';
import { SinkMode, SinkModeOptions } from './sink-mode';

export type { ConsumerRunnerOptions } from './processor-mode';

/**
 * The one consumer loop of the runtime, on its client interface (`StreamClient`: kafkajs
 * by default, or @platformatic/kafka), in one of two modes that share the loop's phases,
 * its consumer lifecycle (group membership, restart after a fatal client error, pause and
 * resume) and its dead letters:
 *
 *   - processor mode (`new ConsumerRunner(options)`): exactly-once Kafka-to-Kafka
 *     processing with local state, used by the materializer;
 *   - sink mode (`ConsumerRunner.sink(options)`): at-least-once delivery of selected records
 *     to an external, idempotent sink, used by the learner (advantage groups into its
 *     update cycle and database).
 *
 * The sequence is poll -> decode -> process -> flush state -> commit, in both modes:
 *   1. poll     - the client hands over a batch of one input partition; records already
 *                 read (a client's re-delivery: below the committed position, or below
 *                 what the sink mode has read) are skipped;
 *   2. decode   - Avro single-object decoding (`decodeRecord`); undecodable bytes are
 *                 dead-lettered with a reason (in sink mode without a dead-letter topic,
 *                 logged and skipped);
 *   3. process  - processor mode: the task's `StreamTask` runs the processor (below);
 *                 sink mode: `select` turns the record into an item (or skips it), and items
 *                 gather per partition until `batchSize` says a batch is complete;
 *   4. flush    - processor mode: pending store writes become changelog records;
 *                 sink mode: `write` writes the batch, retriable failures retried in place
 *                 with backoff (heartbeating meanwhile), any other failure stopping the
 *                 consumer (it is recreated and reads again from the committed offsets);
 *   5. commit   - processor mode: one transaction (below); sink mode: the offset of the
 *                 first record not yet written is committed, only after the write resolved,
 *                 so a crash between write and commit redelivers the batch (the sink must
 *                 recognise items it already applied).
 * The in-process replay (`InProcessRunner`) and the unit-test harness run the same
 * `StreamTask` for phases 2-3 of the processor mode.
 *
 * Processor mode, per chunk of a fetched batch (one Kafka transaction each):
 *   1. poll     - the client hands over a batch of one input partition; records before
 *                 the task's committed position (a client's re-delivery) are skipped;
 *   2. decode   - Avro single-object decoding; undecodable bytes are dead-lettered;
 *   3. process  - the task's `StreamTask` runs the processor on each record (non-retriable
 *                 errors dead-letter the record), then punctuates when its stream-time
 *                 schedule is due; the replay and the test harness run the same task.
 *                 Any other throw of the processor on a record rolls the chunk back and
 *                 reads it again; after `maxProcessingAttempts` throws on that record
 *                 (default 3, counted per topic/partition/offset; errors marked retriable
 *                 and failed transactions do not count) it is dead-lettered as
 *                 `PROCESSING_FAILED` instead (a poison record) and the partition moves on;
 *   4. flush    - pending store writes become changelog records (compacted topics);
 *   5. commit   - outputs, changelog records, dead letters and the input offset
 *                 (`sendOffsets`, last offset + 1) are committed in ONE transaction.
 * Only after the commit do the stores fold in their pending writes; an abort
 * rolls them back and seeks the partition back, so state never runs ahead. Phases 2-5
 * are one unit: whatever fails in them (a record, the punctuation, the flush, the
 * transaction) takes back the chunk's outputs, writes, clock and position before it is
 * read again. Between batches, an idle task whose watermark moved punctuates in a
 * transaction of its own with the same rollback; a failed one is retried at the next idle
 * poll (on a task rebuilt from its changelog when the transaction had begun).
 *
 * Fencing does not rely on KIP-447 (kafkajs 2.2.4 only has the earlier protocol): it uses
 * one transactional producer per task with a stable id (`<appId>-<partition>`),
 * initialised when the task is first seen after an assignment: the epoch bump
 * aborts a dead owner's open transaction and fences a live zombie. A fenced
 * producer is never reused. The assignor keeps co-partitioned partitions together.
 * Before a task's first chunk its stores are restored from their changelogs (indexes
 * rebuilt as values fold in), source-backed values get their bytes back from the input
 * topics, and the processor's `migrate` rewrites state of an earlier layout; those
 * writes go out with the first transaction.
 *
 * This class owns the sequence and the order of the lifecycle (open, start, stop); its
 * parts are in files named for their job: `loop-consumer.ts` (the group consumer: start,
 * replacement after a crash, pause/resume, seeks and commits), `loop-dead-letters.ts`
 * (counting, logging and encoding dead letters), `loop-mode.ts` (what a mode implements
 * and what the loop lends it), `processor-mode.ts` (the processor mode's batches, chunk
 * transactions and idle punctuation), `processor-tasks.ts` (its tasks: fencing, restore,
 * clock, changelog topics, the chunk's transaction, close), `processing-attempts.ts` (a poison
 * record's attempts) and `sink-mode.ts` (the sink mode's batches, writes and commits).
 */
export class ConsumerRunner<S extends Stores = Stores> {
  private readonly consumer: LoopConsumer;
  /** Phases 1-5 of a batch and what they hold: {@link ProcessorMode} or {@link SinkMode}. */
  private readonly mode: LoopMode;
  /** The processor mode (its open tasks); undefined in sink mode. */
  private readonly processor?: ProcessorMode<S>;
  private readonly log: Logger;
  private stopping = false;

  /** Sink mode: selected records of `options.topic` written in batches to an idempotent sink. */
  static sink<T>(options: SinkModeOptions<T>): ConsumerRunner {
    return new ConsumerRunner(options);
  }

  /** Processor mode (or sink mode, which {@link ConsumerRunner.sink} types by its items). */
  constructor(options: ConsumerRunnerOptions<S> | SinkModeOptions<unknown>) {
    const sessionTimeoutMs = options.sessionTimeoutMs ?? 30_000;
    const client = options.client ?? new KafkajsStreamClient(options.kafka);
    const count: CountMetric = options.count ?? (() => undefined);
    const processorMode = 'processor' in options;
    this.log =
      options.logger ??
      (processorMode
        ? new Logger('consumer-runner', { appId: options.appId })
        : new Logger('consumer-runner', { groupId: options.groupId, topic: options.topic }));
    const deadLetters = new LoopDeadLetters(
      {
        topic: options.deadLetterTopic,
        processor: processorMode ? options.processor.name : (options.processorName ?? options.groupId),
        codec: options.codec,
        maxBytes: options.maxDeadLetterBytes,
      },
      this.log,
      count,
      options.now ?? Date.now,
    );
    this.consumer = new LoopConsumer(
      client,
      processorMode
        ? { groupId: options.appId, topics: options.inputTopics, sessionTimeoutMs, metricPrefix: 'stream' }
        : { groupId: options.groupId, topics: [options.topic], sessionTimeoutMs, metricPrefix: 'sink' },
      {
        onAssignment: (partitions) => this.onAssignment(partitions),
        onBatch: (batch) => this.onBatch(batch),
        beforeRestart: () => this.mode.reset(),
        stopping: () => this.stopping,
      },
      this.log,
      count,
    );
    const loop: LoopContext = { client, consumer: this.consumer, deadLetters, log: this.log, count, stopping: () => this.stopping };
    if (processorMode) this.mode = this.processor = new ProcessorMode(options, loop);
    else this.mode = new SinkMode(options, loop);
  }

  async start(): Promise<void> {
    await this.mode.open();
    await this.consumer.start();
    await this.mode.afterStart();
  }

  async stop(): Promise<void> {
    this.stopping = true;
    await this.mode.stopBackground();
    await this.consumer.stop();
    await this.mode.close();
  }

  /** Stops handing batches over (the one in progress finishes); the membership stays. Survives a consumer restart. */
  pause(): void {
    this.consumer.pause();
  }

  resume(): void {
    this.consumer.resume();
  }

  get isPaused(): boolean {
    return this.consumer.isPaused;
  }

  /** Open tasks and their store sizes (for metrics and tests). */
  taskStats(): { partition: number; streamTimeMs: number; stores: Record<string, number> }[] {
    return this.processor?.tasks.stats() ?? [];
  }

  private onAssignment(partitions: ReadonlySet<number>): void {
    this.mode.onAssignment(partitions);
    this.log.info('assignment', { partitions: [...partitions].sort((a, b) => a - b) });
  }

  /** Phase 1, poll: the consumer hands over one batch at a time; the mode runs phases 1-5 on it. */
  private async onBatch(batch: InputBatch): Promise<void> {
    if (batch.records.length === 0 || !batch.isActive() || this.stopping) return;
    await this.mode.onBatch(batch);
  }
}
