import * as tf from '@tensorflow/tfjs';
import { disposeObjectiveOutput, objectiveLoss, objectiveOutputTensors, resolveObjectiveConfig, type ObjectiveConfig, type PaddedSetBatch } from '@srpo/srpo';
import { fusedObjectiveLoss } from './fused-objective';
import { configureSrpoKernels } from './srpo-kernels';
import { describeNative } from './test/describe-native';
import { nativeBackend, seededValues } from './test/fixtures';

/**
 * `SrpoSetObjective` / `SrpoSetObjectiveGrad` (objective-kernels.h) against libs/srpo's composite
 * objective, the reference implementation (itself checked against hand-computed values in
 * libs/srpo), and against one case worked out here by hand: every field of the output, the
 * gradient, the configs the kernel takes, the edge cases and the errors.
 * Skips where the addon is not built, unless SRPO_REQUIRE_NATIVE_KERNELS=1 (CI).
 */
interface RawBatch {
  logpOld: Float32Array;
  mask: Float32Array;
  memberSet: Int32Array;
  advantage: Float32Array;
  m: number;
  t: number;
}

function toBatch(r: RawBatch): PaddedSetBatch {
  return {
    logpOld: tf.tensor2d(r.logpOld, [r.m, r.t]),
    mask: tf.tensor2d(r.mask, [r.m, r.t]),
    memberSet: tf.tensor1d(r.memberSet, 'int32'),
    advantage: tf.tensor1d(r.advantage),
    numSets: r.advantage.length,
  };
}

/** A batch of `sets` sets of 1–4 members (interleaved, not adjacent), masks with prompt and padding zeros. */
function randomBatch(sets: number, t: number, seed: number): { raw: RawBatch; logpNew: Float32Array } {
  const sizes = Array.from({ length: sets }, (_, s) => 1 + ((s * 7 + seed) % 4));
  const owner: number[] = [];
  for (let s = 0; s < sets; s++) for (let k = 0; k < sizes[s]; k++) owner.push(s);
  // Interleave: members of a set are spread over the rows.
  const memberSet = Int32Array.from(owner.map((_, i) => owner[(i * 5) % owner.length]));
  const m = memberSet.length;
  const noise = seededValues(m * t, seed, 1);
  const delta = seededValues(m * t, seed + 1, 0.3);
  const logpOld = new Float32Array(m * t);
  const logpNew = new Float32Array(m * t);
  const mask = new Float32Array(m * t);
  for (let j = 0; j < m; j++) {
    const start = 1 + (j % 3);
    const end = t - (j % 2);
    for (let x = 0; x < t; x++) {
      const i = j * t + x;
      logpOld[i] = -0.5 - Math.abs(noise[i]);
      logpNew[i] = logpOld[i] + delta[i];
      mask[i] = x >= start && x < end ? 1 : 0;
    }
  }
  const advantage = Float32Array.from(seededValues(sets, seed + 2, 1.5));
  return { raw: { logpOld, mask, memberSet, advantage, m, t }, logpNew };
}

/** The composite's and the kernel's outputs and gradients for one batch and config. */
async function both(raw: RawBatch, logpNew: Float32Array, config: ObjectiveConfig) {
  const batch = toBatch(raw);
  const x = tf.tensor2d(logpNew, [raw.m, raw.t]);
  const read = async (fused: boolean) => {
    const out = fused ? fusedObjectiveLoss(x, batch, config) : objectiveLoss(x, batch, config);
    if (!out) throw new Error('the fused objective is not available');
    const grad = tf.grad((v: tf.Tensor) => {
      const o = fused ? fusedObjectiveLoss(v as tf.Tensor2D, batch, config) : objectiveLoss(v as tf.Tensor2D, batch, config);
      if (!o) throw new Error('the fused objective is not available');
      for (const t of objectiveOutputTensors(o)) tf.keep(t);
      const loss = o.loss;
      tf.dispose(objectiveOutputTensors(o));
      return loss;
    })(x);
    const fields = {
      loss: await out.loss.data(),
      ratio: await out.ratio.data(),
      logRatio: await out.logRatio.data(),
      unitWeight: await out.unitWeight.data(),
      unitSet: await out.unitSet.data(),
      unitSetSize: await out.unitSetSize.data(),
      unitAdvantage: await out.unitAdvantage.data(),
      clippedLow: await out.clippedLow.data(),
      clippedHigh: await out.clippedHigh.data(),
      clippedDual: await out.clippedDual.data(),
      outOfRange: await out.outOfRange.data(),
      memberLogRatio: await out.memberLogRatio.data(),
      tokenLogRatio: await out.tokenLogRatio.data(),
      grad: await grad.data(),
    };
    expect(out.objective).toBe(config.objective);
    expect(out.unit).toBe('set');
    disposeObjectiveOutput(out);
    grad.dispose();
    return fields;
  };
  const composite = await read(false);
  const fused = await read(true);
  tf.dispose([x, batch.logpOld, batch.mask, batch.memberSet, batch.advantage]);
  return { composite, fused };
}

