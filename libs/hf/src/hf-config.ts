import { ErrorCode, SrpoError } from '@srpo/core';

/** The causal-LM architectures the loader implements (`config.json` `architectures[0]`). */
export const SUPPORTED_ARCHITECTURES = ['LlamaForCausalLM', 'Qwen2ForCausalLM', 'MistralForCausalLM'] as const;
export type HfArchitecture = (typeof SUPPORTED_ARCHITECTURES)[number];

/** Rotary position embedding, as resolved from either config style. */
export type RopeScaling =
  | { type: 'none' }
  /** Positions divided by `factor` (transformers `_compute_linear_scaling_rope_parameters`). */
  | { type: 'linear'; factor: number }
  /** Llama 3.1 frequency-band scaling (transformers `_compute_llama3_parameters`). */
  | { type: 'llama3'; factor: number; lowFreqFactor: number; highFreqFactor: number; originalMaxPositionEmbeddings: number };

/**
 * A Llama-family decoder, resolved from a Hugging Face `config.json`. Every field the
 * forward pass depends on is here, with transformers' defaults applied, so two configs
 * that describe the same model resolve to equal objects whatever style they were written in.
 */
export interface HfModelConfig {
  architecture: HfArchitecture;
  vocabSize: number;
  hiddenSize: number;
  numLayers: number;
  numHeads: number;
  /** Key/value heads (grouped-query attention); divides `numHeads`. */
  numKvHeads: number;
  headDim: number;
  intermediateSize: number;
  /** Longest input the model accepts (`max_position_embeddings`). */
  maxSeqLen: number;
  rmsNormEps: number;
  tieWordEmbeddings: boolean;
  /** Biases on q/k/v (Qwen2 always; Llama's `attention_bias`). */
  qkvBias: boolean;
  /** Bias on o_proj (Llama's `attention_bias` only; Qwen2 has none). */
  oBias: boolean;
  /** Biases on gate/up/down (Llama's `mlp_bias`). */
  mlpBias: boolean;
  ropeTheta: number;
  ropeScaling: RopeScaling;
  /** The checkpoint's stored dtype (`torch_dtype` or `dtype`); compute is always float32. */
  dtype: 'float32' | 'float16' | 'bfloat16';
  bosTokenId?: number;
  eosTokenIds: number[];
  padTokenId?: number;
}

/** A config field the loader does not implement, or a malformed one: one line naming the field and its value. */
export class UnsupportedConfigError extends SrpoError {
  constructor(field: string, value: unknown, problem: string) {
    super(ErrorCode.VALIDATION_FAILED, `config.json ${field}=${show(value)}: ${problem}`, { field });
  }
}

function show(v: unknown): string {
  const s = JSON.stringify(v);
  return s === undefined ? String(v) : s.length > 80 ? `${s.slice(0, 77)}...` : s;
}

type Json = Record<string, unknown>;

const MODEL_TYPES: Record<string, HfArchitecture> = { llama: 'LlamaForCausalLM', qwen2: 'Qwen2ForCausalLM', mistral: 'MistralForCausalLM' };

/**
 * Resolves a `config.json` object. Reads both styles found in the wild:
 * transformers 4 (`rope_theta`, `rope_scaling` with `type` or `rope_type`, `torch_dtype`) and
 * transformers 5 (`rope_parameters`, `layer_types`, `dtype`). Refuses, with
 * {@link UnsupportedConfigError}, everything the forward pass would get wrong: other
 * architectures, activations other than SiLU, sliding-window or non-full attention layers,
 * rope types other than default/linear/llama3, partial rotary, quantized checkpoints.
 */
