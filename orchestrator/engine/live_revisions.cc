// Engine: live revisions (promotion, lockfiles of what is live), people's proposals, and the
// audit log. The store makes each decision and its audit entry one transaction.
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "orchestrator/engine/artifact.h"
#include "orchestrator/engine/engine.h"
#include "orchestrator/engine/engine_internal.h"
#include "orchestrator/engine/lockfile.h"
#include "orchestrator/engine/names.h"
#include "orchestrator/engine/resolve.h"
#include "orchestrator/engine/validate.h"
#include "store/digest.h"

namespace rote::orchestrator::engine {
namespace {

// A lockfile entry to fill in for a point without a live revision: the task, signature and
// examples as comments, and code that fails the point's examples until someone writes it.
LockEntry SkeletonEntry(const GenerationPoint& p) {
  LockEntry e;
  e.point = p.name;
  e.kind = p.kind;
  e.spec_digest = p.digest;
  e.source = p.kind == ArtifactKind::kLuaFunction
                 ? absl::StrCat("return function(input)\n  error(\"write the code for ", p.name, "\")\nend\n")
                 : std::string();
  return e;
}

std::string SkeletonComments(const GenerationPoint& p) {
  std::string out = absl::StrCat("\n# ", p.name, " (", std::string(KindName(p.kind)), "): ", p.task, "\n");
  if (!p.signature.empty()) absl::StrAppend(&out, "#   signature: ", p.signature, "\n");
  for (const std::string& ex : p.ExamplesJson()) absl::StrAppend(&out, "#   example: ", ex, "\n");
  return out;
}

}  // namespace

absl::StatusOr<LockResult> Engine::LockBlueprint(std::string_view name, bool skeleton) {
  absl::StatusOr<BlueprintView> bp = GetBlueprint(name);
  if (!bp.ok()) return bp.status();
  Lockfile lock;
  lock.blueprint = bp->record.name;
  lock.version = bp->record.version;
  LockResult result;
  std::string comments;
  for (const GenerationPoint& p : bp->points) {
    absl::StatusOr<std::optional<store::ArtifactRecord>> live = LiveArtifactFor(ArtifactKey(bp->record.name, p.name), p);
    if (!live.ok()) return live.status();
    if (!*live) {
      result.missing.push_back(p.name);
      if (skeleton) {
        lock.entries.push_back(SkeletonEntry(p));
        absl::StrAppend(&comments, SkeletonComments(p));
      }
      continue;
    }
    if (skeleton) continue;
    absl::StatusOr<ArtifactCode> code = VerifiedCode(**live);
    if (!code.ok()) return code.status();
    lock.entries.push_back(LockEntry{p.name, p.kind, p.digest, (*live)->digest,
                                     p.kind == ArtifactKind::kRe2Pattern ? code->options_json : "", code->source, 0});
  }
  result.text = FormatLockfile(lock);
  if (skeleton) {
    if (result.missing.empty()) {
      absl::StrAppend(&result.text, "\n# Every generation point has a live revision: nothing to fill in.\n");
    } else {
      absl::StrAppend(&result.text, "\n# To fill in: write each `source` above so that it passes the examples below,\n"
                                    "# then register the blueprint with this lockfile (or propose each revision with\n"
                                    "# `rote artifacts propose`); a reviewer approves it.\n",
                      comments);
    }
  } else if (!result.missing.empty()) {
    absl::StrAppend(&result.text, "\n# Not locked (no live approved revision): ", absl::StrJoin(result.missing, ", "),
                    ".\n# `rote blueprints lock ", bp->record.name,
                    " --skeleton` writes entries to fill in for them.\n");
  }
  return result;
}

absl::StatusOr<ArtifactView> Engine::PromoteRevision(std::string_view name, std::string_view comment,
                                                     const std::string& principal) {
  if (comment.size() > kMaxReviewCommentBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("the comment is ", comment.size(), " bytes, more than ", kMaxReviewCommentBytes));
  }
  absl::StatusOr<ArtifactView> current = GetArtifact(name);
  if (!current.ok()) return current.status();
  if (absl::StatusOr<ArtifactCode> code = VerifiedCode(current->record); !code.ok()) return code.status();
  store::PromoteRequest req;
  req.artifact_digest = current->record.digest;
  req.principal = principal;
  req.comment = std::string(comment);
  absl::StatusOr<store::ArtifactRecord> promoted = store_->PromoteRevision(req);
  if (!promoted.ok()) return promoted.status();
  return GetArtifact(absl::StrCat("artifacts/", promoted->digest.substr(7)));
}

