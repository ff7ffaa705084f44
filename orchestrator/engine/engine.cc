#include "orchestrator/engine/engine.h"

#include <algorithm>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "orchestrator/engine/artifact.h"
#include "orchestrator/engine/canonical.h"
#include "orchestrator/engine/lockfile.h"
#include "orchestrator/engine/names.h"
#include "orchestrator/engine/regex_artifact.h"
#include "orchestrator/engine/unified_diff.h"
#include "orchestrator/engine/validate.h"
#include "spdlog/spdlog.h"
#include "store/digest.h"

namespace rote::orchestrator::engine {

using sandbox::Map;
using sandbox::Value;

namespace {

constexpr std::string_view kEventsKind = "events";
constexpr size_t kMaxFilenameBytes = 255;

std::string ArtifactKey(std::string_view blueprint_name, std::string_view point) {
  return absl::StrCat(std::string(blueprint_name), "/", std::string(point));
}

std::string StateWord(store::RunState s) { return std::string(store::RunStateName(s)); }

rote::v1::RunState ProtoState(store::RunState s) {
  switch (s) {
    case store::RunState::kPending: return rote::v1::RUN_STATE_PENDING;
    case store::RunState::kRunning: return rote::v1::RUN_STATE_RUNNING;
    case store::RunState::kSucceeded: return rote::v1::RUN_STATE_SUCCEEDED;
    case store::RunState::kFailed: return rote::v1::RUN_STATE_FAILED;
    case store::RunState::kCancelled: return rote::v1::RUN_STATE_CANCELLED;
  }
  return rote::v1::RUN_STATE_UNSPECIFIED;
}

bool IsTerminalProto(rote::v1::RunState s) {
  return s == rote::v1::RUN_STATE_SUCCEEDED || s == rote::v1::RUN_STATE_FAILED ||
         s == rote::v1::RUN_STATE_CANCELLED;
}

rote::v1::RunEvent StateEvent(store::RunState s) {
  rote::v1::RunEvent e;
  e.set_state(ProtoState(s));
  return e;
}

rote::v1::RunEvent LogEvent(std::string_view line) {
  rote::v1::RunEvent e;
  e.set_log(std::string(line));
  return e;
}

// Store events carry a batch of RunEvents (without sequence and time, which the reader assigns),
// each prefixed with its varint length, so a journal flush is one write however many steps.
std::string EncodeEvents(const std::vector<rote::v1::RunEvent>& events) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    for (const rote::v1::RunEvent& e : events) {
      coded.WriteVarint32(static_cast<uint32_t>(e.ByteSizeLong()));
      e.SerializeWithCachedSizes(&coded);
    }
  }
  return out;
}

absl::StatusOr<std::vector<rote::v1::RunEvent>> DecodeEvents(std::string_view payload) {
  std::vector<rote::v1::RunEvent> out;
  google::protobuf::io::CodedInputStream coded(reinterpret_cast<const uint8_t*>(payload.data()),
                                               static_cast<int>(payload.size()));
  while (!coded.ExpectAtEnd()) {
    uint32_t size = 0;
    if (!coded.ReadVarint32(&size)) return absl::DataLossError("a stored run event is truncated");
    auto limit = coded.PushLimit(static_cast<int>(size));
    rote::v1::RunEvent e;
    if (!e.ParseFromCodedStream(&coded) || !coded.ConsumedEntireMessage()) {
      return absl::DataLossError("a stored run event does not parse");
    }
    coded.PopLimit(limit);
    out.push_back(std::move(e));
  }
  return out;
}

std::string RunName(int64_t id) { return absl::StrCat("runs/", id); }

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

// A failed run's error as recorded. A blueprint may raise a string of any size, and every run
// listing carries the error, so it is cut (at a UTF-8 boundary) past kMaxRunErrorBytes; replay
// cuts a replayed error the same way before comparing.
std::string RecordedError(std::string_view message) {
  if (message.size() <= kMaxRunErrorBytes) return std::string(message);
  size_t cut = kMaxRunErrorBytes;
  while (cut > 0 && (static_cast<unsigned char>(message[cut]) & 0xC0) == 0x80) --cut;
  return absl::StrCat(std::string(message.substr(0, cut)), "... (", message.size() - cut, " more bytes)");
}

std::string ErrorJson(std::string_view message) {
  Map m;
  m["error"] = Value::String(std::string(message));
  absl::StatusOr<std::string> j = sandbox::CanonicalJson(Value::FromMap(std::move(m)));
  return j.ok() ? *j : std::string("{\"error\":\"(not UTF-8)\"}");
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

}  // namespace

