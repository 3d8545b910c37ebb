// TensorFlow CPU kernels for the learner's hot spots, each one pass over memory where the
// composite tfjs form takes several (libs/policy/src/srpo-kernels.ts says when they are used).
//
// Why a Node addon: tfjs-node can only run ops that its libtensorflow knows. TensorFlow's C
// kernel API (TF_NewKernelBuilder, TF_RegisterOpDefinition in libtensorflow_framework.so.2) lets
// any code in the process register new ops and CPU kernels; when Node loads this addon, Init
// registers them, and tfjs-node's backend runs them by name (executeMultipleOutputs) like
// TensorFlow's own. The C API is ABI-stable, so the addon builds against the headers tfjs-node
// ships, whatever libtensorflow version was installed.
//
// Threads: a kernel splits its rows into one contiguous chunk per core, always the same chunk to
// the same thread (OpenMP's static schedule), so that between the ops of a step a row's data
// stays in one core's cache; TensorFlow's own pool hands blocks to whichever thread is free,
// which measured 3x slower on 1 MB arrays (docs/benchmarks.md, #21). The workers sleep between
// calls instead of spinning, so they do not take cores from TensorFlow's threads.
//
// Numerics: float32 in and out, float32 arithmetic, an inlined exp within 2 ulp (below), and
// -ffast-math so that GCC vectorises the loops (reassociated sums, min/max selects), with
// -mno-recip so that divisions stay divisions (fast-math would otherwise use the RCPPS estimate
// and a Newton step, about 2 ulp) and row factors 1/√v rounded from double (rsqrt_rounded). Every
// kernel states its edge cases; its spec checks it against a float64 evaluation of the formula.
#include <node_api.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>
#include "tf-kernel-api.h"

#define SRPO_KERNELS_VERSION 5

namespace {

// --- exp ----------------------------------------------------------------------------------
// exp(x) in float32 for x in [−87, 88], within 2 ulp: Cephes' expf (range reduction by ln 2 in
// two parts, a degree-5 polynomial, the power of two put into the exponent bits). Inlined, so
// GCC vectorises the loops that call it without a libm call (which spills every vector
// register). Callers keep x in range (below −87 they use 0: 2^n would leave the normal floats).
inline float exp_in_range(float x) {
  const float n = std::floor(x * 1.44269504088896341f + 0.5f);
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return y * scale;
}

// --- GELU (tanh form) and its backward -----------------------------------------------------
// y = x·σ(v), v = 2c(x + a x³) (= x·½(1 + tanh u), u = v/2), and
// y' = σ(v) + x·σ(v)(1 − σ(v))·2c(1 + 3a x²): the same function and derivative as
// transformer-ops.ts's composite gelu. The forward writes y only; the backward recomputes σ
// from x (cheaper than writing and keeping y′: these kernels are bound by memory traffic).
// Edge cases: σ(v) is taken as exactly 0 for v ≤ −80 and 1 for v ≥ 80 (float32's σ rounds
// to 1 from v ≈ 17 and underflows below v ≈ −88), so y = −0 and y′ = 0 for x below about
// −9.4, and y = x, y′ = 1 above about 9.4. The derivative's x³ term uses x clamped to ±10,
// where σ(1 − σ) has vanished, so x³ cannot overflow: every finite x gives a finite y and y′
// (the composite form gives NaN for |x| > ~1e13). A NaN x gives NaN y and y′ (tested by its
// bits: -ffast-math may not keep x != x).
constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2/π)
constexpr float kGeluA = 0.044715f;

// 1/√v rounded once from double. With -ffast-math GCC turns a float 1.0f/sqrtf(v) into the
// RSQRTSS estimate plus one Newton step (about 2 ulp, and biased), which the build's -mno-recip
// does not prevent; a normalisation applies its row factor to every element, so that error would
// reach every output alike. Once per row, so the double costs nothing.
inline float rsqrt_rounded(float v) { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(v))); }

inline bool is_nan_bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return (b & 0x7fffffffu) > 0x7f800000u;
}

// σ(v) with its saturation; for the derivative also e = exp(−v) and σ of the clamped v.
inline float gelu_sigma(float xi, float* e_out, float* sigma_out) {
  const float v = xi * (2 * kGeluC * kGeluA * xi * xi + 2 * kGeluC);
  const float vc = v < -80.f ? -80.f : (v > 80.f ? 80.f : v);
  const float e = exp_in_range(-vc);
  const float sigma = 1.0f / (1.0f + e);
  *e_out = e;
  *sigma_out = sigma;
  return v <= -80.f ? 0.f : (v >= 80.f ? 1.f : sigma);
}

void gelu_forward(const float* __restrict x, float* __restrict y, int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; i++) {
    const float xi = x[i];
    float e, sigma;
    const float s = gelu_sigma(xi, &e, &sigma);
    y[i] = is_nan_bits(xi) ? xi : xi * s;
  }
}

void gelu_backward(const float* __restrict x, const float* __restrict dy, float* __restrict dx, int64_t lo, int64_t hi) {
  const float c2 = 2 * kGeluC, c6a = 6 * kGeluC * kGeluA;
  for (int64_t i = lo; i < hi; i++) {
    const float xi = x[i];
    float e, sigma;
    const float s = gelu_sigma(xi, &e, &sigma);
    const float xd = xi < -10.f ? -10.f : (xi > 10.f ? 10.f : xi);
    const float xdv = xd * (c6a * xd * xd + c2);
    // σ(1 − σ) as e·σ² (e = exp(−v)): 1 − σ would cancel to a few digits where σ is near 1.
    const float d = s + (e * sigma) * sigma * xdv;
    dx[i] = is_nan_bits(xi) ? xi : dy[i] * d;
  }
}

// --- Layer-norm statistics and their backward --------------------------------------------
// Forward, per row of x [N, D]: μ = Σx/D, σ² = Σ(x − μ)²/D (biased), r = 1/√(σ² + eps),
// x̂ = (x − μ)·r. Outputs x̂ [N, D] and r [N, 1]: what transformer-ops.ts's normLinear forms
// from five ops. Two passes over a row that sits in L1 (two-pass variance, not E[x²] − μ²,
// which cancels).
// Backward, per row, given x̂, r and dx̂ (row-centred: normLinear centres its folded weight,
// so Σdx̂ = 0 and that term of the layer-norm gradient is dropped, as in the composite):
// p = Σ(dx̂·x̂)/D, dx = (dx̂ − x̂·p)·r.
// Edge cases: a constant row has σ² = 0 and r = 1/√eps (eps > 0 is required by the op);
// D = 0 gives empty outputs.
void layer_norm_rows(const float* x, float* xhat, float* rstd, int64_t n, int64_t d, float eps) {
  for (int64_t r = 0; r < n; r++) {
    const float* xr = x + r * d;
    float* yr = xhat + r * d;
    float sum = 0.f;
    for (int64_t j = 0; j < d; j++) sum += xr[j];
    const float mean = sum / static_cast<float>(d);
    float sq = 0.f;
    for (int64_t j = 0; j < d; j++) {
      const float c = xr[j] - mean;
      sq += c * c;
    }
    const float rs = rsqrt_rounded(sq / static_cast<float>(d) + eps);
    for (int64_t j = 0; j < d; j++) yr[j] = (xr[j] - mean) * rs;
    rstd[r] = rs;
  }
}

