/**
 * srpo serve's decoding against transformers `generate`, side by side in one run (not a timed test):
 * greedy decoding of `--tokens` new tokens (default 128) at batch 1 and 16, on SmolLM2-135M-Instruct
 * (or `--model DIR`), the same chat prompts (token ids rendered once, by the project's tokenizer and
 * chat template) and the same thread count on both sides.
 *
 *   npm run build:bench && node dist-bench/bench/serving/decode.js [--model DIR] [--tokens 128] [--batches 1,16]
 *       [--threads N] [--uncached] [--learner-products] [--composite-attention] [--no-torch] [--out FILE]
 *
 * srpo's side is GenerationEngine.generate (KV cache, continuous batching; `--uncached` adds the
 * engine without its cache, `--learner-products` the engine with decodeProducts 'learner',
 * `--composite-attention` the engine with the decode-attention kernel off: tfjs' products and Softmax), B concurrent choices with no stop ids so every row makes exactly N
 * tokens, in a child process with TF_NUM_INTRAOP_THREADS = threads; transformers' side is
 * bench/serving/torch_decode.py (torch.set_num_threads(threads), its default sdpa attention). Reported
 * per side and batch: tokens/s over the whole call (prefill included), decode tokens/s after the
 * first token, time to first token (srpo: until every row has its first token; transformers: the
 * same call with max_new_tokens=1), peak RSS of the side's process so far, and how many leading ids
 * of each row agree between the sides (greedy decoding of the same model should agree until a
 * near-tie in float32).
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { initTfBackend } from '@srpo/core';
import { HfTokenizer, loadHfModel } from '@srpo/hf';
import { configureSrpoKernels } from '@srpo/kernels';
import { GenerationEngine } from '@srpo/serving';
import { lastJsonLine, threadEnv } from '../learner/bench-common';
import { cpuDescription } from '../cpu';

const QUESTIONS = [
  'What is 2+3? Answer in one sentence.',
  'Explain what a Kafka consumer group does.',
  'Write a haiku about autumn.',
  'Give me three tips for writing clean TypeScript.',
  'What is the capital of France, and what is it known for?',
  'Summarise the plot of Romeo and Juliet in two sentences.',
  'How do I boil an egg so that the yolk stays runny?',
  'List the planets of the solar system in order.',
  'Why is the sky blue?',
  'Translate "good morning, how are you?" into Spanish.',
  'What is the difference between a list and a tuple in Python?',
  'Suggest a name for a bakery that sells sourdough bread.',
  'Explain recursion to a ten-year-old.',
  'What are the health benefits of walking every day?',
  'Write a short thank-you note to a colleague who helped me move.',
  'How does a refrigerator keep food cold?',
];

interface Task {
  model: string;
  prompts: number[][];
  batches: number[];
  tokens: number;
  threads: number;
  compositeAttention?: boolean;
  uncached?: boolean;
  learnerProducts?: boolean;
}

interface BatchResult {
  batch: number;
  tokens: number;
  seconds: number;
  tokensPerSecond: number;
  decodeTokensPerSecond: number;
  timeToFirstTokenMs: number;
  peakRssBytes: number;
  ids: number[][];
}

interface SideResult {
  side: string;
  loadSeconds: number;
  results: BatchResult[];
}

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && process.argv[i + 1] !== undefined ? process.argv[i + 1] : fallback;
}

/** One engine run: B choices of N greedy tokens, timed from the first generate call. */
async function timedRun(engine: GenerationEngine, hf: ReturnType<typeof loadHfModel>, prompts: number[][], b: number, n: number): Promise<BatchResult> {
  const firstAt: number[] = [];
  const ids: number[][] = Array.from({ length: b }, () => []);
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: b }, (_, i) =>
      engine.generate(hf.model, prompts[i % prompts.length], { maxTokens: n, temperature: 0, topP: 1, stopIds: [], topLogprobs: 0 }, (d) => {
        if (ids[i].length === 0) firstAt[i] = performance.now();
        ids[i].push(d.id);
        return false;
      }),
    ),
  );
  const seconds = (performance.now() - t0) / 1000;
  const ttft = (Math.max(...firstAt) - t0) / 1000;
  return {
    batch: b,
    tokens: n,
    seconds,
    tokensPerSecond: (b * n) / seconds,
    decodeTokensPerSecond: (b * (n - 1)) / Math.max(seconds - ttft, 1e-9),
    timeToFirstTokenMs: ttft * 1000,
    peakRssBytes: process.resourceUsage().maxRSS * 1024,
    ids,
  };
}

