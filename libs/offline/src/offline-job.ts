import * as fs from 'fs';
import * as path from 'path';
import type { Kafka } from 'kafkajs';
import { ErrorCode, Logger, SrpoError, ValidationError } from '@srpo/core';
import type { ActionCredit, ContentKeySource, EventCodec, InferredTask, KafkaCoordinates, OffsetRange, TopicCatalog } from '@srpo/events';
import { weightsHash, type Policy } from '@srpo/policy';
// A Hugging Face policy's checkpoint loads through the hf-llama family @srpo/hf registers.
import '@srpo/hf';
import type { GroupLedgerInput, UpdateDetail } from '@srpo/store';
import { IsolatedRun, runLocation, type OfflineHyperparameters, type RunLocation } from '@srpo/trainer';
import { brewTrajectory, DEFAULT_MAX_FAILED_SHARE, trainingExamples, type BrewedTrajectory } from './brew';
import { CreditWeightedSftTrainer, trainWeighted, type SftRunResult, type WeightedExample } from './credit-weighted-sft';
import { CREDIT_MODES, type CreditMode } from './credits';
import { actionCreditEvents, inferredTaskEvents, publishOfflineEvents } from './offline-events';
import { InstructionScorer } from './pmi-scorer';
import { readRawRange } from './raw-range';
import type { TaskInferrer } from './task-inferrer';
import {
  assembleTrajectories,
  DEFAULT_STEP_SUCCESS,
  fetchContentKeys,
  type AssembledTrajectories,
  type StepSuccessRule,
  type UnopenedReason,
} from './trajectory';

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
  /**
   * Where sealed outputs' content keys come from (the learner's store, `KeyStore`; docs/erasure.md),
   * fetched once for the range. Without it an episode with a sealed output is left out as `sealed-content`.
   */
  keys?: ContentKeySource;
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
  /** Complete episodes left out because a sealed output did not open (erased, changed, or no keys), with those outputs' ids. */
  unopened: { episodeId: string; reason: UnopenedReason; outputIds: string[] }[];
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
  const { location, maxFailedShare } = checkOptions(o);
  const now = o.now ?? Date.now;
  const runDir = location.dir;
  const progress = (phase: OfflineProgress['phase'], done: number, total: number) => o.onProgress?.({ phase, done, total });

  // 1. Read the raw range.
  const { sourceRanges, events, undecodable } = await readRawRange(o.kafka, o.codec, o.catalog, o, log, (done, total) => progress('read', done, total));
  const stepRule = o.stepRule ?? DEFAULT_STEP_SUCCESS;
  const assembled = assembleTrajectories(events, stepRule, await fetchContentKeys(o.keys, events.outputs));
  if (assembled.unopened.length > 0)
    log.info('episodes with sealed content left out', { count: assembled.unopened.length, reasons: countBy(assembled.unopened.map((u) => u.reason)) });

  // 2. Infer tasks and credits.
  const brew = await brewAll(o, assembled, maxFailedShare, undecodable, (done, total) => progress('infer', done, total));

  // 3. Publish inferred tasks and credits.
  fs.mkdirSync(runDir, { recursive: true });
  const ctx = {
    runId: o.run,
    inferrer: o.inferrer.name,
    creditMode: o.creditMode,
    scorerPolicyId: o.scorer.id,
    scorerVersion: o.scorer.version,
    eventTimeMs: now(),
  };
  const tasks = inferredTaskEvents(ctx, brew.brewed, assembled.incomplete, assembled.unopened);
  const credits = actionCreditEvents(ctx, brew.usable);
  const coords = await publishOfflineEvents(o.kafka, o.codec, o.catalog, tasks, credits, (done, total) => progress('publish', done, total));

  // 4. Train a new version.
  const trained = await trainNewVersion(o, location, brew.examples, (done, total) => progress('train', done, total));

  // 5. Record the update.
  const ledger = { tasks, credits, ...coords, maxFailedShare };
  const hyperparameters = offlineHyperparameters(o, { trainOn: brew.trainOn, maxFailedShare, stepRule, sourceRanges });
  const { detail, updateId, runTopics } = await recordUpdate(o, location, trained, {
    groups: ledgerGroups(o, brew.usable, ledger),
    hyperparameters,
    eventTimeMs: ctx.eventTimeMs,
    now,
    trajectories: brew.brewed.length + assembled.incomplete.length + assembled.unopened.length,
    usable: brew.usable.length,
  });
  progress('record', 1, 1);
  const policy = o.policy;
  const report: OfflineReport = {
    run: o.run,
    runDir,
    policyId: policy.id,
    versionBefore: trained.versionBefore,
    versionAfter: detail.versionAfter,
    weightsHashBefore: trained.hashBefore,
    weightsHashAfter: trained.hashAfter,
    updateId,
    creditMode: o.creditMode,
    inferrer: o.inferrer.name,
    sourceRanges,
    trajectories: brew.brewed.length + assembled.incomplete.length + assembled.unopened.length,
    usable: brew.usable.length,
    excluded: brew.excluded,
    unopened: assembled.unopened.map((u) => ({ episodeId: u.episodeId, reason: u.reason, outputIds: u.outputIds })),
    examples: trained.training.examples,
    inferredTaskEvents: tasks.length,
    actionCreditEvents: credits.length,
    training: trained.training,
    checkpointDir: location.checkpoints.dirFor(policy.id, policy.version),
    store: path.join(runDir, 'store.sqlite'),
    policyUpdatesTopic: runTopics.policyUpdates.name,
    policyVersionsTopic: runTopics.policyVersions.name,
  };
  fs.writeFileSync(path.join(runDir, 'offline.json'), JSON.stringify(report, null, 2));
  log.info('offline run recorded', { updateId, usable: brew.usable.length, examples: trained.training.examples });
  return report;
}