export function parseHfConfig(raw: unknown): HfModelConfig {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw new UnsupportedConfigError('(root)', raw, 'must be a JSON object');
  const c = raw as Json;
  const architecture = resolveArchitecture(c);
  const int = (field: string, fallback?: number): number => {
    const v = c[field] ?? fallback;
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 1) throw new UnsupportedConfigError(field, c[field], 'must be a positive integer');
    return v;
  };
  const bool = (field: string, fallback: boolean): boolean => {
    const v = c[field] ?? fallback;
    if (typeof v !== 'boolean') throw new UnsupportedConfigError(field, v, 'must be true or false');
    return v;
  };
  const hiddenSize = int('hidden_size');
  const numHeads = int('num_attention_heads');
  const numKvHeads = int('num_key_value_heads', numHeads);
  if (numHeads % numKvHeads !== 0) throw new UnsupportedConfigError('num_key_value_heads', numKvHeads, `must divide num_attention_heads (${numHeads})`);
  const headDim = c.head_dim === null || c.head_dim === undefined ? hiddenSize / numHeads : int('head_dim');
  if (!Number.isInteger(headDim) || headDim % 2 !== 0)
    throw new UnsupportedConfigError('head_dim', headDim, 'must be an even integer (hidden_size / num_attention_heads by default)');
  const act = c.hidden_act ?? 'silu';
  if (act !== 'silu') throw new UnsupportedConfigError('hidden_act', act, 'only silu (SwiGLU MLP) is implemented');
  refuseQuantization(c);
  refuseSlidingWindow(c, architecture, int('max_position_embeddings'));
  refuseLayerTypes(c);
  const { theta, scaling } = resolveRope(c);
  const eps = c.rms_norm_eps ?? 1e-6;
  if (typeof eps !== 'number' || !(eps > 0)) throw new UnsupportedConfigError('rms_norm_eps', eps, 'must be a positive number');
  const attentionBias = bool('attention_bias', false);
  return {
    architecture,
    vocabSize: int('vocab_size'),
    hiddenSize,
    numLayers: int('num_hidden_layers'),
    numHeads,
    numKvHeads,
    headDim,
    intermediateSize: int('intermediate_size'),
    maxSeqLen: int('max_position_embeddings'),
    rmsNormEps: eps,
    tieWordEmbeddings: bool('tie_word_embeddings', false),
    qkvBias: architecture === 'Qwen2ForCausalLM' ? true : attentionBias,
    oBias: architecture === 'LlamaForCausalLM' ? attentionBias : false,
    mlpBias: architecture === 'LlamaForCausalLM' ? bool('mlp_bias', false) : false,
    ropeTheta: theta,
    ropeScaling: scaling,
    dtype: resolveDtype(c),
    bosTokenId: optionalId(c, 'bos_token_id'),
    eosTokenIds: idList(c, 'eos_token_id'),
    padTokenId: optionalId(c, 'pad_token_id'),
  };
}

function resolveArchitecture(c: Json): HfArchitecture {
  const archs = c.architectures;
  if (archs !== undefined) {
    if (!Array.isArray(archs) || archs.length !== 1 || typeof archs[0] !== 'string') {
      throw new UnsupportedConfigError('architectures', archs, 'must list exactly one architecture');
    }
    const a = archs[0];
    if (!(SUPPORTED_ARCHITECTURES as readonly string[]).includes(a)) {
      throw new UnsupportedConfigError('architectures', archs, `not implemented (supported: ${SUPPORTED_ARCHITECTURES.join(', ')})`);
    }
    if (typeof c.model_type === 'string' && MODEL_TYPES[c.model_type] !== a)
      throw new UnsupportedConfigError('model_type', c.model_type, `does not match architectures ${a}`);
    return a as HfArchitecture;
  }
  const t = c.model_type;
  if (typeof t !== 'string' || !MODEL_TYPES[t])
    throw new UnsupportedConfigError('model_type', t, `not implemented (supported: ${Object.keys(MODEL_TYPES).join(', ')})`);
  return MODEL_TYPES[t];
}

function refuseQuantization(c: Json): void {
  if (c.quantization_config !== undefined && c.quantization_config !== null) {
    const q = c.quantization_config as Json;
    throw new UnsupportedConfigError(
      'quantization_config.quant_method',
      q?.quant_method,
      'quantized checkpoints are not implemented; load the unquantized weights',
    );
  }
}

/**
 * A window at least as long as the model's context never hides a position, so it is the
 * same model; anything shorter would need banded masks, which are not implemented.
 */
function refuseSlidingWindow(c: Json, architecture: HfArchitecture, maxPositions: number): void {
  const w = c.sliding_window;
  const enabled = architecture === 'Qwen2ForCausalLM' ? c.use_sliding_window === true : w !== null && w !== undefined;
  if (!enabled) return;
  if (typeof w === 'number' && w >= maxPositions) return;
  throw new UnsupportedConfigError(
    'sliding_window',
    w,
    `sliding-window attention is not implemented (a window >= max_position_embeddings ${maxPositions} is accepted)`,
  );
}

