/**
 * Small-sample statistics for the studies: means with Student-t 95 % intervals over
 * seeds, paired differences, and the area under a learning curve.
 */

export const mean = (xs: readonly number[]): number => (xs.length === 0 ? Number.NaN : xs.reduce((a, b) => a + b, 0) / xs.length);

/** Sample standard deviation (n − 1); 0 for fewer than two values. */
export function sampleStd(xs: readonly number[]): number {
  if (xs.length < 2) return 0;
  const m = mean(xs);
  return Math.sqrt(xs.reduce((a, x) => a + (x - m) ** 2, 0) / (xs.length - 1));
}

/** Sample variance (n − 1); NaN for fewer than two values. */
export function sampleVariance(xs: readonly number[]): number {
  if (xs.length < 2) return Number.NaN;
  const m = mean(xs);
  return xs.reduce((a, x) => a + (x - m) ** 2, 0) / (xs.length - 1);
}

// Two-sided 97.5 % quantiles of Student's t for df = 1..30 (standard tables).
const T975 = [
  12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.16, 2.145, 2.131, 2.12, 2.11, 2.101, 2.093, 2.086, 2.08, 2.074, 2.069,
  2.064, 2.06, 2.056, 2.052, 2.048, 2.045, 2.042,
];

/** t_{0.975, df}; the normal 1.96 beyond df = 30 would understate it slightly, so 2.042 is kept up to 40 and 1.96 after 120. */
export function tQuantile975(df: number): number {
  if (!Number.isInteger(df) || df < 1) throw new RangeError(`df must be a positive integer, got ${df}`);
  if (df <= 30) return T975[df - 1];
  if (df <= 40) return 2.042;
  if (df <= 60) return 2.021;
  if (df <= 120) return 2.0;
  return 1.96;
}

export interface Interval {
  mean: number;
  /** Half-width of the 95 % interval (t over n − 1 degrees of freedom); NaN for n < 2. */
  half: number;
  n: number;
}

/** Mean with a Student-t 95 % interval: mean ± t_{0.975, n−1} · s / √n. */
export function ci95(xs: readonly number[]): Interval {
  const n = xs.length;
  return { mean: mean(xs), half: n < 2 ? Number.NaN : (tQuantile975(n - 1) * sampleStd(xs)) / Math.sqrt(n), n };
}

/** Paired difference a_i − b_i (same seed) with its 95 % interval. */
export function pairedDiff(a: readonly number[], b: readonly number[]): Interval {
  if (a.length !== b.length) throw new RangeError(`paired samples need equal lengths, got ${a.length} and ${b.length}`);
  return ci95(a.map((x, i) => x - b[i]));
}

/** True when the interval excludes 0. */
export const excludesZero = (i: Interval): boolean => Number.isFinite(i.half) && Math.abs(i.mean) > i.half;

/**
 * Area under a learning curve sampled at equal steps, normalised by its length: the
 * trapezoid rule over x ∈ [0, 1]. A constant curve c has area c.
 */
export function normalisedAuc(curve: readonly number[]): number {
  if (curve.length === 0) return Number.NaN;
  if (curve.length === 1) return curve[0];
  let area = 0;
  for (let i = 1; i < curve.length; i++) area += (curve[i - 1] + curve[i]) / 2;
  return area / (curve.length - 1);
}

/** Means of consecutive blocks of `size` points (the last block may be shorter). */
export function blockMeans(xs: readonly number[], size: number): number[] {
  if (!Number.isInteger(size) || size < 1) throw new RangeError(`size must be a positive integer, got ${size}`);
  const out: number[] = [];
  for (let i = 0; i < xs.length; i += size) out.push(mean(xs.slice(i, i + size)));
  return out;
}

/** `12.3 ± 4.5` in percent. */
export const pct = (i: Interval, digits = 1): string => `${(100 * i.mean).toFixed(digits)} ± ${Number.isFinite(i.half) ? (100 * i.half).toFixed(digits) : '–'}`;
