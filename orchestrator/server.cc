#include "orchestrator/server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>     // getaddrinfo
#include <openssl/err.h>
#include <openssl/pem.h>  // TLS files checked before gRPC sees them
#include <openssl/x509.h>
#include <sys/file.h>  // flock
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "grpc/health/v1/health.pb.h"                   // health descriptors, for reflection
#include "grpcpp/ext/proto_server_reflection_plugin.h"  // server reflection
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"      // the standard health service
#include "orchestrator/api/auth.h"
#include "orchestrator/api/observability.h"
#include "orchestrator/api/operator_metrics.h"
#include "orchestrator/api/services.h"
#include "orchestrator/engine/engine.h"
#include "orchestrator/engine/lua_runner.h"
#include "orchestrator/generate/inference_code_model.h"
#include "orchestrator/generate/pipeline.h"
#include "orchestrator/generate/review_policy.h"
#include "orchestrator/http/console.h"
#include "sandbox/worker_pool.h"
#include "spdlog/spdlog.h"
#include "store/digest.h"
#include "store/store.h"

namespace rote::orchestrator {

namespace {
std::string HostOf(const std::string& host_port) {
  if (!host_port.empty() && host_port.front() == '[') {
    auto close = host_port.find(']');
    return close == std::string::npos ? host_port : host_port.substr(1, close - 1);
  }
  auto colon = host_port.rfind(':');
  return colon == std::string::npos ? host_port : host_port.substr(0, colon);
}

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};

std::unique_ptr<BIO, BioFree> MemoryBio(const std::string& bytes) {
  return std::unique_ptr<BIO, BioFree>(BIO_new_mem_buf(bytes.data(), static_cast<int>(bytes.size())));
}

// The reason of OpenSSL's latest error, and an empty queue for the next check.
std::string OpenSslReason() {
  const unsigned long error = ERR_peek_last_error();
  const char* reason = error != 0 ? ERR_reason_error_string(error) : nullptr;
  ERR_clear_error();
  return reason != nullptr ? reason : "no PEM data";
}

// Never prompts on the terminal for an encrypted key's pass phrase: reading fails instead.
int NoPassphrase(char*, int, int, void*) { return -1; }

// gRPC's own messages for bad TLS files are "the address is in use or invalid"; read and check
// them here so the message says which file is wrong and how.
absl::StatusOr<grpc::SslServerCredentialsOptions::PemKeyCertPair> ReadTlsFiles(const ServerOptions& opt) {
  if (opt.tls_cert_file.empty() || opt.tls_key_file.empty()) {
    return absl::InvalidArgumentError("TLS needs both --tls-cert and --tls-key");
  }
  auto cert = ReadBoundedFile(opt.tls_cert_file, opt.max_message_bytes, "TLS certificate (--tls-cert)");
  if (!cert.ok()) return cert.status();
  auto key = ReadBoundedFile(opt.tls_key_file, opt.max_message_bytes, "TLS key (--tls-key)");
  if (!key.ok()) return key.status();
  if (absl::Status s = CheckPemCertificates(*cert, opt.tls_cert_file, "--tls-cert"); !s.ok()) return s;
  auto cert_bio = MemoryBio(*cert);
  std::unique_ptr<X509, X509Free> leaf(PEM_read_bio_X509(cert_bio.get(), nullptr, NoPassphrase, nullptr));
  auto key_bio = MemoryBio(*key);
  std::unique_ptr<EVP_PKEY, PkeyFree> pkey(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, NoPassphrase, nullptr));
  if (!pkey) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls-key ", opt.tls_key_file, " holds no usable PEM private key (", OpenSslReason(),
        "); it must be an unencrypted key in PEM (-----BEGIN PRIVATE KEY-----)"));
  }
  if (!leaf) return absl::InternalError(absl::StrCat("cannot re-read the certificate in ", opt.tls_cert_file));
  if (X509_check_private_key(leaf.get(), pkey.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat("the key in ", opt.tls_key_file,
                                                   " (--tls-key) does not match the certificate in ",
                                                   opt.tls_cert_file, " (--tls-cert)"));
  }
  return grpc::SslServerCredentialsOptions::PemKeyCertPair{*std::move(key), *std::move(cert)};
}

