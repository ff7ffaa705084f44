// Live revisions (the revision runs use, one per generation point and spec) and the audit log
// of every review decision. The writes that change them run inside the transaction of the
// decision itself (a review, a promotion, a proposal, a run's creation), so a decision and its
// audit entry are committed together or not at all.
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"
#include "store/records.h"
#include "store/sqlite_db.h"

namespace rote::store::internal {

// Appends `entry` (sequence and time assigned here) inside the caller's write transaction.
absl::Status AppendAuditTx(Connection& conn, const AuditEntry& entry, int64_t now_ms);

// After a review decision on `digest` inside the caller's write transaction: an approval with
// `promote` makes it live; a rejection of the live revision makes the newest other approved
// revision of the same (generation point, spec digest) live, or unbinds the point. Audits the
// decision and each change.
absl::Status ApplyReviewTx(Connection& conn, const ReviewRequest& review, int64_t now_ms);

class SqliteReview {
 public:
  explicit SqliteReview(SqliteDb& db) : db_(db) {}

  absl::StatusOr<LiveRevision> GetLiveRevision(std::string_view generation_point,
                                               std::string_view spec_digest);
  // Returns the artifact's digest; the caller loads the record.
  absl::Status PromoteRevision(const PromoteRequest& request);
  absl::StatusOr<Page<AuditEntry>> ListAuditEntries(const AuditFilter& filter,
                                                    const PageRequest& page);

 private:
  SqliteDb& db_;
};

}  // namespace rote::store::internal
