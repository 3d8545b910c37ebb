import { Kafka, Partitioners, Producer } from 'kafkajs';
import { errorMessage, isRetriable, Logger, retry } from '@srpo/core';
import { DeadLetter, EventCodec } from '@srpo/events';
import { KafkajsStreamClient } from './client/kafkajs-stream-client';
import type { FetchedRecord, GroupConsumer, InputBatch, OutgoingRecord, StreamAdmin, StreamClient, TransactionalProducer } from './client/stream-client';
import { deadLetterOf, encodeDeadLetter } from './dead-letter';
import { StoreSerde } from './key-value-store';
import { OutputRecord, Processor, Stores } from './processor';
import { SinkModeOptions, SinkPartitions } from './sink-mode';
import { decodeRecord, DeadLetterOriginal, StreamTask, TaskClock, TaskSink } from './stream-task';
import { changelogTopic, META_STORE, restoreTaskStores, TaskStores } from './task-stores';

export interface ConsumerRunnerOptions<S extends Stores> {
  /** Consumer group, transactional-id prefix and changelog prefix. Stable across restarts. */
  appId: string;
  /** kafkajs: restore reads (changelogs, source hydration), and the client unless `client` is given. */
  kafka: Kafka;
  /** The client of the processing loop (consumer, transactions, admin); default kafkajs over `kafka`. */
  client?: StreamClient;
  codec: EventCodec;
  /** Co-partitioned input topics: partition p of each forms task p. */
  inputTopics: string[];
  processor: Processor<S>;
  deadLetterTopic: string;
  /** Partitions of the changelog topics: the input topics' partition count. */
  partitions: number;
  serdes?: { [K in keyof S]?: StoreSerde<unknown> };
  /**
   * Directory of the tasks' local state copies (LMDB, one per task under
   * `<stateDir>/<appId>/task-<p>`): restore reads the copy plus the changelog since its
   * checkpoint. Unset: in-memory stores, restored from the whole changelog.
   */
  stateDir?: string;
  /** Decoded values each local store keeps in memory (default 4096). */
  stateCacheSize?: number;
  /** TEST-ONLY: runs inside each local state write before it commits (crash tests kill the process there). */
  duringLocalWrite?: () => void;
  /** Records per Kafka transaction (default 500). */
  maxRecordsPerTransaction?: number;
  /** Counter sink (metrics); the runner counts records, transactions, aborts and dead letters. */
  count?: (metric: string, labels?: Record<string, string>) => void;
  logger?: Logger;
  /** Wall clock for dead-letter timestamps (the runner's, never the processor's). */
  now?: () => number;
  /** Consumer session timeout; a crashed instance's partitions move after this long (default 30 s). */
  sessionTimeoutMs?: number;
  /** How often input end offsets are polled to move the watermark of idle inputs (default 1000 ms). */
  idlePollMs?: number;
  /**
   * Awaited before each fetched batch of `topic` is processed: brings read-only global
   * state (e.g. the newest published policy versions) up to date, so a processor never
   * judges a record against state older than the record. Once per batch is enough: every
   * record of the batch was written before the batch was fetched, so state read to its
   * end after the fetch is newer than all of them (per chunk, it cost two ListOffsets
   * round trips per transaction). A retriable error makes kafkajs hand the same batch
   * over again.
   */
  syncGlobalState?: (topic: string) => Promise<void>;
  /**
   * Largest dead-letter record (default 3 MiB, under the catalog's 4 MiB
   * max.message.bytes). A dead letter carries the original message, which may be
   * over the codec's input limit (that can be why it is dead); past this bound the
   * bytes are left out and found at `source` instead (details say so).
   */
  maxDeadLetterBytes?: number;
}

/** What both modes configure alike: the group, its client, decoding and dead letters. */
interface LoopSettings {
  groupId: string;
  topics: string[];
  codec: EventCodec;
  client: StreamClient;
  sessionTimeoutMs: number;
  /** Unset (sink mode only): dead letters are logged and skipped. */
  deadLetterTopic?: string;
  /** The `processor` field of dead letters. */
  deadLetterProcessor: string;
  maxDeadLetterBytes?: number;
  /** Metric prefix of the consumer restart counter (`stream` or `sink`, names kept from before the modes met). */
  metricPrefix: 'stream' | 'sink';
}