const char* const kServiceNames[] = {"rote.v1.BlueprintService", "rote.v1.RunService",
                                     "rote.v1.ArtifactService", "rote.v1.GenerationService"};
}  // namespace

// Store key-value namespace: sha256 of Model::FileIdentity -> model digest (hex).
constexpr char kModelDigestNamespace[] = "model-digest/by-file-identity";
// The largest --max-batch: a step's metadata and, on CUDA, a graph per batch size stay small.
constexpr int32_t kMaxServeBatch = 256;

absl::StatusOr<bool> IsLoopbackAddress(const std::string& host_port) {
  const std::string host = HostOf(host_port);
  // No host: gRPC listens on every interface.
  if (host.empty()) return false;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* addresses = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &addresses); rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve the host ", host, " of ", host_port, ": ", ::gai_strerror(rc)));
  }
  bool all_loopback = addresses != nullptr;
  for (const addrinfo* a = addresses; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      const auto* v4 = reinterpret_cast<const sockaddr_in*>(a->ai_addr);
      all_loopback &= (ntohl(v4->sin_addr.s_addr) >> 24) == 127;
    } else if (a->ai_family == AF_INET6) {
      const in6_addr& v6 = reinterpret_cast<const sockaddr_in6*>(a->ai_addr)->sin6_addr;
      all_loopback &= IN6_IS_ADDR_LOOPBACK(&v6) || (IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127);
    } else {
      all_loopback = false;
    }
  }
  ::freeaddrinfo(addresses);
  return all_loopback;
}

std::vector<std::string> ListeningAddresses(const std::string& host_port) {
  const std::vector<std::string> as_given = {host_port};
  const std::string host = HostOf(host_port);
  // The port: after "]:" when bracketed, else after the one colon.
  std::string port;
  if (!host_port.empty() && host_port.front() == '[') {
    const size_t close = host_port.find(']');
    if (close == std::string::npos || host_port.compare(close, 2, "]:") != 0) return as_given;
    port = host_port.substr(close + 2);
  } else {
    if (host.find(':') != std::string::npos || host.size() == host_port.size()) return as_given;
    port = host_port.substr(host.size() + 1);
  }
  if (host.empty() || port.empty() || port.find_first_not_of("0123456789") != std::string::npos) return as_given;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST;
  addrinfo* addresses = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &addresses) == 0) {  // already numeric
    ::freeaddrinfo(addresses);
    return as_given;
  }
  hints.ai_flags = 0;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &addresses) != 0) return as_given;
  std::vector<std::string> out;
  bool keep_as_given = false;
  for (const addrinfo* a = addresses; a != nullptr; a = a->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    std::string numeric;
    if (a->ai_family == AF_INET) {
      ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(a->ai_addr)->sin_addr, text, sizeof text);
      numeric = absl::StrCat(text, ":", port);
    } else if (a->ai_family == AF_INET6) {
      const auto* v6 = reinterpret_cast<const sockaddr_in6*>(a->ai_addr);
      keep_as_given |= v6->sin6_scope_id != 0;
      ::inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof text);
      numeric = absl::StrCat("[", text, "]:", port);
    } else {
      keep_as_given = true;
    }
    // A name listed twice (in /etc/hosts, say) would otherwise bind its address twice.
    if (std::find(out.begin(), out.end(), numeric) == out.end()) out.push_back(std::move(numeric));
  }
  ::freeaddrinfo(addresses);
  const bool port_zero = port.find_first_not_of('0') == std::string::npos;
  if (keep_as_given || out.empty() || (out.size() > 1 && port_zero)) return as_given;
  return out;
}

