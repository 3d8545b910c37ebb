// TensorFlow op bodies of the Adam update and the column sums (SrpoAdam, SrpoColumnSum).
// Included by srpo-kernels.cc after kernel-support.h and the kernels' arithmetic (*-kernels.h).
#pragma once

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