/** The sink mode's callbacks and state. */
interface SinkRun {
  options: SinkModeOptions<unknown>;
  partitions: SinkPartitions<unknown>;
  dlqProducer?: Producer;
}

/** Position of one input partition of a task: whether it is caught up holds the watermark or not. */
interface InputPosition {
  /** Next offset to read (committed position). */
  nextOffset: number;
  /** End offset at the last poll; undefined until polled. */
  high?: number;
}

type PendingOutput = OutgoingRecord;


interface Task<S extends Stores> {
  partition: number;
  producer: TransactionalProducer;
  /** The processor's task: per-record phases, clock and punctuation schedule. */
  streamTask: StreamTask<S>;
  /** The task's stores and where their committed state lives (memory or a local copy). */
  state: TaskStores;
  positions: Map<string, InputPosition>;
  /** Outputs, changelog records and dead letters of the open transaction. */
  outputs: PendingOutput[];
  /** Dead letters of the open transaction (for the log line). */
  deadLetters: number;
  /** Serialises batch transactions and idle punctuations of one task. */
  lock: Promise<unknown>;
}

const STREAM_TIME_KEY = 'streamTimeMs';
const MAX_EVENT_PREFIX = 'maxEventMs:';
const PUNCTUATED_AT_KEY = 'punctuatedAtMs';
const STATE_LAYOUT_KEY = 'stateLayout';


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
 *                 schedule is due; the replay and the test harness run the same task;
 *   4. flush    - pending store writes become changelog records (compacted topics);
 *   5. commit   - outputs, changelog records, dead letters and the input offset
 *                 (`sendOffsets`, last offset + 1) are committed in ONE transaction.
 * Only after the commit do the stores fold in their pending writes; an abort
 * rolls them back and seeks the partition back, so state never runs ahead.
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
 */
export class ConsumerRunner<S extends Stores = Stores> {
  private consumer?: GroupConsumer;
  private readonly client: StreamClient;
  private readonly loop: LoopSettings;
  /** Processor mode's options; undefined in sink mode. */
  private readonly processing?: ConsumerRunnerOptions<S>;
  private readonly sinkRun?: SinkRun;
  private readonly tasks = new Map<number, Task<S>>();
  private assigned: Set<number> | undefined;
  private readonly log: Logger;
  private readonly maxRecords: number;
  private readonly count: (metric: string, labels?: Record<string, string>) => void;
  private readonly now: () => number;
  private stopping = false;
  private paused = false;
  private admin?: StreamAdmin;
  private poller?: NodeJS.Timeout;
  private restarting = false;

  /** Sink mode: selected records of `options.topic` written in batches to an idempotent sink. */
  static sink<T>(options: SinkModeOptions<T>): ConsumerRunner {
    return new ConsumerRunner(options as SinkModeOptions<unknown>);
  }

  /** Processor mode (or sink mode, which {@link ConsumerRunner.sink} types by its items). */
  constructor(options: ConsumerRunnerOptions<S> | SinkModeOptions<unknown>) {
    const sessionTimeoutMs = options.sessionTimeoutMs ?? 30_000;
    const client = options.client ?? new KafkajsStreamClient(options.kafka);
    if ('processor' in options) {
      this.processing = options;
      this.loop = {
        groupId: options.appId,
        topics: options.inputTopics,
        codec: options.codec,
        client,
        sessionTimeoutMs,
        deadLetterTopic: options.deadLetterTopic,
        deadLetterProcessor: options.processor.name,
        maxDeadLetterBytes: options.maxDeadLetterBytes,
        metricPrefix: 'stream',
      };
      this.log = options.logger ?? new Logger('consumer-runner', { appId: options.appId });
      this.maxRecords = options.maxRecordsPerTransaction ?? 500;
    } else {
      this.sinkRun = { options, partitions: new SinkPartitions((pending) => options.batchSize(pending)) };
      this.loop = {
        groupId: options.groupId,
        topics: [options.topic],
        codec: options.codec,
        client,
        sessionTimeoutMs,
        deadLetterTopic: options.deadLetterTopic,
        deadLetterProcessor: options.processorName ?? options.groupId,
        maxDeadLetterBytes: options.maxDeadLetterBytes,
        metricPrefix: 'sink',
      };
      this.log = options.logger ?? new Logger('consumer-runner', { groupId: options.groupId, topic: options.topic });
      this.maxRecords = Infinity;
    }
    this.count = options.count ?? (() => undefined);
    this.now = options.now ?? Date.now;
    this.client = client;
  }

