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
// Why one thread: these kernels run on the calling thread. A second thread pool beside
// TensorFlow's would fight it for the cores (measured: docs/benchmarks.md, #21).
//
// Numerics: float32 in and out, float32 arithmetic, vectorised exp (glibc's libmvec, hence
// -ffast-math in the build). Every kernel states its edge cases; its spec checks it against a
// float64 evaluation of the formula.
#include <node_api.h>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include "tf-kernel-api.h"

#define SRPO_KERNELS_VERSION 1

namespace {

// --- GELU (tanh form) with its derivative -------------------------------------------------
// y = x·σ(v), v = 2c(x + a x³) (= x·½(1 + tanh u), u = v/2), and
// y' = σ(v) + x·σ(v)(1 − σ(v))·2c(1 + 3a x²): the same function and derivative as
// transformer-ops.ts's composite gelu, in one pass that reads x once and writes y and y'.
// Edge cases: σ(v) is taken as exactly 0 for v ≤ −80 and 1 for v ≥ 80 (float32's σ rounds
// to 1 from v ≈ 17 and underflows below v ≈ −88; expf then stays finite), so y = −0 and y′ = 0
// for x below about −9.4, and y = x, y′ = 1 above about 9.4. The derivative's x³ term uses x
// clamped to ±10, where σ(1 − σ) has vanished, so x³ cannot overflow: every finite x gives a
// finite y and y′ (the composite form gives NaN for |x| > ~1e13). A NaN x gives NaN y and y′
// (tested by its bits: -ffast-math may not keep x != x).
constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2/π)
constexpr float kGeluA = 0.044715f;

inline bool is_nan_bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return (b & 0x7fffffffu) > 0x7f800000u;
}

void gelu_with_derivative(const float* x, float* y, float* dydx, int64_t n) {
  const float c2 = 2 * kGeluC, c2a = 2 * kGeluC * kGeluA, c6a = 6 * kGeluC * kGeluA;
  for (int64_t i = 0; i < n; i++) {
    const float xi = x[i];
    const float x2 = xi * xi;
    const float v = xi * (c2a * x2 + c2);
    const float vc = v < -80.f ? -80.f : (v > 80.f ? 80.f : v);
    const float e = expf(-vc);
    const float sigma = 1.0f / (1.0f + e);
    const float s = v <= -80.f ? 0.f : (v >= 80.f ? 1.f : sigma);
    const float xd = xi < -10.f ? -10.f : (xi > 10.f ? 10.f : xi);
    const float xdv = xd * (c6a * xd * xd + c2);
    y[i] = xi * s;
    // σ(1 − σ) as e·σ² (e = exp(−v)): 1 − σ would cancel to a few digits where σ is near 1.
    dydx[i] = s + (e * sigma) * sigma * xdv;
  }
  for (int64_t i = 0; i < n; i++) {
    if (is_nan_bits(x[i])) y[i] = dydx[i] = x[i];
  }
}

// --- Kernel plumbing ----------------------------------------------------------------------

void* no_state(TF_OpKernelConstruction*) { return nullptr; }
void no_delete(void*) {}
void unknown_shape(TF_ShapeInferenceContext* ctx, TF_Status* status) { TF_ShapeInferenceContextSetUnknownShape(ctx, status); }

void fail(TF_OpKernelContext* ctx, TF_Status* status, const char* message) {
  TF_SetStatus(status, TF_INVALID_ARGUMENT, message);
  TF_OpKernelContext_Failure(ctx, status);
}

// SrpoGeluWithDerivative(x: float) -> (y: float, dydx: float), any shape.
void gelu_compute(void*, TF_OpKernelContext* ctx) {
  TF_Status* status = TF_NewStatus();
  TF_Tensor* x = nullptr;
  TF_Tensor* y = nullptr;
  TF_Tensor* d = nullptr;
  TF_GetInput(ctx, 0, &x, status);
  if (TF_GetCode(status) != TF_OK) {
    TF_OpKernelContext_Failure(ctx, status);
  } else if (TF_TensorType(x) != TF_FLOAT) {
    fail(ctx, status, "SrpoGeluWithDerivative: x must be float32");
  } else {
    const int rank = TF_NumDims(x);
    int64_t dims[16];
    if (rank > 16) {
      fail(ctx, status, "SrpoGeluWithDerivative: x has more than 16 dimensions");
    } else {
      for (int i = 0; i < rank; i++) dims[i] = TF_Dim(x, i);
      const int64_t n = TF_TensorElementCount(x);
      y = TF_AllocateOutput(ctx, 0, TF_FLOAT, dims, rank, n * sizeof(float), status);
      if (TF_GetCode(status) == TF_OK) d = TF_AllocateOutput(ctx, 1, TF_FLOAT, dims, rank, n * sizeof(float), status);
      if (TF_GetCode(status) != TF_OK) TF_OpKernelContext_Failure(ctx, status);
      else if (n > 0) gelu_with_derivative(static_cast<const float*>(TF_TensorData(x)), static_cast<float*>(TF_TensorData(y)), static_cast<float*>(TF_TensorData(d)), n);
    }
  }
  if (x) TF_DeleteTensor(x);
  if (y) TF_DeleteTensor(y);
  if (d) TF_DeleteTensor(d);
  TF_DeleteStatus(status);
}

struct OpSpec {
  const char* name;
  const char* inputs[4];
  const char* outputs[4];
  void (*compute)(void*, TF_OpKernelContext*);
};

const OpSpec kOps[] = {
    {"SrpoGeluWithDerivative", {"x: float"}, {"y: float", "dydx: float"}, gelu_compute},
};

// Registers every op and kernel; returns the first error, or nullptr.
const char* register_all(TF_Status* status) {
  static char message[512];
  for (const OpSpec& op : kOps) {
    TF_OpDefinitionBuilder* b = TF_NewOpDefinitionBuilder(op.name);
    for (const char* in : op.inputs) if (in) TF_OpDefinitionBuilderAddInput(b, in);
    for (const char* out : op.outputs) if (out) TF_OpDefinitionBuilderAddOutput(b, out);
    TF_OpDefinitionBuilderSetShapeInferenceFunction(b, &unknown_shape);
    TF_RegisterOpDefinition(b, status);  // takes ownership of b
    if (TF_GetCode(status) == TF_OK) {
      TF_KernelBuilder* k = TF_NewKernelBuilder(op.name, "CPU", &no_state, op.compute, &no_delete);
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
  static const char* error = nullptr;
  static bool registered = false;
  if (!registered) {
    TF_Status* status = TF_NewStatus();
    error = register_all(status);
    TF_DeleteStatus(status);
    registered = true;
  }
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
