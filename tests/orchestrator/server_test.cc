// The server over real gRPC: health through shutdown, reflection, authentication and roles,
// metrics, and a call in flight during shutdown.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "cli/reflection_client.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "orchestrator/api/auth.h"
#include "orchestrator/server.h"
#include "rote/v1/artifacts.grpc.pb.h"
#include "rote/v1/blueprints.grpc.pb.h"
#include "rote/v1/runs.grpc.pb.h"
#include "slow_service.grpc.pb.h"

namespace rote::orchestrator {
namespace {

using ::testing::HasSubstr;
using HealthStatus = grpc::health::v1::HealthCheckResponse;

class SlowServiceImpl final : public rote::test::SlowService::Service {
 public:
  std::atomic<int> started{0};
  grpc::Status Sleep(grpc::ServerContext*, const rote::test::SleepRequest* req,
                     rote::test::SleepResponse* resp) override {
    ++started;
    std::this_thread::sleep_for(std::chrono::milliseconds(req->millis()));
    resp->set_slept_millis(req->millis());
    return grpc::Status::OK;
  }
};

std::string TempDir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("rote-server-test-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

ServerOptions TestOptions(const std::string& name) {
  ServerOptions o;
  o.listen = "127.0.0.1:0";
  o.metrics_listen = "off";
  o.data_dir = TempDir(name);
  o.grace = std::chrono::milliseconds(5000);
  return o;
}

std::shared_ptr<grpc::Channel> Connect(int port) {
  return grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials());
}

HealthStatus::ServingStatus Health(const std::shared_ptr<grpc::Channel>& ch, grpc::Status* st = nullptr) {
  grpc::health::v1::Health::Stub stub(ch);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::health::v1::HealthCheckRequest req;
  HealthStatus resp;
  grpc::Status s = stub.Check(&ctx, req, &resp);
  if (st) *st = s;
  return s.ok() ? resp.status() : HealthStatus::UNKNOWN;
}

TEST(ServerTest, HealthServingThenNotServingDuringShutdownAndInFlightCallCompletes) {
  SlowServiceImpl slow;
  ServerOptions opt = TestOptions("shutdown");
  opt.extra_services.push_back(&slow);
  opt.drain = std::chrono::milliseconds(1500);
  auto server = Server::Start(opt);
  ASSERT_TRUE(server.ok()) << server.status();
  auto ch = Connect((*server)->port());
  EXPECT_EQ(Health(ch), HealthStatus::SERVING);

  // A call that is still running when shutdown begins.
  grpc::Status slow_status;
  rote::test::SleepResponse slow_resp;
  std::thread caller([&] {
    rote::test::SlowService::Stub stub(ch);
    grpc::ClientContext ctx;
    rote::test::SleepRequest req;
    req.set_millis(2500);
    slow_status = stub.Sleep(&ctx, req, &slow_resp);
  });
  while (slow.started.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));

