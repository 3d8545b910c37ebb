import * as tf from '@tensorflow/tfjs';
import { initTfBackend } from '@srpo/core';
import { DEFAULT_OBJECTIVE_CONFIG, OBJECTIVES } from './config';
import type { EventReduction, Objective, ObjectiveConfig } from './config';
import { readDiagnostics } from './diagnostics';
import { disposeObjectiveOutput, objectiveLoss } from './objective';
import { buildPaddedSetBatch, disposePaddedSetBatch, padRows } from './padded-batch';
import { MAX_LOG_RATIO } from './surrogate';

// Overflow-free evaluation of the objectives (docs/objective.md): real responses are hundreds of
// tokens long and inference servers report floor log-probs (the OpenAI API returns −9999), so
// a set ratio exp(Σ log-ratios) overflows float32. Reference numbers come from
// libs/srpo/reference/overflow_reference.py (PyTorch, float64, written from the formulas) or by hand.

interface Member {
  outputId: string;
  logpOld: number[];
  logpNew: number[];
  mask: number[];
}
interface TestSet {
  setId: string;
  advantage: number;
  members: Member[];
}

function cfg(overrides: Partial<ObjectiveConfig> = {}): ObjectiveConfig {
  return { ...DEFAULT_OBJECTIVE_CONFIG, progress: { ...DEFAULT_OBJECTIVE_CONFIG.progress }, ...overrides };
}

function withBatch<T>(sets: TestSet[], fn: (logpNew: tf.Tensor2D, batch: ReturnType<typeof buildPaddedSetBatch>) => T): T {
  const batch = buildPaddedSetBatch(
    sets.map((s) => ({ setId: s.setId, advantage: s.advantage, members: s.members.map(({ outputId, logpOld, mask }) => ({ outputId, logpOld, mask })) })),
  );
  const rows = sets.flatMap((s) => s.members.map((m) => m.logpNew));
  const logpNew = tf.tensor2d(padRows(rows, batch.logpOld.shape[1]), [rows.length, batch.logpOld.shape[1]]);
  try {
    return fn(logpNew, batch);
  } finally {
    logpNew.dispose();
    disposePaddedSetBatch(batch);
  }
}

function lossOf(sets: TestSet[], config: ObjectiveConfig): number {
  return withBatch(sets, (logpNew, batch) => tf.tidy(() => objectiveLoss(logpNew, batch, config).loss.dataSync()[0]));
}

/** ∂loss/∂logpNew, unpadded to [set][member][token]. */
function gradOf(sets: TestSet[], config: ObjectiveConfig): number[][][] {
  return withBatch(sets, (logpNew, batch) => {
    const g = tf.tidy(
      () =>
        tf
          .grad((x: tf.Tensor) => objectiveLoss(x as tf.Tensor2D, batch, config).loss)(logpNew)
          .arraySync() as number[][],
    );
    let row = 0;
    return sets.map((s) => s.members.map((m) => g[row++].slice(0, m.logpNew.length)));
  });
}

async function diagnosticsOf(sets: TestSet[], config: ObjectiveConfig): Promise<Record<string, number>> {
  const batch = buildPaddedSetBatch(
    sets.map((s) => ({ setId: s.setId, advantage: s.advantage, members: s.members.map(({ outputId, logpOld, mask }) => ({ outputId, logpOld, mask })) })),
  );
  const rows = sets.flatMap((s) => s.members.map((m) => m.logpNew));
  const logpNew = tf.tensor2d(padRows(rows, batch.logpOld.shape[1]), [rows.length, batch.logpOld.shape[1]]);
  const out = objectiveLoss(logpNew, batch, config);
  try {
    return await readDiagnostics(out, batch, config);
  } finally {
    disposeObjectiveOutput(out);
    logpNew.dispose();
    disposePaddedSetBatch(batch);
  }
}

function expectClose(actual: number, expected: number, rel = 1e-5, abs = 1e-6): void {
  const tol = abs + rel * Math.abs(expected);
  if (!(Math.abs(actual - expected) <= tol)) throw new Error(`expected ${actual} to be within ${tol} of ${expected}`);
}