async function worker(task: Task): Promise<void> {
  await initTfBackend('tensorflow');
  if (task.compositeAttention) configureSrpoKernels({ except: ['SrpoDecodeAttention'] });
  const t0 = performance.now();
  const hf = loadHfModel(task.model);
  const loadSeconds = (performance.now() - t0) / 1000;
  const results: BatchResult[] = [];
  for (const b of task.batches) {
    const engine = new GenerationEngine({
      maxBatchRows: b,
      maxQueuedRows: b,
      ...(task.uncached ? { kvCacheTokens: 0 } : {}),
      ...(task.learnerProducts ? { decodeProducts: 'learner' as const } : {}),
    });
    await timedRun(engine, hf, task.prompts, b, 4); // warm-up: rope tables, masks, kernels
    results.push(await timedRun(engine, hf, task.prompts, b, task.tokens));
  }
  hf.model.dispose();
  const side = task.uncached
    ? 'srpo serve (no KV cache)'
    : task.learnerProducts
      ? 'srpo serve (KV cache, learner products)'
      : task.compositeAttention
        ? 'srpo serve (KV cache, composite attention)'
        : 'srpo serve (KV cache)';
  console.log(JSON.stringify({ side, loadSeconds, results }));
}

function runSide(command: string, args: string[], threads: number, label: string): SideResult {
  const r = spawnSync(command, args, { env: threadEnv(threads), encoding: 'utf8', maxBuffer: 64 << 20 });
  if (r.status !== 0) throw new Error(`${label} failed (exit ${r.status}):\n${(r.stderr ?? '').slice(-3000)}`);
  return lastJsonLine<SideResult>(r.stdout);
}

/** Leading ids two rows share. */
function agreeing(a: number[], b: number[]): number {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  return i;
}

async function main(): Promise<void> {
  const wi = process.argv.indexOf('--worker');
  if (wi >= 0) return worker(JSON.parse(process.argv[wi + 1]) as Task);
  const model = arg('model', process.env.SRPO_SMOLLM2_DIR ?? path.join(os.homedir(), '.cache', 'srpo', 'models', 'smollm2-135m-instruct'));
  if (!existsSync(path.join(model, 'config.json'))) throw new Error(`${model}: no Hugging Face directory there (--model DIR, or run scripts/setup.sh)`);
  const tokens = Number(arg('tokens', '128'));
  const batches = arg('batches', '1,16').split(',').map(Number);
  const threads = Number(arg('threads', String(os.cpus().length)));
  const tokenizer = HfTokenizer.fromDirectory(model);
  const prompts = QUESTIONS.map((q) => tokenizer.encode(tokenizer.applyChatTemplate([{ role: 'user', content: q }], { addGenerationPrompt: true })));
  const task: Task = { model, prompts, batches, tokens, threads };
  const dir = mkdtempSync(path.join(os.tmpdir(), 'srpo-bench-decode-'));
  const sides: SideResult[] = [];
  if (!process.argv.includes('--no-torch')) {
    const file = path.join(dir, 'task.json');
    writeFileSync(file, JSON.stringify(task));
    sides.push(runSide('python3', [path.join(__dirname.replace(/dist-bench[/\\]/, ''), 'torch_decode.py'), file], threads, 'transformers'));
  }
  sides.push(runSide(process.execPath, [__filename, '--worker', JSON.stringify(task)], threads, 'srpo'));
  if (process.argv.includes('--learner-products'))
    sides.push(runSide(process.execPath, [__filename, '--worker', JSON.stringify({ ...task, learnerProducts: true })], threads, 'srpo learner-products'));
  if (process.argv.includes('--composite-attention'))
    sides.push(runSide(process.execPath, [__filename, '--worker', JSON.stringify({ ...task, compositeAttention: true })], threads, 'srpo composite-attention'));
  if (process.argv.includes('--uncached'))
    sides.push(runSide(process.execPath, [__filename, '--worker', JSON.stringify({ ...task, uncached: true })], threads, 'srpo uncached'));
  const cpu = cpuDescription();
  console.log(
    `${cpu.model} (${cpu.vector}), ${threads} threads; ${tokens} new tokens, greedy; prompts ${Math.min(...prompts.map((p) => p.length))}-${Math.max(...prompts.map((p) => p.length))} tokens`,
  );
  const torch = sides.find((s) => s.side.startsWith('transformers'));
  for (const b of batches) {
    for (const s of sides) {
      const r = s.results.find((x) => x.batch === b) as BatchResult;
      const ref = torch?.results.find((x) => x.batch === b);
      const ratio = ref ? ` ${(r.tokensPerSecond / ref.tokensPerSecond).toFixed(2)}x` : '';
      const agree = ref && s !== torch ? ` ids agree ${r.ids.map((row, i) => agreeing(row, ref.ids[i])).join('/')} of ${tokens}` : '';
      console.log(
        `batch ${String(b).padStart(2)} ${s.side.padEnd(40)} ${r.tokensPerSecond.toFixed(1).padStart(7)} tok/s${ratio} (decode ${r.decodeTokensPerSecond.toFixed(1)}), ` +
          `first token ${r.timeToFirstTokenMs.toFixed(0)} ms, peak RSS ${(r.peakRssBytes / 2 ** 20).toFixed(0)} MiB${agree}`,
      );
    }
  }
  const out = { cpu, threads, tokens, model, promptLengths: prompts.map((p) => p.length), sides };
  const file = arg('out', '');
  if (file) writeFileSync(file, JSON.stringify(out, null, 2));
  if (process.argv.includes('--json')) console.log(JSON.stringify(out));
}

main().catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});
