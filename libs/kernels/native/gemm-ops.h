// TensorFlow op body of the matrix product (SrpoMatMul). Included by srpo-kernels.cc after
// kernel-support.h and gemm-kernels.h.
#pragma once

// SrpoMatMul(a, b; transpose_a, transpose_b) -> c = op(a)·op(b), 2-D, as TensorFlow's MatMul:
// op(a) [M, K] (a is [K, M] when transpose_a), op(b) [K, N] (b is [N, K] when transpose_b).
// SrpoMatMulBias(a, b, bias [N] or [1, N]) -> op(a)·op(b) + bias on every row: a linear layer's forward.
// SrpoMatMulBiasResidual(a, b, bias, residual [M, N]) -> residual + (op(a)·op(b) + bias): a
// residual block's output projection (transformer-ops.ts' residualLinear).
// SrpoMatMulColumnSum(a, b) -> (op(a)·op(b), the column sums of b [N]), transpose_b false: a
// weight gradient Xᵀ·dY with its bias gradient Σ_rows dY.
// Each gives, bit for bit, SrpoMatMul followed by SrpoAdd, by SrpoAddResidualBias, or by SrpoColumnSum of b (the
// epilogues of gemm-kernels.h); fused, they save a pass over C or over dY and a tfjs op each (a
// one-process A/B of the reference step with the adds and sums left out took 0.96x the time,
// Intel Xeon, 2026-12-03, #21).
// Threads: C's rows (when M >= N) or columns are cut into the pool's pieces (kernel-support.h:
// each core its own range, and the pieces a late core has not started go to the others). The
// operand that every piece reads is packed once per call, by all threads together, before the
// pieces run (SharedPackSpace); each piece packs the blocks of its own operand. Every element is
// computed whole by one thread in the same order (gemm-kernels.h), or as K segments fixed by the
// shape (below), so the bits do not depend on the core count or on which thread ran a piece.
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
// The few-row path's (gemv_tb): about 10 µs there too, at a few multiply-adds per cycle.
constexpr int64_t kGemvInlineFma = int64_t{1} << 16;

// Each thread's packing space, allocated on its first product and kept (2.2 MB).
float* gemm_pack_space() {
  thread_local AlignedFloats space(static_cast<size_t>(kGemmPackA + kGemmPackB));
  return space.data();
}

// Products whose shared operand packs into more than this (16 MB) pack it block by block on a
// static schedule (one piece per thread: each piece packs it again).
constexpr int64_t kGemmSharedMax = int64_t{1} << 22;
constexpr int64_t kGemmPiecesPerThread = 16;

// Space for a product's shared operand, packed once per call by all threads together and read by
// every piece. Taken for the call and given back after, so that products running at once (TF's
// inter-op threads) never share one; the buffers are kept between calls (one per concurrent
// product, up to 16 MB each).
class SharedPackSpace {
 public:
  std::unique_ptr<AlignedFloats> take(int64_t floats) {
    std::unique_ptr<AlignedFloats> space;
    {
      std::lock_guard<std::mutex> l(m_);
      if (!free_.empty()) space = std::move(free_.back()), free_.pop_back();
    }
    if (!space) space = std::make_unique<AlignedFloats>();
    if (space->size() < static_cast<size_t>(floats)) space->resize(static_cast<size_t>(floats));
    return space;
  }
  void give_back(std::unique_ptr<AlignedFloats> space) {
    std::lock_guard<std::mutex> l(m_);
    free_.push_back(std::move(space));
  }

 private:
  std::mutex m_;
  std::vector<std::unique_ptr<AlignedFloats>> free_;
};
SharedPackSpace& shared_pack_space() {
  static SharedPackSpace* space = new SharedPackSpace();  // never destroyed: workers may outlive static destructors
  return *space;
}

// The micro-kernel of this process (gemm-kernels.h): GemmAvx512 where the CPU has AVX-512F and
// ONEDNN_MAX_CPU_ISA does not cap the process below it (the one knob that emulates an AVX2-only
// machine for TensorFlow's kernels and ours alike), else GemmAvx2. Set by the addon's init (and
// by setIsa, for tests and benches). Both give the same bits, so which one ran never shows in a result.
bool gemm_avx512 = false;

// The thread count matmul_run plans for; 0: the pool's (setGemmPlanThreads, for tests).
int64_t gemm_plan_threads = 0;

