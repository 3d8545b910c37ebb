import * as tf from '@tensorflow/tfjs';
import { native, nativeKernelsActive, type NativeBackend, type NativeBinding, type TfeAttr } from './native-ops';
import { srpoKernelAvailable, srpoKernelRegistered } from './srpo-kernels';

/**
 * The project's own fused kernels (libs/kernels/native: srpo-kernels.cc and its headers), each
 * wrapped as a tfjs call on tfjs-node's backend: GELU, layer norm, softmax, causal attention, the
 * layer-norm projection's folding, the residual add, RMSNorm, SwiGLU, RoPE, the target log-probs
 * and the Adam update. A forward wrapper returns undefined where its kernel is not available
 * (another backend, the native paths or the fused kernels switched off, the addon not built), and
 * the caller takes its composite form; a backward wrapper (`…Grad`) pairs with a forward that
 * took its kernel and fails loudly without it. TensorFlow's own kernels used the same way (MatMul,
 * BiasAddGrad, …) are in native-ops.ts.
 */

/**
 * One of the project's fused kernels (libs/kernels/native/srpo-kernels.cc) by name, or undefined
 * where it is not available: another backend, the native paths or the fused kernels switched off,
 * the addon not built, or `composite`. The callers below then take their composite forms.
 */
function fused(op: string, inputs: tf.Tensor[], outputs: number, attrs?: (b: NativeBinding) => TfeAttr[], composite = false): tf.Tensor[] | undefined {
  const be = composite ? undefined : native();
  if (!be || !srpoKernelAvailable(op)) return undefined;
  return be.executeMultipleOutputs(op, attrs?.(be.binding) ?? [], inputs, outputs);
}

/**
 * GELU (tanh form) in one pass over x (`SrpoGelu`), or undefined where not available.
 * Pair it with {@link geluGrad}. Tape-free like native-ops' `matMul2d`.
 */
export function geluFused(x: tf.Tensor, composite = false): tf.Tensor | undefined {
  return fused('SrpoGelu', [x], 1, undefined, composite)?.[0];
}

/** `dy · gelu′(x)` in one pass (`SrpoGeluGrad`), for a forward that took {@link geluFused}. */
export function geluGrad(x: tf.Tensor, dy: tf.Tensor): tf.Tensor {
  return fusedPair('SrpoGeluGrad', [x, dy], 1)[0];
}

/**
 * Layer-norm statistics of each row of `x` `[N, D]`: `x̂ = (x − μ)·r` and `r = 1/√(σ² + eps)`
 * `[N, 1]` (biased variance), in one kernel (`SrpoLayerNorm`). Undefined where not available.
 */
export function layerNormStats(x: tf.Tensor2D, eps: number): { xhat: tf.Tensor2D; rstd: tf.Tensor2D } | undefined {
  const out = fused('SrpoLayerNorm', [x], 2, (b) => [{ name: 'eps', type: b.TF_ATTR_FLOAT, value: eps }]);
  return out && { xhat: out[0] as tf.Tensor2D, rstd: out[1] as tf.Tensor2D };
}

/**
 * The layer-norm backward for a row-centred `dx̂` (see normLinear): `dx = (dx̂ − x̂·mean(dx̂∘x̂))·r`
 * per row, in one kernel (`SrpoLayerNormGrad`). Undefined where not available.
 */
export function layerNormGrad(dxhat: tf.Tensor2D, xhat: tf.Tensor2D, rstd: tf.Tensor2D): tf.Tensor2D | undefined {
  return fused('SrpoLayerNormGrad', [dxhat, xhat, rstd], 1)?.[0] as tf.Tensor2D | undefined;
}

/** `softmax(scores + mask)` over the last axis, the `[T, K]` mask broadcast over the leading axes (`SrpoMaskedSoftmax`). */
export function maskedSoftmax<T extends tf.Tensor>(scores: T, mask: tf.Tensor2D): T | undefined {
  return fused('SrpoMaskedSoftmax', [scores, mask], 1)?.[0] as T | undefined;
}