  /** Processor mode's options (its code paths only). */
  private get options(): ConsumerRunnerOptions<S> {
    if (!this.processing) throw new Error('ConsumerRunner: processor-mode path reached in sink mode');
    return this.processing;
  }

  async start(): Promise<void> {
    if (this.sinkRun) {
      // Sink mode has no changelogs and no idle punctuation: the consumer and the dead-letter producer.
      const { kafka, deadLetterTopic } = this.sinkRun.options;
      if (deadLetterTopic) {
        this.sinkRun.dlqProducer = kafka.producer({ idempotent: true, createPartitioner: Partitioners.DefaultPartitioner });
        await this.sinkRun.dlqProducer.connect();
      }
      await this.startConsumer();
      return;
    }
    await this.ensureChangelogTopics();
    await this.startConsumer();
    this.admin = await this.client.admin();
    let polling = false;
    this.poller = setInterval(() => {
      if (polling) return;
      polling = true;
      this.pollIdle()
        .catch((e) => this.log.warn('idle poll failed', { error: errorMessage(e) }))
        .finally(() => (polling = false));
    }, this.options.idlePollMs ?? 1000);
  }

  private async startConsumer(): Promise<void> {
    const { sessionTimeoutMs } = this.loop;
    const consumer = this.client.groupConsumer({
      groupId: this.loop.groupId,
      topics: this.loop.topics,
      sessionTimeoutMs,
      rebalanceTimeoutMs: 60_000,
      heartbeatIntervalMs: Math.min(3_000, Math.floor(sessionTimeoutMs / 3)),
      maxWaitMs: 250,
    });
    this.consumer = consumer;
    if (this.paused) consumer.pause();
    await consumer.start({
      onAssignment: (partitions) => {
        this.assigned = new Set(partitions);
        this.sinkRun?.partitions.retain(partitions);
        this.log.info('assignment', { partitions: [...partitions].sort((a, b) => a - b) });
      },
      onFatal: (error) => {
        if (!this.stopping) void this.restartConsumer(errorMessage(error));
      },
      onBatch: (batch) => this.onBatch(batch),
    });
  }

  /**
   * Replaces a crashed consumer; tasks are rebuilt from their changelogs on the next batch,
   * and the sink mode's unwritten items are read again from the committed offsets.
   */
  private async restartConsumer(reason: string): Promise<void> {
    if (this.restarting) return;
    this.restarting = true;
    this.log.warn('consumer crashed; recreating it', { reason });
    this.count(`${this.loop.metricPrefix}_consumer_restarts_total`);
    try {
      const old = this.consumer;
      this.consumer = undefined;
      await old?.stop().catch(() => undefined);
      for (const p of [...this.tasks.keys()]) await this.closeTask(p);
      this.sinkRun?.partitions.clear();
      await retry(() => this.startConsumer(), {
        initialDelayMs: 500,
        linearStepMs: 500,
        maxDelayMs: 10_000,
        retryIf: () => true,
        stopped: () => this.stopping,
        onRetry: (e, attempt) => this.log.warn('consumer restart failed; retrying', { attempt, error: errorMessage(e) }),
      }).catch(() => undefined);
    } finally {
      this.restarting = false;
    }
  }

  async stop(): Promise<void> {
    this.stopping = true;
    if (this.poller) clearInterval(this.poller);
    await this.admin?.close().catch(() => undefined);
    await this.consumer?.stop().catch((e) => this.log.warn('consumer disconnect failed', { error: errorMessage(e) }));
    await this.sinkRun?.dlqProducer?.disconnect().catch(() => undefined);
    for (const task of this.tasks.values()) {
      await task.producer.close().catch(() => undefined);
      task.state.close();
    }
    this.tasks.clear();
  }

