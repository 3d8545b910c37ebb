import * as tf from '@tensorflow/tfjs';
import { ValidationError, initTfBackend } from '@srpo/core';
import { DEFAULT_OBJECTIVE_CONFIG, OBJECTIVES } from './config';
import type { ObjectiveConfig } from './config';
import { advantageDiagnostics, approxKlK3, readDiagnostics } from './diagnostics';
import { disposeObjectiveOutput, objectiveLoss } from './objective';
import type { ObjectiveOutput } from './objective';
import { buildPaddedSetBatch, disposePaddedSetBatch, padRows } from './padded-batch';
import type { PaddedSetBatch } from './padded-batch';
import type { AdvantageResult } from './advantages';

// Same hand batch as objective.spec.ts. Token log-ratios (new − old):
//   set a (A = +0.5, K = 2): o1 [+0.2, −0.1], o2 [+0.1, env]
//   set b (A = −2,   K = 1): o3 [−0.2, −0.3]
//   set c (A = −1,   K = 3): o4 [−0.1], o5 [−0.1, env], o6 [−0.2, +0.1]
const HAND = [
  {
    setId: 'a',
    advantage: 0.5,
    members: [
      { outputId: 'o1', logpNew: [-0.9, -0.7], logpOld: [-1.1, -0.6], mask: [1, 1] },
      { outputId: 'o2', logpNew: [-2.0, -9.0], logpOld: [-2.1, -1.0], mask: [1, 0] },
    ],
  },
  { setId: 'b', advantage: -2, members: [{ outputId: 'o3', logpNew: [-0.6, -0.4], logpOld: [-0.4, -0.1], mask: [1, 1] }] },
  {
    setId: 'c',
    advantage: -1,
    members: [
      { outputId: 'o4', logpNew: [-1.0], logpOld: [-0.9], mask: [1] },
      { outputId: 'o5', logpNew: [-0.5, -3.0], logpOld: [-0.4, -0.2], mask: [1, 0] },
      { outputId: 'o6', logpNew: [-2.2, -0.1], logpOld: [-2.0, -0.2], mask: [1, 1] },
    ],
  },
];

// k3 per counted token, δ = old − new: exp(δ) − 1 − δ for δ in
// [−0.2, +0.1, −0.1, +0.2, +0.3, +0.1, +0.1, +0.2, −0.1]:
// 0.018731 + 0.005171 + 0.004837 + 0.021403 + 0.049859 + 0.005171 + 0.005171 + 0.021403 + 0.004837 = 0.136583; / 9 = 0.015176
const KL_K3 = 0.01517585;

function cfg(overrides: Partial<ObjectiveConfig>): ObjectiveConfig {
  return { ...DEFAULT_OBJECTIVE_CONFIG, progress: { ...DEFAULT_OBJECTIVE_CONFIG.progress }, ...overrides };
}

let batch: PaddedSetBatch;
let logpNew: tf.Tensor2D;

beforeAll(async () => {
  await initTfBackend('tensorflow');
  batch = buildPaddedSetBatch(
    HAND.map((s) => ({ setId: s.setId, advantage: s.advantage, members: s.members.map(({ outputId, logpOld, mask }) => ({ outputId, logpOld, mask })) })),
  );
  const rows = HAND.flatMap((s) => s.members.map((m) => m.logpNew));
  logpNew = tf.tensor2d(padRows(rows, 2), [6, 2]);
});

afterAll(() => {
  logpNew.dispose();
  disposePaddedSetBatch(batch);
});

async function diagnosticsFor(config: ObjectiveConfig, info?: AdvantageResult[]): Promise<Record<string, number>> {
  const out = objectiveLoss(logpNew, batch, config);
  try {
    return await readDiagnostics(out, batch, config, info);
  } finally {
    disposeObjectiveOutput(out);
  }
}

function expectMetrics(d: Record<string, number>, expected: Record<string, number>, digits = 5): void {
  for (const [k, v] of Object.entries(expected)) {
    expect(d).toHaveProperty([k]);
    expect(d[k]).toBeCloseTo(v, digits);
  }
}

