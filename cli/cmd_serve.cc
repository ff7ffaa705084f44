// `rote serve`: runs the gRPC server until SIGINT or SIGTERM, then shuts down gracefully.
#include <csignal>
#include <iostream>

#include "absl/strings/str_split.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/flags.h"
#include "orchestrator/server.h"
#include "spdlog/spdlog.h"

namespace rote::cli {

namespace {
const char kUsage[] =
    "Usage: rote serve [flags]\n"
    "Runs the rote gRPC server (rote.v1 services, grpc.health.v1, server reflection) until\n"
    "SIGINT or SIGTERM; then health turns NOT_SERVING, calls in flight finish (up to the grace\n"
    "period) and the process exits 0.\n\n"
    "Flags:\n"
    "  --listen HOST:PORT          address to serve on (default 127.0.0.1:7878); any address\n"
    "                              other than loopback requires --keys\n"
    "  --data DIR                  data directory: the SQLite store and what else the server\n"
    "                              keeps (default ./rote-data)\n"
    "  --keys FILE                 bearer tokens: lines of `<token> <principal> <roles>`, roles\n"
    "                              from submit, review, admin. Without it: local mode, loopback\n"
    "                              only, every caller has every role\n"
    "  --metrics-listen HOST:PORT  Prometheus text metrics at /metrics (default\n"
    "                              127.0.0.1:9464; `off` disables)\n"
    "  --max-message-bytes N       largest request or response (default 67108864)\n"
    "  --tls-cert FILE --tls-key FILE  serve TLS with this PEM certificate and key\n"
    "  --drain-ms N                after a signal, keep serving N ms while NOT_SERVING (default 0)\n"
    "  --grace-ms N                then give calls in flight up to N ms (default 10000)\n"
    "  --log-level LEVEL           trace, debug, info, warn, error (default info)\n\n"
    "Generation (docs/generation.md):\n"
    "  --model DIR                 load this Hugging Face model directory and generate code for\n"
    "                              unbound generation points (runs with --allow-generation)\n"
    "  --device cpu|cuda           where the model runs (default cpu)\n"
    "  --attempts N                attempts per generation point, 1..10 (default 3)\n"
    "  --max-tokens N              tokens per attempt (default 512)\n"
    "  --review-policy MODE        auto: generated code whose tests pass runs at once;\n"
    "                              approval (default): a reviewer other than the principal who\n"
    "                              asked for it must approve it first\n"
    "  --review-policy-for LIST    per blueprint: NAME=MODE[,NAME=MODE...]\n";
}  // namespace

int CmdServe(const Args& args) {
  FlagSpec spec{{"listen", "data", "keys", "metrics-listen", "max-message-bytes", "tls-cert",
                 "tls-key", "drain-ms", "grace-ms", "log-level", "model", "device", "attempts", "max-tokens",
                 "review-policy", "review-policy-for"},
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

  orchestrator::ServerOptions opt;
  opt.listen = flags->GetOr("listen", opt.listen);
  opt.data_dir = flags->GetOr("data", opt.data_dir);
  opt.keys_file = flags->GetOr("keys", "");
  opt.metrics_listen = flags->GetOr("metrics-listen", opt.metrics_listen);
  opt.max_message_bytes = std::stoi(flags->GetOr("max-message-bytes", std::to_string(opt.max_message_bytes)));
  opt.tls_cert_file = flags->GetOr("tls-cert", "");
  opt.tls_key_file = flags->GetOr("tls-key", "");
  opt.drain = std::chrono::milliseconds(std::stoll(flags->GetOr("drain-ms", "0")));
  opt.grace = std::chrono::milliseconds(std::stoll(flags->GetOr("grace-ms", "10000")));
  opt.model_dir = flags->GetOr("model", "");
  opt.device = flags->GetOr("device", opt.device);
  opt.generation_attempts = std::stoi(flags->GetOr("attempts", std::to_string(opt.generation_attempts)));
  opt.generation_max_tokens = std::stoi(flags->GetOr("max-tokens", std::to_string(opt.generation_max_tokens)));
  opt.review_policy = flags->GetOr("review-policy", opt.review_policy);
  if (auto per_blueprint = flags->Get("review-policy-for")) {
    opt.review_policy_per_blueprint = absl::StrSplit(*per_blueprint, ',', absl::SkipEmpty());
  }
  if (opt.model_dir.empty() && (flags->Has("device") || flags->Has("attempts") || flags->Has("max-tokens"))) {
    std::cerr << "rote serve: --device, --attempts and --max-tokens need --model DIR\n\n" << kUsage;
    return kExitUsage;
  }

  // Block the signals in every thread (gRPC's included, which start below) and take them
  // synchronously here, so shutdown runs in ordinary code rather than a signal handler.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto server = orchestrator::Server::Start(opt);
  if (!server.ok()) {
    std::cerr << "rote serve: " << server.status().message() << "\n";
    return kExitFailure;
  }
  // Scripts wait for this line to know the port.
  std::cout << "rote: listening on port " << (*server)->port() << std::endl;
  int sig = 0;
  sigwait(&signals, &sig);
  spdlog::info("received {}", sig == SIGINT ? "SIGINT" : "SIGTERM");
  (*server)->Shutdown();
  return kExitOk;
}

}  // namespace rote::cli
