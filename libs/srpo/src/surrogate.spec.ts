import * as tf from '@tensorflow/tfjs';
import { initTfBackend } from '@srpo/core';
import {
  boundedClippedSurrogate,
  boundedLogRatio,
  clipActiveDual,
  clipActiveHigh,
  clipActiveLow,
  clippedRatio,
  clippedSurrogate,
  dualClippedSurrogate,
  MAX_LOG_RATIO,
  ratio,
  ratioOutOfRange,
  reportedRatio,
} from './surrogate';

beforeAll(async () => {
  await initTfBackend('tensorflow');
});

const values = (t: tf.Tensor): number[] => Array.from(t.dataSync());

describe('ratio / clippedRatio', () => {
  it('exp of the log-ratio, clipped to [1 − ε_low, 1 + ε_high]', () => {
    tf.tidy(() => {
      const r = ratio(tf.tensor1d([0, Math.log(2), -Math.log(4)]));
      expect(values(r).map((x) => Number(x.toFixed(6)))).toEqual([1, 2, 0.25]);
      // Asymmetric clip [0.8, 1.28]: 2 → 1.28, 0.25 → 0.8, 1 stays.
      expect(values(clippedRatio(r, 0.2, 0.28)).map((x) => Number(x.toFixed(6)))).toEqual([1, 1.28, 0.8]);
    });
  });
});

describe('clippedSurrogate', () => {
  // min(rA, clip(r, 0.8, 1.2)·A), worked out case by case:
  //   r = 1.5, A = +1: min(1.5, 1.2) = 1.2     (high clip active)
  //   r = 1.5, A = −1: min(−1.5, −1.2) = −1.5  (pessimistic, unclipped)
  //   r = 0.5, A = +1: min(0.5, 0.8) = 0.5     (pessimistic, unclipped)
  //   r = 0.5, A = −1: min(−0.5, −0.8) = −0.8  (low clip active)
  //   r = 1.1, A = +2: 2.2 (inside)            r = 1.5, A = 0: 0
  const r = [1.5, 1.5, 0.5, 0.5, 1.1, 1.5];
  const a = [1, -1, 1, -1, 2, 0];

  it('takes the pessimistic term in each quadrant', () => {
    const out = tf.tidy(() => values(clippedSurrogate(tf.tensor1d(r), tf.tensor1d(a), 0.2, 0.2)));
    [1.2, -1.5, 0.5, -0.8, 2.2, 0].forEach((v, i) => expect(out[i]).toBeCloseTo(v, 6));
  });

  it('has gradient 0 exactly where the clip on the advantage side is active, A elsewhere', () => {
    const g = tf.tidy(() => values(tf.grad((x: tf.Tensor) => tf.sum(clippedSurrogate(x, tf.tensor1d(a), 0.2, 0.2)))(tf.tensor1d(r))));
    // d/dr min(rA, clip(r)A): 0 for the two clipped cases, A for the others.
    expect(g).toEqual([0, -1, 1, 0, 2, 0]);
  });

  it('broadcasts a per-row advantage over tokens', () => {
    const out = tf.tidy(() => clippedSurrogate(tf.tensor2d([[1, 1.5]]), tf.tensor2d([[2]]), 0.2, 0.2).arraySync());
    expect(out[0][0]).toBeCloseTo(2, 6);
    expect(out[0][1]).toBeCloseTo(2.4, 6);
  });
});

describe('clipActiveLow / clipActiveHigh', () => {
  it('flag only the clipped quadrants, with strict bounds', () => {
    tf.tidy(() => {
      // The first six as above, then r exactly on each bound: on a bound the clip is not active.
      const rr = tf.tensor1d([1.5, 1.5, 0.5, 0.5, 1.1, 1.5, 0.8, 1.2]);
      const aa = tf.tensor1d([1, -1, 1, -1, 2, 0, -1, 1]);
      expect(values(clipActiveLow(rr, aa, 0.2))).toEqual([0, 0, 0, 1, 0, 0, 0, 0]);
      expect(values(clipActiveHigh(rr, aa, 0.2))).toEqual([1, 0, 0, 0, 0, 0, 0, 0]);
    });
  });
});