void layer_norm_grad_rows(const float* dxhat, const float* xhat, const float* rstd, float* dx, int64_t n, int64_t d) {
  for (int64_t r = 0; r < n; r++) {
    const float* g = dxhat + r * d;
    const float* h = xhat + r * d;
    float dot = 0.f;
    for (int64_t j = 0; j < d; j++) dot += g[j] * h[j];
    const float p = dot / static_cast<float>(d);
    const float rs = rstd[r];
    float* o = dx + r * d;
    for (int64_t j = 0; j < d; j++) o[j] = (g[j] - h[j] * p) * rs;
  }
}

// --- Masked softmax over the last axis, and its backward ---------------------------------
// Forward, per row of s [..., T, K] with an additive mask m [T, K] (0 or a large negative)
// broadcast over the leading axes: p = softmax(s + m), max-subtracted. Backward, per row:
// ds = p ∘ (dp − Σ dp∘p). Edge cases: a row whose every entry is −inf (or masked to it) gives
// NaN, as TensorFlow's Softmax does; a masked entry of −1e9 gives exactly 0.
void masked_softmax_rows(const float* s, const float* mask, float* p, int64_t lo, int64_t hi, int64_t t, int64_t k) {
  for (int64_t r = lo; r < hi; r++) {
    const float* sr = s + r * k;
    const float* mr = mask + (r % t) * k;
    float* pr = p + r * k;
    float mx = -INFINITY;
    for (int64_t j = 0; j < k; j++) {
      const float v = sr[j] + mr[j];
      pr[j] = v;
      mx = v > mx ? v : mx;
    }
    float sum = 0.f;
    for (int64_t j = 0; j < k; j++) {
      const float z = pr[j] - mx;  // <= 0
      const float e = z < -87.f ? 0.f : exp_in_range(z < -87.f ? -87.f : z);
      pr[j] = e;
      sum += e;
    }
    const float inv = 1.0f / sum;
    for (int64_t j = 0; j < k; j++) pr[j] *= inv;
  }
}

void softmax_grad_rows(const float* p, const float* dp, float* ds, int64_t rows, int64_t k) {
  for (int64_t r = 0; r < rows; r++) {
    const float* pr = p + r * k;
    const float* gr = dp + r * k;
    float dot = 0.f;
    for (int64_t j = 0; j < k; j++) dot += gr[j] * pr[j];
    float* o = ds + r * k;
    for (int64_t j = 0; j < k; j++) o[j] = pr[j] * (gr[j] - dot);
  }
}

#include "llama-kernels.h"
#include "logprob-kernels.h"
#include "attention-kernels.h"
#include "norm-fold-kernels.h"

// --- A static-schedule pool ---------------------------------------------------------------

class StaticPool {
 public:
  explicit StaticPool(int chunks) : chunks_(chunks < 1 ? 1 : chunks) {
    for (int w = 1; w < chunks_; w++) workers_.emplace_back([this, w] { work(w); });
  }
  int chunks() const { return chunks_; }

  // Runs fn(lo, hi) over [0, total) in chunks() contiguous pieces, piece 0 on the calling
  // thread; returns when all are done. `align` rounds inner boundaries down to a multiple (a
  // cache line of floats for flat arrays, 1 for rows). Small totals run inline.
  void run(int64_t total, int64_t align, int64_t inline_below, const std::function<void(int64_t, int64_t)>& fn) {
    if (chunks_ == 1 || total < inline_below) {
      if (total > 0) fn(0, total);
      return;
    }
    std::lock_guard<std::mutex> one_call(call_);
    {
      std::lock_guard<std::mutex> l(m_);
      fn_ = &fn;
      total_ = total;
      align_ = align;
      pending_ = chunks_ - 1;
      generation_++;
    }
    wake_.notify_all();
    chunk(0, fn);
    std::unique_lock<std::mutex> l(m_);
    done_.wait(l, [this] { return pending_ == 0; });
    fn_ = nullptr;
  }

 private:
  void chunk(int c, const std::function<void(int64_t, int64_t)>& fn) const {
    const auto edge = [this](int i) {
      if (i >= chunks_) return total_;
      const int64_t e = total_ * i / chunks_;
      return e - e % align_;
    };
    const int64_t lo = edge(c), hi = edge(c + 1);
    if (hi > lo) fn(lo, hi);
  }
  void work(int w) {
    uint64_t seen = 0;
    for (;;) {
      const std::function<void(int64_t, int64_t)>* fn;
      {
        std::unique_lock<std::mutex> l(m_);
        wake_.wait(l, [&] { return generation_ != seen; });
        seen = generation_;
        fn = fn_;
      }
      chunk(w, *fn);
      std::lock_guard<std::mutex> l(m_);
      if (--pending_ == 0) done_.notify_one();
    }
  }

  const int chunks_;
  std::mutex call_;
  std::mutex m_;
  std::condition_variable wake_;
  std::condition_variable done_;
  uint64_t generation_ = 0;
  int pending_ = 0;
  int64_t total_ = 0;
  int64_t align_ = 1;
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  std::vector<std::thread> workers_;
};

// One pool per process, never destroyed: its sleeping workers end with the process.
StaticPool& pool() {
  static StaticPool* p = new StaticPool(static_cast<int>(std::min(8u, std::max(1u, std::thread::hardware_concurrency()))));
  return *p;
}

constexpr int64_t kLine = 16;           // floats per 64-byte cache line
constexpr int64_t kInlineBelow = 32768;  // elements: below this, waking a worker costs more than it saves
// The same for kernels bound by memory traffic (adds, normalisations, the Adam update): waking
// the sleeping worker costs about 80–100 µs on these VMs (a futex wake of an idle vCPU), more
// than a second core saves on a pass over a few MB. Measured per op in the reference step (AMD
// EPYC, 2 vCPUs, 2026-12-03): [2048, 128] adds 130 µs on the calling thread against 230 µs split,
// layer norm 110 against 170 µs, the Adam update 0.7 against 0.84 ms; from 1M elements the two
// are level. Kernels with more arithmetic per element (GELU, attention) keep kInlineBelow.
constexpr int64_t kInlineMemoryBound = int64_t{1} << 20;

#include "elementwise-kernels.h"
#include "optimizer-kernels.h"

// --- Kernel plumbing ----------------------------------------------------------------------

void* no_state(TF_OpKernelConstruction*) { return nullptr; }
void no_delete(void*) {}
void unknown_shape(TF_ShapeInferenceContext* ctx, TF_Status* status) { TF_ShapeInferenceContextSetUnknownShape(ctx, status); }

// One kernel call: its float32 inputs, the outputs it allocates, and every handle released at
// the end of the scope. After a failure (ok() is false) the kernel returns without computing;
// TensorFlow then raises the message, which names the op, to the caller.
class Call {
 public:
  // Every input is float32, except input `int_input` (if any), which is int32.
  Call(TF_OpKernelContext* ctx, const char* op, int inputs, int int_input = -1) : ctx_(ctx), op_(op), status_(TF_NewStatus()), n_in_(inputs) {
    for (int i = 0; i < n_in_ && ok_; i++) {
      TF_GetInput(ctx_, i, &in_[i], status_);
      if (TF_GetCode(status_) != TF_OK) fail_status();
      else if (i == int_input ? TF_TensorType(in_[i]) != TF_INT32 : TF_TensorType(in_[i]) != TF_FLOAT) fail(i == int_input ? "targets must be int32" : "inputs must be float32");
    }
  }
  ~Call() {
    for (TF_Tensor* t : in_) if (t) TF_DeleteTensor(t);
    for (TF_Tensor* t : out_) if (t) TF_DeleteTensor(t);
    TF_DeleteStatus(status_);
  }
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  bool ok() const { return ok_; }
  int rank(int i) const { return TF_NumDims(in_[i]); }
  int64_t dim(int i, int d) const { return TF_Dim(in_[i], d < 0 ? rank(i) + d : d); }
  int64_t size(int i) const { return TF_TensorElementCount(in_[i]); }
  const float* data(int i) const { return static_cast<const float*>(TF_TensorData(in_[i])); }
  const int32_t* ints(int i) const { return static_cast<const int32_t*>(TF_TensorData(in_[i])); }

