import * as tf from '@tensorflow/tfjs';
import fc from 'fast-check';
import { ValidationError, initTfBackend } from '@srpo/core';
import { DEFAULT_OBJECTIVE_CONFIG, EVENT_REDUCTIONS, OBJECTIVES } from './config';
import type { EventReduction, Objective, ObjectiveConfig } from './config';
import { groupAdvantages } from './advantages';
import { disposeObjectiveOutput, objectiveLoss } from './objective';
import { buildPaddedSetBatch, disposePaddedSetBatch, padRows } from './padded-batch';
import type { PaddedSetBatch } from './padded-batch';

// ---------------------------------------------------------------------------
// Independent float64 reference of the three losses, in plain JS numbers.
// It shares no code with the library: it loops over sets/members/tokens exactly
// as the contract is written.
// ---------------------------------------------------------------------------

interface RefMember {
  outputId: string;
  logpNew: number[];
  logpOld: number[];
  mask: number[];
}
interface RefSet {
  setId: string;
  advantage: number;
  members: RefMember[];
}

const refReduction: Record<EventReduction, (k: number) => number> = {
  sqrt: (k) => 1 / Math.sqrt(k),
  sum: () => 1,
  mean: (k) => 1 / k,
};

function refSurrogate(r: number, a: number, cfg: ObjectiveConfig): number {
  const clipped = Math.min(Math.max(r, 1 - cfg.clipLow), 1 + cfg.clipHigh);
  const ppo = Math.min(r * a, clipped * a);
  // Dual clip (Ye et al. 2020): a negative-advantage term is bounded below by c·A.
  return cfg.dualClip && a < 0 ? Math.max(ppo, cfg.clipRatioC * a) : ppo;
}

function refMemberLogRatio(m: RefMember): number {
  let l = 0;
  for (let u = 0; u < m.logpNew.length; u++) if (m.mask[u] === 1) l += m.logpNew[u] - m.logpOld[u];
  return l;
}

function refTokenCount(m: RefMember): number {
  return m.mask.filter((x) => x === 1).length;
}

/** Every ratio the objective clips (set, member or token), for keeping finite differences off the kinks. */
function refUnitRatios(sets: RefSet[], cfg: ObjectiveConfig): number[] {
  switch (cfg.objective) {
    case 'srpo':
      return sets.map((s) => Math.exp(refReduction[cfg.eventReduction](s.members.length) * s.members.reduce((acc, m) => acc + refMemberLogRatio(m), 0)));
    case 'gspo':
      return sets.flatMap((s) => s.members.map((m) => Math.exp(refMemberLogRatio(m) / refTokenCount(m))));
    case 'grpo-token':
      return sets.flatMap((s) => s.members.flatMap((m) => m.logpNew.map((x, u) => Math.exp(x - m.logpOld[u])).filter((_, u) => m.mask[u] === 1)));
    case 'srpo-length-norm':
      return sets.map((s) =>
        Math.exp(refReduction[cfg.eventReduction](s.members.length) * s.members.reduce((acc, m) => acc + refMemberLogRatio(m) / refTokenCount(m), 0)),
      );
  }
}

function refLoss(sets: RefSet[], cfg: ObjectiveConfig): number {
  switch (cfg.objective) {
    case 'srpo': {
      let total = 0;
      for (const s of sets) {
        const k = s.members.length;
        let sum = 0;
        for (const m of s.members) sum += refMemberLogRatio(m);
        total += refSurrogate(Math.exp(refReduction[cfg.eventReduction](k) * sum), s.advantage, cfg);
      }
      return -total / sets.length;
    }
    case 'gspo': {
      let total = 0;
      let members = 0;
      for (const s of sets) {
        for (const m of s.members) {
          total += refSurrogate(Math.exp(refMemberLogRatio(m) / refTokenCount(m)), s.advantage, cfg);
          members++;
        }
      }
      return -total / members;
    }
    case 'grpo-token': {
      let total = 0;
      let tokens = 0;
      for (const s of sets) {
        for (const m of s.members) {
          for (let u = 0; u < m.logpNew.length; u++) {
            if (m.mask[u] !== 1) continue;
            total += refSurrogate(Math.exp(m.logpNew[u] - m.logpOld[u]), s.advantage, cfg);
            tokens++;
          }
        }
      }
      return -total / tokens;
    }
    case 'srpo-length-norm': {
      let total = 0;
      for (const s of sets) {
        let sum = 0;
        for (const m of s.members) sum += refMemberLogRatio(m) / refTokenCount(m);
        total += refSurrogate(Math.exp(refReduction[cfg.eventReduction](s.members.length) * sum), s.advantage, cfg);
      }
      return -total / sets.length;
    }
  }
}

