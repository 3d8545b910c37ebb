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
// N..2N-1, then m, v, p; the outputs m', v', norm, then the new weights 3..N+2.
void* adam_create(TF_OpKernelConstruction* ctx) {
  TF_Status* status = TF_NewStatus();
  int32_t n = 0;
  TF_OpKernelConstruction_GetAttrInt32(ctx, "N", &n, status);
  if (TF_GetCode(status) != TF_OK) TF_OpKernelConstruction_Failure(ctx, status);
  TF_DeleteStatus(status);
  return new int32_t(n);
}
void adam_delete(void* p) { delete static_cast<int32_t*>(p); }

void adam_compute(void* state, TF_OpKernelContext* ctx) {
  const int n = *static_cast<const int32_t*>(state);
  const int inputs = TF_NumInputs(ctx);
  Call c(ctx, "SrpoAdam", inputs);
  if (c.ok() && (n < 1 || inputs != 2 * n + 3))
    c.fail("expected 2 * N + 3 inputs (N gradients, N weights, m, v, p) for N = " + std::to_string(n) + ", got " + std::to_string(inputs));
  if (!c.ok()) return;
  const auto shape = [&](int i) {
    std::string s = "[";
    for (int d = 0; d < c.rank(i); d++) s += (d ? ", " : "") + std::to_string(c.dim(i, d));
    return s + "]";
  };
  std::vector<int64_t> offset(static_cast<size_t>(n) + 1, 0);
  std::vector<const float*> g(n), w(n);
  std::vector<float*> w_out(n);
  for (int t = 0; t < n; t++) {
    bool same = c.rank(t) == c.rank(n + t);
    for (int d = 0; same && d < c.rank(t); d++) same = c.dim(t, d) == c.dim(n + t, d);
    if (!same) return c.fail("grads[" + std::to_string(t) + "] " + shape(t) + " must have the shape of weights[" + std::to_string(t) + "] " + shape(n + t));
    offset[t + 1] = offset[t] + c.size(n + t);
    g[t] = c.data(t);
    w[t] = c.data(n + t);
  }
  const int64_t total = offset[n];
  const int im = 2 * n, iv = 2 * n + 1, ip = 2 * n + 2;
  if (c.rank(im) != 1 || c.rank(iv) != 1 || c.dim(im, 0) != total || c.dim(iv, 0) != total)
    return c.fail("m and v must be [total], total = " + std::to_string(total) + " (the weights' sizes summed), got m " + shape(im) + " and v " + shape(iv));
  if (c.rank(ip) != 1 || c.dim(ip, 0) != kAdamParams)
    return c.fail("p must be [8]: maxGradNorm, beta1, 1 - beta1, beta2, 1 - beta2, stepSize, epsHat, lr * weightDecay; got " + shape(ip));
  const int64_t flat[1] = {total};
  float* m_out = c.out(0, flat, 1);
  float* v_out = c.out(1, flat, 1);
  float* norm = c.out(2, flat, 0);
  for (int t = 0; t < n; t++) w_out[t] = c.out_like(3 + t, n + t);
  if (!c.ok()) return;
  const AdamLists lists{g.data(), w.data(), w_out.data(), offset.data(), n};
  const float *m = c.data(im), *v = c.data(iv), *p = c.data(ip);
  const int64_t blocks = (total + kNormBlock - 1) / kNormBlock;
  std::vector<double> partial(static_cast<size_t>(blocks));
  const int64_t inline_blocks = kInlineBelow / kNormBlock + 1;
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
  pool().run(total, kLine, kInlineBelow, [&](int64_t lo, int64_t hi) { adam_update_range(lists, m, v, m_out, v_out, lo, hi, s); });
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
  pool().run(cols, kLine, kInlineBelow / (rows + 1) + 1, [&](int64_t lo, int64_t hi) { column_sums(x, y, rows, cols, lo, hi); });
}
