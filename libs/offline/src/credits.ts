import { ValidationError } from '@srpo/core';

/** How a PMI credit is measured; see {@link adjacentCredits} and {@link bestPrefixCredits}. */
export type CreditMode = 'adjacent' | 'best_prefix';
export const CREDIT_MODES: readonly CreditMode[] = ['adjacent', 'best_prefix'];

/**
 * The credit of each successful action with the baseline it was measured from.
 * `baseline[k−1]` is what `credit[k−1]` was subtracted from (L_{k−1} or B).
 */
export interface PrefixCredits {
  credit: number[];
  baseline: number[];
}

/**
 * Mean per-token negative log-likelihood of an instruction y of |y| tokens:
 * `L = −(1/|y|) Σ_t log p(y_t | x, y_<t)`.
 *
 * @param logProbs per-token log-probs of y, length |y| ≥ 1 (masked positions excluded by `mask`)
 * @param mask     1 where the token counts; default all ones
 */
export function meanTokenNll(logProbs: readonly number[], mask?: readonly number[]): number {
  let sum = 0;
  let n = 0;
  logProbs.forEach((lp, t) => {
    const m = mask ? mask[t] : 1;
    if (m === 0) return;
    if (!Number.isFinite(lp)) throw new ValidationError(`logProbs[${t}]`, `must be finite, got ${lp}`);
    sum -= lp * m;
    n += m;
  });
  if (n === 0) throw new ValidationError('logProbs', 'has no unmasked token; the NLL of an empty instruction is undefined');
  return sum / n;
}

function checkNll(nll: readonly number[]): void {
  if (!Array.isArray(nll) || nll.length === 0) throw new ValidationError('nll', 'must hold L_{-1} followed by L_1..L_K (at least L_{-1})');
  nll.forEach((l, i) => {
    if (!Number.isFinite(l)) throw new ValidationError(`nll[${i}]`, `must be finite, got ${l}`);
  });
}

/**
 * Adjacent PMI credit: how much showing the k-th successful action lowered the
 * instruction's NLL,
 *
 *   c_k = L_{k−1} − L_k,   k = 1..K,
 *
 * so Σ_k c_k = L_{−1} − L_K (telescoping).
 *
 * @param nll `[L_{−1}, L_1, …, L_K]`, length K + 1 (index 0 is "no action shown")
 * @returns credits and baselines, length K
 */
export function adjacentCredits(nll: readonly number[]): PrefixCredits {
  checkNll(nll);
  const credit: number[] = [];
  const baseline: number[] = [];
  for (let k = 1; k < nll.length; k++) {
    baseline.push(nll[k - 1]);
    credit.push(nll[k - 1] - nll[k]);
  }
  return { credit, baseline };
}

/**
 * Best-prefix PMI credit: each action is measured against the best (lowest) NLL
 * reached so far by prefixes that did not make things worse,
 *
 *   B_1 = L_{−1};   c_k = B_k − L_k;   B_{k+1} = L_k if c_k ≥ 0, else B_k.
 *
 * An action that raised the NLL is charged against the best prefix, and the
 * next action is not rewarded merely for undoing that damage.
 *
 * @param nll `[L_{−1}, L_1, …, L_K]`, length K + 1
 * @returns credits and the B each was measured from, length K
 */
export function bestPrefixCredits(nll: readonly number[]): PrefixCredits {
  checkNll(nll);
  const credit: number[] = [];
  const baseline: number[] = [];
  let b = nll[0];
  for (let k = 1; k < nll.length; k++) {
    const c = b - nll[k];
    baseline.push(b);
    credit.push(c);
    if (c >= 0) b = nll[k];
  }
  return { credit, baseline };
}

/** The credits of one mode; see {@link adjacentCredits} and {@link bestPrefixCredits}. */
export function prefixCredits(mode: CreditMode, nll: readonly number[]): PrefixCredits {
  if (mode === 'adjacent') return adjacentCredits(nll);
  if (mode === 'best_prefix') return bestPrefixCredits(nll);
  throw new ValidationError('creditMode', `must be one of ${CREDIT_MODES.join(', ')}, got ${String(mode)}`);
}

/**
 * Spreads the credits of the successful actions over all actions in trajectory
 * order; a failed action gets credit 0.
 *
 * @param successful one flag per action, in order
 * @param credits    one credit per successful action, in order (length = #true in `successful`)
 */
export function creditsForActions(successful: readonly boolean[], credits: readonly number[]): number[] {
  const k = successful.filter(Boolean).length;
  if (credits.length !== k) throw new ValidationError('credits', `must hold one credit per successful action (${k}), got ${credits.length}`);
  let next = 0;
  return successful.map((ok) => (ok ? credits[next++] : 0));
}

/**
 * Training weights from credits within one trajectory: negative credits are
 * clipped to 0, then divided by the largest, so the most informative action
 * weighs 1:
 *
 *   w_k = max(c_k, 0) / max_j max(c_j, 0),   and w = 0 when no credit is positive.
 */
export function creditWeights(credits: readonly number[]): number[] {
  credits.forEach((c, i) => {
    if (!Number.isFinite(c)) throw new ValidationError(`credits[${i}]`, `must be finite, got ${c}`);
  });
  const clipped = credits.map((c) => Math.max(c, 0));
  const top = clipped.reduce((a, c) => Math.max(a, c), 0);
  return top > 0 ? clipped.map((c) => c / top) : clipped.map(() => 0);
}
