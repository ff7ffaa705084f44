// Checks an artifact against the examples of its generation point: the one place that decides
// whether a piece of code fits a spec (reference artifacts from lockfiles here; generated ones
// in the generation pipeline, which should call this too).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "orchestrator/engine/artifact.h"
#include "orchestrator/engine/lua_runner.h"
#include "orchestrator/engine/spec.h"

namespace rote::orchestrator::engine {

struct Validation {
  bool passed = false;
  // Canonical JSON: {"passed": bool, "tests": [{"input", "expected", "got", "passed"[, "error"]}]}
  std::string report_json;
  // When not passed: which example failed and how, for error messages.
  std::string first_failure;
};

// Runs every example. An RE2 pattern that does not compile, or a Lua chunk that does not compile,
// is a failed validation (not an error); errors are infrastructure failures only.
absl::StatusOr<Validation> ValidateArtifact(const GenerationPoint& spec, const ArtifactCode& code,
                                            LuaArtifactRunner* lua_runner, const sandbox::Limits& limits);

}  // namespace rote::orchestrator::engine
