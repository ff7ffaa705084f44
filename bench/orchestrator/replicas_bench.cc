// Several replicas on one PostgreSQL database under SIGKILL (docs/performance.md, "Replicas on
// one PostgreSQL"): `rote serve` processes on loopback share one database; clients submit runs
// (each with a request id, retried on another replica when one goes away) while one replica is
// SIGKILLed and restarted every few seconds. At the end every acknowledged run is checked: runs
// lost (acknowledged, not finished), duplicated (more runs than requests, or a run whose history
// holds more than one terminal state or whose journal is not one attempt's), and the takeover
// time (from a kill to another replica taking the run over). The same runs on one replica, and on
// all the replicas without kills, give the throughputs to compare against (each counted from the
// first run's creation to the last run's end, as recorded).
//
//   replicas_bench --pg URL [--runs 1000] [--replicas 3] [--kill-every-ms 4000] [--lease-ms 2000]
//                  [--heartbeat-ms 300] [--clients 8] [--rote PATH]
#include <arpa/inet.h>
#include <fcntl.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/orchestrator/run_client.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "rote/v1/blueprints.grpc.pb.h"
#include "rote/v1/runs.grpc.pb.h"

extern char** environ;

namespace rote::bench {
namespace {

using Clock = std::chrono::steady_clock;

const char kBlueprint[] = R"lua(local bp = rote.blueprint { name = "spin_words", version = "1" }
local shout = bp:lua {
  name = "shout", task = "Upper-case a word.", signature = "function(word) -> string",
  tests = { { "hi", "HI" } },
}
function bp.run(input)
  local out = {}
  for i = 1, input.rounds do
    local x = 0
    for j = 1, input.spin do x = (x + j * i) % 7919 end
    out[#out + 1] = shout(input.word .. x)
  end
  return { words = out }
end
return bp
)lua";

const char kLock[] = R"(format = 1
blueprint = "spin_words"

[[point]]
name = "shout"
kind = "lua_function"
source = '''
return function(word) return string.upper(word) end
'''
)";

constexpr int kRounds = 5;

std::string InputOf(int i) { return absl::StrCat(R"({"rounds": )", kRounds, R"(, "spin": 100000, "word": "w)", i, R"("})"); }

struct Config {
  std::string pg_url;
  std::string rote = ROTE_BINARY;
  int runs = 1000;
  int replicas = 3;
  int kill_every_ms = 4000;
  int lease_ms = 2000;
  int heartbeat_ms = 300;
  int clients = 8;
};

int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

bool PgExec(const std::string& url, const std::string& sql) {
  PGconn* conn = PQconnectdb(url.c_str());
  bool ok = PQstatus(conn) == CONNECTION_OK;
  if (ok) {
    PQsetNoticeProcessor(conn, [](void*, const char*) {}, nullptr);
    PGresult* res = PQexec(conn, sql.c_str());
    ok = PQresultStatus(res) == PGRES_COMMAND_OK;
    if (!ok) std::cerr << "replicas_bench: " << PQresultErrorMessage(res);
    PQclear(res);
  } else {
    std::cerr << "replicas_bench: " << PQerrorMessage(conn);
  }
  PQfinish(conn);
  return ok;
}

// One `rote serve` process; its port stays the same across restarts.
struct Replica {
  std::string id;
  std::string dir;
  int port = 0;
  pid_t pid = -1;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<rote::v1::RunService::Stub> runs;
};

bool StartReplica(const Config& cfg, const std::string& store_url, Replica* r) {
  std::vector<std::string> args = {cfg.rote, "serve", "--listen", absl::StrCat("127.0.0.1:", r->port), "--data",
                                   r->dir, "--store", store_url, "--replica-id", r->id, "--lease-ms",
                                   std::to_string(cfg.lease_ms), "--heartbeat-ms", std::to_string(cfg.heartbeat_ms),
                                   "--metrics-listen", "off", "--http-listen", "off", "--log-level", "warn"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  const std::string log = r->dir + ".log";
  posix_spawn_file_actions_addopen(&actions, 2, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, 2, 1);  // the log goes to stdout
  const int rc = posix_spawn(&r->pid, cfg.rote.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return false;
  auto health = grpc::health::v1::Health::NewStub(r->channel);
  for (int i = 0; i < 600; ++i) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
    grpc::health::v1::HealthCheckRequest req;
    grpc::health::v1::HealthCheckResponse res;
    if (health->Check(&ctx, req, &res).ok() && res.status() == grpc::health::v1::HealthCheckResponse::SERVING) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::cerr << "replicas_bench: replica " << r->id << " did not start (see " << log << ")\n";
  return false;
}

void KillReplica(Replica* r, int sig) {
  if (r->pid <= 0) return;
  ::kill(r->pid, sig);
  ::waitpid(r->pid, nullptr, 0);
  r->pid = -1;
}

struct Phase {
  double seconds = 0;  // from the first run's creation to the last run's end, as recorded
  int acknowledged = 0;
  int finished = 0;
  int lost = 0;
  int duplicated = 0;
  int kills = 0;
  int taken_over = 0;
  std::vector<double> takeover_ms;
};

// Submits cfg.runs runs across `replicas` (request ids, retried elsewhere on failure) and
// waits for each to end; with `kill`, one replica is SIGKILLed and restarted every
// cfg.kill_every_ms meanwhile, its kill times (system clock, ms) appended to `kills`.
bool Drive(const Config& cfg, const std::string& store_url, std::vector<Replica>& replicas, bool kill, Phase* out,
           std::vector<int64_t>* kills) {
  std::vector<std::string> names(cfg.runs);
  std::atomic<int> next{0}, acked{0}, done{0};
  std::atomic<bool> stop{false};
  std::mutex mu;  // guards `kills`
  const Clock::time_point start = Clock::now();
  std::thread killer;
  if (kill) {
    killer = std::thread([&] {
      for (int k = 0; !stop.load(); ++k) {
        std::this_thread::sleep_for(std::chrono::milliseconds(cfg.kill_every_ms));
        if (stop.load()) break;
        Replica& r = replicas[k % replicas.size()];
        KillReplica(&r, SIGKILL);
        {
          std::lock_guard lock(mu);
          kills->push_back(std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::system_clock::now().time_since_epoch()).count());
        }
        StartReplica(cfg, store_url, &r);
      }
    });
  }
  auto client = [&](int c) {
    std::mt19937 rng(c);
    for (int i = next++; i < cfg.runs; i = next++) {
      for (int attempt = 0;; ++attempt) {
        Replica& r = replicas[rng() % replicas.size()];
        rote::v1::SubmitRunRequest req;
        req.set_blueprint("blueprints/spin_words");
        req.set_input_json(InputOf(i));
        req.set_request_id(absl::StrCat("bench-", i));
        rote::v1::Run run;
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
        if (r.runs->SubmitRun(&ctx, req, &run).ok()) {
          names[i] = run.name();
          ++acked;
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
  };
  std::vector<std::thread> clients;
  for (int c = 0; c < cfg.clients; ++c) clients.emplace_back(client, c);
  // Progress, and the wait for every run to end (read on any replica that answers).
  std::vector<bool> ended(cfg.runs, false);
  for (int round = 0; done.load() < cfg.runs; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    for (int i = 0; i < cfg.runs; ++i) {
      if (ended[i] || names[i].empty()) continue;
      rote::v1::GetRunRequest g;
      g.set_name(names[i]);
      rote::v1::Run run;
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
      if (!replicas[(i + round) % replicas.size()].runs->GetRun(&ctx, g, &run).ok()) continue;
      if (run.state() == rote::v1::RUN_STATE_SUCCEEDED || run.state() == rote::v1::RUN_STATE_FAILED ||
          run.state() == rote::v1::RUN_STATE_CANCELLED) {
        ended[i] = true;
        ++done;
        if (run.state() == rote::v1::RUN_STATE_SUCCEEDED) ++out->finished;
      }
    }
    if (round % 4 == 0) {
      std::lock_guard lock(mu);
      std::printf("  %5.1fs: %d/%d submitted, %d ended, %zu kills\n",
                  std::chrono::duration<double>(Clock::now() - start).count(), acked.load(), cfg.runs, done.load(),
                  kills->size());
      std::fflush(stdout);
    }
    if (Clock::now() - start > std::chrono::minutes(10)) break;
  }
  stop = true;
  for (std::thread& t : clients) t.join();
  if (killer.joinable()) killer.join();
  out->acknowledged = acked.load();
  out->lost = out->acknowledged - out->finished;
  out->kills = static_cast<int>(kills->size());
  return true;
}

// Reads every run's history: duplicates and takeover times.
void Audit(const Config& cfg, Replica& r, const std::vector<int64_t>& kills, Phase* out) {
  std::map<std::string, int> runs_seen;
  double first_created = 1e18;
  double last_ended = 0;
  std::string token;
  do {
    rote::v1::ListRunsRequest req;
    req.set_page_size(1000);
    req.set_page_token(token);
    rote::v1::ListRunsResponse res;
    grpc::ClientContext ctx;
    if (!r.runs->ListRuns(&ctx, req, &res).ok()) break;
    for (const rote::v1::Run& run : res.runs()) {
      ++runs_seen[run.name()];
      const double created = static_cast<double>(run.create_time().seconds()) + run.create_time().nanos() / 1e9;
      const double ended = static_cast<double>(run.end_time().seconds()) + run.end_time().nanos() / 1e9;
      first_created = std::min(first_created, created);
      last_ended = std::max(last_ended, ended);
      if (run.step_count() != kRounds && run.state() == rote::v1::RUN_STATE_SUCCEEDED) ++out->duplicated;
    }
    token = res.next_page_token();
  } while (!token.empty());
  if (static_cast<int>(runs_seen.size()) > cfg.runs) out->duplicated += static_cast<int>(runs_seen.size()) - cfg.runs;
  out->seconds = last_ended - first_created;
  for (const auto& [name, count] : runs_seen) {
    rote::v1::WatchRunRequest w;
    w.set_name(name);
    grpc::ClientContext ctx;
    auto reader = r.runs->WatchRun(&ctx, w);
    rote::v1::RunEvent e;
    int terminal = 0;
    while (reader->Read(&e)) {
      if (e.has_state() && e.state() != rote::v1::RUN_STATE_PENDING && e.state() != rote::v1::RUN_STATE_RUNNING) {
        ++terminal;
      }
      if (e.has_log() && e.log().find("taken over by replica") != std::string::npos) {
        ++out->taken_over;
        const int64_t at = e.time().seconds() * 1000 + e.time().nanos() / 1000000;
        auto it = std::upper_bound(kills.begin(), kills.end(), at);
        if (it != kills.begin()) out->takeover_ms.push_back(static_cast<double>(at - *std::prev(it)));
      }
    }
    reader->Finish();
    if (terminal != 1) ++out->duplicated;
  }
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

bool RunPhase(const Config& cfg, int replica_count, bool kill, Phase* out) {
  const std::string schema = absl::StrCat("replicas_bench_", ::getpid(), "_", replica_count, kill ? "_kill" : "");
  if (!PgExec(cfg.pg_url, "DROP SCHEMA IF EXISTS " + schema + " CASCADE; CREATE SCHEMA " + schema)) return false;
  const std::string store_url = cfg.pg_url + (cfg.pg_url.find('?') == std::string::npos ? "?" : "&") +
                                "options=-csearch_path%3D" + schema;
  const std::string base = (std::filesystem::temp_directory_path() / absl::StrCat("rote-replicas-bench-", ::getpid())).string();
  std::vector<Replica> replicas(replica_count);
  for (int i = 0; i < replica_count; ++i) {
    Replica& r = replicas[i];
    r.id = absl::StrCat("replica-", i + 1);
    r.dir = absl::StrCat(base, "/", replica_count, kill ? "-kill-" : "-", r.id);
    std::filesystem::create_directories(r.dir);
    r.port = FreePort();
    r.channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", r.port), grpc::InsecureChannelCredentials());
    r.runs = rote::v1::RunService::NewStub(r.channel);
    if (!StartReplica(cfg, store_url, &r)) return false;
  }
  {
    auto bps = rote::v1::BlueprintService::NewStub(replicas[0].channel);
    rote::v1::RegisterBlueprintRequest req;
    req.set_source(kBlueprint);
    req.set_lockfile(kLock);
    req.set_filename("spin_words.lua");
    rote::v1::Blueprint bp;
    grpc::ClientContext ctx;
    if (auto st = bps->RegisterBlueprint(&ctx, req, &bp); !st.ok()) return Fail("replicas_bench", st, "RegisterBlueprint");
  }
  std::vector<int64_t> kills;
  const bool ok = Drive(cfg, store_url, replicas, kill, out, &kills);
  if (ok) Audit(cfg, replicas[0], kills, out);
  for (Replica& r : replicas) KillReplica(&r, SIGTERM);
  std::filesystem::remove_all(base);
  PgExec(cfg.pg_url, "DROP SCHEMA IF EXISTS " + schema + " CASCADE");
  return ok;
}

bool ParseArgs(int argc, char** argv, Config* cfg) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--pg") cfg->pg_url = value;
    else if (flag == "--rote") cfg->rote = value;
    else if (flag == "--runs") cfg->runs = std::atoi(value.c_str());
    else if (flag == "--replicas") cfg->replicas = std::atoi(value.c_str());
    else if (flag == "--kill-every-ms") cfg->kill_every_ms = std::atoi(value.c_str());
    else if (flag == "--lease-ms") cfg->lease_ms = std::atoi(value.c_str());
    else if (flag == "--heartbeat-ms") cfg->heartbeat_ms = std::atoi(value.c_str());
    else if (flag == "--clients") cfg->clients = std::atoi(value.c_str());
    else return false;
  }
  return !cfg->pg_url.empty() && cfg->runs > 0 && cfg->replicas > 1 && cfg->clients > 0;
}

}  // namespace
}  // namespace rote::bench

int main(int argc, char** argv) {
  using namespace rote::bench;
  ::signal(SIGPIPE, SIG_IGN);
  Config cfg;
  if (!ParseArgs(argc, argv, &cfg)) {
    std::cerr << "usage: replicas_bench --pg URL [--runs 1000] [--replicas 3] [--kill-every-ms 4000] [--lease-ms 2000] "
                 "[--heartbeat-ms 300] [--clients 8] [--rote PATH]\n";
    return 2;
  }
  std::printf("one replica, no kills: %d runs, %d clients (load %.2f)\n", cfg.runs, cfg.clients, LoadAverage());
  Phase one;
  if (!RunPhase(cfg, 1, /*kill=*/false, &one)) return 1;
  std::printf("%d replicas, no kills\n", cfg.replicas);
  Phase calm;
  if (!RunPhase(cfg, cfg.replicas, /*kill=*/false, &calm)) return 1;
  std::printf("%d replicas, one SIGKILLed and restarted every %d ms (lease %d ms, heartbeat %d ms)\n", cfg.replicas,
              cfg.kill_every_ms, cfg.lease_ms, cfg.heartbeat_ms);
  Phase many;
  if (!RunPhase(cfg, cfg.replicas, /*kill=*/true, &many)) return 1;
  std::printf("\nruns acknowledged:   %d of %d\n", many.acknowledged, cfg.runs);
  std::printf("runs lost:           %d\n", many.lost);
  std::printf("runs duplicated:     %d\n", many.duplicated);
  std::printf("all finished:        %s (%d succeeded)\n", many.finished == cfg.runs ? "yes" : "NO", many.finished);
  std::printf("kills:               %d; runs taken over: %d\n", many.kills, many.taken_over);
  std::printf("takeover time:       p50 %.0f ms, p99 %.0f ms (kill to takeover; lease %d ms)\n",
              Percentile(many.takeover_ms, 0.5), Percentile(many.takeover_ms, 0.99), cfg.lease_ms);
  std::printf("throughput:          %.1f runs/s on one replica; %.1f runs/s on %d (%.2fx); %.1f runs/s on %d under kills "
              "(%.2fx)\n",
              cfg.runs / one.seconds, cfg.runs / calm.seconds, cfg.replicas, one.seconds / calm.seconds,
              cfg.runs / many.seconds, cfg.replicas, one.seconds / many.seconds);
  std::printf("load average:        %.2f\n", LoadAverage());
  const bool ok = many.lost == 0 && many.duplicated == 0 && many.finished == cfg.runs && one.finished == cfg.runs &&
                  calm.finished == cfg.runs && calm.duplicated == 0;
  return ok ? 0 : 1;
}
