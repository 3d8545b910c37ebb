/**
 * The AgentBrew study's environment (issue #20, part 2): one agent calls the API of a
 * small key-value store for a fixed number of turns, and the end state defines what was
 * achieved.
 *
 * The store has {@link KvSettings.keys} keys; each holds a digit or nothing. A task gives
 * the target state and the initial state; every turn the agent makes one call of three
 * tokens, `OP KEY ARG`, and sees one observation token:
 *
 * | call | effect | observation |
 * | --- | --- | --- |
 * | `PUT k d` (create or update) | k ← d | `YES` |
 * | `GET k NOTHING` (read) | none | the digit, or `NO` when k is empty (an error) |
 * | `DEL k NOTHING` | k emptied | `YES`, or `NO` when k is already empty (an error) |
 * | anything else (malformed) | none | `NO` |
 *
 * Each call is labelled after the fact, from the whole episode:
 * - **erroneous**: the call returned `NO`;
 * - **effective**: a PUT or DEL that is the last change of its key and leaves the key
 *   different from its initial value (it built part of the end state);
 * - **redundant**: every other call (reads, writes overwritten later, writes of the
 *   value already there, a DEL undone by a later PUT).
 *
 * Token ids come from the shared vocabulary: PUT = SOLVE, GET = SEARCH, DEL = CHECK,
 * keys are SLOT0.., digits DIGIT0.., empty is BLANK.
 */
import { ValidationError } from '@srpo/core';
import type { SeededRng } from '@srpo/policy';
import { digit, digitValue, MAX_DIGITS, MAX_WORKERS, slot, Tok } from '@srpo/workflows';

export const Op = { PUT: Tok.SOLVE, GET: Tok.SEARCH, DEL: Tok.CHECK } as const;

export interface KvSettings {
  /** Keys in the store (1..4). */
  keys: number;
  /** Values are digits below this (2..8). */
  modulus: number;
  /** Calls per episode. */
  turns: number;
  /** Probability that a key holds a value, in the initial and in the target state. */
  fillProbability: number;
}

export const DEFAULT_KV: KvSettings = { keys: 4, modulus: 4, turns: 6, fillProbability: 0.5 };

export function checkKvSettings(s: KvSettings): KvSettings {
  if (!Number.isInteger(s.keys) || s.keys < 1 || s.keys > MAX_WORKERS)
    throw new ValidationError('keys', `must be an integer in [1, ${MAX_WORKERS}], got ${s.keys}`);
  if (!Number.isInteger(s.modulus) || s.modulus < 2 || s.modulus > MAX_DIGITS)
    throw new ValidationError('modulus', `must be an integer in [2, ${MAX_DIGITS}], got ${s.modulus}`);
  if (!Number.isInteger(s.turns) || s.turns < 1 || s.turns > 8) throw new ValidationError('turns', `must be an integer in [1, 8], got ${s.turns}`);
  if (!(s.fillProbability >= 0 && s.fillProbability <= 1)) throw new ValidationError('fillProbability', `must be in [0, 1], got ${s.fillProbability}`);
  return s;
}

/** A state: per key a digit, or null when empty. */
export type KvState = (number | null)[];

export interface KvTask {
  initial: KvState;
  target: KvState;
}

export function sampleKvTask(rng: SeededRng, s: KvSettings): KvTask {
  const state = (): KvState => Array.from({ length: s.keys }, () => (rng.nextFloat() < s.fillProbability ? rng.nextInt(s.modulus) : null));
  return { initial: state(), target: state() };
}

/** A state as tokens: the digit or BLANK per key. */
export const stateTokens = (st: KvState): number[] => st.map((v) => (v === null ? Tok.BLANK : digit(v)));

/** The state a run of state tokens stands for; null when a token is neither a digit below the modulus nor BLANK. */
export function parseState(tokens: readonly number[], s: KvSettings): KvState | null {
  if (tokens.length !== s.keys) return null;
  const out: KvState = [];
  for (const t of tokens) {
    if (t === Tok.BLANK) out.push(null);
    else {
      const d = digitValue(t);
      if (d === undefined || d >= s.modulus) return null;
      out.push(d);
    }
  }
  return out;
}

export const INSTRUCTION_START = 1;

/** `[BOS target… SEP initial… SEP (call obs)…]`: the instruction sits at [1, 1 + keys). */
export function kvContext(instruction: readonly number[], initial: KvState, history: readonly (readonly number[])[]): number[] {
  return [Tok.BOS, ...instruction, Tok.SEP, ...stateTokens(initial), Tok.SEP, ...history.flat()];
}

export type CallKind = 'effective' | 'redundant' | 'erroneous';

export interface CallResult {
  state: KvState;
  observation: number;
  /** The call changed the store (a PUT, or a DEL of a present key). */
  changed: boolean;
  error: boolean;
}

/** One call on the store. */
export function applyCall(state: KvState, call: readonly number[], s: KvSettings): CallResult {
  const [op, keyTok, arg] = call;
  const key = keyTok - Tok.SLOT0;
  const fail: CallResult = { state, observation: Tok.NO, changed: false, error: true };
  if (call.length !== 3 || !Number.isInteger(key) || key < 0 || key >= s.keys) return fail;
  if (op === Op.PUT) {
    const d = digitValue(arg);
    if (d === undefined || d >= s.modulus) return fail;
    const next = [...state];
    next[key] = d;
    return { state: next, observation: Tok.YES, changed: true, error: false };
  }
  if (arg !== Tok.NOTHING) return fail;
  if (op === Op.GET) return state[key] === null ? fail : { state, observation: digit(state[key]), changed: false, error: false };
  if (op === Op.DEL) {
    if (state[key] === null) return fail;
    const next = [...state];
    next[key] = null;
    return { state: next, observation: Tok.YES, changed: true, error: false };
  }
  return fail;
}

export interface KvEpisode {
  task: KvTask;
  calls: number[][];
  observations: number[];
  end: KvState;
  kinds: CallKind[];
  success: boolean;
}

/** Plays the calls on the task's initial state and labels each call (see the file's doc). */
export function runCalls(task: KvTask, calls: readonly (readonly number[])[], s: KvSettings): KvEpisode {
  let state = [...task.initial];
  const results = calls.map((c) => {
    const r = applyCall(state, c, s);
    state = r.state;
    return r;
  });
  const lastChange = new Map<number, number>();
  results.forEach((r, i) => {
    if (r.changed) lastChange.set(calls[i][1] - Tok.SLOT0, i);
  });
  const kinds = results.map((r, i): CallKind => {
    if (r.error) return 'erroneous';
    const key = calls[i][1] - Tok.SLOT0;
    return r.changed && lastChange.get(key) === i && state[key] !== task.initial[key] ? 'effective' : 'redundant';
  });
  return {
    task,
    calls: calls.map((c) => [...c]),
    observations: results.map((r) => r.observation),
    end: state,
    kinds,
    success: state.every((v, k) => v === task.target[k]),
  };
}

/** The calls that take `initial` to `target`, in key order: a PUT per differing value, a DEL per key to empty. */
export function neededCalls(task: KvTask): number[][] {
  return task.target.flatMap((v, k) => (v === task.initial[k] ? [] : [v === null ? [Op.DEL, slot(k), Tok.NOTHING] : [Op.PUT, slot(k), digit(v)]]));
}
