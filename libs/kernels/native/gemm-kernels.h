// Single-precision matrix products for SrpoMatMul (gemm-ops.h): C = op(A)·op(B), with op a
// transpose or not, the way BLIS and the BLAS libraries do it (Goto & van de Geijn 2008).
//
// Why: TensorFlow's MatMul runs oneDNN's sgemm. Below AVX-512 (AVX2-only CPUs, or
// ONEDNN_MAX_CPU_ISA capped) its products took 38.8 ms of the step where PyTorch's MKL took 32.8,
// its transposed long-K products (the weight gradients) running at 0.70–0.77x the speed of this
// code (AMD EPYC, 2 vCPUs, 2026-12-03). On the Intel Xeon with AVX-512 its products took 25 ms of
// a 49 ms step where MKL's took 17, and the step with this code's AVX-512 kernel in its place
// took 0.95x the time (one-process A/B, 2026-12-03). On the AMD EPYC with AVX-512, oneDNN's
// sgemm was a few percent faster than the AVX2 kernel here. The learner therefore takes this
// code everywhere but there (libs/kernels/src/srpo-kernels.ts, `matMul: 'auto'`; docs/benchmarks.md, #21).
//
// Layout: the K dimension is cut into blocks of kKc, the rows of C into blocks of kMc and its
// columns into blocks of kNc. For each (K block, column block) the block of op(B) is packed
// into panels of kNr columns ([k][kNr], zero-padded), and for each row block the block of
// op(A) into panels of kMr rows ([k][kMr], zero-padded). The micro-kernel (GemmAvx2: 6 × 16 in
// 12 YMM registers; GemmAvx512: 12 × 32 in 24 ZMM registers) then keeps a kMr × kNr tile of C in
// registers over the K block. Packing makes every load of the micro-kernel sequential whatever
// the transposes and strides (a power-of-two row stride would otherwise map a panel's rows onto a
// few L1 sets).
//
// Numerics: every element of C is one sequential chain of fused multiply-adds over k = 0..K−1
// (a later K block reloads the tile and continues the chain), so the result does not depend on
// the blocking, the thread count or the vector width: the same bits on every machine, AVX2 or
// AVX-512 (the spec checks them against such a chain written out in JavaScript). Products with
// a long K and a small C are cut by matmul_run into K segments, each such a chain, added in
// order (gemm-ops.h): which products are cut depends on the shape alone.
// K = 0 gives C = 0 (plus the bias, when given).
#pragma once

constexpr int64_t kKc = 256, kMc = 96, kNc = 2048;  // packed A block 96 KB (L2), B panel 16 KB (L1)

