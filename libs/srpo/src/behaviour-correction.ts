import * as tf from '@tensorflow/tfjs';
import { ValidationError } from '@srpo/core';
import { describeValue, isRecord, rejectUnknownKeys, requireFiniteNumber } from './validation';
import { MAX_LOG_RATIO } from './surrogate';

/*
 * Engine/learner mismatch: the behaviour log-probs recorded with each AgentOutput come from
 * the inference engine (vLLM, bf16, quantized weights, other kernels, an older version), not
 * from the learner's own forward pass. With a correction on, the learner recomputes the
 * log-probs of every output at the weights the update starts from (the *proximal* policy
 * π_prox, Hilton et al. 2021 "Batch size-invariance for policy optimization", arXiv:2110.00641;
 * AReaL's decoupled PPO, Fu et al. 2025, arXiv:2505.24298), uses them in SRPO's set ratio
 * instead of the engine's, and weights each set by a detached importance weight from the
 * engine to the learner: truncated (TIS, Yao et al. 2025, "Your efficient RL framework secretly
 * brings you off-policy RL training"; verl's `rollout_is`, TRL's `vllm_importance_sampling_cap`)
 * or masked (MIS, Liu et al. 2025, "When Speed Kills Stability"; verl's rejection sampling).
 * docs/objective.md, section 7, states the whole construction.
 *
 * Host-side functions here are float64 on plain arrays (like the advantages); the KL penalty
 * is a float32 tensor function with a gradient.
 */

/**
 * `none`: the set ratio uses the engine's log-probs as recorded (no extra forward pass);
 * `tis`: proximal log-probs in the ratio, each set weighted by `min(exp(m_S), C)`;
 * `mis`: proximal log-probs in the ratio, each set weighted by `exp(m_S)` if `|m_S| ≤ B`, else dropped.
 */
export type BehaviourCorrection = 'none' | 'tis' | 'mis';
export const BEHAVIOUR_CORRECTIONS: readonly BehaviourCorrection[] = ['none', 'tis', 'mis'];

export interface CorrectionConfig {
  correction: BehaviourCorrection;
  /** C of TIS: the largest set weight, >= 1. Read only under `tis`. */
  cap: number;
  /** B of MIS: a set whose |mean log-ratio| exceeds it is dropped, > 0. Read only under `mis`. */
  bound: number;
  /** β of the KL penalty `β · mean_u k3(log π_ref − log π_θ)` added to the loss; 0 = none. >= 0. */
  klCoef: number;
}

/**
 * Defaults: no correction (docs/objective.md section 7 says why), TIS cap 2 (verl's
 * `rollout_is_threshold` default and ms-swift's), MIS bound ln 2 (weights kept in [1/2, 2]),
 * no KL penalty.
 */
export const DEFAULT_CORRECTION_CONFIG: CorrectionConfig = Object.freeze({ correction: 'none', cap: 2, bound: Math.LN2, klCoef: 0 });

const CORRECTION_KEYS = ['correction', 'cap', 'bound', 'klCoef'] as const;

/**
 * Fills a partial correction config with {@link DEFAULT_CORRECTION_CONFIG} and validates it;
 * `undefined`/`null` give the defaults, unknown keys are refused.
 *
 * @throws ValidationError naming the field (`correction.cap: must be >= 1, got 0.5`)
 */
export function resolveCorrectionConfig(partial: unknown, path = 'correction'): CorrectionConfig {
  const d = DEFAULT_CORRECTION_CONFIG;
  if (partial === undefined || partial === null) return { ...d };
  if (!isRecord(partial)) throw new ValidationError(path, `expected an object, got ${describeValue(partial)}`);
  rejectUnknownKeys(partial, CORRECTION_KEYS, path);
  const correction = partial.correction === undefined ? d.correction : partial.correction;
  if (typeof correction !== 'string' || !(BEHAVIOUR_CORRECTIONS as readonly string[]).includes(correction)) {
    throw new ValidationError(`${path}.correction`, `expected one of ${BEHAVIOUR_CORRECTIONS.join(', ')}, got ${describeValue(correction)}`);
  }
  const cap = partial.cap === undefined ? d.cap : requireFiniteNumber(partial.cap, `${path}.cap`);
  // A cap below 1 would down-weight sets the engine and the learner agree on.
  if (!(cap >= 1)) throw new ValidationError(`${path}.cap`, `must be >= 1, got ${cap}`);
  const bound = partial.bound === undefined ? d.bound : requireFiniteNumber(partial.bound, `${path}.bound`);
  if (!(bound > 0)) throw new ValidationError(`${path}.bound`, `must be > 0, got ${bound}`);
  const klCoef = partial.klCoef === undefined ? d.klCoef : requireFiniteNumber(partial.klCoef, `${path}.klCoef`);
  if (!(klCoef >= 0)) throw new ValidationError(`${path}.klCoef`, `must be >= 0, got ${klCoef}`);
  return { correction: correction as BehaviourCorrection, cap, bound, klCoef };
}

