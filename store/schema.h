// The store's schema as a list of migrations; PRAGMA user_version counts those applied.
#pragma once

#include "absl/status/status.h"
#include "store/sqlite.h"

namespace rote::store::internal {

// The schema version this code writes; databases at a lower version are migrated on open.
int LatestSchemaVersion();

// Applies migrations until user_version == target, each in its own transaction (a failed
// migration leaves the database at the previous version). FAILED_PRECONDITION when the
// database is newer than this code. Tests call it with target < latest to build old databases.
absl::Status Migrate(Connection& conn, int target);

}  // namespace rote::store::internal