// ---- run control and the journal -----------------------------------------------------------

struct Engine::RunControl {
  RunInterrupt interrupt;
  std::mutex mu;
  bool started = false;    // a worker took it
  bool cancelled = false;  // CancelRun finished it before a worker took it
  RunPolicy policy;
  std::string principal;
  std::vector<GenerationPoint> deferred;  // points to generate before executing
};

// Records a run's steps and logs: values as blobs, steps in the journal, events for watchers.
// Buffers and writes in batches, because each store write is a commit.
class Engine::Journal final : public StepObserver {
 public:
  Journal(Engine* engine, int64_t run_id) : engine_(engine), run_id_(run_id) {}

  absl::Status BeforeCall(const StepCall&) override { return absl::OkStatus(); }

  absl::Status AfterCall(const StepCall& step) override {
    AddBlob(step.input);
    AddBlob(step.output);
    steps_.push_back(store::StepRecord{step.index, step.point, step.artifact_digest, step.input.digest,
                                       step.output.digest});
    rote::v1::RunEvent e;
    rote::v1::Step* s = e.mutable_step();
    s->set_index(step.index);
    s->set_generation_point(step.point);
    s->set_artifact_digest(step.artifact_digest);
    s->set_input_digest(step.input.digest);
    s->set_output_digest(step.output.digest);
    events_.push_back(std::move(e));
    ++step_count_;
    return MaybeFlush();
  }

  void Log(std::string_view line) override {
    events_.push_back(LogEvent(line));
    status_.Update(MaybeFlush());
  }

  absl::Status Flush() {
    if (!status_.ok()) return status_;
    for (const std::string& json : blobs_) {
      absl::StatusOr<store::BlobRef> ref = engine_->store_->PutBlob(json);
      if (!ref.ok()) return status_ = ref.status();
    }
    blobs_.clear();
    if (!steps_.empty()) {
      if (absl::Status s = engine_->store_->AppendSteps(run_id_, steps_); !s.ok()) return status_ = s;
      steps_.clear();
    }
    if (!events_.empty()) {
      if (absl::Status s = engine_->AppendEvents(run_id_, events_); !s.ok()) return status_ = s;
      events_.clear();
    }
    last_flush_ = std::chrono::steady_clock::now();
    return absl::OkStatus();
  }

  int64_t step_count() const { return step_count_; }

 private:
  void AddBlob(const Canonical& c) {
    if (stored_.insert(c.digest).second) blobs_.push_back(c.json);
  }

  absl::Status MaybeFlush() {
    if (!status_.ok()) return status_;
    // Watchers see progress at least every 200 ms; long runs do not hold everything in memory.
    if (blobs_.size() + events_.size() >= 512 ||
        std::chrono::steady_clock::now() - last_flush_ > std::chrono::milliseconds(200)) {
      return Flush();
    }
    return absl::OkStatus();
  }

  Engine* engine_;
  int64_t run_id_;
  std::set<std::string> stored_;
  std::vector<std::string> blobs_;
  std::vector<store::StepRecord> steps_;
  std::vector<rote::v1::RunEvent> events_;
  int64_t step_count_ = 0;
  absl::Status status_;
  std::chrono::steady_clock::time_point last_flush_ = std::chrono::steady_clock::now();
};

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

// ---- construction, pool --------------------------------------------------------------------

