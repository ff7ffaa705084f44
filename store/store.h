// The rote store: everything rote knows, in one SQLite file (plus large blobs as files).
//
// Thread-safe: call any method from any thread. Writes go through one writer thread that
// commits queued writes together (group commit) and returns only after COMMIT, so an OK write
// is durable (with SyncMode::kFull, across power loss; with kNormal, across process crashes).
// Reads use a pool of connections and see every write acknowledged before they started.
//
// Errors (absl::Status codes):
//   INVALID_ARGUMENT     malformed digest, bad page token, page token of another filter
//   NOT_FOUND            no such blob / blueprint / artifact / run / record
//   FAILED_PRECONDITION  illegal run transition, reference to something not stored, a digest
//                        already stored with different content, database newer than this code
//   ABORTED              stale etag on review (re-read and retry)
//   DATA_LOSS            stored bytes no longer match their digest, corrupt database
//   UNAVAILABLE          database busy (locked by another process) or I/O error: retryable
//   RESOURCE_EXHAUSTED   disk or memory full
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "store/records.h"

namespace rote::store {

enum class SyncMode {
  kFull,    // fsync the WAL on every commit: survives power loss
  kNormal,  // fsync only at checkpoints: survives process crashes, may lose the last commits
            // on power loss
};

struct StoreOptions {
  // A data directory (the database is <path>/rote.db, large blobs under <path>/blobs/) or, when
  // it ends in ".db", the database file itself (large blobs under <path>.blobs/).
  std::string path;
  SyncMode synchronous = SyncMode::kFull;
  int reader_pool_size = 4;
  // Upper bound on waiting for a lock held by another process; past it, UNAVAILABLE.
  int busy_timeout_ms = 5000;
  // Blobs up to this size are stored in the database, larger ones as files (docs/store.md
  // has the measurement behind the default).
  int64_t inline_blob_max_bytes = 256 * 1024;
  // A cap on the database file's size (0: none). Writes that would pass it fail with
  // RESOURCE_EXHAUSTED, as on a full disk.
  int64_t max_database_bytes = 0;
  // Open runs PRAGMA quick_check; this runs the slower full integrity_check instead.
  bool full_integrity_check_on_open = false;
  // Most writes committed in one transaction.
  int max_writes_per_commit = 1024;
  // How long the writer may hold a commit back waiting for the writers of the previous
  // group to come back, so they share one fsync (0: never wait). Only waits when fewer
  // writes are queued than the previous group carried; a single writer never waits.
  int group_commit_wait_us = 1000;
  // Clock for every time the store records; unix milliseconds. Default: the system clock.
  std::function<int64_t()> clock_ms;
};

struct StoreStats {
  int64_t commits = 0;  // write transactions
  int64_t writes = 0;   // writes they carried (writes / commits = mean group size)
};

class Store {
 public:
  static absl::StatusOr<std::unique_ptr<Store>> Open(const StoreOptions& options);
  virtual ~Store() = default;

  // ---- blobs: content-addressed, deduplicated, verified on every read
  virtual absl::StatusOr<BlobRef> PutBlob(std::string_view bytes) = 0;
  // DATA_LOSS when the stored bytes no longer hash to `digest`; the bytes are never returned.
  virtual absl::StatusOr<std::string> GetBlob(std::string_view digest) = 0;
  virtual absl::StatusOr<BlobRef> StatBlob(std::string_view digest) = 0;

  // ---- generation specs and blueprints (both immutable, idempotent by digest)
  virtual absl::Status PutGenerationSpec(const GenerationSpecRecord& spec) = 0;
  virtual absl::StatusOr<GenerationSpecRecord> GetGenerationSpec(std::string_view digest) = 0;
  // Also stores the blueprint's generation specs.
  virtual absl::StatusOr<BlueprintRecord> PutBlueprint(const BlueprintRecord& blueprint) = 0;
  virtual absl::StatusOr<BlueprintRecord> GetBlueprint(std::string_view digest) = 0;
  // Every stored blueprint with this declared name, oldest first.
  virtual absl::StatusOr<std::vector<BlueprintRecord>> FindBlueprintsByName(
      std::string_view name) = 0;
  virtual absl::StatusOr<Page<BlueprintRecord>> ListBlueprints(const BlueprintFilter& filter,
                                                               const PageRequest& page) = 0;

