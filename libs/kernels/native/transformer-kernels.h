// The arithmetic of the small transformer's kernels: GELU (tanh form), the layer-norm
// statistics and attention's masked softmax, forward and backward. Included by srpo-kernels.cc
// after kernel-support.h.
#pragma once

// --- GELU (tanh form) and its backward -----------------------------------------------------
// y = x·σ(v), v = 2c(x + a x³) (= x·½(1 + tanh u), u = v/2), and
// y' = σ(v) + x·σ(v)(1 − σ(v))·2c(1 + 3a x²): the same function and derivative as
// transformer-ops.ts's composite gelu. The forward writes y only; the backward recomputes σ
// from x (cheaper than writing and keeping y′). Both are built for AVX2 and AVX-512
// (SRPO_BOTH_ISAS).
// Edge cases: σ(v) is taken as exactly 0 for v ≤ −80 and 1 for v ≥ 80 (float32's σ rounds
// to 1 from v ≈ 17 and underflows below v ≈ −88), so y = −0 and y′ = 0 for x below about
// −9.4, and y = x, y′ = 1 above about 9.4. The derivative's x³ term uses x clamped to ±10,
// where σ(1 − σ) has vanished, so x³ cannot overflow: every finite x gives a finite y and y′
// (the composite form gives NaN for |x| > ~1e13). A NaN x gives NaN y and y′ (tested by its
// bits: -ffast-math may not keep x != x).
constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2/π)
constexpr float kGeluA = 0.044715f;

// σ(v) with its saturation; for the derivative also e = exp(−v) and σ of the clamped v.
SRPO_INLINE float gelu_sigma(float xi, float* e_out, float* sigma_out) {
  const float v = xi * (2 * kGeluC * kGeluA * xi * xi + 2 * kGeluC);
  const float vc = v < -80.f ? -80.f : (v > 80.f ? 80.f : v);
  const float e = exp_in_range(-vc);
  const float sigma = 1.0f / (1.0f + e);
  *e_out = e;
  *sigma_out = sigma;
  return v <= -80.f ? 0.f : (v >= 80.f ? 1.f : sigma);
}

SRPO_INLINE void gelu_forward_loop(const float* __restrict x, float* __restrict y, int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; i++) {
    const float xi = x[i];
    float e, sigma;
    const float s = gelu_sigma(xi, &e, &sigma);
    y[i] = is_nan_bits(xi) ? xi : xi * s;
  }
}

SRPO_INLINE void gelu_backward_loop(const float* __restrict x, const float* __restrict dy, float* __restrict dx, int64_t lo, int64_t hi) {
  const float c2 = 2 * kGeluC, c6a = 6 * kGeluC * kGeluA;
  for (int64_t i = lo; i < hi; i++) {
    const float xi = x[i];
    float e, sigma;
    const float s = gelu_sigma(xi, &e, &sigma);
    const float xd = xi < -10.f ? -10.f : (xi > 10.f ? 10.f : xi);
    const float xdv = xd * (c6a * xd * xd + c2);
    // σ(1 − σ) as e·σ² (e = exp(−v)): 1 − σ would cancel to a few digits where σ is near 1.
    const float d = s + (e * sigma) * sigma * xdv;
    dx[i] = is_nan_bits(xi) ? xi : dy[i] * d;
  }
}

// Both, built for AVX2 and AVX-512 (SRPO_BOTH_ISAS).
SRPO_BOTH_ISAS(gelu_forward, gelu_forward_loop, (const float* __restrict x, float* __restrict y, int64_t lo, int64_t hi), (x, y, lo, hi))
SRPO_BOTH_ISAS(gelu_backward, gelu_backward_loop, (const float* __restrict x, const float* __restrict dy, float* __restrict dx, int64_t lo, int64_t hi),
               (x, dy, dx, lo, hi))

