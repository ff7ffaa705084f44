// Engine: registering blueprints with their lockfiles, looking them up, locking them.
#include <algorithm>
#include <functional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "orchestrator/engine/artifact.h"
#include "orchestrator/engine/engine.h"
#include "orchestrator/engine/engine_internal.h"
#include "orchestrator/engine/lockfile.h"
#include "orchestrator/engine/names.h"
#include "orchestrator/engine/resolve.h"
#include "orchestrator/engine/validate.h"
#include "spdlog/spdlog.h"
#include "store/digest.h"

namespace rote::orchestrator::engine {
namespace {

constexpr size_t kMaxFilenameBytes = 255;

// An artifact a lockfile binds, checked against its point's spec.
struct LockedArtifact {
  LockEntry entry;
  const GenerationPoint* point;
  ArtifactCode code;
  std::string digest;
  std::string report_json;
};

using TooLarge = std::function<absl::Status(const std::string& what, size_t bytes)>;

// Reads and checks the lockfile completely against the loaded blueprint, so that nothing is
// stored for a registration that fails.
absl::StatusOr<std::vector<LockedArtifact>> CheckLockfile(std::string_view lockfile, std::string_view filename,
                                                          const std::string& chunkname, const BlueprintDecl& decl,
                                                          LuaArtifactRunner* lua_runner, const EngineOptions& engine_options,
                                                          const TooLarge& too_large) {
  std::vector<LockedArtifact> locked;
  std::string origin = chunkname;
  if (absl::EndsWith(origin, ".lua")) origin.resize(origin.size() - 4);
  origin = filename.empty() ? std::string("lockfile") : absl::StrCat(origin, ".lock");
  absl::StatusOr<Lockfile> lock = ParseLockfile(lockfile, origin);
  if (!lock.ok()) return lock.status();
  if (!lock->blueprint.empty() && lock->blueprint != decl.name) {
    return absl::InvalidArgumentError(absl::StrCat(origin, ": the lockfile is for blueprint ", QuoteInput(lock->blueprint),
                                                   " but the source declares '", decl.name, "'"));
  }
  std::vector<std::string> declared;
  for (const GenerationPoint& p : decl.points) declared.push_back(p.name);
  for (const LockEntry& e : lock->entries) {
    auto where = absl::StrCat(origin, ":", e.line, ": ");
    auto it = std::find_if(decl.points.begin(), decl.points.end(),
                           [&](const GenerationPoint& p) { return p.name == e.point; });
    if (it == decl.points.end()) {
      return absl::InvalidArgumentError(absl::StrCat(where, "point ", QuoteInput(e.point), " is not declared by blueprint '",
                                                     decl.name, "' (it declares: ", absl::StrJoin(declared, ", "), ")"));
    }
    for (const LockedArtifact& l : locked) {
      if (l.entry.point == e.point) {
        return absl::InvalidArgumentError(absl::StrCat(where, "point '", e.point, "' is locked twice (also at line ",
                                                       l.entry.line, ")"));
      }
    }
    if (it->kind != e.kind) {
      return absl::InvalidArgumentError(absl::StrCat(where, "point '", e.point, "' is a ", KindName(it->kind),
                                                     " in the blueprint but a ", KindName(e.kind), " in the lockfile"));
    }
    if (!e.spec_digest.empty() && e.spec_digest != it->digest) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, "point '", e.point, "' was locked for spec ", QuoteInput(e.spec_digest), " but the blueprint now declares ",
          it->digest, " (its task, signature or examples changed): check that the artifact still fits, then delete "
          "the `spec` line or lock again"));
    }
    absl::StatusOr<std::string> options = NormalizeOptions(e.kind, e.options_json);
    if (!options.ok()) return absl::InvalidArgumentError(absl::StrCat(where, options.status().message()));
    ArtifactCode code{e.kind, e.source, *options};
    absl::StatusOr<std::string> digest = ArtifactDigest(code);
    if (!digest.ok()) return absl::InvalidArgumentError(absl::StrCat(where, digest.status().message()));
    if (!e.artifact_digest.empty() && e.artifact_digest != *digest) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, "point '", e.point, "': the lockfile says artifact ", QuoteInput(e.artifact_digest), " but its source hashes to ",
          *digest, "; if you edited the source on purpose, delete the `artifact` line"));
    }
    const std::string artifact_what =
        absl::StrCat("the artifact locked for '", e.point, "' (source, options and validation report)");
    if (const size_t bytes = code.source.size() + code.options_json.size();
        static_cast<int64_t>(bytes) > engine_options.max_blueprint_bytes) {
      return too_large(artifact_what, bytes);
    }
    absl::StatusOr<Validation> v = ValidateArtifact(*it, code, lua_runner, engine_options.load_limits);
    if (!v.ok()) return v.status();
    if (!v->passed) {
      return absl::InvalidArgumentError(absl::StrCat(where, "the artifact locked for '", e.point,
                                                     "' fails its own spec: ", v->first_failure));
    }
    if (const size_t bytes = code.source.size() + code.options_json.size() + v->report_json.size();
        static_cast<int64_t>(bytes) > engine_options.max_blueprint_bytes) {
      return too_large(artifact_what, bytes);
    }
    locked.push_back(LockedArtifact{e, &*it, std::move(code), *std::move(digest), v->report_json});
  }
  return locked;
}

}  // namespace

