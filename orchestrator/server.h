// The rote gRPC server: the rote.v1 services, the standard health service, server reflection,
// request logging and Prometheus metrics, and graceful shutdown.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace grpc {
class Server;
class Service;
}  // namespace grpc

namespace rote::orchestrator {

struct ServerOptions {
  // HOST:PORT; port 0 picks a free one (see Server::port()).
  std::string listen = "127.0.0.1:7878";
  // Holds the SQLite file and anything else the server keeps; created if missing.
  std::string data_dir = "rote-data";
  // A postgresql:// URL: the store lives in that database (docs/operations.md, "PostgreSQL
  // store") instead of the SQLite file in data_dir; data_dir still holds the server's lock.
  // Empty: SQLite.
  std::string store_url;
  // Several replicas on one PostgreSQL store (docs/operations.md, "Several replicas on
  // PostgreSQL"): this server's name in run leases (empty: "<host>-<pid>"), how long a lease lasts
  // unrenewed before another replica takes the run over, and how often it is renewed.
  std::string replica_id;
  std::chrono::milliseconds lease{10000};
  std::chrono::milliseconds heartbeat{2000};
  // Bearer tokens (see orchestrator/api/auth.h). Required to listen beyond loopback.
  std::string keys_file;
  // HOST:PORT for the Prometheus text endpoint; empty or "off" disables it.
  std::string metrics_listen = "127.0.0.1:9464";
  int max_message_bytes = 64 << 20;
  // Optional TLS: PEM files.
  std::string tls_cert_file;
  std::string tls_key_file;
  // Shutdown: health goes NOT_SERVING, new calls are still taken for `drain` so load balancers
  // notice, then in-flight calls get until `grace` to finish before they are cancelled.
  std::chrono::milliseconds drain{0};
  std::chrono::milliseconds grace{10000};
  // Runs executing when shutdown starts get this long to finish; those still running then go
  // back to the queue (pending, their journal dropped) for the next server on the same data to
  // run from their start. No new run is admitted meanwhile (UNAVAILABLE) and no queued one starts.
  std::chrono::milliseconds drain_grace{30000};
  // Runs executing at once (more wait in a queue).
  int run_workers = 4;
  // Generation (docs/generation.md): a Hugging Face model directory loaded at start and the
  // device it runs on ("cpu", "cuda" or "cuda:N"). Empty: no model; generation points must then be bound
  // by lockfiles or approved artifacts.
  std::string model_dir;
  std::string device = "cpu";
  // The numerics profile: "exact" (CPU or CUDA, the same bits on both) or "fast" (CUDA's tensor
  // cores: batch-invariant on one GPU architecture; docs/fast_profile.md).
  std::string numerics = "exact";
  // KV cache memory in MiB. 0: on CUDA every block free device memory holds after the weights
  // (less 1 GiB), on the CPU 256 MiB; positive: on CUDA a cap, on the CPU the size.
  int64_t kv_cache_mb = 0;
  // Sequences the engine advances in one step (1..256); 0: the engine's default (16). Each step
  // then takes up to max(512, 32 x max_batch) tokens. Outputs do not depend on it (batch
  // invariance); throughput does (docs/performance.md, "The generation workload").
  int32_t max_batch = 0;
  // Attempts per generation point (1..10) and tokens per attempt.
  int generation_attempts = 3;
  int generation_max_tokens = 512;
  // Temperature of generation attempts 2 and later (attempt 1 is greedy); 0: greedy retries.
  float generation_retry_temperature = 0.75f;
  // Hold the model's replies to the point kind's grammar (docs/generation.md, "Constrained
  // replies"): a ```lua block that parses and reads only the sandbox's names, or a ```re2 block
  // RE2 accepts.
  bool constrain_replies = true;
  // Review policy of generated artifacts: "auto" (tests pass: approved at once) or "approval"
  // (a second person approves); per blueprint "NAME=MODE" entries override it.
  std::string review_policy = "approval";
  std::vector<std::string> review_policy_per_blueprint;
  // Who may run unreviewed code (RunPolicy.allow_pending): "never" or "reviewers" (principals
  // with the review role, audited per run).
  std::string allow_unreviewed = "never";
  // "on-approval": approving a revision makes it live; "manual": PromoteRevision does.
  std::string promotion = "on-approval";
  // Extra services registered alongside rote's (tests use this for a slow method).
  std::vector<grpc::Service*> extra_services;
  // The review console (orchestrator/http/console.h): HOST:PORT serving the web page and the
  // JSON API, with the TLS files above when set; empty or "off" disables it. Like `listen`,
  // an address beyond loopback needs a key file.
  std::string http_listen;
};

// Whether HOST:PORT reaches this machine only: true when every address HOST resolves to is a
// loopback address (127.0.0.0/8, ::1, ::ffff:127.0.0.0/104), decided on the resolved addresses
// rather than the name, so "127.example.com" is not taken for loopback. INVALID_ARGUMENT when
// the host does not resolve.
absl::StatusOr<bool> IsLoopbackAddress(const std::string& host_port);

// The addresses gRPC is asked to listen on for HOST:PORT. gRPC binds every address a host name
// resolves to but starts when any one of them binds: with 127.0.0.1:PORT taken, "localhost:PORT"
// would serve on ::1 alone while clients of 127.0.0.1:PORT reached whoever holds it. So a name
// becomes one numeric "ADDRESS:PORT" per distinct address it resolves to, each of which must bind
// (and each of which the loopback check sees). A numeric address, no host, a scheme (unix:), a
// name that does not resolve, a link-local scope, and a name with port 0 resolving to several
// addresses (each would get its own port) are given as they are.
std::vector<std::string> ListeningAddresses(const std::string& host_port);

// The one owner of a data directory: an exclusive flock(2) on DIR/rote.lock, which holds the
// owner's pid. Two servers on one SQLite store would each recover the other's running runs as
// abandoned and fail them; the lock makes the second refuse to start instead. The kernel drops
// a flock when its file is closed, also when the process dies, so a crash leaves no stale lock;
// and a flock belongs to the open file, so two Servers in one process exclude each other too.
class DataDirLock {
 public:
  // FAILED_PRECONDITION naming the owner's pid when another server holds the directory.
  static absl::StatusOr<std::unique_ptr<DataDirLock>> Acquire(const std::string& data_dir);
  ~DataDirLock();
  DataDirLock(const DataDirLock&) = delete;
  DataDirLock& operator=(const DataDirLock&) = delete;

