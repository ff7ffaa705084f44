#include "tests/e2e/e2e_util.h"

#include <sqlite3.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"
#include "spdlog/spdlog.h"

namespace rote::e2e {

TestServer::TestServer() {
  spdlog::set_level(spdlog::level::warn);  // per-call request logs drown test failures
  std::string base = std::filesystem::temp_directory_path() / "rote-e2e-XXXXXX";
  std::vector<char> buf(base.begin(), base.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) {
    ADD_FAILURE() << "mkdtemp failed";
    return;
  }
  dir_ = buf.data();
}

TestServer::~TestServer() {
  Stop();
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

void TestServer::Start(int run_workers, const std::string& keys_file) {
  Stop();
  orchestrator::ServerOptions opt;
  opt.listen = "127.0.0.1:0";
  opt.metrics_listen = "off";
  opt.data_dir = dir_;
  opt.run_workers = run_workers;
  opt.keys_file = keys_file;
  opt.grace = std::chrono::milliseconds(2000);
  // Runs still executing at Stop go back to the queue after this (Server::Shutdown).
  opt.drain_grace = std::chrono::milliseconds(2000);
  if (configure_) configure_(&opt);
  auto server = orchestrator::Server::Start(opt);
  ASSERT_TRUE(server.ok()) << server.status().message();
  server_ = *std::move(server);
  channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->port()), grpc::InsecureChannelCredentials());
  blueprints_ = rote::v1::BlueprintService::NewStub(channel_);
  runs_ = rote::v1::RunService::NewStub(channel_);
  artifacts_ = rote::v1::ArtifactService::NewStub(channel_);
}

void TestServer::Stop() {
  blueprints_.reset();
  runs_.reset();
  artifacts_.reset();
  channel_.reset();
  if (server_) {
    server_->Shutdown();
    server_.reset();
  }
}

int TestServer::port() const { return server_ ? server_->port() : 0; }

std::unique_ptr<grpc::ClientContext> TestServer::Context(int seconds) const {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
  if (!token_.empty()) ctx->AddMetadata("authorization", "Bearer " + token_);
  return ctx;
}

grpc::Status TestServer::TryRegister(const std::string& source, const std::string& lockfile,
                                     const std::string& filename, rote::v1::Blueprint* out) {
  rote::v1::RegisterBlueprintRequest req;
  req.set_source(source);
  req.set_lockfile(lockfile);
  req.set_filename(filename);
  auto ctx = Context();
  return blueprints_->RegisterBlueprint(ctx.get(), req, out);
}

rote::v1::Blueprint TestServer::Register(const std::string& source, const std::string& lockfile,
                                         const std::string& filename) {
  rote::v1::Blueprint bp;
  grpc::Status st = TryRegister(source, lockfile, filename, &bp);
  EXPECT_TRUE(st.ok()) << "RegisterBlueprint: " << st.error_message();
  return bp;
}

rote::v1::Run TestServer::Submit(const std::string& blueprint, const std::string& input_json,
                                 const std::string& request_id) {
  rote::v1::SubmitRunRequest req;
  req.set_blueprint(blueprint);
  req.set_input_json(input_json);
  req.set_request_id(request_id);
  rote::v1::Run run;
  auto ctx = Context();
  grpc::Status st = runs_->SubmitRun(ctx.get(), req, &run);
  EXPECT_TRUE(st.ok()) << "SubmitRun: " << st.error_message();
  return run;
}

std::vector<rote::v1::RunEvent> TestServer::Watch(const std::string& run) {
  rote::v1::WatchRunRequest req;
  req.set_name(run);
  auto ctx = Context(120);
  auto reader = runs_->WatchRun(ctx.get(), req);
  std::vector<rote::v1::RunEvent> events;
  rote::v1::RunEvent e;
  while (reader->Read(&e)) events.push_back(e);
  grpc::Status st = reader->Finish();
  EXPECT_TRUE(st.ok()) << "WatchRun: " << st.error_message();
  return events;
}

rote::v1::Run TestServer::Get(const std::string& name) {
  rote::v1::GetRunRequest req;
  req.set_name(name);
  rote::v1::Run run;
  auto ctx = Context();
  grpc::Status st = runs_->GetRun(ctx.get(), req, &run);
  EXPECT_TRUE(st.ok()) << "GetRun: " << st.error_message();
  return run;
}

rote::v1::Run TestServer::WaitDone(const std::string& run) {
  Watch(run);
  return Get(run);
}

grpc::Status TestServer::Replay(const std::string& run, rote::v1::ReplayRunResponse* out) {
  rote::v1::ReplayRunRequest req;
  req.set_name(run);
  auto ctx = Context(120);
  return runs_->ReplayRun(ctx.get(), req, out);
}

std::string ReadFileOrDie(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string ShippedBlueprint(const std::string& name) {
  return ReadFileOrDie(std::string(ROTE_BLUEPRINTS_DIR) + "/" + name + ".lua");
}
std::string ShippedLockfile(const std::string& name) {
  return ReadFileOrDie(std::string(ROTE_BLUEPRINTS_DIR) + "/" + name + ".lock");
}
std::string ShippedSample(const std::string& name) {
  return ReadFileOrDie(std::string(ROTE_BLUEPRINTS_DIR) + "/" + name + ".sample.json");
}

std::unique_ptr<store::Store> OpenFreshStore(const std::string& dir) {
  std::filesystem::remove_all(dir);
  store::StoreOptions o;
  o.path = dir;
  o.synchronous = store::SyncMode::kNormal;
  auto s = store::Store::Open(o);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

void ExecSql(const std::string& data_dir, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((data_dir + "/rote.db").c_str(), &db), SQLITE_OK);
  char* err = nullptr;
  int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  EXPECT_EQ(rc, SQLITE_OK) << (err ? err : "");
  sqlite3_free(err);
  sqlite3_close(db);
}

}  // namespace rote::e2e
