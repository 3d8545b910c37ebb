import * as tf from '@tensorflow/tfjs';
import { initTfBackend } from '@srpo/core';
import { clipActiveHigh, clipActiveLow, clippedRatio, clippedSurrogate, ratio } from './surrogate';

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
