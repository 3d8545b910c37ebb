// TensorFlow CPU kernels for the learner's hot spots, each one pass over memory where the
// composite tfjs form takes several (libs/kernels/src/srpo-kernels.ts says when they are used).
//
// Why a Node addon: tfjs-node can only run ops that its libtensorflow knows. TensorFlow's C
// kernel API (TF_NewKernelBuilder, TF_RegisterOpDefinition in libtensorflow_framework.so.2) lets
// any code in the process register new ops and CPU kernels; when Node loads this addon, Init
// registers them, and tfjs-node's backend runs them by name (executeMultipleOutputs) like
// TensorFlow's own. The C API is ABI-stable, so the addon builds against the headers tfjs-node
// ships, whatever libtensorflow version was installed.
//
// Threads: a kernel splits its rows into one contiguous chunk per core, the same chunk to the
// same thread on every call (as OpenMP's static schedule), so that between the ops of a step a
// row's data stays in one core's cache; TensorFlow's own pool hands blocks to whichever thread is
// free, which measured 3x slower on 1 MB arrays (docs/benchmarks.md, #21). Each chunk is cut into
// pieces, and a core that has finished its own chunk takes the pieces that a late core has not
// started (kernel-support.h), so a worker that wakes late, or loses its vCPU, costs a piece at
// most. The workers spin after a call, then sleep: 1 ms where SrpoMatMul runs the products on
// this pool, 100 µs where TensorFlow's MatMul does, whose threads a longer spin kept off the cores.
// Kernels stay on the calling thread below 32768 elements (kernel-support.h).
//
// Numerics: float32 in and out, float32 arithmetic, an inlined exp within 2 ulp (below), and
// -ffast-math so that GCC vectorises the loops (reassociated sums, min/max selects), with
// -mno-recip so that divisions stay divisions (fast-math would otherwise use the RCPPS estimate
// and a Newton step, about 2 ulp) and row factors 1/√v rounded from double (rsqrt_rounded). Every
// kernel states its edge cases; its spec checks it against a float64 evaluation of the formula.
#include <node_api.h>
#include <sched.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <condition_variable>
#include <functional>
#include <immintrin.h>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>
#include "tf-kernel-api.h"

#define SRPO_KERNELS_VERSION 12

