import { readFileSync } from 'node:fs';
import * as tf from '@tensorflow/tfjs';
import { backendLabel, matMul2d } from './native-ops';
import { Policy } from './policy';
import { configureSrpoKernels, loadSrpoKernels, srpoKernelAvailable, srpoMatMulRouted, workerSpinMicroseconds } from './srpo-kernels';
import { SrpoTrainer } from './srpo-step';
import { bits, firstMismatch, makeSets, nativeBackend, seededValues, TINY } from './test/fixtures';

/**
 * `SrpoMatMul` (gemm-kernels.h) against float64 products written out here, not against the code
 * under test: every transpose, shapes that end mid-tile and cross the K, row and column blocks,
 * the empty cases, and the routing of the learner's products (`matMul: auto | srpo | tensorflow`).
 * Skips where the addon is not built, unless SRPO_REQUIRE_NATIVE_KERNELS=1 (CI).
 */
const required = process.env.SRPO_REQUIRE_NATIVE_KERNELS === '1';

interface Executor {
  binding: { TF_ATTR_BOOL: number };
  executeSingleOutput(name: string, attrs: unknown[], inputs: tf.Tensor[]): tf.Tensor;
}
const executor = (): Executor => tf.backend() as unknown as Executor;

/** SrpoMatMul(a, b) called directly, as TensorFlow's MatMul would be. */
function srpoMatMul(a: tf.Tensor, b: tf.Tensor, transposeA = false, transposeB = false): tf.Tensor {
  const bool = executor().binding.TF_ATTR_BOOL;
  return executor().executeSingleOutput(
    'SrpoMatMul',
    [
      { name: 'transpose_a', type: bool, value: transposeA },
      { name: 'transpose_b', type: bool, value: transposeB },
    ],
    [a, b],
  );
}

/** Row-major `[rows, cols]` values stored transposed (`[cols, rows]`). */
function transposed(x: Float32Array, rows: number, cols: number): Float32Array {
  const t = new Float32Array(x.length);
  for (let i = 0; i < rows; i++) for (let j = 0; j < cols; j++) t[j * rows + i] = x[i * cols + j];
  return t;
}

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

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);
/** The float32 next to `x` (a float32 value) towards +∞ (up) or −∞; finite, nonzero x only. */
function nextFloat32(x: number, up: boolean): number {
  f32[0] = x;
  u32[0] += (x > 0) === up ? 1 : -1;
  return f32[0];
}

/**
 * fma(a, b, c) in float32, rounded once (a, b, c float32 values), written out here from IEEE 754:
 * a·b is exact in float64 (48 significant bits); s = a·b + c rounds, and TwoSum gives its error
 * e exactly. fround(s) is then the correctly rounded result, except where s lies exactly halfway
 * between two float32 values and e ≠ 0, when e decides the side.
 */
function fma32(a: number, b: number, c: number): number {
  const p = a * b;
  const s = p + c;
  const bb = s - p;
  const e = p - (s - bb) + (c - bb);
  const r = Math.fround(s);
  if (e === 0 || r === s || r === 0 || !Number.isFinite(r)) return r;
  const other = nextFloat32(r, s > r);
  if (s !== (r + other) / 2) return r;
  return (e > 0) === (other > r) ? other : r;
}

/** One of the SrpoMatMul family called directly, with its outputs. */
function srpoMatMulOp(op: 'SrpoMatMulBias' | 'SrpoMatMulBiasResidual' | 'SrpoMatMulColumnSum', inputs: tf.Tensor[], transposeA = false, transposeB = false): tf.Tensor[] {
  const bool = executor().binding.TF_ATTR_BOOL;
  const attrs = [
    { name: 'transpose_a', type: bool, value: transposeA },
    { name: 'transpose_b', type: bool, value: transposeB },
  ];
  const be = tf.backend() as unknown as { executeMultipleOutputs(name: string, attrs: unknown[], inputs: tf.Tensor[], n: number): tf.Tensor[] };
  return be.executeMultipleOutputs(op, attrs, inputs, op === 'SrpoMatMulColumnSum' ? 2 : 1);
}