const allFinite = (g: number[][][]): boolean => g.flat(2).every(Number.isFinite);

// The reproduction: four sets, one token of member n1a of the negative-advantage set n1 has a
// behaviour log-prob of −9999 (its token log-ratio is 9995.8; L_n1 = (9995.8 − 0.1 + 0.0)/√2 ≈ 7068).
//   p1 (A = +1,   K = 2): token log-ratios [+0.1, −0.05, +0.1], [−0.05, +0.1]
//   n1 (A = −0.8, K = 2): [−0.1, +9995.8, +0.1], [−0.1, +0.1]
//   n2 (A = −0.5, K = 1): [+0.2, −0.05, (masked), +0.2]
//   p2 (A = +0.3, K = 3): [−0.1], [+0.1, −0.2], [+0.1, (masked)]
const REPRO: TestSet[] = [
  {
    setId: 'p1',
    advantage: 1,
    members: [
      { outputId: 'p1a', logpOld: [-1.2, -0.7, -2.3], logpNew: [-1.1, -0.75, -2.2], mask: [1, 1, 1] },
      { outputId: 'p1b', logpOld: [-0.4, -1.9], logpNew: [-0.45, -1.8], mask: [1, 1] },
    ],
  },
  {
    setId: 'n1',
    advantage: -0.8,
    members: [
      { outputId: 'n1a', logpOld: [-0.9, -9999, -1.4], logpNew: [-1.0, -3.2, -1.3], mask: [1, 1, 1] },
      { outputId: 'n1b', logpOld: [-2.0, -0.6], logpNew: [-2.1, -0.5], mask: [1, 1] },
    ],
  },
  { setId: 'n2', advantage: -0.5, members: [{ outputId: 'n2a', logpOld: [-1.5, -0.3, -0.8, -2.2], logpNew: [-1.3, -0.35, -0.7, -2.0], mask: [1, 1, 0, 1] }] },
  {
    setId: 'p2',
    advantage: 0.3,
    members: [
      { outputId: 'p2a', logpOld: [-0.5], logpNew: [-0.6], mask: [1] },
      { outputId: 'p2b', logpOld: [-1.0, -1.1], logpNew: [-0.9, -1.3], mask: [1, 1] },
      { outputId: 'p2c', logpOld: [-2.5, -0.2], logpNew: [-2.4, -0.25], mask: [1, 0] },
    ],
  },
];
const BAD = 1;
const OTHERS = REPRO.filter((_, e) => e !== BAD);

/** Units each loss averages over: sets (srpo), members (gspo), unmasked tokens (grpo-token). */
function unitCount(sets: TestSet[], objective: Objective): number {
  if (objective === 'srpo') return sets.length;
  if (objective === 'gspo') return sets.reduce((a, s) => a + s.members.length, 0);
  return sets.reduce((a, s) => a + s.members.reduce((b, m) => b + m.mask.filter((x) => x === 1).length, 0), 0);
}

// PyTorch float64 (overflow_reference.py): the loss with the floored set under the dual clip
// (exact: max(−∞, c·A) = c·A), and loss and a few gradients without the floored set.
const TORCH: Record<string, { lossWithDual: number; lossWithout: number; gradWithout: { p1a0: number; n2a0: number; p2b1: number } }> = {
  'srpo/sqrt': {
    lossWithDual: 0.4186134704795184,
    lossWithout: -0.2418487179482378,
    gradWithout: { p1a0: -0.27150776959880724, n2a0: 0.23651125809887621, p2b1: -0.05449609536760527 },
  },
  'srpo/sum': {
    lossWithDual: 0.4095206434655313,
    lossWithout: -0.2539724873002206,
    gradWithout: { p1a0: 0, n2a0: 0.23651125809887621, p2b1: -0.09048374539909683 },
  },
  'srpo/mean': {
    lossWithDual: 0.428549512577263,
    lossWithout: -0.22860066181791158,
    gradWithout: { p1a0: -0.18419515301260786, n2a0: 0.23651125809887621, p2b1: -0.03224053796385735 },
  },
  'gspo/sqrt': {
    lossWithDual: 0.09961435751598988,
    lossWithout: -0.40051419792596615,
    gradWithout: { p1a0: -0.058403949798667996, n2a0: 0.031215132934947622, p2b1: -0.023780736557479382 },
  },
  'grpo-token/sqrt': {
    lossWithDual: 0.05381683762178913,
    lossWithout: -0.39176059849110634,
    gradWithout: { p1a0: -0.09209757650630396, n2a0: 0.050891781590007075, p2b1: -0.020468269640285475 },
  },
};
const CASES: [Objective, EventReduction][] = [
  ['srpo', 'sqrt'],
  ['srpo', 'sum'],
  ['srpo', 'mean'],
  ['gspo', 'sqrt'],
  ['grpo-token', 'sqrt'],
];

