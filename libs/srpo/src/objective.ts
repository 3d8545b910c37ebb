import * as tf from '@tensorflow/tfjs';
import { ValidationError } from '@srpo/core';
import { dualClipRatio } from './config';
import type { Objective, ObjectiveConfig } from './config';
import type { PaddedSetBatch } from './padded-batch';
import { memberCount, setLogRatio, tokenLogRatio } from './set-ratio';
import { boundedClippedSurrogate, clipActiveDual, clipActiveHigh, clipActiveLow, ratio, ratioOutOfRange, reportedRatio, type SurrogateClip } from './surrogate';

/** The unit one ratio (and one clip) belongs to: a set (SRPO), a member (GSPO) or a token (GRPO). */
export type RatioUnit = 'set' | 'member' | 'token';

/**
 * The loss and the per-unit tensors diagnostics read. U is the number of units:
 * S for `srpo` and `srpo-length-norm`, M for `gspo`, M·T (row-major, padding included with weight 0)
 * for `grpo-token`.
 *
 * The caller owns every tensor; free them with {@link disposeObjectiveOutput}.
 * Inside `tf.variableGrads` / `optimizer.minimize` return only `loss`: the scope
 * then frees the rest.
 */
export interface ObjectiveOutput {
  /** Scalar loss to minimise (the negated mean surrogate). */
  loss: tf.Scalar;
  objective: Objective;
  unit: RatioUnit;
  /**
   * [U] the clipped quantity: ρ_e (srpo), s_j (gspo), r_{j,u} (grpo-token), as
   * `reportedRatio(logRatio)`: saturated at e^±44.36 outside the representable range.
   */
  ratio: tf.Tensor1D;
  /** [U] its log: L_e (srpo, srpo-length-norm), ℓ_j/|y_j| (gspo), the token log-ratio (grpo-token; 0 where masked). Finite. */
  logRatio: tf.Tensor1D;
  /** [U] 1 where the unit counts in the loss; 0 only for masked tokens under grpo-token. */
  unitWeight: tf.Tensor1D;
  /** [U] int32 set index of each unit. */
  unitSet: tf.Tensor1D;
  /** [U] float32 K of the set each unit belongs to. */
  unitSetSize: tf.Tensor1D;
  /** [U] the advantage each unit carries (its set's). */
  unitAdvantage: tf.Tensor1D;
  /** [U] 1 where the low clip is active (r < 1 − ε_low, A < 0, weight 1). */
  clippedLow: tf.Tensor1D;
  /** [U] 1 where the high clip is active (r > 1 + ε_high, A > 0, weight 1). */
  clippedHigh: tf.Tensor1D;
  /** [U] 1 where the dual clip is active (dual clip on, r > c, A < 0, weight 1). */
  clippedDual: tf.Tensor1D;
  /** [U] 1 where |log r| > MAX_LOG_RATIO: the ratio left the representable range (weight 1). */
  outOfRange: tf.Tensor1D;
  /** [M] ℓ_j, the masked sum of token log-ratios per member. */
  memberLogRatio: tf.Tensor1D;
  /** [M, T] masked per-token log-ratio log π_new − log π_old (0 where masked). */
  tokenLogRatio: tf.Tensor2D;
}

/**
 * The advantage each member carries: its set's, `A_j = A_{e(j)}`.
 *
 * @param advantage [S]
 * @param memberSet [M] int32
 * @returns [M]
 */
export function memberAdvantage(advantage: tf.Tensor1D, memberSet: tf.Tensor1D): tf.Tensor1D {
  return tf.gather(advantage, memberSet);
}

/**
 * GSPO sequence ratio `s_j = exp(ℓ_j / |y_j|)` with `|y_j| = Σ_u m_u`: the
 * length-normalised (geometric-mean) token ratio of one member
 * (Zheng et al. 2025, Group Sequence Policy Optimization, arXiv:2507.18071).
 *
 * @param memberLogRatios [M] ℓ_j
 * @param tokenCount [M] Σ_u m_u, each >= 1
 * @returns [M]
 */
export function sequenceRatio(memberLogRatios: tf.Tensor1D, tokenCount: tf.Tensor1D): tf.Tensor1D {
  return tf.tidy(() => ratio(sequenceLogRatio(memberLogRatios, tokenCount)));
}

/**
 * GSPO sequence log-ratio `log s_j = ℓ_j / |y_j|`, what {@link gspoObjective} clips.
 *
 * @param memberLogRatios [M] ℓ_j
 * @param tokenCount [M] Σ_u m_u, each >= 1
 * @returns [M]
 */