/** The softmax backward `p ∘ (dp − Σ dp∘p)` over the last axis (`SrpoSoftmaxGrad`). */
export function softmaxGrad<T extends tf.Tensor>(p: T, dp: T): T | undefined {
  return fused('SrpoSoftmaxGrad', [p, dp], 1)?.[0] as T | undefined;
}

/**
 * Where causal attention finds its heads (see {@link attentionFused}): q, k and v are
 * `[B·T, columns]` projection rows; head h of q sits at columns `qCol + h·headDim`, key/value
 * head g of k and v at `kCol + g·headDim` and `vCol + g·headDim`.
 */
export interface AttentionLayout {
  batch: number;
  heads: number;
  /** Key/value heads; divides `heads` (grouped-query attention), equal for multi-head. */
  kvHeads: number;
  headDim: number;
  qCol: number;
  kCol: number;
  vCol: number;
}

function attentionAttrs(l: AttentionLayout): (b: NativeBinding) => TfeAttr[] {
  return (b) =>
    (
      [
        ['batch', l.batch],
        ['heads', l.heads],
        ['kv_heads', l.kvHeads],
        ['head_dim', l.headDim],
        ['q_col', l.qCol],
        ['k_col', l.kCol],
        ['v_col', l.vCol],
      ] as const
    ).map(([name, value]) => ({ name, type: b.TF_ATTR_INT, value }));
}

/**
 * Causal attention in one kernel (`SrpoAttention`, attention-kernels.h), straight from the
 * projection rows, no transposes: per batch row and head, `p = softmax(q kᵀ)` over j ≤ i and
 * `o = p v`, q already scaled by 1/√d; query head h reads key/value head ⌊h·kvHeads/heads⌋.
 * Returns o `[B·T, heads·headDim]` and p `[B, heads, T, T]` (zero above the diagonal; the
 * backward reads it), or undefined where not available. q, k and v may be one tensor (the fused
 * `[q | k | v]` projection) at different columns; pair it with {@link attentionGrad} or
 * {@link attentionGradPacked}.
 */
export function attentionFused(
  q: tf.Tensor2D,
  k: tf.Tensor2D,
  v: tf.Tensor2D,
  layout: AttentionLayout,
  composite = false,
): { o: tf.Tensor2D; p: tf.Tensor4D } | undefined {
  const out = fused('SrpoAttention', [q, k, v], 2, attentionAttrs(layout), composite);
  return out && { o: out[0] as tf.Tensor2D, p: out[1] as tf.Tensor4D };
}

/**
 * One decode step's attention (`SrpoDecodeAttention`, attention-kernels.h): row b's query heads
 * `q` `[B, H·d]` (pre-scaled by 1/√d, after RoPE) against its cached keys and values, the
 * concatenation along the columns of `keys`/`values` `[B, H_kv, W₁, d]` and `recentKeys`/`recentValues`
 * `[B, H_kv, W₂, d]` (W₂ may be 0), of which row b's valid columns are `start[b]` onwards (left
 * padding); query head h reads key/value head ⌊h / (H / H_kv)⌋. Returns `[B, H·d]`, summed in
 * {@link attentionFused}'s order for the same query position, or undefined where not available.
 */
export function decodeAttentionFused(
  q: tf.Tensor2D,
  keys: tf.Tensor4D,
  values: tf.Tensor4D,
  recentKeys: tf.Tensor4D,
  recentValues: tf.Tensor4D,
  start: tf.Tensor1D,
  composite = false,
): tf.Tensor2D | undefined {
  return fused('SrpoDecodeAttention', [q, keys, values, recentKeys, recentValues, start], 1, undefined, composite)?.[0] as tf.Tensor2D | undefined;
}

/**
 * A decode step's cache append (`SrpoKvAppend`, transformer-ops.h): `keys`/`values` `[B, H_kv, W, d]`
 * (W may be 0) with the new column `newKeys`/`newValues` `[B, H_kv·d]` after each row's last:
 * `[B, H_kv, W + 1, d]` each, the inputs' values copied. Undefined where not available (then a
 * reshape and a concat per tensor do the same).
 */
