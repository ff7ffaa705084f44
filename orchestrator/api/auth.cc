#include "orchestrator/api/auth.h"

#include <openssl/crypto.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "grpcpp/server_context.h"

namespace rote::orchestrator {

std::string_view RoleName(Role role) {
  switch (role) {
    case Role::kSubmit: return "submit";
    case Role::kReview: return "review";
    case Role::kAdmin: return "admin";
  }
  return "unknown";
}

bool Principal::Has(Role role) const {
  if (admin) return true;
  switch (role) {
    case Role::kSubmit: return submit;
    case Role::kReview: return review;
    case Role::kAdmin: return false;
  }
  return false;
}

bool MethodAccess::Allows(const Principal& principal) const {
  return std::any_of(roles.begin(), roles.end(), [&](Role r) { return principal.Has(r); });
}

std::string MethodAccess::Describe() const {
  std::string out;
  for (size_t i = 0; i < roles.size(); ++i) {
    absl::StrAppend(&out, i == 0 ? "" : " or ", "`", std::string(RoleName(roles[i])), "`");
  }
  return out;
}

const std::map<std::string, MethodAccess, std::less<>>& MethodRoles() {
  // Reviewers read what a review needs (blueprints and their specs, artifacts, the model), never
  // runs: those belong to their submitters and hold their inputs.
  const MethodAccess read_code = {Role::kSubmit, Role::kReview};
  static const auto* roles = new std::map<std::string, MethodAccess, std::less<>>{
      {"/rote.v1.BlueprintService/RegisterBlueprint", Role::kSubmit},
      {"/rote.v1.BlueprintService/GetBlueprint", read_code},
      {"/rote.v1.BlueprintService/ListBlueprints", read_code},
      {"/rote.v1.BlueprintService/LockBlueprint", Role::kSubmit},
      {"/rote.v1.RunService/SubmitRun", Role::kSubmit},
      {"/rote.v1.RunService/GetRun", Role::kSubmit},
      {"/rote.v1.RunService/ListRuns", Role::kSubmit},
      {"/rote.v1.RunService/ReadRunPayload", Role::kSubmit},
      {"/rote.v1.RunService/WatchRun", Role::kSubmit},
      {"/rote.v1.RunService/ReplayRun", Role::kSubmit},
      {"/rote.v1.RunService/CancelRun", Role::kSubmit},
      {"/rote.v1.RunService/ListRunSteps", Role::kSubmit},
      {"/rote.v1.ArtifactService/ListArtifacts", read_code},
      {"/rote.v1.ArtifactService/GetArtifact", read_code},
      {"/rote.v1.ArtifactService/ListRevisions", read_code},
      {"/rote.v1.ArtifactService/ReviewArtifact", Role::kReview},
      {"/rote.v1.ArtifactService/DiffRevisions", read_code},
      {"/rote.v1.ArtifactService/RegenerateArtifact", Role::kAdmin},
      {"/rote.v1.ArtifactService/GetAttempt", read_code},
      {"/rote.v1.ArtifactService/PromoteRevision", Role::kReview},
      {"/rote.v1.ArtifactService/ProposeRevision", read_code},
      {"/rote.v1.ArtifactService/TryArtifact", Role::kReview},
      {"/rote.v1.ArtifactService/BacktestRevision", Role::kReview},
      {"/rote.v1.ArtifactService/GetBacktest", read_code},
      {"/rote.v1.ArtifactService/ListAuditEntries", Role::kReview},
      {"/rote.v1.GenerationService/Generate", Role::kSubmit},
      {"/rote.v1.GenerationService/GetModel", read_code},
      {"/rote.v1.GenerationService/GetGeneration", read_code},
      {"/rote.v1.GenerationService/ListGenerations", read_code},
  };
  return *roles;
}

Authenticator Authenticator::LocalMode() { return Authenticator(); }

absl::StatusOr<Authenticator> Authenticator::FromKeyFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read key file ", path,
                                            ": check the path given to --keys"));
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  return FromKeyText(buffer.str(), path);
}

absl::StatusOr<Authenticator> Authenticator::FromKeyText(std::string_view text,
                                                         std::string_view origin) {
  Authenticator auth;
  auth.local_mode_ = false;
  int line_no = 0;
  // Debian's abseil has its own string_view type, distinct from std::string_view.
  const absl::string_view all(text.data(), text.size());
  for (absl::string_view line : absl::StrSplit(all, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line.front() == '#') continue;
    std::vector<absl::string_view> fields = absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    auto where = [&] { return absl::StrCat(std::string(origin), ":", line_no, ": "); };
    if (fields.size() != 3) {
      return absl::InvalidArgumentError(absl::StrCat(
          where(), "expected `<token> <principal> <role,role,...>`, found ", fields.size(), " fields"));
    }
    if (fields[0].size() < 16) {
      return absl::InvalidArgumentError(absl::StrCat(where(), "token is shorter than 16 characters"));
    }
    Principal p;
    p.name = std::string(fields[1]);
    for (absl::string_view role : absl::StrSplit(fields[2], ',', absl::SkipEmpty())) {
      if (role == "submit") p.submit = true;
      else if (role == "review") p.review = true;
      else if (role == "admin") p.admin = true;
      else {
        return absl::InvalidArgumentError(absl::StrCat(where(), "unknown role `", role,
                                                       "` (known: submit, review, admin)"));
      }
    }
    if (!auth.by_token_.emplace(std::string(fields[0]), std::move(p)).second) {
      return absl::InvalidArgumentError(absl::StrCat(where(), "duplicate token"));
    }
  }
  if (auth.by_token_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(origin), ": key file holds no tokens"));
  }
  return auth;
}

absl::StatusOr<Principal> Authenticator::Authorize(const grpc::ServerContext& context,
                                                   std::string_view method) const {
  const auto& md = context.client_metadata();
  auto it = md.find("authorization");
  std::optional<std::string_view> header;
  if (it != md.end()) header = std::string_view(it->second.data(), it->second.size());
  return AuthorizeHeader(header, method);
}

absl::StatusOr<Principal> Authenticator::AuthorizeHeader(
    std::optional<std::string_view> authorization, std::string_view method) const {
  auto role_it = MethodRoles().find(method);
  if (role_it == MethodRoles().end()) {
    // Fail closed: a method without a declared role is callable by nobody.
    return absl::PermissionDeniedError(absl::StrCat("method ", std::string(method), " declares no role"));
  }
  const MethodAccess& needed = role_it->second;
  if (local_mode_) return Principal{"local", true, true, true};
  if (!authorization) {
    return absl::UnauthenticatedError(
        "missing bearer token: pass --token or set ROTE_TOKEN (metadata `authorization: Bearer <token>`)");
  }
  absl::string_view value(authorization->data(), authorization->size());
  if (!absl::ConsumePrefix(&value, "Bearer ") && !absl::ConsumePrefix(&value, "bearer ")) {
    return absl::UnauthenticatedError("authorization metadata must be `Bearer <token>`");
  }
  // Compare against every token in constant time so timing does not reveal a prefix.
  const Principal* found = nullptr;
  for (const auto& [token, principal] : by_token_) {
    if (token.size() == value.size() && CRYPTO_memcmp(token.data(), value.data(), value.size()) == 0) {
      found = &principal;
    }
  }
  if (found == nullptr) return absl::UnauthenticatedError("unknown bearer token");
  if (!needed.Allows(*found)) {
    return absl::PermissionDeniedError(absl::StrCat("principal `", found->name, "` lacks role ", needed.Describe(),
                                                    " needed by ", std::string(method)));
  }
  return *found;
}

}  // namespace rote::orchestrator
