#include "sandbox/worker_pool.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <thread>

#include "sandbox/value.h"

namespace rote::sandbox {
namespace {

std::unique_ptr<WorkerPool> StartPool(int n = 2) {
  WorkerPoolOptions o;
  o.num_workers = n;
  o.default_deadline = std::chrono::milliseconds(10'000);
  auto pool = WorkerPool::Start(o);
  EXPECT_TRUE(pool.ok()) << pool.status();
  return pool.ok() ? *std::move(pool) : nullptr;
}

constexpr const char* kDouble = "return function(x) return { doubled = x.n * 2, tag = x.tag:upper() } end";

Value Input(int64_t n, const char* tag) {
  Map m;
  m["n"] = Value::Int(n);
  m["tag"] = Value::String(tag);
  return Value::FromMap(std::move(m));
}

TEST(WorkerPoolTest, BatchGivesOneResultPerInputMatchingInProcess) {
  auto pool = StartPool();
  ASSERT_NE(pool, nullptr);
  std::vector<Value> inputs;
  for (int i = 0; i < 50; ++i) inputs.push_back(Input(i, "ab"));
  inputs.push_back(Value::String("not a map"));
  auto out = pool->Call(kDouble, "double.lua", inputs, {});
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), inputs.size());
  auto local = RunFunctionArtifact(kDouble, "double.lua", inputs, {});
  ASSERT_TRUE(local.ok());
  for (size_t i = 0; i < inputs.size(); ++i) {
    EXPECT_EQ((*out)[i].status, (*local)[i].status) << i;
    EXPECT_TRUE((*out)[i].value == (*local)[i].value) << i;
    EXPECT_EQ((*out)[i].usage.instructions, (*local)[i].usage.instructions) << i;
  }
  EXPECT_EQ(*CanonicalJson((*out)[7].value), R"({"doubled":14,"tag":"AB"})");
  EXPECT_EQ((*out)[50].status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE((*out)[50].status.message().find("double.lua:1:"), std::string::npos) << (*out)[50].status;
}

TEST(WorkerPoolTest, LargeBatchComesBackInFramesInOrder) {
  auto pool = StartPool(1);
  ASSERT_NE(pool, nullptr);
  std::vector<Value> inputs;
  for (int i = 0; i < 2500; ++i) inputs.push_back(Input(i, i % 7 == 0 ? "boom" : "ok"));
  auto out = pool->Call("return function(x) if x.tag == 'boom' then error('bad ' .. x.n) end return x.n * 3 end",
                        "frames.lua", inputs, {});
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), inputs.size());
  for (int i = 0; i < 2500; ++i) {
    if (i % 7 == 0) {
      EXPECT_EQ((*out)[i].status.message(), "frames.lua:1: bad " + std::to_string(i));
    } else {
      ASSERT_TRUE((*out)[i].status.ok()) << i;
      EXPECT_EQ((*out)[i].value.as_int(), 3 * i);
    }
  }
}

TEST(WorkerPoolTest, ReusedCompiledArtifactGivesIdenticalResults) {
  // The worker keeps the last artifact compiled; later batches must not see earlier state.
  auto pool = StartPool(1);
  ASSERT_NE(pool, nullptr);
  const char* src = "local seen = 0 return function(x) seen = seen + 1 g = (g or 0) + 1 "
                    "return {seen = seen, g = g, r = math.random(1000), t = tostring({})} end";
  std::vector<Value> inputs = {Value::Int(1), Value::Int(2)};
  auto local = RunFunctionArtifact(src, "s.lua", inputs, {});
  ASSERT_TRUE(local.ok());
  for (int round = 0; round < 3; ++round) {
    auto out = pool->Call(src, "s.lua", inputs, {});
    ASSERT_TRUE(out.ok()) << out.status();
    for (size_t i = 0; i < inputs.size(); ++i) {
      EXPECT_TRUE((*out)[i].value == (*local)[i].value) << round;
      EXPECT_EQ((*out)[i].usage.instructions, (*local)[i].usage.instructions);
      EXPECT_EQ((*out)[i].usage.peak_memory_bytes, (*local)[i].usage.peak_memory_bytes);
    }
    EXPECT_EQ(*CanonicalJson((*out)[1].value), *CanonicalJson((*local)[0].value));
    // A different artifact in between evicts the cached one.
    ASSERT_TRUE(pool->Call(kDouble, "double.lua", {Input(1, "a")}, {}).ok());
  }
}

