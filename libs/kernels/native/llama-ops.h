// TensorFlow op bodies of the Llama-family kernels: RMSNorm, the SwiGLU gate and RoPE.
// Included by srpo-kernels.cc after kernel-support.h and the kernels' arithmetic (*-kernels.h).
#pragma once

// SrpoRmsNorm(x [N, D], w [D]; eps) -> (y [N, D], rstd [N, 1]).
void rms_norm_compute(void* state, TF_OpKernelContext* ctx) {
  Call c(ctx, "SrpoRmsNorm", 2);
  if (c.ok() && (c.rank(0) != 2 || c.rank(1) != 1 || c.dim(1, 0) != c.dim(0, 1))) c.fail("x must be [N, D] and w [D]");
  if (!c.ok()) return;
  const int64_t n = c.dim(0, 0), d = c.dim(0, 1);
  const int64_t col[2] = {n, 1};
  float* y = c.out_like(0, 0);
  float* rstd = c.out(1, col, 2);
  if (!c.ok()) return;
  const float eps = static_cast<Eps*>(state)->eps;
  if (d == 0) {
    for (int64_t r = 0; r < n; r++) rstd[r] = rsqrt_rounded(eps);  // the mean of no squares is 0
    return;
  }
  const float *x = c.data(0), *w = c.data(1);
  pool().run(n, 1, kInlineBelow / d + 1, [&](int64_t lo, int64_t hi) { rms_norm_rows(x + lo * d, w, y + lo * d, rstd + lo, hi - lo, d, eps); });
}

// SrpoRmsNormGrad(dy [N, D], x [N, D], w [D], rstd [N, 1]) -> (dx [N, D], dw [D]).
void rms_norm_grad_compute(void*, TF_OpKernelContext* ctx) {
  Call c(ctx, "SrpoRmsNormGrad", 4);
  if (c.ok() && (c.rank(0) != 2 || c.rank(1) != 2 || c.rank(2) != 1 || c.rank(3) != 2 || c.dim(1, 0) != c.dim(0, 0) || c.dim(1, 1) != c.dim(0, 1) ||
                 c.dim(2, 0) != c.dim(0, 1) || c.dim(3, 0) != c.dim(0, 0) || c.dim(3, 1) != 1))
    c.fail("dy and x must be [N, D], w [D] and rstd [N, 1]");
  if (!c.ok()) return;
  float* dx = c.out_like(0, 0);
  float* dw = c.out_like(1, 2);
  if (!c.ok()) return;
  const int64_t n = c.dim(0, 0), d = c.dim(0, 1);
  if (d == 0) return;
  const float *g = c.data(0), *x = c.data(1), *w = c.data(2), *r = c.data(3);
  if (n > 0) pool().run(n, 1, kInlineBelow / d + 1, [&](int64_t lo, int64_t hi) { rms_norm_grad_rows(g + lo * d, x + lo * d, w, r + lo, dx + lo * d, hi - lo, d); });
  pool().run(d, kLine, kInlineBelow / (n + 1) + 1, [&](int64_t lo, int64_t hi) { rms_norm_weight_grad_cols(g, x, r, dw, n, d, lo, hi); });
}

// SrpoSwiGlu(g, u) -> y, g and u of one shape.
void swiglu_compute(void*, TF_OpKernelContext* ctx) {
  Call c(ctx, "SrpoSwiGlu", 2);
  if (c.ok() && c.size(0) != c.size(1)) c.fail("g and u must have the same shape");
  float* y = c.out_like(0, 0);
  if (!c.ok()) return;
  const float *g = c.data(0), *u = c.data(1);
  pool().run(c.size(0), kLine, kInlineBelow, [&](int64_t lo, int64_t hi) { swiglu_forward(g, u, y, lo, hi); });
}

// SrpoSwiGluGrad(g, u, dy) -> (dg, du), all of one shape.
void swiglu_grad_compute(void*, TF_OpKernelContext* ctx) {
  Call c(ctx, "SrpoSwiGluGrad", 3);
  if (c.ok() && (c.size(0) != c.size(1) || c.size(0) != c.size(2))) c.fail("g, u and dy must have the same shape");
  float* dg = c.out_like(0, 0);
  float* du = c.out_like(1, 0);
  if (!c.ok()) return;
  const float *g = c.data(0), *u = c.data(1), *dy = c.data(2);
  pool().run(c.size(0), kLine, kInlineBelow, [&](int64_t lo, int64_t hi) { swiglu_backward(g, u, dy, dg, du, lo, hi); });
}

// Attributes of SrpoRope: the output scale and the direction (inverse: the backward's −sin).
struct RopeAttrs {
  float scale;
  float sign;
};
void* rope_create(TF_OpKernelConstruction* ctx) {
  TF_Status* status = TF_NewStatus();
  float scale = 1.f;
  unsigned char inverse = 0;
  TF_OpKernelConstruction_GetAttrFloat(ctx, "scale", &scale, status);
  if (TF_GetCode(status) == TF_OK) TF_OpKernelConstruction_GetAttrBool(ctx, "inverse", &inverse, status);
  if (TF_GetCode(status) == TF_OK && !std::isfinite(scale)) TF_SetStatus(status, TF_INVALID_ARGUMENT, "SrpoRope: scale must be finite");
  if (TF_GetCode(status) != TF_OK) TF_OpKernelConstruction_Failure(ctx, status);
  TF_DeleteStatus(status);
  return new RopeAttrs{scale, inverse ? -1.f : 1.f};
}
void rope_delete(void* p) { delete static_cast<RopeAttrs*>(p); }

// SrpoRope(x [B·T, H·d], cos [T, d], sin [T, d]; scale, inverse) -> y [B·T, H·d].
void rope_compute(void* state, TF_OpKernelContext* ctx) {
  Call c(ctx, "SrpoRope", 3);
  if (c.ok()) {
    const bool tables = c.rank(1) == 2 && c.rank(2) == 2 && c.dim(1, 0) == c.dim(2, 0) && c.dim(1, 1) == c.dim(2, 1);
    const int64_t t = tables ? c.dim(1, 0) : 0, d = tables ? c.dim(1, 1) : 0;
    if (!tables || t < 1 || d < 2 || d % 2 != 0 || c.rank(0) != 2 || c.dim(0, 0) % t != 0 || c.dim(0, 1) % d != 0)
      c.fail("x must be [B*T, H*d], cos and sin [T, d] with d even");
  }
  float* y = c.out_like(0, 0);
  if (!c.ok() || c.size(0) == 0) return;
  const int64_t t = c.dim(1, 0), d = c.dim(1, 1), cols = c.dim(0, 1);
  const float *x = c.data(0), *cs = c.data(1), *sn = c.data(2);
  const RopeAttrs a = *static_cast<RopeAttrs*>(state);
  pool().run(c.dim(0, 0), 1, kInlineBelow / cols + 1, [&](int64_t lo, int64_t hi) { rope_rows(x, cs, sn, y, lo, hi, t, cols, d, a.scale, a.sign); });
}