/** Central finite differences of {@link refLoss} in float64, nested [set][member][token]. */
function refFiniteDifferenceGrad(sets: RefSet[], cfg: ObjectiveConfig, h = 1e-6): number[][][] {
  return sets.map((s, e) =>
    s.members.map((m, j) =>
      m.logpNew.map((_, u) => {
        const shifted = (delta: number): RefSet[] =>
          sets.map((s2, e2) => ({
            ...s2,
            members: s2.members.map((m2, j2) => ({
              ...m2,
              logpNew: m2.logpNew.map((x, u2) => (e2 === e && j2 === j && u2 === u ? x + delta : x)),
            })),
          }));
        return (refLoss(shifted(h), cfg) - refLoss(shifted(-h), cfg)) / (2 * h);
      }),
    ),
  );
}

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

function cfg(overrides: Partial<ObjectiveConfig> = {}): ObjectiveConfig {
  return { ...DEFAULT_OBJECTIVE_CONFIG, progress: { ...DEFAULT_OBJECTIVE_CONFIG.progress }, ...overrides };
}

function tensors(sets: RefSet[], padWith = 0): { batch: PaddedSetBatch; logpNew: tf.Tensor2D } {
  const batch = buildPaddedSetBatch(
    sets.map((s) => ({ setId: s.setId, advantage: s.advantage, members: s.members.map((m) => ({ outputId: m.outputId, logpOld: m.logpOld, mask: m.mask })) })),
  );
  const rows = sets.flatMap((s) => s.members.map((m) => m.logpNew));
  const T = batch.logpOld.shape[1];
  return { batch, logpNew: tf.tensor2d(padRows(rows, T, padWith), [rows.length, T]) };
}

function lossOf(sets: RefSet[], config: ObjectiveConfig): number {
  const { batch, logpNew } = tensors(sets);
  try {
    return tf.tidy(() => objectiveLoss(logpNew, batch, config).loss.dataSync()[0]);
  } finally {
    logpNew.dispose();
    disposePaddedSetBatch(batch);
  }
}

/** tfjs autodiff gradient, unpadded to [set][member][token]. */
function gradOf(sets: RefSet[], config: ObjectiveConfig, padWith = 0): number[][][] {
  const { batch, logpNew } = tensors(sets, padWith);
  try {
    const g = tf.tidy(
      () =>
        tf
          .grad((x: tf.Tensor) => objectiveLoss(x as tf.Tensor2D, batch, config).loss)(logpNew)
          .arraySync() as number[][],
    );
    let row = 0;
    return sets.map((s) => s.members.map((m) => g[row++].slice(0, m.logpNew.length)));
  } finally {
    logpNew.dispose();
    disposePaddedSetBatch(batch);
  }
}

function expectClose(actual: number, expected: number, rel = 1e-5, abs = 1e-6): void {
  const tol = abs + rel * Math.abs(expected);
  if (!(Math.abs(actual - expected) <= tol)) {
    throw new Error(`expected ${actual} to be within ${tol} of ${expected}`);
  }
}

function expectNestedClose(actual: number[][][], expected: number[][][], rel: number, abs: number): void {
  expect(actual.map((s) => s.map((m) => m.length))).toEqual(expected.map((s) => s.map((m) => m.length)));
  actual.forEach((s, e) => s.forEach((m, j) => m.forEach((g, u) => expectClose(g, expected[e][j][u], rel, abs))));
}

