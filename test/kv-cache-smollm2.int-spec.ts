import { spawn } from 'child_process';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { initTfBackend, repoRoot } from '@srpo/core';
import { loadHfModel, type HfModel } from '@srpo/hf';
import { srpoKernelAvailable, srpoMatMulRouted } from '@srpo/kernels';
import { GenerationEngine, type GenerationParams, type TokenDraw } from '@srpo/serving';

/**
 * srpo serve's KV cache on the real model, SmolLM2-135M-Instruct: greedy choices generated with
 * the cache are those generated without it (every step recomputing the whole sequence): the same
 * token ids, and with decodeProducts 'learner' the same log-probs (within 1e-5, the issue's bound;
 * measured identical), with the default products within 3e-5 (see the tests), for chat prompts of
 * different lengths decoding together (one request with n = 2). And they are transformers' greedy ids with its own cache
 * (scripts/reference/generate_hf.py), log-probs within 1e-4. Under a budget too small for all rows
 * at once, preempted rows (prefilled again with their tokens) give the same output.
 *
 * The directory is SRPO_SMOLLM2_DIR, default ~/.cache/srpo/models/smollm2-135m-instruct (which
 * scripts/setup.sh makes). Skipped, and reported so, where it is missing; SRPO_REQUIRE_SMOLLM2=1
 * (CI) fails instead.
 */
const DIR = process.env.SRPO_SMOLLM2_DIR ?? path.join(os.homedir(), '.cache', 'srpo', 'models', 'smollm2-135m-instruct');
const present = fs.existsSync(path.join(DIR, 'config.json'));
const required = process.env.SRPO_REQUIRE_SMOLLM2 === '1';
const MAX_TOKENS = 40;
const END = 2; // <|im_end|>

const QUESTIONS = [
  'What is 2+3? Answer in one sentence.',
  'Explain in three sentences what a Kafka consumer group does and why offsets are committed.',
  'Write a haiku about autumn.',
];

interface Choice {
  ids: number[];
  logprobs: number[];
}

async function generateAll(engine: GenerationEngine, hf: HfModel, prompts: number[][]): Promise<Choice[]> {
  const params: GenerationParams = { maxTokens: MAX_TOKENS, temperature: 0, topP: 1, stopIds: [END], topLogprobs: 0 };
  // The second prompt twice: a request's n = 2 choices, sharing one prefill.
  const all = [...prompts, prompts[1]];
  return Promise.all(
    all.map(async (p) => {
      const draws: TokenDraw[] = [];
      await engine.generate(hf.model, p, params, (d) => {
        draws.push(d);
        return false;
      });
      return { ids: draws.map((d) => d.id), logprobs: draws.map((d) => d.logprob) };
    }),
  );
}

if (!present) console.warn(`kv-cache-smollm2: skipped, ${DIR} is missing (scripts/setup.sh makes it; SRPO_SMOLLM2_DIR points elsewhere)`);

/**
 * Runs scripts/reference/generate_hf.py on the prompts without blocking: importing torch and
 * generating take seconds of one core, which overlap our own generation this way. Killed after
 * 600 s (status null then).
 */