/** Each element of a·b ([m, k]·[k, n]) as one float32 FMA chain in k order. */
function fmaChains(a: Float32Array, b: Float32Array, m: number, n: number, k: number): Float32Array {
  const c = new Float32Array(m * n);
  for (let i = 0; i < m; i++) {
    for (let j = 0; j < n; j++) {
      let acc = 0;
      for (let p = 0; p < k; p++) acc = fma32(a[i * k + p], b[p * n + j], acc);
      c[i * n + j] = acc;
    }
  }
  return c;
}

/**
 * The column sums of x [rows, cols] in SrpoColumnSum's documented cascade (optimizer-kernels.h),
 * written out here in float32: rows in groups of 64 from row 0, each group summed in row order,
 * the group sums added in order into a total that starts at 0.
 */
function cascadeColumnSums(x: Float32Array, rows: number, cols: number): Float32Array {
  const out = new Float32Array(cols);
  for (let j = 0; j < cols; j++) {
    let total = 0;
    for (let r0 = 0; r0 < rows; r0 += 64) {
      let part = x[r0 * cols + j];
      for (let r = r0 + 1; r < Math.min(rows, r0 + 64); r++) part = Math.fround(part + x[r * cols + j]);
      total = Math.fround(total + part);
    }
    out[j] = total;
  }
  return out;
}

const asBits = (x: Float32Array): Uint32Array => new Uint32Array(x.buffer, x.byteOffset, x.length);

