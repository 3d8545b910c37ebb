import { ValidationError } from '@srpo/core';
import type { EpisodeOutcomeInit, TransitionInit } from '@srpo/events';
import { successOf, type SuccessInterval } from '../evaluation/success-interval';
import {
  gradeSolver,
  gradeVerifier,
  solverMessages,
  verifierMessages,
  type ChatMessage,
  type SolverPromptStyle,
  type WordProblem,
} from '../envs/word-problems.env';

/**
 * The word-problem workflow for real LLMs behind an OpenAI-compatible endpoint (the gateway): a
 * solver answers, a verifier judges the solver's answer. Two transitions per episode, each with
 * its own programmatic reward, and G episodes per problem form one advantage group per position.
 * The HTTP side is injected (`TextAgentClient`), so the episode logic here is pure and tested.
 */
export type TextRole = 'solver' | 'verifier';

export interface ChatRequest {
  episodeId: string;
  step: number;
  role: TextRole;
  agentId: string;
  messages: ChatMessage[];
  temperature: number;
  maxTokens: number;
}

export interface ChatReply {
  text: string;
  /** The ids the gateway recorded the completion under (`srpo.output_ids`). */
  outputIds: string[];
  /** The policy version that answered (`srpo.policy_version`). */
  policyVersion: number;
}

/** What a runner needs from the outside: a recorded chat completion and the two /v1/srpo routes. */
export interface TextAgentClient {
  chat(request: ChatRequest): Promise<ChatReply>;
  recordTransition(transition: TransitionInit): Promise<void>;
  recordOutcome(outcome: EpisodeOutcomeInit): Promise<void>;
}

export interface WordProblemPlay {
  /** Prefix of task and episode ids: unique per run, so reruns never collide in the materializer. */
  runId: string;
  groupSize: number;
  temperature: number;
  solverMaxTokens: number;
  verifierMaxTokens: number;
  /** Reward of a tagged but wrong solver answer (default 0). */
  formatBonus: number;
  /** Play the verifier step (false: solver only, one transition per episode). */
  verifier: boolean;
  /** The solver's prompt: with worked examples (`shots`, the default) or the instruction alone. */
  promptStyle: SolverPromptStyle;
}

export const DEFAULT_WORD_PROBLEM_PLAY: Omit<WordProblemPlay, 'runId'> = {
  groupSize: 8,
  // Measured on SmolLM2-135M-Instruct (bench/studies/llm-task): at 0.8 samples of one problem
  // disagree in most groups of 8, and replies with the worked-example prompt take 16–21 tokens.
  temperature: 0.8,
  solverMaxTokens: 32,
  verifierMaxTokens: 32,
  formatBonus: 0,
  verifier: true,
  promptStyle: 'shots',
};

export const WORD_PROBLEM_MAX_GROUP_SIZE = 64;

export function checkWordProblemPlay(p: WordProblemPlay): WordProblemPlay {
  if (!/^[A-Za-z0-9_-]{1,64}$/.test(p.runId)) throw new ValidationError('runId', 'must be 1..64 letters, digits, _ or -');
  if (!Number.isInteger(p.groupSize) || p.groupSize < 1 || p.groupSize > WORD_PROBLEM_MAX_GROUP_SIZE)
    throw new ValidationError('groupSize', `must be an integer in [1, ${WORD_PROBLEM_MAX_GROUP_SIZE}], got ${p.groupSize}`);
  // The gateway refuses temperature 0: a greedy answer has no sampling distribution to train on.
  if (!(p.temperature > 0 && p.temperature <= 2)) throw new ValidationError('temperature', `must be in (0, 2], got ${p.temperature}`);
  for (const k of ['solverMaxTokens', 'verifierMaxTokens'] as const)
    if (!Number.isInteger(p[k]) || p[k] < 1 || p[k] > 4096) throw new ValidationError(k, `must be an integer in [1, 4096], got ${p[k]}`);
  if (!(p.formatBonus >= 0 && p.formatBonus < 1)) throw new ValidationError('formatBonus', `must be in [0, 1), got ${p.formatBonus}`);
  if (p.promptStyle !== 'shots' && p.promptStyle !== 'tagged')
    throw new ValidationError('promptStyle', `must be shots or tagged, got ${String(p.promptStyle)}`);
  return p;
}

export const WORD_PROBLEM_VERIFIER_ID = 'word-problems@1';

export function wordProblemTaskId(runId: string, p: WordProblem): string {
  return `${runId}-wp${p.seed}`;
}

/** What one episode did, for the runner's progress and for tests. */
export interface WordProblemEpisode {
  episodeId: string;
  solverText: string;
  answer: number | undefined;
  solverReward: number;
  correct: boolean;
  verdict: boolean | undefined;
  verifierReward: number | undefined;
  policyVersion: number;
}

export interface EpisodeRecords {
  transitions: TransitionInit[];
  outcome: EpisodeOutcomeInit;
}

/**
 * The events of one finished episode (pure). Each transition carries its step's reward; the
 * outcome's reward and success are the solver's exact answer, the thing the demo reports.
 */
