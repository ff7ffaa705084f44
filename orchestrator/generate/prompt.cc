#include "orchestrator/generate/prompt.h"

#include "absl/strings/str_cat.h"
#include "sandbox/value.h"

namespace rote::orchestrator::generate {

namespace {

std::string Json(const sandbox::Value& v) {
  absl::StatusOr<std::string> j = sandbox::CanonicalJson(v);
  return j.ok() ? *j : std::string("(not JSON)");
}

// The rules are part of the template: they change only with the template's version or with
// the sandbox profile (whose name is part of every request digest too).
std::string LuaSystem(const SandboxNames& names) {
  return absl::StrCat(
      "You write one Lua 5.4 function for rote, a service that runs it many times in a "
      "deterministic sandbox. Reply with exactly one fenced code block and nothing else:\n"
      "```lua\n"
      "return function(input)\n"
      "  -- ...\n"
      "  return result\n"
      "end\n"
      "```\n"
      "Rules:\n"
      "- The chunk returns the function. It gets one argument and returns one value.\n"
      "- Values are JSON-like: nil, booleans, integers, floats, strings, arrays (tables with keys "
      "1..n) and maps (tables with string keys). 1 and 1.0 are different values.\n"
      "- Only these names exist; everything else (io, os, debug, require, load, ...) is nil:\n",
      names.Describe(),
      "- pairs and next visit keys in sorted order; math.random uses a fixed seed.\n"
      "- Use local variables and local helper functions. Keep it short and handle the cases the "
      "tests show.\n");
}

std::string Re2System() {
  return "You write one RE2 regular expression for rote. Reply with exactly one fenced code "
         "block containing only the pattern, on one line, and nothing else:\n"
         "```re2\n"
         "PATTERN\n"
         "```\n"
         "Rules:\n"
         "- RE2 syntax: no lookahead or lookbehind, no backreferences, no possessive quantifiers.\n"
         "- Text is UTF-8. Inline flags such as (?i) are allowed.\n"
         "- The pattern is applied with find_all: every non-overlapping match of the whole "
         "pattern, left to right. Capturing groups do not change what find_all returns.\n"
         "- The examples give a text and the exact list of matches expected.\n";
}

std::string UserTask(const engine::GenerationPoint& spec) {
  std::string out = absl::StrCat("Name: ", spec.name, "\nTask: ", spec.task, "\n");
  const bool lua = spec.kind == engine::ArtifactKind::kLuaFunction;
  if (lua) {
    if (!spec.signature.empty()) absl::StrAppend(&out, "Signature: ", spec.signature, "\n");
    absl::StrAppend(&out, "Tests (the function is called with the input and must return exactly the expected value):\n");
  } else {
    absl::StrAppend(&out, "Examples (text, then the matches find_all must return):\n");
  }
  // Held-out examples are never shown; the others keep their numbers in the spec, which are
  // the numbers a failure on a retry names.
  const std::vector<bool> held_out = engine::HeldOutExamples(spec);
  for (size_t i = 0; i < spec.examples.size(); ++i) {
    if (held_out[i]) continue;
    absl::StrAppend(&out, i + 1, lua ? ". input: " : ". text: ", Json(spec.examples[i].input),
                    lua ? "\n   expected: " : "\n   matches: ", Json(spec.examples[i].expected), "\n");
  }
  return out;
}

}  // namespace

std::string_view TemplateVersion(engine::ArtifactKind kind) {
  return kind == engine::ArtifactKind::kLuaFunction ? kLuaTemplateVersion : kRe2TemplateVersion;
}

std::vector<ChatTurn> BuildPrompt(const engine::GenerationPoint& spec, const SandboxNames& sandbox_names,
                                  const std::optional<PreviousAttempt>& previous) {
  const bool lua = spec.kind == engine::ArtifactKind::kLuaFunction;
  std::vector<ChatTurn> turns;
  turns.push_back({"system", lua ? LuaSystem(sandbox_names) : Re2System()});
  turns.push_back({"user", UserTask(spec)});
  if (previous.has_value()) {
    turns.push_back({"assistant", absl::StrCat("```", lua ? "lua" : "re2", "\n",
                                               Truncated(previous->candidate, kMaxQuotedCandidateBytes), "\n```")});
    turns.push_back({"user", absl::StrCat("Your attempt ", previous->index, " was refused: ",
                                          Truncated(previous->failure, kMaxQuotedCandidateBytes),
                                          "\nWrite a corrected version. Reply with one fenced code block only.")});
  }
  return turns;
}

std::string ValidUtf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  while (!bytes.empty()) {
    const size_t bad = sandbox::FindInvalidUtf8(bytes);
    if (bad == std::string_view::npos) {
      out.append(bytes);
      break;
    }
    out.append(bytes.substr(0, bad));
    out.append("\xEF\xBF\xBD");  // U+FFFD
    // Drop just the first invalid byte; what follows is checked again from a fresh start.
    bytes.remove_prefix(bad + 1);
  }
  return out;
}

std::string Truncated(std::string_view text, size_t max_bytes) {
  std::string valid = ValidUtf8(text);
  if (valid.size() <= max_bytes) return valid;
  size_t cut = max_bytes;
  // Back up to the start of a character (continuation bytes are 10xxxxxx).
  while (cut > 0 && (static_cast<unsigned char>(valid[cut]) & 0xC0) == 0x80) --cut;
  const size_t total = valid.size();
  valid.resize(cut);
  absl::StrAppend(&valid, "\n[... ", total - cut, " more bytes cut]");
  return valid;
}

}  // namespace rote::orchestrator::generate
