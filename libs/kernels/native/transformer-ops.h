// TensorFlow op bodies of the transformer kernels: argument checks, outputs, the pool. GELU, layer
// norm, masked softmax, causal attention and the layer-norm projection's weight folding.
// Included by srpo-kernels.cc after kernel-support.h and the kernels' arithmetic (*-kernels.h).
#pragma once

// SrpoGelu(x) -> y, any shape.
void gelu_compute(void*, TF_OpKernelContext* ctx) {
  Call c(ctx, "SrpoGelu", 1);
  float* y = c.out_like(0, 0);
  if (!c.ok()) return;
  const float* x = c.data(0);
  pool().run(c.size(0), kLine, kInlineBelow, [&](int64_t lo, int64_t hi) { gelu_forward(x, y, lo, hi); });
}

// SrpoGeluGrad(x, dy) -> dx, x and dy of one shape.
void gelu_grad_compute(void*, TF_OpKernelContext* ctx) {
  Call c(ctx, "SrpoGeluGrad", 2);
  if (c.ok() && c.size(0) != c.size(1)) c.fail("x and dy must have the same shape");
  float* dx = c.out_like(0, 0);
  if (!c.ok()) return;
  const float* x = c.data(0);
  const float* dy = c.data(1);
  pool().run(c.size(0), kLine, kInlineBelow, [&](int64_t lo, int64_t hi) { gelu_backward(x, dy, dx, lo, hi); });
}

// Attribute `eps` of SrpoLayerNorm and SrpoRmsNorm, read once per kernel instance.
struct Eps {
  float eps;
};
void* eps_create(TF_OpKernelConstruction* ctx) {
  TF_Status* status = TF_NewStatus();
  float eps = 0.f;
  TF_OpKernelConstruction_GetAttrFloat(ctx, "eps", &eps, status);
  if (TF_GetCode(status) == TF_OK && !(eps > 0.f && std::isfinite(eps))) TF_SetStatus(status, TF_INVALID_ARGUMENT, "eps must be a finite number > 0");
  if (TF_GetCode(status) != TF_OK) TF_OpKernelConstruction_Failure(ctx, status);
  TF_DeleteStatus(status);
  return new Eps{eps};
}
void eps_delete(void* p) { delete static_cast<Eps*>(p); }

// SrpoLayerNorm(x [N, D]; eps) -> (xhat [N, D], rstd [N, 1]).
void layer_norm_compute(void* state, TF_OpKernelContext* ctx) {
  Call c(ctx, "SrpoLayerNorm", 1);
  if (c.ok() && c.rank(0) != 2) c.fail("x must be [N, D]");
  if (!c.ok()) return;
  const int64_t n = c.dim(0, 0), d = c.dim(0, 1);
  const int64_t col[2] = {n, 1};
  float* xhat = c.out_like(0, 0);
  float* rstd = c.out(1, col, 2);
  if (!c.ok() || d == 0) return;
  const float* x = c.data(0);
  const float eps = static_cast<Eps*>(state)->eps;
  pool().run(n, 1, kInlineBelow / d + 1, [&](int64_t lo, int64_t hi) { layer_norm_rows(x + lo * d, xhat + lo * d, rstd + lo, hi - lo, d, eps); });
}

// SrpoLayerNormGrad(dxhat [N, D], xhat [N, D], rstd [N, 1]) -> dx [N, D].
void layer_norm_grad_compute(void*, TF_OpKernelContext* ctx) {
  Call c(ctx, "SrpoLayerNormGrad", 3);
  if (c.ok() && (c.rank(0) != 2 || c.rank(1) != 2 || c.rank(2) != 2 || c.dim(1, 0) != c.dim(0, 0) || c.dim(1, 1) != c.dim(0, 1) ||
                 c.dim(2, 0) != c.dim(0, 0) || c.dim(2, 1) != 1))
    c.fail("dxhat and xhat must be [N, D] and rstd [N, 1]");
  if (!c.ok()) return;
  float* dx = c.out_like(0, 0);
  if (!c.ok() || c.size(0) == 0) return;
  const int64_t n = c.dim(0, 0), d = c.dim(0, 1);
  const float *g = c.data(0), *h = c.data(1), *r = c.data(2);
  pool().run(n, 1, kInlineBelow / d + 1, [&](int64_t lo, int64_t hi) { layer_norm_grad_rows(g + lo * d, h + lo * d, r + lo, dx + lo * d, hi - lo, d); });
}

