// Causal multi-head attention, forward and backward, one op each (SrpoAttention,
// SrpoAttentionGrad, SrpoAttentionGradPacked; their op bodies are in transformer-ops.h).
//
// Why: tfjs's attention is a transpose of the projection into heads, an unstack, two batched
// products, the softmax, a transpose back and a reshape; the backward adds four products, a pack
// and two transposes. On the reference step that was 12 BatchMatMulV2 calls, 8 transposes, a
// Pack and an Unpack per layer and the softmax pair: about 18 ms of a 108 ms step, where
// PyTorch's flash attention took 10.7 ms (docs/benchmarks.md, #21). These kernels read q, k and v in the projection's row layout
// ([B·T, columns], head h at columns col + h·d) and write the output the same way, so nothing
// is transposed, and they skip the masked half of the scores.
//
// Forward, per batch row b and query head h (key/value head g = ⌊h / r⌋, r = H / H_kv, as
// transformers' repeat_kv): s_ij = q_i · k_j for j ≤ i (q carries the 1/√d already),
// p_i = softmax(s_i) over j ≤ i (max-subtracted; the masked entries j > i are exactly 0, as the
// composite's −1e9 mask gives), o_i = Σ_j p_ij v_j. p [B, H, T, T] is an output: the backward
// reads it instead of recomputing the scores.
// Backward, per b and key/value head g, over its r query heads: dp_ij = dO_i · v_j,
// ds_ij = p_ij (dp_ij − Σ_j' p_ij' dp_ij'), dq_i = Σ_j ds_ij k_j, dk_j = Σ_i ds_ij q_i,
// dv_j = Σ_i p_ij dO_i, all over j ≤ i. One thread owns a whole (b, g), so dk and dv are summed
// in a fixed order whatever the thread count: the bits do not depend on the machine's cores.
// Edge cases: a NaN or infinite score gives NaN in its row (as TensorFlow's Softmax); T = 1 gives
// p = 1 and o = v.

typedef float v8f __attribute__((vector_size(32)));
inline v8f load8(const float* p) {
  v8f v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store8(float* p, v8f v) { std::memcpy(p, &v, sizeof v); }

// C = A·B (accumulate: C += A·B) for an m×n result over kk: A [m, kk] with row stride lda (or,
// with kTransA, A stored transposed: [kk, m], element (i, k) at a[k·lda + i]), B [kk, n] with
// row stride ldb, C with row stride ldc, all row-major. Tiles of 4 rows × 16 columns keep eight
// 8-float accumulators in registers; the edges take 1-row and 8-column tiles, and columns past
// the last multiple of 8 a scalar loop. Sums run over k in order.
template <bool kTransA>
inline void gemm(int64_t m, int64_t n, int64_t kk, const float* __restrict a, int64_t lda, const float* __restrict b, int64_t ldb, float* __restrict c, int64_t ldc,
                 bool accumulate) {
  const auto at = [&](int64_t i, int64_t k) { return kTransA ? a[k * lda + i] : a[i * lda + k]; };
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    int64_t i = 0;
    for (; i + 4 <= m; i += 4) {
      v8f c00 = {}, c01 = {}, c10 = {}, c11 = {}, c20 = {}, c21 = {}, c30 = {}, c31 = {};
      for (int64_t k = 0; k < kk; k++) {
        const v8f b0 = load8(b + k * ldb + j), b1 = load8(b + k * ldb + j + 8);
        const float a0 = at(i, k), a1 = at(i + 1, k), a2 = at(i + 2, k), a3 = at(i + 3, k);
        c00 += a0 * b0, c01 += a0 * b1;
        c10 += a1 * b0, c11 += a1 * b1;
        c20 += a2 * b0, c21 += a2 * b1;
        c30 += a3 * b0, c31 += a3 * b1;
      }
      const v8f rows[4][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}};
      for (int r = 0; r < 4; r++) {
        float* cr = c + (i + r) * ldc + j;
        store8(cr, accumulate ? load8(cr) + rows[r][0] : rows[r][0]);
        store8(cr + 8, accumulate ? load8(cr + 8) + rows[r][1] : rows[r][1]);
      }
    }
    for (; i < m; i++) {
      v8f c0 = {}, c1 = {};
      for (int64_t k = 0; k < kk; k++) c0 += at(i, k) * load8(b + k * ldb + j), c1 += at(i, k) * load8(b + k * ldb + j + 8);
      float* cr = c + i * ldc + j;
      store8(cr, accumulate ? load8(cr) + c0 : c0);
      store8(cr + 8, accumulate ? load8(cr + 8) + c1 : c1);
    }
  }
  for (; j + 8 <= n; j += 8) {
    for (int64_t i = 0; i < m; i++) {
      v8f c0 = {};
      for (int64_t k = 0; k < kk; k++) c0 += at(i, k) * load8(b + k * ldb + j);
      float* cr = c + i * ldc + j;
      store8(cr, accumulate ? load8(cr) + c0 : c0);
    }
  }
  for (; j < n; j++) {
    for (int64_t i = 0; i < m; i++) {
      float sum = 0.f;
      // fmaf, so that each sum is the vector lanes' chain of fused multiply-adds over k in order
      // (with -ffast-math, `sum += a * b` was vectorised over k and summed in another order).
      for (int64_t k = 0; k < kk; k++) sum = __builtin_fmaf(at(i, k), b[k * ldb + j], sum);
      c[i * ldc + j] = accumulate ? c[i * ldc + j] + sum : sum;
    }
  }
}
inline void gemm_nn(int64_t m, int64_t n, int64_t kk, const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  gemm<false>(m, n, kk, a, lda, b, ldb, c, ldc, accumulate);
}
// C (+)= Aᵀ·B with A stored [kk, m] (row stride lda).
inline void gemm_tn(int64_t m, int64_t n, int64_t kk, const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  gemm<true>(m, n, kk, a, lda, b, ldb, c, ldc, accumulate);
}

