// The PostgreSQL implementation of Store, private to store/ (Store::Open picks it for a
// postgresql:// URL). Every write is one READ COMMITTED transaction that locks what its checks
// depend on before checking (the run's row, an advisory lock per generation point, one for the
// audit log) and lets unique keys decide races (INSERT ... ON CONFLICT), so its check-then-write
// sequences are atomic as under SQLite's single writer, also with several processes (replicas)
// on one database, while writes to different rows commit concurrently. Reads run in one
// REPEATABLE READ snapshot each. Blobs live in the database: up to 1 MiB in the blob's row, larger ones in
// 1 MiB chunks.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "store/page_token.h"
#include "store/pg_conn.h"
#include "store/status_macros.h"
#include "store/store.h"

namespace rote::store::internal {

inline constexpr int64_t kPgChunkBytes = 1 << 20;

// The columns of an attempt row, in the order ReadPgAttempt reads them.
inline constexpr std::string_view kPgAttemptColumns =
    "idx, prompt_digest, output_digest, failure, code_digest, prompt_tokens, output_tokens, "
    "start_ms, duration_ms";

struct PgDb {
  std::function<int64_t()> clock_ms;
  PageTokenCodec tokens{""};
  PgPool pool;
  std::atomic<int64_t> commits{0};

  // One write transaction: `fn(conn)` runs inside BEGIN ... COMMIT and is run again from the
  // start (so it must only assign its results) when PostgreSQL reports a deadlock or
  // serialization failure.
  absl::Status Write(const std::function<absl::Status(PgConn&)>& fn);

  // A read in one snapshot.
  template <typename F>
  auto Read(F&& fn) -> decltype(fn(std::declval<PgConn&>())) {
    PgPool::Lease lease = pool.Acquire();
    PgConn& conn = *lease;
    RETURN_IF_ERROR(conn.ExecScript("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"));
    auto result = fn(conn);
    // Ending a read-only transaction cannot lose anything; its status adds nothing.
    conn.ExecScript(result.ok() ? "COMMIT" : "ROLLBACK").IgnoreError();
    return result;
  }
};

// The run's record, and appending run events (the caller holds the run's row lock).
absl::StatusOr<RunRecord> PgLoadRun(PgConn& conn, int64_t run_id);
absl::StatusOr<int64_t> PgInsertRunEvent(PgConn& conn, int64_t run_id, int64_t now_ms,
                                         std::string_view kind, std::string_view payload);
absl::Status PgInsertNewRunEvents(PgConn& conn, int64_t run_id, int64_t now_ms,
                                  const std::vector<NewRunEvent>& events);

// The leases one store object holds (ClaimRuns), by run: the fence of its writes to those runs.
// A lease stays here until FinishRun or RequeueRun ends it, also once lost, so a replica that
// lost a run can never write to it again.
class PgLeases {
 public:
  struct Lease {
    std::string owner;
    int64_t epoch = 0;
    bool lost = false;
  };
  void Hold(int64_t run_id, std::string owner, int64_t epoch);
  void End(int64_t run_id);
  // Marks the run's lease lost; false when it was lost already (or not held).
  bool MarkLost(int64_t run_id);
  // The leases not known to be lost.
  std::vector<std::pair<int64_t, Lease>> Held();
  // With the run's row locked: OK when this object holds no lease on the run or holds the one
  // the run has; ABORTED (changing nothing) when the run's lease is no longer this one.
  absl::Status Check(PgConn& conn, int64_t run_id);

 private:
  std::mutex mu_;
  std::map<int64_t, Lease> leases_;
};

GenerationAttempt ReadPgAttempt(const PgResult& res, int row, int first_col);
absl::Status PgInsertAttempts(PgConn& conn, std::string_view table, std::string_view owner_column,
                              int64_t owner_id, const std::vector<GenerationAttempt>& attempts);
absl::Status PgRequireBlob(PgConn& conn, std::string_view digest, std::string_view what);
absl::Status PgRequireArtifact(PgConn& conn, std::string_view digest, std::string_view what);
absl::Status PgRequireAttemptBlobs(PgConn& conn, const std::vector<GenerationAttempt>& attempts);
absl::Status PgAppendAudit(PgConn& conn, const AuditEntry& entry, int64_t now_ms);
// Takes the transaction's lock of a generation point: revisions, reviews and live revisions of
// one point change one transaction at a time. Taken before the audit lock, never after.
absl::Status PgLockPoint(PgConn& conn, std::string_view generation_point);

class PgStore final : public Store {
 public:
  explicit PgStore(StoreOptions options);
  ~PgStore() override;
  absl::Status Init();

