// Cancellation of pending and running runs, many runs at once on the bounded pool, and
// idempotent submission.
#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/word_stats.h"

namespace rote::e2e {
namespace {

// Spins until cancelled; pcall cannot swallow the cancellation.
const char kSpin[] = R"lua(local bp = rote.blueprint { name = "spin", version = "1" }
function bp.run(input)
  while true do
    pcall(function() while true do end end)
  end
end
return bp
)lua";

rote::v1::Run Cancel(TestServer& server, const std::string& name, grpc::Status* status) {
  rote::v1::CancelRunRequest req;
  req.set_name(name);
  rote::v1::Run run;
  grpc::ClientContext ctx;
  *status = server.runs().CancelRun(&ctx, req, &run);
  return run;
}

void WaitForState(TestServer& server, const std::string& name, rote::v1::RunState state) {
  for (int i = 0; i < 200; ++i) {
    if (server.Get(name).state() == state) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  FAIL() << name << " never reached " << rote::v1::RunState_Name(state);
}

TEST(CancelE2e, PendingAndRunningRunsAreCancelled) {
  TestServer server;
  server.Start(/*run_workers=*/1);
  server.Register(kSpin, "", "spin.lua");
  rote::v1::Run running = server.Submit("blueprints/spin", "{}");
  WaitForState(server, running.name(), rote::v1::RUN_STATE_RUNNING);
  // The only worker is busy: this one waits in the queue.
  rote::v1::Run pending = server.Submit("blueprints/spin", "{}");
  EXPECT_EQ(server.Get(pending.name()).state(), rote::v1::RUN_STATE_PENDING);

  grpc::Status st;
  rote::v1::Run cancelled = Cancel(server, pending.name(), &st);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(cancelled.state(), rote::v1::RUN_STATE_CANCELLED);
  EXPECT_EQ(cancelled.start_time().seconds(), 0) << "it never started";

  const auto before = std::chrono::steady_clock::now();
  cancelled = Cancel(server, running.name(), &st);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(cancelled.state(), rote::v1::RUN_STATE_CANCELLED);
  EXPECT_NE(cancelled.error().find("cancelled by local"), std::string::npos) << cancelled.error();
  EXPECT_LT(std::chrono::steady_clock::now() - before, std::chrono::seconds(5));

  // The watch of a cancelled run ends with CANCELLED.
  std::vector<rote::v1::RunEvent> events = server.Watch(running.name());
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().state(), rote::v1::RUN_STATE_CANCELLED);

  // Finished runs cannot be cancelled, and a cancelled run has nothing to replay.
  Cancel(server, running.name(), &st);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  rote::v1::ReplayRunResponse replay;
  EXPECT_EQ(server.Replay(running.name(), &replay).error_code(), grpc::StatusCode::FAILED_PRECONDITION);

  // The pool is free again.
  server.Register(kWordStats, kWordStatsLock, "word_stats.lua");
  rote::v1::Run ok = server.WaitDone(server.Submit("blueprints/word_stats", R"({"text": "after"})").name());
  EXPECT_EQ(ok.state(), rote::v1::RUN_STATE_SUCCEEDED) << ok.error();
}

TEST(CancelE2e, InstructionLimitEndsARunawayRun) {
  TestServer server;
  server.Start();
  server.Register(kSpin, "", "spin.lua");
  rote::v1::SubmitRunRequest req;
  req.set_blueprint("blueprints/spin");
  req.set_input_json("{}");
  req.mutable_policy()->set_max_instructions(2'000'000);
  rote::v1::Run run;
  grpc::ClientContext ctx;
  ASSERT_TRUE(server.runs().SubmitRun(&ctx, req, &run).ok());
  run = server.WaitDone(run.name());
  EXPECT_EQ(run.state(), rote::v1::RUN_STATE_FAILED);
  EXPECT_NE(run.error().find("instruction limit exceeded (max_instructions=2000000)"), std::string::npos) << run.error();
  // Deterministic limits replay like any other outcome.
  rote::v1::ReplayRunResponse replay;
  ASSERT_TRUE(server.Replay(run.name(), &replay).ok());
  EXPECT_TRUE(replay.matched());
}

TEST(ConcurrencyE2e, FiftyConcurrentRunsAllCorrect) {
  TestServer server;
  server.Start(/*run_workers=*/4);
  for (const char* name : {"access_log", "invoice_totals"}) {
    server.Register(ShippedBlueprint(name), ShippedLockfile(name), std::string(name) + ".lua");
  }
  server.Register(kWordStats, kWordStatsLock, "word_stats.lua");

  // Ten different inputs; each is run five times concurrently with all the others.
  struct Job {
    std::string blueprint;
    std::string input;
  };
  std::vector<Job> distinct;
  for (int top = 1; top <= 4; ++top) {
    std::string sample = ShippedSample("access_log");
    distinct.push_back({"blueprints/access_log", R"({"top":)" + std::to_string(top) + sample.substr(sample.find(',', sample.find("\"top\"")))});
  }
  distinct.push_back({"blueprints/invoice_totals", ShippedSample("invoice_totals")});
  for (int i = 0; i < 5; ++i) {
    distinct.push_back({"blueprints/word_stats", R"({"text": "run )" + std::to_string(i) + R"( of many words"})"});
  }
  // Reference outputs, one run at a time.
  std::vector<std::string> expected;
  for (const Job& j : distinct) {
    rote::v1::Run r = server.WaitDone(server.Submit(j.blueprint, j.input).name());
    ASSERT_EQ(r.state(), rote::v1::RUN_STATE_SUCCEEDED) << r.error();
    expected.push_back(r.output_json());
  }

  constexpr int kRuns = 50;
  std::vector<std::string> names(kRuns);
  std::vector<std::thread> submitters;
  for (int t = 0; t < 5; ++t) {
    submitters.emplace_back([&, t] {
      for (int i = t; i < kRuns; i += 5) {
        const Job& j = distinct[static_cast<size_t>(i) % distinct.size()];
        names[static_cast<size_t>(i)] = server.Submit(j.blueprint, j.input).name();
      }
    });
  }
  for (std::thread& t : submitters) t.join();
  std::vector<std::string> outputs(kRuns);
  std::vector<std::thread> watchers;
  for (int t = 0; t < 5; ++t) {
    watchers.emplace_back([&, t] {
      for (int i = t; i < kRuns; i += 5) {
        rote::v1::Run r = server.WaitDone(names[static_cast<size_t>(i)]);
        EXPECT_EQ(r.state(), rote::v1::RUN_STATE_SUCCEEDED) << r.error();
        outputs[static_cast<size_t>(i)] = r.output_json();
      }
    });
  }
  for (std::thread& t : watchers) t.join();
  for (int i = 0; i < kRuns; ++i) {
    EXPECT_EQ(outputs[static_cast<size_t>(i)], expected[static_cast<size_t>(i) % distinct.size()]) << "run " << i;
  }
  std::map<std::string, int> unique(std::map<std::string, int>{});
  for (const std::string& n : names) ++unique[n];
  EXPECT_EQ(unique.size(), static_cast<size_t>(kRuns)) << "every submission made its own run";
}

TEST(IdempotencyE2e, RepeatedRequestIdReturnsTheOriginalRun) {
  TestServer server;
  server.Start();
  server.Register(kWordStats, kWordStatsLock, "word_stats.lua");
  rote::v1::Run first = server.Submit("blueprints/word_stats", R"({"text": "once"})", "req-1");
  rote::v1::Run second = server.Submit("blueprints/word_stats", R"({ "text" : "once" })", "req-1");
  EXPECT_EQ(first.name(), second.name()) << "the same request (input canonicalized) is the same run";
  EXPECT_EQ(second.request_id(), "req-1");

  rote::v1::SubmitRunRequest other;
  other.set_blueprint("blueprints/word_stats");
  other.set_input_json(R"({"text": "twice"})");
  other.set_request_id("req-1");
  rote::v1::Run run;
  grpc::ClientContext ctx;
  grpc::Status st = server.runs().SubmitRun(&ctx, other, &run);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("already used for a different request"), std::string::npos);

