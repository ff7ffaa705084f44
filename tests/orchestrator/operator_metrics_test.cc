// The operator's metrics (docs/operations.md, "Metrics"): after a run and a generation on the
// fixture model, every family is on /metrics with values that fit what happened; blueprint
// labels are capped.
#include <chrono>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "orchestrator/api/operator_metrics.h"
#include "orchestrator/server.h"
#include "rote/v1/blueprints.grpc.pb.h"
#include "rote/v1/generation.grpc.pb.h"
#include "rote/v1/runs.grpc.pb.h"
#include "tests/orchestrator/http_get.h"

namespace rote::orchestrator {
namespace {

const char kShout[] = R"lua(local bp = rote.blueprint { name = "shouter", version = "1" }
local shout = bp:lua {
  name = "shout",
  task = "Upper-case a word.",
  signature = "function(word) -> string",
  tests = { { "hi", "HI" } },
}
function bp.run(input)
  return { loud = shout(input.word) }
end
return bp
)lua";

const char kShoutLock[] = R"(format = 1
blueprint = "shouter"

[[point]]
name = "shout"
kind = "lua_function"
source = '''
return function(word) return string.upper(word) end
'''
)";

// Series (name and labels) -> value, from the text exposition format.
std::map<std::string, double> Parse(const std::string& body) {
  std::map<std::string, double> out;
  std::istringstream in(body);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#' || line.rfind("rote_", 0) != 0) continue;
    const size_t space = line.rfind(' ');
    out[line.substr(0, space)] = std::stod(line.substr(space + 1));
  }
  return out;
}

std::string FreshDir(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("rote-opmetrics-" + name);
  std::filesystem::remove_all(dir);
  return dir.string();
}

void Generate(rote::v1::GenerationService::Stub& stub) {
  grpc::ClientContext ctx;
  rote::v1::GenerateRequest req;
  req.mutable_spec()->set_name("word");
  req.mutable_spec()->set_kind(rote::v1::ARTIFACT_KIND_RE2_PATTERN);
  req.mutable_spec()->set_task("Words of lowercase letters.");
  req.mutable_spec()->add_examples_json(R"({"input":"ab cd","matches":["ab","cd"]})");
  auto reader = stub.Generate(&ctx, req);
  rote::v1::GenerateEvent e;
  while (reader->Read(&e)) {
  }
  // Random weights: no attempt passes.
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::FAILED_PRECONDITION);
}

