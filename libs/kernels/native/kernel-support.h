// What every kernel of the addon shares: the inlined exp, exact reciprocal square roots and NaN
// tests, the thread pool and the Call plumbing of one TensorFlow kernel invocation.
// Included once, first, by srpo-kernels.cc (inside its anonymous namespace).
#pragma once
#include "aligned-space.h"

// Forces inlining: a loop built twice (SRPO_BOTH_ISAS) must take its helpers into each build,
// where GCC's heuristics might keep one out-of-line call compiled for AVX2 only.
#define SRPO_INLINE __attribute__((always_inline)) inline

// --- exp ----------------------------------------------------------------------------------
// exp(x) in float32 for x in [−87, 88], within 2 ulp: Cephes' expf (range reduction by ln 2 in
// two parts, a degree-5 polynomial, the power of two put into the exponent bits). Inlined, so
// GCC vectorises the loops that call it without a libm call (which spills every vector
// register). Callers keep x in range (below −87 they use 0: 2^n would leave the normal floats).
SRPO_INLINE float exp_in_range(float x) {
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

// --- Elementwise loops built for AVX2 and for AVX-512 ---------------------------------------
// The addon is compiled for AVX2 + FMA. SRPO_BOTH_ISAS(name, impl, params, args) defines
// `name(params)`, which runs `impl(args)` (an SRPO_INLINE loop) compiled once for AVX2 and once
// under target("avx512f"), where GCC vectorises it 16 floats wide. The AVX-512 build runs where
// `elementwise_avx512` is set: by the addon's init where the CPU has AVX-512F and
// ONEDNN_MAX_CPU_ISA does not cap the process below it (the same rule as SrpoMatMul's
// micro-kernel), or by setIsa (tests, benches).
// Bits: a loop goes through this only where both builds give the same bits, which
// kernel-isa.spec.ts checks element by element. That rules out reductions (a vectorised sum adds
// in an order that depends on the vector width) and, so far, SwiGLU: with -ffast-math GCC
// reassociated its products differently in the two builds (a third of the outputs an ulp apart),
// and __builtin_assoc_barrier did not settle it in every loop form tried. GELU agrees.
// Why: GELU's forward and backward are bound by their arithmetic (an exp and a division per
// element), not by memory: on [2048, 512], two threads, the forward took 390–434 µs with 8-float
// vectors and 231–322 with 16, the backward 448–523 and 308–369; the reference step 0.987x the
// time (fused-ab.js --isa elementwise; Intel Xeon, 2026-12-03, #21).
bool elementwise_avx512 = false;
#define SRPO_BOTH_ISAS(name, impl, params, args)                                    \
  __attribute__((target("avx512f"))) void name##_avx512 params { impl args; } \
  void name##_avx2 params { impl args; }                                            \
  void name params {                                                                \
    if (elementwise_avx512)                                                         \
      name##_avx512 args;                                                           \
    else                                                                            \
      name##_avx2 args;                                                             \
  }

// --- The pool: each core its own contiguous range, and stealing when a core is late -------

// Why not a plain static schedule: waking a sleeping worker takes 40–60 µs on these VMs (a futex
// wake of an idle vCPU) and, one call in a hundred, 1.5–2.5 ms (the vCPU was descheduled); with
// a fixed half each, the calling thread waited for the late worker a mean 190 µs per call, about
// 7 ms of an 80 ms step (40 calls) (AMD EPYC, 2 vCPUs, 2026-12-03, #21). Here each chunk of the range is
// cut into kPiecesPerChunk pieces (8: the reference step took 0.98–0.99x the time of 4 in a
// one-process A/B); a thread runs its own chunk's pieces in order (so a row's data
// stays in the same core's cache from op to op, as with OpenMP's static schedule) and then takes
// the pieces that other threads have not started. A late worker thus costs at most a piece.
// Which thread runs a piece never changes a result: every kernel computes each output from its
// inputs alone, in an order fixed by the piece's range or by nothing at all (each one's spec).
//
// Waiting: the calling thread spins for the last pieces rather than sleep (it has nothing else
// to do, and a futex wake costs more than most pieces); a worker spins after a call before it
// sleeps, because the ops of a step follow each other by tens of microseconds, yielding its core
// meanwhile to any thread that wants it. How long is set by the learner (srpo-kernels.ts): 100 µs
// where TensorFlow's MatMul runs the products on TensorFlow's own threads, 1 ms where SrpoMatMul
// runs them on this pool (below). In one-process A/Bs of the reference
// step (AMD EPYC, 2 vCPUs, 2026-12-03): pieces and stealing against the static halves, 0.93–0.97x
// the time (capped at AVX2; 0.94–0.99x native); longer worker spins (400 µs, 2 ms) cost up to
// 1.13x natively, where oneDNN's MatMul needs TensorFlow's threads on the same cores, but 0.89x
// capped at AVX2, where SrpoMatMul ran the products here. On the Intel Xeon with SrpoMatMul
// routed (2026-12-03, 20 pairs of 5-step blocks, per-pair geometric mean): 1 ms against 100 µs
// 0.961–0.967 natively and 0.978 capped, 3 ms 0.959, 20 µs 1.062.
class Pool {
 public:
  using Fn = std::function<void(int64_t, int64_t)>;
  static constexpr int64_t kPiecesPerChunk = 8;

  explicit Pool(int chunks) : chunks_(chunks < 1 ? 1 : chunks), next_(static_cast<size_t>(chunks_)) {
    for (int w = 1; w < chunks_; w++) workers_.emplace_back([this, w] { work(w); });
  }
  int chunks() const { return chunks_; }
  // How long a worker spins after a call before it sleeps (see above; set_worker_spin in srpo-kernels.cc).
  void set_worker_spin(int64_t us) { worker_spin_us_.store(std::max<int64_t>(0, us), std::memory_order_relaxed); }
  int64_t worker_spin() const { return worker_spin_us_.load(std::memory_order_relaxed); }

  // Runs fn(lo, hi) over [0, total) in pieces whose inner boundaries are multiples of `align`
  // (a cache line of floats for flat arrays, 1 for rows), and returns when all are done. The
  // calling thread is thread 0. Small totals (below inline_below) run inline in one call.
  // `pieces_per_chunk` is how many pieces each thread's share is cut into (1: a static schedule).
  void run(int64_t total, int64_t align, int64_t inline_below, const Fn& fn, int64_t pieces_per_chunk = kPiecesPerChunk) {
    if (chunks_ == 1 || total < inline_below) {
      if (total > 0) fn(0, total);
      return;
    }
    std::lock_guard<std::mutex> one_call(call_);
    const int64_t per_chunk = std::max<int64_t>(1, pieces_per_chunk);
    Job job;
    {
      std::lock_guard<std::mutex> l(m_);
      job = Job{++generation_, &fn, total, std::max<int64_t>(1, align), per_chunk, per_chunk * chunks_};
      job_ = job;
      done_.store(0, std::memory_order_relaxed);
      for (int c = 0; c < chunks_; c++) next_[c].store(tag(job.gen, c * per_chunk), std::memory_order_relaxed);
      published_.store(job.gen, std::memory_order_release);
    }
    wake_.notify_all();
    take_pieces(0, job);
    // The last pieces run on the workers: spin briefly, then sleep (a worker was descheduled; a
    // spinning caller would also keep it from moving to this core).
    const auto spin_until = std::chrono::steady_clock::now() + kCallerSpin;
    while (done_.load(std::memory_order_acquire) < job.pieces && std::chrono::steady_clock::now() < spin_until) __builtin_ia32_pause();
    if (done_.load(std::memory_order_acquire) < job.pieces) {
      std::unique_lock<std::mutex> l(m_);
      finished_.wait(l, [&] { return done_.load(std::memory_order_acquire) >= job.pieces; });
    }
  }

 private:
  struct Job {
    uint64_t gen = 0;
    const Fn* fn = nullptr;
    int64_t total = 0, align = 1, per_chunk = 1, pieces = 0;
    int64_t edge(int64_t piece) const {
      if (piece >= pieces) return total;
      const int64_t e = total * piece / pieces;
      return e - e % align;
    }
  };

  static constexpr auto kCallerSpin = std::chrono::microseconds(100);

  // A claim counter holds its call's generation in the high half, so that a worker that wakes
  // after its call has ended cannot claim a piece of the next call.
  static uint64_t tag(uint64_t gen, int64_t piece) { return (gen << 32) | static_cast<uint64_t>(piece); }

  // Claims the next unstarted piece of chunk c for the job, or returns −1.
  int64_t claim(int c, const Job& job) {
    const uint64_t end = tag(job.gen, (c + 1) * job.per_chunk);
    uint64_t v = next_[c].load(std::memory_order_acquire);
    while ((v >> 32) == (job.gen & 0xffffffffu) && v < end)
      if (next_[c].compare_exchange_weak(v, v + 1, std::memory_order_acq_rel)) return static_cast<int64_t>(v & 0xffffffffu);
    return -1;
  }

  // Thread w's own chunk first, then the other chunks' unstarted pieces. job.fn stays valid while
  // a piece of the job is unfinished, and only then can a claim succeed.
  void take_pieces(int w, const Job& job) {
    for (int i = 0; i < chunks_; i++) {
      const int c = (w + i) % chunks_;
      for (int64_t p; (p = claim(c, job)) >= 0;) {
        const int64_t lo = job.edge(p), hi = job.edge(p + 1);
        if (hi > lo) (*job.fn)(lo, hi);
        if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == job.pieces) {
          std::lock_guard<std::mutex> l(m_);
          finished_.notify_one();
        }
      }
    }
  }

  void work(int w) {
    uint64_t seen = 0;
    for (;;) {
      const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(worker_spin_us_.load(std::memory_order_relaxed));
      // Yield rather than pause: a TensorFlow thread woken onto this core (oneDNN's MatMul runs
      // in TensorFlow's pool) then runs at once; with pause the native step took 1.06x the time.
      while (published_.load(std::memory_order_acquire) == seen && std::chrono::steady_clock::now() < spin_until) sched_yield();
      Job job;
      {
        std::unique_lock<std::mutex> l(m_);
        wake_.wait(l, [&] { return generation_ != seen; });
        job = job_;
        seen = job.gen;
      }
      take_pieces(w, job);
    }
  }

  const int chunks_;
  std::mutex call_;
  std::mutex m_;
  std::condition_variable wake_;
  std::condition_variable finished_;
  uint64_t generation_ = 0;
  Job job_;
  std::atomic<uint64_t> published_{0};
  std::vector<std::atomic<uint64_t>> next_;
  std::atomic<int64_t> done_{0};
  std::vector<std::thread> workers_;
  std::atomic<int64_t> worker_spin_us_{100};
};

