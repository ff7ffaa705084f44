// The SQLite implementation of Store: one writer thread (group commit) and a pool of reader
// connections over one WAL-mode database; large blobs as files beside it.
#include <sqlite3.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <condition_variable>
#include <mutex>
#include <utility>

#include "store/str_util.h"
#include "store/blob_files.h"
#include "store/digest.h"
#include "store/group_commit.h"
#include "store/page_token.h"
#include "store/schema.h"
#include "store/sqlite.h"
#include "store/store.h"

namespace rote::store {
namespace {

using internal::Append;
using internal::BlobFiles;
using internal::Cat;
using internal::Connection;
using internal::ConnectionOptions;
using internal::GroupCommitWriter;
using internal::PageTokenCodec;
using internal::Statement;

#define ROTE_STORE_CONCAT_INNER(a, b) a##b
#define ROTE_STORE_CONCAT(a, b) ROTE_STORE_CONCAT_INNER(a, b)
#define RETURN_IF_ERROR_IMPL(st, expr)          \
  do {                                          \
    if (absl::Status st = (expr); !st.ok()) return st; \
  } while (0)
// __COUNTER__: writes nest (a lambda inside RETURN_IF_ERROR uses it again), so names must differ.
#define RETURN_IF_ERROR(expr) RETURN_IF_ERROR_IMPL(ROTE_STORE_CONCAT(status_, __COUNTER__), expr)
#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                          \
  if (!tmp.ok()) return tmp.status();         \
  lhs = std::move(*tmp)
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL(ROTE_STORE_CONCAT(statusor_, __COUNTER__), lhs, expr)

absl::Status CheckDigest(std::string_view digest, std::string_view what) {
  if (IsValidDigest(digest)) return absl::OkStatus();
  return absl::InvalidArgumentError(Cat(
      what, " '", digest, "' is not a digest; expected sha256: followed by 64 lowercase hex digits"));
}

absl::Status CheckNonEmpty(std::string_view value, std::string_view what) {
  if (!value.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(Cat(what, " must not be empty"));
}

// A length-prefixed encoding, so ("a", "bc") and ("ab", "c") differ.
std::string FilterKey(std::initializer_list<std::string_view> parts) {
  std::string out;
  for (std::string_view p : parts) Append(out, p.size(), ":", p, ";");
  return out;
}

std::string MakeEtag(std::string_view digest, int64_t state_version) {
  return Sha256Digest(Cat(digest, "#", state_version)).substr(kDigestPrefix.size(), 20);
}

// ---- reader pool ------------------------------------------------------------------------------

class ReaderPool {
 public:
  absl::Status Init(const std::string& path, const ConnectionOptions& options, int size) {
    for (int i = 0; i < std::max(size, 1); ++i) {
      ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn, Connection::Open(path, options));
      free_.push_back(conn.get());
      all_.push_back(std::move(conn));
    }
    return absl::OkStatus();
  }

  class Lease {
   public:
    Lease(ReaderPool* pool, Connection* conn) : pool_(pool), conn_(conn) {}
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { pool_->Release(conn_); }
    Connection& operator*() const { return *conn_; }

   private:
    ReaderPool* pool_;
    Connection* conn_;
  };

  Lease Acquire() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !free_.empty(); });
    Connection* conn = free_.back();
    free_.pop_back();
    return Lease(this, conn);
  }

 private:
  void Release(Connection* conn) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      free_.push_back(conn);
    }
    cv_.notify_one();
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Connection*> free_;
  std::vector<std::unique_ptr<Connection>> all_;
};

// ---- row loaders (used by readers and, for read-your-own-write results, by the writer) ----

constexpr std::string_view kArtifactColumns =
    "id, digest, kind, generation_point, revision, source, options_json, "
    "validation_report_json, spec_digest, model_digest, numerics_profile, "
    "prompt_template_version, decoding_json, request_digest, device, author, state, "
    "state_version, create_ms";

constexpr std::string_view kRunColumns =
    "id, blueprint_digest, input_digest, state, engine_profile_json, output_digest, error, "
    "submitter, request_id, step_count, create_ms, start_ms, end_ms, interrupted";

constexpr std::string_view kBlueprintColumns = "id, digest, name, version, source, create_ms";

absl::Status LoadBlueprintPoints(Connection& conn, int64_t blueprint_id, BlueprintRecord& bp) {
  ASSIGN_OR_RETURN(Statement stmt,
                   conn.Prepare("SELECT s.digest, s.kind, s.name, s.canonical "
                                "FROM blueprint_points p JOIN generation_specs s "
                                "ON s.digest = p.spec_digest WHERE p.blueprint_id = ? "
                                "ORDER BY p.ordinal"));
  stmt.BindInt(1, blueprint_id);
  while (true) {
    ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) return absl::OkStatus();
    bp.generation_points.push_back(GenerationSpecRecord{
        stmt.ColumnText(0), stmt.ColumnText(1), stmt.ColumnText(2), stmt.ColumnText(3)});
  }
}

std::pair<int64_t, BlueprintRecord> ReadBlueprintRow(const Statement& stmt) {
  BlueprintRecord bp;
  bp.digest = stmt.ColumnText(1);
  bp.name = stmt.ColumnText(2);
  bp.version = stmt.ColumnText(3);
  bp.source = stmt.ColumnText(4);
  bp.create_ms = stmt.ColumnInt(5);
  return {stmt.ColumnInt(0), std::move(bp)};
}

// Runs `sql` (selecting kBlueprintColumns, parameters bound by `bind`) and loads each row.
template <typename Bind>
absl::StatusOr<std::vector<std::pair<int64_t, BlueprintRecord>>> QueryBlueprints(
    Connection& conn, const std::string& sql, Bind bind) {
  std::vector<std::pair<int64_t, BlueprintRecord>> rows;
  {
    ASSIGN_OR_RETURN(Statement stmt, conn.Prepare(sql));
    bind(stmt);
    while (true) {
      ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (!row) break;
      rows.push_back(ReadBlueprintRow(stmt));
    }
  }
  for (auto& [id, bp] : rows) RETURN_IF_ERROR(LoadBlueprintPoints(conn, id, bp));
  return rows;
}

absl::StatusOr<BlueprintRecord> LoadBlueprint(Connection& conn, std::string_view digest) {
  static const std::string sql =
      Cat("SELECT ", kBlueprintColumns, " FROM blueprints WHERE digest = ?");
  ASSIGN_OR_RETURN(auto rows,
                   QueryBlueprints(conn, sql, [&](Statement& s) { s.BindText(1, digest); }));
  if (rows.empty()) {
    return absl::NotFoundError(Cat("blueprint ", digest, " is not stored"));
  }
  return std::move(rows.front().second);
}

std::pair<int64_t, ArtifactRecord> ReadArtifactRow(const Statement& stmt) {
  ArtifactRecord a;
  a.digest = stmt.ColumnText(1);
  a.kind = stmt.ColumnText(2);
  a.generation_point = stmt.ColumnText(3);
  a.revision = stmt.ColumnInt(4);
  a.source = stmt.ColumnText(5);
  a.options_json = stmt.ColumnText(6);
  a.validation_report_json = stmt.ColumnText(7);
  a.provenance.spec_digest = stmt.ColumnText(8);
  a.provenance.model_digest = stmt.ColumnText(9);
  a.provenance.numerics_profile = stmt.ColumnText(10);
  a.provenance.prompt_template_version = stmt.ColumnText(11);
  a.provenance.decoding_json = stmt.ColumnText(12);
  a.provenance.request_digest = stmt.ColumnText(13);
  a.provenance.device = stmt.ColumnText(14);
  a.provenance.author = stmt.ColumnText(15);
  // The CHECK constraint admits only the three names.
  a.state = ParseReviewState(stmt.ColumnText(16)).value_or(ReviewState::kPending);
  a.etag = MakeEtag(a.digest, stmt.ColumnInt(17));
  a.create_ms = stmt.ColumnInt(18);
  return {stmt.ColumnInt(0), std::move(a)};
}