  std::thread stopper([&] { (*server)->Shutdown(); });
  // During the drain period the server still answers, and says NOT_SERVING.
  HealthStatus::ServingStatus seen = HealthStatus::SERVING;
  for (int i = 0; i < 100 && seen == HealthStatus::SERVING; ++i) {
    seen = Health(ch);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(seen, HealthStatus::NOT_SERVING);
  caller.join();
  stopper.join();
  EXPECT_TRUE(slow_status.ok()) << slow_status.error_message();
  EXPECT_EQ(slow_resp.slept_millis(), 2500);
  // After shutdown nothing answers.
  grpc::Status after;
  Health(Connect((*server)->port()), &after);
  EXPECT_FALSE(after.ok());
}

TEST(ServerTest, ReflectionListsRoteServicesWithMethods) {
  auto server = Server::Start(TestOptions("reflection"));
  ASSERT_TRUE(server.ok()) << server.status();
  auto services = cli::ListServicesByReflection(Connect((*server)->port()), "");
  ASSERT_TRUE(services.ok()) << services.status();
  std::map<std::string, std::vector<std::string>> by_name;
  for (const auto& s : *services) by_name[s.name] = s.methods;
  for (const char* name : {"rote.v1.BlueprintService", "rote.v1.RunService", "rote.v1.ArtifactService",
                           "rote.v1.GenerationService", "grpc.health.v1.Health"}) {
    EXPECT_TRUE(by_name.count(name)) << name;
  }
  EXPECT_THAT(by_name["rote.v1.RunService"],
              ::testing::Contains(HasSubstr("WatchRun(WatchRunRequest) returns (stream RunEvent)")));
}

TEST(ServerTest, EveryApiMethodDeclaresARole) {
  const auto* pool = google::protobuf::DescriptorPool::generated_pool();
  int methods = 0;
  for (const char* name : {"rote.v1.BlueprintService", "rote.v1.RunService", "rote.v1.ArtifactService",
                           "rote.v1.GenerationService"}) {
    const auto* svc = pool->FindServiceByName(name);
    ASSERT_NE(svc, nullptr) << name;
    for (int i = 0; i < svc->method_count(); ++i) {
      const std::string full = "/" + svc->full_name() + "/" + svc->method(i)->name();
      EXPECT_TRUE(MethodRoles().count(full)) << full << " has no role in MethodRoles()";
      ++methods;
    }
  }
  EXPECT_EQ(methods, static_cast<int>(MethodRoles().size())) << "MethodRoles() names a method the API lacks";
}

class AuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions opt = TestOptions("auth");
    opt.keys_file = opt.data_dir + "/keys";
    std::ofstream(opt.keys_file) << "# token principal roles\n"
                                 << "submitter-token-0123456789 alice submit\n"
                                 << "reviewer-token-0123456789 bob review\n"
                                 << "admin-token-0123456789abc root admin\n";
    auto server = Server::Start(opt);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    channel_ = Connect(server_->port());
  }

  grpc::StatusCode ListRuns(const std::string& token) {
    rote::v1::RunService::Stub stub(channel_);
    grpc::ClientContext ctx;
    if (!token.empty()) ctx.AddMetadata("authorization", token);
    rote::v1::ListRunsRequest req;
    rote::v1::ListRunsResponse resp;
    last_ = stub.ListRuns(&ctx, req, &resp);
    return last_.error_code();
  }
  grpc::StatusCode Review(const std::string& token) {
    rote::v1::ArtifactService::Stub stub(channel_);
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", token);
    rote::v1::ReviewArtifactRequest req;
    req.set_name("artifacts/0000");
    rote::v1::Artifact resp;
    last_ = stub.ReviewArtifact(&ctx, req, &resp);
    return last_.error_code();
  }

  std::unique_ptr<Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  grpc::Status last_;
};

