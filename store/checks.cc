#include "store/checks.h"

#include <algorithm>

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


absl::Status ValidateSpec(const GenerationSpecRecord& spec) {
  RETURN_IF_ERROR(CheckDigest(spec.digest, "generation spec digest"));
  RETURN_IF_ERROR(CheckNonEmpty(spec.name, "generation spec name"));
  if (Sha256Digest(spec.canonical) != spec.digest) {
    return absl::InvalidArgumentError(Cat(
        "generation spec '", spec.name, "': digest ", spec.digest,
        " is not the sha256 of its canonical encoding (", Sha256Digest(spec.canonical), ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckAttempts(const std::vector<GenerationAttempt>& attempts) {
  for (const GenerationAttempt& a : attempts) {
    if (!a.prompt_digest.empty()) RETURN_IF_ERROR(CheckDigest(a.prompt_digest, "attempt prompt_digest"));
    if (!a.output_digest.empty()) RETURN_IF_ERROR(CheckDigest(a.output_digest, "attempt output_digest"));
    if (!a.code_digest.empty()) RETURN_IF_ERROR(CheckDigest(a.code_digest, "attempt code_digest"));
    if (a.prompt_tokens < 0 || a.output_tokens < 0 || a.start_ms < 0 || a.duration_ms < 0) {
      return absl::InvalidArgumentError(
          Cat("attempt ", a.index, ": token counts and times must not be negative"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckNewBlueprint(const BlueprintRecord& blueprint) {
  RETURN_IF_ERROR(CheckDigest(blueprint.digest, "blueprint digest"));
  RETURN_IF_ERROR(CheckNonEmpty(blueprint.name, "blueprint name"));
  for (const GenerationSpecRecord& spec : blueprint.generation_points) {
    RETURN_IF_ERROR(ValidateSpec(spec));
  }
  return absl::OkStatus();
}

absl::Status CheckSameBlueprint(const BlueprintRecord& stored, const BlueprintRecord& put) {
  if (stored.source != put.source || stored.name != put.name || stored.version != put.version) {
    return absl::FailedPreconditionError(
        Cat("blueprint ", put.digest, " is already stored with different content"));
  }
  return absl::OkStatus();
}

absl::Status CheckNewArtifact(const ArtifactRecord& artifact) {
  RETURN_IF_ERROR(CheckDigest(artifact.digest, "artifact digest"));
  RETURN_IF_ERROR(CheckNonEmpty(artifact.kind, "artifact kind"));
  RETURN_IF_ERROR(CheckNonEmpty(artifact.generation_point, "artifact generation_point"));
  return CheckAttempts(artifact.provenance.attempts);
}

absl::Status CheckNewGeneration(const GenerationRecord& g) {
  RETURN_IF_ERROR(CheckDigest(g.request_digest, "generation request_digest"));
  RETURN_IF_ERROR(CheckNonEmpty(g.generation_point, "generation generation_point"));
  if (g.passed) {
    RETURN_IF_ERROR(CheckDigest(g.artifact_digest, "generation artifact_digest"));
  } else if (!g.artifact_digest.empty()) {
    return absl::InvalidArgumentError("a failed generation has no artifact_digest");
  }
  return CheckAttempts(g.attempts);
}

absl::Status CheckRunOutcome(const RunOutcome& outcome) {
  if (!IsTerminal(outcome.state)) {
    return absl::InvalidArgumentError(Cat(
        "FinishRun needs a terminal state (succeeded, failed, cancelled), not ",
        RunStateName(outcome.state)));
  }
  if (outcome.interrupted && outcome.state != RunState::kFailed) {
    return absl::InvalidArgumentError(Cat("only a failed run can be interrupted, not a ",
                                          RunStateName(outcome.state), " one"));
  }
  if (outcome.state == RunState::kSucceeded || !outcome.output_digest.empty()) {
    RETURN_IF_ERROR(CheckDigest(outcome.output_digest, "run output_digest"));
  }
  return absl::OkStatus();
}

absl::Status CheckDigestPrefix(std::string_view prefix) {
  std::string_view hex = prefix.substr(std::min(prefix.size(), kDigestPrefix.size()));
  bool ok = prefix.starts_with(kDigestPrefix) && !hex.empty() && hex.size() <= 64;
  for (char c : hex) ok = ok && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      Cat("digest prefix '", prefix.substr(0, 80), "' is not \"sha256:\" followed by 1 to 64 lowercase hex digits"));
}

absl::Status CheckGenerationPrefix(std::string_view prefix) {
  if (!prefix.starts_with("sha256:") || prefix.size() > 71 ||
      prefix.find_first_not_of("0123456789abcdef", 7) != std::string_view::npos) {
    return absl::InvalidArgumentError(
        Cat("'", prefix.substr(0, 80), "' is not a digest prefix; expected sha256: and lowercase hex digits"));
  }
  return absl::OkStatus();
}

std::string MakeEtag(std::string_view digest, int64_t state_version) {
  return Sha256Digest(Cat(digest, "#", state_version)).substr(kDigestPrefix.size(), 20);
}

absl::Status VerifyBlobBytes(std::string_view digest, int64_t size, std::string_view bytes) {
  // Verified on every read: bytes that do not match their digest are never returned.
  if (static_cast<int64_t>(bytes.size()) != size || Sha256Digest(bytes) != digest) {
    return absl::DataLossError(Cat(
        "blob ", digest, " is damaged: the stored bytes (", bytes.size(),
        " bytes) no longer match their digest; restore it from a backup or put it again"));
  }
  return absl::OkStatus();
}

}  // namespace rote::store::internal
