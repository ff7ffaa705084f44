// Submit, watch, succeed, replay: the main job over real gRPC.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/word_stats.h"

namespace rote::e2e {
namespace {

TEST(RunsE2e, SubmitWatchSucceedAndReplay) {
  TestServer server;
  server.Start();
  rote::v1::Blueprint bp = server.Register(kWordStats, kWordStatsLock, "word_stats.lua");
  ASSERT_EQ(bp.display_name(), "word_stats");
  ASSERT_EQ(bp.generation_points_size(), 2);
  EXPECT_EQ(bp.generation_points(0).name(), "words");
  EXPECT_EQ(bp.generation_points(0).kind(), rote::v1::ARTIFACT_KIND_RE2_PATTERN);
  EXPECT_EQ(bp.generation_points(0).examples_json(0), R"({"input":"hi there","matches":["hi","there"]})");
  ASSERT_EQ(bp.bindings_size(), 2);
  EXPECT_EQ(bp.bindings(0).source(), "live");
  EXPECT_EQ(bp.bindings(0).revision(), 1);

  rote::v1::Run run = server.Submit("blueprints/word_stats", R"({"text": "hi there"})");
  ASSERT_FALSE(run.name().empty());
  EXPECT_TRUE(run.state() == rote::v1::RUN_STATE_PENDING || run.state() == rote::v1::RUN_STATE_RUNNING);
  EXPECT_EQ(run.submitter(), "local");

  std::vector<rote::v1::RunEvent> events = server.Watch(run.name());
  std::vector<rote::v1::RunState> states;
  int steps = 0;
  std::vector<std::string> logs;
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].sequence(), static_cast<int64_t>(i)) << "sequence is dense from 0";
    if (events[i].has_step()) ++steps;
    if (events[i].event_case() == rote::v1::RunEvent::kState) states.push_back(events[i].state());
    if (events[i].event_case() == rote::v1::RunEvent::kLog) logs.push_back(events[i].log());
  }
  EXPECT_EQ(states, (std::vector<rote::v1::RunState>{rote::v1::RUN_STATE_PENDING, rote::v1::RUN_STATE_RUNNING,
                                                      rote::v1::RUN_STATE_SUCCEEDED}));
  EXPECT_EQ(steps, 3);  // find_all, map, one call
  EXPECT_EQ(logs, std::vector<std::string>{"found 2 words"});

  rote::v1::Run done = server.Get(run.name());
  ASSERT_EQ(done.state(), rote::v1::RUN_STATE_SUCCEEDED) << done.error();
  EXPECT_EQ(done.output_json(), R"({"count":2,"first":"HI","loud":["HI","THERE"]})");
  EXPECT_EQ(done.step_count(), 3);
  EXPECT_EQ(done.bindings_size(), 2);
  EXPECT_NE(done.engine_profile_json().find("rote-lua5.4-deterministic"), std::string::npos);

  rote::v1::ReplayRunResponse replay;
  grpc::Status st = server.Replay(run.name(), &replay);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_TRUE(replay.matched()) << replay.recorded_json() << " vs " << replay.replayed_json();
  EXPECT_EQ(replay.steps_compared(), 3);
  EXPECT_EQ(replay.output_digest(), done.output_digest());

  // Watching a finished run replays its recorded events.
  std::vector<rote::v1::RunEvent> again = server.Watch(run.name());
  ASSERT_EQ(again.size(), events.size());
  for (size_t i = 0; i < events.size(); ++i) EXPECT_EQ(again[i].SerializeAsString(), events[i].SerializeAsString());
}

}  // namespace
}  // namespace rote::e2e