export function kvAppendFused(
  keys: tf.Tensor4D,
  values: tf.Tensor4D,
  newKeys: tf.Tensor2D,
  newValues: tf.Tensor2D,
  composite = false,
): [tf.Tensor4D, tf.Tensor4D] | undefined {
  return fused('SrpoKvAppend', [keys, values, newKeys, newValues], 2, undefined, composite) as [tf.Tensor4D, tf.Tensor4D] | undefined;
}

/**
 * A decode step's attention inputs in one op (`SrpoDecodeQkv`, decode-ops.h), row b of x `[B, D]`
 * at the position of row b of `cos`/`sin` `[B, d]`: `q = RoPE(x·Wqᵀ)·qScale` `[B, H·d]`, and the
 * cache `keys`/`values` `[B, H_kv, W, d]` with `RoPE(x·Wkᵀ)` and `x·Wvᵀ` appended `[B, H_kv, W + 1, d]`.
 * Bit for bit {@link matMul2d} (`SrpoMatMul`, transposed weights), {@link ropeFused} and
 * {@link kvAppendFused}. Undefined where not available; the caller checks that the products run
 * `SrpoMatMul` (`srpoMatMulRouted`), as this op's do.
 */
export function decodeQkvFused(
  x: tf.Tensor2D,
  wq: tf.Tensor2D,
  wk: tf.Tensor2D,
  wv: tf.Tensor2D,
  cos: tf.Tensor2D,
  sin: tf.Tensor2D,
  keys: tf.Tensor4D,
  values: tf.Tensor4D,
  qScale: number,
): [tf.Tensor2D, tf.Tensor4D, tf.Tensor4D] | undefined {
  const attrs = (b: NativeBinding): TfeAttr[] => [{ name: 'q_scale', type: b.TF_ATTR_FLOAT, value: qScale }];
  return fused('SrpoDecodeQkv', [x, wq, wk, wv, cos, sin, keys, values], 3, attrs) as [tf.Tensor2D, tf.Tensor4D, tf.Tensor4D] | undefined;
}

/**
 * A Llama MLP's gate in one op (`SrpoGateUp`, decode-ops.h): `SiLU(x·Wgᵀ) ⊙ (x·Wuᵀ)` `[N, F]` from
 * x `[N, D]` and the weights `[F, D]`, bit for bit two {@link matMul2d} (`SrpoMatMul`, transposed
 * weights) and {@link swiGluFused}. Undefined where not available; the caller checks that the
 * products run `SrpoMatMul` (`srpoMatMulRouted`). Not recorded on the gradient tape.
 */
export function gateUpFused(x: tf.Tensor2D, wg: tf.Tensor2D, wu: tf.Tensor2D): tf.Tensor2D | undefined {
  return fused('SrpoGateUp', [x, wg, wu], 1)?.[0] as tf.Tensor2D | undefined;
}

/** The backward of {@link attentionFused} (`SrpoAttentionGrad`): dq, dk and dv shaped like q, k and v. */
export function attentionGrad(
  dO: tf.Tensor2D,
  q: tf.Tensor2D,
  k: tf.Tensor2D,
  v: tf.Tensor2D,
  p: tf.Tensor4D,
  layout: AttentionLayout,
): [tf.Tensor2D, tf.Tensor2D, tf.Tensor2D] {
  return fusedPair('SrpoAttentionGrad', [dO, q, k, v, p], 3, attentionAttrs(layout)) as [tf.Tensor2D, tf.Tensor2D, tf.Tensor2D];
}

/**
 * The backward of {@link attentionFused} where q, k and v were one tensor qkv at disjoint columns
 * (`SrpoAttentionGradPacked`): its gradient, shaped like qkv, in one tensor (no concat).
 */
