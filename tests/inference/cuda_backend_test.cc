// The CUDA backend against the CPU backend (the oracle), by equality of every logit bit:
// committed fixtures and synthesized models of each family and dtype, prefill and decode, a
// request alone or inside batches of up to 64 others, whole, chunked and token-by-token
// prefill, graph replay against eager launches. Skips where no GPU is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "inference/backend.h"
#include "inference/engine.h"
#include "inference/cuda/attention_parts.h"
#include "inference/cuda/attention_tiles.h"
#include "inference/cuda/class_fold.h"
#include "inference/cuda/cuda_backend.h"
#include "inference/cuda/fast_shapes.h"
#include "inference/cuda/fast_tiles.h"
#include "inference/cuda/host_layout.h"
#include "inference/model/synth.h"
#include "inference/model/weights.h"
#include "tests/inference/cuda_synth_model.h"

namespace rote::inference {
namespace {

using cuda_test::SynthSpec;
using cuda_test::WriteSynthModel;

#define SKIP_WITHOUT_GPU() \
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device"

std::string TempDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/rote_cuda_" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::shared_ptr<const Model> LoadOrDie(const std::string& dir) {
  auto m = Model::Load(dir);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? *m : nullptr;
}

std::shared_ptr<const Model> SynthModel(const std::string& name, const SynthSpec& spec) {
  const std::string dir = TempDir(name);
  EXPECT_TRUE(WriteSynthModel(dir, spec));
  return LoadOrDie(dir);
}

// A sequence's state in a test driver: its tokens so far and its KV blocks.
struct Seq {
  std::vector<int32_t> tokens;
  std::vector<int32_t> blocks;
  int32_t cached = 0;  // positions already in the KV cache
};

// Drives one backend: hands out KV blocks (sequentially, never reused) and runs steps.
class Driver {
 public:
  Driver(Backend* backend, int32_t num_blocks) : backend_(backend), num_blocks_(num_blocks) {
    Status s = backend_->AllocateKvCache(num_blocks);
    EXPECT_TRUE(s.ok()) << s.ToString();
  }

  // One step: for each (seq, count, num_logits) run `count` new tokens of seq starting at its
  // cached length. Returns the logits (Forward's layout).
  struct Part {
    Seq* seq;
    int32_t count;
    int32_t num_logits;
  };
  std::vector<float> Step(const std::vector<Part>& parts) {
    BatchPlan plan;
    for (const Part& p : parts) {
      const int32_t end = p.seq->cached + p.count;
      while (static_cast<int32_t>(p.seq->blocks.size()) * kKvBlockSize < end) {
        EXPECT_LT(next_block_, num_blocks_);
        p.seq->blocks.push_back(next_block_++);
      }
      SequenceStep s;
      s.tokens = std::span<const int32_t>(p.seq->tokens.data() + p.seq->cached, p.count);
      s.start_pos = p.seq->cached;
      s.block_table = p.seq->blocks;
      s.num_logits = p.num_logits;
      plan.sequences.push_back(s);
    }
    std::vector<float> logits;
    Status s = backend_->Forward(plan, &logits);
    EXPECT_TRUE(s.ok()) << s.ToString();
    for (const Part& p : parts) p.seq->cached += p.count;
    return logits;
  }

 private:
  Backend* backend_;
  int32_t num_blocks_;
  int32_t next_block_ = 0;
};

int32_t Argmax(const float* v, int32_t n) {
  int32_t best = 0;
  for (int32_t i = 1; i < n; ++i)
    if (v[i] > v[best]) best = i;
  return best;
}

// Bitwise equality with a useful message on the first difference.
::testing::AssertionResult SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size())
    return ::testing::AssertionFailure() << "sizes differ: " << a.size() << " vs " << b.size();
  for (size_t i = 0; i < a.size(); ++i) {
    uint32_t x, y;
    std::memcpy(&x, &a[i], 4);
    std::memcpy(&y, &b[i], 4);
    if (x != y)
      return ::testing::AssertionFailure() << "first difference at " << i << ": " << a[i] << " vs " << b[i]
                                           << " (bits " << std::hex << x << " vs " << y << ")";
  }
  return ::testing::AssertionSuccess();
}

std::vector<int32_t> Prompt(int32_t len, int32_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(len);
  for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  return t;
}

std::unique_ptr<Backend> Cpu(std::shared_ptr<const Model> m) {
  CpuBackendOptions o;
  o.threads = 2;
  o.max_positions = 4096;
  auto b = CreateCpuBackend(std::move(m), o);
  EXPECT_TRUE(b.ok()) << b.status().ToString();
  return b.ok() ? std::move(*b) : nullptr;
}

std::unique_ptr<CudaBackend> Cuda(std::shared_ptr<const Model> m, bool graphs = true,
                                  NumericsProfile profile = NumericsProfile::kExact, const CudaTuning& tuning = {}) {
  CudaBackendOptions o;
  o.max_positions = 4096;
  o.use_graphs = graphs;
  o.profile = profile;
  o.tuning = tuning;
  auto b = CreateCudaBackend(std::move(m), o);
  EXPECT_TRUE(b.ok()) << b.status().ToString();
  return b.ok() ? std::move(*b) : nullptr;
}

// Prefill (every position's logits) then greedy decode; CPU and CUDA must agree in every bit
// at every step.
void ExpectSameSteps(Backend* cpu, Backend* gpu, int32_t vocab, int32_t prompt_len, int32_t decode_steps) {
  Driver dc(cpu, 64), dg(gpu, 64);
  Seq sc, sg;
  sc.tokens = sg.tokens = Prompt(prompt_len, vocab, 11);
  std::vector<float> lc = dc.Step({{&sc, prompt_len, prompt_len}});
  std::vector<float> lg = dg.Step({{&sg, prompt_len, prompt_len}});
  ASSERT_TRUE(SameBits(lc, lg)) << "prefill of " << prompt_len << " tokens";
  for (int32_t step = 0; step < decode_steps; ++step) {
    const int32_t next = Argmax(lc.data() + lc.size() - vocab, vocab);
    sc.tokens.push_back(next);
    sg.tokens.push_back(next);
    lc = dc.Step({{&sc, 1, 1}});
    lg = dg.Step({{&sg, 1, 1}});
    ASSERT_TRUE(SameBits(lc, lg)) << "decode step " << step;
  }
}

// ExpectSameSteps for a CUDA backend of `tuning`; *stats (where given): what it launched.
void ExpectCpuEqualsCuda(std::shared_ptr<const Model> model, int32_t prompt_len, int32_t decode_steps,
                         const CudaTuning& tuning = {}, CudaLaunchStats* stats = nullptr) {
  auto cpu = Cpu(model);
  auto gpu = Cuda(model, true, NumericsProfile::kExact, tuning);
  ASSERT_TRUE(cpu && gpu);
  ExpectSameSteps(cpu.get(), gpu.get(), model->config().vocab_size, prompt_len, decode_steps);
  if (stats != nullptr) *stats = gpu->launch_stats();
}

TEST(CudaBackend, CreateWithoutDeviceIsFailedPrecondition) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a CUDA device is present";
  SynthSpec spec;
  auto model = SynthModel("nodev", spec);
  ASSERT_TRUE(model);
  auto b = CreateCudaBackend(model, CudaBackendOptions{});
  ASSERT_FALSE(b.ok());
  // Builds without nvcc say UNIMPLEMENTED; builds with it, on a machine without a GPU, say
  // FAILED_PRECONDITION. Either way the message names the reason.
  EXPECT_TRUE(b.status().code() == StatusCode::kFailedPrecondition || b.status().code() == StatusCode::kUnimplemented)
      << b.status().ToString();
  EXPECT_NE(b.status().message().find("CUDA"), std::string::npos);
}

TEST(CudaBackend, FixturesEqualCpuEveryStep) {
  SKIP_WITHOUT_GPU();
  for (const char* family : {"qwen2", "llama3", "qwen3"}) {
    SCOPED_TRACE(family);
    auto model = LoadOrDie(std::string(ROTE_SOURCE_DIR) + "/tests/fixtures/" + family);
    ASSERT_TRUE(model);
    ExpectCpuEqualsCuda(model, 23, 24);
  }
}

struct SynthCase {
  const char* name;
  ModelFamily family;
  DType dtype;
};

// Printed by name in test listings (the default prints the struct's bytes: a pointer, which varies).
void PrintTo(const SynthCase& c, std::ostream* os) { *os << c.name; }

class CudaSynthTest : public ::testing::TestWithParam<SynthCase> {};

TEST_P(CudaSynthTest, LogitsEqualCpuEveryStep) {
  SKIP_WITHOUT_GPU();
  SynthSpec s;
  s.family = GetParam().family;
  s.dtype = GetParam().dtype;
  // hidden 160 is not a multiple of 128 (padded columns); intermediate 1408 makes the batched
  // matrix products stage x in several chunks; GQA 5:1; untied head for llama.
  s.vocab = 1000;
  s.hidden = 160;
  s.intermediate = 1408;
  s.heads = 5;
  s.kv_heads = 1;
  s.head_dim = 32;
  s.layers = 2;
  s.tied = s.family != ModelFamily::kLlama;
  auto model = SynthModel(GetParam().name, s);
  ASSERT_TRUE(model);
  ExpectCpuEqualsCuda(model, 70, 12);
}

INSTANTIATE_TEST_SUITE_P(Families, CudaSynthTest,
                         ::testing::Values(SynthCase{"qwen2_bf16", ModelFamily::kQwen2, DType::kBF16},
                                           SynthCase{"llama_f32", ModelFamily::kLlama, DType::kF32},
                                           SynthCase{"qwen3_f16", ModelFamily::kQwen3, DType::kF16},
                                           SynthCase{"qwen3_bf16", ModelFamily::kQwen3, DType::kBF16}),
                         [](const ::testing::TestParamInfo<SynthCase>& p) { return std::string(p.param.name); });

std::shared_ptr<const Model> InvarianceModel() {
  SynthSpec s;
  s.family = ModelFamily::kQwen2;
  s.vocab = 640;
  s.hidden = 256;
  s.intermediate = 704;
  s.heads = 4;
  s.kv_heads = 2;
  s.head_dim = 64;
  s.layers = 2;
  return SynthModel("invariance", s);
}

// The needle run: `needle_prompt` at a random position among `others` requests with mixed
// prompt lengths (their prefills share the needle's step), then kTokens greedy steps of all;
// the needle's logits and tokens at every step.
constexpr int32_t kNeedleTokens = 256;
void RunNeedle(Backend* backend, const std::vector<int32_t>& needle_prompt, int32_t vocab, int32_t others,
               uint32_t seed, std::vector<std::vector<float>>* logits, std::vector<int32_t>* out) {
  constexpr int32_t kTokens = kNeedleTokens;
  Driver d(backend, 4096);
  std::mt19937 rng(seed);
  std::vector<Seq> seqs(others + 1);
  const int32_t needle_at = static_cast<int32_t>(rng() % static_cast<uint32_t>(others + 1));
  for (int32_t i = 0; i <= others; ++i) {
    seqs[i].tokens = i == needle_at ? needle_prompt : Prompt(1 + static_cast<int32_t>(rng() % 90), vocab, rng());
  }
  std::vector<Driver::Part> parts;
  for (auto& s : seqs) parts.push_back({&s, static_cast<int32_t>(s.tokens.size()), 1});
  for (int32_t step = 0; step <= kTokens; ++step) {
    std::vector<float> l = d.Step(parts);
    ASSERT_EQ(l.size(), static_cast<size_t>(vocab) * seqs.size());
    logits->emplace_back(l.begin() + needle_at * vocab, l.begin() + (needle_at + 1) * vocab);
    for (size_t i = 0; i < seqs.size(); ++i) seqs[i].tokens.push_back(Argmax(l.data() + i * vocab, vocab));
    out->push_back(seqs[needle_at].tokens.back());
    parts.clear();
    for (auto& s : seqs) parts.push_back({&s, 1, 1});
  }
}

// One request alone, then placed at a random position inside batches of 1 to 64 other
// requests with mixed prompt lengths (their prefills share the needle's steps): 256 greedy
// tokens with identical logits and tokens. The alone run is also checked against the CPU.
TEST(CudaInvariance, NeedleAloneEqualsNeedleInBatches) {
  SKIP_WITHOUT_GPU();
  auto model = InvarianceModel();
  ASSERT_TRUE(model);
  const int32_t vocab = model->config().vocab_size;
  const std::vector<int32_t> needle_prompt = Prompt(45, vocab, 99);
  auto run_needle = [&](Backend* backend, int32_t others, uint32_t seed, std::vector<std::vector<float>>* logits,
                        std::vector<int32_t>* out) {
    RunNeedle(backend, needle_prompt, vocab, others, seed, logits, out);
  };

  auto gpu = Cuda(model);
  ASSERT_TRUE(gpu);
  std::vector<std::vector<float>> alone_logits;
  std::vector<int32_t> alone_tokens;
  run_needle(gpu.get(), 0, 1, &alone_logits, &alone_tokens);
  {
    auto cpu = Cpu(model);
    std::vector<std::vector<float>> cpu_logits;
    std::vector<int32_t> cpu_tokens;
    run_needle(cpu.get(), 0, 1, &cpu_logits, &cpu_tokens);
    ASSERT_EQ(cpu_tokens, alone_tokens);
    for (size_t s = 0; s < cpu_logits.size(); ++s) ASSERT_TRUE(SameBits(cpu_logits[s], alone_logits[s])) << "step " << s;
  }
  for (int32_t others : {1, 3, 8, 17, 31, 64}) {
    SCOPED_TRACE("others=" + std::to_string(others));
    auto batched = Cuda(model);
    std::vector<std::vector<float>> logits;
    std::vector<int32_t> tokens;
    run_needle(batched.get(), others, 1000 + others, &logits, &tokens);
    ASSERT_EQ(tokens, alone_tokens);
    for (size_t s = 0; s < logits.size(); ++s) ASSERT_TRUE(SameBits(alone_logits[s], logits[s])) << "step " << s;
  }
}

// Whole prefill vs chunks of 1 (decode steps), 5 and 16 tokens, eager vs graphs: the logits of
// every position are identical.
TEST(CudaInvariance, WholeChunkedAndTokenByTokenPrefillAgree) {
  SKIP_WITHOUT_GPU();
  auto model = InvarianceModel();
  ASSERT_TRUE(model);
  const int32_t vocab = model->config().vocab_size;
  const std::vector<int32_t> prompt = Prompt(77, vocab, 5);
  std::vector<float> whole;
  {
    auto gpu = Cuda(model);
    Driver d(gpu.get(), 64);
    Seq s;
    s.tokens = prompt;
    whole = d.Step({{&s, 77, 77}});
  }
  for (bool graphs : {true, false}) {
    for (int32_t chunk : {1, 5, 16}) {
      SCOPED_TRACE("chunk=" + std::to_string(chunk) + " graphs=" + std::to_string(graphs));
      auto gpu = Cuda(model, graphs);
      Driver d(gpu.get(), 64);
      Seq s;
      s.tokens = prompt;
      std::vector<float> all;
      for (int32_t at = 0; at < 77; at += chunk) {
        const int32_t n = std::min(chunk, 77 - at);
        std::vector<float> l = d.Step({{&s, n, n}});
        all.insert(all.end(), l.begin(), l.end());
      }
      ASSERT_TRUE(SameBits(whole, all));
    }
  }
}

// Every register tile of the matrix kernel (forced, and the size-chosen default) gives the same
// bits: tiles decide which thread computes an output, never the order of its terms.
// Every position's logits of 11 sequences prefilled in one step, then 3 batched decode steps,
// under `tuning`; *tiled: the shared-memory tile's launches.
std::vector<float> TileShapesRun(std::shared_ptr<const Model> model, const CudaTuning& tuning, int64_t* tiled) {
  const int32_t vocab = model->config().vocab_size;
  auto gpu = Cuda(model, true, NumericsProfile::kExact, tuning);
  if (!gpu) return {};
  Driver d(gpu.get(), 256);
  std::vector<Seq> seqs(11);
  std::vector<Driver::Part> parts;
  for (size_t i = 0; i < seqs.size(); ++i) {
    seqs[i].tokens = Prompt(3 + 7 * static_cast<int32_t>(i), vocab, 40 + static_cast<uint32_t>(i));
    parts.push_back({&seqs[i], static_cast<int32_t>(seqs[i].tokens.size()), 2});
  }
  std::vector<float> all = d.Step(parts);
  for (int step = 0; step < 3; ++step) {
    parts.clear();
    for (auto& s : seqs) {
      s.tokens.push_back(static_cast<int32_t>((s.tokens.back() * 31 + step) % vocab));
      parts.push_back({&s, 1, 1});
    }
    std::vector<float> l = d.Step(parts);
    all.insert(all.end(), l.begin(), l.end());
  }
  *tiled = gpu->launch_stats().tiled_linear_launches;
  return all;
}

// The tiles of batched products (CudaTuning::large_batch_tile) against the default choice: the
// same logits in every bit.
class CudaTileShapes : public ::testing::TestWithParam<int> {};

TEST_P(CudaTileShapes, GiveIdenticalLogits) {
  SKIP_WITHOUT_GPU();
  auto model = InvarianceModel();
  ASSERT_TRUE(model);
  const int tile = GetParam();
  int64_t tiled_default = 0, tiled = 0;
  const std::vector<float> reference = TileShapesRun(model, CudaTuning{}, &tiled_default);
  CudaTuning tuning;
  tuning.large_batch_tile = tile;
  const std::vector<float> all = TileShapesRun(model, tuning, &tiled);
  ASSERT_FALSE(reference.empty());
  // The register tiles (0, 1, 2) and "never the shared-memory tile" (4) must not have run it (a
  // silent fallback would compare the shared-memory tile with itself).
  if (tile < 9 || tile > 15) {
    EXPECT_EQ(tiled, 0);
  }
  EXPECT_TRUE(SameBits(reference, all));
}

INSTANTIATE_TEST_SUITE_P(LargeBatchTile, CudaTileShapes, ::testing::Values(0, 1, 2, 4, 10, 12, 15));

// One-token products have several kernels (weights brought into shared memory by bulk copies, the
// plain register tile, a register ring, a persistent stream, the o/gate|up/down products as one
// persistent launch); which one runs changes only speed. A model whose MLP is
// wide enough for the four-rows-per-warp tiles (gate|up 8,200 rows) and whose widths need padding
// (320, 4,100), in bf16 and in fp16: each kernel equals the CPU at every prefill and decode step.
struct OneTokenCase {
  const char* name;
  CudaTuning tuning;
  int decode_step;  // 1: decode steps must run as one DecodeStepKernel; 0: never; -1: either
};

CudaTuning OneToken(int kernel) {
  CudaTuning t;
  t.one_token_kernel = kernel;
  return t;
}

std::string OneTokenCaseName(const ::testing::TestParamInfo<OneTokenCase>& p) { return p.param.name; }
void PrintTo(const OneTokenCase& c, std::ostream* os) { *os << c.name; }

class CudaOneTokenKernels : public ::testing::TestWithParam<OneTokenCase> {};

