import * as tf from '@tensorflow/tfjs';
import type { EventReduction } from './config';
import { TOKEN_LOG_RATIO_LIMIT } from './surrogate';

/**
 * Importance ratios of SRPO (Setwise Relative Policy Optimization): one ratio per
 * active set e, built from the log-ratios of its K member outputs.
 *
 * All functions are differentiable with respect to `logpNew` and allocate no
 * tensors beyond their result (each runs in `tf.tidy`).
 */

/**
 * Masked per-token log-ratio `m_u · clip(log π_new(u) − log π_old(u), −B, B)`, B =
 * {@link TOKEN_LOG_RATIO_LIMIT} = 1e6 nats.
 *
 * Implemented with a select rather than a product: padded positions of
 * `logpNew` may hold −∞ (a log-softmax over a masked vocabulary), and 0 · (−∞)
 * would turn the loss and its gradient into NaN. The gradient at masked positions is exactly 0.
 *
 * The bound B changes nothing for real log-probs (floor values such as −9999 are far
 * inside it); it keeps every sum of token log-ratios finite (a behaviour log-prob of
 * −1e39 is −∞ in float32) and has gradient 0 beyond. NaN still propagates.
 *
 * @param logpNew [M, T] current-policy log-probs
 * @param logpOld [M, T] behaviour-policy log-probs
 * @param mask [M, T] 1 = counted token
 * @returns [M, T], 0 where masked
 */
export function tokenLogRatio(logpNew: tf.Tensor2D, logpOld: tf.Tensor2D, mask: tf.Tensor2D): tf.Tensor2D {
  return tf.tidy(
    () =>
      tf.where(
        tf.greater(mask, 0),
        tf.clipByValue(tf.sub(logpNew, logpOld), -TOKEN_LOG_RATIO_LIMIT, TOKEN_LOG_RATIO_LIMIT),
        tf.zerosLike(logpNew),
      ) as tf.Tensor2D,
  );
}

/**
 * Member log-ratio `ℓ_j = Σ_u m_u · (log π_new(u) − log π_old(u))`: the sequence-level
 * log importance ratio of one agent output, counting only its response tokens.
 *
 * @returns [M]
 */
export function memberLogRatio(logpNew: tf.Tensor2D, logpOld: tf.Tensor2D, mask: tf.Tensor2D): tf.Tensor1D {
  return tf.tidy(() => tf.sum(tokenLogRatio(logpNew, logpOld, mask), 1));
}

/**
 * Number of members K_e of each set.
 *
 * @param memberSet [M] int32 set index per member
 * @returns [S] float32
 */
export function memberCount(memberSet: tf.Tensor1D, numSets: number): tf.Tensor1D {
  return tf.tidy(() => tf.unsortedSegmentSum(tf.cast(tf.onesLike(memberSet), 'float32'), memberSet, numSets));
}

/**
 * Event reduction c(K): the factor that makes a set's summed log-ratio comparable
 * across set sizes. `sqrt` → 1/√K (default: keeps the spread of L_e roughly
 * constant in K when member log-ratios are independent), `sum` → 1, `mean` → 1/K.
 *
 * @param setSize [S] K per set, all >= 1
 * @returns [S] c(K_e)
 */
export function eventReduction(setSize: tf.Tensor1D, reduction: EventReduction): tf.Tensor1D {
  return tf.tidy(() => {
    switch (reduction) {
      case 'sqrt':
        return tf.rsqrt(setSize);
      case 'sum':
        return tf.onesLike(setSize);
      case 'mean':
        return tf.reciprocal(setSize);
      default:
        throw new Error(`unknown event reduction ${String(reduction satisfies never)}`);
    }
  });
}

/**
 * Set log-ratio `L_e = c(K_e) · Σ_{j ∈ e} ℓ_j`.
 *
 * @param memberLogRatios [M] ℓ_j
 * @param memberSet [M] int32 set index per member
 * @param setSize [S] K_e when the caller has it ({@link memberCount}); counted here otherwise
 * @returns [S]
 */
export function setLogRatio(
  memberLogRatios: tf.Tensor1D,
  memberSet: tf.Tensor1D,
  numSets: number,
  reduction: EventReduction,
  setSize?: tf.Tensor1D,
): tf.Tensor1D {
  return tf.tidy(() => {
    const summed = tf.unsortedSegmentSum<tf.Tensor1D>(memberLogRatios, memberSet, numSets);
    return tf.mul(eventReduction(setSize ?? memberCount(memberSet, numSets), reduction), summed);
  });
}

/**
 * Set ratio `ρ_e = exp(L_e)`: the importance ratio SRPO clips, one per active set.
 *
 * Overflows to +∞ for L_e > 88.72 (a sum over hundreds of tokens gets there easily, e.g.
 * with one behaviour log-prob floored at −9999). The objective never forms it: it evaluates
 * the surrogate from L_e (`boundedClippedSurrogate`) and reports `reportedRatio(L_e)`.
 *
 * @param setLogRatios [S] L_e
 * @returns [S]
 */
export function setRatio(setLogRatios: tf.Tensor1D): tf.Tensor1D {
  return tf.exp(setLogRatios);
}