export function sequenceLogRatio(memberLogRatios: tf.Tensor1D, tokenCount: tf.Tensor1D): tf.Tensor1D {
  return tf.div(memberLogRatios, tokenCount);
}

/** The clip parameters of the configured surrogate. */
export function surrogateClip(config: ObjectiveConfig): SurrogateClip {
  return { clipLow: config.clipLow, clipHigh: config.clipHigh, clipRatioC: dualClipRatio(config) };
}

/**
 * The per-unit clip and range flags every objective reports, from the unit's log-ratio.
 *
 * @param logRatio [U] (or [M, T] for tokens, with `advantage` [M, 1])
 */
function unitFlags<R extends tf.Rank>(
  logRatio: tf.Tensor<R>,
  advantage: tf.Tensor,
  config: ObjectiveConfig,
): { ratio: tf.Tensor<R>; clippedLow: tf.Tensor<R>; clippedHigh: tf.Tensor<R>; clippedDual: tf.Tensor<R>; outOfRange: tf.Tensor<R> } {
  const r = reportedRatio(logRatio);
  return {
    ratio: r,
    clippedLow: clipActiveLow(r, advantage, config.clipLow),
    clippedHigh: clipActiveHigh(r, advantage, config.clipHigh),
    clippedDual: clipActiveDual(r, advantage, dualClipRatio(config)),
    outOfRange: ratioOutOfRange(logRatio),
  };
}

/**
 * SRPO objective: one ratio and one clip per active set, averaged per set.
 *
 * `loss = −(1/|B|) Σ_e min(ρ_e A_e, clip(ρ_e, 1 − ε_low, 1 + ε_high) A_e)`,
 * `ρ_e = exp(L_e)`, `L_e = c(K_e) Σ_{j∈e} ℓ_j` (SRPO: Setwise Relative Policy Optimization);
 * with `dualClip`, `max(·, c·A_e)` for A_e < 0 (Ye et al. 2020).
 * A set moves, and is clipped, as one joint action of its K agents.
 *
 * Evaluated from L_e without forming an infinite ρ_e (`boundedClippedSurrogate`): loss
 * and gradient are finite for every finite input, and the same as the formula's wherever
 * that one is finite; a set with |L_e| > 44.36 is flagged in `outOfRange`.
 */
export function srpoObjective(logpNew: tf.Tensor2D, batch: PaddedSetBatch, config: ObjectiveConfig): ObjectiveOutput {
  return tidyOutput(() => {
    const S = batch.numSets;
    const tokens = tokenLogRatio(logpNew, batch.logpOld, batch.mask);
    // ℓ_j as in memberLogRatio, summed from the token log-ratios already at hand.
    const members = tf.sum<tf.Tensor1D>(tokens, 1);
    const setSize = memberCount(batch.memberSet, S);
    const logRho = setLogRatio(members, batch.memberSet, S, config.eventReduction, setSize);
    const surrogate = boundedClippedSurrogate(logRho, batch.advantage, surrogateClip(config));
    return {
      loss: tf.neg(tf.mean(surrogate)) as tf.Scalar,
      objective: 'srpo',
      unit: 'set',
      ...unitFlags(logRho, batch.advantage, config),
      logRatio: logRho,
      unitWeight: tf.ones<tf.Rank.R1>([S]),
      unitSet: tf.range(0, S, 1, 'int32'),
      unitSetSize: setSize,
      unitAdvantage: tf.clone(batch.advantage),
      memberLogRatio: members,
      tokenLogRatio: tokens,
    };
  });
}

/**
 * Member-length-normalised SRPO, **this project's variant, not the paper's**: one ratio
 * and one clip per active set as in {@link srpoObjective}, but each member enters the set
 * log-ratio as its mean token log-ratio,
 *
 * `L_e = c(K_e) Σ_{j∈e} ℓ_j / |y_j|`, `|y_j| = Σ_u m_u`,
 *
 * so a long member weighs no more than a short one (what GSPO does per member). The loss,
 * clip, dual clip and diagnostics are those of {@link srpoObjective}; with one-token
 * members the two are the same function.
 */
