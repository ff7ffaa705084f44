// What the orchestrator benchmarks share as clients of a real server: a failed call's message,
// a run submitted and watched to its end, and the machine's load beside each figure.
#pragma once

#include <fstream>
#include <iostream>
#include <string>

#include "grpcpp/grpcpp.h"
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

}  // namespace rote::bench