Engine::Engine(store::Store* store, LuaArtifactRunner* lua_runner, Generator* generator, EngineOptions options)
    : store_(store), lua_runner_(lua_runner), generator_(generator), options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(store::Store* store, LuaArtifactRunner* lua_runner,
                                                       Generator* generator, EngineOptions options) {
  if (store == nullptr || lua_runner == nullptr) return absl::InvalidArgumentError("engine needs a store and a Lua runner");
  if (options.run_workers < 1) return absl::InvalidArgumentError("run_workers must be at least 1");
  std::unique_ptr<Engine> engine(new Engine(store, lua_runner, generator, std::move(options)));
  for (int i = 0; i < engine->options_.run_workers; ++i) {
    engine->workers_.emplace_back([e = engine.get()] { e->WorkerLoop(); });
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
      control->interrupt.Interrupt(absl::UnavailableError(
          "the server shut down while this run executed; submit it again"));
    }
  }
  queue_cv_.notify_all();
  std::vector<std::thread> workers;
  {
    std::lock_guard lock(mu_);
    workers.swap(workers_);
  }
  for (std::thread& t : workers) t.join();
  NotifyWatchers();
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
      absl::StatusOr<store::BlueprintRecord> bp = store_->GetBlueprint(run.blueprint_digest);
      if (!bp.ok()) return bp.status();
      if (run.bindings.size() < bp->generation_points.size()) {
        // Its generation was deferred to the worker, with a policy only the lost process knew.
        absl::Status s = FinishAndAnnounce(
            run.id, store::RunOutcome{store::RunState::kFailed, "",
                                      "interrupted: the server stopped before this run's code was generated; submit it again",
                                      /*interrupted=*/true});
        if (!s.ok()) return s;
        continue;
      }
      auto control = std::make_shared<RunControl>();
      control->principal = run.submitter;
      Enqueue(run.id, std::move(control));
    }
  }
  return absl::OkStatus();
}

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
      queue_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;  // queued runs stay pending; the next start takes them up
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    ExecuteRun(job);
    {
      std::lock_guard lock(mu_);
      active_.erase(job.run_id);
    }
    finished_cv_.notify_all();
    NotifyWatchers();
  }
}

bool Engine::IsActive(int64_t run_id) {
  std::lock_guard lock(mu_);
  return active_.count(run_id) != 0;
}

void Engine::NotifyWatchers() {
  {
    std::lock_guard lock(events_mu_);
    ++events_epoch_;
  }
  events_cv_.notify_all();
}

absl::Status Engine::AppendEvents(int64_t run_id, const std::vector<rote::v1::RunEvent>& events) {
  absl::StatusOr<int64_t> seq = store_->AppendRunEvent(run_id, kEventsKind, EncodeEvents(events));
  NotifyWatchers();
  return seq.status();
}

