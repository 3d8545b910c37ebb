import { Kafka } from 'kafkajs';
import { errorMessage, isRetriable, Logger } from '@srpo/core';
import { EventCodec, KafkaCoordinates, ReasonCode } from '@srpo/events';
import type { FetchedRecord, InputBatch, StreamAdmin, StreamClient } from './client/stream-client';
import { StoreSerde } from './key-value-store';
import type { LoopContext, LoopMode } from './loop-mode';
import { Processor, Stores } from './processor';
import { ProcessingAttempts } from './processing-attempts';
import { commitTransaction, flushChangelogs, InputPosition, persistClock, ProcessorTasks, refreshUnread, Task, withLock } from './processor-tasks';
import { decodeRecord, TaskClock } from './stream-task';

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
  /**
   * Times the processor may throw on one record before the record is dead-lettered as
   * `PROCESSING_FAILED` and its partition moves on (default 3; see {@link ProcessingAttempts}).
   * Errors the processor marks retriable, and failures of the transaction, are retried
   * without counting.
   */
  maxProcessingAttempts?: number;
  /** Counter sink (metrics); the runner counts records, transactions, aborts, dead letters and poison records. */
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

/** The processor's throw on one record of a chunk (the rest of the chunk was not fed). */
interface RecordFailure {
  source: KafkaCoordinates;
  error: unknown;
}

/**
 * The processor mode's phases for {@link ConsumerRunner}: per chunk of a fetched batch,
 * decode and process on the task's `StreamTask`, punctuate, flush its stores' writes to
 * their changelogs and commit one transaction (then the stores fold the writes in); between
 * batches, an idle poll lets tasks whose watermark moved punctuate in a transaction of
 * their own. Whatever a chunk or a punctuation emits or writes is inside its transaction's
 * rollback: a throw before the commit or a failed commit takes the task's clock, position
 * and pending writes back, and the same work is done again (the chunk re-read from the
 * input, the idle punctuation at the next poll, on a task rebuilt from its changelog where
 * the transaction failed). A record the processor throws on is retried without counting
 * against any other; after `maxProcessingAttempts` it is dead-lettered ({@link ProcessingAttempts}).
 * Tasks, their producers and stores are {@link ProcessorTasks}'.
 */
export class ProcessorMode<S extends Stores> implements LoopMode {
  readonly tasks: ProcessorTasks<S>;
  private readonly maxRecords: number;
  private readonly attempts: ProcessingAttempts;
  /** Assigned partitions whose idle punctuation's transaction failed: their tasks are reopened by the idle poll. */
  private readonly reopen = new Set<number>();
  private admin?: StreamAdmin;
  private poller?: NodeJS.Timeout;

  constructor(
    private readonly options: ConsumerRunnerOptions<S>,
    private readonly loop: LoopContext,
  ) {
    this.tasks = new ProcessorTasks(options, loop);
    this.maxRecords = options.maxRecordsPerTransaction ?? 500;
    this.attempts = new ProcessingAttempts(options.maxProcessingAttempts);
  }

