// The few functions of TensorFlow's C kernel and op-definition API (tensorflow/c/kernels.h,
// tensorflow/c/ops.h) this addon calls. libtensorflow's distribution ships those headers
// without their dependencies, so they are declared here; the C ABI is stable.
#pragma once
#include <stdint.h>
#include <stddef.h>
#include "tensorflow/c/tf_datatype.h"
#include "tensorflow/c/tf_status.h"
#include "tensorflow/c/tf_tensor.h"
extern "C" {
typedef struct TF_OpKernelConstruction TF_OpKernelConstruction;
typedef struct TF_OpKernelContext TF_OpKernelContext;
typedef struct TF_KernelBuilder TF_KernelBuilder;
typedef struct TF_OpDefinitionBuilder TF_OpDefinitionBuilder;
typedef struct TF_ShapeInferenceContext TF_ShapeInferenceContext;
TF_KernelBuilder* TF_NewKernelBuilder(const char* op_name, const char* device_name,
    void* (*create_func)(TF_OpKernelConstruction*), void (*compute_func)(void*, TF_OpKernelContext*), void (*delete_func)(void*));
void TF_RegisterKernelBuilder(const char* kernel_name, TF_KernelBuilder* builder, TF_Status* status);
int TF_NumInputs(TF_OpKernelContext* ctx);
void TF_GetInput(TF_OpKernelContext* ctx, int i, TF_Tensor** tensor, TF_Status* status);
void TF_OpKernelContext_Failure(TF_OpKernelContext* ctx, TF_Status* status);
TF_Tensor* TF_AllocateOutput(TF_OpKernelContext* context, int index, TF_DataType dtype, const int64_t* dims, int num_dims, size_t len, TF_Status* status);
void TF_OpKernelConstruction_GetAttrFloat(TF_OpKernelConstruction* ctx, const char* attr_name, float* val, TF_Status* status);
void TF_OpKernelConstruction_GetAttrInt32(TF_OpKernelConstruction* ctx, const char* attr_name, int32_t* val, TF_Status* status);
void TF_OpKernelConstruction_GetAttrBool(TF_OpKernelConstruction* ctx, const char* attr_name, unsigned char* val, TF_Status* status);
TF_OpDefinitionBuilder* TF_NewOpDefinitionBuilder(const char* op_name);
void TF_RegisterOpDefinition(TF_OpDefinitionBuilder* builder, TF_Status* status);
void TF_OpDefinitionBuilderAddAttr(TF_OpDefinitionBuilder* builder, const char* attr_spec);
void TF_OpDefinitionBuilderAddInput(TF_OpDefinitionBuilder* builder, const char* input_spec);
void TF_OpDefinitionBuilderAddOutput(TF_OpDefinitionBuilder* builder, const char* output_spec);
void TF_OpDefinitionBuilderSetShapeInferenceFunction(TF_OpDefinitionBuilder* builder, void (*shape_inference_func)(TF_ShapeInferenceContext* ctx, TF_Status* status));
void TF_ShapeInferenceContextSetUnknownShape(TF_ShapeInferenceContext* ctx, TF_Status* status);
int64_t TF_TensorElementCount(const TF_Tensor* tensor);
void TF_OpKernelConstruction_Failure(TF_OpKernelConstruction* ctx, TF_Status* status);
}
