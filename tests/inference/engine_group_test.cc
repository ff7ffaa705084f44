// Engines on several devices behind one request interface (engine_group.h): device names, the
// spread of requests, all-or-nothing SubmitAll with the caller's index in the error, routing of
// Wait and Cancel, summed counts; and, where the machine has two or more GPUs, the same tokens
// from every GPU as from the CPU.
#include "inference/engine_group.h"

#include <gtest/gtest.h>

#include <random>
#include <set>

#include "inference/backend.h"
#include "inference/cuda/cuda_backend.h"
#include "tests/inference/test_models.h"

namespace rote::inference {
namespace {

TEST(DeviceSetTest, NamesTheForms) {
  DeviceSet s;
  ASSERT_TRUE(ParseDeviceSet("cpu", &s).ok());
  EXPECT_EQ(s.device, Device::kCpu);
  EXPECT_EQ(DeviceSetName(s), "cpu");
  ASSERT_TRUE(ParseDeviceSet("cuda", &s).ok());
  EXPECT_EQ(s.cuda_devices, std::vector<int>({0}));
  ASSERT_TRUE(ParseDeviceSet("cuda:3", &s).ok());
  EXPECT_EQ(s.cuda_devices, std::vector<int>({3}));
  ASSERT_TRUE(ParseDeviceSet("cuda:1,0,7", &s).ok());
  EXPECT_EQ(s.cuda_devices, std::vector<int>({1, 0, 7}));
  EXPECT_EQ(DeviceSetName(s), "cuda:1,0,7");
  ASSERT_TRUE(ParseDeviceSet("cuda:all", &s).ok());
  EXPECT_TRUE(s.all_cuda);
  EXPECT_TRUE(s.cuda_devices.empty());
  EXPECT_EQ(DeviceSetName(s), "cuda:all");
}

TEST(DeviceSetTest, RefusesWhatIsNotADeviceSet) {
  for (const char* bad : {"", "gpu", "cuda:", "cuda:-1", "cuda:+1", "cuda:1,", "cuda:,1", "cuda:1,,2", "cuda:12345",
                          "cuda:a", "cuda:all,1", "cuda:0x1", "cuda 0", "cuda:1;2", "CPU", "cuda:ALL"}) {
    DeviceSet s;
    const Status st = ParseDeviceSet(bad, &s);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(st.message().find("cuda:all"), std::string::npos) << st.message();
  }
  DeviceSet s;
  const Status twice = ParseDeviceSet("cuda:0,1,0", &s);
  EXPECT_EQ(twice.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(twice.message().find("cuda:0 twice"), std::string::npos) << twice.message();
}

struct Loaded {
  std::shared_ptr<const Model> model;
  Tokenizer tokenizer;
};

Loaded LoadTiny(ModelFamily family = ModelFamily::kQwen2) {
  const std::string dir = testing::SynthModelDir(family, "tiny");
  auto m = Model::Load(dir);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  auto t = Tokenizer::Load(dir);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return {*m, *t};
}

std::unique_ptr<Engine> CpuEngine(const Loaded& l) {
  CpuBackendOptions b;
  b.threads = 1;
  b.max_positions = 512;
  auto backend = CreateCpuBackend(l.model, b);
  EXPECT_TRUE(backend.ok());
  EngineOptions o;
  o.max_context = 512;
  o.kv_cache_bytes = 8 << 20;
  auto e = Engine::Create(l.model, l.tokenizer, std::move(backend).value(), o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return std::move(e).value();
}

std::unique_ptr<EngineGroup> CpuGroup(const Loaded& l, int n) {
  std::vector<std::unique_ptr<Engine>> engines;
  for (int i = 0; i < n; ++i) engines.push_back(CpuEngine(l));
  auto g = EngineGroup::Create(std::move(engines));
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return std::move(g).value();
}

GenerationRequest Request(std::mt19937& rng, int prompt, int max_tokens, float temperature, uint64_t key) {
  std::uniform_int_distribution<int> d(0, 255);  // byte tokens: never a stop token
  GenerationRequest r;
  for (int i = 0; i < prompt; ++i) r.prompt_tokens.push_back(d(rng));
  r.sampling.max_tokens = max_tokens;
  r.sampling.temperature = temperature;
  r.sampling.top_k = temperature > 0 ? 40 : 0;
  r.sampling.seed = 9;
  r.sampling.ignore_eos = true;
  r.sampling_key = key;
  return r;
}

std::vector<GenerationRequest> Requests(int n) {
  std::mt19937 rng(5);
  std::vector<GenerationRequest> out;
  for (int i = 0; i < n; ++i) out.push_back(Request(rng, 8 + 13 * i, 6 + i % 4, i % 2 ? 0.8f : 0.0f, 100 + i));
  return out;
}

TEST(EngineGroupTest, SpreadsRequestsAndGivesTheTokensOneEngineGives) {
  const Loaded l = LoadTiny();
  std::unique_ptr<Engine> alone = CpuEngine(l);
  std::unique_ptr<EngineGroup> group = CpuGroup(l, 3);
  EXPECT_EQ(group->size(), 3);
  EXPECT_EQ(group->device(), "cpu,cpu,cpu");
  EXPECT_EQ(group->kv_blocks(), 3 * alone->kv_blocks());

  const std::vector<GenerationRequest> reqs = Requests(7);
  auto ids = group->SubmitAll(reqs);
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  ASSERT_EQ(ids->size(), reqs.size());
  EXPECT_EQ(std::set<RequestId>(ids->begin(), ids->end()).size(), reqs.size()) << "ids are distinct";
  for (size_t i = 0; i < reqs.size(); ++i) {
    auto got = group->Wait((*ids)[i]);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    auto want = alone->Generate(reqs[i]);
    ASSERT_TRUE(want.ok());
    EXPECT_EQ(got->tokens, want->tokens) << "request " << i;
    EXPECT_EQ(got->prompt_tokens, reqs[i].prompt_tokens);
  }
  // 7 requests over 3 idle engines: 3, 2, 2.
  int64_t total = 0, prefill_steps = 0;
  for (int e = 0; e < 3; ++e) {
    const EngineStats s = group->engine(e).stats();
    EXPECT_GT(s.generated_tokens, 0) << "engine " << e << " ran nothing";
    EXPECT_GT(s.prefill_steps, 0) << "engine " << e;
    total += s.generated_tokens;
    prefill_steps += s.prefill_steps;
  }
  EXPECT_EQ(group->stats().generated_tokens, total);
  EXPECT_EQ(group->stats().prefill_steps, prefill_steps);
  EXPECT_EQ(group->stats().kv_blocks_in_use, 0);

  // Single submissions go to the engine with the fewest outstanding requests.
  // The counts are read before submitting: an engine starts generating as soon as it is given a
  // request, so a count read after Submit may already include some of its tokens.
  std::mt19937 rng(11);
  const int64_t before0 = group->engine(0).stats().generated_tokens;
  const int64_t before1 = group->engine(1).stats().generated_tokens;
  auto a = group->Submit(Request(rng, 20, 4, 0, 1));
  auto b = group->Submit(Request(rng, 20, 4, 0, 2));
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(group->Wait(*a).ok());
  ASSERT_TRUE(group->Wait(*b).ok());
  EXPECT_EQ(group->engine(0).stats().generated_tokens - before0, 4);
  EXPECT_EQ(group->engine(1).stats().generated_tokens - before1, 4);
}

TEST(EngineGroupTest, SubmitAllIsAllOrNothingAndNamesTheCallersIndex) {
  const Loaded l = LoadTiny();
  std::unique_ptr<EngineGroup> group = CpuGroup(l, 2);
  std::vector<GenerationRequest> reqs = Requests(6);
  reqs[5].prompt_tokens[0] = l.model->config().vocab_size + 5;  // outside the vocabulary
  reqs[2].sampling.max_tokens = 400;                              // would still be running
  auto ids = group->SubmitAll(reqs);
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ids.status().message().rfind("request 5: ", 0), 0u) << ids.status().message();
  // Nothing queued stays: both engines are idle, and the next batch spreads from scratch.
  for (int e = 0; e < 2; ++e) {
    EXPECT_EQ(group->engine(e).stats().running, 0);
    EXPECT_EQ(group->engine(e).stats().kv_blocks_in_use, 0);
  }
  reqs[5] = Requests(1)[0];
  auto again = group->SubmitAll(reqs);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  for (RequestId id : *again) EXPECT_TRUE(group->Wait(id).ok());
}

TEST(EngineGroupTest, RoutesWaitAndCancelAndRefusesUnknownIds) {
  const Loaded l = LoadTiny();
  std::unique_ptr<EngineGroup> group = CpuGroup(l, 2);
  std::mt19937 rng(3);
  auto a = group->Submit(Request(rng, 16, 4000, 0, 1));
  auto b = group->Submit(Request(rng, 16, 4000, 0, 2));
  ASSERT_TRUE(a.ok() && b.ok());
  group->Cancel(*b);
  group->Cancel(*a);
  group->Cancel(987654);  // unknown: nothing happens
  auto ra = group->Wait(*a);
  auto rb = group->Wait(*b);
  ASSERT_TRUE(ra.ok() && rb.ok());
  EXPECT_EQ(ra->finish_reason, FinishReason::kCancelled);
  EXPECT_EQ(rb->finish_reason, FinishReason::kCancelled);
  EXPECT_EQ(group->Wait(*a).status().code(), StatusCode::kNotFound) << "each id is waited for once";
  EXPECT_EQ(group->Wait(424242).status().code(), StatusCode::kNotFound);
}

TEST(EngineGroupTest, RefusesEnginesOfDifferentModels) {
  std::vector<std::unique_ptr<Engine>> engines;
  engines.push_back(CpuEngine(LoadTiny(ModelFamily::kQwen2)));
  engines.push_back(CpuEngine(LoadTiny(ModelFamily::kLlama)));
  auto g = EngineGroup::Create(std::move(engines));
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(EngineGroup::Create({}).status().code(), StatusCode::kInvalidArgument);
}

TEST(EngineGroupTest, CudaAllOnAMachineWithoutGpusSaysSo) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "this machine has CUDA devices";
  DeviceSet all;
  ASSERT_TRUE(ParseDeviceSet("cuda:all", &all).ok());
  auto g = EngineGroup::Load(testing::SynthModelDir(ModelFamily::kQwen2, "tiny"), all, EngineOptions{});
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("cuda"), std::string::npos) << g.status().message();
}

// Every GPU gives the CPU's tokens, whichever one a request lands on.
TEST(EngineGroupTest, EveryGpuGivesTheCpusTokens) {
  if (CudaDeviceCount() < 2) GTEST_SKIP() << "needs two CUDA devices (has " << CudaDeviceCount() << ")";
  const std::string dir = testing::SynthModelDir(ModelFamily::kQwen2, "tiny");
  DeviceSet all;
  ASSERT_TRUE(ParseDeviceSet("cuda:all", &all).ok());
  EngineOptions o;
  o.max_context = 512;
  o.kv_cache_bytes = 64 << 20;
  auto group = EngineGroup::Load(dir, all, o);
  ASSERT_TRUE(group.ok()) << group.status().ToString();
  EXPECT_EQ((*group)->size(), CudaDeviceCount());
  const Loaded l = LoadTiny();
  std::unique_ptr<Engine> cpu = CpuEngine(l);
  const std::vector<GenerationRequest> reqs = Requests(12);
  auto ids = (*group)->SubmitAll(reqs);
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  std::set<std::string> devices;
  for (size_t i = 0; i < reqs.size(); ++i) {
    auto got = (*group)->Wait((*ids)[i]);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    devices.insert(got->provenance.device);
    auto want = cpu->Generate(reqs[i]);
    ASSERT_TRUE(want.ok());
    EXPECT_EQ(got->tokens, want->tokens) << "request " << i << " on " << got->provenance.device;
  }
  EXPECT_EQ(devices.size(), static_cast<size_t>(CudaDeviceCount())) << "every GPU ran some of the requests";
}

}  // namespace
}  // namespace rote::inference
