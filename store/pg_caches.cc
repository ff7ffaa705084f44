// The PostgreSQL store: the generation cache, idempotency records and the key-value cache. See
// pg_store.h.
#include <string>

#include "store/checks.h"
#include "store/digest.h"
#include "store/pg_store.h"
#include "store/str_util.h"

namespace rote::store::internal {
namespace {

using P = PgParam;

absl::StatusOr<IdempotencyRecord> LoadIdempotency(PgConn& conn, std::string_view principal,
                                                  std::string_view request_id) {
  ASSIGN_OR_RETURN(PgResult res, conn.Exec("SELECT request_digest, response, create_ms FROM "
                                           "idempotency WHERE principal = $1 AND request_id = $2",
                                           {P::Text(principal), P::Text(request_id)}));
  if (res.rows() == 0) {
    return absl::NotFoundError(
        Cat("no request '", request_id, "' from '", principal, "' has been recorded"));
  }
  return IdempotencyRecord{std::string(principal), std::string(request_id), res.Text(0, 0),
                           res.Text(0, 1), res.Int(0, 2)};
}

}  // namespace

// ---- caches -----------------------------------------------------------------------------------

absl::StatusOr<std::string> PgStore::GetCachedGeneration(std::string_view request_digest) {
  RETURN_IF_ERROR(CheckDigest(request_digest, "request digest"));
  return db_.Read([&](PgConn& conn) -> absl::StatusOr<std::string> {
    ASSIGN_OR_RETURN(PgResult res, conn.Exec("SELECT artifact_digest FROM generation_cache "
                                             "WHERE request_digest = $1",
                                             {P::Text(request_digest)}));
    if (res.rows() == 0) {
      return absl::NotFoundError(Cat("no cached generation for ", request_digest));
    }
    return res.Text(0, 0);
  });
}

absl::StatusOr<std::string> PgStore::PutCachedGeneration(std::string_view request_digest,
                                                         std::string_view artifact_digest) {
  RETURN_IF_ERROR(CheckDigest(request_digest, "request digest"));
  RETURN_IF_ERROR(CheckDigest(artifact_digest, "artifact digest"));
  const int64_t now = db_.clock_ms();
  std::string cached;
  RETURN_IF_ERROR(db_.Write([&](PgConn& conn) -> absl::Status {
    RETURN_IF_ERROR(PgRequireArtifact(conn, artifact_digest, "cached artifact"));
    RETURN_IF_ERROR(conn.Exec("INSERT INTO generation_cache (request_digest, artifact_digest, "
                              "create_ms) VALUES ($1, $2, $3) ON CONFLICT (request_digest) "
                              "DO NOTHING",
                              {P::Text(request_digest), P::Text(artifact_digest), P::Int(now)})
                        .status());
    ASSIGN_OR_RETURN(PgResult res, conn.Exec("SELECT artifact_digest FROM generation_cache "
                                             "WHERE request_digest = $1",
                                             {P::Text(request_digest)}));
    cached = res.Text(0, 0);
    return absl::OkStatus();
  }));
  return cached;
}

absl::StatusOr<IdempotencyRecord> PgStore::GetIdempotency(std::string_view principal,
                                                          std::string_view request_id) {
  RETURN_IF_ERROR(CheckNonEmpty(request_id, "request_id"));
  return db_.Read(
      [&](PgConn& conn) { return LoadIdempotency(conn, principal, request_id); });
}

absl::StatusOr<IdempotencyRecord> PgStore::PutIdempotency(const IdempotencyRecord& record) {
  RETURN_IF_ERROR(CheckNonEmpty(record.request_id, "request_id"));
  const int64_t now = db_.clock_ms();
  IdempotencyRecord stored;
  RETURN_IF_ERROR(db_.Write([&](PgConn& conn) -> absl::Status {
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
    ASSIGN_OR_RETURN(PgResult res,
                     conn.Exec("INSERT INTO idempotency (principal, request_id, request_digest, "
                               "response, create_ms) VALUES ($1, $2, $3, $4, $5) "
                               "ON CONFLICT (principal, request_id) DO NOTHING RETURNING 1",
                               {P::Text(record.principal), P::Text(record.request_id),
                                P::Text(record.request_digest), P::Bytes(record.response),
                                P::Int(now)}));
    if (res.rows() == 0) {
      // A concurrent writer was first: its record, checked as above.
      ASSIGN_OR_RETURN(IdempotencyRecord first,
                       LoadIdempotency(conn, record.principal, record.request_id));
      if (first.request_digest != record.request_digest) {
        return absl::InvalidArgumentError(Cat(
            "request_id '", record.request_id,
            "' was already used for a different request; use a new request_id"));
      }
      stored = std::move(first);
      return absl::OkStatus();
    }
    stored = record;
    stored.create_ms = now;
    return absl::OkStatus();
  }));
  return stored;
}

absl::StatusOr<std::string> PgStore::KvGet(std::string_view ns, std::string_view key) {
  return db_.Read([&](PgConn& conn) -> absl::StatusOr<std::string> {
    ASSIGN_OR_RETURN(PgResult res, conn.Exec("SELECT value FROM kv WHERE namespace = $1 AND "
                                             "key = $2",
                                             {P::Text(ns), P::Text(key)}));
    if (res.rows() == 0) return absl::NotFoundError(Cat("no value for '", key, "' in '", ns, "'"));
    return res.Text(0, 0);
  });
}

absl::Status PgStore::KvPut(std::string_view ns, std::string_view key, std::string_view value) {
  RETURN_IF_ERROR(CheckNonEmpty(ns, "kv namespace"));
  const int64_t now = db_.clock_ms();
  return db_.Write([&](PgConn& conn) -> absl::Status {
    return conn
        .Exec("INSERT INTO kv (namespace, key, value, update_ms) VALUES ($1, $2, $3, $4) "
              "ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value, "
              "update_ms = excluded.update_ms",
              {P::Text(ns), P::Text(key), P::Bytes(value), P::Int(now)})
        .status();
  });
}

absl::Status PgStore::KvDelete(std::string_view ns, std::string_view key) {
  return db_.Write([&](PgConn& conn) -> absl::Status {
    return conn
        .Exec("DELETE FROM kv WHERE namespace = $1 AND key = $2", {P::Text(ns), P::Text(key)})
        .status();
  });
}

}  // namespace rote::store::internal