  /** Stops handing batches over (the one in progress finishes); the membership stays. Survives a consumer restart. */
  pause(): void {
    this.paused = true;
    this.consumer?.pause();
  }

  resume(): void {
    this.paused = false;
    this.consumer?.resume();
  }

  get isPaused(): boolean {
    return this.paused;
  }

  /** Open tasks and their store sizes (for metrics and tests). */
  taskStats(): { partition: number; streamTimeMs: number; stores: Record<string, number> }[] {
    return [...this.tasks.values()].map((t) => ({
      partition: t.partition,
      streamTimeMs: t.streamTask.streamTimeMs,
      stores: Object.fromEntries(t.state.list.map((s) => [s.name, s.size])),
    }));
  }

  private async onBatch(batch: InputBatch): Promise<void> {
    if (batch.records.length === 0 || !batch.isActive() || this.stopping) return;
    if (this.sinkRun) return this.onSinkBatch(this.sinkRun, batch);
    await this.closeRevokedTasks();
    const task = await this.task(batch.partition);
    await this.options.syncGlobalState?.(batch.topic);
    // A client may hand over records again (a rebalance, a reopened stream): those before the
    // committed position are done and were committed with their effects.
    const position = task.positions.get(batch.topic) as InputPosition;
    let done = 0;
    while (done < batch.records.length && batch.records[done].offset < position.nextOffset) done++;
    if (done > 0) batch.resolve(batch.records[done - 1].offset);
    const records = done === 0 ? batch.records : batch.records.slice(done);
    for (let i = 0; i < records.length; i += this.maxRecords) {
      if (!batch.isActive() || this.stopping) return;
      const chunk = records.slice(i, i + this.maxRecords);
      const ok = await this.withLock(task, () => this.processChunk(task, batch.topic, chunk));
      if (!ok) return;
      batch.resolve(chunk[chunk.length - 1].offset);
      await batch.heartbeat();
    }
  }

  /**
   * Sink mode, phases 1-5 for one fetched batch: each record not read before is decoded,
   * dead-lettered or selected, and resolved (the client fetches on from it); whenever the
   * pending items make a complete batch it is written and the offset of the first record
   * not yet written is committed. Items left pending by an interrupted write (a failure, a
   * rebalance that kept the partition here) are written first.
   */
  private async onSinkBatch(sink: SinkRun, batch: InputBatch): Promise<void> {
    const { topic, partition } = batch;
    const state = sink.partitions;
    await this.writeCompleteBatches(sink, batch);
    // Confluent-framed input: load unknown writer schemas from the registry first (no-op otherwise).
    await this.loop.codec.prefetch(batch.records.map((m) => m.value));
    for (const m of batch.records) {
      if (!batch.isActive() || this.stopping) return;
      if (state.wasRead(partition, m.offset)) {
        batch.resolve(m.offset);
        continue;
      }
      const decoded = decodeRecord(this.loop.codec, { topic, partition, offset: m.offset, key: m.key, value: m.value, timestampMs: m.timestampMs });
      let item: unknown = null;
      if ('record' in decoded) item = sink.options.select(decoded.record);
      else await this.sendDeadLetter(sink, { key: decoded.failed.key, raw: decoded.failed.value, source: { topic, partition, offset: m.offset } }, decoded.reasonCode, decoded.reason);
      state.read(partition, m.offset, item);
      batch.resolve(m.offset);
      await this.writeCompleteBatches(sink, batch);
      await batch.heartbeat();
    }
    // Nothing waits for the sink: what was read (skipped or dead-lettered) is done.
    if (!state.hasPending(partition)) await this.commitSink(batch.topic, partition, state);
  }

  private async writeCompleteBatches(sink: SinkRun, batch: InputBatch): Promise<void> {
    const state = sink.partitions;
    for (let items = state.nextBatch(batch.partition); items && !this.stopping; items = state.nextBatch(batch.partition)) {
      await this.writeWithRetry(sink, items, batch.heartbeat);
      state.written(batch.partition, items.length);
      await this.commitSink(batch.topic, batch.partition, state);
    }
  }