// The causal rows of a product whose row i needs columns (or terms) 0..i: the 4-row blocks of
// gemm_nn, each taking the columns up to its last row's diagonal (rounded up to a vector, where
// that stays within n: the extra entries are the caller's to ignore).
inline int64_t causal_extent(int64_t i0, int64_t rows, int64_t n) {
  const int64_t need = i0 + rows, rounded = (need + 7) / 8 * 8;
  return rounded < n ? rounded : n;
}

struct AttentionShape {
  int64_t batch, t, heads, kv_heads, d;
  // Row stride (columns of the tensor) and column of head 0 for q, k and v.
  int64_t q_stride, k_stride, v_stride, q_col, k_col, v_col;
};

// Copies head g of batch row b of x (rows b·T.., columns col + g·d..) into dst [T, d], and,
// when dst_t is given, its transpose [d, T].
inline void gather_head(const float* x, int64_t stride, int64_t col, int64_t b, int64_t g, int64_t t, int64_t d, float* dst, float* dst_t) {
  for (int64_t j = 0; j < t; j++) {
    const float* row = x + (b * t + j) * stride + col + g * d;
    if (dst)
      for (int64_t e = 0; e < d; e++) dst[j * d + e] = row[e];
    if (dst_t)
      for (int64_t e = 0; e < d; e++) dst_t[e * t + j] = row[e];
  }
}

// Softmax of row i of s over columns 0..i in place, max-subtracted; columns past i set to 0.
inline void causal_softmax_row(float* si, int64_t i, int64_t t) {
  softmax_in_place(si, i + 1);
  for (int64_t j = i + 1; j < t; j++) si[j] = 0.f;
}

// Forward over work items [lo, hi) of B·H (item = b·H + h). `scratch` holds 3·T·d floats.
inline void attention_forward_items(const float* q, const float* k, const float* v, float* o, float* p, const AttentionShape& s, int64_t lo, int64_t hi,
                                    float* scratch) {
  const int64_t t = s.t, d = s.d, r = s.heads / s.kv_heads, o_stride = s.heads * d;
  float* qh = scratch;      // [T, d]
  float* kt = qh + t * d;   // [d, T]
  float* vv = kt + d * t;   // [T, d]
  int64_t loaded = -1;      // the (b, g) now in kt and vv
  for (int64_t item = lo; item < hi; item++) {
    const int64_t b = item / s.heads, h = item % s.heads, g = h / r;
    if (b * s.kv_heads + g != loaded) {
      gather_head(k, s.k_stride, s.k_col, b, g, t, d, nullptr, kt);
      gather_head(v, s.v_stride, s.v_col, b, g, t, d, vv, nullptr);
      loaded = b * s.kv_heads + g;
    }
    gather_head(q, s.q_stride, s.q_col, b, h, t, d, qh, nullptr);
    float* ph = p + item * t * t;
    for (int64_t i0 = 0; i0 < t; i0 += 4) {
      const int64_t rows = t - i0 < 4 ? t - i0 : 4;
      gemm_nn(rows, causal_extent(i0, rows, t), d, qh + i0 * d, d, kt, t, ph + i0 * t, t, false);  // scores
      for (int64_t i = i0; i < i0 + rows; i++) causal_softmax_row(ph + i * t, i, t);
      gemm_nn(rows, d, i0 + rows, ph + i0 * t, t, vv, d, o + (b * t + i0) * o_stride + h * d, o_stride, false);  // o = p·v
    }
  }
}

