// Generation specs and blueprints (both immutable, idempotent by digest), and each blueprint's
// bindings of generation points to artifacts.
#pragma once

#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "store/records.h"
#include "store/sqlite_db.h"

namespace rote::store::internal {

class SqliteBlueprints {
 public:
  explicit SqliteBlueprints(SqliteDb& db) : db_(db) {}

  absl::Status PutGenerationSpec(const GenerationSpecRecord& spec);
  absl::StatusOr<GenerationSpecRecord> GetGenerationSpec(std::string_view digest);
  // Also stores the blueprint's generation specs.
  absl::StatusOr<BlueprintRecord> PutBlueprint(const BlueprintRecord& blueprint);
  absl::StatusOr<BlueprintRecord> GetBlueprint(std::string_view digest);
  absl::StatusOr<std::vector<BlueprintRecord>> FindBlueprintsByName(std::string_view name);
  absl::StatusOr<Page<BlueprintRecord>> ListBlueprints(const BlueprintFilter& filter,
                                                       const PageRequest& page);

  absl::Status SetBinding(std::string_view blueprint_digest, const Binding& binding);
  absl::StatusOr<Binding> GetBinding(std::string_view blueprint_digest,
                                     std::string_view generation_point);
  absl::StatusOr<std::vector<Binding>> ListBindings(std::string_view blueprint_digest);

 private:
  SqliteDb& db_;
};

}  // namespace rote::store::internal