absl::Status LoadAttempts(Connection& conn, int64_t artifact_id, ArtifactRecord& a) {
  ASSIGN_OR_RETURN(Statement stmt,
                   conn.Prepare("SELECT idx, prompt_digest, output_digest, failure "
                                "FROM artifact_attempts WHERE artifact_id = ? ORDER BY idx"));
  stmt.BindInt(1, artifact_id);
  while (true) {
    ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) return absl::OkStatus();
    a.provenance.attempts.push_back(GenerationAttempt{static_cast<int32_t>(stmt.ColumnInt(0)),
                                                      stmt.ColumnText(1), stmt.ColumnText(2),
                                                      stmt.ColumnText(3)});
  }
}

template <typename Bind>
absl::StatusOr<std::vector<std::pair<int64_t, ArtifactRecord>>> QueryArtifacts(
    Connection& conn, const std::string& sql, Bind bind) {
  std::vector<std::pair<int64_t, ArtifactRecord>> rows;
  {
    ASSIGN_OR_RETURN(Statement stmt, conn.Prepare(sql));
    bind(stmt);
    while (true) {
      ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (!row) break;
      rows.push_back(ReadArtifactRow(stmt));
    }
  }
  for (auto& [id, a] : rows) RETURN_IF_ERROR(LoadAttempts(conn, id, a));
  return rows;
}

absl::StatusOr<ArtifactRecord> LoadArtifact(Connection& conn, std::string_view digest) {
  static const std::string sql =
      Cat("SELECT ", kArtifactColumns, " FROM artifacts WHERE digest = ?");
  ASSIGN_OR_RETURN(auto rows,
                   QueryArtifacts(conn, sql, [&](Statement& s) { s.BindText(1, digest); }));
  if (rows.empty()) {
    return absl::NotFoundError(Cat("artifact ", digest, " is not stored"));
  }
  return std::move(rows.front().second);
}

RunRecord ReadRunRow(const Statement& stmt) {
  RunRecord r;
  r.id = stmt.ColumnInt(0);
  r.blueprint_digest = stmt.ColumnText(1);
  r.input_digest = stmt.ColumnText(2);
  r.state = ParseRunState(stmt.ColumnText(3)).value_or(RunState::kPending);
  r.engine_profile_json = stmt.ColumnText(4);
  r.output_digest = stmt.ColumnText(5);
  r.error = stmt.ColumnText(6);
  r.submitter = stmt.ColumnText(7);
  r.request_id = stmt.ColumnText(8);
  r.step_count = stmt.ColumnInt(9);
  r.create_ms = stmt.ColumnInt(10);
  r.start_ms = stmt.ColumnInt(11);  // NULL reads as 0
  r.end_ms = stmt.ColumnInt(12);
  r.interrupted = stmt.ColumnInt(13) != 0;
  return r;
}

absl::Status LoadRunBindings(Connection& conn, RunRecord& run) {
  ASSIGN_OR_RETURN(Statement stmt,
                   conn.Prepare("SELECT generation_point, artifact_digest, source FROM "
                                "run_bindings WHERE run_id = ? ORDER BY generation_point"));
  stmt.BindInt(1, run.id);
  while (true) {
    ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) return absl::OkStatus();
    run.bindings.push_back(Binding{stmt.ColumnText(0), stmt.ColumnText(1), stmt.ColumnText(2)});
  }
}

template <typename Bind>
absl::StatusOr<std::vector<RunRecord>> QueryRuns(Connection& conn, const std::string& sql,
                                                 Bind bind) {
  std::vector<RunRecord> runs;
  {
    ASSIGN_OR_RETURN(Statement stmt, conn.Prepare(sql));
    bind(stmt);
    while (true) {
      ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (!row) break;
      runs.push_back(ReadRunRow(stmt));
    }
  }
  for (RunRecord& r : runs) RETURN_IF_ERROR(LoadRunBindings(conn, r));
  return runs;
}

absl::StatusOr<RunRecord> LoadRun(Connection& conn, int64_t run_id) {
  static const std::string sql = Cat("SELECT ", kRunColumns, " FROM runs WHERE id = ?");
  ASSIGN_OR_RETURN(auto runs, QueryRuns(conn, sql, [&](Statement& s) { s.BindInt(1, run_id); }));
  if (runs.empty()) return absl::NotFoundError(Cat("run ", run_id, " does not exist"));
  return std::move(runs.front());
}

// Whether a row exists for a one-parameter query.
absl::StatusOr<bool> Exists(Connection& conn, std::string_view sql, std::string_view key) {
  ASSIGN_OR_RETURN(Statement stmt, conn.Prepare(sql));
  stmt.BindText(1, key);
  return stmt.Step();
}

absl::Status RequireBlob(Connection& conn, std::string_view digest, std::string_view what) {
  ASSIGN_OR_RETURN(bool found, Exists(conn, "SELECT 1 FROM blobs WHERE digest = ?", digest));
  if (found) return absl::OkStatus();
  return absl::FailedPreconditionError(
      Cat(what, " ", digest, " is not a stored blob; PutBlob it first"));
}

absl::Status RequireArtifact(Connection& conn, std::string_view digest, std::string_view what) {
  ASSIGN_OR_RETURN(bool found, Exists(conn, "SELECT 1 FROM artifacts WHERE digest = ?", digest));
  if (found) return absl::OkStatus();
  return absl::FailedPreconditionError(
      Cat(what, " ", digest, " is not a stored artifact; PutArtifact it first"));
}

absl::Status ValidateBinding(const Binding& b) {
  RETURN_IF_ERROR(CheckNonEmpty(b.generation_point, "binding generation_point"));
  return CheckDigest(b.artifact_digest, "binding artifact_digest");
}

// Pages: fetch one row more than asked for, to know whether a next page exists.
template <typename T, typename KeyOf>
Page<T> MakePage(std::vector<T> rows, int page_size, const PageTokenCodec& codec,
                 std::string_view collection, std::string_view filter, KeyOf key_of) {
  Page<T> page;
  if (rows.size() > static_cast<size_t>(page_size)) {
    rows.resize(static_cast<size_t>(page_size));
    page.next_page_token = codec.Encode(collection, filter, key_of(rows.back()));
  }
  page.items = std::move(rows);
  return page;
}

template <typename T>
Page<T> StripIds(Page<std::pair<int64_t, T>> page) {
  Page<T> out;
  out.next_page_token = std::move(page.next_page_token);
  for (auto& [id, item] : page.items) out.items.push_back(std::move(item));
  return out;
}

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
        blob_files_(std::move(blob_root)),
        tokens_("") {
    if (!options_.clock_ms) options_.clock_ms = SystemClockMs;
  }

  absl::Status Init();

  absl::StatusOr<BlobRef> PutBlob(std::string_view bytes) override;
  absl::StatusOr<std::string> GetBlob(std::string_view digest) override;
  absl::StatusOr<BlobRef> StatBlob(std::string_view digest) override;

  absl::Status PutGenerationSpec(const GenerationSpecRecord& spec) override;
  absl::StatusOr<GenerationSpecRecord> GetGenerationSpec(std::string_view digest) override;
  absl::StatusOr<BlueprintRecord> PutBlueprint(const BlueprintRecord& blueprint) override;
  absl::StatusOr<BlueprintRecord> GetBlueprint(std::string_view digest) override;
  absl::StatusOr<std::vector<BlueprintRecord>> FindBlueprintsByName(
      std::string_view name) override;
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

  absl::Status AppendSteps(int64_t run_id, const std::vector<StepRecord>& steps) override;
  absl::StatusOr<std::vector<StepRecord>> ListSteps(int64_t run_id) override;
  absl::StatusOr<int64_t> AppendRunEvent(int64_t run_id, std::string_view kind,
                                         std::string_view payload) override;
  absl::StatusOr<std::vector<RunEvent>> ListRunEvents(int64_t run_id, int64_t after_sequence,
                                                      int32_t limit) override;

  absl::StatusOr<std::string> GetCachedGeneration(std::string_view request_digest) override;
  absl::StatusOr<std::string> PutCachedGeneration(std::string_view request_digest,
                                                  std::string_view artifact_digest) override;

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
    GroupCommitWriter::Stats s = writer_->stats();
    return StoreStats{s.commits, s.writes};
  }

 private:
  absl::Status Write(GroupCommitWriter::WriteFn fn) { return writer_->Write(std::move(fn)); }

  // A read in one transaction, so multi-statement reads see one snapshot.
  template <typename F>
  auto ReadTx(F&& fn) -> decltype(fn(std::declval<Connection&>())) {
    ReaderPool::Lease lease = readers_.Acquire();
    Connection& conn = *lease;
    RETURN_IF_ERROR(conn.Exec("BEGIN"));
    auto result = fn(conn);
    // Ending a read transaction cannot lose anything; its status adds nothing to `result`.
    conn.Exec("COMMIT").IgnoreError();
    return result;
  }

  absl::StatusOr<RunRecord> Transition(int64_t run_id, RunState to, const RunOutcome* outcome);

  StoreOptions options_;
  std::string db_path_;
  BlobFiles blob_files_;
  PageTokenCodec tokens_;
  ReaderPool readers_;
  std::unique_ptr<GroupCommitWriter> writer_;
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
    return absl::DataLossError(Cat("store: foreign key check failed: table ",
                                            fk.ColumnText(0), " row ", fk.ColumnInt(1),
                                            " refers to a missing row of ", fk.ColumnText(2)));
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
    tokens_ = PageTokenCodec(stmt.ColumnBlob(0));
  }
  ConnectionOptions read_options = write_options;
  read_options.query_only = true;
  RETURN_IF_ERROR(readers_.Init(db_path_, read_options, options_.reader_pool_size));
  writer_ = std::make_unique<GroupCommitWriter>(std::move(conn), options_.max_writes_per_commit,
                                                options_.group_commit_wait_us);
  return absl::OkStatus();
}