TEST_P(CudaOneTokenKernels, EqualCpu) {
  SKIP_WITHOUT_GPU();
  const OneTokenCase& c = GetParam();
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    SynthSpec spec;
    spec.dtype = dtype;
    spec.vocab = 640;
    spec.hidden = 320;
    spec.intermediate = 4100;
    spec.heads = 5;
    spec.kv_heads = 1;
    spec.head_dim = 64;
    auto model = SynthModel(dtype == DType::kBF16 ? "wide_bf16" : "wide_f16", spec);
    ASSERT_TRUE(model);
    SCOPED_TRACE("dtype=" + std::to_string(static_cast<int>(dtype)));
    CudaLaunchStats stats;
    ExpectCpuEqualsCuda(model, 9, 6, c.tuning, &stats);
    if (c.decode_step == 1) {
      EXPECT_GT(stats.decode_steps, 0);
    }
    if (c.decode_step == 0) {
      EXPECT_EQ(stats.decode_steps, 0);
    }
    const int ring_from = c.tuning.one_token_ring_from_hidden;
    if (c.tuning.one_token_kernel == 3 || (c.tuning.one_token_kernel == 0 && ring_from > 0 && ring_from <= spec.hidden)) {
      EXPECT_GT(stats.ring_gemv_launches, 0);
    } else {
      EXPECT_EQ(stats.ring_gemv_launches, 0);
    }
  }
}

// Kernels 7, 9 and 10 run every decode step as one DecodeStepKernel; 8 never does. The
// one-launch step's producer also prefetching weights into L2 far ahead of its ring; weight reads
// without the L2 evict_first hint (separate launches and the one-launch step); the MLP block with
// 4 warps per block (the default plan gives this model 8).
CudaTuning StepPrefetch48() {
  CudaTuning t = OneToken(7);
  t.step_prefetch_tiles = 48;
  return t;
}
CudaTuning NoEvictFirst(int kernel) {
  CudaTuning t = OneToken(kernel);
  t.weight_evict_first = false;
  return t;
}
// The ring of weights, activations and norm weights (RingGemvKernel) in every shape it takes:
// rows a warp 1, 2 and 4 for o, down and q|k|v (the rotary store fused, at least 2), depth 4, 8
// and 16 (the down product's 33 groups leave a part of the ring unused at the end; q|k|v's 3
// groups never fill it).
CudaTuning Ring(int rows, int depth) {
  CudaTuning t = OneToken(3);
  t.one_token_ring_rows = rows;
  t.one_token_ring_depth = depth;
  return t;
}
// The size rule (one_token_ring_from_hidden) choosing the ring for this model's hidden size.
CudaTuning RingFromHidden(int hidden) {
  CudaTuning t = OneToken(0);
  t.one_token_ring_from_hidden = hidden;
  return t;
}
CudaTuning MlpBlockFourWarps() {
  CudaTuning t = OneToken(5);
  t.mlp_block_max_warps = 4;
  return t;
}

INSTANTIATE_TEST_SUITE_P(
    Kernels, CudaOneTokenKernels,
    ::testing::Values(OneTokenCase{"default", OneToken(0), -1}, OneTokenCase{"register_tile", OneToken(1), -1},
                      OneTokenCase{"register_ring", OneToken(2), -1}, OneTokenCase{"mlp_block_always", OneToken(5), -1},
                      OneTokenCase{"mlp_block_never", OneToken(6), -1}, OneTokenCase{"one_launch", OneToken(7), 1},
                      OneTokenCase{"never_one_launch", OneToken(8), 0},
                      OneTokenCase{"one_launch_fire_and_forget_barrier", OneToken(9), 1},
                      OneTokenCase{"one_launch_producer_through_barriers", OneToken(10), 1},
                      OneTokenCase{"one_launch_l2_prefetch_48", StepPrefetch48(), 1},
                      OneTokenCase{"no_evict_first", NoEvictFirst(0), -1},
                      OneTokenCase{"one_launch_no_evict_first", NoEvictFirst(7), -1},
                      OneTokenCase{"mlp_block_4_warps", MlpBlockFourWarps(), -1},
                      OneTokenCase{"ring_1x8", Ring(1, 8), 0}, OneTokenCase{"ring_1x16", Ring(1, 16), 0},
                      OneTokenCase{"ring_2x4", Ring(2, 4), 0}, OneTokenCase{"ring_2x16", Ring(2, 16), 0},
                      OneTokenCase{"ring_4x8", Ring(4, 8), 0}, OneTokenCase{"ring_4x4", Ring(4, 4), 0},
                      OneTokenCase{"ring_by_hidden", RingFromHidden(320), 0}),
    OneTokenCaseName);

// The attention kernel's variants (where earlier steps' K/V rows are prefetched, how many
// positions its loops keep in flight) change only speed: head dims of one, two and four V groups
// per warp (136: the one-launch step's V slices of 40, 40, 40 and 16 dims), a context long enough
// (290 + 4) for the 8-deep loops to run whole, each variant and the one-launch decode step against
// the CPU at every prefill and decode step.
CudaTuning Attention(int variant) {
  CudaTuning t;
  t.attention_variant = variant;
  return t;
}

// The attention in parts of long contexts from `split` positions (CudaTuning::step_attention_split
// and attention_parts_min_context; -1: the defaults), with `parts` blocks per head, in the
// one-launch step (one_token_kernel 7) or in separate launches (0).
CudaTuning AttentionSplit(int one_token_kernel, int split, int parts) {
  CudaTuning t;
  t.one_token_kernel = one_token_kernel;
  if (split >= 0) {
    t.step_attention_split = split;
    t.attention_parts_min_context = split;
  }
  t.attention_parts = parts;
  return t;
}

class CudaAttentionVariants : public ::testing::TestWithParam<int32_t> {};