// SrpoMaskedSoftmax(scores [..., T, K], mask [T, K]) -> p [..., T, K].
void masked_softmax_compute(void*, TF_OpKernelContext* ctx) {
  Call c(ctx, "SrpoMaskedSoftmax", 2);
  if (c.ok() && (c.rank(0) < 2 || c.rank(1) != 2 || c.dim(0, -2) != c.dim(1, 0) || c.dim(0, -1) != c.dim(1, 1)))
    c.fail("scores must be [..., T, K] and mask [T, K]");
  if (!c.ok()) return;
  float* p = c.out_like(0, 0);
  const int64_t k = c.dim(0, -1), t = c.dim(0, -2);
  if (!c.ok() || c.size(0) == 0) return;
  const float *sc = c.data(0), *m = c.data(1);
  pool().run(c.size(0) / k, 1, kInlineBelow / k + 1, [&](int64_t lo, int64_t hi) { masked_softmax_rows(sc, m, p, lo, hi, t, k); });
}

// SrpoSoftmaxGrad(p [..., K], dp [..., K]) -> ds [..., K].
void softmax_grad_compute(void*, TF_OpKernelContext* ctx) {
  Call c(ctx, "SrpoSoftmaxGrad", 2);
  if (c.ok()) {
    bool same = c.rank(0) == c.rank(1) && c.rank(0) >= 1;
    for (int d = 0; same && d < c.rank(0); d++) same = c.dim(0, d) == c.dim(1, d);
    if (!same) c.fail("p and dp must have the same shape, of rank >= 1");
  }
  if (!c.ok()) return;
  float* ds = c.out_like(0, 0);
  const int64_t k = c.dim(0, -1);
  if (!c.ok() || c.size(0) == 0) return;
  const float *pp = c.data(0), *dp = c.data(1);
  pool().run(c.size(0) / k, 1, kInlineBelow / k + 1, [&](int64_t lo, int64_t hi) { softmax_grad_rows(pp + lo * k, dp + lo * k, ds + lo * k, hi - lo, k); });
}

// Attributes of SrpoAttention and its backward: the batch, the heads and where they sit.
struct AttentionAttrs {
  int64_t batch, heads, kv_heads, d, q_col, k_col, v_col;
};
void* attention_create(TF_OpKernelConstruction* ctx) {
  TF_Status* status = TF_NewStatus();
  const char* names[7] = {"batch", "heads", "kv_heads", "head_dim", "q_col", "k_col", "v_col"};
  int32_t v[7] = {0, 0, 0, 0, 0, 0, 0};
  for (int i = 0; i < 7 && TF_GetCode(status) == TF_OK; i++) TF_OpKernelConstruction_GetAttrInt32(ctx, names[i], &v[i], status);
  if (TF_GetCode(status) == TF_OK && (v[0] < 1 || v[1] < 1 || v[2] < 1 || v[3] < 1 || v[4] < 0 || v[5] < 0 || v[6] < 0 || v[1] % v[2] != 0))
    TF_SetStatus(status, TF_INVALID_ARGUMENT, "SrpoAttention: batch, heads, kv_heads and head_dim must be >= 1 with kv_heads dividing heads, and the columns >= 0");
  if (TF_GetCode(status) != TF_OK) TF_OpKernelConstruction_Failure(ctx, status);
  TF_DeleteStatus(status);
  return new AttentionAttrs{v[0], v[1], v[2], v[3], v[4], v[5], v[6]};
}
void attention_delete(void* p) { delete static_cast<AttentionAttrs*>(p); }