// ---- blobs --------------------------------------------------------------------------------------

absl::StatusOr<BlobRef> SqliteStore::PutBlob(std::string_view bytes) {
  BlobRef ref{Sha256Digest(bytes), static_cast<int64_t>(bytes.size())};
  // Deduplicate without queueing a write when the blob is already there.
  if (absl::StatusOr<BlobRef> existing = StatBlob(ref.digest); existing.ok()) {
    return *existing;
  } else if (!absl::IsNotFound(existing.status())) {
    return existing.status();
  }
  const bool inline_blob = ref.size <= options_.inline_blob_max_bytes;
  // The file is durable before the row that refers to it commits.
  if (!inline_blob) RETURN_IF_ERROR(blob_files_.Write(ref.digest, bytes));
  const int64_t now = options_.clock_ms();
  RETURN_IF_ERROR(Write([&](Connection& conn) -> absl::Status {
    ASSIGN_OR_RETURN(Statement stmt,
                     conn.Prepare("INSERT INTO blobs (digest, size, placement, data, create_ms) "
                                  "VALUES (?, ?, ?, ?, ?) ON CONFLICT (digest) DO NOTHING"));
    stmt.BindText(1, ref.digest).BindInt(2, ref.size).BindText(3, inline_blob ? "inline" : "file");
    if (inline_blob) {
      stmt.BindBlob(4, bytes);
    } else {
      stmt.BindNull(4);
    }
    stmt.BindInt(5, now);
    return stmt.Run();
  }));
  return ref;
}

absl::StatusOr<BlobRef> SqliteStore::StatBlob(std::string_view digest) {
  RETURN_IF_ERROR(CheckDigest(digest, "blob digest"));
  ReaderPool::Lease lease = readers_.Acquire();
  ASSIGN_OR_RETURN(Statement stmt, (*lease).Prepare("SELECT size FROM blobs WHERE digest = ?"));
  stmt.BindText(1, digest);
  ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return absl::NotFoundError(Cat("blob ", digest, " is not stored"));
  return BlobRef{std::string(digest), stmt.ColumnInt(0)};
}

absl::StatusOr<std::string> SqliteStore::GetBlob(std::string_view digest) {
  RETURN_IF_ERROR(CheckDigest(digest, "blob digest"));
  int64_t size = 0;
  bool in_file = false;
  std::string bytes;
  {
    ReaderPool::Lease lease = readers_.Acquire();
    ASSIGN_OR_RETURN(Statement stmt, (*lease).Prepare(
                                         "SELECT size, placement, data FROM blobs WHERE digest = ?"));
    stmt.BindText(1, digest);
    ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) return absl::NotFoundError(Cat("blob ", digest, " is not stored"));
    size = stmt.ColumnInt(0);
    in_file = stmt.ColumnText(1) == "file";
    if (!in_file) bytes = stmt.ColumnBlob(2);
  }
  if (in_file) {
    absl::StatusOr<std::string> file = blob_files_.Read(digest);
    if (absl::IsNotFound(file.status())) {
      return absl::DataLossError(Cat("blob ", digest, " is recorded but its file ",
                                              blob_files_.PathFor(digest), " is missing"));
    }
    if (!file.ok()) return file.status();
    bytes = std::move(*file);
  }
  // Verified on every read: bytes that do not match their digest are never returned.
  if (static_cast<int64_t>(bytes.size()) != size || Sha256Digest(bytes) != digest) {
    return absl::DataLossError(Cat(
        "blob ", digest, " is damaged: the stored bytes (", bytes.size(),
        " bytes) no longer match their digest; restore it from a backup or put it again"));
  }
  return bytes;
}

// ---- specs and blueprints ---------------------------------------------------------------------

absl::Status ValidateSpec(const GenerationSpecRecord& spec) {
  RETURN_IF_ERROR(CheckDigest(spec.digest, "generation spec digest"));
  RETURN_IF_ERROR(CheckNonEmpty(spec.name, "generation spec name"));
  if (Sha256Digest(spec.canonical) != spec.digest) {
    return absl::InvalidArgumentError(Cat(
        "generation spec '", spec.name, "': digest ", spec.digest,
        " is not the sha256 of its canonical encoding (", Sha256Digest(spec.canonical), ")"));
  }
  return absl::OkStatus();
}

absl::Status InsertSpec(Connection& conn, const GenerationSpecRecord& spec, int64_t now) {
  ASSIGN_OR_RETURN(Statement stmt, conn.Prepare(
                                       "INSERT INTO generation_specs (digest, kind, name, "
                                       "canonical, create_ms) VALUES (?, ?, ?, ?, ?) "
                                       "ON CONFLICT (digest) DO NOTHING"));
  stmt.BindText(1, spec.digest)
      .BindText(2, spec.kind)
      .BindText(3, spec.name)
      .BindText(4, spec.canonical)
      .BindInt(5, now);
  return stmt.Run();
}

absl::Status SqliteStore::PutGenerationSpec(const GenerationSpecRecord& spec) {
  RETURN_IF_ERROR(ValidateSpec(spec));
  const int64_t now = options_.clock_ms();
  return Write([&](Connection& conn) { return InsertSpec(conn, spec, now); });
}

absl::StatusOr<GenerationSpecRecord> SqliteStore::GetGenerationSpec(std::string_view digest) {
  RETURN_IF_ERROR(CheckDigest(digest, "generation spec digest"));
  ReaderPool::Lease lease = readers_.Acquire();
  ASSIGN_OR_RETURN(Statement stmt,
                   (*lease).Prepare("SELECT digest, kind, name, canonical FROM generation_specs "
                                    "WHERE digest = ?"));
  stmt.BindText(1, digest);
  ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return absl::NotFoundError(Cat("generation spec ", digest, " is not stored"));
  return GenerationSpecRecord{stmt.ColumnText(0), stmt.ColumnText(1), stmt.ColumnText(2),
                              stmt.ColumnText(3)};
}

