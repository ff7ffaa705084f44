#include "store/sqlite_artifacts.h"

#include <sqlite3.h>

#include <string>
#include <utility>

#include "store/checks.h"
#include "store/digest.h"
#include "store/page_token.h"
#include "store/sqlite_review.h"
#include "store/sqlite_generations.h"
#include "store/status_macros.h"
#include "store/str_util.h"

namespace rote::store::internal {
namespace {

// ---- row loaders (used by readers and, for read-your-own-write results, by the writer) ----

constexpr std::string_view kArtifactColumns =
    "id, digest, kind, generation_point, revision, source, options_json, "
    "validation_report_json, spec_digest, model_digest, numerics_profile, "
    "prompt_template_version, decoding_json, request_digest, device, author, state, "
    "state_version, create_ms, EXISTS (SELECT 1 FROM live_revisions l WHERE "
    "l.artifact_digest = artifacts.digest)";

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
  a.live = stmt.ColumnInt(19) != 0;
  return {stmt.ColumnInt(0), std::move(a)};
}

absl::Status LoadAttempts(Connection& conn, int64_t artifact_id, ArtifactRecord& a) {
  ASSIGN_OR_RETURN(Statement stmt,
                   conn.Prepare(Cat("SELECT ", kAttemptColumns,
                                    " FROM artifact_attempts WHERE artifact_id = ? ORDER BY idx")));
  stmt.BindInt(1, artifact_id);
  while (true) {
    ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) return absl::OkStatus();
    a.provenance.attempts.push_back(ReadAttemptRow(stmt));
  }
}

template <typename Bind>
absl::StatusOr<std::vector<std::pair<int64_t, ArtifactRecord>>> QueryArtifacts(
    Connection& conn, const std::string& sql, Bind bind) {
  return QueryRows<std::pair<int64_t, ArtifactRecord>>(
      conn, sql, bind, ReadArtifactRow,
      [](Connection& c, auto& row) { return LoadAttempts(c, row.first, row.second); });
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

}  // namespace

absl::StatusOr<ArtifactRecord> SqliteArtifacts::PutArtifact(const ArtifactRecord& artifact,
                                                            const AuditEntry* audit) {
  RETURN_IF_ERROR(CheckNewArtifact(artifact));
  const int64_t now = db_.clock_ms();
  ArtifactRecord stored;
  RETURN_IF_ERROR(db_.Write([&](Connection& conn) -> absl::Status {
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
    RETURN_IF_ERROR(RequireAttemptBlobs(conn, artifact.provenance.attempts));
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
    RETURN_IF_ERROR(InsertAttempts(conn, "artifact_attempts", "artifact_id", id,
                                   artifact.provenance.attempts));
    ASSIGN_OR_RETURN(stored, LoadArtifact(conn, artifact.digest));
    if (audit != nullptr) {
      AuditEntry entry = *audit;
      entry.artifact_digest = stored.digest;
      entry.revision = stored.revision;
      entry.generation_point = stored.generation_point;
      RETURN_IF_ERROR(AppendAuditTx(conn, entry, now));
    }
    return absl::OkStatus();
  }));
  return stored;
}

absl::StatusOr<ArtifactRecord> SqliteArtifacts::GetArtifact(std::string_view digest) {
  RETURN_IF_ERROR(CheckDigest(digest, "artifact digest"));
  return db_.ReadTx([&](Connection& conn) { return LoadArtifact(conn, digest); });
}