describe('readDiagnostics', () => {
  it('srpo / sqrt: per-set clip fractions and ratio statistics, overall and per K', async () => {
    // ρ: a = exp(0.2/√2) = 1.151910 (inside), b = exp(−0.5) = 0.606531 (low clip, A < 0), c = exp(−0.3/√3) = 0.840965 (inside)
    const d = await diagnosticsFor(cfg({ objective: 'srpo', eventReduction: 'sqrt' }));
    expectMetrics(d, {
      'losses/loss': 0.62167,
      'losses/clip_frac_low': 1 / 3,
      'losses/clip_frac_high': 0,
      'ratio/mean': (1.15191 + 0.606531 + 0.840965) / 3,
      'ratio/min': 0.606531,
      'ratio/max': 1.15191,
      'ratio/mean_k1': 0.606531,
      'ratio/mean_k2': 1.15191,
      'ratio/mean_k3': 0.840965,
      'ratio/min_k3': 0.840965,
      'ratio/max_k3': 0.840965,
      'kl/approx_k3': KL_K3,
      'batch/sets': 3,
      'batch/members': 6,
      'batch/tokens': 9,
    });
    expect(d).not.toHaveProperty(['advantages/from_progress']);
  });

  it('srpo / sum: a clipped high, b and c clipped low', async () => {
    // ρ: a = exp(0.2) = 1.221403 > 1.2 with A > 0; b = 0.606531, c = exp(−0.3) = 0.740818 < 0.8 with A < 0
    const d = await diagnosticsFor(cfg({ objective: 'srpo', eventReduction: 'sum' }));
    expectMetrics(d, { 'losses/clip_frac_low': 2 / 3, 'losses/clip_frac_high': 1 / 3, 'ratio/max': 1.221403, 'ratio/mean_k3': 0.740818 });
    // Per set size: a (K=2) is the high clip; b (K=1) and c (K=3) the low ones.
    expectMetrics(d, {
      'losses/clip_frac_low_k1': 1,
      'losses/clip_frac_high_k1': 0,
      'losses/clip_frac_low_k2': 0,
      'losses/clip_frac_high_k2': 1,
      'losses/clip_frac_low_k3': 1,
      'losses/clip_frac_high_k3': 0,
    });
  });

  it('gspo: fractions and statistics are per member', async () => {
    // s: o1 exp(0.05) = 1.051271, o2 exp(0.1) = 1.105171, o3 exp(−0.25) = 0.778801 (low clip, A < 0),
    //    o4 = o5 = exp(−0.1) = 0.904837, o6 exp(−0.05) = 0.951229
    const d = await diagnosticsFor(cfg({ objective: 'gspo' }));
    expectMetrics(d, {
      'losses/clip_frac_low': 1 / 6,
      'losses/clip_frac_high': 0,
      'ratio/mean': 0.949358,
      'ratio/min': 0.778801,
      'ratio/max': 1.105171,
      'ratio/mean_k2': (1.051271 + 1.105171) / 2,
      'ratio/mean_k1': 0.778801,
      'ratio/mean_k3': (0.904837 * 2 + 0.951229) / 3,
      'ratio/min_k3': 0.904837,
      // Population std over a K's members: |1.105171 − 1.051271| / 2; K = 3 deviations
      // from 0.920301 are −0.015464 (twice) and +0.030928 → √(0.001435/3) = 0.021869.
      'ratio/std_k1': 0,
      'ratio/std_k2': 0.02695,
      'ratio/std_k3': 0.021869,
      'kl/approx_k3': KL_K3,
      // o3, the one clipped member, is the K=1 set's.
      'losses/clip_frac_low_k1': 1,
      'losses/clip_frac_low_k2': 0,
      'losses/clip_frac_low_k3': 0,
      'losses/clip_frac_high_k2': 0,
    });
  });

  it('grpo-token: fractions and statistics are over unmasked tokens only', async () => {
    // r per counted token: a: 1.221403 (high clip), 0.904837, 1.105171; b: 0.818731, 0.740818 (low clip);
    // c: 0.904837, 0.904837, 0.818731, 1.105171. Padded/env tokens (r = 1 or exp(−8)) must not count.
    const d = await diagnosticsFor(cfg({ objective: 'grpo-token' }));
    expectMetrics(d, {
      'losses/clip_frac_low': 1 / 9,
      'losses/clip_frac_high': 1 / 9,
      'ratio/mean': 0.947171,
      'ratio/min': 0.740818,
      'ratio/max': 1.221403,
      'ratio/mean_k2': 1.077137,
      'ratio/mean_k1': 0.779774,
      'ratio/mean_k3': 0.933394,
      'batch/tokens': 9,
    });
  });

  it('adds advantage metrics when advantage results are given', async () => {
    const info: AdvantageResult[] = [
      { setId: 'a', groupKey: 'g1', advantage: 0.7, fromProgress: true, degenerateGroup: false },
      { setId: 'b', groupKey: 'g1', advantage: -0.7, fromProgress: true, degenerateGroup: false },
      { setId: 'c', groupKey: 'g2', advantage: 0, fromProgress: false, degenerateGroup: true },
    ];
    const d = await diagnosticsFor(cfg({ objective: 'srpo' }), info);
    expectMetrics(d, { 'advantages/from_progress': 2, 'groups/count': 2, 'groups/degenerate_share': 0.5 });
  });

  it('refuses an output computed for another objective', async () => {
    const out = objectiveLoss(logpNew, batch, cfg({ objective: 'gspo' }));
    try {
      await expect(readDiagnostics(out, batch, cfg({ objective: 'srpo' }))).rejects.toThrow(ValidationError);
      await expect(readDiagnostics(out, batch, cfg({ objective: 'srpo' }))).rejects.toThrow('config.objective: is srpo but the output was computed with gspo');
    } finally {
      disposeObjectiveOutput(out);
    }
  });

  it.each(OBJECTIVES)('%s: tf.memory().numTensors is unchanged after objectiveLoss (in tidy) + readDiagnostics + dispose', async (objective) => {
    const config = cfg({ objective });
    const before = tf.memory().numTensors;
    // ObjectiveOutput is an interface, which TypeScript does not treat as a TensorContainer; tidy keeps its tensors all the same.
    const out = tf.tidy(() => objectiveLoss(logpNew, batch, config) as unknown as tf.TensorContainer) as unknown as ObjectiveOutput;
    const afterLoss = tf.memory().numTensors;
    const d = await readDiagnostics(out, batch, config);
    // readDiagnostics frees what it creates.
    expect(tf.memory().numTensors).toBe(afterLoss);
    disposeObjectiveOutput(out);
    expect(tf.memory().numTensors).toBe(before);
    expect(Number.isFinite(d['losses/loss'])).toBe(true);
  });
});

