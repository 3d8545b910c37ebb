import * as tf from '@tensorflow/tfjs';
import { ValidationError } from '@srpo/core';
import { checkTemperature } from './log-probs';
import { SeededRng } from './rng';
import type { CausalLm } from './causal-lm';

export interface SamplingOptions {
  /** Softmax temperature τ > 0; default 1. */
  temperature?: number;
  /** Sample only among the k most likely tokens; omit or 0 for the full vocabulary. */
  topK?: number;
  /** Seed for a fresh {@link SeededRng}; give this or `rng`. */
  seed?: number;
  /** A caller-owned RNG (advanced by the draws); takes precedence over `seed`. */
  rng?: SeededRng;
  /** Most tokens to generate per context (≥ 1, ≤ the model's `maxSeqLen`). */
  maxNewTokens: number;
  /** Generation stops after emitting any of these (the stop token is included in the output). */
  stopTokens?: readonly number[];
}

export interface SampleResult {
  /**
   * The context actually conditioned on: the input left-truncated to its last
   * `maxSeqLen + 1 − maxNewTokens` tokens. Score the output against this one
   * (see {@link tokenLogProbs}); with the untruncated context a recomputation
   * would keep a different number of context tokens whenever truncation happened.
   */
  contextTokens: number[];
  /** Generated token ids. */
  tokens: number[];
  /**
   * Behaviour log-probs, one per generated token: `log softmax(logits / τ)[token]`
   * over the FULL vocabulary at temperature τ — not renormalised over the top-k
   * set. This is exactly what `tokenLogProbs(model, [{contextTokens, responseTokens: tokens}], { temperature: τ })`
   * recomputes (up to float rounding from a different batch shape). When topK
   * truncates, the token was actually drawn from the top-k renormalised
   * distribution, whose log-prob is `logProbs[j] − log Σ_{top-k} π_τ`; importance ratios
   * built on these values therefore treat top-k as part of the environment.
   */
  logProbs: number[];
  stopReason: 'stop-token' | 'max-new-tokens';
}

/** Samples one continuation; see {@link sampleBatch}. */
export async function sample(model: CausalLm, contextTokens: readonly number[], options: SamplingOptions): Promise<SampleResult> {
  const [result] = await sampleBatch(model, [contextTokens], options);
  return result;
}

/**
 * Samples continuations for several contexts at once (one forward pass per
 * generated position over all unfinished rows; no KV cache, so cost grows with
 * the square of the length — fine for the small policies this project trains).
 *
 * Reproducible: the same weights, contexts, options and seed give the same
 * tokens. Uniform draws are taken one per unfinished row per position, in row order.
 */
export async function sampleBatch(model: CausalLm, contexts: readonly (readonly number[])[], options: SamplingOptions): Promise<SampleResult[]> {
  const { vocabSize, maxSeqLen } = model.config;
  const temperature = checkTemperature(options.temperature ?? 1, 'options.temperature');
  const maxNew = options.maxNewTokens;
  if (!Number.isInteger(maxNew) || maxNew < 1 || maxNew > maxSeqLen) {
    throw new ValidationError('options.maxNewTokens', `must be an integer in [1, ${maxSeqLen}], got ${String(maxNew)}`);
  }
  const topK = options.topK ?? 0;
  if (!Number.isInteger(topK) || topK < 0) throw new ValidationError('options.topK', `must be a non-negative integer, got ${String(topK)}`);
  const k = topK === 0 ? vocabSize : Math.min(topK, vocabSize);
  const stops = new Set(options.stopTokens ?? []);
  for (const s of stops) {
    if (!Number.isInteger(s) || s < 0 || s >= vocabSize) throw new ValidationError('options.stopTokens', `token id must be in [0, ${vocabSize}), got ${s}`);
  }
  let rng = options.rng;
  if (!rng) {
    if (options.seed === undefined) throw new ValidationError('options.seed', 'give a seed or an rng: sampling is always seeded');
    rng = new SeededRng(options.seed);
  }
  if (contexts.length === 0) return [];
  const keep = maxSeqLen + 1 - maxNew;
  // The row's type is spelled out: inferred, stopReason would widen to string.
  type Row = { context: number[]; seq: number[]; tokens: number[]; logProbs: number[]; done: boolean; stopReason: SampleResult['stopReason'] };
  const rows = contexts.map((ctx, i): Row => {
    if (ctx.length < 1) throw new ValidationError(`contexts[${i}]`, 'must hold at least one token');
    ctx.forEach((t, j) => {
      if (!Number.isInteger(t) || t < 0 || t >= vocabSize) {
        throw new ValidationError(`contexts[${i}][${j}]`, `token id must be an integer in [0, ${vocabSize}), got ${t}`);
      }
    });
    const used = ctx.slice(Math.max(0, ctx.length - keep));
    return {
      context: used,
      seq: [...used],
      tokens: [],
      logProbs: [],
      done: false,
      stopReason: 'max-new-tokens',
    };
  });

  for (let step = 0; step < maxNew; step++) {
    const active = rows.filter((r) => !r.done);
    if (active.length === 0) break;
    const width = Math.max(...active.map((r) => r.seq.length));
    const ids = new Int32Array(active.length * width);
    const last = new Int32Array(active.length);
    active.forEach((r, i) => {
      ids.set(r.seq, i * width);
      last[i] = i * width + r.seq.length - 1;
    });
    const lp = tf.tidy(() => {
      // Only each row's last position is sampled from: project only those rows.
      const logits = model.logits2d(tf.tensor2d(ids, [active.length, width], 'int32'), temperature, tf.tensor1d(last, 'int32'));
      return tf.logSoftmax<tf.Tensor2D>(logits);
    });
    let values: Float32Array;
    try {
      values = (await lp.data()) as Float32Array;
    } finally {
      lp.dispose();
    }
    active.forEach((r, i) => {
      const row = values.subarray(i * vocabSize, (i + 1) * vocabSize);
      const token = drawToken(row, k, rng);
      r.tokens.push(token);
      r.logProbs.push(row[token]);
      r.seq.push(token);
      if (stops.has(token)) {
        r.done = true;
        r.stopReason = 'stop-token';
      }
    });
  }
  return rows.map((r) => ({ contextTokens: r.context, tokens: r.tokens, logProbs: r.logProbs, stopReason: r.stopReason }));
}

/** Draws from softmax over the top-k entries of `logp` (ties broken by lower id), in float64. */
function drawToken(logp: Float32Array, k: number, rng: SeededRng): number {
  let candidates: number[];
  if (k >= logp.length) {
    candidates = Array.from({ length: logp.length }, (_, i) => i);
  } else {
    candidates = Array.from({ length: logp.length }, (_, i) => i)
      .sort((a, b) => logp[b] - logp[a] || a - b)
      .slice(0, k);
  }
  let max = -Infinity;
  for (const c of candidates) max = Math.max(max, logp[c]);
  const weights = candidates.map((c) => Math.exp(logp[c] - max));
  const total = weights.reduce((a, b) => a + b, 0);
  let u = rng.nextFloat() * total;
  for (let i = 0; i < candidates.length; i++) {
    u -= weights[i];
    if (u < 0) return candidates[i];
  }
  // Rounding can leave u ≥ 0 after the last subtraction; the last candidate with weight wins.
  for (let i = candidates.length - 1; i >= 0; i--) if (weights[i] > 0) return candidates[i];
  return candidates[0];
}
