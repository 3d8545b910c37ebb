import * as tf from '@tensorflow/tfjs';
import { backendLabel, matMul2d } from './native-ops';
import { configureSrpoKernels, loadSrpoKernels, srpoMatMulRouted } from './srpo-kernels';
import { describeNative } from './test/describe-native';
import { bits, cpuUnderTest, firstMismatch, nativeBackend, seededValues } from './test/fixtures';
import { asBits, fmaChains, srpoMatMul, transposed } from './test/gemm-reference';
import { workerSpinMicroseconds } from './tuning';

/**
 * `SrpoMatMul` (gemm-kernels.h) against float64 products written out here, not against the code
 * under test: every transpose, shapes that end mid-tile and cross the K, row and column blocks,
 * the empty cases, and the routing of the learner's products (`matMul: auto | srpo | tensorflow`;
 * training through either kernel is libs/policy's native-kernels.spec.ts).
 * Skips where the addon is not built, unless SRPO_REQUIRE_NATIVE_KERNELS=1 (CI).
 */
/**
 * The worst error of c = a·b ([m, k]·[k, n], row-major float32) against the float64 product, in
 * units of the float32 bound for a sum of k products: (k + 1)·2⁻²⁴·Σ_p |a_ip b_pj| per element.
 */
function worstError(a: Float32Array, b: Float32Array, c: Float32Array, m: number, n: number, k: number): number {
  let worst = 0;
  for (let i = 0; i < m; i++) {
    for (let j = 0; j < n; j++) {
      let exact = 0;
      let scale = 0;
      for (let p = 0; p < k; p++) {
        exact += a[i * k + p] * b[p * n + j];
        scale += Math.abs(a[i * k + p] * b[p * n + j]);
      }
      const bound = (k + 1) * 2 ** -24 * scale + 1e-30;
      worst = Math.max(worst, Math.abs(c[i * n + j] - exact) / bound);
    }
  }
  return worst;
}

