// The PostgreSQL store: opening, blobs, artifacts and review, and administration. Specs,
// blueprints and bindings are in pg_blueprints.cc; runs, journals, caches and lookups in
// pg_runs.cc.
#include "store/pg_store.h"

#include <openssl/rand.h>

#include <chrono>
#include <random>
#include <thread>
#include <utility>

#include "store/checks.h"
#include "store/digest.h"
#include "store/pg_schema.h"
#include "store/str_util.h"

namespace rote::store::internal {
namespace {

using P = PgParam;

int64_t SystemClockMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// ---- row loaders ----------------------------------------------------------------------------

constexpr std::string_view kArtifactColumns =
    "id, digest, kind, generation_point, revision, source, options_json, "
    "validation_report_json, spec_digest, model_digest, numerics_profile, "
    "prompt_template_version, decoding_json, request_digest, device, author, state, "
    "state_version, create_ms, EXISTS (SELECT 1 FROM live_revisions l WHERE "
    "l.artifact_digest = artifacts.digest)";

absl::StatusOr<std::vector<std::pair<int64_t, ArtifactRecord>>> QueryArtifacts(
    PgConn& conn, const std::string& sql, const std::vector<PgParam>& params) {
  ASSIGN_OR_RETURN(PgResult res, conn.Exec(sql, params));
  std::vector<std::pair<int64_t, ArtifactRecord>> rows;
  for (int i = 0; i < res.rows(); ++i) {
    ArtifactRecord a;
    a.digest = res.Text(i, 1);
    a.kind = res.Text(i, 2);
    a.generation_point = res.Text(i, 3);
    a.revision = res.Int(i, 4);
    a.source = res.Text(i, 5);
    a.options_json = res.Text(i, 6);
    a.validation_report_json = res.Text(i, 7);
    a.provenance.spec_digest = res.Text(i, 8);
    a.provenance.model_digest = res.Text(i, 9);
    a.provenance.numerics_profile = res.Text(i, 10);
    a.provenance.prompt_template_version = res.Text(i, 11);
    a.provenance.decoding_json = res.Text(i, 12);
    a.provenance.request_digest = res.Text(i, 13);
    a.provenance.device = res.Text(i, 14);
    a.provenance.author = res.Text(i, 15);
    a.state = ParseReviewState(res.Text(i, 16)).value_or(ReviewState::kPending);
    a.etag = MakeEtag(a.digest, res.Int(i, 17));
    a.create_ms = res.Int(i, 18);
    a.live = res.Int(i, 19) != 0;
    rows.emplace_back(res.Int(i, 0), std::move(a));
  }
  for (auto& [id, a] : rows) {
    ASSIGN_OR_RETURN(PgResult attempts,
                     conn.Exec(Cat("SELECT ", kPgAttemptColumns,
                                   " FROM artifact_attempts WHERE artifact_id = $1 ORDER BY idx"),
                               {P::Int(id)}));
    for (int i = 0; i < attempts.rows(); ++i) {
      a.provenance.attempts.push_back(ReadPgAttempt(attempts, i, 0));
    }
  }
  return rows;
}

absl::StatusOr<ArtifactRecord> LoadArtifact(PgConn& conn, std::string_view digest) {
  ASSIGN_OR_RETURN(auto rows, QueryArtifacts(conn, Cat("SELECT ", kArtifactColumns,
                                                       " FROM artifacts WHERE digest = $1"),
                                             {P::Text(digest)}));
  if (rows.empty()) return absl::NotFoundError(Cat("artifact ", digest, " is not stored"));
  return std::move(rows.front().second);
}

// ---- review helpers -------------------------------------------------------------------------

struct ArtifactKey {
  std::string generation_point;
  std::string spec_digest;
  int64_t revision = 0;
  std::string state;
};

absl::StatusOr<ArtifactKey> LoadKey(PgConn& conn, std::string_view digest) {
  ASSIGN_OR_RETURN(PgResult res, conn.Exec("SELECT generation_point, spec_digest, revision, "
                                           "state FROM artifacts WHERE digest = $1",
                                           {P::Text(digest)}));
  if (res.rows() == 0) return absl::NotFoundError(Cat("artifact ", digest, " is not stored"));
  return ArtifactKey{res.Text(0, 0), res.Text(0, 1), res.Int(0, 2), res.Text(0, 3)};
}

absl::StatusOr<std::string> LiveDigest(PgConn& conn, std::string_view point,
                                       std::string_view spec) {
  ASSIGN_OR_RETURN(PgResult res, conn.Exec("SELECT artifact_digest FROM live_revisions "
                                           "WHERE generation_point = $1 AND spec_digest = $2",
                                           {P::Text(point), P::Text(spec)}));
  return res.rows() > 0 ? res.Text(0, 0) : std::string();
}

absl::Status SetLive(PgConn& conn, const ArtifactKey& key, std::string_view digest,
                     int64_t now_ms) {
  return conn
      .Exec("INSERT INTO live_revisions (generation_point, spec_digest, artifact_digest, "
            "update_ms) VALUES ($1, $2, $3, $4) ON CONFLICT (generation_point, spec_digest) "
            "DO UPDATE SET artifact_digest = excluded.artifact_digest, "
            "update_ms = excluded.update_ms",
            {P::Text(key.generation_point), P::Text(key.spec_digest), P::Text(digest),
             P::Int(now_ms)})
      .status();
}

AuditEntry Entry(std::string_view principal, std::string_view action, const ArtifactKey& key,
                 std::string_view digest, std::string detail) {
  AuditEntry e;
  e.principal = std::string(principal);
  e.action = std::string(action);
  e.generation_point = key.generation_point;
  e.artifact_digest = std::string(digest);
  e.revision = key.revision;
  e.detail = std::move(detail);
  return e;
}

absl::Status ApplyReview(PgConn& conn, const ReviewRequest& review, int64_t now_ms) {
  ASSIGN_OR_RETURN(ArtifactKey key, LoadKey(conn, review.artifact_digest));
  const std::string_view digest = review.artifact_digest;
  const bool approve = review.decision == ReviewState::kApproved;
  RETURN_IF_ERROR(PgAppendAudit(
      conn, Entry(review.principal, approve ? "approve" : "reject", key, digest, review.comment),
      now_ms));
  ASSIGN_OR_RETURN(std::string live, LiveDigest(conn, key.generation_point, key.spec_digest));
  if (approve) {
    if (!review.promote || live == digest) return absl::OkStatus();
    RETURN_IF_ERROR(SetLive(conn, key, digest, now_ms));
    return PgAppendAudit(conn,
                         Entry(review.principal, "promote", key, digest,
                               live.empty() ? "on approval; the point had no live revision"
                                            : Cat("on approval; replaces ", live)),
                         now_ms);
  }
  if (live != digest) return absl::OkStatus();
  // The rejected revision was live: the newest other approved revision of the same point and
  // spec takes its place, or the point is left without one.
  ASSIGN_OR_RETURN(PgResult res,
                   conn.Exec("SELECT digest, revision FROM artifacts WHERE generation_point = $1 "
                             "AND spec_digest = $2 AND state = 'approved' AND digest <> $3 "
                             "ORDER BY revision DESC LIMIT 1",
                             {P::Text(key.generation_point), P::Text(key.spec_digest),
                              P::Text(digest)}));
  if (res.rows() == 0) {
    RETURN_IF_ERROR(conn.Exec("DELETE FROM live_revisions WHERE generation_point = $1 AND "
                              "spec_digest = $2",
                              {P::Text(key.generation_point), P::Text(key.spec_digest)})
                        .status());
    return PgAppendAudit(conn,
                         Entry(review.principal, "unbind", key, digest,
                               "the rejected live revision had no approved predecessor; the "
                               "point has no live revision"),
                         now_ms);
  }
  const std::string fallback = res.Text(0, 0);
  ArtifactKey fallback_key = key;
  fallback_key.revision = res.Int(0, 1);
  RETURN_IF_ERROR(SetLive(conn, key, fallback, now_ms));
  return PgAppendAudit(conn,
                       Entry(review.principal, "fallback", fallback_key, fallback,
                             Cat("revision ", key.revision, " (", digest,
                                 ") was rejected; revision ", fallback_key.revision,
                                 " is live again")),
                       now_ms);
}

}  // namespace

// ---- shared helpers ---------------------------------------------------------------------------

absl::Status PgDb::Write(const std::function<absl::Status(PgConn&)>& fn) {
  thread_local std::minstd_rand jitter(std::random_device{}());
  for (int attempt = 0;; ++attempt) {
    PgPool::Lease lease = pool.Acquire();
    PgConn& conn = *lease;
    conn.ClearRetryable();
    RETURN_IF_ERROR(conn.ExecScript("BEGIN"));
    absl::Status st = fn(conn);
    if (st.ok()) {
      st = conn.ExecScript("COMMIT");
      if (st.ok()) {
        commits.fetch_add(1);
        return st;
      }
    } else {
      conn.ExecScript("ROLLBACK").IgnoreError();
    }
    if (!conn.last_error_retryable() || attempt >= 100) return st;
    // A deadlock between two writers: back off a little, then run again.
    std::this_thread::sleep_for(std::chrono::microseconds(
        100 + jitter() % static_cast<unsigned>(200 * std::min(attempt + 1, 50))));
  }
}

GenerationAttempt ReadPgAttempt(const PgResult& res, int row, int c) {
  GenerationAttempt a;
  a.index = static_cast<int32_t>(res.Int(row, c));
  a.prompt_digest = res.Text(row, c + 1);
  a.output_digest = res.Text(row, c + 2);
  a.failure = res.Text(row, c + 3);
  a.code_digest = res.Text(row, c + 4);
  a.prompt_tokens = static_cast<int32_t>(res.Int(row, c + 5));
  a.output_tokens = static_cast<int32_t>(res.Int(row, c + 6));
  a.start_ms = res.Int(row, c + 7);
  a.duration_ms = res.Int(row, c + 8);
  return a;
}

absl::Status PgInsertAttempts(PgConn& conn, std::string_view table, std::string_view owner_column,
                              int64_t owner_id, const std::vector<GenerationAttempt>& attempts) {
  const std::string sql = Cat("INSERT INTO ", table, " (", owner_column, ", ", kPgAttemptColumns,
                              ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)");
  for (const GenerationAttempt& a : attempts) {
    RETURN_IF_ERROR(conn.Exec(sql, {P::Int(owner_id), P::Int(a.index),
                                    P::TextOrNull(a.prompt_digest), P::TextOrNull(a.output_digest),
                                    P::Text(a.failure), P::TextOrNull(a.code_digest),
                                    P::Int(a.prompt_tokens), P::Int(a.output_tokens),
                                    P::Int(a.start_ms), P::Int(a.duration_ms)})
                        .status());
  }
  return absl::OkStatus();
}

absl::Status PgRequireBlob(PgConn& conn, std::string_view digest, std::string_view what) {
  ASSIGN_OR_RETURN(PgResult res,
                   conn.Exec("SELECT 1 FROM blobs WHERE digest = $1", {P::Text(digest)}));
  if (res.rows() > 0) return absl::OkStatus();
  return absl::FailedPreconditionError(
      Cat(what, " ", digest, " is not a stored blob; PutBlob it first"));
}

absl::Status PgRequireArtifact(PgConn& conn, std::string_view digest, std::string_view what) {
  ASSIGN_OR_RETURN(PgResult res,
                   conn.Exec("SELECT 1 FROM artifacts WHERE digest = $1", {P::Text(digest)}));
  if (res.rows() > 0) return absl::OkStatus();
  return absl::FailedPreconditionError(
      Cat(what, " ", digest, " is not a stored artifact; PutArtifact it first"));
}

absl::Status PgRequireAttemptBlobs(PgConn& conn, const std::vector<GenerationAttempt>& attempts) {
  for (const GenerationAttempt& a : attempts) {
    if (!a.prompt_digest.empty()) RETURN_IF_ERROR(PgRequireBlob(conn, a.prompt_digest, "attempt prompt"));
    if (!a.output_digest.empty()) RETURN_IF_ERROR(PgRequireBlob(conn, a.output_digest, "attempt output"));
    if (!a.code_digest.empty()) RETURN_IF_ERROR(PgRequireBlob(conn, a.code_digest, "attempt code"));
  }
  return absl::OkStatus();
}

// Advisory lock keys (two int4 keys, a space apart from the migration's single key): class 1 is
// a generation point (by the hash of its name), class 2 the audit log.
absl::Status PgLockPoint(PgConn& conn, std::string_view generation_point) {
  return conn.Exec("SELECT pg_advisory_xact_lock(1, hashtext($1))", {P::Text(generation_point)})
      .status();
}

absl::Status PgAppendAudit(PgConn& conn, const AuditEntry& entry, int64_t now_ms) {
  // Sequences stay dense: the next number is taken under the audit lock, held to the end of the
  // transaction (a rolled-back transaction takes none).
  RETURN_IF_ERROR(conn.Exec("SELECT pg_advisory_xact_lock(2, 0)").status());
  return conn
      .Exec("INSERT INTO audit_log (id, time_ms, principal, action, generation_point, "
            "artifact_digest, revision, detail, run_id) SELECT COALESCE(MAX(id), 0) + 1, $1, $2, "
            "$3, $4, $5, $6, $7, $8 FROM audit_log",
            {P::Int(now_ms), P::Text(entry.principal), P::Text(entry.action),
             P::Text(entry.generation_point), P::Text(entry.artifact_digest),
             P::Int(entry.revision), P::Text(entry.detail), P::Int(entry.run_id)})
      .status();
}

// ---- opening ----------------------------------------------------------------------------------

PgStore::PgStore(StoreOptions options) : options_(std::move(options)) {
  if (!options_.clock_ms) options_.clock_ms = SystemClockMs;
  db_.clock_ms = options_.clock_ms;
}

absl::Status PgStore::Init() {
  ASSIGN_OR_RETURN(std::unique_ptr<PgConn> conn, PgConn::Open(options_.path));
  // The server's time zone and locale never matter: times are integers, text is COLLATE "C".
  RETURN_IF_ERROR(PgMigrate(*conn, PgLatestSchemaVersion()));
  schema_version_ = PgLatestSchemaVersion();
  unsigned char secret[32];
  if (RAND_bytes(secret, sizeof secret) != 1) {
    return absl::InternalError("store: no random bytes for the page token secret");
  }
  RETURN_IF_ERROR(conn->Exec("INSERT INTO meta (key, value) VALUES ('page_token_secret', $1) "
                             "ON CONFLICT (key) DO NOTHING",
                             {P::Bytes(std::string_view(reinterpret_cast<char*>(secret),
                                                        sizeof secret))})
                      .status());
  ASSIGN_OR_RETURN(PgResult res,
                   conn->Exec("SELECT value FROM meta WHERE key = 'page_token_secret'"));
  if (res.rows() == 0) return absl::DataLossError("store: the page token secret is missing");
  db_.tokens = PageTokenCodec(res.Text(0, 0));
  // kNormal: a commit returns before its WAL record is flushed; survives a crash of rote or of
  // PostgreSQL's processes, may lose the last commits on power loss (as SQLite's NORMAL).
  const int size = std::max(options_.reader_pool_size, 1) + 4;
  // A transaction of this store never waits on its client for long: its statements follow each
  // other. One that does belongs to a process that stopped mid-transaction (paused,
  // partitioned); PostgreSQL then closes its connection, so the locks it held (a run's row among
  // them) do not keep other replicas from taking its runs over.
  std::string setup = Cat("SET idle_in_transaction_session_timeout = ",
                          std::max(options_.busy_timeout_ms, 100));
  if (options_.synchronous == SyncMode::kNormal) setup += "; SET synchronous_commit = off";
  return db_.pool.Init(options_.path, size, setup);
}

absl::Status PgStore::Backup(const std::string&) {
  return absl::UnimplementedError(
      "store: a PostgreSQL store is backed up with PostgreSQL's own tools (pg_dump, or a base "
      "backup with WAL archiving); rote backup copies SQLite stores");
}

absl::Status PgStore::CheckIntegrity(bool full) {
  // Chunked blobs: every chunk present. Full: every blob's bytes still hash to its digest.
  ASSIGN_OR_RETURN(std::vector<std::string> digests,
                   db_.Read([&](PgConn& conn) -> absl::StatusOr<std::vector<std::string>> {
                     ASSIGN_OR_RETURN(
                         PgResult res,
                         conn.Exec("SELECT b.digest FROM blobs b WHERE b.chunks > 0 AND "
                                   "b.chunks <> (SELECT COUNT(*) FROM blob_chunks c WHERE "
                                   "c.digest = b.digest) LIMIT 1"));
                     if (res.rows() > 0) {
                       return absl::DataLossError(
                           Cat("store: blob ", res.Text(0, 0), " is missing chunks"));
                     }
                     std::vector<std::string> out;
                     if (!full) return out;
                     ASSIGN_OR_RETURN(PgResult all,
                                      conn.Exec("SELECT digest FROM blobs ORDER BY digest"));
                     for (int i = 0; i < all.rows(); ++i) out.push_back(all.Text(i, 0));
                     return out;
                   }));
  // One blob at a time, each on a connection of its own lease (never two leases at once).
  for (const std::string& digest : digests) RETURN_IF_ERROR(GetBlob(digest).status());
  return absl::OkStatus();
}

// ---- blobs ------------------------------------------------------------------------------------

absl::StatusOr<BlobRef> PgStore::PutBlob(std::string_view bytes) {
  BlobRef ref{Sha256Digest(bytes), static_cast<int64_t>(bytes.size())};
  if (absl::StatusOr<BlobRef> existing = StatBlob(ref.digest); existing.ok()) {
    return *existing;
  } else if (!absl::IsNotFound(existing.status())) {
    return existing.status();
  }
  const bool chunked = ref.size > kPgChunkBytes;
  const int64_t chunks = chunked ? (ref.size + kPgChunkBytes - 1) / kPgChunkBytes : 0;
  const int64_t now = db_.clock_ms();
  RETURN_IF_ERROR(db_.Write([&](PgConn& conn) -> absl::Status {
    PgParam data = chunked ? PgParam{17, "", true} : P::Bytes(bytes);
    ASSIGN_OR_RETURN(PgResult res,
                     conn.Exec("INSERT INTO blobs (digest, size, chunks, data, create_ms) "
                               "VALUES ($1, $2, $3::int, $4, $5) ON CONFLICT (digest) DO NOTHING "
                               "RETURNING 1",
                               {P::Text(ref.digest), P::Int(ref.size), P::Int(chunks),
                                std::move(data), P::Int(now)}));
    if (res.rows() == 0) return absl::OkStatus();  // stored meanwhile
    for (int64_t i = 0; i < chunks; ++i) {
      RETURN_IF_ERROR(
          conn.Exec("INSERT INTO blob_chunks (digest, idx, data) VALUES ($1, $2::int, $3)",
                    {P::Text(ref.digest), P::Int(i),
                     P::Bytes(bytes.substr(static_cast<size_t>(i * kPgChunkBytes),
                                           static_cast<size_t>(kPgChunkBytes)))})
              .status());
    }
    return absl::OkStatus();
  }));
  return ref;
}

absl::StatusOr<BlobRef> PgStore::StatBlob(std::string_view digest) {
  RETURN_IF_ERROR(CheckDigest(digest, "blob digest"));
  return db_.Read([&](PgConn& conn) -> absl::StatusOr<BlobRef> {
    ASSIGN_OR_RETURN(PgResult res,
                     conn.Exec("SELECT size FROM blobs WHERE digest = $1", {P::Text(digest)}));
    if (res.rows() == 0) return absl::NotFoundError(Cat("blob ", digest, " is not stored"));
    return BlobRef{std::string(digest), res.Int(0, 0)};
  });
}

absl::StatusOr<std::string> PgStore::GetBlob(std::string_view digest) {
  RETURN_IF_ERROR(CheckDigest(digest, "blob digest"));
  return db_.Read([&](PgConn& conn) -> absl::StatusOr<std::string> {
    ASSIGN_OR_RETURN(PgResult res, conn.Exec("SELECT size, chunks, data FROM blobs "
                                             "WHERE digest = $1",
                                             {P::Text(digest)}));
    if (res.rows() == 0) return absl::NotFoundError(Cat("blob ", digest, " is not stored"));
    const int64_t size = res.Int(0, 0);
    const int64_t chunks = res.Int(0, 1);
    std::string bytes;
    if (chunks == 0) {
      bytes = res.Text(0, 2);
    } else {
      bytes.reserve(static_cast<size_t>(size));
      // One chunk per query: a large blob never needs its whole size twice in memory.
      for (int64_t i = 0; i < chunks; ++i) {
        ASSIGN_OR_RETURN(PgResult chunk,
                         conn.Exec("SELECT data FROM blob_chunks WHERE digest = $1 AND "
                                   "idx = $2::int",
                                   {P::Text(digest), P::Int(i)}));
        if (chunk.rows() == 0) {
          return absl::DataLossError(Cat("blob ", digest, " is missing chunk ", i, " of ",
                                         chunks));
        }
        bytes += chunk.Text(0, 0);
      }
    }
    RETURN_IF_ERROR(VerifyBlobBytes(digest, size, bytes));
    return bytes;
  });
}

// ---- artifacts and review ---------------------------------------------------------------------

absl::StatusOr<ArtifactRecord> PgStore::PutArtifact(const ArtifactRecord& artifact) {
  return ProposeArtifactImpl(artifact, nullptr);
}

absl::StatusOr<ArtifactRecord> PgStore::ProposeArtifact(const ArtifactRecord& artifact,
                                                        const AuditEntry& audit) {
  return ProposeArtifactImpl(artifact, &audit);
}

absl::StatusOr<ArtifactRecord> PgStore::ProposeArtifactImpl(const ArtifactRecord& artifact,
                                                            const AuditEntry* audit) {
  RETURN_IF_ERROR(CheckNewArtifact(artifact));
  const int64_t now = db_.clock_ms();
  ArtifactRecord stored;
  RETURN_IF_ERROR(db_.Write([&](PgConn& conn) -> absl::Status {
    // The point's lock makes the next revision number, and a concurrent put of the same
    // artifact, wait for the transaction before.
    RETURN_IF_ERROR(PgLockPoint(conn, artifact.generation_point));
    absl::StatusOr<ArtifactRecord> existing = LoadArtifact(conn, artifact.digest);
    if (existing.ok()) {
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
    RETURN_IF_ERROR(PgRequireAttemptBlobs(conn, artifact.provenance.attempts));
    const Provenance& p = artifact.provenance;
    ASSIGN_OR_RETURN(
        PgResult res,
        conn.Exec("INSERT INTO artifacts (digest, kind, generation_point, revision, source, "
                  "options_json, validation_report_json, spec_digest, model_digest, "
                  "numerics_profile, prompt_template_version, decoding_json, request_digest, "
                  "device, author, state, state_version, create_ms) "
                  "SELECT $1, $2, $3, COALESCE(MAX(revision), 0) + 1, $4, $5, $6, $7, $8, $9, "
                  "$10, $11, $12, $13, $14, 'pending', 0, $15 FROM artifacts "
                  "WHERE generation_point = $3 RETURNING id",
                  {P::Text(artifact.digest), P::Text(artifact.kind),
                   P::Text(artifact.generation_point), P::Text(artifact.source),
                   P::Text(artifact.options_json), P::Text(artifact.validation_report_json),
                   P::Text(p.spec_digest), P::Text(p.model_digest), P::Text(p.numerics_profile),
                   P::Text(p.prompt_template_version), P::Text(p.decoding_json),
                   P::Text(p.request_digest), P::Text(p.device), P::Text(p.author),
                   P::Int(now)}));
    const int64_t id = res.Int(0, 0);
    RETURN_IF_ERROR(
        PgInsertAttempts(conn, "artifact_attempts", "artifact_id", id, p.attempts));
    ASSIGN_OR_RETURN(stored, LoadArtifact(conn, artifact.digest));
    if (audit != nullptr) {
      AuditEntry entry = *audit;
      entry.artifact_digest = stored.digest;
      entry.revision = stored.revision;
      entry.generation_point = stored.generation_point;
      RETURN_IF_ERROR(PgAppendAudit(conn, entry, now));
    }
    return absl::OkStatus();
  }));
  return stored;
}

absl::StatusOr<ArtifactRecord> PgStore::GetArtifact(std::string_view digest) {
  RETURN_IF_ERROR(CheckDigest(digest, "artifact digest"));
  return db_.Read([&](PgConn& conn) { return LoadArtifact(conn, digest); });
}

absl::StatusOr<ArtifactRecord> PgStore::GetRevision(std::string_view generation_point,
                                                    int64_t revision) {
  return db_.Read([&](PgConn& conn) -> absl::StatusOr<ArtifactRecord> {
    ASSIGN_OR_RETURN(auto rows, QueryArtifacts(conn, Cat("SELECT ", kArtifactColumns,
                                                         " FROM artifacts WHERE "
                                                         "generation_point = $1 AND revision = $2"),
                                               {P::Text(generation_point), P::Int(revision)}));
    if (rows.empty()) {
      return absl::NotFoundError(
          Cat("generation point '", generation_point, "' has no revision ", revision));
    }
    return std::move(rows.front().second);
  });
}

absl::StatusOr<Page<ArtifactRecord>> PgStore::ListArtifacts(const ArtifactFilter& filter,
                                                            const PageRequest& page) {
  ASSIGN_OR_RETURN(const int size, EffectivePageSize(page.page_size));
  const std::string state_name =
      filter.state.has_value() ? std::string(ReviewStateName(*filter.state)) : "";
  const std::string filter_key = FilterKey({filter.generation_point, state_name});
  int64_t after = 0;
  if (!page.page_token.empty()) {
    ASSIGN_OR_RETURN(after, db_.tokens.Decode(page.page_token, "artifacts", filter_key));
  }
  std::vector<PgParam> params{P::Int(after), P::Int(size + 1)};
  std::string where;
  if (!filter.generation_point.empty()) {
    params.push_back(P::Text(filter.generation_point));
    where += Cat(" AND generation_point = $", params.size());
  }
  if (!state_name.empty()) {
    params.push_back(P::Text(state_name));
    where += Cat(" AND state = $", params.size());
  }
  const std::string sql = Cat("SELECT ", kArtifactColumns, " FROM artifacts WHERE id > $1",
                              where, " ORDER BY id LIMIT $2");
  return db_.Read([&](PgConn& conn) -> absl::StatusOr<Page<ArtifactRecord>> {
    ASSIGN_OR_RETURN(auto rows, QueryArtifacts(conn, sql, params));
    return StripIds(MakePage(std::move(rows), size, db_.tokens, "artifacts", filter_key,
                             [](const auto& r) { return r.first; }));
  });
}

absl::StatusOr<Page<ArtifactRecord>> PgStore::ListRevisions(std::string_view generation_point,
                                                            const PageRequest& page) {
  RETURN_IF_ERROR(CheckNonEmpty(generation_point, "generation_point"));
  ASSIGN_OR_RETURN(const int size, EffectivePageSize(page.page_size));
  const std::string filter_key = FilterKey({generation_point});
  int64_t after = 0;
  if (!page.page_token.empty()) {
    ASSIGN_OR_RETURN(after, db_.tokens.Decode(page.page_token, "revisions", filter_key));
  }
  return db_.Read([&](PgConn& conn) -> absl::StatusOr<Page<ArtifactRecord>> {
    ASSIGN_OR_RETURN(auto rows,
                     QueryArtifacts(conn, Cat("SELECT ", kArtifactColumns,
                                              " FROM artifacts WHERE generation_point = $1 AND "
                                              "revision > $2 ORDER BY revision LIMIT $3"),
                                    {P::Text(generation_point), P::Int(after), P::Int(size + 1)}));
    return StripIds(MakePage(std::move(rows), size, db_.tokens, "revisions", filter_key,
                             [](const auto& r) { return r.second.revision; }));
  });
}

absl::StatusOr<ArtifactRecord> PgStore::ReviewArtifact(const ReviewRequest& review) {
  RETURN_IF_ERROR(CheckDigest(review.artifact_digest, "artifact digest"));
  RETURN_IF_ERROR(CheckNonEmpty(review.principal, "review principal"));
  const int64_t now = db_.clock_ms();
  ArtifactRecord stored;
  RETURN_IF_ERROR(db_.Write([&](PgConn& conn) -> absl::Status {
    // Reviews of one point (and the live revision they may move) take turns; the etag is
    // checked under the lock, so of two reviews with one etag exactly one wins.
    ASSIGN_OR_RETURN(PgResult point, conn.Exec("SELECT generation_point FROM artifacts WHERE "
                                               "digest = $1",
                                               {P::Text(review.artifact_digest)}));
    if (point.rows() > 0) RETURN_IF_ERROR(PgLockPoint(conn, point.Text(0, 0)));
    ASSIGN_OR_RETURN(PgResult res, conn.Exec("SELECT id, state_version FROM artifacts "
                                             "WHERE digest = $1 FOR UPDATE",
                                             {P::Text(review.artifact_digest)}));
    if (res.rows() == 0) {
      return absl::NotFoundError(Cat("artifact ", review.artifact_digest, " is not stored"));
    }
    const int64_t id = res.Int(0, 0);
    if (!review.expected_etag.empty() &&
        review.expected_etag != MakeEtag(review.artifact_digest, res.Int(0, 1))) {
      return absl::AbortedError(Cat(
          "artifact ", review.artifact_digest, " was reviewed since etag '", review.expected_etag,
          "' was read; get the artifact again, check its state and retry with the new etag"));
    }
    RETURN_IF_ERROR(conn.Exec("UPDATE artifacts SET state = $1, state_version = "
                              "state_version + 1 WHERE id = $2",
                              {P::Text(ReviewStateName(review.decision)), P::Int(id)})
                        .status());
    RETURN_IF_ERROR(conn.Exec("INSERT INTO reviews (artifact_id, principal, decision, comment, "
                              "time_ms) VALUES ($1, $2, $3, $4, $5)",
                              {P::Int(id), P::Text(review.principal),
                               P::Text(ReviewStateName(review.decision)),
                               P::Text(review.comment), P::Int(now)})
                        .status());
    RETURN_IF_ERROR(ApplyReview(conn, review, now));
    ASSIGN_OR_RETURN(stored, LoadArtifact(conn, review.artifact_digest));
    return absl::OkStatus();
  }));
  return stored;
}

absl::StatusOr<std::vector<ReviewEntry>> PgStore::ListReviews(std::string_view digest) {
  RETURN_IF_ERROR(CheckDigest(digest, "artifact digest"));
  return db_.Read([&](PgConn& conn) -> absl::StatusOr<std::vector<ReviewEntry>> {
    ASSIGN_OR_RETURN(PgResult found,
                     conn.Exec("SELECT 1 FROM artifacts WHERE digest = $1", {P::Text(digest)}));
    if (found.rows() == 0) return absl::NotFoundError(Cat("artifact ", digest, " is not stored"));
    ASSIGN_OR_RETURN(PgResult res,
                     conn.Exec("SELECT r.id, r.principal, r.decision, r.comment, r.time_ms "
                               "FROM reviews r JOIN artifacts a ON a.id = r.artifact_id "
                               "WHERE a.digest = $1 ORDER BY r.id",
                               {P::Text(digest)}));
    std::vector<ReviewEntry> out;
    for (int i = 0; i < res.rows(); ++i) {
      out.push_back(ReviewEntry{res.Int(i, 0), std::string(digest), res.Text(i, 1),
                                ParseReviewState(res.Text(i, 2)).value_or(ReviewState::kPending),
                                res.Text(i, 3), res.Int(i, 4)});
    }
    return out;
  });
}

absl::StatusOr<LiveRevision> PgStore::GetLiveRevision(std::string_view generation_point,
                                                      std::string_view spec_digest) {
  return db_.Read([&](PgConn& conn) -> absl::StatusOr<LiveRevision> {
    ASSIGN_OR_RETURN(PgResult res,
                     conn.Exec("SELECT l.artifact_digest, a.revision, l.update_ms FROM "
                               "live_revisions l JOIN artifacts a ON a.digest = "
                               "l.artifact_digest WHERE l.generation_point = $1 AND "
                               "l.spec_digest = $2",
                               {P::Text(generation_point), P::Text(spec_digest)}));
    if (res.rows() == 0) {
      return absl::NotFoundError(Cat("generation point '", generation_point,
                                     "' has no live revision for spec ", spec_digest));
    }
    return LiveRevision{std::string(generation_point), std::string(spec_digest), res.Text(0, 0),
                        res.Int(0, 1), res.Int(0, 2)};
  });
}

absl::StatusOr<ArtifactRecord> PgStore::PromoteRevision(const PromoteRequest& request) {
  RETURN_IF_ERROR(CheckDigest(request.artifact_digest, "artifact digest"));
  RETURN_IF_ERROR(CheckNonEmpty(request.principal, "principal"));
  if (request.action != "promote" && request.action != "lockfile") {
    return absl::InvalidArgumentError(Cat("promotion action must be promote or lockfile, not '",
                                          request.action, "'"));
  }
  const int64_t now = db_.clock_ms();
  RETURN_IF_ERROR(db_.Write([&](PgConn& conn) -> absl::Status {
    ASSIGN_OR_RETURN(ArtifactKey unlocked, LoadKey(conn, request.artifact_digest));
    RETURN_IF_ERROR(PgLockPoint(conn, unlocked.generation_point));
    // Read again under the lock: a review may have changed the state meanwhile.
    ASSIGN_OR_RETURN(ArtifactKey key, LoadKey(conn, request.artifact_digest));
    if (key.state != "approved") {
      return absl::FailedPreconditionError(
          Cat("revision ", key.revision, " of '", key.generation_point, "' (",
              request.artifact_digest, ") is ", key.state,
              "; only an approved revision can become live"));
    }
    ASSIGN_OR_RETURN(std::string live, LiveDigest(conn, key.generation_point, key.spec_digest));
    if (live == request.artifact_digest || (request.only_if_unset && !live.empty())) {
      return absl::OkStatus();
    }
    RETURN_IF_ERROR(SetLive(conn, key, request.artifact_digest, now));
    std::string detail = request.comment;
    if (!live.empty()) detail = Cat(detail, detail.empty() ? "" : "; ", "replaces ", live);
    return PgAppendAudit(
        conn, Entry(request.principal, request.action, key, request.artifact_digest, detail), now);
  }));
  return GetArtifact(request.artifact_digest);
}

absl::StatusOr<Page<AuditEntry>> PgStore::ListAuditEntries(const AuditFilter& filter,
                                                           const PageRequest& page) {
  if (!filter.artifact_digest.empty()) {
    RETURN_IF_ERROR(CheckDigest(filter.artifact_digest, "artifact digest"));
  }
  ASSIGN_OR_RETURN(const int size, EffectivePageSize(page.page_size));
  const std::string filter_key = FilterKey({filter.generation_point, filter.artifact_digest});
  int64_t after = 0;
  if (!page.page_token.empty()) {
    ASSIGN_OR_RETURN(after, db_.tokens.Decode(page.page_token, "audit", filter_key));
  }
  std::vector<PgParam> params{P::Int(after), P::Int(size + 1)};
  std::string where;
  if (!filter.generation_point.empty()) {
    params.push_back(P::Text(filter.generation_point));
    where += Cat(" AND generation_point = $", params.size());
  }
  if (!filter.artifact_digest.empty()) {
    params.push_back(P::Text(filter.artifact_digest));
    where += Cat(" AND artifact_digest = $", params.size());
  }
  const std::string sql =
      Cat("SELECT id, time_ms, principal, action, generation_point, artifact_digest, revision, "
          "detail, COALESCE(run_id, 0) FROM audit_log WHERE id > $1",
          where, " ORDER BY id LIMIT $2");
  return db_.Read([&](PgConn& conn) -> absl::StatusOr<Page<AuditEntry>> {
    ASSIGN_OR_RETURN(PgResult res, conn.Exec(sql, params));
    std::vector<AuditEntry> rows;
    for (int i = 0; i < res.rows(); ++i) {
      AuditEntry e;
      e.sequence = res.Int(i, 0);
      e.time_ms = res.Int(i, 1);
      e.principal = res.Text(i, 2);
      e.action = res.Text(i, 3);
      e.generation_point = res.Text(i, 4);
      e.artifact_digest = res.Text(i, 5);
      e.revision = res.Int(i, 6);
      e.detail = res.Text(i, 7);
      e.run_id = res.Int(i, 8);
      rows.push_back(std::move(e));
    }
    return MakePage(std::move(rows), size, db_.tokens, "audit", filter_key,
                    [](const AuditEntry& e) { return e.sequence; });
  });
}

}  // namespace rote::store::internal
