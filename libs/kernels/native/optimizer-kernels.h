// Kernels of the optimizer step and of bias gradients: SrpoAdam (adam-optimizer.ts' whole step:
// global-norm clip, moment update and the weights' update, AdamW decay included, on the lists of
// gradients and weights) and SrpoColumnSum (native-ops' sumToLastAxis). Included by
// srpo-kernels.cc after the pool, is_nan_bits and is_inf_bits.
#pragma once

// Why: Adam's composite form is about a dozen tfjs ops over the flat [N] vector (square, sum,
// sqrt, the clip scalars, five scalar products, two adds, sqrt, add, divide), each a pass over
// memory and a dispatch, plus the concat, split and per-weight subtractions around it; one
// reference step spent ~5 ms there (#21). TensorFlow's BiasAddGrad, which sumToLastAxis used,
// took 3.7 ms for ten column sums that PyTorch does in ~1 ms.
//
// --- Adam with global-norm clipping, on the list of weights ---------------------------------
// SrpoAdam takes the N gradients and the N weights as lists (any shapes, gradient i of weight
// i's shape), the flat moments m, v [total] (total = Σ weight sizes; weight i's moments are at
// the offset of its place in the list, the concatenation order) and the scalars p (kAdamParams
// floats, below). Exactly the composite's formula, each product and sum in float32 as it forms
// them, with g, w the concatenations of the gradients and weights:
//   norm  = √(Σ g²)                                   (the pre-clip global norm, an output)
//   coef  = min(1, maxGradNorm/(norm + 1e-6)) with clipping on (maxGradNorm > 0), else 1
//   m'    = β1·m + g·(coef·(1−β1))
//   v'    = β2·v + g²·(coef²·(1−β2))
//   delta = (m'·stepSize)/(√v' + epsHat)
//   w'    = (w − delta) − w·decay                      (decay = lr·weightDecay; the term is
//                                                       skipped for decay = 0, as the composite
//                                                       skips it for weightDecay = 0)
// and returns m', v', norm and the N new weights (each of its weight's shape). Decoupled decay
// uses the pre-update weight, as torch.optim.AdamW does. 1−β1 and 1−β2 come in as inputs (the
// caller's float64 differences rounded once, as the composite's scalars are) rather than being
// formed here in float32. The products may be fused into FMAs (-ffast-math), so m', v' and w'
// can differ from the composite by an ulp or so.
// Why lists: with one flat vector the caller still ran a concat of the ~28 gradients, a split of
// delta and a subtraction per weight around the kernel, ~60 tfjs ops of ~45 µs each (#21).
//
// Σg² is deterministic and independent of the thread count and of how the weights are cut into
// tensors (audits re-run updates on machines with other core counts and expect the same bits):
// the concatenation g [total] is cut into fixed blocks of kNormBlock elements (a block may span
// several tensors), each block sums its squares (exact in double) into a double partial in 8
// lanes, element j of the block (flat index block start + j) into lane j mod 8, each lane in
// index order, the lanes then added as ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)); the
// partials are added on the calling thread into 4 lanes (block b into lane b mod 4, in block
// order), then (l0 + l2) + (l1 + l3). The spec reproduces this order bit for bit. The double
// sum is rounded once to float32 and its float32 square root taken, as the composite's float32
// Sum and Sqrt do (a sum beyond float32's range gives norm = +inf, like theirs). The order is
// the one of the earlier flat-vector kernel, so the norm did not change with the list inputs.
//
// Edge cases (the composite's behaviour, kept; tested): empty weights are allowed (total = 0
// gives empty m', v' and norm 0). A NaN in g makes norm NaN; with clipping, coef is then NaN
// (TensorFlow's Minimum propagates NaN) and every m', v', delta and so w' is NaN; without, only
// that element's are. An ±inf in g (or a sum of squares beyond float32's range) makes norm +inf;
// with clipping coef = max/inf = 0, so m' = β1·m and v' = β2·v wherever g and g² are finite and
// NaN where they are not (inf·0); without clipping the infinite element's m' and v' are ±inf and
// its delta (so w') NaN (inf/inf). NaN tests use bits (is_nan_bits): -ffast-math may drop
// x != x and turn min() into MINSS, which returns its second operand when either is NaN.
constexpr int64_t kNormBlock = 4096;  // elements per partial of Σg²; fixed, so the sum does not depend on threads
constexpr int kAdamParams = 8;        // maxGradNorm (≤ 0: no clip), β1, 1−β1, β2, 1−β2, stepSize, epsHat, decay

