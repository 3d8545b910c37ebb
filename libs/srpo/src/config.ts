import { ValidationError } from '@srpo/core';
import { describeValue, isRecord, rejectUnknownKeys, requireBoolean, requireFiniteNumber } from './validation';

/**
 * Which surrogate to optimise.
 * - `srpo`: one ratio and one clip per active set (SRPO: Setwise Relative Policy Optimization).
 * - `gspo`: one length-normalised ratio and one clip per member (Zheng et al. 2025, GSPO).
 * - `grpo-token`: one ratio and one clip per token (Shao et al. 2024, DeepSeekMath GRPO).
 * - `srpo-length-norm`: this project's variant of SRPO, not the paper's: the set ratio sums
 *   each member's log-ratio divided by its length (GSPO's per-member normalisation inside
 *   SRPO's one ratio and one clip per set). Kept for the experiments of bench/studies/srpo.
 */
export type Objective = 'srpo' | 'gspo' | 'grpo-token' | 'srpo-length-norm';
export const OBJECTIVES: readonly Objective[] = ['srpo', 'gspo', 'grpo-token', 'srpo-length-norm'];

/**
 * The event reduction c(K) applied to the summed member log-ratios of a set with K
 * members: `sqrt` → 1/√K, `sum` → 1, `mean` → 1/K.
 */
export type EventReduction = 'sqrt' | 'sum' | 'mean';
export const EVENT_REDUCTIONS: readonly EventReduction[] = ['sqrt', 'sum', 'mean'];

/** `sample` divides the squared deviations by n − 1, `population` by n. */
export type AdvantageStd = 'sample' | 'population';
export const ADVANTAGE_STDS: readonly AdvantageStd[] = ['sample', 'population'];

/** ProGPO progress fallback: rewards replaced by task progress in groups where every reward is ~0. */
export interface ProgressFallbackConfig {
  enabled: boolean;
  /** Every reward in the group must be strictly below this for the fallback to apply. */
  rewardThreshold: number;
  /** The progress values' standard deviation must be at least this. */
  stdThreshold: number;
}

export interface ObjectiveConfig {
  objective: Objective;
  eventReduction: EventReduction;
  /** Lower clip width ε_low: ratios are clipped below at 1 − ε_low. In [0, 1]. */
  clipLow: number;
  /** Upper clip width ε_high: ratios are clipped above at 1 + ε_high. >= 0. */
  clipHigh: number;
  /**
   * Dual clip for negative advantages (Ye et al. 2020, arXiv:1912.09729; verl's
   * `clip_ratio_c`): with A < 0 the surrogate is `max(min(rA, clip(r)A), c·A)`, so a set
   * whose ratio ran far above 1 costs at most c·|A| and gets no gradient once r > c.
   * Default true (docs/objective.md says why).
   */
  dualClip: boolean;
  /** c of the dual clip, > 1; only read when `dualClip` is true. Default 3 (verl's default). */
  clipRatioC: number;
  advantageStd: AdvantageStd;
  /** Added to the group standard deviation before dividing. >= 0. */
  advantageEps: number;
  progress: ProgressFallbackConfig;
}

export const DEFAULT_OBJECTIVE_CONFIG: ObjectiveConfig = Object.freeze({
  objective: 'srpo',
  eventReduction: 'sqrt',
  clipLow: 0.2,
  clipHigh: 0.2,
  dualClip: true,
  clipRatioC: 3,
  advantageStd: 'sample',
  advantageEps: 1e-6,
  progress: Object.freeze({ enabled: false, rewardThreshold: 0.001, stdThreshold: 0.0001 }),
});

const TOP_KEYS = ['objective', 'eventReduction', 'clipLow', 'clipHigh', 'dualClip', 'clipRatioC', 'advantageStd', 'advantageEps', 'progress'] as const;
const PROGRESS_KEYS = ['enabled', 'rewardThreshold', 'stdThreshold'] as const;

function oneOf<T extends string>(value: unknown, allowed: readonly T[], field: string): T {
  if (typeof value !== 'string' || !(allowed as readonly string[]).includes(value)) {
    throw new ValidationError(field, `expected one of ${allowed.join(', ')}, got ${describeValue(value)}`);
  }
  return value as T;
}

