import { Kafka } from 'kafkajs';
import { errorMessage, Logger } from '@srpo/core';
import { EventCodec } from '@srpo/events';
import type { FetchedRecord, InputBatch, StreamAdmin, StreamClient } from './client/stream-client';
import { StoreSerde } from './key-value-store';
import type { LoopContext, LoopMode } from './loop-mode';
import { Processor, Stores } from './processor';
import { flushChangelogs, InputPosition, persistClock, ProcessorTasks, refreshUnread, Task, withLock } from './processor-tasks';
import { decodeRecord, TaskClock } from './stream-task';
import { changelogTopic, META_STORE } from './task-stores';

/** {@link ConsumerRunner}'s processor mode: exactly-once Kafka-to-Kafka processing with local state. */
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

/**
 * The processor mode's phases for {@link ConsumerRunner}: per chunk of a fetched batch,
 * decode and process on the task's `StreamTask`, flush its stores' writes to their
 * changelogs and commit one transaction (then the stores fold the writes in); between
 * batches, an idle poll lets tasks whose watermark moved punctuate in a transaction of
 * their own. Tasks, their producers and stores are {@link ProcessorTasks}'.
 */
export class ProcessorMode<S extends Stores> implements LoopMode {
  readonly tasks: ProcessorTasks<S>;
  private readonly maxRecords: number;
  private admin?: StreamAdmin;
  private poller?: NodeJS.Timeout;

  constructor(
    private readonly options: ConsumerRunnerOptions<S>,
    private readonly loop: LoopContext,
  ) {
    this.tasks = new ProcessorTasks(options, loop);
    this.maxRecords = options.maxRecordsPerTransaction ?? 500;
  }

  async open(): Promise<void> {
    await this.ensureChangelogTopics();
  }

  /** Starts the idle poll: input end offsets, so that idle inputs stop holding watermarks back. */
  async afterStart(): Promise<void> {
    this.admin = await this.loop.client.admin();
    let polling = false;
    this.poller = setInterval(() => {
      if (polling) return;
      polling = true;
      this.pollIdle()
        .catch((e) => this.loop.log.warn('idle poll failed', { error: errorMessage(e) }))
        .finally(() => (polling = false));
    }, this.options.idlePollMs ?? 1000);
  }

  onAssignment(partitions: ReadonlySet<number>): void {
    this.tasks.assign(partitions);
  }

  /** Tasks are rebuilt from their changelogs on their next batch. */
  async reset(): Promise<void> {
    await this.tasks.closeAll();
  }

  async stopBackground(): Promise<void> {
    if (this.poller) clearInterval(this.poller);
    await this.admin?.close().catch(() => undefined);
  }

  async close(): Promise<void> {
    await this.tasks.stop();
  }

  /** Phase 1 for one fetched batch (the task, global state, redelivery skip), then one transaction per chunk. */
  async onBatch(batch: InputBatch): Promise<void> {
    await this.tasks.closeRevoked();
    const task = await this.tasks.task(batch.partition);
    await this.options.syncGlobalState?.(batch.topic);
    // A client may hand over records again (a rebalance, a reopened stream): those before the
    // committed position are done and were committed with their effects.
    const position = task.positions.get(batch.topic) as InputPosition;
    let done = 0;
    while (done < batch.records.length && batch.records[done].offset < position.nextOffset) done++;
    if (done > 0) batch.resolve(batch.records[done - 1].offset);
    const records = done === 0 ? batch.records : batch.records.slice(done);
    for (let i = 0; i < records.length; i += this.maxRecords) {
      if (!batch.isActive() || this.loop.stopping()) return;
      const chunk = records.slice(i, i + this.maxRecords);
      const ok = await withLock(task, () => this.processChunk(task, batch.topic, chunk));
      if (!ok) return;
      batch.resolve(chunk[chunk.length - 1].offset);
      await batch.heartbeat();
    }
  }

  /** Phases 2-5 for one chunk: false when its transaction did not commit (the partition was sought back). */
  private async processChunk(task: Task<S>, topic: string, messages: FetchedRecord[]): Promise<boolean> {
    // Confluent-framed input: load unknown writer schemas from the registry first (no-op otherwise).
    await this.options.codec.prefetch(messages.map((m) => m.value));
    task.outputs = [];
    task.deadLetters = 0;
    const clockBefore = task.streamTask.clock();
    const position = task.positions.get(topic) as InputPosition;
    this.feed(task, topic, messages, clockBefore);
    const lastOffset = messages[messages.length - 1].offset;
    const nextOffsetBefore = position.nextOffset;
    position.nextOffset = lastOffset + 1;
    refreshUnread(task);
    task.streamTask.punctuate();
    persistClock(task, clockBefore);
    flushChangelogs(this.options.appId, task);
    let changelogOffsets: Record<string, number>;
    try {
      changelogOffsets = await this.commitTransaction(task, { topic, lastOffset });
    } catch (e) {
      task.streamTask.restoreClock(clockBefore);
      position.nextOffset = nextOffsetBefore;
      task.state.rollback();
      await this.abortChunk(task, topic, messages[0].offset, e);
      return false;
    }
    if (!(await this.commitStores(task, changelogOffsets))) return false;
    this.loop.count('stream_records_in_total', { topic });
    this.loop.count('stream_transactions_total');
    if (task.deadLetters > 0) this.loop.log.info('dead-lettered records', { topic, partition: task.partition, count: task.deadLetters });
    return true;
  }

