import * as tf from '@tensorflow/tfjs';
import { describeNative } from './test/describe-native';
import { bits, cascadeColumnSums, firstMismatch, nativeBackend, seededValues } from './test/fixtures';
import { asBits, executor, fmaChains, srpoMatMul, srpoMatMulOp, transposed } from './test/gemm-reference';

/**
 * The epilogues of the SrpoMatMul family (gemm-kernels.h, gemm-ops.h), each against float32
 * references written out in JavaScript (test/gemm-reference.ts) and against the separate ops it
 * replaces, bit for bit. Skips where the addon is not built, unless SRPO_REQUIRE_NATIVE_KERNELS=1 (CI).
 */
describeNative(
  ['SrpoMatMul', 'SrpoMatMulBias', 'SrpoMatMulBiasResidual', 'SrpoMatMulColumnSum'],
  'SrpoMatMulBias, SrpoMatMulBiasResidual and SrpoMatMulColumnSum (a linear layer forward, a residual projection, a weight gradient with its bias gradient)',
  () => {
    beforeAll(nativeBackend);

    // Mid-tile edges, three K blocks, rows split (m >= n) and columns split (m < n) between threads.
    // [1, 37, 300] and [3, 77, 301] with b transposed: the few-row path (gemv_tb) and its column and k tails.
    it.each([
      [7, 5, 3],
      [1, 37, 300],
      [3, 77, 301],
      [13, 37, 300],
      [70, 45, 600],
      [45, 70, 520],
    ])('[%i, %i] over k = %i: the product plus the bias is each FMA chain plus the bias, rounded once, for every transpose', async (m, n, k) => {
      const a = seededValues(m * k, 41 + m, 2);
      const b = seededValues(k * n, 43 + n, 2);
      const bias = seededValues(n, 47, 3);
      const chains = fmaChains(a, b, m, n, k);
      const expected = new Float32Array(m * n);
      for (let i = 0; i < m * n; i++) expected[i] = Math.fround(chains[i] + bias[i % n]);
      for (const [ta, tb] of [
        [false, false],
        [true, false],
        [false, true],
        [true, true],
      ] as const) {
        const at = ta ? tf.tensor2d(transposed(a, m, k), [k, m]) : tf.tensor2d(a, [m, k]);
        const bt = tb ? tf.tensor2d(transposed(b, k, n), [n, k]) : tf.tensor2d(b, [k, n]);
        const [out] = srpoMatMulOp('SrpoMatMulBias', [at, bt, tf.tensor1d(bias)], ta, tb);
        expect(out.shape).toEqual([m, n]);
        expect(firstMismatch(await bits(out), asBits(expected))).toBe(-1);
      }
      // A [1, N] bias (how the folded layer norm holds it) gives the same; so does SrpoMatMul then SrpoAdd.
      const [row] = srpoMatMulOp('SrpoMatMulBias', [tf.tensor2d(a, [m, k]), tf.tensor2d(b, [k, n]), tf.tensor2d(bias, [1, n])]);
      expect(firstMismatch(await bits(row), asBits(expected))).toBe(-1);
      const separate = executor().executeSingleOutput('SrpoAdd', [], [srpoMatMul(tf.tensor2d(a, [m, k]), tf.tensor2d(b, [k, n])), tf.tensor1d(bias)]);
      expect(firstMismatch(await bits(separate), asBits(expected))).toBe(-1);
    });

    it.each([
      [2, 37, 300],
      [13, 37, 300],
      [70, 45, 600],
      [45, 70, 520],
    ])('[%i, %i] over k = %i: the residual plus (the product plus the bias) rounds each addition in turn, as SrpoAddResidualBias', async (m, n, k) => {
      const a = seededValues(m * k, 61 + m, 2);
      const b = seededValues(k * n, 67 + n, 2);
      const bias = seededValues(n, 71, 3);
      const h = seededValues(m * n, 73, 50);
      const chains = fmaChains(a, b, m, n, k);
      const expected = new Float32Array(m * n);
      for (let i = 0; i < m * n; i++) expected[i] = Math.fround(h[i] + Math.fround(chains[i] + bias[i % n]));
      const [out] = srpoMatMulOp('SrpoMatMulBiasResidual', [tf.tensor2d(a, [m, k]), tf.tensor2d(b, [k, n]), tf.tensor1d(bias), tf.tensor2d(h, [m, n])]);
      expect(firstMismatch(await bits(out), asBits(expected))).toBe(-1);
      // b stored transposed (x·Wᵀ, the few-row path below 5 rows): the same bits.
      const [outT] = srpoMatMulOp(
        'SrpoMatMulBiasResidual',
        [tf.tensor2d(a, [m, k]), tf.tensor2d(transposed(b, k, n), [n, k]), tf.tensor1d(bias), tf.tensor2d(h, [m, n])],
        false,
        true,
      );
      expect(firstMismatch(await bits(outT), asBits(expected))).toBe(-1);
      // A reference that sums the three in another order differs somewhere (the test can fail).
      const other = new Float32Array(m * n);
      for (let i = 0; i < m * n; i++) other[i] = Math.fround(Math.fround(h[i] + bias[i % n]) + chains[i]);
      expect(firstMismatch(await bits(out), asBits(other))).not.toBe(-1);
      const separate = executor().executeSingleOutput(
        'SrpoAddResidualBias',
        [],
        [tf.tensor2d(h, [m, n]), srpoMatMul(tf.tensor2d(a, [m, k]), tf.tensor2d(b, [k, n])), tf.tensor1d(bias)],
      );
      expect(firstMismatch(await bits(separate), asBits(expected))).toBe(-1);
      expect(() => srpoMatMulOp('SrpoMatMulBiasResidual', [tf.tensor2d(a, [m, k]), tf.tensor2d(b, [k, n]), tf.tensor1d(bias), tf.ones([m, n + 1])])).toThrow(
        new RegExp(`SrpoMatMulBiasResidual: residual must be \\[${m}, ${n}\\], the product's shape`),
      );
    });

    it('adds the bias to zeros for k = 0 (a −0 bias gives +0, as an addition does) and names a bias of the wrong size', async () => {
      const [z] = srpoMatMulOp('SrpoMatMulBias', [tf.zeros([2, 0]), tf.zeros([0, 3]), tf.tensor1d([1.5, -0, -2])]);
      expect(Array.from(await z.data())).toEqual([1.5, 0, -2, 1.5, 0, -2]);
      expect(Object.is((await z.data())[1], 0)).toBe(true);
      expect(() => srpoMatMulOp('SrpoMatMulBias', [tf.ones([2, 3]), tf.ones([3, 4]), tf.ones([3])])).toThrow(
        /SrpoMatMulBias: bias must hold one value per column of the product: \[4\] or \[1, 4\]/,
      );
      expect(() => srpoMatMulOp('SrpoMatMulBias', [tf.ones([2, 3]), tf.ones([3, 4]), tf.ones([2, 4])])).toThrow(/bias must hold one value per column/);
    });

    // [m, n, k]: rows split with op(B) packed once for all pieces; columns split, each piece packing
    // its own columns; a last row group cut short (k = 300) and K blocks crossed (520, 600); rows
    // split where op(B) is too large to share (k · n > 2^22 floats), summed after the product.
    it.each([
      [1, 1, 1],
      [13, 37, 300],
      [70, 45, 600],
      [45, 70, 520],
      [128, 384, 2048],
      [1040, 1030, 4200],
    ])("[%i, %i] over k = %i: the product is SrpoMatMul's and the sums are b's column sums in SrpoColumnSum's cascade, bit for bit", async (m, n, k) => {
      const a = seededValues(m * k, 51 + m, 2);
      const b = seededValues(k * n, 53 + n, 2);
      const expectedSums = cascadeColumnSums(b, k, n);
      for (const ta of [false, true]) {
        const at = ta ? tf.tensor2d(transposed(a, m, k), [k, m]) : tf.tensor2d(a, [m, k]);
        const bt = tf.tensor2d(b, [k, n]);
        const [product, sums] = srpoMatMulOp('SrpoMatMulColumnSum', [at, bt], ta);
        expect(product.shape).toEqual([m, n]);
        expect(sums.shape).toEqual([n]);
        expect(firstMismatch(await bits(product), await bits(srpoMatMul(at, bt, ta)))).toBe(-1);
        expect(firstMismatch(await bits(sums), asBits(expectedSums))).toBe(-1);
        expect(firstMismatch(await bits(sums), await bits(executor().executeSingleOutput('SrpoColumnSum', [], [bt])))).toBe(-1);
        tf.dispose([at, bt, product, sums]);
      }
    });

    it('sums b alone when there is no product (m = 0, k = 0) and refuses a transposed b, saying why', async () => {
      const b = seededValues(5 * 3, 9);
      const [p0, s0] = srpoMatMulOp('SrpoMatMulColumnSum', [tf.zeros([0, 5]), tf.tensor2d(b, [5, 3])]);
      expect(p0.shape).toEqual([0, 3]);
      expect(firstMismatch(await bits(s0), asBits(cascadeColumnSums(b, 5, 3)))).toBe(-1);
      const [p1, s1] = srpoMatMulOp('SrpoMatMulColumnSum', [tf.zeros([4, 0]), tf.zeros([0, 3])]);
      expect(Array.from(await p1.data())).toEqual(new Array(12).fill(0));
      expect(Array.from(await s1.data())).toEqual([0, 0, 0]);
      expect(() => srpoMatMulOp('SrpoMatMulColumnSum', [tf.ones([2, 3]), tf.ones([4, 3])], false, true)).toThrow(
        /SrpoMatMulColumnSum: column sums are of b as stored: transpose_b must be false/,
      );
    });
  },
);