  /** Commits the first offset whose record is not yet written (or everything read). */
  private async commitSink(topic: string, partition: number, state: SinkPartitions<unknown>): Promise<void> {
    const offset = state.commitOffset(partition);
    if (offset !== undefined) await this.consumer?.commit(topic, partition, offset);
  }

  private async writeWithRetry(sink: SinkRun, items: readonly unknown[], heartbeat: () => Promise<void>): Promise<void> {
    const step = sink.options.retryDelayMs ?? 1000;
    await retry(() => sink.options.write(items), {
      initialDelayMs: step,
      linearStepMs: step,
      maxDelayMs: 30_000,
      // A shutdown ends the retries: the batch stays uncommitted and is read again.
      retryIf: (e) => isRetriable(e) && !this.stopping,
      onRetry: (e, attempt) => {
        this.count('sink_retries_total');
        this.log.warn('sink write failed; retrying', { attempt, error: errorMessage(e) });
      },
      // Waiting out a write must not cost the group membership.
      sleep: async (ms) => {
        await heartbeat();
        await sleep(ms);
      },
    });
    this.count('sink_batches_total');
  }

  /** Sink mode's dead letter: written (acks=all) before the record's offset can be committed. */
  private async sendDeadLetter(sink: SinkRun, original: DeadLetterOriginal, reasonCode: string, reason: string): Promise<void> {
    const record = this.deadLetterRecord(original, reasonCode, reason, {});
    if (!sink.dlqProducer || !record) return;
    await sink.dlqProducer.send({ topic: record.topic, acks: -1, messages: [{ key: record.key, value: record.value }] });
  }

  private async processChunk(task: Task<S>, topic: string, messages: FetchedRecord[]): Promise<boolean> {
    const { codec } = this.options;
    // Confluent-framed input: load unknown writer schemas from the registry first (no-op otherwise).
    await codec.prefetch(messages.map((m) => m.value));
    task.outputs = [];
    task.deadLetters = 0;
    const clockBefore = task.streamTask.clock();
    const position = task.positions.get(topic) as InputPosition;
    try {
      for (const m of messages) {
        task.streamTask.feed(decodeRecord(codec, { topic, partition: task.partition, offset: m.offset, key: m.key, value: m.value, timestampMs: m.timestampMs }));
      }
    } catch (e) {
      // A retriable failure (or a bug) mid-chunk: nothing of the chunk happened.
      task.streamTask.restoreClock(clockBefore);
      task.state.rollback();
      throw e;
    }
    const lastOffset = messages[messages.length - 1].offset;
    const nextOffsetBefore = position.nextOffset;
    position.nextOffset = lastOffset + 1;
    this.refreshUnread(task);
    task.streamTask.punctuate();
    this.persistClock(task, clockBefore);
    this.flushChangelogs(task, task.outputs);
    let changelogOffsets: Record<string, number>;
    try {
      changelogOffsets = await this.commitTransaction(task, { topic, lastOffset }, task.outputs);
    } catch (e) {
      task.streamTask.restoreClock(clockBefore);
      position.nextOffset = nextOffsetBefore;
      task.state.rollback();
      this.count('stream_transaction_aborts_total', { reason: errorName(e) });
      const fenced = this.client.isFencing(e);
      this.log.warn('transaction aborted; seeking back', {
        topic,
        partition: task.partition,
        offset: messages[0].offset,
        error: errorMessage(e),
        fenced,
      });
      // A producer whose transaction failed midway (broker gone, request timed out) may be
      // left mid-transaction; it is never reused. The task is rebuilt on the next batch: a
      // fresh producer with the same transactional id aborts whatever the old one left open,
      // and state is restored from the changelog, which holds only committed writes.
      await this.closeTask(task.partition);
      this.consumer?.seek(topic, task.partition, messages[0].offset);
      if (!fenced && this.client.isRetriable(e)) await sleep(500);
      return false;
    }
    if (!(await this.commitStores(task, changelogOffsets))) return false;
    this.count('stream_records_in_total', { topic });
    this.count('stream_transactions_total');
    if (task.deadLetters > 0) this.log.info('dead-lettered records', { topic, partition: task.partition, count: task.deadLetters });
    return true;
  }