// The column sums of op(B) [K, N] (b as stored, trans_b false) into g.col_sums, as SrpoColumnSum.
void matmul_column_sums(const GemmArgs& g) {
  pool().run(g.n, kLine, kInlineBelow / (g.k + 1) + 1, [&](int64_t lo, int64_t hi) { column_sums(g.b, g.col_sums, g.k, g.ldb, lo, hi); });
}

// K segments. A product with a small C and a long K (the weight gradients Xᵀ·dY: C [128, 384]
// over K = 2048 tokens) gives each thread too little of C: cut by its columns, each thread
// re-read the whole of op(A) from L2 for a C of 128 × 192, and the step's weight gradients ran at
// 1.6x one core's speed on two, where MKL (which splits K) reached 1.8x. Such products are
// computed as kKSegment-long segments of K instead: each segment's product is its own FMA chain
// per element (the first into C, the others into scratch), and the segments are then added in
// order, C = ((C₀ + C₁) + C₂)…, before the bias and the residual. The segments depend on the
// shape alone, never on the thread count, so the bits still depend on neither the cores nor the
// vector width (kernel set 11). Two threads then take a segment each: the step's weight
// gradients took 0.66–0.87x the time of the column pieces (Intel Xeon, 2026-12-04, #21).
constexpr int64_t kKSegment = 1024;
constexpr int64_t kSegmentedMaxC = int64_t{1} << 18;  // floats of C (1 MB): the scratch stays small
inline int64_t k_segments(int64_t m, int64_t n, int64_t k) {
  return k >= 2 * kKSegment && m * n <= kSegmentedMaxC ? (k + kKSegment - 1) / kKSegment : 1;
}
static_assert(kKSegment % kKc == 0, "a K segment must hold whole K blocks (the packed layouts' block offsets)");
static_assert(kKSegment % kRowGroup == 0, "a K segment must hold whole row groups of the column sums");

// Segment s of a product cut by k_segments: K [s·kKSegment, …) of op(A) and op(B), into `c`.
inline GemmArgs gemm_segment(const GemmArgs& g, int64_t s, float* c) {
  const int64_t k0 = s * kKSegment;
  GemmArgs gs = g;
  gs.k = std::min(g.k, k0 + kKSegment) - k0;
  gs.a = g.trans_a ? g.a + k0 * g.lda : g.a + k0;
  gs.b = g.trans_b ? g.b + k0 : g.b + k0 * g.ldb;
  gs.c = c;
  if (g.col_groups) gs.col_groups = g.col_groups + k0 / kRowGroup * g.n;
  return gs;
}

// Whether matmul_run<K> computes g unpacked: a few rows of x·Wᵀ (gemv_tb; up to 16 with AVX-512,
// gemv16_tb), with no K segments. Its threshold for the pool is lower than the packed products':
// it reads every weight once, a few multiply-adds per element (SmolLM2's [1, 576]·[576, 576]ᵀ is
// ~50 µs on one core).
template <class K>
bool gemv_path(const GemmArgs& g) {
  if (g.trans_a || !g.trans_b || g.k <= 0 || g.col_sums || k_segments(g.m, g.n, g.k) != 1) return false;
  return g.m <= kGemvMaxRows || (std::is_same<K, GemmAvx512>::value && g.m <= kGemv16MaxRows);
}

// Products that gemv_path takes, `count` of them in one pool run: pieces of 32 columns of each in
// turn (one block of gemv_tb's at one row: 64 made SmolLM2's [192, 576] three pieces for two
// threads), so that a decode step's q, k and v (or gate and up) wait for the pool once.
constexpr int64_t kGemvPiece = 32;
template <class K>
void gemv_run(const GemmArgs* gs, int count) {
  std::vector<int64_t> starts(static_cast<size_t>(count) + 1, 0);
  int64_t fma = 0;
  for (int i = 0; i < count; i++) {
    starts[i + 1] = starts[i] + (gs[i].n + kGemvPiece - 1) / kGemvPiece;
    fma += gs[i].m * gs[i].n * gs[i].k;
  }
  const int64_t total = starts[count];
  pool().run(total, 1, fma < kGemvInlineFma ? total + 1 : 0, [&](int64_t lo, int64_t hi) {
    for (int i = 0; i < count; i++) {
      const int64_t a = std::max(lo, starts[i]) - starts[i], b = std::min(hi, starts[i + 1]) - starts[i];
      if (b <= a) continue;
      const GemmArgs& g = gs[i];
      const int64_t j_lo = a * kGemvPiece, j_hi = std::min(g.n, b * kGemvPiece);
      if (g.m <= kGemvMaxRows)
        gemv_tb(g, j_lo, j_hi);
      else
        gemv16_tb(g, j_lo, j_hi);
    }
  });
}