absl::StatusOr<std::unique_ptr<DataDirLock>> DataDirLock::Acquire(const std::string& data_dir) {
  const std::string path = data_dir + "/rote.lock";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot open the lock file ", path, ": ", std::strerror(errno)));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    std::string pid;
    // The owner writes its pid just after taking the lock; give a starting owner a moment.
    for (int attempt = 0; error == EWOULDBLOCK && attempt < 50 && pid.empty(); ++attempt) {
      char buf[32] = {};
      const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
      for (ssize_t i = 0; i < n && buf[i] >= '0' && buf[i] <= '9'; ++i) pid.push_back(buf[i]);
      if (pid.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ::close(fd);
    if (error != EWOULDBLOCK) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot lock ", path, ": ", std::strerror(error)));
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "data directory ", data_dir, " is in use by another rote server (pid ",
        pid.empty() ? "unknown" : pid, ", holding ", path,
        "); stop that server or pass another --data"));
  }
  const std::string pid = absl::StrCat(::getpid(), "\n");
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    spdlog::warn("could not write the pid into {}: {}", path, std::strerror(errno));
  }
  return std::unique_ptr<DataDirLock>(new DataDirLock(fd));
}

DataDirLock::~DataDirLock() {
  // Still locked here: nobody else can have written the file since.
  (void)::ftruncate(fd_, 0);
  ::close(fd_);
}

absl::StatusOr<std::string> ReadBoundedFile(const std::string& path, int64_t max_bytes, const std::string& what) {
  // O_NONBLOCK: opening a FIFO would otherwise wait for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    const int error = errno;
    if (error == ENOENT) return absl::NotFoundError(absl::StrCat(what, " ", path, " does not exist"));
    return absl::InvalidArgumentError(absl::StrCat("cannot read ", what, " ", path, ": ", std::strerror(error)));
  }
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("cannot read ", what, " ", path, ": ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    const char* kind = S_ISDIR(st.st_mode)    ? "a directory"
                       : S_ISFIFO(st.st_mode) ? "a FIFO"
                       : S_ISCHR(st.st_mode)  ? "a character device"
                       : S_ISBLK(st.st_mode)  ? "a block device"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "not a regular file";
    return absl::InvalidArgumentError(
        absl::StrCat(what, " ", path, " is ", kind, "; give a regular file"));
  }
  auto too_large = [&](int64_t size) {
    return absl::InvalidArgumentError(absl::StrCat(what, " ", path, " is ", size,
                                                   " bytes, more than the limit of ", max_bytes,
                                                   " (--max-message-bytes)"));
  };
  if (st.st_size > max_bytes) return too_large(st.st_size);
  std::string out;
  out.reserve(static_cast<size_t>(st.st_size));
  char buffer[1 << 16];
  while (true) {
    // One byte past the limit is enough to know a growing file has passed it.
    const size_t want = std::min(sizeof buffer, static_cast<size_t>(max_bytes) + 1 - out.size());
    const ssize_t n = ::read(fd, buffer, want);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return absl::InvalidArgumentError(absl::StrCat("cannot read ", what, " ", path, ": ", std::strerror(errno)));
    }
    if (n == 0) break;
    out.append(buffer, static_cast<size_t>(n));
    if (out.size() > static_cast<size_t>(max_bytes)) return too_large(static_cast<int64_t>(out.size()));
  }
  return out;
}

absl::Status CheckPemCertificates(const std::string& pem, const std::string& path, const std::string& flag) {
  auto bio = MemoryBio(pem);
  int certificates = 0;
  while (true) {
    std::unique_ptr<X509, X509Free> cert(PEM_read_bio_X509(bio.get(), nullptr, NoPassphrase, nullptr));
    if (!cert) break;
    ++certificates;
  }
  // The loop ends at the end of the data (PEM_R_NO_START_LINE after the last certificate) or
  // at the first block that fails to parse.
  const unsigned long error = ERR_peek_last_error();
  const bool clean_end = certificates > 0 && ERR_GET_LIB(error) == ERR_LIB_PEM &&
                         ERR_GET_REASON(error) == PEM_R_NO_START_LINE;
  const std::string reason = OpenSslReason();
  if (certificates == 0) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, " holds no PEM certificate (", reason,
                                                   "); it must hold -----BEGIN CERTIFICATE----- blocks"));
  }
  if (!clean_end && error != 0) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " ", path, ": certificate ", certificates + 1,
                                                   " does not parse (", reason, ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckOptionFiles(const ServerOptions& opt) {
  if (!opt.keys_file.empty()) {
    if (auto keys = ReadBoundedFile(opt.keys_file, opt.max_message_bytes, "key file (--keys)"); !keys.ok()) {
      return keys.status();
    }
  }
  if (!opt.tls_cert_file.empty() || !opt.tls_key_file.empty()) return ReadTlsFiles(opt).status();
  return absl::OkStatus();
}

