import { ValidationError } from '@srpo/core';
import { gradeTokens, type ArithmeticSettings, type Graded, type SlotsTask } from './envs/arithmetic.env';
import { Tok } from './tokenizer';

/**
 * The router answers one token per slot, YES (send that slot's worker) or NO.
 * The chosen workers act together and one transition consumes all of them, so
 * the set size K is whatever the router decided, 1..N.
 */
export interface RoutingChoice {
  /** Slots whose worker acts, ascending; never empty. */
  selected: number[];
  /** True when the router selected nobody and slot 0 was sent by default (a set needs K >= 1). */
  fallback: boolean;
}

export function decodeRouting(tokens: readonly number[], workers: number): RoutingChoice {
  if (tokens.length !== workers) throw new ValidationError('router.tokens', `expected one token per worker (${workers}), got ${tokens.length}`);
  const selected = tokens.flatMap((t, i) => (t === Tok.YES ? [i] : []));
  return selected.length > 0 ? { selected, fallback: false } : { selected: [0], fallback: true };
}

/** The decision a perfect router makes: YES exactly for the non-empty slots. */
export function idealRouting(t: SlotsTask): number[] {
  return t.slots.map((v) => (v === null ? Tok.NO : Tok.YES));
}

/** Share of slots the router decided right, with the format bonus for a wrong YES/NO; `correct` when all are right. */
export function routerReward(t: SlotsTask, tokens: readonly number[], s: ArithmeticSettings): Graded {
  if (tokens.length !== t.slots.length) throw new ValidationError('router.tokens', `expected ${t.slots.length} tokens, got ${tokens.length}`);
  return gradeTokens(idealRouting(t), tokens, (tok) => tok === Tok.YES || tok === Tok.NO, s);
}
