// Artifacts, their revisions per generation point, and their review (log and state).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "store/records.h"
#include "store/sqlite_db.h"

namespace rote::store::internal {

class SqliteArtifacts {
 public:
  explicit SqliteArtifacts(SqliteDb& db) : db_(db) {}

  // The next revision of its generation point, state pending; idempotent by digest. A new
  // artifact's `audit` entry (if any) is appended in the same transaction.
  absl::StatusOr<ArtifactRecord> PutArtifact(const ArtifactRecord& artifact,
                                             const AuditEntry* audit = nullptr);
  absl::StatusOr<ArtifactRecord> GetArtifact(std::string_view digest);
  absl::StatusOr<ArtifactRecord> GetRevision(std::string_view generation_point, int64_t revision);
  absl::StatusOr<Page<ArtifactRecord>> ListArtifacts(const ArtifactFilter& filter,
                                                     const PageRequest& page);
  absl::StatusOr<Page<ArtifactRecord>> ListRevisions(std::string_view generation_point,
                                                     const PageRequest& page);
  absl::StatusOr<ArtifactRecord> ReviewArtifact(const ReviewRequest& review);
  absl::StatusOr<std::vector<ReviewEntry>> ListReviews(std::string_view digest);

 private:
  SqliteDb& db_;
};

}  // namespace rote::store::internal