// Checks q, k, v (inputs first, first + 1, first + 2) against the attributes; fills the shape.
bool attention_shape(Call& c, const AttentionAttrs& a, int first, AttentionShape* s) {
  if (!c.ok()) return false;
  const int iq = first, ik = first + 1, iv = first + 2;
  if (c.rank(iq) != 2 || c.rank(ik) != 2 || c.rank(iv) != 2 || c.dim(ik, 0) != c.dim(iq, 0) || c.dim(iv, 0) != c.dim(iq, 0) || c.dim(iq, 0) % a.batch != 0 ||
      c.dim(iq, 0) == 0) {
    c.fail("q, k and v must be [B*T, columns] with the same rows, a multiple of batch");
    return false;
  }
  if (a.q_col + a.heads * a.d > c.dim(iq, 1) || a.k_col + a.kv_heads * a.d > c.dim(ik, 1) || a.v_col + a.kv_heads * a.d > c.dim(iv, 1)) {
    c.fail("q needs heads * head_dim columns from q_col, k and v kv_heads * head_dim from k_col and v_col");
    return false;
  }
  *s = {a.batch, c.dim(iq, 0) / a.batch, a.heads, a.kv_heads, a.d, c.dim(iq, 1), c.dim(ik, 1), c.dim(iv, 1), a.q_col, a.k_col, a.v_col};
  return true;
}

// SrpoAttention(q, k, v; batch, heads, kv_heads, head_dim, q_col, k_col, v_col)
//   -> (o [B*T, H*d], p [B, H, T, T]). Causal; q pre-scaled. See attention-kernels.h.
void attention_compute(void* state, TF_OpKernelContext* ctx) {
  Call c(ctx, "SrpoAttention", 3);
  const AttentionAttrs& a = *static_cast<AttentionAttrs*>(state);
  AttentionShape s;
  if (!attention_shape(c, a, 0, &s)) return;
  const int64_t odims[2] = {s.batch * s.t, s.heads * s.d};
  const int64_t pdims[4] = {s.batch, s.heads, s.t, s.t};
  float* o = c.out(0, odims, 2);
  float* p = c.out(1, pdims, 4);
  if (!c.ok()) return;
  const float *q = c.data(0), *k = c.data(1), *v = c.data(2);
  pool().run(s.batch * s.heads, 1, 2, [&](int64_t lo, int64_t hi) {
    std::vector<float> scratch(static_cast<size_t>(3 * s.t * s.d));
    attention_forward_items(q, k, v, o, p, s, lo, hi, scratch.data());
  });
}

// SrpoDecodeAttention(q [B, H*d], k [B, H_kv, W1, d], v like k, k_recent [B, H_kv, W2, d],
//   v_recent like k_recent, start [B] int32) -> o [B, H*d]. Row b attends over columns
//   start_b .. W1 + W2 - 1 of the two parts joined (W2 may be 0); q pre-scaled. See attention-kernels.h.
void decode_attention_compute(void*, TF_OpKernelContext* ctx) {
  Call c(ctx, "SrpoDecodeAttention", 6, 5, "start");
  if (!c.ok()) return;
  if (c.rank(0) != 2 || c.rank(1) != 4 || c.rank(2) != 4 || c.rank(3) != 4 || c.rank(4) != 4 || c.rank(5) != 1)
    return c.fail("q must be [B, H*d], k, v, k_recent and v_recent [B, H_kv, W, d] and start [B]");
  const int64_t batch = c.dim(0, 0), kv_heads = c.dim(1, 1), w1 = c.dim(1, 2), d = c.dim(1, 3), w2 = c.dim(3, 2);
  for (int i = 1; i <= 4; i++)
    if (c.dim(i, 0) != batch || c.dim(i, 1) != kv_heads || c.dim(i, 2) != (i <= 2 ? w1 : w2) || c.dim(i, 3) != d)
      return c.fail("k and v must be [B, H_kv, W1, d] and k_recent and v_recent [B, H_kv, W2, d], B the rows of q");
  if (c.dim(5, 0) != batch) return c.fail("start must hold one column per row of q");
  if (kv_heads < 1 || d < 1 || c.dim(0, 1) % (kv_heads * d) != 0 || c.dim(0, 1) == 0) return c.fail("q's columns must be heads * d with kv_heads dividing heads");
  if (w1 + w2 < 1) return c.fail("the cache must hold at least one column");
  const int32_t* start = c.ints(5);
  for (int64_t b = 0; b < batch; b++)
    if (start[b] < 0 || start[b] >= w1 + w2) return c.fail("start[" + std::to_string(b) + "] must be in [0, W1 + W2)");
  const DecodeShape s{batch, c.dim(0, 1) / d, kv_heads, d, w1, w2};
  float* o = c.out_like(0, 0);
  if (!c.ok() || batch == 0) return;
  const float *q = c.data(0), *k1 = c.data(1), *v1 = c.data(2), *k2 = c.data(3), *v2 = c.data(4);
  const int64_t r = s.heads / kv_heads, w = w1 + w2;
  pool().run(batch * kv_heads, 1, kInlineBelow / (w * d * r) + 1, [&](int64_t lo, int64_t hi) {
    std::vector<float> scratch(static_cast<size_t>((d + r) * w));
    decode_attention_items(q, k1, v1, k2, v2, start, o, s, lo, hi, scratch.data());
  });
}

