import * as tf from '@tensorflow/tfjs';
import {
  addResidualBias,
  attentionFused,
  attentionGradPacked,
  type AttentionLayout,
  batchMatMul,
  gatherRowsRaw,
  geluFused,
  geluGrad,
  layerNormGrad,
  layerNormStats,
  maskedSoftmax,
  matMul2d,
  matMul2dBias,
  matMul2dBiasResidual,
  matMul2dColumnSum,
  nativeRowKernels,
  normFold,
  normFoldGrad,
  rowMean,
  scatterRowsRaw,
  sigmoidGrad,
  softmaxGrad,
  sumToLastAxis,
  targetLogProbs,
  targetLogProbsFused,
  targetLogProbsGrad,
} from '@srpo/kernels';

/**
 * Differentiable building blocks of the transformer, each with a hand-written
 * gradient (`tf.customGrad`). Autodiff through the composite forms records
 * 2–4× more ops, and tfjs pays per op (on the native backend an elementwise op
 * over a [2048, 128] activation costs ~50–100 µs, mostly fixed); these keep
 * forward + backward near the minimum number of passes over activations and
 * route the hot spots to single native kernels (@srpo/kernels: native-ops.ts and fused-ops.ts).
 *
 * Activations are 2-D `[N, ·]` (rows = batch·time) unless stated otherwise.
 */

type Input = tf.Tensor | tf.GradSaveFunc;

/**
 * Residual projection `h + x · W + b`. x `[N, I]`, W `[I, O]`, b `[O]`, h `[N, O]` → `[N, O]`.
 * One tape entry: the residual gradient passes through untouched, where a
 * separate `tf.add` would record two reshapes for it.
 */
export function residualLinear(h: tf.Tensor2D, x: tf.Tensor2D, w: tf.Tensor2D, b: tf.Tensor1D): tf.Tensor2D {
  const fn = tf.customGrad((...args: Input[]) => {
    const [hi, xi, wi, bi, save] = args as [tf.Tensor2D, tf.Tensor2D, tf.Tensor2D, tf.Tensor1D, tf.GradSaveFunc];
    save([xi, wi]);
    // One op with the products' epilogue where SrpoMatMul runs them, else the product and one fused add.
    const fused = matMul2dBiasResidual(xi, wi, bi, hi);
    const product = fused ? undefined : matMul2d(xi, wi);
    return {
      value: fused ?? addResidualBias(hi, product as tf.Tensor2D, bi) ?? tf.add(hi, tf.add(product as tf.Tensor2D, bi)),
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
        const [sx, sw] = saved as [tf.Tensor2D, tf.Tensor2D];
        const d = dy as tf.Tensor2D;
        const [dW, dBias] = matMul2dColumnSum(sx, d, true);
        return [d, matMul2d(d, sw, false, true), dW, dBias];
      },
    };
  });
  return fn(h, x, w, b) as tf.Tensor2D;
}

/**
 * Pre-norm projection `LN(x; g, β) · W + b` (layer norm over the last axis,
 * biased variance), computed as `x̂ · W_c + c` with the gain and shift folded
 * into the weights:
 *
 *   W' = diag(g) · W,   W_c = (W' − 1·mean_rows(W')) ∘ s,   c = (β · W + b) ∘ s
 *
 * where s is an optional constant column scale. Folding removes two passes
 * over the activations in each direction. Centring W' changes nothing forward
 * (x̂ rows sum to 0, so x̂ · 1 = 0) but makes the gradient reaching x̂
 * row-centred, which drops the `mean(dx̂)` term from the layer-norm backward.
 * Forward and backward (all five gradients) are written out by hand so that the
 * whole projection is one tape entry; row means are matrix–vector products,
 * which TensorFlow runs several times faster than a `Mean` reduction here.
 *
 * @param x `[N, D]`; gain, shift `[D]`; w `[D, O]`; bias `[O]` or none
 * @param consts cached constants for width D (see {@link normConstants})
 * @param colScale optional constant `[O]` multiplier (attention's 1/√d_h on the q columns, 1/temperature on logits)
 * @returns `[N, O]`
 */