absl::StatusOr<BlueprintRecord> SqliteStore::PutBlueprint(const BlueprintRecord& blueprint) {
  RETURN_IF_ERROR(CheckDigest(blueprint.digest, "blueprint digest"));
  RETURN_IF_ERROR(CheckNonEmpty(blueprint.name, "blueprint name"));
  for (const GenerationSpecRecord& spec : blueprint.generation_points) {
    RETURN_IF_ERROR(ValidateSpec(spec));
  }
  const int64_t now = options_.clock_ms();
  BlueprintRecord stored;
  RETURN_IF_ERROR(Write([&](Connection& conn) -> absl::Status {
    absl::StatusOr<BlueprintRecord> existing = LoadBlueprint(conn, blueprint.digest);
    if (existing.ok()) {
      if (existing->source != blueprint.source || existing->name != blueprint.name ||
          existing->version != blueprint.version) {
        return absl::FailedPreconditionError(Cat(
            "blueprint ", blueprint.digest, " is already stored with different content"));
      }
      stored = *std::move(existing);
      return absl::OkStatus();
    }
    if (!absl::IsNotFound(existing.status())) return existing.status();
    for (const GenerationSpecRecord& spec : blueprint.generation_points) {
      RETURN_IF_ERROR(InsertSpec(conn, spec, now));
    }
    {
      ASSIGN_OR_RETURN(Statement stmt,
                       conn.Prepare("INSERT INTO blueprints (digest, name, version, source, "
                                    "create_ms) VALUES (?, ?, ?, ?, ?)"));
      stmt.BindText(1, blueprint.digest)
          .BindText(2, blueprint.name)
          .BindText(3, blueprint.version)
          .BindText(4, blueprint.source)
          .BindInt(5, now);
      RETURN_IF_ERROR(stmt.Run());
    }
    const int64_t id = sqlite3_last_insert_rowid(conn.raw());
    for (size_t i = 0; i < blueprint.generation_points.size(); ++i) {
      ASSIGN_OR_RETURN(Statement stmt,
                       conn.Prepare("INSERT INTO blueprint_points (blueprint_id, ordinal, "
                                    "spec_digest) VALUES (?, ?, ?)"));
      stmt.BindInt(1, id)
          .BindInt(2, static_cast<int64_t>(i))
          .BindText(3, blueprint.generation_points[i].digest);
      RETURN_IF_ERROR(stmt.Run());
    }
    ASSIGN_OR_RETURN(stored, LoadBlueprint(conn, blueprint.digest));
    return absl::OkStatus();
  }));
  return stored;
}

absl::StatusOr<BlueprintRecord> SqliteStore::GetBlueprint(std::string_view digest) {
  RETURN_IF_ERROR(CheckDigest(digest, "blueprint digest"));
  return ReadTx([&](Connection& conn) { return LoadBlueprint(conn, digest); });
}

absl::StatusOr<std::vector<BlueprintRecord>> SqliteStore::FindBlueprintsByName(
    std::string_view name) {
  static const std::string sql = Cat("SELECT ", kBlueprintColumns,
                                              " FROM blueprints WHERE name = ? ORDER BY id");
  return ReadTx([&](Connection& conn) -> absl::StatusOr<std::vector<BlueprintRecord>> {
    ASSIGN_OR_RETURN(auto rows,
                     QueryBlueprints(conn, sql, [&](Statement& s) { s.BindText(1, name); }));
    std::vector<BlueprintRecord> out;
    for (auto& [id, bp] : rows) out.push_back(std::move(bp));
    return out;
  });
}

absl::StatusOr<Page<BlueprintRecord>> SqliteStore::ListBlueprints(const BlueprintFilter& filter,
                                                                  const PageRequest& page) {
  ASSIGN_OR_RETURN(const int size, internal::EffectivePageSize(page.page_size));
  const std::string filter_key = FilterKey({filter.name});
  int64_t after = 0;
  if (!page.page_token.empty()) {
    ASSIGN_OR_RETURN(after, tokens_.Decode(page.page_token, "blueprints", filter_key));
  }
  std::string sql = Cat("SELECT ", kBlueprintColumns, " FROM blueprints WHERE id > ?1",
                                 filter.name.empty() ? "" : " AND name = ?3",
                                 " ORDER BY id LIMIT ?2");
  return ReadTx([&](Connection& conn) -> absl::StatusOr<Page<BlueprintRecord>> {
    ASSIGN_OR_RETURN(auto rows, QueryBlueprints(conn, sql, [&](Statement& s) {
                       s.BindInt(1, after).BindInt(2, size + 1);
                       if (!filter.name.empty()) s.BindText(3, filter.name);
                     }));
    return StripIds(MakePage(std::move(rows), size, tokens_, "blueprints", filter_key,
                             [](const auto& r) { return r.first; }));
  });
}

// ---- artifacts and review ---------------------------------------------------------------------

absl::StatusOr<ArtifactRecord> SqliteStore::PutArtifact(const ArtifactRecord& artifact) {
  RETURN_IF_ERROR(CheckDigest(artifact.digest, "artifact digest"));
  RETURN_IF_ERROR(CheckNonEmpty(artifact.kind, "artifact kind"));
  RETURN_IF_ERROR(CheckNonEmpty(artifact.generation_point, "artifact generation_point"));
  for (const GenerationAttempt& attempt : artifact.provenance.attempts) {
    if (!attempt.prompt_digest.empty()) {
      RETURN_IF_ERROR(CheckDigest(attempt.prompt_digest, "attempt prompt_digest"));
    }
    if (!attempt.output_digest.empty()) {
      RETURN_IF_ERROR(CheckDigest(attempt.output_digest, "attempt output_digest"));
    }
  }
  const int64_t now = options_.clock_ms();
  ArtifactRecord stored;
  RETURN_IF_ERROR(Write([&](Connection& conn) -> absl::Status {
    absl::StatusOr<ArtifactRecord> existing = LoadArtifact(conn, artifact.digest);
    if (existing.ok()) {
      // Immutable: the same digest must describe the same artifact.
      if (existing->source != artifact.source || existing->kind != artifact.kind ||
          existing->options_json != artifact.options_json ||
          existing->generation_point != artifact.generation_point) {
        return absl::FailedPreconditionError(Cat(
            "artifact ", artifact.digest, " is already stored with different content"));
      }
      stored = *std::move(existing);
      return absl::OkStatus();
    }
    if (!absl::IsNotFound(existing.status())) return existing.status();
    for (const GenerationAttempt& attempt : artifact.provenance.attempts) {
      if (!attempt.prompt_digest.empty()) {
        RETURN_IF_ERROR(RequireBlob(conn, attempt.prompt_digest, "attempt prompt"));
      }
      if (!attempt.output_digest.empty()) {
        RETURN_IF_ERROR(RequireBlob(conn, attempt.output_digest, "attempt output"));
      }
    }
    int64_t revision = 0;
    {
      ASSIGN_OR_RETURN(Statement stmt,
                       conn.Prepare("SELECT COALESCE(MAX(revision), 0) + 1 FROM artifacts "
                                    "WHERE generation_point = ?"));
      stmt.BindText(1, artifact.generation_point);
      RETURN_IF_ERROR(stmt.Step().status());
      revision = stmt.ColumnInt(0);
    }
    {
      ASSIGN_OR_RETURN(
          Statement stmt,
          conn.Prepare("INSERT INTO artifacts (digest, kind, generation_point, revision, source, "
                       "options_json, validation_report_json, spec_digest, model_digest, "
                       "numerics_profile, prompt_template_version, decoding_json, "
                       "request_digest, device, author, state, state_version, create_ms) "
                       "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', 0, ?)"));
      const Provenance& p = artifact.provenance;
      stmt.BindText(1, artifact.digest)
          .BindText(2, artifact.kind)
          .BindText(3, artifact.generation_point)
          .BindInt(4, revision)
          .BindText(5, artifact.source)
          .BindText(6, artifact.options_json)
          .BindText(7, artifact.validation_report_json)
          .BindText(8, p.spec_digest)
          .BindText(9, p.model_digest)
          .BindText(10, p.numerics_profile)
          .BindText(11, p.prompt_template_version)
          .BindText(12, p.decoding_json)
          .BindText(13, p.request_digest)
          .BindText(14, p.device)
          .BindText(15, p.author)
          .BindInt(16, now);
      RETURN_IF_ERROR(stmt.Run());
    }
    const int64_t id = sqlite3_last_insert_rowid(conn.raw());
    for (const GenerationAttempt& attempt : artifact.provenance.attempts) {
      ASSIGN_OR_RETURN(Statement stmt,
                       conn.Prepare("INSERT INTO artifact_attempts (artifact_id, idx, "
                                    "prompt_digest, output_digest, failure) VALUES (?, ?, ?, ?, ?)"));
      stmt.BindInt(1, id)
          .BindInt(2, attempt.index)
          .BindTextOrNull(3, attempt.prompt_digest)
          .BindTextOrNull(4, attempt.output_digest)
          .BindText(5, attempt.failure);
      RETURN_IF_ERROR(stmt.Run());
    }
    ASSIGN_OR_RETURN(stored, LoadArtifact(conn, artifact.digest));
    return absl::OkStatus();
  }));
  return stored;
}

