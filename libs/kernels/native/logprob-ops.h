// TensorFlow op bodies of the target log-prob kernels (SrpoTargetLogProbs and its backward).
// Included by srpo-kernels.cc after kernel-support.h and the kernels' arithmetic (*-kernels.h).
#pragma once

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
