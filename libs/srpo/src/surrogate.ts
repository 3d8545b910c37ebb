import * as tf from '@tensorflow/tfjs';

/**
 * The PPO clipped surrogate (Schulman et al. 2017, arXiv:1707.06347), shared by
 * SRPO (one ratio per set), GSPO (per member) and GRPO (per token). Shapes are
 * whatever unit the caller clips at; `advantage` broadcasts against `ratio`.
 */

/**
 * Importance ratio `r = exp(log r)` from a log-ratio `log π_new − log π_old`.
 * Same shape as the input.
 */
export function ratio<R extends tf.Rank>(logRatio: tf.Tensor<R>): tf.Tensor<R> {
  return tf.exp(logRatio);
}

/**
 * `clip(r, 1 − ε_low, 1 + ε_high)`. Same shape as `importanceRatio`.
 *
 * The gradient is 0 strictly outside the range and passes through on its bounds.
 */
export function clippedRatio<R extends tf.Rank>(importanceRatio: tf.Tensor<R>, clipLow: number, clipHigh: number): tf.Tensor<R> {
  return tf.clipByValue(importanceRatio, 1 - clipLow, 1 + clipHigh);
}

/**
 * Clipped surrogate `min(r · A, clip(r, 1 − ε_low, 1 + ε_high) · A)`, to be maximised.
 *
 * Pessimistic in both directions: once r has moved past the bound on the side
 * that the advantage favours (r > 1 + ε_high with A > 0, or r < 1 − ε_low with
 * A < 0) the term is constant and contributes no gradient; on the other side it
 * keeps the unclipped, larger penalty.
 *
 * @param importanceRatio any shape, r >= 0
 * @param advantage broadcastable to `importanceRatio`
 */
export function clippedSurrogate<R extends tf.Rank>(
  importanceRatio: tf.Tensor<R>,
  advantage: tf.Tensor,
  clipLow: number,
  clipHigh: number,
): tf.Tensor<R> {
  return tf.tidy(() =>
    tf.minimum(tf.mul(importanceRatio, advantage), tf.mul(clippedRatio(importanceRatio, clipLow, clipHigh), advantage)),
  );
}

/**
 * 1 where the low clip is active, `r < 1 − ε_low` and `A < 0`, else 0 (float32).
 * These are exactly the units whose surrogate gradient the low clip zeroes.
 */
export function clipActiveLow<R extends tf.Rank>(importanceRatio: tf.Tensor<R>, advantage: tf.Tensor, clipLow: number): tf.Tensor<R> {
  return tf.tidy(() =>
    tf.cast(tf.logicalAnd(tf.less(importanceRatio, 1 - clipLow), tf.less(advantage, 0)), 'float32'),
  ) as tf.Tensor<R>;
}

/**
 * 1 where the high clip is active, `r > 1 + ε_high` and `A > 0`, else 0 (float32).
 */
export function clipActiveHigh<R extends tf.Rank>(importanceRatio: tf.Tensor<R>, advantage: tf.Tensor, clipHigh: number): tf.Tensor<R> {
  return tf.tidy(() =>
    tf.cast(tf.logicalAnd(tf.greater(importanceRatio, 1 + clipHigh), tf.greater(advantage, 0)), 'float32'),
  ) as tf.Tensor<R>;
}
