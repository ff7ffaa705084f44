// The blueprint runtime without a server: declarations, handles, the journal, interruption.
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "orchestrator/engine/artifact.h"
#include "orchestrator/engine/blueprint_runtime.h"
#include "orchestrator/engine/validate.h"

namespace rote::orchestrator::engine {
namespace {

class Recorder : public StepObserver {
 public:
  absl::Status BeforeCall(const StepCall& s) override {
    EXPECT_TRUE(s.output.json.empty());
    return absl::OkStatus();
  }
  absl::Status AfterCall(const StepCall& s) override {
    steps.push_back(s);
    return absl::OkStatus();
  }
  void Log(std::string_view line) override { logs.emplace_back(line); }
  std::vector<StepCall> steps;
  std::vector<std::string> logs;
};

BoundArtifact Bind(const std::string& point, ArtifactKind kind, const std::string& source) {
  ArtifactCode code{kind, source, *NormalizeOptions(kind, "")};
  return BoundArtifact{point, *ArtifactDigest(code), code};
}

const char kPatterns[] = R"lua(local bp = rote.blueprint { name = "patterns", version = "2" }
local kv = bp:regex { name = "kv", task = "key=value pairs", examples = { { "a=1 b=2", { "a=1", "b=2" } } } }
local half = bp:lua { name = "half", task = "halve", tests = { { 4, 2 } } }
function bp.run(input)
  rote.log("input has", #input.texts, "texts")
  local first = kv:match(input.texts[1])
  local none = kv:match("nothing")
  local each = kv:match_each(input.texts)
  local ok, err = pcall(function() return half("not a number") end)
  return {
    first = first, none = none == nil, each = each, all = kv:captures(input.texts[1]),
    found = kv:find_all_each(input.texts), halves = half:map({ 2, 10 }), caught = not ok,
    err = err,
  }
end
return bp
)lua";

TEST(EngineRuntime, LoadCollectsDeclarations) {
  sandbox::Limits limits;
  auto decl = LoadBlueprint(kPatterns, "patterns.lua", limits);
  ASSERT_TRUE(decl.ok()) << decl.status().message();
  EXPECT_EQ(decl->name, "patterns");
  EXPECT_EQ(decl->version, "2");
  EXPECT_EQ(decl->line, 1);
  ASSERT_EQ(decl->points.size(), 2u);
  EXPECT_EQ(decl->points[0].name, "kv");
  EXPECT_EQ(decl->points[0].kind, ArtifactKind::kRe2Pattern);
  EXPECT_EQ(decl->points[0].line, 2);
  EXPECT_EQ(decl->points[1].name, "half");
  EXPECT_EQ(decl->points[1].line, 3);
  EXPECT_FALSE(decl->points[1].digest.empty());
}

TEST(EngineRuntime, HandlesJournalEveryCall) {
  auto runner = MakeInProcessLuaRunner();
  Recorder rec;
  ExecuteOptions opt;
  opt.lua_runner = runner.get();
  opt.observer = &rec;
  std::vector<BoundArtifact> artifacts = {
      Bind("kv", ArtifactKind::kRe2Pattern, "(?P<key>[a-z]+)=(?P<value>[0-9]+)?"),
      Bind("half", ArtifactKind::kLuaFunction, "return function(x) return x // 2 end"),
  };
  auto input = sandbox::ParseJson(R"({"texts": ["a=1 b=", "none", "c=3"]})");
  ASSERT_TRUE(input.ok());
  auto out = ExecuteBlueprint(kPatterns, "patterns.lua", artifacts, *input, opt);
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(out->json,
            R"({"all":[{"match":"a=1","named":{"key":"a","value":"1"},"offset":0},{"match":"b=","named":{"key":"b"},"offset":4}],)"
            R"("caught":true,"each":[{"match":"a=1","named":{"key":"a","value":"1"},"offset":0},false,)"
            R"({"match":"c=3","named":{"key":"c","value":"3"},"offset":0}],)"
            R"j("err":"patterns.lua:9: half (artifact )j" + artifacts[1].digest.substr(7, 12) +
                R"j() failed: half:1: attempt to idiv a 'string' with a 'number'",)j"
            R"("first":{"match":"a=1","named":{"key":"a","value":"1"},"offset":0},)"
            R"("found":[["a=1","b="],[],["c=3"]],"halves":[1,5],"none":true})");
  ASSERT_EQ(rec.steps.size(), 7u);
  EXPECT_EQ(rec.steps[0].point, "kv");
  EXPECT_EQ(rec.steps[0].input.json, R"({"method":"match","text":"a=1 b="})");
  EXPECT_EQ(rec.steps[1].output.json, "null");
  EXPECT_EQ(rec.steps[2].input.json, R"({"method":"match_each","texts":["a=1 b=","none","c=3"]})");
  EXPECT_EQ(rec.steps[3].point, "half");
  EXPECT_EQ(rec.steps[3].input.json, R"("not a number")");
  EXPECT_NE(rec.steps[3].output.json.find(R"({"error":"half:1: attempt to idiv)"), std::string::npos)
      << rec.steps[3].output.json;
  EXPECT_EQ(rec.steps[3].artifact_digest, artifacts[1].digest);
  for (size_t i = 0; i < rec.steps.size(); ++i) EXPECT_EQ(rec.steps[i].index, static_cast<int64_t>(i));
  EXPECT_EQ(rec.logs, std::vector<std::string>{"input has 3 texts"});

  // Same code, same input: the same journal and output, byte for byte.
  Recorder again;
  opt.observer = &again;
  auto out2 = ExecuteBlueprint(kPatterns, "patterns.lua", artifacts, *input, opt);
  ASSERT_TRUE(out2.ok());
  EXPECT_EQ(out2->digest, out->digest);
  ASSERT_EQ(again.steps.size(), rec.steps.size());
  for (size_t i = 0; i < rec.steps.size(); ++i) {
    EXPECT_EQ(again.steps[i].input.digest, rec.steps[i].input.digest);
    EXPECT_EQ(again.steps[i].output.digest, rec.steps[i].output.digest);
  }
}

TEST(EngineRuntime, UnboundOrMiskindedPointsFail) {
  auto runner = MakeInProcessLuaRunner();
  ExecuteOptions opt;
  opt.lua_runner = runner.get();
  auto out = ExecuteBlueprint(kPatterns, "patterns.lua", {Bind("kv", ArtifactKind::kRe2Pattern, "x")}, sandbox::Value(), opt);
  EXPECT_TRUE(absl::IsFailedPrecondition(out.status()));
  EXPECT_NE(std::string(out.status().message()).find("'half' (line 3) is not bound"), std::string::npos);
  out = ExecuteBlueprint(kPatterns, "patterns.lua",
                         {Bind("kv", ArtifactKind::kLuaFunction, "return function() end"),
                          Bind("half", ArtifactKind::kLuaFunction, "return function() end")},
                         sandbox::Value(), opt);
  EXPECT_TRUE(absl::IsFailedPrecondition(out.status()));
}

TEST(EngineRuntime, HandlesCannotBeCalledWhileLoading) {
  const char kEager[] = R"lua(local bp = rote.blueprint { name = "eager" }
local f = bp:lua { name = "f", task = "t", tests = { { 1, 1 } } }
local x = f(1)
function bp.run(i) return i end
return bp
)lua";
  auto decl = LoadBlueprint(kEager, "eager.lua", sandbox::Limits{});
  ASSERT_FALSE(decl.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(decl.status()));
  EXPECT_NE(std::string(decl.status().message()).find("eager.lua:3: 'f' is called inside run()"), std::string::npos)
      << decl.status().message();
}

TEST(EngineRuntime, InterruptStopsABusyBlueprint) {
  const char kSpin[] = R"lua(local bp = rote.blueprint { name = "spin" }
function bp.run(i) while true do pcall(function() while true do end end) end end
return bp
)lua";
  RunInterrupt interrupt;
  ExecuteOptions opt;
  opt.interrupt = &interrupt;
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    interrupt.Interrupt(absl::CancelledError("stop now"));
  });
  const auto start = std::chrono::steady_clock::now();
  auto out = ExecuteBlueprint(kSpin, "spin.lua", {}, sandbox::Value(), opt);
  stopper.join();
  EXPECT_TRUE(absl::IsCancelled(out.status())) << out.status();
  EXPECT_EQ(out.status().message(), "stop now");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(EngineValidate, ReportsEachExample) {
  GenerationPoint p;
  p.name = "double";
  p.kind = ArtifactKind::kLuaFunction;
  p.task = "double";
  p.examples = {{sandbox::Value::Int(2), sandbox::Value::Int(4)}, {sandbox::Value::Int(3), sandbox::Value::Int(6)}};
  ASSERT_TRUE(Seal(&p).ok());
  auto runner = MakeInProcessLuaRunner();
  auto good = ValidateArtifact(p, {ArtifactKind::kLuaFunction, "return function(x) return x * 2 end", "{}"}, runner.get(), {});
  ASSERT_TRUE(good.ok());
  EXPECT_TRUE(good->passed);
  EXPECT_EQ(good->report_json,
            R"({"passed":true,"tests":[{"expected":4,"got":4,"held_out":false,"input":2,"passed":true},{"expected":6,"got":6,"held_out":false,"input":3,"passed":true}]})");
  auto bad = ValidateArtifact(p, {ArtifactKind::kLuaFunction, "return function(x) return x + 2 end", "{}"}, runner.get(), {});
  ASSERT_TRUE(bad.ok());
  EXPECT_FALSE(bad->passed);
  EXPECT_EQ(bad->first_failure, "test 2 (input 3): expected 6, got 5");
  auto broken = ValidateArtifact(p, {ArtifactKind::kLuaFunction, "return function(x", "{}"}, runner.get(), {});
  ASSERT_TRUE(broken.ok());
  EXPECT_FALSE(broken->passed);
}

}  // namespace
}  // namespace rote::orchestrator::engine
