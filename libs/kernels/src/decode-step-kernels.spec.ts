import * as tf from '@tensorflow/tfjs';
import { decodeQkvFused, gateUpFused, kvAppendFused, ropeFused, swiGluFused } from './fused-ops';
import { configureSrpoKernels, srpoKernelAvailable, srpoMatMulRouted } from './srpo-kernels';
import { describeNative } from './test/describe-native';
import { bits, firstMismatch, nativeBackend, seededValues } from './test/fixtures';
import { fmaChains, transposed } from './test/gemm-reference';

/**
 * The decode step's fused pieces (decode-ops.h): `SrpoKvAppend` against the copy written out here,
 * and `SrpoDecodeQkv` and `SrpoGateUp` against the products as float32 FMA chains written out here
 * (test/gemm-reference) and, bit for bit, against the ops they replace (`SrpoRope`, `SrpoKvAppend`,
 * `SrpoSwiGlu` on those products), so that a step through them sums as the full forward does.
 */

/** `[B, H_kv, W + 1, d]`: each (row, head)'s W cached columns and then its new one, written out. */
function appended(cache: Float32Array, col: Float32Array, items: number, w: number, d: number): Float32Array {
  const out = new Float32Array(items * (w + 1) * d);
  for (let i = 0; i < items; i++) {
    out.set(cache.subarray(i * w * d, (i + 1) * w * d), i * (w + 1) * d);
    out.set(col.subarray(i * d, (i + 1) * d), i * (w + 1) * d + w * d);
  }
  return out;
}