function numberInRange(value: unknown, field: string, min: number, max = Number.POSITIVE_INFINITY): number {
  const n = requireFiniteNumber(value, field);
  if (n < min || n > max) {
    throw new ValidationError(field, max === Number.POSITIVE_INFINITY ? `must be >= ${min}, got ${n}` : `must be in [${min}, ${max}], got ${n}`);
  }
  return n;
}

/** c of the dual clip: a finite number > 1 (c <= 1 would bound a negative-advantage term above its unclipped value at r = 1). */
function dualClipC(value: unknown, field: string): number {
  const n = requireFiniteNumber(value, field);
  if (!(n > 1)) throw new ValidationError(field, `must be > 1, got ${n}`);
  return n;
}

/** The dual-clip constant the surrogate uses: `clipRatioC`, or null when `dualClip` is off. */
export function dualClipRatio(config: Pick<ObjectiveConfig, 'dualClip' | 'clipRatioC'>): number | null {
  return config.dualClip ? config.clipRatioC : null;
}

/**
 * Fills a partial config with {@link DEFAULT_OBJECTIVE_CONFIG} and validates every field.
 *
 * `undefined` and `null` give the defaults. Unknown keys are refused so a misspelt
 * field cannot fall back to its default unnoticed.
 *
 * @param partial parsed JSON or a typed partial config
 * @param path prefix of the field named in errors (`config.clipLow: must be in [0, 1], got 2`)
 * @throws ValidationError naming the first bad field
 */
export function resolveObjectiveConfig(partial: unknown, path = 'config'): ObjectiveConfig {
  const d = DEFAULT_OBJECTIVE_CONFIG;
  if (partial === undefined || partial === null) return { ...d, progress: { ...d.progress } };
  if (!isRecord(partial)) throw new ValidationError(path, `expected an object, got ${describeValue(partial)}`);
  rejectUnknownKeys(partial, TOP_KEYS, path);
  const has = (key: string): boolean => partial[key] !== undefined;

  let progress = { ...d.progress };
  if (has('progress')) {
    const p = partial.progress;
    if (!isRecord(p)) throw new ValidationError(`${path}.progress`, `expected an object, got ${describeValue(p)}`);
    rejectUnknownKeys(p, PROGRESS_KEYS, `${path}.progress`);
    progress = {
      enabled: p.enabled === undefined ? d.progress.enabled : requireBoolean(p.enabled, `${path}.progress.enabled`),
      rewardThreshold:
        p.rewardThreshold === undefined ? d.progress.rewardThreshold : requireFiniteNumber(p.rewardThreshold, `${path}.progress.rewardThreshold`),
      stdThreshold: p.stdThreshold === undefined ? d.progress.stdThreshold : numberInRange(p.stdThreshold, `${path}.progress.stdThreshold`, 0),
    };
  }

  return {
    objective: has('objective') ? oneOf(partial.objective, OBJECTIVES, `${path}.objective`) : d.objective,
    eventReduction: has('eventReduction') ? oneOf(partial.eventReduction, EVENT_REDUCTIONS, `${path}.eventReduction`) : d.eventReduction,
    // clipLow above 1 would put the lower clip bound below 0, where no ratio can be.
    clipLow: has('clipLow') ? numberInRange(partial.clipLow, `${path}.clipLow`, 0, 1) : d.clipLow,
    clipHigh: has('clipHigh') ? numberInRange(partial.clipHigh, `${path}.clipHigh`, 0) : d.clipHigh,
    dualClip: has('dualClip') ? requireBoolean(partial.dualClip, `${path}.dualClip`) : d.dualClip,
    clipRatioC: has('clipRatioC') ? dualClipC(partial.clipRatioC, `${path}.clipRatioC`) : d.clipRatioC,
    advantageStd: has('advantageStd') ? oneOf(partial.advantageStd, ADVANTAGE_STDS, `${path}.advantageStd`) : d.advantageStd,
    advantageEps: has('advantageEps') ? numberInRange(partial.advantageEps, `${path}.advantageEps`, 0) : d.advantageEps,
    progress,
  };
}