  // ---- artifacts, revisions, review
  // Stores a new artifact as the next revision of its generation point, state pending. Putting
  // the same digest again returns the stored record (FAILED_PRECONDITION if the content
  // differs). Attempt blobs must already be stored.
  virtual absl::StatusOr<ArtifactRecord> PutArtifact(const ArtifactRecord& artifact) = 0;
  virtual absl::StatusOr<ArtifactRecord> GetArtifact(std::string_view digest) = 0;
  virtual absl::StatusOr<ArtifactRecord> GetRevision(std::string_view generation_point,
                                                     int64_t revision) = 0;
  // Oldest first.
  virtual absl::StatusOr<Page<ArtifactRecord>> ListArtifacts(const ArtifactFilter& filter,
                                                             const PageRequest& page) = 0;
  // The revisions of one generation point, revision 1 first.
  virtual absl::StatusOr<Page<ArtifactRecord>> ListRevisions(std::string_view generation_point,
                                                             const PageRequest& page) = 0;
  // Records the decision in the review log and sets the artifact's state; ABORTED when
  // expected_etag is set and stale. Returns the artifact with its new etag.
  virtual absl::StatusOr<ArtifactRecord> ReviewArtifact(const ReviewRequest& review) = 0;
  // The review log of one artifact, oldest first.
  virtual absl::StatusOr<std::vector<ReviewEntry>> ListReviews(std::string_view digest) = 0;

  // ---- live revisions and the audit log
  // Every review (ReviewArtifact), promotion and proposal is audited in its own transaction.
  // The live revision of a (generation point, spec digest); NOT_FOUND when it has none.
  virtual absl::StatusOr<LiveRevision> GetLiveRevision(std::string_view generation_point,
                                                       std::string_view spec_digest) = 0;
  // Makes an approved artifact live (FAILED_PRECONDITION otherwise) and audits it. Returns the
  // artifact; with only_if_unset and a live revision already there, changes nothing.
  virtual absl::StatusOr<ArtifactRecord> PromoteRevision(const PromoteRequest& request) = 0;
  // PutArtifact, and the "propose" audit entry `audit` in the same transaction (its
  // artifact_digest and revision are filled in).
  virtual absl::StatusOr<ArtifactRecord> ProposeArtifact(const ArtifactRecord& artifact,
                                                         const AuditEntry& audit) = 0;
  // Oldest first.
  virtual absl::StatusOr<Page<AuditEntry>> ListAuditEntries(const AuditFilter& filter,
                                                            const PageRequest& page) = 0;

  // ---- bindings: blueprint generation point -> artifact (one per point; set replaces)
  virtual absl::Status SetBinding(std::string_view blueprint_digest, const Binding& binding) = 0;
  virtual absl::StatusOr<Binding> GetBinding(std::string_view blueprint_digest,
                                             std::string_view generation_point) = 0;
  // Sorted by generation point.
  virtual absl::StatusOr<std::vector<Binding>> ListBindings(std::string_view blueprint_digest) = 0;

  // ---- runs
  // With a request_id, the first call for (submitter, request_id) creates the run and later
  // calls return it with created = false, also when they race.
  virtual absl::StatusOr<CreateRunResult> CreateRun(const NewRun& run) = 0;
  virtual absl::StatusOr<RunRecord> GetRun(int64_t run_id) = 0;
  // pending -> running. FAILED_PRECONDITION from any other state.
  virtual absl::StatusOr<RunRecord> StartRun(int64_t run_id) = 0;
  // Adds bindings resolved while the run executes; rejected once the run is terminal or when a
  // point is already bound to another artifact.
  virtual absl::Status AddRunBindings(int64_t run_id, const std::vector<Binding>& bindings) = 0;
  // To a terminal state; FAILED_PRECONDITION when the transition is illegal.
  virtual absl::StatusOr<RunRecord> FinishRun(int64_t run_id, const RunOutcome& outcome) = 0;
  // Oldest first.
  virtual absl::StatusOr<Page<RunRecord>> ListRuns(const RunFilter& filter,
                                                   const PageRequest& page) = 0;
  // running -> pending for a run a draining server gives back (docs/operations.md, "Draining"),
  // in one transaction: the journal of the abandoned attempt (its steps) is dropped, start_ms
  // cleared, and the event (kind, payload) appended to the run's history, so the next server
  // runs it from its start and its result holds only that attempt's steps. FAILED_PRECONDITION
  // from any other state. Not pure, so a store without it still builds: UNIMPLEMENTED, and the
  // engine then records such a run as interrupted.
  virtual absl::StatusOr<RunRecord> RequeueRun(int64_t run_id, std::string_view event_kind,
                                               std::string_view event_payload) {
    (void)run_id, (void)event_kind, (void)event_payload;
    return absl::UnimplementedError("this store cannot re-queue runs");
  }

