import * as tf from '@tensorflow/tfjs';
import { configureSrpoKernels, rmsNormFused, rmsNormGrad, ropeFused, swiGluFused, swiGluGrad } from '@srpo/kernels';
import { describeNative, nativeBackend, seededValues as values } from '@srpo/kernels/testing';
import { rmsNorm, ropeAttention, swiGlu, type RopeTables } from './llama-ops';
import { ropeTables } from './rope';

/**
 * The Llama-family fused kernels (llama-kernels.h) against float64 evaluations of their
 * formulas written here, and llama-ops' fused paths against its composite ones. The whole
 * model's agreement with transformers and torch autograd, on both paths, is in
 * hf-reference.spec.ts and hf-gradients.spec.ts. Without the addon these tests are skipped
 * (describeNative decides as the file loads, so they are reported skipped, not passed), unless
 * SRPO_REQUIRE_NATIVE_KERNELS=1 (CI): then they run, and the first one says why they fail.
 */
const OPS = ['SrpoRmsNorm', 'SrpoSwiGlu', 'SrpoRope'];
const worst = (got: ArrayLike<number>, want: ArrayLike<number>, floor = 1): number => {
  let w = 0;
  for (let i = 0; i < want.length; i++) w = Math.max(w, Math.abs(got[i] - want[i]) / Math.max(floor, Math.abs(want[i])));
  return w;
};