export function normLinear(
  x: tf.Tensor2D,
  gain: tf.Tensor1D,
  shift: tf.Tensor1D,
  w: tf.Tensor2D,
  bias: tf.Tensor1D | undefined,
  eps: number,
  consts: NormConstants,
  colScale?: tf.Tensor1D,
): tf.Tensor2D {
  const [d, o] = w.shape;
  const { meanCol } = consts;
  const fn = tf.customGrad((...args: Input[]) => {
    const [xi, gi, si, wi, bi] = args as tf.Tensor2D[]; // x, gain, shift, W, bias
    const save = args[args.length - 1] as tf.GradSaveFunc;
    // Row statistics (large, [N, D]): one fused kernel where available.
    const { xhat, rstd } = layerNormStats(xi, eps) ?? compositeNormStats(xi, meanCol, eps);
    // The folding as one op each way where available (SrpoNormFold, norm-fold-kernels.h).
    const g1 = gi as unknown as tf.Tensor1D;
    const s1 = si as unknown as tf.Tensor1D;
    const fold = normFold(wi, g1, s1, bias ? (bi as unknown as tf.Tensor1D) : undefined, colScale);
    if (fold) {
      save([xhat, rstd, fold.wcT, wi, g1, s1, ...(colScale ? [colScale] : [])]);
      return {
        value: matMul2dBias(xhat, fold.wc, fold.c),
        gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
          const [sxhat, srstd, swcT, sw, sg, ss, sscale] = saved;
          const g = dy as tf.Tensor2D;
          const dxhat = matMul2d(g, swcT as tf.Tensor2D); // row-centred because W_c is column-centred
          const dx =
            layerNormGrad(dxhat, sxhat as tf.Tensor2D, srstd as tf.Tensor2D) ??
            layerNormGradComposite(dxhat, sxhat as tf.Tensor2D, srstd as tf.Tensor2D, meanCol);
          const [dwc, dc] = matMul2dColumnSum(sxhat as tf.Tensor2D, g, true);
          const f = normFoldGrad(dwc, dc, sw as tf.Tensor2D, sg as tf.Tensor1D, ss as tf.Tensor1D, sscale as tf.Tensor1D | undefined);
          const grads = [dx, f.dGain, f.dShift, f.dW];
          if (bias) grads.push(f.dBias);
          return grads;
        },
      };
    }
    // Folded weights (small). Gain as a column and shift as a row serve both passes.
    const gCol = gi.reshape<tf.Tensor2D>([d, 1]);
    const sRow = si.reshape<tf.Tensor2D>([1, d]);
    const wg = tf.mul<tf.Tensor2D>(wi, gCol);
    let wc = tf.sub<tf.Tensor2D>(wg, matMul2d(meanCol, wg, true, false)); // minus [1, O] column means
    let c = matMul2d(sRow, wi) as tf.Tensor; // [1, O]
    if (bias) c = tf.add(c, bi);
    if (colScale) {
      wc = tf.mul(wc, colScale);
      c = tf.mul(c, colScale);
    }
    // colScale may be a caller temporary that is gone by the time gradients run: save it too.
    save([xhat, rstd, wc, wi, gCol, sRow, ...(colScale ? [colScale] : [])]);
    return {
      value: tf.add(matMul2d(xhat, wc), c),
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
        const [sxhat, srstd, swc, sw, sgCol, ssRow, sscale] = saved as tf.Tensor2D[];
        const g = dy as tf.Tensor2D;
        const dxhat = matMul2d(g, swc, false, true); // row-centred because swc is column-centred
        // dx = rstd · (dx̂ − mean(dx̂) − x̂ · mean(dx̂ ∘ x̂)), with mean(dx̂) = 0
        const dx = layerNormGrad(dxhat, sxhat, srstd) ?? layerNormGradComposite(dxhat, sxhat, srstd, meanCol);
        let dwc = matMul2d(sxhat, g, true, false); // [D, O]
        let dc = sumToLastAxis(g); // [O]
        if (sscale) {
          dwc = tf.mul(dwc, sscale);
          dc = tf.mul(dc, sscale);
        }
        // Through the centring (a symmetric projection) and the gain.
        const dwg = tf.sub(dwc, matMul2d(meanCol, dwc, true, false));
        const dGain = tf.sum(tf.mul(dwg, sw), 1);
        // Through c = β·W: dβ = W·dc, dW += β ⊗ dc.
        const dcRow = dc.reshape<tf.Tensor2D>([1, o]);
        const dShift = matMul2d(sw, dcRow, false, true).reshape([d]);
        const dW = tf.add(tf.mul(dwg, sgCol), matMul2d(ssRow, dcRow, true, false));
        const grads = [dx, dGain, dShift, dW];
        if (bias) grads.push(dc);
        return grads;
      },
    };
  });
  return (bias ? fn(x, gain, shift, w, bias) : fn(x, gain, shift, w)) as tf.Tensor2D;
}

/** The layer-norm backward of {@link normLinear} from composite ops, for a row-centred dx̂: `(dx̂ − x̂ · mean(dx̂ ∘ x̂)) · r`. */
function layerNormGradComposite(dxhat: tf.Tensor2D, xhat: tf.Tensor2D, rstd: tf.Tensor2D, meanCol: tf.Tensor2D): tf.Tensor2D {
  return tf.mul<tf.Tensor2D>(tf.sub(dxhat, tf.mul(xhat, rowMean(tf.mul<tf.Tensor2D>(dxhat, xhat), meanCol))), rstd);
}

