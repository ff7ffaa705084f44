// Against the fp32 references made with transformers (tools/make_fixtures.py, committed under
// tests/fixtures/<family>/): the CPU backend's logits of every prompt position are within a
// tight bound of the reference, and 16 greedy tokens equal the reference's, decoded one step at a
// time through the backend (every family) and through the engine, batched (the families whose
// tokenizer the engine loads).
//
// The model families' fixtures (mistral, gemma, gemma2, gemma3, phi3, starcoder2, granite,
// deepseek_coder, qwen3_moe) are shaped so each feature acts: sliding windows shorter than the prompts,
// local and global layers, soft-caps that cap, nonzero biases, multipliers unlike 1, experts whose
// routes stay clear of ties (make_fixtures.py checks the router's margin), and Phi-3's
// longrope switching to its long factors inside the prompts (its reference ran one token per
// call through transformers' cache, where the factors are chosen per position as rote does).
//
// The bound: |rote - reference| <= 1e-5 * (1 + max |reference logit| of that row). Both compute
// in fp32 from the same stored weights; they differ only in summation order, exp, tanh, rotary
// tables and rsqrt rounding. Measured worst: 7.5e-7 (qwen2), 4.8e-7 (llama3), 5.8e-7 (qwen3),
// 5.3e-7 (mistral), 4.2e-7 (gemma), 6.9e-7 (gemma2), 4.6e-7 (gemma3), 6.6e-7 (phi3), 5.0e-7
// (starcoder2), 2.3e-7 (granite), 5.4e-7 (deepseek_coder), 5.0e-7 (qwen3_moe), so the bound leaves a 13x margin and
// still catches any real mistake
// (a skipped bias or norm moves logits by O(1)).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "inference/engine.h"
#include "inference/model/safetensors.h"
#include "tests/inference/test_backend.h"

namespace rote::inference {
namespace {

using Json = nlohmann::json;

constexpr double kRelativeBound = 1e-5;

std::string FixtureDir(const std::string& family) { return std::string(ROTE_SOURCE_DIR) + "/tests/fixtures/" + family; }

Json ReadJson(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return Json::parse(ss.str());
}

class ReferenceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ReferenceTest, LogitsWithinBoundOfFp32Reference) {
  const std::string dir = FixtureDir(GetParam());
  auto model = Model::Load(dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const Json ref = ReadJson(dir + "/reference.json");
  auto logits_file = SafetensorsFile::Open(dir + "/reference_logits.safetensors");
  ASSERT_TRUE(logits_file.ok()) << logits_file.status().ToString();
  CpuBackendOptions o;
  o.max_positions = 256;
  auto backend = testing::CreateTestBackend(*model, o).value();
  ASSERT_TRUE(backend->AllocateKvCache(16).ok());
  const int vocab = (*model)->config().vocab_size;
  double worst = 0;
  for (const Json& p : ref["prompts"]) {
    const std::vector<int32_t> ids = p["ids"].get<std::vector<int32_t>>();
    const SafetensorsTensor* t = (*logits_file)->Find(p["logits_tensor"].get<std::string>());
    ASSERT_NE(t, nullptr);
    ASSERT_EQ(t->shape, (std::vector<int64_t>{static_cast<int64_t>(ids.size()), vocab}));
    BatchPlan plan;
    const std::vector<int32_t> blocks = {0, 1, 2, 3, 4, 5, 6, 7};
    plan.sequences.push_back({ids, 0, blocks, static_cast<int32_t>(ids.size())});
    std::vector<float> got;
    ASSERT_TRUE(backend->Forward(plan, &got).ok());
    for (size_t pos = 0; pos < ids.size(); ++pos) {
      const float* want = reinterpret_cast<const float*>(t->data) + pos * vocab;
      double row_max = 0, row_err = 0;
      for (int v = 0; v < vocab; ++v) {
        float w;
        std::memcpy(&w, want + v, 4);
        row_max = std::max(row_max, std::fabs(static_cast<double>(w)));
        row_err = std::max(row_err, std::fabs(static_cast<double>(got[pos * vocab + v]) - w));
      }
      const double rel = row_err / (1.0 + row_max);
      worst = std::max(worst, rel);
      EXPECT_LE(rel, kRelativeBound) << p["name"] << " position " << pos;
    }
  }
  std::cout << GetParam() << ": worst |rote - reference| / (1 + max|logit|) = " << worst << "\n";
}

// Prefill, then one token per step with the KV cache, greedy (lowest index on ties): the decode
// path of every family, windows sliding past the prompt.
TEST_P(ReferenceTest, BackendGreedyTokensEqualReference) {
  const std::string dir = FixtureDir(GetParam());
  auto model = Model::Load(dir);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const Json ref = ReadJson(dir + "/reference.json");
  CpuBackendOptions o;
  o.max_positions = 256;
  auto backend = testing::CreateTestBackend(*model, o).value();
  ASSERT_TRUE(backend->AllocateKvCache(16).ok());
  const int vocab = (*model)->config().vocab_size;
  const std::vector<int32_t> blocks = {0, 1, 2, 3, 4, 5, 6, 7};
  for (const Json& p : ref["prompts"]) {
    std::vector<int32_t> seq = p["ids"].get<std::vector<int32_t>>();
    const std::vector<int32_t> want = p["greedy_ids"].get<std::vector<int32_t>>();
    std::vector<int32_t> got, step_token(1);
    BatchPlan plan;
    plan.sequences.push_back({seq, 0, blocks, 1});
    for (size_t step = 0; step < want.size(); ++step) {
      std::vector<float> logits;
      ASSERT_TRUE(backend->Forward(plan, &logits).ok());
      ASSERT_EQ(logits.size(), static_cast<size_t>(vocab));
      const int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      got.push_back(next);
      step_token[0] = next;
      plan.sequences[0] = {step_token, static_cast<int32_t>(seq.size() + step), blocks, 1};
    }
    EXPECT_EQ(got, want) << p["name"];
  }
}

class EngineReferenceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(EngineReferenceTest, GreedyTokensEqualReference) {
  const std::string dir = FixtureDir(GetParam());
  EngineOptions o;
  o.threads = 2;
  o.max_context = 256;
  auto engine = Engine::Load(dir, o);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  const Json ref = ReadJson(dir + "/reference.json");
  std::vector<std::pair<RequestId, std::vector<int32_t>>> pending;
  for (const Json& p : ref["prompts"]) {  // all at once: batched, like production
    GenerationRequest r;
    r.prompt_tokens = p["ids"].get<std::vector<int32_t>>();
    r.sampling.max_tokens = ref["greedy_tokens"].get<int>();
    r.sampling.ignore_eos = true;  // the reference ran a fixed number of steps
    pending.emplace_back((*engine)->Submit(r).value(), p["greedy_ids"].get<std::vector<int32_t>>());
  }
  for (auto& [id, want] : pending) {
    auto res = (*engine)->Wait(id);
    ASSERT_TRUE(res.ok());
    EXPECT_EQ(res->tokens, want);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ReferenceTest,
                         ::testing::Values("qwen2", "llama3", "qwen3", "mistral", "gemma", "gemma2", "gemma3", "phi3",
                                           "starcoder2", "granite", "deepseek_coder", "qwen3_moe"));
INSTANTIATE_TEST_SUITE_P(Fixtures, EngineReferenceTest,
                         ::testing::Values("qwen2", "llama3", "qwen3", "deepseek_coder", "qwen3_moe"));

}  // namespace
}  // namespace rote::inference
