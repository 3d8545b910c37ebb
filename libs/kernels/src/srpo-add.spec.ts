import * as tf from '@tensorflow/tfjs';
import { addResidualBias } from './fused-ops';
import { configureSrpoKernels, loadSrpoKernels, srpoAddRouted } from './srpo-kernels';
import { describeNative } from './test/describe-native';
import { bits, firstMismatch, nativeBackend, seededValues } from './test/fixtures';

/**
 * tfjs's `Add` routed to `SrpoAdd` (elementwise-kernels.h): every sum must be bit for bit the
 * float32 sum, checked against JavaScript's own (a float64 sum of two floats rounded once to
 * float32 is the exactly rounded float32 sum) and against TensorFlow's kernel (the switch off).
 * Skips where the addon is not built, unless SRPO_REQUIRE_NATIVE_KERNELS=1 (CI).
 */
function expectedBits(a: Float32Array, b: Float32Array, rowLength?: number): Uint32Array {
  const y = new Float32Array(a.length);
  for (let i = 0; i < a.length; i++) y[i] = Math.fround(a[i] + b[rowLength ? i % rowLength : i]);
  return new Uint32Array(y.buffer);
}

/** The same add with TensorFlow's own kernel (routing switched off for the call). */
async function tensorflowAdd(a: tf.Tensor, b: tf.Tensor): Promise<Uint32Array> {
  configureSrpoKernels({ enabled: false });
  try {
    return await bits(tf.add(a, b));
  } finally {
    configureSrpoKernels({ enabled: true });
  }
}

