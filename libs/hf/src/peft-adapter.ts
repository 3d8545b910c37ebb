import * as fs from 'fs';
import * as path from 'path';
import { ErrorCode, SrpoError, ValidationError } from '@srpo/core';
import type { LlamaModel } from './llama-model';
import { checkLoraTargets, LORA_TARGET_MODULES, LoraAdapter, loraFactorSpecs, loraOf, resolveLoraConfig, type LoraConfig } from './lora';
import { readSafetensorsHeader, readSafetensorsTensor, writeSafetensors } from './safetensors';

/**
 * LoRA adapters in Hugging Face peft's directory layout (what `PeftModel.save_pretrained`
 * writes and `PeftModel.from_pretrained` reads, peft 0.21.2):
 *
 *   adapter_config.json        the `LoraConfig`, every field peft 0.21.2 writes
 *   adapter_model.safetensors  the factors under `get_peft_model_state_dict` keys,
 *                              `base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight`
 *                              (no adapter name), metadata `{"format": "pt"}`
 *
 * So an adapter trained here loads in peft (and vLLM's LoRA serving), and one trained with
 * peft loads here. peft's model card (README.md) is not written.
 */
export const PEFT_ADAPTER_CONFIG = 'adapter_config.json';
export const PEFT_ADAPTER_WEIGHTS = 'adapter_model.safetensors';
/** The peft release whose layout is mirrored (written as `peft_version`). */
export const PEFT_LAYOUT_VERSION = '0.21.2';

/**
 * The `adapter_config.json` of a LoRA CAUSAL_LM adapter, key for key as peft 0.21.2's
 * `save_pretrained` writes it (sorted keys; everything not set here at peft's default;
 * `inference_mode` true, as peft sets it on save; `target_modules` sorted, as peft writes its set).
 */
export function peftAdapterConfigJson(config: LoraConfig, baseModelNameOrPath: string | null): Record<string, unknown> {
  return {
    alora_invocation_tokens: null,
    alpha_pattern: {},
    arrow_config: null,
    auto_mapping: null,
    base_model_name_or_path: baseModelNameOrPath,
    bias: 'none',
    corda_config: null,
    ensure_weight_tying: false,
    eva_config: null,
    exclude_modules: null,
    fan_in_fan_out: false,
    inference_mode: true,
    init_lora_weights: true,
    kasa_config: null,
    layer_replication: null,
    layers_pattern: null,
    layers_to_transform: null,
    loftq_config: {},
    lora_alpha: config.alpha,
    lora_bias: false,
    lora_dropout: config.dropout,
    lora_ga_config: null,
    megatron_config: null,
    megatron_core: 'megatron.core',
    modules_to_save: null,
    monteclora_config: null,
    peft_type: 'LORA',
    peft_version: PEFT_LAYOUT_VERSION,
    qalora_group_size: 16,
    r: config.r,
    rank_pattern: {},
    revision: null,
    target_modules: [...config.targetModules].sort(),
    target_parameters: null,
    task_type: 'CAUSAL_LM',
    trainable_token_indices: null,
    use_bdlora: null,
    use_dora: false,
    use_qalora: false,
    use_rslora: false,
    velora_config: null,
  };
}

/** Fields whose value does not change the adapted forward (bookkeeping, or settings only another option reads). */
const INERT = new Set([
  'auto_mapping',
  'base_model_name_or_path',
  'ensure_weight_tying',
  'inference_mode',
  'megatron_core',
  'peft_version',
  'qalora_group_size',
  'revision',
  'runtime_config',
]);
/** Fields handled one by one below. */
const CHECKED = new Set([
  'peft_type',
  'task_type',
  'r',
  'lora_alpha',
  'lora_dropout',
  'target_modules',
  'bias',
  'fan_in_fan_out',
  'use_rslora',
  'init_lora_weights',
]);
/** Why an option that is on is refused (everything else, known or not, must be off: null, false, {} or []). */
const REFUSED: Record<string, string> = {
  use_dora: 'DoRA (weight-decomposed LoRA) is not implemented',
  modules_to_save: 'fully trained extra modules are not implemented',
  rank_pattern: 'per-module ranks are not implemented',
  alpha_pattern: 'per-module alphas are not implemented',
  layers_to_transform: 'adapting a subset of layers is not implemented',
  layers_pattern: 'adapting a subset of layers is not implemented',
  exclude_modules: 'excluding modules is not implemented',
  lora_bias: 'a bias on lora_B is not implemented',
  layer_replication: 'layer replication is not implemented',
  trainable_token_indices: 'trainable token embeddings are not implemented',
  target_parameters: 'adapting parameters (rather than modules) is not implemented',
  megatron_config: 'Megatron parallel layers are not implemented',
};