absl::StatusOr<ArtifactRecord> SqliteArtifacts::GetRevision(std::string_view generation_point,
                                                            int64_t revision) {
  static const std::string sql = Cat(
      "SELECT ", kArtifactColumns, " FROM artifacts WHERE generation_point = ? AND revision = ?");
  return db_.ReadTx([&](Connection& conn) -> absl::StatusOr<ArtifactRecord> {
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

absl::StatusOr<Page<ArtifactRecord>> SqliteArtifacts::ListArtifacts(const ArtifactFilter& filter,
                                                                    const PageRequest& page) {
  ASSIGN_OR_RETURN(const int size, EffectivePageSize(page.page_size));
  const std::string state_name =
      filter.state.has_value() ? std::string(ReviewStateName(*filter.state)) : "";
  const std::string filter_key = FilterKey({filter.generation_point, state_name});
  int64_t after = 0;
  if (!page.page_token.empty()) {
    ASSIGN_OR_RETURN(after, db_.tokens.Decode(page.page_token, "artifacts", filter_key));
  }
  std::string sql = Cat(
      "SELECT ", kArtifactColumns, " FROM artifacts WHERE id > ?1",
      filter.generation_point.empty() ? "" : " AND generation_point = ?3",
      state_name.empty() ? "" : " AND state = ?4", " ORDER BY id LIMIT ?2");
  return db_.ReadTx([&](Connection& conn) -> absl::StatusOr<Page<ArtifactRecord>> {
    ASSIGN_OR_RETURN(auto rows, QueryArtifacts(conn, sql, [&](Statement& s) {
                       s.BindInt(1, after).BindInt(2, size + 1);
                       if (!filter.generation_point.empty()) s.BindText(3, filter.generation_point);
                       if (!state_name.empty()) s.BindText(4, state_name);
                     }));
    return StripIds(MakePage(std::move(rows), size, db_.tokens, "artifacts", filter_key,
                             [](const auto& r) { return r.first; }));
  });
}

absl::StatusOr<Page<ArtifactRecord>> SqliteArtifacts::ListRevisions(
    std::string_view generation_point, const PageRequest& page) {
  RETURN_IF_ERROR(CheckNonEmpty(generation_point, "generation_point"));
  ASSIGN_OR_RETURN(const int size, EffectivePageSize(page.page_size));
  const std::string filter_key = FilterKey({generation_point});
  int64_t after = 0;
  if (!page.page_token.empty()) {
    ASSIGN_OR_RETURN(after, db_.tokens.Decode(page.page_token, "revisions", filter_key));
  }
  static const std::string sql =
      Cat("SELECT ", kArtifactColumns,
          " FROM artifacts WHERE generation_point = ?1 AND revision > ?2 "
          "ORDER BY revision LIMIT ?3");
  return db_.ReadTx([&](Connection& conn) -> absl::StatusOr<Page<ArtifactRecord>> {
    ASSIGN_OR_RETURN(auto rows, QueryArtifacts(conn, sql, [&](Statement& s) {
                       s.BindText(1, generation_point).BindInt(2, after).BindInt(3, size + 1);
                     }));
    return StripIds(MakePage(std::move(rows), size, db_.tokens, "revisions", filter_key,
                             [](const auto& r) { return r.second.revision; }));
  });
}

absl::StatusOr<ArtifactRecord> SqliteArtifacts::ReviewArtifact(const ReviewRequest& review) {
  RETURN_IF_ERROR(CheckDigest(review.artifact_digest, "artifact digest"));
  RETURN_IF_ERROR(CheckNonEmpty(review.principal, "review principal"));
  const int64_t now = db_.clock_ms();
  ArtifactRecord stored;
  RETURN_IF_ERROR(db_.Write([&](Connection& conn) -> absl::Status {
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
    RETURN_IF_ERROR(ApplyReviewTx(conn, review, now));
    ASSIGN_OR_RETURN(stored, LoadArtifact(conn, review.artifact_digest));
    return absl::OkStatus();
  }));
  return stored;
}

absl::StatusOr<std::vector<ReviewEntry>> SqliteArtifacts::ListReviews(std::string_view digest) {
  RETURN_IF_ERROR(CheckDigest(digest, "artifact digest"));
  return db_.ReadTx([&](Connection& conn) -> absl::StatusOr<std::vector<ReviewEntry>> {
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
      const ReviewState decision =
          ParseReviewState(stmt.ColumnText(2)).value_or(ReviewState::kPending);
      out.push_back(ReviewEntry{stmt.ColumnInt(0), std::string(digest), stmt.ColumnText(1),
                                decision, stmt.ColumnText(3), stmt.ColumnInt(4)});
    }
  });
}

}  // namespace rote::store::internal
