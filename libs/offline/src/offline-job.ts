import { createHash } from 'crypto';
import * as fs from 'fs';
import * as path from 'path';
import { fileURLToPath } from 'url';
import type { Kafka } from 'kafkajs';
import { ErrorCode, errorMessage, Logger, SrpoError, ValidationError } from '@srpo/core';
import {
  ensureTopics,
  readRanges,
  validateActionCredit,
  validateInferredTask,
  type ActionCredit,
  type AgentOutput,
  type EpisodeOutcome,
  type EventCodec,
  type EventType,
  type InferredTask,
  type KafkaCoordinates,
  type OffsetRange,
  type TopicCatalog,
  type Transition,
} from '@srpo/events';
import { CheckpointStore, loadCheckpoint, weightsHash, type Policy } from '@srpo/policy';
// A Hugging Face policy's checkpoint loads through the hf-llama family @srpo/hf registers.
import '@srpo/hf';
import type { AuditStore, GroupLedgerInput, UpdateDetail } from '@srpo/store';
import { IsolatedRun, runLocation, type OfflineHyperparameters } from '@srpo/trainer';
import { brewTrajectory, DEFAULT_MAX_FAILED_SHARE, trainingExamples, type BrewedTrajectory } from './brew';
import { CreditWeightedSftTrainer, trainWeighted, type SftRunResult } from './credit-weighted-sft';
import { CREDIT_MODES, type CreditMode } from './credits';
import { InstructionScorer } from './pmi-scorer';
import type { TaskInferrer } from './task-inferrer';
import { assembleTrajectories, DEFAULT_STEP_SUCCESS, type Located, type RawEpisodeEvents, type StepSuccessRule } from './trajectory';

export interface OfflineProgress {
  phase: 'read' | 'infer' | 'publish' | 'train' | 'record';
  done: number;
  total: number;
}

export interface OfflineJobOptions {
  kafka: Kafka;
  codec: EventCodec;
  /** Raw topics are read from it; inferred tasks and credits are written to its `inferredTasks` and `actionCredits` topics. */
  catalog: TopicCatalog;
  /** Records whose Kafka timestamp is in [fromMs, toMs) are read. */
  fromMs: number;
  toMs: number;
  /** Run name ([A-Za-z0-9._-]+); the run's store, checkpoints and report live in `<runsDir>/<run>/`. */
  run: string;
  runsDir: string;
  /** The policy to train, at the version it starts from (trained in place). */
  policy: Policy;
  /** The scorer language model (not trained). */
  scorer: Policy;
  inferrer: TaskInferrer;
  creditMode: CreditMode;
  /** Default {@link DEFAULT_MAX_FAILED_SHARE}. */
  maxFailedShare?: number;
  /** Which steps failed; default: reward at most 0. */
  stepRule?: StepSuccessRule;
  /**
   * `policy` (default): train on the actions the trained policy sampled
   * (AgentOutput.policyId); `all`: on every action, whoever sampled it.
   * Either way, every action counts for inference and credit.
   */
  trainOn?: 'policy' | 'all';
  /** Optimizer steps, examples per step, learning rate, shuffle seed. */
  sft: { steps: number; batchSize: number; lr: number; seed: number; maxGradNorm?: number };
  backend: string;
  codeVersion: string;
  onProgress?: (p: OfflineProgress) => void;
  /** Clock for event times and the commit time (tests pass a fixed one). */
  now?: () => number;
}

export interface OfflineReport {
  run: string;
  runDir: string;
  policyId: string;
  versionBefore: number;
  versionAfter: number;
  weightsHashBefore: string;
  weightsHashAfter: string;
  updateId: string;
  creditMode: CreditMode;
  inferrer: string;
  /** The raw offsets read, per topic and partition (inclusive). */
  sourceRanges: Record<string, OffsetRange[]>;
  trajectories: number;
  usable: number;
  excluded: Record<string, number>;
  /** Examples with weight > 0. */
  examples: number;
  inferredTaskEvents: number;
  actionCreditEvents: number;
  training: SftRunResult;
  checkpointDir: string;
  store: string;
  /** Where the run's PolicyUpdate and PolicyVersion events went. */
  policyUpdatesTopic: string;
  policyVersionsTopic: string;
}

/**
 * AgentBrew offline training over a time range of the raw event log: read the
 * raw topics (never writing them), assemble trajectories, infer each one's task
 * from its successful steps, score PMI credits, publish both as events, train
 * the policy with credit-weighted SFT and record the update in the run's own
 * audit store, like the learner does: checkpoint, hashes, and one ledger row
 * per trajectory with the coordinates of every source event; then publish
 * PolicyUpdate and PolicyVersion on the run's own topics
 * (`<prefix>offline.<run>.policy-updates|versions`).
 */