absl::StatusOr<store::BlueprintRecord> Engine::ResolveBlueprint(std::string_view name) {
  absl::StatusOr<BlueprintName> parsed = ResolveBlueprintName(store_, name);
  if (!parsed.ok()) return parsed.status();
  if (!parsed->digest.empty()) {
    absl::StatusOr<store::BlueprintRecord> bp = store_->GetBlueprint(parsed->digest);
    if (absl::IsNotFound(bp.status())) {
      return absl::NotFoundError(absl::StrCat("no blueprint ", std::string(name), "; register it with `rote blueprints register FILE.lua`"));
    }
    return bp;
  }
  absl::StatusOr<std::vector<store::BlueprintRecord>> all = store_->FindBlueprintsByName(parsed->display_name);
  if (!all.ok()) return all.status();
  if (all->empty()) {
    return absl::NotFoundError(absl::StrCat("no blueprint named '", parsed->display_name,
                                            "'; register it with `rote blueprints register FILE.lua`"));
  }
  return std::move(all->back());
}

absl::StatusOr<BlueprintView> Engine::ViewOf(store::BlueprintRecord record) {
  BlueprintView view;
  for (const store::GenerationSpecRecord& spec : record.generation_points) {
    absl::StatusOr<GenerationPoint> p = PointFromRecord(spec);
    if (!p.ok()) return p.status();
    view.points.push_back(*std::move(p));
  }
  for (const GenerationPoint& p : view.points) {
    absl::StatusOr<std::optional<store::ArtifactRecord>> live = LiveArtifactFor(ArtifactKey(record.name, p.name), p);
    if (!live.ok()) return live.status();
    if (!*live) continue;
    view.bindings.push_back(store::Binding{p.name, (*live)->digest, "live"});
    view.binding_revisions.push_back((*live)->revision);
  }
  view.record = std::move(record);
  return view;
}