// Transposes the 8 × 8 block v[r][c] in place (v[c][r] after), in 24 shuffles.
inline void transpose8(__m256* v) {
  __m256 t[8], u[8];
  for (int i = 0; i < 4; i++) {
    t[2 * i] = _mm256_unpacklo_ps(v[2 * i], v[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(v[2 * i], v[2 * i + 1]);
  }
  for (int i = 0; i < 2; i++) {
    u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  for (int i = 0; i < 4; i++) {
    v[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
    v[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
  }
}

// op(A) [m, k] and op(B) [k, n] as stored: element (i, p) of op(A) is a[i·lda + p], or
// a[p·lda + i] when trans_a; element (p, j) of op(B) is b[p·ldb + j], or b[j·ldb + p] when
// trans_b. C [m, n] is row-major with row stride ldc.
//
// Epilogues, each bit for bit the separate op it replaces (SrpoMatMulBias, SrpoMatMulColumnSum in
// gemm-ops.h): `bias` [n], when given, is added to every row of C once its chains are finished
// (one float32 addition per element, as SrpoAdd), and then `residual` [m, n] (row stride ldc),
// when given, is added to that (a second rounding, as SrpoAddResidualBias: h + (x·W + b));
// `col_sums` [n], when given, receives the sums
// of op(B)'s columns over k, formed while op(B) is packed, in the cascade of SrpoColumnSum
// (sum_columns_block). col_sums needs trans_b = false, and every column of op(B) packed exactly
// once per call (matmul_run says when it is not, and sums them afterwards instead).
struct GemmArgs {
  int64_t m, n, k;
  const float* a;
  int64_t lda;
  bool trans_a;
  const float* b;
  int64_t ldb;
  bool trans_b;
  float* c;
  int64_t ldc;
  const float* bias = nullptr;
  const float* residual = nullptr;  // only with bias
  float* col_sums = nullptr;
  // Instead of col_sums (matmul_run's K segments): the sum of each group of kRowGroup rows of
  // op(B) (counted from this product's row 0, as sum_columns_block forms them) written to row
  // (row / kRowGroup) of col_groups, row stride n, for the caller to add up in order.
  float* col_groups = nullptr;
  // op(B) read where it is stored, not packed (trans_b false; gemm_block). The micro-kernel then
  // steps through its rows at ldb, and col_sums are summed from it block by block.
  bool b_in_place = false;
};

// Rows [p0, p0 + kc) of a block of `extent` columns (at src, row stride ld) of a [k, ·] matrix
// added into its column sums `total`, in the cascade of column_sums (optimizer-kernels.h): the
// rows in groups of kRowGroup counted from row 0, each group summed into `part` (its first row
// copied, the others added in order) and the group's sum then added into `total` (zeroed at row
// 0). Called for a column's K blocks in order, it gives SrpoColumnSum's bits: K blocks are whole
// groups, so a block ends a group except at row k. Why: the weight gradients' products read
// op(B) = dY anyway, and its bias gradient as a separate SrpoColumnSum was a pass over dY from
// memory and a tfjs op (#21).
static_assert(kKc % kRowGroup == 0, "a K block must hold whole row groups of the column sums");
// With `groups` (row stride groups_ld) instead of `total`, each group's sum is written to row
// (row / kRowGroup) of groups rather than added (GemmArgs::col_groups).
inline void sum_columns_block(const float* src, int64_t ld, int64_t extent, int64_t p0, int64_t kc, int64_t k, float* __restrict part, float* __restrict total,
                              float* __restrict groups = nullptr, int64_t groups_ld = 0) {
  if (p0 == 0 && !groups) std::fill(total, total + extent, 0.f);
  for (int64_t p = 0; p < kc; p++) {
    const int64_t r = p0 + p;
    const float* row = src + p * ld;
    if (r % kRowGroup == 0) {
      std::memcpy(part, row, extent * sizeof(float));
    } else {
      for (int64_t j = 0; j < extent; j++) part[j] += row[j];
    }
    if (r % kRowGroup != kRowGroup - 1 && r != k - 1) continue;
    if (groups)
      std::memcpy(groups + r / kRowGroup * groups_ld, part, extent * sizeof(float));
    else
      for (int64_t j = 0; j < extent; j++) total[j] += part[j];
  }
}

// A thread's buffer of group sums for sum_columns_block, at least n floats, kept.
inline float* gemm_sum_space(int64_t n) {
  thread_local std::vector<float> space;
  if (space.size() < static_cast<size_t>(n)) space.resize(static_cast<size_t>(n));
  return space.data();
}

// dst[p·w + r] = src[r·ld + p] for p < kc and r < rows, and 0 for rows <= r < w: a block
// whose rows are contiguous along k, packed k-major. Eight rows at a time, eight k at a time,
// through an 8 × 8 transpose in registers; element by element, the same copy took a quarter of
// a product's time (pack_a of [2048, 512]·[512, 128]ᵀ, Intel Xeon, 2026-12-03, #21).
template <int64_t w>
void pack_transposed(const float* src, int64_t ld, int64_t rows, int64_t kc, float* __restrict dst) {
  alignas(32) static const float zeros[kKc] = {};  // the rows past `rows` (kc <= kKc)
  for (int64_t r0 = 0; r0 < w; r0 += 8) {
    const int64_t lanes = std::min<int64_t>(8, w - r0);
    const float* row[8];
    for (int64_t r = 0; r < 8; r++) row[r] = r0 + r < rows ? src + (r0 + r) * ld : zeros;
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(lanes)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    int64_t p = 0;
    for (; p + 8 <= kc; p += 8) {
      __m256 v[8];
      for (int64_t r = 0; r < 8; r++) v[r] = _mm256_loadu_ps(row[r] + p);
      transpose8(v);
      float* out = dst + p * w + r0;
      if (lanes == 8) {
        for (int64_t j = 0; j < 8; j++) _mm256_storeu_ps(out + j * w, v[j]);
      } else {
        for (int64_t j = 0; j < 8; j++) _mm256_maskstore_ps(out + j * w, mask, v[j]);
      }
    }
    for (; p < kc; p++)
      for (int64_t r = 0; r < lanes; r++) dst[p * w + r0 + r] = row[r][p];
  }
}

// dst[x·kc + p·w + r] = src[p·ld + x + r] for p < kc and x + r < extent (x a multiple of w), 0 past
// it: a block whose rows run along k, k-major already, dealt into panels of w. Each row of src is
// read once, in order, and its pieces go to the panels (row by row over k, not panel by panel: a
// panel's 48 bytes per k, at the row stride, map onto two L1 sets when the stride is 2 KB, and
// each line was read again for the next panel; packing took 18% of a weight gradient's time that
// way, Intel Xeon, 2026-12-03).
template <int64_t w>
void pack_dealt(const float* src, int64_t ld, int64_t extent, int64_t kc, float* __restrict dst) {
  for (int64_t p = 0; p < kc; p++) {
    const float* row = src + p * ld;
    for (int64_t x = 0; x < extent; x += w) {
      const int64_t valid = std::min(w, extent - x);
      float* out = dst + x * kc + p * w;
      if (valid == w) {
        std::memcpy(out, row + x, w * sizeof(float));
      } else {
        for (int64_t r = 0; r < w; r++) out[r] = r < valid ? row[x + r] : 0.f;
      }
    }
  }
}

// Packs rows [i0, i0 + mc) × k [p0, p0 + kc) of op(A) into ceil(mc / kMr) panels [kc][kMr]:
// transposed in registers when a is stored as is, dealt when it is stored transposed.
template <int64_t kMr>
void pack_a(const GemmArgs& g, int64_t i0, int64_t mc, int64_t p0, int64_t kc, float* __restrict dst) {
  if (g.trans_a) return pack_dealt<kMr>(g.a + p0 * g.lda + i0, g.lda, mc, kc, dst);
  for (int64_t ip = 0; ip < mc; ip += kMr) pack_transposed<kMr>(g.a + (i0 + ip) * g.lda + p0, g.lda, std::min(kMr, mc - ip), kc, dst + ip * kc);
}

// Packs k [p0, p0 + kc) × columns [j0, j0 + nc) of op(B) into ceil(nc / kNr) panels [kc][kNr]:
// dealt when b is stored as is, transposed in registers when it is stored transposed.
// With g.col_sums, also adds the block into the sums of its columns (sum_columns_block).
template <int64_t kNr>
void pack_b(const GemmArgs& g, int64_t p0, int64_t kc, int64_t j0, int64_t nc, float* __restrict dst) {
  if (!g.trans_b) {
    const float* src = g.b + p0 * g.ldb + j0;
    pack_dealt<kNr>(src, g.ldb, nc, kc, dst);
    if (g.col_sums) sum_columns_block(src, g.ldb, nc, p0, kc, g.k, gemm_sum_space(nc), g.col_sums + j0);
    return;
  }
  for (int64_t jp = 0; jp < nc; jp += kNr) pack_transposed<kNr>(g.b + (j0 + jp) * g.ldb + p0, g.ldb, std::min(kNr, nc - jp), kc, dst + jp * kc);
}

// Micro-kernels. Each is a traits type: its tile (kMr rows × kNr columns of C) and `micro`,
// the tile from a panel of A ([kc][kMr]) and a panel of B (kNr floats per k, ldbp apart: kNr
// where packed, op(B)'s row stride where read in place) over kc: C = A·B, or
// C += A·B when `more` (a later K block continuing each element's chain). Both compute every
// element as the same chain of fused multiply-adds in the same k order, so they give the same
// bits; they differ only in how many elements one instruction advances.
//
// GemmAvx2: 6 × 16, twelve 8-float accumulators (of 16 YMM registers); per k, two loads of B,
// six broadcasts of A and 12 FMAs.
struct GemmAvx2 {
  static constexpr int64_t kMr = 6, kNr = 16;
  static void micro(int64_t kc, const float* __restrict ap, const float* __restrict bp, int64_t ldbp, float* __restrict c, int64_t ldc, bool more) {
    v8f c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51;
    if (more) {
      c00 = load8(c), c01 = load8(c + 8);
      c10 = load8(c + ldc), c11 = load8(c + ldc + 8);
      c20 = load8(c + 2 * ldc), c21 = load8(c + 2 * ldc + 8);
      c30 = load8(c + 3 * ldc), c31 = load8(c + 3 * ldc + 8);
      c40 = load8(c + 4 * ldc), c41 = load8(c + 4 * ldc + 8);
      c50 = load8(c + 5 * ldc), c51 = load8(c + 5 * ldc + 8);
    } else {
      // The tile's lines are written at the end: fetch them now, behind the k loop, rather than
      // stall the stores on reading them for ownership then.
      for (int64_t r = 0; r < kMr; r++) __builtin_prefetch(c + r * ldc, 1), __builtin_prefetch(c + r * ldc + kNr - 1, 1);
      c00 = c01 = c10 = c11 = c20 = c21 = c30 = c31 = c40 = c41 = c50 = c51 = v8f{};
    }
    for (int64_t p = 0; p < kc; p++, ap += kMr, bp += ldbp) {
      const v8f b0 = load8(bp), b1 = load8(bp + 8);
      v8f a = v8f{} + ap[0];
      c00 += a * b0, c01 += a * b1;
      a = v8f{} + ap[1];
      c10 += a * b0, c11 += a * b1;
      a = v8f{} + ap[2];
      c20 += a * b0, c21 += a * b1;
      a = v8f{} + ap[3];
      c30 += a * b0, c31 += a * b1;
      a = v8f{} + ap[4];
      c40 += a * b0, c41 += a * b1;
      a = v8f{} + ap[5];
      c50 += a * b0, c51 += a * b1;
    }
    store8(c, c00), store8(c + 8, c01);
    store8(c + ldc, c10), store8(c + ldc + 8, c11);
    store8(c + 2 * ldc, c20), store8(c + 2 * ldc + 8, c21);
    store8(c + 3 * ldc, c30), store8(c + 3 * ldc + 8, c31);
    store8(c + 4 * ldc, c40), store8(c + 4 * ldc + 8, c41);
    store8(c + 5 * ldc, c50), store8(c + 5 * ldc + 8, c51);
  }
};

// GemmAvx512: 12 × 32, twenty-four 16-float accumulators (of 32 ZMM registers); per k, two
// loads of B, 12 broadcasts of A and 24 FMAs. Compiled for AVX-512F alone (the target attribute;
// the rest of the addon stays AVX2) and run only where the CPU has it (gemm-ops.h). On the Intel
// Xeon (2026-12-03) it ran 185–200 GFLOP/s on one core with its operands in L1, the AVX2 kernel
// 122–125; 8 × 32 did as well in the step, and 14 × 32 was no faster on its own.
typedef float v16f __attribute__((vector_size(64)));
struct GemmAvx512 {
  static constexpr int64_t kMr = 12, kNr = 32;
  __attribute__((target("avx512f"))) static void micro(int64_t kc, const float* __restrict ap, const float* __restrict bp, int64_t ldbp, float* __restrict c,
                                                       int64_t ldc, bool more) {
    v16f acc[kMr][2];
    if (more) {
      for (int64_t r = 0; r < kMr; r++) std::memcpy(&acc[r][0], c + r * ldc, sizeof acc[r]);
    } else {
      for (int64_t r = 0; r < kMr; r++) __builtin_prefetch(c + r * ldc, 1), __builtin_prefetch(c + r * ldc + kNr - 1, 1);
      for (int64_t r = 0; r < kMr; r++) acc[r][0] = acc[r][1] = v16f{};
    }
    for (int64_t p = 0; p < kc; p++, ap += kMr, bp += ldbp) {
      v16f b0, b1;
      std::memcpy(&b0, bp, sizeof b0);
      std::memcpy(&b1, bp + 16, sizeof b1);
#pragma GCC unroll 16
      for (int64_t r = 0; r < kMr; r++) {
        const v16f a = v16f{} + ap[r];
        acc[r][0] += a * b0, acc[r][1] += a * b1;
      }
    }
    for (int64_t r = 0; r < kMr; r++) std::memcpy(c + r * ldc, &acc[r][0], sizeof acc[r]);
  }
};

// A finished tile of C plus the bias row, while the tile is in L1: one float32 addition per
// element after the chain's result is stored, as SrpoAdd of the product and the bias gives. The
// compiler barrier keeps -ffast-math from folding the addition into the chain's last FMA.
// With `residual` (the tile's place in it, same stride), that is then added too, after a second
// barrier, so that the two additions round one after the other as SrpoAddResidualBias's do.
inline void add_bias_tile(float* c, int64_t ldc, int64_t rows, int64_t cols, const float* __restrict bias, const float* __restrict residual = nullptr) {
  asm volatile("" ::: "memory");
  for (int64_t r = 0; r < rows; r++)
    for (int64_t j = 0; j < cols; j++) c[r * ldc + j] += bias[j];
  if (!residual) return;
  asm volatile("" ::: "memory");
  for (int64_t r = 0; r < rows; r++)
    for (int64_t j = 0; j < cols; j++) c[r * ldc + j] = residual[r * ldc + j] + c[r * ldc + j];
}

// Where a block of op(B) is read from: packed (panel j at p + j·kc, its rows kNr floats apart),
// or in place (panel j at p + j, its rows op(B)'s row stride apart).
struct BBlock {
  const float* p;
  int64_t k_step, col_step;
  const float* panel(int64_t jp) const { return p + jp * col_step; }
};

// C block [mc, nc] (row stride ldc) from a packed block of A and a block of B; `bias` (the block's
// columns), when given, is added to each tile once it is finished (the last K block). Edge tiles
// run on a scratch tile and copy their valid part (a block of B read in place has no edge panel:
// gemm_block packs that one).
template <class K>
void gemm_macro(int64_t mc, int64_t nc, int64_t kc, const float* ap, BBlock b, float* c, int64_t ldc, bool more, const float* bias = nullptr,
                const float* residual = nullptr) {
  constexpr int64_t kMr = K::kMr, kNr = K::kNr;
  for (int64_t jp = 0; jp < nc; jp += kNr) {
    const int64_t cols = std::min(kNr, nc - jp);
    const float* bp = b.panel(jp);
    for (int64_t ip = 0; ip < mc; ip += kMr) {
      const int64_t rows = std::min(kMr, mc - ip);
      float* ct = c + ip * ldc + jp;
      if (rows == kMr && cols == kNr) {
        K::micro(kc, ap + ip * kc, bp, b.k_step, ct, ldc, more);
      } else {
        alignas(64) float tile[kMr * kNr];
        if (more)
          for (int64_t r = 0; r < rows; r++) std::memcpy(tile + r * kNr, ct + r * ldc, cols * sizeof(float));
        K::micro(kc, ap + ip * kc, bp, b.k_step, tile, kNr, more);
        for (int64_t r = 0; r < rows; r++) std::memcpy(ct + r * ldc, tile + r * kNr, cols * sizeof(float));
      }
      if (bias) add_bias_tile(ct, ldc, rows, cols, bias + jp, residual ? residual + ip * ldc + jp : nullptr);
    }
  }
}

// Floats of packing space one thread needs.
constexpr int64_t kGemmPackA = kMc * kKc, kGemmPackB = kKc * kNc;

// Packing space (AlignedFloats, aligned-space.h) starts on a 64-byte boundary. Why: a packed panel
// of op(B) holds kNr floats per k, which the AVX-512 micro-kernel loads as two 64-byte vectors, and
// glibc's malloc puts a block this large 16 bytes past a page boundary, so every one of those loads
// straddled two cache lines. Aligned, the step's twelve product shapes took 0.97x the time on one
// core (median of 5 runs each of bench/learner/gemm/run.sh's harness), and the reference step
// 0.98x (one-process A/Bs against a 16-byte offset, 20–40 pairs: 1.021, 1.019, 1.011 the time
// misaligned, where a switch that changes nothing gave 0.986–0.995; Intel Xeon, 2026-12-03, #21).

// The whole of op(A) or op(B) packed once, for products whose threads all read it (gemm_block's
// a_all, b_all). K block pc of op(B) sits at pc·n_pad with its column panels at j·kc within; K
// block pc of op(A) at pc·m_pad with its row panels at i·kc within (n_pad, m_pad: n and m
// rounded up to whole panels). Each call packs the panels of rows [i0, i0 + mc) of op(A), or of
// columns [j0, j0 + nc) of op(B), over every K block (i0, j0 multiples of the panel), so that
// threads can pack disjoint ranges of one layout.
inline int64_t gemm_padded(int64_t x, int64_t panel) { return (x + panel - 1) / panel * panel; }
template <class K>
void pack_a_all(const GemmArgs& g, int64_t i0, int64_t mc, float* dst) {
  const int64_t m_pad = gemm_padded(g.m, K::kMr);
  for (int64_t pc = 0; pc < g.k; pc += kKc) {
    const int64_t kc = std::min(kKc, g.k - pc);
    pack_a<K::kMr>(g, i0, mc, pc, kc, dst + pc * m_pad + i0 * kc);
  }
}
template <class K>
void pack_b_all(const GemmArgs& g, int64_t j0, int64_t nc, float* dst) {
  const int64_t n_pad = gemm_padded(g.n, K::kNr);
  for (int64_t pc = 0; pc < g.k; pc += kKc) {
    const int64_t kc = std::min(kKc, g.k - pc);
    pack_b<K::kNr>(g, pc, kc, j0, nc, dst + pc * n_pad + j0 * kc);
  }
}

// Rows [i_lo, i_hi) × columns [j_lo, j_hi) of C, with the caller's packing space. a_all or b_all,
// when given, hold the whole of op(A) or op(B) packed (pack_a_all, pack_b_all): its blocks are
// read from there instead of packed again. i_lo is a multiple of kMr when a_all is given, j_lo
// of kNr when b_all is.
template <class K>
void gemm_block(const GemmArgs& g, int64_t i_lo, int64_t i_hi, int64_t j_lo, int64_t j_hi, float* apack, float* bpack, const float* a_all = nullptr,
                       const float* b_all = nullptr) {
  if (g.k == 0) {
    for (int64_t i = i_lo; i < i_hi; i++) {
      float* row = g.c + i * g.ldc;
      std::fill(row + j_lo, row + j_hi, 0.f);
      if (g.bias) add_bias_tile(row + j_lo, 0, 1, j_hi - j_lo, g.bias + j_lo, g.residual ? g.residual + i * g.ldc + j_lo : nullptr);  // 0 + (−0) is +0, as an add gives
    }
    return;
  }
  const int64_t m_pad = gemm_padded(g.m, K::kMr), n_pad = gemm_padded(g.n, K::kNr);
  const bool in_place = g.b_in_place && !b_all;
  for (int64_t jc = j_lo; jc < j_hi; jc += kNc) {
    const int64_t nc = std::min(kNc, j_hi - jc);
    // In place, the whole panels are read where op(B) is stored and only a last partial one is
    // packed (reading it whole would run past op(B)'s end).
    const int64_t nc_whole = in_place ? nc / K::kNr * K::kNr : 0;
    for (int64_t pc = 0; pc < g.k; pc += kKc) {
      const int64_t kc = std::min(kKc, g.k - pc);
      const float* src = g.b + pc * g.ldb + jc;  // op(B)'s block as stored, when read in place
      const BBlock bb = in_place ? BBlock{src, g.ldb, 1} : BBlock{b_all ? b_all + pc * n_pad + jc * kc : bpack, K::kNr, kc};
      if (in_place) {
        if (g.col_sums || g.col_groups)
          sum_columns_block(src, g.ldb, nc, pc, kc, g.k, gemm_sum_space(nc), g.col_sums ? g.col_sums + jc : nullptr, g.col_groups ? g.col_groups + jc : nullptr, g.n);
        if (nc_whole < nc) pack_dealt<K::kNr>(src + nc_whole, g.ldb, nc - nc_whole, kc, bpack);
      } else if (!b_all) {
        pack_b<K::kNr>(g, pc, kc, jc, nc, bpack);
      }
      for (int64_t ic = i_lo; ic < i_hi; ic += kMc) {
        const int64_t mc = std::min(kMc, i_hi - ic);
        const float* ap = a_all ? a_all + pc * m_pad + ic * kc : apack;
        if (!a_all) pack_a<K::kMr>(g, ic, mc, pc, kc, apack);
        const bool last = pc + kc == g.k;
        float* cb = g.c + ic * g.ldc + jc;
        const float* bias = g.bias && last ? g.bias + jc : nullptr;
        const float* residual = g.residual && last ? g.residual + ic * g.ldc + jc : nullptr;
        if (!in_place) {
          gemm_macro<K>(mc, nc, kc, ap, bb, cb, g.ldc, pc > 0, bias, residual);
          continue;
        }
        if (nc_whole > 0) gemm_macro<K>(mc, nc_whole, kc, ap, bb, cb, g.ldc, pc > 0, bias, residual);
        if (nc_whole < nc)
          gemm_macro<K>(mc, nc - nc_whole, kc, ap, BBlock{bpack, K::kNr, kc}, cb + nc_whole, g.ldc, pc > 0, bias ? bias + nc_whole : nullptr,
                        residual ? residual + nc_whole : nullptr);
      }
    }
  }
}

// Few rows of C = A·Bᵀ (A [m, k] as stored, B stored [n, k]: a linear layer's x·Wᵀ) without
// packing: a decode step's products (one to four rows). Why: packing reads and writes the whole
// weight for each call, which at one row costs as much as the product (SmolLM2-135M at batch 1:
// TensorFlow's MatMul, which packs nothing, ran 2–3x faster), and TensorFlow's MatMul sums in
// another order than SrpoMatMul, so served log-probs drifted from the learner's (docs/serving.md).
// Each element here is the packed path's chain of fused multiply-adds over k = 0..K−1 in order,
// starting from 0, so the bits are SrpoMatMul's at any row count. Eight columns make a group: each
// weight row's next four k are one 16-byte load, two rows to a register (rows i and i + 4 of the
// group in its two halves, the second half loaded by vinsertf128 from memory, which needs no
// shuffle port), and four in-lane unpacks turn them into one register per k holding that k of the
// group's eight columns; each k is then one FMA per row of C. kGroups groups run together so that
// their chains interleave: with one row of C, one group's chain of dependent FMAs (4 cycles each)
// was the bound (an 8 × 8 transpose per 8 k, transpose8, took 24 shuffles, all on one port).
// Columns past the last multiple of 8 take a scalar chain (fmaf). The bias and the residual follow
// as add_bias_tile adds them.

constexpr int64_t kGemvMaxRows = 4;
template <int kRows, int kGroups>
inline void gemv_tb_groups(const GemmArgs& g, int64_t j) {
  const int64_t k = g.k, ldb = g.ldb, lda = g.lda;
  __m256 acc[kGroups][kRows];
  for (int q = 0; q < kGroups; q++)
    for (int r = 0; r < kRows; r++) acc[q][r] = _mm256_setzero_ps();
  int64_t p = 0;
  for (; p + 4 <= k; p += 4) {
    for (int q = 0; q < kGroups; q++) {
      const float* w = g.b + (j + 8 * q) * ldb + p;
      // Each weight row's next line, once per line: without it the products of a SmolLM2 step took
      // 1.26x the time; two lines ahead 1.05x, four 1.08x, the next block's rows instead 1.08x.
      if ((p & 15) == 0)
        for (int i = 0; i < 8; i++) __builtin_prefetch(w + i * ldb + 16);
      __m256 v[4];
      for (int i = 0; i < 4; i++) v[i] = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(w + i * ldb)), _mm_loadu_ps(w + (i + 4) * ldb), 1);
      // Lane l of t[s]: B[j + 8q + l][p + s].
      const __m256 u0 = _mm256_unpacklo_ps(v[0], v[1]), u1 = _mm256_unpackhi_ps(v[0], v[1]);
      const __m256 u2 = _mm256_unpacklo_ps(v[2], v[3]), u3 = _mm256_unpackhi_ps(v[2], v[3]);
      const __m256 t[4] = {
          _mm256_castpd_ps(_mm256_unpacklo_pd(_mm256_castps_pd(u0), _mm256_castps_pd(u2))),
          _mm256_castpd_ps(_mm256_unpackhi_pd(_mm256_castps_pd(u0), _mm256_castps_pd(u2))),
          _mm256_castpd_ps(_mm256_unpacklo_pd(_mm256_castps_pd(u1), _mm256_castps_pd(u3))),
          _mm256_castpd_ps(_mm256_unpackhi_pd(_mm256_castps_pd(u1), _mm256_castps_pd(u3))),
      };
      for (int s = 0; s < 4; s++)
        for (int r = 0; r < kRows; r++) acc[q][r] = _mm256_fmadd_ps(_mm256_set1_ps(g.a[r * lda + p + s]), t[s], acc[q][r]);
    }
  }
  for (; p < k; p++)
    for (int q = 0; q < kGroups; q++) {
      const float* w = g.b + (j + 8 * q) * ldb;
      const __m256 col = _mm256_set_ps(w[7 * ldb + p], w[6 * ldb + p], w[5 * ldb + p], w[4 * ldb + p], w[3 * ldb + p], w[2 * ldb + p], w[ldb + p], w[p]);
      for (int r = 0; r < kRows; r++) acc[q][r] = _mm256_fmadd_ps(_mm256_set1_ps(g.a[r * lda + p]), col, acc[q][r]);
    }
  for (int q = 0; q < kGroups; q++)
    for (int r = 0; r < kRows; r++) _mm256_storeu_ps(g.c + r * g.ldc + j + 8 * q, acc[q][r]);
}
// Groups run together per row count: enough independent chains to cover the FMA's latency
// (kRows · kGroups ≥ 4) without running out of the 16 YMM registers.
template <int kRows>
void gemv_tb_columns(const GemmArgs& g, int64_t j_lo, int64_t j_hi) {
  constexpr int kGroups = kRows == 1 ? 4 : 2;
  const int64_t k = g.k, ldb = g.ldb, lda = g.lda;
  int64_t j = j_lo;
  for (; j + 8 * kGroups <= j_hi; j += 8 * kGroups) gemv_tb_groups<kRows, kGroups>(g, j);
  for (; j + 8 <= j_hi; j += 8) gemv_tb_groups<kRows, 1>(g, j);
  for (; j < j_hi; j++)
    for (int r = 0; r < kRows; r++) {
      const float* w = g.b + j * ldb;
      float sum = 0.f;
      for (int64_t p = 0; p < k; p++) sum = __builtin_fmaf(g.a[r * lda + p], w[p], sum);
      g.c[r * g.ldc + j] = sum;
    }
  if (g.bias)
    for (int r = 0; r < kRows; r++) add_bias_tile(g.c + r * g.ldc + j_lo, 0, 1, j_hi - j_lo, g.bias + j_lo, g.residual ? g.residual + r * g.ldc + j_lo : nullptr);
}
// Up to 16 rows of x·Wᵀ unpacked with AVX-512 (gemm_avx512 only): sixteen columns make a group,
// four 16-byte pieces of weight rows per register (vinsertf32x4 from memory) and the same in-lane
// unpacks as gemv_tb_groups, so each k of the group is one 16-float register and one FMA per row of
// C, whose 16 accumulators cover the FMA's latency. Why: at a decode batch of 16, the packed path
// computes 24 rows in two 12-row tiles (the second a third full) and packs each weight for the call.
// The same chains, hence the same bits, as every other path.
template <int kRows>
__attribute__((target("avx512f"))) void gemv16_tb_columns(const GemmArgs& g, int64_t j_lo, int64_t j_hi) {
  const int64_t k = g.k, ldb = g.ldb, lda = g.lda;
  int64_t j = j_lo;
  for (; j + 16 <= j_hi; j += 16) {
    __m512 acc[kRows];
    for (int r = 0; r < kRows; r++) acc[r] = _mm512_setzero_ps();
    const float* w = g.b + j * ldb;
    int64_t p = 0;
    for (; p + 4 <= k; p += 4) {
      if ((p & 15) == 0)
        for (int i = 0; i < 16; i++) __builtin_prefetch(w + i * ldb + p + 32);  // two lines ahead (one line ahead: 1.02x the time at 16 rows)
      __m512 v[4];
      for (int i = 0; i < 4; i++) {
        v[i] = _mm512_castps128_ps512(_mm_loadu_ps(w + i * ldb + p));
        v[i] = _mm512_insertf32x4(v[i], _mm_loadu_ps(w + (i + 4) * ldb + p), 1);
        v[i] = _mm512_insertf32x4(v[i], _mm_loadu_ps(w + (i + 8) * ldb + p), 2);
        v[i] = _mm512_insertf32x4(v[i], _mm_loadu_ps(w + (i + 12) * ldb + p), 3);
      }
      // Lane l of t[s]: B[j + l][p + s] (quarter q of v[i] is row 4q + i).
      const __m512 u0 = _mm512_unpacklo_ps(v[0], v[1]), u1 = _mm512_unpackhi_ps(v[0], v[1]);
      const __m512 u2 = _mm512_unpacklo_ps(v[2], v[3]), u3 = _mm512_unpackhi_ps(v[2], v[3]);
      const __m512 t[4] = {
          _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(u0), _mm512_castps_pd(u2))),
          _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(u0), _mm512_castps_pd(u2))),
          _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(u1), _mm512_castps_pd(u3))),
          _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(u1), _mm512_castps_pd(u3))),
      };
      for (int s = 0; s < 4; s++)
        for (int r = 0; r < kRows; r++) acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(g.a[r * lda + p + s]), t[s], acc[r]);
    }
    for (; p < k; p++) {
      alignas(64) float col[16];
      for (int i = 0; i < 16; i++) col[i] = w[i * ldb + p];
      const __m512 c = _mm512_load_ps(col);
      for (int r = 0; r < kRows; r++) acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(g.a[r * lda + p]), c, acc[r]);
    }
    for (int r = 0; r < kRows; r++) _mm512_storeu_ps(g.c + r * g.ldc + j, acc[r]);
  }
  for (; j < j_hi; j++)
    for (int r = 0; r < kRows; r++) {
      const float* w = g.b + j * ldb;
      float sum = 0.f;
      for (int64_t p = 0; p < k; p++) sum = __builtin_fmaf(g.a[r * lda + p], w[p], sum);
      g.c[r * g.ldc + j] = sum;
    }
  if (g.bias)
    for (int r = 0; r < kRows; r++) add_bias_tile(g.c + r * g.ldc + j_lo, 0, 1, j_hi - j_lo, g.bias + j_lo, g.residual ? g.residual + r * g.ldc + j_lo : nullptr);
}
constexpr int64_t kGemv16MaxRows = 16;
inline void gemv16_tb(const GemmArgs& g, int64_t j_lo, int64_t j_hi) {
  switch (g.m) {
    case 1: return gemv16_tb_columns<1>(g, j_lo, j_hi);
    case 2: return gemv16_tb_columns<2>(g, j_lo, j_hi);
    case 3: return gemv16_tb_columns<3>(g, j_lo, j_hi);
    case 4: return gemv16_tb_columns<4>(g, j_lo, j_hi);
    case 5: return gemv16_tb_columns<5>(g, j_lo, j_hi);
    case 6: return gemv16_tb_columns<6>(g, j_lo, j_hi);
    case 7: return gemv16_tb_columns<7>(g, j_lo, j_hi);
    case 8: return gemv16_tb_columns<8>(g, j_lo, j_hi);
    case 9: return gemv16_tb_columns<9>(g, j_lo, j_hi);
    case 10: return gemv16_tb_columns<10>(g, j_lo, j_hi);
    case 11: return gemv16_tb_columns<11>(g, j_lo, j_hi);
    case 12: return gemv16_tb_columns<12>(g, j_lo, j_hi);
    case 13: return gemv16_tb_columns<13>(g, j_lo, j_hi);
    case 14: return gemv16_tb_columns<14>(g, j_lo, j_hi);
    case 15: return gemv16_tb_columns<15>(g, j_lo, j_hi);
    default: return gemv16_tb_columns<16>(g, j_lo, j_hi);
  }
}
inline void gemv_tb(const GemmArgs& g, int64_t j_lo, int64_t j_hi) {
  switch (g.m) {
    case 1: return gemv_tb_columns<1>(g, j_lo, j_hi);
    case 2: return gemv_tb_columns<2>(g, j_lo, j_hi);
    case 3: return gemv_tb_columns<3>(g, j_lo, j_hi);
    default: return gemv_tb_columns<4>(g, j_lo, j_hi);
  }
}

