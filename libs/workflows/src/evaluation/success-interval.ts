import { ValidationError } from '@srpo/core';

/** A success rate with its 95 % Wilson score interval. */
export interface SuccessInterval {
  successes: number;
  trials: number;
  rate: number;
  low: number;
  high: number;
}

/**
 * Wilson score interval of k successes in n trials (Wilson 1927):
 *   centre = (p + z²/2n) / (1 + z²/n),  half = z·√(p(1−p)/n + z²/4n²) / (1 + z²/n),  p = k/n.
 * Unlike p ± z·√(p(1−p)/n) it stays inside [0, 1] and is not empty at k = 0 or k = n, which
 * matters for a base model that starts near 0 %. n = 0 gives [0, 1] (nothing known).
 */
export function wilsonInterval(successes: number, trials: number, z = 1.96): SuccessInterval {
  if (!Number.isInteger(trials) || trials < 0) throw new ValidationError('trials', `must be a non-negative integer, got ${trials}`);
  if (!Number.isInteger(successes) || successes < 0 || successes > trials)
    throw new ValidationError('successes', `must be an integer in [0, trials = ${trials}], got ${successes}`);
  if (!(z > 0 && Number.isFinite(z))) throw new ValidationError('z', `must be a positive number, got ${z}`);
  if (trials === 0) return { successes, trials, rate: 0, low: 0, high: 1 };
  const n = trials;
  const p = successes / n;
  const d = 1 + (z * z) / n;
  const centre = (p + (z * z) / (2 * n)) / d;
  const half = (z * Math.sqrt((p * (1 - p)) / n + (z * z) / (4 * n * n))) / d;
  // The bounds are exact at the ends; clamp only the rounding.
  return { successes, trials, rate: p, low: successes === 0 ? 0 : Math.max(0, centre - half), high: successes === n ? 1 : Math.min(1, centre + half) };
}

/** 'gain' when the end's interval lies wholly above the start's, 'loss' when wholly below, else 'overlap'. */
export function compareIntervals(start: SuccessInterval, end: SuccessInterval): 'gain' | 'loss' | 'overlap' {
  if (end.low > start.high) return 'gain';
  if (end.high < start.low) return 'loss';
  return 'overlap';
}

/** Success over a list of per-item outcomes (a held-out evaluation), with its interval. */
export function successOf(outcomes: readonly boolean[]): SuccessInterval {
  return wilsonInterval(
    outcomes.reduce((k, ok) => k + (ok ? 1 : 0), 0),
    outcomes.length,
  );
}
