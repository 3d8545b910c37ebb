// TensorFlow op body of the matrix product (SrpoMatMul). Included by srpo-kernels.cc after
// kernel-support.h and gemm-kernels.h.
#pragma once

// SrpoMatMul(a, b; transpose_a, transpose_b) -> c = op(a)·op(b), 2-D, as TensorFlow's MatMul:
// op(a) [M, K] (a is [K, M] when transpose_a), op(b) [K, N] (b is [N, K] when transpose_b).
// Threads: C's rows (when M >= N) or columns are split into one contiguous range of micro-tiles
// per core; each thread packs its own blocks. Every element is computed whole by one thread in
// the same order (gemm-kernels.h), so the bits do not depend on the core count. Products under
// kGemmInlineFma multiply-adds run on the calling thread.
struct MatMulAttrs {
  bool trans_a, trans_b;
};

void* matmul_create(TF_OpKernelConstruction* ctx) {
  auto* a = new MatMulAttrs{false, false};
  read_bool_attrs(ctx, {{"transpose_a", &a->trans_a}, {"transpose_b", &a->trans_b}});
  return a;
}
void matmul_delete(void* p) { delete static_cast<MatMulAttrs*>(p); }

// About 10 µs of arithmetic on one core: below it, waking a worker costs more than it saves.
constexpr int64_t kGemmInlineFma = int64_t{1} << 19;

// Each thread's packing space, allocated on its first product and kept (2.2 MB).
float* gemm_pack_space() {
  thread_local std::vector<float> space(static_cast<size_t>(kGemmPackA + kGemmPackB));
  return space.data();
}

void matmul_compute(void* state, TF_OpKernelContext* ctx) {
  const MatMulAttrs& at = *static_cast<const MatMulAttrs*>(state);
  Call c(ctx, "SrpoMatMul", 2);
  if (!c.ok()) return;
  if (c.rank(0) != 2 || c.rank(1) != 2) return c.fail("a and b must be 2-D");
  const int64_t m = c.dim(0, at.trans_a ? 1 : 0), k = c.dim(0, at.trans_a ? 0 : 1);
  const int64_t kb = c.dim(1, at.trans_b ? 1 : 0), n = c.dim(1, at.trans_b ? 0 : 1);
  if (k != kb)
    return c.fail("inner dimensions differ: op(a) is [" + std::to_string(m) + ", " + std::to_string(k) + "], op(b) is [" + std::to_string(kb) + ", " +
                  std::to_string(n) + "]");
  const int64_t dims[2] = {m, n};
  float* out = c.out(0, dims, 2);
  if (!out || m == 0 || n == 0) return;
  const GemmArgs g{m, n, k, c.data(0), c.dim(0, 1), at.trans_a, c.data(1), c.dim(1, 1), at.trans_b, out, n};
  const bool split_rows = m >= n;
  const int64_t tile = split_rows ? kMr : kNr, tiles = ((split_rows ? m : n) + tile - 1) / tile;
  const int64_t inline_below = m * n * k < kGemmInlineFma ? tiles + 1 : 0;
  pool().run(tiles, 1, inline_below, [&](int64_t lo, int64_t hi) {
    float* space = gemm_pack_space();
    if (split_rows)
      gemm_block(g, lo * kMr, std::min(m, hi * kMr), 0, n, space, space + kGemmPackA);
    else
      gemm_block(g, 0, m, lo * kNr, std::min(n, hi * kNr), space, space + kGemmPackA);
  });
}
