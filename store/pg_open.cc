#include "store/pg_open.h"

namespace rote::store::internal {

bool IsPostgresUrl(std::string_view path) {
  return path.starts_with("postgresql://") || path.starts_with("postgres://");
}

#ifndef ROTE_STORE_POSTGRESQL
absl::StatusOr<std::unique_ptr<Store>> OpenPgStore(const StoreOptions&) {
  return absl::FailedPreconditionError(
      "store: this rote was built without PostgreSQL support (libpq was not found when it was "
      "configured); install libpq-dev and configure again, or use a SQLite data directory");
}
#endif

}  // namespace rote::store::internal
