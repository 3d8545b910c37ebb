import * as tf from '@tensorflow/tfjs';
import { attentionFused, decodeAttentionFused, type AttentionLayout } from './fused-ops';
import { srpoKernelAvailable } from './srpo-kernels';
import { describeNative } from './test/describe-native';
import { bits, firstMismatch, nativeBackend, seededValues } from './test/fixtures';

/**
 * `SrpoDecodeAttention` (attention-kernels.h): against a float64 evaluation of the formula written
 * out here, against the composite a decode step uses without it (two batched products, the −1e9
 * mask, TensorFlow's Softmax), and bit for bit against `SrpoAttention`'s row for the same query
 * position, which is what makes a cached step's numbers the full forward's.
 */

/** A cache `[B, H_kv, W, d]` from per-row key (or value) rows `[L_b, H_kv·d]`, left-padded to W with `pad`. */
function cacheOf(rows: Float32Array[], kvHeads: number, d: number, w: number, pad = 0): Float32Array {
  const out = new Float32Array(rows.length * kvHeads * w * d).fill(pad);
  rows.forEach((x, b) => {
    const len = x.length / (kvHeads * d);
    for (let j = 0; j < len; j++)
      for (let g = 0; g < kvHeads; g++) for (let e = 0; e < d; e++) out[((b * kvHeads + g) * w + (w - len + j)) * d + e] = x[(j * kvHeads + g) * d + e];
  });
  return out;
}

/** Columns [from, to) of a cache `[B, H_kv, W, d]` as a tensor. */
function columns(cache: Float32Array, b: number, kvHeads: number, w: number, d: number, from: number, to: number): tf.Tensor4D {
  return tf.tensor4d(cache, [b, kvHeads, w, d]).slice([0, 0, from, 0], [-1, -1, to - from, -1]);
}

/** Float64 attention of query rows q `[B, H·d]` over each row's keys and values `[L_b, H_kv·d]`. */
function reference(q: Float32Array, keys: Float32Array[], values: Float32Array[], heads: number, kvHeads: number, d: number): Float64Array {
  const out = new Float64Array(q.length);
  const r = heads / kvHeads;
  keys.forEach((k, b) => {
    const len = k.length / (kvHeads * d);
    for (let h = 0; h < heads; h++) {
      const g = Math.floor(h / r);
      const s = Array.from({ length: len }, (_, j) => {
        let dot = 0;
        for (let e = 0; e < d; e++) dot += q[b * heads * d + h * d + e] * k[(j * kvHeads + g) * d + e];
        return dot;
      });
      const mx = Math.max(...s);
      const ex = s.map((x) => Math.exp(x - mx));
      const sum = ex.reduce((a, x) => a + x, 0);
      for (let e = 0; e < d; e++) {
        let o = 0;
        for (let j = 0; j < len; j++) o += (ex[j] / sum) * values[b][(j * kvHeads + g) * d + e];
        out[b * heads * d + h * d + e] = o;
      }
    }
  });
  return out;
}

function worstDiff(got: Float32Array, want: ArrayLike<number>): number {
  expect(got.length).toBe(want.length);
  let worst = 0;
  for (let i = 0; i < got.length; i++) worst = Math.max(worst, Math.abs(got[i] - want[i]));
  return worst;
}

