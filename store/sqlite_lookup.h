// Lookup by prefix: the stored artifacts and blueprints whose digest starts with a given prefix,
// and the blueprints that declare a generation point of a given name. Read-only.
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "store/sqlite_db.h"
#include "store/store.h"

namespace rote::store::internal {

class SqliteLookup {
 public:
  explicit SqliteLookup(SqliteDb& db) : db_(db) {}

  absl::StatusOr<Store::Matches> FindArtifactsByDigestPrefix(std::string_view digest_prefix, int limit);
  absl::StatusOr<Store::Matches> FindBlueprintsByDigestPrefix(std::string_view digest_prefix, int limit);
  absl::StatusOr<Store::Matches> FindBlueprintNamesDeclaringPoint(std::string_view point, int limit);

 private:
  absl::StatusOr<Store::Matches> FindByDigestPrefix(std::string_view table, std::string_view digest_prefix,
                                                    int limit);
  SqliteDb& db_;
};

}  // namespace rote::store::internal