// SrpoAttentionGrad(dO [B*T, H*d], q, k, v, p [B, H, T, T]; attributes as SrpoAttention)
//   -> (dq, dk, dv) shaped like q, k and v; columns outside the heads' are 0.
// SrpoAttentionGradPacked: the same where q, k and v are one tensor (the fused projection's
// [q | k | v]): -> dqkv shaped like it, the three gradients in their columns.
template <bool kPacked>
void attention_grad_compute(void* state, TF_OpKernelContext* ctx) {
  const char* op = kPacked ? "SrpoAttentionGradPacked" : "SrpoAttentionGrad";
  Call c(ctx, op, 5);
  const AttentionAttrs& a = *static_cast<AttentionAttrs*>(state);
  AttentionShape s;
  if (!attention_shape(c, a, 1, &s)) return;
  if (c.rank(0) != 2 || c.dim(0, 0) != s.batch * s.t || c.dim(0, 1) != s.heads * s.d || c.rank(4) != 4 || c.dim(4, 0) != s.batch || c.dim(4, 1) != s.heads ||
      c.dim(4, 2) != s.t || c.dim(4, 3) != s.t)
    return c.fail("dO must be [B*T, heads * head_dim] and p [B, heads, T, T]");
  if (kPacked) {
    const bool same = s.q_stride == s.k_stride && s.q_stride == s.v_stride;
    const int64_t qe = s.q_col + s.heads * s.d, ke = s.k_col + s.kv_heads * s.d, ve = s.v_col + s.kv_heads * s.d;
    const auto apart = [](int64_t a0, int64_t a1, int64_t b0, int64_t b1) { return a1 <= b0 || b1 <= a0; };
    if (!same || !apart(s.q_col, qe, s.k_col, ke) || !apart(s.q_col, qe, s.v_col, ve) || !apart(s.k_col, ke, s.v_col, ve))
      return c.fail("packed q, k and v must be one shape with disjoint q, k and v columns");
  }
  AttentionGradOut out;
  if (kPacked) {
    float* dx = c.out_like(0, 1);
    if (!c.ok()) return;
    // Columns that are no head's get no gradient: zero them (the fused projection has none).
    if ((s.heads + 2 * s.kv_heads) * s.d != s.q_stride) std::memset(dx, 0, static_cast<size_t>(c.size(1)) * sizeof(float));
    out = {dx, dx, dx, s.q_stride, s.q_stride, s.q_stride, s.q_col, s.k_col, s.v_col};
  } else {
    float* dq = c.out_like(0, 1);
    float* dk = c.out_like(1, 2);
    float* dv = c.out_like(2, 3);
    if (!c.ok()) return;
    if (s.heads * s.d != s.q_stride) std::memset(dq, 0, static_cast<size_t>(c.size(1)) * sizeof(float));
    if (s.kv_heads * s.d != s.k_stride) std::memset(dk, 0, static_cast<size_t>(c.size(2)) * sizeof(float));
    if (s.kv_heads * s.d != s.v_stride) std::memset(dv, 0, static_cast<size_t>(c.size(3)) * sizeof(float));
    out = {dq, dk, dv, s.q_stride, s.k_stride, s.v_stride, s.q_col, s.k_col, s.v_col};
  }
  const float *g = c.data(0), *q = c.data(1), *k = c.data(2), *v = c.data(3), *p = c.data(4);
  pool().run(s.batch * s.kv_heads, 1, 2, [&](int64_t lo, int64_t hi) {
    std::vector<float> scratch(static_cast<size_t>(6 * s.t * s.d + s.t * s.t));
    attention_backward_items(g, q, k, v, p, s, out, lo, hi, scratch.data());
  });
}

