// The engine: greedy equals the backend's argmax loop; a request's tokens and logits are the
// same bits alone or among 2-16 concurrent requests (continuous batching, chunked prefill,
// preemption); seeded sampling is batch-invariant; stop sequences, max tokens, cancel,
// streaming, prompt forms, errors and provenance.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <random>
#include <set>

#include "inference/engine.h"
#include "tests/inference/test_backend.h"
#include "tests/inference/test_models.h"

namespace rote::inference {
namespace {

struct Loaded {
  std::shared_ptr<const Model> model;
  Tokenizer tokenizer;
};

Loaded LoadTiny(ModelFamily family = ModelFamily::kQwen2, const std::string& shape = "tiny") {
  const std::string dir = testing::SynthModelDir(family, shape);
  auto m = Model::Load(dir);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  auto t = Tokenizer::Load(dir);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return {*m, *t};
}

std::unique_ptr<Engine> MakeEngine(const Loaded& l, EngineOptions o, CpuBackendOptions b = {}) {
  b.max_positions = 512;
  if (o.max_context == 0) o.max_context = 512;
  auto backend = testing::CreateTestBackend(l.model, b);
  EXPECT_TRUE(backend.ok());
  auto e = Engine::Create(l.model, l.tokenizer, std::move(backend).value(), o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return std::move(e).value();
}

std::vector<int32_t> RandomTokens(std::mt19937& rng, int n) {
  std::uniform_int_distribution<int> d(0, 255);  // byte tokens: never a stop token
  std::vector<int32_t> t(n);
  for (auto& x : t) x = d(rng);
  return t;
}

GenerationRequest TokensRequest(std::vector<int32_t> prompt, int max_tokens, float temperature = 0.0f,
                                uint64_t key = 0) {
  GenerationRequest r;
  r.prompt_tokens = std::move(prompt);
  r.sampling.max_tokens = max_tokens;
  r.sampling.temperature = temperature;
  r.sampling.top_k = temperature > 0 ? 50 : 0;
  r.sampling.top_p = temperature > 0 ? 0.9f : 1.0f;
  r.sampling.seed = 42;
  r.sampling.ignore_eos = true;
  r.sampling_key = key;
  return r;
}

GenerationResult RunToEnd(Engine& e, GenerationRequest r) {
  auto id = e.Submit(std::move(r));
  EXPECT_TRUE(id.ok()) << id.status().ToString();
  auto res = e.Wait(*id);
  EXPECT_TRUE(res.ok()) << res.status().ToString();
  return std::move(res).value();
}

bool SameLogits(const GenerationResult& a, const GenerationResult& b) {
  if (a.step_logits.size() != b.step_logits.size()) return false;
  for (size_t i = 0; i < a.step_logits.size(); ++i) {
    if (a.step_logits[i].size() != b.step_logits[i].size() ||
        std::memcmp(a.step_logits[i].data(), b.step_logits[i].data(), a.step_logits[i].size() * 4) != 0) {
      return false;
    }
  }
  return true;
}

// Device names: cpu, cuda (device 0) and cuda:N; anything else is refused, naming the forms.
TEST(EngineTest, DeviceNamesParse) {
  struct Good {
    std::string name;
    Device device;
    int ordinal;
  };
  for (const Good& g : std::vector<Good>{{"cpu", Device::kCpu, 0},
                                         {"cuda", Device::kCuda, 0},
                                         {"cuda:0", Device::kCuda, 0},
                                         {"cuda:3", Device::kCuda, 3},
                                         {"cuda:12", Device::kCuda, 12},
                                         {"cuda:0007", Device::kCuda, 7}}) {
    SCOPED_TRACE(g.name);
    EngineOptions o;
    o.cuda_device = 99;
    ASSERT_TRUE(ParseDeviceName(g.name, &o).ok());
    EXPECT_EQ(o.device, g.device);
    EXPECT_EQ(o.cuda_device, g.ordinal);
  }
  for (const std::string bad : {"", "gpu", "CUDA", "cuda:", "cuda:x", "cuda:-1", "cuda:+1", "cuda1", "cuda:1:2",
                                "cuda:12345", " cuda", "cpu:0"}) {
    SCOPED_TRACE("'" + bad + "'");
    EngineOptions o;
    const Status s = ParseDeviceName(bad, &o);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("cpu, cuda or cuda:N"), std::string::npos) << s.message();
    EXPECT_EQ(o.device, Device::kCpu);  // untouched
  }
}

TEST(EngineTest, GreedyEqualsBackendArgmaxLoop) {
  Loaded l = LoadTiny();
  std::mt19937 rng(1);
  const std::vector<int32_t> prompt = RandomTokens(rng, 20);
  // The reference: one sequence, the backend driven by hand.
  CpuBackendOptions bo;
  bo.max_positions = 512;
  auto backend = testing::CreateTestBackend(l.model, bo).value();
  ASSERT_TRUE(backend->AllocateKvCache(8).ok());
  std::vector<int32_t> all = prompt, blocks = {0, 1, 2, 3};
  std::vector<int32_t> expected;
  int32_t computed = 0;
  for (int i = 0; i < 12; ++i) {
    BatchPlan plan;
    plan.sequences.push_back({std::span<const int32_t>(all).subspan(computed), computed, blocks, 1});
    std::vector<float> logits;
    ASSERT_TRUE(backend->Forward(plan, &logits).ok());
    computed = static_cast<int32_t>(all.size());
    int32_t best = 0;
    for (int32_t v = 1; v < static_cast<int32_t>(logits.size()); ++v) {
      if (logits[v] > logits[best]) best = v;
    }
    expected.push_back(best);
    all.push_back(best);
  }
  auto engine = MakeEngine(l, {});
  GenerationResult r = RunToEnd(*engine, TokensRequest(prompt, 12));
  EXPECT_EQ(r.tokens, expected);
  EXPECT_EQ(r.finish_reason, FinishReason::kLength);
  EXPECT_EQ(r.provenance.model_digest, l.model->digest());
  EXPECT_EQ(r.provenance.numerics_profile, "exact");
  if (testing::CudaTestBackend()) {
    EXPECT_EQ(r.provenance.device.rfind("cuda:", 0), 0u) << r.provenance.device;
  } else {
    EXPECT_EQ(r.provenance.device, "cpu");
  }
  EXPECT_EQ(r.prompt_tokens, prompt);
}

// A target request alone, then among `others` concurrent requests of mixed lengths submitted
// around it (greedy and sampled), with small prefill chunks and a small KV cache.
void CheckAloneVersusBatched(const Loaded& l, float temperature, int others, int64_t kv_bytes, int seed) {
  std::mt19937 rng(seed);
  const std::vector<int32_t> prompt = RandomTokens(rng, 37);
  EngineOptions o;
  o.capture_logits = true;
  o.prefill_chunk = 64;
  auto alone_engine = MakeEngine(l, o);
  const GenerationResult alone = RunToEnd(*alone_engine, TokensRequest(prompt, 10, temperature, 99));
  if (temperature > 0) {
    // Sampling must really be choosing among several tokens, or this proves nothing.
    std::set<int32_t> distinct(alone.tokens.begin(), alone.tokens.end());
    EXPECT_GE(distinct.size(), 3u);
  }

  o.prefill_chunk = 5;
  o.prefill_fills_step = false;  // prompts in chunks of 5 among the others' steps
  o.max_batch = 16;
  o.kv_cache_bytes = kv_bytes;
  CpuBackendOptions b;
  b.threads = 2;
  auto engine = MakeEngine(l, o, b);
  std::vector<RequestId> ids;
  const int target_at = std::uniform_int_distribution<int>(0, others)(rng);
  RequestId target = 0;
  for (int i = 0; i <= others; ++i) {
    if (i == target_at) {
      target = engine->Submit(TokensRequest(prompt, 10, temperature, 99)).value();
      continue;
    }
    const int len = std::uniform_int_distribution<int>(1, 50)(rng);
    const float t = i % 2 == 0 ? 0.0f : 0.8f;
    ids.push_back(engine->Submit(TokensRequest(RandomTokens(rng, len), std::uniform_int_distribution<int>(1, 15)(rng),
                                               t, static_cast<uint64_t>(i)))
                      .value());
  }
  auto batched = engine->Wait(target);
  ASSERT_TRUE(batched.ok());
  for (RequestId id : ids) ASSERT_TRUE(engine->Wait(id).ok());
  EXPECT_EQ(alone.tokens, batched->tokens);
  EXPECT_TRUE(SameLogits(alone, *batched)) << "logits differ alone vs among " << others << " others";
}

TEST(EngineTest, GreedyAloneEqualsAmongOthers) {
  Loaded l = LoadTiny();
  CheckAloneVersusBatched(l, 0.0f, 2, 256 << 20, 5);
  CheckAloneVersusBatched(l, 0.0f, 16, 256 << 20, 6);
}

// Counts which of the backend's entry points the engine calls; `drop_token` makes ForwardGreedy
// return one token too few, as a broken backend would.
class CountingBackend final : public Backend {
 public:
  CountingBackend(std::unique_ptr<Backend> inner, std::atomic<int>* forward, std::atomic<int>* greedy,
                  bool drop_token = false)
      : inner_(std::move(inner)), forward_(forward), greedy_(greedy), drop_token_(drop_token) {}
  std::string device() const override { return inner_->device(); }
  int64_t KvBytesPerBlock() const override { return inner_->KvBytesPerBlock(); }
  Status AllocateKvCache(int32_t n) override { return inner_->AllocateKvCache(n); }
  Status Forward(const BatchPlan& plan, std::vector<float>* logits) override {
    ++*forward_;
    return inner_->Forward(plan, logits);
  }
  Status ForwardGreedy(const BatchPlan& plan, std::vector<int32_t>* tokens) override {
    ++*greedy_;
    Status s = inner_->ForwardGreedy(plan, tokens);
    if (s.ok() && drop_token_ && !tokens->empty()) tokens->pop_back();
    return s;
  }
  // Runs of chained steps (counted where asked): Backend's default, one ForwardGreedy a step.
  Status ForwardGreedySteps(const BatchPlan& plan, int32_t steps, std::vector<int32_t>* tokens) override {
    if (chained_ != nullptr && steps > 1) ++*chained_;
    return Backend::ForwardGreedySteps(plan, steps, tokens);
  }
  void CountChainedRuns(std::atomic<int>* chained) { chained_ = chained; }

