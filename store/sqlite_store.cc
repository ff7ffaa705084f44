// The SQLite implementation of Store: one writer thread (group commit) and a pool of reader
// connections over one WAL-mode database; large blobs as files beside it. This file opens the
// database and administers it; each resource family lives in its own file (sqlite_blobs.cc,
// sqlite_blueprints.cc, sqlite_artifacts.cc, sqlite_runs.cc, sqlite_caches.cc), and the store
// forwards to them.
#include <sqlite3.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <utility>

#include "store/pg_open.h"
#include "store/schema.h"
#include "store/sqlite.h"
#include "store/sqlite_artifacts.h"
#include "store/sqlite_review.h"
#include "store/sqlite_backtests.h"
#include "store/sqlite_blobs.h"
#include "store/sqlite_blueprints.h"
#include "store/sqlite_caches.h"
#include "store/sqlite_db.h"
#include "store/sqlite_lookup.h"
#include "store/sqlite_generations.h"
#include "store/sqlite_runs.h"
#include "store/status_macros.h"
#include "store/store.h"
#include "store/str_util.h"

namespace rote::store {
namespace {

using internal::Append;
using internal::Cat;
using internal::Connection;
using internal::ConnectionOptions;
using internal::GroupCommitWriter;
using internal::ReaderPool;
using internal::Statement;

int64_t SystemClockMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// ---- the store --------------------------------------------------------------------------------

class SqliteStore final : public Store {
 public:
  SqliteStore(StoreOptions options, std::string db_path, std::string blob_root)
      : options_(std::move(options)),
        db_path_(std::move(db_path)),
        blobs_(db_, std::move(blob_root), options_.inline_blob_max_bytes),
        blueprints_(db_),
        artifacts_(db_),
        review_(db_),
        runs_(db_),
        caches_(db_),
        lookup_(db_),
        backtests_(db_),
        generations_(db_) {
    if (!options_.clock_ms) options_.clock_ms = SystemClockMs;
    db_.clock_ms = options_.clock_ms;
  }

  absl::Status Init();

  absl::StatusOr<BlobRef> PutBlob(std::string_view bytes) override {
    return blobs_.PutBlob(bytes);
  }
  absl::StatusOr<std::string> GetBlob(std::string_view digest) override {
    return blobs_.GetBlob(digest);
  }
  absl::StatusOr<BlobRef> StatBlob(std::string_view digest) override {
    return blobs_.StatBlob(digest);
  }

  absl::Status PutGenerationSpec(const GenerationSpecRecord& spec) override {
    return blueprints_.PutGenerationSpec(spec);
  }
  absl::StatusOr<GenerationSpecRecord> GetGenerationSpec(std::string_view digest) override {
    return blueprints_.GetGenerationSpec(digest);
  }
  absl::StatusOr<BlueprintRecord> PutBlueprint(const BlueprintRecord& blueprint) override {
    return blueprints_.PutBlueprint(blueprint);
  }
  absl::StatusOr<BlueprintRecord> GetBlueprint(std::string_view digest) override {
    return blueprints_.GetBlueprint(digest);
  }
  absl::StatusOr<std::vector<BlueprintRecord>> FindBlueprintsByName(
      std::string_view name) override {
    return blueprints_.FindBlueprintsByName(name);
  }
  absl::StatusOr<Page<BlueprintRecord>> ListBlueprints(const BlueprintFilter& filter,
                                                       const PageRequest& page) override {
    return blueprints_.ListBlueprints(filter, page);
  }