export function wordProblemRecords(
  p: WordProblem,
  play: WordProblemPlay,
  e: WordProblemEpisode,
  outputIds: { solve: string[]; verify?: string[] },
  eventTimeMs: number,
): EpisodeRecords {
  const taskId = wordProblemTaskId(play.runId, p);
  const common = { episodeId: e.episodeId, taskId, workflowKind: 'FIXED' as const, expectedCardinality: 1, expectedGroupSize: play.groupSize, eventTimeMs };
  const verifying = play.verifier && outputIds.verify !== undefined && e.verifierReward !== undefined;
  const transitions: TransitionInit[] = [
    {
      ...common,
      transitionId: `${e.episodeId}.t0`,
      step: 0,
      preStateId: `${e.episodeId}:0`,
      position: 'solve',
      consumedOutputIds: outputIds.solve,
      groupKey: `${taskId}/solve`,
      observationDigest: `answer:${e.answer ?? 'none'}`,
      reward: e.solverReward,
      done: !verifying,
    },
  ];
  if (verifying) {
    transitions.push({
      ...common,
      transitionId: `${e.episodeId}.t1`,
      step: 1,
      preStateId: `${e.episodeId}:1`,
      position: 'verify',
      consumedOutputIds: outputIds.verify ?? [],
      groupKey: `${taskId}/verify`,
      observationDigest: `verdict:${e.verdict === undefined ? 'none' : e.verdict ? 'correct' : 'incorrect'}`,
      reward: e.verifierReward ?? 0,
      done: true,
    });
  }
  return {
    transitions,
    outcome: {
      episodeId: e.episodeId,
      taskId,
      outcomeReward: e.correct ? 1 : 0,
      success: e.correct,
      verifier: WORD_PROBLEM_VERIFIER_ID,
      // turns: the materializer closes the episode once this many transitions are in, in any order.
      turns: transitions.length,
      eventTimeMs,
    },
  };
}

/** Plays one episode: the solver answers, the verifier judges that answer, the events are posted. */
export async function playWordProblemEpisode(
  client: TextAgentClient,
  p: WordProblem,
  play: WordProblemPlay,
  rollout: number,
  now = Date.now,
): Promise<WordProblemEpisode> {
  const episodeId = `${wordProblemTaskId(play.runId, p)}.r${rollout}`;
  const solved = await client.chat({
    episodeId,
    step: 0,
    role: 'solver',
    agentId: 'solver-0',
    messages: solverMessages(p, play.promptStyle),
    temperature: play.temperature,
    maxTokens: play.solverMaxTokens,
  });
  const graded = gradeSolver(p, solved.text, play.formatBonus);
  const episode: WordProblemEpisode = {
    episodeId,
    solverText: solved.text,
    answer: graded.answer,
    solverReward: graded.reward,
    correct: graded.correct,
    verdict: undefined,
    verifierReward: undefined,
    policyVersion: solved.policyVersion,
  };
  let verifyIds: string[] | undefined;
  if (play.verifier) {
    const judged = await client.chat({
      episodeId,
      step: 1,
      role: 'verifier',
      agentId: 'verifier-0',
      messages: verifierMessages(p, graded.answer),
      temperature: play.temperature,
      maxTokens: play.verifierMaxTokens,
    });
    const v = gradeVerifier(p, graded.answer, judged.text);
    episode.verdict = v.verdict;
    episode.verifierReward = v.reward;
    verifyIds = judged.outputIds;
  }
  const records = wordProblemRecords(p, play, episode, { solve: solved.outputIds, verify: verifyIds }, now());
  for (const t of records.transitions) await client.recordTransition(t);
  await client.recordOutcome(records.outcome);
  return episode;
}

/** G episodes of one problem, concurrently (the server batches them). */
export async function playWordProblemGroup(client: TextAgentClient, p: WordProblem, play: WordProblemPlay): Promise<WordProblemEpisode[]> {
  checkWordProblemPlay(play);
  return Promise.all(Array.from({ length: play.groupSize }, (_, g) => playWordProblemEpisode(client, p, play, g)));
}

/** A group whose rewards are all equal gives every member zero advantage: nothing to learn from. */
export function isDegenerate(rewards: readonly number[]): boolean {
  return rewards.every((r) => r === rewards[0]);
}

export interface HeldOutResult extends SuccessInterval {
  /** Per problem, in order: the parsed answer and whether it was right. */
  answers: { seed: number; answer: number | undefined; correct: boolean }[];
}

/**
 * Success on a held-out set. `answer` returns the model's reply to the solver prompt (greedy, on
 * the version being measured, not recorded: call the server directly, not the gateway).
 */
export async function evaluateWordProblems(
  problems: readonly WordProblem[],
  answer: (messages: ChatMessage[], p: WordProblem) => Promise<string>,
  concurrency = 8,
  style: SolverPromptStyle = 'shots',
): Promise<HeldOutResult> {
  if (!Number.isInteger(concurrency) || concurrency < 1 || concurrency > 256)
    throw new ValidationError('concurrency', `must be an integer in [1, 256], got ${concurrency}`);
  const answers: HeldOutResult['answers'] = new Array<HeldOutResult['answers'][number]>(problems.length);
  let next = 0;
  const worker = async () => {
    while (next < problems.length) {
      const i = next++;
      const p = problems[i];
      const g = gradeSolver(p, await answer(solverMessages(p, style), p));
      answers[i] = { seed: p.seed, answer: g.answer, correct: g.correct };
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, problems.length) }, worker));
  return { ...successOf(answers.map((a) => a.correct)), answers };
}