 private:
  std::unique_ptr<Backend> inner_;
  std::atomic<int>*forward_, *greedy_;
  std::atomic<int>* chained_ = nullptr;
  bool drop_token_;
};

std::unique_ptr<Engine> MakeCountingEngine(const Loaded& l, EngineOptions o, std::atomic<int>* forward,
                                           std::atomic<int>* greedy, bool drop_token = false,
                                           std::atomic<int>* chained = nullptr) {
  CpuBackendOptions b;
  b.max_positions = 512;
  o.max_context = 512;
  auto backend = testing::CreateTestBackend(l.model, b);
  EXPECT_TRUE(backend.ok());
  auto counting = std::make_unique<CountingBackend>(std::move(backend).value(), forward, greedy, drop_token);
  counting->CountChainedRuns(chained);
  auto e = Engine::Create(l.model, l.tokenizer, std::move(counting), o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return std::move(e).value();
}

// Steps whose every sampled row is greedy, with no logits captured, go through ForwardGreedy
// (on a GPU the logits then stay on the device); the tokens are those of the logits path
// (capture_logits, Forward and the host's argmax). A step with a sampled row takes Forward.
TEST(EngineTest, GreedyStepsAskTheBackendForTokensOnly) {
  Loaded l = LoadTiny();
  std::mt19937 rng(11);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 5; ++i) prompts.push_back(RandomTokens(rng, 3 + 11 * i));
  auto run = [&](EngineOptions o, std::atomic<int>* forward, std::atomic<int>* greedy, bool sampled_one) {
    o.prefill_chunk = 6;
    o.max_batch = 8;
    auto engine = MakeCountingEngine(l, o, forward, greedy);
    std::vector<RequestId> ids;
    for (size_t i = 0; i < prompts.size(); ++i)
      ids.push_back(
          engine->Submit(TokensRequest(prompts[i], 9, sampled_one && i == 2 ? 0.8f : 0.0f, 70 + i)).value());
    std::vector<std::vector<int32_t>> tokens;
    for (RequestId id : ids) {
      auto r = engine->Wait(id);
      EXPECT_TRUE(r.ok()) << r.status().ToString();
      tokens.push_back(r.ok() ? r->tokens : std::vector<int32_t>{});
    }
    return tokens;
  };
  std::atomic<int> f_logits{0}, g_logits{0}, f_greedy{0}, g_greedy{0}, f_mixed{0}, g_mixed{0};
  EngineOptions capture;
  capture.capture_logits = true;
  const auto by_logits = run(capture, &f_logits, &g_logits, false);
  const auto by_tokens = run(EngineOptions{}, &f_greedy, &g_greedy, false);
  EXPECT_GT(f_logits.load(), 0);
  EXPECT_EQ(g_logits.load(), 0) << "captured logits need Forward";
  EXPECT_EQ(f_greedy.load(), 0) << "an all-greedy run without captured logits called Forward";
  // (How many steps each run takes depends on when the scheduler thread picks up the requests
  // submitted after the first, so the counts are not compared.)
  EXPECT_GT(g_greedy.load(), 0);
  EXPECT_EQ(by_logits, by_tokens);
  for (const auto& t : by_tokens) EXPECT_EQ(t.size(), 9u);

  // One sampled request among greedy ones: its steps take Forward, and the greedy requests keep
  // their tokens.
  const auto mixed = run(EngineOptions{}, &f_mixed, &g_mixed, true);
  EXPECT_GT(f_mixed.load(), 0);
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (i != 2) {
      EXPECT_EQ(mixed[i], by_tokens[i]) << "request " << i;
    }
  }
}

// Greedy decode steps chained into one backend call (EngineOptions::greedy_chain_steps) change no
// output: requests of different lengths, one ending on a stop sequence inside a run, one on its
// length limit, and one arriving later give the same tokens, text and finish reasons with runs of
// 1, 3 and 8 steps; and runs of more than one step were taken.
TEST(EngineTest, ChainedGreedyStepsKeepEveryOutput) {
  Loaded l = LoadTiny();
  std::mt19937 rng(21);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 5; ++i) prompts.push_back(RandomTokens(rng, 2 + 9 * i));
  const std::vector<int> max_tokens = {3, 11, 17, 30, 25};
  auto run = [&](int32_t chain, const std::string& stop_for_3, std::atomic<int>* chained) {
    EngineOptions o;
    o.greedy_chain_steps = chain;
    o.prefill_chunk = 8;
    std::atomic<int> forward{0}, greedy{0};
    auto engine = MakeCountingEngine(l, o, &forward, &greedy, false, chained);
    std::vector<RequestId> ids;
    std::vector<GenerationResult> out(prompts.size());
    // The streamed events, which must be exactly the result's tokens and text, none after the end.
    auto streamed = std::make_shared<std::vector<std::vector<int32_t>>>(prompts.size());
    auto streamed_text = std::make_shared<std::vector<std::string>>(prompts.size());
    auto wait = [&](size_t i) {
      auto r = engine->Wait(ids[i]);
      EXPECT_TRUE(r.ok()) << r.status().ToString();
      if (r.ok()) out[i] = *r;
    };
    for (size_t i = 0; i < prompts.size(); ++i) {
      GenerationRequest r = TokensRequest(prompts[i], max_tokens[i]);
      r.on_token = [streamed, streamed_text, i](const TokenEvent& ev) {
        (*streamed)[i].push_back(ev.token);
        (*streamed_text)[i] += ev.text;
      };
      if (i == 3 && !stop_for_3.empty()) r.sampling.stop = {stop_for_3};
      if (i == 4) wait(0);  // request 4 arrives once the others are decoding
      ids.push_back(engine->Submit(std::move(r)).value());
    }
    for (size_t i = 1; i < prompts.size(); ++i) wait(i);
    engine.reset();  // the scheduler thread has stopped: no event can follow
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ((*streamed)[i], out[i].tokens) << "chain " << chain << " request " << i;
      EXPECT_EQ((*streamed_text)[i], out[i].text) << "chain " << chain << " request " << i;
    }
    return out;
  };
  const auto plain = run(1, "", nullptr);
  // A stop sequence that ends request 3 about two thirds of the way: the first two thirds of its
  // text (completed there, so the output is cut to nothing, where the stop begins).
  const std::string& text3 = plain[3].text;
  ASSERT_GT(text3.size(), 12u);
  const std::string stop = text3.substr(0, text3.size() * 2 / 3);
  const auto base = run(1, stop, nullptr);
  ASSERT_EQ(base[3].finish_reason, FinishReason::kStopSequence);
  ASSERT_LT(base[3].tokens.size(), plain[3].tokens.size());
  for (int32_t chain : {3, 8}) {
    std::atomic<int> chained{0};
    const auto got = run(chain, stop, &chained);
    EXPECT_GT(chained.load(), 0) << "no run of several steps at chain " << chain;
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(got[i].tokens, base[i].tokens) << "chain " << chain << " request " << i;
      EXPECT_EQ(got[i].text, base[i].text) << "chain " << chain << " request " << i;
      EXPECT_EQ(got[i].finish_reason, base[i].finish_reason) << "chain " << chain << " request " << i;
    }
  }
}