absl::StatusOr<ArtifactRecord> SqliteStore::GetArtifact(std::string_view digest) {
  RETURN_IF_ERROR(CheckDigest(digest, "artifact digest"));
  return ReadTx([&](Connection& conn) { return LoadArtifact(conn, digest); });
}

absl::StatusOr<ArtifactRecord> SqliteStore::GetRevision(std::string_view generation_point,
                                                        int64_t revision) {
  static const std::string sql = Cat(
      "SELECT ", kArtifactColumns, " FROM artifacts WHERE generation_point = ? AND revision = ?");
  return ReadTx([&](Connection& conn) -> absl::StatusOr<ArtifactRecord> {
    ASSIGN_OR_RETURN(auto rows, QueryArtifacts(conn, sql, [&](Statement& s) {
                       s.BindText(1, generation_point).BindInt(2, revision);
                     }));
    if (rows.empty()) {
      return absl::NotFoundError(Cat("generation point '", generation_point,
                                              "' has no revision ", revision));
    }
    return std::move(rows.front().second);
  });
}

absl::StatusOr<Page<ArtifactRecord>> SqliteStore::ListArtifacts(const ArtifactFilter& filter,
                                                                const PageRequest& page) {
  ASSIGN_OR_RETURN(const int size, internal::EffectivePageSize(page.page_size));
  const std::string state_name =
      filter.state.has_value() ? std::string(ReviewStateName(*filter.state)) : "";
  const std::string filter_key = FilterKey({filter.generation_point, state_name});
  int64_t after = 0;
  if (!page.page_token.empty()) {
    ASSIGN_OR_RETURN(after, tokens_.Decode(page.page_token, "artifacts", filter_key));
  }
  std::string sql = Cat(
      "SELECT ", kArtifactColumns, " FROM artifacts WHERE id > ?1",
      filter.generation_point.empty() ? "" : " AND generation_point = ?3",
      state_name.empty() ? "" : " AND state = ?4", " ORDER BY id LIMIT ?2");
  return ReadTx([&](Connection& conn) -> absl::StatusOr<Page<ArtifactRecord>> {
    ASSIGN_OR_RETURN(auto rows, QueryArtifacts(conn, sql, [&](Statement& s) {
                       s.BindInt(1, after).BindInt(2, size + 1);
                       if (!filter.generation_point.empty()) s.BindText(3, filter.generation_point);
                       if (!state_name.empty()) s.BindText(4, state_name);
                     }));
    return StripIds(MakePage(std::move(rows), size, tokens_, "artifacts", filter_key,
                             [](const auto& r) { return r.first; }));
  });
}

absl::StatusOr<Page<ArtifactRecord>> SqliteStore::ListRevisions(std::string_view generation_point,
                                                                const PageRequest& page) {
  RETURN_IF_ERROR(CheckNonEmpty(generation_point, "generation_point"));
  ASSIGN_OR_RETURN(const int size, internal::EffectivePageSize(page.page_size));
  const std::string filter_key = FilterKey({generation_point});
  int64_t after = 0;
  if (!page.page_token.empty()) {
    ASSIGN_OR_RETURN(after, tokens_.Decode(page.page_token, "revisions", filter_key));
  }
  static const std::string sql =
      Cat("SELECT ", kArtifactColumns,
                   " FROM artifacts WHERE generation_point = ?1 AND revision > ?2 "
                   "ORDER BY revision LIMIT ?3");
  return ReadTx([&](Connection& conn) -> absl::StatusOr<Page<ArtifactRecord>> {
    ASSIGN_OR_RETURN(auto rows, QueryArtifacts(conn, sql, [&](Statement& s) {
                       s.BindText(1, generation_point).BindInt(2, after).BindInt(3, size + 1);
                     }));
    return StripIds(MakePage(std::move(rows), size, tokens_, "revisions", filter_key,
                             [](const auto& r) { return r.second.revision; }));
  });
}

absl::StatusOr<ArtifactRecord> SqliteStore::ReviewArtifact(const ReviewRequest& review) {
  RETURN_IF_ERROR(CheckDigest(review.artifact_digest, "artifact digest"));
  RETURN_IF_ERROR(CheckNonEmpty(review.principal, "review principal"));
  const int64_t now = options_.clock_ms();
  ArtifactRecord stored;
  RETURN_IF_ERROR(Write([&](Connection& conn) -> absl::Status {
    int64_t id = 0;
    int64_t state_version = 0;
    {
      ASSIGN_OR_RETURN(Statement stmt,
                       conn.Prepare("SELECT id, state_version FROM artifacts WHERE digest = ?"));
      stmt.BindText(1, review.artifact_digest);
      ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (!row) {
        return absl::NotFoundError(
            Cat("artifact ", review.artifact_digest, " is not stored"));
      }
      id = stmt.ColumnInt(0);
      state_version = stmt.ColumnInt(1);
    }
    if (!review.expected_etag.empty() &&
        review.expected_etag != MakeEtag(review.artifact_digest, state_version)) {
      return absl::AbortedError(Cat(
          "artifact ", review.artifact_digest, " was reviewed since etag '", review.expected_etag,
          "' was read; get the artifact again, check its state and retry with the new etag"));
    }
    {
      ASSIGN_OR_RETURN(Statement stmt,
                       conn.Prepare("UPDATE artifacts SET state = ?, state_version = "
                                    "state_version + 1 WHERE id = ?"));
      stmt.BindText(1, ReviewStateName(review.decision)).BindInt(2, id);
      RETURN_IF_ERROR(stmt.Run());
    }
    {
      ASSIGN_OR_RETURN(Statement stmt,
                       conn.Prepare("INSERT INTO reviews (artifact_id, principal, decision, "
                                    "comment, time_ms) VALUES (?, ?, ?, ?, ?)"));
      stmt.BindInt(1, id)
          .BindText(2, review.principal)
          .BindText(3, ReviewStateName(review.decision))
          .BindText(4, review.comment)
          .BindInt(5, now);
      RETURN_IF_ERROR(stmt.Run());
    }
    ASSIGN_OR_RETURN(stored, LoadArtifact(conn, review.artifact_digest));
    return absl::OkStatus();
  }));
  return stored;
}

absl::StatusOr<std::vector<ReviewEntry>> SqliteStore::ListReviews(std::string_view digest) {
  RETURN_IF_ERROR(CheckDigest(digest, "artifact digest"));
  return ReadTx([&](Connection& conn) -> absl::StatusOr<std::vector<ReviewEntry>> {
    ASSIGN_OR_RETURN(bool found,
                     Exists(conn, "SELECT 1 FROM artifacts WHERE digest = ?", digest));
    if (!found) return absl::NotFoundError(Cat("artifact ", digest, " is not stored"));
    ASSIGN_OR_RETURN(Statement stmt,
                     conn.Prepare("SELECT r.id, r.principal, r.decision, r.comment, r.time_ms "
                                  "FROM reviews r JOIN artifacts a ON a.id = r.artifact_id "
                                  "WHERE a.digest = ? ORDER BY r.id"));
    stmt.BindText(1, digest);
    std::vector<ReviewEntry> out;
    while (true) {
      ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (!row) return out;
      out.push_back(ReviewEntry{stmt.ColumnInt(0), std::string(digest), stmt.ColumnText(1),
                                ParseReviewState(stmt.ColumnText(2)).value_or(ReviewState::kPending),
                                stmt.ColumnText(3), stmt.ColumnInt(4)});
    }
  });
}

// ---- bindings -----------------------------------------------------------------------------------

