#include "store/checks.h"

#include "store/digest.h"
#include "store/status_macros.h"
#include "store/str_util.h"

namespace rote::store::internal {

absl::Status CheckDigest(std::string_view digest, std::string_view what) {
  if (IsValidDigest(digest)) return absl::OkStatus();
  return absl::InvalidArgumentError(Cat(what, " '", digest,
                                        "' is not a digest; expected sha256: followed by 64 "
                                        "lowercase hex digits"));
}

absl::Status CheckNonEmpty(std::string_view value, std::string_view what) {
  if (!value.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(Cat(what, " must not be empty"));
}

absl::Status ValidateBinding(const Binding& b) {
  RETURN_IF_ERROR(CheckNonEmpty(b.generation_point, "binding generation_point"));
  return CheckDigest(b.artifact_digest, "binding artifact_digest");
}

absl::StatusOr<bool> Exists(Connection& conn, std::string_view sql, std::string_view key) {
  ASSIGN_OR_RETURN(Statement stmt, conn.Prepare(sql));
  stmt.BindText(1, key);
  return stmt.Step();
}

absl::Status RequireBlob(Connection& conn, std::string_view digest, std::string_view what) {
  ASSIGN_OR_RETURN(bool found, Exists(conn, "SELECT 1 FROM blobs WHERE digest = ?", digest));
  if (found) return absl::OkStatus();
  return absl::FailedPreconditionError(
      Cat(what, " ", digest, " is not a stored blob; PutBlob it first"));
}

absl::Status RequireArtifact(Connection& conn, std::string_view digest, std::string_view what) {
  ASSIGN_OR_RETURN(bool found, Exists(conn, "SELECT 1 FROM artifacts WHERE digest = ?", digest));
  if (found) return absl::OkStatus();
  return absl::FailedPreconditionError(
      Cat(what, " ", digest, " is not a stored artifact; PutArtifact it first"));
}

}  // namespace rote::store::internal
