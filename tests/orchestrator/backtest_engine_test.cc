// The backtest component over an engine with recorded runs: results in run and step order
// whatever the batching and parallelism, differences capped, errors counted, patterns, the live
// revision it names, cancellation; and Try.
#include "orchestrator/engine/backtest.h"

#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "orchestrator/engine/engine.h"
#include "store/store.h"

namespace rote::orchestrator::engine {
namespace {

constexpr char kBlueprint[] = R"lua(local bp = rote.blueprint { name = "bt", version = "1" }
local up = bp:lua { name = "up", task = "Upper-case.", signature = "function(s) -> string", tests = { { "a", "A" } } }
local words = bp:regex { name = "words", task = "Words.", examples = { { "a b", { "a", "b" } } } }
function bp.run(input)
  local out = {}
  for i = 1, input.n do out[i] = up("w" .. i) end
  out[#out + 1] = words:find_all(input.text)
  return out
end
return bp
)lua";

std::string Lock(const std::string& up, const std::string& words) {
  return "format = 1\nblueprint = \"bt\"\n\n[[point]]\nname = \"up\"\nkind = \"lua_function\"\nsource = '''\n" + up +
         "'''\n\n[[point]]\nname = \"words\"\nkind = \"re2_pattern\"\nsource = '" + words + "'\n";
}

constexpr char kUpper[] = "return function(s) return string.upper(s) end\n";

class BacktestEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("rote-backtest-engine-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    store::StoreOptions so;
    so.path = dir_.string();
    so.synchronous = store::SyncMode::kNormal;
    auto s = store::Store::Open(so);
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = *std::move(s);
    runner_ = MakeInProcessLuaRunner();
    options_.run_workers = 1;
    auto e = Engine::Create(store_.get(), runner_.get(), nullptr, options_);
    ASSERT_TRUE(e.ok()) << e.status();
    engine_ = *std::move(e);
    Register(kUpper, "[a-z]+");
    for (const char* text : {"ab cd", "12", "ef"}) Run(150, text);
  }
  void TearDown() override {
    engine_->Shutdown();
    engine_.reset();
    store_.reset();
    std::filesystem::remove_all(dir_);
  }

  void Register(const std::string& up, const std::string& words) {
    auto bp = engine_->RegisterBlueprint(kBlueprint, Lock(up, words), "bt.lua", "alice",
                                         [](const store::ArtifactRecord&) { return absl::OkStatus(); });
    ASSERT_TRUE(bp.ok()) << bp.status();
  }

  void Run(int n, const std::string& text) {
    SubmitRequest req;
    req.blueprint = "blueprints/bt";
    req.input_json = "{\"n\":" + std::to_string(n) + ",\"text\":\"" + text + "\"}";
    req.principal = "alice";
    auto run = engine_->SubmitRun(req);
    ASSERT_TRUE(run.ok()) << run.status();
    const std::string name = "runs/" + std::to_string(run->id);
    ASSERT_TRUE(engine_->WatchRun(name, [](const RunEvent&) { return true; }, [] { return false; }).ok());
    ASSERT_EQ(engine_->GetRun(name)->state, store::RunState::kSucceeded) << engine_->GetRun(name)->error;
  }

  store::ArtifactRecord Revision(const std::string& point, int n) {
    auto v = engine_->GetArtifact("artifacts/bt/" + point + "/revisions/" + std::to_string(n));
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() ? v->record : store::ArtifactRecord{};
  }

  absl::StatusOr<store::BacktestRecord> Backtest(const store::ArtifactRecord& a, BacktesterOptions o,
                                                 BacktestRequest req = {}) {
    return Backtester(store_.get(), runner_.get(), options_, std::move(o)).Run(a, req);
  }

  std::filesystem::path dir_;
  EngineOptions options_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<LuaArtifactRunner> runner_;
  std::unique_ptr<Engine> engine_;
};

TEST_F(BacktestEngineTest, SameResultWhateverTheBatchingInRunAndStepOrder) {
  Register("return function(s) if s == 'w7' then return 'seven' end if s == 'w9' then error('nine') end "
           "return string.upper(s) end\n",
           "[a-z]+");
  store::ArtifactRecord candidate = Revision("up", 2);
  BacktesterOptions serial;
  serial.parallelism = 1;
  serial.batch_size = 7;
  serial.page_size = 50;
  auto a = Backtest(candidate, serial);
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = Backtest(candidate, BacktesterOptions{});
  ASSERT_TRUE(b.ok()) << b.status();
  BacktesterOptions small_pages;
  small_pages.page_bytes = 100;  // a few calls a page
  auto c = Backtest(candidate, small_pages);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(a->calls, 450);
  EXPECT_EQ(a->equal, 444);
  EXPECT_EQ(a->different, 3);
  EXPECT_EQ(a->errors, 3);
  ASSERT_EQ(a->differences.size(), 6u);
  for (const auto* r : {&*a, &*b, &*c}) {
    EXPECT_EQ(r->calls, a->calls);
    EXPECT_EQ(r->equal, a->equal);
    ASSERT_EQ(r->differences.size(), a->differences.size());
    for (size_t i = 0; i < r->differences.size(); ++i) {
      EXPECT_EQ(r->differences[i].run_id, a->differences[i].run_id);
      EXPECT_EQ(r->differences[i].step, a->differences[i].step);
      EXPECT_EQ(r->differences[i].candidate_json, a->differences[i].candidate_json);
      EXPECT_EQ(r->differences[i].error, a->differences[i].error);
    }
  }
  // Newest run first, steps in order: w7 (step 6) then w9 (step 8).
  EXPECT_EQ(a->differences[0].run_id, 3);
  EXPECT_EQ(a->differences[0].step, 6);
  EXPECT_EQ(a->differences[0].input_json, "\"w7\"");
  EXPECT_EQ(a->differences[0].recorded_json, "\"W7\"");
  EXPECT_EQ(a->differences[0].candidate_json, "\"seven\"");
  EXPECT_EQ(a->differences[0].recorded_artifact_digest, Revision("up", 1).digest);
  EXPECT_EQ(a->differences[1].step, 8);
  EXPECT_NE(a->differences[1].error.find("nine"), std::string::npos) << a->differences[1].error;
  EXPECT_EQ(a->differences[5].run_id, 1);
  // Stored: the newest is the artifact's.
  auto stored = store_->GetBacktest(candidate.digest, true);
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->id, c->id);
  EXPECT_EQ(engine_->GetArtifact("artifacts/bt/up/revisions/2")->backtest->calls, 450);
  EXPECT_FALSE(engine_->GetArtifact("artifacts/bt/up/revisions/1")->backtest.has_value());
}

