import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { ErrorCode, initTfBackend, repoRoot, SrpoError } from '@srpo/core';
import { Policy, SeededRng, tokenLogProbs, type CausalLm } from '@srpo/policy';
import { loadHfModel, loadLoraAdapter, LoraAdapter, loraFactorSpecs, resolveLoraConfig, saveLoraAdapter, type LlamaModel } from '@srpo/hf';
import { CompletionService } from './completion.service';
import { GenerationEngine } from './generation-engine';
import { LoraAdapters, servedNameIdentity } from './lora-adapters';
import { parseRequest } from './openai-protocol';
import { ServedModels } from './served-models';

const QWEN2 = path.join(repoRoot(), 'libs', 'hf', 'fixtures', 'qwen2');

/** Writes a peft adapter with random, clearly non-zero factors (seeded), as a trained version would be. */
async function writeAdapter(base: LlamaModel, dir: string, seed: number): Promise<void> {
  const lora = resolveLoraConfig({ r: 4, alpha: 8, targetModules: ['q_proj', 'v_proj', 'down_proj'] });
  const rng = new SeededRng(seed);
  const tensors = new Map<string, { shape: number[]; data: Float32Array }>();
  for (const s of loraFactorSpecs(base.config, lora)) {
    const data = new Float32Array(s.shape[0] * s.shape[1]).map(() => (2 * rng.nextFloat() - 1) * 0.5);
    tensors.set(s.key, { shape: s.shape, data });
  }
  const view = base.adapterView(LoraAdapter.fromTensors(base.config, lora, tensors));
  await saveLoraAdapter(view, dir, { baseModelNameOrPath: QWEN2 });
  view.dispose();
}

async function scored(model: CausalLm, context: number[], response: number[], temperature: number): Promise<number[]> {
  const { logProbs, mask } = tokenLogProbs(model, [{ contextTokens: context, responseTokens: response }], { temperature });
  const out = Array.from(await logProbs.data()).slice(0, response.length);
  logProbs.dispose();
  mask.dispose();
  return out;
}

