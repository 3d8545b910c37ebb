import type { Consumer, EachBatchPayload, Kafka, KafkaMessage } from 'kafkajs';
import { ErrorCode, errorMessage, Logger, SrpoError, type MetricsSink } from '@srpo/core';
import { ensureTopics, type AgentOutput, type ContentKeySource, type EpisodeOutcome, type EventCodec, type TopicCatalog, type Transition } from '@srpo/events';
import { CoPartitionAssigner, KafkajsStreamClient, type TransactionalProducer } from '@srpo/streams';
import { EpisodeAssembler, type DroppedEpisode } from './episode-assembler';
import type { JudgeMode } from './judge-config';
import { JudgeFailure } from './judge-errors';
import type { RewardInput, Scorer } from './judge-input';
import { JudgedEpisodes, restoreJudgedEpisodes } from './judged-episodes';
import { buildOutcome, type OutcomeContext } from './outcome-builder';
import { outputText, sealedKeyIds, type IdDecoder, type OutputTextResult } from './output-text';

export interface JudgeServiceOptions {
  kafka: Kafka;
  catalog: TopicCatalog;
  codec: EventCodec;
  scorer: Scorer;
  tokenizer: IdDecoder;
  metrics: MetricsSink;
  mode: JudgeMode;
  policies: readonly string[];
  groupId: string;
  /** Where a group without committed offsets starts reading. */
  start: 'earliest' | 'latest';
  /** Judgements in flight per partition chunk (the client bounds the endpoint's share). */
  concurrency: number;
  successThreshold: number;
  /** `EpisodeOutcome.rewardSource` of every outcome. */
  rewardSource: string;
  maxPendingEpisodes: number;
  maxTextChars: number;
  pendingTtlMs: number;
  sessionTimeoutMs: number;
  logger?: Logger;
  /**
   * Where sealed outputs' content keys come from (the learner's store, `KeyStore`; docs/erasure.md):
   * fetched once per chunk. Without it a sealed output is skipped as `sealed_content`.
   */
  keys?: ContentKeySource;
  /** When a verdict is decided (the outcome's event time); the wall clock unless a test passes its own. */
  clock?: () => number;
}

/** A judgement waiting for its score. */
interface Plan {
  input: RewardInput;
  ctx: Omit<OutcomeContext, 'successThreshold' | 'rewardSource'>;
}

type Judged = { plan: Plan; outcome: EpisodeOutcome } | { plan: Plan; failure: string };

/** A record of a chunk, decoded (records that do not decode are counted and left out). */
type Decoded = { offset: number; output: AgentOutput; transition?: undefined } | { offset: number; output?: undefined; transition: Transition };

const NO_KEYS: ReadonlyMap<string, Buffer> = new Map();

/** One input partition (the same number on the co-partitioned inputs): its producer and, in episode mode, its episodes. */
interface Task {
  partition: number;
  producer: Promise<TransactionalProducer>;
  /** Batches of the task's two topics run one at a time: one transaction at a time per producer. */
  lock: Promise<void>;
  assembler: EpisodeAssembler;
  /** The next offset committed per topic: where to seek back to after a failed transaction. */
  committed: Map<string, number>;
}

/** Interval of heartbeats while a chunk is being judged (below any allowed session timeout). */
const HEARTBEAT_MS = 2_000;

/**
 * `srpo judge`'s loop: reads `agent-outputs` (and `transitions` in episode mode) of the chosen
 * policies, scores each output (or each finished episode) with the {@link Scorer}, and writes
 * one `EpisodeOutcome` per judgement to `episode-outcomes`.
 *
 * Exactly once as the materializer does it on kafkajs 2.2.4 (no KIP-447): one transactional
 * producer per input partition with a stable id (`<group>-<partition>`), created when the
 * partition's first batch arrives after an assignment, so the epoch bump fences a zombie;
 * `autoCommit: false`; each chunk's outcomes and the input offsets (`sendOffsets`) commit in one
 * transaction, read_committed everywhere. A failed judgement is committed like a success (its
 * offset moves on, no outcome, a counted failure): a sick judge costs time bounded by the
 * timeout, never a retry loop. A failed transaction is aborted, the task dropped and its
 * partitions sought back to the committed offsets: nothing is lost, and nothing is sent twice.
 *
 * This is not the libs/streams ConsumerRunner: its processors are synchronous functions of a
 * record and state (no I/O), and a judgement is an HTTP call of seconds. The loop keeps its
 * rules instead: per-task producers, offsets in the transaction, read_committed, and partitions
 * judged side by side so a slow one does not hold the others.
 */