describe('dualClippedSurrogate (Ye et al. 2020)', () => {
  // c = 3. A < 0: max(min(rA, clip(r)A), cA).
  //   r = 5,   A = −1: max(min(−5, −1.2), −3) = −3   (dual clip active)
  //   r = 2,   A = −1: max(−2, −3) = −2              (PPO term, below c)
  //   r = 5,   A = +1: min(5, 1.2) = 1.2            (high clip; the dual clip is for A < 0 only)
  //   r = 0.5, A = −1: −0.8                          (low clip)
  const r = [5, 2, 5, 0.5];
  const a = [-1, -1, 1, -1];

  it('bounds negative-advantage terms at c·A and has gradient 0 there', () => {
    const out = tf.tidy(() => values(dualClippedSurrogate(tf.tensor1d(r), tf.tensor1d(a), 0.2, 0.2, 3)));
    [-3, -2, 1.2, -0.8].forEach((v, i) => expect(out[i]).toBeCloseTo(v, 6));
    const g = tf.tidy(() => values(tf.grad((x: tf.Tensor) => tf.sum(dualClippedSurrogate(x, tf.tensor1d(a), 0.2, 0.2, 3)))(tf.tensor1d(r))));
    expect(g).toEqual([0, -1, 0, 0]);
  });

  it('with c = null is the PPO clipped surrogate', () => {
    const out = tf.tidy(() => values(dualClippedSurrogate(tf.tensor1d(r), tf.tensor1d(a), 0.2, 0.2, null)));
    const ppo = tf.tidy(() => values(clippedSurrogate(tf.tensor1d(r), tf.tensor1d(a), 0.2, 0.2)));
    expect(out).toEqual(ppo);
  });

  it('clipActiveDual flags r > c with A < 0 only', () => {
    tf.tidy(() => {
      expect(values(clipActiveDual(tf.tensor1d([5, 2, 5, 3]), tf.tensor1d([-1, -1, 1, -1]), 3))).toEqual([1, 0, 0, 0]);
      expect(values(clipActiveDual(tf.tensor1d([5]), tf.tensor1d([-1]), null))).toEqual([0]);
    });
  });
});

