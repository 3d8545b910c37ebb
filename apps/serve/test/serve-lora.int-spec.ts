import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import type { NestExpressApplication } from '@nestjs/platform-express';
import { initTfBackend, repoRoot } from '@srpo/core';
import { SeededRng, tokenLogProbs } from '@srpo/policy';
import { loadHfModel, loadLoraAdapter, LoraAdapter, loraFactorSpecs, resolveLoraConfig, saveLoraAdapter, type LlamaModel } from '@srpo/hf';
import { bootstrap } from '../src/main';

const QWEN2 = path.join(repoRoot(), 'libs', 'hf', 'fixtures', 'qwen2');

/** A peft adapter with seeded non-zero factors, as a trained version is. */
async function writeAdapter(dir: string, seed: number): Promise<void> {
  const base = loadHfModel(QWEN2).model;
  const lora = resolveLoraConfig({ r: 4, alpha: 8, targetModules: ['q_proj', 'v_proj'] });
  const rng = new SeededRng(seed);
  const tensors = new Map<string, { shape: number[]; data: Float32Array }>();
  for (const s of loraFactorSpecs(base.config, lora))
    tensors.set(s.key, { shape: s.shape, data: new Float32Array(s.shape[0] * s.shape[1]).map(() => (2 * rng.nextFloat() - 1) * 0.5) });
  base.setAdapter(LoraAdapter.fromTensors(base.config, lora, tensors));
  await saveLoraAdapter(base, dir, { baseModelNameOrPath: QWEN2 });
  base.dispose();
}

/**
 * `srpo serve --model DIR` in-process, with no broker: the directory served on its own under
 * `--served-model-name`, and vLLM's runtime LoRA endpoints over it, answered in vLLM's shapes
 * (`vllm/entrypoints/openai/serving_models.py`: 200 with a text body, errors as
 * `{"error": {message, type, param, code}}`).
 */
