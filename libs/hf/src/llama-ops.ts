import * as tf from '@tensorflow/tfjs';
import {
  attentionFused,
  attentionGrad,
  type AttentionLayout,
  batchMatMul,
  maskedSoftmax,
  matMul2d,
  rmsNormFused,
  rmsNormGrad,
  ropeFused,
  softmaxGrad,
  srpoKernelAvailable,
  sumToLastAxis,
  swiGluFused,
  swiGluGrad,
} from '@srpo/kernels';

/**
 * The Llama-family decoder's differentiable pieces, each one tape entry with a hand-written
 * gradient (`tf.customGrad`), as the project's own transformer has (transformer-ops.ts). Plain
 * autodiff of the same forward records 2–3× the ops and keeps every intermediate until the
 * backward ends. On tfjs-node with the project's fused kernels (native-ops) RMSNorm, the
 * SwiGLU gate and the rotary embedding are one pass each way; elsewhere (WebGPU, pure JS, the
 * kernels off) the same formulas run as composite tfjs ops.
 *
 * Frozen weights (a LoRA adapter attached: `trainable` false) are closed over rather than
 * passed in, so no gradient is formed for them: a frozen linear's backward is one product
 * instead of two.
 *
 * Activations are 2-D `[N, ·]`, rows = batch·time, unless stated otherwise.
 */

type Input = tf.Tensor | tf.GradSaveFunc;

/**
 * Runs `forward` as one tape entry over `inputs`, where `w` (and `b`) join the differentiated
 * inputs only while trainable. `forward` receives the tensors in the order x, w, b (b
 * omitted when absent) and returns the value and a gradient function that returns gradients
 * for all three (undefined for an absent b); the ones of frozen weights are not computed.
 */
function withWeights(
  x: tf.Tensor,
  w: tf.Variable | tf.Tensor,
  b: tf.Tensor | undefined,
  forward: (
    x: tf.Tensor,
    w: tf.Tensor,
    b: tf.Tensor | undefined,
    save: tf.GradSaveFunc,
  ) => { value: tf.Tensor; grads: (dy: tf.Tensor, saved: tf.Tensor[], need: { w: boolean; b: boolean }) => (tf.Tensor | undefined)[] },
): tf.Tensor {
  const trainW = (w as tf.Variable).trainable !== false;
  const trainB = b !== undefined && (b as tf.Variable).trainable !== false;
  const fn = tf.customGrad((...args: Input[]) => {
    const save = args[args.length - 1] as tf.GradSaveFunc;
    const xi = args[0] as tf.Tensor;
    const wi = trainW ? (args[1] as tf.Tensor) : w;
    const bi = trainB ? (args[trainW ? 2 : 1] as tf.Tensor) : b;
    const { value, grads } = forward(xi, wi, bi, save);
    return {
      value,
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
        const [dx, dw, db] = grads(dy, saved, { w: trainW, b: trainB });
        const out = [dx as tf.Tensor];
        if (trainW) out.push(dw as tf.Tensor);
        if (trainB) out.push(db as tf.Tensor);
        return out;
      },
    };
  });
  const inputs = [x, ...(trainW ? [w] : []), ...(trainB ? [b] : [])];
  return fn(...inputs);
}

/**
 * `x · Wᵀ + b` for a weight stored `[out, in]` (`nn.Linear`'s layout). x `[N, in]` → `[N, out]`.
 * Backward: dx = dy · W, dW = dyᵀ · x, db = Σ_rows dy. One `MatMul` each on tfjs-node.
 */
export function linear(x: tf.Tensor2D, w: tf.Tensor2D, b?: tf.Tensor1D): tf.Tensor2D {
  return withWeights(x, w, b, (xi, wi, bi, save) => {
    save([xi, wi]);
    const y = matMul2d(xi as tf.Tensor2D, wi as tf.Tensor2D, false, true);
    return {
      value: bi ? tf.add(y, bi) : y,
      grads: (dy, [sx, sw], need) => {
        const g = dy as tf.Tensor2D;
        return [matMul2d(g, sw as tf.Tensor2D), need.w ? matMul2d(g, sx as tf.Tensor2D, true, false) : undefined, need.b ? sumToLastAxis(g) : undefined];
      },
    };
  }) as tf.Tensor2D;
}

/**
 * RMSNorm(x) = w ⊙ x·r, r = 1/√(mean(x²) + ε) per row (Zhang & Sennrich 2019; transformers'
 * `LlamaRMSNorm`). x `[N, D]`, w `[D]` → `[N, D]`.
 * Backward with x̂ = x·r, g = dy ⊙ w: dx = r·(g − x̂·mean(g ⊙ x̂)), dw = Σ_rows dy ⊙ x̂.
 */
