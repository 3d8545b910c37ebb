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

// SrpoScatterRows(g [R, D], rows int32 [R]; n) -> y [n, D]: the rows of g added into rows
// `rows` of zeros (elementwise-kernels.h). An index outside [0, n) fails the op, naming it.
struct ScatterRowsAttrs {
  int32_t n;
};
void* scatter_rows_create(TF_OpKernelConstruction* ctx) {
  auto* a = new ScatterRowsAttrs{0};
  TF_Status* status = TF_NewStatus();
  TF_OpKernelConstruction_GetAttrInt32(ctx, "n", &a->n, status);
  TF_DeleteStatus(status);
  return a;
}
void scatter_rows_delete(void* p) { delete static_cast<ScatterRowsAttrs*>(p); }

// Whether every rows[r] (r < r_count) lies in [0, n); fails the op naming the first that does not.
bool rows_in_range(Call& c, const int32_t* rows, int64_t r_count, int64_t n) {
  for (int64_t r = 0; r < r_count; r++)
    if (rows[r] < 0 || rows[r] >= n)
      return c.fail("rows[" + std::to_string(r) + "] = " + std::to_string(rows[r]) + " is outside [0, " + std::to_string(n) + ")"), false;
  return true;
}

void scatter_rows_compute(void* state, TF_OpKernelContext* ctx) {
  const int64_t n = static_cast<const ScatterRowsAttrs*>(state)->n;
  Call c(ctx, "SrpoScatterRows", 2, 1, "rows");
  if (c.ok() && (c.rank(0) != 2 || c.rank(1) != 1 || c.dim(1, 0) != c.dim(0, 0))) c.fail("g must be [R, D] and rows [R]");
  if (c.ok() && n < 0) c.fail("n must be >= 0");
  if (!c.ok()) return;
  const int64_t r_count = c.dim(0, 0), d = c.dim(0, 1);
  const int32_t* rows = c.ints(1);
  if (!rows_in_range(c, rows, r_count, n)) return;
  const int64_t dims[2] = {n, d};
  float* y = c.out(0, dims, 2);
  if (!c.ok() || n == 0 || d == 0) return;
  const float* g = c.data(0);
  pool().run(d, kLine, kInlineBelow / (n + r_count + 1) + 1, [&](int64_t lo, int64_t hi) { scatter_rows(g, rows, y, r_count, n, d, lo, hi); });
}

// SrpoTranspose(x [R, C]) -> y [C, R] (elementwise-kernels.h' transpose_rows).
void transpose_compute(void*, TF_OpKernelContext* ctx) {
  Call c(ctx, "SrpoTranspose", 1);
  if (c.ok() && c.rank(0) != 2) c.fail("x must be 2-D");
  if (!c.ok()) return;
  const int64_t r = c.dim(0, 0), cols = c.dim(0, 1);
  const int64_t dims[2] = {cols, r};
  float* y = c.out(0, dims, 2);
  if (!c.ok() || r == 0 || cols == 0) return;
  const float* x = c.data(0);
  pool().run(cols, 16, kInlineBelow / (r + 1) + 1, [&](int64_t lo, int64_t hi) { transpose_rows(x, y, r, cols, lo, hi); });
}

// SrpoGatherRows(x [N, D], rows int32 [R]) -> y [R, D] = x[rows] (elementwise-kernels.h). An index
// outside [0, N) fails the op, naming it.
void gather_rows_compute(void*, TF_OpKernelContext* ctx) {
  Call c(ctx, "SrpoGatherRows", 2, 1, "rows");
  if (c.ok() && (c.rank(0) != 2 || c.rank(1) != 1)) c.fail("x must be [N, D] and rows [R]");
  if (!c.ok()) return;
  const int64_t n = c.dim(0, 0), d = c.dim(0, 1), r_count = c.dim(1, 0);
  const int32_t* rows = c.ints(1);
  if (!rows_in_range(c, rows, r_count, n)) return;
  const int64_t dims[2] = {r_count, d};
  float* y = c.out(0, dims, 2);
  if (!c.ok() || r_count == 0 || d == 0) return;
  const float* x = c.data(0);
  pool().run(r_count, 1, kInlineBelow / (d + 1) + 1, [&](int64_t lo, int64_t hi) { gather_rows(x, rows, y, d, lo, hi); });
}