absl::StatusOr<ArtifactView> Engine::ProposeRevision(const Proposal& proposal) {
  absl::StatusOr<std::string> resolved_key = ResolveGenerationPointKey(store_, proposal.generation_point, "generation_point");
  if (!resolved_key.ok()) return resolved_key.status();
  if (proposal.comment.size() > kMaxReviewCommentBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("the comment is ", proposal.comment.size(), " bytes, more than ", kMaxReviewCommentBytes));
  }
  const std::string& key = *resolved_key;
  const size_t slash = key.find('/');
  const std::string bp_name = key.substr(0, slash);
  const std::string point_name = key.substr(slash + 1);
  // The spec to validate against: the named blueprint's, or the newest one declaring the point.
  std::optional<store::BlueprintRecord> bp;
  if (!proposal.blueprint.empty()) {
    absl::StatusOr<store::BlueprintRecord> named = ResolveBlueprint(proposal.blueprint);
    if (!named.ok()) return named.status();
    if (named->name != bp_name) {
      return absl::InvalidArgumentError(absl::StrCat("blueprint ", QuoteInput(proposal.blueprint), " is '", named->name,
                                                     "', not the blueprint of ", QuoteInput(key)));
    }
    bp = *std::move(named);
  } else {
    absl::StatusOr<std::vector<store::BlueprintRecord>> all = store_->FindBlueprintsByName(bp_name);
    if (!all.ok()) return all.status();
    for (auto it = all->rbegin(); it != all->rend() && !bp; ++it) {
      for (const store::GenerationSpecRecord& s : it->generation_points) {
        if (s.name == point_name) bp = *it;
      }
    }
  }
  const GenerationPoint* point = nullptr;
  absl::StatusOr<BlueprintView> view = bp ? ViewOf(*bp) : absl::StatusOr<BlueprintView>(absl::NotFoundError(""));
  if (view.ok()) {
    for (const GenerationPoint& p : view->points) {
      if (p.name == point_name) point = &p;
    }
  }
  if (point == nullptr) {
    return absl::NotFoundError(absl::StrCat("no registered blueprint '", bp_name, "'",
                                            proposal.blueprint.empty() ? "" : absl::StrCat(" (", proposal.blueprint, ")"),
                                            " declares generation point '", point_name, "'"));
  }
  absl::StatusOr<std::string> options = NormalizeOptions(point->kind, proposal.options_json);
  if (!options.ok()) return absl::InvalidArgumentError(absl::StrCat("options_json: ", options.status().message()));
  ArtifactCode code{point->kind, proposal.source, *options};
  absl::StatusOr<std::string> digest = ArtifactDigest(code);
  if (!digest.ok()) return absl::InvalidArgumentError(digest.status().message());
  const size_t bytes = code.source.size() + code.options_json.size();
  if (static_cast<int64_t>(bytes) > options_.max_blueprint_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("the source is ", bytes, " bytes, more than the ",
                                                   options_.max_blueprint_bytes, " bytes this server accepts"));
  }
  absl::StatusOr<Validation> v = ValidateArtifact(*point, code, lua_runner_, options_.load_limits);
  if (!v.ok()) return v.status();
  if (!v->passed) {
    return absl::FailedPreconditionError(absl::StrCat("the proposed ", std::string(KindName(point->kind)), " for ", key,
                                                      " does not pass the point's examples: ", v->first_failure));
  }
  if (absl::StatusOr<store::ArtifactRecord> existing = store_->GetArtifact(*digest); existing.ok()) {
    return absl::AlreadyExistsError(absl::StrCat("this code is already revision ", existing->revision, " of ",
                                                 existing->generation_point, " (", existing->digest, ", ",
                                                 std::string(store::ReviewStateName(existing->state)), ")"));
  } else if (!absl::IsNotFound(existing.status())) {
    return existing.status();
  }
  store::ArtifactRecord a;
  a.digest = *digest;
  a.kind = std::string(KindName(point->kind));
  a.generation_point = key;
  a.source = code.source;
  a.options_json = point->kind == ArtifactKind::kRe2Pattern ? code.options_json : "";
  a.provenance.spec_digest = point->digest;
  a.provenance.author = proposal.principal;
  a.validation_report_json = v->report_json;
  store::AuditEntry audit;
  audit.principal = proposal.principal;
  audit.action = "propose";
  audit.detail = proposal.comment;
  absl::StatusOr<store::ArtifactRecord> stored = store_->ProposeArtifact(a, audit);
  if (!stored.ok()) return stored.status();
  return GetArtifact(absl::StrCat("artifacts/", stored->digest.substr(7)));
}

absl::StatusOr<store::Page<store::AuditEntry>> Engine::ListAuditEntries(std::string_view generation_point,
                                                                        std::string_view artifact_digest,
                                                                        const store::PageRequest& page) {
  store::AuditFilter filter;
  if (!generation_point.empty()) {
    absl::StatusOr<std::string> key = ResolveGenerationPointKey(store_, generation_point, "generation_point");
    if (!key.ok()) return key.status();
    filter.generation_point = *std::move(key);
  }
  if (!artifact_digest.empty()) {
    absl::StatusOr<std::string> digest = ResolveArtifactDigest(store_, artifact_digest, "artifact_digest");
    if (!digest.ok()) return digest.status();
    filter.artifact_digest = *std::move(digest);
  }
  return store_->ListAuditEntries(filter, page);
}

}  // namespace rote::orchestrator::engine
