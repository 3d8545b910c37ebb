/**
 * A multi-agent workflow built with the OpenAI Agents SDK (`@openai/agents`), pointed at
 * `srpo gateway` by its base URL only. A triage agent hands arithmetic questions off to a solver
 * agent, which has one function tool, `add`. The solver's answer is checked; a wrong one is sent
 * back to the solver once more with the conversation so far (a second turn of the same agent).
 *
 * The episode headers are set once per run, on the `openai` client the SDK is given
 * (`defaultHeaders`). Without more, every call of the run is one agent's, numbered by the gateway
 * as turns (`.t1`, `.t2`). With `perAgentHeaders`, each agent gets a model of its own
 * (`OpenAIResponsesModel` / `OpenAIChatCompletionsModel` over a client whose headers add its
 * `X-SRPO-Role` and `X-SRPO-Agent`), so the gateway records each agent under its own id. The gateway names each recorded output in the
 * `x-srpo-output-ids` response header, which the client's `fetch` collects. After the run, the
 * episode's transition (consuming every recorded output) and its outcome are posted to the
 * gateway's `/v1/srpo/transitions` and `/v1/srpo/outcomes`. Nothing of this project is imported.
 *
 *   npm run build:bench && node dist-bench/examples/agents-sdk/triage-agent.js \
 *     --gateway http://127.0.0.1:8100/v1 --model actor --episode ep-1 --a 2 --b 3
 */
import OpenAI from 'openai';
import {
  Agent,
  OpenAIChatCompletionsModel,
  OpenAIProvider,
  OpenAIResponsesModel,
  Runner,
  setTracingDisabled,
  tool,
  user,
  type AgentInputItem,
  type Model,
  type ModelSettings,
} from '@openai/agents';

export interface TriageEpisodeOptions {
  /** The gateway's OpenAI base URL, e.g. http://127.0.0.1:8100/v1. */
  gateway: string;
  apiKey: string;
  model: string;
  episodeId: string;
  /** The task: what is a + b? */
  a: number;
  b: number;
  /** The advantage group this episode belongs to, and its size (rollouts of the same task). */
  groupKey: string;
  groupSize: number;
  /** Give each agent its own X-SRPO-Role / X-SRPO-Agent (else all calls are one agent's turns). */
  perAgentHeaders?: boolean;
  /** Tokens per model call (the Responses API's max_output_tokens). */
  maxTokens?: number;
  /** Answers the solver may give: a wrong first one is sent back once with the conversation. */
  attempts?: number;
  /**
   * Which OpenAI API the SDK speaks: `responses` (its default; the gateway answers
   * `/v1/responses`) or `chat_completions`. The SDK's Responses model fails a run whose answer
   * was cut by `max_output_tokens` (`response.incomplete`); a model that does not end its answers
   * (the tests' random one) needs `chat_completions`, which takes `finish_reason: "length"`.
   */
  api?: 'responses' | 'chat_completions';
}

export interface TriageEpisodeResult {
  episodeId: string;
  /** Output ids the gateway recorded, in call order. */
  outputIds: string[];
  /** The agent that ran each model call, in call order. */
  agents: string[];
  /** The request bodies' tool names, per call (handoffs are function tools named transfer_to_<agent>). */
  tools: string[][];
  answer: string;
  reward: number;
}

