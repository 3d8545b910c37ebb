// Elementwise addition on the pool (srpo-kernels.ts' routeAddsToSrpoAdd routes
// tfjs's `Add` here). Included by srpo-kernels.cc after the pool.
#pragma once

// Why: TensorFlow's AddV2 on a [2048, 128] float array takes 3–6x PyTorch's time on these 2-vCPU
// machines, though the loop is the same; its Eigen pool hands blocks to whichever thread is
// free, so halves of an array change cores between ops (docs/benchmarks.md, #21). A step of the
// learner runs about 35 such adds (residuals, biases, and tfjs's own gradient accumulation).
//
// y = a + b, float32, one IEEE addition per element: the result is bit for bit TensorFlow's
// (addition is exactly rounded and commutative; no reassociation is possible in one add), so
// routing adds here changes no recorded number. b is either of a's shape or a row [C] added to
// every row of a [..., C] (a bias).
inline void add_flat(const float* __restrict a, const float* __restrict b, float* __restrict y, int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; i++) y[i] = a[i] + b[i];
}

inline void add_row(const float* __restrict a, const float* __restrict b, float* __restrict y, int64_t rows_lo, int64_t rows_hi, int64_t c) {
  for (int64_t r = rows_lo; r < rows_hi; r++) {
    const float* ar = a + r * c;
    float* yr = y + r * c;
    for (int64_t j = 0; j < c; j++) yr[j] = ar[j] + b[j];
  }
}

// y = a + (b + row): a residual plus a product plus its bias ([..., C] with a row [C]), as
// transformer-ops.ts' residualLinear forms it with two adds, in one pass over a row at a time.
// Each row's b + row is finished before a is added (two loops, so -ffast-math cannot reassociate
// the sum): bit for bit the two adds.
inline void add_residual_bias(const float* __restrict a, const float* __restrict b, const float* __restrict row, float* __restrict y, int64_t rows_lo, int64_t rows_hi,
                              int64_t c) {
  for (int64_t r = rows_lo; r < rows_hi; r++) {
    const float* ar = a + r * c;
    const float* br = b + r * c;
    float* yr = y + r * c;
    for (int64_t j = 0; j < c; j++) yr[j] = br[j] + row[j];
    for (int64_t j = 0; j < c; j++) yr[j] = ar[j] + yr[j];
  }
}

// Scatter of rows, the gradient of a row gather (SrpoScatterRows): y [n, D] = 0, then
// y[rows[r]] += g[r] for r = 0..R−1 in order, over columns [lo, hi).
//
// Why: TensorFlow's UnsortedSegmentSum, which tfjs's gather gradient runs, took 580 µs for
// [1568, 128] rows into [2048, 128] and 180 µs for 32 rows (Intel Xeon, 2 vCPUs, 2026-12-03,
// #21); this is one pass over y. Threads split the columns, so each output element is summed by
// one thread in r order: a repeated index adds its rows in the same order on every machine, and
// with distinct indices every row is copied exactly (bit for bit TensorFlow's).
inline void scatter_rows(const float* __restrict g, const int32_t* __restrict rows, float* __restrict y, int64_t r_count, int64_t n, int64_t d, int64_t lo,
                         int64_t hi) {
  for (int64_t i = 0; i < n; i++) std::fill(y + i * d + lo, y + i * d + hi, 0.f);
  for (int64_t r = 0; r < r_count; r++) {
    const float* src = g + r * d;
    float* dst = y + static_cast<int64_t>(rows[r]) * d;
    for (int64_t j = lo; j < hi; j++) dst[j] += src[j];
  }
}

// Transpose of a matrix (SrpoTranspose): y [C, R] = xᵀ for x [R, C], over y's rows [lo, hi)
// (x's columns), in 16 × 16 blocks so that each block's writes fill whole lines of y.
//
// Why: TensorFlow's Transpose took 130–140 µs for the tied output head's [64, 128] (a 32 KB
// copy; a Neg of it, 14–21 µs), twice per step with its gradient (Intel Xeon, 2026-12-03, #21).
// A copy: the bits are tf.transpose's.
inline void transpose_rows(const float* __restrict x, float* __restrict y, int64_t r, int64_t c, int64_t lo, int64_t hi) {
  constexpr int64_t kBlock = 16;
  for (int64_t j0 = lo; j0 < hi; j0 += kBlock)
    for (int64_t i0 = 0; i0 < r; i0 += kBlock) {
      const int64_t j1 = std::min(hi, j0 + kBlock), i1 = std::min(r, i0 + kBlock);
      for (int64_t j = j0; j < j1; j++)
        for (int64_t i = i0; i < i1; i++) y[j * r + i] = x[i * c + j];
    }
}

// Gather of rows (SrpoGatherRows): y[r] = x[rows[r]] for r in [lo, hi), each a copy of D floats.
// Why: TensorFlow's GatherV2 took about 230 µs for the learner's response rows ([1568, 128] of
// [2048, 128]), about 1 MB of copies (Intel Xeon, 2026-12-03, #21). A copy: tf.gather's bits.
inline void gather_rows(const float* __restrict x, const int32_t* __restrict rows, float* __restrict y, int64_t d, int64_t lo, int64_t hi) {
  for (int64_t r = lo; r < hi; r++) std::memcpy(y + r * d, x + static_cast<int64_t>(rows[r]) * d, static_cast<size_t>(d) * sizeof(float));
}
