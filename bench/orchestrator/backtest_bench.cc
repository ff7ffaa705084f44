// Backtest throughput against the original calls, side by side on one machine, through a real
// server (gRPC on loopback, the engine, sandbox workers, the SQLite store).
//
// Records `calls` calls of one Lua generation point (runs of a blueprint that calls it
// `per_run` times, `concurrency` runs at a time), takes the rate at which those calls ran from
// the runs' own start and end times (first start to last end), then backtests a new revision of
// the point over all of them and prints both rates and their ratio. Prints one JSON object.
//
//   backtest_bench [--calls N] [--per-run N] [--concurrency N] [--data DIR]
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "bench/orchestrator/run_client.h"
#include "google/protobuf/util/time_util.h"
#include "grpcpp/grpcpp.h"
#include "orchestrator/server.h"
#include "rote/v1/artifacts.grpc.pb.h"
#include "rote/v1/blueprints.grpc.pb.h"
#include "rote/v1/runs.grpc.pb.h"
#include "spdlog/spdlog.h"

namespace {

using Clock = std::chrono::steady_clock;
using google::protobuf::util::TimeUtil;

constexpr char kBlueprint[] = R"lua(local bp = rote.blueprint { name = "bench_upper", version = "1" }
local up = bp:lua {
  name = "up",
  task = "Upper-case a word.",
  signature = "function(word) -> string",
  tests = { { "hi", "HI" } },
}
function bp.run(input)
  local changed = 0
  for _, w in ipairs(input.words) do
    if up(w) ~= w then changed = changed + 1 end
  end
  return changed
end
return bp
)lua";

std::string Lock(const std::string& source) {
  return "format = 1\nblueprint = \"bench_upper\"\n\n[[point]]\nname = \"up\"\nkind = \"lua_function\"\n"
         "source = '''\n" + source + "'''\n";
}

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

bool Fail(const grpc::Status& st, const char* what) { return rote::bench::Fail("backtest_bench", st, what); }

struct Stubs {
  std::unique_ptr<rote::v1::BlueprintService::Stub> blueprints;
  std::unique_ptr<rote::v1::RunService::Stub> runs;
  std::unique_ptr<rote::v1::ArtifactService::Stub> artifacts;
};

bool Register(Stubs& s, const std::string& upper_source) {
  rote::v1::RegisterBlueprintRequest reg;
  reg.set_source(kBlueprint);
  reg.set_lockfile(Lock(upper_source));
  reg.set_filename("bench_upper.lua");
  rote::v1::Blueprint bp;
  grpc::ClientContext ctx;
  if (auto st = s.blueprints->RegisterBlueprint(&ctx, reg, &bp); !st.ok()) return Fail(st, "RegisterBlueprint");
  return true;
}

bool RunOnce(Stubs& s, const std::string& input, rote::v1::Run* run) {
  return rote::bench::RunToEnd("backtest_bench", *s.runs, "blueprints/bench_upper", input, run);
}

std::string Words(int run, int n) {
  std::string out = "{\"words\":[";
  for (int i = 0; i < n; ++i) {
    out += (i ? ",\"w" : "\"w") + std::to_string(run) + "x" + std::to_string(i) + "\"";
  }
  return out + "]}";
}

}  // namespace

int main(int argc, char** argv) {
  int calls = 100000, per_run = 1000, concurrency = 4;
  std::string data;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--calls") calls = std::atoi(argv[i + 1]);
    else if (flag == "--per-run") per_run = std::atoi(argv[i + 1]);
    else if (flag == "--concurrency") concurrency = std::atoi(argv[i + 1]);
    else if (flag == "--data") data = argv[i + 1];
  }
  if (calls <= 0 || per_run <= 0 || concurrency <= 0) {
    std::cerr << "usage: backtest_bench [--calls N] [--per-run N] [--concurrency N] [--data DIR]\n";
    return 2;
  }
  spdlog::set_level(spdlog::level::warn);
  auto server = rote::bench::BenchServer::Start("backtest_bench", data, concurrency);
  if (server == nullptr) return 1;
  const std::shared_ptr<grpc::Channel>& channel = server->channel();
  Stubs s{rote::v1::BlueprintService::NewStub(channel), rote::v1::RunService::NewStub(channel),
          rote::v1::ArtifactService::NewStub(channel)};
  if (!Register(s, "return function(word) return string.upper(word) end\n")) return 1;

  // Record: `runs` runs, `concurrency` at a time, each calling the point per_run times.
  const int runs = (calls + per_run - 1) / per_run;
  std::vector<rote::v1::Run> done(static_cast<size_t>(runs));
  std::vector<std::thread> threads;
  std::atomic<int> next{0};
  std::atomic<bool> ok{true};
  auto t0 = Clock::now();
  for (int t = 0; t < concurrency; ++t) {
    threads.emplace_back([&] {
      for (int r = next.fetch_add(1); r < runs && ok; r = next.fetch_add(1)) {
        const int n = std::min(per_run, calls - r * per_run);
        if (!RunOnce(s, Words(r, n), &done[static_cast<size_t>(r)])) ok = false;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const double record_wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!ok) return 1;
  int64_t first_start = INT64_MAX, last_end = 0, steps = 0;
  for (const rote::v1::Run& r : done) {
    first_start = std::min(first_start, TimeUtil::TimestampToMilliseconds(r.start_time()));
    last_end = std::max(last_end, TimeUtil::TimestampToMilliseconds(r.end_time()));
    steps += r.step_count();
  }
  const double original_s = static_cast<double>(last_end - first_start) / 1000.0;

  // A new revision of the point (same results, other code), backtested over every call.
  if (!Register(s, "return function(word) return (string.upper(word)) end\n")) return 1;
  rote::v1::BacktestRevisionRequest req;
  req.set_name("artifacts/bench_upper/up/revisions/2");
  rote::v1::Backtest b;
  auto t1 = Clock::now();
  {
    grpc::ClientContext ctx;
    if (auto st = s.artifacts->BacktestRevision(&ctx, req, &b); !st.ok()) return Fail(st, "BacktestRevision"), 1;
  }
  const double backtest_s = std::chrono::duration<double>(Clock::now() - t1).count();
  const double original_rate = static_cast<double>(steps) / original_s;
  const double backtest_rate = static_cast<double>(b.summary().calls()) / backtest_s;
  std::printf(
      "{\"bench\":\"backtest\",\"calls\":%lld,\"runs\":%d,\"calls_per_run\":%d,\"sandbox_workers\":%d,"
      "\"original_s\":%.3f,\"original_calls_per_s\":%.0f,\"record_wall_s\":%.3f,"
      "\"backtest_s\":%.3f,\"backtest_server_ms\":%lld,\"backtest_calls_per_s\":%.0f,\"ratio\":%.2f,"
      "\"equal\":%lld,\"different\":%lld,\"errors\":%lld,\"cores\":%u,\"cpu\":\"%s\",\"loadavg\":%.2f}\n",
      static_cast<long long>(steps), runs, per_run, concurrency, original_s, original_rate, record_wall_s, backtest_s,
      static_cast<long long>(b.duration_ms()), backtest_rate, backtest_rate / original_rate,
      static_cast<long long>(b.summary().equal()), static_cast<long long>(b.summary().different()),
      static_cast<long long>(b.summary().errors()), std::thread::hardware_concurrency(), CpuModel().c_str(),
      rote::bench::LoadAverage());
  std::fflush(stdout);
  return b.summary().calls() == steps && b.summary().equal() == steps ? 0 : 1;
}