absl::StatusOr<BlueprintView> Engine::RegisterBlueprint(std::string_view source, std::string_view lockfile,
                                                        std::string_view filename, const std::string& principal,
                                                        const ApprovalCheck& may_approve) {
  if (source.empty()) return absl::InvalidArgumentError("the blueprint source is empty");
  // The file name reappears in every error about the blueprint and its lockfile.
  if (filename.size() > kMaxFilenameBytes) {
    return absl::InvalidArgumentError(absl::StrCat("filename ", QuoteInput(filename), " is longer than ",
                                                   kMaxFilenameBytes, " bytes"));
  }
  std::string chunkname(filename.empty() ? std::string_view("blueprint.lua") : filename);
  // Registration accepts only what GetBlueprint and GetArtifact can return whole: a request
  // near the message limit would otherwise be stored and then be unreadable forever.
  const auto too_large = [&](const std::string& what, size_t bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        chunkname, ": ", what, " is ", bytes, " bytes, more than the ", options_.max_blueprint_bytes,
        " bytes this server accepts (half its message limit, --max-message-bytes), so that it can be returned whole"));
  };
  if (static_cast<int64_t>(source.size()) > options_.max_blueprint_bytes) return too_large("the source", source.size());
  absl::StatusOr<BlueprintDecl> decl = LoadBlueprint(source, chunkname, options_.load_limits);
  if (!decl.ok()) return decl.status();
  {
    size_t described = source.size();
    // Each point's canonical spec holds its name, task, signature and examples; the rest is
    // its digest, a binding and the message framing.
    for (const GenerationPoint& p : decl->points) described += p.canonical.size() + 256;
    if (static_cast<int64_t>(described) > options_.max_blueprint_bytes) {
      return too_large("the blueprint (its source and the specs of its generation points)", described);
    }
  }

  std::vector<LockedArtifact> locked;
  if (!lockfile.empty()) {
    absl::StatusOr<std::vector<LockedArtifact>> checked =
        CheckLockfile(lockfile, filename, chunkname, *decl, lua_runner_, options_, too_large);
    if (!checked.ok()) return checked.status();
    locked = *std::move(checked);
  }

  store::BlueprintRecord record;
  record.digest = store::Sha256Digest(source);
  record.name = decl->name;
  record.version = decl->version;
  record.source = std::string(source);
  for (const GenerationPoint& p : decl->points) record.generation_points.push_back(p.ToRecord());
  absl::StatusOr<store::BlueprintRecord> stored = store_->PutBlueprint(record);
  if (!stored.ok()) return stored.status();

  for (const LockedArtifact& l : locked) {
    absl::StatusOr<store::ArtifactRecord> artifact = store_->GetArtifact(l.digest);
    if (absl::IsNotFound(artifact.status())) {
      store::ArtifactRecord a;
      a.digest = l.digest;
      a.kind = std::string(KindName(l.code.kind));
      a.generation_point = ArtifactKey(decl->name, l.entry.point);
      a.source = l.code.source;
      a.options_json = l.code.kind == ArtifactKind::kRe2Pattern ? l.code.options_json : "";
      a.provenance.spec_digest = l.point->digest;
      a.provenance.author = "expert";
      a.validation_report_json = l.report_json;
      artifact = store_->PutArtifact(a);
    }
    if (!artifact.ok()) return artifact.status();
    if (artifact->state == store::ReviewState::kRejected) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the artifact locked for '", l.entry.point, "' (", l.digest, ") is revision ", artifact->revision, " of ",
          artifact->generation_point, ", which was rejected in review; replace it in the lockfile (`rote blueprints "
          "lock ", decl->name, "` writes the live revisions), or have a reviewer approve it again with `rote "
          "artifacts approve artifacts/", l.digest.substr(7), "`"));
    }
    // Registering needs only the submit role. Approving goes through the same check as
    // ReviewArtifact: an artifact's digest does not depend on its generation point, so a lockfile
    // holding the source a principal asked the model for would otherwise let that principal
    // approve it, for every point that uses it.
    // A registrant who may review decides what is live; anyone else's lockfile only fills a
    // point that has no live revision yet.
    absl::Status allowed = may_approve ? may_approve(*artifact)
                                       : absl::PermissionDeniedError("registration without an approval check");
    if (!allowed.ok() && !absl::IsPermissionDenied(allowed)) return allowed;
    if (artifact->state == store::ReviewState::kPending) {
      if (allowed.ok()) {
        store::ReviewRequest review;
        review.artifact_digest = l.digest;
        review.principal = principal;
        review.decision = store::ReviewState::kApproved;
        review.comment = absl::StrCat("expert reference artifact from the lockfile of ", decl->name);
        review.expected_etag = artifact->etag;  // the state the check saw
        absl::StatusOr<store::ArtifactRecord> approved = store_->ReviewArtifact(review);
        if (!approved.ok()) return approved.status();
        artifact = *std::move(approved);
      } else {
        spdlog::info("registering {}: the artifact locked for '{}' ({}) stays pending: {}", decl->name,
                     l.entry.point, l.digest, std::string(allowed.message()));
      }
    }
    if (artifact->state == store::ReviewState::kApproved) {
      store::PromoteRequest promote;
      promote.artifact_digest = l.digest;
      promote.principal = principal;
      promote.action = "lockfile";
      promote.comment = absl::StrCat("the lockfile of ", decl->name, " ", decl->version);
      promote.only_if_unset = !allowed.ok();
      absl::StatusOr<store::ArtifactRecord> promoted = store_->PromoteRevision(promote);
      if (!promoted.ok()) return promoted.status();
    }
    absl::Status bound = store_->SetBinding(record.digest, store::Binding{l.entry.point, l.digest, "lockfile"});
    if (!bound.ok()) return bound;
  }
  return ViewOf(*std::move(stored));
}