describe('approxKlK3', () => {
  it('is 0 when the policies agree and matches the hand value on the hand batch', () => {
    const same = tf.tidy(() => approxKlK3(tf.zeros<tf.Rank.R2>([2, 3]), tf.ones<tf.Rank.R2>([2, 3])).dataSync()[0]);
    expect(same).toBe(0);
    const kl = tf.tidy(() => {
      const tokenLogRatio = tf.mul<tf.Tensor2D>(tf.sub(logpNew, batch.logpOld), batch.mask);
      return approxKlK3(tokenLogRatio, batch.mask).dataSync()[0];
    });
    expect(kl).toBeCloseTo(KL_K3, 6);
  });
});

describe('advantageDiagnostics', () => {
  it('counts sets from progress and the share of degenerate groups', () => {
    const info: AdvantageResult[] = [
      { setId: 's1', groupKey: 'x', advantage: 0, fromProgress: false, degenerateGroup: true },
      { setId: 's2', groupKey: 'y', advantage: 1, fromProgress: true, degenerateGroup: false },
      { setId: 's3', groupKey: 'y', advantage: -1, fromProgress: true, degenerateGroup: false },
      { setId: 's4', groupKey: 'z', advantage: 0, fromProgress: false, degenerateGroup: true },
      { setId: 's5', groupKey: 'z', advantage: 0, fromProgress: false, degenerateGroup: true },
    ];
    expect(advantageDiagnostics(info)).toEqual({ 'advantages/from_progress': 2, 'groups/count': 3, 'groups/degenerate_share': 2 / 3 });
    expect(advantageDiagnostics([])).toEqual({ 'advantages/from_progress': 0, 'groups/count': 0, 'groups/degenerate_share': 0 });
  });
});
