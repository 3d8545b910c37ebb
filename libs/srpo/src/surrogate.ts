import * as tf from '@tensorflow/tfjs';

/**
 * The PPO clipped surrogate (Schulman et al. 2017, arXiv:1707.06347), shared by
 * SRPO (one ratio per set), GSPO (per member) and GRPO (per token). Shapes are
 * whatever unit the caller clips at; `advantage` broadcasts against `ratio`.
 */

/**
 * Importance ratio `r = exp(log r)` from a log-ratio `log π_new − log π_old`.
 * Same shape as the input. +∞ for log r > 88.72 in float32: the objectives evaluate the
 * surrogate with {@link boundedClippedSurrogate} and report {@link reportedRatio} instead.
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
 * Takes r itself, so an r of +∞ gives ±∞ or NaN; the objectives go through
 * {@link boundedClippedSurrogate}, which starts from log r.
 *
 * Pessimistic in both directions: once r has moved past the bound on the side
 * that the advantage favours (r > 1 + ε_high with A > 0, or r < 1 − ε_low with
 * A < 0) the term is constant and contributes no gradient; on the other side it
 * keeps the unclipped, larger penalty.
 *
 * @param importanceRatio any shape, r >= 0
 * @param advantage broadcastable to `importanceRatio`
 */
export function clippedSurrogate<R extends tf.Rank>(importanceRatio: tf.Tensor<R>, advantage: tf.Tensor, clipLow: number, clipHigh: number): tf.Tensor<R> {
  return tf.tidy(() => surrogateTerms(importanceRatio, advantage, clipLow, clipHigh, null).value);
}

/**
 * The terms of the (dual-)clipped surrogate: `unclipped = r·A`, `clipped = clip(r)·A`,
 * `ppo = min(unclipped, clipped)` and the surrogate `value` (`ppo`, or with c, `max(ppo, c·A)`
 * where A < 0). {@link clippedSurrogate} and {@link dualClippedSurrogate} return `value`;
 * {@link boundedClippedSurrogate} keeps the others for its written-out gradient.
 */
function surrogateTerms<R extends tf.Rank>(
  importanceRatio: tf.Tensor<R>,
  advantage: tf.Tensor,
  clipLow: number,
  clipHigh: number,
  clipRatioC: number | null,
): { unclipped: tf.Tensor<R>; clipped: tf.Tensor<R>; ppo: tf.Tensor<R>; value: tf.Tensor<R> } {
  const unclipped = tf.mul<tf.Tensor<R>>(importanceRatio, advantage);
  const clipped = tf.mul<tf.Tensor<R>>(clippedRatio(importanceRatio, clipLow, clipHigh), advantage);
  const ppo = tf.minimum<tf.Tensor<R>>(unclipped, clipped);
  const value = clipRatioC === null ? ppo : (tf.where(tf.less(advantage, 0), tf.maximum(ppo, tf.mul(advantage, clipRatioC)), ppo) as tf.Tensor<R>);
  return { unclipped, clipped, ppo, value };
}

/**
 * 1 where the low clip is active, `r < 1 − ε_low` and `A < 0`, else 0 (float32).
 * These are exactly the units whose surrogate gradient the low clip zeroes.
 */
export function clipActiveLow<R extends tf.Rank>(importanceRatio: tf.Tensor<R>, advantage: tf.Tensor, clipLow: number): tf.Tensor<R> {
  return tf.tidy(() => tf.cast(tf.logicalAnd(tf.less(importanceRatio, 1 - clipLow), tf.less(advantage, 0)), 'float32')) as tf.Tensor<R>;
}

/**
 * 1 where the high clip is active, `r > 1 + ε_high` and `A > 0`, else 0 (float32).
 */
export function clipActiveHigh<R extends tf.Rank>(importanceRatio: tf.Tensor<R>, advantage: tf.Tensor, clipHigh: number): tf.Tensor<R> {
  return tf.tidy(() => tf.cast(tf.logicalAnd(tf.greater(importanceRatio, 1 + clipHigh), tf.greater(advantage, 0)), 'float32')) as tf.Tensor<R>;
}

// ---------------------------------------------------------------------------
// Overflow-free evaluation from log-ratios
// ---------------------------------------------------------------------------