export class JudgeService {
  private consumer?: Consumer;
  private readonly client: KafkajsStreamClient;
  private readonly tasks = new Map<number, Task>();
  private readonly judged: JudgedEpisodes;
  private readonly policies: ReadonlySet<string>;
  private readonly log: Logger;
  private readonly inputs: string[];
  private stopping = false;
  private warnedSealed = false;

  constructor(private readonly o: JudgeServiceOptions) {
    this.client = new KafkajsStreamClient(o.kafka);
    this.judged = new JudgedEpisodes(Math.max(o.maxPendingEpisodes, 1000));
    this.policies = new Set(o.policies);
    this.log = o.logger ?? new Logger('judge', { group: o.groupId, mode: o.mode });
    this.inputs = o.mode === 'episode' ? [o.catalog.agentOutputs.name, o.catalog.transitions.name] : [o.catalog.agentOutputs.name];
  }

  async start(): Promise<void> {
    const admin = this.o.kafka.admin();
    await admin.connect();
    try {
      await ensureTopics(admin, [this.o.catalog.agentOutputs, this.o.catalog.transitions, this.o.catalog.episodeOutcomes]);
    } finally {
      await admin.disconnect();
    }
    if (this.o.codec.usesRegistry) await this.o.codec.useRegistry();
    await restoreJudgedEpisodes(this.o.kafka, this.o.codec, this.o.catalog.episodeOutcomes.name, this.o.scorer.verifier, this.judged, this.log);
    const consumer = this.o.kafka.consumer({
      groupId: this.o.groupId,
      partitionAssigners: [CoPartitionAssigner],
      readUncommitted: false,
      sessionTimeout: this.o.sessionTimeoutMs,
      retry: { retries: 10 },
    });
    this.consumer = consumer;
    consumer.on(consumer.events.GROUP_JOIN, () => this.dropTasks());
    await consumer.connect();
    await consumer.subscribe({ topics: this.inputs, fromBeginning: this.o.start === 'earliest' });
    await consumer.run({
      autoCommit: false,
      eachBatchAutoResolve: false,
      partitionsConsumedConcurrently: Math.max(1, Math.min(this.o.concurrency, this.o.catalog.agentOutputs.partitions * this.inputs.length)),
      eachBatch: (payload) => this.onBatch(payload),
    });
    this.log.info('judging', { policies: this.o.policies, verifier: this.o.scorer.verifier, inputs: this.inputs });
  }

  async stop(): Promise<void> {
    this.stopping = true;
    await this.consumer?.disconnect().catch((e: unknown) => this.log.warn('consumer disconnect failed', { error: errorMessage(e) }));
    this.dropTasks();
  }

  private dropTasks(): void {
    for (const task of this.tasks.values()) void task.producer.then((p) => p.close()).catch(() => undefined);
    this.tasks.clear();
  }

  private task(partition: number): Task {
    let task = this.tasks.get(partition);
    if (!task) {
      const producer = this.client.transactionalProducer(`${this.o.groupId}-${partition}`, { transactionTimeoutMs: 60_000 });
      producer.catch(() => undefined); // awaited by the first batch, which reports the error
      task = {
        partition,
        producer,
        lock: Promise.resolve(),
        assembler: new EpisodeAssembler({ maxEpisodes: this.o.maxPendingEpisodes, ttlMs: this.o.pendingTtlMs }),
        committed: new Map(),
      };
      this.tasks.set(partition, task);
    }
    return task;
  }

