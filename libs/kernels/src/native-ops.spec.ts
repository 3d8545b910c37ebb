import * as tf from '@tensorflow/tfjs';
import {
  batchMatMul,
  configureNativeKernels,
  configureWebGpuKernels,
  matMul2d,
  nativeKernelsActive,
  rowMean,
  sigmoidGrad,
  sumToLastAxis,
  targetLogProbs,
  webgpuActive,
} from './native-ops';
import { nativeBackend } from './test/fixtures';

/** The fused native kernels must compute what their composite fallbacks compute (the cpu backend uses the latter). */
describe('native-ops', () => {
  beforeAll(nativeBackend);

  const close = async (a: tf.Tensor, b: tf.Tensor, tol = 1e-5): Promise<void> => {
    expect(a.shape).toEqual(b.shape);
    const [x, y] = await Promise.all([a.data(), b.data()]);
    const diff = Array.from(x).map((v, i) => Math.abs(v - y[i]));
    expect(Math.max(...diff)).toBeLessThan(tol);
  };

  it('runs the native kernels on the tensorflow backend, and can be switched off or to BatchMatMulV2', async () => {
    expect(nativeKernelsActive()).toBe(true);
    const a = tf.randomNormal<tf.Rank.R2>([3, 4], 0, 1, 'float32', 9);
    const b = tf.randomNormal<tf.Rank.R2>([5, 4], 0, 1, 'float32', 10);
    try {
      expect(configureNativeKernels({ matMulOp: 'BatchMatMulV2' })).toEqual({ enabled: true, matMulOp: 'BatchMatMulV2' });
      await close(matMul2d(a, b, false, true), tf.matMul(a, b, false, true));
      configureNativeKernels({ enabled: false });
      expect(nativeKernelsActive()).toBe(false);
    } finally {
      configureNativeKernels({ enabled: true, matMulOp: 'MatMul' });
    }
    expect(nativeKernelsActive()).toBe(true);
  });

  it('sumToLastAxis equals the composite column sum', async () => {
    const x = tf.randomNormal([5, 3, 7], 0, 1, 'float32', 1);
    const n = sumToLastAxis(x);
    const c = sumToLastAxis(x, true);
    expect(n.shape).toEqual([7]);
    await close(n, c);
    await close(n, tf.sum(x.reshape([15, 7]), 0));
  });

  it('rowMean equals the row mean (WebGPU-shaped paths stay off on this backend)', async () => {
    const x = tf.randomNormal<tf.Rank.R2>([6, 8], 0, 1, 'float32', 14);
    const meanCol = tf.fill<tf.Rank.R2>([8, 1], 1 / 8);
    await close(rowMean(x, meanCol), tf.mean(x, 1, true));
    await close(rowMean(x, meanCol, true), tf.mean(x, 1, true));
    expect(webgpuActive()).toBe(false);
    expect(configureWebGpuKernels({ enabled: false })).toEqual({ enabled: false });
    expect(configureWebGpuKernels({ enabled: true })).toEqual({ enabled: true });
  });

  it('sigmoidGrad equals dy·y·(1 − y)', async () => {
    const y = tf.sigmoid(tf.randomNormal([4, 6], 0, 1, 'float32', 12));
    const dy = tf.randomNormal([4, 6], 0, 1, 'float32', 13);
    await close(sigmoidGrad(y, dy), sigmoidGrad(y, dy, true));
  });

  it('targetLogProbs matches log-softmax and its gradient', async () => {
    const logits = tf.randomNormal<tf.Rank.R2>([6, 5], 0, 2, 'float32', 4);
    const targets = tf.tensor1d([0, 4, 2, 2, 1, 3], 'int32');
    const n = targetLogProbs(logits, targets);
    const c = targetLogProbs(logits, targets, true);
    await close(n.logp, c.logp);
    await close(n.dlogp, c.dlogp);
    const ref = tf.grad((l: tf.Tensor) => tf.sum(tf.mul(tf.logSoftmax(l), tf.oneHot(targets, 5))))(logits);
    await close(n.dlogp, ref);
  });

  it('matMul2d and batchMatMul equal tf.matMul for every transpose combination', async () => {
    const a = tf.randomNormal<tf.Rank.R2>([4, 4], 0, 1, 'float32', 5);
    const b = tf.randomNormal<tf.Rank.R2>([4, 4], 0, 1, 'float32', 6);
    for (const [ta, tb] of [
      [false, false],
      [true, false],
      [false, true],
      [true, true],
    ] as const) {
      await close(matMul2d(a, b, ta, tb), tf.matMul(a, b, ta, tb));
    }
    const x = tf.randomNormal<tf.Rank.R4>([2, 3, 4, 5], 0, 1, 'float32', 7);
    const y = tf.randomNormal<tf.Rank.R4>([2, 3, 4, 5], 0, 1, 'float32', 8);
    await close(batchMatMul(x, y, false, true), batchMatMul(x, y, false, true, true));
    await close(batchMatMul(x, y, true, false), batchMatMul(x, y, true, false, true));
  });
});
