/**
 * An agent written only with the official `openai` client: it plays the demo's fixed workflow
 * (a solver answers a digit task, a checker accepts or rejects the answer) through
 * `srpo gateway`, which records every completion as an AgentOutput. The agent names its place
 * in the episode in the X-SRPO-* headers and posts its transitions and outcomes to the
 * gateway's /v1/srpo/* routes. Nothing else of this project is imported.
 *
 *   npm run build:bench && node dist-bench/examples/openai-agent/fixed-agent.js --gateway http://127.0.0.1:8100/v1 --model actor --tasks 100
 *
 * The policy is the project's transformer, whose text is one character per token
 * (docs/serving.md): the solver prompt for digit 2 is "^S2|", and the right answer is the digit
 * decremented mod 4 ("1"); the checker prompt is "^C1|" and it answers "Y" or "N".
 */
import OpenAI from 'openai';

export interface FixedAgentOptions {
  gateway: string;
  apiKey: string;
  model: string;
  tasks: number;
  /** Rollouts per task: the advantage group's size. */
  groupSize: number;
  temperature: number;
  /** Prefix of every task and episode id, unique per run. */
  runId: string;
  seed: number;
  /**
   * Flow control: the learner's sets per update, and how many updates' worth of sets the agent
   * may run ahead of the served version before it waits for a newer one (0: never waits). Without
   * it a fast agent outruns the learner, and its sets arrive too stale to train on.
   */
  setsPerUpdate?: number;
  maxAheadUpdates?: number;
}

export interface TaskResult {
  task: number;
  successes: number;
  /** Episodes whose solver answered right (accepted or not). */
  solved: number;
  versions: number[];
}

const MODULUS = 4;
const FORMAT_BONUS = 0.1;
const DIGITS = '0123456789';

/** A small deterministic generator for the tasks (mulberry32). */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const isDigit = (c: string | undefined) => c !== undefined && DIGITS.indexOf(c) >= 0 && DIGITS.indexOf(c) < MODULUS;