struct AdamScalars {
  float beta1, k1, beta2, k2, step, eps, decay;
};

// The gradient and weight lists seen as one flat vector, their concatenation: tensor t holds
// the flat indices [offset[t], offset[t + 1]).
struct AdamLists {
  const float* const* g;
  const float* const* w;
  float* const* w_out;
  const int64_t* offset;  // n + 1 entries, offset[0] = 0
  int n;

  // f(t, a, b) for every tensor t with elements in flat [lo, hi), in list order, where [a, b)
  // (non-empty) are those elements' indices within tensor t.
  template <class F>
  void each(int64_t lo, int64_t hi, F f) const {
    int t = static_cast<int>(std::upper_bound(offset, offset + n + 1, lo) - offset) - 1;
    for (; t < n && offset[t] < hi; t++) {
      const int64_t a = std::max(lo, offset[t]), b = std::min(hi, offset[t + 1]);
      if (b > a) f(t, a - offset[t], b - offset[t]);
    }
  }
};

// Adds x[i]² for i in [0, count) into lane (lane0 + i) mod 8, each lane in index order.
inline void add_squares(const float* __restrict x, int64_t count, int lane0, double* __restrict lane) {
  int64_t i = 0;
  int l = lane0;
  for (; i < count && l != 0; i++, l = (l + 1) & 7) {
    const double d = x[i];
    lane[l] += d * d;  // exact: a float's square fits in a double's 53 bits
  }
  for (; i + 8 <= count; i += 8) {  // here l = 0 (or i = count)
    for (int k = 0; k < 8; k++) {
      const double d = x[i + k];
      lane[k] += d * d;
    }
  }
  for (; i < count; i++, l = (l + 1) & 7) {
    const double d = x[i];
    lane[l] += d * d;
  }
}

// Partials of the blocks [b_lo, b_hi) of the flat g [total] into partial[b].
inline void sum_squares_blocks(const AdamLists& L, int64_t total, double* partial, int64_t b_lo, int64_t b_hi) {
  for (int64_t b = b_lo; b < b_hi; b++) {
    const int64_t lo = b * kNormBlock;
    double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    L.each(lo, std::min(total, lo + kNormBlock), [&](int t, int64_t a, int64_t e) {
      add_squares(L.g[t] + a, e - a, static_cast<int>((L.offset[t] + a - lo) & 7), lane);
    });
    partial[b] = ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
  }
}

