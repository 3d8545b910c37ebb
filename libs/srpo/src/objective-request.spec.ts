import * as tf from '@tensorflow/tfjs';
import { ValidationError, initTfBackend } from '@srpo/core';
import { evaluateObjectiveRequest } from './objective-request';

beforeAll(async () => {
  await initTfBackend('tensorflow');
});

// Request worked out by hand (token log-ratios new − old in brackets):
//   t-17, group g, reward 1:  o-1 [−0.1, +0.1] → ℓ = 0;  o-2 [+0.1] → ℓ = 0.1           (K = 2)
//   t-18, group g, reward 0:  o-3 [−0.5, env, +0.1] → ℓ = −0.4                          (K = 1)
//   t-19, group h, reward 0.3: o-4 [0] → ℓ = 0                                            (K = 1, singleton group)
// Advantages: g = {1, 0}: μ = 0.5, sample σ = √0.5 = 0.707107 → A = ±0.5/(0.707107 + 1e-6) = ±0.7071058; h → 0.
const A = 0.5 / (Math.SQRT1_2 + 1e-6);

function request(): { config?: Record<string, unknown>; sets: Record<string, unknown>[] } {
  return {
    sets: [
      {
        setId: 't-17',
        groupKey: 'g',
        reward: 1,
        members: [
          { outputId: 'o-1', logpNew: [-1.2, -0.3], logpOld: [-1.1, -0.4], mask: [1, 1] },
          { outputId: 'o-2', logpNew: [-0.5], logpOld: [-0.6], mask: [1] },
        ],
      },
      { setId: 't-18', groupKey: 'g', reward: 0, members: [{ outputId: 'o-3', logpNew: [-0.7, -2.0, -0.2], logpOld: [-0.2, -1.0, -0.3], mask: [1, 0, 1] }] },
      { setId: 't-19', groupKey: 'h', reward: 0.3, members: [{ outputId: 'o-4', logpNew: [-0.1], logpOld: [-0.1], mask: [1] }] },
    ],
  };
}

