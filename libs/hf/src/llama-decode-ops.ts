import * as tf from '@tensorflow/tfjs';
import { ValidationError } from '@srpo/core';
import { configureSrpoKernels, ropeFused } from '@srpo/kernels';
import { linear, rmsNorm, swiGlu, type RopeTables } from './llama-ops';
import type { LlamaModel } from './llama-model';

// The pieces of incremental decoding that prefill (llama-decode.ts) and the decode batch
// (llama-decode-batch.ts) share; not part of the package's entry points.

/** A weight as the rank llama-ops takes (the variables are rank-erased). */
export function w1(model: LlamaModel, name: string): tf.Tensor1D {
  return model.weight(name) as unknown as tf.Tensor1D;
}
export function w2(model: LlamaModel, name: string): tf.Tensor2D {
  return model.weight(name) as unknown as tf.Tensor2D;
}

/**
 * With `products: 'tensorflow'` (the default), decode steps with at most this many rows run their 2-D products on TensorFlow's `MatMul` (see
 * {@link withTensorflowMatMul}). Measured on SmolLM2-135M's shapes (Xeon, AVX-512, 2 threads):
 * at 1 row `MatMul` took 0.04–0.23 ms per layer product against `SrpoMatMul`'s 0.13–0.32 (a
 * matrix–vector product reads the weight once; `SrpoMatMul` then packed it first: its few-row
 * path, unpacked, came later and brought `learner` to 0.93–0.94x `tensorflow` at batch 1); at 16
 * rows `SrpoMatMul` was as fast or faster (0.42 against 0.47–0.61 ms on the MLP's).
 */
export const TENSORFLOW_MATMUL_ROWS = 4;

/**
 * Runs `fn` with the 2-D products on TensorFlow's `MatMul` instead of `SrpoMatMul`, and restores
 * the process-wide choice after. `fn` is synchronous (tfjs-node runs ops eagerly), so no other
 * code runs while the switch is flipped. Used for products with few rows, and for the
 * vocabulary head at any row count (SmolLM2's `[49152, 576]` head: 4.9 ms against 16.7 at 1 row,
 * 12.3 against 19.8 at 16 rows, same machine and run).
 */
export function withTensorflowMatMul<T>(on: boolean, fn: () => T): T {
  if (!on) return fn();
  const previous = configureSrpoKernels({}).matMul;
  if (previous === 'tensorflow') return fn();
  configureSrpoKernels({ matMul: 'tensorflow' });
  try {
    return fn();
  } finally {
    configureSrpoKernels({ matMul: previous });
  }
}

/** The vocabulary head on the final hidden rows `[N, D]` → logits `[N, V]` (the forward's last lines). */
export function head(model: LlamaModel, h: tf.Tensor2D, tensorflowMatMul = false): tf.Tensor2D {
  const c = model.config;
  const wHead = w2(model, c.tieWordEmbeddings ? 'model.embed_tokens.weight' : 'lm_head.weight');
  const n = rmsNorm(h, w1(model, 'model.norm.weight'), c.rmsNormEps);
  return withTensorflowMatMul(tensorflowMatMul, () => linear(n, wHead));
}

/** A layer's MLP block and residual on `h` `[N, D]`, as the forward computes it. */
export function mlp(model: LlamaModel, h: tf.Tensor2D, p: string): tf.Tensor2D {
  const c = model.config;
  const n2 = rmsNorm(h, w1(model, `${p}post_attention_layernorm.weight`), c.rmsNormEps);
  const gate = model.linear(n2, `${p}mlp.gate_proj`, c.mlpBias);
  const up = model.linear(n2, `${p}mlp.up_proj`, c.mlpBias);
  return tf.add<tf.Tensor2D>(h, model.linear(swiGlu(gate, up), `${p}mlp.down_proj`, c.mlpBias));
}

export function checkTokens(model: LlamaModel, tokens: readonly number[], field: string): void {
  const { vocabSize } = model.config;
  tokens.forEach((t, i) => {
    if (!Number.isInteger(t) || t < 0 || t >= vocabSize)
      throw new ValidationError(`${field}[${i}]`, `token id must be an integer in [0, ${vocabSize}), got ${t}`);
  });
}

/**
 * The additive causal mask `[r·T, T]` that llama-ops' ropeAttention takes (0 on and below the
 * diagonal, −1e9 above). Made per prefill, not cached: one per prompt length would grow without
 * bound in a server (r·T² values each), and it is small beside the prefill's own work.
 */
export function causalMask(model: LlamaModel, t: number): tf.Tensor2D {
  const r = model.config.numHeads / model.config.numKvHeads;
  const data = new Float32Array(r * t * t);
  for (let g = 0; g < r; g++) for (let i = 0; i < t; i++) for (let j = i + 1; j < t; j++) data[(g * t + i) * t + j] = -1e9;
  return tf.tensor2d(data, [r * t, t]);
}

/**
 * RoPE tables for positions 0..t−1, sliced from the model's tables for the next power of two, so
 * that a server's many lengths make few cached tables (the model caches one set per length asked).
 */
export function ropeFor(model: LlamaModel, t: number): RopeTables {
  const full = model.rope(Math.min(model.config.maxSeqLen, 2 ** Math.ceil(Math.log2(t))));
  if (full.cos.shape[0] === t) return full;
  const cut = (x: tf.Tensor2D): tf.Tensor2D => x.slice([0, 0], [t, -1]);
  return { cos: cut(full.cos), sin: cut(full.sin), negSin: cut(full.negSin) };
}

/**
 * RoPE on projection rows `[N, heads·d]` where row n is at the position whose tables are row n
 * of `cos`, `sin` `[N, d]`, times `scale`: the project's `SrpoRope` (one sequence of N positions)
 * where available, else the composite rotate-half form.
 */
export function rotateRows(x: tf.Tensor2D, heads: number, cos: tf.Tensor2D, sin: tf.Tensor2D, scale: number, composite = false): tf.Tensor2D {
  const fused = ropeFused(x, cos, sin, scale, false, composite);
  if (fused) return fused;
  return tf.tidy(() => {
    const [n, d] = [x.shape[0], cos.shape[1]];
    const x3 = x.reshape<tf.Tensor3D>([n, heads, d]);
    const [x1, x2] = tf.split(x3, [d / 2, d / 2], 2);
    const rotated = tf.concat([tf.neg(x2), x1], 2);
    const y = tf.add(tf.mul(x3, cos.reshape([n, 1, d])), tf.mul(rotated, sin.reshape([n, 1, d])));
    return (scale === 1 ? y : tf.mul(y, scale)).reshape<tf.Tensor2D>([n, heads * d]);
  });
}