  /**
   * Tells the task which inputs are caught up (as of the last end-offset poll): those do not
   * hold its watermark back. One offset of slack: a transaction's commit marker occupies the
   * last offset. A partition never polled holds it at its latest event time.
   */
  private refreshUnread(task: Task<S>): void {
    for (const [topic, p] of task.positions) task.streamTask.setUnread(topic, !(p.high !== undefined && p.nextOffset >= p.high - 1));
  }

  /** Writes what moved of the task's clock into the meta store, so it is changelogged with the transaction. */
  private persistClock(task: Task<S>, before: TaskClock): void {
    const now = task.streamTask.clock();
    const meta = task.state.meta;
    if (now.streamTimeMs !== before.streamTimeMs) meta.put(STREAM_TIME_KEY, now.streamTimeMs);
    for (const [topic, t] of Object.entries(now.maxEventMs)) if (t !== before.maxEventMs[topic]) meta.put(`${MAX_EVENT_PREFIX}${topic}`, t);
    if (now.punctuatedAtMs !== undefined && now.punctuatedAtMs !== before.punctuatedAtMs) meta.put(PUNCTUATED_AT_KEY, now.punctuatedAtMs);
  }

  private flushChangelogs(task: Task<S>, outputs: PendingOutput[]): void {
    for (const store of task.state.list) {
      if (!store.dirty) continue;
      const topic = changelogTopic(this.options.appId, store.name);
      for (const r of store.changelogRecords()) outputs.push({ topic, key: r.key, value: r.value, partition: task.partition });
    }
  }

  private withLock<T>(task: Task<S>, fn: () => Promise<T>): Promise<T> {
    const run = task.lock.then(fn, fn);
    task.lock = run.catch(() => undefined);
    return run;
  }

  /** Polls input end offsets; an idle task whose watermark moved gets a punctuation transaction. */
  private async pollIdle(): Promise<void> {
    if (this.tasks.size === 0 || this.stopping) return;
    const admin = this.admin;
    if (!admin) return;
    for (const topic of this.options.inputTopics) {
      for (const o of await admin.endOffsets(topic)) {
        const position = this.tasks.get(o.partition)?.positions.get(topic);
        if (position) position.high = o.high;
      }
    }
    for (const task of [...this.tasks.values()]) {
      if (this.stopping || this.tasks.get(task.partition) !== task) continue;
      this.refreshUnread(task);
      if (!task.streamTask.punctuationDue()) continue;
      await this.withLock(task, () => this.idlePunctuation(task));
    }
  }

  private async idlePunctuation(task: Task<S>): Promise<void> {
    if (this.tasks.get(task.partition) !== task) return;
    task.outputs = [];
    task.deadLetters = 0;
    const clockBefore = task.streamTask.clock();
    this.refreshUnread(task);
    if (!task.streamTask.punctuate()) return;
    this.persistClock(task, clockBefore);
    this.flushChangelogs(task, task.outputs);
    if (task.outputs.length === 0) return;
    let changelogOffsets: Record<string, number>;
    try {
      changelogOffsets = await this.commitTransaction(task, null, task.outputs);
    } catch (e) {
      task.streamTask.restoreClock(clockBefore);
      task.state.rollback();
      this.log.warn('punctuation aborted', { partition: task.partition, error: errorMessage(e) });
      await this.closeTask(task.partition);
      return;
    }
    await this.commitStores(task, changelogOffsets);
  }

  /**
   * After the Kafka commit: the transaction's writes become the stores' committed state. A
   * local copy that cannot take them (disk full, I/O error) is left at its previous
   * checkpoint, which is consistent: the task is closed and rebuilt from the copy and the
   * changelog tail, which holds this transaction.
   */
  private async commitStores(task: Task<S>, changelogOffsets: Record<string, number>): Promise<boolean> {
    try {
      task.state.commit(changelogOffsets);
      return true;
    } catch (e) {
      this.log.warn('local state write failed after the commit; rebuilding the task from the changelog', { partition: task.partition, error: errorMessage(e) });
      await this.closeTask(task.partition);
      return false;
    }
  }