  /** Phases 2-3: decodes each record and runs the task on it. */
  private feed(task: Task<S>, topic: string, messages: FetchedRecord[], clockBefore: TaskClock): void {
    const { codec } = this.options;
    try {
      for (const m of messages) {
        task.streamTask.feed(
          decodeRecord(codec, { topic, partition: task.partition, offset: m.offset, key: m.key, value: m.value, timestampMs: m.timestampMs }),
        );
      }
    } catch (e) {
      // A retriable failure (or a bug) mid-chunk: nothing of the chunk happened.
      task.streamTask.restoreClock(clockBefore);
      task.state.rollback();
      throw e;
    }
  }

  /** After a failed transaction (the task's clock, position and stores already rolled back). */
  private async abortChunk(task: Task<S>, topic: string, firstOffset: number, e: unknown): Promise<void> {
    this.loop.count('stream_transaction_aborts_total', { reason: errorName(e) });
    const fenced = this.loop.client.isFencing(e);
    this.loop.log.warn('transaction aborted; seeking back', {
      topic,
      partition: task.partition,
      offset: firstOffset,
      error: errorMessage(e),
      fenced,
    });
    // A producer whose transaction failed midway (broker gone, request timed out) may be
    // left mid-transaction; it is never reused. The task is rebuilt on the next batch: a
    // fresh producer with the same transactional id aborts whatever the old one left open,
    // and state is restored from the changelog, which holds only committed writes.
    await this.tasks.closeTask(task.partition);
    this.loop.consumer.seek(topic, task.partition, firstOffset);
    if (!fenced && this.loop.client.isRetriable(e)) await sleep(500);
  }

  /** Polls input end offsets; an idle task whose watermark moved gets a punctuation transaction. */
  private async pollIdle(): Promise<void> {
    if (this.tasks.size === 0 || this.loop.stopping()) return;
    const admin = this.admin;
    if (!admin) return;
    for (const topic of this.options.inputTopics) {
      for (const o of await admin.endOffsets(topic)) {
        const position = this.tasks.get(o.partition)?.positions.get(topic);
        if (position) position.high = o.high;
      }
    }
    for (const task of this.tasks.list()) {
      if (this.loop.stopping() || this.tasks.get(task.partition) !== task) continue;
      refreshUnread(task);
      if (!task.streamTask.punctuationDue()) continue;
      await withLock(task, () => this.idlePunctuation(task));
    }
  }

  private async idlePunctuation(task: Task<S>): Promise<void> {
    if (this.tasks.get(task.partition) !== task) return;
    task.outputs = [];
    task.deadLetters = 0;
    const clockBefore = task.streamTask.clock();
    refreshUnread(task);
    if (!task.streamTask.punctuate()) return;
    persistClock(task, clockBefore);
    flushChangelogs(this.options.appId, task);
    if (task.outputs.length === 0) return;
    let changelogOffsets: Record<string, number>;
    try {
      changelogOffsets = await this.commitTransaction(task, null);
    } catch (e) {
      task.streamTask.restoreClock(clockBefore);
      task.state.rollback();
      this.loop.log.warn('punctuation aborted', { partition: task.partition, error: errorMessage(e) });
      await this.tasks.closeTask(task.partition);
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
      this.loop.log.warn('local state write failed after the commit; rebuilding the task from the changelog', {
        partition: task.partition,
        error: errorMessage(e),
      });
      await this.tasks.closeTask(task.partition);
      return false;
    }
  }

  /**
   * Phase 5, commit: the task's outputs, changelog records and dead letters and the input
   * offset in one transaction. Returns, per changelog topic written, an offset up to which
   * the changelog partition now holds this task's state: the next offset after this
   * transaction's records when the broker reported them as one batch, else the first of
   * them (never past them: a local copy checkpointed there re-reads at most this
   * transaction's records, which are whole values, on restore).
   */
  private async commitTransaction(task: Task<S>, input: { topic: string; lastOffset: number } | null): Promise<Record<string, number>> {
    const outputs = task.outputs;
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
      if (!this.loop.client.isFencing(e)) await tx.abort().catch(() => undefined);
      throw e;
    }
    return changelogOffsets;
  }

  private async ensureChangelogTopics(): Promise<void> {
    const { appId, processor, partitions } = this.options;
    const admin = await this.loop.client.admin();
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