export function srpoLengthNormObjective(logpNew: tf.Tensor2D, batch: PaddedSetBatch, config: ObjectiveConfig): ObjectiveOutput {
  return tidyOutput(() => {
    const S = batch.numSets;
    const tokens = tokenLogRatio(logpNew, batch.logpOld, batch.mask);
    const members = tf.sum<tf.Tensor1D>(tokens, 1); // ℓ_j
    const perToken = sequenceLogRatio(members, tf.sum<tf.Tensor1D>(batch.mask, 1)); // ℓ_j / |y_j|
    const setSize = memberCount(batch.memberSet, S);
    const logRho = setLogRatio(perToken, batch.memberSet, S, config.eventReduction, setSize);
    const surrogate = boundedClippedSurrogate(logRho, batch.advantage, surrogateClip(config));
    return {
      loss: tf.neg(tf.mean(surrogate)) as tf.Scalar,
      objective: 'srpo-length-norm',
      unit: 'set',
      ...unitFlags(logRho, batch.advantage, config),
      logRatio: logRho,
      unitWeight: tf.ones<tf.Rank.R1>([S]),
      unitSet: tf.range(0, S, 1, 'int32'),
      unitSetSize: setSize,
      unitAdvantage: tf.clone(batch.advantage),
      memberLogRatio: members,
      tokenLogRatio: tokens,
    };
  });
}

/**
 * GSPO baseline: one length-normalised ratio and one clip per member, averaged over
 * all members of the batch; every member carries its set's advantage.
 *
 * `loss = −(1/M) Σ_j min(s_j A_j, clip(s_j, 1 − ε_low, 1 + ε_high) A_j)`, `s_j = exp(ℓ_j / Σ_u m_u)`
 * (Zheng et al. 2025, GSPO); with `dualClip`, `max(·, c·A_j)` for A_j < 0. `eventReduction`
 * has no effect. Evaluated from `log s_j` like {@link srpoObjective}.
 */
export function gspoObjective(logpNew: tf.Tensor2D, batch: PaddedSetBatch, config: ObjectiveConfig): ObjectiveOutput {
  return tidyOutput(() => {
    const tokens = tokenLogRatio(logpNew, batch.logpOld, batch.mask);
    const members = tf.sum<tf.Tensor1D>(tokens, 1); // ℓ_j
    const logS = sequenceLogRatio(members, tf.sum<tf.Tensor1D>(batch.mask, 1));
    const adv = memberAdvantage(batch.advantage, batch.memberSet);
    const surrogate = boundedClippedSurrogate(logS, adv, surrogateClip(config));
    return {
      loss: tf.neg(tf.mean(surrogate)) as tf.Scalar,
      objective: 'gspo',
      unit: 'member',
      ...unitFlags(logS, adv, config),
      logRatio: logS,
      unitWeight: tf.onesLike(members),
      unitSet: tf.clone(batch.memberSet),
      unitSetSize: tf.gather(memberCount(batch.memberSet, batch.numSets), batch.memberSet),
      unitAdvantage: adv,
      memberLogRatio: members,
      tokenLogRatio: tokens,
    };
  });
}

/**
 * GRPO token-level baseline: one ratio and one clip per token, averaged over all
 * unmasked tokens of the batch; every token carries its set's advantage.
 *
 * `loss = −(Σ_{j,u} m_u min(r_{j,u} A_j, clip(r_{j,u}, 1 − ε_low, 1 + ε_high) A_j)) / Σ_{j,u} m_u`,
 * `r_{j,u} = exp(log π_new(u) − log π_old(u))`
 * (Shao et al. 2024, DeepSeekMath, arXiv:2402.03300, without the KL penalty
 * and with the batch-level token mean instead of the per-sequence mean); with `dualClip`,
 * `max(·, c·A_j)` for A_j < 0 per token. `eventReduction` has no effect. Evaluated from the
 * token log-ratio like {@link srpoObjective}.
 */
export function grpoTokenObjective(logpNew: tf.Tensor2D, batch: PaddedSetBatch, config: ObjectiveConfig): ObjectiveOutput {
  return tidyOutput(() => {
    const [M, T] = batch.mask.shape;
    // log r = 0 (r = 1) at masked positions; they are weighted out below.
    const tokens = tokenLogRatio(logpNew, batch.logpOld, batch.mask);
    const adv = tf.expandDims<tf.Tensor2D>(memberAdvantage(batch.advantage, batch.memberSet), 1); // [M, 1]
    const surrogate = boundedClippedSurrogate(tokens, adv, surrogateClip(config));
    const flat = (x: tf.Tensor): tf.Tensor1D => tf.reshape(x, [M * T]);
    const perToken = (x: tf.Tensor): tf.Tensor1D => flat(tf.mul(tf.onesLike(batch.mask), x)); // [M, 1] → [M·T]
    const flags = unitFlags(tokens, adv, config);
    return {
      loss: tf.neg(tf.div(tf.sum(tf.mul(surrogate, batch.mask)), tf.sum(batch.mask))) as tf.Scalar,
      objective: 'grpo-token',
      unit: 'token',
      ratio: flat(flags.ratio),
      logRatio: flat(tokens),
      unitWeight: flat(batch.mask),
      unitSet: flat(tf.tile(tf.expandDims(batch.memberSet, 1), [1, T])),
      unitSetSize: perToken(tf.expandDims(tf.gather(memberCount(batch.memberSet, batch.numSets), batch.memberSet), 1)),
      unitAdvantage: perToken(adv),
      clippedLow: flat(tf.mul(flags.clippedLow, batch.mask)),
      clippedHigh: flat(tf.mul(flags.clippedHigh, batch.mask)),
      clippedDual: flat(tf.mul(flags.clippedDual, batch.mask)),
      outOfRange: flat(tf.mul(flags.outOfRange, batch.mask)),
      memberLogRatio: tf.sum<tf.Tensor1D>(tokens, 1),
      tokenLogRatio: tokens,
    };
  });
}

