#include "store/sqlite_review.h"

#include <string>
#include <utility>

#include "store/checks.h"
#include "store/page_token.h"
#include "store/status_macros.h"
#include "store/str_util.h"

namespace rote::store::internal {
namespace {

struct ArtifactKey {
  std::string generation_point;
  std::string spec_digest;
  int64_t revision = 0;
  std::string state;
};

absl::StatusOr<ArtifactKey> LoadKey(Connection& conn, std::string_view digest) {
  ASSIGN_OR_RETURN(Statement stmt, conn.Prepare("SELECT generation_point, spec_digest, revision, "
                                                "state FROM artifacts WHERE digest = ?"));
  stmt.BindText(1, digest);
  ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return absl::NotFoundError(Cat("artifact ", digest, " is not stored"));
  return ArtifactKey{stmt.ColumnText(0), stmt.ColumnText(1), stmt.ColumnInt(2), stmt.ColumnText(3)};
}

// The live artifact of (point, spec), or "" when none.
absl::StatusOr<std::string> LiveDigest(Connection& conn, std::string_view point,
                                       std::string_view spec) {
  ASSIGN_OR_RETURN(Statement stmt, conn.Prepare("SELECT artifact_digest FROM live_revisions "
                                                "WHERE generation_point = ? AND spec_digest = ?"));
  stmt.BindText(1, point).BindText(2, spec);
  ASSIGN_OR_RETURN(bool row, stmt.Step());
  return row ? stmt.ColumnText(0) : std::string();
}

absl::Status SetLive(Connection& conn, const ArtifactKey& key, std::string_view digest,
                     int64_t now_ms) {
  ASSIGN_OR_RETURN(Statement stmt,
                   conn.Prepare("INSERT INTO live_revisions (generation_point, spec_digest, "
                                "artifact_digest, update_ms) VALUES (?, ?, ?, ?) "
                                "ON CONFLICT (generation_point, spec_digest) DO UPDATE SET "
                                "artifact_digest = excluded.artifact_digest, "
                                "update_ms = excluded.update_ms"));
  stmt.BindText(1, key.generation_point).BindText(2, key.spec_digest).BindText(3, digest).BindInt(4, now_ms);
  return stmt.Run();
}

absl::Status Unset(Connection& conn, const ArtifactKey& key) {
  ASSIGN_OR_RETURN(Statement stmt, conn.Prepare("DELETE FROM live_revisions WHERE "
                                                "generation_point = ? AND spec_digest = ?"));
  stmt.BindText(1, key.generation_point).BindText(2, key.spec_digest);
  return stmt.Run();
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

AuditEntry ReadAuditRow(const Statement& stmt) {
  AuditEntry e;
  e.sequence = stmt.ColumnInt(0);
  e.time_ms = stmt.ColumnInt(1);
  e.principal = stmt.ColumnText(2);
  e.action = stmt.ColumnText(3);
  e.generation_point = stmt.ColumnText(4);
  e.artifact_digest = stmt.ColumnText(5);
  e.revision = stmt.ColumnInt(6);
  e.detail = stmt.ColumnText(7);
  e.run_id = stmt.ColumnInt(8);
  return e;
}

}  // namespace

absl::Status AppendAuditTx(Connection& conn, const AuditEntry& entry, int64_t now_ms) {
  ASSIGN_OR_RETURN(Statement stmt,
                   conn.Prepare("INSERT INTO audit_log (time_ms, principal, action, "
                                "generation_point, artifact_digest, revision, detail, run_id) "
                                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"));
  stmt.BindInt(1, now_ms)
      .BindText(2, entry.principal)
      .BindText(3, entry.action)
      .BindText(4, entry.generation_point)
      .BindText(5, entry.artifact_digest)
      .BindInt(6, entry.revision)
      .BindText(7, entry.detail)
      .BindInt(8, entry.run_id);
  return stmt.Run();
}

absl::Status ApplyReviewTx(Connection& conn, const ReviewRequest& review, int64_t now_ms) {
  ASSIGN_OR_RETURN(ArtifactKey key, LoadKey(conn, review.artifact_digest));
  const std::string_view digest = review.artifact_digest;
  const bool approve = review.decision == ReviewState::kApproved;
  RETURN_IF_ERROR(AppendAuditTx(
      conn, Entry(review.principal, approve ? "approve" : "reject", key, digest, review.comment), now_ms));
  ASSIGN_OR_RETURN(std::string live, LiveDigest(conn, key.generation_point, key.spec_digest));
  if (approve) {
    if (!review.promote || live == digest) return absl::OkStatus();
    RETURN_IF_ERROR(SetLive(conn, key, digest, now_ms));
    return AppendAuditTx(conn,
                         Entry(review.principal, "promote", key, digest,
                               live.empty() ? "on approval; the point had no live revision"
                                            : Cat("on approval; replaces ", live)),
                         now_ms);
  }
  if (live != digest) return absl::OkStatus();
  // The rejected revision was live: the newest other approved revision of the same point and
  // spec takes its place, or the point is left without one.
  std::string fallback;
  ArtifactKey fallback_key = key;
  {
    ASSIGN_OR_RETURN(Statement stmt,
                     conn.Prepare("SELECT digest, revision FROM artifacts WHERE generation_point = ? "
                                  "AND spec_digest = ? AND state = 'approved' AND digest != ? "
                                  "ORDER BY revision DESC LIMIT 1"));
    stmt.BindText(1, key.generation_point).BindText(2, key.spec_digest).BindText(3, digest);
    ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (row) {
      fallback = stmt.ColumnText(0);
      fallback_key.revision = stmt.ColumnInt(1);
    }
  }
  if (fallback.empty()) {
    RETURN_IF_ERROR(Unset(conn, key));
    return AppendAuditTx(conn,
                         Entry(review.principal, "unbind", key, digest,
                               "the rejected live revision had no approved predecessor; the point "
                               "has no live revision"),
                         now_ms);
  }
  RETURN_IF_ERROR(SetLive(conn, key, fallback, now_ms));
  return AppendAuditTx(conn,
                       Entry(review.principal, "fallback", fallback_key, fallback,
                             Cat("revision ", key.revision, " (", digest, ") was rejected; revision ",
                                 fallback_key.revision, " is live again")),
                       now_ms);
}

absl::StatusOr<LiveRevision> SqliteReview::GetLiveRevision(std::string_view generation_point,
                                                           std::string_view spec_digest) {
  return db_.ReadTx([&](Connection& conn) -> absl::StatusOr<LiveRevision> {
    ASSIGN_OR_RETURN(Statement stmt,
                     conn.Prepare("SELECT l.artifact_digest, a.revision, l.update_ms FROM "
                                  "live_revisions l JOIN artifacts a ON a.digest = "
                                  "l.artifact_digest WHERE l.generation_point = ? AND "
                                  "l.spec_digest = ?"));
    stmt.BindText(1, generation_point).BindText(2, spec_digest);
    ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) {
      return absl::NotFoundError(Cat("generation point '", generation_point,
                                     "' has no live revision for spec ", spec_digest));
    }
    return LiveRevision{std::string(generation_point), std::string(spec_digest), stmt.ColumnText(0),
                        stmt.ColumnInt(1), stmt.ColumnInt(2)};
  });
}

absl::Status SqliteReview::PromoteRevision(const PromoteRequest& request) {
  RETURN_IF_ERROR(CheckDigest(request.artifact_digest, "artifact digest"));
  RETURN_IF_ERROR(CheckNonEmpty(request.principal, "principal"));
  if (request.action != "promote" && request.action != "lockfile") {
    return absl::InvalidArgumentError(Cat("promotion action must be promote or lockfile, not '",
                                          request.action, "'"));
  }
  const int64_t now = db_.clock_ms();
  return db_.Write([&](Connection& conn) -> absl::Status {
    ASSIGN_OR_RETURN(ArtifactKey key, LoadKey(conn, request.artifact_digest));
    if (key.state != "approved") {
      return absl::FailedPreconditionError(
          Cat("revision ", key.revision, " of '", key.generation_point, "' (", request.artifact_digest,
              ") is ", key.state, "; only an approved revision can become live"));
    }
    ASSIGN_OR_RETURN(std::string live, LiveDigest(conn, key.generation_point, key.spec_digest));
    if (live == request.artifact_digest || (request.only_if_unset && !live.empty())) {
      return absl::OkStatus();
    }
    RETURN_IF_ERROR(SetLive(conn, key, request.artifact_digest, now));
    std::string detail = request.comment;
    if (!live.empty()) detail = Cat(detail, detail.empty() ? "" : "; ", "replaces ", live);
    return AppendAuditTx(conn, Entry(request.principal, request.action, key, request.artifact_digest, detail),
                         now);
  });
}

absl::StatusOr<Page<AuditEntry>> SqliteReview::ListAuditEntries(const AuditFilter& filter,
                                                                const PageRequest& page) {
  if (!filter.artifact_digest.empty()) RETURN_IF_ERROR(CheckDigest(filter.artifact_digest, "artifact digest"));
  ASSIGN_OR_RETURN(const int size, EffectivePageSize(page.page_size));
  const std::string filter_key = FilterKey({filter.generation_point, filter.artifact_digest});
  int64_t after = 0;
  if (!page.page_token.empty()) {
    ASSIGN_OR_RETURN(after, db_.tokens.Decode(page.page_token, "audit", filter_key));
  }
  const std::string sql =
      Cat("SELECT id, time_ms, principal, action, generation_point, artifact_digest, revision, "
          "detail, COALESCE(run_id, 0) FROM audit_log WHERE id > ?1",
          filter.generation_point.empty() ? "" : " AND generation_point = ?3",
          filter.artifact_digest.empty() ? "" : " AND artifact_digest = ?4", " ORDER BY id LIMIT ?2");
  return db_.ReadTx([&](Connection& conn) -> absl::StatusOr<Page<AuditEntry>> {
    ASSIGN_OR_RETURN(auto rows, QueryRows<AuditEntry>(
                                    conn, sql,
                                    [&](Statement& s) {
                                      s.BindInt(1, after).BindInt(2, size + 1);
                                      if (!filter.generation_point.empty()) s.BindText(3, filter.generation_point);
                                      if (!filter.artifact_digest.empty()) s.BindText(4, filter.artifact_digest);
                                    },
                                    ReadAuditRow, [](Connection&, AuditEntry&) { return absl::OkStatus(); }));
    return MakePage(std::move(rows), size, db_.tokens, "audit", filter_key,
                    [](const AuditEntry& e) { return e.sequence; });
  });
}

}  // namespace rote::store::internal
