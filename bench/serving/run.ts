/**
 * srpo serve and srpo gateway, measured side by side in one run (not a timed test):
 *
 * 1. srpo serve's throughput with continuous batching against the same server with batching off
 *    (SRPO_SERVE_MAX_BATCH=1), at several concurrencies: requests/s and generated tokens/s.
 * 2. The latency the gateway adds: the same requests sent to an upstream directly and through the
 *    gateway (which waits for Kafka's acknowledgement before answering), p50/p99 one at a time,
 *    and the requests/s each sustains at the highest concurrency. Twice: in front of srpo serve,
 *    and in front of an instant upstream (a canned completion with log-probs and ids, from a
 *    child process), which isolates the gateway's own cost from generation's variance.
 *
 *   npm run build && npm run build:bench && node dist-bench/bench/serving/run.js [--requests 400] [--concurrency 1,8,32] [--max-tokens 8]
 *
 * Needs the local broker (`npx srpo kafka start`). The model is the demo's transformer
 * (32-symbol vocabulary, width 32, 2 layers); prompts are fixed-workflow solver prompts.
 */
import { spawn, type ChildProcess } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { EnvReader, initTfBackend, readKafkaBrokers, repoRoot } from '@srpo/core';
import { cpuDescription } from '../cpu';
import { createKafka, ensureTopics, LOCAL_BROKER, topicCatalog } from '@srpo/events';
import { CheckpointStore, Policy } from '@srpo/policy';

const MODEL = { vocabSize: 32, dModel: 32, nLayers: 2, nHeads: 2, maxSeqLen: 16 };

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && process.argv[i + 1] !== undefined ? process.argv[i + 1] : fallback;
}

function spawnApp(app: string, env: Record<string, string>, logFile: string): ChildProcess {
  const out = fs.openSync(logFile, 'a');
  return spawn(process.execPath, [path.join(repoRoot(), 'dist', 'apps', app, 'src', 'main.js')], {
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', ...env },
    stdio: ['ignore', out, out],
  });
}

async function waitListening(logFile: string): Promise<void> {
  const deadline = Date.now() + 120_000;
  while (!(fs.existsSync(logFile) && /listening/.test(fs.readFileSync(logFile, 'utf8')))) {
    if (Date.now() > deadline) throw new Error(`${logFile}: did not start`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/**
 * An upstream that answers every completion at once with the same canned body (8 tokens with
 * log-probs and ids, a srpo-style version): a child process, so its work is not the client's.
 */
function instantUpstream(port: number, logFile: string): ChildProcess {
  const script = `
    const http = require('http');
    const body = JSON.stringify({ id: 'cmpl-x', object: 'text_completion', created: 0, model: 'actor', system_fingerprint: 'srpo-actor-v0',
      prompt_token_ids: [0, 13, 2, 1],
      choices: [{ index: 0, text: '01234567', finish_reason: 'length', token_ids: [2, 3, 4, 5, 6, 7, 8, 9],
        logprobs: { tokens: ['0','1','2','3','4','5','6','7'], token_logprobs: [-1, -1, -1, -1, -1, -1, -1, -1], top_logprobs: null, text_offset: [0,1,2,3,4,5,6,7] } }],
      usage: { prompt_tokens: 4, completion_tokens: 8, total_tokens: 12 } });
    http.createServer((req, res) => { req.resume(); req.on('end', () => { res.setHeader('content-type', 'application/json'); res.end(body); }); })
      .listen(${port}, '127.0.0.1', () => console.log('instant upstream listening'));`;
  const out = fs.openSync(logFile, 'a');
  return spawn(process.execPath, ['-e', script], { stdio: ['ignore', out, out] });
}

interface Load {
  requests: number;
  seconds: number;
  tokens: number;
  latenciesMs: number[];
}

/** `n` completions with `concurrency` in flight; every request must succeed. */
async function load(url: string, n: number, concurrency: number, maxTokens: number, headers: (i: number) => Record<string, string>): Promise<Load> {
  let next = 0;
  let tokens = 0;
  const latencies: number[] = [];
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      for (let i = next++; i < n; i = next++) {
        const start = performance.now();
        const res = await fetch(url, {
          method: 'POST',
          headers: { 'content-type': 'application/json', ...headers(i) },
          body: JSON.stringify({ model: 'actor', prompt: `^S${i % 4}|`, max_tokens: maxTokens, temperature: 1, seed: i }),
        });
        const body = (await res.json()) as { usage?: { completion_tokens: number }; error?: { message: string } };
        if (!res.ok) throw new Error(`${url}: ${res.status} ${body.error?.message}`);
        latencies.push(performance.now() - start);
        tokens += body.usage?.completion_tokens ?? 0;
      }
    }),
  );
  return { requests: n, seconds: (performance.now() - t0) / 1000, tokens, latenciesMs: latencies };
}

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
}