describeNative(['SrpoKvAppend', 'SrpoDecodeQkv', 'SrpoGateUp', 'SrpoSwiGlu', 'SrpoRope', 'SrpoMatMul'], 'a decode step’s fused pieces', () => {
  // The fused pieces are checked as the learner's products run them: SrpoMatMul's FMA chains.
  // `auto` leaves the products to oneDNN on an AMD CPU with AVX-512 (srpo-kernels.ts), so the
  // choice is pinned to `srpo` here, so this spec holds on every CPU.
  let matMulBefore: ReturnType<typeof configureSrpoKernels>['matMul'];
  beforeAll(async () => {
    await nativeBackend();
    matMulBefore = configureSrpoKernels({}).matMul;
    configureSrpoKernels({ matMul: 'srpo' });
  });
  afterAll(() => configureSrpoKernels({ matMul: matMulBefore }));

  // SmolLM2-135M's attention shapes, narrower: 9 query heads over 3 key/value heads of 8.
  const [heads, kvHeads, d, hidden] = [9, 3, 8, 37];

  it('are registered with the addon (required in CI)', () => {
    expect(srpoKernelAvailable('SrpoKvAppend')).toBe(true);
    expect(srpoKernelAvailable('SrpoDecodeQkv')).toBe(true);
    expect(srpoKernelAvailable('SrpoGateUp')).toBe(true);
  });

  it.each([
    [1, 0],
    [1, 5],
    [4, 13],
  ])('SrpoKvAppend puts each row’s new column after its W cached ones (B = %i, W = %i)', async (b, w) => {
    const k = seededValues(b * kvHeads * w * d, 1, 1);
    const v = seededValues(b * kvHeads * w * d, 2, 1);
    const kn = seededValues(b * kvHeads * d, 3, 1);
    const vn = seededValues(b * kvHeads * d, 4, 1);
    const out = kvAppendFused(
      tf.tensor4d(k, [b, kvHeads, w, d]),
      tf.tensor4d(v, [b, kvHeads, w, d]),
      tf.tensor2d(kn, [b, kvHeads * d]),
      tf.tensor2d(vn, [b, kvHeads * d]),
    );
    expect(out).toBeDefined();
    const [ko, vo] = out as [tf.Tensor4D, tf.Tensor4D];
    expect(ko.shape).toEqual([b, kvHeads, w + 1, d]);
    expect(Array.from(await ko.data())).toEqual(Array.from(appended(k, kn, b * kvHeads, w, d)));
    expect(Array.from(await vo.data())).toEqual(Array.from(appended(v, vn, b * kvHeads, w, d)));
  });

  it('SrpoKvAppend refuses mismatched shapes, naming them', () => {
    const k = tf.zeros<tf.Rank.R4>([2, kvHeads, 3, d]);
    expect(() => kvAppendFused(k, k, tf.zeros([2, kvHeads * d + 1]), tf.zeros([2, kvHeads * d + 1]))).toThrow(/k_new and v_new must be \[B, H_kv\*d\]/);
  });

  // Rows: the unpacked few-row products (1, 3) and the packed ones (7).
  it.each([
    [1, 6],
    [3, 0],
    [7, 11],
  ])('SrpoDecodeQkv gives, bit for bit, the FMA chains’ products and the separate ops’ rotation and append (B = %i, W = %i)', async (b, w) => {
    expect(srpoMatMulRouted()).toBe(true);
    const x = seededValues(b * hidden, 10 + b, 1);
    const [wq, wk, wv] = [heads * d, kvHeads * d, kvHeads * d].map((n, i) => seededValues(n * hidden, 20 + i, 0.3));
    const pos = Array.from({ length: b }, (_, i) => 3 + 5 * i);
    const theta = (p: number, j: number): number => p / 10000 ** ((2 * (j % (d / 2))) / d);
    const cos = tf.tensor2d(
      pos.flatMap((p) => Array.from({ length: d }, (_, j) => Math.cos(theta(p, j)))),
      [b, d],
    );
    const sin = tf.tensor2d(
      pos.flatMap((p) => Array.from({ length: d }, (_, j) => Math.sin(theta(p, j)))),
      [b, d],
    );
    const k = tf.tensor4d(seededValues(b * kvHeads * w * d, 30, 1), [b, kvHeads, w, d]);
    const v = tf.tensor4d(seededValues(b * kvHeads * w * d, 31, 1), [b, kvHeads, w, d]);
    const [wqT, wkT, wvT] = [tf.tensor2d(wq, [heads * d, hidden]), tf.tensor2d(wk, [kvHeads * d, hidden]), tf.tensor2d(wv, [kvHeads * d, hidden])];
    const scale = 1 / Math.sqrt(d);
    const out = decodeQkvFused(tf.tensor2d(x, [b, hidden]), wqT, wkT, wvT, cos, sin, k, v, scale);
    expect(out).toBeDefined();
    const [q, ko, vo] = out as [tf.Tensor2D, tf.Tensor4D, tf.Tensor4D];
    // The products as float32 FMA chains written out in JavaScript (SrpoMatMul's order).
    const chains = (wt: Float32Array, n: number): tf.Tensor2D => tf.tensor2d(fmaChains(x, transposed(wt, n, hidden), b, n, hidden), [b, n]);
    const [pq, pk, pv] = [chains(wq, heads * d), chains(wk, kvHeads * d), chains(wv, kvHeads * d)];
    // The rotation and the append as the separate ops give them, on those products.
    const wantQ = ropeFused(pq, cos, sin, scale, false) as tf.Tensor2D;
    const [wantK, wantV] = kvAppendFused(k, v, ropeFused(pk, cos, sin, 1, false) as tf.Tensor2D, pv) as [tf.Tensor4D, tf.Tensor4D];
    expect(q.shape).toEqual([b, heads * d]);
    expect(ko.shape).toEqual([b, kvHeads, w + 1, d]);
    expect(firstMismatch(await bits(q), await bits(wantQ))).toBe(-1);
    expect(firstMismatch(await bits(ko), await bits(wantK))).toBe(-1);
    expect(firstMismatch(await bits(vo), await bits(wantV))).toBe(-1);
    // The new key of row 0, head 0, element 0 is the rotation of its product, by hand: k₀·cos − k_{d/2}·sin.
    const pk0 = await pk.data();
    const k0 = (await ko.data())[w * d];
    expect(Math.abs(k0 - (pk0[0] * Math.cos(theta(pos[0], 0)) - pk0[d / 2] * Math.sin(theta(pos[0], 0))))).toBeLessThan(1e-5);
  });

  it.each([1, 16, 40])('SrpoGateUp gives, bit for bit, SiLU(g) ⊙ u of the FMA chains’ products through SrpoSwiGlu (%i rows)', async (n) => {
    expect(srpoMatMulRouted()).toBe(true);
    const f = 45;
    const x = seededValues(n * hidden, 50 + n, 1);
    const [wg, wu] = [seededValues(f * hidden, 51, 0.4), seededValues(f * hidden, 52, 0.4)];
    const y = gateUpFused(tf.tensor2d(x, [n, hidden]), tf.tensor2d(wg, [f, hidden]), tf.tensor2d(wu, [f, hidden]));
    expect(y).toBeDefined();
    expect((y as tf.Tensor2D).shape).toEqual([n, f]);
    const g = fmaChains(x, transposed(wg, f, hidden), n, f, hidden);
    const u = fmaChains(x, transposed(wu, f, hidden), n, f, hidden);
    const want = swiGluFused(tf.tensor2d(g, [n, f]), tf.tensor2d(u, [n, f])) as tf.Tensor2D;
    expect(firstMismatch(await bits(y as tf.Tensor2D), await bits(want))).toBe(-1);
    // And the formula in float64 on those products: g·σ(g)·u.
    const got = await (y as tf.Tensor2D).data();
    for (let i = 0; i < n * f; i += 7) expect(Math.abs(got[i] - (g[i] / (1 + Math.exp(-g[i]))) * u[i])).toBeLessThan(1e-5 * (1 + Math.abs(got[i])));
  });

  it('SrpoDecodeQkv refuses a cache whose heads do not match wk, naming the shapes', () => {
    const x = tf.zeros<tf.Rank.R2>([1, hidden]);
    const w = tf.zeros<tf.Rank.R2>([heads * d, hidden]);
    const wkv = tf.zeros<tf.Rank.R2>([kvHeads * d, hidden]);
    const t = tf.zeros<tf.Rank.R2>([1, d]);
    const cache = tf.zeros<tf.Rank.R4>([1, kvHeads + 1, 2, d]);
    expect(() => decodeQkvFused(x, w, wkv, wkv, t, t, cache, cache, 1)).toThrow(/wk must have H_kv\*d rows/);
  });
});
