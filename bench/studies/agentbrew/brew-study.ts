/**
 * The pieces of the AgentBrew study (issue #20, part 2), apart from the runner: the
 * logging agent, retrospective task inference from the end state, the cross-fitted PMI
 * scorer over (call, observation) prefixes, the weightings and the evaluation.
 */
import { InstructionScorer, prefixCredits, creditWeights, CreditWeightedSftTrainer, trainWeighted, type CreditMode, type WeightedExample } from '@srpo/offline';
import { Policy, SeededRng, sampleBatch, type TransformerConfig } from '@srpo/policy';
import { digit, slot, Tok } from '@srpo/workflows';
import {
  applyCall,
  kvContext,
  neededCalls,
  Op,
  runCalls,
  sampleKvTask,
  stateTokens,
  type CallKind,
  type KvEpisode,
  type KvSettings,
  type KvTask,
} from './kv.env';

/** How the logging agent picks each call. Shares of the turns, summing to at most 1 (the rest: a needed call). */
export interface LogAgentMix {
  /** A read of a random key (fails when the key is empty). */
  read: number;
  /** A PUT of a random value to a random key. */
  wrongPut: number;
  /** A malformed call. */
  malformed: number;
}

export const DEFAULT_MIX: LogAgentMix = { read: 0.2, wrongPut: 0.2, malformed: 0.15 };

/**
 * The production agent whose logs are trained on: it knows the needed calls but, on each
 * turn, with the mix's probabilities reads, writes a random value or sends a malformed
 * call instead. When nothing is needed any more it reads.
 */
export function logAgentCalls(task: KvTask, rng: SeededRng, mix: LogAgentMix, s: KvSettings): number[][] {
  const todo = neededCalls(task);
  for (let i = todo.length - 1; i > 0; i--) {
    const j = rng.nextInt(i + 1);
    [todo[i], todo[j]] = [todo[j], todo[i]];
  }
  const calls: number[][] = [];
  for (let t = 0; t < s.turns; t++) {
    const u = rng.nextFloat();
    const key = slot(rng.nextInt(s.keys));
    if (u < mix.read || todo.length === 0) calls.push([Op.GET, key, Tok.NOTHING]);
    else if (u < mix.read + mix.wrongPut) calls.push([Op.PUT, key, digit(rng.nextInt(s.modulus))]);
    else if (u < mix.read + mix.wrongPut + mix.malformed) calls.push([Op.DEL, key, digit(rng.nextInt(s.modulus))]);
    else calls.push(todo.shift() as number[]);
  }
  return calls;
}

/** A logged episode: the original instruction (the task it was played for) and what happened. */
export interface LoggedEpisode extends KvEpisode {
  instruction: number[];
}

export function logEpisodes(n: number, seed: number, mix: LogAgentMix, s: KvSettings): LoggedEpisode[] {
  const rng = new SeededRng(seed);
  return Array.from({ length: n }, () => {
    const task = sampleKvTask(rng, s);
    return { ...runCalls(task, logAgentCalls(task, rng, mix, s), s), instruction: stateTokens(task.target) };
  });
}

/** Retrospective task inference: the instruction the episode fulfilled is its end state. */
export const inferredInstruction = (e: KvEpisode): number[] => stateTokens(e.end);

/** The (call, observation) tokens of each turn. */
export const steps = (e: KvEpisode): number[][] => e.calls.map((c, i) => [...c, e.observations[i]]);

/** One supervised example per call: its context under `instruction`, the call as the response. */
export function callExamples(e: KvEpisode, instruction: readonly number[], weights: readonly number[], keep: (i: number) => boolean): WeightedExample[] {
  const st = steps(e);
  return e.calls.flatMap((c, i) =>
    keep(i) ? [{ contextTokens: kvContext(instruction, e.task.initial, st.slice(0, i)), responseTokens: [...c], weight: weights[i] }] : [],
  );
}

export interface ScorerBudget {
  steps: number;
  batch: number;
  lr: number;
}