namespace {

// Loads the model named by the options, on their device and numerics profile.
// --allow-unreviewed and --promotion take one of their documented values.
absl::Status CheckReviewOptions(const ServerOptions& opt) {
  if (opt.allow_unreviewed != "never" && opt.allow_unreviewed != "reviewers") {
    return absl::InvalidArgumentError(absl::StrCat("--allow-unreviewed must be never or reviewers, not '",
                                                   opt.allow_unreviewed, "'"));
  }
  if (opt.promotion != "on-approval" && opt.promotion != "manual") {
    return absl::InvalidArgumentError(absl::StrCat("--promotion must be on-approval or manual, not '", opt.promotion, "'"));
  }
  return absl::OkStatus();
}

// The generation pipeline's options from the server's, its metrics hooks feeding `metrics`.
generate::PipelineOptions PipelineOptionsFor(const ServerOptions& opt, OperatorMetrics* metrics) {
  generate::PipelineOptions o;
  o.decoding.max_attempts = opt.generation_attempts;
  o.decoding.max_tokens = opt.generation_max_tokens;
  o.decoding.retry_temperature = opt.generation_retry_temperature;
  o.constrain_replies = opt.constrain_replies;
  o.on_attempt = [metrics](bool passed, const std::string& reason, int64_t prompt_tokens, int64_t output_tokens,
                           double seconds) {
    metrics->GenerationAttempt(passed, reason, prompt_tokens, output_tokens, seconds);
  };
  o.on_answered = [metrics](const std::string& kind) { metrics->GenerationCacheHit(kind); };
  // The name the engine gives this server in run leases names its generation claims too.
  o.replica_id = opt.replica_id.empty() ? engine::DefaultReplicaId() : opt.replica_id;
  o.claim_lease = opt.lease;
  return o;
}

absl::StatusOr<std::unique_ptr<generate::InferenceCodeModel>> LoadModel(const ServerOptions& opt,
                                                                         store::Store* store) {
  // The model digest covers every weight byte; hashing a 1.5B model takes seconds, so it is
  // cached in the store under the files' identity (names, sizes, mtimes) and reused while
  // the files are unchanged.
  inference::EngineOptions load_options;
  inference::DeviceSet devices;
  if (inference::Status s = inference::ParseDeviceSet(opt.device, &devices); !s.ok())
    return absl::InvalidArgumentError(s.message());
  load_options.device = devices.device;
  if (opt.numerics == "fast") {
    load_options.numerics_profile = inference::NumericsProfile::kFast;
  } else if (opt.numerics != "exact") {
    return absl::InvalidArgumentError(absl::StrCat("unknown numerics profile '", opt.numerics, "': use exact or fast"));
  }
  if (opt.kv_cache_mb < 0 || opt.kv_cache_mb > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(absl::StrCat("kv_cache_mb ", opt.kv_cache_mb, " is out of range (0 to 2^30)"));
  }
  if (opt.max_batch < 0 || opt.max_batch > kMaxServeBatch) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_batch ", opt.max_batch, " is out of range (1 to ", kMaxServeBatch, ", 0 for the default)"));
  }
  if (opt.max_batch > 0) {
    load_options.max_batch = opt.max_batch;
    load_options.max_step_tokens = std::max(load_options.max_step_tokens, 32 * opt.max_batch);
  }
  if (opt.kv_cache_mb > 0) {
    load_options.kv_cache_bytes = opt.kv_cache_mb << 20;
  } else if (load_options.device == inference::Device::kCuda) {
    load_options.kv_cache_bytes = 0;  // every block free device memory holds (Engine::Load)
  }
  std::string identity_key;
  if (auto identity = inference::Model::FileIdentity(opt.model_dir); identity.ok()) {
    identity_key = store::Sha256Digest(*identity);
    if (auto cached = store->KvGet(kModelDigestNamespace, identity_key); cached.ok()) {
      load_options.known_model_digest = *cached;
    }
  }
  spdlog::info("loading model from {} on {}, {} numerics ({})", opt.model_dir, opt.device, opt.numerics,
               load_options.known_model_digest.empty()
                   ? "reading and hashing every tensor"
                   : "files unchanged since their digest was cached: not re-hashing");
  const auto load_start = std::chrono::steady_clock::now();
  auto model = generate::InferenceCodeModel::Load(opt.model_dir, opt.device, load_options);
  if (!model.ok()) {
    return absl::Status(model.status().code(), absl::StrCat("loading the model in ", opt.model_dir, ": ",
                                                            std::string(model.status().message())));
  }
  std::unique_ptr<generate::InferenceCodeModel> loaded = *std::move(model);
  if (!identity_key.empty() && load_options.known_model_digest.empty()) {
    if (absl::Status put = store->KvPut(kModelDigestNamespace, identity_key, loaded->engine().model().digest());
        !put.ok()) {
      spdlog::warn("could not cache the model digest: {}", std::string(put.message()));
    }
  }
  const generate::ModelDescription m = loaded->Describe();
  spdlog::info("model loaded in {:.1f}s: {}, {} layers, hidden {}, vocab {}, {} parameters, {} on {}, digest {}; "
               "KV cache {} MiB ({} blocks)",
               std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count(), m.family,
               m.num_layers, m.hidden_size, m.vocab_size, m.parameter_count, m.numerics_profile, m.device, m.digest,
               loaded->engines().kv_cache_bytes() >> 20, loaded->engines().kv_blocks());
  return loaded;
}

}  // namespace