  private async onBatch(payload: EachBatchPayload): Promise<void> {
    const { batch } = payload;
    if (batch.messages.length === 0 || this.stopping) return;
    const task = this.task(batch.partition);
    const run = task.lock.then(() => (this.tasks.get(batch.partition) === task ? this.processBatch(task, payload) : undefined));
    task.lock = run.catch(() => undefined);
    await run;
  }

  private async processBatch(task: Task, payload: EachBatchPayload): Promise<void> {
    const { batch } = payload;
    if (this.o.codec.usesRegistry) await this.o.codec.prefetch(batch.messages.map((m) => m.value));
    // Chunks keep each transaction (and the wait for its slowest judgement) short.
    const chunkSize = Math.max(8, this.o.concurrency * 2);
    for (let i = 0; i < batch.messages.length; i += chunkSize) {
      if (!payload.isRunning() || payload.isStale() || this.stopping) return;
      const chunk = batch.messages.slice(i, i + chunkSize);
      const records = this.decodeChunk(batch.topic, chunk);
      // Before any state changes: a store that cannot be read fails the batch, which is read again.
      const keys = await this.contentKeys(records);
      const plans = this.o.mode === 'output' ? this.planOutputs(records, keys) : this.planEpisodes(task, records, keys);
      const judged = await this.withHeartbeat(payload, Promise.all(plans.map((p) => this.judge(p))));
      const last = Number(chunk[chunk.length - 1].offset);
      const offsets = this.o.mode === 'output' ? new Map([[batch.topic, last + 1]]) : this.episodeOffsets(task);
      if (!(await this.commit(task, payload, judged, offsets))) return;
      payload.resolveOffset(String(last));
      await payload.heartbeat();
    }
  }

  /** The chunk's records decoded: AgentOutputs from `agent-outputs`, Transitions from `transitions`. */
  private decodeChunk(topic: string, chunk: KafkaMessage[]): Decoded[] {
    const out: Decoded[] = [];
    const outputs = topic === this.o.catalog.agentOutputs.name;
    for (const m of chunk) {
      const offset = Number(m.offset);
      if (outputs) {
        const output = this.decode(m, 'AgentOutput');
        if (output) out.push({ offset, output });
      } else {
        const transition = this.decode(m, 'Transition');
        if (transition) out.push({ offset, transition });
      }
    }
    return out;
  }

  /**
   * The content keys of the sealed outputs the chunk may judge, in one query (docs/erasure.md); a
   * key absent from the map is erased. Undefined without a key source (`sealed_content` skips).
   */
  private async contentKeys(records: readonly Decoded[]): Promise<ReadonlyMap<string, Buffer> | undefined> {
    if (!this.o.keys) return undefined;
    const wanted = records.flatMap((r) => (r.output && this.policies.has(r.output.policyId) && !this.judged.has(r.output.episodeId) ? [r.output] : []));
    const ids = sealedKeyIds(wanted);
    if (ids.length === 0) return NO_KEYS;
    try {
      return await this.o.keys.keysById(ids);
    } catch (e) {
      this.o.metrics.count('judge_key_fetch_failures_total');
      // Never skipped as erased: an unreadable store is not an erasure. The batch is read again.
      throw new SrpoError(ErrorCode.UNAVAILABLE, `content keys of ${ids.length} sealed outputs could not be read from the store: ${errorMessage(e)}`, {
        retriable: true,
        cause: e,
      });
    }
  }

  /** Output mode: each output of a chosen policy is judged alone, the first of its episode only. */
  private planOutputs(records: readonly Decoded[], keys: ReadonlyMap<string, Buffer> | undefined): Plan[] {
    const plans: Plan[] = [];
    const inChunk = new Set<string>();
    for (const { output } of records) {
      if (!output || !this.policies.has(output.policyId)) continue;
      if (this.judged.has(output.episodeId) || inChunk.has(output.episodeId)) {
        this.skip('episode_already_judged');
        continue;
      }
      const text = outputText(output, this.o.tokenizer, this.o.maxTextChars, keys);
      if (!text.ok) {
        this.skipOutput(output, text);
        continue;
      }
      inChunk.add(output.episodeId);
      plans.push({
        input: { mode: 'output', episodeId: output.episodeId, taskId: output.contextRef, outputs: [text.text] },
        ctx: { turns: output.step + 1, eventTimeMs: output.eventTimeMs },
      });
    }
    return plans;
  }

