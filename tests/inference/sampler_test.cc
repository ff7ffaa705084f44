// Token choice: greedy ties, keyed random numbers, top-k / top-p / temperature behaviour.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "inference/numerics/canonical.h"
#include "inference/sampler.h"

namespace rote::inference {
namespace {

TEST(SamplerTest, ArgmaxBreaksTiesToLowestIndexAndSkipsNaN) {
  EXPECT_EQ(ArgmaxLowestIndex(std::vector<float>{1, 3, 3, 2}), 1);
  EXPECT_EQ(ArgmaxLowestIndex(std::vector<float>{NAN, -1, -1}), 1);
  EXPECT_EQ(ArgmaxLowestIndex(std::vector<float>{NAN, NAN}), 0);
  SamplingParams greedy;
  EXPECT_EQ(SampleToken(std::vector<float>{0, 5, 5}, greedy, 1, 2), 1);
}

TEST(SamplerTest, UniformIsKeyedAndInRange) {
  EXPECT_EQ(SamplingUniform(1, 2, 3), SamplingUniform(1, 2, 3));
  EXPECT_NE(SamplingUniform(1, 2, 3), SamplingUniform(1, 2, 4));
  EXPECT_NE(SamplingUniform(1, 2, 3), SamplingUniform(1, 3, 3));
  EXPECT_NE(SamplingUniform(1, 2, 3), SamplingUniform(2, 2, 3));
  double sum = 0;
  for (uint64_t p = 0; p < 20000; ++p) {
    const float u = SamplingUniform(9, 9, p);
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    sum += u;
  }
  EXPECT_NEAR(sum / 20000, 0.5, 0.01);
}

TEST(SamplerTest, TopKOneAndTinyTopPAreGreedy) {
  const std::vector<float> logits = {0.1f, 2.0f, 1.9f, -3.0f};
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 1;
  for (uint64_t pos = 0; pos < 50; ++pos) EXPECT_EQ(SampleToken(logits, p, 7, pos), 1);
  p.top_k = 0;
  p.top_p = 0.01f;
  for (uint64_t pos = 0; pos < 50; ++pos) EXPECT_EQ(SampleToken(logits, p, 7, pos), 1);
}

TEST(SamplerTest, FrequenciesFollowTheSoftmax) {
  const std::vector<float> logits = {1.0f, 0.0f, -1.0f, 0.5f};
  SamplingParams p;
  p.temperature = 1.0f;
  std::vector<int> counts(4, 0);
  const int n = 40000;
  for (int pos = 0; pos < n; ++pos) ++counts[SampleToken(logits, p, 3, static_cast<uint64_t>(pos))];
  double z = 0;
  for (float l : logits) z += std::exp(l);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(counts[i] / static_cast<double>(n), std::exp(logits[i]) / z, 0.01) << i;
  // top_k = 2 keeps tokens 0 and 3 only, in proportion e^1 : e^0.5.
  p.top_k = 2;
  counts.assign(4, 0);
  for (int pos = 0; pos < n; ++pos) ++counts[SampleToken(logits, p, 3, static_cast<uint64_t>(pos))];
  EXPECT_EQ(counts[1] + counts[2], 0);
  EXPECT_NEAR(counts[0] / static_cast<double>(n), std::exp(1.0) / (std::exp(1.0) + std::exp(0.5)), 0.01);
  // Lower temperature sharpens.
  p.top_k = 0;
  p.temperature = 0.25f;
  counts.assign(4, 0);
  for (int pos = 0; pos < n; ++pos) ++counts[SampleToken(logits, p, 3, static_cast<uint64_t>(pos))];
  EXPECT_GT(counts[0] / static_cast<double>(n), 0.85);
}

TEST(SamplerTest, TopPKeepsTheSmallestPrefixReachingP) {
  // Probabilities about 0.64, 0.24, 0.09, 0.03: top_p 0.8 keeps the first two.
  const std::vector<float> logits = {2.0f, 1.0f, 0.0f, -1.0f};
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.8f;
  std::vector<int> counts(4, 0);
  for (int pos = 0; pos < 20000; ++pos) ++counts[SampleToken(logits, p, 5, static_cast<uint64_t>(pos))];
  EXPECT_EQ(counts[2] + counts[3], 0);
  EXPECT_GT(counts[1], 4000);
}

// The sampling rule as docs/numerics.md section 6 states it, term by term: a comparison sort,
// then the canonical prefix sum after every term and linear scans. SampleToken computes it with a
// radix sort and bisection over the lanes' running sums (thousands of times faster at a 152k
// vocabulary); the two must choose the same token everywhere.
int32_t SampleTokenByDefinition(std::span<const float> logits, const SamplingParams& params, uint64_t request_key,
                                uint64_t position) {
  if (!(params.temperature > 0.0f) || logits.empty()) return ArgmaxLowestIndex(logits);
  const size_t n = logits.size();
  std::vector<float> z(n);
  for (size_t i = 0; i < n; ++i) z[i] = logits[i] / params.temperature;
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  auto before = [&](int32_t a, int32_t b) {
    const float va = z[a], vb = z[b];
    const bool na = va != va, nb = vb != vb;
    if (na != nb) return nb;
    if (!na && va != vb) return va > vb;
    return a < b;
  };
  std::sort(order.begin(), order.end(), before);
  const size_t kept = params.top_k > 0 && static_cast<size_t>(params.top_k) < n ? static_cast<size_t>(params.top_k) : n;
  const float m = z[order[0]];
  std::vector<float> prefix(kept);
  float acc[numerics::kCanonicalLanes] = {};
  for (size_t r = 0; r < kept; ++r) {
    const float e = numerics::canonical_expf(z[order[r]] - m);
    acc[r % numerics::kCanonicalLanes] = acc[r % numerics::kCanonicalLanes] + e;
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

// Rows built to hit every branch: ties (values on a coarse grid), -0 beside +0, NaN, +-inf,
// temperatures that overflow, every top-k regime and top-p from tiny to almost 1, lengths around
// the 32 lanes; each row sampled at many positions (other uniforms).
TEST(SamplerTest, FastRuleChoosesWhatTheDefinitionChooses) {
  std::mt19937 rng(2024);
  const float kInf = std::numeric_limits<float>::infinity(), kNaN = std::numeric_limits<float>::quiet_NaN();
  const std::vector<size_t> lengths = {1, 2, 3, 31, 32, 33, 64, 65, 100, 1000, 4099};
  const std::vector<float> temperatures = {1.0f, 0.7f, 2.5f, 1e-30f};
  const std::vector<float> top_ps = {1.0f, 0.95f, 0.5f, 1e-6f, 0.999999f};
  int compared = 0;
  for (int row = 0; row < 240; ++row) {
    const size_t n = lengths[static_cast<size_t>(row) % lengths.size()];
    const int kind = row / static_cast<int>(lengths.size()) % 6;
    std::vector<float> logits(n);
    std::normal_distribution<float> normal(0.0f, kind == 5 ? 40.0f : 3.0f);
    for (float& v : logits) {
      v = normal(rng);
      if (kind == 1) v = std::round(v);                      // many ties
      if (kind == 2 && rng() % 7 == 0) v = rng() % 2 ? 0.0f : -0.0f;
      if (kind == 3 && rng() % 50 == 0) v = kNaN;
      if (kind == 4 && rng() % 40 == 0) v = rng() % 2 ? kInf : -kInf;
    }
    for (int variant = 0; variant < 6; ++variant) {
      SamplingParams p;
      p.temperature = temperatures[static_cast<size_t>(variant + row) % temperatures.size()];
      p.top_p = top_ps[static_cast<size_t>(variant * 3 + row) % top_ps.size()];
      const int k_choice = (variant + row) % 5;
      p.top_k = k_choice == 0 ? 0 : k_choice == 1 ? 1 : k_choice == 2 ? 5 : k_choice == 3 ? static_cast<int>(n) - 1
                                                                                            : static_cast<int>(n) + 3;
      p.seed = static_cast<uint64_t>(row);
      for (uint64_t pos = 0; pos < 24; ++pos) {
        const int32_t want = SampleTokenByDefinition(logits, p, 11, pos);
        ASSERT_EQ(SampleToken(logits, p, 11, pos), want)
            << "row " << row << " n " << n << " kind " << kind << " T " << p.temperature << " top_k " << p.top_k
            << " top_p " << p.top_p << " position " << pos;
        ++compared;
      }
    }
  }
  // A vocabulary-sized row, as the engine samples it.
  std::vector<float> big(151936);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  for (float& v : big) v = normal(rng);
  for (int variant = 0; variant < 3; ++variant) {
    SamplingParams p;
    p.temperature = 0.8f;
    p.top_k = variant == 1 ? 40 : 0;
    p.top_p = variant == 2 ? 1.0f : 0.95f;
    for (uint64_t pos = 0; pos < 3; ++pos) {
      ASSERT_EQ(SampleToken(big, p, 5, pos), SampleTokenByDefinition(big, p, 5, pos)) << "variant " << variant;
      ++compared;
    }
  }
  EXPECT_EQ(compared, 240 * 6 * 24 + 9);
}

}  // namespace
}  // namespace rote::inference