// One product on the pool, with micro-kernel K (see matmul_compute).
template <class K>
void matmul_run(const GemmArgs& g) {
  const int64_t m = g.m, n = g.n, k = g.k;
  // A few rows of x·Wᵀ: unpacked, the same bits (gemv_tb, gemv16_tb).
  if (gemv_path<K>(g)) return gemv_run<K>(&g, 1);
  // C's rows are split when m >= n, else its columns, unless the columns balance the threads
  // clearly better: few rows go in single tiles, and 11 tiles of [128, 2048]ᵀ·[2048, 128] went
  // 6:5 between two threads, where its columns make two pieces of 64 (0.86x the product's time,
  // one-process A/B, Intel Xeon, 2026-12-03, #21). Balance: the share of the threads' time the
  // pieces fill when each thread takes an equal count (the last round partly empty).
  const int64_t threads = gemm_plan_threads > 0 ? gemm_plan_threads : pool().chunks();
  const auto balance = [threads](int64_t pieces) { return static_cast<double>(pieces) / static_cast<double>(threads * ((pieces + threads - 1) / threads)); };
  const int64_t row_tiles = (m + K::kMr - 1) / K::kMr, col_pieces = (n + 63) / 64;
  const bool split_rows = m >= n && !(row_tiles < 4 * threads * (kMc / K::kMr) && balance(col_pieces) > balance(row_tiles) + 0.05);
  const int64_t tile = split_rows ? K::kMr : K::kNr, tiles = ((split_rows ? m : n) + tile - 1) / tile;
  const bool small = m * n * k < kGemmInlineFma;
  const int64_t segments = k_segments(m, n, k);
  // Every piece reads the whole of the operand that the split does not cut (op(B) when C's rows
  // are split, op(A) when its columns are): it is packed once per call, by all threads at once,
  // each taking ranges of its panels (kNr columns of op(B), kMr rows of op(A)). Each thread
  // packing all of it took as long as the product's arithmetic on the weight gradients
  // ([128, 2048]·[2048, 384], Intel Xeon, 2026-12-03, #21).
  const int64_t padded = split_rows ? gemm_padded(n, K::kNr) : gemm_padded(m, K::kMr);
  const int64_t shared_floats = k * padded;
  // Where there are at least as many segments as threads, each piece is a whole segment, which
  // packs its own blocks of both operands: nothing is shared, and no thread waits for a packing.
  const bool whole_segments = segments > 1 && segments >= threads;
  const bool share = k > 0 && shared_floats <= kGemmSharedMax && !whole_segments;
  // Column sums form while op(B) is packed, which must then happen once per column: in the shared
  // packing, or in the column pieces. Rows split without sharing pack op(B) in every piece: the
  // sums then run afterwards, on the pool, as SrpoColumnSum does (the same bits). Pieces of K
  // segments that read op(B) in place (column pieces, whole segments) each sum their segment's
  // groups of rows (col_groups), which are added up in order after the pieces, as the cascade
  // adds them.
  const bool sums_in_groups = g.col_sums && segments > 1 && (!split_rows || whole_segments);
  const bool sums_after = g.col_sums && split_rows && !share && !sums_in_groups;
  GemmArgs gg = g;
  if (sums_after || sums_in_groups) gg.col_sums = nullptr;
  if (segments > 1) gg.bias = nullptr, gg.residual = nullptr;  // added to the segments' sum
  // Column pieces read op(B) where it is stored rather than pack their columns of it: each piece
  // reads them once per row tile from L2 instead of writing and reading a packed copy (the
  // weight gradients' dY). 0.98–0.99x the step time in one-process A/Bs (Intel Xeon, 2026-12-03, #21).
  gg.b_in_place = (!split_rows || whole_segments) && !g.trans_b;
  // Scratch: the later segments' products ([segments − 1][m][ldc], at most K / 1024 MB), then
  // the row groups' sums.
  const int64_t groups = (k + kRowGroup - 1) / kRowGroup;
  std::unique_ptr<AlignedFloats> scratch_taken;
  float* partial = nullptr;
  if (segments > 1) {
    scratch_taken = shared_pack_space().take((segments - 1) * m * g.ldc + (sums_in_groups ? groups * n : 0));
    partial = scratch_taken->data();
    if (sums_in_groups) gg.col_groups = partial + (segments - 1) * m * g.ldc;
  }
  std::unique_ptr<AlignedFloats> space_taken;
  const float* shared = nullptr;
  if (share) {
    space_taken = shared_pack_space().take(shared_floats);
    float* dst = space_taken->data();
    const int64_t panel = split_rows ? K::kNr : K::kMr, extent = split_rows ? n : m, panels = (extent + panel - 1) / panel;
    pool().run(panels, 1, small ? panels + 1 : 0, [&](int64_t lo, int64_t hi) {
      const int64_t x0 = lo * panel, width = std::min(extent, hi * panel) - x0;
      split_rows ? pack_b_all<K>(gg, x0, width, dst) : pack_a_all<K>(gg, x0, width, dst);
    });
    shared = dst;
  }
  // Pieces of whole row blocks (kMc rows) where there are many (a piece's A blocks stay full), of
  // single row tiles where there are few (128 rows in 96-row blocks split 96:32 between two
  // threads), or of 64 columns. With the shared operand packed once, a piece costs little, and
  // small ones keep the wait for a late worker's last piece short: 16 per thread (the step took
  // 0.98–0.99x the time of 4 per thread in a one-process A/B, AMD EPYC, 2026-12-03).
  // With K segments the pieces run segment after segment (index s·tiles + tile), so that each
  // thread's own range covers whole segments where the segments are as many as the threads.
  const int64_t row_align = tiles >= 4 * threads * (kMc / K::kMr) ? kMc / K::kMr : 1;
  const int64_t total = segments * tiles;
  const int64_t align = whole_segments ? tiles : split_rows ? row_align : 64 / K::kNr;
  pool().run(total, align, small ? total + 1 : 0, [&](int64_t lo, int64_t hi) {
    float* space = gemm_pack_space();
    for (int64_t s = lo / tiles; s * tiles < hi; s++) {
      const int64_t t0 = std::max(lo, s * tiles) - s * tiles, t1 = std::min(hi, (s + 1) * tiles) - s * tiles;
      const GemmArgs gs = segments > 1 ? gemm_segment(gg, s, s == 0 ? g.c : partial + (s - 1) * m * g.ldc) : gg;
      const float* seg_shared = shared ? shared + s * kKSegment * padded : nullptr;
      if (split_rows)
        gemm_block<K>(gs, t0 * K::kMr, std::min(m, t1 * K::kMr), 0, n, space, space + kGemmPackA, nullptr, seg_shared);
      else
        gemm_block<K>(gs, 0, m, t0 * K::kNr, std::min(n, t1 * K::kNr), space, space + kGemmPackA, seg_shared, nullptr);
    }
  }, share ? kGemmPiecesPerThread : 1);
  if (space_taken) shared_pack_space().give_back(std::move(space_taken));
  if (segments > 1) {
    // C₀ + C₁ + … in segment order, one rounding each (the barrier keeps -ffast-math from adding
    // the scratch rows together first), then the bias and the residual as the tiles would have.
    pool().run(m, 1, kInlineBelow / (segments * n) + 1, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; i++) {
        float* row = g.c + i * g.ldc;
        for (int64_t s = 1; s < segments; s++) {
          const float* part = partial + ((s - 1) * m + i) * g.ldc;
          asm volatile("" ::: "memory");
          for (int64_t j = 0; j < n; j++) row[j] += part[j];
        }
        if (g.bias) add_bias_tile(row, 0, 1, n, g.bias, g.residual ? g.residual + i * g.ldc : nullptr);
      }
    });
    if (sums_in_groups) {
      // The groups' sums added into each column's total in order, as column_sums does.
      const float* group_sums = gg.col_groups;
      pool().run(n, kLine, kInlineBelow / groups + 1, [&](int64_t lo, int64_t hi) {
        for (int64_t j = lo; j < hi; j++) g.col_sums[j] = 0.f;
        for (int64_t r = 0; r < groups; r++)
          for (int64_t j = lo; j < hi; j++) g.col_sums[j] += group_sums[r * n + j];
      });
    }
    shared_pack_space().give_back(std::move(scratch_taken));
  }
  if (sums_after) matmul_column_sums(g);
}

