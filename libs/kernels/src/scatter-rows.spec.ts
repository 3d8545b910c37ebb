import * as tf from '@tensorflow/tfjs';
import { gatherRows } from './native-ops';
import { loadSrpoKernels } from './srpo-kernels';
import { describeNative } from './test/describe-native';
import { bits, firstMismatch, nativeBackend, seededValues } from './test/fixtures';

/**
 * `SrpoScatterRows` (elementwise-kernels.h), the gradient of `gatherRows`: checked against sums
 * written out here in JavaScript (each row added in index order, rounded to float32 per add), and
 * `gatherRows`' gradient against tfjs's own gather gradient (`UnsortedSegmentSum`); `SrpoGatherRows`,
 * its forward, against tf.gather's bits (the embedding through both against its one-hot product is
 * libs/policy's native-kernels.spec.ts).
 * Skips where the addon is not built, unless SRPO_REQUIRE_NATIVE_KERNELS=1 (CI).
 */
interface Executor {
  binding: { TF_ATTR_INT: number };
  executeSingleOutput(name: string, attrs: unknown[], inputs: tf.Tensor[]): tf.Tensor;
}

function scatterRows(g: tf.Tensor, rows: tf.Tensor, n: number): tf.Tensor {
  const be = tf.backend() as unknown as Executor;
  return be.executeSingleOutput('SrpoScatterRows', [{ name: 'n', type: be.binding.TF_ATTR_INT, value: n }], [g, rows]);
}

/** y[rows[r]] += g[r] in r order, float32 after each add. */
function expected(g: Float32Array, rows: number[], n: number, d: number): Float32Array {
  const y = new Float32Array(n * d);
  rows.forEach((row, r) => {
    for (let j = 0; j < d; j++) y[row * d + j] = Math.fround(y[row * d + j] + g[r * d + j]);
  });
  return y;
}

describeNative(['SrpoScatterRows', 'SrpoGatherRows'], 'SrpoScatterRows (the gradient of gatherRows on the native backend)', () => {
  beforeAll(nativeBackend);

  it('is registered once the addon is loaded (required in CI)', () => {
    expect(loadSrpoKernels().ops).toContain('SrpoScatterRows');
  });

  it('adds each row into its index, repeated indices in order, zeros elsewhere, at sizes that split the columns over the cores', async () => {
    for (const [r, n, d] of [
      [1, 3, 1],
      [5, 4, 3],
      [300, 250, 200],
    ]) {
      const g = seededValues(r * d, 3 + r, 4);
      // Indices hit some rows several times (i·7 mod n) and leave others empty (row n − 1 when r < n).
      const rows = Array.from({ length: r }, (_, i) => (i * 7) % Math.max(1, n - 1));
      const y = scatterRows(tf.tensor2d(g, [r, d]), tf.tensor1d(rows, 'int32'), n);
      expect(y.shape).toEqual([n, d]);
      expect(firstMismatch(await bits(y), new Uint32Array(expected(g, rows, n, d).buffer))).toBe(-1);
    }
  });

  it('gives an empty result for n = 0 or no columns, and zeros for no rows', async () => {
    expect(scatterRows(tf.zeros([0, 4]), tf.tensor1d([], 'int32'), 0).shape).toEqual([0, 4]);
    expect(scatterRows(tf.zeros([2, 0]), tf.tensor1d([0, 1], 'int32'), 3).shape).toEqual([3, 0]);
    expect(Array.from(await scatterRows(tf.zeros([0, 2]), tf.tensor1d([], 'int32'), 2).data())).toEqual([0, 0, 0, 0]);
  });

  it('refuses an index outside [0, n), naming it, and mismatched shapes', () => {
    expect(() => scatterRows(tf.ones([3, 2]), tf.tensor1d([0, 4, 1], 'int32'), 4)).toThrow(/SrpoScatterRows: rows\[1\] = 4 is outside \[0, 4\)/);
    expect(() => scatterRows(tf.ones([2, 2]), tf.tensor1d([-1, 0], 'int32'), 4)).toThrow(/rows\[0\] = -1 is outside/);
    expect(() => scatterRows(tf.ones([3, 2]), tf.tensor1d([0, 1], 'int32'), 4)).toThrow(/SrpoScatterRows: g must be \[R, D\] and rows \[R\]/);
  });

  it("gives gatherRows the same value and gradient bits as tfjs's gather and its UnsortedSegmentSum gradient", async () => {
    const x = tf.tensor2d(seededValues(40 * 24, 17), [40, 24]);
    const rows = tf.tensor1d([3, 39, 0, 7, 8, 21], 'int32');
    const weight = tf.tensor2d(seededValues(6 * 24, 19), [6, 24]);
    const loss = (gather: (v: tf.Tensor2D) => tf.Tensor2D) => (v: tf.Tensor) => tf.sum(tf.mul(gather(v as tf.Tensor2D), weight));
    const native = tf.valueAndGrad(loss((v) => gatherRows(v, rows)))(x);
    const composite = tf.valueAndGrad(loss((v) => tf.gather<tf.Tensor2D>(v, rows)))(x);
    expect(firstMismatch(await bits(native.value), await bits(composite.value))).toBe(-1);
    expect(firstMismatch(await bits(native.grad), await bits(composite.grad))).toBe(-1);
    // Rows not gathered get exactly zero gradient.
    const grad = await native.grad.data();
    expect(Array.from(grad.slice(1 * 24, 2 * 24))).toEqual(new Array(24).fill(0));
  });

  it('SrpoGatherRows refuses an index outside [0, N), naming it, and mismatched shapes', () => {
    const be = tf.backend() as unknown as Executor;
    const gather = (x: tf.Tensor, rows: tf.Tensor) => be.executeSingleOutput('SrpoGatherRows', [], [x, rows]);
    expect(() => gather(tf.ones([4, 2]), tf.tensor1d([0, 4], 'int32'))).toThrow(/SrpoGatherRows: rows\[1\] = 4 is outside \[0, 4\)/);
    expect(() => gather(tf.ones([4]), tf.tensor1d([0], 'int32'))).toThrow(/SrpoGatherRows: x must be \[N, D\] and rows \[R\]/);
    expect(gather(tf.ones([4, 3]), tf.tensor1d([], 'int32')).shape).toEqual([0, 3]);
  });
});
