// The SRPO objective over a padded batch of sets, forward and backward, one op each
// (SrpoSetObjective, SrpoSetObjectiveGrad; op bodies in objective-ops.h). The reference is
// libs/srpo's composite (objective.ts' srpoObjective and srpoLengthNormObjective, surrogate.ts'
// boundedClippedSurrogate and its written-out gradient, set-ratio.ts): the same formula, step
// by step, in float32.
//
// Why: as tfjs ops the objective, its flags and the autodiff of its composite parts are about 90
// ops on tensors of a few thousand floats, each a fixed cost in tfjs and TensorFlow; the
// reference step spent 3.2 ms of 39 there (a one-process A/B with the objective left out, Intel
// Xeon, 2026-12-03, #21). Here each direction is one pass over the [M, T] log-probs.
//
// Shapes: M members of S sets, T positions; member j belongs to set member_set[j] in [0, S).
// Forward, with d = new − old and the mask m (libs/srpo's names):
//   token log-ratio  t[j,τ] = m > 0 ? clamp(d, −1e6, 1e6) : 0
//   member log-ratio ℓ_j = Σ_τ t[j,τ]   (length-normalised: ℓ_j / Σ_τ m[j,τ])
//   set size         K_s = #{j : member_set[j] = s}
//   set log-ratio    log ρ_s = f(K_s) · Σ_{j ∈ s} ℓ_j, f = 1/√K, 1 or 1/K (the event reduction)
//   bounded          b_s = min(log ρ_s, A_s > 0 ? upper_pos : upper_neg), r_s = exp(b_s)
//   surrogate        v_s = min(r_s A_s, clamp(r_s, lo, hi) A_s), and with the dual clip c,
//                    max(v_s, c A_s) where A_s < 0
//   loss             −(1/S) Σ_s v_s
// and the flags of objective.ts' unitFlags from the reported ratio exp(clamp(log ρ, ±44.36)).
// Backward, from dL (the loss's gradient):
//   g_s   = ((−dL/S) · A_s · r_s) · pass_s, pass_s as surrogate.ts' boundedClippedSurrogateGrad
//   ∂L/∂new[j,τ] = m > 0 and −1e6 ≤ d ≤ 1e6 ? g_{set(j)} · f(K) (/ Σ_τ m[j,τ] when normalised) : 0
// Sums run in order (members in index order, tokens in position order) on one thread: the bits
// do not depend on the machine's cores. They may differ from the composite's by float32 rounding
// (TensorFlow's reductions sum in another order, and its exp is not the same code).
// Edge cases: a NaN log-prob gives a NaN loss, as in the composite; a set with no members has
// log ρ = NaN (0 · ∞) under the 1/√K and 1/K reductions. Where the loss is NaN (a counted NaN
// log-prob, or an empty mask under length normalisation) this gradient is 0 for the tokens whose
// d is NaN, where the composite's is NaN: the update is refused on the NaN loss either way
// (fused-objective.spec.ts pins the difference).

// The scalars of the objective (SrpoSetObjective's `params`, float32), set by fused-objective.ts.
struct SetObjectiveParams {
  float lo, hi;                // the clip range 1 − ε_low, 1 + ε_high
  float upper_pos, upper_neg;  // the log-ratio bounds for A > 0 and A ≤ 0 (surrogate.ts' logRatioUpperBound)
  float dual_c;                // the dual clip ratio c (used when has_dual)
  bool has_dual;
  int reduction;  // 0: 1/√K, 1: 1 (sum), 2: 1/K (mean)
  bool length_norm;
};
constexpr int kSetObjectiveParams = 8;
constexpr float kTokenLogRatioLimit = 1e6f;         // surrogate.ts' TOKEN_LOG_RATIO_LIMIT
constexpr float kMaxLogRatio = 44.361419526034175f;  // surrogate.ts' MAX_LOG_RATIO, ln(FLT_MAX)/2