describeNative(['SrpoMatMul'], 'SrpoMatMul (the learner products)', () => {
  beforeAll(nativeBackend);
  afterEach(() => configureSrpoKernels({ matMul: 'auto' }));

  // [m, n, k]: one element; mid-tile edges; K over two 256-blocks; more rows than a 96-row block
  // and enough work to split the rows between threads; more columns than a 2048-column block,
  // split between threads by columns; rows and then columns split over three K blocks, where
  // each thread packs the operand all pieces read (op(B), then op(A)) once for the call.
  const shapes: [number, number, number][] = [
    [1, 1, 1],
    [7, 5, 3],
    [6, 16, 8],
    [13, 37, 300],
    [700, 19, 65],
    [30, 2100, 9],
    [400, 45, 520],
    [45, 400, 520],
  ];

  it.each(shapes)('[%i, %i] over k = %i matches float64 for every transpose, to the same bits', async (m, n, k) => {
    const a = seededValues(m * k, 11 + m, 2);
    const b = seededValues(k * n, 23 + n, 2);
    const plain = srpoMatMul(tf.tensor2d(a, [m, k]), tf.tensor2d(b, [k, n]));
    expect(plain.shape).toEqual([m, n]);
    const c = await plain.data<'float32'>();
    expect(worstError(a, b, c, m, n, k)).toBeLessThan(1);
    // The same product from transposed storage packs to the same panels: the same bits.
    const expected = await bits(plain);
    const at = tf.tensor2d(transposed(a, m, k), [k, m]);
    const bt = tf.tensor2d(transposed(b, k, n), [n, k]);
    for (const [ta, tb] of [
      [true, false],
      [false, true],
      [true, true],
    ] as const) {
      const out = srpoMatMul(ta ? at : tf.tensor2d(a, [m, k]), tb ? bt : tf.tensor2d(b, [k, n]), ta, tb);
      expect(firstMismatch(await bits(out), expected)).toBe(-1);
    }
  });

  // [m, n, k]: mid-tile edges of either micro-kernel (6 × 16 and 12 × 32), three K blocks.
  it.each([
    [13, 37, 300],
    [45, 70, 520],
    [70, 45, 600],
  ])('[%i, %i] over k = %i is, bit for bit, one float32 fused multiply-add chain per element (so the same on AVX2 and AVX-512)', async (m, n, k) => {
    const a = seededValues(m * k, 5 + m, 2);
    const b = seededValues(k * n, 9 + n, 2);
    const c = srpoMatMul(tf.tensor2d(a, [m, k]), tf.tensor2d(b, [k, n]));
    expect(firstMismatch(await bits(c), asBits(fmaChains(a, b, m, n, k)))).toBe(-1);
  });

  // Large enough to run on the pool (m·n·k ≥ 2^16), with columns past the groups of 32, 16 and 8, and k past the groups of 4:
  // the unpacked paths of ≤ 4 rows (gemv_tb) and, with AVX-512, of ≤ 16 (gemv16_tb).
  it.each([
    [1, 203, 333],
    [2, 130, 517],
    [4, 91, 250],
    [7, 45, 301],
    [16, 203, 130],
  ])('gives %i row(s) of [·, %i]ᵀ over k = %i (the few-row paths, in pieces on the pool) the FMA chains’ bits', async (m, n, k) => {
    const a = seededValues(m * k, 41 + m, 2);
    const b = seededValues(n * k, 42 + n, 2); // stored [n, k]
    const few = srpoMatMul(tf.tensor2d(a, [m, k]), tf.tensor2d(b, [n, k]), false, true);
    expect(firstMismatch(await bits(few), asBits(fmaChains(a, transposed(b, n, k), m, n, k)))).toBe(-1);
  });

  it.each([1, 2, 3, 4])('gives %i row(s) of a·bᵀ (the unpacked few-row path) the FMA chains’ bits, those of the same rows in a larger product', async (m) => {
    // 77 columns (a tail of 5 past the 8-column groups, two 64-column pieces), k = 301 (a tail of 5 past the 8-k groups).
    const [n, k] = [77, 301];
    const a = seededValues(40 * k, 31, 2);
    const b = seededValues(n * k, 32, 2); // stored [n, k]
    const bt = tf.tensor2d(b, [n, k]);
    const few = srpoMatMul(tf.tensor2d(a.slice(0, m * k), [m, k]), bt, false, true);
    expect(firstMismatch(await bits(few), asBits(fmaChains(a.slice(0, m * k), transposed(b, n, k), m, n, k)))).toBe(-1);
    const many = await bits(srpoMatMul(tf.tensor2d(a, [40, k]), bt, false, true));
    expect(firstMismatch(await bits(few), many.slice(0, m * n))).toBe(-1);
  });

  it('gives each row and column the same bits whatever the rest of the product (threads and blocks)', async () => {
    const [m, n, k] = [301, 150, 520];
    const a = tf.tensor2d(seededValues(m * k, 5), [m, k]);
    const b = tf.tensor2d(seededValues(k * n, 6), [k, n]);
    const full = await srpoMatMul(a, b).data<'float32'>();
    // 37 rows split between threads differently and ending mid-tile; 21 columns likewise.
    const rows = await srpoMatMul(a.slice([101, 0], [37, k]), b).data<'float32'>();
    const cols = await srpoMatMul(a, b.slice([0, 70], [k, 21])).data<'float32'>();
    for (let i = 0; i < 37; i++) for (let j = 0; j < n; j++) expect(rows[i * n + j]).toBe(full[(101 + i) * n + j]);
    for (let i = 0; i < m; i++) for (let j = 0; j < 21; j++) expect(cols[i * 21 + j]).toBe(full[i * n + 70 + j]);
  });

  it('gives the same bits on every call when products of other operands run between (the pool and the packed-operand reuse)', async () => {
    // Each product is large enough for the pool; the two share a but not b, so a thread that
    // reused the previous call's packed op(B) (or a worker that ran a piece of an ended call)
    // would change the bits.
    const [m, n, k] = [390, 70, 300];
    const a = tf.tensor2d(seededValues(m * k, 31), [m, k]);
    const bs = [tf.tensor2d(seededValues(k * n, 32), [k, n]), tf.tensor2d(seededValues(k * n, 33), [k, n])];
    const wide = [tf.tensor2d(seededValues(n * k, 34), [n, k]), tf.tensor2d(seededValues(k * m, 35), [k, m])];
    const first = await Promise.all(bs.map((b) => bits(srpoMatMul(a, b))));
    const firstWide = await bits(srpoMatMul(wide[0], wide[1]));
    expect(firstMismatch(first[0], first[1])).not.toBe(-1);
    for (let call = 0; call < 120; call++) {
      const out = srpoMatMul(a, bs[call % 2]);
      expect(firstMismatch(await bits(out), first[call % 2])).toBe(-1);
      out.dispose();
      if (call % 10 === 0) {
        const w = srpoMatMul(wide[0], wide[1]);
        expect(firstMismatch(await bits(w), firstWide)).toBe(-1);
        w.dispose();
      }
    }
  });

  it('handles the empty cases: k = 0 gives zeros, m = 0 or n = 0 an empty product', async () => {
    const z = srpoMatMul(tf.zeros([3, 0]), tf.zeros([0, 4]));
    expect(z.shape).toEqual([3, 4]);
    expect(Array.from(await z.data())).toEqual(new Array(12).fill(0));
    expect(srpoMatMul(tf.zeros([0, 5]), tf.ones([5, 4])).shape).toEqual([0, 4]);
    expect(srpoMatMul(tf.ones([3, 5]), tf.zeros([5, 0])).shape).toEqual([3, 0]);
  });

  it('keeps a NaN in its own row', async () => {
    const a = seededValues(9 * 20, 3);
    a[2 * 20 + 7] = NaN;
    const c = await srpoMatMul(tf.tensor2d(a, [9, 20]), tf.tensor2d(seededValues(20 * 17, 4), [20, 17])).data();
    for (let i = 0; i < 9; i++) for (let j = 0; j < 17; j++) expect(Number.isNaN(c[i * 17 + j])).toBe(i === 2);
  });

  it('refuses operands that are not matrices, or whose inner dimensions differ, naming both shapes', () => {
    expect(() => srpoMatMul(tf.ones([2, 3, 4]), tf.ones([4, 2]))).toThrow(/SrpoMatMul: a and b must be 2-D/);
    expect(() => srpoMatMul(tf.ones([2, 3]), tf.ones([4, 2]))).toThrow(/SrpoMatMul: inner dimensions differ: op\(a\) is \[2, 3\], op\(b\) is \[4, 2\]/);
    expect(() => srpoMatMul(tf.ones([2, 3]), tf.ones([2, 3]), true, true)).toThrow(/op\(a\) is \[3, 2\], op\(b\) is \[3, 2\]/);
  });

  it('routes the learner products by `matMul`, auto taking SrpoMatMul except on AMD CPUs where oneDNN has AVX-512', async () => {
    // Independently of the addon: the CPU's flags and vendor, and the cap oneDNN would honour (none in tests).
    const { flags, vendor, capped } = cpuUnderTest();
    const avx512 = ['avx512f', 'avx512bw', 'avx512vl', 'avx512dq'].every((f) => flags.has(f));
    const kernels = loadSrpoKernels();
    expect(kernels.onednnAvx512).toBe(avx512 && !capped);
    expect(kernels.cpuVendor).toBe(vendor === 'GenuineIntel' ? 'intel' : vendor === 'AuthenticAMD' ? 'amd' : 'other');
    expect(kernels.gemmIsa).toBe(flags.has('avx512f') && !capped ? 'avx512' : 'avx2');
    expect(srpoMatMulRouted()).toBe(!(avx512 && !capped && vendor === 'AuthenticAMD'));

    const a = tf.tensor2d(seededValues(40 * 24, 7), [40, 24]);
    const b = tf.tensor2d(seededValues(24 * 30, 8), [24, 30]);
    const direct = await bits(srpoMatMul(a, b));
    configureSrpoKernels({ matMul: 'srpo' });
    expect(srpoMatMulRouted()).toBe(true);
    // The pool's workers spin longer when the products run on it (srpo-kernels.ts' syncWorkerSpin).
    expect(workerSpinMicroseconds()).toBe(1000);
    expect(backendLabel({ name: 'tensorflow' })).toBe(`tensorflow+srpo-kernels.${loadSrpoKernels().version}+srpo-matmul`);
    expect(firstMismatch(await bits(matMul2d(a, b)), direct)).toBe(-1);
    configureSrpoKernels({ matMul: 'tensorflow' });
    expect(srpoMatMulRouted()).toBe(false);
    expect(workerSpinMicroseconds()).toBe(100);
    expect(backendLabel({ name: 'tensorflow' })).toBe(`tensorflow+srpo-kernels.${loadSrpoKernels().version}`);
    const viaTf = await matMul2d(a, b).data<'float32'>();
    expect(worstError(await a.data<'float32'>(), await b.data<'float32'>(), viaTf, 40, 30, 24)).toBeLessThan(1);
    // Switching the fused kernels off takes the products back to TensorFlow's whatever `matMul` says.
    configureSrpoKernels({ matMul: 'srpo', enabled: false });
    try {
      expect(srpoMatMulRouted()).toBe(false);
    } finally {
      configureSrpoKernels({ enabled: true });
    }
  });
});