beforeAll(async () => {
  await initTfBackend('tensorflow');
});

describe('the reproduction: one behaviour log-prob of −9999 in one member of a negative-advantage set', () => {
  it.each(CASES)(
    '%s / %s: finite loss and gradient; the other sets contribute exactly as without that set (dual clip on)',
    async (objective, eventReduction) => {
      const config = cfg({ objective, eventReduction });
      const ref = TORCH[`${objective}/${eventReduction}`];
      const loss = lossOf(REPRO, config);
      const g = gradOf(REPRO, config);
      expect(Number.isFinite(loss)).toBe(true);
      expect(allFinite(g)).toBe(true);
      // The loss equals the exact float64 value, the floored unit costing c·A = −2.4.
      expectClose(loss, ref.lossWithDual, 1e-5, 1e-6);
      // Without the set: the PyTorch values.
      const lossWithout = lossOf(OTHERS, config);
      expectClose(lossWithout, ref.lossWithout, 1e-5, 1e-6);
      const gw = gradOf(OTHERS, config);
      expectClose(gw[0][0][0], ref.gradWithout.p1a0, 1e-5, 1e-7);
      expectClose(gw[1][0][0], ref.gradWithout.n2a0, 1e-5, 1e-7);
      expectClose(gw[2][1][1], ref.gradWithout.p2b1, 1e-5, 1e-7);
      // Each other set's gradient, times the unit count its mean divides by, is the same with and without the floored set.
      const uWith = unitCount(REPRO, objective);
      const uWithout = unitCount(OTHERS, objective);
      OTHERS.forEach((s, k) => {
        const e = k < BAD ? k : k + 1;
        s.members.forEach((m, j) => m.logpNew.forEach((_, u) => expectClose(g[e][j][u] * uWith, gw[k][j][u] * uWithout, 1e-5, 1e-7)));
      });
      // The floored unit itself gets no gradient (r > c with A < 0: the dual clip).
      if (objective === 'srpo') expect(g[BAD].flat().every((x) => x === 0)).toBe(true);
      if (objective === 'gspo') expect(g[BAD][0].every((x) => x === 0)).toBe(true);
      if (objective === 'grpo-token') expect(g[BAD][0][1]).toBe(0);
      const d = await diagnosticsOf(REPRO, config);
      expect(d['ratio/out_of_range']).toBe(1);
      expect(Number.isFinite(d['ratio/max'])).toBe(true);
      expect(Number.isFinite(d['kl/approx_k3'])).toBe(true);
      expect(d['losses/clip_frac_dual']).toBeCloseTo(1 / uWith, 6);
    },
  );

  it.each(CASES)(
    '%s / %s with the dual clip off: loss and gradient finite, the unit saturates at e^44.36·A, the others unchanged',
    async (objective, eventReduction) => {
      const config = cfg({ objective, eventReduction, dualClip: false });
      const loss = lossOf(REPRO, config);
      const g = gradOf(REPRO, config);
      expect(Number.isFinite(loss)).toBe(true);
      expect(allFinite(g)).toBe(true);
      // The floored unit's term is e^MAX_LOG_RATIO · A (≈ −1.47e19); it dominates the loss.
      const uWith = unitCount(REPRO, objective);
      expectClose(loss, -(Math.exp(MAX_LOG_RATIO) * Math.fround(-0.8)) / uWith, 1e-5);
      const gw = gradOf(OTHERS, config);
      const uWithout = unitCount(OTHERS, objective);
      OTHERS.forEach((s, k) => {
        const e = k < BAD ? k : k + 1;
        s.members.forEach((m, j) => m.logpNew.forEach((_, u) => expectClose(g[e][j][u] * uWith, gw[k][j][u] * uWithout, 1e-5, 1e-7)));
      });
      // Past MAX_LOG_RATIO the bound has gradient 0.
      if (objective === 'srpo') expect(g[BAD].flat().every((x) => x === 0)).toBe(true);
      if (objective === 'gspo') expect(g[BAD][0].every((x) => x === 0)).toBe(true);
      if (objective === 'grpo-token') expect(g[BAD][0][1]).toBe(0);
      const d = await diagnosticsOf(REPRO, config);
      expect(d['ratio/out_of_range']).toBe(1);
      expect(d['losses/clip_frac_dual']).toBe(0);
      // Reported ratios saturate at e^MAX_LOG_RATIO = 2^64 ≈ 1.8e19.
      expectClose(d['ratio/max'], Math.exp(MAX_LOG_RATIO), 1e-6);
    },
  );

  it('a floored token in a positive-advantage set: the high clip already zeroes its gradient; the loss is the exact (1 + ε)·A term', () => {
    const flipped = REPRO.map((s, e) => (e === BAD ? { ...s, advantage: 0.8 } : s));
    for (const dualClip of [true, false]) {
      const config = cfg({ dualClip });
      const loss = lossOf(flipped, config);
      // −(1/4)(1.2·0.8 + Σ others): the others from the PyTorch loss without the set (3 sets).
      expectClose(loss, -(1.2 * Math.fround(0.8) - 3 * TORCH['srpo/sqrt'].lossWithout) / 4, 1e-5);
      const grad = gradOf(flipped, config);
      expect(grad[BAD].flat().every((x) => x === 0)).toBe(true);
    }
  });
});

