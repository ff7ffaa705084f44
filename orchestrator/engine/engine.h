// The engine behind the API: registers blueprints (with their lockfiles), resolves generation
// points, executes runs on a bounded pool of threads, records everything in the store, streams
// run events, replays runs step by step, and serves the artifact review flow. It speaks rote's
// own types; the API (orchestrator/api/) converts to and from the proto messages.
//
// Its members are defined by concern: engine.cc (construction, recovery, the engine profile),
// blueprints.cc, runs.cc (submission, lookup, cancellation), run_workers.cc (the queue, the
// worker pool and executing a run), artifacts_review.cc; engine_internal.h holds what they
// share. The event bus (event_bus.h), the journal (journal.h), replay (replay.h) and try and
// backtest (backtest.h) are components of their own.
//
// Names are the API's resource names: "blueprints/{hex}" or "blueprints/{display name}",
// "runs/{id}", "artifacts/{hex}" or "artifacts/{blueprint}/{point}/revisions/{n}". Artifacts of a
// generation point are stored under the key "{blueprint name}/{point name}".
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "orchestrator/engine/blueprint_runtime.h"
#include "orchestrator/engine/event_bus.h"
#include "orchestrator/engine/generator.h"
#include "orchestrator/engine/lua_runner.h"
#include "sandbox/lua_runtime.h"
#include "store/store.h"