/**
 * The configured objective's loss and diagnostic tensors.
 *
 * Differentiable in `logpNew`; usable inside `tf.grad`, `tf.variableGrads` and
 * `optimizer.minimize` (return `.loss`). Does not read tensor values, so it never
 * stalls an accelerator; value checks (finite, non-empty masks) are done when the
 * batch is built by `buildPaddedSetBatch`. Loss and gradient are finite for every
 * finite input (ratios are never formed beyond e^44.36; see docs/objective.md). A NaN
 * in unmasked `logpNew` propagates to the loss; `readDiagnostics` reports it as `losses/loss`.
 *
 * @param logpNew [M, T] current-policy log-probs, padded like `batch.logpOld`
 * @throws ValidationError when shapes disagree
 */
export function objectiveLoss(logpNew: tf.Tensor2D, batch: PaddedSetBatch, config: ObjectiveConfig): ObjectiveOutput {
  checkShapes(logpNew, batch);
  switch (config.objective) {
    case 'srpo':
      return srpoObjective(logpNew, batch, config);
    case 'gspo':
      return gspoObjective(logpNew, batch, config);
    case 'grpo-token':
      return grpoTokenObjective(logpNew, batch, config);
    case 'srpo-length-norm':
      return srpoLengthNormObjective(logpNew, batch, config);
    default:
      throw new ValidationError('config.objective', `unknown objective ${JSON.stringify(config.objective satisfies never)}`);
  }
}

/** Every tensor of an output except `loss`, e.g. to `tf.keep` inside a gradient scope. */
export function objectiveOutputTensors(out: ObjectiveOutput): tf.Tensor[] {
  return [
    out.ratio,
    out.logRatio,
    out.unitWeight,
    out.unitSet,
    out.unitSetSize,
    out.unitAdvantage,
    out.clippedLow,
    out.clippedHigh,
    out.clippedDual,
    out.outOfRange,
    out.memberLogRatio,
    out.tokenLogRatio,
  ];
}

/** Frees every tensor of an output. */
export function disposeObjectiveOutput(out: ObjectiveOutput): void {
  tf.dispose([out.loss, ...objectiveOutputTensors(out)]);
}

// tf.tidy keeps every tensor reachable from the returned object; the cast is only
// because an interface is not structurally a TensorContainer index signature.
function tidyOutput(build: () => ObjectiveOutput): ObjectiveOutput {
  return tf.tidy(() => build() as unknown as tf.TensorContainer) as unknown as ObjectiveOutput;
}

function sameShape(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((d, i) => d === b[i]);
}

function checkShapes(logpNew: tf.Tensor2D, batch: PaddedSetBatch): void {
  const old = batch.logpOld.shape;
  if (logpNew.rank !== 2 || !sameShape(logpNew.shape, old)) {
    throw new ValidationError('logpNew', `shape [${logpNew.shape.join(', ')}] differs from logpOld shape [${old.join(', ')}]`);
  }
  if (!sameShape(batch.mask.shape, old)) {
    throw new ValidationError('batch.mask', `shape [${batch.mask.shape.join(', ')}] differs from logpOld shape [${old.join(', ')}]`);
  }
  if (batch.memberSet.rank !== 1 || batch.memberSet.shape[0] !== old[0] || batch.memberSet.dtype !== 'int32') {
    throw new ValidationError('batch.memberSet', `expected int32 [${old[0]}], got ${batch.memberSet.dtype} [${batch.memberSet.shape.join(', ')}]`);
  }
  if (!Number.isInteger(batch.numSets) || batch.numSets < 1) {
    throw new ValidationError('batch.numSets', `expected a positive integer, got ${batch.numSets}`);
  }
  if (batch.advantage.rank !== 1 || batch.advantage.shape[0] !== batch.numSets) {
    throw new ValidationError('batch.advantage', `expected shape [${batch.numSets}], got [${batch.advantage.shape.join(', ')}]`);
  }
}
