// TensorFlow op bodies of the adds (SrpoAdd, SrpoAddResidualBias).
// Included by srpo-kernels.cc after kernel-support.h and the kernels' arithmetic (*-kernels.h).
#pragma once

// SrpoAddResidualBias(a [..., C], b of a's shape, row [C]) -> y = a + (b + row).
void add_residual_bias_compute(void*, TF_OpKernelContext* ctx) {
  Call c(ctx, "SrpoAddResidualBias", 3);
  bool same = c.ok() && c.rank(0) == c.rank(1) && c.rank(0) >= 1;
  for (int d = 0; same && d < c.rank(0); d++) same = c.dim(0, d) == c.dim(1, d);
  if (c.ok() && (!same || c.rank(2) != 1 || c.dim(2, 0) != c.dim(0, -1))) c.fail("b must have a's shape [..., C] and row be [C]");
  float* y = c.out_like(0, 0);
  if (!c.ok()) return;
  const int64_t cols = c.dim(0, -1);
  if (cols == 0 || c.size(0) == 0) return;
  const float *a = c.data(0), *b = c.data(1), *row = c.data(2);
  pool().run(c.size(0) / cols, 1, kInlineBelow / cols + 1, [&](int64_t lo, int64_t hi) { add_residual_bias(a, b, row, y, lo, hi, cols); });
}

// SrpoAdd(a, b) -> y = a + b: b of a's shape, or a row for a [..., C]: [C], or [1, C] (any
// number of leading 1s, no more axes than a), which broadcasts to a's shape.
void add_compute(void*, TF_OpKernelContext* ctx) {
  Call c(ctx, "SrpoAdd", 2);
  bool same = c.ok() && c.rank(0) == c.rank(1);
  for (int d = 0; same && d < c.rank(0); d++) same = c.dim(0, d) == c.dim(1, d);
  const bool row = c.ok() && !same && c.rank(1) >= 1 && c.rank(1) <= c.rank(0) && c.dim(1, -1) == c.dim(0, -1) && c.size(1) == c.dim(1, -1);
  if (c.ok() && !same && !row) c.fail("b must have a's shape, or be a row [C] or [1, ..., C] for a [..., C]");
  float* y = c.out_like(0, 0);
  if (!c.ok()) return;
  const float *a = c.data(0), *b = c.data(1);
  if (same) {
    pool().run(c.size(0), kLine, kInlineBelow, [&](int64_t lo, int64_t hi) { add_flat(a, b, y, lo, hi); });
  } else {
    const int64_t cols = c.dim(1, -1);
    if (cols == 0) return;
    pool().run(c.size(0) / cols, 1, kInlineBelow / cols + 1, [&](int64_t lo, int64_t hi) { add_row(a, b, y, lo, hi, cols); });
  }
}