/** The run's name and that it does not exist yet, and every budget, before anything is read or written. */
function checkOptions(o: OfflineJobOptions): { location: RunLocation; maxFailedShare: number } {
  const location = runLocation(o.runsDir, o.run);
  if (!Number.isSafeInteger(o.fromMs) || !Number.isSafeInteger(o.toMs) || o.fromMs >= o.toMs)
    throw new ValidationError('from', `must be before to (got ${o.fromMs} .. ${o.toMs})`);
  if (!CREDIT_MODES.includes(o.creditMode)) throw new ValidationError('creditMode', `must be one of ${CREDIT_MODES.join(', ')}, got ${String(o.creditMode)}`);
  const maxFailedShare = o.maxFailedShare ?? DEFAULT_MAX_FAILED_SHARE;
  // Checked before anything is read or written: a bad budget must not leave published events behind.
  if (!Number.isInteger(o.sft.steps) || o.sft.steps < 1) throw new ValidationError('sft.steps', `must be a positive integer, got ${o.sft.steps}`);
  if (!Number.isInteger(o.sft.batchSize) || o.sft.batchSize < 1)
    throw new ValidationError('sft.batchSize', `must be a positive integer, got ${o.sft.batchSize}`);
  if (!(o.sft.lr > 0) || !Number.isFinite(o.sft.lr)) throw new ValidationError('sft.lr', `must be a finite number > 0, got ${o.sft.lr}`);
  if (!(maxFailedShare >= 0 && maxFailedShare <= 1)) throw new ValidationError('maxFailedShare', `must be in [0, 1], got ${maxFailedShare}`);
  return { location, maxFailedShare };
}

interface Brew {
  brewed: BrewedTrajectory[];
  usable: BrewedTrajectory[];
  excluded: Record<string, number>;
  trainOn: 'policy' | 'all';
  examples: WeightedExample[];
}

/** Infers each trajectory's task and scores its credits; refuses a range with no action to train on. */
async function brewAll(
  o: OfflineJobOptions,
  assembled: AssembledTrajectories,
  maxFailedShare: number,
  undecodable: number,
  onProgress: (done: number, total: number) => void,
): Promise<Brew> {
  const scorer = new InstructionScorer(o.scorer.model);
  const brewed: BrewedTrajectory[] = [];
  for (const [i, t] of assembled.trajectories.entries()) {
    brewed.push(await brewTrajectory(t, o.inferrer, scorer, { creditMode: o.creditMode, maxFailedShare }));
    onProgress(i + 1, assembled.trajectories.length);
  }
  const usable = brewed.filter((b) => b.exclusion === null);
  const excluded: Record<string, number> = { 'incomplete-episode': assembled.incomplete.length, ...countBy(assembled.unopened.map((u) => u.reason)) };
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
  return { brewed, usable, excluded, trainOn, examples };
}

interface Trained {
  versionBefore: number;
  hashBefore: string;
  hashAfter: string;
  training: SftRunResult;
  /** Wall clock when training started (the update's wall time runs from here). */
  startedMs: number;
}

/** Checkpoints the starting version, trains with credit-weighted SFT and checkpoints the one new version. */
async function trainNewVersion(
  o: OfflineJobOptions,
  location: RunLocation,
  examples: WeightedExample[],
  onProgress: (done: number, total: number) => void,
): Promise<Trained> {
  const policy = o.policy;
  const versionBefore = policy.version;
  const hashBefore = await weightsHash(policy);
  const checkpoints = location.checkpoints;
  await checkpoints.save(policy);
  const trainer = new CreditWeightedSftTrainer(policy, { lr: o.sft.lr, maxGradNorm: o.sft.maxGradNorm });
  const startedMs = Date.now();
  let training: SftRunResult;
  try {
    training = await trainWeighted(trainer, examples, { steps: o.sft.steps, batchSize: o.sft.batchSize, seed: o.sft.seed }, onProgress);
  } finally {
    trainer.dispose();
  }
  // However many optimizer steps it took, one offline run is one new version.
  policy.advanceVersionTo(versionBefore + 1);
  const hashAfter = await weightsHash(policy);
  await checkpoints.save(policy);
  return { versionBefore, hashBefore, hashAfter, training, startedMs };
}

