// Generation points: what a blueprint declares with bp:regex{...} and bp:lua{...}, their
// canonical encoding and digest (docs/blueprints.md, "Specs and digests").
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "sandbox/value.h"
#include "store/records.h"

namespace rote::orchestrator::engine {

enum class ArtifactKind { kLuaFunction, kRe2Pattern };

// "lua_function", "re2_pattern": the names used in specs, artifacts, lockfiles and the store.
const char* KindName(ArtifactKind kind);
std::optional<ArtifactKind> ParseKind(std::string_view name);

// One example of a spec. For RE2 patterns: input is the text (a string) and expected the list of
// matches find_all must return (an array of strings). For Lua functions: the argument and the
// value the function must return.
struct Example {
  sandbox::Value input;
  sandbox::Value expected;
  // Marked held out in the blueprint: never shown to the model, still validated
  // (docs/generation.md, "Held-out examples").
  bool held_out = false;
};

struct GenerationPoint {
  std::string name;  // [a-z][a-z0-9_]*, unique within its blueprint
  ArtifactKind kind = ArtifactKind::kLuaFunction;
  std::string task;
  std::string signature;  // Lua functions only; empty for patterns
  std::vector<Example> examples;
  int line = 0;  // the line of the declaration in the blueprint (0 when read back from the store)

  // Set by Seal().
  std::string canonical;
  std::string digest;

  // The canonical JSON of each example, as GenerationSpec.examples_json carries them:
  // {"input":..,"matches":[..]} or {"input":..,"output":..}, with "held_out":true added only
  // to a marked example (so specs without marks keep the encoding and digest they always had).
  std::vector<std::string> ExamplesJson() const;
  store::GenerationSpecRecord ToRecord() const;
};

// Which examples are held out, in spec order. Marks in the spec win: when any example is
// marked, exactly the marked ones. Otherwise, with n >= kHeldOutMinExamples examples, the
// floor(n / 4) whose canonical JSON (as ExamplesJson() gives it) has the lowest sha256, ties
// broken by position; with fewer, none. A function of the spec alone, so every prompt and
// every validation of one spec agrees.
inline constexpr size_t kHeldOutMinExamples = 4;
std::vector<bool> HeldOutExamples(const GenerationPoint& point);

// Checks the spec (name syntax, non-empty task, examples that fit the kind) and computes its
// canonical encoding and digest. INVALID_ARGUMENT says what is wrong, without a location.
absl::Status Seal(GenerationPoint* point);

// The canonical encoding: canonical JSON of
//   {"examples":[...],"kind":"lua_function"|"re2_pattern","name":..,"signature":..,"task":..}
// with each example as in ExamplesJson(). The digest is sha256 over these bytes.
absl::StatusOr<std::string> CanonicalSpec(const GenerationPoint& point);

// Reads a stored spec back (from its canonical encoding; the digest is checked).
absl::StatusOr<GenerationPoint> PointFromRecord(const store::GenerationSpecRecord& record);

// Whether `name` is a valid generation point or blueprint name: [a-z][a-z0-9_]*, at most 64.
bool IsValidPointName(std::string_view name);

}  // namespace rote::orchestrator::engine
