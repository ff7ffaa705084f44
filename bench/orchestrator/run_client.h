// What the orchestrator benchmarks share: a real server in a data directory, a failed call's
// message, a run submitted and watched to its end, and the machine's load beside each figure.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "orchestrator/server.h"
#include "rote/v1/runs.grpc.pb.h"

namespace rote::bench {

// The 1-minute load average (the machine is shared; figures are read beside it).
inline double LoadAverage() {
  std::ifstream in("/proc/loadavg");
  double l = 0;
  in >> l;
  return l;
}

// Prints "<tool>: <what>: <message>" and returns false.
inline bool Fail(const char* tool, const grpc::Status& st, const char* what) {
  std::cerr << tool << ": " << what << ": " << st.error_message() << "\n";
  return false;
}

// Submits a run of `blueprint` on `input`, watches it to the end and returns it in `run`; false
// (after printing why) unless it succeeded.
inline bool RunToEnd(const char* tool, rote::v1::RunService::Stub& runs, const std::string& blueprint,
                     const std::string& input, rote::v1::Run* run) {
  rote::v1::SubmitRunRequest req;
  req.set_blueprint(blueprint);
  req.set_input_json(input);
  {
    grpc::ClientContext ctx;
    if (auto st = runs.SubmitRun(&ctx, req, run); !st.ok()) return Fail(tool, st, "SubmitRun");
  }
  {
    grpc::ClientContext ctx;
    rote::v1::WatchRunRequest w;
    w.set_name(run->name());
    auto reader = runs.WatchRun(&ctx, w);
    rote::v1::RunEvent e;
    while (reader->Read(&e)) {
    }
    if (auto st = reader->Finish(); !st.ok()) return Fail(tool, st, "WatchRun");
  }
  grpc::ClientContext ctx;
  rote::v1::GetRunRequest g;
  g.set_name(run->name());
  if (auto st = runs.GetRun(&ctx, g, run); !st.ok()) return Fail(tool, st, "GetRun");
  if (run->state() != rote::v1::RUN_STATE_SUCCEEDED) {
    std::cerr << tool << ": " << run->name() << " failed: " << run->error() << "\n";
    return false;
  }
  return true;
}

// A server on loopback with `run_workers` runs in flight (and as many sandbox workers), in
// `data_dir` or, when it is empty, in a fresh temporary directory removed at the end; and a
// channel to it that carries messages up to 64 MiB.
class BenchServer {
 public:
  static std::unique_ptr<BenchServer> Start(const char* tool, std::string data_dir, int run_workers) {
    auto b = std::unique_ptr<BenchServer>(new BenchServer);
    b->temp_ = data_dir.empty();
    if (b->temp_) {
      std::string base = std::filesystem::temp_directory_path() / (std::string("rote-") + tool + "-XXXXXX");
      std::vector<char> buf(base.begin(), base.end());
      buf.push_back('\0');
      if (mkdtemp(buf.data()) == nullptr) return nullptr;
      data_dir = buf.data();
    }
    b->data_ = data_dir;
    orchestrator::ServerOptions opt;
    opt.listen = "127.0.0.1:0";
    opt.metrics_listen = "off";
    opt.data_dir = data_dir;
    opt.run_workers = run_workers;
    auto server = orchestrator::Server::Start(opt);
    if (!server.ok()) {
      std::cerr << tool << ": " << server.status().message() << "\n";
      return nullptr;
    }
    b->server_ = *std::move(server);
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(64 << 20);
    args.SetMaxSendMessageSize(64 << 20);
    b->channel_ = grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(b->server_->port()),
                                            grpc::InsecureChannelCredentials(), args);
    return b;
  }
  ~BenchServer() {
    channel_.reset();
    if (server_) server_->Shutdown();
    server_.reset();
    if (temp_) std::filesystem::remove_all(data_);
  }
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }

 private:
  BenchServer() = default;
  std::unique_ptr<orchestrator::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::string data_;
  bool temp_ = false;
};

}  // namespace rote::bench