  // Run leases, run event notifications and generation claims (pg_leases.cc).
  bool SupportsRunLeases() const override { return true; }
  absl::StatusOr<std::vector<ClaimedRun>> ClaimRuns(const ClaimRequest& request) override;
  absl::StatusOr<std::vector<int64_t>> RenewRunLeases(int64_t lease_ms) override;
  absl::StatusOr<std::vector<std::pair<RunState, int64_t>>> CountRunsByState() override;
  absl::Status SetRunEventListener(std::function<void(int64_t run_id)> listener) override;
  absl::StatusOr<CreateRunResult> CreateRunWithEvents(const NewRun& run,
                                                      const std::vector<NewRunEvent>& events) override;
  absl::StatusOr<RunRecord> FinishRunWithEvent(int64_t run_id, const RunOutcome& outcome,
                                               const NewRunEvent& event) override;
  absl::StatusOr<bool> ClaimGeneration(std::string_view request_digest,
                                       std::string_view replica_id, int64_t lease_ms) override;
  absl::Status ReleaseGeneration(std::string_view request_digest,
                                 std::string_view replica_id) override;

  absl::StatusOr<BlobRef> PutBlob(std::string_view bytes) override;
  absl::StatusOr<std::string> GetBlob(std::string_view digest) override;
  absl::StatusOr<BlobRef> StatBlob(std::string_view digest) override;

  absl::Status PutGenerationSpec(const GenerationSpecRecord& spec) override;
  absl::StatusOr<GenerationSpecRecord> GetGenerationSpec(std::string_view digest) override;
  absl::StatusOr<BlueprintRecord> PutBlueprint(const BlueprintRecord& blueprint) override;
  absl::StatusOr<BlueprintRecord> GetBlueprint(std::string_view digest) override;
  absl::StatusOr<std::vector<BlueprintRecord>> FindBlueprintsByName(std::string_view name) override;
  absl::StatusOr<Page<BlueprintRecord>> ListBlueprints(const BlueprintFilter& filter,
                                                       const PageRequest& page) override;

  absl::StatusOr<ArtifactRecord> PutArtifact(const ArtifactRecord& artifact) override;
  absl::StatusOr<ArtifactRecord> GetArtifact(std::string_view digest) override;
  absl::StatusOr<ArtifactRecord> GetRevision(std::string_view generation_point,
                                             int64_t revision) override;
  absl::StatusOr<Page<ArtifactRecord>> ListArtifacts(const ArtifactFilter& filter,
                                                     const PageRequest& page) override;
  absl::StatusOr<Page<ArtifactRecord>> ListRevisions(std::string_view generation_point,
                                                     const PageRequest& page) override;
  absl::StatusOr<ArtifactRecord> ReviewArtifact(const ReviewRequest& review) override;
  absl::StatusOr<std::vector<ReviewEntry>> ListReviews(std::string_view digest) override;

  absl::StatusOr<LiveRevision> GetLiveRevision(std::string_view generation_point,
                                               std::string_view spec_digest) override;
  absl::StatusOr<ArtifactRecord> PromoteRevision(const PromoteRequest& request) override;
  absl::StatusOr<ArtifactRecord> ProposeArtifact(const ArtifactRecord& artifact,
                                                 const AuditEntry& audit) override;
  absl::StatusOr<Page<AuditEntry>> ListAuditEntries(const AuditFilter& filter,
                                                    const PageRequest& page) override;

  absl::Status SetBinding(std::string_view blueprint_digest, const Binding& binding) override;
  absl::StatusOr<Binding> GetBinding(std::string_view blueprint_digest,
                                     std::string_view generation_point) override;
  absl::StatusOr<std::vector<Binding>> ListBindings(std::string_view blueprint_digest) override;