struct Server::State {
  // Declared first, so released last: after the store and everything using it are closed.
  std::unique_ptr<DataDirLock> data_dir_lock;
  ServerOptions options;
  Authenticator auth;
  RpcMetrics metrics;
  // Declared after `metrics`, whose registry holds its families.
  std::unique_ptr<OperatorMetrics> operator_metrics;
  // Destroyed after the gRPC server and the services (declared later), engine before store.
  std::unique_ptr<store::Store> store;
  std::unique_ptr<sandbox::WorkerPool> workers;
  std::unique_ptr<engine::LuaArtifactRunner> lua_runner;
  // Without --model both stay null. The engine holds the pipeline, which holds the model.
  std::unique_ptr<generate::InferenceCodeModel> model;
  std::unique_ptr<generate::GenerationPipeline> pipeline;
  generate::ReviewPolicy review_policy;
  std::unique_ptr<engine::Engine> engine;
  Services services;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  // Calls the services above through an in-process channel; stopped before the gRPC server.
  std::unique_ptr<http::Console> console;

  std::mutex mu;
  std::condition_variable cv;
  bool shutdown_started = false;
  bool shutdown_done = false;

  // Scrapes stop reading the engine, the model and the workers before they are destroyed.
  ~State() {
    if (operator_metrics) operator_metrics->SetSources({});
  }
};

Server::Server(std::unique_ptr<State> state) : state_(std::move(state)) {}

Server::~Server() { Shutdown(); }

int Server::port() const { return state_->port; }
int Server::metrics_port() const { return state_->metrics.port(); }
int Server::http_port() const { return state_->console ? state_->console->port() : 0; }
const ServerOptions& Server::options() const { return state_->options; }

