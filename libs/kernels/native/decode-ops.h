// TensorFlow op bodies of a cached decode step's pieces (libs/hf/src/llama-decode-batch.ts) that
// are not products or attention alone. Included by srpo-kernels.cc after gemm-ops.h.
#pragma once

// The step's new keys and values (k_new, v_new [B, H_kv*d]) after each row's cached ones
// (k, v [B, H_kv, W, d]) into k_out, v_out [B, H_kv, W + 1, d]: a copy.
inline void kv_append(const float* k, const float* v, const float* kn, const float* vn, float* ko, float* vo, int64_t items, int64_t w, int64_t d) {
  pool().run(items, 1, kInlineBelow / ((w + 1) * d) + 1, [&](int64_t lo, int64_t hi) {
    const size_t old = static_cast<size_t>(w * d) * sizeof(float), col = static_cast<size_t>(d) * sizeof(float);
    for (int64_t item = lo; item < hi; item++) {
      std::memcpy(ko + item * (w + 1) * d, k + item * w * d, old);
      std::memcpy(ko + item * (w + 1) * d + w * d, kn + item * d, col);
      std::memcpy(vo + item * (w + 1) * d, v + item * w * d, old);
      std::memcpy(vo + item * (w + 1) * d + w * d, vn + item * d, col);
    }
  });
}

// SrpoKvAppend(k [B, H_kv, W, d], v like k, k_new [B, H_kv*d], v_new like k_new)
//   -> (k_out, v_out) [B, H_kv, W + 1, d]: each row's cached keys and values with the step's
//   new column after them (W may be 0). A copy: the values are the inputs'. Why one op: the
//   composite is a reshape and a concat per tensor, each a tfjs-node op with its own small
//   shape or axis tensor uploaded, eight TensorFlow executions per layer of a decode step where
//   this is one (libs/hf/src/llama-decode-batch.ts).
void kv_append_compute(void*, TF_OpKernelContext* ctx) {
  Call c(ctx, "SrpoKvAppend", 4);
  if (!c.ok()) return;
  if (c.rank(0) != 4 || c.rank(1) != 4 || c.rank(2) != 2 || c.rank(3) != 2) return c.fail("k and v must be [B, H_kv, W, d] and k_new and v_new [B, H_kv*d]");
  const int64_t batch = c.dim(0, 0), heads = c.dim(0, 1), w = c.dim(0, 2), d = c.dim(0, 3);
  if (c.dim(1, 0) != batch || c.dim(1, 1) != heads || c.dim(1, 2) != w || c.dim(1, 3) != d) return c.fail("v must have k's shape");
  for (int i = 2; i < 4; i++)
    if (c.dim(i, 0) != batch || c.dim(i, 1) != heads * d) return c.fail("k_new and v_new must be [B, H_kv*d], B and H_kv*d those of k");
  const int64_t dims[4] = {batch, heads, w + 1, d};
  float* ko = c.out(0, dims, 4);
  float* vo = c.out(1, dims, 4);
  if (!c.ok() || batch * heads * d == 0) return;
  kv_append(c.data(0), c.data(1), c.data(2), c.data(3), ko, vo, batch * heads, w, d);
}


// SrpoDecodeQkv(x [B, D], wq [H*d, D], wk [H_kv*d, D], wv like wk, cos [B, d], sin [B, d],
//   k [B, H_kv, W, d], v like k; q_scale) -> (q [B, H*d], k_out, v_out [B, H_kv, W + 1, d]):
//   a decode step's attention inputs, row b at the position of row b of the tables. q = RoPE(x·wqᵀ)
//   · q_scale, and the new keys RoPE(x·wkᵀ) and values x·wvᵀ appended to the cache. The same bits
//   as the ops it replaces (SrpoMatMul with transpose_b three times, SrpoRope twice, SrpoKvAppend):
//   each product is matmul_run's, each rotation rope_rows on the same values. Why: those are six
//   tfjs ops per layer of a step (with their JavaScript and TensorFlow dispatch, 30 layers), here one.
struct DecodeQkvAttrs {
  float q_scale;
};
void* decode_qkv_create(TF_OpKernelConstruction* ctx) {
  TF_Status* status = TF_NewStatus();
  float scale = 1.f;
  TF_OpKernelConstruction_GetAttrFloat(ctx, "q_scale", &scale, status);
  if (TF_GetCode(status) == TF_OK && !std::isfinite(scale)) TF_SetStatus(status, TF_INVALID_ARGUMENT, "SrpoDecodeQkv: q_scale must be finite");
  if (TF_GetCode(status) != TF_OK) TF_OpKernelConstruction_Failure(ctx, status);
  TF_DeleteStatus(status);
  return new DecodeQkvAttrs{scale};
}
void decode_qkv_delete(void* p) { delete static_cast<DecodeQkvAttrs*>(p); }

