// Row kernels of the log-probs of target tokens (native-ops' targetLogProbsFused), forward and
// backward. Included by srpo-kernels.cc after exp_in_range and is_nan_bits.
#pragma once

// Forward, per row of logits x [N, V] with target t: m = max_j x_j,
// lse = m + log Σ_j exp(x_j − m), logp = x_t − lse. Outputs logp [N] and lse [N]: the backward
// needs only lse, where TensorFlow's SparseSoftmaxCrossEntropyWithLogits writes (and the
// learner then kept) a [N, V] table. The exponentials are summed in double: over a 32k
// vocabulary a float sum would carry about √V ulps into every log-prob.
// Backward, per row: dx_j = dy · ([j = t] − exp(x_j − lse)).
// Edge cases: a −inf logit contributes 0 (and gets gradient 0); a row holding a NaN or +inf, or
// only −inf, gives NaN log-prob and gradient, as TensorFlow's op does (tested by bits:
// -ffast-math may fold comparisons with them). Targets outside [0, V) are refused by the op.
inline bool is_inf_bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return (b & 0x7fffffffu) == 0x7f800000u;
}

inline void target_logp_rows(const float* x, const int32_t* t, float* logp, float* lse, int64_t lo, int64_t hi, int64_t v) {
  for (int64_t r = lo; r < hi; r++) {
    const float* xr = x + r * v;
    float m = -INFINITY;
    bool bad = false;  // a NaN or +inf anywhere in the row
    for (int64_t j = 0; j < v; j++) {
      const float xj = xr[j];
      bad |= is_nan_bits(xj) || (is_inf_bits(xj) && xj > 0);
      m = xj > m ? xj : m;
    }
    if (bad || is_inf_bits(m)) {
      lse[r] = logp[r] = NAN;
      continue;
    }
    double sum = 0;
    for (int64_t j = 0; j < v; j++) {
      const float z = xr[j] - m;  // <= 0
      sum += static_cast<double>(z < -87.f ? 0.f : exp_in_range(z));
    }
    const float l = m + static_cast<float>(std::log(sum));
    lse[r] = l;
    logp[r] = xr[t[r]] - l;
  }
}

inline void target_logp_grad_rows(const float* x, const int32_t* t, const float* lse, const float* dy, float* dx, int64_t lo, int64_t hi, int64_t v) {
  for (int64_t r = lo; r < hi; r++) {
    const float* xr = x + r * v;
    float* o = dx + r * v;
    const float l = lse[r], g = dy[r];
    if (is_nan_bits(l)) {
      for (int64_t j = 0; j < v; j++) o[j] = NAN;
      continue;
    }
    for (int64_t j = 0; j < v; j++) {
      const float z = xr[j] - l;  // <= 0 up to rounding
      const float p = z < -87.f ? 0.f : exp_in_range(z > 0.f ? 0.f : z);
      o[j] = -(g * p);
    }
    const float zt = xr[t[r]] - l;
    o[t[r]] = g * (1.0f - (zt < -87.f ? 0.f : exp_in_range(zt > 0.f ? 0.f : zt)));
  }
}
