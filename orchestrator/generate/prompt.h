// Prompt templates: what the model is asked, built from the spec and the sandbox's rules.
//
// Each kind has a versioned template. The version is part of every request digest and of the
// artifact's provenance, so changing a template's wording means bumping its version: cached
// generations made with the old wording are then no longer answers to the new requests.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "orchestrator/engine/spec.h"
#include "orchestrator/generate/code_model.h"
#include "orchestrator/generate/lua_names.h"

namespace rote::orchestrator::generate {

inline constexpr std::string_view kLuaTemplateVersion = "rote-prompt/lua_function/2";
inline constexpr std::string_view kRe2TemplateVersion = "rote-prompt/re2_pattern/2";
std::string_view TemplateVersion(engine::ArtifactKind kind);

// What a retry tells the model about the attempt before it.
struct PreviousAttempt {
  int32_t index = 0;      // 1-based
  std::string candidate;  // the code extracted from its output, or the raw output if none was
  std::string failure;    // why validation refused it
};

// Longest candidate quoted back to the model on a retry (bytes, cut at a character boundary).
inline constexpr size_t kMaxQuotedCandidateBytes = 4000;

// System message (rules), user message (task, signature, the examples that are not held out:
// engine::HeldOutExamples); on a retry also the previous candidate as the assistant's turn and
// a user turn saying why it failed ("Your attempt 2 was refused: ..."). Only the latest attempt
// is quoted, so prompts do not grow with the number of attempts. A failure that names a
// held-out example quotes none of it (engine::Validation::first_failure).
std::vector<ChatTurn> BuildPrompt(const engine::GenerationPoint& spec, const SandboxNames& sandbox_names,
                                  const std::optional<PreviousAttempt>& previous);

// Replaces every byte that is not part of valid UTF-8 with U+FFFD, so model output can be
// quoted in prompts, messages and API strings (which must be UTF-8).
std::string ValidUtf8(std::string_view bytes);

// At most max_bytes of valid UTF-8 text, cut at a character boundary, with a note when cut.
std::string Truncated(std::string_view text, size_t max_bytes);

}  // namespace rote::orchestrator::generate