struct SetObjectiveArgs {
  const float *logp_new, *logp_old, *mask, *advantage;
  const int32_t* member_set;
  int64_t m, t, s;
  SetObjectiveParams p;
};

// The per-set quantities both directions need.
struct SetTerms {
  std::vector<float> size, factor, log_rho, bounded, ratio, unclipped, clipped, ppo;
};

// min(x, b) and the clamp of x to [lo, hi] that keep a NaN x (b, lo, hi are numbers): under
// -ffast-math, std::min and std::max may drop a NaN, and the composite's NaN must reach the loss.
inline float min_keep_nan(float x, float b) { return is_nan_bits(x) ? x : std::min(x, b); }
inline float max_keep_nan(float x, float b) { return is_nan_bits(x) ? x : std::max(x, b); }
inline float clamp_keep_nan(float x, float lo, float hi) { return is_nan_bits(x) ? x : std::max(std::min(x, hi), lo); }

// Event reduction f(K) of set-ratio.ts' eventReduction.
inline float set_factor(float k, int reduction) {
  if (reduction == 1) return 1.f;
  if (reduction == 2) return 1.f / k;
  return 1.f / std::sqrt(k);
}

// Token log-ratios (to `tokens`, [M, T]) and member log-ratios (`members`, [M]), the per-member
// value summed into its set (`summand`: ℓ_j, or ℓ_j / Σ m), and the per-set terms.
inline void set_objective_terms(const SetObjectiveArgs& a, float* __restrict tokens, float* __restrict members, std::vector<float>& summand, SetTerms& st) {
  const int64_t m = a.m, t = a.t, s = a.s;
  summand.assign(static_cast<size_t>(m), 0.f);
  for (int64_t j = 0; j < m; j++) {
    float sum = 0.f, count = 0.f;
    for (int64_t x = j * t; x < (j + 1) * t; x++) {
      const float d = a.logp_new[x] - a.logp_old[x];
      const float tok = a.mask[x] > 0.f ? clamp_keep_nan(d, -kTokenLogRatioLimit, kTokenLogRatioLimit) : 0.f;
      tokens[x] = tok;
      sum += tok;
      count += a.mask[x];
    }
    members[j] = sum;
    summand[static_cast<size_t>(j)] = a.p.length_norm ? sum / count : sum;
  }
  for (auto* v : {&st.size, &st.factor, &st.log_rho, &st.bounded, &st.ratio, &st.unclipped, &st.clipped, &st.ppo}) v->assign(static_cast<size_t>(s), 0.f);
  std::vector<float> summed(static_cast<size_t>(s), 0.f);
  for (int64_t j = 0; j < m; j++) {
    const size_t set = static_cast<size_t>(a.member_set[j]);
    st.size[set] += 1.f;
    summed[set] += summand[static_cast<size_t>(j)];
  }
  for (size_t i = 0; i < static_cast<size_t>(s); i++) {
    const float adv = a.advantage[i];
    st.factor[i] = set_factor(st.size[i], a.p.reduction);
    st.log_rho[i] = st.factor[i] * summed[i];
    st.bounded[i] = min_keep_nan(st.log_rho[i], adv > 0.f ? a.p.upper_pos : a.p.upper_neg);
    st.ratio[i] = std::exp(st.bounded[i]);
    st.unclipped[i] = st.ratio[i] * adv;
    st.clipped[i] = clamp_keep_nan(st.ratio[i], a.p.lo, a.p.hi) * adv;
    st.ppo[i] = is_nan_bits(st.clipped[i]) ? st.clipped[i] : min_keep_nan(st.unclipped[i], st.clipped[i]);
  }
}

// The surrogate v_s of one set from its terms (the dual clip where A < 0).
inline float set_surrogate(const SetTerms& st, size_t i, float adv, const SetObjectiveParams& p) {
  return p.has_dual && adv < 0.f ? max_keep_nan(st.ppo[i], adv * p.dual_c) : st.ppo[i];
}