absl::StatusOr<BlueprintView> Engine::GetBlueprint(std::string_view name) {
  absl::StatusOr<store::BlueprintRecord> bp = ResolveBlueprint(name);
  if (!bp.ok()) return bp.status();
  return ViewOf(*std::move(bp));
}

absl::StatusOr<store::Page<BlueprintView>> Engine::ListBlueprints(std::string_view display_name,
                                                                  const store::PageRequest& page) {
  absl::StatusOr<store::Page<store::BlueprintRecord>> p =
      store_->ListBlueprints(store::BlueprintFilter{std::string(display_name)}, page);
  if (!p.ok()) return p.status();
  store::Page<BlueprintView> out;
  out.next_page_token = p->next_page_token;
  for (store::BlueprintRecord& r : p->items) {
    absl::StatusOr<BlueprintView> v = ViewOf(std::move(r));
    if (!v.ok()) return v.status();
    out.items.push_back(*std::move(v));
  }
  return out;
}

absl::StatusOr<std::optional<store::ArtifactRecord>> Engine::LiveArtifactFor(const std::string& key,
                                                                             const GenerationPoint& point) {
  absl::StatusOr<store::LiveRevision> live = store_->GetLiveRevision(key, point.digest);
  if (absl::IsNotFound(live.status())) return std::nullopt;
  if (!live.ok()) return live.status();
  absl::StatusOr<store::ArtifactRecord> a = store_->GetArtifact(live->artifact_digest);
  if (!a.ok()) return a.status();
  if (a->kind != KindName(point.kind) || a->state != store::ReviewState::kApproved) return std::nullopt;
  return *std::move(a);
}

absl::StatusOr<std::optional<store::ArtifactRecord>> Engine::NewestArtifactFor(const std::string& key,
                                                                               const GenerationPoint& point,
                                                                               store::ReviewState state) {
  std::optional<store::ArtifactRecord> newest;
  store::PageRequest page;
  page.page_size = 1000;
  do {
    absl::StatusOr<store::Page<store::ArtifactRecord>> p =
        store_->ListArtifacts(store::ArtifactFilter{key, state}, page);
    if (!p.ok()) return p.status();
    for (store::ArtifactRecord& a : p->items) {
      if (a.provenance.spec_digest == point.digest && a.kind == KindName(point.kind)) newest = std::move(a);
    }
    page.page_token = p->next_page_token;
  } while (!page.page_token.empty());
  return newest;
}

}  // namespace rote::orchestrator::engine
