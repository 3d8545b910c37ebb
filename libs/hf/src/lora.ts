import * as tf from '@tensorflow/tfjs';
import { ValidationError } from '@srpo/core';
import { SeededRng } from '@srpo/policy';
import type { HfModelConfig } from './hf-config';
import type { LinearAdapter, LlamaModel } from './llama-model';

/**
 * LoRA, low-rank adaptation (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language
 * Models", arXiv:2106.09685), as Hugging Face peft implements it (`peft/tuners/lora/layer.py`,
 * `LoraLayer` and `Linear`, peft 0.21.2). A frozen linear `y = x·Wᵀ + b`, `W` `[out, in]`,
 * gains a trainable rank-r update:
 *
 *   y = x·Wᵀ + b + s · (dropout(x)·Aᵀ)·Bᵀ,   A `[r, in]`, B `[out, r]`, s = α / r
 *
 * in exactly peft's order (`result = base_layer(x); result = result + lora_B(lora_A(dropout(x))) * scaling`),
 * so float32 sums round the same way. Only A and B train: r·(in + out) numbers per module
 * instead of in·out, and the base checkpoint is shared untouched between adapters.
 *
 * Not implemented (refused where a file asks for them): rank-stabilised scaling
 * (`use_rslora`, s = α/√r), DoRA, LoRA biases, per-module rank/alpha patterns, layer subsets.
 */

/** The linear layers of a Llama-family block LoRA may adapt (transformers' module names). */
export const LORA_TARGET_MODULES = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'] as const;
export type LoraTargetModule = (typeof LORA_TARGET_MODULES)[number];

const BLOCK: Readonly<Record<LoraTargetModule, 'self_attn' | 'mlp'>> = {
  q_proj: 'self_attn',
  k_proj: 'self_attn',
  v_proj: 'self_attn',
  o_proj: 'self_attn',
  gate_proj: 'mlp',
  up_proj: 'mlp',
  down_proj: 'mlp',
};

export interface LoraConfig {
  /** Rank r of the update B·A. */
  r: number;
  /** α: the update is scaled by α / r (peft `lora_alpha`), so changing r does not rescale the learning rate's effect. */
  alpha: number;
  /** Dropout probability on the adapter's input (peft `lora_dropout`); acts only in training mode ({@link setLoraTraining}). */
  dropout: number;
  /** Which linears of every layer get an adapter. */
  targetModules: LoraTargetModule[];
}

/**
 * r 8 (peft's default), α 16 (s = 2, the α = 2r convention; peft's own default α is 8, s = 1),
 * no dropout, and peft's default targets for llama, qwen2 and mistral:
 * `TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING` (peft/utils/constants.py) maps all three
 * to `["q_proj", "v_proj"]`, the attention query and value projections the LoRA paper adapts.
 */
export const DEFAULT_LORA_CONFIG: Readonly<LoraConfig> = Object.freeze({
  r: 8,
  alpha: 16,
  dropout: 0,
  targetModules: ['q_proj', 'v_proj'] as LoraTargetModule[],
});

const CONFIG_KEYS = ['r', 'alpha', 'dropout', 'targetModules'];

/**
 * Checks a list of target module names, returning them in the canonical order of
 * {@link LORA_TARGET_MODULES}. `field` names the list in errors (`lora.targetModules`).
 */
export function checkLoraTargets(raw: unknown, field: string, architecture: string): LoraTargetModule[] {
  if (!Array.isArray(raw) || raw.length === 0) throw new ValidationError(field, `must be a non-empty list of module names (${LORA_TARGET_MODULES.join(', ')})`);
  const seen = new Set<string>();
  raw.forEach((m: unknown, i) => {
    if (typeof m !== 'string' || !(LORA_TARGET_MODULES as readonly string[]).includes(m)) {
      throw new ValidationError(
        `${field}[${i}]`,
        `${JSON.stringify(m)} is not a module of ${architecture} that LoRA can adapt here (${LORA_TARGET_MODULES.join(', ')})`,
      );
    }
    if (seen.has(m)) throw new ValidationError(`${field}[${i}]`, `"${m}" is listed twice`);
    seen.add(m);
  });
  return LORA_TARGET_MODULES.filter((m) => seen.has(m));
}

/**
 * Fills {@link DEFAULT_LORA_CONFIG} in and validates every field: r a positive integer, α a
 * positive finite number, dropout in [0, 1), targets a non-empty list of distinct
 * {@link LORA_TARGET_MODULES}; unknown keys are refused. Errors name the field (`lora.r`).
 */
