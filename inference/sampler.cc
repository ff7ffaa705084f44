#include "inference/sampler.h"

#include <algorithm>
#include <numeric>

#include "inference/numerics/canonical.h"

namespace rote::inference {
namespace {

uint64_t SplitMix64(uint64_t x) {
  uint64_t z = x + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

int32_t ArgmaxLowestIndex(std::span<const float> logits) {
  int32_t best = 0;
  float best_v = 0.0f;
  bool have = false;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float v = logits[i];
    if (v != v) continue;
    if (!have || v > best_v) {
      best = static_cast<int32_t>(i);
      best_v = v;
      have = true;
    }
  }
  return best;
}

float SamplingUniform(uint64_t seed, uint64_t request_key, uint64_t position) {
  const uint64_t h = SplitMix64(SplitMix64(SplitMix64(seed) ^ request_key) ^ position);
  return static_cast<float>(h >> 40) * (1.0f / 16777216.0f);
}

int32_t SampleToken(std::span<const float> logits, const SamplingParams& params, uint64_t request_key,
                    uint64_t position) {
  if (!(params.temperature > 0.0f) || logits.empty()) return ArgmaxLowestIndex(logits);
  const size_t n = logits.size();
  std::vector<float> z(n);
  for (size_t i = 0; i < n; ++i) z[i] = logits[i] / params.temperature;
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  // (value desc, index asc); NaN sorts last so it is never kept ahead of a number.
  auto before = [&](int32_t a, int32_t b) {
    const float va = z[a], vb = z[b];
    const bool na = va != va, nb = vb != vb;
    if (na != nb) return nb;
    if (!na && va != vb) return va > vb;
    return a < b;
  };
  size_t kept = n;
  if (params.top_k > 0 && static_cast<size_t>(params.top_k) < n) {
    kept = static_cast<size_t>(params.top_k);
    std::partial_sort(order.begin(), order.begin() + kept, order.end(), before);
  } else {
    std::sort(order.begin(), order.end(), before);
  }
  const float m = z[order[0]];
  std::vector<float> e(kept);
  for (size_t r = 0; r < kept; ++r) e[r] = numerics::canonical_expf(z[order[r]] - m);
  // prefix[r] = canonical sum of e[0..r] (the 32 lane accumulators after r + 1 terms, then
  // the tree): monotone in r because every step adds a non-negative term to one lane.
  std::vector<float> prefix(kept);
  float acc[numerics::kCanonicalLanes] = {};
  for (size_t r = 0; r < kept; ++r) {
    acc[r % numerics::kCanonicalLanes] = acc[r % numerics::kCanonicalLanes] + e[r];
    float tmp[numerics::kCanonicalLanes];
    std::copy(acc, acc + numerics::kCanonicalLanes, tmp);
    prefix[r] = numerics::canonical_tree32(tmp);
  }
  size_t cut = kept;
  if (params.top_p > 0.0f && params.top_p < 1.0f) {
    const float target = params.top_p * prefix[kept - 1];
    for (size_t r = 0; r < kept; ++r) {
      if (prefix[r] >= target) {
        cut = r + 1;
        break;
      }
    }
  }
  const float t = SamplingUniform(params.seed, request_key, position) * prefix[cut - 1];
  for (size_t r = 0; r < cut; ++r) {
    if (prefix[r] > t) return order[r];
  }
  return order[cut - 1];
}

}  // namespace rote::inference