TEST_P(CudaAttentionVariants, EqualCpu) {
  SKIP_WITHOUT_GPU();
  const int32_t head_dim = GetParam();
  SynthSpec spec;
  spec.hidden = 256;
  spec.heads = 4;
  spec.kv_heads = 2;
  spec.head_dim = head_dim;
  auto model = SynthModel("attn_hd" + std::to_string(head_dim), spec);
  ASSERT_TRUE(model);
  for (int variant : {-1, 0, 2, 5, 9, 10, 11}) {
    SCOPED_TRACE("head_dim=" + std::to_string(head_dim) + " attention_variant=" + std::to_string(variant));
    ExpectCpuEqualsCuda(model, 290, 4, Attention(variant));
  }
  // Variant 9 (every K/V row in shared memory, the default for small decode grids) needs a
  // context whose rows fit: 60 + 40 positions (graphs bucket it to 256; at head_dim 128 it
  // falls back to variant 5).
  for (int variant : {9, 10, 11, -1}) {
    SCOPED_TRACE("head_dim=" + std::to_string(head_dim) + " short context, attention_variant=" +
                 std::to_string(variant));
    ExpectCpuEqualsCuda(model, 60, 40, Attention(variant));
  }
  // The one-launch decode step runs the same attention body, instantiated per head dimension;
  // with the split (each head in 8 blocks over parts of its positions) from every context, and
  // never. Steps whose context reaches the split run the kernel with the parts' code, the others
  // the kernel without it.
  for (int split : {-1, 1, 0}) {
    SCOPED_TRACE("head_dim=" + std::to_string(head_dim) + " one-launch step, attention split from " +
                 std::to_string(split));
    CudaLaunchStats stats;
    ExpectCpuEqualsCuda(model, 290, 4, AttentionSplit(7, split, 0), &stats);
    EXPECT_GT(stats.decode_steps, 0);
    if (split == 0)
      EXPECT_EQ(stats.decode_steps_in_parts, 0);
    else
      EXPECT_GT(stats.decode_steps_in_parts, 0);
  }
  {
    // 60 + 40 positions, below the default split (192): every step without the parts' code.
    SCOPED_TRACE("head_dim=" + std::to_string(head_dim) + " one-launch step, short context");
    CudaLaunchStats stats;
    ExpectCpuEqualsCuda(model, 60, 40, AttentionSplit(7, -1, 0), &stats);
    EXPECT_GT(stats.decode_steps, 0);
    EXPECT_EQ(stats.decode_steps_in_parts, 0);
  }
  {
    // Contexts 186-197 cross the default split inside one graph bucket: a graph of each kernel.
    SCOPED_TRACE("head_dim=" + std::to_string(head_dim) + " one-launch step, crossing the split");
    CudaLaunchStats stats;
    ExpectCpuEqualsCuda(model, 185, 12, AttentionSplit(7, -1, 0), &stats);
    EXPECT_GT(stats.decode_steps_in_parts, 0);
    EXPECT_GT(stats.decode_steps, stats.decode_steps_in_parts);
  }
  // Models with more heads than multiprocessors / 8 split each head over 4 or 2 blocks instead;
  // forced here (4 heads would take 8): other classes per part, other tree levels inside it.
  for (int parts : {4, 2}) {
    SCOPED_TRACE("head_dim=" + std::to_string(head_dim) + " one-launch step, " + std::to_string(parts) +
                 " parts per head");
    CudaLaunchStats stats;
    ExpectCpuEqualsCuda(model, 290, 4, AttentionSplit(7, 1, parts), &stats);
    EXPECT_GT(stats.decode_steps, 0);
  }
  // Separate launches with the parts as a launch of their own (LaunchAttentionParts), from every
  // context bucket, with 8 (the default here), 4 and 2 blocks per head, each number of V loads
  // in flight per thread (4, 16 a class, 32 over the classes); and a context of 1,000 + 2 (the
  // test's 64 blocks hold 1,024), where each class runs several rounds.
  struct PartsCase {
    int prompt, steps, parts;
  };
  for (int loads : {4, 16, 32}) {
    for (const PartsCase& pc : {PartsCase{290, 4, 0}, PartsCase{290, 4, 4}, PartsCase{290, 4, 2},
                                PartsCase{1000, 2, 0}, PartsCase{1000, 2, 4}}) {
      SCOPED_TRACE("head_dim=" + std::to_string(head_dim) + " separate launches, " + std::to_string(pc.prompt) +
                   " positions, attention in parts (" + std::to_string(pc.parts) + "), V loads " +
                   std::to_string(loads));
      CudaTuning t = AttentionSplit(0, 1, pc.parts);
      t.attention_parts_v_loads = loads;
      CudaLaunchStats stats;
      ExpectCpuEqualsCuda(model, pc.prompt, pc.steps, t, &stats);
      EXPECT_GT(stats.attention_parts_launches, 0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(HeadDims, CudaAttentionVariants, ::testing::Values(64, 128, 136));

// Attention of prefill steps in query tiles (TileAttentionKernel): tiles of 4 tokens x 7 heads
// (head_dim 128), 16 x 2 (64), 32 x 1 (128) and 1 x 32 (64) rows, over steps that mix sequences:
// three prompts of 300, 129 and 45 tokens with a decode token in one step, then a chunk of 100
// continuing the first (its context in the cache from the step before) beside a new 70-token
// prompt and a decode token, then decode steps. Every logit equals the CPU's, with the tiles from
// every step size (min tokens 1) and from the default size (their blocks need not fill the
// device here), and the kernel did run.
TEST(CudaAttentionTiles, MixedStepsEqualCpu) {
  SKIP_WITHOUT_GPU();
  struct Shape {
    int heads, kv_heads, head_dim;
  };
  for (const Shape& sh : {Shape{7, 1, 128}, Shape{4, 2, 64}, Shape{2, 2, 128}, Shape{32, 1, 64}}) {
    SynthSpec spec;
    spec.hidden = 256;
    spec.heads = sh.heads;
    spec.kv_heads = sh.kv_heads;
    spec.head_dim = sh.head_dim;
    auto model = SynthModel("attn_tiles_" + std::to_string(sh.heads) + "_" + std::to_string(sh.kv_heads) + "_" +
                                std::to_string(sh.head_dim),
                            spec);
    ASSERT_TRUE(model);
    const int32_t vocab = model->config().vocab_size;
    for (int min_tokens : {1, -1}) {
      SCOPED_TRACE("heads=" + std::to_string(sh.heads) + " kv_heads=" + std::to_string(sh.kv_heads) +
                   " head_dim=" + std::to_string(sh.head_dim) + " min_tokens=" + std::to_string(min_tokens));
      CudaTuning tuning;
      if (min_tokens > 0) tuning.attention_tile_min_tokens = min_tokens;
      tuning.attention_tile_by_rule = false;  // head_dim 64 too, and steps far from a device's wave
      auto cpu = Cpu(model);
      auto gpu = Cuda(model, true, NumericsProfile::kExact, tuning);
      ASSERT_TRUE(cpu && gpu);
      Driver dc(cpu.get(), 96), dg(gpu.get(), 96);
      Seq ac, bc, cc, dd, ec, ag, bg, cg, dg_, eg;
      ac.tokens = ag.tokens = Prompt(400, vocab, 21);
      bc.tokens = bg.tokens = Prompt(129, vocab, 22);
      cc.tokens = cg.tokens = Prompt(45, vocab, 23);
      dd.tokens = dg_.tokens = Prompt(1, vocab, 24);
      ec.tokens = eg.tokens = Prompt(70, vocab, 25);
      auto both = [&](const std::vector<Driver::Part>& pc, const std::vector<Driver::Part>& pg, const char* what) {
        const std::vector<float> lc = dc.Step(pc), lg = dg.Step(pg);
        EXPECT_FALSE(lc.empty());
        EXPECT_TRUE(SameBits(lc, lg)) << what;
        return lc;
      };
      both({{&ac, 300, 300}, {&bc, 129, 129}, {&cc, 45, 45}, {&dd, 1, 1}},
           {{&ag, 300, 300}, {&bg, 129, 129}, {&cg, 45, 45}, {&dg_, 1, 1}}, "three prompts and a decode token");
      bc.tokens.push_back(7);
      bg.tokens.push_back(7);
      std::vector<float> last = both({{&ac, 100, 100}, {&ec, 70, 70}, {&bc, 1, 1}},
                                     {{&ag, 100, 100}, {&eg, 70, 70}, {&bg, 1, 1}},
                                     "a chunk continuing a prompt, a new prompt, a decode token");
      for (int step = 0; step < 3; ++step) {
        for (Seq* q : {&ac, &ag, &ec, &eg}) q->tokens.push_back((step * 131 + 5) % vocab);
        last = both({{&ac, 1, 1}, {&ec, 1, 1}}, {{&ag, 1, 1}, {&eg, 1, 1}}, "decode");
      }
      EXPECT_GT(gpu->launch_stats().attention_tile_launches, 0);
    }
  }
}

// Variants 10 and 11 (GroupAttentionKernel: the query heads of a KV head in one block, their K/V
// rows staged once) at Qwen2.5's groupings: 7 query heads per KV head at head_dim 64 (one part
// with 11; one head per part with 10, as a single token's step asks), 6 at 128 (at least two
// parts of 3), contexts of one chunk and of several (290 + 4 positions: chunks of 288 at
// 64 and 128 at 128), equal to the CPU at every prefill and decode step.
TEST(CudaInvariance, GroupedAttentionEqualsCpu) {
  SKIP_WITHOUT_GPU();
  for (const auto& [head_dim, heads] : {std::pair{64, 14}, std::pair{128, 12}}) {
    SynthSpec spec;
    spec.hidden = 256;
    spec.heads = heads;
    spec.kv_heads = 2;
    spec.head_dim = head_dim;
    auto model = SynthModel("attn_group_hd" + std::to_string(head_dim), spec);
    ASSERT_TRUE(model);
    for (int variant : {10, 11}) {  // parts for about one block per multiprocessor; as few as possible
      for (const auto& [prompt, steps] : {std::pair{60, 40}, std::pair{290, 4}}) {
        SCOPED_TRACE("head_dim=" + std::to_string(head_dim) + " prompt=" + std::to_string(prompt) +
                     " variant=" + std::to_string(variant));
        ExpectCpuEqualsCuda(model, prompt, steps, Attention(variant));
      }
    }
  }
}

// How many blocks attend each head of a long context (no device needed): 8 where heads x 8 fit
// the grid, else 4, else none; 2 only when asked for (slower than none where measured).
TEST(CudaAttentionParts, BlocksPerHeadFollowHeadsAndGrid) {
  using cuda::AttentionPartsFor;
  // 132 multiprocessors (H100 SXM): 8 blocks per head up to 16 heads, 4 up to 33, then none.
  EXPECT_EQ(AttentionPartsFor(0, 12, 132), 8);  // Qwen2.5-1.5B
  EXPECT_EQ(AttentionPartsFor(0, 14, 132), 8);  // Qwen2.5-0.5B
  EXPECT_EQ(AttentionPartsFor(0, 16, 132), 8);
  EXPECT_EQ(AttentionPartsFor(0, 17, 132), 4);
  EXPECT_EQ(AttentionPartsFor(0, 28, 132), 4);  // Qwen2.5-7B
  EXPECT_EQ(AttentionPartsFor(0, 33, 132), 4);
  EXPECT_EQ(AttentionPartsFor(0, 34, 132), 0);  // 2 per head would fit, but never by default
  // Asked for: exactly that many where they fit, else none.
  EXPECT_EQ(AttentionPartsFor(2, 40, 132), 2);
  EXPECT_EQ(AttentionPartsFor(2, 67, 132), 0);
  EXPECT_EQ(AttentionPartsFor(4, 12, 132), 4);
  EXPECT_EQ(AttentionPartsFor(8, 17, 132), 0);
  // Any other request is the default choice.
  EXPECT_EQ(AttentionPartsFor(3, 12, 132), 8);
  EXPECT_EQ(AttentionPartsFor(0, 1, 7), 4);
  EXPECT_EQ(AttentionPartsFor(0, 1, 3), 0);
}

// The 32-bit lane index the fast products' epilogues store through equals the lane order's
// definition (kernels.h, PermutedIndex) for every column of any model, and beyond.
// The canonical tree built one class at a time (class_fold.h, TileAttentionKernel's sums): the
// classes in bitrev5 order, each folded in as it finishes, give canonical_tree32's bits on 100,000
// random sets of class sums of mixed signs and magnitudes; a plain left-to-right sum of the same
// sets differs from the tree on some of them (so the comparison can tell orders apart). No device.
TEST(CudaClassFold, BitrevFoldIsTheCanonicalTree) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  std::uniform_int_distribution<int> expo(-20, 20);
  int plain_differs = 0;
  for (int trial = 0; trial < 100000; ++trial) {
    float c[32], tree[32];
    for (int l = 0; l < 32; ++l) c[l] = tree[l] = std::ldexp(mant(rng), expo(rng));
    const float want = numerics::canonical_tree32(tree);
    float pending[5] = {};
    float got = 0.0f;
    bool done = false;
    for (int j = 0; j < 32; ++j) {
      float v = c[cuda::Bitrev5(j)];
      done = cuda::TreeFold(v, pending, 1, j);
      EXPECT_EQ(done, j == 31);
      if (done) got = v;
    }
    ASSERT_TRUE(done);
    uint32_t a, b;
    std::memcpy(&a, &want, 4);
    std::memcpy(&b, &got, 4);
    ASSERT_EQ(a, b) << "trial " << trial;
    float plain = 0.0f;
    for (int l = 0; l < 32; ++l) plain = plain + c[l];
    if (plain != want) ++plain_differs;
  }
  EXPECT_GT(plain_differs, 1000);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(cuda::Bitrev5(cuda::Bitrev5(j)), j);
  EXPECT_EQ(cuda::TrailingOnes(31), 5);
  EXPECT_EQ(cuda::TrailingOnes(22), 0);
  EXPECT_EQ(cuda::TrailingOnes(23), 3);
}

// A prefill step's query tiles (attention_tiles.h): every token of the step in exactly one tile,
// a tile's tokens consecutive in one sequence at consecutive positions, at most tile_tokens of
// them, its end the last position + 1; the longest contexts first, ties in step order; and the
// mostly-full rule. No device.
TEST(CudaAttentionTilesHost, TilesCoverTheStepLongestFirst) {
  const std::vector<cuda::StepSequence> seqs = {{300, 0}, {129, 0}, {45, 12}, {1, 57}, {100, 300}, {0, 5}};
  for (int32_t tile_tokens : {1, 4, 5, 16, 32}) {
    SCOPED_TRACE("tile_tokens=" + std::to_string(tile_tokens));
    const std::vector<cuda::AttentionTile> tiles = cuda::AttentionTilesFor(seqs, tile_tokens);
    int32_t total = 0;
    for (const auto& s : seqs) total += s.tokens;
    std::vector<int> seen(static_cast<size_t>(total), 0);
    for (size_t i = 0; i < tiles.size(); ++i) {
      const cuda::AttentionTile& t = tiles[i];
      ASSERT_GE(t.tokens, 1);
      ASSERT_LE(t.tokens, tile_tokens);
      // The sequence holding the tile's first token must hold its last, at consecutive positions.
      int32_t begin = 0;
      const cuda::StepSequence* owner = nullptr;
      for (const auto& s : seqs) {
        if (t.first_token >= begin && t.first_token < begin + s.tokens) {
          owner = &s;
          break;
        }
        begin += s.tokens;
      }
      ASSERT_NE(owner, nullptr);
      ASSERT_LE(t.first_token + t.tokens, begin + owner->tokens);
      EXPECT_EQ(t.end_position, owner->start_pos + (t.first_token - begin) + t.tokens);
      for (int32_t k = t.first_token; k < t.first_token + t.tokens; ++k) ++seen[static_cast<size_t>(k)];
      if (i > 0) {
        ASSERT_GE(tiles[i - 1].end_position, t.end_position);
        if (tiles[i - 1].end_position == t.end_position) {
          EXPECT_LT(tiles[i - 1].first_token, t.first_token);
        }
      }
    }
    for (int32_t k = 0; k < total; ++k) EXPECT_EQ(seen[static_cast<size_t>(k)], 1) << "token " << k;
  }
  // The 300-token prompt's last tile (positions 296..299) and the chunk at 300..399's first
  // (300..303): the chunk's tiles come first.
  const std::vector<cuda::AttentionTile> four = cuda::AttentionTilesFor(seqs, 4);
  EXPECT_EQ(four.front().end_position, 400);
  EXPECT_EQ(four.front().first_token, 475 + 96);
  EXPECT_TRUE(cuda::AttentionTilesMostlyFull(128, 4, 512));
  EXPECT_TRUE(cuda::AttentionTilesMostlyFull(256, 4, 512));
  EXPECT_FALSE(cuda::AttentionTilesMostlyFull(257, 4, 512));
  // 16 decode tokens and one 64-token chunk in tiles of 32: 18 tiles of 576 rows for 80 tokens.
  std::vector<cuda::StepSequence> mixed(16, cuda::StepSequence{1, 100});
  mixed.push_back({64, 0});
  const int64_t n = static_cast<int64_t>(cuda::AttentionTilesFor(mixed, 32).size());
  EXPECT_EQ(n, 18);
  EXPECT_FALSE(cuda::AttentionTilesMostlyFull(n, 32, 80));
}

TEST(CudaFastTiles, LaneIndexIsThePermutedOrder) {
  auto permuted = [](int64_t k) { return k / 128 * 128 + (k % 128) % 32 * 4 + (k % 128) / 32; };
  for (int32_t k = 0; k < (1 << 20); ++k) ASSERT_EQ(cuda::FastLaneIndex(k), permuted(k)) << k;
  for (int32_t k : {(int32_t{1} << 30) + 77, std::numeric_limits<int32_t>::max()}) EXPECT_EQ(cuda::FastLaneIndex(k), permuted(k)) << k;
  // A permutation within each group: the 128 columns of group 5 land on its 128 slots.
  std::set<int32_t> slots;
  for (int32_t k = 640; k < 768; ++k) slots.insert(cuda::FastLaneIndex(k));
  EXPECT_EQ(slots.size(), 128u);
  EXPECT_EQ(*slots.begin(), 640);
  EXPECT_EQ(*slots.rbegin(), 767);
}

// The upload's host-side layout (no device needed): rows into lane order, element by element as
// PermutedIndex defines it, for 2- and 4-byte elements and row lengths with and without a partial
// group; and the tiles built on a pool of threads, byte for byte those of FastTiles on one.
TEST(CudaFastTiles, UploadLayoutMatchesTheDefinitions) {
  auto permuted = [](int64_t k) { return k / 128 * 128 + (k % 128) % 32 * 4 + (k % 128) / 32; };  // kernels.h
  std::mt19937 rng(5);
  for (int esize : {2, 4}) {
    for (int64_t cols : {1, 31, 127, 128, 129, 200, 896, 1000}) {
      const int64_t padded = (cols + 127) / 128 * 128;
      std::vector<uint8_t> src(static_cast<size_t>(cols * esize)), want(static_cast<size_t>(padded * esize), 0xAB);
      for (uint8_t& b : src) b = static_cast<uint8_t>(rng());
      std::vector<uint8_t> got = want;
      for (int64_t k = 0; k < cols; ++k)
        std::memcpy(want.data() + permuted(k) * esize, src.data() + k * esize, static_cast<size_t>(esize));
      cuda::RowToLaneOrder(src.data(), cols, esize, got.data());
      ASSERT_EQ(got, want) << "esize " << esize << " cols " << cols;
    }
  }
  ThreadPool pool(3);
  for (int64_t rows : {1, 17, 100}) {
    for (int64_t cols_padded : {16, 128, 144}) {
      std::vector<uint16_t> w(static_cast<size_t>(rows * cols_padded));
      for (uint16_t& x : w) x = static_cast<uint16_t>(rng());
      EXPECT_EQ(cuda::FastTilesOnPool(w.data(), rows, cols_padded, &pool), cuda::FastTiles(w.data(), rows, cols_padded))
          << rows << " x " << cols_padded;
      EXPECT_EQ(cuda::FastTilesOnPool(w.data(), rows, cols_padded, nullptr), cuda::FastTiles(w.data(), rows, cols_padded));
    }
  }
}

// The fast profile's tile layout (no device needed): reading every lane's registers of a tile
// as mma.m16n8k16 defines them (a0..a3 of A; b0, b1 of B with thread t's columns 4t..4t + 3) and
// multiplying the assembled 16 x 16 and 16 x 8 matrices gives exactly the plain product of
// matching columns, for a matrix of rows not a multiple of 16 (the padding rows are zeros).
TEST(CudaFastTiles, LanesHoldTheMmaFragmentsOfMatchingColumns) {
  constexpr int64_t kRows = 37, kCols = 128, kToks = 8;
  std::vector<uint16_t> w(kRows * kCols);
  std::vector<double> x(kToks * kCols);
  std::mt19937 rng(7);
  // Small integers as bf16 bit patterns: exact in double, so any misplaced column shows.
  auto bf16_of = [](float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return static_cast<uint16_t>(u >> 16);
  };
  auto float_of = [](uint16_t b) {
    const uint32_t u = static_cast<uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return static_cast<double>(f);
  };
  for (auto& v : w) v = bf16_of(static_cast<float>(static_cast<int>(rng() % 17) - 8));
  for (auto& v : x) v = static_cast<double>(static_cast<int>(rng() % 13) - 6);
  const std::vector<uint16_t> tiles = cuda::FastTiles(w.data(), kRows, kCols);
  ASSERT_EQ(static_cast<int64_t>(tiles.size()), cuda::FastTileRowsPadded(kRows) * kCols);
  for (int64_t tile = 0; tile < cuda::FastTileRowsPadded(kRows) / 16; ++tile) {
    std::vector<double> out(16 * kToks, 0.0);
    for (int64_t step = 0; step < kCols / 16; ++step) {
      double a[16][16] = {}, b[16][8] = {};  // [row][k position], [k position][token]
      for (int lane = 0; lane < 32; ++lane) {
        const int g = lane / 4, t = lane % 4;
        const uint16_t* reg = &tiles[((tile * (kCols / 16) + step) * 32 + lane) * 8];
        const int rows_of[4] = {g, g + 8, g, g + 8}, k_of[4] = {2 * t, 2 * t, 2 * t + 8, 2 * t + 8};
        for (int i = 0; i < 4; ++i)
          for (int e = 0; e < 2; ++e) a[rows_of[i]][k_of[i] + e] = float_of(reg[2 * i + e]);
        // b0 = columns 4t, 4t + 1 at k positions 2t, 2t + 1; b1 = 4t + 2, 4t + 3 at 2t + 8, 2t + 9.
        for (int e = 0; e < 2; ++e) {
          b[2 * t + e][g] = x[g * kCols + step * 16 + 4 * t + e];
          b[2 * t + 8 + e][g] = x[g * kCols + step * 16 + 4 * t + 2 + e];
        }
      }
      for (int r = 0; r < 16; ++r)
        for (int n = 0; n < kToks; ++n)
          for (int k = 0; k < 16; ++k) out[r * kToks + n] += a[r][k] * b[k][n];
    }
    for (int r = 0; r < 16; ++r) {
      const int64_t row = tile * 16 + r;
      for (int n = 0; n < kToks; ++n) {
        double want = 0.0;
        if (row < kRows)
          for (int64_t k = 0; k < kCols; ++k) want += float_of(w[row * kCols + k]) * x[n * kCols + k];
        EXPECT_EQ(out[r * kToks + n], want) << "row " << row << " token " << n;
      }
    }
  }
}

// The three bf16 pieces of an activation add up to it exactly: each piece has no bits below
// bf16's, and hi + mid + lo, summed in double, is x, over random magnitudes and signs.
TEST(CudaFastTiles, PiecesAreBf16AndSumExactly) {
  std::mt19937 rng(11);
  // Magnitudes 2^-100 to 2^101 (the split is exact from 2^-103 up), either sign.
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> expo(-100, 100);
  auto value = [](uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return static_cast<double>(f);
  };
  for (int i = 0; i < 100000; ++i) {
    const float x = std::ldexp(rng() % 2 == 0 ? mant(rng) : -mant(rng), expo(rng));
    const cuda::FastPieces p = cuda::FastSplit(x);
    ASSERT_EQ(p.hi & 0xffffu, 0u) << x;
    ASSERT_EQ(p.mid & 0xffffu, 0u) << x;
    ASSERT_EQ(p.lo & 0xffffu, 0u) << x;
    ASSERT_EQ(value(p.hi) + value(p.mid) + value(p.lo), static_cast<double>(x)) << x;
  }
  for (float x : {0.0f, -0.0f, 1.0f, -3.0e-30f, 65504.0f, 1.0e30f}) {
    const cuda::FastPieces p = cuda::FastSplit(x);
    EXPECT_EQ(value(p.hi) + value(p.mid) + value(p.lo), static_cast<double>(x)) << x;
  }
}

// The fast profile's K slices (FastLinearSplitsFor, fast_shapes.h, plain C++) fix the order of
// its sums, so they are part of the profile's version (fast5): 0.5B's q|k|v and o in 2 slices,
// down in 4, gate|up and the lm_head in 1; 1.5B's q|k|v, o and down in 2; never more than 16, and
// every warp gets at least 3 steps of 16 columns.
TEST(CudaFastShapes, SlicesAreTheProfilesRule) {
  auto splits = [](int32_t rows, int32_t cols) {
    return cuda::FastLinearSplitsFor(rows, cols, cuda::kFastSplitTarget);
  };
  EXPECT_EQ(splits(1152, 896), 2);
  EXPECT_EQ(splits(896, 896), 2);
  EXPECT_EQ(splits(896, 4864), 4);
  EXPECT_EQ(splits(9728, 896), 1);
  EXPECT_EQ(splits(151936, 896), 1);
  EXPECT_EQ(splits(1792, 1536), 2);
  EXPECT_EQ(splits(1536, 1536), 2);
  EXPECT_EQ(splits(1536, 8960), 2);
  EXPECT_EQ(splits(17920, 1536), 1);
  EXPECT_EQ(splits(64, 6144), 16);
  EXPECT_EQ(splits(64, 4096), 10);
  for (int32_t rows : {16, 64, 128, 896, 4096})
    for (int32_t cols = 16; cols <= 8192; cols += 16) {
      const int32_t s = splits(rows, cols);
      ASSERT_GE(s, 1);
      ASSERT_LE(s, cuda::kFastMaxSplits);
      if (s > 1) {
        ASSERT_GE(cols / 16 / (8 * s), 3) << rows << " x " << cols;
      }
    }
}

// The fast profile's block shapes for decode-sized products (ChooseFastLinearShapeFor,
// fast_shapes.h, plain C++): 0.5B's gate|up (9,728 x 896) at batch 32 takes 80-row blocks, one wave of 244 on 132
// multiprocessors where 64-row ones ran 304; and over many shapes the choice is an instantiated
// shape of the right token groups whose waves x bytes are never worse than any other's.
TEST(CudaFastShapes, WaveModelChoosesWholeWaves) {
  struct Case {
    int32_t rows, cols, tokens, sms, row_tiles, token_groups;
  };
  for (const Case c : {Case{9728, 896, 32, 132, 5, 2}, Case{1152, 896, 32, 132, 2, 2}, Case{896, 4864, 32, 132, 2, 2},
                       Case{151936, 896, 32, 132, 4, 4}, Case{9728, 896, 8, 132, 3, 1}, Case{9728, 896, 64, 132, 5, 2}}) {
    const cuda::FastLinearShape got = cuda::ChooseFastLinearShapeFor(
        c.rows, c.tokens, cuda::FastLinearSplitsFor(c.rows, c.cols, cuda::kFastSplitTarget), c.sms, false);
    EXPECT_EQ(got.row_tiles, c.row_tiles) << c.rows << " x " << c.cols << " tokens " << c.tokens;
    EXPECT_EQ(got.token_groups, c.token_groups) << c.rows << " x " << c.cols << " tokens " << c.tokens;
  }
  auto cost = [](int32_t rows, int32_t cols, int32_t tokens, int32_t sms, int rt, int ntk) {
    const int64_t tiles = (rows + 15) / 16, slots = 2 * sms;
    const int64_t blocks = (tiles + rt - 1) / rt * cuda::FastLinearSplitsFor(rows, cols, cuda::kFastSplitTarget) *
                           ((tokens + 8 * ntk - 1) / (8 * ntk));
    return (blocks + slots - 1) / slots * (32 * rt + 32 * ntk);
  };
  for (int32_t sms : {66, 114, 132})
    for (int32_t rows : {64, 896, 1152, 2048, 9728, 17920, 151936})
      for (int32_t cols : {896, 1536, 4864})
        for (int32_t tokens = 1; tokens <= 64; ++tokens) {
          const cuda::FastLinearShape got = cuda::ChooseFastLinearShapeFor(
              rows, tokens, cuda::FastLinearSplitsFor(rows, cols, cuda::kFastSplitTarget), sms, false);
          const int want_groups_max = tokens <= 8 ? 1 : tokens <= 16 ? 2 : 4;
          ASSERT_TRUE(tokens <= 8 ? got.token_groups == 1 : got.token_groups == 2 || got.token_groups == want_groups_max);
          ASSERT_GE(got.row_tiles, 1);
          ASSERT_LE(got.row_tiles, got.token_groups == 4 ? 4 : 6);
          const int64_t chosen = cost(rows, cols, tokens, sms, got.row_tiles, got.token_groups);
          for (int rt = 1; rt <= 4; ++rt)  // every shape of the same token groups, and 64-row blocks above all
            ASSERT_LE(chosen, cost(rows, cols, tokens, sms, rt, got.token_groups))
                << rows << " x " << cols << " tokens " << tokens << " sms " << sms;
        }
}

// Merged slices (2 or 3 short K slices in one block of 16 or 24 warps, alone on its
// multiprocessor): at 0.5B, q|k|v and o (2 slices of 28 steps, 4 per warp) merge, and so does
// 1.5B's o (2 slices of 48 steps, 6 per warp); down stays a cluster at both (4 slices of 76
// steps, 10 per warp; 2 of 280, 35). The model then counts one slot per
// multiprocessor and no factor of the slices, and takes only the shapes compiled merged: at batch
// 32 q|k|v runs 32 x 16 blocks (72), o 16 x 16 (112). Over many shapes, the choice fits and its
// waves x bytes are never worse than another fitting shape's.
TEST(CudaFastShapes, MergedSlicesTakeAMultiprocessorEach) {
  auto merges = [](int32_t rows, int32_t cols) {
    return cuda::FastMergesSlices(cols, cuda::FastLinearSplitsFor(rows, cols, cuda::kFastSplitTarget),
                                  cuda::kFastMergeMaxSlices);
  };
  EXPECT_TRUE(merges(1152, 896));
  EXPECT_TRUE(merges(896, 896));
  EXPECT_FALSE(merges(896, 4864));
  EXPECT_TRUE(merges(1536, 1536));
  EXPECT_FALSE(merges(1536, 8960));
  EXPECT_FALSE(merges(9728, 896));  // one slice
  EXPECT_FALSE(cuda::FastMergesSlices(896, 3, 2));  // more slices than allowed
  EXPECT_FALSE(cuda::FastMergesSlices(1024, 4, 16));  // never more than 3
  EXPECT_TRUE(cuda::FastMergesSlices(4864, 3, 3, 13));
  EXPECT_FALSE(cuda::FastMergesSlices(4864, 3, 3, 12));
  struct Case {
    int32_t rows, cols, tokens, row_tiles, token_groups;
  };
  for (const Case c : {Case{1152, 896, 32, 2, 2}, Case{896, 896, 32, 1, 2}}) {
    const int32_t splits = cuda::FastLinearSplitsFor(c.rows, c.cols, cuda::kFastSplitTarget);
    const cuda::FastLinearShape got = cuda::ChooseFastLinearShapeFor(c.rows, c.tokens, splits, 132, true);
    EXPECT_EQ(got.row_tiles, c.row_tiles) << c.rows << " x " << c.cols;
    EXPECT_EQ(got.token_groups, c.token_groups) << c.rows << " x " << c.cols;
  }
  for (int32_t sms : {66, 132})
    for (int32_t rows : {64, 128, 256, 896, 1152})
      for (int32_t cols : {704, 896, 4864})
        for (int32_t tokens = 1; tokens <= 64; ++tokens) {
          const int32_t splits = cuda::FastLinearSplitsFor(rows, cols, cuda::kFastSplitTarget);
          if (!cuda::FastMergesSlices(cols, splits, cuda::kFastMergeMaxSlices)) continue;
          const cuda::FastLinearShape got = cuda::ChooseFastLinearShapeFor(rows, tokens, splits, sms, true);
          ASSERT_TRUE(cuda::FastMergedShapeFits(got.row_tiles, got.token_groups, splits));
          auto cost = [&](int rt, int ntk) {
            const int64_t blocks = ((rows + 15) / 16 + rt - 1) / rt * ((tokens + 8 * ntk - 1) / (8 * ntk));
            return (blocks + sms - 1) / sms * (32 * rt + 32 * ntk);
          };
          for (int rt = 1; rt <= 6; ++rt) {
            if (!cuda::FastMergedShapeFits(rt, got.token_groups, splits)) continue;
            ASSERT_LE(cost(got.row_tiles, got.token_groups), cost(rt, got.token_groups))
                << rows << " x " << cols << " tokens " << tokens << " sms " << sms;
          }
        }
}

// The most tokens a step carries (CudaMaxStepTokens): 65,535 where the kernels' grids put the
// step's tokens on y, and for the fast profile the most its products' 32-bit activation offsets
// take over the model's widest activation row: exactly where stride x (tokens + 65,536) reaches 2^31.
TEST(CudaStepLimits, GridsAndFastOffsetsBoundAStep) {
  for (int64_t stride : {128, 896, 3584, 4864, 18944, 27648, 29568, 32768, 65536, 1 << 20}) {
    const int64_t t = cuda::FastLinearMaxTokens(stride);
    EXPECT_LT(stride * (t + 65536), int64_t{1} << 31) << stride;
    EXPECT_GE(stride * (t + 1 + 65536), int64_t{1} << 31) << stride;
  }
  auto limit = [](const std::string& shape, NumericsProfile profile) {
    SynthOptions so;
    so.shape = shape;
    auto c = SynthConfig(so);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? CudaMaxStepTokens(*c, profile) : 0;
  };
  for (const char* shape : {"tiny", "0.5b", "1.5b", "7b", "14b", "32b"})
    EXPECT_EQ(limit(shape, NumericsProfile::kExact), 65535) << shape;
  EXPECT_EQ(limit("0.5b", NumericsProfile::kFast), 65535);  // 4,864 columns: the grid bounds it
  EXPECT_EQ(limit("7b", NumericsProfile::kFast), 47823);    // down's 18,944 columns
  EXPECT_EQ(limit("14b", NumericsProfile::kFast), 65535);   // 13,824 columns allow 89,808: the grid bounds it
  EXPECT_EQ(limit("32b", NumericsProfile::kFast), 12136);   // down's 27,648 columns
  // A mixture of experts: the experts' activation has the step's (token, expert) pairs on y.
  SynthOptions moe;
  moe.family = ModelFamily::kQwen3Moe;
  moe.shape = "30b-a3b";
  auto c = SynthConfig(moe);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->experts_per_token, 8);
  EXPECT_EQ(CudaMaxStepTokens(*c, NumericsProfile::kExact), 8191);
  EXPECT_EQ(CudaMaxStepTokens(*c, NumericsProfile::kFast), 8191);
}

// A step above the limit is refused whole, before anything runs, in both profiles, and the
// backend runs the next step as if it had never been asked.
TEST(CudaStepLimits, ALargerStepIsInvalidArgument) {
  SKIP_WITHOUT_GPU();
  auto model = InvarianceModel();
  ASSERT_TRUE(model);
  for (NumericsProfile profile : {NumericsProfile::kExact, NumericsProfile::kFast}) {
    auto b = Cuda(model, true, profile);
    ASSERT_TRUE(b && b->AllocateKvCache(64).ok());
    const int32_t limit = b->max_step_tokens();
    EXPECT_EQ(limit, CudaMaxStepTokens(model->config(), profile));
    // 17 sequences of 4,000 tokens: 68,000 tokens in one step.
    const std::vector<int32_t> long_prompt = Prompt(4000, model->config().vocab_size, 3);
    const std::vector<int32_t> no_blocks;
    BatchPlan big;
    for (int i = 0; i < 17; ++i) big.sequences.push_back({long_prompt, 0, no_blocks, 1});
    ASSERT_GT(17 * 4000, limit);
    std::vector<int32_t> tokens;
    Status st = b->ForwardGreedy(big, &tokens);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
    EXPECT_NE(st.message().find("68000 tokens exceeds the " + std::to_string(limit)), std::string::npos)
        << st.ToString();
    std::vector<float> logits;
    EXPECT_EQ(b->Forward(big, &logits).code(), StatusCode::kInvalidArgument);
    const std::vector<int32_t> prompt = Prompt(10, model->config().vocab_size, 4);
    const std::vector<int32_t> blocks = {0};
    BatchPlan small;
    small.sequences.push_back({prompt, 0, blocks, 1});
    ASSERT_TRUE(b->ForwardGreedy(small, &tokens).ok());
    EXPECT_EQ(tokens.size(), 1u);
  }
}

// Engine::Load takes a step budget above the backend's limit down to it (the engine runs);
// Engine::Create, given the same backend kind and options, refuses it.
TEST(CudaStepLimits, LoadTakesTheBudgetDownAndCreateRefusesIt) {
  SKIP_WITHOUT_GPU();
  const std::string dir = std::string(ROTE_SOURCE_DIR) + "/tests/fixtures/qwen2";
  EngineOptions o;
  ASSERT_TRUE(ParseDeviceName("cuda", &o).ok());
  o.max_batch = 4;
  o.max_context = 512;
  o.kv_cache_bytes = int64_t{64} << 20;
  o.max_step_tokens = 100000;
  auto loaded = Engine::Load(dir, o);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  GenerationRequest r;
  r.prompt_tokens = Prompt(40, (*loaded)->model().config().vocab_size, 9);
  r.sampling.max_tokens = 4;
  r.sampling.ignore_eos = true;
  auto result = (*loaded)->Generate(r);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->tokens.size(), 4u);
  auto model = LoadOrDie(dir);
  ASSERT_TRUE(model);
  auto tokenizer = Tokenizer::Load(dir);
  ASSERT_TRUE(tokenizer.ok());
  auto backend = Cuda(model);
  ASSERT_TRUE(backend);
  auto refused = Engine::Create(model, *tokenizer, std::move(backend), o);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument) << refused.status().ToString();
}