/** `log(float32 max) ≈ 88.7228`: `exp` of anything larger is +∞ in float32. */
export const LOG_FLOAT32_MAX = Math.log(3.4028234663852886e38);

/**
 * The largest |log r| the objective takes at face value: `log(float32 max) / 2 ≈ 44.3614`,
 * so r ≤ e^44.36 ≈ 1.84e19 and r² (a squared gradient in a norm) still fits float32.
 * A unit (set, member or token) whose log-ratio lies beyond ±MAX_LOG_RATIO is counted as
 * out of range (`ratio/out_of_range`); reported ratios saturate at e^±MAX_LOG_RATIO.
 */
export const MAX_LOG_RATIO = LOG_FLOAT32_MAX / 2;

/**
 * Bound on one token's `|log π_new − log π_old|`, 1e6 nats. No real log-prob comes near it
 * (floor values such as −9999 are far inside); it keeps a sum of up to 3e32 token
 * log-ratios finite, and turns a behaviour log-prob below the float32 range (−1e39 is a
 * finite JS number but −∞ in float32) into a finite, out-of-range log-ratio instead of +∞.
 * The gradient through a bounded token is 0.
 */
export const TOKEN_LOG_RATIO_LIMIT = 1e6;

/**
 * How far past a clip bound (in log-ratio) the log-ratio is bounded before `exp`. Past the
 * bound the clip has already made the term constant, so any positive margin gives the same
 * loss and gradient; 1 keeps r strictly past the bound, so clip diagnostics still see it.
 */
export const CLIP_BOUND_MARGIN = 1;

/** The clip parameters of {@link boundedClippedSurrogate}. */
export interface SurrogateClip {
  /** ε_low: ratios are clipped below at 1 − ε_low. */
  clipLow: number;
  /** ε_high: ratios are clipped above at 1 + ε_high. */
  clipHigh: number;
  /** c of the dual clip (> 1), or null for none. */
  clipRatioC: number | null;
}

/**
 * Reported ratio `exp(clip(log r, −MAX_LOG_RATIO, MAX_LOG_RATIO))`: the true ratio inside
 * the representable range, saturated at e^±44.36 outside it (never +∞ or NaN). For
 * diagnostics and reports only; the loss uses {@link boundedLogRatio}.
 */
export function reportedRatio<R extends tf.Rank>(logRatio: tf.Tensor<R>): tf.Tensor<R> {
  return tf.tidy(() => tf.exp(tf.clipByValue(logRatio, -MAX_LOG_RATIO, MAX_LOG_RATIO)));
}

/**
 * Upper bound on log r beyond which the surrogate of a unit with advantage A is constant
 * (or, without dual clip and A < 0, beyond which it is no longer representable):
 *
 * - A > 0: `log(1 + ε_high) + margin` (the high clip makes the term `(1 + ε_high)·A`);
 * - A ≤ 0 with dual clip c: `log(c) + margin` (the dual clip makes the term `c·A`);
 * - A ≤ 0 without dual clip: `MAX_LOG_RATIO` (the term `r·A` grows without bound).
 *
 * Every bound is capped at `MAX_LOG_RATIO`, so `exp` of it is finite whatever ε_high or c.
 * A = 0 gives a zero term whatever the bound; bounding it keeps `0·∞` out.
 *
 * @param advantage any shape
 * @returns the shape of `advantage`
 */
export function logRatioUpperBound(advantage: tf.Tensor, clipHigh: number, clipRatioC: number | null): tf.Tensor {
  const { positive, nonPositive } = logRatioBounds(clipHigh, clipRatioC);
  return tf.tidy(() => tf.where(tf.greater(advantage, 0), tf.fill(advantage.shape, positive), tf.fill(advantage.shape, nonPositive)));
}

/**
 * The two values of {@link logRatioUpperBound} (float64, before the float32 tensor): the bound
 * for A > 0 and for A ≤ 0. For kernels that take them as numbers (libs/policy's fused objective).
 */
