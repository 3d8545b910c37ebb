import * as tf from '@tensorflow/tfjs';
import { ValidationError } from '@srpo/core';
import { configureSrpoKernels, gateUpFused, matMul2d, matMul2dBiasResidual, rmsNormFused, ropeFused, srpoMatMulRouted, swiGluFused } from '@srpo/kernels';
import { rmsNorm, swiGlu } from './llama-ops';
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

// Decoding records no gradients, so its linears, norms and gates call the kernels that llama-ops'
// pieces run in their forward directly, without their tape entry (tf.customGrad): the same kernels
// on the same operands, so the same bits, for a fraction of the JavaScript per call (a step makes
// ten such calls per layer).

/**
 * `x · Wᵀ (+ b)` plus the attached adapter's term: {@link LlamaModel.linear}'s forward, op for op
 * (llama-ops' linear is `matMul2d(x, W, false, true)` and then `tf.add` of the bias).
 */
export function project(model: LlamaModel, x: tf.Tensor2D, name: string, bias: boolean, delta = model.adapter?.delta(x, name)): tf.Tensor2D {
  const y = matMul2d(x, w2(model, `${name}.weight`), false, true);
  const out = bias ? tf.add<tf.Tensor2D>(y, w1(model, `${name}.bias`)) : y;
  return delta ? tf.add<tf.Tensor2D>(out, delta) : out;
}

/**
 * `h + project(x)`, a residual block's output projection: one `SrpoMatMulBiasResidual` where
 * `SrpoMatMul` runs the products and no adapter term comes between the product and the residual
 * (it adds the bias, then h, to each finished element: `tf.add`'s roundings in the same order).
 * A layer without a bias passes `zeros` `[out]` for it: x·Wᵀ + 0 is x·Wᵀ except that −0 becomes
 * +0, which h + (·) cannot tell apart unless h is a zero too (then only the zero's sign can differ).
 */
export function projectResidual(model: LlamaModel, h: tf.Tensor2D, x: tf.Tensor2D, name: string, bias: boolean, zeros: tf.Tensor1D): tf.Tensor2D {
  const delta = model.adapter?.delta(x, name);
  if (!delta) {
    const fused = matMul2dBiasResidual(x, w2(model, `${name}.weight`), bias ? w1(model, `${name}.bias`) : zeros, h, true);
    if (fused) return fused;
  }
  return tf.add<tf.Tensor2D>(h, project(model, x, name, bias, delta));
}

/** llama-ops' rmsNorm forward: the fused kernel where loaded, else the composite through llama-ops. */
export function norm(x: tf.Tensor2D, w: tf.Tensor1D, eps: number): tf.Tensor2D {
  return rmsNormFused(x, w, eps)?.y ?? rmsNorm(x, w, eps);
}

/** The vocabulary head on the final hidden rows `[N, D]` → logits `[N, V]` (the forward's last lines). */
export function head(model: LlamaModel, h: tf.Tensor2D, tensorflowMatMul = false): tf.Tensor2D {
  const c = model.config;
  const wHead = w2(model, c.tieWordEmbeddings ? 'model.embed_tokens.weight' : 'lm_head.weight');
  const n = norm(h, w1(model, 'model.norm.weight'), c.rmsNormEps);
  return withTensorflowMatMul(tensorflowMatMul, () => matMul2d(n, wHead, false, true));
}

/** A layer's MLP block and residual on `h` `[N, D]`, as the forward computes it (with `zeros` `[D]`, its last product and the residual in one op: {@link projectResidual}). */
export function mlp(model: LlamaModel, h: tf.Tensor2D, p: string, zeros?: tf.Tensor1D): tf.Tensor2D {
  const c = model.config;
  const n2 = norm(h, w1(model, `${p}post_attention_layernorm.weight`), c.rmsNormEps);
  const [gateName, upName] = [`${p}mlp.gate_proj`, `${p}mlp.up_proj`];
  const [dg, du] = [model.adapter?.delta(n2, gateName), model.adapter?.delta(n2, upName)];
  // One SrpoGateUp where the products run SrpoMatMul and nothing comes between them and the gate.
  const fused = !c.mlpBias && !dg && !du && srpoMatMulRouted() ? gateUpFused(n2, w2(model, `${gateName}.weight`), w2(model, `${upName}.weight`)) : undefined;
  const act = fused ?? gateUp(project(model, n2, gateName, c.mlpBias, dg), project(model, n2, upName, c.mlpBias, du));
  if (zeros) return projectResidual(model, h, act, `${p}mlp.down_proj`, c.mlpBias, zeros);
  return tf.add<tf.Tensor2D>(h, project(model, act, `${p}mlp.down_proj`, c.mlpBias));
}

function gateUp(gate: tf.Tensor2D, up: tf.Tensor2D): tf.Tensor2D {
  return swiGluFused(gate, up) ?? swiGlu(gate, up);
}

export function checkTokens(model: LlamaModel, tokens: readonly number[], field: string): void {
  const { vocabSize } = model.config;
  tokens.forEach((t, i) => {
    if (!Number.isInteger(t) || t < 0 || t >= vocabSize)
      throw new ValidationError(`${field}[${i}]`, `token id must be an integer in [0, ${vocabSize}), got ${t}`);
  });
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