  /**
   * Commits one transaction; returns, per changelog topic written, an offset up to which the
   * changelog partition now holds this task's state: the next offset after this
   * transaction's records when the broker reported them as one batch, else the first of
   * them (never past them: a local copy checkpointed there re-reads at most this
   * transaction's records, which are whole values, on restore).
   */
  private async commitTransaction(task: Task<S>, input: { topic: string; lastOffset: number } | null, outputs: PendingOutput[]): Promise<Record<string, number>> {
    const tx = await task.producer.begin();
    const changelogOffsets: Record<string, number> = {};
    try {
      if (outputs.length > 0) {
        const sent = await tx.send(outputs);
        const prefix = `${this.options.appId}.`;
        const counts = new Map<string, number>();
        for (const o of outputs) if (o.topic.startsWith(prefix) && o.topic.endsWith('.changelog')) counts.set(o.topic, (counts.get(o.topic) ?? 0) + 1);
        for (const [t, n] of counts) {
          const batches = sent.filter((m) => m.topic === t && m.partition === task.partition);
          if (batches.length === 0) continue;
          const first = Math.min(...batches.map((m) => m.baseOffset));
          changelogOffsets[t] = batches.length === 1 ? first + n : first;
        }
      }
      if (input) await tx.sendOffsets(this.options.appId, input.topic, task.partition, input.lastOffset + 1);
      await tx.commit();
    } catch (e) {
      if (!this.client.isFencing(e)) await tx.abort().catch(() => undefined);
      throw e;
    }
    return changelogOffsets;
  }

  /** Where the task's effects go: into the open transaction's outputs. */
  private sinkOf(task: Task<S>): TaskSink {
    const { codec, processor } = this.options;
    return {
      emit: (o: OutputRecord) => {
        task.outputs.push({ topic: o.topic, key: o.key, value: codec.encode(o.type, o.value as never) });
        this.count('stream_records_out_total', { topic: o.topic });
      },
      deadLetter: (original, reasonCode, reason, details) => {
        task.deadLetters++;
        this.pushDeadLetter(task.outputs, original, reasonCode, reason, details);
      },
      count: (metric, labels) => this.count(`${processor.name}_${metric}`, labels),
    };
  }

  private pushDeadLetter(outputs: PendingOutput[], original: DeadLetterOriginal, reasonCode: string, reason: string, details: Record<string, string>): void {
    const record = this.deadLetterRecord(original, reasonCode, reason, details);
    if (record) outputs.push(record);
  }

  /** Counts and logs a dead letter; the record to write, or undefined when there is no dead-letter topic. */
  private deadLetterRecord(original: DeadLetterOriginal, reasonCode: string, reason: string, details: Record<string, string>): { topic: string; key: Buffer | null; value: Buffer } | undefined {
    this.count('deadletter_total', { reason: reasonCode });
    this.log.warn('dead letter', { ...original.source, reasonCode, reason });
    const topic = this.loop.deadLetterTopic;
    if (!topic) return undefined;
    const key = typeof original.key === 'string' ? Buffer.from(original.key) : original.key;
    const dl = deadLetterOf({ key, value: original.raw, source: original.source }, reasonCode, reason, this.loop.deadLetterProcessor, details, this.now());
    return { topic, key, value: this.encodeDeadLetter(dl) };
  }

  private encodeDeadLetter(dl: DeadLetter): Buffer {
    const { bytes, omitted } = encodeDeadLetter(this.loop.codec, dl, this.loop.maxDeadLetterBytes);
    if (omitted) this.log.warn('dead letter without its bytes: too large; they stay at the source coordinates', { ...dl.source, bytes: dl.originalValue?.length });
    return bytes;
  }

  private async task(partition: number): Promise<Task<S>> {
    const existing = this.tasks.get(partition);
    if (existing) return existing;
    const wanted = new Set([partition, ...(this.assigned ?? [])].filter((p) => !this.tasks.has(p)));
    await this.initTasks([...wanted]);
    return this.tasks.get(partition) as Task<S>;
  }

