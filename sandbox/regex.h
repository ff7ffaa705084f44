// RE2 extraction with pinned options.
//
// A pattern is compiled with RegexOptions, and nothing else of RE2's many options can vary:
// the options' canonical JSON is part of what identifies a pattern artifact. RE2 guarantees
// linear-time matching, and max_memory_bytes bounds the compiled program and the DFA cache.
// Syntax RE2 does not have (backreferences, lookaround, atomic groups, possessive quantifiers,
// conditionals, recursion, \G, \Z, \K, (?<name>...)) is rejected with an error that names the
// construct and its byte offset in the pattern; other syntax errors carry RE2's message and
// the offset of the offending text.
#pragma once

#include <re2/re2.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "sandbox/value.h"

namespace rote::sandbox {

struct RegexOptions {
  bool case_insensitive = false;
  bool dot_matches_newline = false;
  bool longest_match = false;  // leftmost-longest (POSIX) instead of leftmost-first (Perl)
  bool literal = false;        // the pattern is a literal string
  int64_t max_memory_bytes = 8 << 20;

  // {"case_insensitive":false,"dot_matches_newline":false,"encoding":"utf-8","literal":false,
  //  "longest_match":false,"max_memory_bytes":8388608,"syntax":"re2"}
  std::string CanonicalJson() const;
  // Strict inverse of CanonicalJson: every key required, no unknown keys.
  static absl::StatusOr<RegexOptions> FromJson(std::string_view json);
};

// Checks for syntax that RE2 does not support; OK when none is found.
absl::Status CheckSupportedSyntax(std::string_view pattern);

class Re2Matcher {
 public:
  static absl::StatusOr<Re2Matcher> Compile(std::string_view pattern, const RegexOptions& options = {});

  // The whole text matches.
  bool FullMatch(std::string_view text) const;
  // Calls fn(offset, length) for each leftmost non-overlapping match, scanning left to right.
  // An empty match directly after the previous match is skipped and the scan then advances by
  // one UTF-8 character (the rule of Go's regexp, RE2's sibling).
  void ForEachMatch(std::string_view text, const std::function<void(size_t, size_t)>& fn) const;
  // The matched texts.
  std::vector<std::string> FindAll(std::string_view text) const;
  // One record per match: a Map from each named group ((?P<name>...)) to the text it matched,
  // or Nil when the group did not take part in the match.
  Value NamedCaptures(std::string_view text) const;

  const std::string& pattern() const { return re_->pattern(); }
  const RegexOptions& options() const { return options_; }
  std::vector<std::string> group_names() const;

 private:
  Re2Matcher(std::shared_ptr<const re2::RE2> re, RegexOptions options) : re_(std::move(re)), options_(options) {}
  std::shared_ptr<const re2::RE2> re_;
  RegexOptions options_;
};

}  // namespace rote::sandbox