export async function runOfflineJob(o: OfflineJobOptions): Promise<OfflineReport> {
  const log = new Logger('offline-job', { run: o.run });
  // The run's name and that it does not exist yet, before anything is read or written.
  const location = runLocation(o.runsDir, o.run);
  if (!Number.isSafeInteger(o.fromMs) || !Number.isSafeInteger(o.toMs) || o.fromMs >= o.toMs) throw new ValidationError('from', `must be before to (got ${o.fromMs} .. ${o.toMs})`);
  if (!CREDIT_MODES.includes(o.creditMode)) throw new ValidationError('creditMode', `must be one of ${CREDIT_MODES.join(', ')}, got ${String(o.creditMode)}`);
  const maxFailedShare = o.maxFailedShare ?? DEFAULT_MAX_FAILED_SHARE;
  // Checked before anything is read or written: a bad budget must not leave published events behind.
  if (!Number.isInteger(o.sft.steps) || o.sft.steps < 1) throw new ValidationError('sft.steps', `must be a positive integer, got ${o.sft.steps}`);
  if (!Number.isInteger(o.sft.batchSize) || o.sft.batchSize < 1) throw new ValidationError('sft.batchSize', `must be a positive integer, got ${o.sft.batchSize}`);
  if (!(o.sft.lr > 0) || !Number.isFinite(o.sft.lr)) throw new ValidationError('sft.lr', `must be a finite number > 0, got ${o.sft.lr}`);
  if (!(maxFailedShare >= 0 && maxFailedShare <= 1)) throw new ValidationError('maxFailedShare', `must be in [0, 1], got ${maxFailedShare}`);
  const now = o.now ?? Date.now;
  const runDir = location.dir;
  const progress = (phase: OfflineProgress['phase'], done: number, total: number) => o.onProgress?.({ phase, done, total });

  // 1. Read the raw range.
  const raw = [o.catalog.agentOutputs.name, o.catalog.transitions.name, o.catalog.episodeOutcomes.name];
  const sourceRanges = await rangesByTime(o.kafka, raw, o.fromMs, o.toMs);
  const events: RawEpisodeEvents = { outputs: [], transitions: [], outcomes: [] };
  let undecodable = 0;
  for (const [i, topic] of raw.entries()) {
    const records = sourceRanges[topic].length > 0 ? await readRanges(o.kafka, topic, sourceRanges[topic], { timeoutMs: 60_000 }) : [];
    for (const r of records) {
      const source = { topic: r.topic, partition: r.partition, offset: r.offset };
      try {
        if (i === 0) events.outputs.push(located<AgentOutput>(o.codec, 'AgentOutput', r.value, source));
        else if (i === 1) events.transitions.push(located<Transition>(o.codec, 'Transition', r.value, source));
        else events.outcomes.push(located<EpisodeOutcome>(o.codec, 'EpisodeOutcome', r.value, source));
      } catch (e) {
        // The materializer dead-letters such records; here they are left out and counted.
        undecodable++;
        log.warn('raw record left out', { topic, partition: r.partition, offset: r.offset, reason: errorMessage(e) });
      }
    }
    progress('read', i + 1, raw.length);
  }
  const stepRule = o.stepRule ?? DEFAULT_STEP_SUCCESS;
  const assembled = assembleTrajectories(events, stepRule);

  // 2. Infer tasks and credits.
  const scorer = new InstructionScorer(o.scorer.model);
  const brewed: BrewedTrajectory[] = [];
  for (const [i, t] of assembled.trajectories.entries()) {
    brewed.push(await brewTrajectory(t, o.inferrer, scorer, { creditMode: o.creditMode, maxFailedShare }));
    progress('infer', i + 1, assembled.trajectories.length);
  }
  const usable = brewed.filter((b) => b.exclusion === null);
  const excluded: Record<string, number> = { 'incomplete-episode': assembled.incomplete.length };
  for (const b of brewed) if (b.exclusion) excluded[b.exclusion] = (excluded[b.exclusion] ?? 0) + 1;
  if (undecodable > 0) excluded['undecodable-record'] = undecodable;
  const trainOn = o.trainOn ?? 'policy';
  const examples = trainingExamples(usable, o.inferrer, 'credit', (a) => trainOn === 'all' || a.policyId === o.policy.id);
  if (!examples.some((e) => e.weight > 0)) {
    throw new SrpoError(
      ErrorCode.VALIDATION_FAILED,
      `no usable action ${trainOn === 'policy' ? `of policy ${o.policy.id} ` : ''}with positive credit in ${o.fromMs}..${o.toMs}: ${brewed.length} trajectories, ${usable.length} usable (${JSON.stringify(excluded)})`,
    );
  }

  // 3. Publish inferred tasks and credits.
  fs.mkdirSync(runDir, { recursive: true });
  const eventTime = now();
  const scorerVersion = o.scorer.version;
  const tasks: InferredTask[] = [
    ...brewed.map(
      (b): InferredTask => ({
        runId: o.run,
        episodeId: b.trajectory.episodeId,
        originalTaskId: b.trajectory.taskId,
        inferrer: o.inferrer.name,
        usable: b.exclusion === null,
        excludedReason: b.exclusion,
        instructionTokenIds: b.instruction?.tokens ?? [],
        label: b.instruction?.label ?? '',
        successfulSteps: b.trajectory.actions.filter((a) => a.successful).length,
        failedSteps: b.trajectory.actions.filter((a) => !a.successful).length,
        scorerPolicyId: o.scorer.id,
        scorerVersion,
        sources: b.trajectory.sources,
        eventTimeMs: eventTime,
      }),
    ),
    ...assembled.incomplete.map(
      (x): InferredTask => ({
        runId: o.run,
        episodeId: x.episodeId,
        originalTaskId: x.taskId,
        inferrer: o.inferrer.name,
        usable: false,
        excludedReason: 'incomplete-episode',
        instructionTokenIds: [],
        label: '',
        successfulSteps: 0,
        failedSteps: 0,
        scorerPolicyId: o.scorer.id,
        scorerVersion,
        sources: x.sources,
        eventTimeMs: eventTime,
      }),
    ),
  ];
  const credits: ActionCredit[] = usable.flatMap((b) =>
    b.actions.map(
      (c): ActionCredit => ({
        runId: o.run,
        episodeId: b.trajectory.episodeId,
        outputId: c.action.outputId,
        step: c.action.step,
        role: c.action.role,
        creditMode: o.creditMode,
        successful: c.action.successful,
        prefixIndex: c.prefixIndex,
        nllBefore: c.nllBefore,
        nllAfter: c.nllAfter,
        credit: c.credit,
        weight: c.weight,
        source: c.action.source,
        eventTimeMs: eventTime,
      }),
    ),
  );
  tasks.forEach((t) => validateInferredTask(t));
  credits.forEach((c) => validateActionCredit(c));
  const admin = o.kafka.admin();
  await admin.connect();
  try {
    await ensureTopics(admin, [o.catalog.inferredTasks, o.catalog.actionCredits]);
  } finally {
    await admin.disconnect();
  }
  const taskCoords = await publish(o.kafka, o.codec, o.catalog.inferredTasks.name, 'InferredTask', tasks, (done) => progress('publish', done, tasks.length + credits.length));
  const creditCoords = await publish(o.kafka, o.codec, o.catalog.actionCredits.name, 'ActionCredit', credits, (done) => progress('publish', tasks.length + done, tasks.length + credits.length));

  // 4. Train a new version.
  const policy = o.policy;
  const versionBefore = policy.version;
  const hashBefore = await weightsHash(policy);
  const checkpoints = location.checkpoints;
  await checkpoints.save(policy);
  const trainer = new CreditWeightedSftTrainer(policy, { lr: o.sft.lr, maxGradNorm: o.sft.maxGradNorm });
  const started = Date.now();
  let training: SftRunResult;
  try {
    training = await trainWeighted(trainer, examples, { steps: o.sft.steps, batchSize: o.sft.batchSize, seed: o.sft.seed }, (d, n) => progress('train', d, n));
  } finally {
    trainer.dispose();
  }
  // However many optimizer steps it took, one offline run is one new version.
  policy.advanceVersionTo(versionBefore + 1);
  const hashAfter = await weightsHash(policy);
  await checkpoints.save(policy);

  // 5. Record the update.
  const taskCoordByEpisode = new Map(tasks.map((t, i) => [t.episodeId, taskCoords[i]]));
  const creditCoordByOutput = new Map(credits.map((c, i) => [`${c.episodeId}\u0000${c.outputId}`, creditCoords[i]]));
  const objectiveConfig = JSON.stringify({ method: 'agentbrew', creditMode: o.creditMode, maxFailedShare, inferrer: o.inferrer.name, scorer: `${o.scorer.id}@v${scorerVersion}` });
  const groups: GroupLedgerInput[] = usable.map((b) => ({
    groupId: `offline/${o.run}/${b.trajectory.episodeId}`,
    groupKey: `offline/${o.inferrer.name}/${b.instruction?.label ?? ''}`,
    source: taskCoordByEpisode.get(b.trajectory.episodeId) as KafkaCoordinates,
    setIds: b.actions.map((c) => c.action.outputId),
    advantages: b.actions.map((c) => c.weight),
    sources: b.actions.map((c) => ({
      setId: c.action.outputId,
      set: creditCoordByOutput.get(`${b.trajectory.episodeId}\u0000${c.action.outputId}`) as KafkaCoordinates,
      transition: c.action.transitionSource,
      outcome: b.trajectory.outcome.source,
      members: [{ outputId: c.action.outputId, source: c.action.source }],
    })),
    objectiveConfig,
  }));
  const updateId = `offline-${o.run}-${policy.id}-v${policy.version}`;
  const hyperparameters: OfflineHyperparameters = {
    method: 'agentbrew-offline',
    weighting: 'credit',
    trainOn,
    creditMode: o.creditMode,
    maxFailedShare,
    stepRule: { ...stepRule },
    inferrer: o.inferrer.name,
    scorer: `${o.scorer.id}@v${scorerVersion}`,
    lr: o.sft.lr,
    steps: o.sft.steps,
    batchSize: o.sft.batchSize,
    maxGradNorm: o.sft.maxGradNorm ?? 1,
    fromMs: o.fromMs,
    toMs: o.toMs,
    sourceRanges,
    inferredTasksTopic: o.catalog.inferredTasks.name,
    actionCreditsTopic: o.catalog.actionCredits.name,
  };
  // As a replay does: the run's store, and its PolicyUpdate and PolicyVersion on topics of its own (`<prefix>offline.<run>.`), never the live learner's.
  const run = await IsolatedRun.open(location, { kafka: o.kafka, topicPrefix: `${o.catalog.prefix}offline.${o.run}.`, backend: o.backend, codeVersion: o.codeVersion, codec: o.codec });
  let detail: UpdateDetail;
  try {
    await run.recorder.registerPolicy(policy.id, {
      version: versionBefore,
      weightsHash: hashBefore,
      checkpointUri: run.checkpointUri(policy.id, versionBefore),
      createdAtMs: eventTime,
    });
    detail = await run.recorder.recordUpdate(
      {
        updateId,
        policyId: policy.id,
        versionBefore,
        weightsHashBefore: hashBefore,
        weightsHashAfter: hashAfter,
        hyperparameters,
        seed: o.sft.seed,
        result: {
          loss: training.meanLoss,
          gradNorm: training.meanGradNorm,
          diagnostics: {
            'offline/trajectories': brewed.length + assembled.incomplete.length,
            'offline/usable': usable.length,
            'offline/examples': training.examples,
            'offline/first_loss': training.firstLoss,
            'offline/last_loss': training.lastLoss,
          },
        },
        wallTimeMs: Date.now() - started,
        checkpointUri: run.checkpointUri(policy.id, policy.version),
        committedAtMs: now(),
      },
      groups,
    );
    await run.recorder.publish(detail, `agentbrew-${o.creditMode}`);
  } finally {
    await run.close();
  }
  const runTopics = run.topics;
  progress('record', 1, 1);
  const report: OfflineReport = {
    run: o.run,
    runDir,
    policyId: policy.id,
    versionBefore,
    versionAfter: detail.versionAfter,
    weightsHashBefore: hashBefore,
    weightsHashAfter: hashAfter,
    updateId,
    creditMode: o.creditMode,
    inferrer: o.inferrer.name,
    sourceRanges,
    trajectories: brewed.length + assembled.incomplete.length,
    usable: usable.length,
    excluded,
    examples: training.examples,
    inferredTaskEvents: tasks.length,
    actionCreditEvents: credits.length,
    training,
    checkpointDir: checkpoints.dirFor(policy.id, policy.version),
    store: path.join(runDir, 'store.sqlite'),
    policyUpdatesTopic: runTopics.policyUpdates.name,
    policyVersionsTopic: runTopics.policyVersions.name,
  };
  fs.writeFileSync(path.join(runDir, 'offline.json'), JSON.stringify(report, null, 2));
  log.info('offline run recorded', { updateId, usable: usable.length, examples: training.examples });
  return report;
}

