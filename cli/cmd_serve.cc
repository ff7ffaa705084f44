// `rote serve`: runs the gRPC server until SIGINT or SIGTERM, then shuts down gracefully.
#include <algorithm>
#include <cctype>
#include <condition_variable>
#include <csignal>
#include <cstdint>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "absl/strings/str_split.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/flags.h"
#include "orchestrator/offline.h"
#include "orchestrator/server.h"
#include "spdlog/spdlog.h"

namespace rote::cli {

namespace {
const char kUsage[] =
    "Usage: rote serve [flags]\n"
    "Runs the rote gRPC server (rote.v1 services, grpc.health.v1, server reflection) until\n"
    "SIGINT or SIGTERM; then health turns NOT_SERVING, new runs are refused (UNAVAILABLE), runs\n"
    "executing finish (up to --drain-grace-ms; those still running go back to the queue for the\n"
    "next server on the same data), calls in flight finish (up to --grace-ms) and the process\n"
    "exits 0 (docs/operations.md).\n\n"
    "Flags:\n"
    "  --listen HOST:PORT          address to serve on (default 127.0.0.1:7878); any address\n"
    "                              other than loopback requires --keys\n"
    "  --data DIR                  data directory: the SQLite store and what else the server\n"
    "                              keeps (default ./rote-data)\n"    "  --store postgresql://...    keep the store in this PostgreSQL database instead of the\n"
    "                              SQLite file in --data (docs/operations.md, \"PostgreSQL\n"
    "                              store\"); --data still holds the server's lock\n"
    "  --replica-id ID             with --store: this server's name in the leases of the runs it\n"
    "                              executes; several servers (each with its own --data) share\n"
    "                              one database's queue (default <host>-<pid>; docs/operations.md,\n"
    "                              \"Several replicas on PostgreSQL\")\n"
    "  --lease-ms N                with --store: a run whose replica has not renewed its lease\n"
    "                              for N ms is taken over by another replica (default 10000)\n"
    "  --heartbeat-ms N            with --store: how often leases are renewed; less than\n"
    "                              --lease-ms (default 2000)\n"
    "  --keys FILE                 bearer tokens: lines of `<token> <principal> <roles>`, roles\n"
    "                              from submit, review, admin. Without it: local mode, loopback\n"
    "                              only, every caller has every role\n"
    "  --metrics-listen HOST:PORT  Prometheus text metrics at /metrics (default\n"
    "                              127.0.0.1:9464; `off` disables)\n"
    "  --http-listen HOST:PORT     the review console (a web page) and its JSON API (default\n"
    "                              127.0.0.1:7880; `off` disables); the same TLS files and,\n"
    "                              beyond loopback, the same need for --keys as --listen\n"
    "  --max-message-bytes N       largest request or response (default 67108864)\n"
    "  --tls-cert FILE --tls-key FILE  serve TLS with this PEM certificate and key\n"
    "  --drain-ms N                after a signal, keep serving N ms while NOT_SERVING (default 0)\n"
    "  --drain-grace-ms N          then give runs executing up to N ms to finish before they are\n"
    "                              re-queued (default 30000)\n"
    "  --grace-ms N                then give calls in flight up to N ms (default 10000)\n"
    "  --log-level LEVEL           trace, debug, info, warn, error (default info)\n"
    "  --log-format text|json      json: one JSON object per line with time, level, msg and,\n"
    "                              where known, principal, run and request_id (default text)\n\n"
    "Generation (docs/generation.md):\n"
    "  --model DIR                 load this Hugging Face model directory and generate code for\n"
    "                              unbound generation points (runs with --allow-generation)\n"
    "  --device cpu|cuda|cuda:N    where the model runs (default cpu; cuda is cuda:0);\n"
    "                              cuda:N,M,... or cuda:all: one engine per GPU, generation\n"
    "                              spread over them (docs/operations.md, \"Every GPU\")\n"
    "  --numerics exact|fast       exact (default): the same bits on the CPU and any CUDA GPU;\n"
    "                              fast: CUDA tensor cores, batch-invariant on one GPU\n"
    "                              architecture (docs/fast_profile.md)\n"
    "  --kv-cache-mb N             KV cache memory: on CUDA a cap (default: all the free device\n"
    "                              memory after the weights, less 1 GiB); on the CPU the size\n"
    "                              (default 256)\n"
    "  --max-batch N               sequences the engine advances in one step, 1..256 (default\n"
    "                              16); outputs do not depend on it, throughput does\n"
    "  --attempts N                attempts per generation point, 1..10 (default 3)\n"
    "  --max-tokens N              tokens per attempt (default 512)\n"
    "  --retry-temperature T       temperature of attempts 2 and later (attempt 1 is greedy;\n"
    "                              each is seeded from the request, so repeatable); 0: greedy\n"
    "                              retries (default 0.75)\n"
    "  --grammar on|off            hold replies to the point kind's grammar: a ```lua block\n"
    "                              that parses and reads only the sandbox's names, or a ```re2\n"
    "                              block RE2 accepts (default on)\n"
    "  --review-policy MODE        auto: generated code whose tests pass runs at once;\n"
    "                              approval (default): a reviewer other than the principal who\n"
    "                              asked for it must approve it first\n"
    "  --review-policy-for LIST    per blueprint: NAME=MODE[,NAME=MODE...]\n"
    "  --allow-unreviewed WHO      never (default): no run uses code that is not approved;\n"
    "                              reviewers: principals with the review role may submit with\n"
    "                              --allow-pending (each such run is audited)\n"
    "  --promotion MODE            on-approval (default): approving a revision makes it the\n"
    "                              live one; manual: `rote artifacts promote` does\n";
// A flag's integer value in [lo, hi], or nullopt after printing what is wrong (a usage error,
// where std::stoi would have thrown out of main).
std::optional<int64_t> IntFlag(const ParsedFlags& flags, const std::string& name, int64_t fallback, int64_t lo,
                               int64_t hi) {
  const std::optional<std::string> text = flags.Get(name);
  if (!text) return fallback;
  int64_t v = 0;
  try {
    size_t used = 0;
    v = std::stoll(*text, &used);
    if (used != text->size()) throw std::invalid_argument(*text);
  } catch (const std::exception&) {
    std::cerr << "rote serve: --" << name << " needs an integer, got `" << *text << "`\n\n" << kUsage;
    return std::nullopt;
  }
  if (v < lo || v > hi) {
    std::cerr << "rote serve: --" << name << " must be between " << lo << " and " << hi << ", got " << v << "\n\n"
              << kUsage;
    return std::nullopt;
  }
  return v;
}

// SIGINT and SIGTERM: blocked in every thread and taken by one thread that waits for them from
// before the server starts. Starting can take minutes (a model's weights are read and hashed and,
// on CUDA, copied to the device) and cannot be stopped part way; a signal then ends the process
// at once with status 128 + the signal, as the default action would, since nothing is served yet
// that a graceful shutdown would protect. After Serving(), WaitForSignal() returns the signal.
class SignalWatcher {
 public:
  SignalWatcher() : state_(std::make_shared<State>()) {
    sigemptyset(&state_->set);
    sigaddset(&state_->set, SIGINT);
    sigaddset(&state_->set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &state_->set, nullptr);  // threads made later inherit the mask
    // Detached and sharing the state: it stays in sigwait until a signal comes or the process ends.
    std::thread([state = state_] {
      int sig = 0;
      sigwait(&state->set, &sig);
      std::lock_guard<std::mutex> lock(state->mu);
      if (!state->serving) {
        std::cerr << "rote serve: received " << (sig == SIGINT ? "SIGINT" : "SIGTERM")
                  << " while starting (loading the model); exiting without serving" << std::endl;
        std::_Exit(128 + sig);
      }
      state->received = sig;
      state->cv.notify_all();
    }).detach();
  }