void decode_qkv_compute(void* state, TF_OpKernelContext* ctx) {
  Call c(ctx, "SrpoDecodeQkv", 8);
  if (!c.ok()) return;
  for (int i = 0; i < 6; i++)
    if (c.rank(i) != 2) return c.fail("x, wq, wk, wv, cos and sin must be 2-D");
  if (c.rank(6) != 4 || c.rank(7) != 4) return c.fail("k and v must be [B, H_kv, W, d]");
  const int64_t batch = c.dim(0, 0), hidden = c.dim(0, 1), qn = c.dim(1, 0), kvn = c.dim(2, 0);
  const int64_t kv_heads = c.dim(6, 1), w = c.dim(6, 2), d = c.dim(6, 3);
  if (c.dim(1, 1) != hidden || c.dim(2, 1) != hidden || c.dim(3, 1) != hidden || c.dim(3, 0) != kvn)
    return c.fail("wq, wk and wv must be [·, D], D the columns of x, and wk and wv one shape");
  if (d < 2 || d % 2 != 0 || c.dim(4, 0) != batch || c.dim(5, 0) != batch || c.dim(4, 1) != d || c.dim(5, 1) != d)
    return c.fail("cos and sin must be [B, d], d the cache's head size (even)");
  if (kvn != kv_heads * d || qn % d != 0 || qn == 0) return c.fail("wk must have H_kv*d rows and wq a multiple of d");
  for (int i = 6; i < 8; i++)
    if (c.dim(i, 0) != batch || c.dim(i, 1) != kv_heads || c.dim(i, 2) != w || c.dim(i, 3) != d) return c.fail("k and v must be [B, H_kv, W, d], B the rows of x");
  const int64_t q_dims[2] = {batch, qn}, kv_dims[4] = {batch, kv_heads, w + 1, d};
  float* q = c.out(0, q_dims, 2);
  float* ko = c.out(1, kv_dims, 4);
  float* vo = c.out(2, kv_dims, 4);
  if (!c.ok() || batch == 0) return;
  // The three products into one scratch [B, qn + 2·kvn]: q's, k's and v's columns, each its own product.
  std::vector<float> raw(static_cast<size_t>(batch * (qn + 2 * kvn)));
  float* qr = raw.data();
  float* kr = qr + batch * qn;
  float* vr = kr + batch * kvn;
  const float* x = c.data(0);
  if (hidden == 0) {
    std::fill(raw.begin(), raw.end(), 0.f);  // SrpoMatMul's k = 0
  } else {
    const GemmArgs gs[3] = {{batch, qn, hidden, x, hidden, false, c.data(1), hidden, true, qr, qn},
                            {batch, kvn, hidden, x, hidden, false, c.data(2), hidden, true, kr, kvn},
                            {batch, kvn, hidden, x, hidden, false, c.data(3), hidden, true, vr, kvn}};
    matmul_many(gs, kvn > 0 ? 3 : 1);
  }
  const float *cs = c.data(4), *sn = c.data(5);
  const DecodeQkvAttrs& a = *static_cast<const DecodeQkvAttrs*>(state);
  rope_rows(qr, cs, sn, q, 0, batch, batch, qn, d, a.q_scale, 1.f);
  std::vector<float> kn(static_cast<size_t>(batch * kvn));
  rope_rows(kr, cs, sn, kn.data(), 0, batch, batch, kvn, d, 1.f, 1.f);
  kv_append(c.data(6), c.data(7), kn.data(), vr, ko, vo, batch * kv_heads, w, d);
}

// SrpoGateUp(x [N, D], wg [F, D], wu [F, D]) -> y [N, F] = SiLU(x·wgᵀ) ⊙ (x·wuᵀ): a Llama MLP's gate,
// bit for bit SrpoMatMul (transpose_b) twice and SrpoSwiGlu (the same products, and swiglu_forward
// over the same pieces). Why: three tfjs ops per layer of a decode step, here one.
void gate_up_compute(void*, TF_OpKernelContext* ctx) {
  Call c(ctx, "SrpoGateUp", 3);
  if (!c.ok()) return;
  if (c.rank(0) != 2 || c.rank(1) != 2 || c.rank(2) != 2) return c.fail("x, wg and wu must be 2-D");
  const int64_t rows = c.dim(0, 0), hidden = c.dim(0, 1), f = c.dim(1, 0);
  if (c.dim(1, 1) != hidden || c.dim(2, 0) != f || c.dim(2, 1) != hidden) return c.fail("wg and wu must both be [F, D], D the columns of x");
  const int64_t dims[2] = {rows, f};
  float* y = c.out(0, dims, 2);
  if (!c.ok() || rows * f == 0) return;
  std::vector<float> gu(static_cast<size_t>(2 * rows * f), 0.f);  // zeros: SrpoMatMul's k = 0
  const float *gp = gu.data(), *up = gu.data() + rows * f;
  if (hidden > 0) {
    const GemmArgs gs[2] = {{rows, f, hidden, c.data(0), hidden, false, c.data(1), hidden, true, gu.data(), f},
                            {rows, f, hidden, c.data(0), hidden, false, c.data(2), hidden, true, gu.data() + rows * f, f}};
    matmul_many(gs, 2);
  }
  pool().run(rows * f, kLine, kInlineBelow, [&](int64_t lo, int64_t hi) { swiglu_forward(gp, up, y, lo, hi); });
}