  // Output `index` with the shape of input `like`, or with `dims`.
  float* out_like(int index, int like) {
    int64_t dims[kMaxRank];
    const int r = rank(like);
    if (r > kMaxRank) return fail("more than 8 dimensions"), nullptr;
    for (int d = 0; d < r; d++) dims[d] = TF_Dim(in_[like], d);
    return out(index, dims, r);
  }
  float* out(int index, const int64_t* dims, int r) {
    if (!ok_) return nullptr;
    int64_t n = 1;
    for (int d = 0; d < r; d++) n *= dims[d];
    out_[index] = TF_AllocateOutput(ctx_, index, TF_FLOAT, dims, r, static_cast<size_t>(n) * sizeof(float), status_);
    if (TF_GetCode(status_) != TF_OK) return fail_status(), nullptr;
    return static_cast<float*>(TF_TensorData(out_[index]));
  }
  void fail(const char* message) {
    if (!ok_) return;
    char text[256];
    snprintf(text, sizeof text, "%s: %s", op_, message);
    TF_SetStatus(status_, TF_INVALID_ARGUMENT, text);
    fail_status();
  }

 private:
  static constexpr int kMaxRank = 8;
  void fail_status() {
    ok_ = false;
    TF_OpKernelContext_Failure(ctx_, status_);
  }
  TF_OpKernelContext* ctx_;
  const char* op_;
  TF_Status* status_;
  int n_in_;
  bool ok_ = true;
  TF_Tensor* in_[6] = {};
  TF_Tensor* out_[4] = {};
};

// SrpoGelu(x) -> y, any shape.
void gelu_compute(void*, TF_OpKernelContext* ctx) {
  Call c(ctx, "SrpoGelu", 1);
  float* y = c.out_like(0, 0);
  if (!c.ok()) return;
  const float* x = c.data(0);
  pool().run(c.size(0), kLine, kInlineBelow, [&](int64_t lo, int64_t hi) { gelu_forward(x, y, lo, hi); });
}

// SrpoGeluGrad(x, dy) -> dx, x and dy of one shape.
void gelu_grad_compute(void*, TF_OpKernelContext* ctx) {
  Call c(ctx, "SrpoGeluGrad", 2);
  if (c.ok() && c.size(0) != c.size(1)) c.fail("x and dy must have the same shape");
  float* dx = c.out_like(0, 0);
  if (!c.ok()) return;
  const float* x = c.data(0);
  const float* dy = c.data(1);
  pool().run(c.size(0), kLine, kInlineBelow, [&](int64_t lo, int64_t hi) { gelu_backward(x, dy, dx, lo, hi); });
}

// Attribute `eps` of SrpoLayerNorm and SrpoRmsNorm, read once per kernel instance.
struct Eps {
  float eps;
};
void* eps_create(TF_OpKernelConstruction* ctx) {
  TF_Status* status = TF_NewStatus();
  float eps = 0.f;
  TF_OpKernelConstruction_GetAttrFloat(ctx, "eps", &eps, status);
  if (TF_GetCode(status) == TF_OK && !(eps > 0.f && std::isfinite(eps))) TF_SetStatus(status, TF_INVALID_ARGUMENT, "eps must be a finite number > 0");
  if (TF_GetCode(status) != TF_OK) TF_OpKernelConstruction_Failure(ctx, status);
  TF_DeleteStatus(status);
  return new Eps{eps};
}
void eps_delete(void* p) { delete static_cast<Eps*>(p); }

// SrpoLayerNorm(x [N, D]; eps) -> (xhat [N, D], rstd [N, 1]).
void layer_norm_compute(void* state, TF_OpKernelContext* ctx) {
  Call c(ctx, "SrpoLayerNorm", 1);
  if (c.ok() && c.rank(0) != 2) c.fail("x must be [N, D]");
  if (!c.ok()) return;
  const int64_t n = c.dim(0, 0), d = c.dim(0, 1);
  const int64_t col[2] = {n, 1};
  float* xhat = c.out_like(0, 0);
  float* rstd = c.out(1, col, 2);
  if (!c.ok() || d == 0) return;
  const float* x = c.data(0);
  const float eps = static_cast<Eps*>(state)->eps;
  pool().run(n, 1, kInlineMemoryBound / d + 1, [&](int64_t lo, int64_t hi) { layer_norm_rows(x + lo * d, xhat + lo * d, rstd + lo, hi - lo, d, eps); });
}

// SrpoLayerNormGrad(dxhat [N, D], xhat [N, D], rstd [N, 1]) -> dx [N, D].
void layer_norm_grad_compute(void*, TF_OpKernelContext* ctx) {
  Call c(ctx, "SrpoLayerNormGrad", 3);
  if (c.ok() && (c.rank(0) != 2 || c.rank(1) != 2 || c.rank(2) != 2 || c.dim(1, 0) != c.dim(0, 0) || c.dim(1, 1) != c.dim(0, 1) ||
                 c.dim(2, 0) != c.dim(0, 0) || c.dim(2, 1) != 1))
    c.fail("dxhat and xhat must be [N, D] and rstd [N, 1]");
  if (!c.ok()) return;
  float* dx = c.out_like(0, 0);
  if (!c.ok() || c.size(0) == 0) return;
  const int64_t n = c.dim(0, 0), d = c.dim(0, 1);
  const float *g = c.data(0), *h = c.data(1), *r = c.data(2);
  pool().run(n, 1, kInlineMemoryBound / d + 1, [&](int64_t lo, int64_t hi) { layer_norm_grad_rows(g + lo * d, h + lo * d, r + lo, dx + lo * d, hi - lo, d); });
}

// SrpoMaskedSoftmax(scores [..., T, K], mask [T, K]) -> p [..., T, K].
void masked_softmax_compute(void*, TF_OpKernelContext* ctx) {
  Call c(ctx, "SrpoMaskedSoftmax", 2);
  if (c.ok() && (c.rank(0) < 2 || c.rank(1) != 2 || c.dim(0, -2) != c.dim(1, 0) || c.dim(0, -1) != c.dim(1, 1)))
    c.fail("scores must be [..., T, K] and mask [T, K]");
  if (!c.ok()) return;
  float* p = c.out_like(0, 0);
  const int64_t k = c.dim(0, -1), t = c.dim(0, -2);
  if (!c.ok() || c.size(0) == 0) return;
  const float *sc = c.data(0), *m = c.data(1);
  pool().run(c.size(0) / k, 1, kInlineBelow / k + 1, [&](int64_t lo, int64_t hi) { masked_softmax_rows(sc, m, p, lo, hi, t, k); });
}

// SrpoSoftmaxGrad(p [..., K], dp [..., K]) -> ds [..., K].
void softmax_grad_compute(void*, TF_OpKernelContext* ctx) {
  Call c(ctx, "SrpoSoftmaxGrad", 2);
  if (c.ok()) {
    bool same = c.rank(0) == c.rank(1) && c.rank(0) >= 1;
    for (int d = 0; same && d < c.rank(0); d++) same = c.dim(0, d) == c.dim(1, d);
    if (!same) c.fail("p and dp must have the same shape, of rank >= 1");
  }
  if (!c.ok()) return;
  float* ds = c.out_like(0, 0);
  const int64_t k = c.dim(0, -1);
  if (!c.ok() || c.size(0) == 0) return;
  const float *pp = c.data(0), *dp = c.data(1);
  pool().run(c.size(0) / k, 1, kInlineBelow / k + 1, [&](int64_t lo, int64_t hi) { softmax_grad_rows(pp + lo * k, dp + lo * k, ds + lo * k, hi - lo, k); });
}