/** A fresh scorer fitted on p(end state | BOS initial SEP (call obs)_1..k), k = 0..T, over `episodes`. */
export async function fitScorer(episodes: readonly KvEpisode[], model: TransformerConfig, seed: number, b: ScorerBudget): Promise<Policy> {
  const scorer = Policy.create('scorer', model, seed);
  const examples: WeightedExample[] = episodes.flatMap((e) => {
    const st = steps(e);
    const y = inferredInstruction(e);
    return Array.from({ length: st.length + 1 }, (_, k) => ({
      contextTokens: [Tok.BOS, ...stateTokens(e.task.initial), Tok.SEP, ...st.slice(0, k).flat()],
      responseTokens: y,
      weight: 1,
    }));
  });
  const trainer = new CreditWeightedSftTrainer(scorer, { lr: b.lr });
  await trainWeighted(trainer, examples, { steps: b.steps, batchSize: b.batch, seed });
  trainer.dispose();
  return scorer;
}

/** Signed PMI credits of every call (erroneous ones included), from a scorer's NLL curve of the inferred instruction. */
export async function pmiCredits(e: KvEpisode, scorer: Policy, mode: CreditMode): Promise<number[]> {
  const s = new InstructionScorer(scorer.model, { prefixTokens: [Tok.BOS, ...stateTokens(e.task.initial), Tok.SEP] });
  const nll = await s.nllCurve(inferredInstruction(e), steps(e));
  return prefixCredits(mode, nll).credit;
}

/**
 * The weightings compared. Erroneous calls are never trained on except under `released`.
 * - `released`: the signed per-call credits as AgentBrew's released code writes them, used as
 *   weights as they are (negative weights push a call's likelihood down);
 * - `clip-max`: this project's rule, clip at 0 and divide by the trajectory's largest;
 * - `clip-max-floor`: the same with a floor ε for every non-erroneous call;
 * - `dataset`: clip at 0 and divide by the largest credit of the whole dataset.
 */
export type Weighting = 'released' | 'clip-max' | 'clip-max-floor' | 'dataset';
export const WEIGHTINGS: readonly Weighting[] = ['released', 'clip-max', 'clip-max-floor', 'dataset'];

export function weightsOf(w: Weighting, credits: readonly number[], kinds: readonly CallKind[], datasetMax: number, floor: number): number[] {
  const ok = (i: number) => kinds[i] !== 'erroneous';
  switch (w) {
    case 'released':
      return [...credits];
    case 'clip-max': {
      const cw = creditWeights(credits.map((c, i) => (ok(i) ? c : 0)));
      return cw;
    }
    case 'clip-max-floor': {
      const cw = creditWeights(credits.map((c, i) => (ok(i) ? c : 0)));
      return cw.map((x, i) => (ok(i) ? Math.max(x, floor) : 0));
    }
    case 'dataset':
      return credits.map((c, i) => (ok(i) && datasetMax > 0 ? Math.max(c, 0) / datasetMax : 0));
    default:
      throw new Error(`unknown weighting ${String(w satisfies never)}`);
  }
}

export interface Evaluation {
  success: number;
  /** Shares of the trained policy's calls by kind. */
  kinds: Record<CallKind, number>;
}

/** The policy plays `tasks` fresh tasks (its instruction the target), `turns` calls each, sampled at temperature 1. */
export async function evaluatePolicy(policy: Policy, tasks: number, seed: number, s: KvSettings): Promise<Evaluation> {
  const rng = new SeededRng(seed);
  const ts = Array.from({ length: tasks }, () => sampleKvTask(rng, s));
  const calls: number[][][] = ts.map(() => []);
  const obs: number[][] = ts.map(() => []);
  const state = ts.map((t) => [...t.initial]);
  const sampleRng = new SeededRng(seed + 1);
  for (let turn = 0; turn < s.turns; turn++) {
    const contexts = ts.map((t, i) =>
      kvContext(
        stateTokens(t.target),
        t.initial,
        calls[i].map((c, j) => [...c, obs[i][j]]),
      ),
    );
    const draws = await sampleBatch(policy.model, contexts, { maxNewTokens: 3, temperature: 1, rng: sampleRng });
    draws.forEach((d, i) => {
      const r = applyCall(state[i], d.tokens, s);
      state[i] = r.state;
      calls[i].push(d.tokens);
      obs[i].push(r.observation);
    });
  }
  const eps = ts.map((t, i) => runCalls(t, calls[i], s));
  const kinds: Record<CallKind, number> = { effective: 0, redundant: 0, erroneous: 0 };
  for (const e of eps) for (const k of e.kinds) kinds[k]++;
  const n = tasks * s.turns;
  return {
    success: eps.filter((e) => e.success).length / tasks,
    kinds: { effective: kinds.effective / n, redundant: kinds.redundant / n, erroneous: kinds.erroneous / n },
  };
}