// The three ops' bodies: kEpilogue is what follows the product (gemm-kernels.h's GemmArgs).
enum class MatMulEpilogue { kNone, kBias, kBiasResidual, kColumnSums };

template <MatMulEpilogue kEpilogue>
void matmul_compute(void* state, TF_OpKernelContext* ctx) {
  const MatMulAttrs& at = *static_cast<const MatMulAttrs*>(state);
  constexpr bool biased = kEpilogue == MatMulEpilogue::kBias || kEpilogue == MatMulEpilogue::kBiasResidual;
  const char* name = kEpilogue == MatMulEpilogue::kBias           ? "SrpoMatMulBias"
                     : kEpilogue == MatMulEpilogue::kBiasResidual ? "SrpoMatMulBiasResidual"
                     : kEpilogue == MatMulEpilogue::kColumnSums   ? "SrpoMatMulColumnSum"
                                                                  : "SrpoMatMul";
  Call c(ctx, name, kEpilogue == MatMulEpilogue::kBiasResidual ? 4 : biased ? 3 : 2);
  if (!c.ok()) return;
  if (c.rank(0) != 2 || c.rank(1) != 2) return c.fail("a and b must be 2-D");
  const int64_t m = c.dim(0, at.trans_a ? 1 : 0), k = c.dim(0, at.trans_a ? 0 : 1);
  const int64_t kb = c.dim(1, at.trans_b ? 1 : 0), n = c.dim(1, at.trans_b ? 0 : 1);
  if (k != kb)
    return c.fail("inner dimensions differ: op(a) is [" + std::to_string(m) + ", " + std::to_string(k) + "], op(b) is [" + std::to_string(kb) + ", " +
                  std::to_string(n) + "]");
  if (biased && (c.rank(2) < 1 || c.rank(2) > 2 || c.dim(2, -1) != n || c.size(2) != n))
    return c.fail("bias must hold one value per column of the product: [" + std::to_string(n) + "] or [1, " + std::to_string(n) + "]");
  if (kEpilogue == MatMulEpilogue::kBiasResidual && (c.rank(3) != 2 || c.dim(3, 0) != m || c.dim(3, 1) != n))
    return c.fail("residual must be [" + std::to_string(m) + ", " + std::to_string(n) + "], the product's shape");
  if (kEpilogue == MatMulEpilogue::kColumnSums && at.trans_b) return c.fail("column sums are of b as stored: transpose_b must be false");
  const int64_t dims[2] = {m, n};
  float* out = c.out(0, dims, 2);
  if (!out) return;
  float* sums = nullptr;
  if (kEpilogue == MatMulEpilogue::kColumnSums) {
    const int64_t sum_dims[1] = {n};
    sums = c.out(1, sum_dims, 1);
    if (!sums) return;
  }
  GemmArgs g{m, n, k, c.data(0), c.dim(0, 1), at.trans_a, c.data(1), c.dim(1, 1), at.trans_b, out, n};
  g.bias = biased ? c.data(2) : nullptr;
  g.residual = kEpilogue == MatMulEpilogue::kBiasResidual ? c.data(3) : nullptr;
  g.col_sums = sums;
  if (n == 0) return;
  if (sums && (m == 0 || k == 0)) {  // no product, or nothing of op(B) packed: sum it alone
    matmul_column_sums(g);
    g.col_sums = nullptr;
  }
  if (m == 0) return;
  if (gemm_avx512)
    matmul_run<GemmAvx512>(g);
  else
    matmul_run<GemmAvx2>(g);
}
// Several products, each as SrpoMatMul computes it (the same bits): those the unpacked path takes
// together in one pool run (gemv_run), else one after the other.
template <class K>
void matmul_many_with(const GemmArgs* gs, int count) {
  bool unpacked = true;
  for (int i = 0; i < count; i++) unpacked = unpacked && gemv_path<K>(gs[i]);
  if (unpacked) return gemv_run<K>(gs, count);
  for (int i = 0; i < count; i++) matmul_run<K>(gs[i]);
}
inline void matmul_many(const GemmArgs* gs, int count) {
  if (gemm_avx512)
    matmul_many_with<GemmAvx512>(gs, count);
  else
    matmul_many_with<GemmAvx2>(gs, count);
}
