import { spawn, type ChildProcess } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import OpenAI from 'openai';
import { repoRoot } from '@srpo/core';
import { createKafka, ensureTopics, topicCatalog } from '@srpo/events';
import { smollm2ModelDir } from '@srpo/hf';
import { cpuDescription } from '../cpu';

/*
 * How often multi-turn conversations drift (docs/serving.md, "Multi-turn conversations"): a real
 * model served by `srpo serve --model`, two gateways in front of it (text prompts, and
 * SRPO_GATEWAY_TOKEN_PROMPTS=true), the same conversations through each, and each gateway's
 * /health counts of linked turns and turns whose context lost the parent's sampled tokens.
 *
 *   npm run build && npm run build:bench
 *   node dist-bench/bench/serving/turn-drift.js [--model DIR] [--conversations 20] [--turns 3] [--max-tokens 32]
 *
 * Needs Kafka (the gateways record): KAFKA_BROKERS, default 127.0.0.1:9092. Not a timing.
 */

interface Args {
  model: string;
  conversations: number;
  turns: number;
  maxTokens: number;
}

function parseArgs(argv: string[]): Args {
  const get = (flag: string) => {
    const i = argv.indexOf(flag);
    return i >= 0 ? argv[i + 1] : undefined;
  };
  return {
    model: path.resolve(get('--model') ?? smollm2ModelDir(process.env)),
    conversations: Number(get('--conversations') ?? 20),
    turns: Number(get('--turns') ?? 3),
    maxTokens: Number(get('--max-tokens') ?? 32),
  };
}

const QUESTIONS = [
  'What is 17 + 25?',
  'Name a prime number above 50.',
  'Write a haiku about rain.',
  'What is the capital of Peru?',
  'Spell "banana" backwards.',
];
const FOLLOW_UPS = ['Are you sure? Explain briefly.', 'Now say it in French.', 'Give one more example.', 'Summarize your answer in five words.'];

function start(app: string, env: Record<string, string>, log: string): ChildProcess {
  const entry = path.join(repoRoot(), 'dist', 'apps', app, 'src', 'main.js');
  const out = fs.openSync(log, 'a');
  return spawn(process.execPath, [entry], { env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', ...env }, stdio: ['ignore', out, out] });
}

async function ready(url: string, child: ChildProcess, log: string): Promise<void> {
  for (const deadline = Date.now() + 120_000; Date.now() < deadline;) {
    if (child.exitCode !== null) throw new Error(`${log}: exited ${child.exitCode}\n${fs.readFileSync(log, 'utf8').slice(-2000)}`);
    if (
      await fetch(url).then(
        (r) => r.ok,
        () => false,
      )
    )
      return;
    await new Promise((r) => setTimeout(r, 500));
  }
  throw new Error(`${url} not up after 120 s; see ${log}`);
}

async function conversation(client: OpenAI, model: string, c: number, a: Args): Promise<void> {
  const headers = { 'X-SRPO-Episode': `drift-${c}`, 'X-SRPO-Step': '0', 'X-SRPO-Role': 'solver', 'X-SRPO-Agent': 'a' };
  const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [{ role: 'user', content: QUESTIONS[c % QUESTIONS.length] }];
  for (let t = 0; t < a.turns; t++) {
    const r = await client.chat.completions.create({ model, messages, max_tokens: a.maxTokens, temperature: 1, seed: 1000 * c + t }, { headers });
    messages.push({ role: 'assistant', content: r.choices[0].message.content ?? '' }, { role: 'user', content: FOLLOW_UPS[(c + t) % FOLLOW_UPS.length] });
  }
}

async function main(): Promise<void> {
  const a = parseArgs(process.argv.slice(2));
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-turn-drift-'));
  const brokers = process.env.KAFKA_BROKERS ?? '127.0.0.1:9092';
  const prefix = `bench.drift.${Date.now()}.`;
  const servePort = 24_100;
  const children: ChildProcess[] = [];
  // The gateways record to their own topics (they create none).
  const admin = createKafka({ brokers: brokers.split(','), clientId: 'turn-drift-bench' }).admin();
  await admin.connect();
  await ensureTopics(admin, topicCatalog({ prefix, rawPartitions: 1, derivedPartitions: 1 }).all());
  await admin.disconnect();
  try {
    const serve = start(
      'serve',
      { SRPO_SERVE_MODEL_DIR: a.model, SRPO_SERVE_MODEL_NAME: 'm', SRPO_SERVE_PORT: String(servePort), SRPO_BACKEND: 'tensorflow' },
      path.join(dir, 'serve.log'),
    );
    children.push(serve);
    await ready(`http://127.0.0.1:${servePort}/v1/models`, serve, path.join(dir, 'serve.log'));
    const sides: { name: string; port: number; env: Record<string, string> }[] = [
      { name: 'text', port: servePort + 1, env: {} },
      { name: 'token prompts', port: servePort + 2, env: { SRPO_GATEWAY_TOKEN_PROMPTS: 'true' } },
    ];
    const results: Record<string, unknown>[] = [];
    for (const side of sides) {
      const log = path.join(dir, `gateway-${side.port}.log`);
      const gw = start(
        'gateway',
        {
          KAFKA_BROKERS: brokers,
          SRPO_TOPIC_PREFIX: prefix,
          SRPO_GATEWAY_UPSTREAM: `http://127.0.0.1:${servePort}/v1`,
          SRPO_GATEWAY_PORT: String(side.port),
          SRPO_GATEWAY_TOKENIZER_DIR: a.model,
          SRPO_GATEWAY_VERSION: '0',
          ...side.env,
        },
        log,
      );
      children.push(gw);
      await ready(`http://127.0.0.1:${side.port}/health`, gw, log);
      const client = new OpenAI({ baseURL: `http://127.0.0.1:${side.port}/v1`, apiKey: 'unused', maxRetries: 0 });
      for (let c = 0; c < a.conversations; c++) await conversation(client, 'm', c, a);
      const health = (await (await fetch(`http://127.0.0.1:${side.port}/health`)).json()) as Record<string, number>;
      results.push({
        side: side.name,
        recorded: health.recorded,
        turnsLinked: health.turnsLinked,
        tokenDrift: health.tokenDrift,
        tokenPrompts: health.tokenPrompts,
      });
    }
    console.log(
      JSON.stringify({ cpu: cpuDescription(), model: a.model, conversations: a.conversations, turns: a.turns, maxTokens: a.maxTokens, results }, null, 2),
    );
  } finally {
    for (const c of children) c.kill('SIGTERM');
  }
}

void main().catch((e: unknown) => {
  console.error(e);
  process.exitCode = 1;
});
