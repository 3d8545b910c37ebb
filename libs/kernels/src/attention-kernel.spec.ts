import * as tf from '@tensorflow/tfjs';
import { attentionFused, attentionGrad, attentionGradPacked, type AttentionLayout } from './fused-ops';
import { srpoKernelAvailable } from './srpo-kernels';
import { describeNative } from './test/describe-native';
import { nativeBackend, seededValues } from './test/fixtures';

/**
 * `SrpoAttention` and its backward (attention-kernels.h) against a float64 evaluation of the
 * formulas written out here, not against the code under test: causal softmax attention per batch
 * row and head, grouped-query heads, heads at column offsets, and the edge cases.
 * Skipped, and reported so, where the addon is not built; SRPO_REQUIRE_NATIVE_KERNELS=1 (CI) fails
 * them instead (test/describe-native.ts).
 */
interface Reference {
  o: Float64Array;
  p: Float64Array;
  dq: Float64Array;
  dk: Float64Array;
  dv: Float64Array;
}

/** Float64 causal attention and its gradients, q/k/v as `[B·T, stride]` with heads at column offsets. */
function reference(q: Float32Array, k: Float32Array, v: Float32Array, g: Float32Array, l: AttentionLayout, strides: [number, number, number]): Reference {
  const { batch: bn, heads: hn, kvHeads: kn, headDim: d } = l;
  const t = q.length / strides[0] / bn;
  const r = hn / kn;
  const at = (x: Float32Array, stride: number, col: number, b: number, i: number, h: number, e: number) => x[(b * t + i) * stride + col + h * d + e];
  const out: Reference = {
    o: new Float64Array(bn * t * hn * d),
    p: new Float64Array(bn * hn * t * t),
    dq: new Float64Array(q.length),
    dk: new Float64Array(k.length),
    dv: new Float64Array(v.length),
  };
  for (let b = 0; b < bn; b++) {
    for (let h = 0; h < hn; h++) {
      const kv = Math.floor(h / r);
      for (let i = 0; i < t; i++) {
        const s: number[] = [];
        for (let j = 0; j <= i; j++) {
          let dot = 0;
          for (let e = 0; e < d; e++) dot += at(q, strides[0], l.qCol, b, i, h, e) * at(k, strides[1], l.kCol, b, j, kv, e);
          s.push(dot);
        }
        const mx = Math.max(...s);
        const ex = s.map((x) => Math.exp(x - mx));
        const sum = ex.reduce((a, x) => a + x, 0);
        const p = ex.map((x) => x / sum);
        p.forEach((pj, j) => (out.p[((b * hn + h) * t + i) * t + j] = pj));
        for (let e = 0; e < d; e++) {
          let o = 0;
          for (let j = 0; j <= i; j++) o += p[j] * at(v, strides[2], l.vCol, b, j, kv, e);
          out.o[(b * t + i) * hn * d + h * d + e] = o;
        }
        // Backward of sum(o ∘ g).
        const gi = (e: number) => g[(b * t + i) * hn * d + h * d + e];
        const dp = p.map((_, j) => {
          let dot = 0;
          for (let e = 0; e < d; e++) dot += gi(e) * at(v, strides[2], l.vCol, b, j, kv, e);
          return dot;
        });
        const delta = p.reduce((a, pj, j) => a + pj * dp[j], 0);
        const ds = p.map((pj, j) => pj * (dp[j] - delta));
        for (let j = 0; j <= i; j++) {
          for (let e = 0; e < d; e++) {
            out.dq[(b * t + i) * strides[0] + l.qCol + h * d + e] += ds[j] * at(k, strides[1], l.kCol, b, j, kv, e);
            out.dk[(b * t + j) * strides[1] + l.kCol + kv * d + e] += ds[j] * at(q, strides[0], l.qCol, b, i, h, e);
            out.dv[(b * t + j) * strides[2] + l.vCol + kv * d + e] += p[j] * gi(e);
          }
        }
      }
    }
  }
  return out;
}

