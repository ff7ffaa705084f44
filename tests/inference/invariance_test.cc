// Batch invariance of the CPU backend, bitwise: a sequence's logits at every position are the
// same bits alone or inside batches of 2-16 other sequences of mixed lengths at random places,
// in prefill or decode, whole or chunked, on 1 or 2 threads, with AVX2 or scalar kernels. And
// the inverse: a backend that sums non-canonically when batched is caught by the same check.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <tuple>

#include "inference/backend.h"
#include "inference/model/weights.h"
#include "tests/inference/test_backend.h"
#include "tests/inference/test_models.h"

namespace rote::inference {
namespace {

struct Case {
  ModelFamily family;
  const char* shape;
  DType dtype = DType::kBF16;
};

// Printed by value in test listings (the default prints the struct's bytes: a pointer, which varies).
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.shape << " family " << static_cast<int>(c.family) << " dtype " << static_cast<int>(c.dtype);
}

std::shared_ptr<const Model> LoadModel(const Case& c) {
  auto m = Model::Load(testing::SynthModelDir(c.family, c.shape, c.dtype));
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? *m : nullptr;
}

std::unique_ptr<Backend> MakeBackend(std::shared_ptr<const Model> model, CpuBackendOptions o) {
  o.max_positions = 256;
  auto b = testing::CreateTestBackend(std::move(model), o);
  EXPECT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_TRUE((*b)->AllocateKvCache(512).ok());
  return std::move(b).value();
}

std::vector<int32_t> RandomTokens(std::mt19937& rng, int n, int vocab) {
  std::uniform_int_distribution<int> d(0, vocab - 1);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = d(rng);
  return t;
}

// Logits of every position of `tokens`, as one whole prefill of a lone sequence.
std::vector<std::vector<float>> AloneWhole(Backend& backend, const std::vector<int32_t>& tokens, int vocab) {
  std::vector<int32_t> blocks;
  for (size_t b = 0; b * kKvBlockSize < tokens.size(); ++b) blocks.push_back(static_cast<int32_t>(b));
  BatchPlan plan;
  plan.sequences.push_back({tokens, 0, blocks, static_cast<int32_t>(tokens.size())});
  std::vector<float> logits;
  EXPECT_TRUE(backend.Forward(plan, &logits).ok());
  std::vector<std::vector<float>> out;
  for (size_t p = 0; p < tokens.size(); ++p) out.emplace_back(logits.begin() + p * vocab, logits.begin() + (p + 1) * vocab);
  return out;
}

struct SimSeq {
  std::vector<int32_t> tokens;
  std::vector<int32_t> blocks;
  int start_step = 0;
  size_t done = 0;
  std::vector<std::vector<float>> logits;  // per position
};

// Runs `seqs` through continuous-batching-like steps: each sequence joins at its start step;
// each step it contributes a random run of its remaining tokens (max_chunk 1 = pure decode),
// all logits captured. Block ids are handed out in a shuffled order.
void Simulate(Backend& backend, std::vector<SimSeq>& seqs, std::mt19937& rng, int max_chunk, int vocab) {
  std::vector<int32_t> free_blocks(512);
  for (int i = 0; i < 512; ++i) free_blocks[i] = i;
  std::shuffle(free_blocks.begin(), free_blocks.end(), rng);
  size_t next = 0;
  for (auto& s : seqs) {
    for (size_t b = 0; b * kKvBlockSize < s.tokens.size(); ++b) s.blocks.push_back(free_blocks[next++]);
  }
  for (int step = 0;; ++step) {
    BatchPlan plan;
    std::vector<std::pair<SimSeq*, int>> parts;
    std::vector<size_t> order(seqs.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);  // random place in the batch each step
    bool remaining = false;
    for (size_t i : order) {
      SimSeq& s = seqs[i];
      if (s.done == s.tokens.size()) continue;
      remaining = true;
      if (step < s.start_step) continue;
      const int left = static_cast<int>(s.tokens.size() - s.done);
      const int n = std::min(left, std::uniform_int_distribution<int>(1, max_chunk)(rng));
      SequenceStep st;
      st.tokens = std::span<const int32_t>(s.tokens).subspan(s.done, n);
      st.start_pos = static_cast<int32_t>(s.done);
      st.block_table = s.blocks;
      st.num_logits = n;
      plan.sequences.push_back(st);
      parts.emplace_back(&s, n);
    }
    if (!remaining) break;
    if (plan.sequences.empty()) continue;
    std::vector<float> logits;
    ASSERT_TRUE(backend.Forward(plan, &logits).ok());
    size_t row = 0;
    for (auto& [s, n] : parts) {
      for (int k = 0; k < n; ++k, ++row) s->logits.emplace_back(logits.begin() + row * vocab, logits.begin() + (row + 1) * vocab);
      s->done += n;
    }
  }
}

bool SameBits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].size() != b[i].size() || std::memcmp(a[i].data(), b[i].data(), a[i].size() * 4) != 0) return false;
  }
  return true;
}

