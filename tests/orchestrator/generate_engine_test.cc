// The pipeline behind the blueprint engine: a run whose generation points are unbound asks the
// pipeline for them, under the server's review policy, and reports progress as run events.
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <regex>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "orchestrator/engine/engine.h"
#include "orchestrator/generate/pipeline.h"
#include "store/store.h"
#include "tests/orchestrator/generate_scripted_model.h"

namespace rote::orchestrator::generate {
namespace {

using ::testing::HasSubstr;
using testing::ScriptedCodeModel;

constexpr const char* kBlueprint = R"lua(
local bp = rote.blueprint { name = "amounts", version = "1.0.0" }
local parse = bp:lua {
  name = "parse_amount",
  task = "Parse a decimal number written with a comma.",
  signature = "function(text) -> number",
  tests = { { "1,5", 1.5 }, { "10,25", 10.25 } },
}
local word = bp:regex {
  name = "word",
  task = "Words of lowercase letters.",
  examples = { { "ab cd", { "ab", "cd" } } },
}
function bp.run(input)
  local total = 0
  for _, a in ipairs(input.amounts) do total = total + parse(a) end
  return { total = total, words = word:find_all(input.text) }
end
return bp
)lua";

class EngineGenerationTest : public ::testing::Test {
 protected:
  void Start(ReviewMode mode, ScriptedCodeModel::Script script) {
    auto dir = std::filesystem::temp_directory_path() /
               ("rote-generate-engine-test-" + std::to_string(::getpid()) + "-" + std::to_string(++counter_));
    std::filesystem::remove_all(dir);
    store::StoreOptions o;
    o.path = dir.string();
    o.synchronous = store::SyncMode::kNormal;
    auto s = store::Store::Open(o);
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = *std::move(s);
    runner_ = engine::MakeInProcessLuaRunner();
    model_ = std::make_unique<ScriptedCodeModel>(std::move(script));
    pipeline_ = std::make_unique<GenerationPipeline>(store_.get(), model_.get(), runner_.get(), ReviewPolicy(mode),
                                                     PipelineOptions{});
    engine::EngineOptions eo;
    eo.run_workers = 2;
    auto e = engine::Engine::Create(store_.get(), runner_.get(), pipeline_.get(), eo);
    ASSERT_TRUE(e.ok()) << e.status();
    engine_ = *std::move(e);
    auto bp = engine_->RegisterBlueprint(kBlueprint, "", "amounts.lua", "alice");
    ASSERT_TRUE(bp.ok()) << bp.status();
  }

  void TearDown() override {
    if (engine_) engine_->Shutdown();
  }

  // Submits and waits for the end; returns the run and its generation progress lines.
  std::pair<store::RunRecord, std::vector<std::string>> Run(bool allow_pending, int32_t generation_retry = 0) {
    engine::SubmitRequest req;
    req.blueprint = "blueprints/amounts";
    req.input_json = R"({"amounts":["1,5","2,25"],"text":"hello world"})";
    req.policy.allow_generation = true;
    req.policy.allow_pending = allow_pending;
    req.policy.generation_retry = generation_retry;
    req.may_run_unreviewed = allow_pending;
    req.principal = "alice";
    auto run = engine_->SubmitRun(req);
    EXPECT_TRUE(run.ok()) << run.status();
    if (!run.ok()) return {};
    std::vector<std::string> progress;
    const std::string name = "runs/" + std::to_string(run->id);
    absl::Status watched = engine_->WatchRun(
        name,
        [&](const engine::RunEvent& e) {
          if (e.kind == engine::RunEvent::Kind::kGenerationProgress) progress.push_back(e.text);
          return true;
        },
        [] { return false; });
    EXPECT_TRUE(watched.ok()) << watched;
    auto done = engine_->GetRun(name);
    EXPECT_TRUE(done.ok()) << done.status();
    return {*done, progress};
  }

  static std::string Answer(const std::vector<generate::ChatTurn>& m) {
    const std::string point = testing::PointAndAttempt(m).first;
    if (point == "word") return "```re2\n[a-z]+\n```";
    return "```lua\nreturn function(text)\n  return tonumber((text:gsub(',', '.')))\nend\n```";
  }