describeNative(['SrpoDecodeAttention', 'SrpoAttention'], 'SrpoDecodeAttention (one cached decode step)', () => {
  beforeAll(nativeBackend);

  // SmolLM2-135M's heads: 9 query heads over 3 key/value heads of 64.
  const [heads, kvHeads, d] = [9, 3, 64];
  const lengths = [5, 1, 40, 17];
  const w = Math.max(...lengths);
  const b = lengths.length;
  const keys = lengths.map((len, i) => seededValues(len * kvHeads * d, 100 + i, 1));
  const values = lengths.map((len, i) => seededValues(len * kvHeads * d, 200 + i, 1));
  const qv = seededValues(b * heads * d, 7, 1 / Math.sqrt(d));

  it('is registered with the addon (required in CI)', () => {
    expect(srpoKernelAvailable('SrpoDecodeAttention')).toBe(true);
  });

  it('attends over each row’s valid columns as the float64 formula does, in one part or split in two at any column', async () => {
    const want = reference(qv, keys, values, heads, kvHeads, d);
    // The padding holds garbage (1e3): a kernel that read it would be far off.
    const [kc, vc] = [cacheOf(keys, kvHeads, d, w, 1e3), cacheOf(values, kvHeads, d, w, 1e3)];
    const start = tf.tensor1d(
      lengths.map((len) => w - len),
      'int32',
    );
    const q = tf.tensor2d(qv, [b, heads * d]);
    for (const cut of [w, 0, 1, w - 3, 20]) {
      const o = decodeAttentionFused(
        q,
        columns(kc, b, kvHeads, w, d, 0, cut),
        columns(vc, b, kvHeads, w, d, 0, cut),
        columns(kc, b, kvHeads, w, d, cut, w),
        columns(vc, b, kvHeads, w, d, cut, w),
        start,
      );
      expect(o).toBeDefined();
      expect(o?.shape).toEqual([b, heads * d]);
      expect(worstDiff(await (o as tf.Tensor2D).data<'float32'>(), want)).toBeLessThan(2e-6);
    }
  });

  it('equals SrpoAttention’s row for the same position bit for bit, at every length from 1 to 70, split or not', async () => {
    const t = 70;
    const [qAll, kAll, vAll] = [seededValues(t * heads * d, 11, 0.4), seededValues(t * kvHeads * d, 12, 1.5), seededValues(t * kvHeads * d, 13, 1)];
    const layout: AttentionLayout = { batch: 1, heads, kvHeads, headDim: d, qCol: 0, kCol: 0, vCol: 0 };
    const full = attentionFused(tf.tensor2d(qAll, [t, heads * d]), tf.tensor2d(kAll, [t, kvHeads * d]), tf.tensor2d(vAll, [t, kvHeads * d]), layout);
    expect(full).toBeDefined();
    const fullBits = await bits((full as { o: tf.Tensor2D }).o);
    const rowLen = heads * d;
    // Each step: the prefixes 0..i of two rows at once (row 0 padded by 3 columns), split 4 columns from the end.
    for (let i = 0; i < t; i++) {
      const prefix = (x: Float32Array, len: number): Float32Array => x.slice(0, len * kvHeads * d);
      const rowKeys = [prefix(kAll, i + 1), prefix(kAll, i + 1)];
      const rowValues = [prefix(vAll, i + 1), prefix(vAll, i + 1)];
      const width = i + 4;
      const [kc, vc] = [cacheOf(rowKeys, kvHeads, d, width, 7), cacheOf(rowValues, kvHeads, d, width, 7)];
      const q = tf.tensor2d([...qAll.slice(i * rowLen, (i + 1) * rowLen), ...qAll.slice(i * rowLen, (i + 1) * rowLen)], [2, rowLen]);
      const cut = Math.max(0, width - 4);
      const o = decodeAttentionFused(
        q,
        columns(kc, 2, kvHeads, width, d, 0, cut),
        columns(vc, 2, kvHeads, width, d, 0, cut),
        columns(kc, 2, kvHeads, width, d, cut, width),
        columns(vc, 2, kvHeads, width, d, cut, width),
        tf.tensor1d([3, 3], 'int32'),
      ) as tf.Tensor2D;
      const got = await bits(o);
      const want = fullBits.slice(i * rowLen, (i + 1) * rowLen);
      expect([i, firstMismatch(got.slice(0, rowLen), want), firstMismatch(got.slice(rowLen), want)]).toEqual([i, -1, -1]);
    }
  });

  it('agrees with the composite step (batched products, −1e9 mask, Softmax) within float32 rounding', async () => {
    const [kc, vc] = [cacheOf(keys, kvHeads, d, w), cacheOf(values, kvHeads, d, w)];
    const [k4, v4] = [tf.tensor4d(kc, [b, kvHeads, w, d]), tf.tensor4d(vc, [b, kvHeads, w, d])];
    const q = tf.tensor2d(qv, [b, heads * d]);
    const mask = new Float32Array(b * w);
    lengths.forEach((len, i) => mask.fill(-1e9, i * w, i * w + w - len));
    const composite = tf.tidy(() => {
      const scores = tf.matMul(q.reshape([b, kvHeads, heads / kvHeads, d]), k4, false, true);
      const p = tf.softmax(tf.add(scores, tf.tensor4d(mask, [b, 1, 1, w])));
      return tf.matMul(p, v4).reshape([b, heads * d]);
    });
    const empty = tf.zeros<tf.Rank.R4>([b, kvHeads, 0, d]);
    const start = tf.tensor1d(
      lengths.map((len) => w - len),
      'int32',
    );
    const o = decodeAttentionFused(q, k4, v4, empty, empty, start) as tf.Tensor2D;
    expect(worstDiff(await o.data<'float32'>(), await composite.data<'float32'>())).toBeLessThan(1e-6);
  });

  it('refuses inconsistent shapes and starts outside the cache with a message naming them', () => {
    const q = tf.zeros<tf.Rank.R2>([2, 8]);
    const k = tf.zeros<tf.Rank.R4>([2, 2, 3, 2]);
    const none = tf.zeros<tf.Rank.R4>([2, 2, 0, 2]);
    const ok = tf.tensor1d([0, 2], 'int32');
    expect(decodeAttentionFused(q, k, k, none, none, ok)?.shape).toEqual([2, 8]);
    expect(() => decodeAttentionFused(q, k, k, none, none, tf.tensor1d([0, 3], 'int32'))).toThrow(/SrpoDecodeAttention: start\[1\] must be in \[0, W1 \+ W2\)/);
    expect(() => decodeAttentionFused(q, k, k, none, none, tf.tensor1d([0], 'int32'))).toThrow(/start must hold one column per row/);
    expect(() => decodeAttentionFused(q, k, tf.zeros<tf.Rank.R4>([2, 2, 4, 2]), none, none, ok)).toThrow(/k and v must be \[B, H_kv, W1, d\]/);
    expect(() => decodeAttentionFused(tf.zeros<tf.Rank.R2>([2, 6]), k, k, none, none, ok)).toThrow(/heads \* d with kv_heads dividing heads/);
    expect(() => decodeAttentionFused(q, none, none, none, none, ok)).toThrow(/at least one column/);
  });
});
