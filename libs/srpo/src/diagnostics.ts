import * as tf from '@tensorflow/tfjs';
import { ValidationError } from '@srpo/core';
import type { AdvantageResult } from './advantages';
import type { ObjectiveConfig } from './config';
import type { ObjectiveOutput } from './objective';
import type { PaddedSetBatch } from './padded-batch';
import { MAX_LOG_RATIO } from './surrogate';

/**
 * Approximate KL divergence with Schulman's k3 estimator ("Approximating KL
 * Divergence", 2020), in the form GRPO uses for its KL term (Shao et al. 2024):
 *
 * `KL ≈ (1/Σ m_u) Σ_u m_u · (exp(δ_u) − 1 − δ_u)`, `δ_u = log π_old(u) − log π_new(u)`.
 *
 * Each term is >= 0 and ≈ δ²/2 for small δ. Tokens are sampled from π_old, so
 * this is a (slightly biased) estimate of KL(π_new ‖ π_old); it agrees with the
 * unbiased k3 of KL(π_old ‖ π_new) to second order in δ.
 *
 * A token with δ > MAX_LOG_RATIO (44.36) counts as e^44.36 − 1 − δ: a saturated, finite value.
 *
 * @param tokenLogRatios [M, T] masked log π_new − log π_old (0 where masked)
 * @param mask [M, T]
 * @returns scalar
 */
export function approxKlK3(tokenLogRatios: tf.Tensor2D, mask: tf.Tensor2D): tf.Scalar {
  return tf.tidy(() => {
    const delta = tf.neg(tokenLogRatios);
    // exp(δ) saturates at e^MAX_LOG_RATIO like the reported ratios, so the estimate stays finite.
    const k3 = tf.sub(tf.sub(tf.exp(tf.minimum(delta, MAX_LOG_RATIO)), 1), delta);
    return tf.div<tf.Scalar>(tf.sum(tf.mul(k3, mask)), tf.sum(mask));
  });
}

/**
 * Reads an objective's diagnostics into plain numbers (float64 arithmetic on the
 * float32 tensor values). Frees every tensor it creates; `out` and `batch` stay
 * owned by the caller.
 *
 * Units are sets (`srpo`, `srpo-length-norm`), members (`gspo`) or unmasked tokens (`grpo-token`).
 * - `losses/loss`: the loss value (NaN here means a NaN reached `logpNew`).
 * - `losses/clip_frac_low`, `losses/clip_frac_high`: share of units whose clip is
 *   active on that side (r < 1 − ε_low with A < 0; r > 1 + ε_high with A > 0), i.e.
 *   whose gradient the clip removed.
 * - `losses/clip_frac_dual`: share of units whose dual clip is active (r > c with A < 0;
 *   always 0 with `dualClip` off).
 * - `ratio/mean`, `ratio/min`, `ratio/max`: over all units, of the reported ratio (saturated
 *   at e^±44.36 ≈ 1.8e19 / 5.4e−20, so never ∞).
 * - `ratio/out_of_range`: number of units (not a share) whose ratio left the representable
 *   range, |log r| > MAX_LOG_RATIO = 44.36: a set with a floor behaviour log-prob such as
 *   −9999, for example. Their loss is evaluated through the bounds of
 *   `boundedClippedSurrogate` (docs/objective.md).
 * - `ratio/mean_k{K}`, `ratio/min_k{K}`, `ratio/max_k{K}`, `ratio/std_k{K}` (population
 *   standard deviation, the spread of the ratios): over units of sets with K members.
 * - `losses/clip_frac_low_k{K}`, `losses/clip_frac_high_k{K}`: the clip fractions over units
 *   of sets with K members (SRPO's one clip per set should not bind more often on large sets).
 * - `kl/approx_k3`: see {@link approxKlK3}.
 * - `batch/sets`, `batch/members`, `batch/tokens` (unmasked).
 * - With `advantageInfo` (usually the whole rollout batch, not only this mini-batch):
 *   `advantages/from_progress` (number of sets whose advantage came from progress),
 *   `groups/count`, `groups/degenerate_share` (share of groups of size 1 or σ = 0).
 *
 * @throws ValidationError when `out` was computed for another objective than `config` names
 */
