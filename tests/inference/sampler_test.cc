// Token choice: greedy ties, keyed random numbers, top-k / top-p / temperature behaviour.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

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

}  // namespace
}  // namespace rote::inference
