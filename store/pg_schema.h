// The PostgreSQL store's migrations: a list of its own, separate from the SQLite schema
// (store/schema.cc), applied in order and recorded in the table schema_version.
#pragma once

#include "absl/status/status.h"
#include "store/pg_conn.h"

namespace rote::store::internal {

int PgLatestSchemaVersion();
// Brings the database (the first schema of the connection's search_path) to `target`. Replicas
// opening one database at once take turns (an advisory lock); each migration commits with its
// version. FAILED_PRECONDITION when the database is newer than this build.
absl::Status PgMigrate(PgConn& conn, int target);

}  // namespace rote::store::internal
