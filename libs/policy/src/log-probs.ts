import * as tf from '@tensorflow/tfjs';
import { ValidationError } from '@srpo/core';
import type { CausalLm } from './causal-lm';
import { pickLogProbs } from './transformer-ops';

/** One (context, response) pair to score. */
export interface SequencePair {
  /** Prompt tokens; at least one (the first response token must be predicted from something). */
  contextTokens: readonly number[];
  /** Generated tokens to score; at least one, at most `maxSeqLen`. */
  responseTokens: readonly number[];
  /** Loss mask over `responseTokens` (1 = counts, 0 = ignored); default all ones. */
  mask?: readonly number[];
}

/**
 * Pairs laid out as model inputs, as plain arrays (no tensors), so the
 * layout can be built outside a training step and reused for every epoch.
 *
 * Layout rule: `sequence = context' ++ response` where `context'` is the
 * context left-truncated to its last `maxSeqLen + 1 − R` tokens (R =
 * response length). The response is always kept whole; the model input is
 * `sequence[0 .. n−2]` (n = |sequence| ≤ maxSeqLen + 1), right-padded with
 * token 0 to the longest row. Right padding never changes a real position's
 * output because attention is causal.
 */
export interface PackedPairs {
  /** Rows (pairs). */
  m: number;
  /** Model input length: longest `n − 1` over rows. */
  inputLength: number;
  /** Longest response: the width of log-prob and mask outputs. */
  responseLength: number;
  /** `[m · inputLength]` input token ids, row-major. */
  inputs: Int32Array;
  /** `[m · inputLength]` next-token targets (0 where not a response position). */
  targets: Int32Array;
  /** `[m · responseLength]` flat index into `[m · inputLength]` of each response token's prediction (0 for padding). */
  gatherIndex: Int32Array;
  /** `[m · responseLength]` loss mask (padding is 0). */
  mask: Float32Array;
  /** Context tokens kept per row after truncation. */
  contextKept: number[];
}

/**
 * Packs pairs for {@link tokenLogProbs}; validates ids and lengths. Errors name
 * `${field}[i].…` for a string `field` (default `pairs`), or `${field(i)}.…` when
 * `field` is a function of the pair index.
 */
export function packPairs(pairs: readonly SequencePair[], model: CausalLm, field: string | ((i: number) => string) = 'pairs'): PackedPairs {
  const fieldOf = typeof field === 'function' ? field : (i: number): string => `${field}[${i}]`;
  const { maxSeqLen, vocabSize } = model.config;
  if (pairs.length === 0) throw new ValidationError(typeof field === 'string' ? field : 'pairs', 'must contain at least one pair');
  let inputLength = 1;
  let responseLength = 1;
  const kept: number[] = [];
  pairs.forEach((p, i) => {
    const at = fieldOf(i);
    const r = p.responseTokens.length;
    if (p.contextTokens.length < 1) throw new ValidationError(`${at}.contextTokens`, 'must hold at least one token');
    if (r < 1) throw new ValidationError(`${at}.responseTokens`, 'must hold at least one token');
    if (r > maxSeqLen) throw new ValidationError(`${at}.responseTokens`, `length ${r} exceeds the model context length ${maxSeqLen}`);
    checkIds(p.contextTokens, vocabSize, `${at}.contextTokens`);
    checkIds(p.responseTokens, vocabSize, `${at}.responseTokens`);
    if (p.mask !== undefined) {
      if (p.mask.length !== r) throw new ValidationError(`${at}.mask`, `length ${p.mask.length} differs from responseTokens length ${r}`);
      p.mask.forEach((v, j) => {
        if (v !== 0 && v !== 1) throw new ValidationError(`${at}.mask[${j}]`, `must be 0 or 1, got ${v}`);
      });
    }
    const c = Math.min(p.contextTokens.length, maxSeqLen + 1 - r);
    kept.push(c);
    inputLength = Math.max(inputLength, c + r - 1);
    responseLength = Math.max(responseLength, r);
  });
  const m = pairs.length;
  const inputs = new Int32Array(m * inputLength);
  const targets = new Int32Array(m * inputLength);
  const gatherIndex = new Int32Array(m * responseLength);
  const mask = new Float32Array(m * responseLength);
  pairs.forEach((p, i) => {
    const c = kept[i];
    const ctx = p.contextTokens.slice(p.contextTokens.length - c);
    const seq = [...ctx, ...p.responseTokens];
    const base = i * inputLength;
    for (let j = 0; j < seq.length - 1; j++) inputs[base + j] = seq[j];
    p.responseTokens.forEach((tok, j) => {
      // Response token j sits at sequence position c + j and is predicted at input position c + j − 1.
      const pos = c + j - 1;
      targets[base + pos] = tok;
      gatherIndex[i * responseLength + j] = base + pos;
      mask[i * responseLength + j] = p.mask ? p.mask[j] : 1;
    });
  });
  return { m, inputLength, responseLength, inputs, targets, gatherIndex, mask, contextKept: kept };
}

