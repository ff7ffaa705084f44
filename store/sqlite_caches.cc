#include "store/sqlite_caches.h"

#include <utility>

#include "store/checks.h"
#include "store/status_macros.h"
#include "store/str_util.h"

namespace rote::store::internal {
namespace {

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

}  // namespace

// ---- generation cache -------------------------------------------------------------------------

absl::StatusOr<std::string> SqliteCaches::GetCachedGeneration(std::string_view request_digest) {
  RETURN_IF_ERROR(CheckDigest(request_digest, "request digest"));
  ReaderPool::Lease lease = db_.readers.Acquire();
  ASSIGN_OR_RETURN(Statement stmt, (*lease).Prepare("SELECT artifact_digest FROM "
                                                    "generation_cache WHERE request_digest = ?"));
  stmt.BindText(1, request_digest);
  ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) {
    return absl::NotFoundError(Cat("no cached generation for ", request_digest));
  }
  return stmt.ColumnText(0);
}

absl::StatusOr<std::string> SqliteCaches::PutCachedGeneration(std::string_view request_digest,
                                                              std::string_view artifact_digest) {
  RETURN_IF_ERROR(CheckDigest(request_digest, "request digest"));
  RETURN_IF_ERROR(CheckDigest(artifact_digest, "artifact digest"));
  const int64_t now = db_.clock_ms();
  std::string cached;
  RETURN_IF_ERROR(db_.Write([&](Connection& conn) -> absl::Status {
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

// ---- idempotency ------------------------------------------------------------------------------

absl::StatusOr<IdempotencyRecord> SqliteCaches::GetIdempotency(std::string_view principal,
                                                               std::string_view request_id) {
  RETURN_IF_ERROR(CheckNonEmpty(request_id, "request_id"));
  ReaderPool::Lease lease = db_.readers.Acquire();
  return LoadIdempotency(*lease, principal, request_id);
}

absl::StatusOr<IdempotencyRecord> SqliteCaches::PutIdempotency(const IdempotencyRecord& record) {
  RETURN_IF_ERROR(CheckNonEmpty(record.request_id, "request_id"));
  const int64_t now = db_.clock_ms();
  IdempotencyRecord stored;
  RETURN_IF_ERROR(db_.Write([&](Connection& conn) -> absl::Status {
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

// ---- key-value --------------------------------------------------------------------------------

absl::StatusOr<std::string> SqliteCaches::KvGet(std::string_view ns, std::string_view key) {
  ReaderPool::Lease lease = db_.readers.Acquire();
  ASSIGN_OR_RETURN(Statement stmt,
                   (*lease).Prepare("SELECT value FROM kv WHERE namespace = ? AND key = ?"));
  stmt.BindText(1, ns).BindText(2, key);
  ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return absl::NotFoundError(Cat("no value for '", key, "' in '", ns, "'"));
  return stmt.ColumnBlob(0);
}

absl::Status SqliteCaches::KvPut(std::string_view ns, std::string_view key,
                                 std::string_view value) {
  RETURN_IF_ERROR(CheckNonEmpty(ns, "kv namespace"));
  const int64_t now = db_.clock_ms();
  return db_.Write([&](Connection& conn) -> absl::Status {
    ASSIGN_OR_RETURN(Statement stmt,
                     conn.Prepare("INSERT INTO kv (namespace, key, value, update_ms) "
                                  "VALUES (?, ?, ?, ?) ON CONFLICT (namespace, key) DO UPDATE "
                                  "SET value = excluded.value, update_ms = excluded.update_ms"));
    stmt.BindText(1, ns).BindText(2, key).BindBlob(3, value).BindInt(4, now);
    return stmt.Run();
  });
}

absl::Status SqliteCaches::KvDelete(std::string_view ns, std::string_view key) {
  return db_.Write([&](Connection& conn) -> absl::Status {
    ASSIGN_OR_RETURN(Statement stmt,
                     conn.Prepare("DELETE FROM kv WHERE namespace = ? AND key = ?"));
    stmt.BindText(1, ns).BindText(2, key);
    return stmt.Run();
  });
}

}  // namespace rote::store::internal
