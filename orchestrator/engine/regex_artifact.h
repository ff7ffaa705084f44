// RE2 pattern artifacts as the blueprint sees them: compiled once per run by the sandbox's
// matcher (sandbox/regex.h: pinned options, RE2 syntax only) and matched in-process (RE2 runs in
// linear time and bounded memory, so patterns need no worker).
//
// Results are Values so they can be journaled and handed to Lua:
//   find_all(text)  -> {"...", ...}: every non-overlapping match, left to right
//   match(text)     -> nil, or the first match as {match = "...", offset = <byte offset, from 0>,
//                      named = {name = "...", ...}} (named groups, (?P<name>...); a group that
//                      took no part in the match is absent)
//   captures(text)  -> {match table, ...} for every match find_all returns
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "sandbox/regex.h"
#include "sandbox/value.h"

namespace rote::orchestrator::engine {

// What is pinned about RE2 for every pattern, as canonical JSON, recorded in each run's engine
// profile (the per-pattern options are part of each artifact).
std::string Re2ProfileJson();

class RegexArtifact {
 public:
  // INVALID_ARGUMENT naming the construct RE2 refused and where.
  static absl::StatusOr<std::unique_ptr<RegexArtifact>> Compile(std::string_view pattern,
                                                                const sandbox::RegexOptions& options);

  sandbox::Value Match(std::string_view text) const;
  sandbox::Value FindAll(std::string_view text) const;
  sandbox::Value Captures(std::string_view text) const;

 private:
  explicit RegexArtifact(sandbox::Re2Matcher matcher) : matcher_(std::move(matcher)) {}
  sandbox::Re2Matcher matcher_;
};

}  // namespace rote::orchestrator::engine