  // ---- run leases: several replicas on one database (docs/operations.md, "Several replicas on
  // PostgreSQL"). A store that several processes share (PostgreSQL) queues runs in the database
  // and hands them out with leases; the others answer UNIMPLEMENTED and their server queues runs
  // in its own process (SupportsRunLeases false).
  virtual bool SupportsRunLeases() const { return false; }
  // Claims up to max_runs runs for replica_id, oldest first, passing over rows another claim
  // holds locked (SELECT ... FOR UPDATE SKIP LOCKED): pending runs, and running runs whose lease
  // expired (their replica stopped renewing it: a takeover, which drops the abandoned attempt's
  // steps and appends the takeover event, as RequeueRun does). Each claimed run is running under
  // a new lease (epoch + 1) that expires lease_ms from now on the database's clock. From then on
  // every write of this store object to that run (FinishRun, FinishRunWithEvent, AppendSteps,
  // AppendRunEvent, AddRunBindings, RequeueRun) is fenced: ABORTED, changing nothing, once the
  // lease is another claim's; FinishRun and RequeueRun end the lease.
  virtual absl::StatusOr<std::vector<ClaimedRun>> ClaimRuns(const ClaimRequest& request) {
    (void)request;
    return absl::UnimplementedError("this store does not share its runs between processes");
  }
  // Extends by lease_ms every lease this store object holds that is still its own; returns the
  // runs whose lease it lost since the last call (taken over, or ended by another process, e.g.
  // cancelled), each once.
  virtual absl::StatusOr<std::vector<int64_t>> RenewRunLeases(int64_t lease_ms) {
    (void)lease_ms;
    return absl::UnimplementedError("this store does not share its runs between processes");
  }
  // The number of runs in each state, over the whole store (every replica's queue).
  virtual absl::StatusOr<std::vector<std::pair<RunState, int64_t>>> CountRunsByState() {
    return absl::UnimplementedError("this store does not count runs by state");
  }
  // Called with a run's id after events of that run were appended by any process on the store
  // (PostgreSQL: LISTEN/NOTIFY), from a thread of the store; an empty function stops the calls
  // (when it returns, none is in flight). UNIMPLEMENTED where only this process writes.
  virtual absl::Status SetRunEventListener(std::function<void(int64_t run_id)> listener) {
    (void)listener;
    return absl::UnimplementedError("this store has no other writers to listen to");
  }
  // Claims the generation of `request_digest` for replica_id, so that the identical request on
  // another replica waits for its result instead of asking its own model: true when replica_id
  // holds the claim now (nobody did, it did already: this extends it, or the holder's claim
  // expired), false while another replica holds it. lease_ms from now on the database's clock.
  // ReleaseGeneration gives it up. UNIMPLEMENTED where only one process generates.
  virtual absl::StatusOr<bool> ClaimGeneration(std::string_view request_digest,
                                               std::string_view replica_id, int64_t lease_ms) {
    (void)request_digest, (void)replica_id, (void)lease_ms;
    return absl::UnimplementedError("this store does not share generations between processes");
  }
  virtual absl::Status ReleaseGeneration(std::string_view request_digest,
                                         std::string_view replica_id) {
    (void)request_digest, (void)replica_id;
    return absl::UnimplementedError("this store does not share generations between processes");
  }
  // CreateRun, and `events` appended to a created run in the same transaction where the store
  // can (so a replica that claims the run at once finds them). Default: one write after the
  // other.
  virtual absl::StatusOr<CreateRunResult> CreateRunWithEvents(const NewRun& run,
                                                              const std::vector<NewRunEvent>& events);
  // FinishRun and the event in one transaction where the store can (so a watcher never sees
  // the terminal state without its event). Default: one write after the other.
  virtual absl::StatusOr<RunRecord> FinishRunWithEvent(int64_t run_id, const RunOutcome& outcome,
                                                       const NewRunEvent& event);

  // ---- the step journal and events of a run
  // steps[i].index must equal the run's step count + i; rejected once the run is terminal.
  virtual absl::Status AppendSteps(int64_t run_id, const std::vector<StepRecord>& steps) = 0;
  virtual absl::StatusOr<std::vector<StepRecord>> ListSteps(int64_t run_id) = 0;
  // Returns the event's sequence number (1, 2, ...).
  virtual absl::StatusOr<int64_t> AppendRunEvent(int64_t run_id, std::string_view kind,
                                                 std::string_view payload) = 0;
  // Events with sequence > after_sequence, at most `limit` (<= 0: all).
  virtual absl::StatusOr<std::vector<RunEvent>> ListRunEvents(int64_t run_id,
                                                              int64_t after_sequence,
                                                              int32_t limit) = 0;