/** Row statistics of {@link normLinear} from composite ops: `x̂ = (x − μ)·r`, `r = 1/√(σ² + eps)` `[N, 1]`. */
function compositeNormStats(x: tf.Tensor2D, meanCol: tf.Tensor2D, eps: number): { xhat: tf.Tensor2D; rstd: tf.Tensor2D } {
  const xc = tf.sub(x, rowMean(x, meanCol));
  const rstd = tf.rsqrt(tf.add(rowMean(tf.square(xc) as tf.Tensor2D, meanCol), eps)) as tf.Tensor2D; // [N, 1]
  return { xhat: tf.mul<tf.Tensor2D>(xc, rstd), rstd };
}

/** Constants {@link normLinear} needs for a width D; cache them (the model does). */
export interface NormConstants {
  /** `[D, 1]` filled with 1/D: `x · meanCol` is the row mean, as a matrix–vector product. */
  meanCol: tf.Tensor2D;
}

export function normConstants(d: number): NormConstants {
  return { meanCol: tf.fill<tf.Rank.R2>([d, 1], 1 / d) };
}

const GELU_C = Math.sqrt(2 / Math.PI);
const GELU_A = 0.044715;

/**
 * GELU, tanh approximation (GPT-2; `F.gelu(x, approximate='tanh')`):
 * `x · ½(1 + tanh(u))`, u = c(x + a x³), evaluated as `x · σ(2u)` (the same
 * function: ½(1 + tanh u) = σ(2u)). The derivative is formed in the forward
 * pass from the values already at hand, so the backward is one multiply and
 * only one activation-sized tensor is kept: 12 passes over the activations in
 * all, where autodiff of the textbook form records about 20. With the project's fused
 * kernels (fused-ops' geluFused and geluGrad) forward and backward are one pass each.
 */
export function gelu(x: tf.Tensor2D, composite = false): tf.Tensor2D {
  const fn = tf.customGrad((...args: Input[]) => {
    const [xi, save] = args as [tf.Tensor2D, tf.GradSaveFunc];
    const fused = geluFused(xi, composite);
    if (fused) {
      // The fused backward recomputes σ from x: nothing activation-sized is written for it.
      save([xi]);
      return { value: fused, gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => geluGrad(saved[0], dy) };
    }
    const x2 = tf.square(xi);
    const s = tf.sigmoid(tf.mul(xi, tf.add(tf.mul(x2, 2 * GELU_C * GELU_A), 2 * GELU_C))); // σ(v), v = 2u
    // y′ = σ(v) + x·σ(v)(1 − σ(v))·v′,  v′ = 2c(1 + 3a x²)
    const xdv = tf.mul(xi, tf.add(tf.mul(x2, 6 * GELU_C * GELU_A), 2 * GELU_C));
    save([tf.add(s, sigmoidGrad(s, xdv))]);
    return {
      value: tf.mul(xi, s),
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => tf.mul(dy, saved[0]),
    };
  });
  return fn(x) as tf.Tensor2D;
}

/**
 * Token embedding plus learned positions.
 *
 * @param ids int32 `[B·T]` token ids (not differentiated)
 * @param table `[V, D]` embedding matrix
 * @param positions `[T, D]` position embeddings for the first T positions
 * @returns `[B·T, D]`
 */
export function embed(ids: tf.Tensor1D, table: tf.Tensor2D, positions: tf.Tensor2D, batch: number, oneHot: boolean): tf.Tensor2D {
  const [v, d] = table.shape;
  const t = positions.shape[0];
  const fn = tf.customGrad((...args: Input[]) => {
    const [ti, pi, save] = args as [tf.Tensor2D, tf.Tensor2D, tf.GradSaveFunc];
    // Rows copied out and their gradient scattered back by the project's kernels where loaded
    // (SrpoGatherRows, SrpoScatterRows: a copy each way, the bits of the one-hot product for
    // finite weights). Elsewhere, a one-hot matmul for small vocabularies: forward and gradient
    // are one matmul each, where gather's gradient is a scatter (UnsortedSegmentSum).
    const hot = oneHot && !nativeRowKernels() ? (tf.oneHot(ids, v, 1, 0, 'float32') as tf.Tensor2D) : undefined;
    const rows = hot ? matMul2d(hot, ti) : gatherRowsRaw(ti, ids);
    // ids belong to the caller's scope, which may be gone when gradients run: keep what the backward needs.
    save([hot ?? ids]);
    return {
      value: tf.add(rows.reshape([batch, t * d]), pi.reshape([t * d])).reshape([batch * t, d]),
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
        const g = dy as tf.Tensor2D;
        const dTable = hot ? matMul2d(saved[0] as tf.Tensor2D, g, true, false) : scatterRowsRaw(g, saved[0] as tf.Tensor1D, v);
        return [dTable, sumToLastAxis(g.reshape([batch, t * d])).reshape([t, d])];
      },
    };
  });
  return fn(table, positions) as tf.Tensor2D;
}

