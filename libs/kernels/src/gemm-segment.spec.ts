import * as tf from '@tensorflow/tfjs';
import { setGemmPlanThreads } from './tuning';
import { describeNative } from './test/describe-native';
import { bits, cascadeColumnSums, firstMismatch, nativeBackend, seededValues } from './test/fixtures';
import { asBits, fmaChains, segmented, segmentedChains, segmentedElement, srpoMatMul, srpoMatMulOp, transposed } from './test/gemm-reference';

/**
 * `SrpoMatMul`'s K segments (gemm-ops.h, kernel set 11): products with a long K and a small C
 * (the weight gradients Xᵀ·dY) are FMA chains over segments of 1024 added in order. Checked
 * against those chains written out in JavaScript (test/gemm-reference.ts), for every transpose,
 * with the epilogues, at the rule's boundaries, and under the schedules of two, eight and sixteen
 * threads (setGemmPlanThreads: whole segments per thread, or pieces of each segment, with the
 * shared operand packed once or each piece packing its own), which must give the same bits. Skips where the addon is not built,
 * unless SRPO_REQUIRE_NATIVE_KERNELS=1 (CI).
 */
/** Runs `fn` with products planned for each thread count (0: the pool's own), then restores the pool's. */
async function underPlans(plans: number[], fn: (plan: number) => Promise<void>): Promise<void> {
  try {
    for (const plan of plans) {
      setGemmPlanThreads(plan);
      await fn(plan);
    }
  } finally {
    setGemmPlanThreads(0);
  }
}

