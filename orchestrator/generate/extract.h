// Pulling the code out of what the model wrote.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "orchestrator/engine/spec.h"

namespace rote::orchestrator::generate {

// The code of the first fenced block (```lang ... ```); an unclosed block runs to the end of the
// output (the model hit max_tokens: the code is then usually cut, and validation says how).
// Without any fence the whole output is taken. RE2 patterns are trimmed and must be one line.
// FAILED_PRECONDITION, with a message fit for the retry prompt, when there is nothing usable:
// an empty block, a multi-line pattern.
absl::StatusOr<std::string> ExtractCode(engine::ArtifactKind kind, std::string_view output);

}  // namespace rote::orchestrator::generate