export function logRatioBounds(clipHigh: number, clipRatioC: number | null): { positive: number; nonPositive: number } {
  return {
    positive: Math.min(Math.log1p(clipHigh) + CLIP_BOUND_MARGIN, MAX_LOG_RATIO),
    nonPositive: clipRatioC === null ? MAX_LOG_RATIO : Math.min(Math.log(clipRatioC) + CLIP_BOUND_MARGIN, MAX_LOG_RATIO),
  };
}

/**
 * `min(log r, bound(A))` with {@link logRatioUpperBound}: the log-ratio the surrogate is
 * evaluated at. Where the bound is a clip bound plus margin, the loss and its gradient are
 * exactly those of the unbounded formula (the clip already made the gradient 0 there).
 * Where it is `MAX_LOG_RATIO` (A < 0 without dual clip) the term saturates at
 * `e^44.36·A` with gradient 0 beyond: the unit is then out of range and counted.
 *
 * @param logRatio any shape
 * @param advantage broadcastable to `logRatio`
 */
export function boundedLogRatio<R extends tf.Rank>(logRatio: tf.Tensor<R>, advantage: tf.Tensor, clipHigh: number, clipRatioC: number | null): tf.Tensor<R> {
  return tf.tidy(() => tf.minimum<tf.Tensor<R>>(logRatio, logRatioUpperBound(advantage, clipHigh, clipRatioC)));
}

/**
 * Dual-clip surrogate (Ye et al. 2020, "Mastering Complex Control in MOBA Games with Deep
 * Reinforcement Learning", arXiv:1912.09729; verl's `clip_ratio_c`):
 *
 * `A ≥ 0: min(r·A, clip(r)·A)`;  `A < 0: max(min(r·A, clip(r)·A), c·A)`.
 *
 * For A < 0 the PPO term `r·A` is unbounded below as r grows; the dual clip bounds it at
 * `c·A` and makes its gradient 0 once r > c. Everything else is the PPO clip.
 *
 * @param importanceRatio any shape, r >= 0
 * @param advantage broadcastable to `importanceRatio`
 * @param clipRatioC c > 1; null gives {@link clippedSurrogate}
 */
export function dualClippedSurrogate<R extends tf.Rank>(
  importanceRatio: tf.Tensor<R>,
  advantage: tf.Tensor,
  clipLow: number,
  clipHigh: number,
  clipRatioC: number | null,
): tf.Tensor<R> {
  return tf.tidy(() => surrogateTerms(importanceRatio, advantage, clipLow, clipHigh, clipRatioC).value);
}

/**
 * The clipped (and, with c, dual-clipped) surrogate from a log-ratio, never forming an
 * infinite `exp`: `surrogate(exp(min(log r, bound(A))), A)` with {@link boundedLogRatio}.
 * Finite in value and gradient for every finite log-ratio and advantage with
 * |A|·e^44.36 within float32 (|A| < 1.8e19); exactly the unbounded formula wherever that one
 * is finite, except for A < 0 without dual clip and log r > MAX_LOG_RATIO (saturated, see above).
 *
 * @param logRatio any shape
 * @param advantage broadcastable to `logRatio`
 */
export function boundedClippedSurrogate<R extends tf.Rank>(logRatio: tf.Tensor<R>, advantage: tf.Tensor, clip: SurrogateClip): tf.Tensor<R> {
  // One tape entry with the derivative written out (boundedClippedSurrogateGrad): autodiff
  // of the min/max/clip/select chain records about 35 ops on these small tensors, each a
  // fixed cost of tens of µs on the native backend (#21); the forward is the formula's own ops.
  const fn = tf.customGrad((...args: (tf.Tensor | tf.GradSaveFunc)[]) => {
    const [x, save] = args as [tf.Tensor<R>, tf.GradSaveFunc];
    const bounded = boundedLogRatio(x, advantage, clip.clipHigh, clip.clipRatioC);
    const r = tf.exp(bounded);
    const { unclipped, clipped, ppo, value } = surrogateTerms(r, advantage, clip.clipLow, clip.clipHigh, clip.clipRatioC);
    // The advantage too: it may be a caller's temporary, gone by the time gradients run.
    save([x, bounded, r, unclipped, clipped, ppo, advantage]);
    return {
      value: value,
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
        const [sx, sBounded, sr, sUnclipped, sClipped, sPpo, sAdvantage] = saved;
        return boundedClippedSurrogateGrad(
          dy,
          { logRatio: sx, bounded: sBounded, ratio: sr, unclipped: sUnclipped, clipped: sClipped, ppo: sPpo },
          sAdvantage,
          clip,
        );
      },
    };
  });
  return fn(logRatio);
}

