#include "orchestrator/engine/replay.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "orchestrator/engine/engine.h"
#include "orchestrator/engine/engine_internal.h"
#include "store/digest.h"

namespace rote::orchestrator::engine {

using sandbox::Map;
using sandbox::Value;

namespace {

// JSON of one journaled step for replay reports; `input`/`output` are canonical JSON texts.
std::string StepJson(int64_t index, std::string_view point, std::string_view artifact,
                     std::string_view input_json, std::string_view output_json) {
  Map m;
  m["index"] = Value::Int(index);
  m["generation_point"] = Value::String(std::string(point));
  m["artifact"] = Value::String(std::string(artifact));
  auto parse = [](std::string_view j) {
    absl::StatusOr<Value> v = sandbox::ParseJson(j);
    return v.ok() ? *v : Value::String(std::string(j));
  };
  if (!input_json.empty()) m["input"] = parse(input_json);
  if (!output_json.empty()) m["output"] = parse(output_json);
  absl::StatusOr<std::string> j = sandbox::CanonicalJson(Value::FromMap(std::move(m)));
  return j.ok() ? *j : std::string("{}");
}

std::string ErrorJson(std::string_view message) {
  Map m;
  m["error"] = Value::String(std::string(message));
  absl::StatusOr<std::string> j = sandbox::CanonicalJson(Value::FromMap(std::move(m)));
  return j.ok() ? *j : std::string("{\"error\":\"(not UTF-8)\"}");
}

// The parts of an engine profile that decide what code computes; a replay under different ones
// would compare apples and pears.
absl::StatusOr<std::string> SemanticProfile(std::string_view profile_json) {
  absl::StatusOr<Value> v = sandbox::ParseJson(profile_json);
  if (!v.ok() || !v->is_map()) return absl::DataLossError("the run's engine profile is unreadable");
  Map m;
  for (const char* key : {"re2", "sandbox"}) {
    auto it = v->as_map().find(key);
    if (it != v->as_map().end()) m[key] = it->second;
  }
  return sandbox::CanonicalJson(Value::FromMap(std::move(m)));
}

// Compares a replay with the recorded journal; stops at the first difference.
class ReplayComparator final : public StepObserver {
 public:
  ReplayComparator(const std::vector<store::StepRecord>& recorded,
                   const std::map<std::string, std::string>& blobs)
      : recorded_(recorded), blobs_(blobs) {}

  absl::Status BeforeCall(const StepCall& step) override {
    const size_t i = static_cast<size_t>(step.index);
    if (i >= recorded_.size()) {
      return Mismatch(step.index, "null", StepJson(step.index, step.point, step.artifact_digest, step.input.json, ""));
    }
    const store::StepRecord& r = recorded_[i];
    if (r.generation_point != step.point || r.artifact_digest != step.artifact_digest ||
        r.input_digest != step.input.digest) {
      return Mismatch(step.index, RecordedJson(r),
                      StepJson(step.index, step.point, step.artifact_digest, step.input.json, ""));
    }
    return absl::OkStatus();
  }

  absl::Status AfterCall(const StepCall& step) override {
    const store::StepRecord& r = recorded_[static_cast<size_t>(step.index)];
    if (r.output_digest != step.output.digest) {
      return Mismatch(step.index, RecordedJson(r),
                      StepJson(step.index, step.point, step.artifact_digest, step.input.json, step.output.json));
    }
    ++compared_;
    return absl::OkStatus();
  }

  void Log(std::string_view) override {}

  bool diverged() const { return diverged_; }
  int64_t compared() const { return compared_; }
  const ReplayResult& mismatch() const { return mismatch_; }

  std::string RecordedJson(const store::StepRecord& r) const {
    auto blob = [&](const std::string& d) {
      auto it = blobs_.find(d);
      return it == blobs_.end() ? std::string() : it->second;
    };
    return StepJson(r.index, r.generation_point, r.artifact_digest, blob(r.input_digest), blob(r.output_digest));
  }