// A backend that returns the wrong number of greedy tokens fails the step's requests with
// INTERNAL instead of reading past its answer.
TEST(EngineTest, AShortGreedyAnswerFailsTheRequests) {
  Loaded l = LoadTiny();
  std::mt19937 rng(12);
  std::atomic<int> forward{0}, greedy{0};
  auto engine = MakeCountingEngine(l, EngineOptions{}, &forward, &greedy, /*drop_token=*/true);
  const RequestId a = engine->Submit(TokensRequest(RandomTokens(rng, 7), 4)).value();
  const RequestId b = engine->Submit(TokensRequest(RandomTokens(rng, 9), 4)).value();
  for (RequestId id : {a, b}) {
    auto r = engine->Wait(id);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInternal) << r.status().ToString();
    EXPECT_NE(r.status().message().find("tokens for"), std::string::npos) << r.status().ToString();
  }
}

TEST(EngineTest, SampledAloneEqualsAmongOthers) {
  Loaded l = LoadTiny(ModelFamily::kLlama);  // untied embeddings: a flatter distribution
  CheckAloneVersusBatched(l, 1.0f, 8, 256 << 20, 7);
}

TEST(EngineTest, PreemptionUnderASmallKvCacheKeepsBits) {
  Loaded l = LoadTiny(ModelFamily::kLlama);
  // 6 blocks of 16 positions for 9 requests of up to 60 positions: preemption must happen.
  CheckAloneVersusBatched(l, 0.0f, 8, 6 * KvBytesPerBlock(l.model->config()), 8);
}