  /** Episode mode: records go into the task's episodes; the episodes they complete are judged. */
  private planEpisodes(task: Task, records: readonly Decoded[], keys: ReadonlyMap<string, Buffer> | undefined): Plan[] {
    const a = task.assembler;
    const dropped: DroppedEpisode[] = [];
    for (const { offset, output, transition } of records) {
      if (output) {
        if (this.judged.has(output.episodeId)) continue;
        let text = null;
        if (this.policies.has(output.policyId)) {
          const t = outputText(output, this.o.tokenizer, this.o.maxTextChars, keys);
          if (!t.ok) {
            // An episode judged without one of its outputs would be scored on half a story (an
            // erased one included): it is dropped whole.
            this.skipOutput(output, t);
            a.forget(output.episodeId);
            this.judged.add(output.episodeId);
            continue;
          }
          text = t.text;
        }
        dropped.push(...a.addOutput(offset, output.episodeId, output.outputId, output.eventTimeMs, text));
      } else {
        if (this.judged.has(transition.episodeId)) continue;
        dropped.push(...a.addTransition(offset, transition));
      }
    }
    dropped.push(...a.expire());
    for (const d of dropped) this.skip(d.reason);
    const plans: Plan[] = [];
    for (const ready of a.takeReady()) {
      this.judged.add(ready.episodeId);
      if (ready.outputs.length === 0) continue; // an episode of other policies only
      plans.push({
        input: { mode: 'episode', episodeId: ready.episodeId, taskId: ready.done.taskId, outputs: ready.outputs },
        ctx: { turns: ready.done.step + 1, eventTimeMs: ready.done.eventTimeMs },
      });
    }
    this.o.metrics.set('judge_pending_episodes', a.size, { partition: String(task.partition) });
    return plans;
  }

  private episodeOffsets(task: Task): Map<string, number> {
    const safe = task.assembler.safeOffsets();
    const offsets = new Map<string, number>();
    if (safe.outputs !== undefined) offsets.set(this.o.catalog.agentOutputs.name, safe.outputs);
    if (safe.transitions !== undefined) offsets.set(this.o.catalog.transitions.name, safe.transitions);
    return offsets;
  }

  private decode<T extends 'AgentOutput' | 'Transition'>(m: KafkaMessage, type: T): (T extends 'AgentOutput' ? AgentOutput : Transition) | undefined {
    try {
      return this.o.codec.decodeAs(type, m.value) as T extends 'AgentOutput' ? AgentOutput : Transition;
    } catch {
      // Bad input is the materializer's to dead-letter; the judge only counts it.
      this.skip('undecodable');
      return undefined;
    }
  }

  /** Scores one plan; never rejects (a failure is a result). */
  private async judge(plan: Plan): Promise<Judged> {
    try {
      const verdict = await this.o.scorer.score(plan.input);
      return {
        plan,
        outcome: buildOutcome(this.o.scorer, verdict, plan.input, {
          ...plan.ctx,
          // Decided now: an outcome stamped with its episode's old time would be refused as late
          // (SRPO_MAX_LATENESS_MS) once the judge lags, and the reward window counts from the transition anyway.
          eventTimeMs: Math.max(plan.ctx.eventTimeMs, (this.o.clock ?? Date.now)()),
          successThreshold: this.o.successThreshold,
          rewardSource: this.o.rewardSource,
        }),
      };
    } catch (e) {
      const failure = e instanceof JudgeFailure ? e.reason : 'invalid_outcome';
      // The episode and the reason only: no prompt or answer text in logs.
      this.log.warn('no reward', { episodeId: plan.input.episodeId, reason: failure, error: errorMessage(e) });
      return { plan, failure };
    }
  }

