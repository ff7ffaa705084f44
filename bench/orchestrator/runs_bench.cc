// Runs per second of the access-log blueprint over a 100,000-line log, through a real server
// (gRPC on loopback, the engine's pool, sandbox workers, the SQLite store), and the time of a
// replay relative to the original run. Prints one JSON object per line.
//
//   runs_bench [--lines N] [--runs N] [--concurrency N] [--data DIR]
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/orchestrator/run_client.h"
#include "grpcpp/grpcpp.h"
#include "orchestrator/server.h"
#include "rote/v1/blueprints.grpc.pb.h"
#include "rote/v1/runs.grpc.pb.h"
#include "spdlog/spdlog.h"

namespace {

using Clock = std::chrono::steady_clock;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A deterministic combined-format log: 600 clients, paths with ids and query strings, weighted
// statuses, and 1 line in 50 that does not parse.
std::string SyntheticLogInput(int lines) {
  uint64_t state = 0x9E3779B97F4A7C15ull;
  auto next = [&](uint64_t n) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return (state >> 33) % n;
  };
  static const char* const kPaths[] = {"/index.html", "/static/css/site.css", "/static/js/app.js",
                                       "/api/orders/%", "/api/orders", "/users/%/avatar", "/blobs/#",
                                       "/search?q=rote", "/login", "/docs/guide/%"};
  static const char* const kMethods[] = {"GET", "GET", "GET", "POST", "HEAD"};
  static const int kStatuses[] = {200, 200, 200, 200, 200, 200, 304, 301, 404, 500, 201};
  static const char* const kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  std::string out = "{\"top\":10,\"lines\":[";
  out.reserve(static_cast<size_t>(lines) * 170);
  char buf[512];
  for (int i = 0; i < lines; ++i) {
    if (i > 0) out += ",";
    if (next(50) == 0) {
      snprintf(buf, sizeof buf, "\"malformed entry %d from a misconfigured logger\"", i);
      out += buf;
      continue;
    }
    std::string client;
    uint64_t c = next(600);
    if (c < 30) {
      snprintf(buf, sizeof buf, "2001:db8::%x", static_cast<unsigned>(c + 1));
    } else {
      snprintf(buf, sizeof buf, "%u.%u.%u.%u", static_cast<unsigned>(10 + c % 200), static_cast<unsigned>(c % 7),
               static_cast<unsigned>(c % 13), static_cast<unsigned>(c % 251));
    }
    client = buf;
    std::string path = kPaths[next(std::size(kPaths))];
    if (auto p = path.find('%'); p != std::string::npos) path.replace(p, 1, std::to_string(next(5000)));
    if (auto p = path.find('#'); p != std::string::npos) {
      snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(next(1ull << 62)));
      path.replace(p, 1, buf);
    }
    if (next(4) == 0) path += "?utm_source=mail&n=" + std::to_string(next(100));
    int status = kStatuses[next(std::size(kStatuses))];
    std::string bytes = status == 304 ? "-" : std::to_string(100 + next(60000));
    snprintf(buf, sizeof buf,
             "\"%s - - [%02u/%s/2024:%02u:%02u:%02u +0000] \\\"%s %s HTTP/1.1\\\" %d %s \\\"-\\\" "
             "\\\"Mozilla/5.0 (X11; Linux x86_64) bench/%u\\\"\"",
             client.c_str(), static_cast<unsigned>(1 + next(28)), kMonths[next(12)], static_cast<unsigned>(next(24)),
             static_cast<unsigned>(next(60)), static_cast<unsigned>(next(60)), kMethods[next(std::size(kMethods))],
             path.c_str(), status, bytes.c_str(), static_cast<unsigned>(next(9)));
    out += buf;
  }
  out += "]}";
  return out;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct Client {
  std::unique_ptr<rote::v1::BlueprintService::Stub> blueprints;
  std::unique_ptr<rote::v1::RunService::Stub> runs;
};

bool Fail(const grpc::Status& st, const char* what) { return rote::bench::Fail("runs_bench", st, what); }

bool RunOnce(Client& c, const std::string& input, rote::v1::Run* run) {
  return rote::bench::RunToEnd("runs_bench", *c.runs, "blueprints/access_log", input, run);
}

}  // namespace

