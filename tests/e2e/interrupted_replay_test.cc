// A run that failed because it was interrupted (the server crashed while it ran) never reached a
// verdict: replaying it is refused, as for a cancelled run, instead of reporting a mismatch
// against a record that was never complete. A server that shuts down re-queues its runs instead,
// and they reach their own verdict on the next server.
#include <chrono>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/word_stats.h"

namespace rote::e2e {
namespace {

void ExpectReplayRefusedAsInterrupted(TestServer& server, const std::string& run) {
  rote::v1::ReplayRunResponse replay;
  grpc::Status st = server.Replay(run, &replay);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
      << (st.ok() ? (replay.matched() ? "matched" : "MISMATCH: " + replay.recorded_json()) : st.error_message());
  EXPECT_NE(st.error_message().find("interrupted"), std::string::npos) << st.error_message();
  EXPECT_NE(st.error_message().find("no complete record to replay"), std::string::npos) << st.error_message();
}

TEST(InterruptedReplayE2e, ARunFailedByACrashIsNotReplayed) {
  TestServer server;
  server.Start();
  server.Register(kWordStats, kWordStatsLock, "word_stats.lua");
  rote::v1::Run run = server.WaitDone(server.Submit("blueprints/word_stats", R"({"text": "crash"})").name());
  ASSERT_EQ(run.state(), rote::v1::RUN_STATE_SUCCEEDED) << run.error();
  server.Stop();
  // As a crash leaves it: the journal written, the end never recorded.
  ExecSql(server.data_dir(),
          "UPDATE runs SET state = 'running', output_digest = NULL, end_ms = NULL WHERE id = 1");
  server.Start();
  rote::v1::Run failed = server.Get(run.name());
  ASSERT_EQ(failed.state(), rote::v1::RUN_STATE_FAILED);
  EXPECT_NE(failed.error().find("interrupted"), std::string::npos) << failed.error();
  ExpectReplayRefusedAsInterrupted(server, run.name());
}

// Spins until stopped.
const char kSpin[] = R"lua(local bp = rote.blueprint { name = "spin", version = "1" }
function bp.run(input)
  while true do end
end
return bp
)lua";

TEST(InterruptedReplayE2e, ARunStoppedByAShutdownRunsAgainToItsOwnVerdict) {
  TestServer server;
  server.set_configure([](orchestrator::ServerOptions* opt) { opt->drain_grace = std::chrono::milliseconds(50); });
  server.Start(/*run_workers=*/1);
  server.Register(kSpin, "", "spin.lua");
  rote::v1::SubmitRunRequest req;
  req.set_blueprint("blueprints/spin");
  req.set_input_json("{}");
  // Bounded, so the run reaches a verdict (its limit) once it runs uninterrupted.
  req.mutable_policy()->set_max_instructions(300'000'000);
  rote::v1::Run run;
  ASSERT_TRUE(server.runs().SubmitRun(server.Context().get(), req, &run).ok());
  for (int i = 0; i < 400 && server.Get(run.name()).state() != rote::v1::RUN_STATE_RUNNING; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(server.Get(run.name()).state(), rote::v1::RUN_STATE_RUNNING);
  server.Stop();
  server.Start(/*run_workers=*/1);
  // Re-queued by the draining server, not failed: the next server runs it from its start.
  rote::v1::Run again = server.WaitDone(run.name());
  ASSERT_EQ(again.state(), rote::v1::RUN_STATE_FAILED);
  EXPECT_EQ(again.error().find("shut down"), std::string::npos) << again.error();
  rote::v1::ReplayRunResponse verdict;
  grpc::Status replayed = server.Replay(run.name(), &verdict);
  ASSERT_TRUE(replayed.ok()) << replayed.error_message();
  EXPECT_TRUE(verdict.matched());

  // A run that failed by its own limit is a verdict and still replays.
  req.mutable_policy()->set_max_instructions(1'000'000);
  ASSERT_TRUE(server.runs().SubmitRun(server.Context().get(), req, &run).ok());
  run = server.WaitDone(run.name());
  ASSERT_EQ(run.state(), rote::v1::RUN_STATE_FAILED);
  rote::v1::ReplayRunResponse replay;
  grpc::Status st = server.Replay(run.name(), &replay);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_TRUE(replay.matched());
}

}  // namespace
}  // namespace rote::e2e