// Attributes of SrpoAttention and its backward: the batch, the heads and where they sit.
struct AttentionAttrs {
  int64_t batch, heads, kv_heads, d, q_col, k_col, v_col;
};
void* attention_create(TF_OpKernelConstruction* ctx) {
  TF_Status* status = TF_NewStatus();
  const char* names[7] = {"batch", "heads", "kv_heads", "head_dim", "q_col", "k_col", "v_col"};
  int32_t v[7] = {0, 0, 0, 0, 0, 0, 0};
  for (int i = 0; i < 7 && TF_GetCode(status) == TF_OK; i++) TF_OpKernelConstruction_GetAttrInt32(ctx, names[i], &v[i], status);
  if (TF_GetCode(status) == TF_OK && (v[0] < 1 || v[1] < 1 || v[2] < 1 || v[3] < 1 || v[4] < 0 || v[5] < 0 || v[6] < 0 || v[1] % v[2] != 0))
    TF_SetStatus(status, TF_INVALID_ARGUMENT, "SrpoAttention: batch, heads, kv_heads and head_dim must be >= 1 with kv_heads dividing heads, and the columns >= 0");
  if (TF_GetCode(status) != TF_OK) TF_OpKernelConstruction_Failure(ctx, status);
  TF_DeleteStatus(status);
  return new AttentionAttrs{v[0], v[1], v[2], v[3], v[4], v[5], v[6]};
}
void attention_delete(void* p) { delete static_cast<AttentionAttrs*>(p); }

// Checks q, k, v (inputs first, first + 1, first + 2) against the attributes; fills the shape.
bool attention_shape(Call& c, const AttentionAttrs& a, int first, AttentionShape* s) {
  if (!c.ok()) return false;
  const int iq = first, ik = first + 1, iv = first + 2;
  if (c.rank(iq) != 2 || c.rank(ik) != 2 || c.rank(iv) != 2 || c.dim(ik, 0) != c.dim(iq, 0) || c.dim(iv, 0) != c.dim(iq, 0) || c.dim(iq, 0) % a.batch != 0 ||
      c.dim(iq, 0) == 0) {
    c.fail("q, k and v must be [B*T, columns] with the same rows, a multiple of batch");
    return false;
  }
  if (a.q_col + a.heads * a.d > c.dim(iq, 1) || a.k_col + a.kv_heads * a.d > c.dim(ik, 1) || a.v_col + a.kv_heads * a.d > c.dim(iv, 1)) {
    c.fail("q needs heads * head_dim columns from q_col, k and v kv_heads * head_dim from k_col and v_col");
    return false;
  }
  *s = {a.batch, c.dim(iq, 0) / a.batch, a.heads, a.kv_heads, a.d, c.dim(iq, 1), c.dim(ik, 1), c.dim(iv, 1), a.q_col, a.k_col, a.v_col};
  return true;
}

// SrpoAttention(q, k, v; batch, heads, kv_heads, head_dim, q_col, k_col, v_col)
//   -> (o [B*T, H*d], p [B, H, T, T]). Causal; q pre-scaled. See attention-kernels.h.
void attention_compute(void* state, TF_OpKernelContext* ctx) {
  Call c(ctx, "SrpoAttention", 3);
  const AttentionAttrs& a = *static_cast<AttentionAttrs*>(state);
  AttentionShape s;
  if (!attention_shape(c, a, 0, &s)) return;
  const int64_t odims[2] = {s.batch * s.t, s.heads * s.d};
  const int64_t pdims[4] = {s.batch, s.heads, s.t, s.t};
  float* o = c.out(0, odims, 2);
  float* p = c.out(1, pdims, 4);
  if (!c.ok()) return;
  const float *q = c.data(0), *k = c.data(1), *v = c.data(2);
  pool().run(s.batch * s.heads, 1, 2, [&](int64_t lo, int64_t hi) {
    std::vector<float> scratch(static_cast<size_t>(3 * s.t * s.d));
    attention_forward_items(q, k, v, o, p, s, lo, hi, scratch.data());
  });
}

// SrpoAttentionGrad(dO [B*T, H*d], q, k, v, p [B, H, T, T]; attributes as SrpoAttention)
//   -> (dq, dk, dv) shaped like q, k and v; columns outside the heads' are 0.
// SrpoAttentionGradPacked: the same where q, k and v are one tensor (the fused projection's
// [q | k | v]): -> dqkv shaped like it, the three gradients in their columns.
template <bool kPacked>
void attention_grad_compute(void* state, TF_OpKernelContext* ctx) {
  const char* op = kPacked ? "SrpoAttentionGradPacked" : "SrpoAttentionGrad";
  Call c(ctx, op, 5);
  const AttentionAttrs& a = *static_cast<AttentionAttrs*>(state);
  AttentionShape s;
  if (!attention_shape(c, a, 1, &s)) return;
  if (c.rank(0) != 2 || c.dim(0, 0) != s.batch * s.t || c.dim(0, 1) != s.heads * s.d || c.rank(4) != 4 || c.dim(4, 0) != s.batch || c.dim(4, 1) != s.heads ||
      c.dim(4, 2) != s.t || c.dim(4, 3) != s.t)
    return c.fail("dO must be [B*T, heads * head_dim] and p [B, heads, T, T]");
  if (kPacked) {
    const bool same = s.q_stride == s.k_stride && s.q_stride == s.v_stride;
    const int64_t qe = s.q_col + s.heads * s.d, ke = s.k_col + s.kv_heads * s.d, ve = s.v_col + s.kv_heads * s.d;
    const auto apart = [](int64_t a0, int64_t a1, int64_t b0, int64_t b1) { return a1 <= b0 || b1 <= a0; };
    if (!same || !apart(s.q_col, qe, s.k_col, ke) || !apart(s.q_col, qe, s.v_col, ve) || !apart(s.k_col, ke, s.v_col, ve))
      return c.fail("packed q, k and v must be one shape with disjoint q, k and v columns");
  }
  AttentionGradOut out;
  if (kPacked) {
    float* dx = c.out_like(0, 1);
    if (!c.ok()) return;
    // Columns that are no head's get no gradient: zero them (the fused projection has none).
    if ((s.heads + 2 * s.kv_heads) * s.d != s.q_stride) std::memset(dx, 0, static_cast<size_t>(c.size(1)) * sizeof(float));
    out = {dx, dx, dx, s.q_stride, s.q_stride, s.q_stride, s.q_col, s.k_col, s.v_col};
  } else {
    float* dq = c.out_like(0, 1);
    float* dk = c.out_like(1, 2);
    float* dv = c.out_like(2, 3);
    if (!c.ok()) return;
    if (s.heads * s.d != s.q_stride) std::memset(dq, 0, static_cast<size_t>(c.size(1)) * sizeof(float));
    if (s.kv_heads * s.d != s.k_stride) std::memset(dk, 0, static_cast<size_t>(c.size(2)) * sizeof(float));
    if (s.kv_heads * s.d != s.v_stride) std::memset(dv, 0, static_cast<size_t>(c.size(3)) * sizeof(float));
    out = {dq, dk, dv, s.q_stride, s.k_stride, s.v_stride, s.q_col, s.k_col, s.v_col};
  }
  const float *g = c.data(0), *q = c.data(1), *k = c.data(2), *v = c.data(3), *p = c.data(4);
  pool().run(s.batch * s.kv_heads, 1, 2, [&](int64_t lo, int64_t hi) {
    std::vector<float> scratch(static_cast<size_t>(6 * s.t * s.d + s.t * s.t));
    attention_backward_items(g, q, k, v, p, s, out, lo, hi, scratch.data());
  });
}