/** |a − b| <= tol·(1 + |b|) element by element, NaN only against NaN. */
function expectClose(a: ArrayLike<number>, b: ArrayLike<number>, tol: number, what: string): void {
  expect(`${what}: ${a.length}`).toBe(`${what}: ${b.length}`);
  for (let i = 0; i < b.length; i++) {
    if (Number.isNaN(b[i])) {
      expect(`${what}[${i}] ${a[i]}`).toBe(`${what}[${i}] NaN`);
      continue;
    }
    const ok = Math.abs(a[i] - b[i]) <= tol * (1 + Math.abs(b[i]));
    if (!ok) expect(`${what}[${i}] = ${a[i]}`).toBe(`${what}[${i}] ≈ ${b[i]}`);
  }
}

function expectAgree(r: Awaited<ReturnType<typeof both>>): void {
  const { composite: c, fused: f } = r;
  for (const k of ['unitWeight', 'unitSet', 'unitSetSize', 'unitAdvantage', 'clippedLow', 'clippedHigh', 'clippedDual', 'outOfRange'] as const) {
    expect({ [k]: Array.from(f[k]) }).toEqual({ [k]: Array.from(c[k]) });
  }
  for (const k of ['loss', 'ratio', 'logRatio', 'memberLogRatio', 'tokenLogRatio', 'grad'] as const) expectClose(f[k], c[k], 2e-6, k);
}

/**
 * {@link expectAgree} for a batch whose loss is NaN, but for the gradient where the composite's is
 * NaN: the kernel gives NaN or 0 there. The composite's NaN reaches every position of a NaN set's
 * members (counted ones through r = NaN; masked ones because tfjs's select gradient is dy·[cond]
 * and NaN·0 = NaN); the kernel's gradient there is 0 (its pass flags compare false on NaN and the
 * product with them is evaluated under -ffast-math), although objective-kernels.h says NaN. A NaN
 * loss refuses the update either way (non-finite), so no step applies either gradient.
 */
function expectAgreeButNaNGrad(r: Awaited<ReturnType<typeof both>>): void {
  const { composite: c, fused: f } = r;
  expectAgree({ composite: { ...c, grad: f.grad }, fused: f });
  const finite = (g: Float32Array | Int32Array | Uint8Array) => Array.from(g).map((v, i) => (Number.isNaN(c.grad[i]) ? 0 : v));
  expectClose(finite(f.grad), finite(c.grad), 2e-6, 'grad where the composite is not NaN');
  expect(Array.from(f.grad).filter((v, i) => Number.isNaN(c.grad[i]) && !Number.isNaN(v) && v !== 0)).toEqual([]);
  expect(Array.from(f.grad).filter((v, i) => Number.isNaN(v) && !Number.isNaN(c.grad[i]))).toEqual([]);
}

