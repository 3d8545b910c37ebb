import { ValidationError } from '@srpo/core';
import type { SeededRng } from '@srpo/policy';
import { digit, digitValue, MAX_DIGITS, MAX_WORKERS, slot, Tok } from '../tokenizer';

/**
 * Verifiable digit tasks over the shared vocabulary, for the fixed, joint and
 * routed workflows. Everything here is a pure function of the task and the
 * sampled tokens, so rewards can be checked against hand-worked examples.
 *
 * Each role's job is a per-token map of what it sees (reverse, increment mod k,
 * copy, a YES/NO per slot, a well-formedness check), because a policy trained
 * from scratch by RL learns those within a few hundred updates on 2 CPU cores,
 * while relational jobs (adding two digits, comparing an answer with the
 * question) stay at their base rate for thousands (measured: see docs/demo.md).
 *
 * Rewards carry a small format bonus: a well-formed but wrong token earns
 * `formatBonus` instead of 0. From scratch a policy first has to find the few
 * tokens an answer may use at all, and the bonus gives group-relative
 * advantages something to work with before the first right answer appears.
 * Success (what the demo reports) never includes the bonus.
 */
export interface ArithmeticSettings {
  /** Digits are taken modulo k (2..8). */
  modulus: number;
  /** Workers in joint and routed tasks (1..4). */
  workers: number;
  /** Digits in a fixed-workflow task (1..4); the solver answers each one decremented, in reverse order. */
  reverseLength: number;
  /** Reward of a well-formed wrong token, in [0, 1). */
  formatBonus: number;
  /** Probability that a routed task's slot is empty. */
  blankProbability: number;
}

export const DEFAULT_ARITHMETIC: ArithmeticSettings = { modulus: 4, workers: 2, reverseLength: 1, formatBonus: 0.1, blankProbability: 0.5 };

export function checkArithmeticSettings(s: ArithmeticSettings): ArithmeticSettings {
  if (!Number.isInteger(s.modulus) || s.modulus < 2 || s.modulus > MAX_DIGITS)
    throw new ValidationError('modulus', `must be an integer in [2, ${MAX_DIGITS}], got ${s.modulus}`);
  if (!Number.isInteger(s.workers) || s.workers < 1 || s.workers > MAX_WORKERS)
    throw new ValidationError('workers', `must be an integer in [1, ${MAX_WORKERS}], got ${s.workers}`);
  if (!Number.isInteger(s.reverseLength) || s.reverseLength < 1 || s.reverseLength > 4)
    throw new ValidationError('reverseLength', `must be an integer in [1, 4], got ${s.reverseLength}`);
  if (!(s.formatBonus >= 0 && s.formatBonus < 1)) throw new ValidationError('formatBonus', `must be in [0, 1), got ${s.formatBonus}`);
  if (!(s.blankProbability >= 0 && s.blankProbability < 1)) throw new ValidationError('blankProbability', `must be in [0, 1), got ${s.blankProbability}`);
  return s;
}

export interface Graded {
  /** Mean over positions of 1 (right), the format bonus (well-formed, wrong) or 0. */
  reward: number;
  /** Every position right. */
  correct: boolean;
}

/**
 * Grades a response against the expected tokens position by position.
 * `wellFormed` says which tokens may appear in an answer at all.
 */
export function gradeTokens(expected: readonly number[], answer: readonly number[], wellFormed: (t: number) => boolean, s: ArithmeticSettings): Graded {
  if (expected.length === 0) throw new ValidationError('expected', 'must hold at least one token');
  let total = 0;
  let right = 0;
  expected.forEach((want, j) => {
    const got = answer[j];
    if (got === want) {
      right++;
      total += 1;
    } else if (got !== undefined && wellFormed(got)) {
      total += s.formatBonus;
    }
  });
  return { reward: total / expected.length, correct: right === expected.length && answer.length === expected.length };
}

/** A digit below the modulus. */
export function isInRangeDigit(token: number, s: ArithmeticSettings): boolean {
  const d = digitValue(token);
  return d !== undefined && d < s.modulus;
}

// ---------------------------------------------------------------- fixed: solver → checker

/**
 * Fixed workflow task: the solver answers the digits in reverse order, each
 * decremented mod k (`[2 0]` → `[3 1]` for k = 4; one digit by default), and
 * the checker accepts or rejects the answer.
 */
export interface ReverseTask {
  digits: number[];
}

export function sampleReverseTask(rng: SeededRng, s: ArithmeticSettings): ReverseTask {
  return { digits: Array.from({ length: s.reverseLength }, () => rng.nextInt(s.modulus)) };
}

export function solverContext(t: ReverseTask): number[] {
  return [Tok.BOS, Tok.SOLVE, ...t.digits.map(digit), Tok.SEP];
}

export function reverseAnswer(t: ReverseTask, s: ArithmeticSettings): number[] {
  return [...t.digits].reverse().map((d) => digit((d + s.modulus - 1) % s.modulus));
}