  void Serving() {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->serving = true;
  }

  int WaitForSignal() {
    std::unique_lock<std::mutex> lock(state_->mu);
    state_->cv.wait(lock, [&] { return state_->received != 0; });
    return state_->received;
  }

 private:
  struct State {
    sigset_t set;
    std::mutex mu;
    std::condition_variable cv;
    bool serving = false;
    int received = 0;
  };
  std::shared_ptr<State> state_;
};

// --replica-id, --lease-ms, --heartbeat-ms (several replicas on one PostgreSQL store); false
// after saying what is wrong.
bool ParseReplicaFlags(const ParsedFlags& flags, orchestrator::ServerOptions* opt) {
  opt->replica_id = flags.GetOr("replica-id", "");
  if (opt->replica_id.size() > 64 || std::any_of(opt->replica_id.begin(), opt->replica_id.end(), [](char c) {
        return !std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.' && c != ':';
      })) {
    std::cerr << "rote serve: --replica-id takes at most 64 letters, digits and - _ . :\n\n" << kUsage;
    return false;
  }
  const std::optional<int64_t> lease_ms = IntFlag(flags, "lease-ms", opt->lease.count(), 100, int64_t{3600} * 1000);
  const std::optional<int64_t> heartbeat_ms =
      IntFlag(flags, "heartbeat-ms", opt->heartbeat.count(), 10, int64_t{3600} * 1000);
  if (!lease_ms || !heartbeat_ms) return false;
  if (*heartbeat_ms >= *lease_ms) {
    std::cerr << "rote serve: --heartbeat-ms must be less than --lease-ms (a lease is renewed before it "
                 "expires)\n\n" << kUsage;
    return false;
  }
  const bool any = flags.Has("replica-id") || flags.Has("lease-ms") || flags.Has("heartbeat-ms");
  if (any && opt->store_url.empty()) {
    std::cerr << "rote serve: --replica-id, --lease-ms and --heartbeat-ms need --store postgresql://... "
                 "(a SQLite store belongs to one server)\n\n" << kUsage;
    return false;
  }
  opt->lease = std::chrono::milliseconds(*lease_ms);
  opt->heartbeat = std::chrono::milliseconds(*heartbeat_ms);
  return true;
}

}  // namespace

int CmdServe(const Args& args) {
  FlagSpec spec{{"listen", "data", "store", "keys", "metrics-listen", "http-listen", "max-message-bytes", "tls-cert",
                 "tls-key", "drain-ms", "grace-ms", "drain-grace-ms", "log-level", "log-format", "model", "device", "numerics", "kv-cache-mb", "max-batch",
                 "attempts", "max-tokens", "retry-temperature", "grammar", "review-policy", "review-policy-for", "allow-unreviewed", "promotion",
                 "replica-id", "lease-ms", "heartbeat-ms"},
                {"help"}};
  auto flags = ParseFlags(args, spec);
  if (!flags.ok()) {
    std::cerr << "rote serve: " << flags.status().message() << "\n\n" << kUsage;
    return kExitUsage;
  }
  if (flags->Has("help")) {
    std::cout << kUsage;
    return kExitOk;
  }
  if (!flags->positionals.empty()) {
    std::cerr << "rote serve: unexpected argument `" << flags->positionals[0] << "`\n\n" << kUsage;
    return kExitUsage;
  }
  spdlog::set_level(spdlog::level::from_str(flags->GetOr("log-level", "info")));
  const std::string log_format = flags->GetOr("log-format", "text");
  if (log_format != "text" && log_format != "json") {
    std::cerr << "rote serve: --log-format must be text or json, got `" << log_format << "`\n\n" << kUsage;
    return kExitUsage;
  }
  if (log_format == "json") orchestrator::UseJsonLogs();

  orchestrator::ServerOptions opt;
  opt.listen = flags->GetOr("listen", opt.listen);
  opt.data_dir = flags->GetOr("data", opt.data_dir);
  opt.store_url = flags->GetOr("store", "");
  if (!opt.store_url.empty() && !opt.store_url.starts_with("postgresql://") &&
      !opt.store_url.starts_with("postgres://")) {
    std::cerr << "rote serve: --store takes a postgresql:// URL (the SQLite store is chosen with "
                 "--data DIR)\n\n" << kUsage;
    return kExitUsage;
  }
  if (!ParseReplicaFlags(*flags, &opt)) return kExitUsage;
  opt.keys_file = flags->GetOr("keys", "");
  opt.metrics_listen = flags->GetOr("metrics-listen", opt.metrics_listen);
  opt.http_listen = flags->GetOr("http-listen", "127.0.0.1:7880");
  const std::optional<int64_t> max_message_bytes =
      IntFlag(*flags, "max-message-bytes", opt.max_message_bytes, 1024, int64_t{1} << 30);
  const std::optional<int64_t> drain_ms = IntFlag(*flags, "drain-ms", 0, 0, int64_t{24} * 3600 * 1000);
  const std::optional<int64_t> grace_ms = IntFlag(*flags, "grace-ms", 10000, 0, int64_t{24} * 3600 * 1000);
  const std::optional<int64_t> drain_grace_ms =
      IntFlag(*flags, "drain-grace-ms", opt.drain_grace.count(), 0, int64_t{24} * 3600 * 1000);
  const std::optional<int64_t> attempts = IntFlag(*flags, "attempts", opt.generation_attempts, 1, 10);
  const std::optional<int64_t> max_tokens = IntFlag(*flags, "max-tokens", opt.generation_max_tokens, 1, 1 << 20);
  const std::optional<int64_t> kv_cache_mb = IntFlag(*flags, "kv-cache-mb", 0, 1, int64_t{1} << 30);
  const std::optional<int64_t> max_batch = IntFlag(*flags, "max-batch", 0, 1, 256);
  if (!max_message_bytes || !drain_ms || !grace_ms || !drain_grace_ms || !attempts || !max_tokens || !kv_cache_mb ||
      !max_batch)
    return kExitUsage;
  opt.max_message_bytes = static_cast<int>(*max_message_bytes);
  opt.tls_cert_file = flags->GetOr("tls-cert", "");
  opt.tls_key_file = flags->GetOr("tls-key", "");
  opt.drain = std::chrono::milliseconds(*drain_ms);
  opt.grace = std::chrono::milliseconds(*grace_ms);
  opt.drain_grace = std::chrono::milliseconds(*drain_grace_ms);
  opt.model_dir = flags->GetOr("model", "");
  opt.device = flags->GetOr("device", opt.device);
  opt.numerics = flags->GetOr("numerics", opt.numerics);
  opt.kv_cache_mb = *kv_cache_mb;
  opt.max_batch = static_cast<int32_t>(*max_batch);
  opt.generation_attempts = static_cast<int>(*attempts);
  opt.generation_max_tokens = static_cast<int>(*max_tokens);
  if (auto t = flags->Get("retry-temperature")) {
    char* end = nullptr;
    const float value = std::strtof(t->c_str(), &end);
    if (t->empty() || *end != '\0' || !std::isfinite(value) || value < 0.0f || value > 10.0f) {
      std::cerr << "rote serve: --retry-temperature must be a number from 0 to 10, got `" << *t << "`\n\n" << kUsage;
      return kExitUsage;
    }
    opt.generation_retry_temperature = value;
  }
  if (auto g = flags->Get("grammar")) {
    if (*g != "on" && *g != "off") {
      std::cerr << "rote serve: --grammar must be on or off, got `" << *g << "`\n\n" << kUsage;
      return kExitUsage;
    }
    opt.constrain_replies = *g == "on";
  }
  const absl::StatusOr<bool> cuda = orchestrator::offline::DeviceIsCuda(opt.device);
  if (!cuda.ok()) {
    std::cerr << "rote serve: --device must be cpu, cuda, cuda:N, cuda:N,M,... or cuda:all (N a device ordinal), got `"
              << opt.device
              << "`\n\n"
              << kUsage;
    return kExitUsage;
  }
  if (opt.numerics != "exact" && opt.numerics != "fast") {
    std::cerr << "rote serve: --numerics must be exact or fast, got `" << opt.numerics << "`\n\n" << kUsage;
    return kExitUsage;
  }
  if (opt.numerics == "fast" && !*cuda) {
    std::cerr << "rote serve: --numerics fast needs --device cuda (tensor cores)\n\n" << kUsage;
    return kExitUsage;
  }
  opt.review_policy = flags->GetOr("review-policy", opt.review_policy);
  opt.allow_unreviewed = flags->GetOr("allow-unreviewed", opt.allow_unreviewed);
  opt.promotion = flags->GetOr("promotion", opt.promotion);
  if (auto per_blueprint = flags->Get("review-policy-for")) {
    opt.review_policy_per_blueprint = absl::StrSplit(*per_blueprint, ',', absl::SkipEmpty());
  }
  if (opt.model_dir.empty() && (flags->Has("device") || flags->Has("numerics") || flags->Has("kv-cache-mb") ||
                                 flags->Has("max-batch") || flags->Has("attempts") || flags->Has("max-tokens") ||
                                 flags->Has("retry-temperature") || flags->Has("grammar"))) {
    std::cerr << "rote serve: --device, --numerics, --kv-cache-mb, --max-batch, --attempts, --max-tokens, --retry-temperature "
                 "and --grammar "
                 "need --model DIR\n\n"
              << kUsage;
    return kExitUsage;
  }

  // Files the flags name (key file, TLS certificate and key): a missing, unreadable or malformed
  // one is a bad command line, found before anything starts.
  if (absl::Status files = orchestrator::CheckOptionFiles(opt); !files.ok()) {
    std::cerr << "rote serve: " << files.message() << "\n";
    return kExitUsage;
  }

  // From here SIGINT and SIGTERM are blocked in every thread (gRPC's included, which start
  // below) and taken by the watcher, so shutdown runs in ordinary code rather than a signal
  // handler; while the server starts (a model loads) they end the process at once.
  SignalWatcher signals;

  auto server = orchestrator::Server::Start(opt);
  if (!server.ok()) {
    std::cerr << "rote serve: " << server.status().message() << "\n";
    return kExitFailure;
  }
  signals.Serving();
  // Scripts wait for this line to know the port.
  std::cout << "rote: listening on port " << (*server)->port() << std::endl;
  if ((*server)->http_port() != 0) {
    std::cout << "rote: review console on port " << (*server)->http_port() << std::endl;
  }
  const int sig = signals.WaitForSignal();
  spdlog::info("received {}", sig == SIGINT ? "SIGINT" : "SIGTERM");
  (*server)->Shutdown();
  return kExitOk;
}

}  // namespace rote::cli