function located<T>(codec: EventCodec, type: EventType, value: Buffer | null, source: KafkaCoordinates): Located<T> {
  return { value: codec.decodeAs(type, value) as unknown as T, source };
}

/**
 * Offsets of `[fromMs, toMs)` per partition, by the brokers' time index: the
 * first offset at or after `fromMs` to the last before `toMs` (inclusive).
 */
export async function rangesByTime(kafka: Kafka, topics: string[], fromMs: number, toMs: number): Promise<Record<string, OffsetRange[]>> {
  const admin = kafka.admin();
  await admin.connect();
  try {
    const out: Record<string, OffsetRange[]> = {};
    for (const topic of topics) {
      const starts = await admin.fetchTopicOffsetsByTimestamp(topic, fromMs);
      const ends = await admin.fetchTopicOffsetsByTimestamp(topic, toMs);
      out[topic] = starts
        .map((s) => ({ partition: s.partition, from: Number(s.offset), to: Number(ends.find((e) => e.partition === s.partition)?.offset ?? s.offset) - 1 }))
        .filter((r) => r.to >= r.from)
        .sort((a, b) => a.partition - b.partition);
    }
    return out;
  } finally {
    await admin.disconnect();
  }
}

/** Partition of a key on the offline topics: chosen here, so every event's coordinates are known from the produce response. */
export function partitionFor(key: string, partitions: number): number {
  return createHash('sha256').update(key).digest().readUInt32BE(0) % partitions;
}