  rote::v1::ListRunsRequest list;
  list.set_blueprint(first.blueprint());
  rote::v1::ListRunsResponse runs;
  grpc::ClientContext lctx;
  ASSERT_TRUE(server.runs().ListRuns(&lctx, list, &runs).ok());
  EXPECT_EQ(runs.runs_size(), 1);
}

}  // namespace
}  // namespace rote::e2e

namespace rote::e2e {
namespace {

TEST(RestartE2e, StoppingRequeuesRunningRunsAndKeepsPendingOnes) {
  TestServer server;
  server.set_configure([](orchestrator::ServerOptions* opt) { opt->drain_grace = std::chrono::milliseconds(100); });
  server.Start(/*run_workers=*/1);
  server.Register(kSpin, "", "spin.lua");
  server.Register(kWordStats, kWordStatsLock, "word_stats.lua");
  rote::v1::Run spinning = server.Submit("blueprints/spin", "{}");
  WaitForState(server, spinning.name(), rote::v1::RUN_STATE_RUNNING);
  rote::v1::Run queued = server.Submit("blueprints/word_stats", R"({"text": "later"})");
  EXPECT_EQ(server.Get(queued.name()).state(), rote::v1::RUN_STATE_PENDING);

  server.Stop();
  server.Start(/*run_workers=*/1);
  // Not failed: back in the queue, and taken up again (it spins until cancelled).
  WaitForState(server, spinning.name(), rote::v1::RUN_STATE_RUNNING);
  grpc::Status st;
  rote::v1::Run cancelled = Cancel(server, spinning.name(), &st);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(cancelled.state(), rote::v1::RUN_STATE_CANCELLED);
  rote::v1::Run done = server.WaitDone(queued.name());
  EXPECT_EQ(done.state(), rote::v1::RUN_STATE_SUCCEEDED) << done.error();
  EXPECT_EQ(done.output_json(), R"({"count":1,"first":"LATER","loud":["LATER"]})");
}

}  // namespace
}  // namespace rote::e2e
