#include "orchestrator/generate/review_policy.h"

#include "absl/strings/str_cat.h"

namespace rote::orchestrator::generate {

namespace {
// Store key-value namespace: "<artifact digest> <principal>" -> "1". One key per pair, so
// concurrent generations for different principals never race on a shared value.
constexpr std::string_view kRequesterNamespace = "generation/requested_by";

std::string RequesterKey(std::string_view artifact_digest, std::string_view principal) {
  return absl::StrCat(std::string(artifact_digest), " ", std::string(principal));
}
}  // namespace

std::string_view ReviewModeName(ReviewMode mode) { return mode == ReviewMode::kAuto ? "auto" : "approval"; }

absl::StatusOr<ReviewMode> ParseReviewMode(std::string_view name) {
  if (name == "auto") return ReviewMode::kAuto;
  if (name == "approval") return ReviewMode::kApproval;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown review policy '", std::string(name),
      "': use 'auto' (artifacts whose tests pass run at once) or 'approval' (a second person approves)"));
}

absl::StatusOr<ReviewPolicy> ReviewPolicy::Parse(std::string_view server, const std::vector<std::string>& per_blueprint) {
  absl::StatusOr<ReviewMode> mode = ParseReviewMode(server);
  if (!mode.ok()) return mode.status();
  ReviewPolicy policy(*mode);
  for (const std::string& entry : per_blueprint) {
    const size_t eq = entry.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(absl::StrCat("review policy for a blueprint must be NAME=MODE, got '", entry, "'"));
    }
    absl::StatusOr<ReviewMode> m = ParseReviewMode(std::string_view(entry).substr(eq + 1));
    if (!m.ok()) return m.status();
    policy.Set(entry.substr(0, eq), *m);
  }
  return policy;
}

ReviewMode ReviewPolicy::ModeFor(std::string_view blueprint_name) const {
  auto it = per_blueprint_.find(blueprint_name);
  return it == per_blueprint_.end() ? default_ : it->second;
}

ReviewMode ReviewPolicy::ModeForKey(std::string_view key) const {
  const size_t slash = key.find('/');
  return slash == std::string_view::npos ? default_ : ModeFor(key.substr(0, slash));
}

absl::Status RecordRequester(store::Store* store, std::string_view artifact_digest, std::string_view principal) {
  if (principal.empty()) return absl::OkStatus();
  return store->KvPut(kRequesterNamespace, RequesterKey(artifact_digest, principal), "1");
}

absl::StatusOr<bool> IsRequester(store::Store* store, std::string_view artifact_digest, std::string_view principal) {
  absl::StatusOr<std::string> v = store->KvGet(kRequesterNamespace, RequesterKey(artifact_digest, principal));
  if (v.ok()) return true;
  if (absl::IsNotFound(v.status())) return false;
  return v.status();
}

absl::Status CheckMayReview(store::Store* store, const ReviewPolicy& policy, const store::ArtifactRecord& artifact,
                            store::ReviewState decision, std::string_view principal, bool local_mode) {
  if (decision != store::ReviewState::kApproved) return absl::OkStatus();
  if (policy.ModeForKey(artifact.generation_point) != ReviewMode::kApproval) return absl::OkStatus();
  if (artifact.provenance.author == principal) {
    return absl::PermissionDeniedError(absl::StrCat(
        "'", std::string(principal), "' proposed artifact ", artifact.digest, " (", artifact.generation_point,
        ") and the review policy for it is 'approval', which needs a second person: another principal with the "
        "review role must approve it",
        local_mode ? " (this server runs without a key file, so everyone is 'local': give reviewers their own "
                     "tokens with --keys, or start it with --review-policy auto)"
                   : ""));
  }
  absl::StatusOr<bool> requester = IsRequester(store, artifact.digest, principal);
  if (!requester.ok()) return requester.status();
  if (!*requester) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      "'", std::string(principal), "' asked for the generation of artifact ", artifact.digest, " (",
      artifact.generation_point, ") and the review policy for it is 'approval', which needs a second person: "
      "another principal with the review role must approve it",
      local_mode ? " (this server runs without a key file, so everyone is 'local': give reviewers their own "
                   "tokens with --keys, or start it with --review-policy auto)"
                 : ""));
}

}  // namespace rote::orchestrator::generate