TEST_F(BacktestEngineTest, DifferencesAreCappedAndMaxCallsTakesTheNewest) {
  Register("return function(s) if s == 'a' then return 'A' end return s end\n", "[a-z]+");
  auto r = Backtest(Revision("up", 2), BacktesterOptions{});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->different, 450);
  EXPECT_EQ(r->differences.size(), store::kMaxBacktestDifferences);
  EXPECT_EQ(r->differences[0].run_id, 3);
  EXPECT_EQ(r->differences[0].step, 0);
  BacktestRequest req;
  req.max_calls = 160;
  r = Backtest(Revision("up", 2), BacktesterOptions{}, req);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->calls, 160);
  EXPECT_EQ(r->differences.back().run_id, 3);
}

TEST_F(BacktestEngineTest, PatternsWholeRunsAndTheLiveRevision) {
  Register(kUpper, "[a-c]+");
  BacktesterOptions o;
  o.live_revision = [this](const store::ArtifactRecord&) -> absl::StatusOr<std::string> {
    return Revision("words", 1).digest;
  };
  BacktestRequest req;
  req.whole_runs = true;
  auto r = Backtest(Revision("words", 2), o, req);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->live_artifact_digest, Revision("words", 1).digest);
  EXPECT_EQ(r->calls, 3);
  EXPECT_EQ(r->equal, 1);  // "12": no match either way
  EXPECT_EQ(r->different, 2);
  EXPECT_EQ(r->runs, 3);
  EXPECT_EQ(r->runs_different, 2);
  ASSERT_FALSE(r->differences.empty());
  EXPECT_EQ(r->differences[0].input_json, R"({"method":"find_all","text":"ef"})");
  EXPECT_EQ(r->differences[0].recorded_json, R"(["ef"])");
  EXPECT_EQ(r->differences[0].candidate_json, "[]");
  EXPECT_EQ(r->differences.back().step, -1);
}

TEST_F(BacktestEngineTest, CancelledStopsWithoutStoring) {
  BacktesterOptions o;
  o.cancelled = [] { return true; };
  auto r = Backtest(Revision("up", 1), o);
  EXPECT_TRUE(absl::IsCancelled(r.status())) << r.status();
  EXPECT_TRUE(absl::IsNotFound(store_->GetBacktest(Revision("up", 1).digest, false).status()));
}

TEST_F(BacktestEngineTest, CancelledDuringWholeRunsStopsToo) {
  int polls = 0;
  BacktesterOptions o;
  o.cancelled = [&polls] { return ++polls > 2; };  // the calls pass, the whole runs do not
  BacktestRequest req;
  req.whole_runs = true;
  auto r = Backtest(Revision("up", 1), o, req);
  EXPECT_TRUE(absl::IsCancelled(r.status())) << r.status();
  EXPECT_TRUE(absl::IsNotFound(store_->GetBacktest(Revision("up", 1).digest, false).status()));
}

TEST_F(BacktestEngineTest, TryReportsResultErrorAndLimits) {
  auto t = engine_->TryArtifact("artifacts/bt/up/revisions/1", "\"abc\"", RunPolicy{});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->output_json, "\"ABC\"");
  EXPECT_GT(t->usage.instructions, 0u);
  EXPECT_EQ(t->limits.max_instructions, options_.default_limits.max_instructions);
  t = engine_->TryArtifact("artifacts/bt/up/revisions/1", R"({"a":1})", RunPolicy{});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE(t->output_json.empty());
  EXPECT_FALSE(t->error.empty());
  RunPolicy too_much;
  too_much.max_instructions = static_cast<int64_t>(options_.max_limits.max_instructions) + 1;
  EXPECT_TRUE(absl::IsInvalidArgument(engine_->TryArtifact("artifacts/bt/up/revisions/1", "\"a\"", too_much).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(engine_->TryArtifact("artifacts/bt/up/revisions/1", "nope", RunPolicy{}).status()));
  t = engine_->TryArtifact("artifacts/bt/words/revisions/1", R"({"method":"match","text":"12 ab"})", RunPolicy{});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_NE(t->output_json.find(R"("match":"ab")"), std::string::npos) << t->output_json;
  EXPECT_NE(t->output_json.find(R"("offset":3)"), std::string::npos) << t->output_json;
}

}  // namespace
}  // namespace rote::orchestrator::engine