export function attentionGradPacked(dO: tf.Tensor2D, qkv: tf.Tensor2D, p: tf.Tensor4D, layout: AttentionLayout): tf.Tensor2D {
  return fusedPair('SrpoAttentionGradPacked', [dO, qkv, qkv, qkv, p], 1, attentionAttrs(layout))[0] as tf.Tensor2D;
}

/**
 * `a + (b + row)` in one pass (`SrpoAddResidualBias`): a residual `[..., C]`, a product of its
 * shape and its bias `[C]`, bit for bit the two float32 adds. Undefined where not available.
 */
export function addResidualBias<T extends tf.Tensor>(a: T, b: T, row: tf.Tensor1D): T | undefined {
  return fused('SrpoAddResidualBias', [a, b, row], 1)?.[0] as T | undefined;
}

/**
 * normLinear's folded weights in one kernel (`SrpoNormFold`, norm-fold-kernels.h):
 * `W_c = (diag(g)·W − 1·mean_rows(diag(g)·W)) ∘ s` `[D, O]`, its transpose `[O, D]` (for the
 * backward's product) and `c = (β·W + b) ∘ s` `[1, O]`, bias b and column scale s optional. Undefined where not available; pair it with {@link normFoldGrad}.
 */
export function normFold(
  w: tf.Tensor2D,
  gain: tf.Tensor1D,
  shift: tf.Tensor1D,
  bias: tf.Tensor1D | undefined,
  scale: tf.Tensor1D | undefined,
): { wc: tf.Tensor2D; c: tf.Tensor2D; wcT: tf.Tensor2D } | undefined {
  // Absent optional inputs: the op reads nothing from them (has_bias / has_scale false), any float tensor will do.
  const out = fused('SrpoNormFold', [w, gain, shift, bias ?? gain, scale ?? gain], 3, normFoldAttrs(bias !== undefined, scale !== undefined));
  return out && { wc: out[0] as tf.Tensor2D, c: out[1] as tf.Tensor2D, wcT: out[2] as tf.Tensor2D };
}

/**
 * The backward of {@link normFold} (`SrpoNormFoldGrad`), from `dW_c` `[D, O]` and `dc` `[O]`: the
 * gradients of gain and shift `[D]`, of W `[D, O]` and of the bias `[O]` (`dc ∘ s`).
 */
export function normFoldGrad(
  dwc: tf.Tensor2D,
  dc: tf.Tensor1D,
  w: tf.Tensor2D,
  gain: tf.Tensor1D,
  shift: tf.Tensor1D,
  scale: tf.Tensor1D | undefined,
): { dGain: tf.Tensor1D; dShift: tf.Tensor1D; dW: tf.Tensor2D; dBias: tf.Tensor1D } {
  const [dGain, dShift, dW, dBias] = fusedPair('SrpoNormFoldGrad', [dwc, dc, w, gain, shift, scale ?? gain], 4, normFoldAttrs(false, scale !== undefined));
  return { dGain: dGain as tf.Tensor1D, dShift: dShift as tf.Tensor1D, dW: dW as tf.Tensor2D, dBias: dBias as tf.Tensor1D };
}

function normFoldAttrs(bias: boolean, scale: boolean): (b: NativeBinding) => TfeAttr[] {
  return (b) => [
    { name: 'has_bias', type: b.TF_ATTR_BOOL, value: bias },
    { name: 'has_scale', type: b.TF_ATTR_BOOL, value: scale },
  ];
}

/**
 * A backward kernel whose forward took its fused pair: run it even if the switch flipped in
 * between (the saved tensors are the fused forward's), and fail loudly where it is missing.
 */
function fusedPair(op: string, inputs: tf.Tensor[], outputs: number, attrs?: (b: NativeBinding) => TfeAttr[]): tf.Tensor[] {
  if (!srpoKernelRegistered(op)) throw new Error(`${op} is not registered: it pairs only with a fused forward`);
  const be = tf.backend() as unknown as NativeBackend;
  return be.executeMultipleOutputs(op, attrs?.(be.binding) ?? [], inputs, outputs);
}