describe('dual clip (Ye et al. 2020; verl clip_ratio_c): values by hand', () => {
  // One set, K = 1, two counted tokens, each with log-ratio log(r)/2, so ρ = r; S = 1.
  const single = (r: number, advantage: number): TestSet[] => [
    { setId: 's', advantage, members: [{ outputId: 'o', logpOld: [-1, -2], logpNew: [-1 + Math.log(r) / 2, -2 + Math.log(r) / 2], mask: [1, 1] }] },
  ];

  it('A = −2, ρ = 4 > c = 3: min(4·−2, 1.2·−2) = −8, max(−8, 3·−2) = −6 → loss 6 with gradient 0; off: loss 8, gradient −A·ρ = 8 per token', () => {
    expectClose(lossOf(single(4, -2), cfg()), 6, 1e-6);
    expect(gradOf(single(4, -2), cfg()).flat(2)).toEqual([0, 0]);
    expectClose(lossOf(single(4, -2), cfg({ dualClip: false })), 8, 1e-6);
    gradOf(single(4, -2), cfg({ dualClip: false }))
      .flat(2)
      .forEach((x) => expectClose(x, 8, 1e-5));
    // gspo: s = exp(ℓ/2) = exp(log 4 / 2) = 2 < 3: no dual clip, loss 2·2 = 4.
    expectClose(lossOf(single(4, -2), cfg({ objective: 'gspo' })), 4, 1e-6);
  });

  it('A = −1, ρ = 2 < c: the dual clip changes nothing (loss 2, gradient 2), bit for bit', () => {
    const on = lossOf(single(2, -1), cfg());
    const off = lossOf(single(2, -1), cfg({ dualClip: false }));
    expectClose(on, 2, 1e-6);
    expect(on).toBe(off);
    expect(gradOf(single(2, -1), cfg())).toEqual(gradOf(single(2, -1), cfg({ dualClip: false })));
    gradOf(single(2, -1), cfg())
      .flat(2)
      .forEach((x) => expectClose(x, 2, 1e-5));
  });

  it('A = +1, ρ = 4: the high clip, loss −1.2 and gradient 0, with or without the dual clip', () => {
    for (const dualClip of [true, false]) {
      expectClose(lossOf(single(4, 1), cfg({ dualClip })), -1.2, 1e-6);
      expect(gradOf(single(4, 1), cfg({ dualClip })).flat(2)).toEqual([0, 0]);
    }
  });

  it('c = 5: ρ = 4 is below it, so A = −2 keeps the PPO term: loss 8', () => {
    expectClose(lossOf(single(4, -2), cfg({ clipRatioC: 5 })), 8, 1e-6);
  });

  it('grpo-token clips each token: token ratios 4 and 4 (ρ_set = 16) with A = −1 give max(−4, −3) = −3 per token → loss 3', () => {
    expectClose(lossOf(single(16, -1), cfg({ objective: 'grpo-token' })), 3, 1e-6);
    expectClose(lossOf(single(16, -1), cfg({ objective: 'grpo-token', dualClip: false })), 4, 1e-6);
  });

  it('reports the dual-clipped share as losses/clip_frac_dual', async () => {
    const two: TestSet[] = [...single(4, -2), { ...single(2, -1)[0], setId: 't', members: [{ ...single(2, -1)[0].members[0], outputId: 'p' }] }];
    const d = await diagnosticsOf(two, cfg());
    expect(d['losses/clip_frac_dual']).toBe(0.5);
    expect(d['ratio/out_of_range']).toBe(0);
    expect((await diagnosticsOf(two, cfg({ dualClip: false })))['losses/clip_frac_dual']).toBe(0);
  });
});