async function main(): Promise<void> {
  const requests = Number(arg('requests', '400'));
  const concurrencies = arg('concurrency', '1,8,32').split(',').map(Number);
  const maxTokens = Number(arg('max-tokens', '8'));
  const brokers = readKafkaBrokers(new EnvReader(process.env), [LOCAL_BROKER]);
  await initTfBackend('tensorflow');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-bench-serving-'));
  const prefix = `srpo.bench-serving.${Date.now()}.`;
  const admin = createKafka({ brokers, clientId: 'bench-serving' }).admin();
  await admin.connect();
  await ensureTopics(admin, topicCatalog({ prefix, rawPartitions: 1, derivedPartitions: 1 }).all());
  await admin.disconnect();
  const policy = Policy.create('actor', MODEL, 1);
  await new CheckpointStore(path.join(dir, 'checkpoints')).save(policy);
  policy.dispose();
  const common = {
    KAFKA_BROKERS: brokers.join(','),
    SRPO_TOPIC_PREFIX: prefix,
    SRPO_CHECKPOINT_DIR: path.join(dir, 'checkpoints'),
    SRPO_LOG_LEVEL: 'warn',
    SRPO_BACKEND: 'tensorflow',
    TF_CPP_MIN_LOG_LEVEL: '2',
  };
  const ports = { batched: 27_101, unbatched: 27_102, gateway: 27_103, instant: 27_104, gatewayInstant: 27_105 };
  const children = [
    spawnApp(
      'serve',
      { ...common, SRPO_SERVE_POLICIES: 'actor', SRPO_SERVE_PORT: String(ports.batched), SRPO_LOG_LEVEL: 'info' },
      path.join(dir, 'batched.log'),
    ),
    spawnApp(
      'serve',
      { ...common, SRPO_SERVE_POLICIES: 'actor', SRPO_SERVE_PORT: String(ports.unbatched), SRPO_SERVE_MAX_BATCH: '1', SRPO_LOG_LEVEL: 'info' },
      path.join(dir, 'unbatched.log'),
    ),
    spawnApp(
      'gateway',
      { ...common, SRPO_GATEWAY_UPSTREAM: `http://127.0.0.1:${ports.batched}/v1`, SRPO_GATEWAY_PORT: String(ports.gateway), SRPO_LOG_LEVEL: 'info' },
      path.join(dir, 'gateway.log'),
    ),
    spawnApp(
      'gateway',
      { ...common, SRPO_GATEWAY_UPSTREAM: `http://127.0.0.1:${ports.instant}/v1`, SRPO_GATEWAY_PORT: String(ports.gatewayInstant), SRPO_LOG_LEVEL: 'info' },
      path.join(dir, 'gateway-instant.log'),
    ),
    instantUpstream(ports.instant, path.join(dir, 'instant.log')),
  ];
  try {
    for (const f of ['batched.log', 'unbatched.log', 'gateway.log', 'gateway-instant.log', 'instant.log']) await waitListening(path.join(dir, f));
    const url = (port: number) => `http://127.0.0.1:${port}/v1/completions`;
    const none = () => ({});
    const episode = (i: number) => ({ 'X-SRPO-Episode': `bench-${i}`, 'X-SRPO-Step': '0', 'X-SRPO-Role': 'solver', 'X-SRPO-Agent': 'a' });
    // Warm-up: the first requests compile kernels.
    for (const port of [ports.batched, ports.unbatched]) await load(url(port), 32, 8, maxTokens, none);
    await load(url(ports.gateway), 32, 8, maxTokens, episode);

    const cpu = cpuDescription();
    console.log(`CPU: ${cpu.model}, ${cpu.vector} (${cpu.flags.join(' ')}), ${os.cpus().length} vCPUs`);
    console.log(`\n## srpo serve: continuous batching against batching off (${requests} requests, ${maxTokens} tokens each)\n`);
    console.log('| concurrency | batched req/s | batched tokens/s | unbatched req/s | unbatched tokens/s | speed-up |');
    console.log('| ---: | ---: | ---: | ---: | ---: | ---: |');
    for (const c of concurrencies) {
      const b = await load(url(ports.batched), requests, c, maxTokens, none);
      const u = await load(url(ports.unbatched), requests, c, maxTokens, none);
      const rb = b.requests / b.seconds;
      const ru = u.requests / u.seconds;
      console.log(
        `| ${c} | ${rb.toFixed(1)} | ${(b.tokens / b.seconds).toFixed(0)} | ${ru.toFixed(1)} | ${(u.tokens / u.seconds).toFixed(0)} | ${(rb / ru).toFixed(2)}× |`,
      );
    }

    const cMax = Math.max(...concurrencies);
    for (const [label, upstreamPort, gatewayPort] of [
      ['srpo serve', ports.batched, ports.gateway],
      ['an instant upstream', ports.instant, ports.gatewayInstant],
    ] as const) {
      console.log(`\n## srpo gateway in front of ${label}: the latency it adds (Kafka acknowledgement included)\n`);
      const direct1 = await load(url(upstreamPort), requests, 1, maxTokens, none);
      const gw1 = await load(url(gatewayPort), requests, 1, maxTokens, (i) => episode(100_000 + upstreamPort * 1000 + i));
      const directN = await load(url(upstreamPort), requests, cMax, maxTokens, none);
      const gwN = await load(url(gatewayPort), requests, cMax, maxTokens, (i) => episode(200_000 + upstreamPort * 1000 + i));
      console.log(`| path | p50 ms (one at a time) | p99 ms | req/s at concurrency ${cMax} |`);
      console.log('| --- | ---: | ---: | ---: |');
      console.log(
        `| ${label} directly | ${pct(direct1.latenciesMs, 50).toFixed(2)} | ${pct(direct1.latenciesMs, 99).toFixed(2)} | ${(directN.requests / directN.seconds).toFixed(1)} |`,
      );
      console.log(
        `| through srpo gateway | ${pct(gw1.latenciesMs, 50).toFixed(2)} | ${pct(gw1.latenciesMs, 99).toFixed(2)} | ${(gwN.requests / gwN.seconds).toFixed(1)} |`,
      );
      console.log(
        `| added by the gateway | ${(pct(gw1.latenciesMs, 50) - pct(direct1.latenciesMs, 50)).toFixed(2)} | ${(pct(gw1.latenciesMs, 99) - pct(direct1.latenciesMs, 99)).toFixed(2)} | |`,
      );
    }
  } finally {
    for (const c of children) c.kill('SIGTERM');
  }
}

main().catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});