export function rmsNorm(x: tf.Tensor2D, w: tf.Tensor1D, eps: number): tf.Tensor2D {
  return withWeights(x, w, undefined, (xi, wi, _b, save) => {
    const x2 = xi as tf.Tensor2D;
    const w1 = wi as tf.Tensor1D;
    const fused = rmsNormFused(x2, w1, eps);
    const rstd = fused?.rstd ?? (tf.rsqrt(tf.add(tf.mean(tf.square(x2), -1, true), eps)) as tf.Tensor2D);
    save([x2, w1, rstd]);
    return {
      value: fused?.y ?? tf.mul(tf.mul(x2, rstd), w1),
      grads: (dy, [sx, sw, sr], need) => {
        if (fused) {
          const { dx, dw } = rmsNormGrad(dy as tf.Tensor2D, sx as tf.Tensor2D, sw as tf.Tensor1D, sr as tf.Tensor2D);
          return [dx, need.w ? dw : undefined];
        }
        const xhat = tf.mul(sx, sr);
        const g = tf.mul(dy, sw);
        const dx = tf.mul(tf.sub(g, tf.mul(xhat, tf.mean(tf.mul(g, xhat), -1, true))), sr);
        return [dx, need.w ? tf.sum(tf.mul(dy, xhat), 0) : undefined];
      },
    };
  }) as tf.Tensor2D;
}

/**
 * SwiGLU's gate: SiLU(g) ⊙ u = g·σ(g)·u (Shazeer 2020; transformers `act_fn(gate) * up`).
 * g, u `[N, F]` → `[N, F]`. Backward: du = dy·g·σ(g), dg = dy·u·σ(g)(1 + g(1 − σ(g))).
 */
export function swiGlu(g: tf.Tensor2D, u: tf.Tensor2D): tf.Tensor2D {
  const fn = tf.customGrad((...args: Input[]) => {
    const [gi, ui, save] = args as [tf.Tensor2D, tf.Tensor2D, tf.GradSaveFunc];
    save([gi, ui]);
    const fused = swiGluFused(gi, ui);
    return {
      value: fused ?? tf.mul(tf.mul(gi, tf.sigmoid(gi)), ui),
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
        const [sg, su] = saved as tf.Tensor2D[];
        if (fused) {
          const { dg, du } = swiGluGrad(sg, su, dy as tf.Tensor2D);
          return [dg, du];
        }
        const s = tf.sigmoid(sg);
        const du = tf.mul(dy, tf.mul(sg, s));
        const dg = tf.mul(tf.mul(dy, su), tf.mul(s, tf.add(1, tf.mul(sg, tf.sub(1, s)))));
        return [dg, du];
      },
    };
  });
  return fn(g, u) as tf.Tensor2D;
}

/** cos and sin tables `[T, d]` of the rotary embedding, and −sin for the composite backward. */
export interface RopeTables {
  cos: tf.Tensor2D;
  sin: tf.Tensor2D;
  negSin: tf.Tensor2D;
}

/** Shape of one attention call: batch, time, query heads, key/value heads, head width. */
export interface AttentionShape {
  b: number;
  t: number;
  heads: number;
  kvHeads: number;
  headDim: number;
}

/**
 * Causal grouped-query attention with rotary embeddings, from the q, k, v projections
 * (`[B·T, H·d]`, `[B·T, H_kv·d]`, `[B·T, H_kv·d]`) to the heads' outputs merged back to rows
 * `[B·T, H·d]`:
 *
 *   out = softmax(RoPE(q) RoPE(k)ᵀ / √d + M) v   per head, M = −∞ above the diagonal
 *
 * Query head i reads key/value head ⌊i / r⌋, r = H / H_kv (transformers' `repeat_kv`): the r
 * query heads of a group are stacked along time, `[B, H_kv, r·T, d]`, against the group's one
 * key/value head, with `mask` `[r·T, T]` stacked alike, so no key or value is copied. The 1/√d
 * is folded into RoPE(q). Backward: dv = pᵀ dO, ds = p ∘ (dp − Σ dp∘p) with dp = dO vᵀ,
 * dq = ds k, dk = dsᵀ q, and RoPE's inverse (the rotation by −sin) on dq and dk.
 */
