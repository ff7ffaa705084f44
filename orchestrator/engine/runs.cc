// Engine: submitting runs (limits, bindings, idempotency), looking them up, cancelling them,
// reading their recorded values, and watching their events.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "orchestrator/engine/canonical.h"
#include "orchestrator/engine/engine.h"
#include "orchestrator/engine/engine_internal.h"
#include "orchestrator/engine/names.h"
#include "store/digest.h"

namespace rote::orchestrator::engine {

absl::StatusOr<sandbox::Limits> Engine::EffectiveLimits(const RunPolicy& policy) const {
  sandbox::Limits limits = options_.default_limits;
  struct Field {
    const char* name;
    int64_t asked;
    uint64_t* value;
    uint64_t max;
  } fields[] = {
      {"max_instructions", policy.max_instructions, &limits.max_instructions, options_.max_limits.max_instructions},
      {"max_memory_bytes", policy.max_memory_bytes, &limits.max_memory_bytes, options_.max_limits.max_memory_bytes},
      {"max_output_bytes", policy.max_output_bytes, &limits.max_output_bytes, options_.max_limits.max_output_bytes},
  };
  for (const Field& f : fields) {
    if (f.asked < 0) return absl::InvalidArgumentError(absl::StrCat("policy.", f.name, " must not be negative"));
    if (f.asked == 0) continue;
    if (static_cast<uint64_t>(f.asked) > f.max) {
      return absl::InvalidArgumentError(absl::StrCat("policy.", f.name, " = ", f.asked,
                                                     " is above this server's maximum of ", f.max));
    }
    *f.value = static_cast<uint64_t>(f.asked);
  }
  return limits;
}

absl::StatusOr<std::vector<store::Binding>> Engine::ResolveBindings(const BlueprintView& bp, const RunPolicy& policy,
                                                                    std::vector<GenerationPoint>* deferred) {
  std::vector<store::Binding> out;
  std::vector<std::string> problems;
  std::vector<std::string> unbound;
  for (const GenerationPoint& p : bp.points) {
    const std::string key = ArtifactKey(bp.record.name, p.name);
    // The live revision is what runs use; nothing else runs without a person's say.
    absl::StatusOr<std::optional<store::ArtifactRecord>> live = LiveArtifactFor(key, p);
    if (!live.ok()) return live.status();
    if (*live) {
      out.push_back(store::Binding{p.name, (*live)->digest, "live"});
      continue;
    }
    absl::StatusOr<std::optional<store::ArtifactRecord>> pending =
        NewestArtifactFor(key, p, store::ReviewState::kPending);
    if (!pending.ok()) return pending.status();
    if (*pending && policy.allow_pending) {
      out.push_back(store::Binding{p.name, (*pending)->digest, "pending"});
      continue;
    }
    if (*pending) {
      problems.push_back(absl::StrCat("'", p.name, "' has no live revision; revision ", (*pending)->revision, " (",
                                      (*pending)->digest, ") is pending review: a reviewer approves it with `rote "
                                      "artifacts approve artifacts/", (*pending)->digest.substr(7), "`"));
      continue;
    }
    absl::StatusOr<std::optional<store::ArtifactRecord>> approved =
        NewestArtifactFor(key, p, store::ReviewState::kApproved);
    if (!approved.ok()) return approved.status();
    if (*approved) {
      problems.push_back(absl::StrCat("'", p.name, "' has no live revision; revision ", (*approved)->revision, " (",
                                      (*approved)->digest, ") is approved: a reviewer makes it live with `rote "
                                      "artifacts promote artifacts/", (*approved)->digest.substr(7), "`"));
      continue;
    }
    if (generator_ != nullptr && policy.allow_generation) {
      deferred->push_back(p);
      continue;
    }
    unbound.push_back(absl::StrCat(p.name, " (", KindName(p.kind), ")"));
  }
  if (!unbound.empty()) {
    problems.push_back(absl::StrCat(
        "unbound generation points: ", absl::StrJoin(unbound, ", "),
        ". Bind them with a lockfile (register the blueprint with ", bp.record.name, ".lock beside it; `rote "
        "blueprints lock ", bp.record.name, " --skeleton` writes one to fill in, see docs/blueprints.md), propose "
        "code for them (`rote artifacts propose`)",
        generator_ == nullptr ? ", or start the server with --model and submit with --allow-generation"
                              : ", or submit with --allow-generation"));
  }
  if (!problems.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("blueprint '", bp.record.name, "' cannot run: ",
                                                      absl::StrJoin(problems, "; ")));
  }
  return out;
}