// RMSNorm keeps a row's first 16 groups of 128 in registers and streams the rest: a hidden size of
// 2,176 (17 groups) takes both paths, in prefill (normalised once) and decode (norm fused).
TEST(CudaInvariance, WideRowsEqualCpu) {
  SKIP_WITHOUT_GPU();
  SynthSpec spec;
  spec.hidden = 2176;
  spec.intermediate = 512;
  spec.heads = 4;
  spec.kv_heads = 2;
  spec.head_dim = 64;
  auto model = SynthModel("wide_rows", spec);
  ASSERT_TRUE(model);
  ExpectCpuEqualsCuda(model, 40, 3);
}

// Submits every request to `engine` at once, then waits for each: their results in order (a
// failed Submit or Wait is a test failure and leaves its result out).
std::vector<GenerationResult> SubmitAndWait(Engine& engine, std::vector<GenerationRequest> requests) {
  std::vector<RequestId> ids;
  for (GenerationRequest& r : requests) {
    auto id = engine.Submit(std::move(r));
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    if (id.ok()) ids.push_back(*id);
  }
  std::vector<GenerationResult> results;
  for (RequestId id : ids) {
    auto res = engine.Wait(id);
    EXPECT_TRUE(res.ok()) << res.status().ToString();
    if (res.ok()) results.push_back(std::move(*res));
  }
  return results;
}

// The engine (continuous batching, chunked prefill, paged KV, the same scheduler) on CUDA and on
// the CPU: concurrent greedy and seeded-sampling requests give the same tokens and the same
// logits at every step; provenance names the device.
TEST(CudaEngine, SameTokensAndLogitsAsCpuEngine) {
  SKIP_WITHOUT_GPU();
  const std::string dir = std::string(ROTE_SOURCE_DIR) + "/tests/fixtures/qwen2";
  auto run = [&](Device device, bool capture = true) {
    EngineOptions o;
    o.device = device;
    o.threads = 2;
    o.max_batch = 4;
    o.prefill_chunk = 7;
    o.max_step_tokens = 16;
    o.max_context = 512;
    o.capture_logits = capture;
    auto engine = Engine::Load(dir, o);
    EXPECT_TRUE(engine.ok()) << engine.status().ToString();
    if (!engine.ok()) return std::vector<GenerationResult>{};
    std::vector<GenerationRequest> requests;
    for (int i = 0; i < 6; ++i) {
      GenerationRequest r;
      r.prompt_tokens = Prompt(5 + 9 * i, (*engine)->model().config().vocab_size, 300 + i);
      r.sampling.max_tokens = 24;
      r.sampling.ignore_eos = true;
      if (i % 2 == 1) {
        r.sampling.temperature = 0.8f;
        r.sampling.top_k = 20;
        r.sampling.seed = 17;
        r.sampling_key = 1000 + i;
      }
      requests.push_back(std::move(r));
    }
    return SubmitAndWait(**engine, std::move(requests));
  };
  const std::vector<GenerationResult> cpu = run(Device::kCpu);
  const std::vector<GenerationResult> gpu = run(Device::kCuda);
  ASSERT_EQ(cpu.size(), 6u);
  ASSERT_EQ(gpu.size(), 6u);
  for (size_t i = 0; i < cpu.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    EXPECT_EQ(cpu[i].tokens, gpu[i].tokens);
    ASSERT_EQ(cpu[i].step_logits.size(), gpu[i].step_logits.size());
    for (size_t t = 0; t < cpu[i].step_logits.size(); ++t)
      ASSERT_TRUE(SameBits(cpu[i].step_logits[t], gpu[i].step_logits[t])) << "token " << t;
    EXPECT_EQ(gpu[i].provenance.device.rfind("cuda:", 0), 0u) << gpu[i].provenance.device;
    EXPECT_EQ(cpu[i].provenance.model_digest, gpu[i].provenance.model_digest);
  }
  // Without captured logits, steps of greedy requests only take their tokens from the device
  // (ForwardGreedy) and the others copy logits to the host: the same tokens.
  const std::vector<GenerationResult> uncaptured = run(Device::kCuda, false);
  ASSERT_EQ(uncaptured.size(), 6u);
  for (size_t i = 0; i < cpu.size(); ++i) EXPECT_EQ(cpu[i].tokens, uncaptured[i].tokens) << "request " << i;
}

// `cuda:N` runs on device N. The engine calls the backend from its scheduler thread, so each
// call makes the backend's device current there; the thread that loads and destroys the engine
// keeps its own device. Every device present gives the tokens and logits of device 0 (the exact
// profile's bits are the CPU's on any card; the fast profile's are the architecture's, and the
// devices of one machine share it). The fast profile's kernels ask for more than 48 KB of shared
// memory, an attribute each device needs set, after device 0 set it. A device that does not
// exist is refused at Load.
TEST(CudaEngine, RunsOnAnyDeviceAndLeavesTheCallersDeviceAlone) {
  SKIP_WITHOUT_GPU();
  const int count = CudaDeviceCount();
  const std::string dir = std::string(ROTE_SOURCE_DIR) + "/tests/fixtures/qwen2";
  auto run = [&](int device, NumericsProfile profile) {
    EngineOptions o;
    EXPECT_TRUE(ParseDeviceName("cuda:" + std::to_string(device), &o).ok());
    o.numerics_profile = profile;
    o.threads = 2;
    o.max_batch = 4;
    o.max_context = 512;
    o.kv_cache_bytes = int64_t{64} << 20;
    o.capture_logits = true;
    const int before = CudaCurrentDevice();
    auto engine = Engine::Load(dir, o);
    EXPECT_TRUE(engine.ok()) << engine.status().ToString();
    if (!engine.ok()) return std::vector<GenerationResult>{};
    EXPECT_EQ(CudaCurrentDevice(), before) << "Load changed the caller's device";
    std::vector<GenerationRequest> requests;
    for (int i = 0; i < 3; ++i) {
      GenerationRequest r;
      r.prompt_tokens = Prompt(6 + 11 * i, (*engine)->model().config().vocab_size, 500 + i);
      r.sampling.max_tokens = 12;
      r.sampling.ignore_eos = true;
      if (i == 2) {
        r.sampling.temperature = 0.7f;
        r.sampling.top_p = 0.9f;
        r.sampling.seed = 5;
      }
      requests.push_back(std::move(r));
    }
    std::vector<GenerationResult> results = SubmitAndWait(**engine, std::move(requests));
    for (const GenerationResult& r : results)
      EXPECT_EQ(r.provenance.device.rfind("cuda:" + std::to_string(device) + " ", 0), 0u) << r.provenance.device;
    engine->reset();  // the backend frees its buffers with its device current
    EXPECT_EQ(CudaCurrentDevice(), before) << "destruction changed the caller's device";
    return results;
  };
  for (NumericsProfile profile : {NumericsProfile::kExact, NumericsProfile::kFast}) {
    SCOPED_TRACE(profile == NumericsProfile::kFast ? "fast" : "exact");
    const std::vector<GenerationResult> first = run(0, profile);
    ASSERT_EQ(first.size(), 3u);
    for (int device = 1; device < count; ++device) {
      SCOPED_TRACE("cuda:" + std::to_string(device));
      const std::vector<GenerationResult> other = run(device, profile);
      ASSERT_EQ(other.size(), first.size());
      for (size_t i = 0; i < first.size(); ++i) {
        EXPECT_EQ(other[i].tokens, first[i].tokens) << "request " << i;
        ASSERT_EQ(other[i].step_logits.size(), first[i].step_logits.size());
        for (size_t t = 0; t < first[i].step_logits.size(); ++t)
          ASSERT_TRUE(SameBits(other[i].step_logits[t], first[i].step_logits[t])) << "request " << i << " token " << t;
      }
    }
  }
  EngineOptions missing;
  ASSERT_TRUE(ParseDeviceName("cuda:" + std::to_string(count), &missing).ok());
  auto refused = Engine::Load(dir, missing);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("does not exist"), std::string::npos) << refused.status().message();
}

// The benchmarks' graph replay: refused before any step ran as a graph; afterwards each replay
// repeats the last step on its inputs, so the next step's token is the one it gives without them.
TEST(CudaBackend, GraphReplayRepeatsTheLastStep) {
  SKIP_WITHOUT_GPU();
  auto model = InvarianceModel();
  ASSERT_TRUE(model);
  auto run = [&](int replays) {
    auto b = Cuda(model);
    EXPECT_TRUE(b && b->AllocateKvCache(8).ok());
    if (!b) return std::vector<int32_t>{};
    std::vector<int32_t> tokens = Prompt(9, model->config().vocab_size, 5);
    const std::vector<int32_t> blocks = {0, 1};
    int32_t cached = 0;
    if (replays > 0) {
      auto none = b->TimeLastGraph(replays);
      EXPECT_FALSE(none.ok());
      EXPECT_EQ(none.status().code(), StatusCode::kFailedPrecondition);
    }
    for (int step = 0; step < 4; ++step) {
      BatchPlan plan;
      plan.sequences.push_back({std::span<const int32_t>(tokens).subspan(cached), cached, blocks, 1});
      std::vector<int32_t> next;
      EXPECT_TRUE(b->ForwardGreedy(plan, &next).ok());
      if (next.size() != 1) return tokens;
      cached = static_cast<int32_t>(tokens.size());
      tokens.push_back(next[0]);
      if (replays > 0 && step >= 1) {  // step 0 is the prefill, without a graph
        auto secs = b->TimeLastGraph(replays);
        EXPECT_TRUE(secs.ok()) << secs.status().ToString();
        if (secs.ok()) {
          EXPECT_GT(*secs, 0.0);
        }
      }
    }
    return tokens;
  };
  EXPECT_EQ(run(0), run(3));
}

// ForwardGreedySteps chains decode steps on the device (each step's chosen tokens fed back as the
// next step's, one host wait a run): the same tokens as one ForwardGreedy a step, in both profiles,
// with graphs on and off; from a prefill step; across a context bucket's end (the 240-token
// prompt's positions pass 256, where the run must stop and a new graph take over) and block
// boundaries; and it stops where a block table ends (as a single step would, with its error).
std::vector<int32_t> GreedyRun(CudaBackend* b, const std::vector<std::vector<int32_t>>& prompts, int32_t steps,
                               int32_t chain) {
  EXPECT_TRUE(b->AllocateKvCache(64).ok());
  std::vector<std::vector<int32_t>> blocks(prompts.size());
  int32_t next_block = 0;
  for (size_t i = 0; i < prompts.size(); ++i)
    for (int32_t k = 0; k * kKvBlockSize < static_cast<int32_t>(prompts[i].size()) + steps + 1; ++k)
      blocks[i].push_back(next_block++);
  BatchPlan plan;
  for (size_t i = 0; i < prompts.size(); ++i) plan.sequences.push_back({prompts[i], 0, blocks[i], 1});
  std::vector<int32_t> out, step_tokens;
  if (chain == 0) {  // everything, the prefill included, in one ForwardGreedySteps call
    Status st = b->ForwardGreedySteps(plan, steps + 1, &out);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return out;
  }
  Status st = b->ForwardGreedy(plan, &step_tokens);  // the prefill
  EXPECT_TRUE(st.ok()) << st.ToString();
  out = step_tokens;
  std::vector<int32_t> fed = step_tokens;
  std::vector<int32_t> pos(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) pos[i] = static_cast<int32_t>(prompts[i].size());
  for (int32_t done = 0; done < steps;) {
    const int32_t run = std::min(chain, steps - done);
    BatchPlan next;
    for (size_t i = 0; i < prompts.size(); ++i)
      next.sequences.push_back({std::span<const int32_t>(&fed[i], 1), pos[i], blocks[i], 1});
    st = run == 1 ? b->ForwardGreedy(next, &step_tokens) : b->ForwardGreedySteps(next, run, &step_tokens);
    EXPECT_TRUE(st.ok()) << st.ToString();
    if (step_tokens.size() != static_cast<size_t>(run) * prompts.size()) return out;
    out.insert(out.end(), step_tokens.begin(), step_tokens.end());
    for (size_t i = 0; i < prompts.size(); ++i) {
      fed[i] = step_tokens[static_cast<size_t>(run - 1) * prompts.size() + i];
      pos[i] += run;
    }
    done += run;
  }
  return out;
}

TEST(CudaBackend, ChainedGreedyStepsEqualSingleSteps) {
  SKIP_WITHOUT_GPU();
  auto model = InvarianceModel();
  ASSERT_TRUE(model);
  const int32_t vocab = model->config().vocab_size;
  const std::vector<std::vector<int32_t>> prompts = {Prompt(30, vocab, 1), Prompt(9, vocab, 2), Prompt(240, vocab, 3)};
  constexpr int32_t kSteps = 40;
  for (NumericsProfile profile : {NumericsProfile::kExact, NumericsProfile::kFast}) {
    SCOPED_TRACE(profile == NumericsProfile::kFast ? "fast" : "exact");
    auto single = Cuda(model, true, profile);
    ASSERT_TRUE(single);
    const std::vector<int32_t> want = GreedyRun(single.get(), prompts, kSteps, 1);
    ASSERT_EQ(want.size(), static_cast<size_t>(kSteps + 1) * prompts.size());
    for (int32_t chain : {0, 7, 40}) {
      for (bool graphs : {true, false}) {
        auto b = Cuda(model, graphs, profile);
        ASSERT_TRUE(b);
        EXPECT_EQ(GreedyRun(b.get(), prompts, kSteps, chain), want) << "chain " << chain << " graphs " << graphs;
      }
    }
    // One sequence alone (the exact profile's one-launch step), chained against single steps.
    auto alone = Cuda(model, true, profile);
    auto alone_chained = Cuda(model, true, profile);
    ASSERT_TRUE(alone && alone_chained);
    EXPECT_EQ(GreedyRun(alone_chained.get(), {prompts[2]}, kSteps, 0), GreedyRun(alone.get(), {prompts[2]}, kSteps, 1));
  }
}