/** Plays `tasks` tasks of G rollouts each; resolves with each task's successes and the policy versions that answered. */
export async function runFixedAgent(o: FixedAgentOptions, onTask?: (r: TaskResult) => void): Promise<TaskResult[]> {
  const random = rng(o.seed);
  const base = o.gateway.replace(/\/$/, '');
  const post = async (route: string, body: unknown) => {
    const res = await fetch(`${base}/srpo/${route}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${o.apiKey}` },
      body: JSON.stringify(body),
    });
    if (!res.ok) throw new Error(`POST /v1/srpo/${route}: ${res.status} ${await res.text()}`);
  };
  const results: TaskResult[] = [];
  const servedVersion = async (): Promise<number> => {
    const list = (await new OpenAI({ baseURL: base, apiKey: o.apiKey }).models.list()).data as unknown as { id: string; srpo?: { version: number } }[];
    return list.find((m) => m.id === o.model)?.srpo?.version ?? 0;
  };
  let setsSent = 0;
  let version0: number | undefined;
  for (let task = 0; task < o.tasks; task++) {
    if (o.maxAheadUpdates && o.setsPerUpdate) {
      // Wait (at most 15 s) while more than maxAheadUpdates updates' worth of sets are unconsumed.
      version0 ??= await servedVersion();
      const deadline = Date.now() + 15_000;
      while (setsSent - ((await servedVersion()) - version0) * o.setsPerUpdate > o.maxAheadUpdates * o.setsPerUpdate && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 100));
      }
    }
    const digit = Math.floor(random() * MODULUS);
    const expected = String((digit + MODULUS - 1) % MODULUS);
    const taskId = `${o.runId}-t${task}`;
    const episodes = await Promise.all(
      Array.from({ length: o.groupSize }, async (_, g) => {
        const episodeId = `${taskId}.r${g}`;
        const client = (step: number, role: string) =>
          new OpenAI({
            baseURL: base,
            apiKey: o.apiKey,
            maxRetries: 2,
            defaultHeaders: { 'X-SRPO-Episode': episodeId, 'X-SRPO-Step': String(step), 'X-SRPO-Role': role, 'X-SRPO-Agent': `${role}-0` },
          });
        const solver = await client(0, 'solver').completions.create({ model: o.model, prompt: `^S${digit}|`, max_tokens: 1, temperature: o.temperature });
        const answer = solver.choices[0].text;
        const checker = await client(1, 'checker').completions.create({ model: o.model, prompt: `^C${answer}|`, max_tokens: 1, temperature: o.temperature });
        const verdict = checker.choices[0].text;
        const correct = answer === expected;
        const solverReward = correct ? 1 : isDigit(answer) ? FORMAT_BONUS : 0;
        const checkerRight = verdict === 'Y' || verdict === 'N' ? (verdict === 'Y') === isDigit(answer) : false;
        const checkerReward = verdict === 'Y' || verdict === 'N' ? (checkerRight ? 1 : FORMAT_BONUS) : 0;
        const ids = (r: unknown) => (r as { srpo: { output_ids: string[]; policy_version: number } }).srpo;
        const now = Date.now();
        const common = { episodeId, taskId: `fixed:${digit}`, workflowKind: 'FIXED', expectedCardinality: 1, expectedGroupSize: o.groupSize, eventTimeMs: now };
        await post('transitions', {
          ...common,
          transitionId: `${episodeId}.t0`,
          step: 0,
          preStateId: `${episodeId}:0`,
          position: 'solve',
          consumedOutputIds: ids(solver).output_ids,
          groupKey: `${taskId}/solve`,
          observationDigest: `answer:${answer}`,
          reward: solverReward,
          done: false,
        });
        await post('transitions', {
          ...common,
          transitionId: `${episodeId}.t1`,
          step: 1,
          preStateId: `${episodeId}:1`,
          position: 'check',
          consumedOutputIds: ids(checker).output_ids,
          groupKey: `${taskId}/check`,
          observationDigest: `verdict:${verdict}`,
          reward: checkerReward,
          done: true,
        });
        const success = correct && verdict === 'Y';
        // turns = 2: the materializer closes the episode only once both transitions are in, whatever order they arrive in.
        await post('outcomes', {
          episodeId,
          taskId: `fixed:${digit}`,
          outcomeReward: success ? 1 : 0,
          success,
          verifier: 'fixed-agent@1',
          turns: 2,
          eventTimeMs: now,
        });
        return { success, correct, version: ids(solver).policy_version };
      }),
    );
    setsSent += 2 * o.groupSize;
    const r = {
      task,
      successes: episodes.filter((e) => e.success).length,
      solved: episodes.filter((e) => e.correct).length,
      versions: [...new Set(episodes.map((e) => e.version))],
    };
    results.push(r);
    onTask?.(r);
  }
  return results;
}

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && process.argv[i + 1] !== undefined ? process.argv[i + 1] : fallback;
}

if (require.main === module) {
  const options: FixedAgentOptions = {
    gateway: arg('gateway', 'http://127.0.0.1:8100/v1'),
    apiKey: process.env.SRPO_AGENT_KEY ?? 'unused',
    model: arg('model', 'actor'),
    tasks: Number(arg('tasks', '100')),
    groupSize: Number(arg('group-size', '16')),
    temperature: Number(arg('temperature', '1.5')),
    runId: arg('run-id', `agent${Date.now().toString(36)}`),
    seed: Number(arg('seed', '1')),
    setsPerUpdate: Number(arg('sets-per-update', '64')),
    maxAheadUpdates: Number(arg('max-ahead', '2')),
  };
  runFixedAgent(options, (r) => console.log(JSON.stringify(r))).catch((e: unknown) => {
    console.error(e instanceof Error ? e.message : e);
    process.exit(1);
  });
}
