#include "orchestrator/api/observability.h"

#include <chrono>
#include <optional>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"  // the methods compiled into this binary
#include "google/protobuf/message.h"
#include "grpcpp/server_context.h"
#include "orchestrator/api/auth.h"
#include "orchestrator/engine/log_context.h"
#include "prometheus/counter.h"   // Counter families
#include "prometheus/exposer.h"   // the /metrics HTTP endpoint
#include "prometheus/histogram.h" // latency histograms
#include "prometheus/registry.h"
#include "spdlog/spdlog.h"

namespace rote::orchestrator {

namespace {
const char* CodeName(int code) {
  static const char* kNames[] = {"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT",
                                 "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
                                 "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
                                 "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL",
                                 "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"};
  return code >= 0 && code <= 16 ? kNames[code] : "UNKNOWN";
}

// The method a "/package.Service/Method" path names among those compiled into this binary (the
// rote.v1 services, health, reflection), or null.
const google::protobuf::MethodDescriptor* CompiledMethod(const std::string& path) {
  const size_t slash = path.find('/', 1);
  if (path.size() < 4 || path.front() != '/' || slash == std::string::npos) return nullptr;
  const google::protobuf::ServiceDescriptor* service =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(path.substr(1, slash - 1));
  return service == nullptr ? nullptr : service->FindMethodByName(path.substr(slash + 1));
}

// The method label of a call. The path is whatever the client sent, before any authentication:
// a label per path would let anyone grow /metrics without bound. Compiled-in methods keep their
// path; every other path shares one label, so the number of series is fixed when the binary is
// built.
std::string MethodLabel(const std::string& path) { return CompiledMethod(path) ? path : "unknown"; }

std::string UnparsedRequestMessage(const std::string& path) {
  const google::protobuf::MethodDescriptor* method = CompiledMethod(path);
  return absl::StrCat("the request to ", path, " does not parse as a ",
                      method ? method->input_type()->full_name() : std::string("request"),
                      ": a string field holds bytes that are not UTF-8 (blueprint sources, lockfiles and "
                      "run inputs are text; send them as UTF-8), or the message is malformed");
}

// The rote.v1 services are generated protobuf services: their messages are protobuf messages.
// Others are not all (the health service exchanges byte buffers), so only these are read.
bool IsRoteMethod(const std::string& path) {
  return path.rfind("/rote.v1.", 0) == 0 && CompiledMethod(path) != nullptr;
}

// The string field `field` of a protobuf message, if it has one.
std::string StringField(const google::protobuf::Message& message, const char* field) {
  const google::protobuf::FieldDescriptor* f = message.GetDescriptor()->FindFieldByName(field);
  if (f == nullptr || f->is_repeated() || f->type() != google::protobuf::FieldDescriptor::TYPE_STRING) return "";
  return message.GetReflection()->GetString(message, f);
}

// A run's name from a request or response that names one ("runs/{id}"), else "".
std::string RunNameIn(const google::protobuf::Message& message) {
  std::string name = StringField(message, "name");
  return name.rfind("runs/", 0) == 0 && name.size() <= 64 ? name : "";
}

class ObservingInterceptor : public grpc::experimental::Interceptor {
 public:
  ObservingInterceptor(grpc::experimental::ServerRpcInfo* info, RpcMetrics* metrics)
      : info_(info), metrics_(metrics), start_(std::chrono::steady_clock::now()) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    using grpc::experimental::InterceptionHookPoints;
    // gRPC hands the interceptor no message when the request's bytes did not parse.
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_MESSAGE)) {
      if (methods->GetRecvMessage() == nullptr) {
        request_unparsed_ = true;
      } else if (IsRoteMethod(info_->method())) {
        const auto* request = static_cast<const google::protobuf::Message*>(methods->GetRecvMessage());
        log_context_.run = RunNameIn(*request);
        log_context_.request_id = StringField(*request, "request_id").substr(0, 128);
      }
    }
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_MESSAGE) && log_context_.run.empty() &&
        methods->GetSendMessage() != nullptr && IsRoteMethod(info_->method())) {
      log_context_.run = RunNameIn(*static_cast<const google::protobuf::Message*>(methods->GetSendMessage()));
    }
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      grpc::Status status = methods->GetSendStatus();
      // gRPC answers a request that does not parse with INTERNAL and no message, and protobuf
      // refuses any string field that is not UTF-8: the caller's mistake, so say it is one.
      if (request_unparsed_ && status.error_code() == grpc::StatusCode::INTERNAL) {
        status = grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, UnparsedRequestMessage(info_->method()));
        methods->ModifySendStatus(status);
      }
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
      const std::string method = info_->method();
      metrics_->Record(method, status.error_code(), seconds);
      const std::string peer = info_->server_context() ? info_->server_context()->peer() : "";
      if (metrics_->authenticator() != nullptr && info_->server_context() != nullptr) {
        const auto& metadata = info_->server_context()->client_metadata();
        std::optional<std::string_view> authorization;
        if (auto it = metadata.find("authorization"); it != metadata.end()) {
          authorization = std::string_view(it->second.data(), it->second.size());
        }
        absl::StatusOr<Principal> principal = metrics_->authenticator()->AuthorizeHeader(authorization, method);
        if (principal.ok()) log_context_.principal = principal->name;
      }
      const engine::ScopedLogContext scope(log_context_);
      if (status.ok()) {
        spdlog::info("rpc {} peer={} code=OK {:.1f}ms", method, peer, seconds * 1e3);
      } else {
        spdlog::info("rpc {} peer={} code={} {:.1f}ms: {}", method, peer,
                     CodeName(status.error_code()), seconds * 1e3, status.error_message());
      }
    }
    methods->Proceed();
  }

 private:
  grpc::experimental::ServerRpcInfo* info_;
  RpcMetrics* metrics_;
  std::chrono::steady_clock::time_point start_;
  bool request_unparsed_ = false;
  engine::LogContext log_context_;
};

class ObservingInterceptorFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit ObservingInterceptorFactory(RpcMetrics* metrics) : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new ObservingInterceptor(info, metrics_);
  }

 private:
  RpcMetrics* metrics_;
};
}  // namespace

struct RpcMetrics::Families {
  prometheus::Family<prometheus::Counter>* requests;
  prometheus::Family<prometheus::Histogram>* latency;
};

RpcMetrics::RpcMetrics() : registry_(std::make_shared<prometheus::Registry>()) {
  families_ = std::make_unique<Families>();
  families_->requests = &prometheus::BuildCounter()
                             .Name("rote_rpc_requests_total")
                             .Help("gRPC calls handled, by method and status code")
                             .Register(*registry_);
  families_->latency = &prometheus::BuildHistogram()
                            .Name("rote_rpc_duration_seconds")
                            .Help("gRPC call latency, by method")
                            .Register(*registry_);
}

RpcMetrics::~RpcMetrics() = default;

absl::Status RpcMetrics::Serve(const std::string& address) {
  try {
    exposer_ = std::make_unique<prometheus::Exposer>(address);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", address, ": ", e.what(),
                     " (choose another --metrics-listen, or `off`)"));
  }
  exposer_->RegisterCollectable(registry_);
  return absl::OkStatus();
}

void RpcMetrics::AddCollectable(std::shared_ptr<prometheus::Collectable> collectable) {
  if (exposer_) exposer_->RegisterCollectable(collectable);
  collectables_.push_back(std::move(collectable));
}

int RpcMetrics::port() const {
  if (!exposer_) return 0;
  auto ports = exposer_->GetListeningPorts();
  return ports.empty() ? 0 : ports.front();
}

void RpcMetrics::Record(const std::string& method_path, int grpc_code, double seconds) {
  const std::string method = MethodLabel(method_path);
  families_->requests->Add({{"method", method}, {"code", CodeName(grpc_code)}}).Increment();
  static const prometheus::Histogram::BucketBoundaries kBuckets = {
      0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
  families_->latency->Add({{"method", method}}, kBuckets).Observe(seconds);
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
RpcMetrics::MakeInterceptorFactory() {
  return std::make_unique<ObservingInterceptorFactory>(this);
}

}  // namespace rote::orchestrator