absl::Status Engine::FinishAndAnnounce(int64_t run_id, const store::RunOutcome& outcome) {
  absl::StatusOr<store::RunRecord> finished = store_->FinishRun(run_id, outcome);
  if (!finished.ok()) return finished.status();
  std::vector<rote::v1::RunEvent> events;
  if (!outcome.error.empty()) events.push_back(LogEvent(absl::StrCat("error: ", outcome.error)));
  events.push_back(StateEvent(outcome.state));
  return AppendEvents(run_id, events);
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

// ---- blueprints ----------------------------------------------------------------------------

absl::StatusOr<store::BlueprintRecord> Engine::ResolveBlueprint(std::string_view name) {
  absl::StatusOr<BlueprintName> parsed = ParseBlueprintName(name);
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
  absl::StatusOr<std::vector<store::Binding>> bindings = store_->ListBindings(record.digest);
  if (!bindings.ok()) return bindings.status();
  view.bindings = *std::move(bindings);
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

  // Read and check the lockfile completely before storing anything.
  struct Locked {
    LockEntry entry;
    const GenerationPoint* point;
    ArtifactCode code;
    std::string digest;
    std::string report_json;
  };
  std::vector<Locked> locked;
  if (!lockfile.empty()) {
    std::string origin = chunkname;
    if (absl::EndsWith(origin, ".lua")) origin.resize(origin.size() - 4);
    origin = filename.empty() ? std::string("lockfile") : absl::StrCat(origin, ".lock");
    absl::StatusOr<Lockfile> lock = ParseLockfile(lockfile, origin);
    if (!lock.ok()) return lock.status();
    if (!lock->blueprint.empty() && lock->blueprint != decl->name) {
      return absl::InvalidArgumentError(absl::StrCat(origin, ": the lockfile is for blueprint ", QuoteInput(lock->blueprint),
                                                     " but the source declares '", decl->name, "'"));
    }
    std::vector<std::string> declared;
    for (const GenerationPoint& p : decl->points) declared.push_back(p.name);
    for (const LockEntry& e : lock->entries) {
      auto where = absl::StrCat(origin, ":", e.line, ": ");
      auto it = std::find_if(decl->points.begin(), decl->points.end(),
                             [&](const GenerationPoint& p) { return p.name == e.point; });
      if (it == decl->points.end()) {
        return absl::InvalidArgumentError(absl::StrCat(where, "point ", QuoteInput(e.point), " is not declared by blueprint '",
                                                       decl->name, "' (it declares: ", absl::StrJoin(declared, ", "), ")"));
      }
      for (const Locked& l : locked) {
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
          static_cast<int64_t>(bytes) > options_.max_blueprint_bytes) {
        return too_large(artifact_what, bytes);
      }
      absl::StatusOr<Validation> v = ValidateArtifact(*it, code, lua_runner_, options_.load_limits);
      if (!v.ok()) return v.status();
      if (!v->passed) {
        return absl::InvalidArgumentError(absl::StrCat(where, "the artifact locked for '", e.point,
                                                       "' fails its own spec: ", v->first_failure));
      }
      if (const size_t bytes = code.source.size() + code.options_json.size() + v->report_json.size();
          static_cast<int64_t>(bytes) > options_.max_blueprint_bytes) {
        return too_large(artifact_what, bytes);
      }
      locked.push_back(Locked{e, &*it, std::move(code), *std::move(digest), v->report_json});
    }
  }

  store::BlueprintRecord record;
  record.digest = store::Sha256Digest(source);
  record.name = decl->name;
  record.version = decl->version;
  record.source = std::string(source);
  for (const GenerationPoint& p : decl->points) record.generation_points.push_back(p.ToRecord());
  absl::StatusOr<store::BlueprintRecord> stored = store_->PutBlueprint(record);
  if (!stored.ok()) return stored.status();

  for (const Locked& l : locked) {
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
          "the artifact locked for '", l.entry.point, "' (", l.digest,
          ") was rejected in review; replace it in the lockfile or approve it again with `rote artifacts review`"));
    }
    // Registering needs only the submit role. Approving goes through the same check as
    // ReviewArtifact: an artifact's digest does not depend on its generation point, so a lockfile
    // holding the source a principal asked the model for would otherwise let that principal
    // approve it, for every point that uses it.
    if (artifact->state == store::ReviewState::kPending) {
      absl::Status allowed = may_approve ? may_approve(*artifact)
                                         : absl::PermissionDeniedError("registration without an approval check");
      if (allowed.ok()) {
        store::ReviewRequest review;
        review.artifact_digest = l.digest;
        review.principal = principal;
        review.decision = store::ReviewState::kApproved;
        review.comment = absl::StrCat("expert reference artifact from the lockfile of ", decl->name);
        review.expected_etag = artifact->etag;  // the state the check saw
        absl::StatusOr<store::ArtifactRecord> approved = store_->ReviewArtifact(review);
        if (!approved.ok()) return approved.status();
      } else if (absl::IsPermissionDenied(allowed)) {
        spdlog::info("registering {}: the artifact locked for '{}' ({}) stays pending: {}", decl->name,
                     l.entry.point, l.digest, std::string(allowed.message()));
      } else {
        return allowed;
      }
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

absl::StatusOr<std::string> Engine::LockBlueprint(std::string_view name) {
  absl::StatusOr<BlueprintView> bp = GetBlueprint(name);
  if (!bp.ok()) return bp.status();
  Lockfile lock;
  lock.blueprint = bp->record.name;
  lock.version = bp->record.version;
  std::vector<std::string> unbound;
  for (const GenerationPoint& p : bp->points) {
    std::string digest;
    for (const store::Binding& b : bp->bindings) {
      if (b.generation_point == p.name) digest = b.artifact_digest;
    }
    if (digest.empty()) {
      absl::StatusOr<std::optional<store::ArtifactRecord>> approved =
          NewestArtifactFor(ArtifactKey(bp->record.name, p.name), p, store::ReviewState::kApproved);
      if (!approved.ok()) return approved.status();
      if (*approved) digest = (*approved)->digest;
    }
    if (digest.empty()) {
      unbound.push_back(p.name);
      continue;
    }
    absl::StatusOr<store::ArtifactRecord> a = store_->GetArtifact(digest);
    if (!a.ok()) return a.status();
    absl::StatusOr<ArtifactCode> code = VerifiedCode(*a);
    if (!code.ok()) return code.status();
    lock.entries.push_back(LockEntry{p.name, p.kind, p.digest, digest,
                                     p.kind == ArtifactKind::kRe2Pattern ? code->options_json : "", code->source, 0});
  }
  std::string text = FormatLockfile(lock);
  if (!unbound.empty()) {
    absl::StrAppend(&text, "\n# Not locked (no binding and no approved artifact yet): ", absl::StrJoin(unbound, ", "),
                    "\n");
  }
  return text;
}

// ---- runs ----------------------------------------------------------------------------------

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
                                                                    const std::string& principal,
                                                                    std::vector<GenerationPoint>* deferred) {
  std::vector<store::Binding> out;
  std::vector<std::string> problems;
  std::vector<std::string> unbound;
  for (const GenerationPoint& p : bp.points) {
    const std::string key = ArtifactKey(bp.record.name, p.name);
    const store::Binding* bound = nullptr;
    for (const store::Binding& b : bp.bindings) {
      if (b.generation_point == p.name) bound = &b;
    }
    if (bound != nullptr) {
      absl::StatusOr<store::ArtifactRecord> a = store_->GetArtifact(bound->artifact_digest);
      if (!a.ok()) return a.status();
      if (a->state == store::ReviewState::kApproved ||
          (a->state == store::ReviewState::kPending && policy.allow_pending)) {
        out.push_back(*bound);
        continue;
      }
      if (a->state == store::ReviewState::kPending) {
        problems.push_back(absl::StrCat("'", p.name, "' is bound to artifact ", a->digest,
                                        ", which is pending review (approve it, or submit with allow_pending)"));
        continue;
      }
      // A rejected binding does not count; look for something better below.
    }
    absl::StatusOr<std::optional<store::ArtifactRecord>> approved =
        NewestArtifactFor(key, p, store::ReviewState::kApproved);
    if (!approved.ok()) return approved.status();
    if (*approved) {
      out.push_back(store::Binding{p.name, (*approved)->digest, "approved"});
      continue;
    }
    if (policy.allow_pending) {
      absl::StatusOr<std::optional<store::ArtifactRecord>> pending =
          NewestArtifactFor(key, p, store::ReviewState::kPending);
      if (!pending.ok()) return pending.status();
      if (*pending) {
        out.push_back(store::Binding{p.name, (*pending)->digest, "pending"});
        continue;
      }
    }
    if (generator_ != nullptr) {
      GenerateContext ctx;
      ctx.generation_point_key = key;
      ctx.blueprint_digest = bp.record.digest;
      ctx.principal = principal;
      absl::StatusOr<std::optional<GeneratedArtifact>> cached = generator_->Lookup(p.ToRecord(), ctx);
      if (!cached.ok()) return cached.status();
      if (*cached) {
        absl::StatusOr<store::ArtifactRecord> a = store_->GetArtifact((*cached)->artifact_digest);
        if (!a.ok()) return a.status();
        if (a->state == store::ReviewState::kApproved ||
            (a->state == store::ReviewState::kPending && policy.allow_pending)) {
          out.push_back(store::Binding{p.name, a->digest, "cache"});
          continue;
        }
      }
      if (policy.allow_generation) {
        deferred->push_back(p);
        continue;
      }
    }
    unbound.push_back(absl::StrCat(p.name, " (", KindName(p.kind), ")"));
  }
  if (!unbound.empty()) {
    problems.push_back(absl::StrCat(
        "unbound generation points: ", absl::StrJoin(unbound, ", "),
        ". Bind them with a lockfile (register the blueprint with ", bp.record.name, ".lock beside it, see "
        "docs/blueprints.md) or approve an artifact for them",
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
  if (req.request_id.size() > 128 ||
      std::any_of(req.request_id.begin(), req.request_id.end(), [](char c) { return c < 0x21 || c > 0x7e; })) {
    return absl::InvalidArgumentError("request_id must be at most 128 printable ASCII characters without spaces");
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
      req.policy.allow_pending ? "p" : "-"));

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
  absl::StatusOr<std::vector<store::Binding>> bindings = ResolveBindings(*bp, req.policy, req.principal, &deferred);
  if (!bindings.ok()) return bindings.status();

  if (absl::StatusOr<store::BlobRef> blob = store_->PutBlob(input->json); !blob.ok()) return blob.status();
  store::NewRun run;
  run.blueprint_digest = bp->record.digest;
  run.input_digest = input->digest;
  run.bindings = *std::move(bindings);
  run.engine_profile_json = profile;
  run.submitter = req.principal;
  run.request_id = req.request_id;
  absl::StatusOr<store::CreateRunResult> created = store_->CreateRun(run);
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
  if (absl::Status s = AppendEvents(id, {StateEvent(store::RunState::kPending)}); !s.ok()) return s;
  auto control = std::make_shared<RunControl>();
  control->policy = req.policy;
  control->principal = req.principal;
  control->deferred = std::move(deferred);
  {
    std::lock_guard lock(mu_);
    if (stopping_) return absl::UnavailableError("the server is shutting down; the run stays pending until it restarts");
  }
  Enqueue(id, std::move(control));
  return created->run;
}

absl::StatusOr<std::vector<BoundArtifact>> Engine::LoadArtifacts(const std::vector<store::Binding>& bindings) {
  std::vector<BoundArtifact> out;
  for (const store::Binding& b : bindings) {
    absl::StatusOr<store::ArtifactRecord> a = store_->GetArtifact(b.artifact_digest);
    if (!a.ok()) return a.status();
    absl::StatusOr<ArtifactCode> code = VerifiedCode(*a);
    if (!code.ok()) return code.status();
    out.push_back(BoundArtifact{b.generation_point, b.artifact_digest, *std::move(code)});
  }
  return out;
}

void Engine::ExecuteRun(const Job& job) {
  RunControl& control = *job.control;
  {
    std::lock_guard lock(control.mu);
    if (control.cancelled) return;
    control.started = true;
  }
  const int64_t id = job.run_id;
  auto fail = [&](store::RunState state, const std::string& error, bool interrupted = false) {
    absl::Status s = FinishAndAnnounce(id, store::RunOutcome{state, "", RecordedError(error), interrupted});
    if (!s.ok()) spdlog::error("run {}: cannot record its end ({}): {}", id, StateWord(state), std::string(s.message()));
  };
  absl::StatusOr<store::RunRecord> run = store_->StartRun(id);
  if (!run.ok()) {
    spdlog::warn("run {} did not start: {}", id, std::string(run.status().message()));
    return;
  }
  // Faults of the store before the blueprint executes stop the run without a verdict, as an
  // interruption does.
  if (absl::Status s = AppendEvents(id, {StateEvent(store::RunState::kRunning)}); !s.ok()) {
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
    ctx.progress = [this, id](const std::string& line) {
      rote::v1::RunEvent e;
      e.set_generation_progress(line);
      AppendEvents(id, {e}).IgnoreError();
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
    if (a->state != store::ReviewState::kApproved && !control.policy.allow_pending) {
      return fail(store::RunState::kFailed,
                  absl::StrCat("generated artifact ", a->digest, " for '", p.name,
                               "' is pending review: approve it (rote artifacts review) and submit again, or submit "
                               "with --allow-pending"));
    }
    store::Binding b{p.name, g->artifact_digest, g->from_cache ? "cache" : "generated"};
    if (absl::Status s = store_->AddRunBindings(id, {b}); !s.ok()) return fail(store::RunState::kFailed, std::string(s.message()));
    bindings.push_back(b);
  }

  absl::StatusOr<std::vector<BoundArtifact>> artifacts = LoadArtifacts(bindings);
  if (!artifacts.ok()) return fail(store::RunState::kFailed, std::string(artifacts.status().message()));
  absl::StatusOr<std::string> input_json = store_->GetBlob(run->input_digest);
  if (!input_json.ok()) return fail(store::RunState::kFailed, std::string(input_json.status().message()));
  absl::StatusOr<Value> input = sandbox::ParseJson(*input_json);
  if (!input.ok()) return fail(store::RunState::kFailed, std::string(input.status().message()));
  absl::StatusOr<sandbox::Limits> limits = LimitsFromProfile(run->engine_profile_json);
  if (!limits.ok()) return fail(store::RunState::kFailed, std::string(limits.status().message()));

  Journal journal(this, id);
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
    if (!s.ok()) spdlog::error("run {}: cannot record its success: {}", id, std::string(s.message()));
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

absl::Status Engine::WatchRun(std::string_view name, const std::function<bool(const rote::v1::RunEvent&)>& send,
                              const std::function<bool()>& stop) {
  absl::StatusOr<store::RunRecord> run = GetRun(name);
  if (!run.ok()) return run.status();
  const int64_t id = run->id;
  int64_t after = 0;
  int64_t sequence = 0;
  int idle_checks_after_end = 0;
  while (true) {
    uint64_t epoch;
    {
      std::lock_guard lock(events_mu_);
      epoch = events_epoch_;
    }
    absl::StatusOr<std::vector<store::RunEvent>> events = store_->ListRunEvents(id, after, 256);
    if (!events.ok()) return events.status();
    for (const store::RunEvent& stored : *events) {
      after = stored.sequence;
      if (stored.kind != kEventsKind) continue;
      absl::StatusOr<std::vector<rote::v1::RunEvent>> decoded = DecodeEvents(stored.payload);
      if (!decoded.ok()) return decoded.status();
      for (rote::v1::RunEvent& e : *decoded) {
        e.set_sequence(sequence++);
        e.mutable_time()->set_seconds(stored.time_ms / 1000);
        e.mutable_time()->set_nanos(static_cast<int32_t>((stored.time_ms % 1000) * 1000000));
        if (!send(e)) return absl::CancelledError("the watcher went away");
        if (e.event_case() == rote::v1::RunEvent::kState && IsTerminalProto(e.state())) return absl::OkStatus();
      }
    }
    if (!events->empty()) continue;
    if (stop()) return absl::CancelledError("the watch was cancelled");
    absl::StatusOr<store::RunRecord> now = store_->GetRun(id);
    if (!now.ok()) return now.status();
    if (store::IsTerminal(now->state) && !IsActive(id) && ++idle_checks_after_end > 1) {
      // Finished without a terminal event (the process stopped between the two writes).
      rote::v1::RunEvent e = StateEvent(now->state);
      e.set_sequence(sequence);
      send(e);
      return absl::OkStatus();
    }
    std::unique_lock lock(events_mu_);
    events_cv_.wait_for(lock, std::chrono::milliseconds(250), [&] { return events_epoch_ != epoch; });
  }
}

absl::StatusOr<ReplayResult> Engine::ReplayRun(std::string_view name) {
  absl::StatusOr<store::RunRecord> run = GetRun(name);
  if (!run.ok()) return run.status();
  if (run->state != store::RunState::kSucceeded && run->state != store::RunState::kFailed) {
    return absl::FailedPreconditionError(absl::StrCat(
        RunName(run->id), " is ", StateWord(run->state),
        "; only succeeded or failed runs have a complete record to replay"));
  }
  if (run->interrupted) {
    return absl::FailedPreconditionError(absl::StrCat(
        RunName(run->id), " failed because it was interrupted, not by its blueprint (", run->error,
        "); like a cancelled run it has no complete record to replay: submit it again"));
  }
  absl::StatusOr<store::BlueprintRecord> bp = store_->GetBlueprint(run->blueprint_digest);
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
    if (std::none_of(run->bindings.begin(), run->bindings.end(),
                     [&](const store::Binding& b) { return b.generation_point == p.name; })) {
      unbound.push_back(absl::StrCat("'", p.name, "'"));
    }
  }
  if (run->state == store::RunState::kFailed && !unbound.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        RunName(run->id), " failed before its blueprint executed: it has no artifact for generation point ",
        absl::StrJoin(unbound, ", "), " (", run->error,
        "); replay neither generates nor reviews code, so there is no execution to replay: bind an approved "
        "artifact and submit it again"));
  }
  if (std::string now = store::Sha256Digest(bp->source); now != run->blueprint_digest) {
    return absl::FailedPreconditionError(absl::StrCat(
        "blueprint ", bp->name, " changed since ", RunName(run->id), " ran: the run used ", run->blueprint_digest,
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
          "blueprint ", bp->name, " changed since ", RunName(run->id), " ran: generation point '", p.name,
          "' now has spec ", p.digest, spec == bp->generation_points.end() ? " and was not declared then" : absl::StrCat(", recorded ", spec->digest)));
    }
  }
  const std::string current_profile = EngineProfileJson(options_.default_limits);
  absl::StatusOr<std::string> recorded_semantics = SemanticProfile(run->engine_profile_json);
  absl::StatusOr<std::string> current_semantics = SemanticProfile(current_profile);
  if (!recorded_semantics.ok()) return recorded_semantics.status();
  if (!current_semantics.ok()) return current_semantics.status();
  if (*recorded_semantics != *current_semantics) {
    return absl::FailedPreconditionError(absl::StrCat(RunName(run->id), " ran under engine profile ", *recorded_semantics,
                                                      " but this server runs ", *current_semantics));
  }
  absl::StatusOr<sandbox::Limits> limits = LimitsFromProfile(run->engine_profile_json);
  if (!limits.ok()) return limits.status();
  absl::StatusOr<std::vector<BoundArtifact>> artifacts = LoadArtifacts(run->bindings);
  if (!artifacts.ok()) return artifacts.status();
  absl::StatusOr<std::string> input_json = store_->GetBlob(run->input_digest);
  if (!input_json.ok()) return input_json.status();
  absl::StatusOr<Value> input = sandbox::ParseJson(*input_json);
  if (!input.ok()) return absl::DataLossError(absl::StrCat("the recorded input does not parse: ", input.status().message()));
  absl::StatusOr<std::vector<store::StepRecord>> steps = store_->ListSteps(run->id);
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
  if (run->state == store::RunState::kSucceeded) {
    absl::StatusOr<std::string> out = store_->GetBlob(run->output_digest);
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
  std::string recorded = run->state == store::RunState::kSucceeded ? recorded_output : ErrorJson(run->error);
  r.output_digest = output.ok() ? output->digest : "";
  r.matched = replayed == recorded;
  if (!r.matched) {
    r.first_mismatch_step = -1;
    r.recorded_json = std::move(recorded);
    r.replayed_json = std::move(replayed);
  }
  return r;
}

// ---- artifacts -----------------------------------------------------------------------------

absl::StatusOr<ArtifactView> Engine::GetArtifact(std::string_view name) {
  absl::StatusOr<ArtifactName> n = ParseArtifactName(name);
  if (!n.ok()) return n.status();
  absl::StatusOr<store::ArtifactRecord> a =
      n->digest.empty() ? store_->GetRevision(n->key, n->revision) : store_->GetArtifact(n->digest);
  if (absl::IsNotFound(a.status())) return absl::NotFoundError(absl::StrCat("no artifact ", std::string(name)));
  if (!a.ok()) return a.status();
  absl::StatusOr<std::vector<store::ReviewEntry>> reviews = store_->ListReviews(a->digest);
  if (!reviews.ok()) return reviews.status();
  return ArtifactView{*std::move(a), *std::move(reviews)};
}

absl::StatusOr<store::Page<ArtifactView>> Engine::ListArtifacts(std::string_view generation_point,
                                                                std::optional<store::ReviewState> state,
                                                                const store::PageRequest& page) {
  if (!generation_point.empty()) {
    if (absl::Status s = CheckGenerationPointKey(generation_point, "generation_point"); !s.ok()) return s;
  }
  absl::StatusOr<store::Page<store::ArtifactRecord>> p =
      store_->ListArtifacts(store::ArtifactFilter{std::string(generation_point), state}, page);
  if (!p.ok()) return p.status();
  store::Page<ArtifactView> out;
  out.next_page_token = p->next_page_token;
  for (store::ArtifactRecord& a : p->items) {
    absl::StatusOr<std::vector<store::ReviewEntry>> reviews = store_->ListReviews(a.digest);
    if (!reviews.ok()) return reviews.status();
    out.items.push_back(ArtifactView{std::move(a), *std::move(reviews)});
  }
  return out;
}

absl::StatusOr<store::Page<ArtifactView>> Engine::ListRevisions(std::string_view generation_point,
                                                                const store::PageRequest& page) {
  if (generation_point.empty()) {
    return absl::InvalidArgumentError("generation_point is required, e.g. invoice_totals/parse_amount");
  }
  if (absl::Status s = CheckGenerationPointKey(generation_point, "generation_point"); !s.ok()) return s;
  absl::StatusOr<store::Page<store::ArtifactRecord>> p = store_->ListRevisions(generation_point, page);
  if (!p.ok()) return p.status();
  store::Page<ArtifactView> out;
  out.next_page_token = p->next_page_token;
  for (store::ArtifactRecord& a : p->items) {
    absl::StatusOr<std::vector<store::ReviewEntry>> reviews = store_->ListReviews(a.digest);
    if (!reviews.ok()) return reviews.status();
    out.items.push_back(ArtifactView{std::move(a), *std::move(reviews)});
  }
  return out;
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
  absl::StatusOr<store::ArtifactRecord> reviewed = store_->ReviewArtifact(req);
  if (!reviewed.ok()) return reviewed.status();
  return GetArtifact(absl::StrCat("artifacts/", reviewed->digest.substr(7)));
}

absl::StatusOr<std::string> Engine::DiffRevisions(std::string_view generation_point, int64_t from_revision,
                                                  int64_t to_revision) {
  if (generation_point.empty()) return absl::InvalidArgumentError("generation_point is required");
  if (absl::Status s = CheckGenerationPointKey(generation_point, "generation_point"); !s.ok()) return s;
  if (to_revision < 1) return absl::InvalidArgumentError("to_revision must be a revision number (from 1)");
  if (from_revision < 0) return absl::InvalidArgumentError("from_revision must not be negative");
  if (from_revision == 0) from_revision = to_revision - 1;
  absl::StatusOr<store::ArtifactRecord> to = store_->GetRevision(generation_point, to_revision);
  if (!to.ok()) return to.status();
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
