import { ValidationError } from '@srpo/core';

/** Successes out of trials on a held-out set. */
export interface SuccessCount {
  successes: number;
  trials: number;
}

/** How the gate reads the difference of success proportions. */
export type GateRule = 'point' | 'lower';
export const GATE_RULES: readonly GateRule[] = ['point', 'lower'];

/** z for a two-sided 95 % interval (Φ⁻¹(0.975)). */
const Z95 = 1.959963984540054;

/**
 * Wilson's score interval for one proportion p̂ = x/n at 95 % (Wilson 1927; Newcombe 1998a,
 * method 3):
 *
 *   centre = (p̂ + z²/2n) / (1 + z²/n),  half = z/(1 + z²/n) · √(p̂(1−p̂)/n + z²/4n²).
 *
 * Returns [lower, upper] within [0, 1]; n = 0 gives [0, 1] (nothing is known).
 */
export function wilsonInterval(c: SuccessCount, z = Z95): [number, number] {
  checkCount(c, 'count');
  const { successes: x, trials: n } = c;
  if (n === 0) return [0, 1];
  const p = x / n;
  const z2 = z * z;
  const denom = 1 + z2 / n;
  const centre = (p + z2 / (2 * n)) / denom;
  const half = (z / denom) * Math.sqrt((p * (1 - p)) / n + z2 / (4 * n * n));
  return [Math.max(0, centre - half), Math.min(1, centre + half)];
}

/**
 * Newcombe's hybrid score interval for the difference d = p̂₁ − p̂₂ of two proportions at 95 %
 * (Newcombe 1998b, "Interval estimation for the difference between independent proportions",
 * method 10), built from each side's Wilson interval [lᵢ, uᵢ]:
 *
 *   L = d − √((p̂₁ − l₁)² + (u₂ − p̂₂)²),  U = d + √((u₁ − p̂₁)² + (p̂₂ − l₂)²).
 *
 * The gate scores both versions on the same items, so the samples are paired; this interval
 * treats them as independent, which is wider than a paired one when both versions tend to
 * solve the same items (the usual case), so a refusal by `lower` errs on the cautious side.
 */
export function differenceInterval(a: SuccessCount, b: SuccessCount): [number, number] {
  const [l1, u1] = wilsonInterval(a);
  const [l2, u2] = wilsonInterval(b);
  const p1 = a.trials === 0 ? 0 : a.successes / a.trials;
  const p2 = b.trials === 0 ? 0 : b.successes / b.trials;
  const d = p1 - p2;
  return [d - Math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2), d + Math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)];
}

/** The gate's verdict and the figures it rests on (what a decision record holds). */
export interface GateVerdict {
  accepted: boolean;
  /** p̂_candidate − p̂_serving. */
  difference: number;
  /** Newcombe's 95 % interval of the difference ({@link differenceInterval}). */
  interval: [number, number];
  candidateRate: number;
  servingRate: number;
  margin: number;
  rule: GateRule;
}

/**
 * The publishing gate's rule. With d = p̂_candidate − p̂_serving on the same held-out items and
 * [L, U] its 95 % interval:
 * - `point`: publish iff d ≥ −margin (the candidate's success rate is at most `margin` below
 *   the serving version's);
 * - `lower`: publish iff L ≥ −margin (non-inferiority shown at 95 %: stricter, and with a small
 *   held-out set it refuses nearly everything unless `margin` is wide).
 * A difference within 1e-12 of the bound counts as meeting it (floating-point ties).
 * A side with no trials is refused: nothing was measured.
 */
export function gateVerdict(candidate: SuccessCount, serving: SuccessCount, margin: number, rule: GateRule): GateVerdict {
  checkCount(candidate, 'candidate');
  checkCount(serving, 'serving');
  if (!(margin >= 0 && margin <= 1)) throw new ValidationError('margin', `must be within [0, 1], got ${margin}`);
  if (!GATE_RULES.includes(rule)) throw new ValidationError('rule', `must be one of ${GATE_RULES.join(', ')}, got ${String(rule)}`);
  const candidateRate = candidate.trials === 0 ? 0 : candidate.successes / candidate.trials;
  const servingRate = serving.trials === 0 ? 0 : serving.successes / serving.trials;
  const difference = candidateRate - servingRate;
  const interval = differenceInterval(candidate, serving);
  const statistic = rule === 'point' ? difference : interval[0];
  const measured = candidate.trials > 0 && serving.trials > 0;
  return { accepted: measured && statistic >= -margin - 1e-12, difference, interval, candidateRate, servingRate, margin, rule };
}

function checkCount(c: SuccessCount, field: string): void {
  if (!Number.isInteger(c.trials) || c.trials < 0) throw new ValidationError(`${field}.trials`, `must be an integer >= 0, got ${c.trials}`);
  if (!Number.isInteger(c.successes) || c.successes < 0 || c.successes > c.trials)
    throw new ValidationError(`${field}.successes`, `must be an integer within [0, trials=${c.trials}], got ${c.successes}`);
}