function generateWithTransformers(prompts: number[][]): Promise<{ status: number | null; stdout: string; stderr: string }> {
  const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-kv-')), 'prompts.json');
  fs.writeFileSync(file, JSON.stringify(prompts));
  const script = path.join(repoRoot(), 'scripts', 'reference', 'generate_hf.py');
  const child = spawn('python3', [script, DIR, file, String(MAX_TOKENS), String(END)], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const timer = setTimeout(() => child.kill('SIGKILL'), 600_000);
  return new Promise((resolve) => {
    child.once('error', (e) => {
      clearTimeout(timer);
      resolve({ status: null, stdout, stderr: `${stderr}\n${e.message}` });
    });
    child.once('close', (status) => {
      clearTimeout(timer);
      resolve({ status, stdout, stderr });
    });
  });
}

(present || required ? describe : describe.skip)(`the KV cache on SmolLM2-135M-Instruct (${present ? DIR : `skipped: ${DIR} is missing`})`, () => {
  let hf: HfModel;
  let prompts: number[][];
  let cached: Choice[];
  let plain: Choice[];
  /** transformers' generation (scripts/reference/generate_hf.py, one thread), started in beforeAll so it runs beside ours. */
  let reference: Promise<{ status: number | null; stdout: string; stderr: string }>;

  beforeAll(async () => {
    if (!present) throw new Error(`SRPO_REQUIRE_SMOLLM2=1 and ${DIR} is missing`);
    await initTfBackend('tensorflow');
    hf = loadHfModel(DIR);
    prompts = QUESTIONS.map((q) => hf.tokenizer.encode(hf.tokenizer.applyChatTemplate([{ role: 'user', content: q }], { addGenerationPrompt: true })));
    reference = generateWithTransformers(prompts);
    cached = await generateAll(new GenerationEngine({ maxBatchRows: 8, maxQueuedRows: 8 }), hf, prompts);
    plain = await generateAll(new GenerationEngine({ maxBatchRows: 8, maxQueuedRows: 8, kvCacheTokens: 0 }), hf, prompts);
  }, 600_000);
  afterAll(() => hf?.model.dispose());

  it("greedy output with the cache equals output without it: ids identical, log-probs within 1e-5 with decodeProducts 'learner'", async () => {
    const learner = await generateAll(new GenerationEngine({ maxBatchRows: 8, maxQueuedRows: 8, decodeProducts: 'learner' }), hf, prompts);
    expect(learner.map((c) => c.ids)).toEqual(plain.map((c) => c.ids));
    // Real answers, not an immediate end ("2 + 3 = 5." is 7 tokens with its end), and long ones among them.
    for (const c of learner) expect(c.ids.length).toBeGreaterThanOrEqual(5);
    expect(Math.max(...learner.map((c) => c.ids.length))).toBe(MAX_TOKENS);
    // With the learner's products on SrpoMatMul (each element one FMA chain over k, whatever the
    // rows) and the decode-attention kernel (SrpoDecodeAttention: SrpoAttention's order for the same
    // position), a cached step sums exactly as the full forward does: measured identical log-probs.
    // Where either is missing (no addon; an AMD CPU with AVX-512, whose learner products are oneDNN's)
    // the orders differ, as with the default products below: said so, and that bound.
    const exact = srpoKernelAvailable('SrpoDecodeAttention') && srpoMatMulRouted();
    if (!exact) console.warn('kv-cache-smollm2: SrpoDecodeAttention or SrpoMatMul not in use here; checking 3e-5, not 1e-5');
    const bound = exact ? 1e-5 : 3e-5;
    learner.forEach((c, i) => c.logprobs.forEach((lp, j) => expect(Math.abs(lp - plain[i].logprobs[j])).toBeLessThan(bound)));
  }, 600_000);

  it('with the default products (TensorFlow MatMul at few rows): ids identical, log-probs within 3e-5', () => {
    expect(cached.map((c) => c.ids)).toEqual(plain.map((c) => c.ids));
    // The issue's 1e-5 holds with decodeProducts 'learner' (above), not here: TensorFlow's MatMul
    // (oneDNN) sums the projections of steps of ≤ 4 rows and the vocabulary head in another order
    // than SrpoMatMul: up to 1.9e-5 measured here, 2.4e-5 with these prompts decoded as one batch of
    // three (float32 rounding alone; attention's order is the full forward's, see above).
    cached.forEach((c, i) => c.logprobs.forEach((lp, j) => expect(Math.abs(lp - plain[i].logprobs[j])).toBeLessThan(3e-5)));
  });

  it('under a KV-cache budget that forces preemption, the same ids and log-probs within 2e-5; the budget held at every step', async () => {
    // Room for one and a half of the longest rows at full length, not four: rows are preempted as they grow.
    const budget = Math.ceil(1.5 * (Math.max(...prompts.map((p) => p.length)) + MAX_TOKENS));
    const engine = new GenerationEngine({ maxBatchRows: 8, maxQueuedRows: 8, kvCacheTokens: budget });
    let most = 0;
    const params: GenerationParams = { maxTokens: MAX_TOKENS, temperature: 0, topP: 1, stopIds: [END], topLogprobs: 0 };
    const tight = await Promise.all(
      [...prompts, prompts[1]].map(async (p) => {
        const draws: TokenDraw[] = [];
        await engine.generate(hf.model, p, params, (d) => {
          draws.push(d);
          most = Math.max(most, engine.kvSlots);
          return false;
        });
        return { ids: draws.map((d) => d.id), logprobs: draws.map((d) => d.logprob) };
      }),
    );
    expect(engine.totals.preemptions).toBeGreaterThanOrEqual(2);
    expect(engine.totals.recomputedTokens).toBeGreaterThan(0);
    expect(most).toBeLessThanOrEqual(budget);
    expect(tight.map((c) => c.ids)).toEqual(cached.map((c) => c.ids));
    tight.forEach((c, i) => c.logprobs.forEach((lp, j) => expect(Math.abs(lp - cached[i].logprobs[j])).toBeLessThan(2e-5)));
  }, 600_000);

  it("equals transformers' greedy generation with its cache: ids identical, log-probs within 1e-4", async () => {
    const r = await reference;
    if (r.status !== 0) {
      throw new Error(
        `transformers could not generate (python3 -m pip install -r scripts/reference/requirements.txt installs the reference):\n${r.stderr.slice(-2000)}`,
      );
    }
    const ref = JSON.parse(r.stdout.trim().split('\n').pop() as string) as Choice[];
    expect(cached.slice(0, prompts.length).map((c) => c.ids)).toEqual(ref.map((c) => c.ids));
    ref.forEach((c, i) => c.logprobs.forEach((lp, j) => expect(Math.abs(lp - cached[i].logprobs[j])).toBeLessThan(1e-4)));
  }, 600_000);
});
