import * as fs from 'fs';
import * as path from 'path';
import { pathToFileURL } from 'url';
import { EnvReader, ErrorCode, initTfBackend, Logger, SrpoError } from '@srpo/core';
import { backendLabel, loadSrpoKernels, SRPO_KERNELS_VERSION, srpoMatMulRouted } from '@srpo/kernels';
import { loadCheckpoint, Policy, weightsHash } from '@srpo/policy';
import { EventCodec, readSchemaRegistry, SchemaRegistryClient } from '@srpo/events';
import { resolveCorrectionConfig, resolveObjectiveConfig, type CorrectionConfig } from '@srpo/srpo';
import { AuditStore } from '@srpo/store';
import { activeSet, advantageGroup, member, ready, SEED, simpleGroup, startFakeSchemaRegistry, tempDir, TINY_MODEL, versionZeroLogProbs } from '@srpo/testing';
import { eventsFor } from '@srpo/store';
import { CommittedPolicyState, type CommittedPolicyStateOptions } from './committed-policy-state';
import { InMemoryEventsPublisher } from './events-publisher';
import { LearnerMetrics } from './learner-metrics';
import { TfPolicyTrainer } from './policy-trainer';
import { trainingSetsFromGroup } from './training-sets';
import { UpdateCycle } from './update-cycle';
import { readUpdateHyperparameters } from './update-hyperparameters';
import type { ReadyGroup, UpdateBoundary, UpdateCycleOptions } from './update-cycle-ports';

Logger.configure({ level: 'error' });

const NOW = 1_767_225_700_000;

class Crash extends Error {}

type LearnerOptions = UpdateCycleOptions & CommittedPolicyStateOptions;

interface Learner {
  config: LearnerOptions;
  store: AuditStore;
  trainer: TfPolicyTrainer;
  state: CommittedPolicyState;
  updates: UpdateCycle;
  publisher: InMemoryEventsPublisher;
  metrics: LearnerMetrics;
  close(): Promise<void>;
}

/**
 * The learner's settings for these tests (what the learner's config gives for SRPO_POLICY_ID=solver,
 * SRPO_SEED, SRPO_LR=0.01, SRPO_CODE_VERSION=test-code and the defaults), with the few variables the
 * tests vary read from `env` as the config reads them.
 */
function learnerOptions(dir: string, options: { maxPolicyLag?: number; env?: Record<string, string>; correction?: CorrectionConfig }): LearnerOptions {
  const r = new EnvReader(options.env ?? {});
  return {
    policyId: 'solver',
    policyRoles: ['solver'],
    seed: SEED,
    checkpointDir: path.resolve(dir, 'checkpoints'),
    checkpointRetention: { keepLast: r.int('SRPO_CHECKPOINT_KEEP_LAST', 20, { min: 0 }), keepEvery: r.int('SRPO_CHECKPOINT_KEEP_EVERY', 100, { min: 0 }) },
    maxPolicyLag: options.maxPolicyLag ?? 4,
    objective: resolveObjectiveConfig(
      { objective: 'srpo', eventReduction: 'sqrt', clipLow: 0.2, clipHigh: 0.2, dualClip: r.bool('SRPO_DUAL_CLIP', true), clipRatioC: 3 },
      'objective',
    ),
    lr: 0.01,
    epochs: 1,
    maxGradNorm: 1,
    microBatchTokens: 0,
    setsPerUpdate: 16,
    codeVersion: 'test-code',
    backend: backendLabel({ name: 'tensorflow' }),
    schemaRegistry: readSchemaRegistry(r),
    correction: options.correction,
  };
}

/** One learner process: fresh objects over the given directory (a "restart" is a second call). */
async function startLearner(
  dir: string,
  options: { crashAt?: UpdateBoundary; maxPolicyLag?: number; env?: Record<string, string>; correction?: CorrectionConfig } = {},
): Promise<Learner> {
  const config = learnerOptions(dir, options);
  const store = await AuditStore.open({ kind: 'sqlite', path: path.resolve(dir, 'learner.sqlite') });
  const trainer = new TfPolicyTrainer({ policyId: config.policyId, model: TINY_MODEL, lr: config.lr, epochs: config.epochs, maxGradNorm: config.maxGradNorm });
  const metrics = new LearnerMetrics();
  const clock = () => NOW;
  const state = new CommittedPolicyState(config, store, trainer, clock, metrics);
  const publisher = new InMemoryEventsPublisher();
  // The "kill" throws instead of killing jest: nothing after the boundary runs, as in a real crash.
  const faults = {
    reached: (point: UpdateBoundary) => {
      if (point === options.crashAt) throw new Crash(`crashed at ${options.crashAt}`);
    },
  };
  const updates = new UpdateCycle(config, { store, trainer, publisher, clock, faults, state, metrics });
  await state.restore();
  return {
    config,
    store,
    trainer,
    state,
    updates,
    publisher,
    metrics,
    close: async () => {
      trainer.dispose();
      await store.close();
    },
  };
}