async function publish<T extends 'InferredTask' | 'ActionCredit'>(
  kafka: Kafka,
  codec: EventCodec,
  topic: string,
  type: T,
  values: readonly (T extends 'InferredTask' ? InferredTask : ActionCredit)[],
  onProgress: (done: number) => void,
): Promise<KafkaCoordinates[]> {
  const admin = kafka.admin();
  await admin.connect();
  let partitions: number;
  try {
    const meta = await admin.fetchTopicMetadata({ topics: [topic] });
    partitions = meta.topics[0].partitions.length;
  } finally {
    await admin.disconnect();
  }
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  const coords: KafkaCoordinates[] = new Array(values.length);
  try {
    const chunk = 500;
    for (let start = 0; start < values.length; start += chunk) {
      const slice = values.slice(start, start + chunk);
      const messages = slice.map((v) => ({
        key: v.episodeId,
        value: codec.encode(type, v as never, { strict: true }),
        partition: partitionFor(v.episodeId, partitions),
      }));
      const meta = await producer.send({ topic, acks: -1, messages });
      const next = new Map(meta.map((m) => [m.partition, Number(m.baseOffset)]));
      messages.forEach((m, i) => {
        const offset = next.get(m.partition);
        if (offset === undefined) throw new SrpoError(ErrorCode.INTEGRITY_FAILED, `${topic}: the broker acknowledged no batch for partition ${m.partition}`);
        coords[start + i] = { topic, partition: m.partition, offset };
        next.set(m.partition, offset + 1);
      });
      onProgress(Math.min(start + chunk, values.length));
    }
  } finally {
    await producer.disconnect();
  }
  return coords;
}

