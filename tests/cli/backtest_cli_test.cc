// `rote artifacts try | backtest | backtest-result` against a real server: the result on stdout
// and the usage on stderr, exit 1 for code that failed or a backtest that found differences,
// each difference printed with both values.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include "cli/commands.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "orchestrator/server.h"
#include "rote/v1/artifacts.grpc.pb.h"
#include "rote/v1/blueprints.grpc.pb.h"
#include "rote/v1/runs.grpc.pb.h"
#include "spdlog/spdlog.h"
#include "tests/e2e/word_stats.h"

namespace {

using ::testing::HasSubstr;

constexpr char kBoth[] = "both-token-0123456789ab";
constexpr char kRev[] = "rev-token-0123456789abc";

struct Output {
  int code = 0;
  std::string out, err;
};

class BacktestCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    spdlog::set_level(spdlog::level::warn);  // the server shares this process's stdout
    dir_ = std::filesystem::temp_directory_path() / ("rote-backtest-cli-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    rote::orchestrator::ServerOptions opt;
    opt.listen = "127.0.0.1:0";
    opt.metrics_listen = "off";
    opt.data_dir = (dir_ / "data").string();
    opt.keys_file = (dir_ / "keys").string();
    std::ofstream(opt.keys_file) << kBoth << " both submit,review\n" << kRev << " rev review\n";
    auto server = rote::orchestrator::Server::Start(opt);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    address_ = "127.0.0.1:" + std::to_string(server_->port());
    channel_ = grpc::CreateChannel(address_, grpc::InsecureChannelCredentials());
    Register(kWordStatsLockWith("return function(word) return string.upper(word) end\n"));
    auto runs = rote::v1::RunService::NewStub(channel_);
    for (const char* text : {"one two", "three"}) {
      rote::v1::SubmitRunRequest req;
      req.set_blueprint("blueprints/word_stats");
      req.set_input_json(std::string(R"({"text":")") + text + "\"}");
      rote::v1::Run run;
      grpc::ClientContext ctx;
      ctx.AddMetadata("authorization", std::string("Bearer ") + kBoth);
      ASSERT_TRUE(runs->SubmitRun(&ctx, req, &run).ok());
      rote::v1::WatchRunRequest w;
      w.set_name(run.name());
      grpc::ClientContext wctx;
      wctx.AddMetadata("authorization", std::string("Bearer ") + kBoth);
      auto reader = runs->WatchRun(&wctx, w);
      rote::v1::RunEvent e;
      while (reader->Read(&e)) {
      }
      ASSERT_TRUE(reader->Finish().ok());
    }
    // Revision 2: "two" becomes "deux", words longer than four letters fail.
    Register(kWordStatsLockWith("return function(word)\n  if word == 'two' then return 'deux' end\n"
                                "  if #word > 4 then error('too long') end\n  return string.upper(word)\nend\n"));
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
    server_.reset();
    std::filesystem::remove_all(dir_);
  }

  static std::string kWordStatsLockWith(const std::string& source) {
    std::string lock = rote::e2e::kWordStatsLock;
    const std::string old = "return function(word) return string.upper(word) end\n";
    return lock.replace(lock.find(old), old.size(), source);
  }

  void Register(const std::string& lock) {
    auto stub = rote::v1::BlueprintService::NewStub(channel_);
    rote::v1::RegisterBlueprintRequest req;
    req.set_source(rote::e2e::kWordStats);
    req.set_lockfile(lock);
    req.set_filename("word_stats.lua");
    rote::v1::Blueprint bp;
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", std::string("Bearer ") + kBoth);
    grpc::Status st = stub->RegisterBlueprint(&ctx, req, &bp);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }

  Output Rote(std::vector<std::string> args) {
    args.insert(args.end(), {"--server", address_, "--token", kRev});
    Output o;
    ::testing::internal::CaptureStdout();
    ::testing::internal::CaptureStderr();
    o.code = rote::cli::CmdArtifacts(args);
    std::cout.flush();
    std::cerr.flush();
    o.out = ::testing::internal::GetCapturedStdout();
    o.err = ::testing::internal::GetCapturedStderr();
    return o;
  }

  std::filesystem::path dir_;
  std::unique_ptr<rote::orchestrator::Server> server_;
  std::string address_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(BacktestCliTest, TryPrintsTheResultAndTheUsage) {
  Output o = Rote({"try", "artifacts/word_stats/shout/revisions/2", "--input", R"("two")"});
  EXPECT_EQ(o.code, 0) << o.err;
  EXPECT_EQ(o.out, "\"deux\"\n");
  EXPECT_THAT(o.err, HasSubstr("instructions"));
  o = Rote({"try", "artifacts/word_stats/shout/revisions/2", "--input", R"("three")", "--json"});
  EXPECT_EQ(o.code, 1);
  EXPECT_THAT(o.out, HasSubstr("too long"));
  EXPECT_THAT(o.out, HasSubstr("\"instructions_used\""));
  o = Rote({"try", "artifacts/word_stats/shout/revisions/2", "--input", "{bad"});
  EXPECT_EQ(o.code, 6);
  o = Rote({"try", "artifacts/word_stats/shout/revisions/2"});
  EXPECT_EQ(o.code, 2);
  EXPECT_THAT(o.err, HasSubstr("--input"));
}

TEST_F(BacktestCliTest, BacktestPrintsCountsAndEachDifferenceWithBothValues) {
  Output o = Rote({"backtest", "artifacts/word_stats/shout/revisions/2"});
  EXPECT_EQ(o.code, 1) << o.err;
  EXPECT_THAT(o.out, HasSubstr("calls"));
  EXPECT_THAT(o.out, HasSubstr("4"));
  EXPECT_THAT(o.out, HasSubstr("runs/1 step 1: different\n"
                               "  input:     [\"one\",\"two\"]\n"
                               "  recorded:  [\"ONE\",\"TWO\"]\n"
                               "  candidate: [\"ONE\",\"deux\"]\n"));
  EXPECT_THAT(o.out, HasSubstr("runs/2 step 2: error\n"
                               "  input:     \"three\"\n"
                               "  recorded:  \"THREE\"\n"
                               "  error:     shout:3: too long\n"));
  Output stored = Rote({"backtest-result", "artifacts/word_stats/shout/revisions/2"});
  EXPECT_EQ(stored.code, 0) << stored.err;
  EXPECT_EQ(stored.out, o.out);
  Output none = Rote({"backtest-result", "artifacts/word_stats/shout/revisions/1"});
  EXPECT_EQ(none.code, 5);
}

}  // namespace
