import * as tf from '@tensorflow/tfjs';
import { targetLogProbsFused, targetLogProbsGrad } from './fused-ops';
import { configureSrpoKernels, srpoKernelAvailable } from './srpo-kernels';
import { describeNative } from './test/describe-native';
import { nativeBackend, seededValues as values } from './test/fixtures';

/**
 * The target log-prob kernels (native/logprob-kernels.h) against a float64 log-softmax written
 * here (pickLogProbs' fused path against its composite one is libs/policy's native-kernels.spec.ts).
 * Without the addon these tests skip, unless SRPO_REQUIRE_NATIVE_KERNELS=1 (CI).
 */

describeNative(['SrpoTargetLogProbs', 'SrpoTargetLogProbsGrad'], 'target log-prob kernels', () => {
  beforeAll(nativeBackend);
  afterEach(() => configureSrpoKernels({ enabled: true }));

  it('are loaded where CI requires them', () => {
    expect(srpoKernelAvailable('SrpoTargetLogProbs')).toBe(true);
  });

  it('match a float64 log-softmax and its gradient over a 32k vocabulary, rows split over threads', async () => {
    const [n, v] = [24, 32000];
    const x = values(n * v, 1, 12);
    const t = Int32Array.from({ length: n }, (_, r) => (r * 7919) % v);
    const dy = values(n, 2, 3);
    const logits = tf.tensor2d(x, [n, v]);
    const targets = tf.tensor1d(t, 'int32');
    const out = targetLogProbsFused(logits, targets)!;
    const grad = targetLogProbsGrad(logits, targets, out.lse, tf.tensor1d(dy));
    const [logp, g] = await Promise.all([out.logp.data(), grad.data()]);
    let worstLogp = 0;
    let worstGrad = 0;
    for (let r = 0; r < n; r++) {
      let m = -Infinity;
      for (let j = 0; j < v; j++) m = Math.max(m, x[r * v + j]);
      let sum = 0;
      for (let j = 0; j < v; j++) sum += Math.exp(x[r * v + j] - m);
      const lse = m + Math.log(sum);
      worstLogp = Math.max(worstLogp, Math.abs(logp[r] - (x[r * v + t[r]] - lse)));
      for (let j = 0; j < v; j++) {
        const want = dy[r] * ((j === t[r] ? 1 : 0) - Math.exp(x[r * v + j] - lse));
        worstGrad = Math.max(worstGrad, Math.abs(g[r * v + j] - want));
      }
    }
    // log-probs near −20 in float32: a few ulps of 20 (2e-6 each) from the subtraction.
    expect(worstLogp).toBeLessThan(1e-5);
    expect(worstGrad).toBeLessThan(1e-6);
  });

  it('give −inf logits no mass, NaN for a row of NaN, +inf or only −inf, and refuse targets out of range', async () => {
    const rows = [
      [0, -Infinity, 1, 2],
      [NaN, 0, 1, 2],
      [Infinity, 0, 1, 2],
      [-Infinity, -Infinity, -Infinity, -Infinity],
    ];
    const logits = tf.tensor2d(rows);
    const targets = tf.tensor1d([2, 0, 1, 3], 'int32');
    const out = targetLogProbsFused(logits, targets)!;
    const logp = await out.logp.data();
    const want0 = 1 - Math.log(Math.exp(0) + Math.exp(1) + Math.exp(2));
    expect(logp[0]).toBeCloseTo(want0, 6);
    expect([1, 2, 3].map((i) => Number.isNaN(logp[i]))).toEqual([true, true, true]);
    const g = await targetLogProbsGrad(logits, targets, out.lse, tf.ones<tf.Rank.R1>([4])).data();
    expect(g[1]).toBe(0); // the −inf logit
    expect(Number.isNaN(g[4])).toBe(true);
    expect(() => targetLogProbsFused(logits, tf.tensor1d([0, 0, 4, 0], 'int32'))).toThrow(/SrpoTargetLogProbs.*targets\[2\] = 4 is outside \[0, 4\)/);
    expect(() => targetLogProbsFused(logits, tf.tensor1d([0, -1, 0, 0], 'int32'))).toThrow(/SrpoTargetLogProbs/);
  });
});