describe('LoRA adapters over one shared base (native TensorFlow, qwen2 fixture)', () => {
  let tmp: string;
  let base: LlamaModel;
  let models: ServedModels;
  let adapters: LoraAdapters;
  let service: CompletionService;
  const dirs: string[] = [];
  /** Independent references: the base loaded again with each adapter attached the ordinary way (own copy, no view). */
  const references: LlamaModel[] = [];

  beforeAll(async () => {
    await initTfBackend('tensorflow');
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-lora-serve-'));
    base = loadHfModel(QWEN2).model;
    for (let v = 1; v <= 3; v++) {
      const dir = path.join(tmp, `actor-v${v}`);
      await writeAdapter(base, dir, 100 + v);
      dirs.push(dir);
      const ref = loadHfModel(QWEN2).model;
      loadLoraAdapter(ref, dir);
      references.push(ref);
    }
    models = new ServedModels();
    models.addNamed('qwen2', new Policy('qwen2', base, 0));
    adapters = new LoraAdapters({ base, models, maxAdapters: 2 });
    service = new CompletionService(models, new GenerationEngine({ maxBatchRows: 64, maxQueuedRows: 256 }));
  });
  afterAll(() => {
    models?.disposeNamed();
    for (const r of references) r.dispose();
    fs.rmSync(tmp, { recursive: true, force: true });
  });

  it('a served name carries its policy version: actor@v12 is actor at 12, any other name version 0', () => {
    expect(servedNameIdentity('actor@v12')).toEqual({ policyId: 'actor', version: 12 });
    expect(servedNameIdentity('my@team@v3')).toEqual({ policyId: 'my@team', version: 3 });
    expect(servedNameIdentity('sql-lora')).toEqual({ policyId: 'sql-lora', version: 0 });
  });

  it('refuses as vLLM does: missing fields, a name already loaded, a path with no adapter, an unknown name to unload', () => {
    expect(() => adapters.load('', dirs[0])).toThrow(/Both 'lora_name' and 'lora_path' must be provided/);
    expect(() => adapters.load('x', path.join(tmp, 'nowhere'))).toThrow(expect.objectContaining({ code: ErrorCode.NOT_FOUND }) as Error);
    expect(() => adapters.load('x', tmp)).toThrow(expect.objectContaining({ code: ErrorCode.NOT_FOUND }) as Error);
    expect(() => adapters.load('qwen2', dirs[0])).toThrow(expect.objectContaining({ code: ErrorCode.CONFLICT }) as Error);
    expect(() => adapters.unload('never-loaded')).toThrow(/The lora adapter 'never-loaded' cannot be found/);
    expect(models.ids()).toEqual(['qwen2']);
  });

  it('hot swap under concurrent requests: every response comes from the adapter it started with, none lost, the base untouched', async () => {
    const trainableBefore = [...base.baseWeights.values()].map((v) => v.trainable);
    adapters.load('actor@v1', dirs[0]);
    adapters.load('actor@v2', dirs[1]);
    const requests: { model: string; reference: LlamaModel | undefined; run: Promise<Awaited<ReturnType<CompletionService['run']>>> }[] = [];
    const send = (model: string, reference: LlamaModel | undefined, seed: number) =>
      requests.push({
        model,
        reference,
        run: service.run(parseRequest('completions', { model, prompt: 'hello world', max_tokens: 12, temperature: 1, seed, n: 2 })),
      });
    for (let i = 0; i < 4; i++) {
      send('actor@v1', references[0], i);
      send('actor@v2', references[1], 10 + i);
      send('qwen2', undefined, 20 + i);
    }
    // While those generate: v3 arrives, which unloads the oldest (v1, limit 2) under its running requests; then v2 is unloaded by hand.
    await new Promise((r) => setImmediate(r));
    expect(adapters.load('actor@v3', dirs[2]).evicted).toEqual(['actor@v1']);
    send('actor@v3', references[2], 30);
    adapters.unload('actor@v2');
    expect(models.ids().sort()).toEqual(['actor@v3', 'qwen2']);
    await expect(service.run(parseRequest('completions', { model: 'actor@v1', prompt: 'x', max_tokens: 1 }))).rejects.toMatchObject({ status: 404 });

    const done = await Promise.all(requests.map((r) => r.run));
    expect(done).toHaveLength(13);
    for (let i = 0; i < requests.length; i++) {
      const { model, reference } = requests[i];
      const { body, result } = done[i];
      const { policyId, version } = servedNameIdentity(model);
      expect(body.model).toBe(model);
      expect(body.system_fingerprint).toBe(`srpo-${policyId}-v${version}`);
      expect([result.policyId, result.policyVersion]).toEqual([policyId, version]);
      const own = reference ?? base;
      for (const c of result.choices) {
        expect(c.tokenIds.length).toBeGreaterThan(0);
        expect(c.finishReason).toBe(c.tokenIds.length === 12 ? 'length' : 'stop');
        const expected = await scored(own, result.promptTokenIds, c.tokenIds, 1);
        c.draws.forEach((d, j) => expect(Math.abs(d.logprob - expected[j])).toBeLessThan(1e-4));
      }
    }
    // The check above can tell adapters apart: another version's log-probs of the same tokens differ.
    const v1 = done[0].result;
    const other = await scored(references[1], v1.promptTokenIds, v1.choices[0].tokenIds, 1);
    expect(Math.max(...v1.choices[0].draws.map((d, j) => Math.abs(d.logprob - other[j])))).toBeGreaterThan(1e-2);
    // Unloaded adapters were disposed once their requests ended; the base was neither disposed nor frozen.
    expect(models.retiredCount).toBe(0);
    expect(base.isDisposed).toBe(false);
    expect([...base.baseWeights.values()].map((v) => v.trainable)).toEqual(trainableBefore);
  });

  it('an adapter that does not fit the base is refused by name and nothing is served', () => {
    const bad = path.join(tmp, 'bad');
    fs.mkdirSync(bad);
    fs.writeFileSync(
      path.join(bad, 'adapter_config.json'),
      JSON.stringify({ peft_type: 'LORA', task_type: 'CAUSAL_LM', r: 4, lora_alpha: 8, target_modules: ['q_proj'], use_dora: true }),
    );
    fs.copyFileSync(path.join(dirs[0], 'adapter_model.safetensors'), path.join(bad, 'adapter_model.safetensors'));
    let error: unknown;
    try {
      adapters.load('bad', bad);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(SrpoError);
    expect((error as SrpoError).code).toBe(ErrorCode.VALIDATION_FAILED);
    expect(models.has('bad')).toBe(false);
  });
});
