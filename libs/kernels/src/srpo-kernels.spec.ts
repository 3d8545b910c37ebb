import * as tf from '@tensorflow/tfjs';
import { backendLabel, configureNativeKernels } from './native-ops';
import { geluFused, geluGrad, layerNormGrad, layerNormStats, maskedSoftmax, softmaxGrad } from './fused-ops';
import { configureSrpoKernels, loadSrpoKernels, srpoMatMulRouted } from './srpo-kernels';
import { describeNative } from './test/describe-native';
import { nativeBackend } from './test/fixtures';

/**
 * The fused kernels against float64 evaluations of their formulas (written here, not taken
 * from the code under test); the layers' fused paths against their composite ones are
 * libs/policy's native-kernels.spec.ts.
 *
 * `npm run setup` builds the addon; without it these tests skip, unless
 * SRPO_REQUIRE_NATIVE_KERNELS=1 (CI), where its absence fails them.
 */
/** tanh-form GELU and its derivative in float64: ½x(1 + tanh u), u = √(2/π)(x + 0.044715x³). */
function gelu64(x: number): { y: number; dydx: number } {
  const c = Math.sqrt(2 / Math.PI);
  const a = 0.044715;
  const t = Math.tanh(c * (x + a * x ** 3));
  return { y: 0.5 * x * (1 + t), dydx: 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * a * x * x) };
}

/** Rows of a float32 tensor as float64 arrays. */
async function rows(t: tf.Tensor): Promise<number[][]> {
  const k = t.shape[t.rank - 1];
  const v = Array.from(await t.data());
  return Array.from({ length: v.length / k }, (_, r) => v.slice(r * k, (r + 1) * k));
}

const maxAbs = (a: number[][], b: number[][]): number => Math.max(...a.flatMap((r, i) => r.map((v, j) => Math.abs(v - b[i][j]))));

describe('srpo-kernels (the addon)', () => {
  beforeAll(nativeBackend);

  it('loads on this machine, or says why (required in CI)', () => {
    const s = loadSrpoKernels();
    if (process.env.SRPO_REQUIRE_NATIVE_KERNELS === '1') expect(s).toMatchObject({ loaded: true });
    if (s.loaded) {
      expect(s.ops).toEqual(expect.arrayContaining(['SrpoGelu', 'SrpoGeluGrad', 'SrpoLayerNorm', 'SrpoLayerNormGrad', 'SrpoMaskedSoftmax', 'SrpoSoftmaxGrad']));
      expect(s.version).toBeGreaterThanOrEqual(1);
      // `+srpo-matmul` where the products run SrpoMatMul (gemm-kernel.spec.ts checks when they do).
      expect(backendLabel({ name: 'tensorflow' })).toBe(`tensorflow+srpo-kernels.${s.version}${srpoMatMulRouted() ? '+srpo-matmul' : ''}`);
    } else {
      expect(s.reason).toEqual(expect.any(String));
      expect(backendLabel({ name: 'tensorflow' })).toBe('tensorflow');
    }
    expect(backendLabel({ name: 'webgpu' })).toBe('webgpu');
  });
});

