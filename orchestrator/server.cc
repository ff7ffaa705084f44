#include "orchestrator/server.h"

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "grpc/health/v1/health.pb.h"                   // health descriptors, for reflection
#include "grpcpp/ext/proto_server_reflection_plugin.h"  // server reflection
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"      // the standard health service
#include "orchestrator/api/auth.h"
#include "orchestrator/api/observability.h"
#include "orchestrator/api/services.h"
#include "orchestrator/engine/engine.h"
#include "orchestrator/engine/lua_runner.h"
#include "orchestrator/generate/inference_code_model.h"
#include "orchestrator/generate/pipeline.h"
#include "orchestrator/generate/review_policy.h"
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

absl::StatusOr<std::string> ReadFile(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", what, " ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const char* const kServiceNames[] = {"rote.v1.BlueprintService", "rote.v1.RunService",
                                     "rote.v1.ArtifactService", "rote.v1.GenerationService"};
}  // namespace

// Store key-value namespace: sha256 of Model::FileIdentity -> model digest (hex).
constexpr char kModelDigestNamespace[] = "model-digest/by-file-identity";

bool IsLoopbackAddress(const std::string& host_port) {
  const std::string host = HostOf(host_port);
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

struct Server::State {
  ServerOptions options;
  Authenticator auth;
  RpcMetrics metrics;
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

  std::mutex mu;
  std::condition_variable cv;
  bool shutdown_started = false;
  bool shutdown_done = false;
};

Server::Server(std::unique_ptr<State> state) : state_(std::move(state)) {}

Server::~Server() { Shutdown(); }

int Server::port() const { return state_->port; }
int Server::metrics_port() const { return state_->metrics.port(); }
const ServerOptions& Server::options() const { return state_->options; }

absl::StatusOr<std::unique_ptr<Server>> Server::Start(ServerOptions options) {
  auto state = std::make_unique<State>();
  state->options = std::move(options);
  const ServerOptions& opt = state->options;

  if (opt.keys_file.empty()) {
    if (!IsLoopbackAddress(opt.listen)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "refusing to listen on ", opt.listen,
          " without a key file: anyone who can reach it could run code. Pass --keys FILE "
          "(see `rote serve --help`), or listen on 127.0.0.1"));
    }
    state->auth = Authenticator::LocalMode();
  } else {
    auto auth = Authenticator::FromKeyFile(opt.keys_file);
    if (!auth.ok()) return auth.status();
    state->auth = std::move(*auth);
  }

  std::error_code ec;
  std::filesystem::create_directories(opt.data_dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create data directory ", opt.data_dir, ": ", ec.message()));
  }

  std::shared_ptr<grpc::ServerCredentials> creds;
  if (!opt.tls_cert_file.empty() || !opt.tls_key_file.empty()) {
    if (opt.tls_cert_file.empty() || opt.tls_key_file.empty()) {
      return absl::InvalidArgumentError("TLS needs both --tls-cert and --tls-key");
    }
    auto cert = ReadFile(opt.tls_cert_file, "TLS certificate");
    if (!cert.ok()) return cert.status();
    auto key = ReadFile(opt.tls_key_file, "TLS key");
    if (!key.ok()) return key.status();
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({*key, *cert});
    creds = grpc::SslServerCredentials(ssl);
  } else {
    creds = grpc::InsecureServerCredentials();
  }

  if (!opt.metrics_listen.empty() && opt.metrics_listen != "off") {
    if (auto st = state->metrics.Serve(opt.metrics_listen); !st.ok()) return st;
  }

  store::StoreOptions store_options;
  store_options.path = opt.data_dir;
  auto store = store::Store::Open(store_options);
  if (!store.ok()) {
    return absl::Status(store.status().code(), absl::StrCat("opening the store in ", opt.data_dir, ": ",
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
    generate::PipelineOptions pipeline_options;
    pipeline_options.decoding.max_attempts = opt.generation_attempts;
    pipeline_options.decoding.max_tokens = opt.generation_max_tokens;
    if (absl::Status s = generate::CheckDecoding(pipeline_options.decoding); !s.ok()) return s;
    // The model digest covers every weight byte; hashing a 1.5B model takes seconds, so it is
    // cached in the store under the files' identity (names, sizes, mtimes) and reused while
    // the files are unchanged.
    inference::EngineOptions load_options;
    if (inference::Status s = inference::ParseDeviceName(opt.device, &load_options); !s.ok())
      return absl::InvalidArgumentError(s.message());
    if (opt.numerics == "fast") {
      load_options.numerics_profile = inference::NumericsProfile::kFast;
    } else if (opt.numerics != "exact") {
      return absl::InvalidArgumentError(absl::StrCat("unknown numerics profile '", opt.numerics, "': use exact or fast"));
    }
    if (opt.kv_cache_mb < 0 || opt.kv_cache_mb > (int64_t{1} << 30)) {
      return absl::InvalidArgumentError(absl::StrCat("kv_cache_mb ", opt.kv_cache_mb, " is out of range (0 to 2^30)"));
    }
    if (opt.kv_cache_mb > 0) {
      load_options.kv_cache_bytes = opt.kv_cache_mb << 20;
    } else if (load_options.device == inference::Device::kCuda) {
      load_options.kv_cache_bytes = 0;  // every block free device memory holds (Engine::Load)
    }
    std::string identity_key;
    if (auto identity = inference::Model::FileIdentity(opt.model_dir); identity.ok()) {
      identity_key = store::Sha256Digest(*identity);
      if (auto cached = state->store->KvGet(kModelDigestNamespace, identity_key); cached.ok()) {
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
    state->model = *std::move(model);
    if (!identity_key.empty() && load_options.known_model_digest.empty()) {
      if (absl::Status put = state->store->KvPut(kModelDigestNamespace, identity_key,
                                                 state->model->engine().model().digest());
          !put.ok()) {
        spdlog::warn("could not cache the model digest: {}", std::string(put.message()));
      }
    }
    const generate::ModelDescription m = state->model->Describe();
    spdlog::info("model loaded in {:.1f}s: {}, {} layers, hidden {}, vocab {}, {} parameters, {} on {}, digest {}; "
                 "KV cache {} MiB ({} blocks)",
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count(), m.family,
                 m.num_layers, m.hidden_size, m.vocab_size, m.parameter_count, m.numerics_profile, m.device, m.digest,
                 state->model->engine().kv_cache_bytes() >> 20, state->model->engine().kv_blocks());
    state->pipeline = std::make_unique<generate::GenerationPipeline>(
        state->store.get(), state->model.get(), state->lua_runner.get(), state->review_policy, pipeline_options);
  }
  spdlog::info("review policy: {}{}", generate::ReviewModeName(state->review_policy.server_default()),
               opt.review_policy_per_blueprint.empty()
                   ? std::string()
                   : absl::StrCat(" (per blueprint: ", absl::StrJoin(opt.review_policy_per_blueprint, ", "), ")"));
  engine::EngineOptions engine_options;
  engine_options.run_workers = opt.run_workers;
  engine_options.rote_version = ROTE_VERSION;
  auto eng = engine::Engine::Create(state->store.get(), state->lua_runner.get(), state->pipeline.get(),
                                    engine_options);
  if (!eng.ok()) return eng.status();
  state->engine = *std::move(eng);

  ServiceDeps deps;
  deps.auth = &state->auth;
  deps.engine = state->engine.get();
  deps.generation = state->pipeline.get();
  if (state->model) deps.model = state->model->Describe();
  deps.review_policy = &state->review_policy;
  state->services = MakeServices(deps);

  // grpc++'s health service does not use the protobuf descriptor pool; touch ours so that
  // reflection can describe grpc.health.v1 from any binary that embeds the server.
  (void)grpc::health::v1::HealthCheckRequest::descriptor();
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(opt.listen, creds, &state->port);
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
  if (!state->server || state->port == 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", opt.listen,
        ": the address is in use or invalid (pick another with --listen HOST:PORT)"));
  }
  auto* health = state->server->GetHealthCheckService();
  health->SetServingStatus(true);
  for (const char* name : kServiceNames) health->SetServingStatus(name, true);
  spdlog::info("rote serving on {} (port {}), data in {}, {}{}", opt.listen, state->port,
               opt.data_dir, state->auth.local_mode() ? "local mode (no key file)" : "key file auth",
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
  spdlog::info("shutting down: health NOT_SERVING, draining for {}ms, then up to {}ms for calls in flight",
               state_->options.drain.count(), state_->options.grace.count());
  // NOT_SERVING first: load balancers and watchers stop sending work before we refuse it.
  state_->server->GetHealthCheckService()->SetServingStatus(false);
  if (state_->options.drain.count() > 0) std::this_thread::sleep_for(state_->options.drain);
  state_->server->Shutdown(std::chrono::system_clock::now() + state_->options.grace);
  state_->server->Wait();
  // After the last call: runs still executing fail saying the server stopped; queued ones stay
  // pending for the next start.
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