 private:
  absl::Status Mismatch(int64_t index, std::string recorded, std::string replayed) {
    diverged_ = true;
    mismatch_.matched = false;
    mismatch_.first_mismatch_step = index;
    mismatch_.recorded_json = std::move(recorded);
    mismatch_.replayed_json = std::move(replayed);
    return absl::AbortedError(absl::StrCat("replay diverged at step ", index));
  }

  const std::vector<store::StepRecord>& recorded_;
  const std::map<std::string, std::string>& blobs_;
  bool diverged_ = false;
  int64_t compared_ = 0;
  ReplayResult mismatch_;
};

}  // namespace

absl::StatusOr<ReplayResult> Replayer::Replay(const store::RunRecord& run, std::string_view current_profile) {
  if (run.state != store::RunState::kSucceeded && run.state != store::RunState::kFailed) {
    return absl::FailedPreconditionError(absl::StrCat(
        RunName(run.id), " is ", StateWord(run.state),
        "; only succeeded or failed runs have a complete record to replay"));
  }
  if (run.interrupted) {
    return absl::FailedPreconditionError(absl::StrCat(
        RunName(run.id), " failed because it was interrupted, not by its blueprint (", run.error,
        "); like a cancelled run it has no complete record to replay: submit it again"));
  }
  absl::StatusOr<store::BlueprintRecord> bp = store_->GetBlueprint(run.blueprint_digest);
  if (!bp.ok()) return bp.status();
  // A run executes only once every generation point is bound, and its bindings are recorded
  // before it executes; a failed run that lacks one failed before its blueprint ran (generating
  // the code failed, the generated artifact was pending review, the point was unbound). Replay
  // refuses it rather than calling it equal: that failure was decided by what the run's record
  // does not hold (the model, the generation cache, review states and policy at that moment),
  // which replay never consults, so it would certify a verdict it did not recompute; and it
  // cannot execute the blueprint either, having no code for the point.
  std::vector<std::string> unbound;
  for (const store::GenerationSpecRecord& p : bp->generation_points) {
    if (std::none_of(run.bindings.begin(), run.bindings.end(),
                     [&](const store::Binding& b) { return b.generation_point == p.name; })) {
      unbound.push_back(absl::StrCat("'", p.name, "'"));
    }
  }
  if (run.state == store::RunState::kFailed && !unbound.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        RunName(run.id), " failed before its blueprint executed: it has no artifact for generation point ",
        absl::StrJoin(unbound, ", "), " (", run.error,
        "); replay neither generates nor reviews code, so there is no execution to replay: bind an approved "
        "artifact and submit it again"));
  }
  if (std::string now = store::Sha256Digest(bp->source); now != run.blueprint_digest) {
    return absl::FailedPreconditionError(absl::StrCat(
        "blueprint ", bp->name, " changed since ", RunName(run.id), " ran: the run used ", run.blueprint_digest,
        " but the stored source now hashes to ", now, "; a replay would not compare like with like"));
  }
  absl::StatusOr<BlueprintDecl> decl = LoadBlueprint(bp->source, absl::StrCat(bp->name, ".lua"), options_.load_limits);
  if (!decl.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("blueprint ", bp->name, " no longer loads: ", decl.status().message()));
  }
  for (const GenerationPoint& p : decl->points) {
    auto spec = std::find_if(bp->generation_points.begin(), bp->generation_points.end(),
                             [&](const store::GenerationSpecRecord& s) { return s.name == p.name; });
    if (spec == bp->generation_points.end() || spec->digest != p.digest) {
      return absl::FailedPreconditionError(absl::StrCat(
          "blueprint ", bp->name, " changed since ", RunName(run.id), " ran: generation point '", p.name,
          "' now has spec ", p.digest, spec == bp->generation_points.end() ? " and was not declared then" : absl::StrCat(", recorded ", spec->digest)));
    }
  }
  absl::StatusOr<std::string> recorded_semantics = SemanticProfile(run.engine_profile_json);
  absl::StatusOr<std::string> current_semantics = SemanticProfile(current_profile);
  if (!recorded_semantics.ok()) return recorded_semantics.status();
  if (!current_semantics.ok()) return current_semantics.status();
  if (*recorded_semantics != *current_semantics) {
    return absl::FailedPreconditionError(absl::StrCat(RunName(run.id), " ran under engine profile ", *recorded_semantics,
                                                      " but this server runs ", *current_semantics));
  }
  absl::StatusOr<sandbox::Limits> limits = LimitsFromProfile(run.engine_profile_json);
  if (!limits.ok()) return limits.status();
  absl::StatusOr<std::vector<BoundArtifact>> artifacts = LoadArtifacts(store_, run.bindings);
  if (!artifacts.ok()) return artifacts.status();
  absl::StatusOr<std::string> input_json = store_->GetBlob(run.input_digest);
  if (!input_json.ok()) return input_json.status();
  absl::StatusOr<Value> input = sandbox::ParseJson(*input_json);
  if (!input.ok()) return absl::DataLossError(absl::StrCat("the recorded input does not parse: ", input.status().message()));
  absl::StatusOr<std::vector<store::StepRecord>> steps = store_->ListSteps(run.id);
  if (!steps.ok()) return steps.status();
  // Every recorded value is read (and so verified) up front: a tampered journal is DATA_LOSS even
  // when the replay would never look at that step's value.
  std::map<std::string, std::string> blobs;
  for (const store::StepRecord& s : *steps) {
    for (const std::string* d : {&s.input_digest, &s.output_digest}) {
      if (blobs.count(*d)) continue;
      absl::StatusOr<std::string> b = store_->GetBlob(*d);
      if (!b.ok()) return b.status();
      blobs[*d] = *std::move(b);
    }
  }
  std::string recorded_output;
  if (run.state == store::RunState::kSucceeded) {
    absl::StatusOr<std::string> out = store_->GetBlob(run.output_digest);
    if (!out.ok()) return out.status();
    recorded_output = *std::move(out);
  }

  ReplayComparator comparator(*steps, blobs);
  ExecuteOptions opts;
  opts.limits = *limits;
  opts.deadline = sandbox::LuaState::Clock::now() + options_.run_deadline;
  opts.lua_runner = lua_runner_;
  opts.observer = &comparator;
  absl::StatusOr<Canonical> output = ExecuteBlueprint(bp->source, absl::StrCat(bp->name, ".lua"), *artifacts, *input, opts);
  if (comparator.diverged()) {
    ReplayResult r = comparator.mismatch();
    r.steps_compared = comparator.compared();
    return r;
  }
  ReplayResult r;
  r.steps_compared = comparator.compared();
  if (!output.ok() && !absl::IsFailedPrecondition(output.status()) && !absl::IsResourceExhausted(output.status())) {
    return output.status();  // infrastructure (deadline, store): no verdict
  }
  if (static_cast<size_t>(r.steps_compared) < steps->size()) {
    r.matched = false;
    r.first_mismatch_step = r.steps_compared;
    r.recorded_json = comparator.RecordedJson((*steps)[static_cast<size_t>(r.steps_compared)]);
    r.replayed_json = "null";
    return r;
  }
  std::string replayed = output.ok() ? output->json : ErrorJson(RecordedError(std::string(output.status().message())));
  std::string recorded = run.state == store::RunState::kSucceeded ? recorded_output : ErrorJson(run.error);
  r.output_digest = output.ok() ? output->digest : "";
  r.matched = replayed == recorded;
  if (!r.matched) {
    r.first_mismatch_step = -1;
    r.recorded_json = std::move(recorded);
    r.replayed_json = std::move(replayed);
  }
  return r;
}

absl::StatusOr<ReplayResult> Engine::ReplayRun(std::string_view name) {
  absl::StatusOr<store::RunRecord> run = GetRun(name);
  if (!run.ok()) return run.status();
  return Replayer(store_, lua_runner_, options_).Replay(*run, EngineProfileJson(options_.default_limits));
}

}  // namespace rote::orchestrator::engine