// A second request with the same 40-token prefix reuses two full blocks computed by the first
// (alive or already finished), and its tokens and logits equal a run without sharing.
// Requests submitted together with a common prefix (the points of a run share their system
// prompt) compute it once: the first computes each block, the others wait for it and take it
// from the cache; every request's tokens equal its run alone.
TEST(EngineTest, RequestsSubmittedTogetherComputeTheirCommonPrefixOnce) {
  Loaded l = LoadTiny(ModelFamily::kQwen2);
  std::mt19937 rng(23);
  const std::vector<int32_t> prefix = RandomTokens(rng, 100);
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> p = prefix;
    const auto tail = RandomTokens(rng, 5 + 3 * i);
    p.insert(p.end(), tail.begin(), tail.end());
    reqs.push_back(TokensRequest(p, 6, i % 2 ? 0.7f : 0.0f, 40 + i));
  }
  EngineOptions o;
  o.prefill_chunk = 32;
  auto together = MakeEngine(l, o);
  auto ids = together->SubmitAll(reqs);
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  std::vector<GenerationResult> got;
  for (RequestId id : *ids) got.push_back(together->Wait(id).value());
  int64_t reused = 0;
  for (size_t i = 1; i < got.size(); ++i) {
    EXPECT_EQ(got[i].prompt_tokens_reused, 96) << "request " << i << " reads the 6 full blocks of the prefix";
    reused += got[i].prompt_tokens_reused;
  }
  EXPECT_EQ(got[0].prompt_tokens_reused, 0);
  EXPECT_EQ(together->stats().prefill_tokens, 6 * 100 + 5 + 8 + 11 + 14 + 17 + 20 - reused);
  EngineOptions alone_o = o;
  alone_o.prefix_sharing = false;
  auto alone = MakeEngine(l, alone_o);
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(got[i].tokens, RunToEnd(*alone, reqs[i]).tokens) << "request " << i;
}

TEST(EngineTest, PrefixSharingReusesBlocksWithoutChangingBits) {
  Loaded l = LoadTiny(ModelFamily::kQwen3);
  std::mt19937 rng(21);
  const std::vector<int32_t> prefix = RandomTokens(rng, 40);
  auto with_suffix = [&](int n) {
    std::vector<int32_t> p = prefix;
    const auto s = RandomTokens(rng, n);
    p.insert(p.end(), s.begin(), s.end());
    return p;
  };
  const std::vector<int32_t> a = with_suffix(5), b = with_suffix(7), c = with_suffix(3);
  EngineOptions o;
  o.capture_logits = true;
  o.prefix_sharing = false;
  auto plain = MakeEngine(l, o);
  const GenerationResult b_plain = RunToEnd(*plain, TokensRequest(b, 12, 0.7f, 5));
  const GenerationResult c_plain = RunToEnd(*plain, TokensRequest(c, 12));
  EXPECT_EQ(b_plain.prompt_tokens_reused, 0);
  o.prefix_sharing = true;
  o.kv_cache_bytes = 12 * KvBytesPerBlock(l.model->config());
  auto shared = MakeEngine(l, o);
  EXPECT_EQ(RunToEnd(*shared, TokensRequest(a, 12)).prompt_tokens_reused, 0);  // computes and caches
  const GenerationResult b_shared = RunToEnd(*shared, TokensRequest(b, 12, 0.7f, 5));  // after a finished
  EXPECT_EQ(b_shared.prompt_tokens_reused, 32);
  EXPECT_EQ(b_shared.tokens, b_plain.tokens);
  EXPECT_TRUE(SameLogits(b_shared, b_plain));
  // Concurrent requests sharing the prefix while others churn the small cache.
  std::vector<RequestId> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(shared->Submit(TokensRequest(RandomTokens(rng, 30), 10)).value());
  const RequestId cid = shared->Submit(TokensRequest(c, 12)).value();
  for (RequestId id : ids) ASSERT_TRUE(shared->Wait(id).ok());
  const GenerationResult c_shared = shared->Wait(cid).value();
  EXPECT_EQ(c_shared.tokens, c_plain.tokens);
  EXPECT_TRUE(SameLogits(c_shared, c_plain));
}