 private:
  explicit DataDirLock(int fd) : fd_(fd) {}
  int fd_;
};

// Reads a file named on a command line whole: a regular file of at most max_bytes. A FIFO or a
// device such as /dev/zero is refused before any read (it would block or never end), and the read
// stops past max_bytes even if the file grows meanwhile. NOT_FOUND when the file does not exist,
// INVALID_ARGUMENT otherwise; each message names `what` and the path.
absl::StatusOr<std::string> ReadBoundedFile(const std::string& path, int64_t max_bytes, const std::string& what);

// OK when `pem` (the contents of `path`, given to `flag`) holds at least one PEM certificate and
// nothing that fails to parse; INVALID_ARGUMENT saying what is wrong with the file otherwise.
absl::Status CheckPemCertificates(const std::string& pem, const std::string& path, const std::string& flag);

// Checks every file the options name, as Start reads them: the key file (present, regular, at
// most max_message_bytes) and the TLS certificate and key (both or neither; PEM; the key is the
// certificate's). NOT_FOUND or INVALID_ARGUMENT naming the file. `rote serve` runs it first to
// report a bad file as a usage error; Start runs the same checks.
absl::Status CheckOptionFiles(const ServerOptions& options);

class Server {
 public:
  static absl::StatusOr<std::unique_ptr<Server>> Start(ServerOptions options);
  ~Server();

  int port() const;
  int metrics_port() const;
  // The review console's port; 0 when it is off.
  int http_port() const;
  const ServerOptions& options() const;

  // Graceful shutdown (idempotent, thread-safe): NOT_SERVING and no new runs, runs executing
  // finish or are re-queued (drain_grace), then calls in flight finish (grace).
  void Shutdown();
  // Blocks until Shutdown() has completed.
  void Wait();

 private:
  struct State;
  explicit Server(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// `rote serve --log-format json`: spdlog's default logger writes one JSON object per line from
// now on (orchestrator/api/json_log.h, which defines it; docs/operations.md).
void UseJsonLogs();

}  // namespace rote::orchestrator
