/**
 * The word-problem agents for a real LLM, through `srpo gateway` with the official `openai`
 * client: a solver answers an arithmetic word problem, a verifier judges the solver's answer, and
 * each step's reward (exact answer; right verdict) is posted to the gateway's /v1/srpo/* routes.
 * G episodes per problem form the advantage groups. With `--eval-url` (the server itself, not the
 * gateway, so nothing is recorded) it measures greedy success on the held-out set before the
 * first task and every `--eval-every` tasks, with 95 % Wilson intervals.
 *
 *   npm run build:bench
 *   node dist-bench/examples/llm-agent/word-problem-agent.js --gateway http://127.0.0.1:8100/v1 \
 *     --eval-url http://127.0.0.1:8000/v1 --model actor --variant add-10 --tasks 200
 *
 * The episode logic (prompts, rewards, events) is `@srpo/workflows`' word-problem workflow; this
 * file only binds it to HTTP.
 */
import OpenAI from 'openai';
import {
  checkWordProblemPlay,
  DEFAULT_WORD_PROBLEM_PLAY,
  evaluateWordProblems,
  heldOutWordProblems,
  isDegenerate,
  playWordProblemGroup,
  TrainingWordProblems,
  WORD_PROBLEM_VARIANTS,
  type ChatMessage,
  type ChatReply,
  type ChatRequest,
  type HeldOutResult,
  type TextAgentClient,
  type WordProblemPlay,
  type WordProblemVariant,
} from '@srpo/workflows';
import type { EpisodeOutcomeInit, TransitionInit } from '@srpo/events';

export interface WordProblemAgentOptions {
  /** The gateway's OpenAI base URL (`…/v1`). */
  gateway: string;
  apiKey: string;
  /** The policy id both roles use. */
  model: string;
  variant: WordProblemVariant;
  tasks: number;
  play: WordProblemPlay;
  /** Problems in flight at once (each plays G episodes concurrently). */
  concurrency: number;
  /** The server's own base URL for held-out evaluation (greedy, unrecorded); unset: no evaluation. */
  evalUrl?: string;
  heldOutSize: number;
  /** Evaluate every this many tasks (0: only before the first and after the last). */
  evalEvery: number;
}

export interface TaskReport {
  task: number;
  seed: number;
  solved: number;
  verifierRight: number;
  groupSize: number;
  degenerateSolve: boolean;
  versions: number[];
}

export interface EvalReport extends HeldOutResult {
  afterTasks: number;
}

/** The gateway client: recorded chat completions (n = 1 per episode) and the /v1/srpo routes. */
export function gatewayClient(baseUrl: string, apiKey: string, model: string): TextAgentClient {
  const base = baseUrl.replace(/\/$/, '');
  const post = async (route: string, body: unknown): Promise<void> => {
    const res = await fetch(`${base}/srpo/${route}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${apiKey}` },
      body: JSON.stringify(body),
    });
    if (!res.ok) throw new Error(`POST /v1/srpo/${route}: ${res.status} ${await res.text()}`);
  };
  const openai = new OpenAI({ baseURL: base, apiKey, maxRetries: 2 });
  return {
    async chat(r: ChatRequest): Promise<ChatReply> {
      const res = await openai.chat.completions.create(
        { model, messages: r.messages, temperature: r.temperature, max_tokens: r.maxTokens },
        { headers: { 'X-SRPO-Episode': r.episodeId, 'X-SRPO-Step': String(r.step), 'X-SRPO-Role': r.role, 'X-SRPO-Agent': r.agentId } },
      );
      const srpo = (res as unknown as { srpo?: { output_ids: string[]; policy_version: number } }).srpo;
      if (!srpo) throw new Error('the response has no srpo field: is --gateway the gateway?');
      return { text: res.choices[0]?.message.content ?? '', outputIds: srpo.output_ids, policyVersion: srpo.policy_version };
    },
    recordTransition: (t: TransitionInit) => post('transitions', t),
    recordOutcome: (o: EpisodeOutcomeInit) => post('outcomes', o),
  };
}

/** Greedy replies from the server itself (temperature 0 is refused by the gateway, and should not be recorded). */
export function greedyAnswerer(evalUrl: string, apiKey: string, model: string, maxTokens: number): (messages: ChatMessage[]) => Promise<string> {
  const openai = new OpenAI({ baseURL: evalUrl.replace(/\/$/, ''), apiKey, maxRetries: 2 });
  return async (messages) =>
    (await openai.chat.completions.create({ model, messages, temperature: 0, max_tokens: maxTokens })).choices[0]?.message.content ?? '';
}

