// Canonical JSON of a value together with its digest: the unit the journal, the run record and
// replay compare. Two values are "the same" in rote exactly when these bytes are.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "sandbox/value.h"

namespace rote::orchestrator::engine {

struct Canonical {
  std::string json;    // sandbox::CanonicalJson
  std::string digest;  // "sha256:<hex>" of `json`
};

// INVALID_ARGUMENT when the value has no canonical form (NaN, infinity, invalid UTF-8).
absl::StatusOr<Canonical> CanonicalOf(const sandbox::Value& value);

// Parses any JSON text and returns its canonical form (the input of a run).
absl::StatusOr<Canonical> CanonicalizeJson(std::string_view json);

}  // namespace rote::orchestrator::engine
