// Per-method request logging (spdlog) and Prometheus metrics, attached to every call through a
// gRPC server interceptor so no handler can forget them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/support/server_interceptor.h"

namespace prometheus {
class Collectable;
class Registry;
class Exposer;
}  // namespace prometheus

namespace rote::orchestrator {

class Authenticator;

class RpcMetrics {
 public:
  RpcMetrics();
  ~RpcMetrics();

  // Serves the text exposition format at http://ADDRESS/metrics. "HOST:0" picks a free port.
  absl::Status Serve(const std::string& address);
  // The bound port, or 0 when not serving.
  int port() const;

  // `method_path` is the call's "/package.Service/Method"; paths of methods this binary does not
  // contain are all counted under method="unknown".
  void Record(const std::string& method_path, int grpc_code, double seconds);
  // An interceptor factory recording into this object (which must outlive the server).
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> MakeInterceptorFactory();

  prometheus::Registry& registry() { return *registry_; }
  // Resolves the principal a call's log line names (which must outlive the server); null: none.
  void set_authenticator(const Authenticator* auth) { auth_ = auth; }
  const Authenticator* authenticator() const { return auth_; }
  // Also served at /metrics (when serving), kept alive by this object.
  void AddCollectable(std::shared_ptr<prometheus::Collectable> collectable);

 private:
  struct Families;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<Families> families_;
  const Authenticator* auth_ = nullptr;
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables_;
  std::unique_ptr<prometheus::Exposer> exposer_;
};

}  // namespace rote::orchestrator