/** Plays `tasks` problems of G episodes, evaluating on the held-out set as configured. */
export async function runWordProblemAgent(
  o: WordProblemAgentOptions,
  onTask?: (r: TaskReport) => void,
  onEval?: (r: EvalReport) => void,
): Promise<EvalReport[]> {
  const play = checkWordProblemPlay(o.play);
  const settings = WORD_PROBLEM_VARIANTS[o.variant];
  const heldOut = heldOutWordProblems(settings, o.heldOutSize);
  const train = new TrainingWordProblems(settings, new Set(heldOut.map((p) => p.text)));
  const client = gatewayClient(o.gateway, o.apiKey, o.model);
  const evals: EvalReport[] = [];
  const evaluate = async (afterTasks: number) => {
    if (!o.evalUrl) return;
    const r = { ...(await evaluateWordProblems(heldOut, greedyAnswerer(o.evalUrl, o.apiKey, o.model, play.solverMaxTokens), 8, play.promptStyle)), afterTasks };
    evals.push(r);
    onEval?.(r);
  };
  await evaluate(0);
  let next = 0;
  let done = 0;
  const worker = async () => {
    while (next < o.tasks) {
      const task = next++;
      const p = train.at(task);
      const episodes = await playWordProblemGroup(client, p, play);
      done++;
      onTask?.({
        task,
        seed: p.seed,
        solved: episodes.filter((e) => e.correct).length,
        verifierRight: episodes.filter((e) => e.verifierReward === 1).length,
        groupSize: play.groupSize,
        degenerateSolve: isDegenerate(episodes.map((e) => e.solverReward)),
        versions: [...new Set(episodes.map((e) => e.policyVersion))],
      });
      if (o.evalEvery > 0 && done % o.evalEvery === 0 && done < o.tasks) await evaluate(done);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, o.concurrency) }, worker));
  await evaluate(o.tasks);
  return evals;
}

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && process.argv[i + 1] !== undefined ? process.argv[i + 1] : fallback;
}

if (require.main === module) {
  const variant = arg('variant', 'add-10');
  if (!(variant in WORD_PROBLEM_VARIANTS)) {
    console.error(`--variant must be one of ${Object.keys(WORD_PROBLEM_VARIANTS).join(', ')}`);
    process.exit(2);
  }
  const evalUrl = arg('eval-url', '');
  const options: WordProblemAgentOptions = {
    gateway: arg('gateway', 'http://127.0.0.1:8100/v1'),
    apiKey: process.env.SRPO_AGENT_KEY ?? 'unused',
    model: arg('model', 'actor'),
    variant: variant as WordProblemVariant,
    tasks: Number(arg('tasks', '100')),
    concurrency: Number(arg('concurrency', '2')),
    evalUrl: evalUrl === '' ? undefined : evalUrl,
    heldOutSize: Number(arg('held-out', '200')),
    evalEvery: Number(arg('eval-every', '0')),
    play: {
      ...DEFAULT_WORD_PROBLEM_PLAY,
      runId: arg('run-id', `wp${Date.now().toString(36)}`),
      groupSize: Number(arg('group-size', String(DEFAULT_WORD_PROBLEM_PLAY.groupSize))),
      temperature: Number(arg('temperature', String(DEFAULT_WORD_PROBLEM_PLAY.temperature))),
      solverMaxTokens: Number(arg('solver-max-tokens', String(DEFAULT_WORD_PROBLEM_PLAY.solverMaxTokens))),
      verifierMaxTokens: Number(arg('verifier-max-tokens', String(DEFAULT_WORD_PROBLEM_PLAY.verifierMaxTokens))),
      verifier: arg('verifier', 'true') !== 'false',
      promptStyle: arg('prompt-style', DEFAULT_WORD_PROBLEM_PLAY.promptStyle) === 'tagged' ? 'tagged' : 'shots',
    },
  };
  const fmt = (r: EvalReport) =>
    `held-out after ${r.afterTasks} tasks: ${(100 * r.rate).toFixed(1)} % [${(100 * r.low).toFixed(1)}, ${(100 * r.high).toFixed(1)}] (${r.successes}/${r.trials})`;
  runWordProblemAgent(
    options,
    (r) => console.log(JSON.stringify(r)),
    (r) => console.log(fmt(r)),
  ).catch((e: unknown) => {
    console.error(e instanceof Error ? e.message : e);
    process.exit(1);
  });
}