TEST(WorkerPoolTest, CompileErrorFailsTheBatch) {
  auto pool = StartPool(1);
  ASSERT_NE(pool, nullptr);
  auto out = pool->Call("return function(x) return x +* 1 end", "bad.lua", {Value::Int(1)}, {});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(out.status().message().find("bad.lua:1:"), std::string::npos) << out.status();
}

TEST(WorkerPoolTest, DeadlineKillsTheWorkerAndThePoolRecovers) {
  auto pool = StartPool(1);
  ASSERT_NE(pool, nullptr);
  Limits unlimited;
  unlimited.max_instructions = UINT64_MAX / 2;
  auto t0 = std::chrono::steady_clock::now();
  auto out = pool->Call("return function(x) while true do end end", "loop.lua", {Value::Int(1)}, unlimited,
                        std::chrono::milliseconds(300));
  auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(out.status().message().find("infrastructure timeout"), std::string::npos);
  EXPECT_LT(took, std::chrono::seconds(3));
  auto next = pool->Call(kDouble, "double.lua", {Input(2, "x")}, {});
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(*CanonicalJson((*next)[0].value), R"({"doubled":4,"tag":"X"})");
  EXPECT_EQ(pool->stats().timeouts, 1u);
}

TEST(WorkerPoolTest, KilledWorkerFailsOnlyItsCall) {
  auto pool = StartPool(1);
  ASSERT_NE(pool, nullptr);
  auto pids = pool->idle_worker_pids();
  ASSERT_EQ(pids.size(), 1u);
  ASSERT_EQ(kill(pids[0], SIGKILL), 0);
  auto out = pool->Call(kDouble, "double.lua", {Input(1, "a")}, {});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(out.status().message().find("signal 9"), std::string::npos) << out.status();
  auto next = pool->Call(kDouble, "double.lua", {Input(1, "a")}, {});
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_NE(pool->idle_worker_pids()[0], pids[0]);
}

TEST(WorkerPoolTest, ConcurrentCallersShareThePool) {
  auto pool = StartPool(2);
  ASSERT_NE(pool, nullptr);
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < 10; ++k) {
        auto out = pool->Call(kDouble, "double.lua", {Input(t * 100 + k, "q")}, {});
        if (out.ok() && (*out)[0].value.as_map().at("doubled").as_int() == 2 * (t * 100 + k)) ok++;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok.load(), 40);
}

TEST(WorkerPoolTest, StatsCountLimitHitsByLimit) {
  auto pool = StartPool(1);
  ASSERT_NE(pool, nullptr);
  Limits tight;
  tight.max_instructions = 100'000;
  tight.max_output_bytes = 8;
  auto out = pool->Call("return function(x) if x.n == 1 then while true do end end print(string.rep('y', 100)) end",
                        "limits.lua", {Input(1, "a"), Input(2, "b")}, tight);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 2u);
  EXPECT_EQ((*out)[0].status.code(), absl::StatusCode::kResourceExhausted) << (*out)[0].status;
  EXPECT_EQ((*out)[1].status.code(), absl::StatusCode::kResourceExhausted) << (*out)[1].status;
  const WorkerPoolStats stats = pool->stats();
  EXPECT_EQ(stats.instruction_limit_hits, 1u);
  EXPECT_EQ(stats.output_limit_hits, 1u);
  EXPECT_EQ(stats.memory_limit_hits, 0u);
}

}  // namespace
}  // namespace rote::sandbox
