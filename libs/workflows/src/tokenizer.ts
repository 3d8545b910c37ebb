import { ValidationError } from '@srpo/core';

/**
 * The token vocabulary every workflow shares. Policies are trained from scratch,
 * so the vocabulary is small on purpose: a random policy spreads its mass over
 * {@link VOCAB_SIZE} tokens and rarely hits a right answer, yet a small
 * transformer finds the structure within minutes of updates.
 *
 * The model's `vocabSize` (SRPO_MODEL_CONFIG) must be at least {@link VOCAB_SIZE}.
 */
export const Tok = {
  BOS: 0,
  SEP: 1,
  /** Digit 0; digit d is `DIGIT0 + d`, d < {@link MAX_DIGITS}. */
  DIGIT0: 2,
  YES: 10,
  NO: 11,
  /** An empty slot (routed tasks) or an unselected worker. */
  BLANK: 12,
  SOLVE: 13,
  CHECK: 14,
  WORK: 15,
  ROUTE: 16,
  AGG: 17,
  SEARCH: 18,
  /** Worker slot i is `SLOT0 + i`, i < {@link MAX_WORKERS}. */
  SLOT0: 19,
  /** Document j is `DOC0 + j`, j < {@link MAX_DOCS}. */
  DOC0: 23,
  PTR: 29,
  VAL: 30,
  NOTHING: 31,
} as const;

export const MAX_DIGITS = 8;
export const MAX_WORKERS = 4;
export const MAX_DOCS = 6;
export const VOCAB_SIZE = 32;

export function digit(d: number): number {
  if (!Number.isInteger(d) || d < 0 || d >= MAX_DIGITS) throw new ValidationError('digit', `must be an integer in [0, ${MAX_DIGITS}), got ${d}`);
  return Tok.DIGIT0 + d;
}

/** The digit a token stands for, or undefined for any other token. */
export function digitValue(token: number): number | undefined {
  return token >= Tok.DIGIT0 && token < Tok.DIGIT0 + MAX_DIGITS ? token - Tok.DIGIT0 : undefined;
}

export function slot(i: number): number {
  if (!Number.isInteger(i) || i < 0 || i >= MAX_WORKERS) throw new ValidationError('slot', `must be an integer in [0, ${MAX_WORKERS}), got ${i}`);
  return Tok.SLOT0 + i;
}

export function doc(j: number): number {
  if (!Number.isInteger(j) || j < 0 || j >= MAX_DOCS) throw new ValidationError('doc', `must be an integer in [0, ${MAX_DOCS}), got ${j}`);
  return Tok.DOC0 + j;
}

/** The document a token names, or undefined. */
export function docIndex(token: number): number | undefined {
  return token >= Tok.DOC0 && token < Tok.DOC0 + MAX_DOCS ? token - Tok.DOC0 : undefined;
}

const NAMES: Record<number, string> = Object.fromEntries(Object.entries(Tok).map(([k, v]) => [v, k]));

/** Human-readable tokens, for logs and docs (`[BOS SOLVE 2 3 SEP]`). */
export function render(tokens: readonly number[]): string {
  return `[${tokens
    .map((t) => {
      const d = digitValue(t);
      if (d !== undefined) return String(d);
      const j = docIndex(t);
      if (j !== undefined) return `DOC${j}`;
      if (t >= Tok.SLOT0 && t < Tok.SLOT0 + MAX_WORKERS) return `SLOT${t - Tok.SLOT0}`;
      return NAMES[t] ?? `#${t}`;
    })
    .join(' ')}]`;
}