const isOff = (v: unknown): boolean =>
  v === null ||
  v === undefined ||
  v === false ||
  (Array.isArray(v) && v.length === 0) ||
  (typeof v === 'object' && v !== null && !Array.isArray(v) && Object.keys(v).length === 0);

export interface PeftAdapterConfig {
  lora: LoraConfig;
  baseModelNameOrPath: string | null;
}

/**
 * Reads a parsed `adapter_config.json`. Accepted: a LORA adapter for CAUSAL_LM with plain
 * scaling α/r, `bias: "none"`, `fan_in_fan_out: false`, targets among
 * {@link LORA_TARGET_MODULES} (or `"all-linear"`, which for these models is all seven), and an
 * `init_lora_weights` that leaves the base weights alone (true, false, "gaussian": the saved
 * factors replace the init anyway; PiSSA/OLoRA/CorDA/LoftQ rewrite the base and MiCA is a
 * variant, so those are refused). Every other option must be off; an unknown field that is
 * on is refused rather than ignored. Errors name the field (`adapter_config.use_rslora`).
 */
export function parsePeftAdapterConfig(raw: unknown, architecture = 'LlamaForCausalLM'): PeftAdapterConfig {
  const F = 'adapter_config';
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw new ValidationError(F, 'must be a JSON object');
  const o = raw as Record<string, unknown>;
  const refuse = (k: string, why: string): never => {
    throw new ValidationError(`${F}.${k}`, `${JSON.stringify(o[k])}: ${why}`);
  };
  if (o.peft_type !== 'LORA') refuse('peft_type', 'only LORA adapters are read');
  if (o.task_type !== 'CAUSAL_LM' && o.task_type !== null && o.task_type !== undefined) refuse('task_type', 'only CAUSAL_LM adapters are read');
  if (o.use_rslora !== undefined && o.use_rslora !== false) refuse('use_rslora', 'rank-stabilised scaling α/√r is not implemented (only α/r)');
  if (o.bias !== undefined && o.bias !== 'none') refuse('bias', 'training base biases is not implemented (only "none")');
  if (o.fan_in_fan_out !== undefined && o.fan_in_fan_out !== false)
    refuse('fan_in_fan_out', '[in, out] (Conv1D) base weights are not implemented; Llama-family linears are [out, in]');
  const init = o.init_lora_weights;
  if (init !== undefined && init !== true && init !== false && init !== 'gaussian')
    refuse('init_lora_weights', 'this initialisation rewrites the base weights or is a LoRA variant; only true, false and "gaussian" are read');
  for (const k of Object.keys(o)) {
    if (INERT.has(k) || CHECKED.has(k) || isOff(o[k])) continue;
    refuse(
      k,
      REFUSED[k] ?? `is on, and this loader does not know what it does (peft ${PEFT_LAYOUT_VERSION} LoRA fields only); refusing rather than ignoring it`,
    );
  }
  const targets = o.target_modules === 'all-linear' ? [...LORA_TARGET_MODULES] : o.target_modules;
  if (typeof targets === 'string')
    refuse('target_modules', `a regular expression is not read; give a list of module names (${LORA_TARGET_MODULES.join(', ')}) or "all-linear"`);
  const targetModules = checkLoraTargets(targets, `${F}.target_modules`, architecture);
  const num = (k: string, ok: (v: number) => boolean, what: string): number => (typeof o[k] === 'number' && ok(o[k]) ? o[k] : refuse(k, `must be ${what}`));
  const r = num('r', (v) => Number.isSafeInteger(v) && v >= 1, 'a positive integer');
  const alpha = num('lora_alpha', (v) => Number.isFinite(v) && v > 0, 'a positive number');
  const dropout = o.lora_dropout === undefined ? 0 : num('lora_dropout', (v) => v >= 0 && v < 1, 'in [0, 1)');
  const lora = resolveLoraConfig({ r, alpha, dropout, targetModules }, architecture, F);
  const base = o.base_model_name_or_path;
  if (base !== undefined && base !== null && typeof base !== 'string') refuse('base_model_name_or_path', 'must be a string or null');
  return { lora, baseModelNameOrPath: (base as string | null | undefined) ?? null };
}

