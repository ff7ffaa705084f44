#include "orchestrator/generate/extract.h"

#include "absl/strings/str_cat.h"

namespace rote::orchestrator::generate {

namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v'; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

// Offset of the first "```" that starts a line (or the text), at or after `from`.
size_t FindFenceLine(std::string_view text, size_t from) {
  for (size_t pos = text.find("```", from); pos != std::string_view::npos; pos = text.find("```", pos + 1)) {
    size_t line_start = pos;
    while (line_start > 0 && (text[line_start - 1] == ' ' || text[line_start - 1] == '\t')) --line_start;
    if (line_start == 0 || text[line_start - 1] == '\n') return pos;
  }
  return std::string_view::npos;
}

}  // namespace

absl::StatusOr<std::string> ExtractCode(engine::ArtifactKind kind, std::string_view output) {
  std::string_view code = output;
  const size_t open = FindFenceLine(output, 0);
  if (open != std::string_view::npos) {
    // The info string ("lua", "re2") runs to the end of the fence's line.
    size_t body = output.find('\n', open);
    if (body == std::string_view::npos) {
      return absl::FailedPreconditionError("the output opens a code block but ends before any code");
    }
    ++body;
    const size_t close = FindFenceLine(output, body);
    code = output.substr(body, close == std::string_view::npos ? std::string_view::npos : close - body);
  }
  if (Trim(code).empty()) {
    return absl::FailedPreconditionError(open == std::string_view::npos ? "the output contains no code"
                                                                        : "the code block is empty");
  }
  if (kind == engine::ArtifactKind::kRe2Pattern) {
    std::string_view pattern = Trim(code);
    if (pattern.find('\n') != std::string_view::npos) {
      return absl::FailedPreconditionError(
          "the pattern spans several lines; write the whole pattern on one line (use \\n for a newline)");
    }
    return std::string(pattern);
  }
  // Lua: keep the code as written, minus blank lines around it, ending in one newline.
  std::string_view lua = code;
  while (!lua.empty() && IsSpace(lua.back())) lua.remove_suffix(1);
  while (!lua.empty() && (lua.front() == '\n' || lua.front() == '\r')) lua.remove_prefix(1);
  return std::string(lua) + "\n";
}

}  // namespace rote::orchestrator::generate
