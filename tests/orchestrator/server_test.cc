// The server over real gRPC: health through shutdown, reflection, authentication and roles,
// metrics, and a call in flight during shutdown.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netdb.h>
#include <sched.h>      // unshare
#include <sys/mount.h>  // a private /etc/hosts
#include <sys/socket.h>
#include <sys/stat.h>  // mkfifo
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "cli/reflection_client.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "orchestrator/api/auth.h"
#include "orchestrator/server.h"
#include "tests/orchestrator/http_get.h"
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

// A unary call with the request's bytes as given, to any method path: what a client that
// does not use rote's stubs can send.
grpc::Status RawCall(const std::shared_ptr<grpc::Channel>& ch, const std::string& method,
                     const std::string& request_bytes, const std::string& token = "") {
  grpc::GenericStub stub(ch);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
  grpc::Slice slice(request_bytes);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) { done.set_value(std::move(s)); });
  return done.get_future().get();
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

// "127.example.invalid" passed the check when it was a prefix test on the name, and whatever
// the name resolved to would have been served without tokens.
TEST(ServerStartTest, RefusesNonLoopbackWithoutKeyFile) {
  for (const std::string host : {"0.0.0.0", "127.example.invalid"}) {
    ServerOptions opt = TestOptions("nonloopback");
    opt.listen = host + ":0";
    auto server = Server::Start(opt);
    ASSERT_FALSE(server.ok()) << host;
    EXPECT_EQ(server.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(server.status().message()), HasSubstr("--keys"));
    EXPECT_THAT(std::string(server.status().message()), HasSubstr(host));
  }
}

TEST(ServerStartTest, BadKeyFileNamesTheLine) {
  ServerOptions opt = TestOptions("badkeys");
  opt.keys_file = opt.data_dir + "/keys";
  std::ofstream(opt.keys_file) << "good-token-0123456789 alice submit\nshort bob submit\n";
  auto server = Server::Start(opt);
  ASSERT_FALSE(server.ok());
  EXPECT_THAT(std::string(server.status().message()), HasSubstr("keys:2:"));
}

// Two servers on one SQLite data directory would each treat the other's running runs as
// abandoned and fail them: the second refuses to start, naming the owner, and the first
// keeps serving. Once the first is gone the directory is free again.
TEST(ServerStartTest, SecondServerOnTheSameDataDirectoryNamesTheOwnersPid) {
  ServerOptions opt = TestOptions("datadir-owner");
  auto first = Server::Start(opt);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = Server::Start(opt);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(second.status().message()),
              HasSubstr("in use by another rote server (pid " + std::to_string(::getpid())));
  EXPECT_EQ(Health(Connect((*first)->port())), HealthStatus::SERVING);
  first->reset();
  auto third = Server::Start(opt);
  EXPECT_TRUE(third.ok()) << third.status();
}

// gRPC's default SO_REUSEPORT let a second server bind a port in use, and the kernel split
// the clients between the two. A busy port, gRPC's or the metrics', is an error.
TEST(ServerStartTest, BusyPortsAreErrors) {
  ServerOptions first_opt = TestOptions("busy-port-1");
  first_opt.metrics_listen = "127.0.0.1:0";
  auto first = Server::Start(first_opt);
  ASSERT_TRUE(first.ok()) << first.status();
  ServerOptions grpc_opt = TestOptions("busy-port-2");
  grpc_opt.listen = "127.0.0.1:" + std::to_string((*first)->port());
  auto second = Server::Start(grpc_opt);
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("cannot listen on " + grpc_opt.listen));
  ServerOptions metrics_opt = TestOptions("busy-port-3");
  metrics_opt.metrics_listen = "127.0.0.1:" + std::to_string((*first)->metrics_port());
  auto third = Server::Start(metrics_opt);
  ASSERT_FALSE(third.ok());
  EXPECT_THAT(std::string(third.status().message()), HasSubstr("cannot serve metrics on " + metrics_opt.metrics_listen));
  EXPECT_EQ(Health(Connect((*first)->port())), HealthStatus::SERVING);
}