class InvarianceTest : public ::testing::TestWithParam<Case> {};

TEST_P(InvarianceTest, PrefillEqualsDecodeAndChunking) {
  auto model = LoadModel(GetParam());
  const int vocab = model->config().vocab_size;
  auto backend = MakeBackend(model, {});
  std::mt19937 rng(11);
  const std::vector<int32_t> prompt = RandomTokens(rng, 45, vocab);
  const auto whole = AloneWhole(*backend, prompt, vocab);
  for (int max_chunk : {1, 3, 16}) {
    std::vector<SimSeq> seqs(1);
    seqs[0].tokens = prompt;
    Simulate(*backend, seqs, rng, max_chunk, vocab);
    EXPECT_TRUE(SameBits(whole, seqs[0].logits)) << "max_chunk " << max_chunk;
  }
}

TEST_P(InvarianceTest, AloneEqualsInsideBatchesOf2To16) {
  auto model = LoadModel(GetParam());
  const int vocab = model->config().vocab_size;
  auto backend = MakeBackend(model, {});
  std::mt19937 rng(12);
  const std::vector<int32_t> prompt = RandomTokens(rng, 40, vocab);
  const auto alone = AloneWhole(*backend, prompt, vocab);
  for (int others : {2, 5, 16}) {
    std::vector<SimSeq> seqs(others + 1);
    for (int i = 0; i < others; ++i) {
      seqs[i].tokens = RandomTokens(rng, std::uniform_int_distribution<int>(1, 60)(rng), vocab);
      seqs[i].start_step = std::uniform_int_distribution<int>(0, 6)(rng);
    }
    seqs[others].tokens = prompt;
    seqs[others].start_step = std::uniform_int_distribution<int>(0, 4)(rng);
    Simulate(*backend, seqs, rng, 8, vocab);
    EXPECT_TRUE(SameBits(alone, seqs[others].logits)) << others << " others";
  }
}

TEST_P(InvarianceTest, ThreadsAndKernelsDoNotChangeBits) {
  if (testing::CudaTestBackend()) GTEST_SKIP() << "the CPU backend's threads, kernels and debug order";
  auto model = LoadModel(GetParam());
  const int vocab = model->config().vocab_size;
  std::vector<std::vector<std::vector<float>>> results;
  for (auto [threads, avx2] : {std::pair{1, true}, std::pair{2, true}, std::pair{2, false}}) {
    CpuBackendOptions o;
    o.threads = threads;
    o.use_avx2 = avx2;
    auto backend = MakeBackend(model, o);
    std::mt19937 rng(13);  // same batches for every configuration
    std::vector<SimSeq> seqs(6);
    for (auto& s : seqs) s.tokens = RandomTokens(rng, std::uniform_int_distribution<int>(1, 30)(rng), vocab);
    Simulate(*backend, seqs, rng, 5, vocab);
    std::vector<std::vector<float>> all;
    for (auto& s : seqs) all.insert(all.end(), s.logits.begin(), s.logits.end());
    results.push_back(std::move(all));
  }
  EXPECT_TRUE(SameBits(results[0], results[1])) << "1 vs 2 threads";
  EXPECT_TRUE(SameBits(results[0], results[2])) << "AVX2 vs scalar";
}