  absl::StatusOr<ArtifactRecord> PutArtifact(const ArtifactRecord& artifact) override {
    return artifacts_.PutArtifact(artifact);
  }
  absl::StatusOr<ArtifactRecord> GetArtifact(std::string_view digest) override {
    return artifacts_.GetArtifact(digest);
  }
  absl::StatusOr<ArtifactRecord> GetRevision(std::string_view generation_point,
                                             int64_t revision) override {
    return artifacts_.GetRevision(generation_point, revision);
  }
  absl::StatusOr<Page<ArtifactRecord>> ListArtifacts(const ArtifactFilter& filter,
                                                     const PageRequest& page) override {
    return artifacts_.ListArtifacts(filter, page);
  }
  absl::StatusOr<Page<ArtifactRecord>> ListRevisions(std::string_view generation_point,
                                                     const PageRequest& page) override {
    return artifacts_.ListRevisions(generation_point, page);
  }
  absl::StatusOr<ArtifactRecord> ReviewArtifact(const ReviewRequest& review) override {
    return artifacts_.ReviewArtifact(review);
  }
  absl::StatusOr<std::vector<ReviewEntry>> ListReviews(std::string_view digest) override {
    return artifacts_.ListReviews(digest);
  }

  absl::StatusOr<LiveRevision> GetLiveRevision(std::string_view generation_point,
                                               std::string_view spec_digest) override {
    return review_.GetLiveRevision(generation_point, spec_digest);
  }
  absl::StatusOr<ArtifactRecord> PromoteRevision(const PromoteRequest& request) override {
    RETURN_IF_ERROR(review_.PromoteRevision(request));
    return artifacts_.GetArtifact(request.artifact_digest);
  }
  absl::StatusOr<ArtifactRecord> ProposeArtifact(const ArtifactRecord& artifact,
                                                 const AuditEntry& audit) override {
    return artifacts_.PutArtifact(artifact, &audit);
  }
  absl::StatusOr<Page<AuditEntry>> ListAuditEntries(const AuditFilter& filter,
                                                    const PageRequest& page) override {
    return review_.ListAuditEntries(filter, page);
  }

  absl::Status SetBinding(std::string_view blueprint_digest, const Binding& binding) override {
    return blueprints_.SetBinding(blueprint_digest, binding);
  }
  absl::StatusOr<Binding> GetBinding(std::string_view blueprint_digest,
                                     std::string_view generation_point) override {
    return blueprints_.GetBinding(blueprint_digest, generation_point);
  }
  absl::StatusOr<std::vector<Binding>> ListBindings(std::string_view blueprint_digest) override {
    return blueprints_.ListBindings(blueprint_digest);
  }

  absl::StatusOr<CreateRunResult> CreateRun(const NewRun& run) override {
    return runs_.CreateRun(run);
  }
  absl::StatusOr<RunRecord> GetRun(int64_t run_id) override { return runs_.GetRun(run_id); }
  absl::StatusOr<RunRecord> StartRun(int64_t run_id) override { return runs_.StartRun(run_id); }
  absl::Status AddRunBindings(int64_t run_id, const std::vector<Binding>& bindings) override {
    return runs_.AddRunBindings(run_id, bindings);
  }
  absl::StatusOr<RunRecord> FinishRun(int64_t run_id, const RunOutcome& outcome) override {
    return runs_.FinishRun(run_id, outcome);
  }
  absl::StatusOr<Page<RunRecord>> ListRuns(const RunFilter& filter,
                                           const PageRequest& page) override {
    return runs_.ListRuns(filter, page);
  }
  absl::StatusOr<RunRecord> RequeueRun(int64_t run_id, std::string_view event_kind,
                                       std::string_view event_payload) override {
    return runs_.RequeueRun(run_id, event_kind, event_payload);
  }

  absl::Status AppendSteps(int64_t run_id, const std::vector<StepRecord>& steps) override {
    return runs_.AppendSteps(run_id, steps);
  }
  absl::StatusOr<std::vector<StepRecord>> ListSteps(int64_t run_id) override {
    return runs_.ListSteps(run_id);
  }
  absl::StatusOr<int64_t> AppendRunEvent(int64_t run_id, std::string_view kind,
                                         std::string_view payload) override {
    return runs_.AppendRunEvent(run_id, kind, payload);
  }
  absl::StatusOr<std::vector<RunEvent>> ListRunEvents(int64_t run_id, int64_t after_sequence,
                                                      int32_t limit) override {
    return runs_.ListRunEvents(run_id, after_sequence, limit);
  }