/** The forward values {@link boundedClippedSurrogateGrad} reads (each of the log-ratio's shape). */
export interface BoundedSurrogateSaved {
  /** log r as given. */
  logRatio: tf.Tensor;
  /** min(log r, bound(A)). */
  bounded: tf.Tensor;
  /** r = exp(bounded). */
  ratio: tf.Tensor;
  /** r·A. */
  unclipped: tf.Tensor;
  /** clip(r, 1 − ε_low, 1 + ε_high)·A. */
  clipped: tf.Tensor;
  /** min(r·A, clip(r)·A). */
  ppo: tf.Tensor;
}

/**
 * `∂/∂log r` of {@link boundedClippedSurrogate}, times the upstream gradient `dy`: the
 * derivative autodiff forms through its ops, written out (each factor is 0 or 1, so the
 * products are exactly autodiff's):
 *
 * `dy · [dual passes] · A · [r·A ≤ clip(r)·A  or  1 − ε_low ≤ r ≤ 1 + ε_high] · r · [log r ≤ bound(A)]`
 *
 * where `[dual passes]` is 1 unless the dual clip holds the term (A < 0 and min(r·A, clip(r)·A)
 * < c·A). The ties follow tfjs's gradients of min (to the first operand on ≤), max (to the
 * first on ≥) and clip (passes on its bounds). A NaN log-ratio gives a NaN gradient, as in
 * autodiff (the loss is NaN too, and the update is refused as non-finite).
 */
export function boundedClippedSurrogateGrad(dy: tf.Tensor, saved: BoundedSurrogateSaved, advantage: tf.Tensor, clip: SurrogateClip): tf.Tensor {
  return tf.tidy(() => {
    let passes = tf.logicalOr(
      tf.lessEqual(saved.unclipped, saved.clipped),
      tf.logicalAnd(tf.greaterEqual(saved.ratio, 1 - clip.clipLow), tf.lessEqual(saved.ratio, 1 + clip.clipHigh)),
    );
    if (clip.clipRatioC !== null) {
      passes = tf.logicalAnd(passes, tf.logicalOr(tf.greaterEqual(advantage, 0), tf.greaterEqual(saved.ppo, tf.mul(advantage, clip.clipRatioC))));
    }
    passes = tf.logicalAnd(passes, tf.lessEqual(saved.logRatio, saved.bounded));
    // A product with the 0/1 mask, not a select: a NaN log-ratio gives a NaN gradient, as autodiff's does.
    return tf.mul(tf.mul(tf.mul(dy, advantage), saved.ratio), tf.cast(passes, 'float32'));
  });
}

/**
 * 1 where the dual clip is active, `r > c` and `A < 0`, else 0 (float32): the units whose
 * gradient the dual clip zeroes. All 0 when `clipRatioC` is null.
 */
export function clipActiveDual<R extends tf.Rank>(importanceRatio: tf.Tensor<R>, advantage: tf.Tensor, clipRatioC: number | null): tf.Tensor<R> {
  return tf.tidy(() => {
    if (clipRatioC === null) return tf.zerosLike(importanceRatio);
    return tf.cast(tf.logicalAnd(tf.greater(importanceRatio, clipRatioC), tf.less(advantage, 0)), 'float32');
  }) as tf.Tensor<R>;
}

/**
 * 1 where a unit's ratio left the representable range, `|log r| > MAX_LOG_RATIO` (r above
 * 1.8e19 or below 5.4e−20) or log r is not finite, else 0 (float32). Such units are
 * evaluated through the bounds above, and counted as `ratio/out_of_range`.
 */
export function ratioOutOfRange<R extends tf.Rank>(logRatio: tf.Tensor<R>): tf.Tensor<R> {
  return tf.tidy(() => tf.cast(tf.logicalNot(tf.lessEqual(tf.abs(logRatio), MAX_LOG_RATIO)), 'float32')) as tf.Tensor<R>;
}
