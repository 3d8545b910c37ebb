import { ValidationError } from '@srpo/core';
import type { AdvantageStd, ObjectiveConfig } from './config';
import { describeValue, requireArray, requireFiniteNumber, requireNonEmptyString, setPath } from './validation';

/**
 * Group-relative advantages, computed on the host in float64.
 *
 * They are computed once per rollout batch (by the stream materializer and the
 * learner alike) and only then copied into a float32 tensor, so both sides agree
 * on the same numbers and the per-group statistics never depend on how a batch is
 * split into mini-batches.
 */

export interface AdvantageInput {
  setId: string;
  /** Sets sharing a key (same task, same prompt) are normalised against each other. */
  groupKey: string;
  reward: number;
  /** ProGPO task progress in [0, 1], e.g. {@link progressCoverage}; only used by the fallback. */
  progress?: number;
}

export interface AdvantageResult {
  setId: string;
  groupKey: string;
  advantage: number;
  /** True when the group's advantages were computed from progress instead of reward. */
  fromProgress: boolean;
  /** True when the group has one set, or the values it was normalised on are all equal (every A = 0). */
  degenerateGroup: boolean;
}

/** Arithmetic mean μ = (1/n) Σ x_i. NaN for an empty list. */
export function groupMean(values: readonly number[]): number {
  let sum = 0;
  for (const v of values) sum += v;
  return sum / values.length;
}

/**
 * Standard deviation, two-pass for accuracy:
 * `sample`: σ = √(Σ (x_i − μ)² / (n − 1)); `population`: σ = √(Σ (x_i − μ)² / n).
 * Returns 0 for fewer than two values, where the sample form is undefined and a
 * group carries no relative signal anyway.
 */
export function groupStd(values: readonly number[], kind: AdvantageStd): number {
  const n = values.length;
  if (n < 2) return 0;
  const mu = groupMean(values);
  let squares = 0;
  for (const v of values) squares += (v - mu) * (v - mu);
  return Math.sqrt(squares / (kind === 'sample' ? n - 1 : n));
}

/**
 * Group-normalised advantage (GRPO outcome supervision, Shao et al. 2024, DeepSeekMath §4.1.2;
 * applied per active set in SRPO): `A_e = (R_e − μ_g) / (σ_g + ε)`.
 */
export function advantage(value: number, groupMean: number, groupStd: number, eps: number): number {
  return (value - groupMean) / (groupStd + eps);
}

/**
 * ProGPO task progress as first-visit observation coverage:
 * `progress = (distinct observations − 1) / turns`.
 *
 * The − 1 discounts the initial observation, which every episode sees without
 * acting. With one observation per turn the result lies in [0, 1]; repeated
 * observations (loops) earn nothing.
 *
 * @param observationDigests digests of the observations in visit order, the initial one included
 * @param turns number of turns taken; 0 gives progress 0
 * @throws ValidationError for a negative or fractional `turns` or a non-string digest
 */
export function progressCoverage(observationDigests: readonly string[], turns: number): number {
  requireArray(observationDigests, 'observationDigests', 'an array of digest strings');
  observationDigests.forEach((d, i) => {
    if (typeof d !== 'string') throw new ValidationError(`observationDigests[${i}]`, `expected a string, got ${describeValue(d)}`);
  });
  if (typeof turns !== 'number' || !Number.isInteger(turns) || turns < 0) {
    throw new ValidationError('turns', `expected a non-negative integer, got ${describeValue(turns)}`);
  }
  if (turns === 0) return 0;
  const distinct = new Set(observationDigests).size;
  return Math.max(distinct - 1, 0) / turns;
}

/**
 * Per-set advantages, normalised within each group of sets that share `groupKey`.
 *
 * - `A_e = (R_e − μ_g) / (σ_g + advantageEps)`, σ per `advantageStd` (n − 1 or n).
 * - A group of one set, or one whose values are all equal (σ = 0), gets A = 0 for
 *   every set and is marked `degenerateGroup`; equality is tested exactly rather
 *   than via σ = 0 because the float64 mean of equal values can be off by one ulp.
 * - ProGPO fallback: when `progress.enabled`, every reward in the group is
 *   strictly below `progress.rewardThreshold`, every set carries `progress`, and
 *   the progress values have σ (same `advantageStd`) >= `progress.stdThreshold` and
 *   are not all equal, the advantages are computed the same way from progress.
 *
 * @returns one result per input, in input order
 * @throws ValidationError for a missing or non-finite reward/progress, an empty id, a duplicate setId
 */
export function groupAdvantages(sets: readonly AdvantageInput[], config: ObjectiveConfig): AdvantageResult[] {
  requireArray(sets, 'sets', 'an array of sets');
  const groups = new Map<string, number[]>();
  const seen = new Map<string, number>();
  sets.forEach((s, i) => {
    const path = setPath(i, s?.setId);
    const setId = requireNonEmptyString(s?.setId, `${path}.setId`);
    const earlier = seen.get(setId);
    if (earlier !== undefined) throw new ValidationError(`${path}.setId`, `duplicate of sets[${earlier}]`);
    seen.set(setId, i);
    const groupKey = requireNonEmptyString(s.groupKey, `${path}.groupKey`);
    requireFiniteNumber(s.reward, `${path}.reward`);
    if (s.progress !== undefined) requireFiniteNumber(s.progress, `${path}.progress`);
    const members = groups.get(groupKey);
    if (members) members.push(i);
    else groups.set(groupKey, [i]);
  });

  const results = new Array<AdvantageResult>(sets.length);
  for (const [groupKey, indices] of groups) {
    const rewards = indices.map((i) => sets[i].reward);
    const useProgress =
      indices.length > 1 &&
      progressFallbackApplies(
        indices.map((i) => sets[i]),
        config,
      );
    const values = useProgress ? indices.map((i) => sets[i].progress as number) : rewards;
    const degenerate = indices.length < 2 || allEqual(values);
    const mu = groupMean(values);
    const sigma = groupStd(values, config.advantageStd);
    indices.forEach((i, k) => {
      results[i] = {
        setId: sets[i].setId,
        groupKey,
        advantage: degenerate ? 0 : advantage(values[k], mu, sigma, config.advantageEps),
        fromProgress: useProgress,
        degenerateGroup: degenerate,
      };
    });
  }
  return results;
}

function progressFallbackApplies(group: readonly AdvantageInput[], config: ObjectiveConfig): boolean {
  const p = config.progress;
  if (!p.enabled) return false;
  if (!group.every((s) => s.reward < p.rewardThreshold)) return false;
  // Without progress on every set the group would mix two scales; keep the reward.
  if (!group.every((s) => s.progress !== undefined)) return false;
  const progress = group.map((s) => s.progress as number);
  return !allEqual(progress) && groupStd(progress, config.advantageStd) >= p.stdThreshold;
}

function allEqual(values: readonly number[]): boolean {
  return values.every((v) => v === values[0]);
}
