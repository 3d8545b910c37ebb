// The weight folding of transformer-ops.ts' normLinear, forward and backward, one op each
// (SrpoNormFold, SrpoNormFoldGrad; their op bodies are in transformer-ops.h).
//
// Why: normLinear computes LN(x; g, β)·W + b as x̂·W_c + c with the gain and shift folded into
// the (small) weight. As tfjs ops the folding is 7 ops forward and 10 backward per projection,
// each a few tens of µs of fixed cost on a [128, 512] weight: about 85 ops of a reference step
// (docs/benchmarks.md, #21). Here each direction is one pass over the weight.
//
// Forward, W [D, O], g, β [D], bias b and column scale s [O] (each optional; W_c also transposed):
//   W' = diag(g)·W,  W_c[i][o] = (W'[i][o] − mean_i W'[i][o])·s[o],  c[o] = (Σ_i β[i] W[i][o] + b[o])·s[o]
// Backward, from dW_c [D, O] (= x̂ᵀ·dy) and dc [O] (= column sums of dy):
//   G = dW_c ∘ s, h = dc ∘ s, G' = G − 1·mean_i G (through the centring),
//   dg[i] = Σ_o G'[i][o] W[i][o],  dβ[i] = Σ_o W[i][o] h[o],  dW[i][o] = G'[i][o] g[i] + β[i] h[o],  db = h.
// The same formulas as the composite path; the sums run in a fixed order on one thread (the
// weights are small), so the bits do not depend on the machine's cores. Edge cases: D = 0 gives
// c = b·s and empty weight outputs; non-finite values propagate.

struct NormFoldArgs {
  const float *w, *g, *shift, *bias, *scale;  // bias and scale may be null
  int64_t d, o;
};

// Writes W_c [D, O], its transpose W_cᵀ [O, D] (the backward's dx̂ = dy·W_cᵀ then runs as a
// plain product, 1–20 % faster in oneDNN than with transpose_b on these shapes) and c [O].
// `colsum` is scratch of O floats.
inline void norm_fold_forward(const NormFoldArgs& a, float* __restrict wc, float* __restrict wct, float* __restrict c, float* __restrict colsum) {
  const int64_t d = a.d, o = a.o;
  for (int64_t k = 0; k < o; k++) colsum[k] = 0.f, c[k] = 0.f;
  for (int64_t i = 0; i < d; i++) {
    const float gi = a.g[i], si = a.shift[i];
    const float* __restrict wr = a.w + i * o;
    float* __restrict wcr = wc + i * o;
    for (int64_t k = 0; k < o; k++) {
      const float wg = wr[k] * gi;
      wcr[k] = wg;
      colsum[k] += wg;
      c[k] += si * wr[k];
    }
  }
  const float inv_d = d > 0 ? 1.0f / static_cast<float>(d) : 0.f;
  for (int64_t k = 0; k < o; k++) {
    colsum[k] *= inv_d;  // now the column mean
    if (a.bias) c[k] += a.bias[k];
    if (a.scale) c[k] *= a.scale[k];
  }
  for (int64_t i = 0; i < d; i++) {
    float* __restrict wcr = wc + i * o;
    if (a.scale)
      for (int64_t k = 0; k < o; k++) wcr[k] = (wcr[k] - colsum[k]) * a.scale[k];
    else
      for (int64_t k = 0; k < o; k++) wcr[k] = wcr[k] - colsum[k];
  }
  // The transpose in 16 × 16 blocks, so that each block's writes fill whole lines of W_cᵀ: column
  // by column, its writes at a stride of D floats took 85 % of the op (97 of 114 µs on [128, 384],
  // Intel Xeon, 2026-12-03, #21).
  constexpr int64_t kBlock = 16;
  for (int64_t i0 = 0; i0 < d; i0 += kBlock)
    for (int64_t k0 = 0; k0 < o; k0 += kBlock) {
      const int64_t i1 = std::min(d, i0 + kBlock), k1 = std::min(o, k0 + kBlock);
      for (int64_t k = k0; k < k1; k++)
        for (int64_t i = i0; i < i1; i++) wct[k * d + i] = wc[i * o + k];
    }
}

// Writes dg [D], dβ [D], dW [D, O] and db [O] (= h, also used as scratch). `colmean` is scratch of O floats.
inline void norm_fold_backward(const NormFoldArgs& a, const float* __restrict dwc, const float* __restrict dc, float* __restrict dg, float* __restrict dshift,
                               float* __restrict dw, float* __restrict h, float* __restrict colmean) {
  const int64_t d = a.d, o = a.o;
  for (int64_t k = 0; k < o; k++) h[k] = a.scale ? dc[k] * a.scale[k] : dc[k], colmean[k] = 0.f;
  // Column means of G = dW_c ∘ s; G itself goes to dw for now.
  for (int64_t i = 0; i < d; i++) {
    const float* __restrict r = dwc + i * o;
    float* __restrict gr = dw + i * o;
    if (a.scale)
      for (int64_t k = 0; k < o; k++) gr[k] = r[k] * a.scale[k];
    else
      for (int64_t k = 0; k < o; k++) gr[k] = r[k];
    for (int64_t k = 0; k < o; k++) colmean[k] += gr[k];
  }
  const float inv_d = d > 0 ? 1.0f / static_cast<float>(d) : 0.f;
  for (int64_t k = 0; k < o; k++) colmean[k] *= inv_d;
  for (int64_t i = 0; i < d; i++) {
    const float* __restrict wr = a.w + i * o;
    float* __restrict gr = dw + i * o;
    const float gi = a.g[i], si = a.shift[i];
    float sum_g = 0.f, sum_s = 0.f;
    for (int64_t k = 0; k < o; k++) {
      const float gp = gr[k] - colmean[k];
      sum_g += gp * wr[k];
      sum_s += wr[k] * h[k];
      gr[k] = gp * gi + si * h[k];
    }
    dg[i] = sum_g;
    dshift[i] = sum_s;
  }
}