TEST(OperatorMetricsTest, AfterARunAndAGenerationEveryFamilyIsThereWithSaneValues) {
  ServerOptions o;
  o.listen = "127.0.0.1:0";
  o.metrics_listen = "127.0.0.1:0";
  o.data_dir = FreshDir("scrape");
  o.run_workers = 1;
  o.model_dir = (std::filesystem::path(ROTE_SOURCE_DIR) / "tests" / "fixtures" / "qwen2").string();
  o.generation_attempts = 2;
  o.generation_max_tokens = 8;
  auto server = Server::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string((*server)->port()), grpc::InsecureChannelCredentials());
  {
    rote::v1::BlueprintService::Stub blueprints(channel);
    grpc::ClientContext ctx;
    rote::v1::RegisterBlueprintRequest req;
    req.set_source(kShout);
    req.set_lockfile(kShoutLock);
    req.set_filename("shouter.lua");
    rote::v1::Blueprint bp;
    grpc::Status st = blueprints.RegisterBlueprint(&ctx, req, &bp);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  rote::v1::RunService::Stub runs(channel);
  rote::v1::Run run;
  {
    grpc::ClientContext ctx;
    rote::v1::SubmitRunRequest req;
    req.set_blueprint("blueprints/shouter");
    req.set_input_json(R"({"word": "hey"})");
    grpc::Status st = runs.SubmitRun(&ctx, req, &run);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  for (int i = 0; i < 400 && run.state() != rote::v1::RUN_STATE_SUCCEEDED; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    grpc::ClientContext ctx;
    rote::v1::GetRunRequest req;
    req.set_name(run.name());
    ASSERT_TRUE(runs.GetRun(&ctx, req, &run).ok());
  }
  ASSERT_EQ(run.state(), rote::v1::RUN_STATE_SUCCEEDED) << run.error();
  rote::v1::GenerationService::Stub generation(channel);
  Generate(generation);
  Generate(generation);  // the same request: answered from the record of the first

  const std::string body = test_http::HttpGet((*server)->metrics_port(), "/metrics");
  const std::map<std::string, double> m = Parse(body);
  auto value = [&](const std::string& series) {
    auto it = m.find(series);
    EXPECT_NE(it, m.end()) << series << " missing from\n" << body;
    return it == m.end() ? -1.0 : it->second;
  };
  // Runs.
  EXPECT_EQ(value(R"(rote_runs_finished_total{blueprint="shouter",state="succeeded"})"), 1);
  EXPECT_EQ(value(R"(rote_run_duration_seconds_count{blueprint="shouter",state="succeeded"})"), 1);
  EXPECT_GE(value(R"(rote_run_duration_seconds_sum{blueprint="shouter",state="succeeded"})"), 0);
  EXPECT_EQ(value("rote_run_queue_depth"), 0);
  EXPECT_EQ(value("rote_runs_executing"), 0);
  EXPECT_THAT(body, ::testing::HasSubstr("# TYPE rote_runs gauge"));
  EXPECT_EQ(value("rote_runs_requeued_total"), 0);
  // Generation: 2 failed attempts (the second request never reached the model).
  double failed = 0;
  for (const char* reason : kGenerationFailureReasons) {
    failed += value(std::string(R"(rote_generation_attempts_total{outcome="failed",reason=")") + reason + "\"}");
  }
  EXPECT_EQ(failed, 2);
  EXPECT_EQ(value(R"(rote_generation_attempts_total{outcome="passed",reason=""})"), 0);
  EXPECT_GT(value(R"(rote_generation_tokens_total{direction="in"})"), 0);
  EXPECT_GT(value(R"(rote_generation_tokens_total{direction="out"})"), 0);
  EXPECT_LE(value(R"(rote_generation_tokens_total{direction="out"})"), 2 * 8);
  EXPECT_GE(value("rote_generation_model_seconds_total"), 0);
  EXPECT_EQ(value(R"(rote_generation_cache_hits_total{kind="failure"})"), 1);
  EXPECT_EQ(value(R"(rote_generation_cache_hits_total{kind="artifact"})"), 0);
  // The inference engine.
  EXPECT_GT(value(R"(rote_engine_tokens_total{phase="prefill"})"), 0);
  EXPECT_EQ(value(R"(rote_engine_tokens_total{phase="decode"})"), value(R"(rote_generation_tokens_total{direction="out"})"));
  EXPECT_GT(value(R"(rote_engine_step_seconds_total{phase="prefill"})"), 0);
  EXPECT_GE(value(R"(rote_engine_step_seconds_total{phase="decode"})"), 0);
  const double steps = value("rote_engine_steps_total");
  EXPECT_GT(steps, 0);
  EXPECT_EQ(value("rote_engine_batch_size_count"), steps);
  EXPECT_EQ(value(R"(rote_engine_batch_size_bucket{le="+Inf"})"), steps);
  EXPECT_GE(value("rote_engine_batch_size_sum"), steps);
  EXPECT_GT(value("rote_engine_kv_blocks"), 0);
  EXPECT_EQ(value("rote_engine_kv_blocks_in_use"), 0) << "nothing is generating";
  EXPECT_EQ(value("rote_engine_waiting_requests"), 0);
  EXPECT_EQ(value("rote_engine_running_requests"), 0);
  // The sandbox: the lockfile's test and the run's call went to the workers.
  EXPECT_GT(value("rote_sandbox_calls_total"), 0);
  EXPECT_EQ(value(R"(rote_sandbox_worker_restarts_total{cause="crash"})"), 0);
  EXPECT_EQ(value(R"(rote_sandbox_limit_hits_total{limit="instructions"})"), 0);
}

TEST(OperatorMetricsTest, BlueprintLabelsAreCapped) {
  LabelCap cap(3);
  EXPECT_EQ(cap("a"), "a");
  EXPECT_EQ(cap("b"), "b");
  EXPECT_EQ(cap("c"), "c");
  EXPECT_EQ(cap("d"), "other");
  EXPECT_EQ(cap("a"), "a") << "a kept name stays";
  LabelCap hundred;
  for (int i = 0; i < 1000; ++i) hundred("bp" + std::to_string(i));
  EXPECT_EQ(hundred("bp99"), "bp99");
  EXPECT_EQ(hundred("bp100"), "other");
}

}  // namespace
}  // namespace rote::orchestrator