// A finished request's cached prefix outlives other requests' allocations while the cache has
// blocks it never used: new blocks come from those first (KvBlockManager::Allocate). With a
// lowest-id-first rule, the unrelated request in between took the prefix's freed blocks.
TEST(EngineTest, CachedPrefixOutlivesUnrelatedRequests) {
  Loaded l = LoadTiny(ModelFamily::kQwen3);
  std::mt19937 rng(22);
  const std::vector<int32_t> prefix = RandomTokens(rng, 48);
  auto with_suffix = [&](int n) {
    std::vector<int32_t> p = prefix;
    const auto s = RandomTokens(rng, n);
    p.insert(p.end(), s.begin(), s.end());
    return p;
  };
  EngineOptions o;
  o.prefix_sharing = true;
  o.kv_cache_bytes = 64 * KvBytesPerBlock(l.model->config());
  auto engine = MakeEngine(l, o);
  EXPECT_EQ(RunToEnd(*engine, TokensRequest(with_suffix(5), 8)).prompt_tokens_reused, 0);
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(RunToEnd(*engine, TokensRequest(RandomTokens(rng, 60), 8)).prompt_tokens_reused, 0);
  EXPECT_EQ(RunToEnd(*engine, TokensRequest(with_suffix(7), 8)).prompt_tokens_reused, 48);
}

TEST(EngineTest, SeedChangesSampledTokens) {
  Loaded l = LoadTiny(ModelFamily::kLlama);
  auto engine = MakeEngine(l, {});
  std::mt19937 rng(3);
  const auto prompt = RandomTokens(rng, 10);
  GenerationRequest a = TokensRequest(prompt, 16, 1.0f, 1);
  GenerationRequest b = TokensRequest(prompt, 16, 1.0f, 1);
  b.sampling.seed = 43;
  GenerationRequest c = TokensRequest(prompt, 16, 1.0f, 2);
  const auto ra = RunToEnd(*engine, a), ra2 = RunToEnd(*engine, TokensRequest(prompt, 16, 1.0f, 1));
  EXPECT_EQ(ra.tokens, ra2.tokens);
  EXPECT_NE(ra.tokens, RunToEnd(*engine, b).tokens);
  EXPECT_NE(ra.tokens, RunToEnd(*engine, c).tokens);
}

// A prompt read in chunks reports each chunk: counts that grow to the prompt's length, never
// past it, on the scheduler thread, and not once generation began.
TEST(EngineTest, PrefillReportsHowMuchOfThePromptWasRead) {
  Loaded l = LoadTiny();
  EngineOptions o;
  o.prefill_chunk = 64;
  o.prefill_fills_step = false;  // chunks of 64, not the step's whole budget
  auto e = MakeEngine(l, o);
  std::mt19937 rng(31);
  GenerationRequest r = TokensRequest(RandomTokens(rng, 300), 5);
  std::vector<std::pair<int32_t, int32_t>> seen;
  r.on_prefill = [&](int32_t read, int32_t prompt) { seen.push_back({read, prompt}); };
  GenerationResult res = RunToEnd(*e, std::move(r));
  EXPECT_EQ(res.tokens.size(), 5u);
  ASSERT_GE(seen.size(), 5u);  // 300 tokens in chunks of 64
  for (size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].second, 300);
    EXPECT_LE(seen[i].first, 300);
    if (i > 0) { EXPECT_GT(seen[i].first, seen[i - 1].first); }
  }
  EXPECT_EQ(seen.back().first, 300);
}

TEST(EngineTest, StreamingAndStopSequences) {
  Loaded l = LoadTiny();
  auto engine = MakeEngine(l, {});
  const std::vector<int32_t> prompt = {'a', 'b', 'c', ' ', 'd'};
  GenerationRequest r = TokensRequest(prompt, 30);
  std::string streamed;
  int events = 0;
  r.on_token = [&](const TokenEvent& e) {
    EXPECT_EQ(e.index, events);
    ++events;
    streamed += e.text;
  };
  const GenerationResult full = RunToEnd(*engine, std::move(r));
  EXPECT_EQ(events, 30);
  EXPECT_EQ(streamed, full.text);
  EXPECT_EQ(full.text, l.tokenizer.Decode(full.tokens));
  ASSERT_GE(full.text.size(), 12u);
  // Stop at a piece from the middle of that output: the text ends just before it.
  const std::string stop = full.text.substr(8, 3);
  const size_t at = full.text.find(stop);
  GenerationRequest s = TokensRequest(prompt, 30);
  s.sampling.stop = {"\x01\x02\x03never", stop};
  std::string streamed2;
  s.on_token = [&](const TokenEvent& e) { streamed2 += e.text; };
  const GenerationResult cut = RunToEnd(*engine, std::move(s));
  EXPECT_EQ(cut.finish_reason, FinishReason::kStopSequence);
  EXPECT_EQ(cut.text, full.text.substr(0, at));
  EXPECT_EQ(streamed2, cut.text);  // held-back text that became the stop sequence never streamed
  EXPECT_LT(cut.tokens.size(), full.tokens.size());
}

TEST(EngineTest, CancelEndsARunningRequest) {
  Loaded l = LoadTiny(ModelFamily::kQwen2, "small");
  auto engine = MakeEngine(l, {});
  std::atomic<int> seen{0};
  GenerationRequest r = TokensRequest({1, 2, 3}, 400);
  r.on_token = [&](const TokenEvent&) { ++seen; };
  const RequestId id = engine->Submit(std::move(r)).value();
  while (seen.load() < 2) std::this_thread::yield();
  engine->Cancel(id);
  auto res = engine->Wait(id);
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->finish_reason, FinishReason::kCancelled);
  EXPECT_LT(res->tokens.size(), 400u);
  EXPECT_FALSE(engine->Wait(id).ok());  // waited once already
}

