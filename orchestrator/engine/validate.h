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
  // Every example passed, held-out ones included, and no trivial-candidate check refused it.
  bool passed = false;
  // Whether the auto review policy may approve it: passed, and the examples can tell a right
  // candidate from a trivially wrong one (see review_reason).
  bool auto_approvable = false;
  // Canonical JSON:
  //   {"passed": bool,
  //    "tests": [{"input", "expected", "got", "held_out", "passed"[, "error"]}],
  //    ["refused": why a trivial-candidate check refused it,]
  //    ["review": why it passed but needs a person]}
  std::string report_json;
  // When not passed: which example failed and how, or why the candidate was refused, for error
  // messages and the model's next attempt. A held-out example is named by its number only:
  // neither its input, its expected value nor the result is quoted.
  std::string first_failure;
  // When not passed: a trivial-candidate check refused it (first_failure says which).
  bool refused = false;
  // When passed but not auto_approvable: why a person must review it.
  std::string review_reason;
};

// Runs every example. An RE2 pattern that does not compile, or a Lua chunk that does not compile,
// is a failed validation (not an error); errors are infrastructure failures only.
//
// Trivially wrong candidates are refused (a failed validation, docs/generation.md "Trivial
// candidates"): an RE2 pattern that matches the empty string, or that matches none of the
// strings the examples expect it to find in full; a Lua function that returns one value for
// every example while the examples expect different ones. A pattern for a spec none of whose
// examples expects a match passes (when it finds nothing) but is not auto_approvable.
absl::StatusOr<Validation> ValidateArtifact(const GenerationPoint& spec, const ArtifactCode& code,
                                            LuaArtifactRunner* lua_runner, const sandbox::Limits& limits);

}  // namespace rote::orchestrator::engine