TEST(CudaBackend, ChainedGreedyStepsStopWhereTheTablesEnd) {
  SKIP_WITHOUT_GPU();
  auto model = InvarianceModel();
  ASSERT_TRUE(model);
  auto b = Cuda(model);
  ASSERT_TRUE(b && b->AllocateKvCache(8).ok());
  const std::vector<int32_t> prompt = Prompt(10, model->config().vocab_size, 4);
  const std::vector<int32_t> blocks = {0};  // positions 0-15
  BatchPlan plan;
  plan.sequences.push_back({prompt, 0, blocks, 1});
  std::vector<int32_t> tokens;
  ASSERT_TRUE(b->ForwardGreedySteps(plan, 6, &tokens).ok());  // positions 0-9, then 10-14
  EXPECT_EQ(tokens.size(), 6u);
  Status st = b->ForwardGreedySteps(plan, 8, &tokens);  // the eighth step would write position 16
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_EQ(b->ForwardGreedySteps(plan, 0, &tokens).code(), StatusCode::kInvalidArgument);
  plan.sequences[0].num_logits = 2;
  EXPECT_EQ(b->ForwardGreedySteps(plan, 2, &tokens).code(), StatusCode::kInvalidArgument);
}

// ForwardGreedy's tokens are the argmax of Forward's logits (lowest index on ties).
// The device sampler chooses what the host's rule (SampleTokenWithUniform) chooses, row by row
// with different rules in one call: ties, signed zeros, NaN (and rows of NaN only), infinities,
// temperatures that overflow, greedy rows, every top-k regime and top-p from 1e-6 to 1, 1 to
// 151,936 columns.
TEST(CudaSampler, ChoosesWhatTheHostRuleChooses) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(77);
  const float kInf = std::numeric_limits<float>::infinity(), kNaN = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> temperatures = {1.0f, 0.7f, 2.5f, 1e-30f, 0.0f};
  const std::vector<float> top_ps = {1.0f, 0.95f, 0.5f, 1e-6f, 0.999999f};
  int compared = 0;
  for (int32_t cols : {1, 2, 33, 100, 4099, 151936}) {
    const int32_t rows = cols > 10000 ? 6 : 40;
    std::vector<float> logits(static_cast<size_t>(rows) * cols);
    std::vector<RowSampling> rules(static_cast<size_t>(rows));
    for (int32_t r = 0; r < rows; ++r) {
      const int kind = r % 7;
      std::normal_distribution<float> normal(0.0f, kind == 5 ? 40.0f : 3.0f);
      for (int32_t c = 0; c < cols; ++c) {
        float v = normal(rng);
        if (kind == 1) v = std::round(v);
        if (kind == 2 && rng() % 7 == 0) v = rng() % 2 ? 0.0f : -0.0f;
        if (kind == 3 && rng() % 50 == 0) v = kNaN;
        if (kind == 4 && rng() % 40 == 0) v = rng() % 2 ? kInf : -kInf;
        if (kind == 6 && r % 2 == 0) v = kNaN;  // a row of NaN only
        logits[static_cast<size_t>(r) * cols + c] = v;
      }
      SamplingParams p;
      p.temperature = temperatures[static_cast<size_t>(r) % temperatures.size()];
      p.top_p = top_ps[static_cast<size_t>(r / 3) % top_ps.size()];
      const int k_choice = r % 5;
      p.top_k = k_choice == 0 ? 0 : k_choice == 1 ? 1 : k_choice == 2 ? 5 : k_choice == 3 ? cols - 1 : cols + 3;
      p.seed = static_cast<uint64_t>(r);
      rules[static_cast<size_t>(r)] = RowSamplingFor(p, 11, static_cast<uint64_t>(cols + r));
    }
    // Three times: these rules (some keep every column: the full sort), then every row greedy or
    // keeping a top-k of 1 to 2,048 (2,048 is past the candidate path's limit), then of 1 to 1,024
    // (the candidate path where there are more columns than its 4,096 slots; the row of NaN only
    // at 4,099 columns overflows it, and every column is sorted again).
    for (int pass = 0; pass < 3; ++pass) {
      if (pass >= 1) {
        for (int32_t r = 0; r < rows; ++r) {
          RowSampling& rule = rules[static_cast<size_t>(r)];
          rule.top_k = std::vector<int32_t>{1, 5, 40, pass == 1 ? 2048 : 1024}[static_cast<size_t>(r) % 4];
          if (r % 5 == 0) rule.temperature = 0.0f;
          if (rule.temperature > 0.0f && rule.uniform == 0.0f) rule.uniform = 0.5f;
        }
      }
      int path = -1;
      auto got = CudaSampleRows(logits, rows, cols, rules, 1, &path);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      EXPECT_EQ(path, pass < 2 || cols <= 4096 ? 0 : cols == 4099 ? 2 : 1) << "pass " << pass << " cols " << cols;
      ASSERT_EQ(got->size(), static_cast<size_t>(rows));
      for (int32_t r = 0; r < rows; ++r) {
        const std::span<const float> row(logits.data() + static_cast<size_t>(r) * cols, static_cast<size_t>(cols));
        const RowSampling& rule = rules[static_cast<size_t>(r)];
        EXPECT_EQ((*got)[static_cast<size_t>(r)], SampleTokenWithUniform(row, rule))
            << "pass " << pass << " cols " << cols << " row " << r << " T " << rule.temperature << " top_k "
            << rule.top_k << " top_p " << rule.top_p << " u " << rule.uniform;
        ++compared;
      }
    }
  }
  EXPECT_EQ(compared, 3 * (5 * 40 + 6));
}

// ForwardSampled's tokens are the host's rule over Forward's logits, row by row with mixed
// rules (greedy rows among them); a step of more rows than the device sampler's keys hold (257)
// falls back to the host and gives the same tokens; a wrong number of rules is refused.
TEST(CudaBackend, ForwardSampledMatchesTheHostRule) {
  SKIP_WITHOUT_GPU();
  auto model = InvarianceModel();
  ASSERT_TRUE(model);
  const int32_t vocab = model->config().vocab_size;
  auto run = [&](int32_t sequences) {
    SCOPED_TRACE(std::to_string(sequences) + " sequences");
    auto a = Cuda(model);
    auto b = Cuda(model);
    ASSERT_TRUE(a && b);
    ASSERT_TRUE(a->AllocateKvCache(2 * sequences + 8).ok());
    ASSERT_TRUE(b->AllocateKvCache(2 * sequences + 8).ok());
    std::vector<std::vector<int32_t>> prompts, blocks;
    for (int32_t i = 0; i < sequences; ++i) {
      prompts.push_back(Prompt(1 + i % 20, vocab, 100 + static_cast<uint32_t>(i)));
      blocks.push_back({2 * i, 2 * i + 1});
    }
    BatchPlan plan;
    std::vector<RowSampling> rules;
    for (int32_t i = 0; i < sequences; ++i) {
      const int32_t n = static_cast<int32_t>(prompts[static_cast<size_t>(i)].size());
      const int32_t logits_rows = i % 3 == 0 ? std::min(n, 2) : 1;
      plan.sequences.push_back({prompts[static_cast<size_t>(i)], 0, blocks[static_cast<size_t>(i)], logits_rows});
      for (int32_t k = 0; k < logits_rows; ++k) {
        SamplingParams p;
        p.temperature = (i + k) % 4 == 0 ? 0.0f : 0.5f + 0.25f * static_cast<float>((i + k) % 3);
        p.top_k = (i + k) % 5 == 1 ? 7 : 0;
        p.top_p = (i + k) % 2 == 0 ? 0.9f : 1.0f;
        p.seed = 5;
        rules.push_back(RowSamplingFor(p, static_cast<uint64_t>(i), static_cast<uint64_t>(n + k)));
      }
    }
    std::vector<float> logits;
    std::vector<int32_t> sampled;
    ASSERT_TRUE(a->Forward(plan, &logits).ok());
    Status s = b->ForwardSampled(plan, rules, &sampled);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_EQ(sampled.size(), rules.size());
    for (size_t r = 0; r < rules.size(); ++r) {
      const std::span<const float> row(logits.data() + r * vocab, static_cast<size_t>(vocab));
      EXPECT_EQ(sampled[r], SampleTokenWithUniform(row, rules[r])) << "row " << r;
    }
    std::vector<RowSampling> short_rules(rules.begin(), rules.end() - 1);
    Status bad = b->ForwardSampled(plan, short_rules, &sampled);
    EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument) << bad.ToString();
  };
  run(6);
  run(257);
}

// On a vocabulary of more columns than the candidate path's slots (6,000), rows that keep at most
// 1,024 ranks (greedy, top-k 1 to 1,024, with and without top-p) are sampled from their candidates
// only: the host's rule over Forward's logits, with the candidate path off, on, and on followed by
// the overflow fallback (every column sorted again).
TEST(CudaBackend, ForwardSampledByCandidatesMatchesTheHostRule) {
  SKIP_WITHOUT_GPU();
  SynthSpec spec;
  spec.vocab = 6000;
  spec.hidden = 128;
  spec.intermediate = 256;
  spec.heads = 2;
  spec.kv_heads = 1;
  spec.head_dim = 64;
  spec.layers = 1;
  auto model = SynthModel("sample_candidates", spec);
  ASSERT_TRUE(model);
  const int32_t vocab = model->config().vocab_size;
  constexpr int32_t kSequences = 24;
  std::vector<std::vector<int32_t>> prompts, blocks;
  for (int32_t i = 0; i < kSequences; ++i) {
    prompts.push_back(Prompt(1 + i % 9, vocab, 700 + static_cast<uint32_t>(i)));
    blocks.push_back({i});
  }
  BatchPlan plan;
  std::vector<RowSampling> rules;
  for (int32_t i = 0; i < kSequences; ++i) {
    plan.sequences.push_back({prompts[static_cast<size_t>(i)], 0, blocks[static_cast<size_t>(i)], 1});
    SamplingParams p;
    p.temperature = i % 6 == 0 ? 0.0f : 0.6f + 0.3f * static_cast<float>(i % 4);
    p.top_k = std::vector<int32_t>{1, 7, 40, 1024, 300}[static_cast<size_t>(i) % 5];
    p.top_p = i % 3 == 0 ? 0.9f : 1.0f;
    p.seed = 23;
    rules.push_back(RowSamplingFor(p, static_cast<uint64_t>(i), 0));
  }
  auto reference = Cuda(model);
  ASSERT_TRUE(reference && reference->AllocateKvCache(kSequences).ok());
  std::vector<float> logits;
  ASSERT_TRUE(reference->Forward(plan, &logits).ok());
  std::vector<int32_t> want;
  for (size_t r = 0; r < rules.size(); ++r)
    want.push_back(SampleTokenWithUniform(std::span<const float>(logits.data() + r * vocab, static_cast<size_t>(vocab)),
                                          rules[r]));
  std::set<int32_t> distinct(want.begin(), want.end());
  EXPECT_GT(distinct.size(), 4u);  // the rows do not all fall on one token
  for (int mode : {0, 1, 2}) {
    SCOPED_TRACE("candidates mode " + std::to_string(mode));
    CudaTuning tuning;
    tuning.sample_candidates = mode;
    auto b = Cuda(model, true, NumericsProfile::kExact, tuning);
    ASSERT_TRUE(b && b->AllocateKvCache(kSequences).ok());
    std::vector<int32_t> got;
    Status s = b->ForwardSampled(plan, rules, &got);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(got, want);
  }
}

TEST(CudaBackend, ForwardGreedyMatchesArgmaxOfLogits) {
  SKIP_WITHOUT_GPU();
  auto model = InvarianceModel();
  ASSERT_TRUE(model);
  const int32_t vocab = model->config().vocab_size;
  auto a = Cuda(model);
  auto b = Cuda(model);
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->AllocateKvCache(64).ok());
  ASSERT_TRUE(b->AllocateKvCache(64).ok());
  std::vector<int32_t> blocks0 = {0, 1, 2}, blocks1 = {3, 4, 5};
  std::vector<int32_t> p0 = Prompt(30, vocab, 1), p1 = Prompt(9, vocab, 2);
  BatchPlan plan;
  plan.sequences.push_back({p0, 0, blocks0, 3});
  plan.sequences.push_back({p1, 0, blocks1, 1});
  std::vector<float> logits;
  std::vector<int32_t> greedy;
  ASSERT_TRUE(a->Forward(plan, &logits).ok());
  ASSERT_TRUE(b->ForwardGreedy(plan, &greedy).ok());
  ASSERT_EQ(greedy.size(), 4u);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(greedy[r], Argmax(logits.data() + r * vocab, vocab)) << "row " << r;
}

// The device's argmax kernel on rows built to catch its edge cases, at vocabularies whose rows it
// reads as float4 (640, 1,000, 151,936: chunks of a multiple of 4 columns, some empty) and as
// scalars (1,001, 3): ties take the lowest index, also across chunks and inside one float4; NaN is
// never taken; a row of NaN gives 0, a row of -inf its first index; the maximum in the last
// column.
TEST(CudaBackend, ArgmaxTakesTheLowestIndexOfTheLargest) {
  SKIP_WITHOUT_GPU();
  for (int32_t cols : {640, 1000, 151936, 1001, 3}) {
    SCOPED_TRACE("cols=" + std::to_string(cols));
    std::mt19937 rng(static_cast<uint32_t>(cols));
    std::uniform_real_distribution<float> uniform(-8.0f, 8.0f);
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    std::vector<std::vector<float>> rows;
    std::vector<int32_t> want;
    auto random_row = [&] {
      std::vector<float> r(static_cast<size_t>(cols));
      for (float& v : r) v = uniform(rng);
      return r;
    };
    std::vector<float> r = random_row();  // one largest value inside
    r[static_cast<size_t>(cols / 3)] = 100.0f;
    rows.push_back(r), want.push_back(cols / 3);
    r = random_row();  // ties: the lowest index, far apart and inside one float4
    int32_t lowest = cols;
    for (int32_t i : {cols - 1, cols / 2, std::min(cols - 1, 5), std::min(cols - 1, 6)}) {
      r[static_cast<size_t>(i)] = 50.0f;
      lowest = std::min(lowest, i);
    }
    rows.push_back(r), want.push_back(lowest);
    r = random_row();  // ties at both ends of the row
    r.front() = 60.0f;
    r.back() = 60.0f;
    rows.push_back(r), want.push_back(0);
    r = random_row();  // NaN everywhere but one value, NaN first
    for (float& v : r) v = nan;
    r[static_cast<size_t>(cols - 1)] = -3.0f;
    rows.push_back(r), want.push_back(cols - 1);
    r = random_row();  // NaN beside a larger value does not hide it
    r[0] = nan;
    r[static_cast<size_t>(cols / 2)] = nan;
    r[static_cast<size_t>(cols - 1)] = 70.0f;
    rows.push_back(r), want.push_back(cols - 1);
    rows.push_back(std::vector<float>(static_cast<size_t>(cols), nan)), want.push_back(0);
    rows.push_back(std::vector<float>(static_cast<size_t>(cols), -inf)), want.push_back(0);
    r = random_row();  // +inf wins over every finite value
    r[static_cast<size_t>(cols / 4)] = inf;
    rows.push_back(r), want.push_back(cols / 4);
    // The rows 1, 5 and 17 times over: 8, 40 and 136 rows, so 64, 26 and 7 chunks per row on a
    // 132-multiprocessor card (LaunchArgmax gives a row fewer chunks the more rows there are).
    for (int repeat : {1, 5, 17}) {
      SCOPED_TRACE("rows=" + std::to_string(repeat * rows.size()));
      std::vector<float> flat;
      std::vector<int32_t> want_all;
      for (int k = 0; k < repeat; ++k) {
        for (const auto& row : rows) flat.insert(flat.end(), row.begin(), row.end());
        want_all.insert(want_all.end(), want.begin(), want.end());
      }
      auto got = CudaArgmax(flat, static_cast<int32_t>(want_all.size()), cols);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      ASSERT_EQ(got->size(), want_all.size());
      for (size_t i = 0; i < want_all.size(); ++i) EXPECT_EQ((*got)[i], want_all[i]) << "row " << i;
    }
  }
}

TEST(CudaBackend, RejectsBadPlans) {
  SKIP_WITHOUT_GPU();
  auto model = InvarianceModel();
  ASSERT_TRUE(model);
  auto gpu = Cuda(model);
  ASSERT_TRUE(gpu);
  std::vector<int32_t> toks = {1, 2, 3};
  std::vector<int32_t> blocks = {0};
  BatchPlan plan;
  plan.sequences.push_back({toks, 0, blocks, 1});
  std::vector<float> logits;
  EXPECT_EQ(gpu->Forward(plan, &logits).code(), StatusCode::kFailedPrecondition);  // no KV cache yet
  ASSERT_TRUE(gpu->AllocateKvCache(4).ok());
  std::vector<int32_t> bad_blocks = {7};
  plan.sequences[0].block_table = bad_blocks;
  EXPECT_EQ(gpu->Forward(plan, &logits).code(), StatusCode::kInvalidArgument);
  std::vector<int32_t> bad_tokens = {1, 100000};
  plan.sequences[0] = {bad_tokens, 0, blocks, 1};
  EXPECT_EQ(gpu->Forward(plan, &logits).code(), StatusCode::kInvalidArgument);
  EXPECT_GT(gpu->KvBlocksForFreeMemory(0, 0), 0);
  EXPECT_EQ(gpu->KvBlocksForFreeMemory(gpu->KvBytesPerBlock() * 3, 0), 3);
  EXPECT_NE(gpu->device().find("cuda:0"), std::string::npos);
}


// ---- The fast profile (docs/fast_profile.md): tensor-core products, batch-invariant on one GPU
// architecture. Held to itself by equality (alone vs in batches, prefill vs decode, chunking,
// warp tiles, graphs) and to the exact profile by a tolerance.

std::unique_ptr<CudaBackend> Fast(std::shared_ptr<const Model> m, bool graphs = true, const CudaTuning& tuning = {}) {
  return Cuda(std::move(m), graphs, NumericsProfile::kFast, tuning);
}