  // ---- backtests
  // One page of the recorded calls of a generation point (PointStepQuery says which and in
  // what order), with their values where they are stored inline, verified like GetBlob.
  virtual absl::StatusOr<std::vector<PointStep>> ListPointSteps(const PointStepQuery& query) = 0;
  // Stores a backtest of an artifact (which must be stored); the newest one is the artifact's.
  // Differences past kMaxBacktestDifferences are INVALID_ARGUMENT.
  virtual absl::StatusOr<BacktestRecord> PutBacktest(const BacktestRecord& backtest) = 0;
  // The newest backtest of the artifact; NOT_FOUND when it has none. `with_differences`
  // false leaves the list out (summaries).
  virtual absl::StatusOr<BacktestRecord> GetBacktest(std::string_view artifact_digest,
                                                     bool with_differences) = 0;

  // ---- generation cache: request digest -> artifact digest (first put wins)
  virtual absl::StatusOr<std::string> GetCachedGeneration(std::string_view request_digest) = 0;
  // Returns the artifact digest now cached (the earlier one if there was one).
  virtual absl::StatusOr<std::string> PutCachedGeneration(std::string_view request_digest,
                                                          std::string_view artifact_digest) = 0;

  // ---- generations: every generation request, passed or failed, with its attempts
  // Stores the record unless its request digest is stored already; returns the stored one.
  // Attempt blobs and a passed record's artifact must already be stored.
  virtual absl::StatusOr<GenerationRecord> PutGeneration(const GenerationRecord& generation) = 0;
  virtual absl::StatusOr<GenerationRecord> GetGeneration(std::string_view request_digest) = 0;
  // Request digests that start with `prefix` ("sha256:" and some hex digits), at most `limit`,
  // in digest order.
  virtual absl::StatusOr<std::vector<std::string>> FindGenerationsByPrefix(std::string_view prefix,
                                                                           int limit) = 0;
  // Oldest first.
  virtual absl::StatusOr<Page<GenerationRecord>> ListGenerations(const GenerationFilter& filter,
                                                                 const PageRequest& page) = 0;
  // The journaled steps of a run from `page`, index order (ListSteps, paged).
  virtual absl::StatusOr<Page<StepRecord>> ListStepsPage(int64_t run_id,
                                                         const PageRequest& page) = 0;

  // ---- idempotency: (principal, request_id) -> original response (first writer wins)
  virtual absl::StatusOr<IdempotencyRecord> GetIdempotency(std::string_view principal,
                                                           std::string_view request_id) = 0;
  // Returns the stored record: `record` if it was first, else the earlier one. INVALID_ARGUMENT
  // when the earlier one was for a different request_digest.
  virtual absl::StatusOr<IdempotencyRecord> PutIdempotency(const IdempotencyRecord& record) = 0;

  // ---- small key-value cache (e.g. a model digest keyed by file identity)
  virtual absl::StatusOr<std::string> KvGet(std::string_view ns, std::string_view key) = 0;
  virtual absl::Status KvPut(std::string_view ns, std::string_view key,
                             std::string_view value) = 0;
  virtual absl::Status KvDelete(std::string_view ns, std::string_view key) = 0;

  // ---- administration
  // A consistent copy of the database in one self-contained file (large blobs copied in),
  // written atomically to `dest_path`, while the store stays in use.
  virtual absl::Status Backup(const std::string& dest_path) = 0;
  // PRAGMA integrity_check (full) or quick_check, plus foreign_key_check. DATA_LOSS on failure.
  virtual absl::Status CheckIntegrity(bool full) = 0;
  virtual int SchemaVersion() const = 0;
  virtual StoreStats Stats() const = 0;

  // ---- lookup by prefix (the short names people type; docs/architecture.md, "Names")
  // At most `limit` matches in ascending order, and how many there are in all.
  struct Matches {
    std::vector<std::string> items;
    int64_t total = 0;
  };
  // Digests of stored artifacts / blueprints that start with `digest_prefix` ("sha256:" and 1 to
  // 64 lowercase hex digits, else INVALID_ARGUMENT). An indexed range scan: cost follows the
  // number of matches, not the number of rows.
  virtual absl::StatusOr<Matches> FindArtifactsByDigestPrefix(std::string_view digest_prefix,
                                                              int limit) = 0;
  virtual absl::StatusOr<Matches> FindBlueprintsByDigestPrefix(std::string_view digest_prefix,
                                                               int limit) = 0;
  // Declared names of the blueprints (each name once, any stored version) that declare a
  // generation point named `point`.
  virtual absl::StatusOr<Matches> FindBlueprintNamesDeclaringPoint(std::string_view point,
                                                                   int limit) = 0;
};

}  // namespace rote::store