// Attributes of SrpoNormFold(Grad): whether the bias and the column scale inputs are present
// (when not, the op reads nothing from those inputs; callers pass any float tensor there).
struct NormFoldAttrs {
  bool bias, scale;
};
void* norm_fold_create(TF_OpKernelConstruction* ctx) {
  TF_Status* status = TF_NewStatus();
  unsigned char bias = 0, scale = 0;
  TF_OpKernelConstruction_GetAttrBool(ctx, "has_bias", &bias, status);
  if (TF_GetCode(status) == TF_OK) TF_OpKernelConstruction_GetAttrBool(ctx, "has_scale", &scale, status);
  if (TF_GetCode(status) != TF_OK) TF_OpKernelConstruction_Failure(ctx, status);
  TF_DeleteStatus(status);
  return new NormFoldAttrs{bias != 0, scale != 0};
}
void norm_fold_delete(void* p) { delete static_cast<NormFoldAttrs*>(p); }

// Checks w [D, O] (input iw), gain and shift [D] (inputs ig, ig + 1), and bias / scale [O] where present.
bool norm_fold_args(Call& c, const NormFoldAttrs& f, int iw, int ig, int ib, int is, NormFoldArgs* a) {
  if (!c.ok()) return false;
  if (c.rank(iw) != 2 || c.rank(ig) != 1 || c.rank(ig + 1) != 1 || c.dim(ig, 0) != c.dim(iw, 0) || c.dim(ig + 1, 0) != c.dim(iw, 0)) {
    c.fail("w must be [D, O] and gain and shift [D]");
    return false;
  }
  const int64_t o = c.dim(iw, 1);
  if ((f.bias && ib >= 0 && (c.rank(ib) != 1 || c.dim(ib, 0) != o)) || (f.scale && (c.rank(is) != 1 || c.dim(is, 0) != o))) {
    c.fail("bias and scale must be [O]");
    return false;
  }
  *a = {c.data(iw), c.data(ig), c.data(ig + 1), f.bias && ib >= 0 ? c.data(ib) : nullptr, f.scale ? c.data(is) : nullptr, c.dim(iw, 0), o};
  return true;
}

// SrpoNormFold(w [D, O], gain [D], shift [D], bias [O], scale [O]; has_bias, has_scale) -> (wc [D, O], c [1, O], wcT [O, D]).
void norm_fold_compute(void* state, TF_OpKernelContext* ctx) {
  Call c(ctx, "SrpoNormFold", 5);
  NormFoldArgs a;
  if (!norm_fold_args(c, *static_cast<NormFoldAttrs*>(state), 0, 1, 3, 4, &a)) return;
  const int64_t cdims[2] = {1, a.o};
  const int64_t tdims[2] = {a.o, a.d};
  float* wc = c.out_like(0, 0);
  float* cv = c.out(1, cdims, 2);
  float* wct = c.out(2, tdims, 2);
  if (!c.ok()) return;
  std::vector<float> colsum(static_cast<size_t>(a.o));
  norm_fold_forward(a, wc, wct, cv, colsum.data());
}

// SrpoNormFoldGrad(dwc [D, O], dc [O], w [D, O], gain [D], shift [D], scale [O]; has_bias, has_scale)
//   -> (dgain [D], dshift [D], dw [D, O], dbias [O]).
void norm_fold_grad_compute(void* state, TF_OpKernelContext* ctx) {
  Call c(ctx, "SrpoNormFoldGrad", 6);
  NormFoldArgs a;
  if (!norm_fold_args(c, *static_cast<NormFoldAttrs*>(state), 2, 3, -1, 5, &a)) return;
  if (c.rank(0) != 2 || c.dim(0, 0) != a.d || c.dim(0, 1) != a.o || c.rank(1) != 1 || c.dim(1, 0) != a.o) return c.fail("dwc must be [D, O] and dc [O]");
  float* dg = c.out_like(0, 3);
  float* dshift = c.out_like(1, 4);
  float* dw = c.out_like(2, 2);
  float* db = c.out_like(3, 1);
  if (!c.ok()) return;
  std::vector<float> colmean(static_cast<size_t>(a.o));
  norm_fold_backward(a, c.data(0), c.data(1), dg, dshift, dw, db, colmean.data());
}

// SrpoRmsNorm(x [N, D], w [D]; eps) -> (y [N, D], rstd [N, 1]).
void rms_norm_compute(void* state, TF_OpKernelContext* ctx) {
  Call c(ctx, "SrpoRmsNorm", 2);
  if (c.ok() && (c.rank(0) != 2 || c.rank(1) != 1 || c.dim(1, 0) != c.dim(0, 1))) c.fail("x must be [N, D] and w [D]");
  if (!c.ok()) return;
  const int64_t n = c.dim(0, 0), d = c.dim(0, 1);
  const int64_t col[2] = {n, 1};
  float* y = c.out_like(0, 0);
  float* rstd = c.out(1, col, 2);
  if (!c.ok()) return;
  const float eps = static_cast<Eps*>(state)->eps;
  if (d == 0) {
    for (int64_t r = 0; r < n; r++) rstd[r] = rsqrt_rounded(eps);  // the mean of no squares is 0
    return;
  }
  const float *x = c.data(0), *w = c.data(1);
  pool().run(n, 1, kInlineMemoryBound / d + 1, [&](int64_t lo, int64_t hi) { rms_norm_rows(x + lo * d, w, y + lo * d, rstd + lo, hi - lo, d, eps); });
}

// SrpoRmsNormGrad(dy [N, D], x [N, D], w [D], rstd [N, 1]) -> (dx [N, D], dw [D]).
void rms_norm_grad_compute(void*, TF_OpKernelContext* ctx) {
  Call c(ctx, "SrpoRmsNormGrad", 4);
  if (c.ok() && (c.rank(0) != 2 || c.rank(1) != 2 || c.rank(2) != 1 || c.rank(3) != 2 || c.dim(1, 0) != c.dim(0, 0) || c.dim(1, 1) != c.dim(0, 1) ||
                 c.dim(2, 0) != c.dim(0, 1) || c.dim(3, 0) != c.dim(0, 0) || c.dim(3, 1) != 1))
    c.fail("dy and x must be [N, D], w [D] and rstd [N, 1]");
  if (!c.ok()) return;
  float* dx = c.out_like(0, 0);
  float* dw = c.out_like(1, 2);
  if (!c.ok()) return;
  const int64_t n = c.dim(0, 0), d = c.dim(0, 1);
  if (d == 0) return;
  const float *g = c.data(0), *x = c.data(1), *w = c.data(2), *r = c.data(3);
  if (n > 0) pool().run(n, 1, kInlineMemoryBound / d + 1, [&](int64_t lo, int64_t hi) { rms_norm_grad_rows(g + lo * d, x + lo * d, w, r + lo, dx + lo * d, hi - lo, d); });
  pool().run(d, kLine, kInlineBelow / (n + 1) + 1, [&](int64_t lo, int64_t hi) { rms_norm_weight_grad_cols(g, x, r, dw, n, d, lo, hi); });
}

