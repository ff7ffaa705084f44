// rote serve --log-format json: one JSON object per line, with principal, run and request id
// fields where known, over real gRPC.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "orchestrator/api/json_log.h"
#include "orchestrator/engine/log_context.h"
#include "orchestrator/server.h"
#include "rote/v1/blueprints.grpc.pb.h"
#include "rote/v1/runs.grpc.pb.h"
#include "sandbox/value.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"

namespace rote::orchestrator {
namespace {

using ::testing::HasSubstr;

// Each line parsed as a JSON object of strings (sandbox::ParseJson checks the syntax).
std::vector<sandbox::Value> JsonLines(const std::string& text) {
  std::vector<sandbox::Value> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    absl::StatusOr<sandbox::Value> v = sandbox::ParseJson(line);
    EXPECT_TRUE(v.ok()) << "not JSON: " << line << ": " << v.status();
    if (v.ok()) out.push_back(*std::move(v));
  }
  return out;
}

std::string Field(const sandbox::Value& line, const std::string& name) {
  absl::StatusOr<std::string> json = sandbox::CanonicalJson(line);
  if (!json.ok()) return "";
  const std::string key = "\"" + name + "\":\"";
  const size_t at = json->find(key);
  if (at == std::string::npos) return "";
  const size_t start = at + key.size();
  return json->substr(start, json->find('"', start) - start);
}

class JsonLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    previous_ = spdlog::default_logger();
    auto logger = std::make_shared<spdlog::logger>("json-test", std::make_shared<spdlog::sinks::ostream_sink_mt>(out_));
    logger->set_formatter(MakeJsonLogFormatter());
    logger->set_level(spdlog::level::info);
    spdlog::set_default_logger(logger);
  }
  void TearDown() override { spdlog::set_default_logger(previous_); }

  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> previous_;
};

TEST_F(JsonLogTest, EscapesTheMessageAndAddsTheContext) {
  {
    engine::ScopedLogContext scope(engine::LogContext{"alice", "runs/7", "req \"1\""});
    spdlog::info("a \"quoted\" line\nwith a tab\t, a backslash \\ and a bell \x07");
  }
  spdlog::warn("no context");
  std::vector<sandbox::Value> lines = JsonLines(out_.str());
  ASSERT_EQ(lines.size(), 2u) << out_.str();
  EXPECT_EQ(Field(lines[0], "level"), "info");
  EXPECT_EQ(Field(lines[0], "principal"), "alice");
  EXPECT_EQ(Field(lines[0], "run"), "runs/7");
  EXPECT_THAT(out_.str(), HasSubstr(R"("request_id":"req \"1\"")"));
  EXPECT_THAT(out_.str(), HasSubstr(R"(with a tab\t, a backslash \\ and a bell \u0007)"));
  EXPECT_EQ(Field(lines[1], "level"), "warning");
  EXPECT_EQ(Field(lines[1], "principal"), "") << "the scope ended";
  EXPECT_EQ(Field(lines[1], "time").size(), 24u) << Field(lines[1], "time");
}

TEST_F(JsonLogTest, AnRpcLineNamesThePrincipalTheRunAndTheRequestId) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "rote-json-log";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  ServerOptions o;
  o.listen = "127.0.0.1:0";
  o.metrics_listen = "off";
  o.data_dir = (dir / "data").string();
  o.keys_file = (dir / "keys").string();
  std::ofstream(o.keys_file) << "json-log-token-0123456789 carol submit\n";
  auto server = Server::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string((*server)->port()), grpc::InsecureChannelCredentials());
  auto context = [] {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->AddMetadata("authorization", "Bearer json-log-token-0123456789");
    return ctx;
  };
  {
    rote::v1::BlueprintService::Stub blueprints(channel);
    rote::v1::RegisterBlueprintRequest req;
    req.set_source("local bp = rote.blueprint { name = \"echo\", version = \"1\" }\n"
                   "function bp.run(input) return input end\nreturn bp\n");
    req.set_filename("echo.lua");
    rote::v1::Blueprint bp;
    grpc::Status st = blueprints.RegisterBlueprint(context().get(), req, &bp);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  rote::v1::RunService::Stub runs(channel);
  rote::v1::SubmitRunRequest req;
  req.set_blueprint("blueprints/echo");
  req.set_input_json("{}");
  req.set_request_id("json-req-1");
  rote::v1::Run run;
  grpc::Status st = runs.SubmitRun(context().get(), req, &run);
  ASSERT_TRUE(st.ok()) << st.error_message();
  // The interceptor logs after the status is sent.
  bool found = false;
  for (int i = 0; i < 100 && !found; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    for (const sandbox::Value& line : JsonLines(out_.str())) {
      if (Field(line, "msg").find("/rote.v1.RunService/SubmitRun") == std::string::npos) continue;
      EXPECT_EQ(Field(line, "principal"), "carol");
      EXPECT_EQ(Field(line, "run"), run.name());
      EXPECT_EQ(Field(line, "request_id"), "json-req-1");
      found = true;
    }
  }
  EXPECT_TRUE(found) << out_.str();
  (*server)->Shutdown();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace rote::orchestrator