describeNative(
  ['SrpoGelu', 'SrpoGeluGrad', 'SrpoLayerNorm', 'SrpoLayerNormGrad', 'SrpoMaskedSoftmax', 'SrpoSoftmaxGrad'],
  'srpo-kernels (fused TensorFlow kernels)',
  () => {
    beforeAll(nativeBackend);

    it('GELU and its derivative match float64 within float32 rounding, over the whole range', async () => {
      const grid = Array.from({ length: 4801 }, (_, i) => -12 + i * 0.005);
      const x = tf.tensor2d([...grid, 0, -0, 1e-30, -1e-30], [1, grid.length + 4]);
      const yt = geluFused(x);
      expect(yt).toBeDefined();
      const [y, d] = await Promise.all([yt!.data(), geluGrad(x, tf.onesLike(x)).data()]);
      const xs = await x.data();
      let worstY = 0;
      let worstD = 0;
      xs.forEach((v, i) => {
        const r = gelu64(v);
        worstY = Math.max(worstY, Math.abs(y[i] - r.y) / Math.max(1, Math.abs(r.y)));
        worstD = Math.max(worstD, Math.abs(d[i] - r.dydx));
      });
      // float32 has 6e-8 relative precision; exp and the division each add a few ulps.
      expect(worstY).toBeLessThan(1e-6);
      expect(worstD).toBeLessThan(2e-6);
      expect(yt!.shape).toEqual(x.shape);
      // The backward scales by dy.
      const dy = tf.fill(x.shape, -2.5);
      const scaled = await geluGrad(x, dy).data();
      scaled.forEach((v, i) => expect(v).toBeCloseTo(-2.5 * d[i], 5));
    });

    it('saturates instead of overflowing for large |x|, and keeps NaN', async () => {
      const x = tf.tensor1d([20, -20, 1e13, -1e13, 3e38, -3e38, NaN]);
      // The sign of a zero is not part of the contract (-ffast-math may drop it): compare ±0 as 0.
      const y = Array.from(await geluFused(x)!.data(), (v) => (v === 0 ? 0 : v));
      const d = Array.from(await geluGrad(x, tf.onesLike(x)).data(), (v) => (v === 0 ? 0 : v));
      expect(y.slice(0, 6)).toEqual([20, 0, 1e13, 0, 3e38, 0].map(Math.fround));
      expect(d.slice(0, 6)).toEqual([1, 0, 1, 0, 1, 0]);
      expect(y[6]).toBeNaN();
      expect(d[6]).toBeNaN();
    });

    it('can be switched off, with the fused kernels or the native paths, and the label says so', () => {
      const x = tf.randomNormal<tf.Rank.R2>([64, 48], 0, 3, 'float32', 5);
      try {
        configureSrpoKernels({ enabled: false });
        expect(geluFused(x)).toBeUndefined();
        expect(backendLabel({ name: 'tensorflow' })).toBe('tensorflow');
      } finally {
        configureSrpoKernels({ enabled: true });
      }
      // With the native paths off, nothing fused runs either, and the label says so.
      try {
        configureNativeKernels({ enabled: false });
        expect(geluFused(x)).toBeUndefined();
        expect(backendLabel({ name: 'tensorflow' })).toBe('tensorflow');
      } finally {
        configureNativeKernels({ enabled: true });
      }
      expect(backendLabel({ name: 'tensorflow' })).toBe(`tensorflow+srpo-kernels.${loadSrpoKernels().version}${srpoMatMulRouted() ? '+srpo-matmul' : ''}`);
    });

    it('refuses a non-float input with TensorFlow error naming the op', () => {
      const be = tf.backend() as unknown as { executeMultipleOutputs(n: string, a: unknown[], i: tf.Tensor[], k: number): tf.Tensor[] };
      expect(() => be.executeMultipleOutputs('SrpoGelu', [], [tf.tensor1d([1, 2], 'int32')], 1)).toThrow(/SrpoGelu|float/);
      expect(() => geluGrad(tf.ones([3]), tf.ones([4]))).toThrow(/SrpoGeluGrad: x and dy must have the same shape/);
    });

    it('layer-norm statistics match float64, a constant row included', async () => {
      const eps = 1e-5;
      const x = tf.concat<tf.Tensor2D>([tf.randomNormal([36, 50], 3, 2, 'float32', 7), tf.fill([1, 50], 4.25)]);
      const out = layerNormStats(x, eps)!;
      expect(out.xhat.shape).toEqual([37, 50]);
      expect(out.rstd.shape).toEqual([37, 1]);
      const xs = await rows(x);
      const ref = xs.map((r) => {
        const mean = r.reduce((a, b) => a + b, 0) / r.length;
        const rstd = 1 / Math.sqrt(r.reduce((a, b) => a + (b - mean) ** 2, 0) / r.length + eps);
        return { xhat: r.map((v) => (v - mean) * rstd), rstd };
      });
      expect(
        maxAbs(
          await rows(out.xhat),
          ref.map((r) => r.xhat),
        ),
      ).toBeLessThan(2e-5);
      const rs = Array.from(await out.rstd.data());
      rs.forEach((v, i) => expect(Math.abs(v - ref[i].rstd) / ref[i].rstd).toBeLessThan(1e-5));
      expect(rs[36]).toBeCloseTo(1 / Math.sqrt(eps), 0); // constant row: σ² = 0
    });

    it('refuses a layer norm with eps <= 0 or a non-matrix input, naming the op', () => {
      expect(() => layerNormStats(tf.ones<tf.Rank.R2>([2, 3]), 0)).toThrow(/eps must be a finite number > 0/);
      expect(() => layerNormStats(tf.ones([2, 3, 4]) as unknown as tf.Tensor2D, 1e-5)).toThrow(/SrpoLayerNorm: x must be \[N, D\]/);
      expect(() => layerNormGrad(tf.ones<tf.Rank.R2>([2, 3]), tf.ones<tf.Rank.R2>([2, 3]), tf.ones<tf.Rank.R2>([3, 1]))).toThrow(/SrpoLayerNormGrad/);
    });

    it('the layer-norm backward matches float64', async () => {
      const xhat = tf.randomNormal<tf.Rank.R2>([20, 40], 0, 1, 'float32', 8);
      const raw = tf.randomNormal([20, 40], 0, 1, 'float32', 9);
      const dxhat = tf.sub<tf.Tensor2D>(raw, tf.mean(raw, 1, true)); // row-centred, as normLinear makes it
      const rstd = tf.randomUniform<tf.Rank.R2>([20, 1], 0.5, 2, 'float32', 10);
      const got = await rows(layerNormGrad(dxhat, xhat, rstd)!);
      const [g, h, r] = await Promise.all([rows(dxhat), rows(xhat), rows(rstd)]);
      const ref = g.map((gr, i) => {
        const p = gr.reduce((a, v, j) => a + v * h[i][j], 0) / gr.length;
        return gr.map((v, j) => (v - h[i][j] * p) * r[i][0]);
      });
      expect(maxAbs(got, ref)).toBeLessThan(1e-5);
    });

    it('the masked softmax and its backward match float64; masked entries are exactly 0', async () => {
      const t = 6;
      const maskRows = Array.from({ length: t }, (_, i) => Array.from({ length: t }, (_, j) => (j <= i ? 0 : -1e9)));
      const mask = tf.tensor2d(maskRows);
      const scores = tf.randomNormal([2, 3, t, t], 0, 4, 'float32', 11);
      const p = maskedSoftmax(scores, mask)!;
      expect(p.shape).toEqual([2, 3, t, t]);
      const s = await rows(scores);
      const ref = s.map((r, i) => {
        const v = r.map((x, j) => x + maskRows[i % t][j]);
        const m = Math.max(...v);
        const e = v.map((x) => Math.exp(x - m));
        const z = e.reduce((a, b) => a + b, 0);
        return e.map((x) => x / z);
      });
      const got = await rows(p);
      expect(maxAbs(got, ref)).toBeLessThan(1e-6);
      got.forEach((r, i) => r.forEach((v, j) => (j > i % t ? expect(v).toBe(0) : undefined)));
      const dp = tf.randomNormal([2, 3, t, t], 0, 1, 'float32', 12);
      const d = await rows(dp);
      const refGrad = ref.map((pr, i) => {
        const dot = pr.reduce((a, v, j) => a + v * d[i][j], 0);
        return pr.map((v, j) => v * (d[i][j] - dot));
      });
      expect(maxAbs(await rows(softmaxGrad(p, dp)!), refGrad)).toBeLessThan(1e-6);
      expect(() => maskedSoftmax(scores, tf.zeros<tf.Rank.R2>([t, t + 1]))).toThrow(/SrpoMaskedSoftmax: scores must be/);
      expect(() => softmaxGrad(p, tf.zeros([2, 3, t, t + 1]))).toThrow(/SrpoSoftmaxGrad/);
    });

    it('inputs large enough to be split across threads give the per-element results (chunk edges included)', async () => {
      // 77,001 elements: above the kernels' inline limit, and not a multiple of a cache line.
      const x = tf.randomNormal([77001], 0, 3, 'float32', 21);
      const xs = Array.from(await x.data());
      const y = Array.from(await geluFused(x)!.data());
      const d = Array.from(await geluGrad(x, tf.onesLike(x)).data());
      xs.forEach((v, i) => {
        const r = gelu64(v);
        if (!(Math.abs(y[i] - r.y) <= 1e-6 * Math.max(1, Math.abs(r.y)) && Math.abs(d[i] - r.dydx) <= 2e-6))
          throw new Error(`element ${i}: x=${v} y=${y[i]} (${r.y}) dydx=${d[i]} (${r.dydx})`);
      });
      const h = tf.randomNormal<tf.Rank.R2>([1031, 64], 1, 2, 'float32', 22);
      const stats = layerNormStats(h, 1e-5)!;
      const [hr, xr] = await Promise.all([rows(h), rows(stats.xhat)]);
      const ref = hr.map((r) => {
        const mean = r.reduce((a, b) => a + b, 0) / r.length;
        const rstd = 1 / Math.sqrt(r.reduce((a, b) => a + (b - mean) ** 2, 0) / r.length + 1e-5);
        return r.map((v) => (v - mean) * rstd);
      });
      expect(maxAbs(xr, ref)).toBeLessThan(2e-5);
      const scores = tf.randomNormal([5, 3, 64, 64], 0, 2, 'float32', 23);
      const p = await rows(maskedSoftmax(scores, tf.zeros<tf.Rank.R2>([64, 64]))!);
      const sr = await rows(scores);
      const refP = sr.map((r) => {
        const m = Math.max(...r);
        const e = r.map((v) => Math.exp(v - m));
        const z = e.reduce((a, b) => a + b, 0);
        return e.map((v) => v / z);
      });
      expect(maxAbs(p, refP)).toBeLessThan(1e-6);
    });
  },
);