// One pool per process, never destroyed: its sleeping workers end with the process.
Pool& pool() {
  static Pool* p = new Pool(static_cast<int>(std::min(8u, std::max(1u, std::thread::hardware_concurrency()))));
  return *p;
}

constexpr int64_t kLine = 16;           // floats per 64-byte cache line
// Elements below which a kernel runs on the calling thread alone. Kernels bound by memory traffic
// (adds, normalisations, the Adam update) used a threshold of 2^20 while a worker that slept
// had to be waited for: its 80–100 µs wake cost more than a second core saved on a [2048, 128]
// add. Now the calling thread takes the pieces of a late worker, so a split costs nothing when
// the worker sleeps and halves the pass when it is awake; with this threshold the reference
// step took 0.91–0.95x the time of the 2^20 one (AMD EPYC, 2 vCPUs, 2026-12-03, #21).
constexpr int64_t kInlineBelow = 32768;

// --- Kernel plumbing ----------------------------------------------------------------------

void* no_state(TF_OpKernelConstruction*) { return nullptr; }

// Reads the kernel's bool attributes into `attrs`' targets; on a failure, fails the kernel's
// construction (TensorFlow then raises the message) and returns false.
bool read_bool_attrs(TF_OpKernelConstruction* ctx, std::initializer_list<std::pair<const char*, bool*>> attrs) {
  TF_Status* status = TF_NewStatus();
  for (const auto& [name, target] : attrs) {
    unsigned char value = 0;
    TF_OpKernelConstruction_GetAttrBool(ctx, name, &value, status);
    if (TF_GetCode(status) != TF_OK) break;
    *target = value != 0;
  }
  const bool ok = TF_GetCode(status) == TF_OK;
  if (!ok) TF_OpKernelConstruction_Failure(ctx, status);
  TF_DeleteStatus(status);
  return ok;
}
void no_delete(void*) {}
void unknown_shape(TF_ShapeInferenceContext* ctx, TF_Status* status) { TF_ShapeInferenceContextSetUnknownShape(ctx, status); }