TEST(EngineTest, TextAndChatPromptsUseTheTokenizer) {
  Loaded l = LoadTiny();
  auto engine = MakeEngine(l, {});
  GenerationRequest r;
  r.prompt = "Hello, world";
  r.sampling.max_tokens = 3;
  const GenerationResult a = RunToEnd(*engine, r);
  EXPECT_EQ(a.prompt_tokens, l.tokenizer.Encode("Hello, world", true));
  auto again = engine->Generate(r);  // Submit + Wait
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->tokens, a.tokens);
  GenerationRequest c;
  c.messages = {{"user", "Hi"}};
  c.sampling.max_tokens = 3;
  const GenerationResult b = RunToEnd(*engine, c);
  EXPECT_EQ(b.prompt_tokens, l.tokenizer.Encode(l.tokenizer.ApplyChatTemplate(c.messages, true), true));
  EXPECT_GT(b.prompt_tokens.size(), 3u);
}

TEST(EngineTest, SubmitRejectsBadRequests) {
  Loaded l = LoadTiny();
  EngineOptions o;
  o.max_context = 64;
  auto engine = MakeEngine(l, o);
  GenerationRequest none;
  EXPECT_EQ(engine->Submit(none).status().code(), StatusCode::kInvalidArgument);
  GenerationRequest two = TokensRequest({1, 2}, 4);
  two.prompt = "x";
  EXPECT_EQ(engine->Submit(two).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->Submit(TokensRequest({1, 100000}, 4)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->Submit(TokensRequest(std::vector<int32_t>(64, 1), 4)).status().code(),
            StatusCode::kInvalidArgument);
  GenerationRequest bad_p = TokensRequest({1}, 4, 1.0f);
  bad_p.sampling.top_p = 0.0f;
  EXPECT_EQ(engine->Submit(bad_p).status().code(), StatusCode::kInvalidArgument);
  // The context bounds generation: finish reason length at max_context.
  const GenerationResult r = RunToEnd(*engine, TokensRequest(std::vector<int32_t>(60, 1), 100));
  EXPECT_EQ(r.tokens.size(), 4u);
  EXPECT_EQ(r.finish_reason, FinishReason::kLength);
}

// Records how many sequences each of the backend's steps holds.
class PlanSizeBackend final : public Backend {
 public:
  PlanSizeBackend(std::unique_ptr<Backend> inner, std::vector<size_t>* sizes, std::mutex* mu)
      : inner_(std::move(inner)), sizes_(sizes), mu_(mu) {}
  std::string device() const override { return inner_->device(); }
  int64_t KvBytesPerBlock() const override { return inner_->KvBytesPerBlock(); }
  Status AllocateKvCache(int32_t n) override { return inner_->AllocateKvCache(n); }
  Status Forward(const BatchPlan& plan, std::vector<float>* logits) override {
    Record(plan);
    return inner_->Forward(plan, logits);
  }
  Status ForwardGreedy(const BatchPlan& plan, std::vector<int32_t>* tokens) override {
    Record(plan);
    return inner_->ForwardGreedy(plan, tokens);
  }

 private:
  void Record(const BatchPlan& plan) {
    std::lock_guard<std::mutex> lock(*mu_);
    sizes_->push_back(plan.sequences.size());
  }
  std::unique_ptr<Backend> inner_;
  std::vector<size_t>* sizes_;
  std::mutex* mu_;
};

// A backend that carries at most `limit` tokens a step (as the CUDA backend does,
// CudaMaxStepTokens), and records the largest step it was given.
class StepLimitBackend final : public Backend {
 public:
  StepLimitBackend(std::unique_ptr<Backend> inner, int32_t limit, std::atomic<int64_t>* largest)
      : inner_(std::move(inner)), limit_(limit), largest_(largest) {}
  std::string device() const override { return "limited"; }
  int32_t max_step_tokens() const override { return limit_; }
  int64_t KvBytesPerBlock() const override { return inner_->KvBytesPerBlock(); }
  Status AllocateKvCache(int32_t n) override { return inner_->AllocateKvCache(n); }
  Status Forward(const BatchPlan& plan, std::vector<float>* logits) override {
    ROTE_RETURN_IF_ERROR(Check(plan));
    return inner_->Forward(plan, logits);
  }
  Status ForwardGreedy(const BatchPlan& plan, std::vector<int32_t>* tokens) override {
    ROTE_RETURN_IF_ERROR(Check(plan));
    return inner_->ForwardGreedy(plan, tokens);
  }

 private:
  Status Check(const BatchPlan& plan) {
    int64_t n = 0;
    for (const SequenceStep& s : plan.sequences) n += static_cast<int64_t>(s.tokens.size());
    int64_t seen = largest_->load();
    while (n > seen && !largest_->compare_exchange_weak(seen, n)) {
    }
    return n > limit_ ? InvalidArgument("step of " + std::to_string(n) + " tokens") : OkStatus();
  }
  std::unique_ptr<Backend> inner_;
  int32_t limit_;
  std::atomic<int64_t>* largest_;
};

// An engine never asks a backend for a larger step than it carries: max_step_tokens above the
// backend's limit is refused when the engine is made, naming both, and at the limit long prompts
// arriving together run in steps within it.
TEST(EngineTest, MaxStepTokensStaysWithinTheBackendsLimit) {
  Loaded l = LoadTiny();
  std::atomic<int64_t> largest{0};
  auto make = [&](int32_t limit, int32_t max_step_tokens) {
    EngineOptions o;
    o.max_batch = 4;
    o.max_context = 512;
    o.prefill_chunk = 96;
    o.max_step_tokens = max_step_tokens;
    CpuBackendOptions b;
    b.max_positions = 512;
    auto backend = testing::CreateTestBackend(l.model, b);
    EXPECT_TRUE(backend.ok());
    return Engine::Create(l.model, l.tokenizer,
                          std::make_unique<StepLimitBackend>(std::move(backend).value(), limit, &largest), o);
  };
  auto refused = make(100, 128);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("max_step_tokens 128 exceeds the 100 tokens"), std::string::npos)
      << refused.status().ToString();
  auto at_limit = make(100, 100);
  ASSERT_TRUE(at_limit.ok()) << at_limit.status().ToString();
  std::mt19937 rng(41);
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 4; ++i) requests.push_back(TokensRequest(RandomTokens(rng, 150 + 20 * i), 6));
  auto ids = (*at_limit)->SubmitAll(std::move(requests));
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  for (RequestId id : *ids) {
    auto r = (*at_limit)->Wait(id);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->tokens.size(), 6u);
  }
  EXPECT_GT(largest.load(), 50);  // the prompts did fill steps
  EXPECT_LE(largest.load(), 100);
}

