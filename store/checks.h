// Checks shared by the resource families of the SQLite store: of arguments (INVALID_ARGUMENT)
// and of references to rows another family stores (FAILED_PRECONDITION).
#pragma once

#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "store/records.h"
#include "store/sqlite.h"

namespace rote::store::internal {

absl::Status CheckDigest(std::string_view digest, std::string_view what);
absl::Status CheckNonEmpty(std::string_view value, std::string_view what);
absl::Status ValidateBinding(const Binding& b);

// Whether a row exists for a one-parameter query.
absl::StatusOr<bool> Exists(Connection& conn, std::string_view sql, std::string_view key);
absl::Status RequireBlob(Connection& conn, std::string_view digest, std::string_view what);
absl::Status RequireArtifact(Connection& conn, std::string_view digest, std::string_view what);

}  // namespace rote::store::internal