TEST(ServerStartTest, IsLoopbackAddress) {
  for (const char* address : {"127.0.0.1:7878", "127.3.2.1:1", "localhost:1", "[::1]:7878",
                              "[::ffff:127.0.0.1]:7878"}) {
    absl::StatusOr<bool> loopback = IsLoopbackAddress(address);
    ASSERT_TRUE(loopback.ok()) << address << ": " << loopback.status();
    EXPECT_TRUE(*loopback) << address;
  }
  for (const char* address : {"0.0.0.0:7878", "[::]:7878", "10.1.2.3:7878", ":7878", "[::ffff:10.0.0.1]:1"}) {
    absl::StatusOr<bool> loopback = IsLoopbackAddress(address);
    ASSERT_TRUE(loopback.ok()) << address << ": " << loopback.status();
    EXPECT_FALSE(*loopback) << address;
  }
  // Not loopback by its name: the .invalid domain never resolves.
  EXPECT_FALSE(IsLoopbackAddress("127.example.invalid:7878").ok());
}

TEST(ServerStartTest, ListeningAddressesSpellOutEachAddressOfAName) {
  for (const char* given : {"127.0.0.1:7878", "[::1]:7878", ":7878", "0.0.0.0:7878", "unix:/tmp/rote.sock",
                            "127.example.invalid:7878", "localhost"}) {
    EXPECT_EQ(ListeningAddresses(given), std::vector<std::string>{given}) << given;
  }
  const std::vector<std::string> localhost = ListeningAddresses("localhost:7878");
  ASSERT_FALSE(localhost.empty());
  for (const std::string& address : localhost) {
    EXPECT_TRUE(address == "127.0.0.1:7878" || address == "[::1]:7878") << address;
  }
}