inline bool is_nan_bits_d(double x) {
  uint64_t b;
  std::memcpy(&b, &x, 8);
  return (b & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
}

// The float32 norm from the block partials: √(float32(Σ partial)), the partials added on one
// thread into 4 lanes (partial b into lane b mod 4, in block order), then (l0 + l2) + (l1 + l3).
// Written out rather than a plain `s += partial[b]`, which -ffast-math would let GCC vectorise
// into an order of its own choosing; the spec reproduces this order to the bit.
inline float global_norm(const double* partial, int64_t blocks) {
  double lane[4] = {0, 0, 0, 0};
  for (int64_t b = 0; b < blocks; b++) lane[b & 3] += partial[b];
  const double s = (lane[0] + lane[2]) + (lane[1] + lane[3]);
  // s is a finite sum ≥ 0, +inf or NaN. Converting a double beyond float's range is undefined in
  // C++: below 0x1.ffffffp127 it rounds to at most FLT_MAX, from there it would round to +inf.
  if (is_nan_bits_d(s)) return NAN;
  const float sf = s >= 0x1.ffffffp127 ? INFINITY : static_cast<float>(s);
  return std::sqrt(sf);
}

// coef·(1−β1) and coef²·(1−β2) from the norm, in float32 as the composite forms them.
inline AdamScalars adam_scalars(const float* p, float norm) {
  const float max_norm = p[0];
  float coef = 1.f;
  // Clipping is on for max > 0, which also holds for +inf (coef then 1, or NaN for an infinite
  // norm: inf/inf, as the composite gives); the caller passes 0 for "off".
  if (!is_nan_bits(max_norm) && max_norm > 0.f) {
    const float q = max_norm / (norm + 1e-6f);  // norm = +inf: q = 0
    coef = is_nan_bits(q) ? q : (q < 1.f ? q : 1.f);
  }
  return AdamScalars{p[1], coef * p[2], p[3], (coef * coef) * p[4], p[5], p[6], p[7]};
}

// One tensor's stretch of the update: g, w, w_out at the tensor's own indices, m, v, m_out,
// v_out at the matching flat ones; `decay` selects the weight-decay term.
template <bool decay>
inline void adam_update(const float* __restrict g, const float* __restrict m, const float* __restrict v, const float* __restrict w, float* __restrict m_out,
                        float* __restrict v_out, float* __restrict w_out, int64_t n, AdamScalars s) {
  for (int64_t i = 0; i < n; i++) {
    const float gi = g[i];
    const float g2 = gi * gi;
    const float mi = m[i] * s.beta1 + gi * s.k1;
    const float vi = v[i] * s.beta2 + g2 * s.k2;
    m_out[i] = mi;
    v_out[i] = vi;
    const float next = w[i] - (mi * s.step) / (std::sqrt(vi) + s.eps);
    w_out[i] = decay ? next - w[i] * s.decay : next;
  }
}

// The update over flat [lo, hi), tensor by tensor.
inline void adam_update_range(const AdamLists& L, const float* m, const float* v, float* m_out, float* v_out, int64_t lo, int64_t hi, AdamScalars s) {
  L.each(lo, hi, [&](int t, int64_t a, int64_t e) {
    const int64_t f = L.offset[t] + a;
    if (s.decay != 0.f) adam_update<true>(L.g[t] + a, m + f, v + f, L.w[t] + a, m_out + f, v_out + f, L.w_out[t] + a, e - a, s);
    else adam_update<false>(L.g[t] + a, m + f, v + f, L.w[t] + a, m_out + f, v_out + f, L.w_out[t] + a, e - a, s);
  });
}

// --- Column sums ----------------------------------------------------------------------------
// y[j] = Σ_r x[r, j] for x [R, C] (every axis but the last flattened into R). The pool splits
// the columns, so each column is summed by one thread, in row order: the result does not depend
// on the thread count. A thread walks its columns in blocks of kColBlock, and for each block the
// rows in order, adding each row's contiguous run of columns into a local buffer (a vectorised
// add of contiguous floats, where a loop per column would stride through memory). The rows are
// summed in groups of kRowGroup into one buffer, and the groups' sums added into another (a
// two-level cascade: error about (kRowGroup + R/kRowGroup) ulp rather than R ulp, for one more
// add per column every kRowGroup rows).
// Edge cases: R = 0 gives zeros; C = 0 an empty output; NaN and infinities propagate as in any
// float32 sum (+inf and −inf in one column give NaN; an overflowing sum gives ±inf).
// Columns are never split across threads, so fewer than 2·16 columns run on one thread.
constexpr int64_t kColBlock = 256;  // floats per buffer: two 1 KB buffers stay in L1
constexpr int64_t kRowGroup = 64;

inline void column_sums(const float* __restrict x, float* __restrict y, int64_t rows, int64_t cols, int64_t lo, int64_t hi) {
  float total[kColBlock], part[kColBlock];
  for (int64_t c0 = lo; c0 < hi; c0 += kColBlock) {
    const int64_t w = std::min(kColBlock, hi - c0);
    for (int64_t j = 0; j < w; j++) total[j] = 0.f;
    for (int64_t r0 = 0; r0 < rows; r0 += kRowGroup) {
      const int64_t r1 = std::min(rows, r0 + kRowGroup);
      const float* xr = x + r0 * cols + c0;
      for (int64_t j = 0; j < w; j++) part[j] = xr[j];
      for (int64_t r = r0 + 1; r < r1; r++) {
        xr += cols;
        for (int64_t j = 0; j < w; j++) part[j] += xr[j];
      }
      for (int64_t j = 0; j < w; j++) total[j] += part[j];
    }
    for (int64_t j = 0; j < w; j++) y[c0 + j] = total[j];
  }
}