describe('srpo serve --model with vLLM LoRA endpoints', () => {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-serve-lora-'));
  const adapterDir = path.join(tmp, 'actor-v1');
  let app: NestExpressApplication;
  let base: string;
  let reference: LlamaModel;

  const post = async (route: string, body: unknown) => {
    const res = await fetch(`${base}${route}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    const text = await res.text();
    return { status: res.status, text, headers: res.headers, json: () => JSON.parse(text) as Record<string, unknown> };
  };

  beforeAll(async () => {
    await initTfBackend('tensorflow');
    await writeAdapter(adapterDir, 11);
    app = await bootstrap({
      PATH: process.env.PATH,
      SRPO_SERVE_MODEL_DIR: QWEN2,
      SRPO_SERVE_MODEL_NAME: 'tiny-qwen',
      SRPO_SERVE_PORT: '0',
      SRPO_SERVE_MAX_LORAS: '2',
      SRPO_BACKEND: 'tensorflow',
      SRPO_LOG_LEVEL: 'warn',
      // No broker: a Kafka variable that points nowhere proves none is used.
      KAFKA_BROKERS: '127.0.0.1:1',
    });
    const port = (app.getHttpServer().address() as { port: number }).port;
    base = `http://127.0.0.1:${port}`;
    reference = loadHfModel(QWEN2).model;
    loadLoraAdapter(reference, adapterDir);
  }, 60_000);

  afterAll(async () => {
    await app?.close();
    reference?.dispose();
    fs.rmSync(tmp, { recursive: true, force: true });
  });

  it('serves the directory under its served name, with no broker and no policy', async () => {
    const models = (await (await fetch(`${base}/v1/models`)).json()) as { data: { id: string }[] };
    expect(models.data.map((m) => m.id)).toEqual(['tiny-qwen']);
    const r = await post('/v1/completions', { model: 'tiny-qwen', prompt: 'hello', max_tokens: 3, temperature: 0 });
    expect(r.status).toBe(200);
    expect(r.headers.get('x-srpo-policy-version')).toBe('tiny-qwen@0');
  });

  it('answers /health while a long generation runs: the engine yields to the event loop between steps', async () => {
    type Health = { status: string; tokens: number; steps: number; kvSlots: number };
    const health = async (): Promise<Health> => (await (await fetch(`${base}/health`)).json()) as Health;
    const before = await health();
    let settled = false;
    const long = post('/v1/completions', { model: 'tiny-qwen', prompt: 'hello', max_tokens: 200, temperature: 0 }).finally(() => (settled = true));
    // Server and client share this process's event loop: a /health answer that reports some but
    // not all of the long completion's tokens was answered between two of its steps.
    let during: Health | undefined;
    while (!settled && during === undefined) {
      const h = await health();
      if (h.tokens > before.tokens && !settled) during = h;
    }
    const r = await long;
    expect(r.status).toBe(200);
    const generated = (r.json().usage as { completion_tokens: number }).completion_tokens;
    expect(generated).toBeGreaterThanOrEqual(50);
    expect(during).toMatchObject({ status: 'ok' });
    expect(during!.tokens - before.tokens).toBeLessThan(generated);
    // The long choice's cache was in use then: the slots of its prompt and tokens so far.
    expect(during!.kvSlots).toBeGreaterThan(0);
    expect((await health()).kvSlots).toBe(0);
  });

  it('load_lora_adapter: 200 and a text body; the adapter is a model whose responses name its version and carry its log-probs', async () => {
    const r = await post('/v1/load_lora_adapter', { lora_name: 'actor@v1', lora_path: adapterDir });
    expect([r.status, r.text]).toEqual([200, "Success: LoRA adapter 'actor@v1' added successfully."]);
    const models = (await (await fetch(`${base}/v1/models`)).json()) as { data: { id: string }[] };
    expect(models.data.map((m) => m.id)).toEqual(['tiny-qwen', 'actor@v1']);
    const c = await post('/v1/completions', {
      model: 'actor@v1',
      prompt: 'hello',
      max_tokens: 6,
      temperature: 1,
      seed: 3,
      logprobs: 0,
      return_token_ids: true,
    });
    expect(c.status).toBe(200);
    expect(c.headers.get('x-srpo-policy-version')).toBe('actor@1');
    const body = c.json() as {
      system_fingerprint: string;
      prompt_token_ids: number[];
      choices: { token_ids: number[]; logprobs: { token_logprobs: number[] } }[];
    };
    expect(body.system_fingerprint).toBe('srpo-actor-v1');
    // Independent of the server: the adapter attached the ordinary way to a copy of the base.
    const { logProbs, mask } = tokenLogProbs(reference, [{ contextTokens: body.prompt_token_ids, responseTokens: body.choices[0].token_ids }], {
      temperature: 1,
    });
    const expected = Array.from(await logProbs.data()).slice(0, body.choices[0].token_ids.length);
    logProbs.dispose();
    mask.dispose();
    body.choices[0].logprobs.token_logprobs.forEach((lp, j) => expect(Math.abs(lp - expected[j])).toBeLessThan(1e-4));
  });

  it("refuses in vLLM's shapes and statuses", async () => {
    const missing = await post('/v1/load_lora_adapter', { lora_name: 'x' });
    expect(missing.status).toBe(400);
    expect(missing.json()).toEqual({
      error: {
        message: expect.stringMatching(/Both 'lora_name' and 'lora_path' must be provided/) as string,
        type: 'InvalidUserInput',
        param: null,
        code: 400,
      },
    });
    const again = await post('/v1/load_lora_adapter', { lora_name: 'actor@v1', lora_path: adapterDir });
    expect([again.status, (again.json().error as { type: string }).type]).toEqual([400, 'InvalidUserInput']);
    expect((again.json().error as { message: string }).message).toMatch(/The lora adapter 'actor@v1' has already been loaded/);
    const nowhere = await post('/v1/load_lora_adapter', { lora_name: 'y', lora_path: path.join(tmp, 'nowhere') });
    expect([nowhere.status, (nowhere.json().error as { type: string }).type]).toEqual([404, 'NotFoundError']);
    const unknown = await post('/v1/unload_lora_adapter', { lora_name: 'never' });
    expect(unknown.status).toBe(404);
    expect(unknown.json()).toEqual({
      error: { message: expect.stringMatching(/The lora adapter 'never' cannot be found/) as string, type: 'NotFoundError', param: null, code: 404 },
    });
  });

  it('unload_lora_adapter: 200 and a text body; the name is then an unknown model', async () => {
    const r = await post('/v1/unload_lora_adapter', { lora_name: 'actor@v1' });
    expect([r.status, r.text]).toEqual([200, "Success: LoRA adapter 'actor@v1' removed successfully."]);
    const c = await post('/v1/completions', { model: 'actor@v1', prompt: 'hello', max_tokens: 2 });
    expect(c.status).toBe(404);
    expect((c.json().error as { code: string }).code).toBe('model_not_found');
    // The base is still served after its adapters come and go.
    expect((await post('/v1/completions', { model: 'tiny-qwen', prompt: 'hello', max_tokens: 2 })).status).toBe(200);
  });
});
