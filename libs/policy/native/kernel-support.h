// What every kernel of the addon shares: the inlined exp, exact reciprocal square roots and NaN
// tests, the static-schedule pool and the Call plumbing of one TensorFlow kernel invocation.
// Included once, first, by srpo-kernels.cc (inside its anonymous namespace).
#pragma once

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
  // Every input is float32, except input `int_input` (if any), which is int32.
  // `inputs` counts list inputs flat (TensorFlow's C API indexes them so).
  Call(TF_OpKernelContext* ctx, const char* op, int inputs, int int_input = -1) : ctx_(ctx), op_(op), status_(TF_NewStatus()), in_(static_cast<size_t>(inputs), nullptr) {
    for (int i = 0; i < inputs && ok_; i++) {
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