function refuseLayerTypes(c: Json): void {
  const lt = c.layer_types;
  if (lt === undefined || lt === null) return;
  if (!Array.isArray(lt)) throw new UnsupportedConfigError('layer_types', lt, 'must be a list');
  const i = lt.findIndex((t) => t !== 'full_attention');
  if (i >= 0) throw new UnsupportedConfigError(`layer_types[${i}]`, lt[i], 'only full_attention layers are implemented');
}

function positive(field: string, v: unknown): number {
  if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0) throw new UnsupportedConfigError(field, v, 'must be a positive number');
  return v;
}

/**
 * transformers 5 keeps everything in `rope_parameters` (`rope_type`, `rope_theta`, the
 * scaling fields); transformers 4 splits it into `rope_theta` and `rope_scaling`, whose type
 * key is `rope_type` or, in older files, `type`.
 */
function resolveRope(c: Json): { theta: number; scaling: RopeScaling } {
  let params: Json | null;
  let prefix: string;
  let theta: number;
  if (c.rope_parameters !== undefined && c.rope_parameters !== null) {
    if (typeof c.rope_parameters !== 'object') throw new UnsupportedConfigError('rope_parameters', c.rope_parameters, 'must be an object');
    params = c.rope_parameters as Json;
    prefix = 'rope_parameters';
    theta = positive('rope_parameters.rope_theta', params.rope_theta ?? c.rope_theta ?? 10000);
  } else {
    params = (c.rope_scaling ?? null) as Json | null;
    prefix = 'rope_scaling';
    theta = positive('rope_theta', c.rope_theta ?? 10000);
    if (params !== null && typeof params !== 'object') throw new UnsupportedConfigError('rope_scaling', params, 'must be an object or null');
  }
  const partial = c.partial_rotary_factor ?? params?.partial_rotary_factor ?? 1;
  if (partial !== 1) throw new UnsupportedConfigError('partial_rotary_factor', partial, 'only full rotary embeddings are implemented');
  if (params === null) return { theta, scaling: { type: 'none' } };
  const typeKey = params.rope_type !== undefined ? 'rope_type' : 'type';
  const type = params[typeKey] ?? 'default';
  const factor = (): number => positive(`${prefix}.factor`, params?.factor);
  switch (type) {
    case 'default':
      return { theta, scaling: { type: 'none' } };
    case 'linear':
      return { theta, scaling: { type: 'linear', factor: factor() } };
    case 'llama3': {
      const low = positive(`${prefix}.low_freq_factor`, params.low_freq_factor);
      const high = positive(`${prefix}.high_freq_factor`, params.high_freq_factor);
      if (!(high > low)) throw new UnsupportedConfigError(`${prefix}.high_freq_factor`, high, `must exceed low_freq_factor (${low})`);
      const orig = params.original_max_position_embeddings;
      if (typeof orig !== 'number' || !Number.isSafeInteger(orig) || orig < 1) {
        throw new UnsupportedConfigError(`${prefix}.original_max_position_embeddings`, orig, 'must be a positive integer');
      }
      return { theta, scaling: { type: 'llama3', factor: factor(), lowFreqFactor: low, highFreqFactor: high, originalMaxPositionEmbeddings: orig } };
    }
    default:
      throw new UnsupportedConfigError(`${prefix}.${typeKey}`, type, 'not implemented (supported: default, linear, llama3)');
  }
}

function resolveDtype(c: Json): HfModelConfig['dtype'] {
  const field = c.dtype !== undefined ? 'dtype' : 'torch_dtype';
  const v = c[field] ?? 'float32';
  if (v === 'float32' || v === 'float16' || v === 'bfloat16') return v;
  throw new UnsupportedConfigError(field, v, 'supported: float32, float16, bfloat16');
}

function optionalId(c: Json, field: string): number | undefined {
  const v = c[field];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 0) throw new UnsupportedConfigError(field, v, 'must be a token id');
  return v;
}

function idList(c: Json, field: string): number[] {
  const v = c[field];
  if (v === undefined || v === null) return [];
  const list = Array.isArray(v) ? v : [v];
  list.forEach((id, i) => {
    if (typeof id !== 'number' || !Number.isSafeInteger(id) || id < 0) throw new UnsupportedConfigError(`${field}[${i}]`, id, 'must be a token id');
  });
  return list as number[];
}