// Requests submitted together start together: the first step holds every one of them (where
// separate Submit calls race the scheduler), with the tokens each gets alone; an invalid request
// queues none of its batch.
TEST(EngineTest, SubmitAllStartsTheRequestsTogether) {
  Loaded l = LoadTiny();
  std::vector<size_t> sizes;
  std::mutex mu;
  EngineOptions o;
  o.max_batch = 8;
  o.max_context = 512;
  o.prefill_chunk = 64;
  o.max_step_tokens = 8 * 64;
  CpuBackendOptions b;
  b.max_positions = 512;
  auto backend = testing::CreateTestBackend(l.model, b);
  ASSERT_TRUE(backend.ok());
  auto created = Engine::Create(l.model, l.tokenizer,
                                std::make_unique<PlanSizeBackend>(std::move(backend).value(), &sizes, &mu), o);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  Engine& engine = **created;

  std::mt19937 rng(23);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) prompts.push_back(RandomTokens(rng, 5 + 7 * i));
  std::vector<GenerationRequest> requests;
  for (const auto& p : prompts) requests.push_back(TokensRequest(p, 5));
  auto ids = engine.SubmitAll(std::move(requests));
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  ASSERT_EQ(ids->size(), prompts.size());
  std::vector<std::vector<int32_t>> together;
  for (RequestId id : *ids) {
    auto r = engine.Wait(id);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    together.push_back(r->tokens);
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    ASSERT_FALSE(sizes.empty());
    EXPECT_EQ(sizes.front(), prompts.size()) << "the first step did not hold every request submitted together";
    for (size_t n : sizes) EXPECT_EQ(n, prompts.size());  // they also finish together
  }
  // Each request's tokens are its tokens alone.
  auto alone_engine = MakeEngine(l, EngineOptions{});
  for (size_t i = 0; i < prompts.size(); ++i)
    EXPECT_EQ(RunToEnd(*alone_engine, TokensRequest(prompts[i], 5)).tokens, together[i]) << "request " << i;

  // Request 2 is invalid: an error that names it, and requests 0 and 1 are not queued either
  // (every later step holds only the one request submitted after).
  std::vector<GenerationRequest> bad;
  bad.push_back(TokensRequest(prompts[0], 5));
  bad.push_back(TokensRequest(prompts[1], 5));
  bad.push_back(TokensRequest({1, 100000}, 5));
  {
    std::lock_guard<std::mutex> lock(mu);
    sizes.clear();
  }
  auto refused = engine.SubmitAll(std::move(bad));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.status().message().rfind("request 2: ", 0), 0u) << refused.status().message();
  std::vector<GenerationRequest> one;
  one.push_back(TokensRequest(prompts[3], 4));
  auto one_id = engine.SubmitAll(std::move(one));
  ASSERT_TRUE(one_id.ok());
  auto r = engine.Wait(one_id->at(0));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->tokens.size(), 4u);
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(sizes.size(), 4u);  // a prefill step and three decode steps
  for (size_t n : sizes) EXPECT_EQ(n, 1u);
  // An empty batch is no error and queues nothing.
  auto none = engine.SubmitAll({});
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

// The fast profile is the tensor cores' (CUDA only): asking for it on the CPU is an error that
// says so, not a silent exact run recorded under the wrong name.
TEST(EngineTest, FastProfileOnTheCpuIsRefused) {
  EngineOptions o;
  o.device = Device::kCpu;
  o.numerics_profile = NumericsProfile::kFast;
  auto engine = Engine::Load(testing::SynthModelDir(ModelFamily::kQwen2, "tiny"), o);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(engine.status().message().find("CUDA"), std::string::npos) << engine.status().ToString();
}

// Provenance names the profile the backend ran.
TEST(EngineTest, ProvenanceNamesTheExactProfile) {
  Loaded l = LoadTiny();
  auto engine = MakeEngine(l, EngineOptions{});
  EXPECT_EQ(engine->numerics_profile(), "exact");
  const GenerationResult r = RunToEnd(*engine, TokensRequest({1, 2, 3}, 2));
  EXPECT_EQ(r.provenance.numerics_profile, "exact");
}

TEST(EngineTest, StatsCountPrefillDecodeAndBatches) {
  Loaded l = LoadTiny();
  auto engine = MakeEngine(l, {});
  EXPECT_EQ(engine->stats().steps, 0);
  std::mt19937 rng(5);
  std::vector<RequestId> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(engine->Submit(TokensRequest(RandomTokens(rng, 16), 6)).value());
  int64_t generated = 0;
  for (RequestId id : ids) generated += static_cast<int64_t>(engine->Wait(id).value().tokens.size());
  const EngineStats s = engine->stats();
  EXPECT_EQ(s.generated_tokens, generated);
  EXPECT_EQ(s.prefill_tokens, 3 * 16);
  EXPECT_GT(s.prefill_seconds, 0);
  EXPECT_GT(s.steps, 0);
  int64_t steps = 0;
  int64_t rows = 0;
  for (size_t n = 0; n < s.batch_size_steps.size(); ++n) {
    steps += s.batch_size_steps[n];
    rows += s.batch_size_steps[n] * static_cast<int64_t>(n);
  }
  EXPECT_EQ(steps, s.steps);
  EXPECT_EQ(rows, s.batch_size_sum);
  EXPECT_EQ(s.kv_blocks_in_use, 0) << "every request finished";
  EXPECT_EQ(s.waiting, 0);
  EXPECT_EQ(s.running, 0);
}

