// TensorFlow op bodies of the SRPO objective (objective-kernels.h). Included by srpo-kernels.cc
// after kernel-support.h and objective-kernels.h.
#pragma once

// The batch inputs both ops read, from input `first` on: logp_new, logp_old, mask [M, T],
// advantage [S], member_set int32 [M] with values in [0, S), params [kSetObjectiveParams]
// (SetObjectiveParams' fields in order, the flags and the reduction as 0/1 and 0/1/2). Checks
// each, naming it; returns false after a failure.
bool set_objective_args(Call& c, int first, SetObjectiveArgs& a) {
  const int lnew = first, lold = first + 1, mask = first + 2, adv = first + 3, set = first + 4, params = first + 5;
  if (c.rank(lnew) != 2) return c.fail("logp_new must be [M, T]"), false;
  a.m = c.dim(lnew, 0), a.t = c.dim(lnew, 1);
  const std::string mt = "[" + std::to_string(a.m) + ", " + std::to_string(a.t) + "]";
  if (c.rank(lold) != 2 || c.dim(lold, 0) != a.m || c.dim(lold, 1) != a.t) return c.fail("logp_old must be " + mt + ", as logp_new"), false;
  if (c.rank(mask) != 2 || c.dim(mask, 0) != a.m || c.dim(mask, 1) != a.t) return c.fail("mask must be " + mt + ", as logp_new"), false;
  if (c.rank(adv) != 1 || c.dim(adv, 0) < 1) return c.fail("advantage must be [S] with S >= 1 sets"), false;
  a.s = c.dim(adv, 0);
  if (c.rank(set) != 1 || c.dim(set, 0) != a.m) return c.fail("member_set must be [" + std::to_string(a.m) + "], one set per member"), false;
  if (c.size(params) != kSetObjectiveParams) return c.fail("params must hold " + std::to_string(kSetObjectiveParams) + " values"), false;
  a.logp_new = c.data(lnew), a.logp_old = c.data(lold), a.mask = c.data(mask), a.advantage = c.data(adv), a.member_set = c.ints(set);
  for (int64_t j = 0; j < a.m; j++)
    if (a.member_set[j] < 0 || a.member_set[j] >= a.s)
      return c.fail("member_set[" + std::to_string(j) + "] is " + std::to_string(a.member_set[j]) + ", outside [0, " + std::to_string(a.s) + ")"), false;
  const float* p = c.data(params);
  a.p = SetObjectiveParams{p[0], p[1], p[2], p[3], p[4], p[5] != 0.f, static_cast<int>(p[6]), p[7] != 0.f};
  if (!(p[6] == 0.f || p[6] == 1.f || p[6] == 2.f)) return c.fail("params[6] (the event reduction) must be 0 (sqrt), 1 (sum) or 2 (mean)"), false;
  return true;
}

// SrpoSetObjective(logp_new, logp_old, mask, advantage, member_set, params) -> (loss [], log_rho,
// set_size, ratio, clipped_low, clipped_high, clipped_dual, out_of_range [S], member_log_ratio
// [M], token_log_ratio [M, T]).
void set_objective_compute(void*, TF_OpKernelContext* ctx) {
  Call c(ctx, "SrpoSetObjective", 6, 4, "member_set");
  SetObjectiveArgs a{};
  if (!c.ok() || !set_objective_args(c, 0, a)) return;
  const int64_t s_dims[1] = {a.s}, m_dims[1] = {a.m}, mt_dims[2] = {a.m, a.t};
  SetObjectiveOut o{};
  o.loss = c.out(0, nullptr, 0);
  float** per_set[7] = {&o.log_rho, &o.size, &o.ratio, &o.low, &o.high, &o.dual, &o.out_of_range};
  for (int i = 0; i < 7; i++) *per_set[i] = c.out(1 + i, s_dims, 1);
  o.members = c.out(8, m_dims, 1);
  o.tokens = c.out(9, mt_dims, 2);
  if (!c.ok()) return;
  set_objective_forward(a, o);
}

// SrpoSetObjectiveGrad(dloss [], logp_new, logp_old, mask, advantage, member_set, params) -> dlogp_new [M, T].
void set_objective_grad_compute(void*, TF_OpKernelContext* ctx) {
  Call c(ctx, "SrpoSetObjectiveGrad", 7, 5, "member_set");
  SetObjectiveArgs a{};
  if (!c.ok() || !set_objective_args(c, 1, a)) return;
  if (c.size(0) != 1) return c.fail("dloss must be a scalar");
  float* grad = c.out_like(0, 1);
  if (!c.ok()) return;
  set_objective_backward(a, c.data(0)[0], grad);
}