export function resolveLoraConfig(raw: unknown = {}, architecture = 'LlamaForCausalLM', field = 'lora'): LoraConfig {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw new ValidationError(field, 'must be an object {r, alpha, dropout, targetModules}');
  const o = raw as Record<string, unknown>;
  for (const k of Object.keys(o)) if (!CONFIG_KEYS.includes(k)) throw new ValidationError(`${field}.${k}`, `is not a LoRA setting (${CONFIG_KEYS.join(', ')})`);
  const r = o.r ?? DEFAULT_LORA_CONFIG.r;
  if (typeof r !== 'number' || !Number.isSafeInteger(r) || r < 1)
    throw new ValidationError(`${field}.r`, `must be a positive integer, got ${JSON.stringify(r)}`);
  const alpha = o.alpha ?? DEFAULT_LORA_CONFIG.alpha;
  if (typeof alpha !== 'number' || !Number.isFinite(alpha) || alpha <= 0)
    throw new ValidationError(`${field}.alpha`, `must be a positive finite number, got ${JSON.stringify(alpha)}`);
  const dropout = o.dropout ?? DEFAULT_LORA_CONFIG.dropout;
  if (typeof dropout !== 'number' || !Number.isFinite(dropout) || dropout < 0 || dropout >= 1)
    throw new ValidationError(`${field}.dropout`, `must be in [0, 1), got ${JSON.stringify(dropout)}`);
  const targetModules = checkLoraTargets(o.targetModules ?? DEFAULT_LORA_CONFIG.targetModules, `${field}.targetModules`, architecture);
  return { r, alpha, dropout, targetModules };
}

/** transformers' name of one adapted linear: `model.layers.3.self_attn.q_proj`. */
export function loraLinearName(layer: number, target: LoraTargetModule): string {
  return `model.layers.${layer}.${BLOCK[target]}.${target}`;
}

/**
 * The key peft's `get_peft_model_state_dict` saves for a LoRA factor of a causal LM:
 * `base_model.model.` (PeftModel → LoraModel → the transformers model) + the linear's name +
 * `.lora_A.weight`; the adapter name ("default") is stripped on save and put back on load.
 * The same string is the adapter weight's canonical name here.
 */
export function peftLoraKey(linearName: string, factor: 'A' | 'B'): string {
  return `base_model.model.${linearName}.lora_${factor}.weight`;
}

/** `[out, in]` of a target linear under a config. */
export function loraLinearShape(c: HfModelConfig, target: LoraTargetModule): [number, number] {
  const q = c.numHeads * c.headDim;
  const kv = c.numKvHeads * c.headDim;
  const d = c.hiddenSize;
  const f = c.intermediateSize;
  const shapes: Record<LoraTargetModule, [number, number]> = {
    q_proj: [q, d],
    k_proj: [kv, d],
    v_proj: [kv, d],
    o_proj: [d, q],
    gate_proj: [f, d],
    up_proj: [f, d],
    down_proj: [d, f],
  };
  return shapes[target];
}

/** Every factor an adapter of `lora` on a model of `c` holds: key and shape (A `[r, in]`, B `[out, r]`), layer by layer. */
export function loraFactorSpecs(c: HfModelConfig, lora: LoraConfig): { linear: string; factor: 'A' | 'B'; key: string; shape: [number, number] }[] {
  const out: { linear: string; factor: 'A' | 'B'; key: string; shape: [number, number] }[] = [];
  for (let i = 0; i < c.numLayers; i++) {
    for (const t of lora.targetModules) {
      const linear = loraLinearName(i, t);
      const [o, n] = loraLinearShape(c, t);
      out.push({ linear, factor: 'A', key: peftLoraKey(linear, 'A'), shape: [lora.r, n] });
      out.push({ linear, factor: 'B', key: peftLoraKey(linear, 'B'), shape: [o, lora.r] });
    }
  }
  return out;
}

/**
 * The LoRA factors of one model, attached through {@link LlamaModel.setAdapter}. Owns its
 * variables (the model disposes an attached adapter with itself).
 *
 * Dropout: with p > 0 and training mode on, each adapted linear's input is multiplied by a
 * fresh mask (0 with probability p, else 1/(1−p): inverted dropout, `nn.Dropout`'s) drawn
 * from a seeded RNG; with training off (the default) the adapter is deterministic. SRPO's
 * ratio ρ = π_new/π_old compares the trainer's forward with the behaviour policy's (which
 * sampled without dropout): with dropout the two differ even at equal weights, so ρ ≠ 1 from
 * noise alone and the clipped objective is biased. Keep dropout 0 for RL; the option is for
 * supervised fine-tuning.
 */
