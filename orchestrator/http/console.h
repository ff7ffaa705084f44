// The review console's HTTP side (docs/review.md, "Review console"): the built web page and a
// JSON API mapped from the rote.v1 gRPC methods, AIP-127 style (GET /v1/artifacts/{name},
// POST /v1/artifacts/{name}:review, ...).
//
// Every API request becomes a call of the server's own gRPC service through an in-process
// channel, with the request's `Authorization: Bearer` header passed on as metadata: tokens,
// roles, etags and the four-eyes rule are exactly the gRPC ones, and there is no second
// implementation of any method to drift from the first.
//
// What the browser side may rely on, and what a hostile page cannot do:
//   - every response carries a Content-Security-Policy that allows only this origin's own
//     scripts and styles (no inline script, no eval, no frames), nosniff, no referrer;
//   - tokens travel only in the Authorization header: no cookie is ever set or read, and the
//     API takes no token in a URL;
//   - a POST must be `Content-Type: application/json` (a cross-site form or a "simple" fetch
//     cannot send that without a CORS preflight, which is never granted) and, when the browser
//     names an Origin, come from this server's own origin;
//   - on a loopback address the Host header must name a loopback host, so a DNS-rebound name
//     cannot reach a keyless (local mode) server from another site.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace grpc {
class Channel;
}

namespace rote::orchestrator::http {

// One file of the built console (web/), embedded into the binary at build time.
struct ConsoleAsset {
  std::string_view path;  // "/", "/console.js", ...
  std::string_view content_type;
  std::string_view body;
};
// The embedded files; empty when rote was built with -DROTE_CONSOLE=OFF.
const ConsoleAsset* ConsoleAssets(size_t* count);

struct ConsoleOptions {
  // HOST:PORT; port 0 picks a free one (Console::port()).
  std::string listen;
  // Whether the server has a key file: without one only loopback addresses are allowed.
  bool has_keys = false;
  // HTTPS with these PEM files when both are set (the gRPC listener's --tls-cert/--tls-key).
  std::string tls_cert_file;
  std::string tls_key_file;
  // The largest request body taken and response relayed.
  int64_t max_message_bytes = 64 << 20;
};

class Console {
 public:
  // Binds the address and starts serving. FAILED_PRECONDITION for an address beyond loopback
  // without a key file; UNAVAILABLE when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<Console>> Start(const ConsoleOptions& options,
                                                        std::shared_ptr<grpc::Channel> channel);
  ~Console();
  int port() const;
  // Ends the live event streams, stops taking connections and waits for the handlers.
  void Shutdown();

 private:
  struct State;
  explicit Console(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// The HTTP status for a gRPC status code (google.rpc.Code's documented mapping).
int HttpStatusOf(int grpc_code);

}  // namespace rote::orchestrator::http