export async function readDiagnostics(
  out: ObjectiveOutput,
  batch: PaddedSetBatch,
  config: ObjectiveConfig,
  advantageInfo?: readonly AdvantageResult[],
): Promise<Record<string, number>> {
  if (out.objective !== config.objective) {
    throw new ValidationError('config.objective', `is ${config.objective} but the output was computed with ${out.objective}`);
  }
  const [kl, tokens] = tf.tidy((): [tf.Scalar, tf.Scalar] => [approxKlK3(out.tokenLogRatio, batch.mask), tf.sum<tf.Scalar>(batch.mask)]);
  let values: (Float32Array | Int32Array | Uint8Array)[];
  try {
    values = await Promise.all(
      [out.loss, out.ratio, out.unitWeight, out.unitSetSize, out.clippedLow, out.clippedHigh, out.clippedDual, out.outOfRange, kl, tokens].map((t) => t.data()),
    );
  } finally {
    tf.dispose([kl, tokens]);
  }
  const [loss, ratios, weights, sizes, low, high, dual, outside, klValue, tokenCount] = values;

  let units = 0;
  let clippedLow = 0;
  let clippedHigh = 0;
  let clippedDual = 0;
  let outOfRange = 0;
  const overall = new RatioStats();
  const byK = new Map<number, RatioStats>();
  const clippedByK = new Map<number, { low: number; high: number }>();
  for (let i = 0; i < ratios.length; i++) {
    if (weights[i] === 0) continue;
    units++;
    clippedLow += low[i];
    clippedHigh += high[i];
    clippedDual += dual[i];
    outOfRange += outside[i];
    overall.add(ratios[i]);
    const k = Math.round(sizes[i]);
    let stats = byK.get(k);
    if (!stats) byK.set(k, (stats = new RatioStats()));
    stats.add(ratios[i]);
    const clipped = clippedByK.get(k) ?? { low: 0, high: 0 };
    clipped.low += low[i];
    clipped.high += high[i];
    clippedByK.set(k, clipped);
  }

  const d: Record<string, number> = {
    'losses/loss': loss[0],
    'losses/clip_frac_low': clippedLow / units,
    'losses/clip_frac_high': clippedHigh / units,
    'losses/clip_frac_dual': clippedDual / units,
    'ratio/mean': overall.mean(),
    'ratio/min': overall.min,
    'ratio/max': overall.max,
    'ratio/out_of_range': outOfRange,
  };
  for (const k of [...byK.keys()].sort((a, b) => a - b)) {
    const stats = byK.get(k) as RatioStats;
    d[`ratio/mean_k${k}`] = stats.mean();
    d[`ratio/min_k${k}`] = stats.min;
    d[`ratio/max_k${k}`] = stats.max;
    d[`ratio/std_k${k}`] = stats.std();
    const clipped = clippedByK.get(k) as { low: number; high: number };
    d[`losses/clip_frac_low_k${k}`] = clipped.low / stats.count;
    d[`losses/clip_frac_high_k${k}`] = clipped.high / stats.count;
  }
  d['kl/approx_k3'] = klValue[0];
  d['batch/sets'] = batch.numSets;
  d['batch/members'] = batch.memberSet.shape[0];
  d['batch/tokens'] = tokenCount[0];
  if (advantageInfo) Object.assign(d, advantageDiagnostics(advantageInfo));
  return d;
}

/** `advantages/from_progress`, `groups/count`, `groups/degenerate_share` from host-side advantage results. */
export function advantageDiagnostics(advantageInfo: readonly AdvantageResult[]): Record<string, number> {
  const degenerateByGroup = new Map<string, boolean>();
  for (const a of advantageInfo) degenerateByGroup.set(a.groupKey, a.degenerateGroup);
  const groups = degenerateByGroup.size;
  const degenerate = [...degenerateByGroup.values()].filter(Boolean).length;
  return {
    'advantages/from_progress': advantageInfo.filter((a) => a.fromProgress).length,
    'groups/count': groups,
    'groups/degenerate_share': groups === 0 ? 0 : degenerate / groups,
  };
}

class RatioStats {
  private n = 0;
  // Welford's running mean and sum of squared deviations: ratios near 1 with a few
  // far out would lose the small spread in E[x²] − E[x]².
  private m = 0;
  private m2 = 0;
  min = Number.POSITIVE_INFINITY;
  max = Number.NEGATIVE_INFINITY;

  add(x: number): void {
    this.n++;
    const d = x - this.m;
    this.m += d / this.n;
    this.m2 += d * (x - this.m);
    if (x < this.min) this.min = x;
    if (x > this.max) this.max = x;
  }

  mean(): number {
    return this.m;
  }

  /** Population standard deviation (0 for one unit). */
  std(): number {
    return Math.sqrt(this.m2 / this.n);
  }

  get count(): number {
    return this.n;
  }
}