export class LoraAdapter implements LinearAdapter {
  readonly config: LoraConfig;
  /** s = α / r (peft `scaling`, `use_rslora` false). */
  readonly scaling: number;
  readonly weights: ReadonlyMap<string, tf.Variable>;
  private readonly modules: ReadonlyMap<string, { a: tf.Variable; b: tf.Variable }>;
  private readonly dropoutRng: SeededRng;
  private trainingMode = false;
  private disposed = false;

  private constructor(config: LoraConfig, factors: ReadonlyMap<string, { a: tf.Variable; b: tf.Variable }>, dropoutSeed: number) {
    this.config = config;
    this.scaling = config.alpha / config.r;
    this.modules = factors;
    const weights = new Map<string, tf.Variable>();
    for (const [linear, { a, b }] of factors) {
      weights.set(peftLoraKey(linear, 'A'), a);
      weights.set(peftLoraKey(linear, 'B'), b);
    }
    this.weights = weights;
    this.dropoutRng = new SeededRng(dropoutSeed);
  }

  /**
   * Builds an adapter from given factor values keyed by {@link peftLoraKey}. Every factor of
   * {@link loraFactorSpecs} must be present with its shape, and nothing else: a key or
   * shape that does not fit is refused by name (`field` prefixes it).
   */
  static fromTensors(
    model: HfModelConfig,
    config: LoraConfig,
    tensors: ReadonlyMap<string, { shape: readonly number[]; data: Float32Array }>,
    options: { dropoutSeed?: number; field?: string } = {},
  ): LoraAdapter {
    const field = options.field ?? 'lora.weights';
    const specs = loraFactorSpecs(model, config);
    const known = new Set(specs.map((s) => s.key));
    for (const key of tensors.keys())
      if (!known.has(key))
        throw new ValidationError(
          `${field}.${key}`,
          `is not a LoRA factor of this model with targets ${config.targetModules.join(', ')} (${model.numLayers} layers)`,
        );
    for (const s of specs) {
      const t = tensors.get(s.key);
      if (!t) throw new ValidationError(`${field}.${s.key}`, 'is missing');
      if (t.shape.length !== 2 || t.shape[0] !== s.shape[0] || t.shape[1] !== s.shape[1]) {
        throw new ValidationError(
          `${field}.${s.key}`,
          `shape [${t.shape.join(',')}] does not fit the base model: expected [${s.shape.join(',')}] (r ${config.r})`,
        );
      }
      if (t.data.length !== s.shape[0] * s.shape[1])
        throw new ValidationError(`${field}.${s.key}`, `holds ${t.data.length} values, expected ${s.shape[0] * s.shape[1]}`);
    }
    const factors = new Map<string, { a: tf.Variable; b: tf.Variable }>();
    const variable = (key: string, shape: [number, number]): tf.Variable =>
      tf.tidy(() => tf.variable(tf.tensor2d((tensors.get(key) as { data: Float32Array }).data, shape, 'float32'), true));
    for (let i = 0; i < specs.length; i += 2)
      factors.set(specs[i].linear, { a: variable(specs[i].key, specs[i].shape), b: variable(specs[i + 1].key, specs[i + 1].shape) });
    return new LoraAdapter(config, factors, options.dropoutSeed ?? 0);
  }

  /**
   * peft's `init_lora_weights=True` (`LoraLayer.reset_lora_parameters`, after Microsoft's
   * loralib): A by `nn.init.kaiming_uniform_(a=√5)`, which for fan-in n is U(−b, b) with
   * b = gain·√(3/n), gain = √(2/(1+a²)) = √(1/3), so b = 1/√n (nn.Linear's own init); B = 0.
   * B = 0 makes the adapted model equal the base exactly until the first update, while A ≠ 0
   * lets the gradient reach B (∂L/∂B = s·gᵀ·(x·Aᵀ)). Values come from {@link SeededRng}
   * (layer by layer, targets in canonical order): the distribution is torch's, the stream is not.
   */
  static initialized(model: HfModelConfig, config: LoraConfig, seed: number, options: { dropoutSeed?: number } = {}): LoraAdapter {
    const rng = new SeededRng(seed);
    const tensors = new Map<string, { shape: number[]; data: Float32Array }>();
    for (const s of loraFactorSpecs(model, config)) {
      const data = new Float32Array(s.shape[0] * s.shape[1]);
      if (s.factor === 'A') {
        const bound = 1 / Math.sqrt(s.shape[1]);
        for (let j = 0; j < data.length; j++) data[j] = (2 * rng.nextFloat() - 1) * bound;
      }
      tensors.set(s.key, { shape: s.shape, data });
    }
    return LoraAdapter.fromTensors(model, config, tensors, { dropoutSeed: options.dropoutSeed ?? seed + 1 });
  }

