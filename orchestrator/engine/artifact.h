// Artifact identity: the digest of a piece of code is sha256 over the canonical JSON
//   {"bytes": <source>, "kind": "lua_function"|"re2_pattern", "options": <options object>}
// (docs/blueprints.md, "Artifact digests"). Options are normalized first so that equivalent
// spellings give one digest: Lua functions have none ({}), RE2 patterns always carry every
// option of sandbox::RegexOptions, in its canonical JSON.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "orchestrator/engine/spec.h"
#include "sandbox/regex.h"
#include "store/records.h"

namespace rote::orchestrator::engine {

struct ArtifactCode {
  ArtifactKind kind = ArtifactKind::kLuaFunction;
  std::string source;
  std::string options_json;  // normalized (NormalizeOptions)
};

// Parses and normalizes options: "" means the defaults, and for RE2 patterns any option left out
// keeps its default (sandbox::RegexOptions); unknown keys and wrong types are INVALID_ARGUMENT.
// Lua functions accept only "" or "{}".
absl::StatusOr<std::string> NormalizeOptions(ArtifactKind kind, std::string_view options_json);
absl::StatusOr<sandbox::RegexOptions> ParseRe2Options(std::string_view normalized_options_json);

// INVALID_ARGUMENT when the source is not valid UTF-8 (it has no canonical form then).
absl::StatusOr<std::string> ArtifactDigest(const ArtifactCode& code);

// Builds the code of a stored artifact and checks that it still hashes to its digest:
// DATA_LOSS names the artifact when its stored bytes were altered.
absl::StatusOr<ArtifactCode> VerifiedCode(const store::ArtifactRecord& record);

}  // namespace rote::orchestrator::engine