// Filling the step with prompt positions changes how prompts are cut into steps, never a bit:
// the same tokens and logits as one chunk a step, in fewer prefill steps.
TEST(EngineTest, PrefillFillingTheStepKeepsEveryBit) {
  Loaded l = LoadTiny();
  std::mt19937 rng(21);
  std::vector<GenerationRequest> reqs;
  for (int len : {150, 37, 90}) reqs.push_back(TokensRequest(RandomTokens(rng, len), 6));
  struct Run {
    std::vector<GenerationResult> results;
    int64_t prefill_steps = 0;
  };
  auto run = [&](bool fill) {
    EngineOptions o;
    o.prefill_chunk = 16;
    o.max_step_tokens = 96;
    o.capture_logits = true;
    o.prefill_fills_step = fill;
    auto engine = MakeEngine(l, o);
    Run r;
    std::vector<RequestId> ids;
    for (const auto& q : reqs) ids.push_back(engine->Submit(q).value());
    for (RequestId id : ids) r.results.push_back(engine->Wait(id).value());
    r.prefill_steps = engine->stats().prefill_steps;
    return r;
  };
  const Run chunked = run(false), filled = run(true);
  ASSERT_EQ(chunked.results.size(), filled.results.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(chunked.results[i].tokens, filled.results[i].tokens) << i;
    EXPECT_EQ(chunked.results[i].step_logits.size(), 6u) << i;
    EXPECT_TRUE(SameLogits(chunked.results[i], filled.results[i])) << i;
  }
  EXPECT_LT(filled.prefill_steps, chunked.prefill_steps);
}

// A lone 100-token prompt in chunks of 32 is four prefill steps (32, 32, 32, 4; the last one also
// samples the first token); the other steps decode.
TEST(EngineTest, StatsCountPrefillSteps) {
  Loaded l = LoadTiny();
  EngineOptions o;
  o.prefill_chunk = 32;
  o.prefill_fills_step = false;  // chunks of 32, not the step's whole budget
  o.greedy_chain_steps = 1;
  auto engine = MakeEngine(l, o);
  std::mt19937 rng(9);
  const GenerationResult r = RunToEnd(*engine, TokensRequest(RandomTokens(rng, 100), 5));
  ASSERT_EQ(r.tokens.size(), 5u);
  const EngineStats s = engine->stats();
  EXPECT_EQ(s.prefill_steps, 4);
  EXPECT_EQ(s.prefill_tokens, 100);
  EXPECT_EQ(s.steps, 4 + 4) << "four prefill steps, then one step per further token";
}

// Mistral's window of 24 on every layer: the engine gives back each block once no later query sees
// it, so requests of 270 positions run on a cache of 8 blocks (128 positions) that would refuse
// them otherwise, with every token and logit equal to a run that keeps every block; several at
// once (a shared prefix, greedy and sampled, preempting one another) as well, chained greedy
// steps included.
TEST(EngineTest, ASlidingWindowReleasesBlocksWithoutChangingBits) {
  Loaded l = LoadTiny(ModelFamily::kMistral);
  ASSERT_EQ(l.model->config().kv_window(), 24);
  std::mt19937 rng(31);
  const std::vector<int32_t> prefix = RandomTokens(rng, 40);
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> p = prefix;
    const auto tail = RandomTokens(rng, 30 + 7 * i);
    p.insert(p.end(), tail.begin(), tail.end());
    reqs.push_back(TokensRequest(p, 200, i == 1 ? 0.8f : 0.0f, 60 + static_cast<uint64_t>(i)));
  }
  auto run = [&](bool release, int32_t blocks, bool capture, bool together) {
    EngineOptions o;
    o.capture_logits = capture;
    o.prefill_chunk = 16;
    o.max_step_tokens = 32;
    o.release_outside_window = release;
    o.kv_cache_bytes = int64_t{blocks} * KvBytesPerBlock(l.model->config());
    auto engine = MakeEngine(l, o);
    std::vector<GenerationResult> out;
    if (together) {
      std::vector<RequestId> ids;
      for (const auto& r : reqs) ids.push_back(engine->Submit(r).value());
      for (RequestId id : ids) out.push_back(engine->Wait(id).value());
    } else {
      for (const auto& r : reqs) out.push_back(RunToEnd(*engine, r));
    }
    EXPECT_EQ(engine->stats().kv_blocks_in_use, 0);
    return out;
  };
  const std::vector<GenerationResult> kept = run(false, 256, true, false);
  const std::vector<GenerationResult> alone = run(true, 8, true, false);
  const std::vector<GenerationResult> together = run(true, 12, true, true);
  const std::vector<GenerationResult> chained = run(true, 8, false, false);
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_EQ(kept[i].tokens.size(), 200u);
    EXPECT_EQ(alone[i].tokens, kept[i].tokens) << i;
    EXPECT_TRUE(SameLogits(alone[i], kept[i])) << i;
    EXPECT_EQ(together[i].tokens, kept[i].tokens) << i;
    EXPECT_TRUE(SameLogits(together[i], kept[i])) << i;
    EXPECT_EQ(chained[i].tokens, kept[i].tokens) << i;
  }
  // Keeping every block, the same cache refuses them.
  EngineOptions o;
  o.max_step_tokens = 32;
  o.release_outside_window = false;
  o.kv_cache_bytes = 8 * KvBytesPerBlock(l.model->config());
  auto keeping = MakeEngine(l, o);
  EXPECT_EQ(keeping->Submit(reqs[0]).status().code(), StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace rote::inference