TEST_F(AuthTest, MissingTokenIsUnauthenticated) {
  EXPECT_EQ(ListRuns(""), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(last_.error_message(), HasSubstr("missing bearer token"));
}

TEST_F(AuthTest, UnknownTokenIsUnauthenticated) {
  EXPECT_EQ(ListRuns("Bearer not-a-known-token-at-all"), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(ListRuns("Basic submitter-token-0123456789"), grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(AuthTest, WrongRoleIsPermissionDenied) {
  EXPECT_EQ(Review("Bearer submitter-token-0123456789"), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(last_.error_message(), HasSubstr("lacks role `review`"));
}

TEST_F(AuthTest, RightRolePassesAuthentication) {
  for (const char* token : {"Bearer submitter-token-0123456789", "Bearer admin-token-0123456789abc"}) {
    grpc::StatusCode code = ListRuns(token);
    EXPECT_NE(code, grpc::StatusCode::UNAUTHENTICATED) << token;
    EXPECT_NE(code, grpc::StatusCode::PERMISSION_DENIED) << token;
  }
  for (const char* token : {"Bearer reviewer-token-0123456789", "Bearer admin-token-0123456789abc"}) {
    grpc::StatusCode code = Review(token);
    EXPECT_NE(code, grpc::StatusCode::UNAUTHENTICATED) << token;
    EXPECT_NE(code, grpc::StatusCode::PERMISSION_DENIED) << token;
  }
}

TEST(ServerStartTest, RefusesNonLoopbackWithoutKeyFile) {
  ServerOptions opt = TestOptions("nonloopback");
  opt.listen = "0.0.0.0:0";
  auto server = Server::Start(opt);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(server.status().message()), HasSubstr("--keys"));
}

TEST(ServerStartTest, BadKeyFileNamesTheLine) {
  ServerOptions opt = TestOptions("badkeys");
  opt.keys_file = opt.data_dir + "/keys";
  std::ofstream(opt.keys_file) << "good-token-0123456789 alice submit\nshort bob submit\n";
  auto server = Server::Start(opt);
  ASSERT_FALSE(server.ok());
  EXPECT_THAT(std::string(server.status().message()), HasSubstr("keys:2:"));
}

TEST(ServerStartTest, IsLoopbackAddress) {
  EXPECT_TRUE(IsLoopbackAddress("127.0.0.1:7878"));
  EXPECT_TRUE(IsLoopbackAddress("localhost:1"));
  EXPECT_TRUE(IsLoopbackAddress("[::1]:7878"));
  EXPECT_FALSE(IsLoopbackAddress("0.0.0.0:7878"));
  EXPECT_FALSE(IsLoopbackAddress("[::]:7878"));
  EXPECT_FALSE(IsLoopbackAddress("10.1.2.3:7878"));
}

std::string HttpGet(int port, const std::string& path) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return "";
  }
  const std::string req = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  (void)!::write(fd, req.data(), req.size());
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

TEST(ServerTest, MetricsEndpointCountsCallsByMethodAndCode) {
  ServerOptions opt = TestOptions("metrics");
  opt.metrics_listen = "127.0.0.1:0";
  auto server = Server::Start(opt);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->metrics_port(), 0);
  auto ch = Connect((*server)->port());
  for (int i = 0; i < 3; ++i) ASSERT_EQ(Health(ch), HealthStatus::SERVING);
  {
    rote::v1::BlueprintService::Stub stub(ch);
    grpc::ClientContext ctx;
    rote::v1::GetBlueprintRequest req;
    req.set_name("blueprints/does-not-exist");
    rote::v1::Blueprint resp;
    grpc::Status st = stub.GetBlueprint(&ctx, req, &resp);
    ASSERT_FALSE(st.ok());
  }
  // The interceptor records after the status is sent; give it a moment.
  std::string body;
  for (int i = 0; i < 50; ++i) {
    body = HttpGet((*server)->metrics_port(), "/metrics");
    if (body.find("rote_rpc_requests_total{code=\"OK\",method=\"/grpc.health.v1.Health/Check\"} 3") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_THAT(body, HasSubstr("rote_rpc_requests_total{code=\"OK\",method=\"/grpc.health.v1.Health/Check\"} 3"));
  EXPECT_THAT(body, HasSubstr("method=\"/rote.v1.BlueprintService/GetBlueprint\""));
  EXPECT_THAT(body, HasSubstr("rote_rpc_duration_seconds_count{method=\"/grpc.health.v1.Health/Check\"} 3"));
}

}  // namespace
}  // namespace rote::orchestrator

namespace rote::orchestrator {
namespace {

// TLS from certificate and key files: a client trusting the certificate gets through, a
// plaintext client does not.
TEST(ServerTlsTest, ServesTlsWithCertificateAndKeyFiles) {
  ServerOptions opt = TestOptions("tls");
  opt.tls_cert_file = opt.data_dir + "/cert.pem";
  opt.tls_key_file = opt.data_dir + "/key.pem";
  const std::string cmd = "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost "
                          "-addext subjectAltName=DNS:localhost,IP:127.0.0.1 -keyout " +
                          opt.tls_key_file + " -out " + opt.tls_cert_file + " >/dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "openssl could not make a test certificate";
  auto server = Server::Start(opt);
  ASSERT_TRUE(server.ok()) << server.status();
  std::ifstream in(opt.tls_cert_file);
  std::stringstream pem;
  pem << in.rdbuf();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = pem.str();
  auto tls = grpc::CreateChannel("localhost:" + std::to_string((*server)->port()), grpc::SslCredentials(ssl));
  EXPECT_EQ(Health(tls), HealthStatus::SERVING);
  grpc::Status plain_status;
  Health(Connect((*server)->port()), &plain_status);
  EXPECT_FALSE(plain_status.ok());
}

TEST(ServerTlsTest, CertificateWithoutKeyIsRefused) {
  ServerOptions opt = TestOptions("tls-half");
  opt.tls_cert_file = opt.data_dir + "/cert.pem";
  auto server = Server::Start(opt);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace rote::orchestrator