// SrpoSwiGlu(g, u) -> y, g and u of one shape.
void swiglu_compute(void*, TF_OpKernelContext* ctx) {
  Call c(ctx, "SrpoSwiGlu", 2);
  if (c.ok() && c.size(0) != c.size(1)) c.fail("g and u must have the same shape");
  float* y = c.out_like(0, 0);
  if (!c.ok()) return;
  const float *g = c.data(0), *u = c.data(1);
  pool().run(c.size(0), kLine, kInlineBelow, [&](int64_t lo, int64_t hi) { swiglu_forward(g, u, y, lo, hi); });
}

// SrpoSwiGluGrad(g, u, dy) -> (dg, du), all of one shape.
void swiglu_grad_compute(void*, TF_OpKernelContext* ctx) {
  Call c(ctx, "SrpoSwiGluGrad", 3);
  if (c.ok() && (c.size(0) != c.size(1) || c.size(0) != c.size(2))) c.fail("g, u and dy must have the same shape");
  float* dg = c.out_like(0, 0);
  float* du = c.out_like(1, 0);
  if (!c.ok()) return;
  const float *g = c.data(0), *u = c.data(1), *dy = c.data(2);
  pool().run(c.size(0), kLine, kInlineBelow, [&](int64_t lo, int64_t hi) { swiglu_backward(g, u, dy, dg, du, lo, hi); });
}

// Attributes of SrpoRope: the output scale and the direction (inverse: the backward's −sin).
struct RopeAttrs {
  float scale;
  float sign;
};
void* rope_create(TF_OpKernelConstruction* ctx) {
  TF_Status* status = TF_NewStatus();
  float scale = 1.f;
  unsigned char inverse = 0;
  TF_OpKernelConstruction_GetAttrFloat(ctx, "scale", &scale, status);
  if (TF_GetCode(status) == TF_OK) TF_OpKernelConstruction_GetAttrBool(ctx, "inverse", &inverse, status);
  if (TF_GetCode(status) == TF_OK && !std::isfinite(scale)) TF_SetStatus(status, TF_INVALID_ARGUMENT, "SrpoRope: scale must be finite");
  if (TF_GetCode(status) != TF_OK) TF_OpKernelConstruction_Failure(ctx, status);
  TF_DeleteStatus(status);
  return new RopeAttrs{scale, inverse ? -1.f : 1.f};
}
void rope_delete(void* p) { delete static_cast<RopeAttrs*>(p); }

// SrpoRope(x [B·T, H·d], cos [T, d], sin [T, d]; scale, inverse) -> y [B·T, H·d].
void rope_compute(void* state, TF_OpKernelContext* ctx) {
  Call c(ctx, "SrpoRope", 3);
  if (c.ok()) {
    const bool tables = c.rank(1) == 2 && c.rank(2) == 2 && c.dim(1, 0) == c.dim(2, 0) && c.dim(1, 1) == c.dim(2, 1);
    const int64_t t = tables ? c.dim(1, 0) : 0, d = tables ? c.dim(1, 1) : 0;
    if (!tables || t < 1 || d < 2 || d % 2 != 0 || c.rank(0) != 2 || c.dim(0, 0) % t != 0 || c.dim(0, 1) % d != 0)
      c.fail("x must be [B*T, H*d], cos and sin [T, d] with d even");
  }
  float* y = c.out_like(0, 0);
  if (!c.ok() || c.size(0) == 0) return;
  const int64_t t = c.dim(1, 0), d = c.dim(1, 1), cols = c.dim(0, 1);
  const float *x = c.data(0), *cs = c.data(1), *sn = c.data(2);
  const RopeAttrs a = *static_cast<RopeAttrs*>(state);
  pool().run(c.dim(0, 0), 1, kInlineMemoryBound / cols + 1, [&](int64_t lo, int64_t hi) { rope_rows(x, cs, sn, y, lo, hi, t, cols, d, a.scale, a.sign); });
}

// Inputs of SrpoTargetLogProbs(Grad): logits [N, V] and int32 targets [N] within [0, V).
bool check_targets(Call& c) {
  if (c.ok() && (c.rank(0) != 2 || c.rank(1) != 1 || c.dim(1, 0) != c.dim(0, 0))) c.fail("logits must be [N, V] and targets [N]");
  if (!c.ok()) return false;
  const int64_t n = c.dim(0, 0), v = c.dim(0, 1);
  const int32_t* t = c.ints(1);
  for (int64_t r = 0; r < n; r++) {
    if (t[r] < 0 || t[r] >= v) {
      char text[96];
      snprintf(text, sizeof text, "targets[%lld] = %d is outside [0, %lld)", static_cast<long long>(r), t[r], static_cast<long long>(v));
      c.fail(text);
      return false;
    }
  }
  return true;
}

// SrpoTargetLogProbs(logits [N, V], targets int32 [N]) -> (logp [N], lse [N]).
void target_logp_compute(void*, TF_OpKernelContext* ctx) {
  Call c(ctx, "SrpoTargetLogProbs", 2, 1);
  if (!check_targets(c)) return;
  const int64_t n = c.dim(0, 0), v = c.dim(0, 1);
  const int64_t col[1] = {n};
  float* logp = c.out(0, col, 1);
  float* lse = c.out(1, col, 1);
  if (!c.ok() || n == 0) return;
  const float* x = c.data(0);
  const int32_t* t = c.ints(1);
  pool().run(n, 1, kInlineBelow / (v + 1) + 1, [&](int64_t lo, int64_t hi) { target_logp_rows(x, t, logp, lse, lo, hi, v); });
}

// SrpoTargetLogProbsGrad(logits [N, V], targets int32 [N], lse [N], dy [N]) -> dlogits [N, V].
void target_logp_grad_compute(void*, TF_OpKernelContext* ctx) {
  Call c(ctx, "SrpoTargetLogProbsGrad", 4, 1);
  if (!check_targets(c)) return;
  if (c.rank(2) != 1 || c.rank(3) != 1 || c.dim(2, 0) != c.dim(0, 0) || c.dim(3, 0) != c.dim(0, 0)) c.fail("lse and dy must be [N]");
  float* dx = c.out_like(0, 0);
  if (!c.ok() || c.size(0) == 0) return;
  const int64_t v = c.dim(0, 1);
  const float *x = c.data(0), *lse = c.data(2), *dy = c.data(3);
  const int32_t* t = c.ints(1);
  pool().run(c.dim(0, 0), 1, kInlineBelow / (v + 1) + 1, [&](int64_t lo, int64_t hi) { target_logp_grad_rows(x, t, lse, dy, dx, lo, hi, v); });
}

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
  pool().run(c.size(0) / cols, 1, kInlineMemoryBound / cols + 1, [&](int64_t lo, int64_t hi) { add_residual_bias(a, b, row, y, lo, hi, cols); });
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
    pool().run(c.size(0), kLine, kInlineMemoryBound, [&](int64_t lo, int64_t hi) { add_flat(a, b, y, lo, hi); });
  } else {
    const int64_t cols = c.dim(1, -1);
    if (cols == 0) return;
    pool().run(c.size(0) / cols, 1, kInlineMemoryBound / cols + 1, [&](int64_t lo, int64_t hi) { add_row(a, b, y, lo, hi, cols); });
  }
}