// The inverse check: with sequential summation whenever a step holds several tokens, the
// very same comparison must find a difference. If it did not, the tests above would prove
// nothing about the canonical order.
TEST_P(InvarianceTest, NonCanonicalReductionIsCaught) {
  if (testing::CudaTestBackend()) GTEST_SKIP() << "the CPU backend's threads, kernels and debug order";
  auto model = LoadModel(GetParam());
  const int vocab = model->config().vocab_size;
  CpuBackendOptions o;
  o.debug_noncanonical_when_batched = true;
  auto backend = MakeBackend(model, o);
  std::mt19937 rng(12);
  const std::vector<int32_t> prompt = RandomTokens(rng, 40, vocab);
  // Alone and decoded one token per step: every step holds one token, so canonical.
  std::vector<SimSeq> alone(1);
  alone[0].tokens = prompt;
  Simulate(*backend, alone, rng, 1, vocab);
  std::vector<SimSeq> seqs(5);
  for (int i = 0; i < 4; ++i) seqs[i].tokens = RandomTokens(rng, 20, vocab);
  seqs[4].tokens = prompt;
  Simulate(*backend, seqs, rng, 8, vocab);
  EXPECT_FALSE(SameBits(alone[0].logits, seqs[4].logits));
}

// Backend::ForwardGreedySteps (the default, which the CPU backend keeps): the prefill and 20
// decode steps of three sequences in one call give the same tokens as one ForwardGreedy a step,
// step after step in row order; bad arguments are refused.
TEST_P(InvarianceTest, GreedyStepsEqualOneStepAtATime) {
  auto model = LoadModel(GetParam());
  const int vocab = model->config().vocab_size;
  auto chained = MakeBackend(model, {});
  auto single = MakeBackend(model, {});
  std::mt19937 rng(5);
  std::vector<std::vector<int32_t>> prompts = {RandomTokens(rng, 7, vocab), RandomTokens(rng, 23, vocab),
                                               RandomTokens(rng, 1, vocab)};
  constexpr int32_t kSteps = 21;
  BatchPlan plan;
  std::vector<std::vector<int32_t>> blocks(prompts.size());  // the plan's tables point into these
  for (size_t i = 0; i < prompts.size(); ++i) {
    for (int32_t b = 0; b * kKvBlockSize < static_cast<int32_t>(prompts[i].size()) + kSteps; ++b)
      blocks[i].push_back(static_cast<int32_t>(i) * 8 + b);
    plan.sequences.push_back({prompts[i], 0, blocks[i], 1});
  }
  std::vector<int32_t> got;
  const Status st = chained->ForwardGreedySteps(plan, kSteps, &got);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_EQ(got.size(), static_cast<size_t>(kSteps) * prompts.size());
  BatchPlan step = plan;
  std::vector<int32_t> chosen, fed(prompts.size());
  for (int32_t i = 0; i < kSteps; ++i) {
    ASSERT_TRUE(single->ForwardGreedy(step, &chosen).ok());
    for (size_t r = 0; r < prompts.size(); ++r) {
      EXPECT_EQ(got[static_cast<size_t>(i) * prompts.size() + r], chosen[r]) << "step " << i << " row " << r;
      step.sequences[r].start_pos += static_cast<int32_t>(step.sequences[r].tokens.size());
      fed[r] = chosen[r];
      step.sequences[r].tokens = std::span<const int32_t>(&fed[r], 1);
    }
  }
  EXPECT_EQ(chained->ForwardGreedySteps(plan, 0, &got).code(), StatusCode::kInvalidArgument);
  plan.sequences[1].num_logits = 2;
  EXPECT_EQ(chained->ForwardGreedySteps(plan, 3, &got).code(), StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Families, InvarianceTest,
                         ::testing::Values(Case{ModelFamily::kQwen2, "small"}, Case{ModelFamily::kLlama, "tiny"},
                                           Case{ModelFamily::kQwen3, "tiny"},
                                           Case{ModelFamily::kQwen3, "tiny", DType::kF16},
                                           Case{ModelFamily::kLlama, "tiny", DType::kF32},
                                           // Windows of 24 and Phi-3's long factors from position 32
                                           // act on these prompts.
                                           Case{ModelFamily::kMistral, "tiny"}, Case{ModelFamily::kGemma2, "tiny"},
                                           Case{ModelFamily::kGemma3, "tiny"}, Case{ModelFamily::kPhi3, "tiny"},
                                           Case{ModelFamily::kStarcoder2, "tiny", DType::kF16},
                                           Case{ModelFamily::kGranite, "tiny"},
                                           // Each token routed to its own experts among the others'.
                                           Case{ModelFamily::kQwen3Moe, "tiny"},
                                           Case{ModelFamily::kQwen3Moe, "small", DType::kF32}),
                         [](const auto& param_info) {
                           return std::string(ModelFamilyName(param_info.param.family)) + "_" + param_info.param.shape +
                                  "_" + std::string(DTypeName(param_info.param.dtype));
                         });

}  // namespace
}  // namespace rote::inference