absl::Status SqliteStore::SetBinding(std::string_view blueprint_digest, const Binding& binding) {
  RETURN_IF_ERROR(CheckDigest(blueprint_digest, "blueprint digest"));
  RETURN_IF_ERROR(ValidateBinding(binding));
  const int64_t now = options_.clock_ms();
  return Write([&](Connection& conn) -> absl::Status {
    ASSIGN_OR_RETURN(bool found, Exists(conn, "SELECT 1 FROM blueprints WHERE digest = ?",
                                        blueprint_digest));
    if (!found) {
      return absl::FailedPreconditionError(
          Cat("blueprint ", blueprint_digest, " is not stored; PutBlueprint it first"));
    }
    RETURN_IF_ERROR(RequireArtifact(conn, binding.artifact_digest, "bound artifact"));
    ASSIGN_OR_RETURN(
        Statement stmt,
        conn.Prepare("INSERT INTO bindings (blueprint_digest, generation_point, artifact_digest, "
                     "source, update_ms) VALUES (?, ?, ?, ?, ?) "
                     "ON CONFLICT (blueprint_digest, generation_point) DO UPDATE SET "
                     "artifact_digest = excluded.artifact_digest, source = excluded.source, "
                     "update_ms = excluded.update_ms"));
    stmt.BindText(1, blueprint_digest)
        .BindText(2, binding.generation_point)
        .BindText(3, binding.artifact_digest)
        .BindText(4, binding.source)
        .BindInt(5, now);
    return stmt.Run();
  });
}

absl::StatusOr<Binding> SqliteStore::GetBinding(std::string_view blueprint_digest,
                                                std::string_view generation_point) {
  RETURN_IF_ERROR(CheckDigest(blueprint_digest, "blueprint digest"));
  ReaderPool::Lease lease = readers_.Acquire();
  ASSIGN_OR_RETURN(Statement stmt,
                   (*lease).Prepare("SELECT artifact_digest, source FROM bindings "
                                    "WHERE blueprint_digest = ? AND generation_point = ?"));
  stmt.BindText(1, blueprint_digest).BindText(2, generation_point);
  ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) {
    return absl::NotFoundError(Cat("blueprint ", blueprint_digest,
                                            " has no binding for '", generation_point, "'"));
  }
  return Binding{std::string(generation_point), stmt.ColumnText(0), stmt.ColumnText(1)};
}

absl::StatusOr<std::vector<Binding>> SqliteStore::ListBindings(
    std::string_view blueprint_digest) {
  RETURN_IF_ERROR(CheckDigest(blueprint_digest, "blueprint digest"));
  ReaderPool::Lease lease = readers_.Acquire();
  ASSIGN_OR_RETURN(Statement stmt,
                   (*lease).Prepare("SELECT generation_point, artifact_digest, source FROM "
                                    "bindings WHERE blueprint_digest = ? ORDER BY generation_point"));
  stmt.BindText(1, blueprint_digest);
  std::vector<Binding> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) return out;
    out.push_back(Binding{stmt.ColumnText(0), stmt.ColumnText(1), stmt.ColumnText(2)});
  }
}

// ---- runs ---------------------------------------------------------------------------------------

absl::Status InsertRunBindings(Connection& conn, int64_t run_id,
                               const std::vector<Binding>& bindings) {
  for (const Binding& b : bindings) {
    RETURN_IF_ERROR(RequireArtifact(conn, b.artifact_digest, "bound artifact"));
    {
      ASSIGN_OR_RETURN(Statement stmt,
                       conn.Prepare("SELECT artifact_digest FROM run_bindings WHERE run_id = ? "
                                    "AND generation_point = ?"));
      stmt.BindInt(1, run_id).BindText(2, b.generation_point);
      ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (row) {
        if (stmt.ColumnText(0) == b.artifact_digest) continue;
        return absl::FailedPreconditionError(
            Cat("run ", run_id, " already binds '", b.generation_point, "' to ",
                         stmt.ColumnText(0), "; a run's bindings cannot change"));
      }
    }
    ASSIGN_OR_RETURN(Statement stmt,
                     conn.Prepare("INSERT INTO run_bindings (run_id, generation_point, "
                                  "artifact_digest, source) VALUES (?, ?, ?, ?)"));
    stmt.BindInt(1, run_id)
        .BindText(2, b.generation_point)
        .BindText(3, b.artifact_digest)
        .BindText(4, b.source);
    RETURN_IF_ERROR(stmt.Run());
  }
  return absl::OkStatus();
}

absl::StatusOr<CreateRunResult> SqliteStore::CreateRun(const NewRun& run) {
  RETURN_IF_ERROR(CheckDigest(run.blueprint_digest, "run blueprint_digest"));
  RETURN_IF_ERROR(CheckDigest(run.input_digest, "run input_digest"));
  for (const Binding& b : run.bindings) RETURN_IF_ERROR(ValidateBinding(b));
  const int64_t now = options_.clock_ms();
  CreateRunResult result;
  RETURN_IF_ERROR(Write([&](Connection& conn) -> absl::Status {
    if (!run.request_id.empty()) {
      // The writer runs one write at a time, so this check and the insert below are atomic:
      // concurrent submits of one request_id create one run.
      ASSIGN_OR_RETURN(Statement stmt, conn.Prepare("SELECT id FROM runs WHERE submitter = ? "
                                                    "AND request_id = ?"));
      stmt.BindText(1, run.submitter).BindText(2, run.request_id);
      ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (row) {
        const int64_t existing_id = stmt.ColumnInt(0);
        ASSIGN_OR_RETURN(result.run, LoadRun(conn, existing_id));
        result.created = false;
        return absl::OkStatus();
      }
    }
    ASSIGN_OR_RETURN(bool found, Exists(conn, "SELECT 1 FROM blueprints WHERE digest = ?",
                                        run.blueprint_digest));
    if (!found) {
      return absl::FailedPreconditionError(Cat(
          "run blueprint ", run.blueprint_digest, " is not stored; PutBlueprint it first"));
    }
    RETURN_IF_ERROR(RequireBlob(conn, run.input_digest, "run input"));
    {
      ASSIGN_OR_RETURN(
          Statement stmt,
          conn.Prepare("INSERT INTO runs (blueprint_digest, input_digest, state, "
                       "engine_profile_json, error, submitter, request_id, create_ms) "
                       "VALUES (?, ?, 'pending', ?, '', ?, ?, ?)"));
      stmt.BindText(1, run.blueprint_digest)
          .BindText(2, run.input_digest)
          .BindText(3, run.engine_profile_json)
          .BindText(4, run.submitter)
          .BindText(5, run.request_id)
          .BindInt(6, now);
      RETURN_IF_ERROR(stmt.Run());
    }
    const int64_t id = sqlite3_last_insert_rowid(conn.raw());
    RETURN_IF_ERROR(InsertRunBindings(conn, id, run.bindings));
    ASSIGN_OR_RETURN(result.run, LoadRun(conn, id));
    result.created = true;
    return absl::OkStatus();
  }));
  return result;
}

absl::StatusOr<RunRecord> SqliteStore::GetRun(int64_t run_id) {
  return ReadTx([&](Connection& conn) { return LoadRun(conn, run_id); });
}

absl::StatusOr<RunState> CurrentRunState(Connection& conn, int64_t run_id) {
  ASSIGN_OR_RETURN(Statement stmt, conn.Prepare("SELECT state FROM runs WHERE id = ?"));
  stmt.BindInt(1, run_id);
  ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return absl::NotFoundError(Cat("run ", run_id, " does not exist"));
  return ParseRunState(stmt.ColumnText(0)).value_or(RunState::kPending);
}

absl::StatusOr<RunRecord> SqliteStore::Transition(int64_t run_id, RunState to,
                                                  const RunOutcome* outcome) {
  const int64_t now = options_.clock_ms();
  RunRecord stored;
  RETURN_IF_ERROR(Write([&](Connection& conn) -> absl::Status {
    ASSIGN_OR_RETURN(RunState from, CurrentRunState(conn, run_id));
    if (!IsLegalTransition(from, to)) {
      return absl::FailedPreconditionError(Cat("run ", run_id, " is ",
                                                        RunStateName(from), "; it cannot become ",
                                                        RunStateName(to)));
    }
    if (outcome == nullptr) {
      ASSIGN_OR_RETURN(Statement stmt,
                       conn.Prepare("UPDATE runs SET state = ?, start_ms = ? WHERE id = ?"));
      stmt.BindText(1, RunStateName(to)).BindInt(2, now).BindInt(3, run_id);
      RETURN_IF_ERROR(stmt.Run());
    } else {
      if (!outcome->output_digest.empty()) {
        RETURN_IF_ERROR(RequireBlob(conn, outcome->output_digest, "run output"));
      }
      ASSIGN_OR_RETURN(Statement stmt,
                       conn.Prepare("UPDATE runs SET state = ?, output_digest = ?, error = ?, "
                                    "end_ms = ?, interrupted = ? WHERE id = ?"));
      stmt.BindText(1, RunStateName(to))
          .BindTextOrNull(2, outcome->output_digest)
          .BindText(3, outcome->error)
          .BindInt(4, now)
          .BindInt(5, outcome->interrupted ? 1 : 0)
          .BindInt(6, run_id);
      RETURN_IF_ERROR(stmt.Run());
    }
    ASSIGN_OR_RETURN(stored, LoadRun(conn, run_id));
    return absl::OkStatus();
  }));
  return stored;
}