describe('extreme finite inputs: the objective never forms an infinite ratio', () => {
  const setOf = (logpOld: number[], logpNew: number[], advantage: number, id = 'x'): TestSet => ({
    setId: id,
    advantage,
    members: [{ outputId: `${id}-o`, logpOld, logpNew, mask: logpOld.map(() => 1) }],
  });
  const normal = setOf([-1, -1], [-0.9, -1.1], 0.5, 'n');

  it.each([
    ['−1e39 (−∞ in float32)', [-1e39, -1], [-2, -1]],
    ['−3e38 on four tokens (the float32 sum alone would overflow)', [-3e38, -3e38, -3e38, -3e38], [-1, -1, -1, -1]],
    ['a current log-prob far below the behaviour one (ρ → 0)', [-0.1, -0.2], [-1e4, -0.2]],
    ['−9999 on every token of 300', new Array<number>(300).fill(-9999), new Array<number>(300).fill(-1)],
  ])('%s: finite loss and gradient for every objective, advantage sign and dual-clip setting', async (_, logpOld, logpNew) => {
    for (const objective of OBJECTIVES) {
      for (const advantage of [-1.5, 0, 1.5]) {
        for (const dualClip of [true, false]) {
          const sets = [setOf(logpOld, logpNew, advantage), normal];
          const config = cfg({ objective, dualClip, eventReduction: 'sum' });
          expect(Number.isFinite(lossOf(sets, config))).toBe(true);
          const g = gradOf(sets, config);
          expect(allFinite(g)).toBe(true);
          if (advantage === 0) expect(g[0].flat().every((x) => x === 0)).toBe(true);
          const d = await diagnosticsOf(sets, config);
          expect(d['ratio/out_of_range']).toBeGreaterThanOrEqual(1);
          expect(Number.isFinite(d['ratio/max']) && Number.isFinite(d['ratio/min'])).toBe(true);
        }
      }
    }
  });

  it('a NaN in an unmasked current log-prob still reaches the loss (a model bug must not be hidden)', () => {
    expect(Number.isNaN(lossOf([setOf([-1, -1], [Number.NaN, -1], 1)], cfg()))).toBe(true);
  });
});

describe('ordinary inputs are unchanged', () => {
  it('on the batch without the floored set, the dual clip changes neither loss nor gradient (no ratio reaches c), bit for bit', () => {
    for (const [objective, eventReduction] of CASES) {
      const on = cfg({ objective, eventReduction });
      const off = cfg({ objective, eventReduction, dualClip: false });
      expect(lossOf(OTHERS, on)).toBe(lossOf(OTHERS, off));
      expect(gradOf(OTHERS, on)).toEqual(gradOf(OTHERS, off));
    }
  });
});