absl::StatusOr<std::unique_ptr<Server>> Server::Start(ServerOptions options) {
  auto state = std::make_unique<State>();
  state->options = std::move(options);
  const ServerOptions& opt = state->options;

  // Resolved once: the loopback check below sees exactly the addresses gRPC binds.
  const std::vector<std::string> listen_addresses = ListeningAddresses(opt.listen);
  if (opt.keys_file.empty()) {
    bool all_loopback = true;
    for (const std::string& address : listen_addresses) {
      const absl::StatusOr<bool> loopback = IsLoopbackAddress(address);
      if (!loopback.ok()) {
        return absl::FailedPreconditionError(absl::StrCat(
            std::string(loopback.status().message()),
            "; without --keys the server listens only where every address is loopback"));
      }
      all_loopback &= *loopback;
    }
    if (!all_loopback) {
      return absl::FailedPreconditionError(absl::StrCat(
          "refusing to listen on ", opt.listen,
          " without a key file: anyone who can reach it could run code. Pass --keys FILE "
          "(see `rote serve --help`), or listen on 127.0.0.1"));
    }
    state->auth = Authenticator::LocalMode();
  } else {
    auto keys = ReadBoundedFile(opt.keys_file, opt.max_message_bytes, "key file (--keys)");
    if (!keys.ok()) return keys.status();
    auto auth = Authenticator::FromKeyText(*keys, opt.keys_file);
    if (!auth.ok()) return auth.status();
    state->auth = std::move(*auth);
  }

  std::error_code ec;
  std::filesystem::create_directories(opt.data_dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create data directory ", opt.data_dir, ": ", ec.message()));
  }
  auto data_dir_lock = DataDirLock::Acquire(opt.data_dir);
  if (!data_dir_lock.ok()) return data_dir_lock.status();
  state->data_dir_lock = *std::move(data_dir_lock);

  std::shared_ptr<grpc::ServerCredentials> creds;
  if (!opt.tls_cert_file.empty() || !opt.tls_key_file.empty()) {
    auto pair = ReadTlsFiles(opt);
    if (!pair.ok()) return pair.status();
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back(*std::move(pair));
    creds = grpc::SslServerCredentials(ssl);
  } else {
    creds = grpc::InsecureServerCredentials();
  }

  state->metrics.set_authenticator(&state->auth);
  if (!opt.metrics_listen.empty() && opt.metrics_listen != "off") {
    if (auto st = state->metrics.Serve(opt.metrics_listen); !st.ok()) return st;
  }
  state->operator_metrics = std::make_unique<OperatorMetrics>(state->metrics.registry());
  state->metrics.AddCollectable(state->operator_metrics->Collectable());
  OperatorMetrics* const operator_metrics = state->operator_metrics.get();

  store::StoreOptions store_options;
  store_options.path = opt.store_url.empty() ? opt.data_dir : opt.store_url;
  auto store = store::Store::Open(store_options);
  if (!store.ok()) {
    // The URL may carry a password: name the kind of store, not the URL.
    const std::string where = opt.store_url.empty() ? absl::StrCat("the store in ", opt.data_dir)
                                                    : std::string("the PostgreSQL store (--store)");
    return absl::Status(store.status().code(), absl::StrCat("opening ", where, ": ",
                                                            std::string(store.status().message())));
  }
  state->store = *std::move(store);
  // Generated code runs only in isolated worker processes (sandbox/worker_pool.h).
  sandbox::WorkerPoolOptions worker_options;
  worker_options.num_workers = opt.run_workers;
  auto workers = sandbox::WorkerPool::Start(worker_options);
  if (!workers.ok()) {
    return absl::Status(workers.status().code(), absl::StrCat("starting the sandbox workers: ",
                                                              std::string(workers.status().message())));
  }
  state->workers = *std::move(workers);
  state->lua_runner = engine::MakeWorkerPoolLuaRunner(state->workers.get());
  auto review_policy = generate::ReviewPolicy::Parse(opt.review_policy, opt.review_policy_per_blueprint);
  if (!review_policy.ok()) return review_policy.status();
  state->review_policy = *std::move(review_policy);
  if (!opt.model_dir.empty()) {
    const generate::PipelineOptions pipeline_options = PipelineOptionsFor(opt, operator_metrics);
    if (absl::Status s = generate::CheckDecoding(pipeline_options.decoding); !s.ok()) return s;
    auto model = LoadModel(opt, state->store.get());
    if (!model.ok()) return model.status();
    state->model = *std::move(model);
    state->pipeline = std::make_unique<generate::GenerationPipeline>(
        state->store.get(), state->model.get(), state->lua_runner.get(), state->review_policy, pipeline_options);
  }
  spdlog::info("review policy: {}{}", generate::ReviewModeName(state->review_policy.server_default()),
               opt.review_policy_per_blueprint.empty()
                   ? std::string()
                   : absl::StrCat(" (per blueprint: ", absl::StrJoin(opt.review_policy_per_blueprint, ", "), ")"));
  if (absl::Status s = CheckReviewOptions(opt); !s.ok()) return s;
  engine::EngineOptions engine_options;
  engine_options.run_workers = opt.run_workers;
  engine_options.backtest_parallelism = opt.run_workers;
  engine_options.promote_on_approval = opt.promotion == "on-approval";
  engine_options.rote_version = ROTE_VERSION;
  engine_options.max_blueprint_bytes = opt.max_message_bytes / 2;
  engine_options.replica_id = opt.replica_id;
  engine_options.lease = opt.lease;
  engine_options.heartbeat = opt.heartbeat;
  engine_options.on_run_end = [operator_metrics](const std::string& blueprint, store::RunState run_state,
                                                  double seconds) {
    operator_metrics->RunEnded(blueprint, run_state, seconds);
  };
  auto eng = engine::Engine::Create(state->store.get(), state->lua_runner.get(), state->pipeline.get(),
                                    engine_options);
  if (!eng.ok()) return eng.status();
  state->engine = *std::move(eng);
  MetricSources sources;
  sources.runs = [e = state->engine.get()] { return e->queue_stats(); };
  sources.workers = [w = state->workers.get()] { return w->stats(); };
  if (state->model) {
    sources.model = [m = state->model.get()] { return m->engines().stats(); };
    sources.kv_blocks_total = state->model->engines().kv_blocks();
  }
  operator_metrics->SetSources(std::move(sources));

  ServiceDeps deps;
  deps.auth = &state->auth;
  deps.engine = state->engine.get();
  deps.generation = state->pipeline.get();
  if (state->model) deps.model = state->model->Describe();
  deps.review_policy = &state->review_policy;
  deps.allow_unreviewed_for_reviewers = opt.allow_unreviewed == "reviewers";
  deps.max_inline_payload_bytes = std::min<int64_t>(1 << 20, opt.max_message_bytes / 4);
  state->services = MakeServices(deps);

  // grpc++'s health service does not use the protobuf descriptor pool; touch ours so that
  // reflection can describe grpc.health.v1 from any binary that embeds the server.
  (void)grpc::health::v1::HealthCheckRequest::descriptor();
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  // gRPC sets SO_REUSEPORT by default on Linux: a second server on a busy port would bind and
  // the kernel would split the clients between the two. A busy port must be an error.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // One listening port per address, each reporting the port it bound: gRPC would start with
  // only some of a name's addresses bound (ListeningAddresses).
  std::vector<int> bound_ports(listen_addresses.size(), 0);
  for (size_t i = 0; i < listen_addresses.size(); ++i) {
    builder.AddListeningPort(listen_addresses[i], creds, &bound_ports[i]);
  }
  builder.SetMaxReceiveMessageSize(opt.max_message_bytes);
  builder.SetMaxSendMessageSize(opt.max_message_bytes);
  builder.RegisterService(state->services.blueprints.get());
  builder.RegisterService(state->services.runs.get());
  builder.RegisterService(state->services.artifacts.get());
  builder.RegisterService(state->services.generation.get());
  for (grpc::Service* extra : opt.extra_services) builder.RegisterService(extra);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(state->metrics.MakeInterceptorFactory());
  builder.experimental().SetInterceptorCreators(std::move(interceptors));

  state->server = builder.BuildAndStart();
  state->port = bound_ports.front();
  const bool all_bound = std::all_of(bound_ports.begin(), bound_ports.end(),
                                     [&](int port) { return port != 0 && port == state->port; });
  if (!state->server || !all_bound) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", opt.listen,
        ": the address is in use or invalid (pick another with --listen HOST:PORT)"));
  }
  if (!opt.http_listen.empty() && opt.http_listen != "off") {
    grpc::ChannelArguments channel_args;
    channel_args.SetMaxReceiveMessageSize(opt.max_message_bytes);
    channel_args.SetMaxSendMessageSize(opt.max_message_bytes);
    http::ConsoleOptions console_options;
    console_options.listen = opt.http_listen;
    console_options.has_keys = !opt.keys_file.empty();
    console_options.tls_cert_file = opt.tls_cert_file;
    console_options.tls_key_file = opt.tls_key_file;
    console_options.max_message_bytes = opt.max_message_bytes;
    auto console = http::Console::Start(console_options, state->server->InProcessChannel(channel_args));
    if (!console.ok()) {
      state->server->Shutdown(std::chrono::system_clock::now());
      if (state->engine) state->engine->Shutdown();
      return console.status();
    }
    state->console = *std::move(console);
  }
  auto* health = state->server->GetHealthCheckService();
  health->SetServingStatus(true);
  for (const char* name : kServiceNames) health->SetServingStatus(name, true);
  spdlog::info("rote serving on {} (port {}), data in {}{}, {}{}", opt.listen, state->port,
               opt.data_dir, opt.store_url.empty() ? "" : " (store: PostgreSQL)",
               state->auth.local_mode() ? "local mode (no key file)" : "key file auth",
               state->metrics.port() ? absl::StrCat(", metrics on port ", state->metrics.port()) : "");
  return std::unique_ptr<Server>(new Server(std::move(state)));
}