describeNative(OPS, 'Llama-family fused kernels', () => {
  beforeAll(nativeBackend);
  afterEach(() => configureSrpoKernels({ enabled: true }));

  // 5300 rows of 200: above the kernels' inline limit (32,768 elements), so rows and
  // columns split over threads.
  const n = 5300;
  const d = 200;

  it('RMSNorm and its backward match float64, rows split over threads', async () => {
    const x = values(n * d, 1, 3);
    x.fill(0, 0, d); // a zero row: r = 1/√eps
    const w = values(d, 2, 2);
    const dy = values(n * d, 3);
    const eps = 1e-6;
    const y64 = new Float64Array(n * d);
    const dx64 = new Float64Array(n * d);
    const dw64 = new Float64Array(d);
    const r64 = new Float64Array(n);
    for (let r = 0; r < n; r++) {
      let sq = 0;
      for (let j = 0; j < d; j++) sq += x[r * d + j] ** 2;
      const rs = 1 / Math.sqrt(sq / d + eps);
      r64[r] = rs;
      let dot = 0;
      for (let j = 0; j < d; j++) dot += dy[r * d + j] * w[j] * x[r * d + j] * rs;
      for (let j = 0; j < d; j++) {
        const xh = x[r * d + j] * rs;
        y64[r * d + j] = w[j] * xh;
        dx64[r * d + j] = rs * (dy[r * d + j] * w[j] - (xh * dot) / d);
        dw64[j] += dy[r * d + j] * xh;
      }
    }
    const xt = tf.tensor2d(x, [n, d]);
    const wt = tf.tensor1d(w);
    const out = rmsNormFused(xt, wt, eps)!;
    const grad = rmsNormGrad(tf.tensor2d(dy, [n, d]), xt, wt, out.rstd);
    expect(out.rstd.shape).toEqual([n, 1]);
    expect(worst(await out.rstd.data(), r64)).toBeLessThan(1e-6);
    expect(worst(await out.y.data(), y64)).toBeLessThan(2e-6);
    expect(worst(await grad.dx.data(), dx64, 10)).toBeLessThan(2e-6);
    // dw sums 5300 rows in float32, one running sum per column: its error grows with the row
    // count (1.2e-5 measured; a few ulps of the column's magnitude per hundred adds).
    expect(worst(await grad.dw.data(), dw64, 10)).toBeLessThan(5e-5);
    expect(Array.from((await out.y.data()).slice(0, d), Math.abs)).toEqual(new Array(d).fill(0)); // ±0: w's sign
  });

  it('SwiGLU and its backward match float64 over the whole range; saturate, no overflow, NaN kept', async () => {
    const grid = Array.from({ length: 40001 }, (_, i) => -100 + i * 0.005);
    const g = Float32Array.from([...grid, 1e30, -1e30, 3e38, -3e38, 0]);
    const u = values(g.length, 4, 2);
    const dy = values(g.length, 5, 2);
    const gt = tf.tensor1d(g).reshape<tf.Tensor2D>([1, g.length]);
    const ut = tf.tensor1d(u).reshape<tf.Tensor2D>([1, g.length]);
    const [y, gr] = [swiGluFused(gt, ut)!, swiGluGrad(gt, ut, tf.tensor2d(dy, [1, g.length]))];
    const [yv, dg, du] = await Promise.all([y.data(), gr.dg.data(), gr.du.data()]);
    let wy = 0;
    let wg = 0;
    let wu = 0;
    for (let i = 0; i < grid.length; i++) {
      const s = 1 / (1 + Math.exp(-g[i]));
      const silu = g[i] * s;
      wy = Math.max(wy, Math.abs(yv[i] - silu * u[i]) / Math.max(1, Math.abs(silu * u[i])));
      wu = Math.max(wu, Math.abs(du[i] - dy[i] * silu) / Math.max(1, Math.abs(dy[i] * silu)));
      wg = Math.max(wg, Math.abs(dg[i] - dy[i] * u[i] * s * (1 + g[i] * (1 - s))));
    }
    expect(wy).toBeLessThan(1e-6);
    expect(wu).toBeLessThan(1e-6);
    expect(wg).toBeLessThan(4e-6);
    const tail = grid.length;
    const zero = (v: number): number => (v === 0 ? 0 : v); // the sign of a zero is not part of the contract
    // Large g: y = g·u and dg = dy·u (σ = 1, within float32 rounding), finite; very negative g: 0.
    const bigY = [Math.fround(1e30) * u[tail], 0, Math.fround(3e38) * u[tail + 2], 0, 0];
    const bigG = [dy[tail] * u[tail], 0, dy[tail + 2] * u[tail + 2], 0];
    expect(
      worst(
        [0, 1, 2, 3, 4].map((i) => zero(yv[tail + i])),
        bigY,
      ),
    ).toBeLessThan(1e-6);
    expect(
      worst(
        [0, 1, 2, 3].map((i) => zero(dg[tail + i])),
        bigG,
      ),
    ).toBeLessThan(1e-6);
    expect([1, 3, 4].map((i) => zero(yv[tail + i]))).toEqual([0, 0, 0]);
    const nan = tf.tensor2d([NaN, 1], [1, 2]);
    const one = tf.ones<tf.Rank.R2>([1, 2]);
    expect(Number.isNaN((await swiGluFused(nan, one)!.data())[0])).toBe(true);
    expect(Number.isNaN((await swiGluGrad(nan, one, one).dg.data())[0])).toBe(true);
  });

  it('RoPE matches float64 on projection rows, and its inverse undoes it', async () => {
    const [b, t, h, hd] = [16, 33, 31, 64]; // 528 rows of 1984, over the 32,768-element inline limit: split over threads
    const { cos, sin } = ropeTables({ headDim: hd, ropeTheta: 500000, ropeScaling: { type: 'none' } }, t);
    const x = values(b * t * h * hd, 6, 2);
    const scale = 0.125;
    const want = new Float64Array(x.length);
    const c = h * hd;
    for (let row = 0; row < b * t; row++) {
      const p = row % t;
      for (let head = 0; head < h; head++) {
        for (let j = 0; j < hd; j++) {
          const i = row * c + head * hd + j;
          const rot = j < hd / 2 ? -x[i + hd / 2] : x[i - hd / 2];
          want[i] = (x[i] * cos[p * hd + j] + rot * sin[p * hd + j]) * scale;
        }
      }
    }
    const xt = tf.tensor2d(x, [b * t, c]);
    const ct = tf.tensor2d(cos, [t, hd]);
    const st = tf.tensor2d(sin, [t, hd]);
    const y = ropeFused(xt, ct, st, scale, false)!;
    expect(worst(await y.data(), want)).toBeLessThan(1e-6);
    const back = ropeFused(y, ct, st, 1 / scale, true)!;
    expect(worst(await back.data(), x)).toBeLessThan(2e-6);
  });

  it('refuses mismatched shapes, naming the op', () => {
    expect(() => rmsNormFused(tf.zeros<tf.Rank.R2>([4, 8]), tf.zeros<tf.Rank.R1>([7]), 1e-6)).toThrow(/SrpoRmsNorm/);
    expect(() => swiGluFused(tf.zeros<tf.Rank.R2>([4, 8]), tf.zeros<tf.Rank.R2>([4, 7]))).toThrow(/SrpoSwiGlu/);
    expect(() => ropeFused(tf.zeros<tf.Rank.R2>([6, 8]), tf.zeros<tf.Rank.R2>([4, 4]), tf.zeros<tf.Rank.R2>([4, 4]), 1, false)).toThrow(/SrpoRope/);
    expect(() => ropeFused(tf.zeros<tf.Rank.R2>([4, 9]), tf.zeros<tf.Rank.R2>([4, 3]), tf.zeros<tf.Rank.R2>([4, 3]), 1, false)).toThrow(/SrpoRope/);
  });
});

