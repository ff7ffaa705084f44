// Which global names a generated Lua chunk uses, and whether the sandbox provides them.
//
// The sandbox is the enforcement (a name it does not provide is nil at run time); this check
// exists so that a candidate reaching for os.time or io.read fails with a message that names
// the culprit, which the next attempt's prompt then carries. It is deliberately one-sided: a
// name counts as global only when the chunk never declares it anywhere (local, parameter, for
// variable, local function, assignment target), so correct code is never refused because of
// scoping subtleties; a global that shares its name with some local elsewhere slips through to
// the sandbox, which still refuses it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace rote::orchestrator::generate {

struct GlobalUse {
  std::string name;   // "os", "string"
  std::string field;  // "time" for os.time; empty when the name is used on its own
  int line = 0;       // first use, 1-based
};

// Global names the chunk reads or calls, in order of first use; `field` uses are reported
// once per (name, field). INVALID_ARGUMENT for text the lexer cannot read (an unfinished
// string or long comment); compile the chunk first to get Lua's own message for those.
absl::StatusOr<std::vector<GlobalUse>> GlobalUses(std::string_view source);

// What the deterministic sandbox profile offers generated code, probed from the sandbox itself
// (sandbox::RunFunctionArtifact) so that it cannot drift from the profile.
struct SandboxNames {
  std::vector<std::string> base;  // global functions and values: assert, error, ipairs, ...
  // Library tables and their members, e.g. {"math", {"abs", "ceil", ...}}, sorted.
  std::vector<std::pair<std::string, std::vector<std::string>>> libraries;

  bool Provides(const GlobalUse& use) const;
  // One line per library, for prompts: "string: byte char find ...".
  std::string Describe() const;
};

// Probes the sandbox once per process (the result is cached; the profile is compiled in).
absl::StatusOr<SandboxNames> ProbeSandboxNames();

// Empty when every use is provided; otherwise a message naming each unknown use and its line:
// "uses names the sandbox does not provide: os.time (line 3), io (line 7)".
std::string UnknownNamesMessage(const std::vector<GlobalUse>& uses, const SandboxNames& names);

}  // namespace rote::orchestrator::generate
