// Experiment of #21, not used by the learner: a TensorFlow CPU kernel registered from a Node
// addon through TensorFlow's C kernel API, so that tfjs-node's backend runs it like any op
// (`executeSingleOutput('SrpoMatMul', ...)`). Its 2-D float product calls an external BLAS
// (OpenBLAS, dlopen'd from SRPO_BLAS_LIB). Results and why it is not used: docs/benchmarks.md.
//
// The op: SrpoMatMul(a: float, b: float) -> product: float, attrs transpose_a, transpose_b
// (TensorFlow's MatMul without T). Rank-2 inputs only; anything else fails the op, not the process.
#include <node_api.h>
#include <dlfcn.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include "tf-kernel-api.h"  // libs/policy/native: the project's declarations of the C kernel API
#include "tensorflow/c/tf_tensor.h"
#include "tensorflow/c/tf_status.h"

typedef void (*sgemm_t)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*, int);
typedef void (*setthreads_t)(int);
static sgemm_t sgemm = nullptr;

struct MatMulAttrs { bool ta; bool tb; };

static void* MatMulCreate(TF_OpKernelConstruction* ctx) {
  auto* a = new MatMulAttrs{false, false};
  TF_Status* s = TF_NewStatus();
  unsigned char v = 0;
  TF_OpKernelConstruction_GetAttrBool(ctx, "transpose_a", &v, s); a->ta = v;
  TF_OpKernelConstruction_GetAttrBool(ctx, "transpose_b", &v, s); a->tb = v;
  TF_DeleteStatus(s);
  return a;
}
static void MatMulDelete(void* k) { delete static_cast<MatMulAttrs*>(k); }
static void MatMulCompute(void* k, TF_OpKernelContext* ctx) {
  auto* at = static_cast<MatMulAttrs*>(k);
  TF_Status* s = TF_NewStatus();
  TF_Tensor *A = nullptr, *B = nullptr;
  TF_GetInput(ctx, 0, &A, s);
  TF_GetInput(ctx, 1, &B, s);
  if (TF_GetCode(s) != TF_OK || TF_NumDims(A) != 2 || TF_NumDims(B) != 2 || TF_TensorType(A) != TF_FLOAT || TF_TensorType(B) != TF_FLOAT) {
    TF_SetStatus(s, TF_INVALID_ARGUMENT, "SrpoMatMul: a and b must be rank-2 float32 tensors");
    TF_OpKernelContext_Failure(ctx, s);
    if (A) TF_DeleteTensor(A);
    if (B) TF_DeleteTensor(B);
    TF_DeleteStatus(s);
    return;
  }
  int64_t ar = TF_Dim(A, 0), ac = TF_Dim(A, 1), br = TF_Dim(B, 0), bc = TF_Dim(B, 1);
  int64_t M = at->ta ? ac : ar, K = at->ta ? ar : ac, N = at->tb ? br : bc;
  int64_t K2 = at->tb ? bc : br;
  if (K != K2) { TF_SetStatus(s, TF_INVALID_ARGUMENT, "SrpoMatMul: inner dimensions differ"); TF_OpKernelContext_Failure(ctx, s); }
  else {
    int64_t dims[2] = {M, N};
    TF_Tensor* C = TF_AllocateOutput(ctx, 0, TF_FLOAT, dims, 2, M * N * sizeof(float), s);
    if (TF_GetCode(s) != TF_OK) { TF_OpKernelContext_Failure(ctx, s); }
    else if (M > 0 && N > 0) sgemm(101, at->ta ? 112 : 111, at->tb ? 112 : 111, (int)M, (int)N, (int)K, 1.0f,
          (const float*)TF_TensorData(A), (int)ac, (const float*)TF_TensorData(B), (int)bc, 0.0f, (float*)TF_TensorData(C), (int)N);
    if (C) TF_DeleteTensor(C);
  }
  TF_DeleteTensor(A); TF_DeleteTensor(B);
  TF_DeleteStatus(s);
}
static void UnknownShape(TF_ShapeInferenceContext* ctx, TF_Status* s) { TF_ShapeInferenceContextSetUnknownShape(ctx, s); }

static napi_value Init(napi_env env, napi_value exports) {
  const char* lib = getenv("SRPO_BLAS_LIB");
  void* h = lib ? dlopen(lib, RTLD_NOW | RTLD_LOCAL) : nullptr;
  if (h) sgemm = (sgemm_t)dlsym(h, "scipy_cblas_sgemm");
  if (!sgemm) {
    // Registering an op whose kernel cannot compute would fail later, inside a step: refuse now.
    napi_throw_error(env, "SRPO_BLAS_LIB", lib ? "SRPO_BLAS_LIB: cannot load scipy_cblas_sgemm from this library" : "SRPO_BLAS_LIB is not set (path of libscipy_openblas.so)");
    return nullptr;
  }
  auto st = (setthreads_t)dlsym(h, "scipy_openblas_set_num_threads");
  if (st) st(atoi(getenv("SRPO_BLAS_THREADS") ? getenv("SRPO_BLAS_THREADS") : "2"));
  TF_Status* s = TF_NewStatus();
  TF_OpDefinitionBuilder* b = TF_NewOpDefinitionBuilder("SrpoMatMul");
  TF_OpDefinitionBuilderAddInput(b, "a: float");
  TF_OpDefinitionBuilderAddInput(b, "b: float");
  TF_OpDefinitionBuilderAddOutput(b, "product: float");
  TF_OpDefinitionBuilderAddAttr(b, "transpose_a: bool = false");
  TF_OpDefinitionBuilderAddAttr(b, "transpose_b: bool = false");
  TF_OpDefinitionBuilderSetShapeInferenceFunction(b, &UnknownShape);
  TF_RegisterOpDefinition(b, s);
  if (TF_GetCode(s) != TF_OK) fprintf(stderr, "op: %s\n", TF_Message(s));
  TF_KernelBuilder* kb = TF_NewKernelBuilder("SrpoMatMul", "CPU", &MatMulCreate, &MatMulCompute, &MatMulDelete);
  TF_RegisterKernelBuilder("SrpoMatMul", kb, s);
  if (TF_GetCode(s) != TF_OK) fprintf(stderr, "kernel: %s\n", TF_Message(s));
  TF_DeleteStatus(s);
  return exports;
}
NAPI_MODULE(NODE_GYP_MODULE_NAME, Init)
