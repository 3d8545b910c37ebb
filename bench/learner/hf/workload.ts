import * as fs from 'node:fs';
import * as path from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { DEFAULT_OBJECTIVE_CONFIG, type ObjectiveConfig } from '@srpo/srpo';
import { SeededRng, tokenLogProbs, type ActiveSet } from '@srpo/policy';
import { hfWeightSpecs, LlamaModel, openHfWeights, readHfConfig, readHfTensor, saveHfWeights } from '@srpo/hf';

/** A Llama-family architecture and batch for the HF learner benchmark. */
export interface HfWorkload {
  /** Preset the values started from (`qwen2`, `tiny`); printed in results. */
  name: string;
  arch: 'qwen2' | 'llama';
  vocabSize: number;
  hiddenSize: number;
  numLayers: number;
  numHeads: number;
  numKvHeads: number;
  intermediateSize: number;
  /** Model input positions per sequence (also the model's max_position_embeddings). */
  seqLen: number;
  tied: boolean;
  /** Members (sequences) per update step. */
  sequences: number;
  /** Context tokens per member; the response is `seqLen + 1 − context`, so every input is `seqLen` long. */
  contextTokens: number;
  /** Active-set sizes are drawn uniformly from 1..maxSetSize until `sequences` members are placed. */
  maxSetSize: number;
  lr: number;
  maxGradNorm: number;
  modelSeed: number;
  dataSeed: number;
}

/** The configuration of the issue: Qwen2-like, hidden 512, 8 layers, 8 heads / 2 KV heads, SwiGLU 1408, vocab 32k, T 256. */
export const QWEN2: HfWorkload = {
  name: 'qwen2',
  arch: 'qwen2',
  vocabSize: 32000,
  hiddenSize: 512,
  numLayers: 8,
  numHeads: 8,
  numKvHeads: 2,
  intermediateSize: 1408,
  seqLen: 256,
  tied: true,
  sequences: 8,
  contextTokens: 64,
  maxSetSize: 4,
  /**
   * Small on purpose: warm-up and timed steps repeat one batch, and at 1e-5 every set of it
   * is clipped within two updates (flat loss, zero gradient). At 1e-7 the set ratios stay
   * inside the clip range over a run, as in a real update. The arithmetic per step, and so
   * the timing, does not depend on the value.
   */
  lr: 1e-7,
  maxGradNorm: 1,
  modelSeed: 1,
  dataSeed: 2,
};

/** Smoke-run size: finishes in seconds on a busy machine. */
export const TINY: HfWorkload = {
  ...QWEN2,
  name: 'tiny',
  vocabSize: 512,
  hiddenSize: 64,
  numLayers: 2,
  numHeads: 4,
  numKvHeads: 2,
  intermediateSize: 176,
  seqLen: 32,
  contextTokens: 8,
};

export const PRESETS: Readonly<Record<string, HfWorkload>> = { qwen2: QWEN2, tiny: TINY };

export function objectiveConfig(): ObjectiveConfig {
  return { ...DEFAULT_OBJECTIVE_CONFIG, progress: { ...DEFAULT_OBJECTIVE_CONFIG.progress } };
}

export function responseTokens(w: HfWorkload): number {
  return w.seqLen + 1 - w.contextTokens;
}

export function validateWorkload(w: HfWorkload): void {
  const fail = (msg: string): never => {
    throw new Error(`workload: ${msg}`);
  };
  if (w.hiddenSize % w.numHeads !== 0) fail(`--hidden ${w.hiddenSize} must be a multiple of --heads ${w.numHeads}`);
  if ((w.hiddenSize / w.numHeads) % 2 !== 0) fail(`head dimension ${w.hiddenSize / w.numHeads} must be even (RoPE)`);
  if (w.numHeads % w.numKvHeads !== 0) fail(`--heads ${w.numHeads} must be a multiple of --kv-heads ${w.numKvHeads}`);
  if (w.contextTokens < 1 || w.contextTokens > w.seqLen) fail(`--context ${w.contextTokens} must be in [1, --seq-len ${w.seqLen}]`);
}

/** One-line description for result headers. */
export function describeWorkload(w: HfWorkload): string {
  const params = parameterCount(w);
  return (
    `${w.name} (${w.arch}): vocab ${w.vocabSize}, hidden ${w.hiddenSize}, ${w.numLayers} layers, ${w.numHeads} heads / ${w.numKvHeads} KV heads ` +
    `(head dim ${w.hiddenSize / w.numHeads}), SwiGLU ${w.intermediateSize}, ${w.tied ? 'tied' : 'untied'} embeddings, ${(params / 1e6).toFixed(1)}M parameters; ` +
    `T ${w.seqLen} (${w.contextTokens} context + ${responseTokens(w)} response), ${w.sequences} sequences/step in sets of 1-${w.maxSetSize}`
  );
}

export function parameterCount(w: HfWorkload): number {
  const d = w.hiddenSize;
  const hd = d / w.numHeads;
  const kv = w.numKvHeads * hd;
  const bias = w.arch === 'qwen2' ? d + 2 * kv : 0;
  const layer = 2 * d + d * d + 2 * d * kv + d * d + bias + 3 * d * w.intermediateSize;
  return w.vocabSize * d * (w.tied ? 1 : 2) + w.numLayers * layer + d;
}

