// Lockfiles: the artifact bound to each generation point of a blueprint, beside the blueprint
// (invoice_totals.lua -> invoice_totals.lock), like a package lock. The format is a small
// subset of TOML so that it reads and diffs well, with each artifact's source inline:
//
//   format = 1
//   blueprint = "invoice_totals"
//
//   [[point]]
//   name = "invoice_number"
//   kind = "re2_pattern"
//   spec = "sha256:..."        # optional when registering; checked when present
//   artifact = "sha256:..."    # optional when registering; checked when present
//   options = '{"case_sensitive":true,"dot_nl":false,"longest_match":false}'
//   source = 'INV-\d{4}-\d{4}'
//
//   [[point]]
//   name = "parse_amount"
//   kind = "lua_function"
//   source = '''
//   return function(text) ... end
//   '''
//
// Values are "basic strings" (with \\ \" \n \t \r \uXXXX escapes), 'literal strings',
// '''multi-line literal strings''' (a newline right after the opening quotes is dropped) and
// integers. Comments start with '#'. docs/blueprints.md describes the format for authors.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "orchestrator/engine/spec.h"

namespace rote::orchestrator::engine {

struct LockEntry {
  std::string point;
  ArtifactKind kind = ArtifactKind::kLuaFunction;
  std::string spec_digest;      // may be empty when read
  std::string artifact_digest;  // may be empty when read
  std::string options_json;     // may be empty (defaults)
  std::string source;
  int line = 0;  // of the entry's [[point]] header, for error messages
};

struct Lockfile {
  std::string blueprint;  // the blueprint's declared name
  std::string version;    // informational
  std::vector<LockEntry> entries;
};

// INVALID_ARGUMENT naming "<origin>:<line>" for anything it cannot read.
absl::StatusOr<Lockfile> ParseLockfile(std::string_view text, std::string_view origin);

// Writes entries in the order given; every entry should have its digests set.
std::string FormatLockfile(const Lockfile& lock);

}  // namespace rote::orchestrator::engine