absl::StatusOr<store::RunRecord> Engine::SubmitRun(const SubmitRequest& req) {
  {
    std::lock_guard lock(mu_);
    if (draining_ || stopping_) {
      return absl::UnavailableError(
          "the server is draining (shutting down) and admits no new runs; submit to another server or again "
          "once it has restarted");
    }
  }
  if (req.request_id.size() > 128 ||
      std::any_of(req.request_id.begin(), req.request_id.end(), [](char c) { return c < 0x21 || c > 0x7e; })) {
    return absl::InvalidArgumentError("request_id must be at most 128 printable ASCII characters without spaces");
  }
  if (req.policy.allow_pending && !req.may_run_unreviewed) {
    return absl::PermissionDeniedError(absl::StrCat(
        "'", req.principal, "' may not run unreviewed code (allow_pending): only a principal with the review role "
        "may, and only on a server started with --allow-unreviewed=reviewers; approve the pending revisions "
        "instead (`rote artifacts list --state pending`)"));
  }
  if (req.policy.generation_retry < 0 || req.policy.generation_retry > 1000) {
    return absl::InvalidArgumentError("policy.generation_retry must be between 0 and 1000");
  }
  absl::StatusOr<store::BlueprintRecord> record = ResolveBlueprint(req.blueprint);
  if (!record.ok()) return record.status();
  absl::StatusOr<Canonical> input = CanonicalizeJson(req.input_json);
  if (!input.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("input_json is not valid JSON: ", input.status().message()));
  }
  absl::StatusOr<sandbox::Limits> limits = EffectiveLimits(req.policy);
  if (!limits.ok()) return limits.status();
  const std::string profile = EngineProfileJson(*limits);
  const std::string request_digest = store::Sha256Digest(absl::StrCat(
      record->digest, "\n", input->digest, "\n", profile, "\n", req.policy.allow_generation ? "g" : "-",
      req.policy.allow_pending ? "p" : "-",
      req.policy.generation_retry != 0 ? absl::StrCat("\nretry ", req.policy.generation_retry) : ""));

  if (!req.request_id.empty()) {
    absl::StatusOr<store::IdempotencyRecord> earlier = store_->GetIdempotency(req.principal, req.request_id);
    if (earlier.ok()) {
      if (earlier->request_digest != request_digest) {
        return absl::InvalidArgumentError(absl::StrCat(
            "request_id ", QuoteInput(req.request_id), " was already used for a different request; use a new request_id"));
      }
      return GetRun(earlier->response);
    }
    if (!absl::IsNotFound(earlier.status())) return earlier.status();
  }

  absl::StatusOr<BlueprintView> bp = ViewOf(*std::move(record));
  if (!bp.ok()) return bp.status();
  std::vector<GenerationPoint> deferred;
  absl::StatusOr<std::vector<store::Binding>> bindings = ResolveBindings(*bp, req.policy, &deferred);
  if (!bindings.ok()) return bindings.status();

  if (absl::StatusOr<store::BlobRef> blob = store_->PutBlob(input->json); !blob.ok()) return blob.status();
  store::NewRun run;
  run.blueprint_digest = bp->record.digest;
  run.input_digest = input->digest;
  run.bindings = *std::move(bindings);
  run.engine_profile_json = profile;
  run.submitter = req.principal;
  run.request_id = req.request_id;
  if (req.policy.allow_pending) run.unreviewed_allowed_by = req.principal;
  // The run's first events are written with it: a replica that claims it at once finds them.
  std::vector<store::NewRunEvent> first_events = {EventBus::Stored({RunEvent::State(store::RunState::kPending)})};
  if (!deferred.empty()) first_events.push_back(PolicyEvent(req.policy));
  absl::StatusOr<store::CreateRunResult> created = store_->CreateRunWithEvents(run, first_events);
  events_.Notify();
  if (!created.ok()) return created.status();
  if (!created->created) return created->run;  // a concurrent retry made it first
  const int64_t id = created->run.id;
  if (!req.request_id.empty()) {
    store::IdempotencyRecord idem;
    idem.principal = req.principal;
    idem.request_id = req.request_id;
    idem.request_digest = request_digest;
    idem.response = RunName(id);
    if (absl::StatusOr<store::IdempotencyRecord> put = store_->PutIdempotency(idem); !put.ok()) return put.status();
  }
  if (shared_queue_) {
    // Queued in the database: this replica's claimer, or another replica's, takes it.
    {
      std::lock_guard lock(mu_);
      claim_poke_ = true;
    }
    claim_cv_.notify_all();
    return created->run;
  }
  auto control = std::make_shared<RunControl>();
  control->policy = req.policy;
  control->principal = req.principal;
  control->blueprint = bp->record.name;
  control->deferred = std::move(deferred);
  {
    std::lock_guard lock(mu_);
    if (stopping_) return absl::UnavailableError("the server is shutting down; the run stays pending until it restarts");
  }
  Enqueue(id, std::move(control));
  return created->run;
}

