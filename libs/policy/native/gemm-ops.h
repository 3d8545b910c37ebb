// TensorFlow op body of the matrix product (SrpoMatMul). Included by srpo-kernels.cc after
// kernel-support.h and gemm-kernels.h.
#pragma once

// SrpoMatMul(a, b; transpose_a, transpose_b) -> c = op(a)·op(b), 2-D, as TensorFlow's MatMul:
// op(a) [M, K] (a is [K, M] when transpose_a), op(b) [K, N] (b is [N, K] when transpose_b).
// Threads: C's rows (when M >= N) or columns are cut into the pool's pieces (kernel-support.h:
// each core its own range, and the pieces a late core has not started go to the others). Each
// thread packs the operand that every piece reads once per call (gemm_shared_pack) and the
// blocks of its own pieces. Every element is computed whole by one thread in the same order
// (gemm-kernels.h), so the bits do not depend on the core count or on which thread ran a piece.
// Products under kGemmInlineFma multiply-adds run on the calling thread.
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

// Products whose shared operand packs into more than this (16 MB per thread, kept between calls)
// pack it block by block on a static schedule (one piece per thread: each piece packs it again).
constexpr int64_t kGemmSharedMax = int64_t{1} << 22;
std::atomic<uint64_t> gemm_calls{0};
constexpr int64_t kGemmPiecesPerThread = 16;

// This thread's copy of a product's shared operand, packed by `pack` on the thread's first piece
// of call `call` and reused for its later pieces (the pool's pieces of one call may run on any
// thread).
template <typename Pack>
const float* gemm_shared_pack(uint64_t call, int64_t floats, Pack pack) {
  thread_local uint64_t packed_call = 0;
  thread_local std::vector<float> space;
  if (packed_call != call) {
    if (space.size() < static_cast<size_t>(floats)) space.resize(static_cast<size_t>(floats));
    pack(space.data());
    packed_call = call;
  }
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
  // Every thread reads the whole of the operand that the split does not cut (op(B) when C's rows
  // are split, op(A) when its columns are): each thread packs it once per call, on its first piece.
  const int64_t shared_floats = k * (split_rows ? gemm_padded(n, kNr) : gemm_padded(m, kMr));
  const uint64_t call = gemm_calls.fetch_add(1, std::memory_order_relaxed) + 1;
  const bool share = k > 0 && shared_floats <= kGemmSharedMax;
  // Pieces of whole row blocks (kMc rows), or of 64 columns: a piece's A blocks stay full. With
  // the shared operand packed once per thread, a piece costs little, and small ones keep the
  // wait for a late worker's last piece short: 16 per thread (the step took 0.98–0.99x the time
  // of 4 per thread in a one-process A/B, AMD EPYC, 2026-12-03).
  pool().run(tiles, split_rows ? kMc / kMr : 4, inline_below, [&](int64_t lo, int64_t hi) {
    float* space = gemm_pack_space();
    const float* shared = share ? gemm_shared_pack(call, shared_floats, [&](float* dst) { split_rows ? pack_b_all(g, dst) : pack_a_all(g, dst); }) : nullptr;
    if (split_rows)
      gemm_block(g, lo * kMr, std::min(m, hi * kMr), 0, n, space, space + kGemmPackA, nullptr, shared);
    else
      gemm_block(g, 0, m, lo * kNr, std::min(n, hi * kNr), space, space + kGemmPackA, shared, nullptr);
  }, share ? kGemmPiecesPerThread : 1);
}
