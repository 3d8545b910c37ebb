import * as path from 'path';
import * as tf from '@tensorflow/tfjs';
import { repoRoot } from '@srpo/core';
import { Policy, SeededRng, SrpoTrainer } from '@srpo/policy';
import { makeSets, nativeBackend } from './test/fixtures';
import { loadHfModel, type HfModel } from './hf-model-dir';
import { attachLora, DEFAULT_LORA_CONFIG, detachLora, LoraAdapter, loraOf, mergeLora, resolveLoraConfig, setLoraTraining } from './lora';

/**
 * LoRA on the tiny HF fixtures, checked against its own definition (the agreement with peft
 * itself is test/hf-lora.int-spec.ts): config validation, the B = 0 identity at init, frozen
 * and uncopied base weights, seeded dropout only in training mode, merging.
 */
const FIXTURES = path.join(repoRoot(), 'libs', 'hf', 'fixtures');
const TOKENS = [
  [3, 17, 200, 41, 9, 77, 5, 1],
  [8, 90, 12, 250, 33, 2, 0, 0],
];

async function logits(hf: HfModel): Promise<Float32Array> {
  const t = tf.tensor2d(TOKENS, [2, 8], 'int32');
  const l = hf.model.logits2d(t);
  const data = (await l.data()) as Float32Array;
  tf.dispose([t, l]);
  return data;
}

/** Every factor set to seeded N(0, std²): an adapter that changes the model. */
function randomize(adapter: LoraAdapter, seed: number, std = 0.1): void {
  const rng = new SeededRng(seed);
  for (const v of adapter.weights.values()) tf.tidy(() => v.assign(tf.tensor(rng.normalArray(v.size, std), v.shape)));
}

const maxDiff = (a: Float32Array, b: Float32Array): number => a.reduce((m, v, i) => Math.max(m, Math.abs(v - b[i])), 0);

describe('resolveLoraConfig', () => {
  it("defaults to r 8, alpha 16, no dropout, and peft's llama/qwen2/mistral targets q_proj, v_proj", () => {
    expect(resolveLoraConfig()).toEqual({ r: 8, alpha: 16, dropout: 0, targetModules: ['q_proj', 'v_proj'] });
    expect(resolveLoraConfig({ r: 4, targetModules: ['down_proj', 'q_proj'] })).toEqual({
      ...DEFAULT_LORA_CONFIG,
      r: 4,
      targetModules: ['q_proj', 'down_proj'],
    });
  });

  it.each([
    [{ r: 0 }, /^lora\.r: must be a positive integer, got 0/],
    [{ r: 2.5 }, /^lora\.r: must be a positive integer/],
    [{ r: '8' }, /^lora\.r: /],
    [{ alpha: 0 }, /^lora\.alpha: must be a positive finite number/],
    [{ alpha: Infinity }, /^lora\.alpha: /],
    [{ dropout: 1 }, /^lora\.dropout: must be in \[0, 1\), got 1/],
    [{ dropout: -0.1 }, /^lora\.dropout: /],
    [{ targetModules: [] }, /^lora\.targetModules: must be a non-empty list/],
    [{ targetModules: 'q_proj' }, /^lora\.targetModules: must be a non-empty list/],
    [
      { targetModules: ['q_proj', 'k_proj', 'gate'] },
      /^lora\.targetModules\[2\]: "gate" is not a module of LlamaForCausalLM that LoRA can adapt here \(q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj\)/,
    ],
    [{ targetModules: ['lm_head'] }, /^lora\.targetModules\[0\]: "lm_head" is not a module/],
    [{ targetModules: ['v_proj', 'v_proj'] }, /^lora\.targetModules\[1\]: "v_proj" is listed twice/],
    [{ rank: 4 }, /^lora\.rank: is not a LoRA setting/],
  ])('refuses %j naming the field', (raw, message) => {
    expect(() => resolveLoraConfig(raw)).toThrow(message);
  });

  it('names the architecture it checks against', () => {
    expect(() => resolveLoraConfig({ targetModules: ['c_attn'] }, 'Qwen2ForCausalLM')).toThrow(/"c_attn" is not a module of Qwen2ForCausalLM/);
  });
});