namespace rote::orchestrator::engine {

// The live revision of a candidate's generation point: its digest, or "" when the point has
// none (docs/backtest.md). Unset: no point has one.
using LiveRevisionLookup = std::function<absl::StatusOr<std::string>(const store::ArtifactRecord& candidate)>;

struct EngineOptions {
  // Runs executing at once; more wait in a queue, in submission order.
  int run_workers = 4;
  // Limits of a run whose policy leaves them at 0, and the most a policy may ask for. The
  // memory limit also sizes each artifact call's Lua arena in the sandbox workers (twice the
  // limit, reserved), which must fit the workers' address-space limit.
  sandbox::Limits default_limits{1'000'000'000, 256ull << 20, 1ull << 20};
  sandbox::Limits max_limits{50'000'000'000, 512ull << 20, 64ull << 20};
  // Approving a revision also makes it the live revision of its point (rote serve
  // --promotion=on-approval, the default); false: only PromoteRevision does (--promotion=manual).
  bool promote_on_approval = true;
  // Limits for loading a blueprint at registration.
  sandbox::Limits load_limits{100'000'000, 64ull << 20, 1ull << 20};
  // Wall-clock safety net of one run (deterministic limits decide; this only stops runaways
  // the limits do not catch, such as a stuck worker).
  std::chrono::milliseconds run_deadline{std::chrono::minutes(30)};
  std::string rote_version = "0.0.0";
  // The largest blueprint registration accepts, counted as GetBlueprint returns it (the source
  // plus each generation point's name, task, signature and examples), and the largest artifact a
  // lockfile may hold (source, options and validation report, as GetArtifact returns it). The
  // server sets half its message limit, so a whole item always fits a response.
  int64_t max_blueprint_bytes = 32 << 20;
  // Batches a backtest runs at once (one sandbox worker each; the server sets its worker count).
  int backtest_parallelism = 4;
  // Metrics hook (may be empty): a run reached a terminal state (`seconds` from its start,
  // negative when it never started).
  std::function<void(const std::string& blueprint, store::RunState state, double seconds)> on_run_end;
  // Several replicas on one database (docs/operations.md, "Several replicas on PostgreSQL"):
  // with a store that supports run leases, runs are queued in the database and each replica
  // claims as many as it has free workers, under a lease of `lease` that it renews every
  // `heartbeat`; a run whose lease expired is taken over by any replica. `replica_id` names
  // this one in the leases (empty: "<host>-<pid>"). `claim_poll` is how often an idle replica
  // looks for runs submitted to another one.
  std::string replica_id;
  std::chrono::milliseconds lease{10000};
  std::chrono::milliseconds heartbeat{2000};
  std::chrono::milliseconds claim_poll{200};
};

// "<host>-<pid>": a replica's name in run leases and generation claims when none is given.
std::string DefaultReplicaId();

// A review comment is at most this many bytes: every review travels with its artifact.
inline constexpr size_t kMaxReviewCommentBytes = 4096;

// A failed run's error is recorded up to this many bytes (then "... (N more bytes)").
inline constexpr size_t kMaxRunErrorBytes = 16 * 1024;

struct RunPolicy {
  bool allow_generation = false;
  bool allow_pending = false;
  // Generations this run asks for are retries number N (Decoding.retry): 0 is the first ask.
  int32_t generation_retry = 0;
  int64_t max_instructions = 0;
  int64_t max_memory_bytes = 0;
  int64_t max_output_bytes = 0;
};

struct SubmitRequest {
  std::string blueprint;  // resource name
  std::string input_json;
  RunPolicy policy;
  std::string request_id;
  std::string principal;
  // Whether `principal` may run unreviewed code (policy.allow_pending): the API decides (a
  // reviewer, on a server started with --allow-unreviewed=reviewers). Without it, asking is
  // PERMISSION_DENIED.
  bool may_run_unreviewed = false;
};

// A person's revision of a generation point (ProposeRevision).
struct Proposal {
  std::string generation_point;  // "{blueprint}/{point}"
  std::string blueprint;         // resource name; empty: the newest blueprint declaring it
  std::string source;
  std::string options_json;  // RE2 only
  std::string comment;
  std::string principal;
};

// What LockBlueprint writes.
struct LockResult {
  std::string text;
  std::vector<std::string> missing;  // points without a live approved revision
};

struct BlueprintView {
  store::BlueprintRecord record;
  std::vector<GenerationPoint> points;  // parsed from the stored specs
  // The live revision of each point that has one (source "live"), in declaration order.
  std::vector<store::Binding> bindings;
  std::vector<int64_t> binding_revisions;  // the revision of each of `bindings`
};

struct ReplayResult {
  bool matched = false;
  int64_t steps_compared = 0;
  int64_t first_mismatch_step = 0;  // -1: the final output (or error)
  std::string recorded_json;
  std::string replayed_json;
  std::string output_digest;  // of the replayed output; empty when it failed
};

struct ArtifactView {
  store::ArtifactRecord record;
  std::vector<store::ReviewEntry> reviews;
  // The newest stored backtest, without its differences (none: never backtested).
  std::optional<store::BacktestRecord> backtest;
};

// Defined in backtest.h.
struct TryOutcome;
struct BacktestRequest;

class Engine {
 public:
  // `store` and `lua_runner` must outlive the engine; `generator` may be null (no model).
  // Runs left pending by an earlier process are queued again; runs it left running are failed.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(store::Store* store,
                                                        LuaArtifactRunner* lua_runner,
                                                        Generator* generator,
                                                        EngineOptions options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Stops taking runs, interrupts running ones (they fail, saying the server stopped), leaves
  // queued ones pending for the next start, and joins the pool. Idempotent.
  void Shutdown();

  // Draining (docs/operations.md): from BeginDrain on, SubmitRun is UNAVAILABLE and no queued
  // run starts (they stay pending for the next server). Drain then gives the runs executing
  // until `grace` to finish, and puts those still running back in the queue (RequeueRun: pending,
  // their journal dropped) for the next server on the same data to run from their start; it
  // returns how many it re-queued. Call Shutdown after it. Both idempotent.
  void BeginDrain();
  int Drain(std::chrono::milliseconds grace);

  // What the metrics endpoint reports about the queue (a snapshot).
  struct QueueStats {
    int64_t queued = 0;     // submitted to this process, not yet taken by a worker
    int64_t executing = 0;  // taken by a worker
    int64_t requeued_by_drain = 0;  // since start
    // The same per blueprint name: (queued, executing).
    std::map<std::string, std::pair<int64_t, int64_t>> by_blueprint;
    // With runs queued in the database (several replicas): since start, runs this replica
    // claimed, the ones of those it took over from a replica whose lease expired, and leases it
    // lost; and over the whole database now, runs pending and running (-1: not read).
    bool shared_queue = false;
    int64_t claimed = 0;
    int64_t taken_over = 0;
    int64_t leases_lost = 0;
    int64_t store_pending = -1;
    int64_t store_running = -1;
  };
  // This replica's name in run leases (empty: runs are queued in this process).
  const std::string& replica_id() const { return replica_id_; }
  QueueStats queue_stats();

  // {"limits":{...},"re2":{...},"rote":"<version>","sandbox":"<profile>"} (canonical JSON).
  std::string EngineProfileJson(const sandbox::Limits& limits) const;

  // ---- blueprints
  // Whether the registering principal may approve an artifact: OK, or PERMISSION_DENIED saying
  // why not. The API passes the very check ReviewArtifact makes (the review role and the
  // four-eyes rule), so a lockfile approves nothing its registrant could not approve in review.
  using ApprovalCheck = std::function<absl::Status(const store::ArtifactRecord& artifact)>;
  // The lockfile's artifacts are stored with author "expert" and bound. A pending one is
  // approved in review by `principal` when `may_approve` allows it; otherwise (or without a
  // check) it stays pending until someone who may approve it does.
  absl::StatusOr<BlueprintView> RegisterBlueprint(std::string_view source, std::string_view lockfile,
                                                  std::string_view filename, const std::string& principal,
                                                  const ApprovalCheck& may_approve = {});
  absl::StatusOr<BlueprintView> GetBlueprint(std::string_view name);
  absl::StatusOr<store::Page<BlueprintView>> ListBlueprints(std::string_view display_name,
                                                            const store::PageRequest& page);
  // The live approved revision of each point as a lockfile; with `skeleton`, entries to fill in
  // for the points without one instead.
  absl::StatusOr<LockResult> LockBlueprint(std::string_view name, bool skeleton = false);

  // ---- runs
  absl::StatusOr<store::RunRecord> SubmitRun(const SubmitRequest& request);
  absl::StatusOr<store::RunRecord> GetRun(std::string_view name);
  // `submitter` non-empty: only that principal's runs.
  absl::StatusOr<store::Page<store::RunRecord>> ListRuns(std::string_view blueprint,
                                                         std::optional<store::RunState> state,
                                                         std::string_view submitter,
                                                         const store::PageRequest& page);
  absl::StatusOr<store::RunRecord> CancelRun(std::string_view name, const std::string& principal);
  absl::StatusOr<ReplayResult> ReplayRun(std::string_view name);
  // Sends the run's events from the start (sequence dense from 0) and returns after the
  // terminal state. `send` returns false when the client has gone; `stop` is polled.
  absl::Status WatchRun(std::string_view name, const std::function<bool(const RunEvent&)>& send,
                        const std::function<bool()>& stop);
  // The output of a succeeded run as canonical JSON (verified against its digest).
  absl::StatusOr<std::string> OutputJson(const store::RunRecord& run);
  // One value the run recorded, verified against its digest: its input, its output (also when
  // `digest` is empty), or the input or output of one of its steps. NOT_FOUND for any other
  // digest, FAILED_PRECONDITION for the output of a run that did not succeed.
  absl::StatusOr<std::string> RunValue(const store::RunRecord& run, std::string_view digest);

  // ---- live revisions, proposals and the audit log (live_revisions.cc)
  // Makes an approved revision live. Audited with `comment`.
  absl::StatusOr<ArtifactView> PromoteRevision(std::string_view name, std::string_view comment,
                                               const std::string& principal);
  // Validates the source against the point's examples exactly as generated code is
  // (ValidateArtifact); one that fails is FAILED_PRECONDITION naming the failing example.
  // Stored pending with the proposer as author, audited "propose".
  absl::StatusOr<ArtifactView> ProposeRevision(const Proposal& proposal);
  absl::StatusOr<store::Page<store::AuditEntry>> ListAuditEntries(std::string_view generation_point,
                                                                  std::string_view artifact_digest,
                                                                  const store::PageRequest& page);

  // ---- artifacts
  absl::StatusOr<ArtifactView> GetArtifact(std::string_view name);
  absl::StatusOr<store::Page<ArtifactView>> ListArtifacts(std::string_view generation_point,
                                                          std::optional<store::ReviewState> state,
                                                          const store::PageRequest& page);
  absl::StatusOr<store::Page<ArtifactView>> ListRevisions(std::string_view generation_point,
                                                          const store::PageRequest& page);
  absl::StatusOr<ArtifactView> ReviewArtifact(std::string_view name, store::ReviewState decision,
                                              std::string_view comment, std::string_view etag,
                                              const std::string& principal);
  absl::StatusOr<std::string> DiffRevisions(std::string_view generation_point, int64_t from_revision,
                                            int64_t to_revision);

  // ---- try and backtest (backtest.cc, backtest.h)
  // Runs the artifact `name` (any review state) on one input under the run limits `limits`
  // asks for (0: the defaults; above the maximum is INVALID_ARGUMENT).
  absl::StatusOr<TryOutcome> TryArtifact(std::string_view name, std::string_view input_json,
                                                const RunPolicy& limits);
  // Backtests the artifact `name` and stores the result; `cancelled` is polled between batches.
  absl::StatusOr<store::BacktestRecord> BacktestRevision(std::string_view name, const BacktestRequest& request,
                                                         const std::function<bool()>& cancelled);
  // The newest stored backtest of the artifact `name`.
  absl::StatusOr<store::BacktestRecord> GetBacktest(std::string_view name);

  store::Store* store() const { return store_; }

 private:
  struct RunControl;
  struct Job {
    int64_t run_id = 0;
    std::shared_ptr<RunControl> control;
  };

  Engine(store::Store* store, LuaArtifactRunner* lua_runner, Generator* generator, EngineOptions options);
  absl::Status Recover();
  // The policy of a run whose code is generated when it executes, as recorded with the run, so
  // a later server that takes the run up (it was queued or re-queued when this one stopped, or
  // another replica claims it) generates it alike.
  store::NewRunEvent PolicyEvent(const RunPolicy& policy) const;
  // What a worker needs to execute a stored pending (or claimed) run; null when the run cannot
  // run anywhere (its code is to be generated under a policy nobody recorded), after failing it.
  absl::StatusOr<std::shared_ptr<RunControl>> ControlFor(const store::RunRecord& run);
  // Runs queued in the database (shared_queue_): the claiming and lease-renewing threads, a
  // claimed run handed to the workers, and claimed runs no worker took given back.
  void ClaimLoop();
  void HeartbeatLoop();
  void TakeUp(const store::ClaimedRun& claimed);
  void GiveBackQueued(std::string_view why);
  QueueStats LocalQueueStats();
  // The recorded policy (PolicyEvent) of a run; nullopt when none was recorded.
  absl::StatusOr<std::optional<RunPolicy>> RecordedPolicy(int64_t run_id);
  // The declared name of a stored blueprint (cached: blueprints never change).
  std::string BlueprintNameOf(const std::string& digest);
  void WorkerLoop();
  void Enqueue(int64_t run_id, std::shared_ptr<RunControl> control);
  void ExecuteRun(const Job& job);
  absl::Status FinishAndAnnounce(int64_t run_id, const store::RunOutcome& outcome);
  bool IsActive(int64_t run_id);

  absl::StatusOr<store::BlueprintRecord> ResolveBlueprint(std::string_view name);
  absl::StatusOr<BlueprintView> ViewOf(store::BlueprintRecord record);
  absl::StatusOr<sandbox::Limits> EffectiveLimits(const RunPolicy& policy) const;
  // Bindings for every point that needs no generation; the rest in `deferred`.
  absl::StatusOr<std::vector<store::Binding>> ResolveBindings(const BlueprintView& bp, const RunPolicy& policy,
                                                              std::vector<GenerationPoint>* deferred);
  absl::StatusOr<std::optional<store::ArtifactRecord>> NewestArtifactFor(const std::string& key,
                                                                         const GenerationPoint& point,
                                                                         store::ReviewState state);
  // The live revision of the point (key and spec), if it has one.
  absl::StatusOr<std::optional<store::ArtifactRecord>> LiveArtifactFor(const std::string& key,
                                                                       const GenerationPoint& point);

  store::Store* const store_;
  LuaArtifactRunner* const lua_runner_;
  Generator* const generator_;
  const EngineOptions options_;

  std::mutex mu_;
  std::condition_variable queue_cv_;
  std::condition_variable finished_cv_;
  std::deque<Job> queue_;
  std::map<int64_t, std::shared_ptr<RunControl>> active_;
  bool stopping_ = false;
  bool draining_ = false;
  // Runs a worker took (between popping them and finishing them), for Drain.
  std::map<int64_t, std::shared_ptr<RunControl>> executing_;
  int64_t requeued_by_drain_ = 0;
  std::mutex names_mu_;
  std::map<std::string, std::string> blueprint_names_;  // digest -> name, guarded by names_mu_
  std::vector<std::thread> workers_;

  // Several replicas on one database (see EngineOptions::replica_id).
  bool shared_queue_ = false;
  std::string replica_id_;
  std::condition_variable claim_cv_;  // wakes the claimer: a run was submitted or a worker freed
  bool claim_poke_ = false;
  bool heartbeat_stop_ = false;
  int64_t claimed_ = 0;
  int64_t taken_over_ = 0;
  int64_t leases_lost_ = 0;
  std::thread claimer_;
  std::thread heartbeat_;

  EventBus events_;
};

}  // namespace rote::orchestrator::engine