// SrpoAdam(grads: N * float, weights: N * float, m [total], v [total], p [8]; N) -> (m' [total],
// v' [total], norm [], new_weights: N * float): Adam's global-norm clip, moment update and the
// weights' update with decoupled decay (optimizer-kernels.h). Gradient i has weight i's shape,
// total = Σ the weights' sizes. p = [maxGradNorm (<= 0: no clip), beta1, 1 - beta1, beta2,
// 1 - beta2, stepSize, epsHat, lr * weightDecay], an input rather than attributes because
// stepSize and epsHat change every step (attributes would build a kernel per step).
// TensorFlow's C API indexes list inputs and outputs flat: grads are inputs 0..N-1, weights
// N..2N-1, then m, v, p; the outputs m', v', norm, then the new weights 3..N+2. Written without
// Call (fixed at 6 inputs and 4 outputs); same style of errors, naming the op.
void* adam_create(TF_OpKernelConstruction* ctx) {
  TF_Status* status = TF_NewStatus();
  int32_t n = 0;
  TF_OpKernelConstruction_GetAttrInt32(ctx, "N", &n, status);
  if (TF_GetCode(status) != TF_OK) TF_OpKernelConstruction_Failure(ctx, status);
  TF_DeleteStatus(status);
  return new int32_t(n);
}
void adam_delete(void* p) { delete static_cast<int32_t*>(p); }

// "[2, 3]": a tensor's shape for error messages.
std::string shape_text(const TF_Tensor* t) {
  std::string s = "[";
  for (int d = 0; d < TF_NumDims(t); d++) s += (d ? ", " : "") + std::to_string(TF_Dim(t, d));
  return s + "]";
}

void adam_compute(void* state, TF_OpKernelContext* ctx) {
  const int n = *static_cast<const int32_t*>(state);
  // Every handle (inputs and outputs) released at the end of the scope.
  struct Scope {
    TF_Status* status = TF_NewStatus();
    std::vector<TF_Tensor*> tensors;
    ~Scope() {
      for (TF_Tensor* t : tensors) if (t) TF_DeleteTensor(t);
      TF_DeleteStatus(status);
    }
  } scope;
  TF_Status* status = scope.status;
  const auto fail = [&](const std::string& message) {
    TF_SetStatus(status, TF_INVALID_ARGUMENT, ("SrpoAdam: " + message).c_str());
    TF_OpKernelContext_Failure(ctx, status);
  };
  const int inputs = TF_NumInputs(ctx);
  if (n < 1 || inputs != 2 * n + 3) {
    return fail("expected 2 * N + 3 inputs (N gradients, N weights, m, v, p) for N = " + std::to_string(n) + ", got " + std::to_string(inputs));
  }
  std::vector<TF_Tensor*>& in = scope.tensors;
  in.assign(static_cast<size_t>(inputs), nullptr);
  for (int i = 0; i < inputs; i++) {
    TF_GetInput(ctx, i, &in[i], status);
    if (TF_GetCode(status) != TF_OK) return TF_OpKernelContext_Failure(ctx, status);
    if (TF_TensorType(in[i]) != TF_FLOAT) return fail("inputs must be float32 (input " + std::to_string(i) + " is not)");
  }
  std::vector<int64_t> offset(static_cast<size_t>(n) + 1, 0);
  std::vector<const float*> g(n), w(n);
  std::vector<float*> w_out(n);
  for (int t = 0; t < n; t++) {
    const TF_Tensor *gt = in[t], *wt = in[n + t];
    bool same = TF_NumDims(gt) == TF_NumDims(wt);
    for (int d = 0; same && d < TF_NumDims(gt); d++) same = TF_Dim(gt, d) == TF_Dim(wt, d);
    if (!same) return fail("grads[" + std::to_string(t) + "] " + shape_text(gt) + " must have the shape of weights[" + std::to_string(t) + "] " + shape_text(wt));
    offset[t + 1] = offset[t] + TF_TensorElementCount(wt);
    g[t] = static_cast<const float*>(TF_TensorData(gt));
    w[t] = static_cast<const float*>(TF_TensorData(wt));
  }
  const int64_t total = offset[n];
  const TF_Tensor *mt = in[2 * n], *vt = in[2 * n + 1], *pt = in[2 * n + 2];
  if (TF_NumDims(mt) != 1 || TF_NumDims(vt) != 1 || TF_Dim(mt, 0) != total || TF_Dim(vt, 0) != total) {
    return fail("m and v must be [total], total = " + std::to_string(total) + " (the weights' sizes summed), got m " + shape_text(mt) + " and v " + shape_text(vt));
  }
  if (TF_NumDims(pt) != 1 || TF_Dim(pt, 0) != kAdamParams) {
    return fail("p must be [8]: maxGradNorm, beta1, 1 - beta1, beta2, 1 - beta2, stepSize, epsHat, lr * weightDecay; got " + shape_text(pt));
  }
  const auto allocate = [&](int index, const int64_t* dims, int rank, int64_t count) -> float* {
    TF_Tensor* out = TF_AllocateOutput(ctx, index, TF_FLOAT, dims, rank, static_cast<size_t>(count) * sizeof(float), status);
    if (TF_GetCode(status) != TF_OK) return TF_OpKernelContext_Failure(ctx, status), nullptr;
    scope.tensors.push_back(out);
    return static_cast<float*>(TF_TensorData(out));
  };
  const int64_t flat[1] = {total};
  float* m_out = allocate(0, flat, 1, total);
  float* v_out = m_out ? allocate(1, flat, 1, total) : nullptr;
  float* norm = v_out ? allocate(2, flat, 0, 1) : nullptr;
  if (!norm) return;
  for (int t = 0; t < n; t++) {
    const TF_Tensor* wt = in[n + t];
    std::vector<int64_t> dims(static_cast<size_t>(TF_NumDims(wt)));
    for (size_t d = 0; d < dims.size(); d++) dims[d] = TF_Dim(wt, static_cast<int>(d));
    w_out[t] = allocate(3 + t, dims.data(), static_cast<int>(dims.size()), offset[t + 1] - offset[t]);
    if (!w_out[t]) return;
  }
  const AdamLists lists{g.data(), w.data(), w_out.data(), offset.data(), n};
  const float *m = static_cast<const float*>(TF_TensorData(mt)), *v = static_cast<const float*>(TF_TensorData(vt)), *p = static_cast<const float*>(TF_TensorData(pt));
  const int64_t blocks = (total + kNormBlock - 1) / kNormBlock;
  std::vector<double> partial(static_cast<size_t>(blocks));
  const int64_t inline_blocks = kInlineMemoryBound / kNormBlock + 1;
  const bool clip = !is_nan_bits(p[0]) && p[0] > 0.f;
  if (!clip) {
    // The update does not need the norm: one pass, each block summed and updated by one thread.
    const AdamScalars s = adam_scalars(p, 0.f);
    pool().run(blocks, 1, inline_blocks, [&](int64_t lo, int64_t hi) {
      sum_squares_blocks(lists, total, partial.data(), lo, hi);
      adam_update_range(lists, m, v, m_out, v_out, lo * kNormBlock, std::min(total, hi * kNormBlock), s);
    });
    *norm = global_norm(partial.data(), blocks);
    return;
  }
  pool().run(blocks, 1, inline_blocks, [&](int64_t lo, int64_t hi) { sum_squares_blocks(lists, total, partial.data(), lo, hi); });
  *norm = global_norm(partial.data(), blocks);
  const AdamScalars s = adam_scalars(p, *norm);
  pool().run(total, kLine, kInlineMemoryBound, [&](int64_t lo, int64_t hi) { adam_update_range(lists, m, v, m_out, v_out, lo, hi, s); });
}

// SrpoColumnSum(x [..., C]) -> y [C]: the sum over every axis but the last (optimizer-kernels.h).
void column_sum_compute(void*, TF_OpKernelContext* ctx) {
  Call c(ctx, "SrpoColumnSum", 1);
  if (c.ok() && c.rank(0) < 1) c.fail("x must be [..., C], of rank >= 1");
  if (!c.ok()) return;
  const int64_t cols = c.dim(0, -1);
  const int64_t dims[1] = {cols};
  float* y = c.out(0, dims, 1);
  if (!c.ok() || cols == 0) return;
  const int64_t rows = c.size(0) / cols;
  const float* x = c.data(0);
  pool().run(cols, kLine, kInlineMemoryBound / (rows + 1) + 1, [&](int64_t lo, int64_t hi) { column_sums(x, y, rows, cols, lo, hi); });
}