void Server::Shutdown() {
  {
    std::unique_lock lock(state_->mu);
    if (state_->shutdown_started) {
      state_->cv.wait(lock, [&] { return state_->shutdown_done; });
      return;
    }
    state_->shutdown_started = true;
  }
  const ServerOptions& opt = state_->options;
  spdlog::info("shutting down: health NOT_SERVING and no new runs; up to {}ms for runs executing, then up to {}ms "
               "for calls in flight",
               opt.drain.count() + opt.drain_grace.count(), opt.grace.count());
  // Refusing runs, then NOT_SERVING: whoever sees NOT_SERVING finds runs refused.
  if (state_->engine) state_->engine->BeginDrain();
  state_->server->GetHealthCheckService()->SetServingStatus(false);
  if (opt.drain.count() > 0) std::this_thread::sleep_for(opt.drain);
  // The API stays up while runs finish, so their watchers see them end.
  if (state_->engine) {
    const int requeued = state_->engine->Drain(opt.drain_grace);
    if (requeued > 0) {
      spdlog::warn("{} run(s) still executing after {}ms went back to the queue; the next server on {} runs them",
                   requeued, opt.drain_grace.count(), opt.data_dir);
    }
  }
  if (state_->console) state_->console->Shutdown();
  state_->server->Shutdown(std::chrono::system_clock::now() + opt.grace);
  state_->server->Wait();
  // Queued runs stay pending for the next start.
  if (state_->engine) state_->engine->Shutdown();
  spdlog::info("shutdown complete");
  {
    std::lock_guard lock(state_->mu);
    state_->shutdown_done = true;
  }
  state_->cv.notify_all();
}

void Server::Wait() {
  std::unique_lock lock(state_->mu);
  state_->cv.wait(lock, [&] { return state_->shutdown_done; });
}

}  // namespace rote::orchestrator
