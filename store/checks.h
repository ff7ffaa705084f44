// Checks shared by the resource families of the SQLite store: of arguments (INVALID_ARGUMENT)
// and of references to rows another family stores (FAILED_PRECONDITION). The argument checks
// and the blob verification are the PostgreSQL store's too, so both answer alike.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "store/records.h"
#include "store/sqlite.h"

namespace rote::store::internal {

absl::Status CheckDigest(std::string_view digest, std::string_view what);
absl::Status CheckNonEmpty(std::string_view value, std::string_view what);
absl::Status ValidateBinding(const Binding& b);
// Digest form, non-empty name, and digest = sha256(canonical).
absl::Status ValidateSpec(const GenerationSpecRecord& spec);
// What PutBlueprint checks before it writes (the blueprint and its specs).
absl::Status CheckNewBlueprint(const BlueprintRecord& blueprint);
// FAILED_PRECONDITION when `stored`, of the same digest, differs from `put`.
absl::Status CheckSameBlueprint(const BlueprintRecord& stored, const BlueprintRecord& put);
// INVALID_ARGUMENT for a malformed blob digest or a negative count or time.
absl::Status CheckAttempts(const std::vector<GenerationAttempt>& attempts);
// What PutArtifact / ProposeArtifact check before they write.
absl::Status CheckNewArtifact(const ArtifactRecord& artifact);
// What PutGeneration checks before it writes.
absl::Status CheckNewGeneration(const GenerationRecord& g);
// What FinishRun checks before it writes: a terminal state, interrupted only when failed, an
// output digest when succeeded.
absl::Status CheckRunOutcome(const RunOutcome& outcome);
// "sha256:" and 1 to 64 lowercase hex digits (FindArtifactsByDigestPrefix and friends).
absl::Status CheckDigestPrefix(std::string_view prefix);
// "sha256:" and 0 to 64 lowercase hex digits (FindGenerationsByPrefix).
absl::Status CheckGenerationPrefix(std::string_view prefix);
// The etag of an artifact at a review state version.
std::string MakeEtag(std::string_view digest, int64_t state_version);
// DATA_LOSS unless `bytes` has `size` bytes and hashes to `digest`.
absl::Status VerifyBlobBytes(std::string_view digest, int64_t size, std::string_view bytes);

// Whether a row exists for a one-parameter query.
absl::StatusOr<bool> Exists(Connection& conn, std::string_view sql, std::string_view key);
absl::Status RequireBlob(Connection& conn, std::string_view digest, std::string_view what);
absl::Status RequireArtifact(Connection& conn, std::string_view digest, std::string_view what);

}  // namespace rote::store::internal