  /** Fences earlier owners and restores state of several tasks in one changelog pass. */
  private async initTasks(partitions: number[]): Promise<void> {
    const { kafka, appId, processor } = this.options;
    const producers = await Promise.all(
      partitions.map(async (p) => [p, await this.client.transactionalProducer(`${appId}-${p}`, { transactionTimeoutMs: 60_000 })] as const),
    );
    // After every producer is initialised, no earlier owner can commit anything for these tasks.
    let restored: Map<number, TaskStores>;
    try {
      restored = await restoreTaskStores(
        {
          kafka,
          appId,
          processor,
          serdes: this.options.serdes,
          stateDir: this.options.stateDir,
          cacheSize: this.options.stateCacheSize,
          duringLocalWrite: this.options.duringLocalWrite,
          log: this.log,
        },
        partitions,
      );
    } catch (e) {
      for (const [, producer] of producers) await producer.close().catch(() => undefined);
      throw e;
    }
    const committed = await this.committedOffsets();
    const { inputTopics } = this.options;
    for (const [p, producer] of producers) {
      const state = restored.get(p) as TaskStores;
      const meta = state.meta;
      const clock: TaskClock = {
        streamTimeMs: meta.get(STREAM_TIME_KEY) ?? 0,
        maxEventMs: Object.fromEntries(inputTopics.map((t) => [t, meta.get(`${MAX_EVENT_PREFIX}${t}`) ?? -Infinity])),
        ...(meta.has(PUNCTUATED_AT_KEY) ? { punctuatedAtMs: meta.get(PUNCTUATED_AT_KEY) as number } : {}),
      };
      const task: Task<S> = {
        partition: p,
        producer,
        streamTask: undefined as unknown as StreamTask<S>,
        state,
        positions: new Map(inputTopics.map((t) => [t, { nextOffset: committed.get(`${t}:${p}`) ?? 0 }])),
        outputs: [],
        deadLetters: 0,
        lock: Promise.resolve(),
      };
      task.streamTask = new StreamTask(processor, p, state.byName as unknown as S, this.sinkOf(task), { inputs: inputTopics, clock });
      // Its writes go out with the task's first transaction, and so does the layout it reached.
      if (processor.stateLayout === undefined || meta.get(STATE_LAYOUT_KEY) !== processor.stateLayout) {
        task.streamTask.migrate();
        if (processor.stateLayout !== undefined) meta.put(STATE_LAYOUT_KEY, processor.stateLayout);
      }
      this.tasks.set(p, task);
      this.log.info('task ready', { partition: p, restoredRecords: state.restoredRecords, local: this.options.stateDir !== undefined, streamTimeMs: clock.streamTimeMs });
    }
  }

  private async committedOffsets(): Promise<Map<string, number>> {
    const admin = await this.client.admin();
    try {
      return await admin.committedOffsets(this.options.appId, this.options.inputTopics);
    } finally {
      await admin.close();
    }
  }

  private async closeRevokedTasks(): Promise<void> {
    if (!this.assigned) return;
    for (const p of [...this.tasks.keys()]) if (!this.assigned.has(p)) await this.closeTask(p);
  }

  private async closeTask(partition: number): Promise<void> {
    const task = this.tasks.get(partition);
    if (!task) return;
    this.tasks.delete(partition);
    await task.producer.close().catch(() => undefined);
    task.state.close();
    this.log.info('task closed', { partition });
  }

  private async ensureChangelogTopics(): Promise<void> {
    const { appId, processor, partitions } = this.options;
    const admin = await this.client.admin();
    try {
      const existing = new Set(await admin.listTopics());
      const topics = [...processor.storeNames, META_STORE]
        .map((n) => changelogTopic(appId, n))
        .filter((t) => !existing.has(t))
        .map((topic) => ({ topic, partitions, configs: { 'cleanup.policy': 'compact', 'min.compaction.lag.ms': '0' } }));
      if (topics.length > 0) await admin.createTopics(topics);
    } finally {
      await admin.close();
    }
  }
}

function errorName(e: unknown): string {
  return (e as { type?: string } | null)?.type ?? (e as { apiId?: string } | null)?.apiId ?? (e as Error | null)?.name ?? 'Error';
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