function expectClose(got: Float32Array, want: Float64Array, tol: number): void {
  expect(got.length).toBe(want.length);
  let worst = 0;
  for (let i = 0; i < got.length; i++) worst = Math.max(worst, Math.abs(got[i] - want[i]) / Math.max(1, Math.abs(want[i])));
  expect(worst).toBeLessThan(tol);
}

async function f32(t: tf.Tensor): Promise<Float32Array> {
  return (await t.data<'float32'>()).slice();
}

describeNative(['SrpoAttention', 'SrpoAttentionGrad', 'SrpoAttentionGradPacked'], 'SrpoAttention (causal attention kernel)', () => {
  beforeAll(nativeBackend);

  it('is registered with the addon (required in CI)', () => {
    expect(srpoKernelAvailable('SrpoAttention')).toBe(true);
  });

  it('computes packed multi-head attention and its gradient as the float64 formulas do (odd T, heads in qkv columns)', async () => {
    const [b, t, h, d] = [3, 7, 3, 5];
    const cols = 3 * h * d;
    const x = seededValues(b * t * cols, 41, 1.5);
    const g = seededValues(b * t * h * d, 42, 1);
    const l: AttentionLayout = { batch: b, heads: h, kvHeads: h, headDim: d, qCol: 0, kCol: h * d, vCol: 2 * h * d };
    const ref = reference(x, x, x, g, l, [cols, cols, cols]);
    const qkv = tf.tensor2d(x, [b * t, cols]);
    const out = attentionFused(qkv, qkv, qkv, l);
    expect(out).toBeDefined();
    const { o, p } = out as { o: tf.Tensor2D; p: tf.Tensor4D };
    expect(o.shape).toEqual([b * t, h * d]);
    expect(p.shape).toEqual([b, h, t, t]);
    expectClose(await f32(o), ref.o, 2e-6);
    const pv = await f32(p);
    expectClose(pv, ref.p, 2e-6);
    // Above the diagonal p is exactly 0.
    for (let row = 0; row < b * h * t; row++) for (let j = (row % t) + 1; j < t; j++) expect(pv[row * t + j]).toBe(0);
    const dx = attentionGradPacked(tf.tensor2d(g, [b * t, h * d]), qkv, p, l);
    expect(dx.shape).toEqual([b * t, cols]);
    const want = new Float64Array(x.length);
    for (let i = 0; i < want.length; i++) want[i] = ref.dq[i] + ref.dk[i] + ref.dv[i];
    expectClose(await f32(dx), want, 5e-6);
  });

  it('reads grouped-query heads at column offsets, and gives 0 to columns outside the heads', async () => {
    const [b, t, h, kvh, d] = [2, 9, 4, 2, 8];
    const [qs, ks, vs] = [h * d + 3, kvh * d + 1, kvh * d + 2];
    const l: AttentionLayout = { batch: b, heads: h, kvHeads: kvh, headDim: d, qCol: 3, kCol: 0, vCol: 2 };
    const [qv, kv, vv] = [seededValues(b * t * qs, 1, 2), seededValues(b * t * ks, 2, 2), seededValues(b * t * vs, 3, 1)];
    const g = seededValues(b * t * h * d, 4, 1);
    const ref = reference(qv, kv, vv, g, l, [qs, ks, vs]);
    const [q, k, v] = [tf.tensor2d(qv, [b * t, qs]), tf.tensor2d(kv, [b * t, ks]), tf.tensor2d(vv, [b * t, vs])];
    const { o, p } = attentionFused(q, k, v, l) as { o: tf.Tensor2D; p: tf.Tensor4D };
    expectClose(await f32(o), ref.o, 2e-6);
    const [dq, dk, dv] = attentionGrad(tf.tensor2d(g, [b * t, h * d]), q, k, v, p, l);
    expect([dq.shape, dk.shape, dv.shape]).toEqual([q.shape, k.shape, v.shape]);
    const dqv = await f32(dq);
    expectClose(dqv, ref.dq, 5e-6);
    expectClose(await f32(dk), ref.dk, 5e-6);
    expectClose(await f32(dv), ref.dv, 5e-6);
    // q's first 3 columns are no head's: exactly 0.
    for (let row = 0; row < b * t; row++) for (let c = 0; c < 3; c++) expect(dqv[row * qs + c]).toBe(0);
  });

  it('gives p = 1 and o = v for T = 1, exact zeros for underflowing scores, NaN in the row of a NaN, and the same bits twice', async () => {
    const l1: AttentionLayout = { batch: 2, heads: 1, kvHeads: 1, headDim: 3, qCol: 0, kCol: 3, vCol: 6 };
    const x1 = tf.tensor2d([1, 2, 3, 4, 5, 6, 7, 8, 9, -1, -2, -3, -4, -5, -6, -7, -8, -9], [2, 9]);
    const one = attentionFused(x1, x1, x1, l1) as { o: tf.Tensor2D; p: tf.Tensor4D };
    expect(Array.from(await f32(one.p))).toEqual([1, 1]);
    expect(Array.from(await f32(one.o))).toEqual([7, 8, 9, -7, -8, -9]);
    // Row 1's second key scores 1e4 higher: p = [0, 1] exactly (exp underflows), o = v_1.
    const l2: AttentionLayout = { batch: 1, heads: 1, kvHeads: 1, headDim: 1, qCol: 0, kCol: 1, vCol: 2 };
    const x2 = tf.tensor2d([100, 0, 5, 100, 100, 7, NaN, 1, 2], [3, 3]);
    const two = attentionFused(x2, x2, x2, l2) as { o: tf.Tensor2D; p: tf.Tensor4D };
    const p2 = await f32(two.p);
    expect(Array.from(p2.slice(0, 6))).toEqual([1, 0, 0, 0, 1, 0]);
    expect(p2.slice(6).every(Number.isNaN)).toBe(true);
    const o2 = await f32(two.o);
    expect(Array.from(o2.slice(0, 2))).toEqual([5, 7]);
    expect(Number.isNaN(o2[2])).toBe(true);
    // Deterministic: a second run gives the same bits.
    const [b, t, h, d] = [4, 33, 2, 16];
    const xv = seededValues(b * t * 3 * h * d, 9, 1);
    const l: AttentionLayout = { batch: b, heads: h, kvHeads: h, headDim: d, qCol: 0, kCol: h * d, vCol: 2 * h * d };
    const x = tf.tensor2d(xv, [b * t, 3 * h * d]);
    const gy = tf.tensor2d(seededValues(b * t * h * d, 10, 1), [b * t, h * d]);
    const bitsOf = async (): Promise<Uint32Array> => {
      const f = attentionFused(x, x, x, l) as { o: tf.Tensor2D; p: tf.Tensor4D };
      const dx = attentionGradPacked(gy, x, f.p, l);
      return new Uint32Array(
        tf
          .concat([f.o.reshape([-1]), dx.reshape([-1])])
          .dataSync()
          .slice().buffer,
      );
    };
    expect(Buffer.from((await bitsOf()).buffer).equals(Buffer.from((await bitsOf()).buffer))).toBe(true);
  });

  it('refuses inconsistent shapes and attributes with a message naming them', () => {
    const x = tf.zeros<tf.Rank.R2>([6, 12]);
    const l: AttentionLayout = { batch: 2, heads: 2, kvHeads: 2, headDim: 2, qCol: 0, kCol: 4, vCol: 8 };
    expect(() => attentionFused(x, x, x, { ...l, batch: 4 })).toThrow(/SrpoAttention: q, k and v must be \[B\*T, columns\]/);
    expect(() => attentionFused(x, x, x, { ...l, vCol: 10 })).toThrow(/SrpoAttention: q needs heads \* head_dim columns/);
    expect(() => attentionFused(x, x, x, { ...l, kvHeads: 3 })).toThrow(/kv_heads dividing heads/);
    const { p } = attentionFused(x, x, x, l) as { o: tf.Tensor2D; p: tf.Tensor4D };
    expect(() => attentionGradPacked(tf.zeros<tf.Rank.R2>([6, 3]), x, p, l)).toThrow(/SrpoAttentionGradPacked: dO must be \[B\*T, heads \* head_dim\]/);
    expect(() => attentionGradPacked(tf.zeros<tf.Rank.R2>([6, 4]), x, p, { ...l, kCol: 2 })).toThrow(/disjoint q, k and v columns/);
  });
});