  /** The transformers names of the adapted linears (`model.layers.0.self_attn.q_proj`), layer by layer. */
  linearNames(): string[] {
    return [...this.modules.keys()];
  }

  factors(linear: string): { a: tf.Variable; b: tf.Variable } {
    const f = this.modules.get(linear);
    if (!f) throw new ValidationError('linear', `${linear} has no LoRA adapter`);
    return f;
  }

  get training(): boolean {
    return this.trainingMode;
  }

  setTraining(on: boolean): void {
    this.trainingMode = on;
  }

  /** `s · (dropout(x)·Aᵀ)·Bᵀ` for an adapted linear (peft's `lora_B(lora_A(dropout(x))) * scaling`), else null. */
  delta(x: tf.Tensor2D, name: string): tf.Tensor2D | null {
    const f = this.modules.get(name);
    if (!f) return null;
    if (this.disposed) throw new ValidationError('lora', 'has been disposed');
    return tf.tidy(() => {
      const input = this.trainingMode && this.config.dropout > 0 ? tf.mul(x, this.dropoutMask(x.shape)) : x;
      const low = tf.matMul(input, f.a, false, true);
      return tf.mul<tf.Tensor2D>(tf.matMul(low, f.b, false, true), this.scaling);
    });
  }

  /** `s · B·A` `[out, in]`: the update in the base weight's layout (peft `get_delta_weight`, fan_in_fan_out false). Caller disposes. */
  deltaWeight(linear: string): tf.Tensor2D {
    const f = this.factors(linear);
    return tf.tidy(() => tf.mul<tf.Tensor2D>(tf.matMul(f.b as unknown as tf.Tensor2D, f.a as unknown as tf.Tensor2D), this.scaling));
  }

  parameterCount(): number {
    let n = 0;
    for (const v of this.weights.values()) n += v.size;
    return n;
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    for (const v of this.weights.values()) v.dispose();
  }

  get isDisposed(): boolean {
    return this.disposed;
  }

  private dropoutMask(shape: [number, number]): tf.Tensor2D {
    const p = this.config.dropout;
    const keep = 1 / (1 - p);
    const data = new Float32Array(shape[0] * shape[1]);
    for (let i = 0; i < data.length; i++) data[i] = this.dropoutRng.nextFloat() < p ? 0 : keep;
    return tf.tensor2d(data, shape);
  }
}

/**
 * Attaches a freshly initialised LoRA adapter ({@link LoraAdapter.initialized}) to a model:
 * from now on `trainableVariables()`/`weightNames()` are the adapter's factors alone (under
 * {@link peftLoraKey} names), the base variables stay the same objects, frozen, uncopied.
 */
export function attachLora(model: LlamaModel, config: Partial<LoraConfig> = {}, options: { seed?: number; dropoutSeed?: number } = {}): LoraAdapter {
  const resolved = resolveLoraConfig(config, model.config.architecture);
  if (model.adapter) throw new ValidationError('lora', 'the model already has an adapter attached');
  const adapter = LoraAdapter.initialized(model.config, resolved, options.seed ?? 0, { dropoutSeed: options.dropoutSeed });
  model.setAdapter(adapter);
  return adapter;
}

/** The model's LoRA adapter, or undefined. */
export function loraOf(model: LlamaModel): LoraAdapter | undefined {
  return model.adapter instanceof LoraAdapter ? model.adapter : undefined;
}

function requireLora(model: LlamaModel): LoraAdapter {
  const a = loraOf(model);
  if (!a) throw new ValidationError('lora', 'the model has no LoRA adapter attached');
  return a;
}

/** Training mode on or off (dropout acts only when on and p > 0); off is the default and what scoring and sampling use. */
export function setLoraTraining(model: LlamaModel, on: boolean): void {
  requireLora(model).setTraining(on);
}

/** Detaches and disposes the model's adapter; the base weights train again. */
export function detachLora(model: LlamaModel): void {
  const a = requireLora(model);
  model.setAdapter(undefined);
  a.dispose();
}

/**
 * Folds the adapter into the base weights, W ← W + s·B·A for every adapted linear (peft
 * `merge_and_unload`), then detaches it: the model is a plain one again, computing the same
 * function (up to float32 rounding), which `exportHfModel` writes as full weights.
 */
export function mergeLora(model: LlamaModel): string[] {
  const a = requireLora(model);
  const merged: string[] = [];
  for (const linear of a.linearNames()) {
    const w = model.weight(`${linear}.weight`);
    tf.tidy(() => w.assign(tf.add(w, a.deltaWeight(linear))));
    merged.push(`${linear}.weight`);
  }
  detachLora(model);
  return merged;
}