// Where the backward writes dq, dk and dv: the tensor, its row stride and the column of head 0.
struct AttentionGradOut {
  float *dq, *dk, *dv;
  int64_t dq_stride, dk_stride, dv_stride, dq_col, dk_col, dv_col;
};

// Backward over work items [lo, hi) of B·H_kv (item = b·H_kv + g). `scratch` holds
// 6·T·d + T·T floats.
inline void attention_backward_items(const float* dout, const float* q, const float* k, const float* v, const float* p, const AttentionShape& s,
                                     const AttentionGradOut& out, int64_t lo, int64_t hi, float* scratch) {
  const int64_t t = s.t, d = s.d, r = s.heads / s.kv_heads, do_stride = s.heads * d;
  float* kk = scratch;       // [T, d]
  float* vt = kk + t * d;    // [d, T]
  float* qh = vt + d * t;    // [T, d]
  float* gh = qh + t * d;    // [T, d]  dO of one head
  float* dk = gh + t * d;    // [T, d]
  float* dv = dk + t * d;    // [T, d]
  float* ds = dv + t * d;    // [T, T]  dp, then ds in place
  for (int64_t item = lo; item < hi; item++) {
    const int64_t b = item / s.kv_heads, g = item % s.kv_heads;
    gather_head(k, s.k_stride, s.k_col, b, g, t, d, kk, nullptr);
    gather_head(v, s.v_stride, s.v_col, b, g, t, d, nullptr, vt);
    for (int64_t h = g * r; h < (g + 1) * r; h++) {
      gather_head(q, s.q_stride, s.q_col, b, h, t, d, qh, nullptr);
      gather_head(dout, do_stride, 0, b, h, t, d, gh, nullptr);
      const float* ph = p + (b * s.heads + h) * t * t;
      for (int64_t i0 = 0; i0 < t; i0 += 4) {
        const int64_t rows = t - i0 < 4 ? t - i0 : 4;
        gemm_nn(rows, causal_extent(i0, rows, t), d, gh + i0 * d, d, vt, t, ds + i0 * t, t, false);  // dp = dO·vᵀ
        for (int64_t i = i0; i < i0 + rows; i++) {
          const float* pi = ph + i * t;
          float* si = ds + i * t;
          float dot = 0.f;
          for (int64_t j = 0; j <= i; j++) dot += pi[j] * si[j];
          for (int64_t j = 0; j <= i; j++) si[j] = pi[j] * (si[j] - dot);
          for (int64_t j = i + 1; j < t; j++) si[j] = 0.f;
        }
        // dq = ds·k, straight into the output rows.
        gemm_nn(rows, d, i0 + rows, ds + i0 * t, t, kk, d, out.dq + (b * t + i0) * out.dq_stride + out.dq_col + h * d, out.dq_stride, false);
      }
      // dk (+)= dsᵀ·q and dv (+)= pᵀ·dO, reading ds and p down their columns: column j is
      // nonzero from row j on.
      const bool acc = h > g * r;
      for (int64_t j0 = 0; j0 < t; j0 += 4) {
        const int64_t rows = t - j0 < 4 ? t - j0 : 4;
        gemm_tn(rows, d, t - j0, ds + j0 * t + j0, t, qh + j0 * d, d, dk + j0 * d, d, acc);
        gemm_tn(rows, d, t - j0, ph + j0 * t + j0, t, gh + j0 * d, d, dv + j0 * d, d, acc);
      }
    }
    for (int64_t j = 0; j < t; j++) {
      float* dkr = out.dk + (b * t + j) * out.dk_stride + out.dk_col + g * d;
      float* dvr = out.dv + (b * t + j) * out.dv_stride + out.dv_col + g * d;
      for (int64_t e = 0; e < d; e++) {
        dkr[e] = dk[j * d + e];
        dvr[e] = dv[j * d + e];
      }
    }
  }
}

