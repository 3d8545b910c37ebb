import * as tf from '@tensorflow/tfjs';
import { normFold, normFoldGrad } from './fused-ops';
import { srpoKernelAvailable } from './srpo-kernels';
import { describeNative } from './test/describe-native';
import { nativeBackend, seededValues } from './test/fixtures';

/**
 * `SrpoNormFold` and `SrpoNormFoldGrad` (norm-fold-kernels.h) against a float64 evaluation of
 * normLinear's folding written out here: with and without bias and column scale, odd widths.
 * Skips where the addon is not built, unless SRPO_REQUIRE_NATIVE_KERNELS=1 (CI).
 */
function fold64(w: Float32Array, g: Float32Array, beta: Float32Array, b: Float32Array | undefined, s: Float32Array | undefined, d: number, o: number) {
  const wc = new Float64Array(d * o);
  const c = new Float64Array(o);
  for (let k = 0; k < o; k++) {
    let mean = 0;
    for (let i = 0; i < d; i++) mean += (w[i * o + k] * g[i]) / d;
    let ck = b ? b[k] : 0;
    for (let i = 0; i < d; i++) ck += beta[i] * w[i * o + k];
    const sk = s ? s[k] : 1;
    c[k] = ck * sk;
    for (let i = 0; i < d; i++) wc[i * o + k] = (w[i * o + k] * g[i] - mean) * sk;
  }
  return { wc, c };
}

function foldGrad64(
  dwc: Float32Array,
  dc: Float32Array,
  w: Float32Array,
  g: Float32Array,
  beta: Float32Array,
  s: Float32Array | undefined,
  d: number,
  o: number,
) {
  const h = Array.from(dc, (v, k) => v * (s ? s[k] : 1));
  const gp = new Float64Array(d * o);
  for (let k = 0; k < o; k++) {
    let mean = 0;
    for (let i = 0; i < d; i++) mean += (dwc[i * o + k] * (s ? s[k] : 1)) / d;
    for (let i = 0; i < d; i++) gp[i * o + k] = dwc[i * o + k] * (s ? s[k] : 1) - mean;
  }
  const dg = new Float64Array(d);
  const dbeta = new Float64Array(d);
  const dw = new Float64Array(d * o);
  for (let i = 0; i < d; i++) {
    for (let k = 0; k < o; k++) {
      dg[i] += gp[i * o + k] * w[i * o + k];
      dbeta[i] += w[i * o + k] * h[k];
      dw[i * o + k] = gp[i * o + k] * g[i] + beta[i] * h[k];
    }
  }
  return { dg, dbeta, dw, db: Float64Array.from(h) };
}

function worst(got: Float32Array, want: Float64Array): number {
  expect(got.length).toBe(want.length);
  let m = 0;
  for (let i = 0; i < got.length; i++) m = Math.max(m, Math.abs(got[i] - want[i]) / Math.max(1, Math.abs(want[i])));
  return m;
}

describeNative(['SrpoNormFold', 'SrpoNormFoldGrad'], 'SrpoNormFold (normLinear weight folding)', () => {
  beforeAll(nativeBackend);

  it('is registered with the addon (required in CI)', () => {
    expect(srpoKernelAvailable('SrpoNormFold')).toBe(true);
  });

  for (const [d, o, withBias, withScale] of [
    [128, 384, true, true],
    [33, 17, false, false],
    [7, 9, true, false],
    [5, 3, false, true],
  ] as const) {
    it(`folds and unfolds as the float64 formulas do (D ${d}, O ${o}, bias ${withBias}, scale ${withScale})`, async () => {
      const [w, g, beta] = [seededValues(d * o, 1 + d, 0.5), seededValues(d, 2 + d, 1.5), seededValues(d, 3 + d, 0.3)];
      const b = withBias ? seededValues(o, 4 + o, 0.2) : undefined;
      const s = withScale ? seededValues(o, 5 + o, 2) : undefined;
      const t1 = (v: Float32Array) => tf.tensor1d(v);
      const out = normFold(tf.tensor2d(w, [d, o]), t1(g), t1(beta), b && t1(b), s && t1(s));
      expect(out).toBeDefined();
      const { wc, c, wcT } = out as { wc: tf.Tensor2D; c: tf.Tensor2D; wcT: tf.Tensor2D };
      expect([wc.shape, c.shape, wcT.shape]).toEqual([
        [d, o],
        [1, o],
        [o, d],
      ]);
      const ref = fold64(w, g, beta, b, s, d, o);
      const wcv = await wc.data<'float32'>();
      expect(worst(wcv, ref.wc)).toBeLessThan(2e-6);
      // The transpose holds the same values.
      const wctv = await wcT.data<'float32'>();
      let moved = 0;
      for (let i = 0; i < d; i++) for (let k = 0; k < o; k++) if (wctv[k * d + i] !== wcv[i * o + k]) moved++;
      expect(moved).toBe(0);
      expect(worst(await c.data<'float32'>(), ref.c)).toBeLessThan(2e-6);

      const [dwc, dc] = [seededValues(d * o, 6 + d, 3), seededValues(o, 7 + o, 3)];
      const gr = normFoldGrad(tf.tensor2d(dwc, [d, o]), t1(dc), tf.tensor2d(w, [d, o]), t1(g), t1(beta), s && t1(s));
      const want = foldGrad64(dwc, dc, w, g, beta, s, d, o);
      expect([gr.dGain.shape, gr.dShift.shape, gr.dW.shape, gr.dBias.shape]).toEqual([[d], [d], [d, o], [o]]);
      expect(worst(await gr.dGain.data<'float32'>(), want.dg)).toBeLessThan(1e-5);
      expect(worst(await gr.dShift.data<'float32'>(), want.dbeta)).toBeLessThan(1e-5);
      expect(worst(await gr.dW.data<'float32'>(), want.dw)).toBeLessThan(2e-6);
      expect(worst(await gr.dBias.data<'float32'>(), want.db)).toBeLessThan(1e-7);
    });
  }

  it('refuses mismatched shapes, naming the op', () => {
    const w = tf.zeros<tf.Rank.R2>([4, 3]);
    const v4 = tf.zeros<tf.Rank.R1>([4]);
    expect(() => normFold(w, tf.zeros<tf.Rank.R1>([3]), v4, undefined, undefined)).toThrow(/SrpoNormFold: w must be \[D, O\] and gain and shift \[D\]/);
    expect(() => normFold(w, v4, v4, tf.zeros<tf.Rank.R1>([4]), undefined)).toThrow(/SrpoNormFold: bias and scale must be \[O\]/);
    expect(() => normFoldGrad(tf.zeros<tf.Rank.R2>([4, 2]), tf.zeros<tf.Rank.R1>([3]), w, v4, v4, undefined)).toThrow(
      /SrpoNormFoldGrad: dwc must be \[D, O\] and dc \[O\]/,
    );
  });
});