export function ropeAttention(q: tf.Tensor2D, k: tf.Tensor2D, v: tf.Tensor2D, shape: AttentionShape, rope: RopeTables, mask: tf.Tensor2D): tf.Tensor2D {
  const { b, t, heads, kvHeads, headDim: d } = shape;
  const r = heads / kvHeads;
  const scale = 1 / Math.sqrt(d);
  const toHeads = (x: tf.Tensor, count: number): tf.Tensor4D => tf.transpose(x.reshape([b, t, count, d]), [0, 2, 1, 3]) as tf.Tensor4D;
  const fromHeads = (x: tf.Tensor, count: number): tf.Tensor2D =>
    tf.transpose(x.reshape([b, count, t, d]), [0, 2, 1, 3]).reshape<tf.Tensor2D>([b * t, count * d]);
  // RoPE (times s) into the heads layout, and its inverse back to rows.
  const rotate = (x: tf.Tensor2D, count: number, s: number): tf.Tensor4D => {
    const f = ropeFused(x, rope.cos, rope.sin, s, false);
    if (f) return toHeads(f, count);
    const y = applyRope(toHeads(x, count), rope.cos, rope.sin);
    return s === 1 ? y : tf.mul(y, s);
  };
  // The inverse rotation (times s) of gradients in rows, or in the heads layout. The tables come
  // from the tape's saved tensors: `rope` may be a slice owned by the forward's tidy (LlamaModel.rope
  // caches powers of two only), gone by the time the backward pass runs.
  const unrotateRows = (rows: tf.Tensor2D, count: number, s: number, tables: RopeTables): tf.Tensor2D => {
    const f = ropeFused(rows, tables.cos, tables.sin, s, true);
    if (f) return f;
    const y = fromHeads(applyRope(toHeads(rows, count), tables.cos, tables.negSin), count);
    return s === 1 ? y : tf.mul<tf.Tensor2D>(y, s);
  };
  const unrotate = (dx: tf.Tensor, count: number, s: number, tables: RopeTables): tf.Tensor2D => {
    const f = ropeFused(fromHeads(dx, count), tables.cos, tables.sin, s, true);
    if (f) return f;
    const y = fromHeads(applyRope(dx.reshape<tf.Tensor4D>([b, count, t, d]), tables.cos, tables.negSin), count);
    return s === 1 ? y : tf.mul<tf.Tensor2D>(y, s);
  };
  const tablesOf = (saved: tf.Tensor[]): RopeTables => ({ cos: saved[4] as tf.Tensor2D, sin: saved[5] as tf.Tensor2D, negSin: saved[6] as tf.Tensor2D });
  const layout: AttentionLayout = { batch: b, heads, kvHeads, headDim: d, qCol: 0, kCol: 0, vCol: 0 };
  const fn = tf.customGrad((...args: Input[]) => {
    const [qi, ki, vi, save] = args as [tf.Tensor2D, tf.Tensor2D, tf.Tensor2D, tf.GradSaveFunc];
    // The project's kernels: RoPE on the rows, then attention reading the heads in place (no
    // transposes, grouped heads without stacking; the causal mask by position, as `mask` holds).
    const qr = srpoKernelAvailable('SrpoAttention') ? ropeFused(qi, rope.cos, rope.sin, scale, false) : undefined;
    const kr = qr && ropeFused(ki, rope.cos, rope.sin, 1, false);
    const fused = kr && attentionFused(qr, kr, vi, layout);
    if (qr && kr && fused) {
      save([qr, kr, vi, fused.p, rope.cos, rope.sin, rope.negSin]);
      return {
        value: fused.o,
        gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
          const [sq, sk, sv, sp] = saved;
          const tables = tablesOf(saved);
          const [dq, dk, dv] = attentionGrad(dy as tf.Tensor2D, sq as tf.Tensor2D, sk as tf.Tensor2D, sv as tf.Tensor2D, sp as tf.Tensor4D, layout);
          return [unrotateRows(dq, heads, scale, tables), unrotateRows(dk, kvHeads, 1, tables), dv];
        },
      };
    }
    const q4 = rotate(qi, heads, scale).reshape<tf.Tensor4D>([b, kvHeads, r * t, d]);
    const k4 = rotate(ki, kvHeads, 1);
    const v4 = toHeads(vi, kvHeads);
    const scores = batchMatMul(q4, k4, false, true); // [B, H_kv, r·T, T]
    const p = maskedSoftmax(scores, mask) ?? (tf.softmax(tf.add(scores, mask)) as tf.Tensor4D);
    save([q4, k4, v4, p, rope.cos, rope.sin, rope.negSin]);
    return {
      value: fromHeads(batchMatMul(p, v4), heads),
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
        const [sq, sk, sv, sp] = saved as tf.Tensor4D[];
        const tables = tablesOf(saved);
        const dO = toHeads(dy, heads).reshape<tf.Tensor4D>([b, kvHeads, r * t, d]);
        const dv = batchMatMul(sp, dO, true, false);
        const dp = batchMatMul(dO, sv, false, true);
        const ds = softmaxGrad(sp, dp) ?? tf.mul<tf.Tensor4D>(sp, tf.sub(dp, tf.sum(tf.mul(dp, sp), -1, true)));
        const dq = batchMatMul(ds, sk);
        const dk = batchMatMul(ds, sq, true, false);
        return [unrotate(dq, heads, scale, tables), unrotate(dk, kvHeads, 1, tables), fromHeads(dv, kvHeads)];
      },
    };
  });
  return fn(q, k, v);
}

/** RoPE on `[B, heads, T, d]`: x ⊙ cos + rotate_half(x) ⊙ sin, rotate_half(x) = [−x₂, x₁] (Su et al. 2021). */
export function applyRope(x: tf.Tensor4D, cos: tf.Tensor2D, sin: tf.Tensor2D): tf.Tensor4D {
  const d = x.shape[3];
  const [x1, x2] = tf.split(x, [d / 2, d / 2], 3);
  const rotated = tf.concat([tf.neg(x2), x1], 3);
  return tf.add<tf.Tensor4D>(tf.mul(x, cos), tf.mul(rotated, sin));
}