// The hand batch. Per-token log-ratios (new − old) are written next to each member.
//   set a, A = +0.5, K = 2
//     o1: new [-0.9, -0.7] old [-1.1, -0.6] mask [1, 1] → [+0.2, −0.1], ℓ = 0.1, 2 tokens
//     o2: new [-2.0, -9.0] old [-2.1, -1.0] mask [1, 0] → [+0.1, (env)], ℓ = 0.1, 1 token
//   set b, A = −2, K = 1
//     o3: new [-0.6, -0.4] old [-0.4, -0.1] mask [1, 1] → [−0.2, −0.3], ℓ = −0.5, 2 tokens
//   set c, A = −1, K = 3
//     o4: new [-1.0]       old [-0.9]       mask [1]    → [−0.1],        ℓ = −0.1, 1 token
//     o5: new [-0.5, -3.0] old [-0.4, -0.2] mask [1, 0] → [−0.1, (env)], ℓ = −0.1, 1 token
//     o6: new [-2.2, -0.1] old [-2.0, -0.2] mask [1, 1] → [−0.2, +0.1], ℓ = −0.1, 2 tokens
// Clip range [0.8, 1.2].
const HAND: RefSet[] = [
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

// ---------------------------------------------------------------------------
// Random batches for property tests
// ---------------------------------------------------------------------------

const memberArb = fc.integer({ min: 1, max: 4 }).chain((T) =>
  fc.record({
    logpOld: fc.array(fc.double({ min: -4, max: -0.5, noNaN: true }), { minLength: T, maxLength: T }),
    delta: fc.array(fc.double({ min: -0.4, max: 0.4, noNaN: true }), { minLength: T, maxLength: T }),
    mask: fc.array(fc.constantFrom(0, 1), { minLength: T, maxLength: T }),
    forcedToken: fc.integer({ min: 0, max: T - 1 }),
  }),
);
const setArb = fc.record({
  advantage: fc.double({ min: -2, max: 2, noNaN: true }),
  members: fc.array(memberArb, { minLength: 1, maxLength: 4 }),
});
const batchArb = (maxSets = 4): fc.Arbitrary<RefSet[]> =>
  fc.array(setArb, { minLength: 1, maxLength: maxSets }).map((sets) =>
    sets.map((s, e) => ({
      setId: `s${e}`,
      advantage: s.advantage,
      members: s.members.map((m, j) => {
        const mask = m.mask.map((x, u) => (u === m.forcedToken ? 1 : x)); // at least one counted token
        return { outputId: `s${e}-o${j}`, logpOld: m.logpOld, logpNew: m.logpOld.map((x, u) => x + m.delta[u]), mask };
      }),
    })),
  );
const objectiveArb = fc.constantFrom<Objective>(...OBJECTIVES);
const reductionArb = fc.constantFrom<EventReduction>(...EVENT_REDUCTIONS);
const clipArb = fc.double({ min: 0.05, max: 0.5, noNaN: true });

/** True when every clipped ratio is at least `margin` (relative) away from both clip bounds (and the dual clip's c). */
function offTheKinks(sets: RefSet[], config: ObjectiveConfig, margin = 1e-3): boolean {
  return refUnitRatios(sets, config).every(
    (r) =>
      Math.abs(r / (1 - config.clipLow) - 1) > margin &&
      Math.abs(r / (1 + config.clipHigh) - 1) > margin &&
      (!config.dualClip || Math.abs(r / config.clipRatioC - 1) > margin),
  );
}

beforeAll(async () => {
  await initTfBackend('tensorflow');
});

describe('objectiveLoss: values worked out by hand', () => {
  // srpo: loss = −(1/3) Σ_e min(ρ_e A_e, clip(ρ_e) A_e), ρ_e = exp(c(K) Σ ℓ).
  //   Σℓ: a = 0.1 + 0.1 = 0.2, b = −0.5, c = −0.1 −0.1 −0.1 = −0.3.
  //   b has K = 1 → ρ_b = exp(−0.5) = 0.606531 < 0.8, A < 0 → min(−1.213061, 0.8·−2 = −1.6) = −1.6 for every reduction.
  it('srpo, sqrt: c(K) = 1/√K', () => {
    // a: L = 0.2/√2 = 0.141421, ρ = 1.151910 (inside), term = 0.5·1.151910 = 0.575955
    // c: L = −0.3/√3 = −0.173205, ρ = 0.840965 (inside), term = −0.840965
    // loss = −(0.575955 − 1.6 − 0.840965)/3 = 1.865010/3 = 0.621670
    expectClose(lossOf(HAND, cfg({ objective: 'srpo', eventReduction: 'sqrt' })), 0.62167006, 1e-6);
  });

  it('srpo, sum: c(K) = 1', () => {
    // a: L = 0.2, ρ = 1.221403 > 1.2, A > 0 → clipped: 0.5·1.2 = 0.6
    // c: L = −0.3, ρ = 0.740818 < 0.8, A < 0 → min(−0.740818, −0.8) = −0.8
    // loss = −(0.6 − 1.6 − 0.8)/3 = 0.6
    expectClose(lossOf(HAND, cfg({ objective: 'srpo', eventReduction: 'sum' })), 0.6, 1e-6);
  });

  it('srpo, mean: c(K) = 1/K', () => {
    // a: L = 0.1, ρ = 1.105171, term 0.552585;  c: L = −0.1, ρ = 0.904837, term −0.904837
    // loss = −(0.552585 − 1.6 − 0.904837)/3 = 1.952252/3 = 0.650751
    expectClose(lossOf(HAND, cfg({ objective: 'srpo', eventReduction: 'mean' })), 0.65075065, 1e-6);
  });

  it('srpo, sum, asymmetric clip [1 − 0.3, 1 + 0.25] = [0.7, 1.25]', () => {
    // a: ρ = 1.221403 < 1.25 → inside: 0.5·1.221403 = 0.610701
    // b: ρ = 0.606531 < 0.7, A < 0 → min(−1.213061, 0.7·−2 = −1.4) = −1.4
    // c: ρ = 0.740818 ≥ 0.7 → inside: −0.740818
    // loss = −(0.610701 − 1.4 − 0.740818)/3 = 1.530117/3 = 0.510039
    expectClose(lossOf(HAND, cfg({ eventReduction: 'sum', clipLow: 0.3, clipHigh: 0.25 })), 0.51003899, 1e-6);
  });

  it('gspo: s_j = exp(ℓ_j / tokens_j), one clip per member, mean over the 6 members; the reduction has no effect', () => {
    // o1: exp(0.1/2) = 1.051271 → 0.525636     o2: exp(0.1/1) = 1.105171 → 0.552585
    // o3: exp(−0.5/2) = 0.778801 < 0.8, A = −2 → min(−1.557602, −1.6) = −1.6
    // o4, o5: exp(−0.1) = 0.904837 → −0.904837 each   o6: exp(−0.1/2) = 0.951229 → −0.951229
    // loss = −(0.525636 + 0.552585 − 1.6 − 0.904837 − 0.904837 − 0.951229)/6 = 3.282682/6 = 0.547114
    for (const eventReduction of EVENT_REDUCTIONS) {
      expectClose(lossOf(HAND, cfg({ objective: 'gspo', eventReduction })), 0.54711388, 1e-6);
    }
  });

  it('grpo-token: one clip per token, mean over the 9 unmasked tokens; the reduction has no effect', () => {
    // a (A = 0.5): exp(0.2) = 1.221403 → 1.2·0.5 = 0.6;  exp(−0.1) = 0.904837 → 0.452419;  exp(0.1) → 0.552585
    // b (A = −2):  exp(−0.2) = 0.818731 → −1.637462;  exp(−0.3) = 0.740818 → clipped −1.6
    // c (A = −1):  −0.904837, −0.904837, exp(−0.2) → −0.818731, exp(0.1) = 1.105171 → −1.105171 (unclipped, A < 0)
    // sum = −5.366034 → loss = 5.366034/9 = 0.596226
    for (const eventReduction of EVENT_REDUCTIONS) {
      expectClose(lossOf(HAND, cfg({ objective: 'grpo-token', eventReduction })), 0.59622598, 1e-6);
    }
  });

  it('srpo-length-norm (our variant), sqrt: L_e = (1/√K) Σ_j ℓ_j / |y_j|', () => {
    // a: ℓ/|y| = 0.1/2 + 0.1/1 = 0.15, L = 0.15/√2 = 0.106066, ρ = 1.111895 (inside), term 0.555948
    // b: −0.5/2 = −0.25, K = 1, ρ = 0.778801 < 0.8, A = −2 → min(−1.557602, −1.6) = −1.6
    // c: −0.1/1 − 0.1/1 + (−0.1)/2 = −0.25, L = −0.25/√3 = −0.144338, ρ = 0.865596 (inside), term −0.865596
    // loss = −(0.555948 − 1.6 − 0.865596)/3 = 1.909648/3 = 0.636549
    expectClose(lossOf(HAND, cfg({ objective: 'srpo-length-norm', eventReduction: 'sqrt' })), 0.63654929, 1e-6);
  });

  it('srpo, sqrt gradient by hand: −(1/|B|)·A·ρ·c(K) on counted tokens of unclipped sets, 0 elsewhere', () => {
    // a: −(1/3)·0.5·1.151910·(1/√2) = −0.135754;  b: clipped on its advantage's side → 0
    // c: −(1/3)·(−1)·0.840965·(1/√3) = +0.161844;  env and padded tokens → 0
    const g = gradOf(HAND, cfg({ eventReduction: 'sqrt' }));
    const a = -0.13575388;
    const c = 0.16184381;
    expectNestedClose(
      g,
      [
        [
          [a, a],
          [a, 0],
        ],
        [[0, 0]],
        [[c], [c, 0], [c, c]],
      ],
      1e-5,
      1e-7,
    );
  });

  it('padding and masked positions holding −∞ change neither the loss nor the gradient', () => {
    const withInf = HAND.map((s) => ({ ...s, members: s.members.map((m) => ({ ...m, logpNew: m.logpNew.map((x, u) => (m.mask[u] === 0 ? -Infinity : x)) })) }));
    for (const objective of OBJECTIVES) {
      const config = cfg({ objective });
      const lossInf = lossOf(withInf, config);
      expect(Number.isFinite(lossInf)).toBe(true);
      expectClose(lossInf, refLoss(HAND, config), 1e-5);
      const g = gradOf(withInf, config, -Infinity);
      expect(g.flat(2).every(Number.isFinite)).toBe(true);
      expectNestedClose(g, refFiniteDifferenceGrad(HAND, config), 1e-4, 1e-6);
    }
  });
});

describe('objectiveLoss: autodiff against float64 finite differences', () => {
  it.each(OBJECTIVES.flatMap((o) => EVENT_REDUCTIONS.map((r) => [o, r] as const)))('%s / %s on the hand batch', (objective, eventReduction) => {
    const config = cfg({ objective, eventReduction });
    expect(offTheKinks(HAND, config)).toBe(true);
    const fd = refFiniteDifferenceGrad(HAND, config);
    expectNestedClose(gradOf(HAND, config), fd, 1e-4, 1e-6);
    // Under srpo/sum all three sets are clipped on their advantage's side (see the hand values
    // above), so the whole gradient is 0; every other case has some non-zero gradient.
    const allZero = objective === 'srpo' && eventReduction === 'sum';
    expect(fd.flat(2).some((x) => Math.abs(x) > 1e-3)).toBe(!allZero);
  });

  it('random batches, every objective and reduction, random asymmetric clips (property)', () => {
    fc.assert(
      fc.property(batchArb(), objectiveArb, reductionArb, clipArb, clipArb, (sets, objective, eventReduction, clipLow, clipHigh) => {
        const config = cfg({ objective, eventReduction, clipLow, clipHigh });
        fc.pre(offTheKinks(sets, config));
        expectClose(lossOf(sets, config), refLoss(sets, config), 1e-5, 1e-6);
        expectNestedClose(gradOf(sets, config), refFiniteDifferenceGrad(sets, config), 1e-3, 1e-5);
      }),
      { numRuns: 25 },
    );
  });
});

describe('objectiveLoss: properties', () => {
  it('permuting members within sets and the order of sets changes nothing', () => {
    const arb = batchArb().chain((sets) =>
      fc.tuple(
        fc.constant(sets),
        fc.shuffledSubarray(
          sets.map((_, e) => e),
          { minLength: sets.length, maxLength: sets.length },
        ),
        fc.tuple(
          ...sets.map((s) =>
            fc.shuffledSubarray(
              s.members.map((_, j) => j),
              { minLength: s.members.length, maxLength: s.members.length },
            ),
          ),
        ),
        objectiveArb,
        reductionArb,
      ),
    );
    fc.assert(
      fc.property(arb, ([sets, setOrder, memberOrders, objective, eventReduction]) => {
        const config = cfg({ objective, eventReduction });
        const permuted = setOrder.map((e) => ({ ...sets[e], members: memberOrders[e].map((j) => sets[e].members[j]) }));
        expectClose(lossOf(permuted, config), lossOf(sets, config), 1e-5, 1e-6);
        const g = gradOf(sets, config);
        const gp = gradOf(permuted, config);
        setOrder.forEach((e, pe) => memberOrders[e].forEach((j, pj) => g[e][j].forEach((x, u) => expectClose(gp[pe][pj][u], x, 1e-5, 1e-7))));
      }),
      { numRuns: 20 },
    );
  });

  it('interleaved members (memberSet not sorted) give the same loss as the grouped layout', () => {
    const { batch, logpNew } = tensors(HAND);
    // Reverse the member rows: sets are then no longer contiguous and in reverse order.
    const reversed: PaddedSetBatch = {
      logpOld: tf.reverse(batch.logpOld, 0),
      mask: tf.reverse(batch.mask, 0),
      memberSet: tf.reverse(batch.memberSet, 0),
      advantage: batch.advantage,
      numSets: batch.numSets,
    };
    const logpNewReversed = tf.reverse(logpNew, 0);
    try {
      for (const objective of OBJECTIVES) {
        const config = cfg({ objective });
        const loss = tf.tidy(() => objectiveLoss(logpNewReversed, reversed, config).loss.dataSync()[0]);
        expectClose(loss, refLoss(HAND, config), 1e-5);
      }
    } finally {
      tf.dispose([reversed.logpOld, reversed.mask, reversed.memberSet, logpNewReversed, logpNew]);
      disposePaddedSetBatch(batch);
    }
  });

  it('K = 1: srpo equals the sequence-level token-sum PPO clip, for every reduction', () => {
    const singletons = batchArb().map((sets) => sets.map((s) => ({ ...s, members: [s.members[0]] })));
    fc.assert(
      fc.property(singletons, (sets) => {
        // PPO with one ratio per sequence: r = exp(Σ_u m_u (new − old)), loss = −mean min(rA, clip(r)A).
        let ppo = 0;
        for (const s of sets) {
          const m = s.members[0];
          let l = 0;
          m.logpNew.forEach((x, u) => (l += m.mask[u] * (x - m.logpOld[u])));
          const r = Math.exp(l);
          ppo += Math.min(r * s.advantage, Math.min(Math.max(r, 0.8), 1.2) * s.advantage);
        }
        ppo = -ppo / sets.length;
        const losses = EVENT_REDUCTIONS.map((eventReduction) => lossOf(sets, cfg({ eventReduction })));
        for (const l of losses) expectClose(l, ppo, 1e-5, 1e-6);
        // c(1) = 1 exactly in float32, so the three reductions agree bit for bit.
        expect(losses[1]).toBe(losses[0]);
        expect(losses[2]).toBe(losses[0]);
      }),
      { numRuns: 30 },
    );
  });

  it('A = 0 for every set gives an exactly zero gradient', () => {
    fc.assert(
      fc.property(batchArb(), objectiveArb, reductionArb, (sets, objective, eventReduction) => {
        const zeroA = sets.map((s) => ({ ...s, advantage: 0 }));
        const g = gradOf(zeroA, cfg({ objective, eventReduction })).flat(2);
        expect(g.every((x) => x === 0)).toBe(true);
      }),
      { numRuns: 20 },
    );
  });

  it("a set clipped on its advantage's side gets a zero gradient; past the other bound it keeps its gradient (no dual clip)", () => {
    // Every counted token of a forced set moves by ±0.5, so its set, member and token
    // ratios are all exp(±0.5·...) — beyond [0.8, 1.2] for every objective and reduction.
    const kinds = ['clippedHigh', 'clippedLow', 'pastHighWithNegativeA', 'pastLowWithPositiveA', 'free'] as const;
    const arb = fc.tuple(batchArb(), fc.array(fc.constantFrom(...kinds), { minLength: 4, maxLength: 4 }), objectiveArb, reductionArb);
    fc.assert(
      fc.property(arb, ([sets, kindPerSet, objective, eventReduction]) => {
        const forced = sets.map((s, e) => {
          const kind = kindPerSet[e];
          if (kind === 'free') return s;
          const up = kind === 'clippedHigh' || kind === 'pastHighWithNegativeA';
          const positive = kind === 'clippedHigh' || kind === 'pastLowWithPositiveA';
          return {
            ...s,
            advantage: (positive ? 1 : -1) * (0.5 + Math.abs(s.advantage)),
            members: s.members.map((m) => ({ ...m, logpNew: m.logpOld.map((x, u) => (m.mask[u] === 1 ? x + (up ? 0.5 : -0.5) : x)) })),
          };
        });
        // Without the dual clip: with it, a negative-advantage unit past c loses its gradient too (tested below).
        const g = gradOf(forced, cfg({ objective, eventReduction, dualClip: false }));
        forced.forEach((s, e) => {
          const counted = s.members.flatMap((m, j) => g[e][j].filter((_, u) => m.mask[u] === 1));
          if (kindPerSet[e] === 'clippedHigh' || kindPerSet[e] === 'clippedLow') {
            expect(counted.every((x) => x === 0)).toBe(true);
          } else if (kindPerSet[e] !== 'free') {
            expect(counted.every((x) => x !== 0)).toBe(true);
          }
        });
      }),
      { numRuns: 30 },
    );
  });
});

describe('objectiveLoss: advantages from groupAdvantages (edge cases end to end)', () => {
  it('a zero-std group and a singleton group contribute no gradient; a normal group does', () => {
    const config = cfg();
    const info = groupAdvantages(
      [
        { setId: 'a', groupKey: 'same', reward: 0.5 },
        { setId: 'b', groupKey: 'same', reward: 0.5 },
        { setId: 'c', groupKey: 'alone', reward: 1 },
        { setId: 'd', groupKey: 'normal', reward: 1 },
        { setId: 'e', groupKey: 'normal', reward: 0 },
      ],
      config,
    );
    const member = (id: string): RefMember => ({ outputId: id, logpNew: [-0.5, -0.4], logpOld: [-0.45, -0.5], mask: [1, 1] });
    const sets: RefSet[] = info.map((a) => ({ setId: a.setId, advantage: a.advantage, members: [member(`${a.setId}-1`), member(`${a.setId}-2`)] }));
    const g = gradOf(sets, config);
    for (const e of [0, 1, 2]) expect(g[e].flat().every((x) => x === 0)).toBe(true);
    for (const e of [3, 4]) expect(g[e].flat().every((x) => x !== 0)).toBe(true);
  });
});

describe('objectiveLoss: training-loop use', () => {
  it('works inside optimizer.minimize with a variable and lowers the loss of an unclipped batch', () => {
    const sets: RefSet[] = [
      { setId: 'p', advantage: 1, members: [{ outputId: 'p1', logpNew: [-1, -1], logpOld: [-1, -1], mask: [1, 1] }] },
      { setId: 'n', advantage: -1, members: [{ outputId: 'n1', logpNew: [-1, -1], logpOld: [-1, -1], mask: [1, 1] }] },
    ];
    const { batch, logpNew } = tensors(sets);
    const v = tf.variable(logpNew);
    const opt = tf.train.sgd(0.01);
    try {
      const config = cfg();
      const before = tf.tidy(() => objectiveLoss(v as tf.Tensor2D, batch, config).loss.dataSync()[0]);
      const numTensors = tf.memory().numTensors;
      opt.minimize(() => objectiveLoss(v, batch, config).loss, false, [v]);
      expect(tf.memory().numTensors).toBe(numTensors); // minimize frees the loss and the gradients
      const after = tf.tidy(() => objectiveLoss(v as tf.Tensor2D, batch, config).loss.dataSync()[0]);
      // At ρ = 1: loss = −(A_p + A_n)/2 = 0; the step raises the positive set's log-probs and lowers the negative one's.
      expect(Math.abs(before)).toBe(0);
      expect(after).toBeLessThan(before);
      const rows = v.arraySync();
      expect(rows[0][0]).toBeGreaterThan(-1);
      expect(rows[1][0]).toBeLessThan(-1);
    } finally {
      opt.dispose();
      tf.dispose([v, logpNew]);
      disposePaddedSetBatch(batch);
    }
  });

  it('creates exactly the output tensors and frees them all; nothing leaks inside tidy or tf.grad', () => {
    const { batch, logpNew } = tensors(HAND);
    try {
      for (const objective of OBJECTIVES) {
        const config = cfg({ objective });
        const before = tf.memory().numTensors;
        const out = objectiveLoss(logpNew, batch, config);
        expect(tf.memory().numTensors).toBe(before + 13);
        disposeObjectiveOutput(out);
        expect(tf.memory().numTensors).toBe(before);
        tf.tidy(() => {
          objectiveLoss(logpNew, batch, config);
        });
        expect(tf.memory().numTensors).toBe(before);
        const g = tf.grad((x: tf.Tensor) => objectiveLoss(x as tf.Tensor2D, batch, config).loss)(logpNew);
        expect(tf.memory().numTensors).toBe(before + 1);
        g.dispose();
        expect(tf.memory().numTensors).toBe(before);
      }
    } finally {
      logpNew.dispose();
      disposePaddedSetBatch(batch);
    }
  });
});

describe('objectiveLoss: shape checks', () => {
  it('refuses a logpNew whose shape differs from logpOld, naming the field', () => {
    const { batch, logpNew } = tensors(HAND);
    const wrong = tf.zeros<tf.Rank.R2>([6, 3]);
    try {
      expect(() => objectiveLoss(wrong, batch, cfg())).toThrow(ValidationError);
      expect(() => objectiveLoss(wrong, batch, cfg())).toThrow('logpNew: shape [6, 3] differs from logpOld shape [6, 2]');
    } finally {
      tf.dispose([wrong, logpNew]);
      disposePaddedSetBatch(batch);
    }
  });

  it('refuses an advantage tensor that does not have one entry per set', () => {
    const { batch, logpNew } = tensors(HAND);
    const badAdvantage = tf.zeros<tf.Rank.R1>([2]);
    try {
      expect(() => objectiveLoss(logpNew, { ...batch, advantage: badAdvantage }, cfg())).toThrow('batch.advantage: expected shape [3], got [2]');
    } finally {
      tf.dispose([badAdvantage, logpNew]);
      disposePaddedSetBatch(batch);
    }
  });
});