absl::StatusOr<RunRecord> SqliteStore::StartRun(int64_t run_id) {
  return Transition(run_id, RunState::kRunning, nullptr);
}

absl::StatusOr<RunRecord> SqliteStore::FinishRun(int64_t run_id, const RunOutcome& outcome) {
  if (!IsTerminal(outcome.state)) {
    return absl::InvalidArgumentError(Cat(
        "FinishRun needs a terminal state (succeeded, failed, cancelled), not ",
        RunStateName(outcome.state)));
  }
  if (outcome.interrupted && outcome.state != RunState::kFailed) {
    return absl::InvalidArgumentError(Cat("only a failed run can be interrupted, not a ",
                                          RunStateName(outcome.state), " one"));
  }
  if (outcome.state == RunState::kSucceeded) {
    RETURN_IF_ERROR(CheckDigest(outcome.output_digest, "run output_digest"));
  } else if (!outcome.output_digest.empty()) {
    RETURN_IF_ERROR(CheckDigest(outcome.output_digest, "run output_digest"));
  }
  return Transition(run_id, outcome.state, &outcome);
}

absl::Status SqliteStore::AddRunBindings(int64_t run_id, const std::vector<Binding>& bindings) {
  for (const Binding& b : bindings) RETURN_IF_ERROR(ValidateBinding(b));
  return Write([&](Connection& conn) -> absl::Status {
    ASSIGN_OR_RETURN(RunState state, CurrentRunState(conn, run_id));
    if (IsTerminal(state)) {
      return absl::FailedPreconditionError(Cat(
          "run ", run_id, " is ", RunStateName(state), "; its bindings can no longer change"));
    }
    return InsertRunBindings(conn, run_id, bindings);
  });
}

absl::StatusOr<Page<RunRecord>> SqliteStore::ListRuns(const RunFilter& filter,
                                                      const PageRequest& page) {
  if (!filter.blueprint_digest.empty()) {
    RETURN_IF_ERROR(CheckDigest(filter.blueprint_digest, "filter blueprint_digest"));
  }
  ASSIGN_OR_RETURN(const int size, internal::EffectivePageSize(page.page_size));
  const std::string state_name =
      filter.state.has_value() ? std::string(RunStateName(*filter.state)) : "";
  const std::string filter_key = FilterKey({filter.blueprint_digest, state_name, filter.submitter});
  int64_t after = 0;
  if (!page.page_token.empty()) {
    ASSIGN_OR_RETURN(after, tokens_.Decode(page.page_token, "runs", filter_key));
  }
  std::string sql = Cat(
      "SELECT ", kRunColumns, " FROM runs WHERE id > ?1",
      filter.blueprint_digest.empty() ? "" : " AND blueprint_digest = ?3",
      state_name.empty() ? "" : " AND state = ?4",
      filter.submitter.empty() ? "" : " AND submitter = ?5", " ORDER BY id LIMIT ?2");
  return ReadTx([&](Connection& conn) -> absl::StatusOr<Page<RunRecord>> {
    ASSIGN_OR_RETURN(auto rows, QueryRuns(conn, sql, [&](Statement& s) {
                       s.BindInt(1, after).BindInt(2, size + 1);
                       if (!filter.blueprint_digest.empty()) s.BindText(3, filter.blueprint_digest);
                       if (!state_name.empty()) s.BindText(4, state_name);
                       if (!filter.submitter.empty()) s.BindText(5, filter.submitter);
                     }));
    return MakePage(std::move(rows), size, tokens_, "runs", filter_key,
                    [](const RunRecord& r) { return r.id; });
  });
}

// ---- steps and events ---------------------------------------------------------------------------

absl::Status SqliteStore::AppendSteps(int64_t run_id, const std::vector<StepRecord>& steps) {
  for (const StepRecord& s : steps) {
    RETURN_IF_ERROR(CheckDigest(s.artifact_digest, "step artifact_digest"));
    RETURN_IF_ERROR(CheckDigest(s.input_digest, "step input_digest"));
    RETURN_IF_ERROR(CheckDigest(s.output_digest, "step output_digest"));
  }
  return Write([&](Connection& conn) -> absl::Status {
    int64_t count = 0;
    {
      ASSIGN_OR_RETURN(Statement stmt,
                       conn.Prepare("SELECT state, step_count FROM runs WHERE id = ?"));
      stmt.BindInt(1, run_id);
      ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (!row) return absl::NotFoundError(Cat("run ", run_id, " does not exist"));
      RunState state = ParseRunState(stmt.ColumnText(0)).value_or(RunState::kPending);
      if (IsTerminal(state)) {
        return absl::FailedPreconditionError(Cat(
            "run ", run_id, " is ", RunStateName(state), "; its step journal is closed"));
      }
      count = stmt.ColumnInt(1);
    }
    for (size_t i = 0; i < steps.size(); ++i) {
      const StepRecord& s = steps[i];
      if (s.index != count + static_cast<int64_t>(i)) {
        return absl::FailedPreconditionError(
            Cat("run ", run_id, " has ", count + static_cast<int64_t>(i),
                         " steps; the next step's index must be that, not ", s.index));
      }
      RETURN_IF_ERROR(RequireArtifact(conn, s.artifact_digest, "step artifact"));
      ASSIGN_OR_RETURN(Statement stmt,
                       conn.Prepare("INSERT INTO run_steps (run_id, idx, generation_point, "
                                    "artifact_digest, input_digest, output_digest) "
                                    "VALUES (?, ?, ?, ?, ?, ?)"));
      stmt.BindInt(1, run_id)
          .BindInt(2, s.index)
          .BindText(3, s.generation_point)
          .BindText(4, s.artifact_digest)
          .BindText(5, s.input_digest)
          .BindText(6, s.output_digest);
      RETURN_IF_ERROR(stmt.Run());
    }
    ASSIGN_OR_RETURN(Statement stmt,
                     conn.Prepare("UPDATE runs SET step_count = step_count + ? WHERE id = ?"));
    stmt.BindInt(1, static_cast<int64_t>(steps.size())).BindInt(2, run_id);
    return stmt.Run();
  });
}

absl::StatusOr<std::vector<StepRecord>> SqliteStore::ListSteps(int64_t run_id) {
  return ReadTx([&](Connection& conn) -> absl::StatusOr<std::vector<StepRecord>> {
    RETURN_IF_ERROR(CurrentRunState(conn, run_id).status());
    ASSIGN_OR_RETURN(Statement stmt,
                     conn.Prepare("SELECT idx, generation_point, artifact_digest, input_digest, "
                                  "output_digest FROM run_steps WHERE run_id = ? ORDER BY idx"));
    stmt.BindInt(1, run_id);
    std::vector<StepRecord> out;
    while (true) {
      ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (!row) return out;
      out.push_back(StepRecord{stmt.ColumnInt(0), stmt.ColumnText(1), stmt.ColumnText(2),
                               stmt.ColumnText(3), stmt.ColumnText(4)});
    }
  });
}

