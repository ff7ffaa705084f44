// The review console's HTTP side (orchestrator/http/console.h) over a real server: the JSON API
// answers with the gRPC services' own decisions (tokens, roles), mapped to HTTP statuses, and
// refuses what a hostile page could send; the listener obeys the same loopback rule as gRPC.
#include <httplib.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "orchestrator/http/console.h"
#include "orchestrator/server.h"

namespace rote::e2e {
namespace {

using ::testing::HasSubstr;

constexpr char kReviewer[] = "carol-token-0123456789abcdef";
constexpr char kSubmitter[] = "alice-token-0123456789abcdef";

class ConsoleHttp : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "rote-console-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    std::ofstream(dir_ + "/keys") << kReviewer << " carol review\n" << kSubmitter << " alice submit\n";
  }
  void TearDown() override {
    server_.reset();
    std::filesystem::remove_all(dir_);
  }
  orchestrator::ServerOptions Options() const {
    orchestrator::ServerOptions opt;
    opt.listen = "127.0.0.1:0";
    opt.metrics_listen = "off";
    opt.http_listen = "127.0.0.1:0";
    opt.data_dir = dir_ + "/data";
    opt.keys_file = dir_ + "/keys";
    opt.run_workers = 1;
    return opt;
  }
  void Start() {
    auto server = orchestrator::Server::Start(Options());
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    ASSERT_GT(server_->http_port(), 0);
  }
  httplib::Client Client() const { return httplib::Client("127.0.0.1", server_->http_port()); }
  static httplib::Headers Bearer(const std::string& token) { return {{"Authorization", "Bearer " + token}}; }

  std::string dir_;
  std::unique_ptr<orchestrator::Server> server_;
};

TEST_F(ConsoleHttp, ServesThePageWithAContentSecurityPolicyAndNoCookie) {
  Start();
  auto res = Client().Get("/");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_THAT(res->get_header_value("Content-Security-Policy"), HasSubstr("script-src 'self'"));
  EXPECT_THAT(res->get_header_value("Content-Security-Policy"), ::testing::Not(HasSubstr("unsafe-inline")));
  EXPECT_EQ(res->get_header_value("X-Content-Type-Options"), "nosniff");
  EXPECT_FALSE(res->has_header("Set-Cookie"));
  auto missing = Client().Get("/nothing-here.js");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
}

TEST_F(ConsoleHttp, TheGrpcDecisionsComeBackAsHttpStatuses) {
  Start();
  auto anonymous = Client().Get("/v1/runs");
  ASSERT_TRUE(anonymous);
  EXPECT_EQ(anonymous->status, 401);
  EXPECT_THAT(anonymous->body, HasSubstr("\"status\":\"UNAUTHENTICATED\""));

  auto unknown = Client().Get("/v1/runs", Bearer("not-a-known-token-at-all"));
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 401);

  // The review role may not submit runs.
  auto submit = Client().Post("/v1/runs", Bearer(kReviewer), R"({"blueprint":"blueprints/x","input_json":"{}"})",
                              "application/json");
  ASSERT_TRUE(submit);
  EXPECT_EQ(submit->status, 403);
  EXPECT_THAT(submit->body, HasSubstr("PERMISSION_DENIED"));

  auto missing = Client().Get(absl::StrCat("/v1/artifacts/", std::string(64, 'a')), Bearer(kReviewer));
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);

  auto listed = Client().Get("/v1/artifacts?page_size=5&state=REVIEW_STATE_PENDING", Bearer(kReviewer));
  ASSERT_TRUE(listed);
  EXPECT_EQ(listed->status, 200) << listed->body;
  EXPECT_THAT(listed->body, HasSubstr("\"artifacts\":[]"));

  auto bad_query = Client().Get("/v1/artifacts?page_size=many", Bearer(kReviewer));
  ASSERT_TRUE(bad_query);
  EXPECT_EQ(bad_query->status, 400);
  auto unknown_field = Client().Get("/v1/artifacts?no_such_field=1", Bearer(kReviewer));
  ASSERT_TRUE(unknown_field);
  EXPECT_EQ(unknown_field->status, 400);
  auto bad_body = Client().Post("/v1/runs", Bearer(kSubmitter), "{\"blueprint\": ", "application/json");
  ASSERT_TRUE(bad_body);
  EXPECT_EQ(bad_body->status, 400);
  auto wrong_method = Client().Delete("/v1/runs", Bearer(kReviewer));
  ASSERT_TRUE(wrong_method);
  EXPECT_EQ(wrong_method->status, 405);
}