struct OpSpec {
  const char* name;
  const char* inputs[6];
  const char* outputs[4];
  const char* attrs[8];
  void* (*create)(TF_OpKernelConstruction*);
  void (*compute)(void*, TF_OpKernelContext*);
  void (*destroy)(void*);
};

#define kAttentionAttrs "batch: int", "heads: int", "kv_heads: int", "head_dim: int", "q_col: int", "k_col: int", "v_col: int"
const OpSpec kOps[] = {
    {"SrpoGelu", {"x: float"}, {"y: float"}, {}, no_state, gelu_compute, no_delete},
    {"SrpoGeluGrad", {"x: float", "dy: float"}, {"dx: float"}, {}, no_state, gelu_grad_compute, no_delete},
    {"SrpoLayerNorm", {"x: float"}, {"xhat: float", "rstd: float"}, {"eps: float"}, eps_create, layer_norm_compute, eps_delete},
    {"SrpoLayerNormGrad", {"dxhat: float", "xhat: float", "rstd: float"}, {"dx: float"}, {}, no_state, layer_norm_grad_compute, no_delete},
    {"SrpoMaskedSoftmax", {"scores: float", "mask: float"}, {"p: float"}, {}, no_state, masked_softmax_compute, no_delete},
    {"SrpoSoftmaxGrad", {"p: float", "dp: float"}, {"ds: float"}, {}, no_state, softmax_grad_compute, no_delete},
    {"SrpoAttention", {"q: float", "k: float", "v: float"}, {"o: float", "p: float"}, {kAttentionAttrs}, attention_create, attention_compute, attention_delete},
    {"SrpoAttentionGrad", {"dout: float", "q: float", "k: float", "v: float", "p: float"}, {"dq: float", "dk: float", "dv: float"}, {kAttentionAttrs}, attention_create,
     attention_grad_compute<false>, attention_delete},
    {"SrpoAttentionGradPacked", {"dout: float", "q: float", "k: float", "v: float", "p: float"}, {"dqkv: float"}, {kAttentionAttrs}, attention_create,
     attention_grad_compute<true>, attention_delete},
    {"SrpoNormFold", {"w: float", "gain: float", "shift: float", "bias: float", "scale: float"}, {"wc: float", "c: float", "wct: float"}, {"has_bias: bool", "has_scale: bool"},
     norm_fold_create, norm_fold_compute, norm_fold_delete},
    {"SrpoNormFoldGrad", {"dwc: float", "dc: float", "w: float", "gain: float", "shift: float", "scale: float"}, {"dgain: float", "dshift: float", "dw: float", "dbias: float"},
     {"has_bias: bool", "has_scale: bool"}, norm_fold_create, norm_fold_grad_compute, norm_fold_delete},
    {"SrpoRmsNorm", {"x: float", "w: float"}, {"y: float", "rstd: float"}, {"eps: float"}, eps_create, rms_norm_compute, eps_delete},
    {"SrpoRmsNormGrad", {"dy: float", "x: float", "w: float", "rstd: float"}, {"dx: float", "dw: float"}, {}, no_state, rms_norm_grad_compute, no_delete},
    {"SrpoSwiGlu", {"g: float", "u: float"}, {"y: float"}, {}, no_state, swiglu_compute, no_delete},
    {"SrpoSwiGluGrad", {"g: float", "u: float", "dy: float"}, {"dg: float", "du: float"}, {}, no_state, swiglu_grad_compute, no_delete},
    {"SrpoRope", {"x: float", "cos: float", "sin: float"}, {"y: float"}, {"scale: float", "inverse: bool"}, rope_create, rope_compute, rope_delete},
    {"SrpoTargetLogProbs", {"logits: float", "targets: int32"}, {"logp: float", "lse: float"}, {}, no_state, target_logp_compute, no_delete},
    {"SrpoAdd", {"a: float", "b: float"}, {"y: float"}, {}, no_state, add_compute, no_delete},
    {"SrpoAddResidualBias", {"a: float", "b: float", "row: float"}, {"y: float"}, {}, no_state, add_residual_bias_compute, no_delete},
    {"SrpoTargetLogProbsGrad", {"logits: float", "targets: int32", "lse: float", "dy: float"}, {"dlogits: float"}, {}, no_state, target_logp_grad_compute, no_delete},
    {"SrpoAdam", {"grads: N * float", "weights: N * float", "m: float", "v: float", "p: float"}, {"m_out: float", "v_out: float", "norm: float", "new_weights: N * float"},
     {"N: int >= 1"}, adam_create, adam_compute, adam_delete},
    {"SrpoColumnSum", {"x: float"}, {"y: float"}, {}, no_state, column_sum_compute, no_delete},
};

// Registers every op and kernel; returns the first error, or nullptr.
const char* register_all(TF_Status* status) {
  static char message[512];
  for (const OpSpec& op : kOps) {
    TF_OpDefinitionBuilder* b = TF_NewOpDefinitionBuilder(op.name);
    for (const char* in : op.inputs) if (in) TF_OpDefinitionBuilderAddInput(b, in);
    for (const char* out : op.outputs) if (out) TF_OpDefinitionBuilderAddOutput(b, out);
    for (const char* attr : op.attrs) if (attr) TF_OpDefinitionBuilderAddAttr(b, attr);
    TF_OpDefinitionBuilderSetShapeInferenceFunction(b, &unknown_shape);
    TF_RegisterOpDefinition(b, status);  // takes ownership of b
    if (TF_GetCode(status) == TF_OK) {
      TF_KernelBuilder* k = TF_NewKernelBuilder(op.name, "CPU", op.create, op.compute, op.destroy);
      TF_RegisterKernelBuilder(op.name, k, status);  // takes ownership of k
    }
    if (TF_GetCode(status) != TF_OK) {
      snprintf(message, sizeof message, "registering %s: %s", op.name, TF_Message(status));
      return message;
    }
  }
  return nullptr;
}

napi_value init(napi_env env, napi_value exports) {
  // The build targets AVX2 + FMA (every CPU this project's machines have); refuse, rather than
  // crash on an illegal instruction, anywhere else. The loader then keeps the composite paths.
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    napi_throw_error(env, "SRPO_KERNELS_CPU", "srpo-kernels needs a CPU with AVX2 and FMA");
    return nullptr;
  }
  // Node may load the addon twice (jest module registries); TensorFlow refuses a second
  // registration of an op, and the first one is the same code: register once per process.
  // std::call_once: worker_threads may load it from several threads at once.
  static const char* error = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    TF_Status* status = TF_NewStatus();
    error = register_all(status);
    TF_DeleteStatus(status);
  });
  if (error) {
    napi_throw_error(env, "SRPO_KERNELS_REGISTER", error);
    return nullptr;
  }
  napi_value version, ops;
  napi_create_int32(env, SRPO_KERNELS_VERSION, &version);
  napi_set_named_property(env, exports, "version", version);
  napi_create_array(env, &ops);
  uint32_t i = 0;
  for (const OpSpec& op : kOps) {
    napi_value name;
    napi_create_string_utf8(env, op.name, NAPI_AUTO_LENGTH, &name);
    napi_set_element(env, ops, i++, name);
  }
  napi_set_named_property(env, exports, "ops", ops);
  return exports;
}

}  // namespace

NAPI_MODULE(srpo_kernels, init)