  /** One transaction: the chunk's outcomes and the input offsets. False when it did not commit (the task is then dropped and its partitions sought back). */
  private async commit(task: Task, payload: EachBatchPayload, judged: Judged[], offsets: Map<string, number>): Promise<boolean> {
    const outcomes = judged.flatMap((j) => ('outcome' in j ? [j.outcome] : []));
    let tx;
    try {
      const producer = await task.producer;
      tx = await producer.begin();
      if (outcomes.length > 0)
        await tx.send(
          outcomes.map((o) => ({
            topic: this.o.catalog.episodeOutcomes.name,
            key: o.episodeId,
            value: this.o.codec.encode('EpisodeOutcome', o, { strict: true }),
          })),
        );
      for (const [topic, next] of offsets) await tx.sendOffsets(this.o.groupId, topic, task.partition, next);
      if (payload.isStale() || !payload.isRunning()) throw new Error('the partition was reassigned while it was judged');
      await tx.commit();
    } catch (e) {
      this.o.metrics.count('judge_transactions_aborted_total');
      this.log.warn('transaction failed; reading the partition again from its committed offsets', { partition: task.partition, error: errorMessage(e) });
      await tx?.abort().catch(() => undefined);
      await this.rewind(task, judged);
      return false;
    }
    for (const [topic, next] of offsets) task.committed.set(topic, next);
    for (const j of judged) {
      if ('outcome' in j) {
        this.o.metrics.count('judge_requests_total', { result: 'ok' });
        this.o.metrics.count('judge_outcomes_total');
      } else {
        this.o.metrics.count('judge_requests_total', { result: 'failed' });
        this.o.metrics.count('judge_failures_total', { reason: j.failure });
      }
      if (this.o.mode === 'output') this.judged.add(j.plan.input.episodeId);
    }
    return true;
  }

  /** After a failed transaction: forget the task (its producer may be fenced) and read its partitions again from what was committed. */
  private async rewind(task: Task, judged: Judged[]): Promise<void> {
    if (this.tasks.get(task.partition) === task) this.tasks.delete(task.partition);
    void task.producer.then((p) => p.close()).catch(() => undefined);
    // Episode mode marks an episode judged when it is planned: these were not committed, so they are judged again.
    for (const j of judged) this.judged.forget(j.plan.input.episodeId);
    for (const topic of this.inputs) {
      try {
        const offset = task.committed.get(topic) ?? (await this.groupOffset(topic, task.partition));
        this.consumer?.seek({ topic, partition: task.partition, offset: String(offset) });
      } catch (e) {
        this.log.warn('seek failed', { topic, partition: task.partition, error: errorMessage(e) });
      }
    }
  }

  /** The group's committed offset of a partition, or the log's start when it has none. */
  private async groupOffset(topic: string, partition: number): Promise<number> {
    const admin = this.o.kafka.admin();
    await admin.connect();
    try {
      const [committed] = await admin.fetchOffsets({ groupId: this.o.groupId, topics: [topic] });
      const offset = Number(committed?.partitions.find((p) => p.partition === partition)?.offset ?? -1);
      if (offset >= 0) return offset;
      const low = (await admin.fetchTopicOffsets(topic)).find((p) => p.partition === partition)?.low;
      return Number(low ?? 0);
    } finally {
      await admin.disconnect();
    }
  }

  private skip(reason: string): void {
    this.o.metrics.count('judge_skipped_total', { reason });
  }

  /** A counted skip of an output; ids and key ids in the log, never its text or a key. */
  private skipOutput(output: AgentOutput, result: Extract<OutputTextResult, { ok: false }>): void {
    this.skip(result.reason);
    if (result.reason === 'sealed_content' && !this.warnedSealed) {
      this.warnedSealed = true; // once: what to set is the same for every sealed output
      this.log.warn('sealed outputs are skipped', { problem: result.problem });
    } else if (result.reason === 'unopenable_content') {
      this.log.warn('sealed output does not open; skipped', { episodeId: output.episodeId, outputId: output.outputId, problem: result.problem });
    }
  }

  private async withHeartbeat<T>(payload: EachBatchPayload, work: Promise<T>): Promise<T> {
    const timer = setInterval(() => void payload.heartbeat().catch(() => undefined), HEARTBEAT_MS);
    try {
      return await work;
    } finally {
      clearInterval(timer);
    }
  }
}