  absl::StatusOr<std::vector<PointStep>> ListPointSteps(const PointStepQuery& query) override {
    return backtests_.ListPointSteps(query);
  }
  absl::StatusOr<BacktestRecord> PutBacktest(const BacktestRecord& backtest) override {
    return backtests_.PutBacktest(backtest);
  }
  absl::StatusOr<BacktestRecord> GetBacktest(std::string_view artifact_digest, bool with_differences) override {
    return backtests_.GetBacktest(artifact_digest, with_differences);
  }

  absl::StatusOr<std::string> GetCachedGeneration(std::string_view request_digest) override {
    return caches_.GetCachedGeneration(request_digest);
  }
  absl::StatusOr<std::string> PutCachedGeneration(std::string_view request_digest,
                                                  std::string_view artifact_digest) override {
    return caches_.PutCachedGeneration(request_digest, artifact_digest);
  }

  absl::StatusOr<GenerationRecord> PutGeneration(const GenerationRecord& generation) override {
    return generations_.PutGeneration(generation);
  }
  absl::StatusOr<GenerationRecord> GetGeneration(std::string_view request_digest) override {
    return generations_.GetGeneration(request_digest);
  }
  absl::StatusOr<std::vector<std::string>> FindGenerationsByPrefix(std::string_view prefix,
                                                                   int limit) override {
    return generations_.FindGenerationsByPrefix(prefix, limit);
  }
  absl::StatusOr<Page<GenerationRecord>> ListGenerations(const GenerationFilter& filter,
                                                         const PageRequest& page) override {
    return generations_.ListGenerations(filter, page);
  }
  absl::StatusOr<Page<StepRecord>> ListStepsPage(int64_t run_id, const PageRequest& page) override {
    return generations_.ListStepsPage(run_id, page);
  }

  absl::StatusOr<IdempotencyRecord> GetIdempotency(std::string_view principal,
                                                   std::string_view request_id) override {
    return caches_.GetIdempotency(principal, request_id);
  }
  absl::StatusOr<IdempotencyRecord> PutIdempotency(const IdempotencyRecord& record) override {
    return caches_.PutIdempotency(record);
  }

  absl::StatusOr<std::string> KvGet(std::string_view ns, std::string_view key) override {
    return caches_.KvGet(ns, key);
  }
  absl::Status KvPut(std::string_view ns, std::string_view key, std::string_view value) override {
    return caches_.KvPut(ns, key, value);
  }
  absl::Status KvDelete(std::string_view ns, std::string_view key) override {
    return caches_.KvDelete(ns, key);
  }

  absl::Status Backup(const std::string& dest_path) override;
  absl::Status CheckIntegrity(bool full) override;
  int SchemaVersion() const override { return schema_version_; }
  StoreStats Stats() const override {
    GroupCommitWriter::Stats s = db_.writer->stats();
    return StoreStats{s.commits, s.writes};
  }

  absl::StatusOr<Matches> FindArtifactsByDigestPrefix(std::string_view digest_prefix, int limit) override {
    return lookup_.FindArtifactsByDigestPrefix(digest_prefix, limit);
  }
  absl::StatusOr<Matches> FindBlueprintsByDigestPrefix(std::string_view digest_prefix, int limit) override {
    return lookup_.FindBlueprintsByDigestPrefix(digest_prefix, limit);
  }
  absl::StatusOr<Matches> FindBlueprintNamesDeclaringPoint(std::string_view point, int limit) override {
    return lookup_.FindBlueprintNamesDeclaringPoint(point, limit);
  }

