// A real rote server in a temporary directory plus stubs, for end-to-end tests.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "orchestrator/server.h"
#include "rote/v1/artifacts.grpc.pb.h"
#include "rote/v1/blueprints.grpc.pb.h"
#include "rote/v1/runs.grpc.pb.h"
#include "store/store.h"

namespace rote::e2e {

class TestServer {
 public:
  // A fresh data directory under $TMPDIR, removed by the destructor.
  TestServer();
  ~TestServer();

  // Starts (or restarts) the server on the same data directory; with a key file, calls carry
  // the token set with set_token.
  void Start(int run_workers = 4, const std::string& keys_file = "");
  void set_token(const std::string& token) { token_ = token; }
  // Applied to the server's options before each Start (e.g. review settings).
  void set_configure(std::function<void(orchestrator::ServerOptions*)> f) { configure_ = std::move(f); }
  // A context with a deadline and the bearer token.
  std::unique_ptr<grpc::ClientContext> Context(int seconds = 60) const;
  void Stop();
  const std::string& data_dir() const { return dir_; }
  int port() const;

  rote::v1::BlueprintService::Stub& blueprints() { return *blueprints_; }
  rote::v1::RunService::Stub& runs() { return *runs_; }
  rote::v1::ArtifactService::Stub& artifacts() { return *artifacts_; }

  // Helpers that fail the current test (ADD_FAILURE) on an RPC error.
  rote::v1::Blueprint Register(const std::string& source, const std::string& lockfile,
                               const std::string& filename = "test.lua");
  grpc::Status TryRegister(const std::string& source, const std::string& lockfile,
                           const std::string& filename, rote::v1::Blueprint* out);
  rote::v1::Run Submit(const std::string& blueprint, const std::string& input_json,
                       const std::string& request_id = "");
  // Streams every event until the stream ends.
  std::vector<rote::v1::RunEvent> Watch(const std::string& run);
  rote::v1::Run Get(const std::string& run);
  // Watch to the end, then GetRun.
  rote::v1::Run WaitDone(const std::string& run);
  grpc::Status Replay(const std::string& run, rote::v1::ReplayRunResponse* out);

 private:
  std::string dir_;
  std::string token_;
  std::function<void(orchestrator::ServerOptions*)> configure_;
  std::unique_ptr<orchestrator::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<rote::v1::BlueprintService::Stub> blueprints_;
  std::unique_ptr<rote::v1::RunService::Stub> runs_;
  std::unique_ptr<rote::v1::ArtifactService::Stub> artifacts_;
};

std::string ReadFileOrDie(const std::string& path);
// The source and lockfile of a blueprint shipped in blueprints/ (e.g. "access_log").
std::string ShippedBlueprint(const std::string& name);
std::string ShippedLockfile(const std::string& name);
std::string ShippedSample(const std::string& name);

// An empty store in `dir` (removed first), for tests that drive the engine directly; null
// (with a test failure) when it does not open.
std::unique_ptr<store::Store> OpenFreshStore(const std::string& dir);

// Runs SQL on the server's database (tests tamper with stored bytes; the server must be stopped).
void ExecSql(const std::string& data_dir, const std::string& sql);

}  // namespace rote::e2e