async function metricValue(metrics: LearnerMetrics, name: string, labels: Record<string, string> = {}): Promise<number | undefined> {
  const m = (await metrics.registry.getMetricsAsJSON()).find((x) => x.name === name);
  const v = (m?.values as { value: number; labels: Record<string, string | number> }[] | undefined)?.find((x) =>
    Object.entries(labels).every(([k, l]) => x.labels[k] === l),
  );
  return v?.value;
}

/** Two groups whose behaviour log-probs are the version-0 policy's own, shifted by known amounts. */
async function shiftedBatch(): Promise<{ batch: ReadyGroup[]; expected: { rhoA: number; rhoB: number } }> {
  const context = [1, 2, 3];
  const response = [4, 5, 6];
  const exact = await versionZeroLogProbs(context, response);
  // Two counted tokens per member; the third is masked and carries a wild value the objective must ignore.
  const lossMask = [true, true, false];
  const shifted = (delta: number) => [exact[0] - delta, exact[1] - delta, exact[2] - 5];
  const setA = activeSet('A', [
    member({ outputId: 'A0', context, response, logpOld: shifted(0.01), lossMask }),
    member({ outputId: 'A1', context, response, logpOld: shifted(0.01), lossMask }),
  ]);
  const setB = activeSet('B', [
    member({ outputId: 'B0', context, response, logpOld: shifted(-0.02), lossMask }),
    member({ outputId: 'B1', context, response, logpOld: shifted(-0.02), lossMask }),
  ]);
  const setC = activeSet('C', [member({ outputId: 'C0', context, response, logpOld: exact })]);
  const batch = [
    ready(
      advantageGroup('g1', [
        { set: setA, advantage: 1 },
        { set: setB, advantage: -1 },
      ]),
    ),
    ready(advantageGroup('g2', [{ set: setC, advantage: 0.5 }])),
  ];
  // SRPO by hand: member log-ratio ℓ = Σ_counted (new − old) = 2δ; set log-ratio L = (1/√K) Σ ℓ with K = 2.
  return { batch, expected: { rhoA: Math.exp((2 * 2 * 0.01) / Math.SQRT2), rhoB: Math.exp((2 * 2 * -0.02) / Math.SQRT2) } };
}