 private:
  StoreOptions options_;
  std::string db_path_;
  internal::SqliteDb db_;
  internal::SqliteBlobs blobs_;
  internal::SqliteBlueprints blueprints_;
  internal::SqliteArtifacts artifacts_;
  internal::SqliteReview review_;
  internal::SqliteRuns runs_;
  internal::SqliteCaches caches_;
  internal::SqliteLookup lookup_;
  internal::SqliteBacktests backtests_;
  internal::SqliteGenerations generations_;
  int schema_version_ = 0;
};

absl::Status IntegrityCheck(Connection& conn, bool full) {
  {
    ASSIGN_OR_RETURN(Statement stmt,
                     conn.Prepare(full ? "PRAGMA integrity_check" : "PRAGMA quick_check"));
    std::string problems;
    while (true) {
      ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (!row) break;
      std::string line = stmt.ColumnText(0);
      if (line != "ok") Append(problems, problems.empty() ? "" : "; ", line);
    }
    if (!problems.empty()) {
      return absl::DataLossError(
          Cat("store: integrity check failed: ", problems.substr(0, 2000)));
    }
  }
  ASSIGN_OR_RETURN(Statement fk, conn.Prepare("PRAGMA foreign_key_check"));
  ASSIGN_OR_RETURN(bool violation, fk.Step());
  if (violation) {
    return absl::DataLossError(Cat("store: foreign key check failed: table ", fk.ColumnText(0),
                                   " row ", fk.ColumnInt(1), " refers to a missing row of ",
                                   fk.ColumnText(2)));
  }
  return absl::OkStatus();
}

absl::Status SqliteStore::Init() {
  ConnectionOptions write_options{options_.busy_timeout_ms,
                                  options_.synchronous == SyncMode::kFull, false};
  ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn, Connection::Open(db_path_, write_options));
  // WAL: readers never block the writer nor the writer readers, and a commit is one append.
  ASSIGN_OR_RETURN(std::string mode, conn->QueryText("PRAGMA journal_mode = WAL"));
  if (mode != "wal") {
    return absl::FailedPreconditionError(Cat(
        "store: ", db_path_, " cannot use write-ahead logging (journal_mode is ", mode,
        "); it must be on a local file system"));
  }
  RETURN_IF_ERROR(IntegrityCheck(*conn, options_.full_integrity_check_on_open));
  if (options_.max_database_bytes > 0) {
    // max_page_count is a setting of the connection, and only the writer grows the file.
    ASSIGN_OR_RETURN(std::string page_size, conn->QueryText("PRAGMA page_size"));
    const int64_t pages = options_.max_database_bytes / std::max<int64_t>(1, std::stoll(page_size));
    RETURN_IF_ERROR(conn->QueryText(Cat("PRAGMA max_page_count = ", std::max<int64_t>(pages, 1)))
                        .status());
  }
  RETURN_IF_ERROR(internal::Migrate(*conn, internal::LatestSchemaVersion()));
  schema_version_ = internal::LatestSchemaVersion();
  {
    ASSIGN_OR_RETURN(Statement stmt,
                     conn->Prepare("SELECT value FROM meta WHERE key = 'page_token_secret'"));
    ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) return absl::DataLossError("store: the page token secret is missing from meta");
    db_.tokens = internal::PageTokenCodec(stmt.ColumnBlob(0));
  }
  ConnectionOptions read_options = write_options;
  read_options.query_only = true;
  RETURN_IF_ERROR(db_.readers.Init(db_path_, read_options, options_.reader_pool_size));
  db_.writer = std::make_unique<GroupCommitWriter>(
      std::move(conn), options_.max_writes_per_commit, options_.group_commit_wait_us);
  return absl::OkStatus();
}

// ---- administration -----------------------------------------------------------------------------

absl::Status SqliteStore::CheckIntegrity(bool full) {
  ReaderPool::Lease lease = db_.readers.Acquire();
  return IntegrityCheck(*lease, full);
}