export function solverReward(t: ReverseTask, answer: readonly number[], s: ArithmeticSettings): Graded {
  return gradeTokens(reverseAnswer(t, s), answer, (tok) => isInRangeDigit(tok, s), s);
}

export function checkerContext(answer: readonly number[]): number[] {
  return [Tok.BOS, Tok.CHECK, ...answer, Tok.SEP];
}

/** What the checker enforces: an answer of in-range digits only. */
export function isWellFormedAnswer(answer: readonly number[], s: ArithmeticSettings): boolean {
  return answer.length === s.reverseLength && answer.every((t) => isInRangeDigit(t, s));
}

export type Verdict = 'accept' | 'reject' | 'invalid';

export function verdictOf(token: number): Verdict {
  return token === Tok.YES ? 'accept' : token === Tok.NO ? 'reject' : 'invalid';
}

/** The checker is right when it accepts exactly the well-formed answers; a token other than YES/NO is never right. */
export function checkerReward(answer: readonly number[], verdict: Verdict, s: ArithmeticSettings): Graded {
  if (verdict === 'invalid') return { reward: 0, correct: false };
  const correct = (verdict === 'accept') === isWellFormedAnswer(answer, s);
  return { reward: correct ? 1 : s.formatBonus, correct };
}

// ---------------------------------------------------------------- joint and routed: workers → aggregator

/**
 * Slots of a joint or routed task: a digit, or null for an empty slot (routed
 * only). Worker i sees its own slot and answers the digit incremented mod k
 * (an empty slot stays BLANK); the aggregator copies the workers' answers, in
 * slot order, into the final answer.
 */
export interface SlotsTask {
  slots: (number | null)[];
}

export function sampleJointTask(rng: SeededRng, s: ArithmeticSettings): SlotsTask {
  return { slots: Array.from({ length: s.workers }, (): number | null => rng.nextInt(s.modulus)) };
}

/** At least one slot holds a digit, so every routed task has work to route. */
export function sampleRoutedTask(rng: SeededRng, s: ArithmeticSettings): SlotsTask {
  const slots = Array.from({ length: s.workers }, (): number | null => (rng.nextFloat() < s.blankProbability ? null : rng.nextInt(s.modulus)));
  if (!slots.some((v) => v !== null)) slots[rng.nextInt(s.workers)] = rng.nextInt(s.modulus);
  return { slots };
}

export function slotToken(v: number | null): number {
  return v === null ? Tok.BLANK : digit(v);
}

export function workerContext(t: SlotsTask, i: number): number[] {
  if (!Number.isInteger(i) || i < 0 || i >= t.slots.length) throw new ValidationError('worker', `must be a slot index in [0, ${t.slots.length}), got ${i}`);
  return [Tok.BOS, Tok.WORK, slot(i), slotToken(t.slots[i]), Tok.SEP];
}

/** A worker's right answer: its digit + 1 mod k, or BLANK for an empty slot. */
export function workerAnswer(t: SlotsTask, i: number, s: ArithmeticSettings): number {
  const v = t.slots[i];
  return v === null ? Tok.BLANK : digit((v + 1) % s.modulus);
}

function isSlotValue(token: number, s: ArithmeticSettings): boolean {
  return token === Tok.BLANK || isInRangeDigit(token, s);
}

export function workerReward(t: SlotsTask, i: number, answer: readonly number[], s: ArithmeticSettings): Graded {
  return gradeTokens([workerAnswer(t, i, s)], answer, (tok) => isSlotValue(tok, s), s);
}

/** One reward for a set of workers that acted together: the mean of their rewards. */
export function jointReward(rewards: readonly number[]): number {
  if (rewards.length === 0) throw new ValidationError('rewards', 'a joint set has at least one member');
  return rewards.reduce((a, b) => a + b, 0) / rewards.length;
}

/** What the aggregator sees: one token per slot (a worker's answer, or BLANK for a slot nobody worked on). */
export function aggregatorContext(values: readonly number[]): number[] {
  return [Tok.BOS, Tok.AGG, ...values, Tok.SEP];
}

/** The aggregator's job: copy what it was given, in slot order. */
export function aggregatorReward(values: readonly number[], answer: readonly number[], s: ArithmeticSettings): Graded {
  return gradeTokens(values, answer, (tok) => isSlotValue(tok, s), s);
}

/** The task's true final answer: every slot's right worker answer, in order. */
export function slotsAnswer(t: SlotsTask, s: ArithmeticSettings): number[] {
  return t.slots.map((_, i) => workerAnswer(t, i, s));
}

export function sameTokens(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((t, i) => t === b[i]);
}

export function routerContext(t: SlotsTask): number[] {
  return [Tok.BOS, Tok.ROUTE, ...t.slots.map(slotToken), Tok.SEP];
}
