import * as tf from '@tensorflow/tfjs';
import { initTfBackend } from '@srpo/core';
import { eventReduction, memberCount, memberLogRatio, setLogRatio, setRatio, tokenLogRatio } from './set-ratio';

beforeAll(async () => {
  await initTfBackend('tensorflow');
});

const values = (t: tf.Tensor): number[] => Array.from(t.dataSync());
const rounded = (xs: number[], digits = 6): number[] => xs.map((x) => Number(x.toFixed(digits)) + 0);

describe('tokenLogRatio / memberLogRatio', () => {
  it('counts only unmasked tokens, even when a masked position holds −∞', () => {
    tf.tidy(() => {
      const logpNew = tf.tensor2d([
        [-1, -2, -Infinity],
        [-0.5, -0.5, -0.5],
      ]);
      const logpOld = tf.tensor2d([
        [-1.5, -1, -3],
        [-1, -1, -1],
      ]);
      const mask = tf.tensor2d([
        [1, 1, 0],
        [0, 1, 0],
      ]);
      // row 0: [−1 − (−1.5), −2 − (−1), masked] = [0.5, −1, 0] → ℓ = −0.5
      // row 1: [masked, −0.5 − (−1), masked] = [0, 0.5, 0] → ℓ = 0.5
      expect(rounded(values(tokenLogRatio(logpNew, logpOld, mask)))).toEqual([0.5, -1, 0, 0, 0.5, 0]);
      expect(rounded(values(memberLogRatio(logpNew, logpOld, mask)))).toEqual([-0.5, 0.5]);
      // d ℓ_j / d logpNew_u = m_u: 1 on counted tokens, 0 (not NaN) on masked ones.
      const g = tf.grad((x: tf.Tensor) => tf.sum(memberLogRatio(x as tf.Tensor2D, logpOld, mask)))(logpNew);
      expect(values(g)).toEqual([1, 1, 0, 0, 1, 0]);
    });
  });
});

describe('memberCount / eventReduction', () => {
  it('counts members per set, sets interleaved', () => {
    tf.tidy(() => {
      expect(values(memberCount(tf.tensor1d([0, 2, 0, 1, 0], 'int32'), 3))).toEqual([3, 1, 1]);
    });
  });

  it('c(K) for K = 1, 4, 9: sqrt → 1/√K, sum → 1, mean → 1/K', () => {
    tf.tidy(() => {
      const k = tf.tensor1d([1, 4, 9]);
      expect(rounded(values(eventReduction(k, 'sqrt')))).toEqual([1, 0.5, 0.333333]);
      expect(values(eventReduction(k, 'sum'))).toEqual([1, 1, 1]);
      expect(rounded(values(eventReduction(k, 'mean')))).toEqual([1, 0.25, 0.111111]);
    });
  });
});

describe('setLogRatio / setRatio', () => {
  // ℓ = [0.3, −0.2, 0.6, 0.1, 0.9], memberSet = [0, 2, 0, 1, 0]:
  //   set 0: Σℓ = 0.3 + 0.6 + 0.9 = 1.8, K = 3; set 1: 0.1, K = 1; set 2: −0.2, K = 1.
  const l = [0.3, -0.2, 0.6, 0.1, 0.9];
  const sets = [0, 2, 0, 1, 0];

  it.each([
    ['sqrt', [1.03923, 0.1, -0.2]], // 1.8/√3 = 1.039230
    ['sum', [1.8, 0.1, -0.2]],
    ['mean', [0.6, 0.1, -0.2]], // 1.8/3
  ] as const)('%s: L_e = c(K_e) Σ_j ℓ_j', (reduction, expected) => {
    tf.tidy(() => {
      const L = setLogRatio(tf.tensor1d(l), tf.tensor1d(sets, 'int32'), 3, reduction);
      expect(rounded(values(L))).toEqual(expected);
    });
  });

  it('dL_e/dℓ_j = c(K) of the member’s set', () => {
    tf.tidy(() => {
      const g = tf.grad((x: tf.Tensor) => tf.sum(setLogRatio(x as tf.Tensor1D, tf.tensor1d(sets, 'int32'), 3, 'sqrt')))(tf.tensor1d(l));
      const c3 = Number((1 / Math.sqrt(3)).toFixed(6));
      expect(rounded(values(g))).toEqual([c3, 1, c3, 1, c3]);
    });
  });

  it('ρ_e = exp(L_e)', () => {
    tf.tidy(() => {
      expect(rounded(values(setRatio(tf.tensor1d([0, Math.log(2), -Math.log(2)]))))).toEqual([1, 2, 0.5]);
    });
  });
});
