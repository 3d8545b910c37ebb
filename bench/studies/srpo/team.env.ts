/**
 * The SRPO study's environment (issue #20, part 1): a learned router sends 1–4 workers
 * to a task, every chosen worker writes a 10-token answer, and one transition consumes
 * them all. The joint reward is not additive: the work set earns 1 only when every chosen
 * worker's answer is right, 0 otherwise.
 *
 * A task has {@link TeamSettings.slots} slots of `length` digits each; each slot is
 * requested with probability `requestProbability`, at least one always is. The router sees
 * one token per slot (the slot's first digit when it is requested, BLANK when not) and
 * answers YES or NO per slot. A worker sent to slot i sees that slot's digits and must
 * answer each one mapped, d → (d + 1) mod `modulus`, whether or not the slot was
 * requested: every chosen worker has real work. So K, the work set's size, is the number
 * of YES the router sampled, and it varies between the rollouts of one task.
 *
 * An episode succeeds when the routing is exactly right (YES on the requested slots only)
 * and the work set is right. Rewards and success are pure functions of the task and the
 * tokens, checked against hand-worked cases in team.env.spec.ts.
 */
import { ValidationError } from '@srpo/core';
import type { SeededRng } from '@srpo/policy';
import { digit, MAX_DIGITS, MAX_WORKERS, slot, Tok, type Draw, type RoleSampler } from '@srpo/workflows';

export interface TeamSettings {
  /** Slots per task, one worker each (1..4). */
  slots: number;
  /** Digits per open slot: every worker answer has this many tokens. */
  length: number;
  /** Digits are taken modulo this (2..8). */
  modulus: number;
  /** Probability that a slot is requested, in (0, 1]. */
  requestProbability: number;
}

export const DEFAULT_TEAM: TeamSettings = { slots: 4, length: 10, modulus: 4, requestProbability: 0.5 };

export function checkTeamSettings(s: TeamSettings): TeamSettings {
  if (!Number.isInteger(s.slots) || s.slots < 1 || s.slots > MAX_WORKERS)
    throw new ValidationError('slots', `must be an integer in [1, ${MAX_WORKERS}], got ${s.slots}`);
  if (!Number.isInteger(s.length) || s.length < 1 || s.length > 32) throw new ValidationError('length', `must be an integer in [1, 32], got ${s.length}`);
  if (!Number.isInteger(s.modulus) || s.modulus < 2 || s.modulus > MAX_DIGITS)
    throw new ValidationError('modulus', `must be an integer in [2, ${MAX_DIGITS}], got ${s.modulus}`);
  if (!(s.requestProbability > 0 && s.requestProbability <= 1))
    throw new ValidationError('requestProbability', `must be in (0, 1], got ${s.requestProbability}`);
  return s;
}

/** One task: every slot's digits, and which slots are requested. */
export interface TeamTask {
  slots: number[][];
  requested: boolean[];
}

export function sampleTeamTask(rng: SeededRng, s: TeamSettings): TeamTask {
  const slots = Array.from({ length: s.slots }, () => Array.from({ length: s.length }, () => rng.nextInt(s.modulus)));
  for (;;) {
    const requested = Array.from({ length: s.slots }, () => rng.nextFloat() < s.requestProbability);
    if (requested.some(Boolean)) return { slots, requested };
  }
}

/** `[BOS ROUTE x_0 … x_{n−1} SEP]`, x_i = the slot's first digit when requested, else BLANK. */
export function routerContext(t: TeamTask): number[] {
  return [Tok.BOS, Tok.ROUTE, ...t.slots.map((v, i) => (t.requested[i] ? digit(v[0]) : Tok.BLANK)), Tok.SEP];
}

/** `[BOS WORK SLOT_i y_1 … y_L SEP]`, the slot's digits. */
export function workerContext(t: TeamTask, i: number): number[] {
  return [Tok.BOS, Tok.WORK, slot(i), ...t.slots[i].map(digit), Tok.SEP];
}

/** The right routing: YES exactly on the requested slots. */
export function idealRoute(t: TeamTask): number[] {
  return t.requested.map((r) => (r ? Tok.YES : Tok.NO));
}

