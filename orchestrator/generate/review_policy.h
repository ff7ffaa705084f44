// Review policy: whether a freshly generated artifact may run at once or waits for a person.
//
//   auto      an artifact whose tests all pass, held-out ones included, is approved on the spot
//             (the review log records the policy as the reviewer), so runs use it immediately;
//             one that passed but whose examples cannot tell it from a trivially wrong one
//             (engine::Validation::auto_approvable) stays pending for a person.
//   approval  it stays pending until a reviewer approves it, and the four-eyes rule applies:
//             a principal who asked for the generation (submitted the run that generated it, or
//             called Generate) may not approve it.
//
// The server has a default (rote serve --review-policy) and blueprints may be given their own
// (--review-policy-for NAME=MODE), keyed by the blueprint's declared name.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "store/records.h"
#include "store/store.h"

namespace rote::orchestrator::generate {

enum class ReviewMode { kAuto, kApproval };
std::string_view ReviewModeName(ReviewMode mode);  // "auto", "approval"
absl::StatusOr<ReviewMode> ParseReviewMode(std::string_view name);

// The principal recorded in the review log for policy approvals.
inline constexpr std::string_view kPolicyReviewer = "rote:review-policy";

class ReviewPolicy {
 public:
  ReviewPolicy() = default;
  explicit ReviewPolicy(ReviewMode server_default) : default_(server_default) {}

  // Parses the flag values: `server` is "auto" or "approval"; each of `per_blueprint` is
  // "NAME=MODE". INVALID_ARGUMENT says which value is wrong.
  static absl::StatusOr<ReviewPolicy> Parse(std::string_view server, const std::vector<std::string>& per_blueprint);

  void Set(std::string blueprint_name, ReviewMode mode) { per_blueprint_[std::move(blueprint_name)] = mode; }
  ReviewMode server_default() const { return default_; }
  ReviewMode ModeFor(std::string_view blueprint_name) const;
  // By generation point key ("<blueprint>/<point>"); keys without a blueprint use the default.
  ReviewMode ModeForKey(std::string_view generation_point_key) const;

 private:
  ReviewMode default_ = ReviewMode::kApproval;
  std::map<std::string, ReviewMode, std::less<>> per_blueprint_;
};

// Records that `principal` asked for the generation of `artifact_digest` (idempotent).
absl::Status RecordRequester(store::Store* store, std::string_view artifact_digest, std::string_view principal);
// Whether `principal` asked for it.
absl::StatusOr<bool> IsRequester(store::Store* store, std::string_view artifact_digest, std::string_view principal);

// The four-eyes rule: PERMISSION_DENIED when the policy of the artifact's blueprint requires
// approval, the decision approves, and `principal` asked for the artifact's generation.
// `local_mode`: the server has one principal for everyone; the message then says how to work
// with that (a key file, or --review-policy auto).
absl::Status CheckMayReview(store::Store* store, const ReviewPolicy& policy, const store::ArtifactRecord& artifact,
                            store::ReviewState decision, std::string_view principal, bool local_mode);

}  // namespace rote::orchestrator::generate