// Attributes of SrpoNormFold(Grad): whether the bias and the column scale inputs are present
// (when not, the op reads nothing from those inputs; callers pass any float tensor there).
struct NormFoldAttrs {
  bool bias, scale;
};
void* norm_fold_create(TF_OpKernelConstruction* ctx) {
  auto* a = new NormFoldAttrs{false, false};
  read_bool_attrs(ctx, {{"has_bias", &a->bias}, {"has_scale", &a->scale}});
  return a;
}
void norm_fold_delete(void* p) { delete static_cast<NormFoldAttrs*>(p); }

// Checks w [D, O] (input iw), gain and shift [D] (inputs ig, ig + 1), and bias / scale [O] where present.
bool norm_fold_args(Call& c, const NormFoldAttrs& f, int iw, int ig, int ib, int is, NormFoldArgs* a) {
  if (!c.ok()) return false;
  if (c.rank(iw) != 2 || c.rank(ig) != 1 || c.rank(ig + 1) != 1 || c.dim(ig, 0) != c.dim(iw, 0) || c.dim(ig + 1, 0) != c.dim(iw, 0)) {
    c.fail("w must be [D, O] and gain and shift [D]");
    return false;
  }
  const int64_t o = c.dim(iw, 1);
  if ((f.bias && ib >= 0 && (c.rank(ib) != 1 || c.dim(ib, 0) != o)) || (f.scale && (c.rank(is) != 1 || c.dim(is, 0) != o))) {
    c.fail("bias and scale must be [O]");
    return false;
  }
  *a = {c.data(iw), c.data(ig), c.data(ig + 1), f.bias && ib >= 0 ? c.data(ib) : nullptr, f.scale ? c.data(is) : nullptr, c.dim(iw, 0), o};
  return true;
}

// SrpoNormFold(w [D, O], gain [D], shift [D], bias [O], scale [O]; has_bias, has_scale) -> (wc [D, O], c [1, O], wcT [O, D]).
void norm_fold_compute(void* state, TF_OpKernelContext* ctx) {
  Call c(ctx, "SrpoNormFold", 5);
  NormFoldArgs a;
  if (!norm_fold_args(c, *static_cast<NormFoldAttrs*>(state), 0, 1, 3, 4, &a)) return;
  const int64_t cdims[2] = {1, a.o};
  const int64_t tdims[2] = {a.o, a.d};
  float* wc = c.out_like(0, 0);
  float* cv = c.out(1, cdims, 2);
  float* wct = c.out(2, tdims, 2);
  if (!c.ok()) return;
  std::vector<float> colsum(static_cast<size_t>(a.o));
  norm_fold_forward(a, wc, wct, cv, colsum.data());
}

// SrpoNormFoldGrad(dwc [D, O], dc [O], w [D, O], gain [D], shift [D], scale [O]; has_bias, has_scale)
//   -> (dgain [D], dshift [D], dw [D, O], dbias [O]).
void norm_fold_grad_compute(void* state, TF_OpKernelContext* ctx) {
  Call c(ctx, "SrpoNormFoldGrad", 6);
  NormFoldArgs a;
  if (!norm_fold_args(c, *static_cast<NormFoldAttrs*>(state), 2, 3, -1, 5, &a)) return;
  if (c.rank(0) != 2 || c.dim(0, 0) != a.d || c.dim(0, 1) != a.o || c.rank(1) != 1 || c.dim(1, 0) != a.o) return c.fail("dwc must be [D, O] and dc [O]");
  float* dg = c.out_like(0, 3);
  float* dshift = c.out_like(1, 4);
  float* dw = c.out_like(2, 2);
  float* db = c.out_like(3, 1);
  if (!c.ok()) return;
  std::vector<float> colmean(static_cast<size_t>(a.o));
  norm_fold_backward(a, c.data(0), c.data(1), dg, dshift, dw, db, colmean.data());
}
