import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import * as tf from '@tensorflow/tfjs';
import { repoRoot } from '@srpo/core';
import { SeededRng } from '@srpo/policy';
import { nativeBackend } from './test/fixtures';
import { loadHfModel, type HfModel } from './hf-model-dir';
import { attachLora, detachLora, loraOf } from './lora';
import { loadLoraAdapter, parsePeftAdapterConfig, peftAdapterConfigJson, saveLoraAdapter } from './peft-adapter';
import { readSafetensorsHeader, writeSafetensors } from './safetensors';

/**
 * The peft directory layout: what is written, that it reads back bit for bit, and what the
 * reader refuses. That peft itself reads and writes the same files is test/hf-lora.int-spec.ts.
 */
const FIXTURES = path.join(repoRoot(), 'libs', 'hf', 'fixtures');
const tmp = (): string => fs.mkdtempSync(path.join(os.tmpdir(), 'srpo-peft-'));
const BASE_CONFIG = peftAdapterConfigJson({ r: 4, alpha: 8, dropout: 0, targetModules: ['q_proj', 'v_proj'] }, 'base');

describe('peft adapter directories', () => {
  let hf: HfModel;
  beforeEach(async () => {
    await nativeBackend();
    hf = loadHfModel(path.join(FIXTURES, 'qwen2'));
  });
  afterEach(() => hf.model.dispose());

  it('writes peft 0.21 keys and config fields, and reads them back bit for bit', async () => {
    const adapter = attachLora(hf.model, { r: 4, alpha: 12, targetModules: ['up_proj', 'q_proj'] }, { seed: 2 });
    const rng = new SeededRng(8);
    for (const v of adapter.weights.values()) tf.tidy(() => v.assign(tf.tensor(rng.normalArray(v.size, 0.1), v.shape)));
    const dir = tmp();
    const files = await saveLoraAdapter(hf.model, dir, { baseModelNameOrPath: 'Qwen/tiny' });
    expect(files.map((f) => path.basename(f)).sort()).toEqual(['adapter_config.json', 'adapter_model.safetensors']);
    const config = JSON.parse(fs.readFileSync(path.join(dir, 'adapter_config.json'), 'utf8'));
    expect(config).toMatchObject({
      peft_type: 'LORA',
      task_type: 'CAUSAL_LM',
      r: 4,
      lora_alpha: 12,
      lora_dropout: 0,
      target_modules: ['q_proj', 'up_proj'],
      bias: 'none',
      fan_in_fan_out: false,
      use_rslora: false,
      use_dora: false,
      base_model_name_or_path: 'Qwen/tiny',
    });
    const header = readSafetensorsHeader(path.join(dir, 'adapter_model.safetensors'));
    expect(header.metadata).toEqual({ format: 'pt' });
    expect([...header.tensors.keys()].sort()).toEqual(hf.model.weightNames());
    expect(header.tensors.get('base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight')?.shape).toEqual([4, 64]);
    expect(header.tensors.get('base_model.model.model.layers.1.mlp.up_proj.lora_B.weight')?.shape).toEqual([176, 4]);

    const values = new Map<string, Float32Array>();
    for (const n of hf.model.weightNames()) values.set(n, (await hf.model.weight(n).data()) as Float32Array);
    detachLora(hf.model);
    const { adapter: back, baseModelNameOrPath } = loadLoraAdapter(hf.model, dir);
    expect(baseModelNameOrPath).toBe('Qwen/tiny');
    expect(back.config).toEqual(adapter.config);
    expect(back.training).toBe(false);
    expect(loraOf(hf.model)).toBe(back);
    for (const [n, d] of values) expect(Buffer.from(((await hf.model.weight(n).data()) as Float32Array).buffer)).toEqual(Buffer.from(d.buffer));
  });

  it('reads "all-linear" as all seven projections', () => {
    expect(parsePeftAdapterConfig({ ...BASE_CONFIG, target_modules: 'all-linear' }).lora.targetModules).toEqual([
      'q_proj',
      'k_proj',
      'v_proj',
      'o_proj',
      'gate_proj',
      'up_proj',
      'down_proj',
    ]);
  });

  it.each([
    [{ use_rslora: true }, /^adapter_config\.use_rslora: true: rank-stabilised scaling/],
    [{ use_dora: true }, /^adapter_config\.use_dora: true: DoRA/],
    [{ bias: 'all' }, /^adapter_config\.bias: "all": training base biases/],
    [{ bias: 'lora_only' }, /^adapter_config\.bias: /],
    [{ fan_in_fan_out: true }, /^adapter_config\.fan_in_fan_out: true: /],
    [{ modules_to_save: ['lm_head'] }, /^adapter_config\.modules_to_save: \["lm_head"\]: fully trained extra modules/],
    [{ rank_pattern: { q_proj: 8 } }, /^adapter_config\.rank_pattern: .*per-module ranks/],
    [{ alpha_pattern: { v_proj: 32 } }, /^adapter_config\.alpha_pattern: .*per-module alphas/],
    [{ layers_to_transform: [0] }, /^adapter_config\.layers_to_transform: \[0\]: adapting a subset of layers/],
    [{ layers_to_transform: 1 }, /^adapter_config\.layers_to_transform: 1: /],
    [{ lora_bias: true }, /^adapter_config\.lora_bias: true/],
    [{ init_lora_weights: 'pissa' }, /^adapter_config\.init_lora_weights: "pissa": /],
    [{ target_modules: ['q_proj', 'lm_head'] }, /^adapter_config\.target_modules\[1\]: "lm_head" is not a module of LlamaForCausalLM/],
    [{ target_modules: '.*q_proj' }, /^adapter_config\.target_modules: ".\*q_proj": a regular expression is not read/],
    [{ peft_type: 'IA3' }, /^adapter_config\.peft_type: "IA3": only LORA/],
    [{ task_type: 'SEQ_CLS' }, /^adapter_config\.task_type: "SEQ_CLS": only CAUSAL_LM/],
    [{ r: 0 }, /^adapter_config\.r: 0: must be a positive integer/],
    [{ lora_alpha: 'x' }, /^adapter_config\.lora_alpha: "x": must be a positive number/],
    [{ lora_dropout: 1.5 }, /^adapter_config\.lora_dropout: 1.5: must be in \[0, 1\)/],
    [{ some_future_option: { on: 1 } }, /^adapter_config\.some_future_option: \{"on":1\}: is on, and this loader does not know what it does/],
  ])('refuses %j naming the field', (change, message) => {
    expect(() => parsePeftAdapterConfig({ ...BASE_CONFIG, ...change })).toThrow(message);
  });

  it('accepts what is off or inert, unknown fields included', () => {
    const cfg = parsePeftAdapterConfig({
      ...BASE_CONFIG,
      some_future_option: null,
      init_lora_weights: 'gaussian',
      revision: 'main',
      inference_mode: false,
      megatron_core: 'x',
    });
    expect(cfg).toEqual({ lora: { r: 4, alpha: 8, dropout: 0, targetModules: ['q_proj', 'v_proj'] }, baseModelNameOrPath: 'base' });
  });

  /** A peft directory holding `config` and the given factors (all of BASE_CONFIG's, zeros, unless replaced). */
  function writeAdapter(config: Record<string, unknown>, edit: (t: Map<string, number[]>) => void = () => {}): string {
    const dir = tmp();
    const shapes = new Map<string, number[]>();
    for (let i = 0; i < 2; i++) {
      for (const [m, out] of [
        ['q_proj', 64],
        ['v_proj', 16],
      ] as const) {
        shapes.set(`base_model.model.model.layers.${i}.self_attn.${m}.lora_A.weight`, [4, 64]);
        shapes.set(`base_model.model.model.layers.${i}.self_attn.${m}.lora_B.weight`, [out, 4]);
      }
    }
    edit(shapes);
    writeSafetensors(
      path.join(dir, 'adapter_model.safetensors'),
      [...shapes].map(([name, shape]) => ({ name, shape, data: new Float32Array(shape[0] * shape[1]) })),
      { format: 'pt' },
    );
    fs.writeFileSync(path.join(dir, 'adapter_config.json'), JSON.stringify(config));
    return dir;
  }

  it('loads a well-formed directory and refuses factors that do not fit the base, by key', () => {
    const ok = writeAdapter(BASE_CONFIG);
    loadLoraAdapter(hf.model, ok);
    expect(hf.model.weightNames()).toHaveLength(8);
    expect(() => loadLoraAdapter(hf.model, ok)).toThrow(/^lora: the model already has an adapter attached/);
    detachLora(hf.model);
    const cases: [(t: Map<string, number[]>) => void, RegExp][] = [
      [
        (t) => t.set('base_model.model.model.layers.0.self_attn.v_proj.lora_B.weight', [64, 4]),
        /^adapter_model\.base_model\.model\.model\.layers\.0\.self_attn\.v_proj\.lora_B\.weight: shape \[64,4\] does not fit the base model: expected \[16,4\]/,
      ],
      [
        (t) => t.delete('base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight'),
        /^adapter_model\.base_model\.model\.model\.layers\.1\.self_attn\.q_proj\.lora_A\.weight: is missing/,
      ],
      [
        (t) => t.set('base_model.model.model.layers.2.self_attn.q_proj.lora_A.weight', [4, 64]),
        /^adapter_model\.base_model\.model\.model\.layers\.2\.self_attn\.q_proj\.lora_A\.weight: is not a LoRA factor of this model/,
      ],
      [
        (t) => t.set('base_model.model.model.layers.0.mlp.up_proj.lora_A.weight', [4, 64]),
        /^adapter_model\.base_model\.model\.model\.layers\.0\.mlp\.up_proj\.lora_A\.weight: is not a LoRA factor/,
      ],
      [(t) => t.set('base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight', [4, 64]), /lora_A\.default\.weight: is not a LoRA factor/],
    ];
    for (const [edit, message] of cases) {
      expect(() => loadLoraAdapter(hf.model, writeAdapter(BASE_CONFIG, edit))).toThrow(message);
      expect(loraOf(hf.model)).toBeUndefined();
    }
    // A rank that disagrees with the factors is a shape mismatch too.
    expect(() => loadLoraAdapter(hf.model, writeAdapter({ ...BASE_CONFIG, r: 8 }))).toThrow(
      /lora_A\.weight: shape \[4,64\] does not fit the base model: expected \[8,64\] \(r 8\)/,
    );
  });

  it('refuses a directory without its files, or with a pickled adapter only', async () => {
    const dir = tmp();
    expect(() => loadLoraAdapter(hf.model, dir)).toThrow(/adapter_config\.json: missing/);
    fs.writeFileSync(path.join(dir, 'adapter_config.json'), JSON.stringify(BASE_CONFIG));
    fs.writeFileSync(path.join(dir, 'adapter_model.bin'), 'x');
    expect(() => loadLoraAdapter(hf.model, dir)).toThrow(/adapter_model\.safetensors: missing \(adapter_model\.bin, a pickle, is not read/);
    await expect(saveLoraAdapter(hf.model, dir, { baseModelNameOrPath: null })).rejects.toThrow(/^lora: the model has no LoRA adapter attached/);
  });
});