absl::StatusOr<int64_t> SqliteStore::AppendRunEvent(int64_t run_id, std::string_view kind,
                                                    std::string_view payload) {
  RETURN_IF_ERROR(CheckNonEmpty(kind, "run event kind"));
  const int64_t now = options_.clock_ms();
  int64_t sequence = 0;
  RETURN_IF_ERROR(Write([&](Connection& conn) -> absl::Status {
    RETURN_IF_ERROR(CurrentRunState(conn, run_id).status());
    {
      ASSIGN_OR_RETURN(Statement stmt, conn.Prepare("SELECT COALESCE(MAX(seq), 0) + 1 FROM "
                                                    "run_events WHERE run_id = ?"));
      stmt.BindInt(1, run_id);
      RETURN_IF_ERROR(stmt.Step().status());
      sequence = stmt.ColumnInt(0);
    }
    ASSIGN_OR_RETURN(Statement stmt,
                     conn.Prepare("INSERT INTO run_events (run_id, seq, time_ms, kind, payload) "
                                  "VALUES (?, ?, ?, ?, ?)"));
    stmt.BindInt(1, run_id).BindInt(2, sequence).BindInt(3, now).BindText(4, kind).BindBlob(
        5, payload);
    return stmt.Run();
  }));
  return sequence;
}

absl::StatusOr<std::vector<RunEvent>> SqliteStore::ListRunEvents(int64_t run_id,
                                                                 int64_t after_sequence,
                                                                 int32_t limit) {
  return ReadTx([&](Connection& conn) -> absl::StatusOr<std::vector<RunEvent>> {
    RETURN_IF_ERROR(CurrentRunState(conn, run_id).status());
    ASSIGN_OR_RETURN(Statement stmt,
                     conn.Prepare("SELECT seq, time_ms, kind, payload FROM run_events "
                                  "WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?"));
    stmt.BindInt(1, run_id).BindInt(2, after_sequence).BindInt(3, limit > 0 ? limit : -1);
    std::vector<RunEvent> out;
    while (true) {
      ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (!row) return out;
      out.push_back(RunEvent{stmt.ColumnInt(0), stmt.ColumnInt(1), stmt.ColumnText(2),
                             stmt.ColumnBlob(3)});
    }
  });
}

// ---- caches -------------------------------------------------------------------------------------

absl::StatusOr<std::string> SqliteStore::GetCachedGeneration(std::string_view request_digest) {
  RETURN_IF_ERROR(CheckDigest(request_digest, "request digest"));
  ReaderPool::Lease lease = readers_.Acquire();
  ASSIGN_OR_RETURN(Statement stmt, (*lease).Prepare("SELECT artifact_digest FROM "
                                                    "generation_cache WHERE request_digest = ?"));
  stmt.BindText(1, request_digest);
  ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) {
    return absl::NotFoundError(Cat("no cached generation for ", request_digest));
  }
  return stmt.ColumnText(0);
}

absl::StatusOr<std::string> SqliteStore::PutCachedGeneration(std::string_view request_digest,
                                                             std::string_view artifact_digest) {
  RETURN_IF_ERROR(CheckDigest(request_digest, "request digest"));
  RETURN_IF_ERROR(CheckDigest(artifact_digest, "artifact digest"));
  const int64_t now = options_.clock_ms();
  std::string cached;
  RETURN_IF_ERROR(Write([&](Connection& conn) -> absl::Status {
    RETURN_IF_ERROR(RequireArtifact(conn, artifact_digest, "cached artifact"));
    {
      ASSIGN_OR_RETURN(Statement stmt,
                       conn.Prepare("INSERT INTO generation_cache (request_digest, "
                                    "artifact_digest, create_ms) VALUES (?, ?, ?) "
                                    "ON CONFLICT (request_digest) DO NOTHING"));
      stmt.BindText(1, request_digest).BindText(2, artifact_digest).BindInt(3, now);
      RETURN_IF_ERROR(stmt.Run());
    }
    ASSIGN_OR_RETURN(Statement stmt, conn.Prepare("SELECT artifact_digest FROM "
                                                  "generation_cache WHERE request_digest = ?"));
    stmt.BindText(1, request_digest);
    RETURN_IF_ERROR(stmt.Step().status());
    cached = stmt.ColumnText(0);
    return absl::OkStatus();
  }));
  return cached;
}

absl::StatusOr<IdempotencyRecord> LoadIdempotency(Connection& conn, std::string_view principal,
                                                  std::string_view request_id) {
  ASSIGN_OR_RETURN(Statement stmt,
                   conn.Prepare("SELECT request_digest, response, create_ms FROM idempotency "
                                "WHERE principal = ? AND request_id = ?"));
  stmt.BindText(1, principal).BindText(2, request_id);
  ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) {
    return absl::NotFoundError(Cat("no request '", request_id, "' from '", principal,
                                            "' has been recorded"));
  }
  return IdempotencyRecord{std::string(principal), std::string(request_id), stmt.ColumnText(0),
                           stmt.ColumnBlob(1), stmt.ColumnInt(2)};
}

absl::StatusOr<IdempotencyRecord> SqliteStore::GetIdempotency(std::string_view principal,
                                                              std::string_view request_id) {
  RETURN_IF_ERROR(CheckNonEmpty(request_id, "request_id"));
  ReaderPool::Lease lease = readers_.Acquire();
  return LoadIdempotency(*lease, principal, request_id);
}

absl::StatusOr<IdempotencyRecord> SqliteStore::PutIdempotency(const IdempotencyRecord& record) {
  RETURN_IF_ERROR(CheckNonEmpty(record.request_id, "request_id"));
  const int64_t now = options_.clock_ms();
  IdempotencyRecord stored;
  RETURN_IF_ERROR(Write([&](Connection& conn) -> absl::Status {
    absl::StatusOr<IdempotencyRecord> existing =
        LoadIdempotency(conn, record.principal, record.request_id);
    if (existing.ok()) {
      if (existing->request_digest != record.request_digest) {
        return absl::InvalidArgumentError(Cat(
            "request_id '", record.request_id,
            "' was already used for a different request; use a new request_id"));
      }
      stored = *std::move(existing);
      return absl::OkStatus();
    }
    if (!absl::IsNotFound(existing.status())) return existing.status();
    ASSIGN_OR_RETURN(Statement stmt,
                     conn.Prepare("INSERT INTO idempotency (principal, request_id, "
                                  "request_digest, response, create_ms) VALUES (?, ?, ?, ?, ?)"));
    stmt.BindText(1, record.principal)
        .BindText(2, record.request_id)
        .BindText(3, record.request_digest)
        .BindBlob(4, record.response)
        .BindInt(5, now);
    RETURN_IF_ERROR(stmt.Run());
    stored = record;
    stored.create_ms = now;
    return absl::OkStatus();
  }));
  return stored;
}

absl::StatusOr<std::string> SqliteStore::KvGet(std::string_view ns, std::string_view key) {
  ReaderPool::Lease lease = readers_.Acquire();
  ASSIGN_OR_RETURN(Statement stmt,
                   (*lease).Prepare("SELECT value FROM kv WHERE namespace = ? AND key = ?"));
  stmt.BindText(1, ns).BindText(2, key);
  ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return absl::NotFoundError(Cat("no value for '", key, "' in '", ns, "'"));
  return stmt.ColumnBlob(0);
}

absl::Status SqliteStore::KvPut(std::string_view ns, std::string_view key,
                                std::string_view value) {
  RETURN_IF_ERROR(CheckNonEmpty(ns, "kv namespace"));
  const int64_t now = options_.clock_ms();
  return Write([&](Connection& conn) -> absl::Status {
    ASSIGN_OR_RETURN(Statement stmt,
                     conn.Prepare("INSERT INTO kv (namespace, key, value, update_ms) "
                                  "VALUES (?, ?, ?, ?) ON CONFLICT (namespace, key) DO UPDATE "
                                  "SET value = excluded.value, update_ms = excluded.update_ms"));
    stmt.BindText(1, ns).BindText(2, key).BindBlob(3, value).BindInt(4, now);
    return stmt.Run();
  });
}

absl::Status SqliteStore::KvDelete(std::string_view ns, std::string_view key) {
  return Write([&](Connection& conn) -> absl::Status {
    ASSIGN_OR_RETURN(Statement stmt,
                     conn.Prepare("DELETE FROM kv WHERE namespace = ? AND key = ?"));
    stmt.BindText(1, ns).BindText(2, key);
    return stmt.Run();
  });
}

// ---- administration -----------------------------------------------------------------------------

absl::Status SqliteStore::CheckIntegrity(bool full) {
  ReaderPool::Lease lease = readers_.Acquire();
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
      ReaderPool::Lease lease = readers_.Acquire();
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
      ASSIGN_OR_RETURN(std::string bytes, GetBlob(digest));
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