describeNative(['SrpoSetObjective', 'SrpoSetObjectiveGrad'], 'SrpoSetObjective (the set objectives in one native op each way)', () => {
  beforeAll(nativeBackend);
  afterEach(() => configureSrpoKernels({ except: [] }));

  const configs: [string, Partial<ObjectiveConfig>][] = [
    ['srpo, 1/√K, defaults', { objective: 'srpo' }],
    ['srpo, sum', { objective: 'srpo', eventReduction: 'sum' }],
    ['srpo, mean, asymmetric clip', { objective: 'srpo', eventReduction: 'mean', clipLow: 0.1, clipHigh: 0.3 }],
    ['srpo, dual clip', { objective: 'srpo', dualClip: true, clipRatioC: 2 }],
    ['srpo-length-norm', { objective: 'srpo-length-norm' }],
  ];

  it.each(configs)('%s: every output field and the gradient agree with the composite', async (_, partial) => {
    const config = resolveObjectiveConfig(partial, 'config');
    let flagged = 0;
    for (const seed of [3, 17]) {
      const { raw, logpNew } = randomBatch(9, 12, seed);
      // Push some sets past the clips both ways, so that the clipped branches and flags run,
      // and give one set a zero advantage (no flag whatever its ratio).
      for (let i = 0; i < 4 * raw.t; i++) logpNew[i] += seed === 3 ? 0.9 : -0.9;
      raw.advantage[raw.memberSet[0]] = 0;
      const r = await both(raw, logpNew, config);
      expectAgree(r);
      flagged += [...r.fused.clippedLow, ...r.fused.clippedHigh].reduce((a, v) => a + v, 0);
    }
    expect(flagged).toBeGreaterThan(0);
  });

  it('matches a case worked out by hand (two sets, 1/√K, clip 0.2)', async () => {
    // Set 0: members 0 and 2, A = 1; set 1: member 1, A = −0.5. T = 2, every token counted but
    // member 1's second. Token log-ratios: m0 (0.1, 0.05), m1 (−0.3, masked), m2 (0.2, −0.1).
    const raw: RawBatch = {
      logpOld: Float32Array.from([-1, -1, -2, -2, -1.5, -1.5]),
      mask: Float32Array.from([1, 1, 1, 0, 1, 1]),
      memberSet: Int32Array.from([0, 1, 0]),
      advantage: Float32Array.from([1, -0.5]),
      m: 3,
      t: 2,
    };
    const logpNew = Float32Array.from([-0.9, -0.95, -2.3, -7, -1.3, -1.6]);
    const { fused } = await both(raw, logpNew, resolveObjectiveConfig({ objective: 'srpo', clipLow: 0.2, clipHigh: 0.2 }, 'config'));
    // log ρ0 = (0.15 + 0.1)/√2 = 0.1768, ρ0 = 1.1934, inside [0.8, 1.2]: v0 = ρ0·1.
    // log ρ1 = −0.3, ρ1 = 0.7408 < 0.8 with A < 0: v1 = min(ρ1·A1, 0.8·A1) = −0.4, clipped.
    const lr0 = 0.25 / Math.SQRT2;
    const v0 = Math.exp(lr0);
    const v1 = Math.min(Math.exp(-0.3) * -0.5, 0.8 * -0.5);
    expectClose(fused.logRatio, [lr0, -0.3], 1e-6, 'logRatio');
    expectClose(fused.loss, [-(v0 + v1) / 2], 1e-6, 'loss');
    expect(Array.from(fused.clippedLow)).toEqual([0, 1]);
    expect(Array.from(fused.clippedHigh)).toEqual([0, 0]);
    expect(Array.from(fused.unitSetSize)).toEqual([2, 1]);
    // ∂L/∂logpNew: set 0 passes, −(1/2)·A0·ρ0/√2 on each counted token of members 0 and 2;
    // set 1 is clipped (no gradient); member 1's masked token none.
    const g0 = (-0.5 * 1 * v0) / Math.SQRT2;
    expectClose(fused.grad, [g0, g0, 0, 0, g0, g0], 1e-6, 'grad');
  });

  it('keeps the composite edge cases: a floor log-prob out of range, a NaN, a set of one member', async () => {
    const config = resolveObjectiveConfig({ objective: 'srpo' }, 'config');
    const { raw, logpNew } = randomBatch(6, 8, 5);
    raw.logpOld[2] = -9999; // a behaviour floor: the set's log ρ leaves the representable range
    const r1 = await both(raw, logpNew, config);
    expectAgree(r1);
    expect(Array.from(r1.fused.outOfRange).some((v) => v === 1)).toBe(true);
    expect(Number.isFinite(r1.fused.loss[0])).toBe(true);
    const nan = Float32Array.from(logpNew);
    nan[raw.t + 3] = NaN;
    const r2 = await both(raw, nan, config);
    expect(Number.isNaN(r2.fused.loss[0])).toBe(true);
    expect(Number.isNaN(r2.composite.loss[0])).toBe(true);
  });

  it('agrees with the composite on single-member sets only, under every reduction and both set objectives', async () => {
    // K = 1 everywhere: c(1) = 1 for every reduction, so the reductions must agree with each other too.
    const { raw, logpNew } = randomBatch(5, 6, 11);
    const single: RawBatch = { ...raw, memberSet: Int32Array.from({ length: raw.m }, (_, j) => j), advantage: Float32Array.from(seededValues(raw.m, 23, 1.5)) };
    const losses: number[] = [];
    for (const partial of [
      { eventReduction: 'sqrt' },
      { eventReduction: 'sum' },
      { eventReduction: 'mean' },
      { objective: 'srpo-length-norm' },
    ] as Partial<ObjectiveConfig>[]) {
      const r = await both(single, logpNew, resolveObjectiveConfig({ objective: 'srpo', ...partial }, 'config'));
      expectAgree(r);
      expect(Array.from(r.fused.unitSetSize)).toEqual(Array.from({ length: raw.m }, () => 1));
      if (partial.objective === undefined) losses.push(r.fused.loss[0]);
    }
    expectClose(losses, [losses[0], losses[0], losses[0]], 1e-6, 'loss per reduction');
  });

  it('agrees with the composite with the low, high and dual clips active in one batch', async () => {
    // Four single-token sets: log ρ = +0.5 with A > 0 (high clip), −0.5 with A < 0 (low clip),
    // +1.5 with A < 0 (ρ = 4.48 > c = 2: dual clip), +0.05 with A > 0 (inside, the gradient passes).
    const raw: RawBatch = {
      logpOld: Float32Array.from([-1, -1, -1, -1]),
      mask: Float32Array.from([1, 1, 1, 1]),
      memberSet: Int32Array.from([0, 1, 2, 3]),
      advantage: Float32Array.from([1, -1, -0.5, 0.7]),
      m: 4,
      t: 1,
    };
    const logpNew = Float32Array.from([-0.5, -1.5, 0.5, -0.95]);
    const r = await both(raw, logpNew, resolveObjectiveConfig({ objective: 'srpo', dualClip: true, clipRatioC: 2 }, 'config'));
    expectAgree(r);
    expect(Array.from(r.fused.clippedHigh)).toEqual([1, 0, 0, 0]);
    expect(Array.from(r.fused.clippedLow)).toEqual([0, 1, 0, 0]);
    expect(Array.from(r.fused.clippedDual)).toEqual([0, 0, 1, 0]);
    // Only the unclipped set moves: ∂loss/∂logpNew = −(1/4)·A·ρ there, 0 under every clip.
    expectClose(r.fused.grad, [0, 0, 0, (-0.7 * Math.exp(0.05)) / 4], 1e-6, 'grad');
  });

  it('agrees with the composite on a member with an empty mask and on a set with no members', async () => {
    // An all-zero mask row contributes ℓ_j = 0 (srpo) and 0/0 = NaN (srpo-length-norm, |y_j| = 0);
    // a set index no member carries has K = 0: log ρ = 0·∞ = NaN under 1/√K and 1/K, 0 under sum.
    // buildPaddedSetBatch refuses both; the kernel must still not disagree with the composite.
    const { raw: drawn, logpNew } = randomBatch(4, 5, 13);
    // Members dealt round-robin, so that every one of the 4 sets has members (and K = 2 or 3).
    const raw: RawBatch = { ...drawn, memberSet: Int32Array.from({ length: drawn.m }, (_, j) => j % 4) };
    const emptyRow: RawBatch = { ...raw, mask: Float32Array.from(raw.mask, (v, i) => (i < raw.t ? 0 : v)) };
    const r1 = await both(emptyRow, logpNew, resolveObjectiveConfig({ objective: 'srpo' }, 'config'));
    expectAgree(r1);
    expect(Number.isFinite(r1.fused.loss[0])).toBe(true);
    const r2 = await both(emptyRow, logpNew, resolveObjectiveConfig({ objective: 'srpo-length-norm' }, 'config'));
    expect(Number.isNaN(r2.fused.loss[0])).toBe(true);
    expectAgreeButNaNGrad(r2);
    const noMembers: RawBatch = { ...raw, advantage: Float32Array.from([...raw.advantage, 0.5]) };
    for (const eventReduction of ['sqrt', 'sum', 'mean'] as const) {
      const r = await both(noMembers, logpNew, resolveObjectiveConfig({ objective: 'srpo', eventReduction }, 'config'));
      expectAgree(r);
      expect(r.fused.unitSetSize[4]).toBe(0);
      expect(Number.isNaN(r.fused.logRatio[4])).toBe(eventReduction !== 'sum');
    }
  });

  it('agrees with the composite on infinite log-probs: −∞ in padding, a behaviour log-prob below float32, +∞ where counted', async () => {
    const config = resolveObjectiveConfig({ objective: 'srpo', dualClip: true, clipRatioC: 3 }, 'config');
    const { raw, logpNew } = randomBatch(5, 6, 19);
    const x = Float32Array.from(logpNew);
    // −∞ at every masked position of logpNew (a log-softmax over a masked vocabulary): must not reach the loss.
    for (let i = 0; i < x.length; i++) if (raw.mask[i] === 0) x[i] = -Infinity;
    const r1 = await both(raw, x, config);
    expectAgree(r1);
    expect(Number.isFinite(r1.fused.loss[0])).toBe(true);
    // A counted behaviour log-prob of −∞ (−1e39 in float64): the token log-ratio is bounded at 1e6, its gradient 0.
    const counted = raw.mask.findIndex((v) => v === 1);
    const old = { ...raw, logpOld: Float32Array.from(raw.logpOld, (v, i) => (i === counted ? -Infinity : v)) };
    const r2 = await both(old, x, config);
    expectAgree(r2);
    expect(Number.isFinite(r2.fused.loss[0])).toBe(true);
    expect(r2.fused.grad[counted]).toBe(0);
    expect(Array.from(r2.fused.outOfRange).some((v) => v === 1)).toBe(true);
    // +∞ in a counted logpNew: the same bound from above.
    const plus = Float32Array.from(x, (v, i) => (i === counted ? Infinity : v));
    const r3 = await both(raw, plus, config);
    expectAgree(r3);
    expect(Number.isFinite(r3.fused.loss[0])).toBe(true);
  });

  it('agrees with the composite when a NaN log-prob is counted (the gradient but where the composite has NaN)', async () => {
    const { raw, logpNew } = randomBatch(6, 8, 5);
    const counted = raw.mask.findIndex((v, i) => v === 1 && i >= raw.t);
    const nan = Float32Array.from(logpNew, (v, i) => (i === counted ? NaN : v));
    for (const partial of [
      { objective: 'srpo' },
      { objective: 'srpo', dualClip: true, clipRatioC: 2 },
      { objective: 'srpo-length-norm' },
    ] as Partial<ObjectiveConfig>[]) {
      const r = await both(raw, nan, resolveObjectiveConfig(partial, 'config'));
      expect(Number.isNaN(r.fused.loss[0])).toBe(true);
      expectAgreeButNaNGrad(r);
      // Only the NaN member's set is touched: the other sets' gradients are finite and agree.
      expect(Array.from(r.composite.grad).some((v) => Number.isFinite(v) && v !== 0)).toBe(true);
    }
  });

  it('names a member outside the sets and shapes that differ, and steps aside for other objectives and when switched off', () => {
    const config = resolveObjectiveConfig({ objective: 'srpo' }, 'config');
    const { raw, logpNew } = randomBatch(3, 4, 9);
    const x = tf.tensor2d(logpNew, [raw.m, raw.t]);
    const bad = toBatch({ ...raw, memberSet: Int32Array.from(raw.memberSet, (v, i) => (i === 2 ? 7 : v)) });
    expect(() => fusedObjectiveLoss(x, bad, config)).toThrow(/SrpoSetObjective: member_set\[2\] is 7, outside \[0, 3\)/);
    const short = { ...toBatch(raw), mask: tf.ones<tf.Rank.R2>([raw.m, raw.t - 1]) };
    expect(() => fusedObjectiveLoss(x, short, config)).toThrow(/SrpoSetObjective: mask must be \[\d+, 4\], as logp_new/);
    expect(fusedObjectiveLoss(x, toBatch(raw), resolveObjectiveConfig({ objective: 'gspo' }, 'config'))).toBeUndefined();
    configureSrpoKernels({ except: ['SrpoSetObjective'] });
    expect(fusedObjectiveLoss(x, toBatch(raw), config)).toBeUndefined();
  });
});