/** Runs one episode of the triage → solver workflow through the gateway, then records its transition and outcome there. */
export async function runTriageEpisode(o: TriageEpisodeOptions): Promise<TriageEpisodeResult> {
  // No tracing: it would export spans to api.openai.com.
  setTracingDisabled(true);
  const base = o.gateway.replace(/\/$/, '');
  const outputIds: string[] = [];
  const tools: string[][] = [];
  // Set once per run: every request of the client carries them.
  const episodeHeaders = { 'X-SRPO-Episode': o.episodeId, 'X-SRPO-Step': '0', 'X-SRPO-Role': 'agent', 'X-SRPO-Agent': 'triage-solver' };
  const clientWith = (headers: Record<string, string>) =>
    new OpenAI({
      baseURL: base,
      apiKey: o.apiKey,
      maxRetries: 0,
      defaultHeaders: headers,
      // Collects what the gateway recorded for each call, whatever the SDK keeps of the response.
      fetch: async (url: string | URL | Request, init?: RequestInit) => {
        const body = typeof init?.body === 'string' ? (JSON.parse(init.body) as { tools?: { name?: string; function?: { name: string } }[] }) : undefined;
        const res = await fetch(url, init);
        const ids = res.headers.get('x-srpo-output-ids');
        if (ids) {
          outputIds.push(...ids.split(','));
          tools.push((body?.tools ?? []).map((t) => t.name ?? t.function?.name ?? ''));
        }
        return res;
      },
    });
  const useResponses = (o.api ?? 'responses') === 'responses';
  const runner = new Runner({ modelProvider: new OpenAIProvider({ openAIClient: clientWith(episodeHeaders), useResponses }), tracingDisabled: true });
  // Per agent: a model of its own, on a client whose headers name the agent (else the model name,
  // resolved by the runner's provider on the run's one client).
  const modelFor = (name: string): string | Model => {
    if (!o.perAgentHeaders) return o.model;
    const client = clientWith({ ...episodeHeaders, 'X-SRPO-Role': name, 'X-SRPO-Agent': name });
    return useResponses ? new OpenAIResponsesModel(client, o.model) : new OpenAIChatCompletionsModel(client, o.model);
  };
  const settings: ModelSettings = { maxTokens: o.maxTokens ?? 64, temperature: 1 };
  const add = tool({
    name: 'add',
    description: 'Add two numbers.',
    parameters: {
      type: 'object',
      properties: { a: { type: 'number' }, b: { type: 'number' } },
      required: ['a', 'b'],
      additionalProperties: false,
    },
    strict: true,
    execute: (args: unknown) => {
      const { a, b } = args as { a: number; b: number };
      return String(a + b);
    },
  });
  const solver = new Agent({
    name: 'solver',
    instructions: 'Use add, then answer with the sum only.',
    model: modelFor('solver'),
    modelSettings: settings,
    tools: [add],
  });
  const triage = new Agent({
    name: 'triage',
    instructions: 'Hand sums to the solver.',
    model: modelFor('triage'),
    modelSettings: settings,
    handoffs: [solver],
  });
  const agents: string[] = [];
  const calls = () => outputIds.length;
  const track = async <T extends { lastAgent?: { name: string } }>(before: number, run: Promise<T>, name: string): Promise<T> => {
    const r = await run;
    for (let i = before; i < calls(); i++) agents.push(name);
    return r;
  };
  const expected = String(o.a + o.b);
  let result = await track(calls(), runner.run(triage, `What is ${o.a} + ${o.b}?`, { maxTurns: 6 }), 'triage');
  // The triage agent answered instead of handing off (a model that has not learned the handoff yet):
  // the workflow passes the conversation to the solver itself.
  let history: AgentInputItem[] = result.history;
  if (result.lastAgent?.name !== 'solver') {
    result = await track(calls(), runner.run(solver, history, { maxTurns: 6 }), 'solver');
    history = result.history;
  }
  let answer = String(result.finalOutput ?? '');
  for (let attempt = 1; attempt < (o.attempts ?? 2) && answer.trim() !== expected; attempt++) {
    result = await track(calls(), runner.run(solver, [...history, user('Not the sum. Answer with the number only.')], { maxTurns: 6 }), 'solver');
    history = result.history;
    answer = String(result.finalOutput ?? '');
  }
  const reward = answer.trim() === expected ? 1 : 0;

  const post = async (route: string, body: unknown) => {
    const res = await fetch(`${base}/srpo/${route}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${o.apiKey}` },
      body: JSON.stringify(body),
    });
    if (!res.ok) throw new Error(`POST /v1/srpo/${route}: ${res.status} ${await res.text()}`);
  };
  const now = Date.now();
  const taskId = `add:${o.a}+${o.b}`;
  // One transition consumes every output of the run: the episode's one decision, rewarded by its outcome.
  await post('transitions', {
    transitionId: `${o.episodeId}.t0`,
    episodeId: o.episodeId,
    step: 0,
    preStateId: `${o.episodeId}:0`,
    taskId,
    position: 'triage-solve',
    consumedOutputIds: outputIds,
    expectedCardinality: outputIds.length,
    workflowKind: 'OTHER',
    groupKey: o.groupKey,
    expectedGroupSize: o.groupSize,
    observationDigest: `answer:${answer.slice(0, 64).replace(/[^\x20-\x7e]/g, '?')}`,
    done: true,
    eventTimeMs: now,
  });
  await post('outcomes', {
    episodeId: o.episodeId,
    taskId,
    outcomeReward: reward,
    success: reward === 1,
    verifier: 'agents-sdk-example@1',
    turns: 1,
    eventTimeMs: now,
  });
  return { episodeId: o.episodeId, outputIds, agents, tools, answer, reward };
}

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && process.argv[i + 1] !== undefined ? process.argv[i + 1] : fallback;
}

if (require.main === module) {
  const episodeId = arg('episode', process.env.SRPO_EPISODE ?? `agents-sdk-${Date.now().toString(36)}`);
  runTriageEpisode({
    gateway: arg('gateway', process.env.SRPO_GATEWAY_URL ?? 'http://127.0.0.1:8100/v1'),
    apiKey: process.env.SRPO_AGENT_KEY ?? 'unused',
    model: arg('model', process.env.SRPO_MODEL ?? 'actor'),
    episodeId,
    a: Number(arg('a', '2')),
    b: Number(arg('b', '3')),
    groupKey: arg('group-key', 'agents-sdk/add'),
    groupSize: Number(arg('group-size', '1')),
    perAgentHeaders: process.argv.includes('--per-agent-headers'),
    maxTokens: Number(arg('max-tokens', '64')),
    api: arg('api', 'responses') === 'chat_completions' ? 'chat_completions' : 'responses',
  })
    .then((r) => console.log(JSON.stringify(r)))
    .catch((e: unknown) => {
      console.error(e instanceof Error ? e.message : e);
      process.exit(1);
    });
}
