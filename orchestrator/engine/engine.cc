#include "orchestrator/engine/engine.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "orchestrator/engine/artifact.h"
#include "orchestrator/engine/engine_internal.h"
#include "orchestrator/engine/regex_artifact.h"
#include "spdlog/spdlog.h"

namespace rote::orchestrator::engine {

using sandbox::Map;
using sandbox::Value;

// ---- what the engine's files share ---------------------------------------------------------

std::string ArtifactKey(std::string_view blueprint_name, std::string_view point) {
  return absl::StrCat(std::string(blueprint_name), "/", std::string(point));
}

std::string StateWord(store::RunState s) { return std::string(store::RunStateName(s)); }

std::string RunName(int64_t id) { return absl::StrCat("runs/", id); }

std::string RecordedError(std::string_view message) {
  if (message.size() <= kMaxRunErrorBytes) return std::string(message);
  size_t cut = kMaxRunErrorBytes;
  while (cut > 0 && (static_cast<unsigned char>(message[cut]) & 0xC0) == 0x80) --cut;
  return absl::StrCat(std::string(message.substr(0, cut)), "... (", message.size() - cut, " more bytes)");
}

absl::StatusOr<sandbox::Limits> LimitsFromProfile(std::string_view profile_json) {
  absl::StatusOr<Value> v = sandbox::ParseJson(profile_json);
  if (!v.ok() || !v->is_map()) return absl::DataLossError("the run's engine profile is unreadable");
  auto it = v->as_map().find("limits");
  if (it == v->as_map().end() || !it->second.is_map()) {
    return absl::DataLossError("the run's engine profile has no limits");
  }
  sandbox::Limits limits;
  auto get = [&](const char* key, uint64_t* out) {
    auto f = it->second.as_map().find(key);
    if (f == it->second.as_map().end() || !f->second.is_int() || f->second.as_int() <= 0) return false;
    *out = static_cast<uint64_t>(f->second.as_int());
    return true;
  };
  if (!get("max_instructions", &limits.max_instructions) || !get("max_memory_bytes", &limits.max_memory_bytes) ||
      !get("max_output_bytes", &limits.max_output_bytes)) {
    return absl::DataLossError("the run's engine profile has malformed limits");
  }
  return limits;
}


absl::StatusOr<std::vector<BoundArtifact>> LoadArtifacts(store::Store* store, const std::vector<store::Binding>& bindings) {
  std::vector<BoundArtifact> out;
  for (const store::Binding& b : bindings) {
    absl::StatusOr<store::ArtifactRecord> a = store->GetArtifact(b.artifact_digest);
    if (!a.ok()) return a.status();
    absl::StatusOr<ArtifactCode> code = VerifiedCode(*a);
    if (!code.ok()) return code.status();
    out.push_back(BoundArtifact{b.generation_point, b.artifact_digest, *std::move(code)});
  }
  return out;
}

// ---- construction, recovery ----------------------------------------------------------------

Engine::Engine(store::Store* store, LuaArtifactRunner* lua_runner, Generator* generator, EngineOptions options)
    : store_(store), lua_runner_(lua_runner), generator_(generator), options_(std::move(options)), events_(store) {}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(store::Store* store, LuaArtifactRunner* lua_runner,
                                                       Generator* generator, EngineOptions options) {
  if (store == nullptr || lua_runner == nullptr) return absl::InvalidArgumentError("engine needs a store and a Lua runner");
  if (options.run_workers < 1) return absl::InvalidArgumentError("run_workers must be at least 1");
  if (options.lease.count() <= 0 || options.heartbeat.count() <= 0 || options.heartbeat >= options.lease) {
    return absl::InvalidArgumentError("the run lease must be positive and longer than the heartbeat");
  }
  std::unique_ptr<Engine> engine(new Engine(store, lua_runner, generator, std::move(options)));
  for (int i = 0; i < engine->options_.run_workers; ++i) {
    engine->workers_.emplace_back([e = engine.get()] { e->WorkerLoop(); });
  }
  if (store->SupportsRunLeases()) {
    // Runs are queued in the database, shared with the other replicas: nothing to recover here.
    engine->shared_queue_ = true;
    engine->replica_id_ = engine->options_.replica_id.empty() ? DefaultReplicaId() : engine->options_.replica_id;
    if (absl::Status s = store->SetRunEventListener([e = engine.get()](int64_t) { e->events_.Notify(); }); !s.ok()) {
      return s;
    }
    engine->heartbeat_ = std::thread([e = engine.get()] { e->HeartbeatLoop(); });
    engine->claimer_ = std::thread([e = engine.get()] { e->ClaimLoop(); });
    return engine;
  }
  if (absl::Status s = engine->Recover(); !s.ok()) return s;
  return engine;
}

Engine::~Engine() { Shutdown(); }

void Engine::Shutdown() {
  {
    std::lock_guard lock(mu_);
    if (stopping_ && workers_.empty()) return;
    stopping_ = true;
    for (auto& [id, control] : active_) {
      if (shared_queue_) {
        // Another replica runs it from its start; a stopping replica never fails a run.
        std::lock_guard control_lock(control->mu);
        control->requeue = true;
      }
      control->interrupt.Interrupt(absl::UnavailableError(
          "the server shut down while this run executed; submit it again"));
    }
  }
  queue_cv_.notify_all();
  claim_cv_.notify_all();
  if (claimer_.joinable()) claimer_.join();
  std::vector<std::thread> workers;
  {
    std::lock_guard lock(mu_);
    workers.swap(workers_);
  }
  for (std::thread& t : workers) t.join();
  if (shared_queue_) {
    GiveBackQueued("given back by a replica that shut down before it started the run");
    {
      std::lock_guard lock(mu_);
      heartbeat_stop_ = true;
    }
    claim_cv_.notify_all();
    if (heartbeat_.joinable()) heartbeat_.join();
    store_->SetRunEventListener({}).IgnoreError();
  }
  events_.Notify();
}

void Engine::BeginDrain() {
  {
    std::lock_guard lock(mu_);
    draining_ = true;
  }
  queue_cv_.notify_all();
  claim_cv_.notify_all();
}

int Engine::Drain(std::chrono::milliseconds grace) {
  BeginDrain();
  if (shared_queue_) {
    if (claimer_.joinable()) claimer_.join();
    GiveBackQueued("re-queued by a draining server before it started the run");
  }
  std::unique_lock lock(mu_);
  if (!executing_.empty()) {
    spdlog::info("draining: {} run(s) executing get up to {}ms to finish", executing_.size(), grace.count());
  }
  finished_cv_.wait_for(lock, grace, [&] { return executing_.empty(); });
  int requeued = 0;
  for (auto& [id, control] : executing_) {
    {
      std::lock_guard control_lock(control->mu);
      control->requeue = true;
    }
    control->interrupt.Interrupt(absl::UnavailableError("the server is draining; the run goes back to the queue"));
    ++requeued;
  }
  // An interrupted run stops at its blueprint's next instruction or artifact call, or between
  // generation attempts.
  finished_cv_.wait(lock, [&] { return executing_.empty(); });
  return requeued;
}

Engine::QueueStats Engine::queue_stats() {
  QueueStats stats = LocalQueueStats();
  if (stats.shared_queue) {
    // The queue every replica shares, read from the database at each scrape.
    absl::StatusOr<std::vector<std::pair<store::RunState, int64_t>>> counts = store_->CountRunsByState();
    if (counts.ok()) {
      for (const auto& [state, n] : *counts) {
        if (state == store::RunState::kPending) stats.store_pending = n;
        if (state == store::RunState::kRunning) stats.store_running = n;
      }
    }
  }
  return stats;
}

Engine::QueueStats Engine::LocalQueueStats() {
  std::lock_guard lock(mu_);
  QueueStats stats;
  stats.executing = static_cast<int64_t>(executing_.size());
  stats.queued = static_cast<int64_t>(queue_.size());
  stats.requeued_by_drain = requeued_by_drain_;
  for (const auto& [id, control] : active_) {
    std::pair<int64_t, int64_t>& counts = stats.by_blueprint[control->blueprint];
    ++(executing_.count(id) != 0 ? counts.second : counts.first);
  }
  if (shared_queue_) {
    stats.shared_queue = true;
    stats.claimed = claimed_;
    stats.taken_over = taken_over_;
    stats.leases_lost = leases_lost_;
  }
  return stats;
}

std::string Engine::BlueprintNameOf(const std::string& digest) {
  {
    std::lock_guard lock(names_mu_);
    auto it = blueprint_names_.find(digest);
    if (it != blueprint_names_.end()) return it->second;
  }
  absl::StatusOr<store::BlueprintRecord> bp = store_->GetBlueprint(digest);
  if (!bp.ok()) return "unknown";
  std::lock_guard lock(names_mu_);
  return blueprint_names_[digest] = bp->name;
}

// Run event kind of a recorded policy; watchers read only the "events" kind, so it is not shown.
constexpr std::string_view kPolicyEventKind = "policy";

store::NewRunEvent Engine::PolicyEvent(const RunPolicy& policy) const {
  // The limits are in the run's engine profile; these are the rest.
  return store::NewRunEvent{std::string(kPolicyEventKind),
                            absl::StrCat("allow_generation=", policy.allow_generation ? 1 : 0,
                                         " allow_pending=", policy.allow_pending ? 1 : 0,
                                         " generation_retry=", policy.generation_retry)};
}

absl::StatusOr<std::optional<RunPolicy>> Engine::RecordedPolicy(int64_t run_id) {
  absl::StatusOr<std::vector<store::RunEvent>> events = store_->ListRunEvents(run_id, 0, 0);
  if (!events.ok()) return events.status();
  for (const store::RunEvent& e : *events) {
    if (e.kind != kPolicyEventKind) continue;
    RunPolicy policy;
    for (absl::string_view field : absl::StrSplit(e.payload, ' ', absl::SkipEmpty())) {
      const size_t eq = field.find('=');
      int value = 0;
      if (eq == absl::string_view::npos || !absl::SimpleAtoi(field.substr(eq + 1), &value)) continue;
      const absl::string_view key = field.substr(0, eq);
      if (key == "allow_generation") policy.allow_generation = value != 0;
      if (key == "allow_pending") policy.allow_pending = value != 0;
      if (key == "generation_retry") policy.generation_retry = value;
    }
    return policy;
  }
  return std::nullopt;
}

absl::Status Engine::Recover() {
  for (store::RunState state : {store::RunState::kRunning, store::RunState::kPending}) {
    store::PageRequest page;
    page.page_size = 1000;
    std::vector<store::RunRecord> runs;
    do {
      absl::StatusOr<store::Page<store::RunRecord>> p = store_->ListRuns(store::RunFilter{"", state}, page);
      if (!p.ok()) return p.status();
      runs.insert(runs.end(), p->items.begin(), p->items.end());
      page.page_token = p->next_page_token;
    } while (!page.page_token.empty());
    for (const store::RunRecord& run : runs) {
      if (state == store::RunState::kRunning) {
        spdlog::warn("run {} was running when the server stopped; marking it failed", run.id);
        absl::Status s = FinishAndAnnounce(
            run.id, store::RunOutcome{store::RunState::kFailed, "",
                                      "interrupted: the server stopped while this run executed; submit it again",
                                      /*interrupted=*/true});
        if (!s.ok()) return s;
        continue;
      }
      absl::StatusOr<std::shared_ptr<RunControl>> control = ControlFor(run);
      if (!control.ok()) return control.status();
      if (*control != nullptr) Enqueue(run.id, *std::move(control));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Engine::RunControl>> Engine::ControlFor(const store::RunRecord& run) {
  absl::StatusOr<store::BlueprintRecord> bp = store_->GetBlueprint(run.blueprint_digest);
  if (!bp.ok()) return bp.status();
  auto control = std::make_shared<RunControl>();
  control->principal = run.submitter;
  control->blueprint = bp->name;
  absl::StatusOr<std::optional<RunPolicy>> policy =
      run.bindings.size() < bp->generation_points.size() ? RecordedPolicy(run.id) : std::optional<RunPolicy>();
  if (!policy.ok()) return policy.status();
  if (*policy) {
    // Its code is generated when it executes: the points the run has not bound yet.
    control->policy = **policy;
    absl::StatusOr<BlueprintView> view = ViewOf(*bp);
    if (!view.ok()) return view.status();
    for (const GenerationPoint& p : view->points) {
      const bool bound = std::any_of(run.bindings.begin(), run.bindings.end(),
                                     [&](const store::Binding& b) { return b.generation_point == p.name; });
      if (!bound) control->deferred.push_back(p);
    }
  } else if (run.bindings.size() < bp->generation_points.size()) {
    // Its generation was deferred to the worker, with a policy only the lost process knew.
    absl::Status s = FinishAndAnnounce(
        run.id, store::RunOutcome{store::RunState::kFailed, "",
                                  "interrupted: the server stopped before this run's code was generated; submit it again",
                                  /*interrupted=*/true});
    if (!s.ok()) return s;
    return std::shared_ptr<RunControl>();
  }
  return control;
}

absl::Status Engine::FinishAndAnnounce(int64_t run_id, const store::RunOutcome& outcome) {
  std::vector<RunEvent> events;
  if (!outcome.error.empty()) events.push_back(RunEvent::Log(absl::StrCat("error: ", outcome.error)));
  events.push_back(RunEvent::State(outcome.state));
  // The terminal state and its events in one write where the store can, so a watcher on another
  // replica never sees the one without the other.
  absl::StatusOr<store::RunRecord> finished = events_.Finish(run_id, outcome, events);
  if (!finished.ok()) return finished.status();
  if (options_.on_run_end) {
    const double seconds = finished->start_ms > 0 ? (finished->end_ms - finished->start_ms) / 1000.0 : -1.0;
    options_.on_run_end(BlueprintNameOf(finished->blueprint_digest), outcome.state, seconds);
  }
  return absl::OkStatus();
}

std::string Engine::EngineProfileJson(const sandbox::Limits& limits) const {
  Map l;
  l["max_instructions"] = Value::Int(static_cast<int64_t>(limits.max_instructions));
  l["max_memory_bytes"] = Value::Int(static_cast<int64_t>(limits.max_memory_bytes));
  l["max_output_bytes"] = Value::Int(static_cast<int64_t>(limits.max_output_bytes));
  Map m;
  m["limits"] = Value::FromMap(std::move(l));
  absl::StatusOr<Value> re2 = sandbox::ParseJson(Re2ProfileJson());
  m["re2"] = re2.ok() ? *re2 : Value::String(Re2ProfileJson());
  m["rote"] = Value::String(options_.rote_version);
  m["sandbox"] = Value::String(std::string(sandbox::kProfileName));
  absl::StatusOr<std::string> j = sandbox::CanonicalJson(Value::FromMap(std::move(m)));
  return j.ok() ? *j : std::string("{}");
}

}  // namespace rote::orchestrator::engine
