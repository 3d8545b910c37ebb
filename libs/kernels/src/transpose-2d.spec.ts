import * as tf from '@tensorflow/tfjs';
import { transpose2d } from './native-ops';
import { describeNative } from './test/describe-native';
import { bits, firstMismatch, nativeBackend, seededValues } from './test/fixtures';

/**
 * `SrpoTranspose` (elementwise-kernels.h) through `transpose2d`: every element where it belongs,
 * against an index map written out here; the same bits as tf.transpose's; its gradient; the
 * empty and one-element cases; the error. Skips where the addon is not built, unless
 * SRPO_REQUIRE_NATIVE_KERNELS=1 (CI).
 */
describeNative(['SrpoTranspose'], 'transpose2d (SrpoTranspose)', () => {
  beforeAll(nativeBackend);

  it.each([
    [1, 1],
    [64, 128],
    [17, 33],
    [300, 5],
  ])('[%i, %i]: y[j][i] = x[i][j], the bits of tf.transpose', async (r, c) => {
    const v = seededValues(r * c, r + c, 3);
    v[0] = NaN;
    if (v.length > 1) v[v.length - 1] = -0;
    const x = tf.tensor2d(v, [r, c]);
    const y = transpose2d(x);
    expect(y.shape).toEqual([c, r]);
    const got = await y.data();
    for (let i = 0; i < r; i++) for (let j = 0; j < c; j++) expect(Object.is(got[j * r + i], v[i * c + j])).toBe(true);
    expect(firstMismatch(await bits(y), await bits(tf.transpose(x)))).toBe(-1);
  });

  it('passes the gradient back transposed, and handles empty matrices', async () => {
    const x = tf.tensor2d(seededValues(6, 1), [2, 3]);
    const w = tf.tensor2d([1, 2, 3, 4, 5, 6], [3, 2]);
    // d/dx Σ (xᵀ ∘ w) = wᵀ
    const g = tf.grad((t: tf.Tensor) => tf.sum(tf.mul(transpose2d(t as tf.Tensor2D), w)))(x);
    expect(Array.from(await g.data())).toEqual([1, 3, 5, 2, 4, 6]);
    expect(transpose2d(tf.zeros<tf.Rank.R2>([0, 5])).shape).toEqual([5, 0]);
    expect(() => transpose2d(tf.zeros([2, 2, 2]) as unknown as tf.Tensor2D)).toThrow(/SrpoTranspose: x must be 2-D/);
  });
});