// ∂L/∂log ρ_s (through the bound, the clip and the dual clip) for dL, as boundedClippedSurrogateGrad.
inline float set_log_rho_grad(const SetTerms& st, size_t i, float adv, float dvalue, const SetObjectiveParams& p) {
  bool pass = st.unclipped[i] <= st.clipped[i] || (st.ratio[i] >= p.lo && st.ratio[i] <= p.hi);
  if (p.has_dual) pass = pass && (adv >= 0.f || st.ppo[i] >= adv * p.dual_c);
  pass = pass && st.log_rho[i] <= st.bounded[i];
  // A product with the 0/1 pass, not a select: a NaN log-ratio gives a NaN gradient.
  return dvalue * adv * st.ratio[i] * (pass ? 1.f : 0.f);
}

// Forward: the loss and, per set, log ρ, K, the reported ratio and the four flags (1 or 0), per
// member ℓ_j, per token t (objective.ts' ObjectiveOutput fields, in that order).
struct SetObjectiveOut {
  float *loss, *log_rho, *size, *ratio, *low, *high, *dual, *out_of_range, *members, *tokens;
};
inline void set_objective_forward(const SetObjectiveArgs& a, const SetObjectiveOut& o) {
  std::vector<float> summand;
  SetTerms st;
  set_objective_terms(a, o.tokens, o.members, summand, st);
  float total = 0.f;
  for (size_t i = 0; i < static_cast<size_t>(a.s); i++) {
    const float adv = a.advantage[i], lr = st.log_rho[i];
    total += set_surrogate(st, i, adv, a.p);
    o.log_rho[i] = lr;
    o.size[i] = st.size[i];
    const float reported = std::exp(clamp_keep_nan(lr, -kMaxLogRatio, kMaxLogRatio));
    o.ratio[i] = reported;
    o.low[i] = reported < a.p.lo && adv < 0.f ? 1.f : 0.f;
    o.high[i] = reported > a.p.hi && adv > 0.f ? 1.f : 0.f;
    o.dual[i] = a.p.has_dual && reported > a.p.dual_c && adv < 0.f ? 1.f : 0.f;
    o.out_of_range[i] = !is_nan_bits(lr) && std::fabs(lr) <= kMaxLogRatio ? 0.f : 1.f;
  }
  o.loss[0] = -(total / static_cast<float>(a.s));
}

// Backward: ∂L/∂logp_new [M, T] for the loss gradient dloss.
inline void set_objective_backward(const SetObjectiveArgs& a, float dloss, float* __restrict grad) {
  std::vector<float> tokens(static_cast<size_t>(a.m * a.t)), members(static_cast<size_t>(a.m)), summand;
  SetTerms st;
  set_objective_terms(a, tokens.data(), members.data(), summand, st);
  const float dvalue = -dloss / static_cast<float>(a.s);  // through −mean
  std::vector<float> per_set(static_cast<size_t>(a.s));
  for (size_t i = 0; i < static_cast<size_t>(a.s); i++) per_set[i] = set_log_rho_grad(st, i, a.advantage[i], dvalue, a.p) * st.factor[i];
  for (int64_t j = 0; j < a.m; j++) {
    float g = per_set[static_cast<size_t>(a.member_set[j])];
    if (a.p.length_norm) {
      float count = 0.f;
      for (int64_t x = j * a.t; x < (j + 1) * a.t; x++) count += a.mask[x];
      g = g / count;
    }
    for (int64_t x = j * a.t; x < (j + 1) * a.t; x++) {
      const float d = a.logp_new[x] - a.logp_old[x];
      // The clamp passes the gradient where −1e6 ≤ d ≤ 1e6 (a NaN d passes none), the mask where m > 0.
      const bool pass = a.mask[x] > 0.f && !is_nan_bits(d) && d >= -kTokenLogRatioLimit && d <= kTokenLogRatioLimit;
      grad[x] = pass ? g : 0.f;
    }
  }
}