absl::Status SqliteStore::Backup(const std::string& dest_path) {
  const std::string tmp_path = Cat(dest_path, ".tmp.", ::getpid());
  ::unlink(tmp_path.c_str());
  std::vector<std::string> file_blobs;
  {
    ConnectionOptions dest_options{options_.busy_timeout_ms, true, false};
    ASSIGN_OR_RETURN(std::unique_ptr<Connection> dest, Connection::Open(tmp_path, dest_options));
    {
      ReaderPool::Lease lease = db_.readers.Acquire();
      sqlite3_backup* backup = sqlite3_backup_init(dest->raw(), "main", (*lease).raw(), "main");
      if (backup == nullptr) {
        return internal::SqliteStatus(sqlite3_errcode(dest->raw()), "backup init", dest->raw());
      }
      // All pages in one step: one read snapshot of the source, which in WAL mode does not
      // block the writer.
      int rc = sqlite3_backup_step(backup, -1);
      sqlite3_backup_finish(backup);
      if (rc != SQLITE_DONE) {
        ::unlink(tmp_path.c_str());
        return internal::SqliteStatus(rc, "backup", dest->raw());
      }
    }
    // The copy is one self-contained file: no WAL beside it, large blobs moved inline.
    RETURN_IF_ERROR(dest->QueryText("PRAGMA journal_mode = DELETE").status());
    {
      ASSIGN_OR_RETURN(Statement stmt,
                       dest->Prepare("SELECT digest FROM blobs WHERE placement = 'file'"));
      while (true) {
        ASSIGN_OR_RETURN(bool row, stmt.Step());
        if (!row) break;
        file_blobs.push_back(stmt.ColumnText(0));
      }
    }
    for (const std::string& digest : file_blobs) {
      // GetBlob verifies: a damaged blob fails the backup rather than being copied.
      ASSIGN_OR_RETURN(std::string bytes, blobs_.GetBlob(digest));
      ASSIGN_OR_RETURN(Statement stmt,
                       dest->Prepare("UPDATE blobs SET placement = 'inline', data = ? "
                                     "WHERE digest = ?"));
      stmt.BindBlob(1, bytes).BindText(2, digest);
      RETURN_IF_ERROR(stmt.Run());
    }
    RETURN_IF_ERROR(IntegrityCheck(*dest, true));
  }
  if (::rename(tmp_path.c_str(), dest_path.c_str()) != 0) {
    return absl::UnavailableError(Cat("store: cannot move the backup into place at ",
                                      dest_path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Store>> Store::Open(const StoreOptions& options) {
  if (internal::IsPostgresUrl(options.path)) return internal::OpenPgStore(options);
  if (options.path.empty()) {
    return absl::InvalidArgumentError("store: StoreOptions.path (data directory or .db file) "
                                      "must be set");
  }
  std::string db_path;
  std::string blob_root;
  if (options.path.size() > 3 && options.path.compare(options.path.size() - 3, 3, ".db") == 0) {
    db_path = options.path;
    blob_root = options.path + ".blobs";
  } else {
    if (::mkdir(options.path.c_str(), 0755) == 0) {
      // A new directory's own entry must be durable too, or the whole store can vanish.
      const size_t slash = options.path.find_last_of('/');
      const std::string parent = slash == std::string::npos ? "."
                                 : slash == 0               ? "/"
                                                            : options.path.substr(0, slash);
      const int fd = ::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (fd >= 0) {
        ::fsync(fd);
        ::close(fd);
      }
    } else if (errno != EEXIST) {
      return absl::FailedPreconditionError(Cat(
          "store: cannot create data directory ", options.path, ": ", std::strerror(errno)));
    }
    db_path = options.path + "/rote.db";
    blob_root = options.path + "/blobs";
  }
  auto store = std::make_unique<SqliteStore>(options, db_path, blob_root);
  RETURN_IF_ERROR(store->Init());
  return std::unique_ptr<Store>(std::move(store));
}

}  // namespace rote::store