/** Whether the trainer must recompute proximal log-probs (any correction but `none`). */
export function needsProximal(config: CorrectionConfig): boolean {
  return config.correction !== 'none';
}

/** One member of a set as the behaviour weight reads it: learner and engine log-probs per response token. */
export interface BehaviourMember {
  /** log π_prox(u): the learner's log-probs at the update's starting weights. */
  logpProx: ArrayLike<number>;
  /** log π_engine(u): the behaviour log-probs the engine recorded. */
  logpBehaviour: ArrayLike<number>;
  /** 1 = trained token, 0 = ignored. */
  mask: ArrayLike<number>;
}

/**
 * Set behaviour log-ratio, the mean over the set's trained tokens:
 *
 * `m_S = (1/N_S) Σ_{j∈S} Σ_u m_u (log π_prox(u) − log π_engine(u))`, `N_S = Σ_{j∈S} Σ_u m_u`.
 *
 * The mean (the log of the geometric-mean token ratio), not the sum: the engine/learner gap is
 * per-token numerical noise, and the sum's exponential (the exact sequence-level weight) grows
 * with the set's length until every long set is truncated (verl's sequence-level weights and
 * its `geometric` rejection mode make the same trade). Float64; tokens with mask 0 are never read.
 *
 * NaN in a trained token gives NaN (a NaN log-prob is a bug upstream and must show: the
 * weight is then NaN, the step non-finite, and the learner isolates the set). ±∞ follow IEEE:
 * a proximal −∞ (the learner gives the token probability 0) makes m_S = −∞.
 *
 * @throws ValidationError when the set has no trained token (no ratio exists), or rows differ in length
 */
export function setBehaviourLogRatio(members: readonly BehaviourMember[], field = 'set'): number {
  let sum = 0;
  let count = 0;
  members.forEach((m, j) => {
    if (m.logpProx.length !== m.mask.length || m.logpBehaviour.length !== m.mask.length) {
      throw new ValidationError(
        `${field}.members[${j}]`,
        `logpProx (${m.logpProx.length}), logpBehaviour (${m.logpBehaviour.length}) and mask (${m.mask.length}) differ in length`,
      );
    }
    for (let u = 0; u < m.mask.length; u++) {
      if (m.mask[u] === 0) continue;
      sum += m.logpProx[u] - m.logpBehaviour[u];
      count++;
    }
  });
  if (count === 0) throw new ValidationError(field, 'has no trained token: its behaviour log-ratio is undefined');
  return sum / count;
}

/**
 * Truncated importance weight (TIS) of a set: `w_S = min(exp(m_S), C)`, C >= 1.
 * exp(m_S) overflows to +∞ only above m_S = 709 (float64), and the cap takes it back to C.
 * NaN stays NaN.
 */
export function truncatedSetWeight(logRatio: number, cap: number): number {
  return Math.min(Math.exp(logRatio), cap);
}

/**
 * Masked importance weight (MIS) of a set: `w_S = exp(m_S)` if `|m_S| ≤ B`, else 0: a set the
 * engine and the learner disagree on beyond the bound is dropped, the rest keep their
 * (then bounded, e^−B ≤ w ≤ e^B) weights. NaN stays NaN (never silently dropped).
 */
export function maskedSetWeight(logRatio: number, bound: number): number {
  if (Number.isNaN(logRatio)) return Number.NaN;
  return Math.abs(logRatio) <= bound ? Math.exp(logRatio) : 0;
}

/** The weight of one set and which rule bound it. */
export interface SetWeight {
  /** m_S, {@link setBehaviourLogRatio}. */
  logRatio: number;
  /** w_S (1 under `none`). */
  weight: number;
  /** TIS: exp(m_S) > C, the cap set the weight. */
  truncated: boolean;
  /** MIS: |m_S| > B, the set was dropped. */
  masked: boolean;
}

