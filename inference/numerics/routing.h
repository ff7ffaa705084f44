// The router of a mixture-of-experts layer (Qwen3-MoE; docs/numerics.md, "Experts"): which experts
// a token takes and with which weights, from its router logits. One function, used by every
// backend on the host, so the choice of experts is the same wherever a token runs.
#pragma once

#include <cstdint>
#include <vector>

#include "inference/numerics/canonical.h"

namespace rote::numerics {

// The end of a route, once experts[0 .. k) hold the chosen experts in rank order and chosen[0 ..
// k) their probabilities: each weight the probability, divided by the canonical sum of the
// chosen ones where `normalize`; then experts and weights sorted by expert index (insertion sort;
// k is small). Shared with the CUDA backend's route kernel.
ROTE_HD inline void FinishRoute(const float* chosen, int32_t k, bool normalize, int32_t* experts, float* weights) {
  const float denom = normalize ? canonical_sum(chosen, k) : 1.0f;
  for (int32_t r = 0; r < k; ++r) weights[r] = normalize ? chosen[r] / denom : chosen[r];
  for (int32_t i = 1; i < k; ++i) {
    const int32_t e = experts[i];
    const float w = weights[i];
    int32_t j = i - 1;
    for (; j >= 0 && experts[j] > e; --j) {
      experts[j + 1] = experts[j];
      weights[j + 1] = weights[j];
    }
    experts[j + 1] = e;
    weights[j + 1] = w;
  }
}

// From `num_experts` router logits: p = softmax(logits) (the largest logit m, e_i =
// canonical_expf(logit_i - m), s = canonical_sum(e), p_i = e_i / s); the `k` largest p_i, a tie
// going to the lower expert index; with `normalize` (norm_topk_prob) each chosen p divided by the
// canonical sum of the chosen ones in the order they were chosen (largest first, as transformers
// sums its top-k values). Writes the chosen experts in increasing index to experts[0 .. k) and
// their weights to weights[0 .. k): the order in which their outputs are summed (transformers adds
// each expert's share in increasing expert index). `scratch` holds 2 * num_experts floats.
inline void RouteToken(const float* logits, int32_t num_experts, int32_t k, bool normalize, float* scratch,
                       int32_t* experts, float* weights) {
  float* p = scratch;
  float* chosen = scratch + num_experts;  // the chosen probabilities, largest first
  float m = logits[0];
  for (int32_t e = 1; e < num_experts; ++e) m = logits[e] > m ? logits[e] : m;
  for (int32_t e = 0; e < num_experts; ++e) p[e] = canonical_expf(logits[e] - m);
  const float s = canonical_sum(p, num_experts);
  for (int32_t e = 0; e < num_experts; ++e) p[e] = p[e] / s;
  // Selection by rank: k passes, each taking the largest not yet taken (lowest index on ties; a
  // NaN probability only where nothing else is left).
  int32_t taken = 0;
  for (int32_t r = 0; r < k; ++r) {
    int32_t best = -1;
    for (int32_t e = 0; e < num_experts; ++e) {
      bool used = false;
      for (int32_t j = 0; j < taken; ++j) used = used || experts[j] == e;
      if (used) continue;
      if (best < 0 || p[e] > p[best] || (p[best] != p[best] && p[e] == p[e])) best = e;
    }
    experts[taken] = best;
    chosen[taken] = p[best];
    ++taken;
  }
  FinishRoute(chosen, k, normalize, experts, weights);
}

// The routes of `tokens` rows of router logits (rows `num_experts` apart): experts and weights
// (tokens x k each, every row in increasing expert index).
struct Routes {
  int32_t k = 0;
  std::vector<int32_t> experts;
  std::vector<float> weights;
};
inline Routes RouteTokens(const float* logits, int64_t tokens, int32_t num_experts, int32_t k, bool normalize) {
  Routes r;
  r.k = k;
  r.experts.resize(static_cast<size_t>(tokens * k));
  r.weights.resize(static_cast<size_t>(tokens * k));
  std::vector<float> scratch(static_cast<size_t>(2 * num_experts));
  for (int64_t t = 0; t < tokens; ++t)
    RouteToken(logits + t * num_experts, num_experts, k, normalize, scratch.data(), r.experts.data() + t * k,
               r.weights.data() + t * k);
  return r;
}

}  // namespace rote::numerics