namespace {

// The pieces, in dependency order. Each family has its arithmetic in <family>-kernels.h and
// its TensorFlow op bodies (argument checks, outputs, the pool) in <family>-ops.h; this file
// holds the op table, the registration and the module's entry point.
#include "kernel-support.h"
#include "transformer-kernels.h"
#include "llama-kernels.h"
#include "logprob-kernels.h"
#include "attention-kernels.h"
#include "norm-fold-kernels.h"
#include "elementwise-kernels.h"
#include "optimizer-kernels.h"
#include "gemm-kernels.h"
#include "objective-kernels.h"
#include "transformer-ops.h"
#include "llama-ops.h"
#include "logprob-ops.h"
#include "elementwise-ops.h"
#include "optimizer-ops.h"
#include "gemm-ops.h"
#include "decode-ops.h"
#include "objective-ops.h"

struct OpSpec {
  const char* name;
  const char* inputs[8];
  const char* outputs[10];
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
    {"SrpoDecodeAttention", {"q: float", "k: float", "v: float", "k_recent: float", "v_recent: float", "start: int32"}, {"o: float"}, {}, no_state,
     decode_attention_compute, no_delete},
    {"SrpoKvAppend", {"k: float", "v: float", "k_new: float", "v_new: float"}, {"k_out: float", "v_out: float"}, {}, no_state, kv_append_compute, no_delete},
    {"SrpoDecodeQkv", {"x: float", "wq: float", "wk: float", "wv: float", "cos: float", "sin: float", "k: float", "v: float"}, {"q: float", "k_out: float", "v_out: float"},
     {"q_scale: float"}, decode_qkv_create, decode_qkv_compute, decode_qkv_delete},
    {"SrpoGateUp", {"x: float", "wg: float", "wu: float"}, {"y: float"}, {}, no_state, gate_up_compute, no_delete},
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
    {"SrpoGatherRows", {"x: float", "rows: int32"}, {"y: float"}, {}, no_state, gather_rows_compute, no_delete},
    {"SrpoTranspose", {"x: float"}, {"y: float"}, {}, no_state, transpose_compute, no_delete},
    {"SrpoScatterRows", {"g: float", "rows: int32"}, {"y: float"}, {"n: int"}, scatter_rows_create, scatter_rows_compute, scatter_rows_delete},
    {"SrpoMatMul", {"a: float", "b: float"}, {"product: float"}, {"transpose_a: bool = false", "transpose_b: bool = false"}, matmul_create,
     matmul_compute<MatMulEpilogue::kNone>, matmul_delete},
    {"SrpoMatMulBias", {"a: float", "b: float", "bias: float"}, {"product: float"}, {"transpose_a: bool = false", "transpose_b: bool = false"}, matmul_create,
     matmul_compute<MatMulEpilogue::kBias>, matmul_delete},
    {"SrpoMatMulBiasResidual", {"a: float", "b: float", "bias: float", "residual: float"}, {"product: float"}, {"transpose_a: bool = false", "transpose_b: bool = false"},
     matmul_create, matmul_compute<MatMulEpilogue::kBiasResidual>, matmul_delete},
    {"SrpoMatMulColumnSum", {"a: float", "b: float"}, {"product: float", "column_sums: float"}, {"transpose_a: bool = false", "transpose_b: bool = false"},
     matmul_create, matmul_compute<MatMulEpilogue::kColumnSums>, matmul_delete},
    {"SrpoSetObjective", {"logp_new: float", "logp_old: float", "mask: float", "advantage: float", "member_set: int32", "params: float"},
     {"loss: float", "log_rho: float", "set_size: float", "ratio: float", "clipped_low: float", "clipped_high: float", "clipped_dual: float", "out_of_range: float",
      "member_log_ratio: float", "token_log_ratio: float"},
     {}, no_state, set_objective_compute, no_delete},
    {"SrpoSetObjectiveGrad", {"dloss: float", "logp_new: float", "logp_old: float", "mask: float", "advantage: float", "member_set: int32", "params: float"},
     {"dlogp_new: float"}, {}, no_state, set_objective_grad_compute, no_delete},
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

// Whether ONEDNN_MAX_CPU_ISA (or its older name DNNL_MAX_CPU_ISA), which oneDNN itself reads,
// caps the process below AVX-512: the knob that emulates an AVX2-only machine (bench --isa avx2).
// SrpoMatMul's micro-kernel honours it too, so an emulated run takes the AVX2 code throughout.
bool isa_capped_below_avx512() {
  const char* cap = std::getenv("ONEDNN_MAX_CPU_ISA");
  if (!cap) cap = std::getenv("DNNL_MAX_CPU_ISA");
  if (!cap) return false;
  std::string isa(cap);
  for (char& ch : isa) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return isa == "SSE41" || isa == "AVX" || isa == "AVX2" || isa.rfind("AVX2_", 0) == 0;
}

// Whether TensorFlow's MatMul (oneDNN's sgemm) runs AVX-512 code here: the CPU has AVX-512 F,
// BW, VL and DQ (oneDNN's avx512_core) and the ISA is not capped below it. The addon reports it,
// with the CPU's vendor, and libs/kernels/src/srpo-kernels.ts decides the learner's products.
bool onednn_avx512() {
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") || !__builtin_cpu_supports("avx512vl") || !__builtin_cpu_supports("avx512dq"))
    return false;
  return !isa_capped_below_avx512();
}

// setWorkerSpin(microseconds): how long the pool's workers spin after a call (kernel-support.h).
napi_value set_worker_spin(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  napi_get_cb_info(env, info, &argc, argv, nullptr, nullptr);
  int64_t us = 0;
  if (argc < 1 || napi_get_value_int64(env, argv[0], &us) != napi_ok || us < 0) {
    napi_throw_range_error(env, "SRPO_KERNELS_ARG", "setWorkerSpin takes a number of microseconds >= 0");
    return nullptr;
  }
  pool().set_worker_spin(us);
  return nullptr;
}

// workerSpin(): the current setting, in microseconds.
napi_value worker_spin(napi_env env, napi_callback_info) {
  napi_value v;
  napi_create_int64(env, pool().worker_spin(), &v);
  return v;
}

// setGemmPlanThreads(threads) -> the previous setting: SrpoMatMul plans its products (the split,
// the pieces, K segments whole or in pieces) as if the pool had `threads` threads, 0 meaning the
// pool's own count (gemm-ops.h). The bits never depend on it; tests use it to run the schedules
// of larger machines on a small one. Not while kernels run.
napi_value set_gemm_plan_threads(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  napi_get_cb_info(env, info, &argc, argv, nullptr, nullptr);
  int64_t threads = 0;
  if (argc < 1 || napi_get_value_int64(env, argv[0], &threads) != napi_ok || threads < 0 || threads > 256) {
    napi_throw_range_error(env, "SRPO_KERNELS_ARG", "setGemmPlanThreads takes a thread count from 0 (the pool's own) to 256");
    return nullptr;
  }
  napi_value previous;
  napi_create_int64(env, gemm_plan_threads, &previous);
  gemm_plan_threads = threads;
  return previous;
}

// A string argument (at most 15 characters) into out; false when it is not a string.
bool string_arg(napi_env env, napi_value v, std::string* out) {
  char buf[16];
  size_t len = 0;
  if (napi_get_value_string_utf8(env, v, buf, sizeof buf, &len) != napi_ok) return false;
  out->assign(buf, len);
  return true;
}

// setIsa(part, isa) -> the previous isa: which build of SrpoMatMul's micro-kernel (part "gemm") or
// of the elementwise loops built twice (part "elementwise", SRPO_BOTH_ISAS) this process runs,
// "avx2" or "avx512". For tests and benches, which compare the two builds in one process; not
// while kernels run. "avx512" where the CPU lacks AVX-512F is refused.
napi_value set_isa(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  napi_get_cb_info(env, info, &argc, argv, nullptr, nullptr);
  std::string part, isa;
  if (argc < 2 || !string_arg(env, argv[0], &part) || !string_arg(env, argv[1], &isa) || (part != "gemm" && part != "elementwise") ||
      (isa != "avx2" && isa != "avx512")) {
    napi_throw_type_error(env, "SRPO_KERNELS_ARG", "setIsa takes a part ('gemm' or 'elementwise') and an isa ('avx2' or 'avx512')");
    return nullptr;
  }
  if (isa == "avx512" && !__builtin_cpu_supports("avx512f")) {
    napi_throw_range_error(env, "SRPO_KERNELS_ARG", "setIsa: this CPU has no AVX-512F");
    return nullptr;
  }
  bool& flag = part == "gemm" ? gemm_avx512 : elementwise_avx512;
  napi_value previous;
  napi_create_string_utf8(env, flag ? "avx512" : "avx2", NAPI_AUTO_LENGTH, &previous);
  flag = isa == "avx512";
  return previous;
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
    gemm_avx512 = elementwise_avx512 = __builtin_cpu_supports("avx512f") && !isa_capped_below_avx512();
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
  napi_value avx512;
  napi_get_boolean(env, onednn_avx512(), &avx512);
  napi_set_named_property(env, exports, "onednnAvx512", avx512);
  napi_value gemm_isa, vendor;
  napi_create_string_utf8(env, gemm_avx512 ? "avx512" : "avx2", NAPI_AUTO_LENGTH, &gemm_isa);
  napi_set_named_property(env, exports, "gemmIsa", gemm_isa);
  napi_value elementwise_isa;
  napi_create_string_utf8(env, elementwise_avx512 ? "avx512" : "avx2", NAPI_AUTO_LENGTH, &elementwise_isa);
  napi_set_named_property(env, exports, "elementwiseIsa", elementwise_isa);
  napi_value spin;
  napi_create_function(env, "setWorkerSpin", NAPI_AUTO_LENGTH, set_worker_spin, nullptr, &spin);
  napi_set_named_property(env, exports, "setWorkerSpin", spin);
  napi_create_function(env, "workerSpin", NAPI_AUTO_LENGTH, worker_spin, nullptr, &spin);
  napi_set_named_property(env, exports, "workerSpin", spin);
  napi_create_function(env, "setIsa", NAPI_AUTO_LENGTH, set_isa, nullptr, &spin);
  napi_set_named_property(env, exports, "setIsa", spin);
  napi_create_function(env, "setGemmPlanThreads", NAPI_AUTO_LENGTH, set_gemm_plan_threads, nullptr, &spin);
  napi_set_named_property(env, exports, "setGemmPlanThreads", spin);
  napi_create_string_utf8(env, __builtin_cpu_is("intel") ? "intel" : __builtin_cpu_is("amd") ? "amd" : "other", NAPI_AUTO_LENGTH, &vendor);
  napi_set_named_property(env, exports, "cpuVendor", vendor);
  return exports;
}

}  // namespace

NAPI_MODULE(srpo_kernels, init)