TEST_F(ConsoleHttp, RefusesWhatAHostilePageCouldSend) {
  Start();
  // A form or a "simple" cross-site fetch cannot send application/json without a preflight.
  auto form = Client().Post("/v1/runs", Bearer(kSubmitter), "{}", "text/plain");
  ASSERT_TRUE(form);
  EXPECT_EQ(form->status, 415);
  httplib::Headers cross = Bearer(kSubmitter);
  cross.emplace("Origin", "https://evil.example");
  auto cross_site = Client().Post("/v1/runs", cross, "{}", "application/json");
  ASSERT_TRUE(cross_site);
  EXPECT_EQ(cross_site->status, 403);
  // A DNS-rebound host name reaching the loopback listener.
  httplib::Headers rebound = Bearer(kReviewer);
  rebound.emplace("Host", "rebound.evil.example");
  auto rebinding = Client().Get("/v1/artifacts", rebound);
  ASSERT_TRUE(rebinding);
  EXPECT_EQ(rebinding->status, 421);
  // A body past the message limit is not read.
  auto huge = Client().Post("/v1/runs", Bearer(kSubmitter), std::string((64 << 20) + 16, ' '), "application/json");
  if (huge) {
    EXPECT_EQ(huge->status, 413);
  }
}

TEST_F(ConsoleHttp, BeyondLoopbackNeedsAKeyFileLikeGrpc) {
  orchestrator::ServerOptions opt = Options();
  opt.keys_file.clear();
  opt.http_listen = "0.0.0.0:0";
  auto server = orchestrator::Server::Start(opt);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(server.status().message()), HasSubstr("refusing to serve the console on 0.0.0.0:0"));

  opt.http_listen = "no-port";
  server = orchestrator::Server::Start(opt);
  ASSERT_FALSE(server.ok());
  EXPECT_THAT(std::string(server.status().message()), HasSubstr("--http-listen takes HOST:PORT"));

  opt.http_listen = "off";
  server = orchestrator::Server::Start(opt);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ((*server)->http_port(), 0);
}

TEST(ConsoleHttpStatus, FollowsTheGrpcCodeMapping) {
  using orchestrator::http::HttpStatusOf;
  EXPECT_EQ(HttpStatusOf(grpc::StatusCode::OK), 200);
  EXPECT_EQ(HttpStatusOf(grpc::StatusCode::INVALID_ARGUMENT), 400);
  EXPECT_EQ(HttpStatusOf(grpc::StatusCode::UNAUTHENTICATED), 401);
  EXPECT_EQ(HttpStatusOf(grpc::StatusCode::PERMISSION_DENIED), 403);
  EXPECT_EQ(HttpStatusOf(grpc::StatusCode::NOT_FOUND), 404);
  EXPECT_EQ(HttpStatusOf(grpc::StatusCode::ABORTED), 409);
  EXPECT_EQ(HttpStatusOf(grpc::StatusCode::FAILED_PRECONDITION), 412);
  EXPECT_EQ(HttpStatusOf(grpc::StatusCode::UNAVAILABLE), 503);
  EXPECT_EQ(HttpStatusOf(grpc::StatusCode::INTERNAL), 500);
}

}  // namespace
}  // namespace rote::e2e
