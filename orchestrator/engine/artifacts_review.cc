// Engine: artifacts, their revisions, review and diffs.
#include "absl/strings/str_cat.h"
#include "orchestrator/engine/artifact.h"
#include "orchestrator/engine/backtest.h"
#include "orchestrator/engine/engine.h"
#include "orchestrator/engine/names.h"
#include "orchestrator/engine/resolve.h"
#include "orchestrator/engine/unified_diff.h"

namespace rote::orchestrator::engine {
namespace {

// Each artifact of a page with its reviews.
absl::StatusOr<store::Page<ArtifactView>> WithReviews(store::Store* store, store::Page<store::ArtifactRecord> page) {
  store::Page<ArtifactView> out;
  out.next_page_token = std::move(page.next_page_token);
  for (store::ArtifactRecord& a : page.items) {
    absl::StatusOr<std::vector<store::ReviewEntry>> reviews = store->ListReviews(a.digest);
    if (!reviews.ok()) return reviews.status();
    out.items.push_back(ArtifactView{std::move(a), *std::move(reviews)});
    if (absl::Status s = AddBacktestSummary(store, &out.items.back()); !s.ok()) return s;
  }
  return out;
}

}  // namespace

absl::StatusOr<ArtifactView> Engine::GetArtifact(std::string_view name) {
  absl::StatusOr<ArtifactName> n = ResolveArtifactName(store_, name);
  if (!n.ok()) return n.status();
  absl::StatusOr<store::ArtifactRecord> a =
      n->digest.empty() ? store_->GetRevision(n->key, n->revision) : store_->GetArtifact(n->digest);
  if (absl::IsNotFound(a.status())) return absl::NotFoundError(absl::StrCat("no artifact ", std::string(name)));
  if (!a.ok()) return a.status();
  absl::StatusOr<std::vector<store::ReviewEntry>> reviews = store_->ListReviews(a->digest);
  if (!reviews.ok()) return reviews.status();
  ArtifactView view{*std::move(a), *std::move(reviews)};
  if (absl::Status s = AddBacktestSummary(store_, &view); !s.ok()) return s;
  return view;
}

absl::StatusOr<store::Page<ArtifactView>> Engine::ListArtifacts(std::string_view generation_point,
                                                                std::optional<store::ReviewState> state,
                                                                const store::PageRequest& page) {
  absl::StatusOr<std::string> key = std::string();
  if (!generation_point.empty()) key = ResolveGenerationPointKey(store_, generation_point, "generation_point");
  if (!key.ok()) return key.status();
  generation_point = *key;
  absl::StatusOr<store::Page<store::ArtifactRecord>> p =
      store_->ListArtifacts(store::ArtifactFilter{std::string(generation_point), state}, page);
  if (!p.ok()) return p.status();
  return WithReviews(store_, *std::move(p));
}

absl::StatusOr<store::Page<ArtifactView>> Engine::ListRevisions(std::string_view generation_point,
                                                                const store::PageRequest& page) {
  if (generation_point.empty()) {
    return absl::InvalidArgumentError("generation_point is required, e.g. invoice_totals/parse_amount");
  }
  absl::StatusOr<std::string> key = ResolveGenerationPointKey(store_, generation_point, "generation_point");
  if (!key.ok()) return key.status();
  generation_point = *key;
  absl::StatusOr<store::Page<store::ArtifactRecord>> p = store_->ListRevisions(generation_point, page);
  if (!p.ok()) return p.status();
  return WithReviews(store_, *std::move(p));
}

absl::StatusOr<ArtifactView> Engine::ReviewArtifact(std::string_view name, store::ReviewState decision,
                                                    std::string_view comment, std::string_view etag,
                                                    const std::string& principal) {
  if (decision == store::ReviewState::kPending) {
    return absl::InvalidArgumentError("decision must be REVIEW_STATE_APPROVED or REVIEW_STATE_REJECTED");
  }
  if (etag.empty()) {
    return absl::InvalidArgumentError("etag is required: pass the etag from GetArtifact, so a review never "
                                      "decides on a state the reviewer did not see");
  }
  if (comment.size() > kMaxReviewCommentBytes) {
    return absl::InvalidArgumentError(absl::StrCat("the review comment is ", comment.size(), " bytes, more than ",
                                                   kMaxReviewCommentBytes));
  }
  absl::StatusOr<ArtifactView> current = GetArtifact(name);
  if (!current.ok()) return current.status();
  if (absl::StatusOr<ArtifactCode> code = VerifiedCode(current->record); !code.ok()) return code.status();
  store::ReviewRequest req;
  req.artifact_digest = current->record.digest;
  req.principal = principal;
  req.decision = decision;
  req.comment = std::string(comment);
  req.expected_etag = std::string(etag);
  req.promote = options_.promote_on_approval;
  absl::StatusOr<store::ArtifactRecord> reviewed = store_->ReviewArtifact(req);
  if (!reviewed.ok()) return reviewed.status();
  return GetArtifact(absl::StrCat("artifacts/", reviewed->digest.substr(7)));
}

absl::StatusOr<std::string> Engine::DiffRevisions(std::string_view generation_point, int64_t from_revision,
                                                  int64_t to_revision) {
  if (generation_point.empty()) return absl::InvalidArgumentError("generation_point is required");
  absl::StatusOr<std::string> key = ResolveGenerationPointKey(store_, generation_point, "generation_point");
  if (!key.ok()) return key.status();
  generation_point = *key;
  if (to_revision < 1) return absl::InvalidArgumentError("to_revision must be a revision number (from 1)");
  if (from_revision < -1) return absl::InvalidArgumentError("from_revision must be -1 (the live revision), 0 or a revision");
  if (from_revision == 0) from_revision = to_revision - 1;
  absl::StatusOr<store::ArtifactRecord> to = store_->GetRevision(generation_point, to_revision);
  if (!to.ok()) return to.status();
  if (from_revision == -1) {
    // The live revision of the point the `to` revision was written for (its spec).
    absl::StatusOr<store::LiveRevision> live = store_->GetLiveRevision(generation_point, to->provenance.spec_digest);
    if (absl::IsNotFound(live.status())) {
      from_revision = 0;
    } else if (!live.ok()) {
      return live.status();
    } else {
      from_revision = live->revision;
    }
  }
  std::string from_source;
  std::string from_label = "/dev/null";
  if (from_revision >= 1) {
    absl::StatusOr<store::ArtifactRecord> from = store_->GetRevision(generation_point, from_revision);
    if (!from.ok()) return from.status();
    from_source = from->source;
    from_label = absl::StrCat(std::string(generation_point), "/revisions/", from_revision, " (", from->digest.substr(7, 12), ")");
  }
  return UnifiedDiff(from_source, to->source, from_label,
                     absl::StrCat(std::string(generation_point), "/revisions/", to_revision, " (", to->digest.substr(7, 12), ")"));
}

}  // namespace rote::orchestrator::engine