  async open(): Promise<void> {
    await this.tasks.ensureChangelogTopics();
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
    this.attempts.retain(partitions);
    for (const p of [...this.reopen]) if (!partitions.has(p)) this.reopen.delete(p);
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

  /**
   * Phases 2-5 for one chunk: false when its transaction did not commit (the partition was
   * sought back). Decode, process, punctuation, flush and commit all happen inside one
   * try: whatever fails, the chunk's effects (outputs, dead letters, store writes, the
   * clock and position) are taken back and the chunk is read again.
   */
  private async processChunk(task: Task<S>, topic: string, messages: FetchedRecord[]): Promise<boolean> {
    // Confluent-framed input: load unknown writer schemas from the registry first (no-op otherwise).
    await this.options.codec.prefetch(messages.map((m) => m.value));
    task.outputs = [];
    task.deadLetters = 0;
    const clockBefore = task.streamTask.clock();
    const position = task.positions.get(topic) as InputPosition;
    const lastOffset = messages[messages.length - 1].offset;
    const nextOffsetBefore = position.nextOffset;
    let outcome: { committed: Record<string, number> } | { failed: RecordFailure };
    let inTransaction = false;
    let poison = 0;
    try {
      const { failed, poisoned } = this.feed(task, topic, messages);
      poison = poisoned;
      if (failed) outcome = { failed };
      else {
        position.nextOffset = lastOffset + 1;
        refreshUnread(task);
        task.streamTask.punctuate();
        persistClock(task, clockBefore);
        flushChangelogs(this.options.appId, task);
        inTransaction = true;
        outcome = { committed: await commitTransaction(this.options.appId, this.loop.client, task, { topic, lastOffset }) };
      }
    } catch (e) {
      this.rollback(task, clockBefore);
      position.nextOffset = nextOffsetBefore;
      await this.abortChunk(task, topic, messages[0].offset, e, inTransaction);
      return false;
    }
    if ('failed' in outcome) {
      this.rollback(task, clockBefore);
      await this.retryRecord(task, topic, messages[0].offset, outcome.failed);
      return false;
    }
    this.attempts.committed(topic, task.partition, lastOffset + 1);
    if (!(await this.commitStores(task, outcome.committed))) return false;
    this.loop.count('stream_records_in_total', { topic });
    this.loop.count('stream_transactions_total');
    for (let i = 0; i < poison; i++) this.loop.count('stream_poison_records_total', { topic });
    if (task.deadLetters > 0) this.loop.log.info('dead-lettered records', { topic, partition: task.partition, count: task.deadLetters });
    return true;
  }

  /**
   * Phases 2-3: decodes each record and runs the task on it; a record that used up its
   * attempts is dead-lettered instead (`PROCESSING_FAILED`). Returns the record the
   * processor threw on, if any: the chunk stops there; and how many poison records it
   * dead-lettered (counted once the transaction commits). A decoder's unexpected failure
   * (not the record's bytes: those are dead letters) is thrown, as a failed transaction is.
   */
  private feed(task: Task<S>, topic: string, messages: FetchedRecord[]): { failed?: RecordFailure; poisoned: number } {
    const { codec } = this.options;
    let poisoned = 0;
    for (const m of messages) {
      const decoded = decodeRecord(codec, { topic, partition: task.partition, offset: m.offset, key: m.key, value: m.value, timestampMs: m.timestampMs });
      // Undecodable bytes are dead-lettered by the task; they never reach the processor.
      if (!('record' in decoded)) {
        task.streamTask.feed(decoded);
        continue;
      }
      const source = decoded.record.source;
      const poison = this.attempts.exhausted(source);
      if (poison) {
        task.streamTask.deadLetter(decoded.record, ReasonCode.PROCESSING_FAILED, poison.error, { attempts: String(poison.attempts) });
        poisoned++;
        continue;
      }
      try {
        task.streamTask.process(decoded.record);
      } catch (error) {
        return { failed: { source, error }, poisoned };
      }
    }
    return { poisoned };
  }

  /** Takes back what a chunk or punctuation did before its transaction committed: the task's clock and pending store writes. */
  private rollback(task: Task<S>, clockBefore: TaskClock): void {
    task.streamTask.restoreClock(clockBefore);
    task.state.rollback();
  }

  /**
   * After the processor threw on a record (the chunk already rolled back; no transaction
   * was begun, so the task and its producer stay): counts the attempt unless the error is
   * marked retriable, and reads the chunk again. Once the record used up its attempts, the
   * next reading dead-letters it.
   */
  private async retryRecord(task: Task<S>, topic: string, firstOffset: number, failure: RecordFailure): Promise<void> {
    const retriable = isRetriable(failure.error);
    const attempts = retriable ? undefined : this.attempts.failed(failure.source, errorMessage(failure.error));
    this.loop.count('stream_processing_failures_total', { topic, retriable: String(retriable) });
    this.loop.log.warn('processor threw; retrying the chunk', {
      ...failure.source,
      error: errorMessage(failure.error),
      retriable,
      ...(attempts === undefined ? {} : { attempts, maxAttempts: this.attempts.maxAttempts }),
    });
    this.loop.consumer.seek(topic, task.partition, firstOffset);
    // The last attempt is followed by the dead letter at once; other attempts wait a little, as a throw may be transient.
    if (attempts === undefined || attempts < this.attempts.maxAttempts) await sleep(RETRY_DELAY_MS);
  }

  /**
   * After a failure outside the processor's records (the task's clock, position and stores
   * already rolled back): a failed transaction, or a throw of the punctuation or of a
   * decoder. Where a transaction was begun, the task is closed (below); the partition is
   * read again from the chunk's first record.
   */
  private async abortChunk(task: Task<S>, topic: string, firstOffset: number, e: unknown, inTransaction: boolean): Promise<void> {
    this.loop.count('stream_transaction_aborts_total', { reason: errorName(e) });
    const fenced = this.loop.client.isFencing(e);
    this.loop.log.warn(inTransaction ? 'transaction aborted; seeking back' : 'chunk failed before its transaction; seeking back', {
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
    if (inTransaction) await this.tasks.closeTask(task.partition);
    this.loop.consumer.seek(topic, task.partition, firstOffset);
    if (!fenced && (!inTransaction || this.loop.client.isRetriable(e))) await sleep(RETRY_DELAY_MS);
  }

  /**
   * Polls input end offsets; an idle task whose watermark moved gets a punctuation
   * transaction. Tasks closed by a failed punctuation transaction are reopened first (their
   * state restored from the changelog), so that the punctuation is retried without waiting
   * for a record.
   */
  private async pollIdle(): Promise<void> {
    if (this.loop.stopping()) return;
    const admin = this.admin;
    if (!admin) return;
    for (const p of [...this.reopen]) {
      if (this.loop.stopping()) return;
      if (!this.tasks.get(p)) await this.tasks.task(p);
      this.reopen.delete(p);
    }
    if (this.tasks.size === 0) return;
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

  /**
   * One idle punctuation in a transaction of its own, with the same rollback as a chunk's:
   * a throw of the punctuation takes its effects back and the next poll punctuates again; a
   * failed transaction also closes the task, which the next poll reopens.
   */
  private async idlePunctuation(task: Task<S>): Promise<void> {
    if (this.tasks.get(task.partition) !== task) return;
    task.outputs = [];
    task.deadLetters = 0;
    const clockBefore = task.streamTask.clock();
    let changelogOffsets: Record<string, number>;
    let inTransaction = false;
    try {
      refreshUnread(task);
      if (!task.streamTask.punctuate()) return;
      persistClock(task, clockBefore);
      flushChangelogs(this.options.appId, task);
      if (task.outputs.length === 0) return;
      inTransaction = true;
      changelogOffsets = await commitTransaction(this.options.appId, this.loop.client, task, null);
    } catch (e) {
      this.rollback(task, clockBefore);
      this.loop.count('stream_transaction_aborts_total', { reason: errorName(e) });
      this.loop.log.warn('punctuation aborted; retried at the next idle poll', { partition: task.partition, error: errorMessage(e), inTransaction });
      if (inTransaction) await this.closeForReopen(task.partition);
      return;
    }
    if (!(await this.commitStores(task, changelogOffsets))) this.reopen.add(task.partition);
  }

  private async closeForReopen(partition: number): Promise<void> {
    await this.tasks.closeTask(partition);
    this.reopen.add(partition);
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
}

function errorName(e: unknown): string {
  return (e as { type?: string } | null)?.type ?? (e as { apiId?: string } | null)?.apiId ?? (e as Error | null)?.name ?? 'Error';
}

/** Wait before a chunk is read again after a failure that may be transient. */
const RETRY_DELAY_MS = 500;

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
