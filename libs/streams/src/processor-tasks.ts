import type { OutgoingRecord, StreamClient, TransactionalProducer } from './client/stream-client';
import type { LoopContext } from './loop-mode';
import { OutputRecord, Stores } from './processor';
import type { ConsumerRunnerOptions } from './processor-mode';
import { StreamTask, TaskClock, TaskSink } from './stream-task';
import { changelogTopic, META_STORE, restoreTaskStores, TaskStores } from './task-stores';

/** Position of one input partition of a task: whether it is caught up holds the watermark or not. */
export interface InputPosition {
  /** Next offset to read (committed position). */
  nextOffset: number;
  /** End offset at the last poll; undefined until polled. */
  high?: number;
}

/** One task of the processor mode: partition p of every input topic, its producer and its stores. */
export interface Task<S extends Stores> {
  partition: number;
  producer: TransactionalProducer;
  /** The processor's task: per-record phases, clock and punctuation schedule. */
  streamTask: StreamTask<S>;
  /** The task's stores and where their committed state lives (memory or a local copy). */
  state: TaskStores;
  positions: Map<string, InputPosition>;
  /** Outputs, changelog records and dead letters of the open transaction. */
  outputs: OutgoingRecord[];
  /** Dead letters of the open transaction (for the log line). */
  deadLetters: number;
  /** Serialises batch transactions and idle punctuations of one task. */
  lock: Promise<unknown>;
}

/** Keys of the task clock in the meta store (changelogged with the transactions). */
const STREAM_TIME_KEY = 'streamTimeMs';
const MAX_EVENT_PREFIX = 'maxEventMs:';
const PUNCTUATED_AT_KEY = 'punctuatedAtMs';
const STATE_LAYOUT_KEY = 'stateLayout';

/**
 * The processor mode's open tasks and their lifecycle. A task is opened when its
 * partition's first batch arrives after an assignment (with every other assigned partition
 * not yet open, so their changelogs are read in one pass): its transactional producer is
 * initialised first (fencing earlier owners), then its stores are restored and its clock
 * read back from the meta store, and the processor's `migrate` runs when the state layout
 * changed. A task is closed when its partition is revoked, when a transaction fails (the
 * producer is never reused), and when the consumer is replaced.
 */
