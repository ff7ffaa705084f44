// Replay: compares step by step, names the first difference with both values, refuses a changed
// blueprint, and reports stored bytes that no longer match their digest as DATA_LOSS.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/word_stats.h"

namespace rote::e2e {
namespace {

struct Recorded {
  rote::v1::Run run;
  std::vector<rote::v1::Step> steps;
};

// Registers word_stats, runs it once, and returns the finished run with its journal.
Recorded RunWordStats(TestServer& server) {
  server.Register(kWordStats, kWordStatsLock, "word_stats.lua");
  rote::v1::Run run = server.Submit("blueprints/word_stats", R"({"text": "replay me"})");
  Recorded r;
  for (const rote::v1::RunEvent& e : server.Watch(run.name())) {
    if (e.has_step()) r.steps.push_back(e.step());
  }
  r.run = server.Get(run.name());
  EXPECT_EQ(r.run.state(), rote::v1::RUN_STATE_SUCCEEDED) << r.run.error();
  EXPECT_EQ(r.steps.size(), 3u);
  return r;
}

std::string RunId(const rote::v1::Run& run) { return run.name().substr(5); }

TEST(ReplayE2e, MismatchNamesTheFirstDifferingStepWithBothValues) {
  TestServer server;
  server.Start();
  Recorded r = RunWordStats(server);
  ASSERT_EQ(r.steps.size(), 3u);
  server.Stop();
  // Make the journal claim that step 1 (shout:map) returned its own input: a valid blob, but not
  // what the artifact computes.
  ExecSql(server.data_dir(), "UPDATE run_steps SET output_digest = input_digest WHERE run_id = " + RunId(r.run) +
                                 " AND idx = 1");
  server.Start();
  rote::v1::ReplayRunResponse replay;
  grpc::Status st = server.Replay(r.run.name(), &replay);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_FALSE(replay.matched());
  EXPECT_EQ(replay.first_mismatch_step(), 1);
  EXPECT_EQ(replay.steps_compared(), 1);
  EXPECT_NE(replay.recorded_json().find(R"("output":["replay","me"])"), std::string::npos) << replay.recorded_json();
  EXPECT_NE(replay.replayed_json().find(R"("output":["REPLAY","ME"])"), std::string::npos) << replay.replayed_json();
  EXPECT_NE(replay.replayed_json().find(R"("generation_point":"shout")"), std::string::npos);
}

TEST(ReplayE2e, OutputMismatchIsReportedAtStepMinusOne) {
  TestServer server;
  server.Start();
  Recorded r = RunWordStats(server);
  server.Stop();
  ExecSql(server.data_dir(), "UPDATE runs SET output_digest = input_digest WHERE id = " + RunId(r.run));
  server.Start();
  rote::v1::ReplayRunResponse replay;
  grpc::Status st = server.Replay(r.run.name(), &replay);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_FALSE(replay.matched());
  EXPECT_EQ(replay.first_mismatch_step(), -1);
  EXPECT_EQ(replay.steps_compared(), 3);
  EXPECT_EQ(replay.recorded_json(), R"({"text":"replay me"})");
  EXPECT_EQ(replay.replayed_json(), R"({"count":2,"first":"REPLAY","loud":["REPLAY","ME"]})");
}

TEST(ReplayE2e, TamperedArtifactIsDataLoss) {
  TestServer server;
  server.Start();
  Recorded r = RunWordStats(server);
  server.Stop();
  ExecSql(server.data_dir(),
          "UPDATE artifacts SET source = 'return function(word) return string.lower(word) end' "
          "WHERE generation_point = 'word_stats/shout'");
  server.Start();
  rote::v1::ReplayRunResponse replay;
  grpc::Status st = server.Replay(r.run.name(), &replay);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::DATA_LOSS) << st.error_message();
  EXPECT_NE(st.error_message().find("no longer matches its digest"), std::string::npos) << st.error_message();
  EXPECT_NE(st.error_message().find(r.steps[1].artifact_digest()), std::string::npos) << st.error_message();

  // A new run of the blueprint refuses the altered code too.
  rote::v1::Run again = server.WaitDone(server.Submit("blueprints/word_stats", R"({"text": "x"})").name());
  EXPECT_EQ(again.state(), rote::v1::RUN_STATE_FAILED);
  EXPECT_NE(again.error().find("no longer matches its digest"), std::string::npos) << again.error();
}

TEST(ReplayE2e, TamperedJournalBlobIsDataLoss) {
  TestServer server;
  server.Start();
  Recorded r = RunWordStats(server);
  server.Stop();
  ExecSql(server.data_dir(), "UPDATE blobs SET data = CAST('[\"forged\"]' AS BLOB) WHERE digest = '" +
                                 r.steps[2].output_digest() + "'");
  server.Start();
  rote::v1::ReplayRunResponse replay;
  grpc::Status st = server.Replay(r.run.name(), &replay);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::DATA_LOSS) << st.error_message();
}

TEST(ReplayE2e, ChangedBlueprintIsRefused) {
  TestServer server;
  server.Start();
  Recorded r = RunWordStats(server);
  server.Stop();
  ExecSql(server.data_dir(), "UPDATE blueprints SET source = replace(source, 'found', 'seen')");
  server.Start();
  rote::v1::ReplayRunResponse replay;
  grpc::Status st = server.Replay(r.run.name(), &replay);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << st.error_message();
  EXPECT_NE(st.error_message().find("changed since " + r.run.name()), std::string::npos) << st.error_message();
  EXPECT_NE(st.error_message().find(r.run.blueprint_digest()), std::string::npos) << st.error_message();
}

TEST(ReplayE2e, FailedRunsReplayTheirError) {
  TestServer server;
  server.Start();
  server.Register(kWordStats, kWordStatsLock, "word_stats.lua");
  // input.text is missing: find_all gets nil and the run fails naming the blueprint line (17).
  rote::v1::Run run = server.WaitDone(server.Submit("blueprints/word_stats", R"({"txt": "typo"})").name());
  ASSERT_EQ(run.state(), rote::v1::RUN_STATE_FAILED);
  EXPECT_NE(run.error().find("word_stats.lua:17:"), std::string::npos) << run.error();
  rote::v1::ReplayRunResponse replay;
  grpc::Status st = server.Replay(run.name(), &replay);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_TRUE(replay.matched()) << replay.recorded_json() << " vs " << replay.replayed_json();
  EXPECT_EQ(replay.output_digest(), "");
}

TEST(ReplayE2e, UnfinishedRunsCannotBeReplayed) {
  TestServer server;
  server.Start();
  rote::v1::ReplayRunResponse replay;
  EXPECT_EQ(server.Replay("runs/999", &replay).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(server.Replay("not-a-run", &replay).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

}  // namespace
}  // namespace rote::e2e
