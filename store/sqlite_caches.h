// The small lookup tables: the generation cache (request digest -> artifact digest, first put
// wins), idempotency records (principal, request_id -> original response, first writer wins)
// and a namespaced key-value cache.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "store/records.h"
#include "store/sqlite_db.h"

namespace rote::store::internal {

class SqliteCaches {
 public:
  explicit SqliteCaches(SqliteDb& db) : db_(db) {}

  absl::StatusOr<std::string> GetCachedGeneration(std::string_view request_digest);
  absl::StatusOr<std::string> PutCachedGeneration(std::string_view request_digest,
                                                  std::string_view artifact_digest);

  absl::StatusOr<IdempotencyRecord> GetIdempotency(std::string_view principal,
                                                   std::string_view request_id);
  absl::StatusOr<IdempotencyRecord> PutIdempotency(const IdempotencyRecord& record);

  absl::StatusOr<std::string> KvGet(std::string_view ns, std::string_view key);
  absl::Status KvPut(std::string_view ns, std::string_view key, std::string_view value);
  absl::Status KvDelete(std::string_view ns, std::string_view key);

 private:
  SqliteDb& db_;
};

}  // namespace rote::store::internal