describe('SrpoMatMulBias, SrpoMatMulBiasResidual and SrpoMatMulColumnSum (a linear layer forward, a residual projection, a weight gradient with its bias gradient)', () => {
  beforeAll(nativeBackend);
  const available = (): boolean => ['SrpoMatMulBias', 'SrpoMatMulBiasResidual', 'SrpoMatMulColumnSum'].every((op) => srpoKernelAvailable(op));

  // Mid-tile edges, three K blocks, rows split (m >= n) and columns split (m < n) between threads.
  it.each([
    [7, 5, 3],
    [13, 37, 300],
    [70, 45, 600],
    [45, 70, 520],
  ])('[%i, %i] over k = %i: the product plus the bias is each FMA chain plus the bias, rounded once, for every transpose', async (m, n, k) => {
    if (!available()) return void expect(required).toBe(false);
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
    [13, 37, 300],
    [70, 45, 600],
    [45, 70, 520],
  ])('[%i, %i] over k = %i: the residual plus (the product plus the bias) rounds each addition in turn, as SrpoAddResidualBias', async (m, n, k) => {
    if (!available()) return void expect(required).toBe(false);
    const a = seededValues(m * k, 61 + m, 2);
    const b = seededValues(k * n, 67 + n, 2);
    const bias = seededValues(n, 71, 3);
    const h = seededValues(m * n, 73, 50);
    const chains = fmaChains(a, b, m, n, k);
    const expected = new Float32Array(m * n);
    for (let i = 0; i < m * n; i++) expected[i] = Math.fround(h[i] + Math.fround(chains[i] + bias[i % n]));
    const [out] = srpoMatMulOp('SrpoMatMulBiasResidual', [tf.tensor2d(a, [m, k]), tf.tensor2d(b, [k, n]), tf.tensor1d(bias), tf.tensor2d(h, [m, n])]);
    expect(firstMismatch(await bits(out), asBits(expected))).toBe(-1);
    // A reference that sums the three in another order differs somewhere (the test can fail).
    const other = new Float32Array(m * n);
    for (let i = 0; i < m * n; i++) other[i] = Math.fround(Math.fround(h[i] + bias[i % n]) + chains[i]);
    expect(firstMismatch(await bits(out), asBits(other))).not.toBe(-1);
    const separate = executor().executeSingleOutput('SrpoAddResidualBias', [], [tf.tensor2d(h, [m, n]), srpoMatMul(tf.tensor2d(a, [m, k]), tf.tensor2d(b, [k, n])), tf.tensor1d(bias)]);
    expect(firstMismatch(await bits(separate), asBits(expected))).toBe(-1);
    expect(() => srpoMatMulOp('SrpoMatMulBiasResidual', [tf.tensor2d(a, [m, k]), tf.tensor2d(b, [k, n]), tf.tensor1d(bias), tf.ones([m, n + 1])])).toThrow(
      new RegExp(`SrpoMatMulBiasResidual: residual must be \\[${m}, ${n}\\], the product's shape`),
    );
  });

  it('adds the bias to zeros for k = 0 (a −0 bias gives +0, as an addition does) and names a bias of the wrong size', async () => {
    if (!available()) return void expect(required).toBe(false);
    const [z] = srpoMatMulOp('SrpoMatMulBias', [tf.zeros([2, 0]), tf.zeros([0, 3]), tf.tensor1d([1.5, -0, -2])]);
    expect(Array.from(await z.data())).toEqual([1.5, 0, -2, 1.5, 0, -2]);
    expect(Object.is((await z.data())[1], 0)).toBe(true);
    expect(() => srpoMatMulOp('SrpoMatMulBias', [tf.ones([2, 3]), tf.ones([3, 4]), tf.ones([3])])).toThrow(/SrpoMatMulBias: bias must hold one value per column of the product: \[4\] or \[1, 4\]/);
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
  ])('[%i, %i] over k = %i: the product is SrpoMatMul\'s and the sums are b\'s column sums in SrpoColumnSum\'s cascade, bit for bit', async (m, n, k) => {
    if (!available()) return void expect(required).toBe(false);
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
    if (!available()) return void expect(required).toBe(false);
    const b = seededValues(5 * 3, 9);
    const [p0, s0] = srpoMatMulOp('SrpoMatMulColumnSum', [tf.zeros([0, 5]), tf.tensor2d(b, [5, 3])]);
    expect(p0.shape).toEqual([0, 3]);
    expect(firstMismatch(await bits(s0), asBits(cascadeColumnSums(b, 5, 3)))).toBe(-1);
    const [p1, s1] = srpoMatMulOp('SrpoMatMulColumnSum', [tf.zeros([4, 0]), tf.zeros([0, 3])]);
    expect(Array.from(await p1.data())).toEqual(new Array(12).fill(0));
    expect(Array.from(await s1.data())).toEqual([0, 0, 0]);
    expect(() => srpoMatMulOp('SrpoMatMulColumnSum', [tf.ones([2, 3]), tf.ones([4, 3])], false, true)).toThrow(/SrpoMatMulColumnSum: column sums are of b as stored: transpose_b must be false/);
  });
});

