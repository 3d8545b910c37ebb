import * as tf from '@tensorflow/tfjs';

/** What a masked score gets: exp of it underflows to 0 in float32, as with transformers' finfo.min. */
export const MASKED_SCORE = -1e9;

/**
 * The additive causal mask `[T, T]` (0 on and below the diagonal, {@link MASKED_SCORE} above), made
 * on the device for each call rather than cached per length. A cache keyed by length grows without
 * bound where lengths vary (a sampler's every prefix, a server's every prompt: T² values each, tens
 * of GB for a model's range of lengths), while making it is O(T²) element-wise work, small beside
 * the attention that uses it. Call inside a `tf.tidy` (the forward's own): the result is owned there.
 *
 * @param repeat stack the mask this many times along rows, `[repeat·T, T]` (one per query head of a
 *   key/value group, as llama-ops' ropeAttention takes it)
 */
export function causalMask(t: number, repeat = 1): tf.Tensor2D {
  return tf.tidy(() => {
    const rows = tf.range(0, t, 1, 'int32').reshape<tf.Tensor2D>([t, 1]);
    const cols = tf.range(0, t, 1, 'int32').reshape<tf.Tensor2D>([1, t]);
    const future = tf.greater(cols, rows);
    const mask = tf.where<tf.Tensor2D>(future, tf.fill([t, t], MASKED_SCORE), tf.zeros([t, t]));
    return repeat === 1 ? mask : tf.tile(mask, [repeat, 1]);
  });
}

/** Lengths up to this are cached by {@link CausalMasks}: all of them together hold Σ_{T≤64} T² = 89,440 values per repeat (0.36 MB). */
export const CACHED_MASK_MAX_LENGTH = 64;

/**
 * A model's causal masks: short lengths (≤ {@link CACHED_MASK_MAX_LENGTH}, a small model's sampler
 * steps, where remaking the mask would be a visible share of a forward) cached, so the cache is
 * bounded whatever lengths come; longer ones made per call by {@link causalMask}, owned by the
 * caller's tidy.
 */
export class CausalMasks {
  private readonly cache = new Map<number, tf.Tensor2D>();

  constructor(private readonly repeat = 1) {}

  /** `[repeat·T, T]`; call inside a `tf.tidy` (a mask longer than the cached ones is a new tensor). */
  get(t: number): tf.Tensor2D {
    if (t > CACHED_MASK_MAX_LENGTH) return causalMask(t, this.repeat);
    let m = this.cache.get(t);
    if (!m) {
      m = tf.keep(causalMask(t, this.repeat));
      this.cache.set(t, m);
    }
    return m;
  }

  /** Lengths cached now. */
  get cachedLengths(): number[] {
    return [...this.cache.keys()];
  }

  dispose(): void {
    for (const m of this.cache.values()) m.dispose();
    this.cache.clear();
  }
}