  static int counter_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<engine::LuaArtifactRunner> runner_;
  std::unique_ptr<ScriptedCodeModel> model_;
  std::unique_ptr<GenerationPipeline> pipeline_;
  std::unique_ptr<engine::Engine> engine_;
};
int EngineGenerationTest::counter_ = 0;

TEST_F(EngineGenerationTest, AutoPolicyRunsGeneratedCodeAtOnce) {
  Start(ReviewMode::kAuto, Answer);
  auto [run, progress] = Run(/*allow_pending=*/false);
  ASSERT_EQ(run.state, store::RunState::kSucceeded) << run.error;
  auto output = engine_->OutputJson(run);
  ASSERT_TRUE(output.ok()) << output.status();
  EXPECT_EQ(*output, R"({"total":3.75,"words":["hello","world"]})");
  EXPECT_THAT(progress, ::testing::Contains(HasSubstr("parse_amount: attempt 1/3 started")));
  EXPECT_THAT(progress, ::testing::Contains(HasSubstr("word: attempt 1/3 passed")));
  EXPECT_EQ(model_->calls(), 2);
  // The run's two points went to the model together, in one batch.
  EXPECT_THAT(model_->batch_sizes(), ::testing::ElementsAre(2u));

  // A second run binds the approved artifacts without asking the model.
  auto [again, again_progress] = Run(false);
  ASSERT_EQ(again.state, store::RunState::kSucceeded) << again.error;
  EXPECT_EQ(model_->calls(), 2);
}

TEST_F(EngineGenerationTest, ApprovalPolicyLeavesArtifactsPending) {
  Start(ReviewMode::kApproval, Answer);
  auto [run, progress] = Run(/*allow_pending=*/false);
  ASSERT_EQ(run.state, store::RunState::kFailed);
  EXPECT_THAT(run.error, HasSubstr("pending review"));
  auto pending = store_->ListArtifacts(store::ArtifactFilter{"", store::ReviewState::kPending}, store::PageRequest{});
  ASSERT_TRUE(pending.ok());
  ASSERT_FALSE(pending->items.empty());
  // alice submitted the run: she may not approve what it generated.
  const store::ArtifactRecord& a = pending->items[0];
  absl::Status denied = CheckMayReview(store_.get(), pipeline_->review_policy(), a, store::ReviewState::kApproved,
                                       "alice", false);
  EXPECT_TRUE(absl::IsPermissionDenied(denied)) << denied;
  EXPECT_TRUE(CheckMayReview(store_.get(), pipeline_->review_policy(), a, store::ReviewState::kApproved, "bob", false).ok());
}

TEST_F(EngineGenerationTest, FailedGenerationFailsTheRunNamingTheRequest) {
  Start(ReviewMode::kAuto, [](const std::vector<ChatTurn>&) { return std::string("no idea"); });
  auto [run, progress] = Run(false);
  ASSERT_EQ(run.state, store::RunState::kFailed);
  EXPECT_THAT(run.error, HasSubstr("passed validation in 3 attempts"));
  EXPECT_THAT(run.error, ::testing::ContainsRegex("recorded in generations/[0-9a-f]{64} \\(read them with "
                                                  "`rote generations get [0-9a-f]{64}`\\)"));
  EXPECT_THAT(progress, ::testing::Contains(HasSubstr("attempt 3/3 failed")));
}

// A failed generation is answered from its record; a run that asks for a retry reaches the model
// again, under another request digest.
TEST_F(EngineGenerationTest, GenerationRetryAsksTheModelAgain) {
  Start(ReviewMode::kAuto, [](const std::vector<ChatTurn>&) { return std::string("no idea"); });
  auto [first, p1] = Run(false);
  ASSERT_EQ(first.state, store::RunState::kFailed);
  const int calls = model_->calls();
  EXPECT_GT(calls, 0);
  auto [again, p2] = Run(false);
  ASSERT_EQ(again.state, store::RunState::kFailed);
  EXPECT_EQ(model_->calls(), calls) << "a repeated request is answered from its failure record";
  auto [retried, p3] = Run(false, /*generation_retry=*/1);
  ASSERT_EQ(retried.state, store::RunState::kFailed);
  EXPECT_EQ(model_->calls(), 2 * calls);
  const std::regex request("generations/([0-9a-f]{64})");
  std::smatch a, b;
  ASSERT_TRUE(std::regex_search(first.error, a, request));
  ASSERT_TRUE(std::regex_search(retried.error, b, request));
  EXPECT_NE(a[1].str(), b[1].str());
}

// A run whose code is generated when it executes, stopped by a draining engine while the model
// works: re-queued, not failed, and the next engine on the same store generates its code under
// the same policy and runs it.
TEST_F(EngineGenerationTest, ARunStoppedDuringGenerationResumesOnTheNextEngine) {
  Start(ReviewMode::kAuto, [](const std::vector<generate::ChatTurn>& m) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    return Answer(m);
  });
  engine::SubmitRequest req;
  req.blueprint = "blueprints/amounts";
  req.input_json = R"({"amounts":["1,5","2,25"],"text":"hello world"})";
  req.policy.allow_generation = true;
  req.principal = "alice";
  auto run = engine_->SubmitRun(req);
  ASSERT_TRUE(run.ok()) << run.status();
  const std::string name = "runs/" + std::to_string(run->id);
  for (int i = 0; i < 200 && engine_->GetRun(name)->state != store::RunState::kRunning; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(engine_->Drain(std::chrono::milliseconds(0)), 1);
  engine_->Shutdown();
  EXPECT_EQ(engine_->GetRun(name)->state, store::RunState::kPending);
  engine::SubmitRequest refused = req;
  EXPECT_EQ(engine_->SubmitRun(refused).status().code(), absl::StatusCode::kUnavailable);
  engine_.reset();

  engine::EngineOptions eo;
  eo.run_workers = 2;
  auto next = engine::Engine::Create(store_.get(), runner_.get(), pipeline_.get(), eo);
  ASSERT_TRUE(next.ok()) << next.status();
  engine_ = *std::move(next);
  absl::Status watched = engine_->WatchRun(name, [](const engine::RunEvent&) { return true; }, [] { return false; });
  ASSERT_TRUE(watched.ok()) << watched;
  auto done = engine_->GetRun(name);
  ASSERT_EQ(done->state, store::RunState::kSucceeded) << done->error;
  EXPECT_EQ(done->bindings.size(), 2u);
  auto output = engine_->OutputJson(*done);
  ASSERT_TRUE(output.ok()) << output.status();
  EXPECT_EQ(*output, R"({"total":3.75,"words":["hello","world"]})");
}

}  // namespace
}  // namespace rote::orchestrator::generate