// gRPC binds every address a name resolves to and starts when any one binds: with 127.0.0.1:P
// held by another process, "localhost:P" served on ::1 alone, and clients of 127.0.0.1:P reached
// the other process. Run where localhost is both 127.0.0.1 and ::1 (a private /etc/hosts in a
// mount namespace of one thread); skipped where that namespace cannot be made.
TEST(ServerStartTest, NameWithOneOfItsAddressesBusyIsAnError) {
  const std::string dir = TempDir("busy-name");
  const std::string hosts = dir + "/hosts";
  std::ofstream(hosts) << "127.0.0.1 localhost\n::1 localhost\n";
  std::string skip;
  absl::Status started;
  std::thread([&] {
    // The namespace belongs to this thread (and the threads it starts) and ends with it.
    if (::unshare(CLONE_NEWNS) != 0 || ::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount(hosts.c_str(), "/etc/hosts", nullptr, MS_BIND, nullptr) != 0) {
      skip = std::string("cannot give this thread its own /etc/hosts: ") + std::strerror(errno);
      return;
    }
    int busy = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    ASSERT_EQ(::bind(busy, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    ASSERT_EQ(::listen(busy, 1), 0);
    ASSERT_EQ(::getsockname(busy, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    ServerOptions opt = TestOptions("busy-name-server");
    opt.listen = "localhost:" + std::to_string(ntohs(addr.sin_port));
    if (ListeningAddresses(opt.listen).size() != 2) {
      skip = "localhost does not resolve to two addresses here";
    } else {
      auto server = Server::Start(opt);
      started = server.status();
    }
    ::close(busy);
  }).join();
  if (!skip.empty()) GTEST_SKIP() << skip;
  ASSERT_FALSE(started.ok()) << "started with 127.0.0.1 held by another socket";
  EXPECT_THAT(std::string(started.message()), HasSubstr("cannot listen on localhost:"));
}

using test_http::HttpGet;

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

// A method path is a label only when the binary has that method: otherwise 300 calls to made-up
// methods would grow /metrics to megabytes, before and without authentication. They share one.
TEST(ServerTest, UnknownMethodsShareOneMetricsSeries) {
  ServerOptions opt = TestOptions("metrics-unknown");
  opt.metrics_listen = "127.0.0.1:0";
  opt.keys_file = opt.data_dir + "/keys";
  std::ofstream(opt.keys_file) << "metrics-token-0123456789 alice submit\n";
  auto server = Server::Start(opt);
  ASSERT_TRUE(server.ok()) << server.status();
  auto ch = Connect((*server)->port());
  ASSERT_EQ(Health(ch), HealthStatus::SERVING);
  auto series = [&] {
    std::string body = HttpGet((*server)->metrics_port(), "/metrics");
    std::set<std::string> lines;
    std::istringstream in(body);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("rote_rpc_", 0) == 0) lines.insert(line.substr(0, line.rfind(' ')));
    }
    return std::make_pair(lines, body);
  };
  const auto before = series();
  for (int i = 0; i < 300; ++i) {
    const std::string method = "/made.up.Service" + std::to_string(i) + "/Method" + std::to_string(i);
    EXPECT_EQ(RawCall(ch, method, "", i % 2 ? "metrics-token-0123456789" : "").error_code(),
              grpc::StatusCode::UNIMPLEMENTED);
  }
  // The interceptor records after the status is sent; wait for the last call to be counted.
  std::pair<std::set<std::string>, std::string> after;
  for (int i = 0; i < 100; ++i) {
    after = series();
    if (after.second.find("code=\"UNIMPLEMENTED\",method=\"unknown\"} 300") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_THAT(after.second, HasSubstr("rote_rpc_requests_total{code=\"UNIMPLEMENTED\",method=\"unknown\"} 300"));
  EXPECT_EQ(after.second.find("made.up"), std::string::npos);
  // One counter series ({unknown, UNIMPLEMENTED}) and one histogram (its buckets, sum, count).
  std::set<std::string> added;
  for (const std::string& s : after.first)
    if (!before.first.count(s)) added.insert(s);
  for (const std::string& s : added) EXPECT_THAT(s, HasSubstr("method=\"unknown\"")) << s;
  EXPECT_EQ(std::count_if(added.begin(), added.end(),
                          [](const std::string& s) { return s.rfind("rote_rpc_requests_total{", 0) == 0; }),
            1);
  EXPECT_LT(after.second.size(), before.second.size() + 4096);
}

// A raw client (not rote's stubs) sending a blueprint source that is not UTF-8: protobuf
// refuses the request, and the answer must say so (INVALID_ARGUMENT), not INTERNAL with an empty
// message as gRPC gives by default.
TEST(ServerTest, RequestWithNonUtf8TextIsInvalidArgument) {
  auto server = Server::Start(TestOptions("utf8"));
  ASSERT_TRUE(server.ok()) << server.status();
  auto ch = Connect((*server)->port());
  // Field 1 (source), length 5: "ret" then 0xFF 0xFE.
  const std::string request("\x0a\x05ret\xff\xfe", 7);
  grpc::Status st = RawCall(ch, "/rote.v1.BlueprintService/RegisterBlueprint", request);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr("rote.v1.RegisterBlueprintRequest"));
  EXPECT_THAT(st.error_message(), HasSubstr("not UTF-8"));
  // The same bytes as valid UTF-8 get past parsing (and fail later, as Lua).
  grpc::Status valid = RawCall(ch, "/rote.v1.BlueprintService/RegisterBlueprint", std::string("\x0a\x03ret", 5));
  EXPECT_NE(valid.error_code(), grpc::StatusCode::INTERNAL) << valid.error_message();
  EXPECT_THAT(valid.error_message(), ::testing::Not(HasSubstr("does not parse as")));
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

// A self-signed certificate and its key made by the openssl command line: DIR/NAME-cert.pem, DIR/NAME-key.pem.
void MakeCertificate(const std::string& dir, const std::string& name) {
  const std::string cmd = "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost -keyout " +
                          dir + "/" + name + "-key.pem -out " + dir + "/" + name + "-cert.pem >/dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "openssl could not make a test certificate";
}

// gRPC reports bad TLS files as "the address is in use or invalid"; so each is named with
// what is wrong, before anything starts.
TEST(ServerTlsTest, MismatchedKeyNamesBothFiles) {
  ServerOptions opt = TestOptions("tls-mismatch");
  MakeCertificate(opt.data_dir, "a");
  MakeCertificate(opt.data_dir, "b");
  opt.tls_cert_file = opt.data_dir + "/a-cert.pem";
  opt.tls_key_file = opt.data_dir + "/b-key.pem";
  EXPECT_FALSE(CheckOptionFiles(opt).ok());
  auto server = Server::Start(opt);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(server.status().message()),
              HasSubstr("the key in " + opt.tls_key_file + " (--tls-key) does not match the certificate in " +
                        opt.tls_cert_file));
}

TEST(ServerTlsTest, NonPemFilesAreNamed) {
  ServerOptions opt = TestOptions("tls-nonpem");
  MakeCertificate(opt.data_dir, "a");
  const std::string junk = opt.data_dir + "/junk.pem";
  std::ofstream(junk) << "this is not PEM\n";
  opt.tls_cert_file = junk;
  opt.tls_key_file = opt.data_dir + "/a-key.pem";
  absl::Status cert = CheckOptionFiles(opt);
  EXPECT_EQ(cert.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(cert.message()), HasSubstr("--tls-cert " + junk + " holds no PEM certificate"));
  opt.tls_cert_file = opt.data_dir + "/a-cert.pem";
  opt.tls_key_file = junk;
  absl::Status key = CheckOptionFiles(opt);
  EXPECT_EQ(key.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(key.message()), HasSubstr("--tls-key " + junk + " holds no usable PEM private key"));
  // A certificate given as the key is not a key either.
  opt.tls_key_file = opt.data_dir + "/a-cert.pem";
  EXPECT_THAT(std::string(CheckOptionFiles(opt).message()), HasSubstr("holds no usable PEM private key"));
  opt.tls_key_file = opt.data_dir + "/a-key.pem";
  EXPECT_TRUE(CheckOptionFiles(opt).ok()) << CheckOptionFiles(opt);
}

TEST(ServerTlsTest, MissingFileIsNotFound) {
  ServerOptions opt = TestOptions("tls-missing");
  MakeCertificate(opt.data_dir, "a");
  opt.tls_cert_file = opt.data_dir + "/nonexistent.pem";
  opt.tls_key_file = opt.data_dir + "/a-key.pem";
  absl::Status st = CheckOptionFiles(opt);
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(st.message()), HasSubstr(opt.tls_cert_file + " does not exist"));
}

// Files the server reads at start (key file, TLS files) are regular files of bounded size:
// /dev/zero would be read until memory ran out, a FIFO would block forever.
TEST(ReadBoundedFileTest, RefusesDevicesFifosDirectoriesAndOversizedFiles) {
  const std::string dir = TempDir("bounded-file");
  auto zero = ReadBoundedFile("/dev/zero", 1 << 20, "key file (--keys)");
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(zero.status().message()), HasSubstr("/dev/zero is a character device"));
  const std::string fifo = dir + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto from_fifo = ReadBoundedFile(fifo, 1 << 20, "key file (--keys)");  // must not block
  EXPECT_THAT(std::string(from_fifo.status().message()), HasSubstr("is a FIFO"));
  EXPECT_THAT(std::string(ReadBoundedFile(dir, 1 << 20, "file").status().message()), HasSubstr("is a directory"));
  const std::string big = dir + "/big";
  std::ofstream(big) << std::string(2000, 'x');
  auto too_big = ReadBoundedFile(big, 1999, "file");
  EXPECT_THAT(std::string(too_big.status().message()), HasSubstr("is 2000 bytes, more than the limit of 1999"));
  auto fits = ReadBoundedFile(big, 2000, "file");
  ASSERT_TRUE(fits.ok()) << fits.status();
  EXPECT_EQ(fits->size(), 2000u);
  ServerOptions opt = TestOptions("keys-dev-zero");
  opt.keys_file = "/dev/zero";
  auto server = Server::Start(opt);
  ASSERT_FALSE(server.ok());
  EXPECT_THAT(std::string(server.status().message()), HasSubstr("key file (--keys) /dev/zero is a character device"));
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