describeNative(
  ['SrpoMatMul', 'SrpoMatMulBias', 'SrpoMatMulBiasResidual', 'SrpoMatMulColumnSum'],
  'SrpoMatMul over K segments (long K, small C: the weight gradients)',
  () => {
    beforeAll(nativeBackend);

    // [m, n, k]: columns split (m < n) in two segments; three segments, the last one short (52) and
    // mid-tile edges; rows split (m >= n) in three; one element, small enough to run inline.
    it.each([
      [5, 40, 2048],
      [13, 37, 2100],
      [70, 9, 3072],
      [1, 1, 2048],
    ])("[%i, %i] over k = %i is the segments' FMA chains added in order, for every transpose and every schedule", async (m, n, k) => {
      expect(segmented(m, n, k)).toBe(true);
      const a = seededValues(m * k, 7 + m, 2);
      const b = seededValues(k * n, 11 + n, 2);
      const expected = asBits(segmentedChains(a, b, m, n, k));
      // The reference can tell: one chain over the whole of K differs somewhere (but for 1 × 1, whose sum may round alike).
      if (m * n > 1) expect(firstMismatch(asBits(fmaChains(a, b, m, n, k)), expected)).not.toBe(-1);
      const operands = {
        a: tf.tensor2d(a, [m, k]),
        b: tf.tensor2d(b, [k, n]),
        at: tf.tensor2d(transposed(a, m, k), [k, m]),
        bt: tf.tensor2d(transposed(b, k, n), [n, k]),
      };
      await underPlans([0, 1, 8], async (plan) => {
        for (const [ta, tb] of [
          [false, false],
          [true, false],
          [false, true],
          [true, true],
        ] as const) {
          const out = srpoMatMul(ta ? operands.at : operands.a, tb ? operands.bt : operands.b, ta, tb);
          expect([plan, ta, tb, firstMismatch(await bits(out), expected)]).toEqual([plan, ta, tb, -1]);
          out.dispose();
        }
      });
      tf.dispose(Object.values(operands));
    });

    it('segments only from k = 2048 and up to m · n = 2^18: below either bound each element is one chain', async () => {
      // k = 2047: one chain everywhere.
      const [m, n] = [13, 37];
      const a = seededValues(m * 2047, 3, 2);
      const b = seededValues(2047 * n, 4, 2);
      expect(firstMismatch(await bits(srpoMatMul(tf.tensor2d(a, [m, 2047]), tf.tensor2d(b, [2047, n]))), asBits(fmaChains(a, b, m, n, 2047)))).toBe(-1);
      // m · n = 2^18 is segmented, one row more is not: sampled elements (the whole product is too long to write out here).
      for (const [rows, cols, inSegments] of [
        [512, 512, true],
        [513, 512, false],
      ] as const) {
        const k = 2048;
        const x = seededValues(rows * k, 5, 2);
        const y = seededValues(k * cols, 6, 2);
        const c = await srpoMatMul(tf.tensor2d(x, [rows, k]), tf.tensor2d(y, [k, cols])).data<'float32'>();
        let differs = 0;
        for (let s = 0; s < 24; s++) {
          const i = (s * 97) % rows;
          const j = (s * 61 + 7) % cols;
          const [seg, whole] = [segmentedElement(x, y, cols, k, i, j), segmentedElement(x, y, cols, k, i, j, k)];
          expect([rows, i, j, c[i * cols + j]]).toEqual([rows, i, j, inSegments ? seg : whole]);
          if ((inSegments ? whole : seg) !== c[i * cols + j]) differs++;
        }
        expect(differs).toBeGreaterThan(0); // the other rule would have failed somewhere
      }
    });

    // K = 8400: nine segments, the last one short, and the operand every piece reads too large to
    // pack once for all (k · 512 > 2^22 floats): under a sixteen-thread plan (more threads than
    // segments: pieces of each segment) each piece packs its own blocks, and the rows-split
    // product's bias gradient is summed after it.
    it.each([
      [500, 510, 8400],
      [510, 500, 8400],
    ])('[%i, %i] over k = %i (nine segments, nothing shared): sampled elements are the segmented chains, the bias gradient the cascade', async (m, n, k) => {
      const x = seededValues(k * m, 41 + m, 2); // X [k, m]: the product is Xᵀ·dY
      const dy = seededValues(k * n, 43 + n, 2);
      const a = transposed(x, k, m);
      const expectedSums = asBits(cascadeColumnSums(dy, k, n));
      const [xt, dyt] = [tf.tensor2d(x, [k, m]), tf.tensor2d(dy, [k, n])];
      const samples = Array.from({ length: 16 }, (_, s) => [(s * 131) % m, (s * 71 + 5) % n]);
      const expected = samples.map(([i, j]) => segmentedElement(a, dy, n, k, i, j));
      await underPlans([0, 16], async (plan) => {
        const [product, sums] = srpoMatMulOp('SrpoMatMulColumnSum', [xt, dyt], true);
        const c = await product.data<'float32'>();
        expect(samples.map(([i, j]) => [plan, i, j, c[i * n + j]])).toEqual(samples.map(([i, j], s) => [plan, i, j, expected[s]]));
        expect([plan, firstMismatch(await bits(sums), expectedSums)]).toEqual([plan, -1]);
        tf.dispose([product, sums]);
      });
      tf.dispose([xt, dyt]);
    });

    it.each([
      [13, 37, 2100],
      [70, 9, 3072],
    ])("[%i, %i] over k = %i: the bias, then the residual, are added to the segments' sum, one rounding each", async (m, n, k) => {
      const a = seededValues(m * k, 21 + m, 2);
      const b = seededValues(k * n, 23 + n, 2);
      const bias = seededValues(n, 25, 3);
      const h = seededValues(m * n, 27, 50);
      const product = segmentedChains(a, b, m, n, k);
      const withBias = product.map((v, i) => Math.fround(v + bias[i % n]));
      const withResidual = withBias.map((v, i) => Math.fround(h[i] + v));
      const [at, bt, biasT, hT] = [tf.tensor2d(a, [m, k]), tf.tensor2d(b, [k, n]), tf.tensor1d(bias), tf.tensor2d(h, [m, n])];
      await underPlans([0, 8], async (plan) => {
        const [biased] = srpoMatMulOp('SrpoMatMulBias', [at, bt, biasT]);
        const [residual] = srpoMatMulOp('SrpoMatMulBiasResidual', [at, bt, biasT, hT]);
        expect([plan, firstMismatch(await bits(biased), asBits(withBias))]).toEqual([plan, -1]);
        expect([plan, firstMismatch(await bits(residual), asBits(withResidual))]).toEqual([plan, -1]);
      });
    });

    // Columns split (each piece sums its segment's row groups) and rows split (whole segments sum
    // theirs; under the eight-thread plan op(B) is packed once for all pieces and summed there).
    it.each([
      [40, 300, 2100],
      [300, 40, 2100],
    ])("[%i, %i] over k = %i: the weight gradient is segmented and its bias gradient is SrpoColumnSum's cascade, bit for bit", async (m, n, k) => {
      const x = seededValues(k * m, 31 + m, 2); // X [k, m]: the product is Xᵀ·dY
      const dy = seededValues(k * n, 37 + n, 2);
      const expectedProduct = asBits(segmentedChains(transposed(x, k, m), dy, m, n, k));
      const expectedSums = asBits(cascadeColumnSums(dy, k, n));
      const [xt, dyt] = [tf.tensor2d(x, [k, m]), tf.tensor2d(dy, [k, n])];
      await underPlans([0, 8], async (plan) => {
        const [product, sums] = srpoMatMulOp('SrpoMatMulColumnSum', [xt, dyt], true);
        expect([plan, firstMismatch(await bits(product), expectedProduct)]).toEqual([plan, -1]);
        expect([plan, firstMismatch(await bits(sums), expectedSums)]).toEqual([plan, -1]);
      });
    });
  },
);