describe('evaluateObjectiveRequest', () => {
  it('uses the default config (srpo, sqrt, clip 0.2) when none is given', async () => {
    const report = await evaluateObjectiveRequest(request(), { grad: false });
    // ρ: t-17 = exp(0.1/√2) = 1.073271 (inside) → 1.073271·0.707106 = 0.758917
    //    t-18 = exp(−0.4) = 0.670320 < 0.8, A < 0 → min(−0.473986, −0.8·0.707106 = −0.565685) = −0.565685 (clipped)
    //    t-19 = exp(0) = 1, A = 0 → 0
    // loss = −(0.758917 − 0.565685 + 0)/3 = −0.064410
    expect(report.loss).toBeCloseTo(-0.06441042, 6);
    expect(report.sets.map((s) => s.setId)).toEqual(['t-17', 't-18', 't-19']);
    expect(report.sets.map((s) => s.advantage)).toEqual([A, -A, 0]);
    expect(report.sets.map((s) => s.clipped)).toEqual([false, true, false]);
    [1.07327066, 0.67032005, 1].forEach((r, e) => expect(report.sets[e].ratio).toBeCloseTo(r, 6));
    expect(report.gradLogpNew).toBeUndefined();
    const d = report.diagnostics;
    expect(d['losses/clip_frac_low']).toBeCloseTo(1 / 3, 7);
    expect(d['losses/clip_frac_high']).toBe(0);
    expect(d['ratio/mean']).toBeCloseTo((1.07327066 + 0.67032005 + 1) / 3, 6);
    expect(d['ratio/mean_k1']).toBeCloseTo((0.67032005 + 1) / 2, 6);
    expect(d['ratio/mean_k2']).toBeCloseTo(1.07327066, 6);
    // k3 over the 6 counted tokens, δ = old − new ∈ {0.1, −0.1, −0.1, 0.5, −0.1, 0}:
    // (0.005171 + 0.004837 + 0.004837 + 0.148721 + 0.004837 + 0)/6 = 0.028067
    expect(d['kl/approx_k3']).toBeCloseTo(0.02806741, 6);
    expect(d['advantages/from_progress']).toBe(0);
    expect(d['groups/count']).toBe(2);
    expect(d['groups/degenerate_share']).toBe(0.5);
    expect(d['batch/tokens']).toBe(6);
  });

  it('with grad returns ∂loss/∂logpNew per token, nested [set][member][token] in input order', async () => {
    const report = await evaluateObjectiveRequest(request(), { grad: true });
    // Unclipped set: ∂/∂logpNew_u of −(1/3)·A·exp(c(K)Σℓ) = −(1/3)·A·ρ·(1/√2) = −0.178878 on each counted token of t-17.
    // t-18 is clipped on its advantage's side → 0; t-19 has A = 0 → 0; the env token → 0.
    const g = report.gradLogpNew as number[][][];
    expect(g.map((s) => s.map((m) => m.length))).toEqual([[2, 1], [3], [1]]);
    const t17 = (-(1 / 3) * A * Math.exp(0.1 / Math.SQRT2)) / Math.SQRT2;
    expect(t17).toBeCloseTo(-0.17887819, 7);
    g[0].flat().forEach((x) => expect(x).toBeCloseTo(t17, 6));
    expect(g[1][0]).toEqual([0, 0, 0]);
    expect(g[2][0]).toEqual([0]);
  });

  it('gspo: per-member clip, no set ratio, gradients by hand', async () => {
    const input = { ...request(), config: { objective: 'gspo' } };
    const report = await evaluateObjectiveRequest(input, { grad: true });
    // s: o-1 exp(0/2) = 1 → 0.707106;  o-2 exp(0.1) = 1.105171 → 0.781474;  o-3 exp(−0.4/2) = 0.818731 (inside) → −0.578930;  o-4 → 0
    // loss = −(0.707106 + 0.781474 − 0.578930)/4 = −0.227412
    expect(report.loss).toBeCloseTo(-0.22741232, 6);
    expect(report.sets.every((s) => s.ratio === undefined && s.clipped === false)).toBe(true);
    // ∂/∂logpNew_u of −(1/4)·A_j·exp(ℓ_j/n_j) = −(1/4)·A_j·s_j/n_j on counted tokens:
    // o-1: −(1/4)·0.707106·1/2 = −0.088388;  o-2: −(1/4)·0.707106·1.105171 = −0.195368;  o-3: +(1/4)·0.707106·0.818731/2 = 0.072366
    const g = report.gradLogpNew as number[][][];
    g[0][0].forEach((x) => expect(x).toBeCloseTo(-0.08838822, 6));
    expect(g[0][1][0]).toBeCloseTo(-0.19536819, 6);
    expect(g[1][0][0]).toBeCloseTo(0.07236616, 6);
    expect(g[1][0][1]).toBe(0);
    expect(g[1][0][2]).toBeCloseTo(0.07236616, 6);
  });

  it('grpo-token: per-token clip; a set is reported clipped when one of its tokens is', async () => {
    const input = { ...request(), config: { objective: 'grpo-token' } };
    const report = await evaluateObjectiveRequest(input, { grad: true });
    // tokens: o-1 0.904837·A = 0.639815, 1.105171·A = 0.781474; o-2 0.781474;
    // o-3 exp(−0.5) = 0.606531 < 0.8 with A < 0 → −0.8·A = −0.565685 (clipped), exp(0.1)·(−A) = −0.781474; o-4 0
    // loss = −(0.639815 + 0.781474 + 0.781474 − 0.565685 − 0.781474 + 0)/6 = −0.142601
    expect(report.loss).toBeCloseTo(-0.14260065, 6);
    expect(report.sets.map((s) => s.clipped)).toEqual([false, true, false]);
    expect(report.diagnostics['losses/clip_frac_low']).toBeCloseTo(1 / 6, 7);
    // ∂/∂logpNew_u = −(1/6)·A·r_u unless clipped: o-1 −0.106636, −0.130245; o-3 [clipped 0, env 0, +0.130245]
    const g = report.gradLogpNew as number[][][];
    expect(g[0][0][0]).toBeCloseTo(-0.10663596, 6);
    expect(g[0][0][1]).toBeCloseTo(-0.13024546, 6);
    expect(g[1][0][0]).toBe(0);
    expect(g[1][0][1]).toBe(0);
    expect(g[1][0][2]).toBeCloseTo(0.13024546, 6);
  });

  it('takes advantages from progress when enabled and every reward in a group is ~0', async () => {
    const input = request();
    input.config = { progress: { enabled: true } };
    input.sets[0].reward = 0;
    input.sets[0].progress = 0.5;
    input.sets[1].progress = 0.1;
    const report = await evaluateObjectiveRequest(input, { grad: false });
    // progress {0.5, 0.1}: μ = 0.3, sample σ = √0.08 = 0.282843 → ±0.2/(0.282843 + 1e-6) = ±0.707104
    expect(report.sets[0].advantage).toBeCloseTo(0.70710428, 7);
    expect(report.sets[1].advantage).toBeCloseTo(-0.70710428, 7);
    expect(report.diagnostics['advantages/from_progress']).toBe(2);
  });

  it('a floor behaviour log-prob (−9999) in the negative-advantage set: finite loss and gradient, the set reported and counted', async () => {
    const req = request();
    // t-18 (A = −0.7071058): o-3's first token old −0.2 → −9999, so ℓ = (−0.7 + 9999) + (−0.2 + 0.3) = 9998.4 = L.
    (req.sets[1].members as { logpOld: number[] }[])[0].logpOld[0] = -9999;
    const report = await evaluateObjectiveRequest(req, { grad: true });
    // Dual clip (default, c = 3): t-18 costs 3·A; loss = −(exp(0.1/√2)·A − 3A + 0)/3 = 0.454134.
    expect(report.loss).toBeCloseTo(0.45413382, 5);
    expect(report.sets[1]).toMatchObject({ setId: 't-18', clipped: true, outOfRange: true });
    expect(report.sets[1].logRatio).toBeCloseTo(9998.4, 1);
    expect(Math.abs((report.sets[1].ratio as number) / 2 ** 64 - 1)).toBeLessThan(1e-6); // saturated, not ∞
    expect(report.sets[0].outOfRange).toBe(false);
    expect(report.diagnostics['ratio/out_of_range']).toBe(1);
    expect(report.diagnostics['losses/clip_frac_dual']).toBeCloseTo(1 / 3, 7);
    // t-17 keeps its gradient −(1/3)·A·ρ·(1/√2); t-18's is 0 (the dual clip); t-19 has A = 0.
    const g17 = -(1 / 3) * A * Math.exp(0.1 / Math.SQRT2) * Math.SQRT1_2;
    report.gradLogpNew?.[0].flat().forEach((x) => expect(x).toBeCloseTo(g17, 6));
    expect(report.gradLogpNew?.[1].flat().every((x) => x === 0)).toBe(true);
    // Everything prints as JSON numbers (no null from an ∞ or NaN).
    expect(JSON.stringify(report)).not.toContain('null');

    // With the dual clip off: the set's ratio saturates at 2^64, its term at 2^64·A; still finite, gradient 0 past the bound.
    const off = await evaluateObjectiveRequest({ ...req, config: { dualClip: false } }, { grad: true });
    expect(off.loss / ((2 ** 64 * Math.fround(A)) / 3)).toBeCloseTo(1, 5);
    expect(off.gradLogpNew?.flat(2).every(Number.isFinite)).toBe(true);
    expect(off.gradLogpNew?.[1].flat().every((x) => x === 0)).toBe(true);
    expect(off.diagnostics['ratio/out_of_range']).toBe(1);
    expect(JSON.stringify(off)).not.toContain('null');
  });

  it('leaves no tensors behind', async () => {
    const before = tf.memory().numTensors;
    await evaluateObjectiveRequest(request(), { grad: true });
    await expect(evaluateObjectiveRequest({ sets: [] }, { grad: true })).rejects.toThrow(ValidationError);
    expect(tf.memory().numTensors).toBe(before);
  });

  type Corrupt = (r: ReturnType<typeof request>) => unknown;
  const member = (r: ReturnType<typeof request>, e: number, j: number): Record<string, unknown> => (r.sets[e].members as Record<string, unknown>[])[j];
  const cases: [string, Corrupt, string][] = [
    [
      'mask longer than logpNew',
      (r) => {
        Object.assign(member(r, 0, 1), { logpNew: [-0.5, -0.6], logpOld: [-0.6, -0.7], mask: [1, 1, 1] });
        return r;
      },
      'sets[0] (t-17).members[1] (o-2).mask: length 3 differs from logpNew length 2',
    ],
    [
      'logpOld shorter than logpNew',
      (r) => ((member(r, 1, 0).logpOld = [-0.2]), r),
      'sets[1] (t-18).members[0] (o-3).logpOld: length 1 differs from logpNew length 3',
    ],
    ['reward not a number', (r) => ((r.sets[0].reward = 'abc'), r), 'sets[0] (t-17).reward: expected a finite number, got "abc"'],
    ['reward NaN', (r) => ((r.sets[2].reward = Number.NaN), r), 'sets[2] (t-19).reward: expected a finite number, got NaN'],
    ['progress infinite', (r) => ((r.sets[2].progress = Infinity), r), 'sets[2] (t-19).progress: expected a finite number, got Infinity'],
    [
      'null log-prob',
      (r) => (((member(r, 0, 0).logpNew as unknown[])[1] = null), r),
      'sets[0] (t-17).members[0] (o-1).logpNew[1]: expected a finite number, got null',
    ],
    [
      'positive log-prob',
      (r) => (((member(r, 0, 0).logpOld as number[])[0] = 0.5), r),
      'sets[0] (t-17).members[0] (o-1).logpOld[0]: a log-probability must be <= 0, got 0.5',
    ],
    [
      'no unmasked token',
      (r) => ((member(r, 2, 0).mask = [0]), r),
      'sets[2] (t-19).members[0] (o-4).mask: no unmasked token (every entry is 0); each member needs at least one response token',
    ],
    ['mask not 0/1', (r) => ((member(r, 2, 0).mask = [true]), r), 'sets[2] (t-19).members[0] (o-4).mask[0]: expected 0 or 1, got true'],
    [
      'unknown objective',
      (r) => ((r.config = { objective: 'ppo' }), r),
      'config.objective: expected one of srpo, gspo, grpo-token, srpo-length-norm, got "ppo"',
    ],
    ['bad clip', (r) => ((r.config = { clipLow: -0.1 }), r), 'config.clipLow: must be in [0, 1], got -0.1'],
    ['missing groupKey', (r) => (delete r.sets[1].groupKey, r), 'sets[1] (t-18).groupKey: missing; expected a non-empty string'],
    ['missing setId', (r) => (delete r.sets[1].setId, r), 'sets[1].setId: missing; expected a non-empty string'],
    ['missing members', (r) => (delete r.sets[0].members, r), 'sets[0] (t-17).members: missing; expected an array of members'],
    ['missing logpNew', (r) => (delete member(r, 0, 1).logpNew, r), 'sets[0] (t-17).members[1] (o-2).logpNew: missing; expected an array of log-probabilities'],
    ['missing outputId', (r) => (delete member(r, 0, 1).outputId, r), 'sets[0] (t-17).members[1].outputId: missing; expected a non-empty string'],
    [
      'null member',
      (r) => (((r.sets[0].members as unknown[])[1] = null), r),
      'sets[0] (t-17).members[1]: missing member; a set with a missing member is refused as a whole',
    ],
    [
      'fewer members than declared',
      (r) => ((r.sets[0].memberCount = 3), r),
      'sets[0] (t-17).members: 2 members present but the set declares memberCount 3; an incomplete set is refused as a whole',
    ],
    ['empty set', (r) => ((r.sets[1].members = []), r), 'sets[1] (t-18).members: a set needs at least one member'],
    ['duplicate setId', (r) => ((r.sets[2].setId = 't-17'), r), 'sets[2] (t-17).setId: duplicate of sets[0]'],
    [
      'unknown field',
      (r) => ((member(r, 0, 0).logp_new = [-1]), r),
      'sets[0] (t-17).members[0] (o-1).logp_new: unknown field; expected one of outputId, logpNew, logpOld, mask',
    ],
    ['no sets', () => ({ config: {} }), 'sets: missing; expected an array of sets'],
    ['empty sets', () => ({ sets: [] }), 'sets: a request needs at least one set'],
    ['not an object', () => 'sets', 'request: expected an object with "sets" (and optionally "config"), got "sets"'],
  ];

  it.each(cases)('refuses %s with a one-line message naming set, member and field', async (_name, corrupt, message) => {
    const input = corrupt(request());
    const error = await evaluateObjectiveRequest(input, { grad: true }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(ValidationError);
    expect((error as ValidationError).message).toBe(message);
    expect((error as ValidationError).message).not.toMatch(/\n/);
  });
});
