// Authentication and authorization of API calls.
//
// A key file maps bearer tokens to a principal and roles, one per line:
//
//     # token                          principal   roles
//     4f3c2a...                        alice       submit,review
//     9b1d77...                        ops         admin
//
// Roles, each only what it says (docs/architecture.md, "Security", has the full matrix):
//   submit  register and lock blueprints, submit runs and use its own runs, call Generate, read
//           blueprints and artifacts;
//   review  approve or reject artifacts, read blueprints and artifacts (what a review needs);
//   admin   everything, including every principal's runs and regeneration.
// A principal that submits and reviews holds both. A run belongs to its submitter: other
// principals need admin to read, watch, replay or cancel it.
// Without a key file the server runs in local mode: it listens on loopback only and every
// caller is the principal "local" with all roles.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace grpc {
class ServerContext;
}

namespace rote::orchestrator {

enum class Role { kSubmit, kReview, kAdmin };

std::string_view RoleName(Role role);

struct Principal {
  std::string name;
  bool submit = false;
  bool review = false;
  bool admin = false;

  // Holds `role` (admin holds every role).
  bool Has(Role role) const;
};

// Who may call a method: a principal holding any one of `roles`.
struct MethodAccess {
  MethodAccess(Role role) : roles{role} {}  // NOLINT: one role is the common case
  MethodAccess(std::initializer_list<Role> any_of) : roles(any_of) {}
  bool Allows(const Principal& principal) const;
  std::string Describe() const;  // "`submit`", "`submit` or `review`"
  std::vector<Role> roles;
};

// The roles that may call each API method, keyed by full method name
// ("/rote.v1.RunService/SubmitRun"). Every rote.v1 method must have an entry; a test checks that
// against the proto descriptors.
const std::map<std::string, MethodAccess, std::less<>>& MethodRoles();

class Authenticator {
 public:
  // Local mode: no tokens, everyone is "local" with all roles.
  static Authenticator LocalMode();
  // Parses a key file; errors name the file and line.
  static absl::StatusOr<Authenticator> FromKeyFile(const std::string& path);
  static absl::StatusOr<Authenticator> FromKeyText(std::string_view text, std::string_view origin);

  bool local_mode() const { return local_mode_; }

  // Resolves the caller of `context` and checks it may call `method`:
  // UNAUTHENTICATED without a known token, PERMISSION_DENIED without the role.
  absl::StatusOr<Principal> Authorize(const grpc::ServerContext& context,
                                      std::string_view method) const;
  // Same, from the raw `authorization` metadata value (tests, non-gRPC callers).
  absl::StatusOr<Principal> AuthorizeHeader(std::optional<std::string_view> authorization,
                                            std::string_view method) const;

 private:
  bool local_mode_ = true;
  std::map<std::string, Principal, std::less<>> by_token_;
};

}  // namespace rote::orchestrator