int main(int argc, char** argv) {
  int lines = 100000, runs = 5, concurrency = 4;
  std::string data;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--lines") lines = std::atoi(argv[i + 1]);
    else if (flag == "--runs") runs = std::atoi(argv[i + 1]);
    else if (flag == "--concurrency") concurrency = std::atoi(argv[i + 1]);
    else if (flag == "--data") data = argv[i + 1];
  }
  spdlog::set_level(spdlog::level::warn);
  auto server = rote::bench::BenchServer::Start("runs_bench", data, concurrency);
  if (server == nullptr) return 1;
  const std::shared_ptr<grpc::Channel>& channel = server->channel();
  Client c{rote::v1::BlueprintService::NewStub(channel), rote::v1::RunService::NewStub(channel)};

  rote::v1::RegisterBlueprintRequest reg;
  reg.set_source(ReadFile(std::string(ROTE_BLUEPRINTS_DIR) + "/access_log.lua"));
  reg.set_lockfile(ReadFile(std::string(ROTE_BLUEPRINTS_DIR) + "/access_log.lock"));
  reg.set_filename("access_log.lua");
  rote::v1::Blueprint bp;
  {
    grpc::ClientContext ctx;
    if (auto st = c.blueprints->RegisterBlueprint(&ctx, reg, &bp); !st.ok()) return Fail(st, "RegisterBlueprint"), 1;
  }
  const std::string input = SyntheticLogInput(lines);

  // One warm-up run (worker start-up, page cache), then sequential measured runs.
  rote::v1::Run run;
  if (!RunOnce(c, input, &run)) return 1;
  std::vector<double> run_s, replay_s;
  std::string digest = run.output_digest();
  bool same = true;
  std::vector<std::string> names;
  for (int i = 0; i < runs; ++i) {
    auto t0 = Clock::now();
    if (!RunOnce(c, input, &run)) return 1;
    run_s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    same = same && run.output_digest() == digest;
    names.push_back(run.name());
  }
  for (const std::string& name : names) {
    rote::v1::ReplayRunRequest req;
    req.set_name(name);
    rote::v1::ReplayRunResponse resp;
    grpc::ClientContext ctx;
    auto t0 = Clock::now();
    if (auto st = c.runs->ReplayRun(&ctx, req, &resp); !st.ok()) return Fail(st, "ReplayRun"), 1;
    replay_s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    same = same && resp.matched();
  }
  const double median_run = Median(run_s), median_replay = Median(replay_s);
  std::printf(
      "{\"bench\":\"access_log_run\",\"lines\":%d,\"input_bytes\":%zu,\"runs\":%d,\"steps_per_run\":%lld,"
      "\"median_run_s\":%.4f,\"min_run_s\":%.4f,\"runs_per_s\":%.3f,\"lines_per_s\":%.0f,"
      "\"identical_outputs\":%s,\"cores\":%u,\"loadavg\":%.2f}\n",
      lines, input.size(), runs, static_cast<long long>(run.step_count()), median_run,
      *std::min_element(run_s.begin(), run_s.end()), 1.0 / median_run, lines / median_run, same ? "true" : "false",
      std::thread::hardware_concurrency(), rote::bench::LoadAverage());
  std::printf(
      "{\"bench\":\"access_log_replay\",\"lines\":%d,\"replays\":%zu,\"median_replay_s\":%.4f,"
      "\"median_run_s\":%.4f,\"replay_over_run\":%.3f,\"all_matched\":%s,\"loadavg\":%.2f}\n",
      lines, replay_s.size(), median_replay, median_run, median_replay / median_run, same ? "true" : "false",
      rote::bench::LoadAverage());
  std::fflush(stdout);

  // Throughput with `concurrency` runs in flight (the pool's size).
  {
    std::vector<std::thread> threads;
    std::vector<int> ok(static_cast<size_t>(concurrency), 0);
    auto t0 = Clock::now();
    for (int t = 0; t < concurrency; ++t) {
      threads.emplace_back([&, t] {
        rote::v1::Run r;
        ok[static_cast<size_t>(t)] = RunOnce(c, input, &r) && r.output_digest() == digest;
      });
    }
    for (auto& t : threads) t.join();
    const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
    std::printf(
        "{\"bench\":\"access_log_concurrent\",\"lines\":%d,\"concurrent_runs\":%d,\"wall_s\":%.4f,"
        "\"runs_per_s\":%.3f,\"all_identical\":%s,\"cores\":%u,\"loadavg\":%.2f}\n",
        lines, concurrency, wall, concurrency / wall,
        std::all_of(ok.begin(), ok.end(), [](int v) { return v != 0; }) ? "true" : "false",
        std::thread::hardware_concurrency(), rote::bench::LoadAverage());
  }
  return 0;
}