describe.each(['llama', 'qwen2'])('LoRA on the %s fixture', (name) => {
  let hf: HfModel;
  beforeEach(async () => {
    await nativeBackend();
    hf = loadHfModel(path.join(FIXTURES, name));
  });
  afterEach(() => hf.model.dispose());

  it("at init (B = 0) gives the base model's logits bit for bit; A is kaiming-uniform, seeded", async () => {
    const base = await logits(hf);
    const adapter = attachLora(
      hf.model,
      { r: 4, alpha: 8, targetModules: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'] },
      { seed: 5 },
    );
    expect(Buffer.from((await logits(hf)).buffer)).toEqual(Buffer.from(base.buffer));
    const c = hf.model.config;
    for (const [key, v] of adapter.weights) {
      const data = (await v.data()) as Float32Array;
      if (key.endsWith('.lora_B.weight')) {
        expect(data.every((x) => x === 0)).toBe(true);
      } else {
        // U(−1/√in, 1/√in); spread over the interval, not collapsed.
        const bound = 1 / Math.sqrt((v.shape as [number, number])[1]);
        expect(Math.max(...data.map(Math.abs))).toBeLessThanOrEqual(bound);
        expect(Math.max(...data.map(Math.abs))).toBeGreaterThan(0.9 * bound);
      }
    }
    expect(adapter.weights.size).toBe(2 * 7 * c.numLayers);
    const again = LoraAdapter.initialized(c, adapter.config, 5);
    for (const [key, v] of again.weights) expect(Array.from(await v.data())).toEqual(Array.from((await adapter.weights.get(key)?.data()) ?? []));
    again.dispose();
  });

  it('trains only the adapter: peft-named factors, base variables frozen, the same objects, never copied', async () => {
    const baseNames = hf.model.weightNames();
    const baseVars = hf.model.trainableVariables();
    await logits(hf); // fills the model's RoPE and mask caches, so the counts below are the adapter's alone
    const before = tf.memory();
    const adapter = attachLora(hf.model, { r: 2, targetModules: ['q_proj', 'down_proj'] });
    const names = hf.model.weightNames();
    expect(names).toEqual([...adapter.weights.keys()].sort());
    expect(names).toContain('base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight');
    expect(names).toContain('base_model.model.model.layers.1.mlp.down_proj.lora_B.weight');
    expect(names).toHaveLength(2 * 2 * hf.model.config.numLayers);
    expect(hf.model.trainableVariables()).toEqual(names.map((n) => adapter.weights.get(n)));
    expect(hf.model.weights).toBe(adapter.weights);
    for (const n of names) expect(hf.model.weight(n)).toBe(adapter.weights.get(n));
    // The base is still there, the same tf.Variable objects, frozen for tfjs's gradients.
    baseNames.forEach((n, i) => expect(hf.model.weight(n)).toBe(baseVars[i]));
    expect(baseVars.every((v) => !v.trainable)).toBe(true);
    const after = tf.memory();
    expect(after.numTensors - before.numTensors).toBe(names.length);
    expect(after.numBytes - before.numBytes).toBe(4 * adapter.parameterCount());
    expect(hf.model.parameterCount()).toBe(baseVars.reduce((n, v) => n + v.size, 0) + adapter.parameterCount());

    // At B = 0 only B gets a gradient (∂L/∂A = s·Bᵀ·gᵀx = 0); variableGrads without a list skips the frozen base too.
    const t = tf.tensor2d(TOKENS, [2, 8], 'int32');
    const { grads, value } = tf.variableGrads(() => tf.sum<tf.Scalar>(tf.mul(tf.logSoftmax(hf.model.logits2d(t)), 0.01)));
    expect(Object.keys(grads).sort()).toEqual(
      hf.model
        .trainableVariables()
        .map((v) => v.name)
        .sort(),
    );
    for (const n of names) {
      const g = (await grads[hf.model.weight(n).name].data()) as Float32Array;
      const nonzero = g.some((x) => x !== 0);
      expect({ n, nonzero }).toEqual({ n, nonzero: n.endsWith('lora_B.weight') });
    }
    tf.dispose([t, value, ...Object.values(grads)]);

    detachLora(hf.model);
    expect(adapter.isDisposed).toBe(true);
    expect(hf.model.weightNames()).toEqual(baseNames);
    expect(baseVars.every((v) => v.trainable)).toBe(true);
    expect(tf.memory().numTensors).toBe(before.numTensors);
  });

  it('dropout acts only in training mode, with seeded masks; scoring stays deterministic', async () => {
    const base = await logits(hf);
    const adapter = attachLora(hf.model, { r: 4, dropout: 0.3, targetModules: ['q_proj', 'v_proj', 'up_proj'] }, { seed: 1, dropoutSeed: 9 });
    randomize(adapter, 2);
    const off1 = await logits(hf);
    const off2 = await logits(hf);
    expect(Buffer.from(off2.buffer)).toEqual(Buffer.from(off1.buffer));
    expect(maxDiff(off1, base)).toBeGreaterThan(1e-3);
    setLoraTraining(hf.model, true);
    const on1 = await logits(hf);
    const on2 = await logits(hf);
    expect(maxDiff(on1, off1)).toBeGreaterThan(1e-4);
    expect(maxDiff(on2, on1)).toBeGreaterThan(1e-4);
    setLoraTraining(hf.model, false);
    expect(Buffer.from((await logits(hf)).buffer)).toEqual(Buffer.from(off1.buffer));

    // The same dropout seed gives the same masks: a second adapter with the same values replays on1.
    const values = new Map<string, { shape: number[]; data: Float32Array }>();
    for (const [k, v] of adapter.weights) values.set(k, { shape: v.shape, data: (await v.data()) as Float32Array });
    detachLora(hf.model);
    hf.model.setAdapter(LoraAdapter.fromTensors(hf.model.config, adapter.config, values, { dropoutSeed: 9 }));
    setLoraTraining(hf.model, true);
    expect(Buffer.from((await logits(hf)).buffer)).toEqual(Buffer.from(on1.buffer));
  });

  it('mergeLora folds s·B·A into the base weights and detaches: same function, plain model again', async () => {
    const adapter = attachLora(hf.model, { r: 3, alpha: 7, targetModules: ['k_proj', 'o_proj', 'gate_proj', 'down_proj'] }, { seed: 3 });
    randomize(adapter, 4);
    const adapted = await logits(hf);
    const q = hf.model.weight('model.layers.1.self_attn.q_proj.weight');
    const qBefore = (await q.data()) as Float32Array;
    const merged = mergeLora(hf.model);
    expect(merged).toHaveLength(4 * hf.model.config.numLayers);
    expect(loraOf(hf.model)).toBeUndefined();
    expect(adapter.isDisposed).toBe(true);
    expect(hf.model.weightNames().some((n) => n.includes('lora'))).toBe(false);
    expect(hf.model.weight('model.layers.1.self_attn.q_proj.weight')).toBe(q);
    expect(await q.data()).toEqual(qBefore); // not a target: untouched
    expect(maxDiff(await logits(hf), adapted)).toBeLessThan(1e-4);
  });

  it('an SRPO update through SrpoTrainer moves the adapter only; the base stays bit for bit', async () => {
    const base = new Map<string, Float32Array>();
    for (const n of hf.model.weightNames()) base.set(n, (await hf.model.weight(n).data()) as Float32Array);
    attachLora(hf.model, { r: 2, targetModules: ['q_proj', 'v_proj'] }, { seed: 7 });
    const policy = new Policy('lora', hf.model);
    const trainer = new SrpoTrainer(policy, { schedule: { kind: 'constant', lr: 1e-2 }, epochs: 1 });
    try {
      const sets = await makeSets(policy, 3, 2);
      const r = await trainer.update(sets);
      expect(Number.isFinite(r.loss)).toBe(true);
      for (const n of hf.model.weightNames().filter((k) => k.endsWith('lora_B.weight')))
        expect((await hf.model.weight(n).data()).some((x) => x !== 0)).toBe(true);
      for (const [n, d] of base) expect(Buffer.from(((await hf.model.weight(n).data()) as Float32Array).buffer)).toEqual(Buffer.from(d.buffer));
    } finally {
      trainer.dispose();
    }
  });

  it('refuses a second adapter, and LoRA calls on a model without one', () => {
    attachLora(hf.model);
    expect(() => attachLora(hf.model)).toThrow(/^lora: the model already has an adapter attached/);
    detachLora(hf.model);
    expect(() => setLoraTraining(hf.model, true)).toThrow(/^lora: the model has no LoRA adapter attached/);
    expect(() => mergeLora(hf.model)).toThrow(/^lora: /);
  });
});