// Largest |a - b| over the largest |a|: the fast profile's sums differ from the canonical ones
// only in rounding (its products are exact), so logits agree to a few ulps of their scale.
double RelativeMaxDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(static_cast<double>(a[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

// Every position's logits of a prefill and 12 decode steps (the exact profile's tokens fed to
// both) within 2e-5 of the scale of the CPU's; the profile names the architecture; the products
// ran as FastLinearKernel. A wrong piece, permutation or split would be off by far more.
TEST(CudaFastProfile, CloseToExactAndNamedForItsArchitecture) {
  SKIP_WITHOUT_GPU();
  SynthSpec s;
  s.vocab = 1000;
  s.hidden = 160;  // padded columns
  s.intermediate = 1408;
  s.heads = 5;
  s.kv_heads = 1;
  s.head_dim = 32;
  s.layers = 2;
  auto model = SynthModel("fast_close", s);
  ASSERT_TRUE(model);
  auto cpu = Cpu(model);
  auto fast = Fast(model);
  ASSERT_TRUE(cpu && fast);
  EXPECT_EQ(cpu->numerics_profile(), "exact");
  EXPECT_EQ(fast->numerics_profile().rfind("fast5-sm", 0), 0u) << fast->numerics_profile();
  const int32_t vocab = model->config().vocab_size;
  Driver dc(cpu.get(), 64), dg(fast.get(), 64);
  Seq sc, sg;
  sc.tokens = sg.tokens = Prompt(70, vocab, 11);
  std::vector<float> lc = dc.Step({{&sc, 70, 70}});
  std::vector<float> lg = dg.Step({{&sg, 70, 70}});
  EXPECT_LT(RelativeMaxDiff(lc, lg), 2e-5) << "prefill";
  EXPECT_FALSE(SameBits(lc, lg)) << "the fast profile gave the exact profile's bits: did it run?";
  for (int32_t step = 0; step < 12; ++step) {
    const int32_t next = Argmax(lc.data() + lc.size() - vocab, vocab);
    sc.tokens.push_back(next);
    sg.tokens.push_back(next);
    lc = dc.Step({{&sc, 1, 1}});
    lg = dg.Step({{&sg, 1, 1}});
    EXPECT_LT(RelativeMaxDiff(lc, lg), 2e-5) << "decode step " << step;
  }
  EXPECT_GT(fast->launch_stats().fast_linear_launches, 0);
}

// The fast profile on `model`: within 2e-5 of the CPU's exact logits over a 40-token prefill,
// whole prefill equal in every bit to token-by-token, and the request's 256 greedy steps beside
// 20 others equal to its steps alone.
void ExpectFastCloseAndInvariant(std::shared_ptr<const Model> model) {
  const int32_t vocab = model->config().vocab_size;
  const std::vector<int32_t> prompt = Prompt(40, vocab, 23);
  auto cpu = Cpu(model);
  auto fast = Fast(model);
  ASSERT_TRUE(cpu && fast);
  std::vector<float> whole_cpu, whole_fast;
  {
    Driver dc(cpu.get(), 64), dg(fast.get(), 64);
    Seq sc, sg;
    sc.tokens = sg.tokens = prompt;
    whole_cpu = dc.Step({{&sc, 40, 40}});
    whole_fast = dg.Step({{&sg, 40, 40}});
  }
  EXPECT_LT(RelativeMaxDiff(whole_cpu, whole_fast), 2e-5);
  EXPECT_FALSE(SameBits(whole_cpu, whole_fast)) << "the fast profile gave the exact profile's bits: did it run?";
  {
    auto f = Fast(model);
    Driver d(f.get(), 64);
    Seq seq;
    seq.tokens = prompt;
    std::vector<float> all;
    for (int32_t at = 0; at < 40; ++at) {
      std::vector<float> l = d.Step({{&seq, 1, 1}});
      all.insert(all.end(), l.begin(), l.end());
    }
    EXPECT_TRUE(SameBits(whole_fast, all)) << "token by token";
  }
  std::vector<std::vector<float>> alone_logits, batched_logits;
  std::vector<int32_t> alone_tokens, batched_tokens;
  auto alone = Fast(model);
  RunNeedle(alone.get(), prompt, vocab, 0, 1, &alone_logits, &alone_tokens);
  auto batched = Fast(model);
  RunNeedle(batched.get(), prompt, vocab, 20, 77, &batched_logits, &batched_tokens);
  ASSERT_EQ(alone_tokens, batched_tokens);
  for (size_t i = 0; i < alone_logits.size(); ++i)
    ASSERT_TRUE(SameBits(alone_logits[i], batched_logits[i])) << "step " << i;
}

// The down product of a 64-wide model with 6,144 intermediate columns has one 64-row tile and
// 384 steps of 16 columns (3 per warp in 16 slices), so it runs in FastLinearSplits' most slices,
// 16: a cluster of 16 blocks adding their sums through distributed shared memory.
TEST(CudaFastProfile, SixteenSliceClustersAreCloseAndInvariant) {
  SKIP_WITHOUT_GPU();
  SynthSpec s;
  s.vocab = 640;
  s.hidden = 64;
  s.intermediate = 6144;
  s.heads = 2;
  s.kv_heads = 1;
  s.head_dim = 32;
  s.layers = 1;
  auto model = SynthModel("fast_clusters", s);
  ASSERT_TRUE(model);
  ExpectFastCloseAndInvariant(model);
}

// A 768-wide model: q|k|v (896 rows), gate|up (256) and the lm_head (640) each run in 2 slices
// of 24 steps, so the norm's sums of squares are added across slices as well as across warps.
TEST(CudaFastProfile, NormAcrossSlicesIsCloseAndInvariant) {
  SKIP_WITHOUT_GPU();
  SynthSpec s;
  s.vocab = 640;
  s.hidden = 768;
  s.intermediate = 128;
  s.heads = 12;
  s.kv_heads = 1;
  s.head_dim = 64;
  s.layers = 2;
  auto model = SynthModel("fast_norm_slices", s);
  ASSERT_TRUE(model);
  ExpectFastCloseAndInvariant(model);
}

// Three sequences of different lengths prefilled in one step, then 24 batched decode steps (each
// token its own position and block table): the logits of every step.
std::vector<std::vector<float>> PrefillThreeThenDecode(Backend* backend, int32_t vocab) {
  std::vector<std::vector<float>> all;
  Driver d(backend, 64);
  Seq a, b, c;
  a.tokens = Prompt(45, vocab, 1);
  b.tokens = Prompt(17, vocab, 2);
  c.tokens = Prompt(30, vocab, 3);
  all.push_back(d.Step({{&a, 45, 1}, {&b, 17, 1}, {&c, 30, 1}}));
  for (int step = 0; step < 24; ++step) {
    for (Seq* q : {&a, &b, &c}) q->tokens.push_back((step * 7919 + static_cast<int32_t>(q->tokens.size())) % vocab);
    all.push_back(d.Step({{&a, 1, 1}, {&b, 1, 1}, {&c, 1, 1}}));
  }
  return all;
}

// The invariance model and three whose products take every sliced path: a 768-wide model's
// q|k|v, gate|up and lm_head in 2 slices with the norm (and o with the residual), a 1,152-wide
// model's in 3 with the norm, and a 128-wide model's down over 1,152 columns in 3 with the residual.
std::vector<std::shared_ptr<const Model>> SlicedProductModels(const std::string& prefix) {
  std::vector<std::shared_ptr<const Model>> models = {InvarianceModel()};
  SynthSpec s;
  s.vocab = 640;
  s.hidden = 768;
  s.intermediate = 128;
  s.heads = 12;
  s.kv_heads = 1;
  s.head_dim = 64;
  models.push_back(SynthModel(prefix + "_768", s));
  s.vocab = 160;
  s.hidden = 1152;
  s.intermediate = 64;
  s.heads = 18;
  models.push_back(SynthModel(prefix + "_1152", s));
  s.vocab = 512;
  s.hidden = 128;
  s.intermediate = 1152;
  s.heads = 2;
  models.push_back(SynthModel(prefix + "_128", s));
  return models;
}

// Merged slices (fast_shapes.h, FastMergesSlices): a product of 2 or 3 short K slices runs them in
// one block of 16 or 24 warps instead of a cluster, adding the slices' sums in the same order.
// Against clusters, on models whose products take each path: 2 slices with the residual (a
// 768-wide model's o), with the norm, the rotary epilogue and SiLU (its q|k|v, gate|up and
// lm_head), 3 slices with the norm (a 1,152-wide model's q|k|v, gate|up and lm_head) and with the
// residual (a 128-wide model's down over 1,152 columns); and the invariance model. Three sequences prefilled in
// one step (blocks of up to 32 tokens, some merged, 64-row ones still clusters), then 24 batched
// decode steps: logits identical in every bit, and the merged run did launch merged blocks.
TEST(CudaFastProfile, MergedSlicesKeepBits) {
  SKIP_WITHOUT_GPU();
  std::vector<std::shared_ptr<const Model>> models = SlicedProductModels("fast_merge");
  for (const auto& model : models) {
    ASSERT_TRUE(model);
    const int32_t vocab = model->config().vocab_size;
    SCOPED_TRACE("hidden=" + std::to_string(model->config().hidden_size));
    auto run = [&](int merge, int64_t* merged_launches) {
      CudaTuning tuning;
      tuning.fast_merge_max_slices = merge;
      auto fast = Fast(model, true, tuning);
      std::vector<std::vector<float>> all;
      if (fast) all = PrefillThreeThenDecode(fast.get(), vocab);
      *merged_launches = fast ? fast->launch_stats().fast_merged_launches : 0;
      return all;
    };
    int64_t merged_in_merged = 0, merged_in_clusters = 0;
    const std::vector<std::vector<float>> merged = run(3, &merged_in_merged), clusters = run(0, &merged_in_clusters);
    ASSERT_EQ(merged.size(), 25u);
    ASSERT_EQ(clusters.size(), 25u);
    EXPECT_GT(merged_in_merged, 0);
    EXPECT_EQ(merged_in_clusters, 0);
    for (size_t i = 0; i < merged.size(); ++i) ASSERT_TRUE(SameBits(merged[i], clusters[i])) << "step " << i;
  }
}

// Products with the norm (q|k|v, gate|up; the lm_head where FastLinearKernel runs it) stage the
// norm weights in shared memory before their wait, or read them from global memory at every step
// (fast_linear.cu, FastShape::kNormOffset): the same values in the same order, so the same bits.
// Norm rows of 160, 1152 and 1536 floats (1536 does not fit beside the rings of 80 x 32 blocks,
// which keep the global loads), prefill and decode, unsliced, merged and clustered products.
TEST(CudaFastProfile, StagedNormWeightsKeepBits) {
  SKIP_WITHOUT_GPU();
  std::vector<std::shared_ptr<const Model>> models = {InvarianceModel()};
  {
    SynthSpec s;
    s.vocab = 160;
    s.hidden = 1152;
    s.intermediate = 64;
    s.heads = 18;
    s.kv_heads = 1;
    s.head_dim = 64;
    models.push_back(SynthModel("fast_norm_1152", s));
    s.vocab = 256;
    s.hidden = 1536;
    s.intermediate = 128;
    s.heads = 24;
    models.push_back(SynthModel("fast_norm_1536", s));
  }
  for (const auto& model : models) {
    ASSERT_TRUE(model);
    const int32_t vocab = model->config().vocab_size;
    SCOPED_TRACE("hidden=" + std::to_string(model->config().hidden_size));
    auto run = [&](bool staged, int64_t* staged_launches) {
      CudaTuning tuning;
      tuning.fast_norm_staged = staged;
      auto fast = Fast(model, true, tuning);
      std::vector<std::vector<float>> all;
      if (fast) all = PrefillThreeThenDecode(fast.get(), vocab);
      *staged_launches = fast ? fast->launch_stats().fast_norm_staged_launches : 0;
      return all;
    };
    int64_t in_staged = 0, in_global = 0;
    const std::vector<std::vector<float>> staged = run(true, &in_staged), global = run(false, &in_global);
    ASSERT_EQ(staged.size(), 25u);
    ASSERT_EQ(global.size(), 25u);
    EXPECT_GT(in_staged, 0);
    EXPECT_EQ(in_global, 0);
    for (size_t i = 0; i < staged.size(); ++i) ASSERT_TRUE(SameBits(staged[i], global[i])) << "step " << i;
  }
}

// Weights streamed past activations held in shared memory (fast_linear.cu, FastStreamKernel; the
// lm_head's kernel at the real shapes) against FastLinearKernel, forced onto every product it can
// run (unsliced, store, bias or residual epilogue, up to 64 tokens; 32-token tiles in units of 2
// and 3 row tiles): each warp computes the 8
// warps' sums one after another and adds them in warp order, so the bits must not change. Models
// of 4, 10, 12, 32 and 48 steps (fewer steps than warps, and steps not a multiple of 8), with
// and without the norm (the lm_head, the residual products). 40 sequences prefilled in one step
// (the lm_head on 40 tokens: two 32-token tiles), then decode steps of 40, 12 and 5 sequences
// (tiles of 32, 16 and 8 tokens) and a 16-token chunk with every position's logits.
TEST(CudaFastProfile, StreamedWeightsKeepBits) {
  SKIP_WITHOUT_GPU();
  std::vector<std::shared_ptr<const Model>> models = {InvarianceModel()};
  {
    SynthSpec s;
    models.push_back(SynthModel("fast_stream_160", s));
    s.vocab = 300;
    s.hidden = 64;
    s.intermediate = 96;
    s.heads = 1;
    s.kv_heads = 1;
    s.head_dim = 64;
    models.push_back(SynthModel("fast_stream_64", s));
    s.vocab = 1000;
    s.hidden = 192;
    s.heads = 3;
    models.push_back(SynthModel("fast_stream_192", s));
    s.vocab = 640;
    s.hidden = 512;
    s.intermediate = 128;
    s.heads = 4;
    models.push_back(SynthModel("fast_stream_512", s));
    s.vocab = 2048;  // an unsliced lm_head over 48 steps
    s.hidden = 768;
    s.intermediate = 64;
    s.heads = 12;
    models.push_back(SynthModel("fast_stream_768", s));
  }
  for (const auto& model : models) {
    ASSERT_TRUE(model);
    const int32_t vocab = model->config().vocab_size;
    SCOPED_TRACE("hidden=" + std::to_string(model->config().hidden_size));
    auto run = [&](int mode, int row_tiles, int64_t* stream_launches) {
      CudaTuning tuning;
      tuning.fast_stream_mode = mode;
      tuning.fast_stream_row_tiles = row_tiles;
      std::vector<std::vector<float>> all;
      *stream_launches = 0;
      if (auto fast = Fast(model, true, tuning)) {
        Driver d(fast.get(), 256);
        std::vector<Seq> seqs(40);
        std::vector<Driver::Part> prefill;
        for (int i = 0; i < 40; ++i) {
          const int32_t n = 3 + (i * 13) % 38;
          seqs[i].tokens = Prompt(n, vocab, 300 + i);
          prefill.push_back({&seqs[i], n, 1});
        }
        all.push_back(d.Step(prefill));
        for (int32_t count : {40, 12, 5}) {
          std::vector<Driver::Part> parts;
          for (int i = 0; i < count; ++i) {
            seqs[i].tokens.push_back((count * 7919 + static_cast<int32_t>(seqs[i].tokens.size())) % vocab);
            parts.push_back({&seqs[i], 1, 1});
          }
          all.push_back(d.Step(parts));
        }
        for (int k = 0; k < 16; ++k) seqs[39].tokens.push_back((k * 31 + 7) % vocab);
        all.push_back(d.Step({{&seqs[39], 16, 16}}));
        *stream_launches = fast->launch_stats().fast_stream_launches;
      }
      return all;
    };
    int64_t never = 0;
    const std::vector<std::vector<float>> without = run(0, 0, &never);
    ASSERT_EQ(without.size(), 5u);
    EXPECT_EQ(never, 0);
    for (int row_tiles : {2, 3}) {
      SCOPED_TRACE("row_tiles=" + std::to_string(row_tiles));
      int64_t streamed = 0;
      const std::vector<std::vector<float>> with = run(2, row_tiles, &streamed);
      ASSERT_EQ(with.size(), 5u);
      EXPECT_GT(streamed, 0);
      for (size_t i = 0; i < with.size(); ++i) ASSERT_TRUE(SameBits(with[i], without[i])) << "step " << i;
    }
  }
}

// Late blocks (kernels.h, LatePrefetchEarlyBlocks): the first blocks of gate|up (fast profile)
// and of grouped attention (both profiles) ask L2 for the later blocks' first weights and K/V
// pages. A prefetch must move no bit and touch no address outside those buffers: 40 sequences of
// mixed lengths prefilled in one step, then decode steps of 40, 12 and 5 (grouped attention runs
// at 40: fewer multiprocessors than KV heads x tokens times the group), with no block
// prefetching, the first 1 and 7 forced, and the default rule; logits identical in every bit,
// and the prefetching runs did launch kernels that prefetched.
TEST(CudaFastProfile, LatePrefetchKeepsBits) {
  SKIP_WITHOUT_GPU();
  std::vector<std::shared_ptr<const Model>> models = {InvarianceModel()};
  {
    SynthSpec s;  // Qwen2.5-0.5B's heads: 14 of 64 over 2 KV heads
    s.vocab = 1000;
    s.hidden = 896;
    s.intermediate = 1216;
    s.heads = 14;
    s.kv_heads = 2;
    s.head_dim = 64;
    models.push_back(SynthModel("late_prefetch_896", s));
  }
  for (const auto& model : models) {
    ASSERT_TRUE(model);
    const int32_t vocab = model->config().vocab_size;
    SCOPED_TRACE("hidden=" + std::to_string(model->config().hidden_size));
    for (const NumericsProfile profile : {NumericsProfile::kFast, NumericsProfile::kExact}) {
      SCOPED_TRACE(profile == NumericsProfile::kFast ? "fast" : "exact");
      auto run = [&](int early, int64_t* launches) {
        CudaTuning tuning;
        tuning.late_prefetch_blocks = early;
        std::vector<std::vector<float>> all;
        *launches = 0;
        if (auto backend = Cuda(model, true, profile, tuning)) {
          Driver d(backend.get(), 256);
          std::vector<Seq> seqs(40);
          std::vector<Driver::Part> prefill;
          for (int i = 0; i < 40; ++i) {
            const int32_t n = 3 + (i * 13) % 38;
            seqs[i].tokens = Prompt(n, vocab, 500 + i);
            prefill.push_back({&seqs[i], n, 1});
          }
          all.push_back(d.Step(prefill));
          for (int32_t count : {40, 40, 12, 5}) {
            std::vector<Driver::Part> parts;
            for (int i = 0; i < count; ++i) {
              seqs[i].tokens.push_back((count * 7919 + static_cast<int32_t>(seqs[i].tokens.size())) % vocab);
              parts.push_back({&seqs[i], 1, 1});
            }
            all.push_back(d.Step(parts));
          }
          *launches = backend->launch_stats().late_prefetch_launches;
        }
        return all;
      };
      int64_t none = 0;
      const std::vector<std::vector<float>> without = run(0, &none);
      ASSERT_EQ(without.size(), 5u);
      EXPECT_EQ(none, 0);
      for (int early : {1, 7, -1}) {
        SCOPED_TRACE("early=" + std::to_string(early));
        int64_t launches = 0;
        const std::vector<std::vector<float>> with = run(early, &launches);
        ASSERT_EQ(with.size(), 5u);
        EXPECT_GT(launches, 0);
        for (size_t i = 0; i < with.size(); ++i) ASSERT_TRUE(SameBits(with[i], without[i])) << "step " << i;
      }
    }
  }
}

// The needle alone and inside batches of 1 to 64 others (so token tiles of 16, 32 and 64 rows,
// and several of them): identical logits and tokens, 256 greedy steps.
TEST(CudaFastProfile, NeedleAloneEqualsNeedleInBatches) {
  SKIP_WITHOUT_GPU();
  auto model = InvarianceModel();
  ASSERT_TRUE(model);
  const int32_t vocab = model->config().vocab_size;
  const std::vector<int32_t> needle_prompt = Prompt(45, vocab, 99);
  auto fast = Fast(model);
  ASSERT_TRUE(fast);
  std::vector<std::vector<float>> alone_logits;
  std::vector<int32_t> alone_tokens;
  RunNeedle(fast.get(), needle_prompt, vocab, 0, 1, &alone_logits, &alone_tokens);
  ASSERT_EQ(alone_tokens.size(), static_cast<size_t>(kNeedleTokens + 1));
  for (int32_t others : {1, 3, 17, 31, 40, 64}) {
    SCOPED_TRACE("others=" + std::to_string(others));
    auto batched = Fast(model);
    std::vector<std::vector<float>> logits;
    std::vector<int32_t> tokens;
    RunNeedle(batched.get(), needle_prompt, vocab, others, 2000 + others, &logits, &tokens);
    ASSERT_EQ(tokens, alone_tokens);
    for (size_t s = 0; s < logits.size(); ++s) ASSERT_TRUE(SameBits(alone_logits[s], logits[s])) << "step " << s;
  }
}

// Rotary and the KV store in the q|k|v product's epilogue (the fast profile's default) against
// the rotary kernel: three sequences of different lengths prefilled in one step, then 24 batched
// decode steps (each token its own position and block table), logits identical in every bit.
TEST(CudaFastProfile, RopeInTheProductKeepsBits) {
  SKIP_WITHOUT_GPU();
  auto model = InvarianceModel();
  ASSERT_TRUE(model);
  const int32_t vocab = model->config().vocab_size;
  auto run = [&](bool fused) {
    CudaTuning tuning;
    tuning.fast_rope_fused = fused;
    auto fast = Fast(model, true, tuning);
    return fast ? PrefillThreeThenDecode(fast.get(), vocab) : std::vector<std::vector<float>>{};
  };
  const std::vector<std::vector<float>> fused = run(true), separate = run(false);
  ASSERT_EQ(fused.size(), 25u);
  ASSERT_EQ(separate.size(), 25u);
  for (size_t i = 0; i < fused.size(); ++i) ASSERT_TRUE(SameBits(fused[i], separate[i])) << "step " << i;
}

// Prefill-sized products on wgmma (fast_wgmma.cuh) against FastLinearKernel: the same order of
// the sums, so the same bits, with the default rule and every block shape (1 to 4
// warpgroups). Models whose products take every path: unsliced (the invariance
// model), 2 slices (a 768-wide model's q|k|v with the norm and the rotary epilogue, its o with
// the residual), 3 slices (a 1,152-wide model's, with the norm; a 128-wide model's down over
// 1,152 columns), 16 slices (a 64-wide model's down over 6,144 columns), the lm_head with every
// position's logits (its rows gathered). Three sequences of 300, 129 and 45 tokens prefilled in
// one step (474 token rows: four 128-token tiles, the last partly filled), a 200-token one
// prefilled whole and in chunks of 16 (FastLinearKernel), then batched decode steps: logits
// identical in every bit at every block shape and cluster size, and the wgmma run did launch
// wgmma products.
TEST(CudaFastProfile, WgmmaPrefillKeepsBits) {
  SKIP_WITHOUT_GPU();
  std::vector<std::shared_ptr<const Model>> models = SlicedProductModels("fast_wgmma");
  {
    SynthSpec s;
    s.vocab = 640;
    s.hidden = 64;
    s.intermediate = 6144;
    s.heads = 2;
    s.kv_heads = 1;
    s.head_dim = 32;
    models.push_back(SynthModel("fast_wgmma_64", s));
  }
  for (const auto& model : models) {
    ASSERT_TRUE(model);
    const int32_t vocab = model->config().vocab_size;
    SCOPED_TRACE("hidden=" + std::to_string(model->config().hidden_size));
    // Warpgroups 0: the default rule, unsliced products only (here from 16 columns up).
    auto run = [&](int min_tokens, int64_t* wgmma_launches, int warpgroups = 0, int cluster = 1) {
      CudaTuning tuning;
      tuning.fast_wgmma_min_tokens = min_tokens;
      tuning.fast_wgmma_min_cols = 16;
      tuning.fast_wgmma_warpgroups = warpgroups;
      tuning.fast_wgmma_cluster = cluster;
      auto fast = Fast(model, true, tuning);
      std::vector<std::vector<float>> all;
      if (!fast) return all;
      Driver d(fast.get(), 128);
      Seq a, b, c, whole;
      a.tokens = Prompt(300, vocab, 11);
      b.tokens = Prompt(129, vocab, 12);
      c.tokens = Prompt(45, vocab, 13);
      whole.tokens = Prompt(200, vocab, 14);
      all.push_back(d.Step({{&a, 300, 300}, {&b, 129, 129}, {&c, 45, 45}}));
      all.push_back(d.Step({{&whole, 200, 200}}));
      for (int step = 0; step < 6; ++step) {
        for (Seq* q : {&a, &b, &c, &whole})
          q->tokens.push_back((step * 7919 + static_cast<int32_t>(q->tokens.size())) % vocab);
        all.push_back(d.Step({{&a, 1, 1}, {&b, 1, 1}, {&c, 1, 1}, {&whole, 1, 1}}));
      }
      *wgmma_launches = fast->launch_stats().fast_wgmma_launches;
      return all;
    };
    int64_t with = 0, without = 0;
    const std::vector<std::vector<float>> wgmma = run(128, &with), kernel = run(0, &without);
    ASSERT_EQ(wgmma.size(), 8u);
    ASSERT_EQ(kernel.size(), 8u);
    EXPECT_GT(with, 0);
    EXPECT_EQ(without, 0);
    for (size_t i = 0; i < wgmma.size(); ++i) ASSERT_TRUE(SameBits(wgmma[i], kernel[i])) << "step " << i;
    // Every block shape (warpgroups a block; 3 and 4 run only the unsliced products, the others
    // take 2), and blocks of 1 in clusters of 2 and 4 sharing the pieces (row blocks padded to
    // whole clusters: q|k|v of the 64-wide model is 2 row blocks, so a cluster of 4 has 2 empty).
    for (const auto& [warpgroups, cluster] : std::vector<std::pair<int, int>>{{1, 1}, {1, 2}, {1, 4}, {2, 1}, {3, 1}, {4, 1}}) {
      SCOPED_TRACE("warpgroups=" + std::to_string(warpgroups) + " cluster=" + std::to_string(cluster));
      int64_t launches = 0;
      const std::vector<std::vector<float>> shaped = run(128, &launches, warpgroups, cluster);
      ASSERT_EQ(shaped.size(), 8u);
      EXPECT_GT(launches, 0);
      for (size_t i = 0; i < shaped.size(); ++i) ASSERT_TRUE(SameBits(shaped[i], kernel[i])) << "step " << i;
    }
    // The 200-token prompt whole (wgmma) against chunks of 16 (FastLinearKernel), same backend kind.
    CudaTuning tuning;
    auto chunked = Fast(model, true, tuning);
    ASSERT_TRUE(chunked);
    Driver d(chunked.get(), 128);
    Seq whole;
    whole.tokens = Prompt(200, vocab, 14);
    std::vector<float> all;
    for (int32_t at = 0; at < 200; at += 16) {
      const int32_t n = std::min<int32_t>(16, 200 - at);
      std::vector<float> l = d.Step({{&whole, n, n}});
      all.insert(all.end(), l.begin(), l.end());
    }
    EXPECT_EQ(chunked->launch_stats().fast_wgmma_launches, 0);
    EXPECT_TRUE(SameBits(wgmma[1], all)) << "whole against chunks of 16";
  }
}

// Whole prefill vs chunks of 1 (decode steps), 5 and 16 tokens, eager vs graphs, and every block
// shape forced (1 to 6 16-row tiles per block, token rows per block): the logits of every position
// are identical.
TEST(CudaFastProfile, ChunkingGraphsAndTilesKeepBits) {
  SKIP_WITHOUT_GPU();
  auto model = InvarianceModel();
  ASSERT_TRUE(model);
  const int32_t vocab = model->config().vocab_size;
  const std::vector<int32_t> prompt = Prompt(77, vocab, 5);
  std::vector<float> whole;
  {
    auto fast = Fast(model);
    Driver d(fast.get(), 64);
    Seq s;
    s.tokens = prompt;
    whole = d.Step({{&s, 77, 77}});
  }
  for (int token_tile : {0, 8, 16})
  for (int tile : {0, 1, 2, 3, 4, 5, 6}) {
    CudaTuning tuning;
    tuning.fast_row_tiles = tile;
    tuning.fast_token_tile = token_tile;
    for (bool graphs : {true, false}) {
      for (int32_t chunk : {1, 5, 16, 77}) {
        SCOPED_TRACE("tile=" + std::to_string(tile) + " token_tile=" + std::to_string(token_tile) +
                     " chunk=" + std::to_string(chunk) + " graphs=" + std::to_string(graphs));
        auto fast = Fast(model, graphs, tuning);
        Driver d(fast.get(), 64);
        Seq s;
        s.tokens = prompt;
        std::vector<float> all;
        for (int32_t at = 0; at < 77; at += chunk) {
          const int32_t n = std::min(chunk, 77 - at);
          std::vector<float> l = d.Step({{&s, n, n}});
          all.insert(all.end(), l.begin(), l.end());
        }
        EXPECT_TRUE(SameBits(whole, all));
      }
    }
  }
}

// The tensor cores' products are exact only for bf16 weights: other dtypes are refused, clearly.
TEST(CudaFastProfile, RefusesWeightsOtherThanBf16) {
  SKIP_WITHOUT_GPU();
  SynthSpec s;
  s.dtype = DType::kF32;
  auto model = SynthModel("fast_f32", s);
  ASSERT_TRUE(model);
  CudaBackendOptions o;
  o.profile = NumericsProfile::kFast;
  auto b = CreateCudaBackend(model, o);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(b.status().message().find("bf16"), std::string::npos) << b.status().ToString();
}

// The engine on the fast profile: batched requests give the tokens they give alone, and
// provenance records the profile with its architecture.
TEST(CudaFastProfile, EngineRecordsTheProfileAndKeepsRequestsApart) {
  SKIP_WITHOUT_GPU();
  const std::string dir = std::string(ROTE_SOURCE_DIR) + "/tests/fixtures/qwen2";
  auto run = [&](int requests) {
    EngineOptions o;
    o.device = Device::kCuda;
    o.numerics_profile = NumericsProfile::kFast;
    o.max_batch = 8;
    o.prefill_chunk = 7;
    o.max_step_tokens = 32;
    o.max_context = 512;
    o.capture_logits = true;
    auto engine = Engine::Load(dir, o);
    EXPECT_TRUE(engine.ok()) << engine.status().ToString();
    if (!engine.ok()) return std::vector<GenerationResult>{};
    std::vector<GenerationRequest> batch;
    for (int i = 0; i < requests; ++i) {
      GenerationRequest r;
      r.prompt_tokens = Prompt(i == 0 ? 19 : 5 + 9 * i, (*engine)->model().config().vocab_size, i == 0 ? 7 : 300 + i);
      r.sampling.max_tokens = 24;
      r.sampling.ignore_eos = true;
      batch.push_back(std::move(r));
    }
    return SubmitAndWait(**engine, std::move(batch));
  };
  const std::vector<GenerationResult> alone = run(1);
  const std::vector<GenerationResult> crowd = run(6);
  ASSERT_EQ(alone.size(), 1u);
  ASSERT_EQ(crowd.size(), 6u);
  EXPECT_EQ(alone[0].provenance.numerics_profile.rfind("fast5-sm", 0), 0u) << alone[0].provenance.numerics_profile;
  EXPECT_EQ(alone[0].tokens, crowd[0].tokens);
  ASSERT_EQ(alone[0].step_logits.size(), crowd[0].step_logits.size());
  for (size_t t = 0; t < alone[0].step_logits.size(); ++t)
    ASSERT_TRUE(SameBits(alone[0].step_logits[t], crowd[0].step_logits[t])) << "token " << t;
}

// Sampled on the device (no logits captured), a request's tokens do not depend on the others
// in its steps either: request 0 sampled alone and among 7 others (sampled and greedy), in both
// profiles, on a synthesized model with untied embeddings (random weights: a flat enough
// distribution that sampling picks among many tokens, which the fixture's does not).
TEST(CudaEngine, DeviceSampledRequestAloneEqualsAmongOthers) {
  SKIP_WITHOUT_GPU();
  SynthSpec spec;  // untied embeddings: tied ones make each token predict itself
  spec.vocab = 640;
  spec.hidden = 256;
  spec.intermediate = 704;
  spec.heads = 4;
  spec.kv_heads = 2;
  spec.head_dim = 64;
  spec.tied = false;
  auto model = SynthModel("device_sampled", spec);
  ASSERT_TRUE(model);
  auto tokenizer = Tokenizer::Load(std::string(ROTE_SOURCE_DIR) + "/tests/fixtures/qwen2");  // ids < 640 only
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  const int32_t vocab = model->config().vocab_size;
  for (NumericsProfile profile : {NumericsProfile::kExact, NumericsProfile::kFast}) {
    SCOPED_TRACE(profile == NumericsProfile::kFast ? "fast" : "exact");
    auto run = [&](int requests) {
      std::vector<std::vector<int32_t>> tokens;
      auto backend = Cuda(model, /*graphs=*/true, profile);
      if (!backend) return tokens;
      EngineOptions o;
      o.max_batch = 8;
      o.prefill_chunk = 7;
      o.max_step_tokens = 32;
      o.max_context = 512;
      o.kv_cache_bytes = 64 * backend->KvBytesPerBlock();
      auto engine = Engine::Create(model, *tokenizer, std::move(backend), o);
      EXPECT_TRUE(engine.ok()) << engine.status().ToString();
      if (!engine.ok()) return tokens;
      std::vector<GenerationRequest> batch;
      for (int i = 0; i < requests; ++i) {
        GenerationRequest r;
        r.prompt_tokens = Prompt(i == 0 ? 19 : 4 + 7 * i, vocab, i == 0 ? 7 : 500 + static_cast<uint32_t>(i));
        r.sampling.max_tokens = 20;
        r.sampling.ignore_eos = true;
        if (i % 3 != 2) {
          r.sampling.temperature = 1.5f;
          r.sampling.top_p = i % 2 == 0 ? 0.97f : 1.0f;
          r.sampling.top_k = i == 1 ? 30 : 0;
          r.sampling.seed = 11;
          r.sampling_key = 100 + static_cast<uint64_t>(i);
        }
        batch.push_back(std::move(r));
      }
      for (GenerationResult& res : SubmitAndWait(**engine, std::move(batch))) tokens.push_back(res.tokens);
      return tokens;
    };
    const std::vector<std::vector<int32_t>> alone = run(1), crowd = run(8);
    ASSERT_EQ(alone.size(), 1u);
    ASSERT_EQ(crowd.size(), 8u);
    EXPECT_EQ(alone[0], crowd[0]);
    // Sampling must really be choosing among several tokens, or this proves little.
    EXPECT_GE(std::set<int32_t>(alone[0].begin(), alone[0].end()).size(), 5u);
  }
}

// ---- The families beyond Qwen2/Llama 3/Qwen3 (the backend's family path) ----
//
// Each family's synthesized model (inference/model/synth.cc: tiny shape, padded widths, its
// sliding window shorter than the prompts here, its multipliers and soft caps away from 1 and
// infinity) on the exact profile against the CPU backend, every logit bit: a prefill longer than
// the window with every position's logits, greedy decode steps past it, a batch of mixed lengths
// (one of them over the window) prefilled together and decoded together, and a chunked prefill.
// The fast profile runs them: close to the CPU, and a request alone equal to it among others.

struct FamilyCase {
  const char* name;
  ModelFamily family;
  DType dtype;
  const char* shape = "tiny";  // synth.h: "tiny" has head_dim 16, "small" head_dim 64 over dim 256
};
void PrintTo(const FamilyCase& c, std::ostream* os) { *os << c.name; }

std::shared_ptr<const Model> FamilyModel(const FamilyCase& fc) {
  const std::string dir = TempDir(std::string("family_") + fc.name);
  SynthOptions o;
  o.family = fc.family;
  o.shape = fc.shape;
  o.dtype = fc.dtype;
  o.seed = 5;
  Status s = SynthesizeModel(o, dir);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return s.ok() ? LoadOrDie(dir) : nullptr;
}

int32_t LargestWindow(const ModelConfig& c) {
  int32_t w = 0;
  for (int32_t l = 0; l < c.num_layers; ++l) w = std::max(w, c.plan(l).sliding_window);
  return w;
}

class CudaFamilyTest : public ::testing::TestWithParam<FamilyCase> {};

TEST_P(CudaFamilyTest, ExactEqualsCpuPastTheWindow) {
  SKIP_WITHOUT_GPU();
  auto model = FamilyModel(GetParam());
  ASSERT_TRUE(model);
  const ModelConfig& c = model->config();
  ASSERT_EQ(c.family, GetParam().family);
  const int32_t window = LargestWindow(c);
  // The prompt crosses the window, and the decode steps go on past it.
  const int32_t prompt = std::max<int32_t>(40, window + 9);
  if (window > 0) {
    ASSERT_LT(window, prompt);
  }
  // 30 steps: past position 64 too, where the synthesized Phi-3's longrope turns to its long factors.
  ExpectCpuEqualsCuda(model, prompt, 30);
  auto gpu = Cuda(model);
  ASSERT_TRUE(gpu);
  EXPECT_TRUE(gpu->family_path());
}

// A window of at least max_positions keys hides none: such a Mistral is the Llama layout and runs
// the ordinary kernels (one key fewer, and it runs the family path); equal to the CPU either way.
TEST(CudaFamilies, WindowsThatHideNothingRunTheOrdinaryPath) {
  SKIP_WITHOUT_GPU();
  for (const int32_t window : {4096, 4095}) {
    SCOPED_TRACE(window);
    const std::string dir = TempDir("mistral_window_" + std::to_string(window));
    SynthOptions o;
    o.family = ModelFamily::kMistral;
    o.shape = "tiny";
    ASSERT_TRUE(SynthesizeModel(o, dir).ok());
    nlohmann::json cfg;
    {
      std::ifstream in(dir + "/config.json");
      in >> cfg;
    }
    cfg["sliding_window"] = window;
    {
      std::ofstream out(dir + "/config.json");
      out << cfg.dump();
    }
    auto model = LoadOrDie(dir);
    ASSERT_TRUE(model);
    ASSERT_EQ(model->config().plan(0).sliding_window, window);
    auto gpu = Cuda(model);  // max_positions 4096, as ExpectCpuEqualsCuda's
    ASSERT_TRUE(gpu);
    EXPECT_EQ(gpu->family_path(), window < 4096);
    ExpectCpuEqualsCuda(model, 40, 8);
  }
}

// Gemma 2's soft cap on the ordinary path's attention kernels (AttentionShape::softcap): its global
// layers, and its local ones wherever the window hides nothing, run them instead of the family
// kernel. The cap is lowered to 0.5 so that it moves every score far: a kernel that forgot it
// would be far from the CPU. Every kernel that computes a score: the default choice, each attention
// variant, the query tiles, and one token's attention in parts.
TEST(CudaFamilies, SoftCapOnTheOrdinaryKernelsEqualsCpu) {
  SKIP_WITHOUT_GPU();
  const std::string dir = TempDir("gemma2_softcap");
  SynthOptions o;
  o.family = ModelFamily::kGemma2;
  o.shape = "small";
  o.seed = 5;
  ASSERT_TRUE(SynthesizeModel(o, dir).ok());
  nlohmann::json cfg;
  {
    std::ifstream in(dir + "/config.json");
    in >> cfg;
  }
  cfg["attn_logit_softcapping"] = 0.5;
  {
    std::ofstream out(dir + "/config.json");
    out << cfg.dump();
  }
  auto model = LoadOrDie(dir);
  ASSERT_TRUE(model);
  ASSERT_EQ(model->config().attn_logit_softcap, 0.5f);
  struct Case {
    std::string name;
    CudaTuning tuning;
  };
  std::vector<Case> cases = {{"default", CudaTuning{}}};
  for (int v : {0, 2, 5, 9, 10, 11}) cases.push_back({"variant " + std::to_string(v), Attention(v)});
  CudaTuning tiles;
  tiles.attention_tile_min_tokens = 16;
  tiles.attention_tile_by_rule = false;  // head_dim 64, and a step far from a device's wave
  cases.push_back({"tiles", tiles});
  cases.push_back({"parts", AttentionSplit(0, 16, 0)});
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    CudaLaunchStats stats;
    ExpectCpuEqualsCuda(model, 80, 12, k.tuning, &stats);
    if (k.name == "tiles") {
      EXPECT_GT(stats.attention_tile_launches, 0);
    }
    if (k.name == "parts") {
      EXPECT_GT(stats.attention_parts_launches, 0);
    }
  }
}

// The families' fixtures made with transformers (tools/make_fixtures.py; their configs as published,
// every feature acting), where the checkout has them: every logit of a prefill and greedy decode
// steps equal to the CPU's.
TEST(CudaFamilies, FixturesEqualCpuEveryStep) {
  SKIP_WITHOUT_GPU();
  int32_t found = 0;
  for (const char* family :
       {"mistral", "gemma", "gemma2", "gemma3", "phi3", "starcoder2", "granite", "deepseek_coder", "qwen3_moe"}) {
    const std::string dir = std::string(ROTE_SOURCE_DIR) + "/tests/fixtures/" + family;
    if (!std::filesystem::exists(dir + "/config.json")) continue;
    SCOPED_TRACE(family);
    ++found;
    auto model = LoadOrDie(dir);
    ASSERT_TRUE(model);
    ExpectCpuEqualsCuda(model, 40, 24);
  }
  if (found == 0) GTEST_SKIP() << "no family fixtures in this checkout";
}

// The route where it is decided by its tie rule: a router whose rows are all zero (every
// probability equal: the lowest-numbered experts) and one whose rows 3 and 6 are equal (an exact
// tie between those two experts for every token). Prefills of 40 tokens (80 pairs) take the
// grouped products, decode steps (2 pairs) each pair's own: the CPU's bits at every step either
// way. With the zero router every token takes experts 0 and 1: a prefill of 150 tokens gives each
// of them 150 rows, several tiles and a partial one, and the other experts none.
TEST(CudaExperts, TiesRouteAsTheCpuOnBothPaths) {
  SKIP_WITHOUT_GPU();
  for (const std::string how : {"zero", "tied"}) {
    SCOPED_TRACE(how);
    const std::string dir = TempDir("experts_" + how);
    SynthOptions o;
    o.family = ModelFamily::kQwen3Moe;
    o.shape = "tiny";
    o.seed = 9;
    ASSERT_TRUE(SynthesizeModel(o, dir).ok());
    std::fstream f(dir + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    uint64_t n = 0;
    f.read(reinterpret_cast<char*>(&n), 8);
    std::string header(n, '\0');
    f.read(header.data(), static_cast<std::streamsize>(n));
    const nlohmann::json h = nlohmann::json::parse(header);
    const nlohmann::json& t = h.at("model.layers.0.mlp.gate.weight");
    const uint64_t begin = t["data_offsets"][0], end = t["data_offsets"][1];
    const int64_t cols = t["shape"][1];
    std::string router(end - begin, '\0');
    f.seekg(static_cast<std::streamoff>(8 + n + begin));
    f.read(router.data(), static_cast<std::streamsize>(router.size()));
    const size_t row = static_cast<size_t>(cols) * 2;  // bf16
    if (how == "zero") {
      std::fill(router.begin(), router.end(), '\0');
    } else {
      std::copy(router.begin() + 3 * row, router.begin() + 4 * row, router.begin() + 6 * row);
    }
    f.seekp(static_cast<std::streamoff>(8 + n + begin));
    f.write(router.data(), static_cast<std::streamsize>(router.size()));
    f.close();
    auto model = LoadOrDie(dir);
    ASSERT_TRUE(model);
    ExpectCpuEqualsCuda(model, 40, 12);
    if (how == "zero") ExpectCpuEqualsCuda(model, 150, 4);
  }
}

// Decode steps of more than kExpertPairsByRow pairs (40 sequences, 2 experts a token: 80 pairs)
// take the grouped products and replay as graphs (graphs on): the CPU's bits at every step, the
// same captured step replayed with other tokens and positions each time.
TEST(CudaExperts, LargeDecodeBatchesEqualCpuAsGraphs) {
  SKIP_WITHOUT_GPU();
  auto model = FamilyModel(FamilyCase{"qwen3_moe_bf16", ModelFamily::kQwen3Moe, DType::kBF16});
  ASSERT_TRUE(model);
  ASSERT_EQ(model->config().experts_per_token, 2);
  const int32_t vocab = model->config().vocab_size;
  auto cpu = Cpu(model);
  auto gpu = Cuda(model, /*graphs=*/true);
  ASSERT_TRUE(cpu && gpu);
  Driver dc(cpu.get(), 256), dg(gpu.get(), 256);
  constexpr int32_t kSeqs = 40;
  std::vector<Seq> sc(kSeqs), sg(kSeqs);
  std::vector<Driver::Part> pc, pg;
  for (int32_t i = 0; i < kSeqs; ++i) {
    const int32_t len = 3 + i % 11;
    sc[i].tokens = sg[i].tokens = Prompt(len, vocab, 500 + i);
    pc.push_back({&sc[i], len, 1});
    pg.push_back({&sg[i], len, 1});
  }
  std::vector<float> lc = dc.Step(pc), lg = dg.Step(pg);
  ASSERT_TRUE(SameBits(lc, lg)) << "prefill";
  for (int32_t step = 0; step < 6; ++step) {
    pc.clear();
    pg.clear();
    for (int32_t i = 0; i < kSeqs; ++i) {
      const int32_t next = Argmax(lc.data() + static_cast<int64_t>(i) * vocab, vocab);
      sc[i].tokens.push_back(next);
      sg[i].tokens.push_back(next);
      pc.push_back({&sc[i], 1, 1});
      pg.push_back({&sg[i], 1, 1});
    }
    lc = dc.Step(pc);
    lg = dg.Step(pg);
    ASSERT_TRUE(SameBits(lc, lg)) << "decode step " << step;
  }
}

// The family path's attention is the ordinary kernels where no cap or window acts, and decode
// steps over a context bucket of 1,024 positions and more take its attention in parts
// (CudaTuning::attention_parts_min_context): a mixture of experts decoding past a prompt of 1,100
// tokens, as graphs, equals the CPU at every step.
TEST(CudaExperts, LongDecodeContextEqualsCpu) {
  SKIP_WITHOUT_GPU();
  auto model = FamilyModel(FamilyCase{"qwen3_moe_bf16", ModelFamily::kQwen3Moe, DType::kBF16});
  ASSERT_TRUE(model);
  ASSERT_GT(CudaTuning{}.attention_parts_min_context, 0);
  ASSERT_LE(2 * CudaTuning{}.attention_parts_min_context, 2048);
  const int32_t vocab = model->config().vocab_size, prompt = 1100;
  auto cpu = Cpu(model);
  auto gpu = Cuda(model, /*graphs=*/true);
  ASSERT_TRUE(cpu && gpu);
  const int32_t blocks = (prompt + 16 + kKvBlockSize - 1) / kKvBlockSize;
  Driver dc(cpu.get(), blocks), dg(gpu.get(), blocks);
  Seq sc, sg;
  sc.tokens = sg.tokens = Prompt(prompt, vocab, 13);
  std::vector<float> lc = dc.Step({{&sc, prompt, 1}}), lg = dg.Step({{&sg, prompt, 1}});
  ASSERT_TRUE(SameBits(lc, lg)) << "prefill";
  for (int32_t step = 0; step < 6; ++step) {
    const int32_t next = Argmax(lc.data(), vocab);
    sc.tokens.push_back(next);
    sg.tokens.push_back(next);
    lc = dc.Step({{&sc, 1, 1}});
    lg = dg.Step({{&sg, 1, 1}});
    ASSERT_TRUE(SameBits(lc, lg)) << "decode step " << step;
  }
}

// DeepSeek-Coder is the Llama layout with HF's "linear" rope scaling: the ordinary path, its own
// rotary table.
TEST(CudaFamilies, DeepSeekLinearRopeEqualsCpu) {
  SKIP_WITHOUT_GPU();
  SynthSpec s;
  s.family = ModelFamily::kLlama;
  s.dtype = DType::kBF16;
  s.vocab = 1000;
  s.hidden = 160;
  s.intermediate = 416;
  s.heads = 5;
  s.kv_heads = 1;
  s.head_dim = 32;
  s.tied = false;
  s.linear_rope_factor = 4.0;
  auto model = SynthModel("deepseek_linear", s);
  ASSERT_TRUE(model);
  ASSERT_EQ(model->config().rope_scaling.type, RopeScaling::Type::kLinear);
  ExpectCpuEqualsCuda(model, 40, 12);
  auto gpu = Cuda(model);
  ASSERT_TRUE(gpu);
  EXPECT_FALSE(gpu->family_path());
}

TEST_P(CudaFamilyTest, ExactBatchOfMixedLengthsEqualsCpu) {
  SKIP_WITHOUT_GPU();
  auto model = FamilyModel(GetParam());
  ASSERT_TRUE(model);
  const int32_t vocab = model->config().vocab_size;
  const int32_t long_len = std::max<int32_t>(45, LargestWindow(model->config()) + 13);
  auto cpu = Cpu(model);
  auto gpu = Cuda(model);
  ASSERT_TRUE(cpu && gpu);
  Driver dc(cpu.get(), 256), dg(gpu.get(), 256);
  const std::vector<int32_t> lens = {7, long_len, 1, 29};
  std::vector<Seq> sc(lens.size()), sg(lens.size());
  for (size_t i = 0; i < lens.size(); ++i) sc[i].tokens = sg[i].tokens = Prompt(lens[i], vocab, 300 + i);
  std::vector<Driver::Part> pc, pg;
  for (size_t i = 0; i < lens.size(); ++i) {
    pc.push_back({&sc[i], lens[i], lens[i]});
    pg.push_back({&sg[i], lens[i], lens[i]});
  }
  std::vector<float> lc = dc.Step(pc), lg = dg.Step(pg);
  ASSERT_TRUE(SameBits(lc, lg)) << "batched prefill";
  for (int32_t step = 0; step < 12; ++step) {
    // Every sequence's last logits row is at the end of its rows; take the CPU's argmax.
    std::vector<int32_t> next;
    if (step == 0) {
      int64_t row = 0;
      for (int32_t len : lens) {
        row += len;
        next.push_back(Argmax(lc.data() + (row - 1) * vocab, vocab));
      }
    } else {
      for (size_t i = 0; i < lens.size(); ++i) next.push_back(Argmax(lc.data() + i * vocab, vocab));
    }
    pc.clear();
    pg.clear();
    for (size_t i = 0; i < lens.size(); ++i) {
      sc[i].tokens.push_back(next[i]);
      sg[i].tokens.push_back(next[i]);
      pc.push_back({&sc[i], 1, 1});
      pg.push_back({&sg[i], 1, 1});
    }
    lc = dc.Step(pc);
    lg = dg.Step(pg);
    ASSERT_TRUE(SameBits(lc, lg)) << "batched decode step " << step;
  }
}

TEST_P(CudaFamilyTest, ExactChunkedPrefillEqualsCpuWhole) {
  SKIP_WITHOUT_GPU();
  auto model = FamilyModel(GetParam());
  ASSERT_TRUE(model);
  const int32_t vocab = model->config().vocab_size;
  const int32_t len = std::max<int32_t>(50, LargestWindow(model->config()) + 17);
  auto cpu = Cpu(model);
  auto gpu = Cuda(model, /*graphs=*/false);
  ASSERT_TRUE(cpu && gpu);
  Driver dc(cpu.get(), 64), dg(gpu.get(), 64);
  Seq sc, sg;
  sc.tokens = sg.tokens = Prompt(len, vocab, 77);
  const std::vector<float> whole = dc.Step({{&sc, len, len}});
  std::vector<float> chunked;
  for (int32_t at = 0; at < len;) {
    const int32_t n = std::min<int32_t>(at == 0 ? 5 : 13, len - at);
    const std::vector<float> l = dg.Step({{&sg, n, n}});
    chunked.insert(chunked.end(), l.begin(), l.end());
    at += n;
  }
  EXPECT_TRUE(SameBits(whole, chunked));
}

TEST_P(CudaFamilyTest, FastProfileRunsCloseAndInvariant) {
  SKIP_WITHOUT_GPU();
  if (GetParam().dtype != DType::kBF16) GTEST_SKIP() << "the fast profile takes bf16 weights";
  auto model = FamilyModel(GetParam());
  ASSERT_TRUE(model);
  const int32_t vocab = model->config().vocab_size;
  const int32_t len = std::max<int32_t>(40, LargestWindow(model->config()) + 9);
  const std::vector<int32_t> prompt = Prompt(len, vocab, 23);
  auto cpu = Cpu(model);
  auto fast = Fast(model);
  ASSERT_TRUE(cpu && fast);
  Driver dc(cpu.get(), 64), dg(fast.get(), 64);
  Seq sc, sg;
  sc.tokens = sg.tokens = prompt;
  const std::vector<float> lc = dc.Step({{&sc, len, len}});
  const std::vector<float> lg = dg.Step({{&sg, len, len}});
  for (float v : lg) ASSERT_TRUE(std::isfinite(v));
  EXPECT_LT(RelativeMaxDiff(lc, lg), 1e-3) << "prefill";
  EXPECT_GT(fast->launch_stats().fast_linear_launches, 0);
  std::vector<std::vector<float>> alone_logits, batched_logits;
  std::vector<int32_t> alone_tokens, batched_tokens;
  auto alone = Fast(model);
  RunNeedle(alone.get(), prompt, vocab, 0, 1, &alone_logits, &alone_tokens);
  auto batched = Fast(model);
  RunNeedle(batched.get(), prompt, vocab, 6, 77, &batched_logits, &batched_tokens);
  ASSERT_EQ(alone_tokens, batched_tokens);
  for (size_t i = 0; i < alone_logits.size(); ++i)
    ASSERT_TRUE(SameBits(alone_logits[i], batched_logits[i])) << "step " << i;
}

// Where every layer slides, the engine gives back the blocks no later query reads: on a cache of
// 8 blocks (128 positions) three requests of 210-236 positions run together (greedy and sampled,
// preempting one another), and their tokens equal the CPU's with every block kept.
TEST_P(CudaFamilyTest, ExactReleasingBlocksOutsideTheWindowEqualsCpu) {
  SKIP_WITHOUT_GPU();
  auto model = FamilyModel(GetParam());
  ASSERT_TRUE(model);
  if (model->config().kv_window() == 0) GTEST_SKIP() << "a layer attends to every position";
  auto tokenizer = Tokenizer::Load(std::string(ROTE_SOURCE_DIR) + "/tests/fixtures/qwen2");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  const int32_t vocab = model->config().vocab_size;
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 3; ++i) {
    GenerationRequest r;
    r.prompt_tokens = Prompt(60 + 13 * i, vocab, 900 + static_cast<uint32_t>(i));
    r.sampling.max_tokens = 150;
    r.sampling.ignore_eos = true;
    if (i == 1) {
      r.sampling.temperature = 1.0f;
      r.sampling.seed = 3;
      r.sampling_key = 7;
    }
    reqs.push_back(std::move(r));
  }
  auto run = [&](std::unique_ptr<Backend> backend, bool release, int32_t blocks) {
    std::vector<std::vector<int32_t>> tokens;
    EngineOptions o;
    o.prefill_chunk = 16;
    o.max_step_tokens = 32;
    o.max_context = 512;
    o.release_outside_window = release;
    o.kv_cache_bytes = int64_t{blocks} * backend->KvBytesPerBlock();
    auto engine = Engine::Create(model, *tokenizer, std::move(backend), o);
    EXPECT_TRUE(engine.ok()) << engine.status().ToString();
    if (!engine.ok()) return tokens;
    for (GenerationResult& res : SubmitAndWait(**engine, reqs)) tokens.push_back(res.tokens);
    return tokens;
  };
  const auto cpu = run(Cpu(model), false, 64);
  const auto gpu = run(Cuda(model), true, 8);
  ASSERT_EQ(cpu.size(), 3u);
  EXPECT_EQ(cpu, gpu);
}

INSTANTIATE_TEST_SUITE_P(Families, CudaFamilyTest,
                         ::testing::Values(FamilyCase{"mistral_bf16", ModelFamily::kMistral, DType::kBF16},
                                           FamilyCase{"granite_bf16", ModelFamily::kGranite, DType::kBF16},
                                           FamilyCase{"starcoder2_bf16", ModelFamily::kStarcoder2, DType::kBF16},
                                           FamilyCase{"starcoder2_f32", ModelFamily::kStarcoder2, DType::kF32},
                                           FamilyCase{"gemma2_bf16", ModelFamily::kGemma2, DType::kBF16},
                                           FamilyCase{"gemma3_bf16", ModelFamily::kGemma3, DType::kBF16},
                                           FamilyCase{"gemma3_f16", ModelFamily::kGemma3, DType::kF16},
                                           FamilyCase{"phi3_bf16", ModelFamily::kPhi3, DType::kBF16},
                                           // Heads of 64 dims (two rounds of the dot's 32 classes),
                                           // widths that are multiples of 128, four layers.
                                           FamilyCase{"mistral_small", ModelFamily::kMistral, DType::kBF16, "small"},
                                           FamilyCase{"gemma2_small", ModelFamily::kGemma2, DType::kBF16, "small"},
                                           FamilyCase{"gemma3_small", ModelFamily::kGemma3, DType::kBF16, "small"},
                                           FamilyCase{"starcoder2_small", ModelFamily::kStarcoder2, DType::kBF16,
                                                      "small"},
                                           FamilyCase{"phi3_small", ModelFamily::kPhi3, DType::kBF16, "small"},
                                           FamilyCase{"granite_small", ModelFamily::kGranite, DType::kBF16, "small"},
                                           // Experts: 8, 2 a token, a dense layer between (tiny,
                                           // small); routes and weighted sums on every step.
                                           FamilyCase{"qwen3_moe_bf16", ModelFamily::kQwen3Moe, DType::kBF16},
                                           FamilyCase{"qwen3_moe_f32", ModelFamily::kQwen3Moe, DType::kF32},
                                           FamilyCase{"qwen3_moe_small", ModelFamily::kQwen3Moe, DType::kBF16,
                                                      "small"}),
                         [](const ::testing::TestParamInfo<FamilyCase>& p) { return std::string(p.param.name); });

}  // namespace
}  // namespace rote::inference