describeNative(OPS, 'llama-ops: fused and composite paths agree in value and gradient', () => {
  beforeAll(nativeBackend);
  afterEach(() => configureSrpoKernels({ enabled: true }));

  /** Value and gradients of Σ f(...inputs) ⊙ upstream, with the fused kernels on or off. */
  async function run(fused: boolean, f: (...xs: tf.Tensor[]) => tf.Tensor, inputs: tf.Tensor[], seed: number): Promise<Float32Array[]> {
    configureSrpoKernels({ enabled: fused });
    const y = f(...inputs);
    const upstream = tf.tensor(values(y.size, seed), y.shape);
    const grads = tf.grads((...xs: tf.Tensor[]) => tf.sum(tf.mul(f(...xs), upstream)))(inputs);
    return Promise.all([y, ...grads].map(async (t) => (await t.data()) as Float32Array));
  }

  async function agree(f: (...xs: tf.Tensor[]) => tf.Tensor, inputs: tf.Tensor[], tolerance: number): Promise<void> {
    const a = await run(true, f, inputs, 9);
    const b = await run(false, f, inputs, 9);
    expect(a).toHaveLength(inputs.length + 1);
    a.forEach((v, i) => expect({ output: i, diff: worst(v, b[i]) < tolerance }).toEqual({ output: i, diff: true }));
  }

  it('rmsNorm', () =>
    agree((x, w) => rmsNorm(x as tf.Tensor2D, w as tf.Tensor1D, 1e-5), [tf.tensor2d(values(64 * 48, 10, 2), [64, 48]), tf.tensor1d(values(48, 11))], 1e-5));

  it('swiGlu', () =>
    agree(
      (g, u) => swiGlu(g as tf.Tensor2D, u as tf.Tensor2D),
      [tf.tensor2d(values(64 * 48, 12, 6), [64, 48]), tf.tensor2d(values(64 * 48, 13, 2), [64, 48])],
      1e-5,
    ));

  it('ropeAttention (grouped-query, causal)', async () => {
    const [b, t, heads, kvHeads, headDim] = [2, 7, 4, 2, 8];
    const { cos, sin } = ropeTables({ headDim, ropeTheta: 10000, ropeScaling: { type: 'none' } }, t);
    const rope: RopeTables = {
      cos: tf.tensor2d(cos, [t, headDim]),
      sin: tf.tensor2d(sin, [t, headDim]),
      negSin: tf.neg<tf.Tensor2D>(tf.tensor2d(sin, [t, headDim])),
    };
    const r = heads / kvHeads;
    const m = new Float32Array(r * t * t);
    for (let g = 0; g < r; g++) for (let i = 0; i < t; i++) for (let j = i + 1; j < t; j++) m[(g * t + i) * t + j] = -1e9;
    const mask = tf.tensor2d(m, [r * t, t]);
    const shape = { b, t, heads, kvHeads, headDim };
    const n = b * t;
    await agree(
      (q, k, v) => ropeAttention(q as tf.Tensor2D, k as tf.Tensor2D, v as tf.Tensor2D, shape, rope, mask),
      [
        tf.tensor2d(values(n * heads * headDim, 14, 2), [n, heads * headDim]),
        tf.tensor2d(values(n * kvHeads * headDim, 15, 2), [n, kvHeads * headDim]),
        tf.tensor2d(values(n * kvHeads * headDim, 16), [n, kvHeads * headDim]),
      ],
      2e-5,
    );
  });
});