/** {@link truncatedSetWeight} or {@link maskedSetWeight} as the config says; 1 under `none`. */
export function behaviourSetWeight(logRatio: number, config: CorrectionConfig): SetWeight {
  switch (config.correction) {
    case 'none':
      return { logRatio, weight: 1, truncated: false, masked: false };
    case 'tis':
      return { logRatio, weight: truncatedSetWeight(logRatio, config.cap), truncated: Math.exp(logRatio) > config.cap, masked: false };
    case 'mis':
      return { logRatio, weight: maskedSetWeight(logRatio, config.bound), truncated: false, masked: Math.abs(logRatio) > config.bound };
    default:
      throw new ValidationError('correction.correction', `unknown correction ${JSON.stringify(config.correction satisfies never)}`);
  }
}

/**
 * The advantage each set carries into the objective: `A'_S = w_S · A_S · |B| / |B_kept|`.
 *
 * Why folding the weight into the advantage is exact: for w >= 0 and every r,
 * `w · min(r·A, clip(r)·A) = min(r·wA, clip(r)·wA)`, and with the dual clip
 * `w · max(min(·), c·A) = max(min(r·wA, clip(r)·wA), c·wA)` (a non-negative factor commutes
 * with min and max), while the gradient's factor `A` becomes `wA`. The bounds of
 * `boundedClippedSurrogate` depend only on the sign of the advantage, which w > 0 keeps; with
 * w = 0 the term and its gradient are 0 either way. So the weighted surrogate is the plain one
 * evaluated at wA, and every implementation of the objective (composite, native kernel)
 * computes it unchanged.
 *
 * `|B| / |B_kept|` (|B| sets in the mini-batch, |B_kept| of them with w > 0): the objective
 * averages over all |B| sets, so this makes the loss the mean over the sets actually kept, as
 * if the masked ones were not in the batch: a masked set neither contributes nor dilutes the
 * gradient of the good sets beside it (verl#3915, slime#657 fixed the same denominator). When
 * every set is masked all advantages are 0.
 *
 * @param advantages A_S per set
 * @param weights w_S per set, each >= 0 or NaN
 * @returns A'_S per set (float64)
 */
export function weightedAdvantages(advantages: readonly number[], weights: readonly number[]): number[] {
  if (advantages.length !== weights.length) {
    throw new ValidationError('weights', `length ${weights.length} differs from the ${advantages.length} advantages`);
  }
  weights.forEach((w, i) => {
    if (w < 0) throw new ValidationError(`weights[${i}]`, `must be >= 0, got ${w}`);
  });
  const kept = weights.filter((w) => w !== 0).length;
  if (kept === 0) return advantages.map(() => 0);
  const scale = advantages.length / kept;
  // A dropped set carries +0 (not −0 from a negative advantage): the stored inputs stay canonical.
  return advantages.map((a, i) => (weights[i] === 0 ? 0 : weights[i] * a * scale));
}

/**
 * Token k3 estimate of KL(engine ‖ learner) with tokens sampled from the engine (Schulman 2020,
 * "Approximating KL Divergence"): with `δ = log π_prox − log π_engine` (so r = π_prox/π_engine),
 * `k3 = exp(δ) − 1 − δ >= 0`, unbiased for KL(π_engine ‖ π_prox). The set's value is the mean
 * over its trained tokens. exp(δ) saturates at e^MAX_LOG_RATIO as in `approxKlK3`.
 *
 * @throws ValidationError as {@link setBehaviourLogRatio}
 */
export function setBehaviourK3(members: readonly BehaviourMember[], field = 'set'): number {
  let sum = 0;
  let count = 0;
  members.forEach((m, j) => {
    if (m.logpProx.length !== m.mask.length || m.logpBehaviour.length !== m.mask.length) {
      throw new ValidationError(`${field}.members[${j}]`, 'logpProx, logpBehaviour and mask differ in length');
    }
    for (let u = 0; u < m.mask.length; u++) {
      if (m.mask[u] === 0) continue;
      const d = m.logpProx[u] - m.logpBehaviour[u];
      sum += Math.exp(Math.min(d, MAX_LOG_RATIO)) - 1 - d;
      count++;
    }
  });
  if (count === 0) throw new ValidationError(field, 'has no trained token: its k3 estimate is undefined');
  return sum / count;
}