describe('UpdateCycle on SQLite with a real tiny policy', () => {
  let dir: string;
  let learner: Learner | undefined;

  beforeAll(async () => {
    await initTfBackend('tensorflow');
  });

  beforeEach(() => {
    dir = tempDir('update');
  });

  afterEach(async () => {
    await learner?.close();
    learner = undefined;
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('starts from version 0 made from the seed and registers it', async () => {
    learner = await startLearner(dir);
    const expectedHash = await weightsHash(Policy.create('solver', TINY_MODEL, SEED));
    expect(learner.state.current()).toEqual({
      policyId: 'solver',
      version: 0,
      weightsHash: expectedHash,
      checkpointUri: pathToFileURL(path.join(dir, 'checkpoints', 'solver', 'v0')).href,
    });
    expect(await learner.store.listVersions('solver')).toEqual([
      { policyId: 'solver', version: 0, weightsHash: expectedHash, checkpointUri: learner.state.current().checkpointUri, updateId: null, createdAtMs: NOW },
    ]);
    expect((await loadCheckpoint(path.join(dir, 'checkpoints', 'solver', 'v0'))).manifest.weightsHash).toBe(expectedHash);
  });

  it('applies an update and records it completely', async () => {
    learner = await startLearner(dir);
    const { batch, expected } = await shiftedBatch();
    const before = learner.state.current();
    const outcome = await learner.updates.applyBatch(batch);
    const update = outcome.update;
    if (!update) throw new Error('expected an update');
    expect(outcome).toMatchObject({ skipped: [], redelivered: [], foreign: [] });

    // The objective against the recorded behaviour log-probs, worked out above by hand.
    const { rhoA, rhoB } = expected;
    expect(update.loss).toBeCloseTo(-(rhoA * 1 + rhoB * -1 + 1 * 0.5) / 3, 5);
    expect(update.diagnostics['ratio/max']).toBeCloseTo(rhoA, 5);
    expect(update.diagnostics['ratio/min']).toBeCloseTo(rhoB, 5);
    expect(update.diagnostics['ratio/mean_k1']).toBeCloseTo(1, 5);
    expect(update.diagnostics['ratio/mean_k2']).toBeCloseTo((rhoA + rhoB) / 2, 5);
    expect(update.diagnostics['batch/tokens']).toBe(2 * 4 + 3);
    expect(update.diagnostics['losses/clip_frac_low'] + update.diagnostics['losses/clip_frac_high']).toBe(0);
    expect(update.gradNorm).toBeGreaterThan(0);

    // Hashes: before is the seed's weights, after is what the checkpoint holds.
    const ckptDir = path.join(dir, 'checkpoints', 'solver', 'v1');
    const ckpt = await loadCheckpoint(ckptDir);
    const afterHash = await weightsHash(ckpt.policy);
    ckpt.policy.dispose();
    expect(update).toMatchObject({
      policyId: 'solver',
      versionBefore: 0,
      versionAfter: 1,
      weightsHashBefore: before.weightsHash,
      weightsHashAfter: afterHash,
      seed: SEED,
      // The recorded backend names the fused kernels when they computed the step, and SrpoMatMul
      // when it ran the products (machines where oneDNN has no AVX-512).
      backend: loadSrpoKernels().loaded ? `tensorflow+srpo-kernels.${SRPO_KERNELS_VERSION}${srpoMatMulRouted() ? '+srpo-matmul' : ''}` : 'tensorflow',
      codeVersion: 'test-code',
      checkpointUri: pathToFileURL(ckptDir).href,
      committedAtMs: NOW,
      hyperparameters: {
        lr: 0.01,
        epochs: 1,
        maxGradNorm: 1,
        maxPolicyLag: 4,
        setsPerUpdate: 16,
        temperature: 1,
        objective: { objective: 'srpo', eventReduction: 'sqrt' },
      },
    });
    expect(update.weightsHashAfter).not.toBe(update.weightsHashBefore);
    expect(update.updateId).toMatch(/^solver\.v1\.[0-9a-f]{12}$/);
    expect(await learner.trainer.weightsHash()).toBe(afterHash);

    // Coordinates of every source event, read back from the store.
    const stored = await learner.store.getUpdate(update.updateId);
    expect(stored).toEqual(update);
    expect(stored.groups.map((g) => [g.groupId, g.source, g.setIds, g.advantages])).toEqual([
      ['g1', batch[0].source, ['A', 'B'], [1, -1]],
      ['g2', batch[1].source, ['C'], [0.5]],
    ]);
    const setB = batch[0].group.sets[1];
    expect(stored.groups[0].sources[1]).toEqual({
      setId: 'B',
      set: setB.setSource,
      transition: setB.set.transitionSource,
      outcome: setB.set.outcomeSource,
      members: setB.set.members.map((m) => ({ outputId: m.outputId, source: m.source })),
    });

    // State, events, metrics.
    expect(learner.state.current()).toMatchObject({ version: 1, weightsHash: afterHash });
    expect(learner.publisher.published).toEqual([eventsFor(stored)]);
    expect(learner.publisher.published[0].update).toMatchObject({
      groupIds: ['g1', 'g2'],
      groupSources: [batch[0].source, batch[1].source],
      objective: 'srpo',
      eventTimeMs: NOW,
    });
    expect(learner.publisher.published[0].version).toEqual({
      policyId: 'solver',
      version: 1,
      weightsHash: afterHash,
      checkpointUri: update.checkpointUri,
      updateId: update.updateId,
      eventTimeMs: NOW,
    });
    expect(await metricValue(learner.metrics, 'learner_updates_total')).toBe(1);
    expect(await metricValue(learner.metrics, 'learner_groups_consumed_total')).toBe(2);
    expect(await metricValue(learner.metrics, 'learner_policy_version')).toBe(1);
    expect(await metricValue(learner.metrics, 'learner_loss')).toBeCloseTo(update.loss, 10);
  });

  it('with a TIS correction: the ratio against the learner’s own log-probs, the engine gap weighted and recorded; the recorded options recompute the update bit for bit', async () => {
    const correction = resolveCorrectionConfig({ correction: 'tis', cap: 2 });
    learner = await startLearner(dir, { correction });
    const { batch } = await shiftedBatch();
    const update = (await learner.updates.applyBatch(batch)).update;
    if (!update) throw new Error('expected an update');
    // By hand: the proximal log-probs are version 0's own, so every set ratio is 1 and
    // m_S = mean(prox − engine) = δ: +0.01 (A), −0.02 (B), 0 (C; its masked wild token unread);
    // w_S = e^δ (the cap 2 does not bind); loss = −(1/3)(e^0.01·1 + e^−0.02·(−1) + 1·0.5).
    expect(update.diagnostics['ratio/min']).toBeCloseTo(1, 5);
    expect(update.diagnostics['ratio/max']).toBeCloseTo(1, 5);
    expect(update.diagnostics['mismatch/log_ratio_mean']).toBeCloseTo((0.01 - 0.02) / 3, 5);
    expect(update.diagnostics['mismatch/log_ratio_min']).toBeCloseTo(-0.02, 5);
    expect(update.diagnostics['mismatch/log_ratio_max']).toBeCloseTo(0.01, 5);
    expect(update.diagnostics['mismatch/weight_mean']).toBeCloseTo((Math.exp(0.01) + Math.exp(-0.02) + 1) / 3, 5);
    // k3 per set: e^δ − 1 − δ.
    const k3 = (d: number) => Math.exp(d) - 1 - d;
    expect(update.diagnostics['mismatch/k3']).toBeCloseTo((k3(0.01) + k3(-0.02)) / 3, 7);
    expect(update.diagnostics['mismatch/truncated_frac']).toBe(0);
    expect(update.diagnostics['mismatch/masked_frac']).toBe(0);
    expect(update.loss).toBeCloseTo(-(Math.exp(0.01) - Math.exp(-0.02) + 0.5) / 3, 5);
    expect(update.hyperparameters.correction).toEqual(correction);
    expect(await metricValue(learner.metrics, 'learner_mismatch', { stat: 'mismatch/log_ratio_mean' })).toBeCloseTo(-0.01 / 3, 5);

    // As `srpo audit verify` recomputes it: a fresh trainer from checkpoint v0 and the recorded hyperparameters.
    const hyper = readUpdateHyperparameters(update);
    const codec = new EventCodec();
    const sets = batch.flatMap((r) => trainingSetsFromGroup(codec, r.group));
    const recompute = async (withCorrection: boolean): Promise<string> => {
      const fresh = new TfPolicyTrainer({ policyId: 'solver', model: TINY_MODEL, lr: hyper.lr, epochs: hyper.epochs, maxGradNorm: hyper.maxGradNorm });
      try {
        await fresh.load(path.join(dir, 'checkpoints', 'solver', 'v0'));
        await fresh.step(sets, hyper.objective, withCorrection ? hyper.correction : undefined);
        return await fresh.weightsHash();
      } finally {
        fresh.dispose();
      }
    };
    expect(await recompute(true)).toBe(update.weightsHashAfter);
    expect(await recompute(false)).not.toBe(update.weightsHashAfter);
  });

  it('scores members at their sampling temperature', async () => {
    learner = await startLearner(dir);
    const context = [2, 3];
    const response = [7, 8];
    const atHalf = await versionZeroLogProbs(context, response, 0.5);
    const atOne = await versionZeroLogProbs(context, response, 1);
    // Scored at the wrong temperature the set ratio would be exp(Σ(atOne − atHalf)), visibly off 1 at the tolerance below.
    const wrongLogRatio = atOne.reduce((a, v, i) => a + v - atHalf[i], 0);
    expect(Math.abs(wrongLogRatio)).toBeGreaterThan(1e-3);
    const m = member({ outputId: 't0', context, response, logpOld: atHalf, temperature: 0.5 });
    const outcome = await learner.updates.applyBatch([ready(advantageGroup('gt', [{ set: activeSet('T', [m]), advantage: 1 }]))]);
    expect(outcome.update?.diagnostics['ratio/mean']).toBeCloseTo(1, 5);
    expect(outcome.update?.hyperparameters.temperature).toBe(0.5);
  });

  it('skips a stale group, records why, and trains on the rest', async () => {
    learner = await startLearner(dir, { maxPolicyLag: 0 });
    await learner.updates.applyBatch([simpleGroup('first')]);
    const stale = simpleGroup('stale', { version: 0 });
    const fresh = simpleGroup('fresh', { version: 1 });
    const outcome = await learner.updates.applyBatch([stale, fresh]);
    expect(outcome.skipped).toEqual([{ groupId: 'stale', reason: 'stale', lag: 1, detail: 'oldest member at version 0, learner at 1, SRPO_MAX_POLICY_LAG=0' }]);
    expect(outcome.update?.groups.map((g) => g.groupId)).toEqual(['fresh']);
    expect(await learner.store.listSkipped('solver')).toEqual([
      {
        policyId: 'solver',
        groupId: 'stale',
        reason: 'stale',
        detail: 'oldest member at version 0, learner at 1, SRPO_MAX_POLICY_LAG=0',
        lag: 1,
        policyVersion: 1,
        source: stale.source,
        createdAtMs: NOW,
      },
    ]);
    expect((await learner.store.isGroupApplied('solver', ['stale'])).size).toBe(0);
    expect(await metricValue(learner.metrics, 'learner_groups_skipped_total', { reason: 'stale' })).toBe(1);
    expect(learner.state.current().version).toBe(2);
  });

  it('records other reasons: future version, malformed input, mixed temperatures, a minority temperature', async () => {
    learner = await startLearner(dir);
    const badToken = member({ outputId: 'bad/o', response: [4, 99, 6], logpOld: [-1, -1, -1] });
    const mixed = advantageGroup('mixed', [
      {
        set: activeSet('mx', [
          member({ outputId: 'mx0', logpOld: [-1, -1, -1], temperature: 1 }),
          member({ outputId: 'mx1', logpOld: [-1, -1, -1], temperature: 0.7 }),
        ]),
        advantage: 1,
      },
    ]);
    const outcome = await learner.updates.applyBatch([
      simpleGroup('future', { version: 3 }),
      ready(advantageGroup('bad', [{ set: activeSet('bad/s', [badToken]), advantage: 1 }])),
      ready(mixed),
      simpleGroup('cold', { temperature: 0.7 }),
      simpleGroup('warm1'),
      simpleGroup('warm2'),
      simpleGroup('theirs', { policyId: 'critic' }),
    ]);
    expect(outcome.skipped.map((s) => [s.groupId, s.reason])).toEqual([
      ['future', 'future-version'],
      ['bad', 'invalid-input'],
      ['mixed', 'mixed-temperature'],
      ['cold', 'temperature-mismatch'],
    ]);
    expect(outcome.skipped[1].detail).toMatch(/members\[0\]\.responseTokens\[1\]: token id must be an integer in \[0, 16\), got 99/);
    expect(outcome.foreign).toEqual(['theirs']);
    expect(outcome.update?.groups.map((g) => g.groupId)).toEqual(['warm1', 'warm2']);
    expect((await learner.store.listSkipped('solver')).map((s) => s.groupId).sort()).toEqual(['bad', 'cold', 'future', 'mixed']);
    expect((await learner.store.isGroupApplied('solver', ['theirs'])).size).toBe(0);
  });

  it('trains on members written in the Confluent wire format when a schema registry is configured', async () => {
    const registry = await startFakeSchemaRegistry();
    try {
      // Agents with a registry frame each AgentOutput as 00 + schema id; the materializer nests those bytes unchanged.
      const agentCodec = new EventCodec(undefined, { registry: new SchemaRegistryClient({ url: registry.url }) });
      await agentCodec.useRegistry();
      const plain = new EventCodec();
      const reframe = async () => {
        const { batch, expected } = await shiftedBatch();
        for (const r of batch) {
          for (const gs of r.group.sets) {
            for (const m of gs.set.members) m.output = agentCodec.encode('AgentOutput', plain.decodeAs('AgentOutput', m.output));
          }
        }
        expect(batch[0].group.sets[0].set.members[0].output[0]).toBe(0);
        return { batch, expected };
      };

      // Without the registry the learner cannot read them: the groups are skipped, not trained on garbage.
      learner = await startLearner(dir);
      const blind = await learner.updates.applyBatch((await reframe()).batch);
      expect(blind.update).toBeUndefined();
      expect(blind.skipped.map((s) => [s.groupId, s.reason])).toEqual([
        ['g1', 'invalid-input'],
        ['g2', 'invalid-input'],
      ]);
      await learner.close();
      learner = undefined;

      const second = path.join(dir, 'with-registry');
      fs.mkdirSync(second);
      learner = await startLearner(second, { env: { SRPO_SCHEMA_REGISTRY_URL: registry.url } });
      const { batch, expected } = await reframe();
      const outcome = await learner.updates.applyBatch(batch);
      expect(outcome.skipped).toEqual([]);
      // The same objective value as the single-object batch, worked out by hand in shiftedBatch.
      expect(outcome.update?.loss).toBeCloseTo(-(expected.rhoA * 1 + expected.rhoB * -1 + 1 * 0.5) / 3, 5);
      expect(registry.requests.some((r) => r.startsWith('GET /schemas/ids/'))).toBe(true);
    } finally {
      await new Promise<void>((resolve) => registry.server.close(() => resolve()));
    }
  });

  it('applies nothing twice when a batch is redelivered', async () => {
    learner = await startLearner(dir, { maxPolicyLag: 0 });
    const g = simpleGroup('once');
    await learner.updates.applyBatch([g]);
    const stale = simpleGroup('late', { version: 0 });
    await learner.updates.applyBatch([stale]);
    const hash = await learner.trainer.weightsHash();

    const again = await learner.updates.applyBatch([g, stale, g]);
    expect(again).toEqual({ skipped: [], redelivered: ['once', 'once', 'late'], foreign: [] });
    expect(again.update).toBeUndefined();
    expect(learner.state.current().version).toBe(1);
    expect(await learner.trainer.weightsHash()).toBe(hash);
    expect(await learner.store.listUpdates({ policyId: 'solver' })).toHaveLength(1);
    expect(await learner.store.listSkipped('solver')).toHaveLength(1);
    expect(learner.publisher.published).toHaveLength(1);
    expect(await metricValue(learner.metrics, 'learner_groups_redelivered_total')).toBe(3);
  });

  it('trains past a floor behaviour log-prob (−9999) in a negative-advantage set: nothing skipped, the set dual-clipped and counted', async () => {
    learner = await startLearner(dir);
    const { batch, expected } = await shiftedBatch();
    const context = [1, 2, 3];
    const response = [4, 5, 6];
    const exact = await versionZeroLogProbs(context, response);
    // One token of one member reported at the OpenAI API's floor: L_F = (1/√2)(Σ new − old) ≈ 7070, far past e^88.
    const floored = activeSet('F', [
      member({ outputId: 'F0', context, response, logpOld: [exact[0], -9999, exact[2]] }),
      member({ outputId: 'F1', context, response, logpOld: exact }),
    ]);
    const outcome = await learner.updates.applyBatch([...batch, ready(advantageGroup('gF', [{ set: floored, advantage: -1 }]))]);
    expect(outcome.skipped).toEqual([]);
    const update = outcome.update;
    if (!update) throw new Error('expected an update');
    expect(update.groups.map((g) => g.groupId)).toEqual(['g1', 'g2', 'gF']);
    // The dual clip (c = 3) bounds F's term at c·A = −3; the other three sets as in shiftedBatch.
    expect(update.loss).toBeCloseTo(-(expected.rhoA * 1 + expected.rhoB * -1 + 1 * 0.5 + 3 * -1) / 4, 5);
    expect(Number.isFinite(update.gradNorm)).toBe(true);
    expect(update.diagnostics['ratio/out_of_range']).toBe(1);
    expect(update.diagnostics['losses/clip_frac_dual']).toBe(0.25);
    expect(update.diagnostics['ratio/max']).toBeCloseTo(2 ** 64, -14); // saturated, not ∞
    expect(update.hyperparameters.objective).toMatchObject({ dualClip: true, clipRatioC: 3 });
  });

  it('isolates a set that still makes the step non-finite, records its group as non-finite-set, and trains the rest exactly as without it', async () => {
    // Without the dual clip, a negative-advantage set whose log-ratio is just under the bound (44.1 < 44.36) has a
    // finite loss ≈ 1.4e19 but a gradient whose squared norm overflows float32: the step's gradient norm is ∞.
    const env = { SRPO_DUAL_CLIP: 'false' };
    const context = [1, 2, 3];
    const response = [4, 5, 6];
    const exact = await versionZeroLogProbs(context, response);
    const nearBound = activeSet('X', [member({ outputId: 'X0', context, response, logpOld: exact.map((x) => x - 14.7) })]);
    const bad = ready(advantageGroup('gX', [{ set: nearBound, advantage: -1 }]));

    // The reference: another learner trained on the good groups alone.
    const refDir = path.join(dir, 'reference');
    fs.mkdirSync(refDir);
    learner = await startLearner(refDir, { env });
    const reference = await learner.updates.applyBatch((await shiftedBatch()).batch);
    await learner.close();

    learner = await startLearner(dir, { env });
    const v0 = learner.state.current();
    const { batch } = await shiftedBatch();
    const outcome = await learner.updates.applyBatch([batch[0], bad, batch[1]]);
    expect(outcome.skipped).toHaveLength(1);
    expect(outcome.skipped[0]).toMatchObject({ groupId: 'gX', reason: 'non-finite-set', lag: 0 });
    expect(outcome.skipped[0].detail).toMatch(
      /^set X alone: loss [0-9.e+]+, gradient norm (Infinity|NaN) \(mini-batch step: loss [0-9.e+]+, gradient norm (Infinity|NaN)\)$/,
    );
    // The rest trains, to the very weights of the reference learner (the failed step was rolled back first).
    const update = outcome.update;
    if (!update) throw new Error('expected an update');
    expect(update.groups.map((g) => g.groupId)).toEqual(['g1', 'g2']);
    expect(update).toMatchObject({
      versionBefore: 0,
      versionAfter: 1,
      weightsHashBefore: v0.weightsHash,
      weightsHashAfter: reference.update?.weightsHashAfter,
    });
    expect(update.loss).toBe(reference.update?.loss);
    expect(await learner.trainer.weightsHash()).toBe(reference.update?.weightsHashAfter);
    // Audit records: the group is skipped (never in the ledger), with its coordinates and reason.
    expect(await learner.store.listSkipped('solver')).toEqual([
      {
        policyId: 'solver',
        groupId: 'gX',
        reason: 'non-finite-set',
        detail: outcome.skipped[0].detail,
        lag: 0,
        policyVersion: 0,
        source: bad.source,
        createdAtMs: NOW,
      },
    ]);
    expect((await learner.store.isGroupApplied('solver', ['gX'])).size).toBe(0);
    expect(await metricValue(learner.metrics, 'learner_groups_skipped_total', { reason: 'non-finite-set' })).toBe(1);
    // A redelivery changes nothing.
    const again = await learner.updates.applyBatch([batch[0], bad, batch[1]]);
    expect(again).toEqual({ skipped: [], redelivered: ['g1', 'gX', 'g2'], foreign: [] });
  });

  it('discards the weights of a non-finite update that no single set explains, and skips every group as non-finite-loss', async () => {
    learner = await startLearner(dir, { env: { SRPO_DUAL_CLIP: 'false' } });
    const hash = await learner.trainer.weightsHash();
    const context = [1, 2, 3];
    const response = [4, 5, 6];
    const exact = await versionZeroLogProbs(context, response);
    const nearBound = activeSet('X', [member({ outputId: 'X0', context, response, logpOld: exact.map((x) => x - 14.7) })]);
    // Pretend every set is finite on its own (a collective overflow): nothing can be isolated.
    jest.spyOn(learner.trainer, 'probe').mockImplementation(async (sets) => sets.map((s) => ({ setId: s.setId, loss: 0, gradNorm: 0 })));
    const outcome = await learner.updates.applyBatch([simpleGroup('ok'), ready(advantageGroup('gX', [{ set: nearBound, advantage: -1 }]))]);
    expect(outcome.update).toBeUndefined();
    expect(outcome.skipped.map((s) => [s.groupId, s.reason])).toEqual([
      ['ok', 'non-finite-loss'],
      ['gX', 'non-finite-loss'],
    ]);
    expect(learner.state.current().version).toBe(0);
    expect(await learner.trainer.weightsHash()).toBe(hash);
    expect(fs.existsSync(path.join(dir, 'checkpoints', 'solver', 'v1'))).toBe(false);
  });

  it('puts the committed weights back when the database commit fails, and the retry applies cleanly', async () => {
    learner = await startLearner(dir);
    const v0 = learner.state.current();
    jest.spyOn(learner.store, 'recordUpdate').mockRejectedValueOnce(new SrpoError(ErrorCode.UNAVAILABLE, 'database gone', { retriable: true }));
    const g = simpleGroup('retry-me');
    await expect(learner.updates.applyBatch([g])).rejects.toThrow('database gone');
    expect(learner.state.current()).toEqual(v0);
    expect(await learner.trainer.weightsHash()).toBe(v0.weightsHash);
    expect(learner.publisher.published).toHaveLength(0);
    const retry = await learner.updates.applyBatch([g]);
    expect(retry.update).toMatchObject({ versionBefore: 0, versionAfter: 1, weightsHashBefore: v0.weightsHash });
  });

  it('keeps events that could not be published and sends them before the next batch', async () => {
    learner = await startLearner(dir);
    learner.publisher.failWith = new Error('broker down');
    const g = simpleGroup('p1');
    await expect(learner.updates.applyBatch([g])).rejects.toThrow('broker down');
    // Committed all the same: the batch is in the ledger.
    expect(learner.state.current().version).toBe(1);
    expect(learner.updates.pendingPublications()).toBe(1);
    learner.publisher.failWith = undefined;
    const retry = await learner.updates.applyBatch([g]);
    expect(retry.redelivered).toEqual(['p1']);
    expect(learner.publisher.published.map((p) => p.version.version)).toEqual([1]);
    expect(learner.updates.pendingPublications()).toBe(0);
  });

  it('restores the newest checkpoint that has a record, ignoring a newer one left by a crash', async () => {
    learner = await startLearner(dir);
    const first = await learner.updates.applyBatch([simpleGroup('a')]);
    await learner.close();

    // Crash between the checkpoint (v2 on disk) and the database commit.
    learner = await startLearner(dir, { crashAt: 'after-checkpoint' });
    await expect(learner.updates.applyBatch([simpleGroup('b')])).rejects.toBeInstanceOf(Crash);
    await learner.close();
    expect(fs.existsSync(path.join(dir, 'checkpoints', 'solver', 'v2', 'model.json'))).toBe(true);

    learner = await startLearner(dir);
    expect(learner.state.current()).toMatchObject({ version: 1, weightsHash: first.update?.weightsHashAfter });
    expect(await learner.trainer.weightsHash()).toBe(first.update?.weightsHashAfter);
    // The redelivered batch is applied on top of v1 and replaces the leftover.
    const redo = await learner.updates.applyBatch([simpleGroup('b')]);
    expect(redo.update).toMatchObject({ versionBefore: 1, versionAfter: 2, weightsHashBefore: first.update?.weightsHashAfter });
    expect((await loadCheckpoint(path.join(dir, 'checkpoints', 'solver', 'v2'))).manifest.weightsHash).toBe(redo.update?.weightsHashAfter);
  });

  it('refuses to start when the recorded checkpoint does not match its record', async () => {
    learner = await startLearner(dir);
    await learner.updates.applyBatch([simpleGroup('a')]);
    await learner.close();
    // Replace v1 with other weights (a valid checkpoint of version 1, but not the recorded one).
    const other = new TfPolicyTrainer({ policyId: 'solver', model: TINY_MODEL, lr: 0.01, epochs: 1, maxGradNorm: 1 });
    await other.init(SEED + 1);
    await other.step(
      [{ setId: 's', advantage: 1, members: [{ outputId: 'o', contextTokens: [1], responseTokens: [2], logpOld: [-2], mask: [1], temperature: 1 }] }],
      learner.config.objective,
    );
    await other.save(path.join(dir, 'checkpoints', 'solver', 'v1'));
    other.dispose();
    learner = undefined;
    const err = await startLearner(dir).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SrpoError);
    expect((err as SrpoError).code).toBe(ErrorCode.INTEGRITY_FAILED);
    expect((err as SrpoError).message).toMatch(/the audit record says version 1/);
  });

  it('prunes checkpoints retention no longer keeps once each update is committed, and restarts from the newest', async () => {
    const retention = { env: { SRPO_CHECKPOINT_KEEP_LAST: '2', SRPO_CHECKPOINT_KEEP_EVERY: '3' } };
    const onDisk = () => fs.readdirSync(path.join(dir, 'checkpoints', 'solver')).sort((a, b) => Number(a.slice(1)) - Number(b.slice(1)));
    learner = await startLearner(dir, retention);
    for (let i = 1; i <= 7; i++) await learner.updates.applyBatch([simpleGroup(`r${i}`, { version: i - 1 })]);
    // v7 committed: last 2 are v6, v7; anchors v0, v3, v6. Pruned: v1, v2, v4, v5.
    expect(onDisk()).toEqual(['v0', 'v3', 'v6', 'v7']);
    expect(await metricValue(learner.metrics, 'learner_checkpoints_pruned_total')).toBe(4);
    expect(await metricValue(learner.metrics, 'learner_checkpoints_retained')).toBe(4);
    await learner.close();

    // A crash after writing v8 but before its commit: the leftover is newer than the committed v7 and survives a prune.
    learner = await startLearner(dir, { ...retention, crashAt: 'after-checkpoint' });
    await expect(learner.updates.applyBatch([simpleGroup('r8', { version: 7 })])).rejects.toBeInstanceOf(Crash);
    await learner.close();
    learner = await startLearner(dir, retention);
    expect(learner.state.current().version).toBe(7);
    await learner.state.pruneCheckpoints();
    expect(onDisk()).toEqual(['v0', 'v3', 'v6', 'v7', 'v8']);
    const redo = await learner.updates.applyBatch([simpleGroup('r8', { version: 7 })]);
    expect(redo.update?.versionAfter).toBe(8);
    // v8 committed: last 2 are v7, v8; v6 stays as an anchor.
    expect(onDisk()).toEqual(['v0', 'v3', 'v6', 'v7', 'v8']);
    await learner.updates.applyBatch([simpleGroup('r9', { version: 8 })]);
    expect(onDisk()).toEqual(['v0', 'v3', 'v6', 'v8', 'v9']);
  });

  it('keeps every checkpoint with SRPO_CHECKPOINT_KEEP_LAST=0', async () => {
    learner = await startLearner(dir, { env: { SRPO_CHECKPOINT_KEEP_LAST: '0', SRPO_CHECKPOINT_KEEP_EVERY: '2' } });
    for (let i = 1; i <= 3; i++) await learner.updates.applyBatch([simpleGroup(`k${i}`)]);
    expect(fs.readdirSync(path.join(dir, 'checkpoints', 'solver')).sort()).toEqual(['v0', 'v1', 'v2', 'v3']);
  });

  describe.each([
    ['after-step', { checkpoint: false, recorded: false, publishedBeforeRestart: 0 }],
    ['after-checkpoint', { checkpoint: true, recorded: false, publishedBeforeRestart: 0 }],
    ['after-db', { checkpoint: true, recorded: true, publishedBeforeRestart: 0 }],
    ['after-publish', { checkpoint: true, recorded: true, publishedBeforeRestart: 1 }],
  ] as [UpdateBoundary, { checkpoint: boolean; recorded: boolean; publishedBeforeRestart: number }][])('a crash %s', (point, expected) => {
    it('leaves a state the restart recovers from, with no group applied twice', async () => {
      learner = await startLearner(dir, { crashAt: point });
      const g = simpleGroup('g');
      await expect(learner.updates.applyBatch([g])).rejects.toBeInstanceOf(Crash);
      expect(learner.publisher.published).toHaveLength(expected.publishedBeforeRestart);
      await learner.close();
      expect(fs.existsSync(path.join(dir, 'checkpoints', 'solver', 'v1', 'model.json'))).toBe(expected.checkpoint);

      learner = await startLearner(dir);
      expect(learner.state.current().version).toBe(expected.recorded ? 1 : 0);
      await learner.updates.republishLatest();
      // The consumer never committed the offset: the batch comes again.
      const redo = await learner.updates.applyBatch([g]);
      expect(redo.redelivered).toEqual(expected.recorded ? ['g'] : []);
      expect(learner.state.current().version).toBe(1);
      const updates = await learner.store.listUpdates({ policyId: 'solver' });
      expect(updates).toHaveLength(1);
      // Whatever the crash point, the update's events reach the publisher after the restart.
      expect(learner.publisher.published.map((p) => p.update.updateId)).toEqual([updates[0].updateId]);
    });
  });
});