/**
 * Writes the model's LoRA adapter as a peft directory ({@link PEFT_ADAPTER_CONFIG},
 * {@link PEFT_ADAPTER_WEIGHTS}, float32). `baseModelNameOrPath` is what peft will load the
 * base from (a hub id or a directory). Like peft's `save_pretrained` it replaces an adapter
 * already in `dir`; the weights file is written atomically first, the config last. Returns
 * the files written.
 */
export async function saveLoraAdapter(model: LlamaModel, dir: string, options: { baseModelNameOrPath: string | null }): Promise<string[]> {
  const adapter = loraOf(model);
  if (!adapter) throw new ValidationError('lora', 'the model has no LoRA adapter attached; nothing to save');
  const tensors = [];
  for (const s of loraFactorSpecs(model.config, adapter.config)) {
    tensors.push({ name: s.key, shape: s.shape, data: (await model.weight(s.key).data()) as Float32Array, dtype: 'F32' as const });
  }
  fs.mkdirSync(dir, { recursive: true });
  const weights = path.join(dir, PEFT_ADAPTER_WEIGHTS);
  writeSafetensors(weights, tensors, { format: 'pt' });
  const config = path.join(dir, PEFT_ADAPTER_CONFIG);
  fs.writeFileSync(config, JSON.stringify(peftAdapterConfigJson(adapter.config, options.baseModelNameOrPath), null, 2) + '\n');
  return [weights, config];
}

/**
 * Reads a peft LoRA directory onto a model (which must have no adapter yet) and attaches
 * it, in scoring mode (dropout off). The config is checked by {@link parsePeftAdapterConfig};
 * the weights file must hold exactly the factors that config implies for this model, each
 * with the shape the base model's linears require (F32, F16 or BF16, widened to float32).
 */
export function loadLoraAdapter(
  model: LlamaModel,
  dir: string,
  options: { dropoutSeed?: number } = {},
): { adapter: LoraAdapter; baseModelNameOrPath: string | null } {
  if (model.adapter) throw new ValidationError('lora', 'the model already has an adapter attached; detach it first');
  const configFile = path.join(dir, PEFT_ADAPTER_CONFIG);
  const weightsFile = path.join(dir, PEFT_ADAPTER_WEIGHTS);
  if (!fs.existsSync(configFile))
    throw new SrpoError(ErrorCode.NOT_FOUND, `${configFile}: missing (a peft adapter directory holds ${PEFT_ADAPTER_CONFIG})`, { field: PEFT_ADAPTER_CONFIG });
  if (!fs.existsSync(weightsFile)) {
    const bin = fs.existsSync(path.join(dir, 'adapter_model.bin')) ? ' (adapter_model.bin, a pickle, is not read; re-save with safe_serialization=True)' : '';
    throw new SrpoError(ErrorCode.NOT_FOUND, `${weightsFile}: missing${bin}`, { field: PEFT_ADAPTER_WEIGHTS });
  }
  let raw: unknown;
  try {
    raw = JSON.parse(fs.readFileSync(configFile, 'utf8'));
  } catch (e) {
    throw new SrpoError(ErrorCode.VALIDATION_FAILED, `${configFile}: not valid JSON (${(e as Error).message})`, { field: PEFT_ADAPTER_CONFIG });
  }
  const parsed = parsePeftAdapterConfig(raw, model.config.architecture);
  const header = readSafetensorsHeader(weightsFile);
  const tensors = new Map<string, { shape: number[]; data: Float32Array }>();
  const wanted = new Set(loraFactorSpecs(model.config, parsed.lora).map((s) => s.key));
  for (const [name, info] of header.tensors) {
    // Only the expected keys are read; the rest are passed on empty so that they are refused by name.
    tensors.set(name, { shape: info.shape, data: wanted.has(name) ? readSafetensorsTensor(header, name) : new Float32Array(0) });
  }
  const adapter = LoraAdapter.fromTensors(model.config, parsed.lora, tensors, { dropoutSeed: options.dropoutSeed, field: 'adapter_model' });
  model.setAdapter(adapter);
  return { adapter, baseModelNameOrPath: parsed.baseModelNameOrPath };
}