describe('bounded evaluation from log-ratios', () => {
  it('boundedLogRatio: log(1 + ε_high) + 1 for A > 0, log(c) + 1 for A < 0 with the dual clip, MAX_LOG_RATIO without', () => {
    tf.tidy(() => {
      const big = tf.tensor1d([1000, 1000, 1000, 0.1]);
      const adv = tf.tensor1d([1, -1, 0, -1]);
      const withDual = values(boundedLogRatio(big, adv, 0.2, 3));
      [Math.log(1.2) + 1, Math.log(3) + 1, Math.log(3) + 1, 0.1].forEach((v, i) => expect(withDual[i]).toBeCloseTo(v, 5));
      const without = values(boundedLogRatio(big, adv, 0.2, null));
      [Math.log(1.2) + 1, MAX_LOG_RATIO, MAX_LOG_RATIO, 0.1].forEach((v, i) => expect(without[i]).toBeCloseTo(v, 4));
    });
  });

  it('boundedClippedSurrogate equals the surrogate of exp(log r) wherever that is finite, value and gradient', () => {
    const logR = [-3, -0.5, -0.1, 0, 0.1, 0.5, 2, 10, 80];
    const adv = [1, -1, 2, -2, 0.5, -0.5, 1, -1, 1];
    for (const c of [3, null]) {
      tf.tidy(() => {
        const f = (x: tf.Tensor) => tf.sum(boundedClippedSurrogate(x, tf.tensor1d(adv), { clipLow: 0.2, clipHigh: 0.2, clipRatioC: c }));
        const ref = (x: tf.Tensor) => tf.sum(dualClippedSurrogate(tf.exp(x), tf.tensor1d(adv), 0.2, 0.2, c));
        const x = tf.tensor1d(logR);
        expect(values(f(x))[0]).toBeCloseTo(values(ref(x))[0], 3);
        // Zero gradients may differ in sign (±0): the same gradient.
        const unsigned = (v: number[]): number[] => v.map((g) => (g === 0 ? 0 : g));
        expect(unsigned(values(tf.grad(f)(x)))).toEqual(unsigned(values(tf.grad(ref)(x))));
      });
    }
  });

  it("its written-out gradient is autodiff's of the same ops, to the bit (zeros' signs aside): ties on every bound, A = 0, NaN, broadcast advantages", () => {
    const unsigned = (v: number[]): number[] => v.map((x) => (x === 0 ? 0 : x));
    // The composite the customGrad replaces: autodiff through boundedLogRatio, exp and dualClippedSurrogate.
    const composite = (x: tf.Tensor, a: tf.Tensor, clip: { clipLow: number; clipHigh: number; clipRatioC: number | null }) =>
      dualClippedSurrogate(tf.exp(boundedLogRatio(x, a, clip.clipHigh, clip.clipRatioC)), a, clip.clipLow, clip.clipHigh, clip.clipRatioC);
    // log-ratios on and around each bound: log(1 − ε_low), log(1 + ε_high), log c, the bound's margin, far beyond.
    const edges = (lo: number, hi: number, c: number) => [
      0,
      Math.log(1 - lo),
      Math.log1p(hi),
      Math.log(c),
      Math.log1p(hi) + 1,
      Math.log(c) + 1,
      -3,
      -0.1,
      0.1,
      3,
      50,
      1e4,
      -1e4,
      Number.NaN,
    ];
    for (const clip of [
      { clipLow: 0.2, clipHigh: 0.2, clipRatioC: 3 as number | null },
      { clipLow: 0.2, clipHigh: 0.28, clipRatioC: null },
      { clipLow: 0.1, clipHigh: 0.3, clipRatioC: 1.5 },
    ]) {
      tf.tidy(() => {
        const logR = edges(clip.clipLow, clip.clipHigh, clip.clipRatioC ?? 3);
        const n = logR.length;
        for (const a of [1, -1, 0, 2.5, -0.7]) {
          const x = tf.tensor1d(logR);
          const adv = tf.fill([n], a);
          // A non-uniform upstream gradient, as a mean over sets and the loss's sign give.
          const up = tf.tensor1d(Array.from({ length: n }, (_, i) => (i % 3) - 1.25));
          const mine = unsigned(values(tf.grad((t: tf.Tensor) => tf.sum(tf.mul(boundedClippedSurrogate(t, adv, clip), up)))(x)));
          const auto = unsigned(values(tf.grad((t: tf.Tensor) => tf.sum(tf.mul(composite(t, adv, clip), up)))(x)));
          expect({ a, clip, grad: mine }).toEqual({ a, clip, grad: auto });
          expect(values(boundedClippedSurrogate(x, adv, clip))).toEqual(values(composite(x, adv, clip)));
        }
        // [M, T] log-ratios against a [M, 1] advantage (grpo-token's layout).
        const x2 = tf.tensor2d(logR.concat(logR.map((v) => -v)), [2, n]);
        const adv2 = tf.tensor2d([0.8, -1.1], [2, 1]);
        const g1 = unsigned(values(tf.grad((t: tf.Tensor) => tf.sum(boundedClippedSurrogate(t, adv2, clip)))(x2)));
        const g2 = unsigned(values(tf.grad((t: tf.Tensor) => tf.sum(composite(t, adv2, clip)))(x2)));
        expect(g1).toEqual(g2);
      });
    }
  });

  it('stays finite for log-ratios whose exp is +∞ in float32', () => {
    tf.tidy(() => {
      const x = tf.tensor1d([100, 1e4, 1e30, 100]);
      const adv = tf.tensor1d([1, -1, -1, 0]);
      for (const c of [3, null]) {
        const f = (t: tf.Tensor) => tf.sum(boundedClippedSurrogate(t, adv, { clipLow: 0.2, clipHigh: 0.2, clipRatioC: c }));
        expect(values(f(x)).every(Number.isFinite)).toBe(true);
        expect(values(tf.grad(f)(x)).every((g) => g === 0)).toBe(true);
      }
      // Unbounded, the same input gives ∞ and NaN.
      expect(values(clippedSurrogate(tf.exp(x), adv, 0.2, 0.2)).some((v) => !Number.isFinite(v))).toBe(true);
    });
  });

  it('reportedRatio saturates at e^±MAX_LOG_RATIO = 2^±64; ratioOutOfRange flags |log r| > MAX_LOG_RATIO and NaN', () => {
    tf.tidy(() => {
      const x = tf.tensor1d([0, 44, 45, -45, 1e4, Number.NaN]);
      const r = values(reportedRatio(x));
      expect(r[0]).toBe(1);
      // float32 exp is within an ulp or so of 2^64.
      expect(Math.abs(r[2] / 2 ** 64 - 1)).toBeLessThan(1e-6);
      expect(Math.abs(r[3] / 2 ** -64 - 1)).toBeLessThan(1e-6);
      expect(r[4]).toBe(r[2]);
      expect(values(ratioOutOfRange(x))).toEqual([0, 0, 1, 1, 1, 1]);
    });
  });
});