function checkIds(tokens: readonly number[], vocabSize: number, field: string): void {
  for (let j = 0; j < tokens.length; j++) {
    const t = tokens[j];
    if (!Number.isInteger(t) || t < 0 || t >= vocabSize) {
      throw new ValidationError(`${field}[${j}]`, `token id must be an integer in [0, ${vocabSize}), got ${t}`);
    }
  }
}

/** Device-side copy of a {@link PackedPairs}; owned by the caller (dispose). */
export interface PackedTensors {
  inputs: tf.Tensor2D;
  /** int32 `[m·responseLength]` the target of each response position (`targets[gatherIndex]`). */
  responseTargets: tf.Tensor1D;
  gatherIndex: tf.Tensor1D;
  mask: tf.Tensor2D;
  packed: PackedPairs;
}

export function packedToTensors(packed: PackedPairs): PackedTensors {
  return {
    inputs: tf.tensor2d(packed.inputs, [packed.m, packed.inputLength], 'int32'),
    responseTargets: tf.tensor1d(
      Int32Array.from(packed.gatherIndex, (g) => packed.targets[g]),
      'int32',
    ),
    gatherIndex: tf.tensor1d(packed.gatherIndex, 'int32'),
    mask: tf.tensor2d(packed.mask, [packed.m, packed.responseLength], 'float32'),
    packed,
  };
}

export function disposePacked(t: PackedTensors): void {
  tf.dispose([t.inputs, t.responseTargets, t.gatherIndex, t.mask]);
}

/**
 * Differentiable per-response-token log-probs for packed inputs.
 *
 * @returns float32 `[M, Tr]`: `log softmax(logits / temperature)[target]` for each
 *   response token, 0 where the mask is 0 (padding or masked tokens).
 */
export function packedLogProbs(model: CausalLm, t: PackedTensors, temperature: number): tf.Tensor2D {
  return tf.tidy(() => {
    // Logits of the response positions only: [M·Tr, V] instead of [M·Tin, V].
    const logits = model.logits2d(t.inputs, temperature, t.gatherIndex);
    const picked = pickLogProbs(logits, t.responseTargets).reshape([t.packed.m, t.packed.responseLength]);
    return tf.mul<tf.Tensor2D>(picked, t.mask);
  });
}

export interface TokenLogProbsOptions {
  /** Softmax temperature (> 0); default 1. Use the sampling temperature to get behaviour log-probs. */
  temperature?: number;
}

export interface TokenLogProbs {
  /** float32 `[M, T]`, T = longest response; `log π_τ(response_j | context', response_<j)`, 0 where `mask` is 0. */
  logProbs: tf.Tensor2D;
  /** float32 `[M, T]` 0/1: the pair's mask, padded with 0. */
  mask: tf.Tensor2D;
}

/**
 * Per-token log-probs of (context, response) pairs under the current weights,
 * where π_τ = softmax(logits / τ) over the full vocabulary. See
 * {@link PackedPairs} for the truncation rule. Not differentiable-by-design
 * for callers (no variables are watched); the update step uses
 * {@link packedLogProbs} inside its gradient scope. The caller disposes both tensors.
 */
export function tokenLogProbs(model: CausalLm, pairs: readonly SequencePair[], options: TokenLogProbsOptions = {}): TokenLogProbs {
  const temperature = checkTemperature(options.temperature ?? 1);
  const packed = packPairs(pairs, model);
  const t = packedToTensors(packed);
  try {
    const logProbs = packedLogProbs(model, t, temperature);
    return { logProbs, mask: t.mask };
  } finally {
    tf.dispose([t.inputs, t.responseTargets, t.gatherIndex]);
  }
}

export function checkTemperature(temperature: number, field = 'temperature'): number {
  if (typeof temperature !== 'number' || !Number.isFinite(temperature) || temperature <= 0) {
    throw new ValidationError(field, `must be a finite number > 0, got ${String(temperature)}`);
  }
  return temperature;
}