/**
 * RMSNorm of each row of x `[N, D]` with weight w `[D]`: `y = w ⊙ x·r`, `r = 1/√(mean(x²) + eps)`
 * `[N, 1]` (`SrpoRmsNorm`), or undefined where not available. Pair it with {@link rmsNormGrad}.
 */
export function rmsNormFused(x: tf.Tensor2D, w: tf.Tensor1D, eps: number, composite = false): { y: tf.Tensor2D; rstd: tf.Tensor2D } | undefined {
  const out = fused('SrpoRmsNorm', [x, w], 2, (b) => [{ name: 'eps', type: b.TF_ATTR_FLOAT, value: eps }], composite);
  return out && { y: out[0] as tf.Tensor2D, rstd: out[1] as tf.Tensor2D };
}

/** The RMSNorm backward (`SrpoRmsNormGrad`): `dx` `[N, D]` and the weight's `dw` `[D]`, for a forward that took {@link rmsNormFused}. */
export function rmsNormGrad(dy: tf.Tensor2D, x: tf.Tensor2D, w: tf.Tensor1D, rstd: tf.Tensor2D): { dx: tf.Tensor2D; dw: tf.Tensor1D } {
  const [dx, dw] = fusedPair('SrpoRmsNormGrad', [dy, x, w, rstd], 2);
  return { dx: dx as tf.Tensor2D, dw: dw as tf.Tensor1D };
}

/** SwiGLU's gate `SiLU(g) ⊙ u` in one pass (`SrpoSwiGlu`), or undefined where not available. Pair it with {@link swiGluGrad}. */
export function swiGluFused(g: tf.Tensor2D, u: tf.Tensor2D, composite = false): tf.Tensor2D | undefined {
  return fused('SrpoSwiGlu', [g, u], 1, undefined, composite)?.[0] as tf.Tensor2D | undefined;
}

/** The SwiGLU backward (`SrpoSwiGluGrad`): `dg` and `du`, for a forward that took {@link swiGluFused}. */
export function swiGluGrad(g: tf.Tensor2D, u: tf.Tensor2D, dy: tf.Tensor2D): { dg: tf.Tensor2D; du: tf.Tensor2D } {
  const [dg, du] = fusedPair('SrpoSwiGluGrad', [g, u, dy], 2);
  return { dg: dg as tf.Tensor2D, du: du as tf.Tensor2D };
}

/**
 * Rotary embedding on projection rows x `[B·T, H·d]` (row b·T + t is position t), times
 * `scale`, with tables `[T, d]` (`SrpoRope`); `inverse` rotates by −sin (the backward). Undefined
 * where not available.
 */
export function ropeFused(x: tf.Tensor2D, cos: tf.Tensor2D, sin: tf.Tensor2D, scale: number, inverse: boolean, composite = false): tf.Tensor2D | undefined {
  const attrs = (b: NativeBinding): TfeAttr[] => [
    { name: 'scale', type: b.TF_ATTR_FLOAT, value: scale },
    { name: 'inverse', type: b.TF_ATTR_BOOL, value: inverse },
  ];
  return fused('SrpoRope', [x, cos, sin], 1, attrs, composite)?.[0] as tf.Tensor2D | undefined;
}

/**
 * Log-probability of each row's target, `x_t − lse`, `lse = log Σ_j exp(x_j)` `[N]`, from logits
 * `[N, V]` and int32 targets `[N]` (`SrpoTargetLogProbs`), or undefined where not available.
 * Pair it with {@link targetLogProbsGrad}: the backward needs `lse` and the logits, where
 * {@link targetLogProbs} keeps a `[N, V]` gradient table.
 */
export function targetLogProbsFused(logits: tf.Tensor2D, targets: tf.Tensor1D, composite = false): { logp: tf.Tensor1D; lse: tf.Tensor1D } | undefined {
  const out = fused('SrpoTargetLogProbs', [logits, targets], 2, undefined, composite);
  return out && { logp: out[0] as tf.Tensor1D, lse: out[1] as tf.Tensor1D };
}