// Decode attention (SrpoDecodeAttention; op body in transformer-ops.h): one new position per
// batch row against that row's cached keys and values, for serving's KV cache
// (libs/hf/src/llama-decode-batch.ts). Row b's cache is the concatenation of two parts, each
// [B, H_kv, W_part, d] (the older columns and the recent block, W_recent possibly 0), left-padded:
// its valid columns are start_b .. W_1 + W_2 − 1 of the concatenation.
//
// Why its own kernel: the composite (two batched products, a mask and TensorFlow's Softmax) sums
// in another order than SrpoAttention, so a cached step's log-probs differed from the full
// forward's by up to 1.2e-5 on SmolLM2. This kernel takes SrpoAttention's order for the same
// query position (its last row, i = n − 1 over n valid positions): each score is gemm_nn's
// in-order sum over d (same tiles: one call over the n columns, keys transposed to [d, n]); the
// softmax is softmax_in_place over the n scores; each output column is the in-order sum
// Σ_j p_j v_j over the valid positions, older part first (gemm_nn's per-lane accumulation,
// continued across the two parts). Masked columns are left out instead of weighted by exp(−1e9)
// = 0, which adds nothing. Work items are (b, g): the r query heads of key/value head g share
// the transposed keys.
struct DecodeShape {
  int64_t batch, heads, kv_heads, d, w1, w2;
};

// Items [lo, hi) of B·H_kv. `scratch` holds d·W + r·W floats (W = w1 + w2).
inline void decode_attention_items(const float* q, const float* k1, const float* v1, const float* k2, const float* v2, const int32_t* start, float* o,
                                   const DecodeShape& s, int64_t lo, int64_t hi, float* scratch) {
  const int64_t d = s.d, r = s.heads / s.kv_heads, w = s.w1 + s.w2, q_stride = s.heads * d;
  for (int64_t item = lo; item < hi; item++) {
    const int64_t b = item / s.kv_heads, g = item % s.kv_heads;
    const int64_t from = start[b], n = w - from;
    // The valid rows of each part, in order: part 1 from column `from`, part 2 from its column max(from − w1, 0).
    const int64_t first1 = from < s.w1 ? from : s.w1, n1 = s.w1 - first1;
    const int64_t first2 = from > s.w1 ? from - s.w1 : 0, n2 = s.w2 - first2;
    const float* kp[2] = {k1 + ((b * s.kv_heads + g) * s.w1 + first1) * d, k2 + ((b * s.kv_heads + g) * s.w2 + first2) * d};
    const float* vp[2] = {v1 + ((b * s.kv_heads + g) * s.w1 + first1) * d, v2 + ((b * s.kv_heads + g) * s.w2 + first2) * d};
    const int64_t np[2] = {n1, n2};
    float* kt = scratch;      // [d, n]
    float* sc = kt + d * n;   // [r, n]
    for (int part = 0, j0 = 0; part < 2; j0 += np[part], part++)
      for (int64_t j = 0; j < np[part]; j++)
        for (int64_t e = 0; e < d; e++) kt[e * n + j0 + j] = kp[part][j * d + e];
    gemm_nn(r, n, d, q + b * q_stride + g * r * d, d, kt, n, sc, n, false);  // scores of the r heads
    for (int64_t hr = 0; hr < r; hr++) {
      float* p = sc + hr * n;
      softmax_in_place(p, n);
      float* out = o + b * q_stride + (g * r + hr) * d;
      int64_t e = 0;
      for (; e + 16 <= d; e += 16) {
        v8f c0 = {}, c1 = {};
        for (int part = 0, j0 = 0; part < 2; j0 += np[part], part++)
          for (int64_t j = 0; j < np[part]; j++) {
            const float* vr = vp[part] + j * d + e;
            c0 += p[j0 + j] * load8(vr), c1 += p[j0 + j] * load8(vr + 8);
          }
        store8(out + e, c0);
        store8(out + e + 8, c1);
      }
      for (; e + 8 <= d; e += 8) {
        v8f c0 = {};
        for (int part = 0, j0 = 0; part < 2; j0 += np[part], part++)
          for (int64_t j = 0; j < np[part]; j++) c0 += p[j0 + j] * load8(vp[part] + j * d + e);
        store8(out + e, c0);
      }
      for (; e < d; e++) {
        float sum = 0.f;
        for (int part = 0, j0 = 0; part < 2; j0 += np[part], part++)
          for (int64_t j = 0; j < np[part]; j++) sum += p[j0 + j] * vp[part][j * d + e];
        out[e] = sum;
      }
    }
  }
}
