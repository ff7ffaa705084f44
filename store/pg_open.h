// Which backend Store::Open uses: a postgresql:// (or postgres://) URL opens the PostgreSQL
// store (pg_store.h); anything else is a SQLite data directory or file.
#pragma once

#include <memory>
#include <string_view>

#include "absl/status/statusor.h"
#include "store/store.h"

namespace rote::store::internal {

bool IsPostgresUrl(std::string_view path);
// FAILED_PRECONDITION when this build has no PostgreSQL support (libpq was not found).
absl::StatusOr<std::unique_ptr<Store>> OpenPgStore(const StoreOptions& options);

}  // namespace rote::store::internal