// --- Layer-norm statistics and their backward --------------------------------------------
// Forward, per row of x [N, D]: μ = Σx/D, σ² = Σ(x − μ)²/D (biased), r = 1/√(σ² + eps),
// x̂ = (x − μ)·r. Outputs x̂ [N, D] and r [N, 1]: what transformer-ops.ts's normLinear forms
// from five ops. Two passes over a row that sits in L1 (two-pass variance, not E[x²] − μ²,
// which cancels).
// Backward, per row, given x̂, r and dx̂ (row-centred: normLinear centres its folded weight,
// so Σdx̂ = 0 and that term of the layer-norm gradient is dropped, as in the composite):
// p = Σ(dx̂·x̂)/D, dx = (dx̂ − x̂·p)·r.
// Edge cases: a constant row has σ² = 0 and r = 1/√eps (eps > 0 is required by the op);
// D = 0 gives empty outputs.
void layer_norm_rows(const float* x, float* xhat, float* rstd, int64_t n, int64_t d, float eps) {
  for (int64_t r = 0; r < n; r++) {
    const float* xr = x + r * d;
    float* yr = xhat + r * d;
    float sum = 0.f;
    for (int64_t j = 0; j < d; j++) sum += xr[j];
    const float mean = sum / static_cast<float>(d);
    float sq = 0.f;
    for (int64_t j = 0; j < d; j++) {
      const float c = xr[j] - mean;
      sq += c * c;
    }
    const float rs = rsqrt_rounded(sq / static_cast<float>(d) + eps);
    for (int64_t j = 0; j < d; j++) yr[j] = (xr[j] - mean) * rs;
    rstd[r] = rs;
  }
}

void layer_norm_grad_rows(const float* dxhat, const float* xhat, const float* rstd, float* dx, int64_t n, int64_t d) {
  for (int64_t r = 0; r < n; r++) {
    const float* g = dxhat + r * d;
    const float* h = xhat + r * d;
    float dot = 0.f;
    for (int64_t j = 0; j < d; j++) dot += g[j] * h[j];
    const float p = dot / static_cast<float>(d);
    const float rs = rstd[r];
    float* o = dx + r * d;
    for (int64_t j = 0; j < d; j++) o[j] = (g[j] - h[j] * p) * rs;
  }
}

// --- Masked softmax over the last axis, and its backward ---------------------------------
// Forward, per row of s [..., T, K] with an additive mask m [T, K] (0 or a large negative)
// broadcast over the leading axes: p = softmax(s + m), max-subtracted. Backward, per row:
// ds = p ∘ (dp − Σ dp∘p). Edge cases: a row whose every entry is −inf (or masked to it) gives
// NaN, as TensorFlow's Softmax does; a masked entry of −1e9 gives exactly 0.
// softmax(x) over n floats in place, max-subtracted; exp(z) below −87 is taken as 0. Shared by
// the masked softmax below and the attention kernel's causal rows (attention-kernels.h).
inline void softmax_in_place(float* x, int64_t n) {
  float mx = -INFINITY;
  for (int64_t j = 0; j < n; j++) mx = x[j] > mx ? x[j] : mx;
  float sum = 0.f;
  for (int64_t j = 0; j < n; j++) {
    const float z = x[j] - mx;  // <= 0, or NaN
    const float e = z < -87.f ? 0.f : exp_in_range(z < -87.f ? -87.f : z);
    x[j] = e;
    sum += e;
  }
  const float inv = 1.0f / sum;
  for (int64_t j = 0; j < n; j++) x[j] *= inv;
}

void masked_softmax_rows(const float* s, const float* mask, float* p, int64_t lo, int64_t hi, int64_t t, int64_t k) {
  for (int64_t r = lo; r < hi; r++) {
    const float* sr = s + r * k;
    const float* mr = mask + (r % t) * k;
    float* pr = p + r * k;
    for (int64_t j = 0; j < k; j++) pr[j] = sr[j] + mr[j];
    softmax_in_place(pr, k);
  }
}

void softmax_grad_rows(const float* p, const float* dp, float* ds, int64_t rows, int64_t k) {
  for (int64_t r = 0; r < rows; r++) {
    const float* pr = p + r * k;
    const float* gr = dp + r * k;
    float dot = 0.f;
    for (int64_t j = 0; j < k; j++) dot += gr[j] * pr[j];
    float* o = ds + r * k;
    for (int64_t j = 0; j < k; j++) o[j] = pr[j] * (gr[j] - dot);
  }
}