/** The starting point of an offline run: a policy's current version, as its audit store records it. */
export interface RegisteredPolicy {
  policy: Policy;
  weightsHash: string;
  checkpointDir: string;
}

/**
 * Loads a policy's current version from the audit store's checkpoint (or
 * `<checkpointDir>/<policy>/v<N>` when given) and checks its weights hash
 * against the record.
 */
export async function loadRegisteredPolicy(store: AuditStore, policyId: string, checkpointDir?: string): Promise<RegisteredPolicy> {
  const record = await store.getPolicy(policyId);
  if (!record) throw new SrpoError(ErrorCode.NOT_FOUND, `policy ${policyId} is not registered in the audit store`, { field: 'policy' });
  const version = await store.getVersion(policyId, record.currentVersion);
  if (!version) throw new SrpoError(ErrorCode.INTEGRITY_FAILED, `policy ${policyId} is at version ${record.currentVersion} but that version has no record`);
  const dir = checkpointDir
    ? new CheckpointStore(checkpointDir).dirFor(policyId, version.version)
    : version.checkpointUri.startsWith('file:')
      ? fileURLToPath(version.checkpointUri)
      : version.checkpointUri;
  const loaded = await loadCheckpoint(dir);
  if (loaded.manifest.weightsHash !== version.weightsHash) {
    loaded.policy.dispose();
    throw new SrpoError(ErrorCode.INTEGRITY_FAILED, `checkpoint ${dir} has weights ${loaded.manifest.weightsHash}, the store records ${version.weightsHash}`);
  }
  if (loaded.policy.version !== version.version) loaded.policy.advanceVersionTo(version.version);
  return { policy: loaded.policy, weightsHash: version.weightsHash, checkpointDir: dir };
}
