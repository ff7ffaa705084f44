// A run that failed before its blueprint executed (its generated code was pending review, the
// generation failed, a point had no artifact) has no execution to replay: replay refuses it with
// FAILED_PRECONDITION saying why, never a MISMATCH against an execution that never happened.
// The engine runs here with the real generation pipeline and a scripted model, under the
// approval review policy; the last test drives the same kind of record through the server.
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "orchestrator/engine/engine.h"
#include "orchestrator/generate/pipeline.h"
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/word_stats.h"
#include "tests/orchestrator/generate_scripted_model.h"

namespace rote::e2e {
namespace {

using orchestrator::generate::testing::ScriptedCodeModel;

constexpr char kUpper[] = R"lua(local bp = rote.blueprint { name = "upper", version = "1.0.0" }
local up = bp:regex { name = "up", task = "Runs of upper-case ASCII letters.", examples = { { "Hi THERE", { "H", "THERE" } } } }
function bp.run(input) return up:find_all(input.word) end
return bp
)lua";

class UnexecutedReplay : public ::testing::Test {
 protected:
  void Start(orchestrator::generate::ReviewMode mode, ScriptedCodeModel::Script script) {
    dir_ = std::filesystem::temp_directory_path() / ("rote-unexecuted-replay-" + std::to_string(::getpid()));
    store_ = OpenFreshStore(dir_.string());
    ASSERT_NE(store_, nullptr);
    runner_ = orchestrator::engine::MakeInProcessLuaRunner();
    model_ = std::make_unique<ScriptedCodeModel>(std::move(script));
    pipeline_ = std::make_unique<orchestrator::generate::GenerationPipeline>(
        store_.get(), model_.get(), runner_.get(), orchestrator::generate::ReviewPolicy(mode),
        orchestrator::generate::PipelineOptions{});
    orchestrator::engine::EngineOptions eo;
    eo.run_workers = 1;
    auto e = orchestrator::engine::Engine::Create(store_.get(), runner_.get(), pipeline_.get(), eo);
    ASSERT_TRUE(e.ok()) << e.status();
    engine_ = *std::move(e);
    auto bp = engine_->RegisterBlueprint(kUpper, "", "upper.lua", "alice");
    ASSERT_TRUE(bp.ok()) << bp.status();
  }