/** Per set: its behaviour log-ratio, weight, k3 and flags, for {@link mismatchDiagnostics}. */
export interface SetMismatch extends SetWeight {
  k3: number;
}

/** Every set's {@link SetMismatch}, in order. */
export function setMismatches(sets: readonly (readonly BehaviourMember[])[], config: CorrectionConfig): SetMismatch[] {
  return sets.map((members, i) => {
    const field = `sets[${i}]`;
    return { ...behaviourSetWeight(setBehaviourLogRatio(members, field), config), k3: setBehaviourK3(members, field) };
  });
}

/**
 * Per-set mismatch statistics over a mini-batch (means over sets, each set counted once):
 * `mismatch/log_ratio_mean`, `_min`, `_max` (m_S), `mismatch/log_ratio_abs_max`,
 * `mismatch/k3` (mean of the sets' k3), `mismatch/weight_mean`, `mismatch/truncated_frac`,
 * `mismatch/masked_frac`. Empty input gives no keys.
 */
export function mismatchDiagnostics(sets: readonly SetMismatch[]): Record<string, number> {
  if (sets.length === 0) return {};
  const n = sets.length;
  const ratios = sets.map((s) => s.logRatio);
  const mean = (xs: number[]): number => xs.reduce((a, b) => a + b, 0) / n;
  return {
    'mismatch/log_ratio_mean': mean(ratios),
    'mismatch/log_ratio_min': Math.min(...ratios),
    'mismatch/log_ratio_max': Math.max(...ratios),
    'mismatch/log_ratio_abs_max': Math.max(...ratios.map(Math.abs)),
    'mismatch/k3': mean(sets.map((s) => s.k3)),
    'mismatch/weight_mean': mean(sets.map((s) => s.weight)),
    'mismatch/truncated_frac': sets.filter((s) => s.truncated).length / n,
    'mismatch/masked_frac': sets.filter((s) => s.masked).length / n,
  };
}

/**
 * Per-token k3 estimator of KL(π_θ ‖ π_ref) with tokens sampled near π_θ (Schulman 2020; the
 * GRPO KL term, Shao et al. 2024, arXiv:2402.03300):
 *
 * `k3_u = exp(log π_ref(u) − log π_θ(u)) − (log π_ref(u) − log π_θ(u)) − 1 >= 0`, 0 where masked.
 *
 * Differentiable in `logpNew`: `∂k3_u/∂log π_θ(u) = 1 − exp(log π_ref(u) − log π_θ(u))`. The
 * difference d is capped at MAX_LOG_RATIO (44.36) first, so a token the policy made ~e^44 times
 * less likely than the reference gives the saturated, finite term `e^44.36 − 45.36` with gradient
 * 0 beyond, as everywhere in this library; masked positions are selected out, so a −∞ there does
 * not reach the gradient. NaN propagates.
 *
 * @param logpNew [M, T] log π_θ
 * @param logpRef [M, T] log π_ref, computed outside the gradient scope (a constant here)
 * @param mask [M, T]
 * @returns [M, T]
 */
export function tokenK3(logpNew: tf.Tensor2D, logpRef: tf.Tensor2D, mask: tf.Tensor2D): tf.Tensor2D {
  return tf.tidy(() => {
    const on = tf.greater(mask, 0);
    const zeros = tf.zerosLike(logpNew);
    // The whole term at min(d, bound): bounding only the exp would leave the −d term's gradient,
    // of the wrong sign, beyond the bound.
    const d = tf.minimum(tf.where(on, tf.sub(logpRef, logpNew), zeros), MAX_LOG_RATIO);
    const k3 = tf.sub(tf.sub(tf.exp(d), d), 1);
    return tf.where(on, k3, zeros) as tf.Tensor2D;
  });
}

/**
 * The KL term of the loss: `KL = (Σ_u m_u k3_u) / (Σ_u m_u)`, the token mean of {@link tokenK3}
 * over the mini-batch's trained tokens. The learner adds `β · KL` to the objective's loss.
 *
 * @returns scalar (NaN when no token is trained; the batch builder refuses such batches)
 */
export function klPenalty(logpNew: tf.Tensor2D, logpRef: tf.Tensor2D, mask: tf.Tensor2D): tf.Scalar {
  return tf.tidy(() => tf.div<tf.Scalar>(tf.sum(tokenK3(logpNew, logpRef, mask)), tf.sum(mask)));
}