absl::StatusOr<store::RunRecord> Engine::GetRun(std::string_view name) {
  absl::StatusOr<int64_t> id = ParseRunName(name);
  if (!id.ok()) return id.status();
  absl::StatusOr<store::RunRecord> run = store_->GetRun(*id);
  if (absl::IsNotFound(run.status())) return absl::NotFoundError(absl::StrCat("no run ", RunName(*id)));
  return run;
}

absl::StatusOr<store::Page<store::RunRecord>> Engine::ListRuns(std::string_view blueprint,
                                                               std::optional<store::RunState> state,
                                                               std::string_view submitter,
                                                               const store::PageRequest& page) {
  store::RunFilter filter;
  filter.state = state;
  filter.submitter = std::string(submitter);
  if (!blueprint.empty()) {
    absl::StatusOr<BlueprintName> parsed = ParseBlueprintName(blueprint);
    if (!parsed.ok()) return parsed.status();
    if (!parsed->digest.empty()) {
      filter.blueprint_digest = parsed->digest;
    } else {
      absl::StatusOr<store::BlueprintRecord> bp = ResolveBlueprint(blueprint);
      if (!bp.ok()) return bp.status();
      filter.blueprint_digest = bp->digest;
    }
  }
  return store_->ListRuns(filter, page);
}

absl::StatusOr<store::RunRecord> Engine::CancelRun(std::string_view name, const std::string& principal) {
  absl::StatusOr<store::RunRecord> run = GetRun(name);
  if (!run.ok()) return run.status();
  if (store::IsTerminal(run->state)) {
    return absl::FailedPreconditionError(absl::StrCat(RunName(run->id), " already ", StateWord(run->state),
                                                      "; only pending or running runs can be cancelled"));
  }
  const std::string reason = absl::StrCat("cancelled by ", principal);
  std::shared_ptr<RunControl> control;
  {
    std::lock_guard lock(mu_);
    auto it = active_.find(run->id);
    if (it != active_.end()) control = it->second;
  }
  if (control == nullptr) {
    // Not in this process's queue (e.g. left pending by a server that was stopped).
    if (absl::Status s = FinishAndAnnounce(run->id, store::RunOutcome{store::RunState::kCancelled, "", reason}); !s.ok()) {
      return s;
    }
    return store_->GetRun(run->id);
  }
  bool finish_here = false;
  {
    std::lock_guard lock(control->mu);
    if (!control->started) {
      control->cancelled = true;
      finish_here = true;
    }
  }
  if (finish_here) {
    absl::Status s = FinishAndAnnounce(run->id, store::RunOutcome{store::RunState::kCancelled, "", reason});
    if (!s.ok()) return s;
    return store_->GetRun(run->id);
  }
  control->interrupt.Interrupt(absl::CancelledError(reason));
  {
    // The worker stops at the blueprint's next instruction or artifact call.
    std::unique_lock lock(mu_);
    finished_cv_.wait_for(lock, std::chrono::seconds(10), [&] { return active_.count(run->id) == 0; });
  }
  return store_->GetRun(run->id);
}

absl::StatusOr<std::string> Engine::OutputJson(const store::RunRecord& run) {
  if (run.output_digest.empty()) return std::string();
  return store_->GetBlob(run.output_digest);
}

absl::StatusOr<std::string> Engine::RunValue(const store::RunRecord& run, std::string_view digest) {
  if (digest.empty()) {
    if (run.state != store::RunState::kSucceeded || run.output_digest.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(RunName(run.id), " is ", StateWord(run.state),
                                                        "; only a succeeded run has an output"));
    }
    digest = run.output_digest;
  }
  if (!store::IsValidDigest(digest)) {
    return absl::InvalidArgumentError("digest must be 'sha256:' followed by 64 lowercase hex digits");
  }
  bool recorded = digest == run.input_digest || digest == run.output_digest;
  if (!recorded) {
    absl::StatusOr<std::vector<store::StepRecord>> steps = store_->ListSteps(run.id);
    if (!steps.ok()) return steps.status();
    recorded = std::any_of(steps->begin(), steps->end(), [&](const store::StepRecord& s) {
      return s.input_digest == digest || s.output_digest == digest;
    });
  }
  // Only values of this run: the digest of anything else (another run's input, a prompt) says
  // nothing about whether it is stored.
  if (!recorded) {
    return absl::NotFoundError(absl::StrCat(RunName(run.id), " recorded no value with digest ", std::string(digest),
                                            "; use its input_digest, output_digest or a step's digests"));
  }
  return store_->GetBlob(digest);
}

absl::Status Engine::WatchRun(std::string_view name, const std::function<bool(const RunEvent&)>& send,
                              const std::function<bool()>& stop) {
  absl::StatusOr<store::RunRecord> run = GetRun(name);
  if (!run.ok()) return run.status();
  const int64_t id = run->id;
  return events_.Watch(id, send, stop, [this, id] { return IsActive(id); });
}

}  // namespace rote::orchestrator::engine
