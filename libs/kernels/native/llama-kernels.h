// Row kernels of the Llama-family decoder (libs/hf/src/llama-ops.ts): RMSNorm, the
// SwiGLU gate and rotary embeddings, forward and backward, each one pass over its rows.
// Included by srpo-kernels.cc after exp_in_range, rsqrt_rounded and is_nan_bits; the kernel wrappers, the
// thread split and the op registrations are there. Same numerics rules: float32 arithmetic,
// edge cases stated here and checked against float64 formulas in srpo-kernels.spec.ts.
#pragma once

// --- RMSNorm --------------------------------------------------------------------------------
// Forward, per row of x [N, D] with weight w [D]: r = 1/√(Σx²/D + eps), y = w ⊙ (x·r), as
// transformers' LlamaRMSNorm computes it in float32 (hidden · rsqrt(variance + eps), then
// weight ·). Outputs y and r [N, 1].
// Backward, per row, with x̂ = x·r and g = dy ⊙ w: dx = r·(g − x̂·Σ(g⊙x̂)/D). The weight's
// gradient dw = Σ_rows dy ⊙ x̂ is summed column by column over the rows in order, so it does
// not depend on how many threads split the columns (replay recomputes updates bit for bit).
// Edge cases: a zero row has r = 1/√eps and gives y = 0, dx = g/√eps; D = 0 gives empty
// outputs; eps > 0 is required by the op.
inline void rms_norm_rows(const float* x, const float* w, float* y, float* rstd, int64_t n, int64_t d, float eps) {
  for (int64_t r = 0; r < n; r++) {
    const float* xr = x + r * d;
    float* yr = y + r * d;
    float sq = 0.f;
    for (int64_t j = 0; j < d; j++) sq += xr[j] * xr[j];
    const float rs = rsqrt_rounded(sq / static_cast<float>(d) + eps);
    for (int64_t j = 0; j < d; j++) yr[j] = w[j] * (xr[j] * rs);
    rstd[r] = rs;
  }
}

inline void rms_norm_grad_rows(const float* dy, const float* x, const float* w, const float* rstd, float* dx, int64_t n, int64_t d) {
  for (int64_t r = 0; r < n; r++) {
    const float* gr = dy + r * d;
    const float* xr = x + r * d;
    const float rs = rstd[r];
    float dot = 0.f;
    for (int64_t j = 0; j < d; j++) dot += (gr[j] * w[j]) * (xr[j] * rs);
    const float p = dot / static_cast<float>(d);
    float* o = dx + r * d;
    for (int64_t j = 0; j < d; j++) o[j] = (gr[j] * w[j] - (xr[j] * rs) * p) * rs;
  }
}

inline void rms_norm_weight_grad_cols(const float* dy, const float* x, const float* rstd, float* dw, int64_t n, int64_t d, int64_t lo, int64_t hi) {
  for (int64_t j = lo; j < hi; j++) dw[j] = 0.f;
  for (int64_t r = 0; r < n; r++) {
    const float* gr = dy + r * d;
    const float* xr = x + r * d;
    const float rs = rstd[r];
    for (int64_t j = lo; j < hi; j++) dw[j] += gr[j] * (xr[j] * rs);
  }
}

// --- SwiGLU ---------------------------------------------------------------------------------
// Forward: y = SiLU(g) ⊙ u = (g·σ(g))·u (transformers: act_fn(gate_proj(x)) * up_proj(x)).
// Backward: du = dy·g·σ(g), dg = dy·u·(σ + g·σ(1 − σ)), with σ(1 − σ) taken as e·σ² (e = e^{−g})
// so that it does not cancel where σ is near 1.
// Edge cases: σ is exactly 0 for g ≤ −80 (the true value is below 2e−35), so y = −0 and both
// gradients vanish there; the g·σ(1 − σ) term uses g clamped to ±80, where it has vanished,
// so every finite g gives finite outputs. A NaN g gives NaN outputs (tested by its bits, as
// -ffast-math may drop x != x); a NaN u or dy propagates through the products.
inline float silu_sigma(float g, float* e_out, float* gc_out) {
  const float gc = g < -80.f ? -80.f : (g > 80.f ? 80.f : g);
  const float e = exp_in_range(-gc);
  *e_out = e;
  *gc_out = gc;
  return g <= -80.f ? 0.f : 1.0f / (1.0f + e);
}

// Not inlined nor specialised (noipa): SrpoSwiGlu and SrpoGateUp (decode-ops.h) run the same instructions.
__attribute__((noipa)) void swiglu_forward(const float* __restrict g, const float* __restrict u, float* __restrict y, int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; i++) {
    const float gi = g[i];
    float e, gc;
    const float s = silu_sigma(gi, &e, &gc);
    y[i] = is_nan_bits(gi) ? gi : (gi * s) * u[i];
  }
}

inline void swiglu_backward(const float* __restrict g, const float* __restrict u, const float* __restrict dy, float* __restrict dg,
                            float* __restrict du, int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; i++) {
    const float gi = g[i];
    float e, gc;
    const float s = silu_sigma(gi, &e, &gc);
    const float d = s + gc * (e * s) * s;
    const bool nan = is_nan_bits(gi);
    du[i] = nan ? gi : dy[i] * (gi * s);
    dg[i] = nan ? gi : (dy[i] * u[i]) * d;
  }
}

// --- Rotary position embedding ------------------------------------------------------------
// On the projection's rows x [B·T, H·d] (row b·T + t is position t; each head's d columns
// rotate alike): y = (x ⊙ cos_t + rotate_half(x) ⊙ sin_t)·scale, rotate_half(x) = [−x₂, x₁]
// per head, with cos/sin [T, d] laid out as transformers' cat((freqs, freqs), −1). The scale
// folds attention's 1/√d into q (1 for k). The backward is the same rotation with −sin
// (rotate_half is antisymmetric and the tables repeat across the two halves): `inverse`.
// Not inlined nor specialised (noipa): SrpoRope and SrpoDecodeQkv (decode-ops.h) must run the same instructions, whose
// bits would otherwise depend on what the compiler folds at each call (a constant sign, say,
// changes which product a fused multiply-add absorbs).
__attribute__((noipa)) void rope_rows(const float* x, const float* cs, const float* sn, float* y, int64_t lo, int64_t hi, int64_t t, int64_t c, int64_t d,
                      float scale, float sign) {
  const int64_t h = d / 2;
  for (int64_t r = lo; r < hi; r++) {
    const int64_t p = r % t;
    const float* cr = cs + p * d;
    const float* sr = sn + p * d;
    const float* xr = x + r * c;
    float* yr = y + r * c;
    for (int64_t o = 0; o < c; o += d) {
      for (int64_t j = 0; j < h; j++) {
        const float a = xr[o + j], b = xr[o + j + h];
        yr[o + j] = (a * cr[j] - b * (sign * sr[j])) * scale;
        yr[o + j + h] = (b * cr[j + h] + a * (sign * sr[j + h])) * scale;
      }
    }
  }
}