// One kernel call: its float32 inputs, the outputs it allocates, and every handle released at
// the end of the scope. After a failure (ok() is false) the kernel returns without computing;
// TensorFlow then raises the message, which names the op, to the caller.
class Call {
 public:
  // Every input is float32, except input `int_input` (if any), which is int32 and named
  // `int_name` in the error. `inputs` counts list inputs flat (TensorFlow's C API indexes them so).
  Call(TF_OpKernelContext* ctx, const char* op, int inputs, int int_input = -1, const char* int_name = "targets")
      : ctx_(ctx), op_(op), status_(TF_NewStatus()), in_(static_cast<size_t>(inputs), nullptr) {
    for (int i = 0; i < inputs && ok_; i++) {
      TF_GetInput(ctx_, i, &in_[i], status_);
      if (TF_GetCode(status_) != TF_OK) fail_status();
      else if (i == int_input ? TF_TensorType(in_[i]) != TF_INT32 : TF_TensorType(in_[i]) != TF_FLOAT) fail(i == int_input ? std::string(int_name) + " must be int32" : "inputs must be float32");
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
    if (out_.size() <= static_cast<size_t>(index)) out_.resize(static_cast<size_t>(index) + 1, nullptr);
    out_[index] = TF_AllocateOutput(ctx_, index, TF_FLOAT, dims, r, static_cast<size_t>(n) * sizeof(float), status_);
    if (TF_GetCode(status_) != TF_OK) return fail_status(), nullptr;
    return static_cast<float*>(TF_TensorData(out_[index]));
  }
  void fail(const std::string& message) {
    if (!ok_) return;
    TF_SetStatus(status_, TF_INVALID_ARGUMENT, (std::string(op_) + ": " + message).c_str());
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
  bool ok_ = true;
  std::vector<TF_Tensor*> in_;
  std::vector<TF_Tensor*> out_;
};
