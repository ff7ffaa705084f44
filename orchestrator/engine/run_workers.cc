// Engine: the queue and the worker pool, and executing one run (generating its deferred code,
// then the blueprint under the journal).
#include "absl/strings/str_cat.h"
#include "orchestrator/engine/artifact.h"
#include "orchestrator/engine/engine.h"
#include "orchestrator/engine/engine_internal.h"
#include "orchestrator/engine/journal.h"
#include "orchestrator/engine/log_context.h"
#include "spdlog/spdlog.h"

namespace rote::orchestrator::engine {

using sandbox::Value;

void Engine::Enqueue(int64_t run_id, std::shared_ptr<RunControl> control) {
  {
    std::lock_guard lock(mu_);
    active_[run_id] = control;
    queue_.push_back(Job{run_id, std::move(control)});
  }
  queue_cv_.notify_one();
}

void Engine::WorkerLoop() {
  while (true) {
    Job job;
    {
      std::unique_lock lock(mu_);
      queue_cv_.wait(lock, [&] { return stopping_ || draining_ || !queue_.empty(); });
      if (stopping_ || draining_) return;  // queued runs stay pending; the next start takes them up
      job = std::move(queue_.front());
      queue_.pop_front();
      executing_[job.run_id] = job.control;
    }
    ExecuteRun(job);
    {
      std::lock_guard lock(mu_);
      active_.erase(job.run_id);
      executing_.erase(job.run_id);
      claim_poke_ = true;  // a free worker: the claimer takes the next run from the database
    }
    finished_cv_.notify_all();
    claim_cv_.notify_all();
    events_.Notify();
  }
}

bool Engine::IsActive(int64_t run_id) {
  std::lock_guard lock(mu_);
  return active_.count(run_id) != 0;
}

void Engine::ExecuteRun(const Job& job) {
  RunControl& control = *job.control;
  {
    std::lock_guard lock(control.mu);
    if (control.cancelled) return;
    control.started = true;
  }
  const int64_t id = job.run_id;
  // Every line logged while the run executes names it.
  const ScopedLogContext log_scope(LogContext{control.principal, RunName(id), ""});
  auto fail = [&](store::RunState state, const std::string& error, bool interrupted = false) {
    bool requeue = false;
    {
      std::lock_guard lock(control.mu);
      requeue = control.requeue;
      if (control.lease_lost) {
        // Another replica runs it now (or it ended elsewhere); the store would refuse the write.
        spdlog::warn("run {}: this replica lost its lease; the attempt ends unrecorded ({})", id, error);
        return;
      }
    }
    // A draining server stopped it: back to the queue, to run again from its start (a person's
    // cancel stays a cancel).
    if (requeue && state != store::RunState::kCancelled) {
      absl::Status s = events_.Requeue(
          id, "re-queued by a draining server: the run stopped before it finished and runs again from its start "
              "on the next server");
      if (s.ok()) {
        std::lock_guard lock(mu_);
        ++requeued_by_drain_;
        return;
      }
      spdlog::error("run {}: cannot re-queue it ({}); recording it as interrupted", id, std::string(s.message()));
      interrupted = true;
    }
    absl::Status s = FinishAndAnnounce(id, store::RunOutcome{state, "", RecordedError(error), interrupted});
    if (!s.ok()) spdlog::error("run {}: cannot record its end ({}): {}", id, StateWord(state), std::string(s.message()));
  };
  // A run claimed from the database is running already, under this replica's lease.
  absl::StatusOr<store::RunRecord> run =
      control.claimed ? absl::StatusOr<store::RunRecord>(*control.claimed) : store_->StartRun(id);
  if (!run.ok()) {
    spdlog::warn("run {} did not start: {}", id, std::string(run.status().message()));
    return;
  }
  // Faults of the store before the blueprint executes stop the run without a verdict, as an
  // interruption does.
  if (absl::Status s = events_.Append(id, {RunEvent::State(store::RunState::kRunning)}); !s.ok()) {
    return fail(store::RunState::kFailed, absl::StrCat("recording the run failed: ", s.message()), /*interrupted=*/true);
  }
  absl::StatusOr<store::BlueprintRecord> bp = store_->GetBlueprint(run->blueprint_digest);
  if (!bp.ok()) return fail(store::RunState::kFailed, std::string(bp.status().message()), /*interrupted=*/true);

  std::vector<store::Binding> bindings = run->bindings;
  // All unbound points go to the generator at once: their attempts share the model's batches.
  std::vector<Generator::Request> requests;
  for (const GenerationPoint& p : control.deferred) {
    GenerateContext ctx;
    ctx.generation_point_key = ArtifactKey(bp->name, p.name);
    ctx.blueprint_digest = bp->digest;
    ctx.run_id = id;
    ctx.principal = control.principal;
    ctx.retry = control.policy.generation_retry;
    ctx.progress = [this, id](const std::string& line) {
      events_.Append(id, {RunEvent::GenerationProgress(line)}).IgnoreError();
    };
    ctx.cancelled = [&control] { return control.interrupt.interrupted(); };
    requests.push_back(Generator::Request{p.ToRecord(), std::move(ctx)});
  }
  std::vector<absl::StatusOr<GeneratedArtifact>> generated;
  if (!requests.empty() && !control.interrupt.interrupted()) generated = generator_->GenerateTogether(requests);
  for (size_t i = 0; i < generated.size(); ++i) {
    const GenerationPoint& p = control.deferred[i];
    absl::StatusOr<GeneratedArtifact>& g = generated[i];
    if (!g.ok()) return fail(store::RunState::kFailed, absl::StrCat("generating '", p.name, "': ", g.status().message()));
    absl::StatusOr<store::ArtifactRecord> a = store_->GetArtifact(g->artifact_digest);
    if (!a.ok()) return fail(store::RunState::kFailed, std::string(a.status().message()));
    const bool approved = a->state == store::ReviewState::kApproved;
    if (a->state == store::ReviewState::kRejected || (!approved && !control.policy.allow_pending)) {
      return fail(store::RunState::kFailed,
                  absl::StrCat("generated artifact ", a->digest, " (revision ", a->revision, " of ", a->generation_point,
                               ") is ", a->state == store::ReviewState::kRejected ? "rejected" : "pending review",
                               a->state == store::ReviewState::kRejected
                                   ? "; change the task, the examples or the decoding"
                                   : absl::StrCat(": a reviewer approves it with `rote artifacts approve artifacts/",
                                                  a->digest.substr(7), "`, then submit again")));
    }
    store::Binding b{p.name, g->artifact_digest, approved ? "generated" : "pending"};
    if (absl::Status s = store_->AddRunBindings(id, {b}); !s.ok()) return fail(store::RunState::kFailed, std::string(s.message()));
    bindings.push_back(b);
  }

  absl::StatusOr<std::vector<BoundArtifact>> artifacts = LoadArtifacts(store_, bindings);
  if (!artifacts.ok()) return fail(store::RunState::kFailed, std::string(artifacts.status().message()));
  absl::StatusOr<std::string> input_json = store_->GetBlob(run->input_digest);
  if (!input_json.ok()) return fail(store::RunState::kFailed, std::string(input_json.status().message()));
  absl::StatusOr<Value> input = sandbox::ParseJson(*input_json);
  if (!input.ok()) return fail(store::RunState::kFailed, std::string(input.status().message()));
  absl::StatusOr<sandbox::Limits> limits = LimitsFromProfile(run->engine_profile_json);
  if (!limits.ok()) return fail(store::RunState::kFailed, std::string(limits.status().message()));

  Journal journal(store_, &events_, id);
  ExecuteOptions opts;
  opts.limits = *limits;
  opts.deadline = sandbox::LuaState::Clock::now() + options_.run_deadline;
  opts.lua_runner = lua_runner_;
  opts.observer = &journal;
  opts.interrupt = &control.interrupt;
  absl::StatusOr<Canonical> output = ExecuteBlueprint(bp->source, absl::StrCat(bp->name, ".lua"), *artifacts, *input, opts);
  if (absl::Status s = journal.Flush(); !s.ok()) {
    return fail(store::RunState::kFailed, absl::StrCat("recording the journal failed: ", s.message()),
                /*interrupted=*/true);
  }
  if (output.ok()) {
    absl::StatusOr<store::BlobRef> blob = store_->PutBlob(output->json);
    if (!blob.ok()) return fail(store::RunState::kFailed, absl::StrCat("storing the output failed: ", blob.status().message()));
    absl::Status s = FinishAndAnnounce(id, store::RunOutcome{store::RunState::kSucceeded, output->digest, ""});
    if (absl::IsAborted(s)) {
      spdlog::warn("run {}: its output is not recorded here: {}", id, std::string(s.message()));
    } else if (!s.ok()) {
      spdlog::error("run {}: cannot record its success: {}", id, std::string(s.message()));
    }
    return;
  }
  const absl::Status& st = output.status();
  if (absl::IsCancelled(st)) return fail(store::RunState::kCancelled, std::string(st.message()));
  if (absl::IsDeadlineExceeded(st)) {
    return fail(store::RunState::kFailed,
                absl::StrCat("infrastructure timeout after ", options_.run_deadline.count(),
                             " ms (not a property of the blueprint): ", st.message()),
                /*interrupted=*/true);
  }
  // The blueprint's own errors and its limits are verdicts a replay reproduces; anything else
  // (the server stopping, a broken worker, the store) stopped the run before it had one.
  fail(store::RunState::kFailed, std::string(st.message()),
       /*interrupted=*/!absl::IsFailedPrecondition(st) && !absl::IsResourceExhausted(st));
}

}  // namespace rote::orchestrator::engine