/** A worker's right answer for slot i: each digit plus one modulo k. */
export function idealWork(t: TeamTask, i: number, s: TeamSettings): number[] {
  return t.slots[i].map((d) => digit((d + 1) % s.modulus));
}

/** The slots a router's answer sends a worker to; slot 0 when it sends nobody (a set needs K ≥ 1). */
export function chosenSlots(routerTokens: readonly number[], slots: number): number[] {
  const chosen = routerTokens.slice(0, slots).flatMap((t, i) => (t === Tok.YES ? [i] : []));
  return chosen.length > 0 ? chosen : [0];
}

export const sameTokens = (a: readonly number[], b: readonly number[]): boolean => a.length === b.length && a.every((x, i) => x === b[i]);

/** 1 when every chosen worker's answer is exactly right, else 0: the non-additive joint reward. */
export function workSetReward(t: TeamTask, chosen: readonly number[], answers: readonly (readonly number[])[], s: TeamSettings): number {
  if (chosen.length !== answers.length) throw new ValidationError('answers', `expected one answer per chosen slot (${chosen.length}), got ${answers.length}`);
  return chosen.every((i, j) => sameTokens(answers[j], idealWork(t, i, s))) ? 1 : 0;
}

/** Supervised demonstrations for the warm start: (context, right answer) of the router and of every worker. */
export function demonstrations(
  t: TeamTask,
  s: TeamSettings,
): { router: { context: number[]; answer: number[] }; workers: { context: number[]; answer: number[] }[] } {
  return {
    router: { context: routerContext(t), answer: idealRoute(t) },
    workers: t.slots.map((_, i) => ({ context: workerContext(t, i), answer: idealWork(t, i, s) })),
  };
}

/** One member of an active set: a sampled output with its behaviour log-probs. */
export interface TeamOutput {
  outputId: string;
  contextTokens: number[];
  tokens: number[];
  logProbs: number[];
}

export interface TeamEpisode {
  episodeId: string;
  router: TeamOutput;
  /** The work set: one output per chosen slot, in slot order. */
  workers: TeamOutput[];
  chosen: number[];
  routeReward: number;
  workReward: number;
  success: boolean;
}

const asOutput = (d: Draw, outputId: string): TeamOutput => ({ outputId, contextTokens: d.contextTokens, tokens: d.tokens, logProbs: d.logProbs });

/**
 * G rollouts of one task with a sampler whose `router` and `worker` roles are the
 * two policies. Every worker call of every rollout goes out in one batch.
 */
export async function playTeamTask(taskId: string, t: TeamTask, groupSize: number, sampler: RoleSampler, s: TeamSettings): Promise<TeamEpisode[]> {
  const routerDraws = await sampler.sample(
    'router',
    Array.from({ length: groupSize }, () => routerContext(t)),
    s.slots,
  );
  const chosen = routerDraws.map((d) => chosenSlots(d.tokens, s.slots));
  const calls = chosen.flatMap((c, g) => c.map((i) => ({ g, i })));
  const workerDraws = await sampler.sample(
    'worker',
    calls.map(({ i }) => workerContext(t, i)),
    s.length,
  );
  const workers: TeamOutput[][] = chosen.map(() => []);
  calls.forEach(({ g, i }, row) => workers[g].push(asOutput(workerDraws[row], `${taskId}.r${g}.w${i}`)));
  const ideal = idealRoute(t);
  return routerDraws.map((d, g) => {
    const routeReward = sameTokens(d.tokens, ideal) ? 1 : 0;
    const workReward = workSetReward(
      t,
      chosen[g],
      workers[g].map((w) => w.tokens),
      s,
    );
    return {
      episodeId: `${taskId}.r${g}`,
      router: asOutput(d, `${taskId}.r${g}.router`),
      workers: workers[g],
      chosen: chosen[g],
      routeReward,
      workReward,
      success: routeReward === 1 && workReward === 1,
    };
  });
}

/** Renders a task for logs: `*[3 0 1 …] [2 …]`, requested slots starred. */
export function renderTask(t: TeamTask): string {
  return t.slots.map((v, i) => `${t.requested[i] ? '*' : ''}[${v.join(' ')}]`).join(' ');
}