/** `dy ⊗ (onehot(t) − softmax(x))` `[N, V]` from the logits, targets and the forward's lse (`SrpoTargetLogProbsGrad`). */
export function targetLogProbsGrad(logits: tf.Tensor2D, targets: tf.Tensor1D, lse: tf.Tensor1D, dy: tf.Tensor): tf.Tensor2D {
  return fusedPair('SrpoTargetLogProbsGrad', [logits, targets, lse, dy], 1)[0] as tf.Tensor2D;
}

/** The scalars of one Adam step for {@link adamUpdateFused}, as adam-optimizer.ts forms them. */
export interface AdamStepScalars {
  /** Global-norm clip threshold; ≤ 0 or not finite: no clipping. */
  maxGradNorm: number;
  beta1: number;
  beta2: number;
  /** `lr·√(1 − β2ᵗ)/(1 − β1ᵗ)`. */
  stepSize: number;
  /** `ε·√(1 − β2ᵗ)`. */
  epsHat: number;
  /** Decoupled (AdamW) decay factor `lr·weightDecay`; 0: no decay term. */
  decay: number;
}

/**
 * One whole Adam step in one kernel (`SrpoAdam`, optimizer-kernels.h): the global-norm clip, the
 * moment update and every weight's update, from the gradients and weights as lists (in canonical
 * order; gradient i of weight i's shape) and the flat moments m, v `[total]` (the weights'
 * concatenation order). Undefined where not available (the caller then takes its composite
 * form). With g, w the concatenations, `norm = √Σg²` and `coef = min(1, maxGradNorm/(norm +
 * 1e-6))` (1 without clipping): `m' = β1·m + g·(coef·(1 − β1))`, `v' = β2·v + g²·(coef²·(1 −
 * β2))`, `delta = m'·stepSize/(√v' + epsHat)` and `w' = (w − delta) − w·decay` (the decay term
 * only for decay ≠ 0; the pre-update weight, as torch.optim.AdamW). `norm` is the pre-clip norm,
 * summed in fixed blocks of the concatenation so that it depends neither on the core count nor
 * on how the weights are cut into tensors. Returns m', v', norm and the new weights (each of its
 * weight's shape), all new tensors for the caller to assign and dispose. No concat, split or
 * per-weight op around the kernel: one dispatch per step. Tape-free like native-ops' `matMul2d`.
 */
export function adamUpdateFused(
  grads: readonly tf.Tensor[],
  weights: readonly tf.Tensor[],
  m: tf.Tensor1D,
  v: tf.Tensor1D,
  s: AdamStepScalars,
): { m: tf.Tensor1D; v: tf.Tensor1D; norm: tf.Scalar; weights: tf.Tensor[] } | undefined {
  const n = weights.length;
  if (n === 0 || grads.length !== n || !nativeKernelsActive() || !srpoKernelAvailable('SrpoAdam')) return undefined;
  const clip = s.maxGradNorm > 0 && Number.isFinite(s.maxGradNorm);
  // A float input, not attributes: stepSize and epsHat change every step, and TensorFlow
  // builds (and caches) a kernel per distinct set of attribute values. 1 − β is formed here
  // in float64 and rounded once, as the composite's scalar operands are.
  const p = tf.tensor1d([clip ? s.maxGradNorm : 0, s.beta1, 1 - s.beta1, s.beta2, 1 - s.beta2, s.stepSize, s.epsHat, s.decay], 'float32');
  try {
    // List inputs go in flat, with their length as the N attribute (as tfjs-node runs ConcatV2).
    const out = fused('SrpoAdam', [...grads, ...weights, m, v, p], n + 3, (b) => [{ name: 'N', type: b.TF_ATTR_INT, value: n }])!;
    return { m: out[0] as tf.Tensor1D, v: out[1] as tf.Tensor1D, norm: out[2] as tf.Scalar, weights: out.slice(3) };
  } finally {
    p.dispose();
  }
}