describe('SrpoMatMul (the learner products)', () => {
  beforeAll(nativeBackend);
  afterEach(() => configureSrpoKernels({ matMul: 'auto' }));
  const available = (): boolean => srpoKernelAvailable('SrpoMatMul');

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
    if (!available()) return void expect(required).toBe(false);
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
    if (!available()) return void expect(required).toBe(false);
    const a = seededValues(m * k, 5 + m, 2);
    const b = seededValues(k * n, 9 + n, 2);
    const c = await srpoMatMul(tf.tensor2d(a, [m, k]), tf.tensor2d(b, [k, n])).data<'float32'>();
    const expected = new Float32Array(m * n);
    for (let i = 0; i < m; i++) {
      for (let j = 0; j < n; j++) {
        let acc = 0;
        for (let p = 0; p < k; p++) acc = fma32(a[i * k + p], b[p * n + j], acc);
        expected[i * n + j] = acc;
      }
    }
    const got = new Uint32Array(c.buffer, c.byteOffset, c.length);
    expect(firstMismatch(got, new Uint32Array(expected.buffer))).toBe(-1);
  });

  it('gives each row and column the same bits whatever the rest of the product (threads and blocks)', async () => {
    if (!available()) return void expect(required).toBe(false);
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
    if (!available()) return void expect(required).toBe(false);
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
    if (!available()) return void expect(required).toBe(false);
    const z = srpoMatMul(tf.zeros([3, 0]), tf.zeros([0, 4]));
    expect(z.shape).toEqual([3, 4]);
    expect(Array.from(await z.data())).toEqual(new Array(12).fill(0));
    expect(srpoMatMul(tf.zeros([0, 5]), tf.ones([5, 4])).shape).toEqual([0, 4]);
    expect(srpoMatMul(tf.ones([3, 5]), tf.zeros([5, 0])).shape).toEqual([3, 0]);
  });

  it('keeps a NaN in its own row', async () => {
    if (!available()) return void expect(required).toBe(false);
    const a = seededValues(9 * 20, 3);
    a[2 * 20 + 7] = NaN;
    const c = await srpoMatMul(tf.tensor2d(a, [9, 20]), tf.tensor2d(seededValues(20 * 17, 4), [20, 17])).data();
    for (let i = 0; i < 9; i++) for (let j = 0; j < 17; j++) expect(Number.isNaN(c[i * 17 + j])).toBe(i === 2);
  });

  it('refuses operands that are not matrices, or whose inner dimensions differ, naming both shapes', () => {
    if (!available()) return void expect(required).toBe(false);
    expect(() => srpoMatMul(tf.ones([2, 3, 4]), tf.ones([4, 2]))).toThrow(/SrpoMatMul: a and b must be 2-D/);
    expect(() => srpoMatMul(tf.ones([2, 3]), tf.ones([4, 2]))).toThrow(/SrpoMatMul: inner dimensions differ: op\(a\) is \[2, 3\], op\(b\) is \[4, 2\]/);
    expect(() => srpoMatMul(tf.ones([2, 3]), tf.ones([2, 3]), true, true)).toThrow(/op\(a\) is \[3, 2\], op\(b\) is \[3, 2\]/);
  });

  it('routes the learner products by `matMul`, auto taking SrpoMatMul except on AMD CPUs where oneDNN has AVX-512', async () => {
    if (!available()) return void expect(required).toBe(false);
    // Independently of the addon: the CPU's flags and vendor, and the cap oneDNN would honour (none in tests).
    const cpuinfo = readFileSync('/proc/cpuinfo', 'utf8');
    const flags = new Set(/^flags\s*:(.*)$/m.exec(cpuinfo)?.[1].trim().split(/\s+/) ?? []);
    const vendor = /^vendor_id\s*:\s*(\S+)/m.exec(cpuinfo)?.[1];
    const avx512 = ['avx512f', 'avx512bw', 'avx512vl', 'avx512dq'].every((f) => flags.has(f));
    const capped = /^(SSE41|AVX|AVX2|AVX2_.*)$/i.test(process.env.ONEDNN_MAX_CPU_ISA ?? process.env.DNNL_MAX_CPU_ISA ?? '');
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

  it('trains to the same loss and gradient norm through either kernel (float32 agreement)', async () => {
    if (!available()) return void expect(required).toBe(false);
    const run = async (matMul: 'srpo' | 'tensorflow') => {
      configureSrpoKernels({ matMul });
      const policy = Policy.create('gemm', TINY, 3);
      const trainer = new SrpoTrainer(policy, { schedule: { kind: 'constant', lr: 1e-3 } });
      const sets = await makeSets(policy, 9, 6);
      const first = await trainer.update(sets);
      const second = await trainer.update(sets);
      trainer.dispose();
      policy.dispose();
      return [first, second];
    };
    const [s1, s2] = await run('srpo');
    const [t1, t2] = await run('tensorflow');
    expect(Number.isFinite(s1.loss)).toBe(true);
    expect(Math.abs(s1.loss - t1.loss)).toBeLessThan(1e-6);
    expect(Math.abs(s2.loss - t2.loss)).toBeLessThan(1e-5);
    expect(Math.abs(s1.gradNorm - t1.gradNorm) / t1.gradNorm).toBeLessThan(1e-5);
  });
});