describeNative(['SrpoAdd', 'SrpoAddResidualBias'], 'SrpoAdd (tfjs adds on the native backend)', () => {
  beforeAll(nativeBackend);
  const routed = (): boolean => {
    loadSrpoKernels();
    return srpoAddRouted();
  };

  it('routes adds once the addon is loaded (required in CI)', () => {
    expect(routed()).toBe(true);
    configureSrpoKernels({ enabled: false });
    expect(srpoAddRouted()).toBe(false);
    configureSrpoKernels({ enabled: true, adds: false });
    expect(srpoAddRouted()).toBe(false);
    configureSrpoKernels({ adds: true });
    expect(srpoAddRouted()).toBe(true);
  });

  it('adds arrays of one shape exactly, split over threads and with a ragged tail', async () => {
    // [1025, 1031]: above the 32,768-element limit below which the kernel runs on the calling thread ([2048, 128] too; [3, 1001] and [7] below it).
    for (const shape of [[1025, 1031], [2048, 128], [3, 1001], [7], []] as number[][]) {
      const n = shape.reduce((p, d) => p * d, 1);
      const av = seededValues(n, 11 + n, 3);
      const bv = seededValues(n, 29 + n, 1e-3);
      const a = tf.tensor(av, shape);
      const b = tf.tensor(bv, shape);
      const got = await bits(tf.add(a, b));
      expect(firstMismatch(got, expectedBits(av, bv))).toBe(-1);
      expect(firstMismatch(got, await tensorflowAdd(a, b))).toBe(-1);
      expect(tf.add(a, b).shape).toEqual(shape);
      // The kernel itself, called by name, gives the same bits.
      const direct = (tf.backend() as unknown as { executeSingleOutput(op: string, attrs: never[], inputs: tf.Tensor[]): tf.Tensor }).executeSingleOutput(
        'SrpoAdd',
        [],
        [a, b],
      );
      expect(firstMismatch(await bits(direct), got)).toBe(-1);
    }
  });

  it('adds a row [C] to every row of [..., C], in either operand order', async () => {
    const [n, c] = [4096, 96];
    const xv = seededValues(n * c, 5, 2);
    const rv = seededValues(c, 6, 2);
    const x = tf.tensor3d(xv, [2, n / 2, c]);
    const row = tf.tensor1d(rv);
    const want = expectedBits(xv, rv, c);
    expect(firstMismatch(await bits(tf.add(x, row)), want)).toBe(-1);
    expect(firstMismatch(await bits(tf.add(row, x)), want)).toBe(-1);
    expect(tf.add(row, x).shape).toEqual([2, n / 2, c]);
    expect(firstMismatch(await bits(tf.add(x, row)), await tensorflowAdd(x, row))).toBe(-1);
  });

  it("adds a [1, C] row (normLinear's bias row) to a [N, C], and a [1, 1, C] to a [B, T, C]", async () => {
    const [n, c] = [2048, 384];
    const xv = seededValues(n * c, 15, 2);
    const rv = seededValues(c, 16, 2);
    const x = tf.tensor2d(xv, [n, c]);
    const row = tf.tensor2d(rv, [1, c]);
    const want = expectedBits(xv, rv, c);
    expect(firstMismatch(await bits(tf.add(x, row)), want)).toBe(-1);
    expect(firstMismatch(await bits(tf.add(row, x)), want)).toBe(-1);
    expect(tf.add(x, row).shape).toEqual([n, c]);
    expect(firstMismatch(await bits(tf.add(x, row)), await tensorflowAdd(x, row))).toBe(-1);
    const x3 = x.reshape([4, n / 4, c]);
    const row3 = row.reshape([1, 1, c]);
    expect(firstMismatch(await bits(tf.add(x3, row3)), want)).toBe(-1);
    expect(tf.add(row3, x3).shape).toEqual([4, n / 4, c]);
  });

  it('adds a residual, a product and its bias in one op, bit for bit the two adds (SrpoAddResidualBias)', async () => {
    for (const [n, c] of [
      [2048, 128],
      [5, 7],
    ]) {
      const [av, bv, rv] = [seededValues(n * c, 31 + n, 2), seededValues(n * c, 32 + n, 1e-2), seededValues(c, 33 + c, 3)];
      const [a, b, row] = [tf.tensor2d(av, [n, c]), tf.tensor2d(bv, [n, c]), tf.tensor1d(rv)];
      const got = await bits(addResidualBias(a, b, row) as tf.Tensor);
      const want = new Float32Array(n * c);
      for (let i = 0; i < want.length; i++) want[i] = Math.fround(av[i] + Math.fround(bv[i] + rv[i % c]));
      expect(firstMismatch(got, new Uint32Array(want.buffer))).toBe(-1);
      configureSrpoKernels({ enabled: false });
      try {
        expect(firstMismatch(got, await bits(tf.add(a, tf.add(b, row))))).toBe(-1);
      } finally {
        configureSrpoKernels({ enabled: true });
      }
    }
    expect(() => addResidualBias(tf.zeros([2, 3]), tf.zeros([2, 3]), tf.zeros<tf.Rank.R1>([2]))).toThrow(
      /SrpoAddResidualBias: b must have a's shape \[\.\.\., C\] and row be \[C\]/,
    );
  });

  it('keeps IEEE special values: infinities, NaN, signed zeros, overflow, and TensorFlow’s flushed subnormals', async () => {
    const av = Float32Array.from([Infinity, -Infinity, Infinity, NaN, -0, -0, 3e38, -3e38, 1, 1e-45, 1e-39]);
    const bv = Float32Array.from([1, -5, -Infinity, 2, -0, 0, 3e38, -3e38, -1, 1e-45, -3e-39]);
    const a = tf.tensor1d(av);
    const b = tf.tensor1d(bv);
    const got = await bits(tf.add(a, b));
    const js = new Float32Array(got.buffer);
    expect(js[0]).toBe(Infinity);
    expect(js[1]).toBe(-Infinity);
    expect(Number.isNaN(js[2])).toBe(true);
    expect(Number.isNaN(js[3])).toBe(true);
    expect(Object.is(js[4], -0)).toBe(true);
    expect(Object.is(js[5], 0)).toBe(true);
    expect(js[6]).toBe(Infinity);
    expect(js[7]).toBe(-Infinity);
    expect(Object.is(js[8], 0)).toBe(true);
    // Subnormals: whatever TensorFlow's own kernel does with them (it runs with flush-to-zero).
    expect(got.slice(9)).toEqual((await tensorflowAdd(a, b)).slice(9));
  });

  it('leaves other adds to TensorFlow: other broadcasts and integer sums', async () => {
    const col = tf.tensor2d([1, 2], [2, 1]);
    const m = tf.tensor2d([10, 20, 30, 40, 50, 60], [2, 3]);
    expect(await tf.add(col, m).array()).toEqual([
      [11, 21, 31],
      [42, 52, 62],
    ]);
    const ints = tf.add(tf.tensor1d([1, 2], 'int32'), tf.tensor1d([3, 4], 'int32'));
    expect(ints.dtype).toBe('int32');
    expect(await ints.array()).toEqual([4, 6]);
  });

  it('refuses operands of other shapes by name when called directly', () => {
    const backend = tf.backend() as unknown as { executeSingleOutput(op: string, attrs: never[], inputs: tf.Tensor[]): tf.Tensor };
    expect(() => backend.executeSingleOutput('SrpoAdd', [], [tf.zeros([2, 3]), tf.zeros([3, 2])])).toThrow(/SrpoAdd: b must have a's shape/);
    // A row with more axes than a would broadcast a to b's shape: not this kernel's case.
    expect(() => backend.executeSingleOutput('SrpoAdd', [], [tf.zeros([3]), tf.zeros([1, 3])])).toThrow(/SrpoAdd: b must have a's shape/);
    expect(() => backend.executeSingleOutput('SrpoAdd', [], [tf.zeros([2, 3]), tf.zeros([2, 1, 3])])).toThrow(/SrpoAdd: b must have a's shape/);
  });
});