  absl::StatusOr<CreateRunResult> CreateRun(const NewRun& run) override;
  absl::StatusOr<RunRecord> GetRun(int64_t run_id) override;
  absl::StatusOr<RunRecord> StartRun(int64_t run_id) override;
  absl::Status AddRunBindings(int64_t run_id, const std::vector<Binding>& bindings) override;
  absl::StatusOr<RunRecord> FinishRun(int64_t run_id, const RunOutcome& outcome) override;
  absl::StatusOr<Page<RunRecord>> ListRuns(const RunFilter& filter,
                                           const PageRequest& page) override;
  absl::StatusOr<RunRecord> RequeueRun(int64_t run_id, std::string_view event_kind,
                                       std::string_view event_payload) override;

  absl::Status AppendSteps(int64_t run_id, const std::vector<StepRecord>& steps) override;
  absl::StatusOr<std::vector<StepRecord>> ListSteps(int64_t run_id) override;
  absl::StatusOr<int64_t> AppendRunEvent(int64_t run_id, std::string_view kind,
                                         std::string_view payload) override;
  absl::StatusOr<std::vector<RunEvent>> ListRunEvents(int64_t run_id, int64_t after_sequence,
                                                      int32_t limit) override;

  absl::StatusOr<std::vector<PointStep>> ListPointSteps(const PointStepQuery& query) override;
  absl::StatusOr<BacktestRecord> PutBacktest(const BacktestRecord& backtest) override;
  absl::StatusOr<BacktestRecord> GetBacktest(std::string_view artifact_digest,
                                             bool with_differences) override;

  absl::StatusOr<std::string> GetCachedGeneration(std::string_view request_digest) override;
  absl::StatusOr<std::string> PutCachedGeneration(std::string_view request_digest,
                                                  std::string_view artifact_digest) override;

  absl::StatusOr<GenerationRecord> PutGeneration(const GenerationRecord& generation) override;
  absl::StatusOr<GenerationRecord> GetGeneration(std::string_view request_digest) override;
  absl::StatusOr<std::vector<std::string>> FindGenerationsByPrefix(std::string_view prefix,
                                                                   int limit) override;
  absl::StatusOr<Page<GenerationRecord>> ListGenerations(const GenerationFilter& filter,
                                                         const PageRequest& page) override;
  absl::StatusOr<Page<StepRecord>> ListStepsPage(int64_t run_id, const PageRequest& page) override;

  absl::StatusOr<IdempotencyRecord> GetIdempotency(std::string_view principal,
                                                   std::string_view request_id) override;
  absl::StatusOr<IdempotencyRecord> PutIdempotency(const IdempotencyRecord& record) override;

  absl::StatusOr<std::string> KvGet(std::string_view ns, std::string_view key) override;
  absl::Status KvPut(std::string_view ns, std::string_view key, std::string_view value) override;
  absl::Status KvDelete(std::string_view ns, std::string_view key) override;

  absl::Status Backup(const std::string& dest_path) override;
  absl::Status CheckIntegrity(bool full) override;
  int SchemaVersion() const override { return schema_version_; }
  StoreStats Stats() const override {
    const int64_t commits = db_.commits.load();
    return StoreStats{commits, commits};
  }

  absl::StatusOr<Matches> FindArtifactsByDigestPrefix(std::string_view digest_prefix,
                                                      int limit) override;
  absl::StatusOr<Matches> FindBlueprintsByDigestPrefix(std::string_view digest_prefix,
                                                       int limit) override;
  absl::StatusOr<Matches> FindBlueprintNamesDeclaringPoint(std::string_view point,
                                                           int limit) override;

 private:
  absl::StatusOr<ArtifactRecord> ProposeArtifactImpl(const ArtifactRecord& artifact,
                                                     const AuditEntry* audit);
  absl::StatusOr<RunRecord> Transition(int64_t run_id, RunState to, const RunOutcome* outcome,
                                       const NewRunEvent* event);
  // The LISTEN connection's loop (SetRunEventListener).
  void ListenLoop();
  absl::StatusOr<Matches> FindByDigestPrefix(std::string_view table, std::string_view prefix,
                                             int limit);
  StoreOptions options_;
  PgDb db_;
  int schema_version_ = 0;
  PgLeases leases_;
  std::mutex listener_mu_;  // held while the listener is called or replaced
  std::function<void(int64_t)> listener_;
  std::atomic<bool> listening_{false};
  std::thread listen_thread_;
};

}  // namespace rote::store::internal