/** The model's `config.json`, in transformers 5's style (the Python side builds the model from it). */
export function hfConfigJson(w: HfWorkload): Record<string, unknown> {
  const common = {
    vocab_size: w.vocabSize,
    hidden_size: w.hiddenSize,
    intermediate_size: w.intermediateSize,
    num_hidden_layers: w.numLayers,
    num_attention_heads: w.numHeads,
    num_key_value_heads: w.numKvHeads,
    max_position_embeddings: w.seqLen,
    hidden_act: 'silu',
    initializer_range: 0.02,
    attention_dropout: 0,
    tie_word_embeddings: w.tied,
    use_cache: false,
    dtype: 'float32',
  };
  if (w.arch === 'qwen2') {
    return {
      architectures: ['Qwen2ForCausalLM'],
      model_type: 'qwen2',
      ...common,
      rms_norm_eps: 1e-6,
      rope_parameters: { rope_type: 'default', rope_theta: 1_000_000 },
      use_sliding_window: false,
      sliding_window: null,
      max_window_layers: w.numLayers,
      layer_types: Array.from({ length: w.numLayers }, () => 'full_attention'),
    };
  }
  return {
    architectures: ['LlamaForCausalLM'],
    model_type: 'llama',
    ...common,
    rms_norm_eps: 1e-5,
    rope_parameters: { rope_type: 'default', rope_theta: 500_000 },
    attention_bias: false,
    mlp_bias: false,
  };
}

/**
 * Fallback when Python's transformers is not there (tfjs-only runs): random weights for
 * `dir/config.json` written with the project's safetensors writer, seeded. Linear weights
 * and embeddings N(0, 0.02²), biases N(0, 0.02²), RMSNorm gains 1 + N(0, 0.1²) — the same
 * distributions as the Python side (not the same values).
 */
export function writeRandomWeights(dir: string, seed: number): void {
  const config = readHfConfig(dir);
  const rng = new SeededRng(seed);
  const tensors = hfWeightSpecs(config).map((s) => {
    const n = s.shape.reduce((a, b) => a * b, 1);
    const data = new Float32Array(n);
    const norm = s.name.endsWith('norm.weight');
    const sd = norm ? 0.1 : 0.02;
    for (let i = 0; i < n; i++) data[i] = (norm ? 1 : 0) + sd * rng.nextNormal();
    return { name: s.name, shape: s.shape, data };
  });
  saveHfWeights(dir, tensors);
}

/**
 * Loads the model of a HF directory without a tokenizer (the bench feeds ids):
 * config.json + safetensors through the loader `loadHfModel` uses.
 */
export function loadModelDir(dir: string): LlamaModel {
  const config = readHfConfig(dir);
  const weights = openHfWeights(dir);
  const tensors = new Map<string, { shape: number[]; data: Float32Array }>();
  for (const spec of hfWeightSpecs(config)) {
    const t = readHfTensor(weights, spec.name);
    tensors.set(spec.name, { shape: t.shape, data: t.data });
  }
  const model = LlamaModel.fromTensors(config, tensors);
  tensors.clear();
  return model;
}

/**
 * One mini-batch of active sets, deterministically: random token ids, behaviour
 * log-probs from the model itself perturbed slightly (so ratios are not all 1),
 * seeded advantages. The per-token noise is 0.05/√R (R response tokens), so a set's
 * initial log-ratio has a spread of about 0.05 whatever T: inside the clip range.
 */
export async function buildSets(model: LlamaModel, w: HfWorkload): Promise<ActiveSet[]> {
  const rng = new SeededRng(w.dataSeed);
  const r = responseTokens(w);
  const sets: ActiveSet[] = [];
  const all: { outputId: string; contextTokens: number[]; responseTokens: number[]; logpOld: number[] }[] = [];
  let placed = 0;
  while (placed < w.sequences) {
    const k = Math.min(1 + rng.nextInt(w.maxSetSize), w.sequences - placed);
    const members = Array.from({ length: k }, (_, j) => ({
      outputId: `o${placed + j}`,
      contextTokens: Array.from({ length: w.contextTokens }, () => rng.nextInt(w.vocabSize)),
      responseTokens: Array.from({ length: r }, () => rng.nextInt(w.vocabSize)),
      logpOld: [] as number[],
    }));
    all.push(...members);
    sets.push({ setId: `s${sets.length}`, advantage: rng.nextNormal(), members });
    placed += k;
  }
  // Score in chunks of 4 sequences so that preparing a large batch stays small in memory.
  const noise = 0.05 / Math.sqrt(r);
  for (let i = 0; i < all.length; i += 4) {
    const chunk = all.slice(i, i + 4);
    const { logProbs, mask } = tokenLogProbs(model, chunk);
    const rows = await logProbs.array();
    tf.dispose([logProbs, mask]);
    chunk.forEach((m, j) => (m.logpOld = rows[j].map((x) => Math.min(0, x + noise * rng.nextNormal()))));
  }
  return sets;
}

export function writeJson(file: string, value: unknown): void {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, JSON.stringify(value) + '\n');
}