export class ProcessorTasks<S extends Stores> {
  private readonly tasks = new Map<number, Task<S>>();
  private assigned: Set<number> | undefined;
  /** The opening in progress, if any ({@link task}). */
  private opening: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly options: ConsumerRunnerOptions<S>,
    private readonly loop: LoopContext,
  ) {}

  get size(): number {
    return this.tasks.size;
  }

  /** The open task of `partition`, if any. */
  get(partition: number): Task<S> | undefined {
    return this.tasks.get(partition);
  }

  /** The open tasks, as of now (a copy: tasks may close meanwhile). */
  list(): Task<S>[] {
    return [...this.tasks.values()];
  }

  /** The partitions this member owns after a rebalance. */
  assign(partitions: ReadonlySet<number>): void {
    this.assigned = new Set(partitions);
  }

  /**
   * The task of `partition`, opened (with every other assigned partition not yet open) if
   * needed. One opening at a time: the batch loop and the idle poll both open tasks, and two
   * producers of one transactional id would fence each other.
   */
  async task(partition: number): Promise<Task<S>> {
    const existing = this.tasks.get(partition);
    if (existing) return existing;
    const open = async () => {
      const wanted = new Set([partition, ...(this.assigned ?? [])].filter((p) => !this.tasks.has(p)));
      if (wanted.size > 0) await this.initTasks([...wanted]);
    };
    const run = this.opening.then(open, open);
    this.opening = run.catch(() => undefined);
    await run;
    return this.tasks.get(partition) as Task<S>;
  }

  /** Fences earlier owners and restores state of several tasks in one changelog pass. */
  private async initTasks(partitions: number[]): Promise<void> {
    const { appId } = this.options;
    const producers = await Promise.all(
      partitions.map(async (p) => [p, await this.loop.client.transactionalProducer(`${appId}-${p}`, { transactionTimeoutMs: 60_000 })] as const),
    );
    // After every producer is initialised, no earlier owner can commit anything for these tasks.
    let restored: Map<number, TaskStores>;
    try {
      restored = await this.restore(partitions);
    } catch (e) {
      for (const [, producer] of producers) await producer.close().catch(() => undefined);
      throw e;
    }
    const committed = await this.committedOffsets();
    for (const [p, producer] of producers) this.openTask(p, producer, restored.get(p) as TaskStores, committed);
  }

  private restore(partitions: number[]): Promise<Map<number, TaskStores>> {
    const { kafka, appId, processor } = this.options;
    return restoreTaskStores(
      {
        kafka,
        appId,
        processor,
        serdes: this.options.serdes,
        stateDir: this.options.stateDir,
        cacheSize: this.options.stateCacheSize,
        duringLocalWrite: this.options.duringLocalWrite,
        log: this.loop.log,
      },
      partitions,
    );
  }

  /** One restored task: its clock from the meta store, its positions from the committed offsets. */
  private openTask(p: number, producer: TransactionalProducer, state: TaskStores, committed: Map<string, number>): void {
    const { inputTopics, processor } = this.options;
    const meta = state.meta;
    const clock: TaskClock = {
      streamTimeMs: meta.get(STREAM_TIME_KEY) ?? 0,
      maxEventMs: Object.fromEntries(inputTopics.map((t) => [t, meta.get(`${MAX_EVENT_PREFIX}${t}`) ?? -Infinity])),
      ...(meta.has(PUNCTUATED_AT_KEY) ? { punctuatedAtMs: meta.get(PUNCTUATED_AT_KEY) } : {}),
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
    this.loop.log.info('task ready', {
      partition: p,
      restoredRecords: state.restoredRecords,
      local: this.options.stateDir !== undefined,
      streamTimeMs: clock.streamTimeMs,
    });
  }

  /** Where the task's effects go: into the open transaction's outputs. */
  private sinkOf(task: Task<S>): TaskSink {
    const { codec, processor } = this.options;
    return {
      emit: (o: OutputRecord) => {
        task.outputs.push({ topic: o.topic, key: o.key, value: codec.encode(o.type, o.value) });
        this.loop.count('stream_records_out_total', { topic: o.topic });
      },
      deadLetter: (original, reasonCode, reason, details) => {
        task.deadLetters++;
        const record = this.loop.deadLetters.record(original, reasonCode, reason, details);
        if (record) task.outputs.push(record);
      },
      count: (metric, labels) => this.loop.count(`${processor.name}_${metric}`, labels),
    };
  }

  private async committedOffsets(): Promise<Map<string, number>> {
    const admin = await this.loop.client.admin();
    try {
      return await admin.committedOffsets(this.options.appId, this.options.inputTopics);
    } finally {
      await admin.close();
    }
  }

  /** Closes the tasks of partitions no longer assigned. */
  async closeRevoked(): Promise<void> {
    if (!this.assigned) return;
    for (const p of [...this.tasks.keys()]) if (!this.assigned.has(p)) await this.closeTask(p);
  }

  async closeTask(partition: number): Promise<void> {
    const task = this.tasks.get(partition);
    if (!task) return;
    this.tasks.delete(partition);
    await task.producer.close().catch(() => undefined);
    task.state.close();
    this.loop.log.info('task closed', { partition });
  }

  /** Closes every task (the consumer is replaced: each is rebuilt on its next batch). */
  async closeAll(): Promise<void> {
    for (const p of [...this.tasks.keys()]) await this.closeTask(p);
  }

  /** On stop: every task's producer and stores, without a log line each. */
  async stop(): Promise<void> {
    for (const task of this.tasks.values()) {
      await task.producer.close().catch(() => undefined);
      task.state.close();
    }
    this.tasks.clear();
  }

  /** Creates the changelog topics of the processor's stores and of the task clock that do not exist yet. */
  async ensureChangelogTopics(): Promise<void> {
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

  /** Open tasks and their store sizes (for metrics and tests). */
  stats(): { partition: number; streamTimeMs: number; stores: Record<string, number> }[] {
    return [...this.tasks.values()].map((t) => ({
      partition: t.partition,
      streamTimeMs: t.streamTask.streamTimeMs,
      stores: Object.fromEntries(t.state.list.map((s) => [s.name, s.size])),
    }));
  }
}

/**
 * Tells the task which inputs are caught up (as of the last end-offset poll): those do not
 * hold its watermark back. One offset of slack: a transaction's commit marker occupies the
 * last offset. A partition never polled holds it at its latest event time.
 */
export function refreshUnread<S extends Stores>(task: Task<S>): void {
  for (const [topic, p] of task.positions) task.streamTask.setUnread(topic, !(p.high !== undefined && p.nextOffset >= p.high - 1));
}

/** Writes what moved of the task's clock into the meta store, so it is changelogged with the transaction. */
export function persistClock<S extends Stores>(task: Task<S>, before: TaskClock): void {
  const now = task.streamTask.clock();
  const meta = task.state.meta;
  if (now.streamTimeMs !== before.streamTimeMs) meta.put(STREAM_TIME_KEY, now.streamTimeMs);
  for (const [topic, t] of Object.entries(now.maxEventMs)) if (t !== before.maxEventMs[topic]) meta.put(`${MAX_EVENT_PREFIX}${topic}`, t);
  if (now.punctuatedAtMs !== undefined && now.punctuatedAtMs !== before.punctuatedAtMs) meta.put(PUNCTUATED_AT_KEY, now.punctuatedAtMs);
}

/** Phase 4, flush: the pending writes of the task's stores become changelog records of the open transaction. */
export function flushChangelogs<S extends Stores>(appId: string, task: Task<S>): void {
  for (const store of task.state.list) {
    if (!store.dirty) continue;
    const topic = changelogTopic(appId, store.name);
    for (const r of store.changelogRecords()) task.outputs.push({ topic, key: r.key, value: r.value, partition: task.partition });
  }
}

/** Runs `fn` after the task's earlier transaction or punctuation settled. */
export function withLock<S extends Stores, T>(task: Task<S>, fn: () => Promise<T>): Promise<T> {
  const run = task.lock.then(fn, fn);
  task.lock = run.catch(() => undefined);
  return run;
}

/**
 * Phase 5, commit: the task's outputs, changelog records and dead letters and the input
 * offset in one transaction. Returns, per changelog topic written, an offset up to which
 * the changelog partition now holds this task's state: the next offset after this
 * transaction's records when the broker reported them as one batch, else the first of
 * them (never past them: a local copy checkpointed there re-reads at most this
 * transaction's records, which are whole values, on restore).
 */
export async function commitTransaction<S extends Stores>(
  appId: string,
  client: StreamClient,
  task: Task<S>,
  input: { topic: string; lastOffset: number } | null,
): Promise<Record<string, number>> {
  const outputs = task.outputs;
  const tx = await task.producer.begin();
  const changelogOffsets: Record<string, number> = {};
  try {
    if (outputs.length > 0) {
      const sent = await tx.send(outputs);
      const prefix = `${appId}.`;
      const counts = new Map<string, number>();
      for (const o of outputs) if (o.topic.startsWith(prefix) && o.topic.endsWith('.changelog')) counts.set(o.topic, (counts.get(o.topic) ?? 0) + 1);
      for (const [t, n] of counts) {
        const batches = sent.filter((m) => m.topic === t && m.partition === task.partition);
        if (batches.length === 0) continue;
        const first = Math.min(...batches.map((m) => m.baseOffset));
        changelogOffsets[t] = batches.length === 1 ? first + n : first;
      }
    }
    if (input) await tx.sendOffsets(appId, input.topic, task.partition, input.lastOffset + 1);
    await tx.commit();
  } catch (e) {
    if (!client.isFencing(e)) await tx.abort().catch(() => undefined);
    throw e;
  }
  return changelogOffsets;
}