  void TearDown() override {
    if (engine_) engine_->Shutdown();
    engine_.reset();
    pipeline_.reset();
    store_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  store::RunRecord RunToEnd() {
    orchestrator::engine::SubmitRequest req;
    req.blueprint = "blueprints/upper";
    req.input_json = R"({"word":"Hi THERE"})";
    req.policy.allow_generation = true;
    req.principal = "alice";
    auto run = engine_->SubmitRun(req);
    EXPECT_TRUE(run.ok()) << run.status();
    if (!run.ok()) return {};
    const std::string name = "runs/" + std::to_string(run->id);
    EXPECT_TRUE(engine_->WatchRun(name, [](const orchestrator::engine::RunEvent&) { return true; }, [] { return false; }).ok());
    auto done = engine_->GetRun(name);
    EXPECT_TRUE(done.ok()) << done.status();
    return done.ok() ? *done : store::RunRecord{};
  }

  void ExpectRefused(const store::RunRecord& run, const std::string& cause) {
    auto replay = engine_->ReplayRun("runs/" + std::to_string(run.id));
    ASSERT_FALSE(replay.ok()) << (replay->matched ? "EQUAL" : "MISMATCH: " + replay->recorded_json + " vs " +
                                                                   replay->replayed_json);
    EXPECT_TRUE(absl::IsFailedPrecondition(replay.status())) << replay.status();
    const std::string message(replay.status().message());
    EXPECT_NE(message.find("failed before its blueprint executed"), std::string::npos) << message;
    EXPECT_NE(message.find("'up'"), std::string::npos) << message;
    EXPECT_NE(message.find(cause), std::string::npos) << message;
  }

  std::filesystem::path dir_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<orchestrator::engine::LuaArtifactRunner> runner_;
  std::unique_ptr<ScriptedCodeModel> model_;
  std::unique_ptr<orchestrator::generate::GenerationPipeline> pipeline_;
  std::unique_ptr<orchestrator::engine::Engine> engine_;
};

std::string GoodAnswer(const std::vector<orchestrator::generate::ChatTurn>&) { return "```re2\n[A-Z]+\n```"; }

TEST_F(UnexecutedReplay, ARunWhoseGeneratedArtifactWasPendingIsRefusedNotMismatched) {
  Start(orchestrator::generate::ReviewMode::kApproval, GoodAnswer);
  store::RunRecord run = RunToEnd();
  ASSERT_EQ(run.state, store::RunState::kFailed);
  ASSERT_NE(run.error.find("pending review"), std::string::npos) << run.error;
  ExpectRefused(run, "pending review");

  // Approved afterwards, the artifact binds the next run, which executes and replays EQUAL;
  // the failed run's record is unchanged, and still refused.
  auto pending = store_->ListArtifacts(store::ArtifactFilter{"", store::ReviewState::kPending}, store::PageRequest{});
  ASSERT_TRUE(pending.ok());
  ASSERT_EQ(pending->items.size(), 1u);
  auto approved = engine_->ReviewArtifact("artifacts/" + pending->items[0].digest.substr(7),
                                          store::ReviewState::kApproved, "", pending->items[0].etag, "bob");
  ASSERT_TRUE(approved.ok()) << approved.status();
  store::RunRecord ok = RunToEnd();
  ASSERT_EQ(ok.state, store::RunState::kSucceeded) << ok.error;
  auto replay = engine_->ReplayRun("runs/" + std::to_string(ok.id));
  ASSERT_TRUE(replay.ok()) << replay.status();
  EXPECT_TRUE(replay->matched);
  ExpectRefused(run, "pending review");
}

TEST_F(UnexecutedReplay, ARunWhoseGenerationFailedIsRefused) {
  // Prose without code: every attempt is refused, the generation fails.
  Start(orchestrator::generate::ReviewMode::kAuto, ScriptedCodeModel::Table({}));
  store::RunRecord run = RunToEnd();
  ASSERT_EQ(run.state, store::RunState::kFailed);
  ASSERT_NE(run.error.find("generating 'up'"), std::string::npos) << run.error;
  ExpectRefused(run, "generating 'up'");
}

// Through the server: a failed run recorded without a binding for one of its points (as the
// engine records a run whose generated artifact was pending review) is refused over gRPC too.
TEST(UnexecutedReplayE2e, AFailedRunWithoutAnArtifactForAPointIsRefused) {
  TestServer server;
  server.Start();
  server.Register(kWordStats, kWordStatsLock, "word_stats.lua");
  rote::v1::Run run = server.WaitDone(server.Submit("blueprints/word_stats", R"({"text": "a b"})").name());
  ASSERT_EQ(run.state(), rote::v1::RUN_STATE_SUCCEEDED) << run.error();
  server.Stop();
  ExecSql(server.data_dir(),
          "DELETE FROM run_bindings WHERE run_id = 1 AND generation_point = 'shout';"
          "UPDATE runs SET state = 'failed', output_digest = NULL, error = 'generated artifact sha256:00 for ''shout'' "
          "is pending review' WHERE id = 1");
  server.Start();
  rote::v1::ReplayRunResponse replay;
  grpc::Status st = server.Replay(run.name(), &replay);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
      << (st.ok() ? (replay.matched() ? "matched" : "MISMATCH: " + replay.recorded_json()) : st.error_message());
  EXPECT_NE(st.error_message().find("failed before its blueprint executed"), std::string::npos) << st.error_message();
  EXPECT_NE(st.error_message().find("'shout'"), std::string::npos) << st.error_message();
}

}  // namespace
}  // namespace rote::e2e