/**
 * Causal multi-head self-attention core, from the fused projection to the
 * per-head outputs merged back to rows.
 *
 * With the project's kernels (`SrpoAttention`, attention-kernels.h) forward and backward are one
 * op each, reading the heads in place from qkv's columns: no transposes, no unstack or stack,
 * and the masked half of the scores is skipped. The kernel applies the causal mask by position
 * (j ≤ i), which is what `mask` holds; the composite path adds `mask` itself.
 *
 * @param qkv `[B·T, 3·D]`, columns `[q | k | v]`, each split into heads of `D/H`;
 *   q must already carry the 1/√d_h scale (folded into its projection).
 * @param mask `[T, T]` additive causal mask (0 on and below the diagonal, large negative above)
 * @returns `[B·T, D]`
 */
export function causalAttention(qkv: tf.Tensor2D, mask: tf.Tensor2D, batch: number, heads: number): tf.Tensor2D {
  const [n, d3] = qkv.shape;
  const t = n / batch;
  const d = d3 / 3;
  const dh = d / heads;
  const layout: AttentionLayout = { batch, heads, kvHeads: heads, headDim: dh, qCol: 0, kCol: d, vCol: 2 * d };
  const fn = tf.customGrad((...args: Input[]) => {
    const [x, save] = args as [tf.Tensor2D, tf.GradSaveFunc];
    const fused = attentionFused(x, x, x, layout);
    if (fused) {
      save([x, fused.p]);
      return {
        value: fused.o,
        gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => attentionGradPacked(dy as tf.Tensor2D, saved[0] as tf.Tensor2D, saved[1] as tf.Tensor4D, layout),
      };
    }
    const [q, k, v] = tf.unstack(x.reshape([batch, t, 3, heads, dh]).transpose([2, 0, 3, 1, 4]), 0) as tf.Tensor4D[]; // [B, H, T, dh]
    const scores = batchMatMul(q, k, false, true);
    const p = maskedSoftmax(scores, mask) ?? (tf.softmax(tf.add(scores, mask)) as tf.Tensor4D); // [B, H, T, T]
    const o = batchMatMul(p, v); // [B, H, T, dh]
    save([q, k, v, p]);
    return {
      value: o.transpose([0, 2, 1, 3]).reshape([n, d]),
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
        const [sq, sk, sv, sp] = saved as tf.Tensor4D[];
        const dO = dy.reshape([batch, t, heads, dh]).transpose<tf.Tensor4D>([0, 2, 1, 3]);
        const dv = batchMatMul(sp, dO, true, false);
        const dp = batchMatMul(dO, sv, false, true);
        // softmax backward: p ∘ (dp − Σ_j dp_j p_j)
        const ds = softmaxGrad(sp, dp) ?? tf.mul<tf.Tensor4D>(sp, tf.sub(dp, tf.sum(tf.mul(dp, sp), -1, true)));
        const dq = batchMatMul(ds, sk);
        const dk = batchMatMul(ds, sq, true, false);
        return tf.stack([dq, dk, dv]).transpose([1, 3, 0, 2, 4]).reshape([n, d3]);
      },
    };
  });
  return fn(qkv) as tf.Tensor2D;
}

/**
 * `log softmax(logits)[target]` per row. logits `[N, V]`, targets int32 `[N]`
 * (not differentiated) → `[N]`.
 */
export function pickLogProbs(logits: tf.Tensor2D, targets: tf.Tensor1D): tf.Tensor1D {
  const fn = tf.customGrad((...args: Input[]) => {
    const [li, save] = args as [tf.Tensor2D, tf.GradSaveFunc];
    const fused = targetLogProbsFused(li, targets);
    if (fused) {
      // One number per row and the logits are all the backward reads: no [N, V] table is kept.
      save([li, targets, fused.lse]);
      return {
        value: fused.logp,
        gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => targetLogProbsGrad(saved[0] as tf.Tensor2D, saved[1] as tf.Tensor1D, saved[2] as tf.Tensor1D, dy),
      };
    }
    const { logp, dlogp } = targetLogProbs(li, targets);
    save([dlogp]);
    return {
      value: logp,
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => tf.mul(saved[0], tf.expandDims(dy, 1)),
    };
  });
  return fn(logits);
}