/** One ledger row per usable trajectory, with the coordinates of its InferredTask, its credits and every source event. */
function ledgerGroups(
  o: OfflineJobOptions,
  usable: readonly BrewedTrajectory[],
  published: {
    tasks: readonly InferredTask[];
    credits: readonly ActionCredit[];
    taskCoords: KafkaCoordinates[];
    creditCoords: KafkaCoordinates[];
    maxFailedShare: number;
  },
): GroupLedgerInput[] {
  const taskCoordByEpisode = new Map(published.tasks.map((t, i) => [t.episodeId, published.taskCoords[i]]));
  const creditCoordByOutput = new Map(published.credits.map((c, i) => [`${c.episodeId}\u0000${c.outputId}`, published.creditCoords[i]]));
  const objectiveConfig = JSON.stringify({
    method: 'agentbrew',
    creditMode: o.creditMode,
    maxFailedShare: published.maxFailedShare,
    inferrer: o.inferrer.name,
    scorer: `${o.scorer.id}@v${o.scorer.version}`,
  });
  return usable.map((b) => ({
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
}

function offlineHyperparameters(
  o: OfflineJobOptions,
  run: { trainOn: 'policy' | 'all'; maxFailedShare: number; stepRule: StepSuccessRule; sourceRanges: Record<string, OffsetRange[]> },
): OfflineHyperparameters {
  return {
    method: 'agentbrew-offline',
    weighting: 'credit',
    trainOn: run.trainOn,
    creditMode: o.creditMode,
    maxFailedShare: run.maxFailedShare,
    stepRule: { ...run.stepRule },
    inferrer: o.inferrer.name,
    scorer: `${o.scorer.id}@v${o.scorer.version}`,
    lr: o.sft.lr,
    steps: o.sft.steps,
    batchSize: o.sft.batchSize,
    maxGradNorm: o.sft.maxGradNorm ?? 1,
    fromMs: o.fromMs,
    toMs: o.toMs,
    sourceRanges: run.sourceRanges,
    inferredTasksTopic: o.catalog.inferredTasks.name,
    actionCreditsTopic: o.catalog.actionCredits.name,
  };
}

/**
 * As a replay does: the run's store, and its PolicyUpdate and PolicyVersion on topics of its own
 * (`<prefix>offline.<run>.`), never the live learner's.
 */
async function recordUpdate(
  o: OfflineJobOptions,
  location: RunLocation,
  trained: Trained,
  update: { groups: GroupLedgerInput[]; hyperparameters: OfflineHyperparameters; eventTimeMs: number; now: () => number; trajectories: number; usable: number },
): Promise<{ detail: UpdateDetail; updateId: string; runTopics: TopicCatalog }> {
  const policy = o.policy;
  const updateId = `offline-${o.run}-${policy.id}-v${policy.version}`;
  const run = await IsolatedRun.open(location, {
    kafka: o.kafka,
    topicPrefix: `${o.catalog.prefix}offline.${o.run}.`,
    backend: o.backend,
    codeVersion: o.codeVersion,
    codec: o.codec,
  });
  let detail: UpdateDetail;
  try {
    await run.recorder.registerPolicy(policy.id, {
      version: trained.versionBefore,
      weightsHash: trained.hashBefore,
      checkpointUri: run.checkpointUri(policy.id, trained.versionBefore),
      createdAtMs: update.eventTimeMs,
    });
    detail = await run.recorder.recordUpdate(
      {
        updateId,
        policyId: policy.id,
        versionBefore: trained.versionBefore,
        weightsHashBefore: trained.hashBefore,
        weightsHashAfter: trained.hashAfter,
        hyperparameters: update.hyperparameters,
        seed: o.sft.seed,
        result: {
          loss: trained.training.meanLoss,
          gradNorm: trained.training.meanGradNorm,
          diagnostics: {
            'offline/trajectories': update.trajectories,
            'offline/usable': update.usable,
            'offline/examples': trained.training.examples,
            'offline/first_loss': trained.training.firstLoss,
            'offline/last_loss': trained.training.lastLoss,
          },
        },
        wallTimeMs: Date.now() - trained.startedMs,
        checkpointUri: run.checkpointUri(policy.id, policy.version),
        committedAtMs: update.now(),
      },
      update.groups,
    );
    await run.recorder.publish(detail, `agentbrew-${o.creditMode}`);
  } finally {
    await run.close();
  }
  return { detail, updateId, runTopics: run.topics };
}

function countBy(values: readonly string[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const v of values) out[v] = (out[v] ?? 0) + 1;
  return out;
}
