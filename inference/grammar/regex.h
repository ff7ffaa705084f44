// Byte regexes of the grammar format, compiled to a Thompson NFA that the lexer determinises.
// The syntax is the subset that terminals need (see grammar.h): literals, escapes, classes,
// '.', groups, alternation, the quantifiers * + ? {m} {m,} {m,n}, and (?until:TEXT), which
// matches the shortest run of bytes ending in TEXT (used for Lua's long brackets).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "inference/status.h"

namespace rote::inference::grammar {

// One NFA over bytes. A state has epsilon moves and byte-range moves; `accept` names the
// terminal a state accepts (-1 for none).
struct Nfa {
  struct Range {
    uint8_t lo, hi;
    int target;
  };
  struct State {
    std::vector<int> eps;
    std::vector<Range> ranges;
    int accept = -1;
  };
  std::vector<State> states;

  int NewState() {
    states.emplace_back();
    return static_cast<int>(states.size()) - 1;
  }
};

// A compiled fragment: the start state and the one final state (no moves out of it yet).
struct NfaFragment {
  int start = -1;
  int end = -1;
};

// Adds the regex `pattern` (the text between the slashes) to `nfa`.
StatusOr<NfaFragment> AddRegex(Nfa& nfa, std::string_view pattern);
// Adds the exact byte string `bytes`.
NfaFragment AddLiteral(Nfa& nfa, std::string_view bytes);
// Decodes the escapes of a "literal" of the grammar format (\n \t \r \\ \" \xNN).
StatusOr<std::string> UnescapeLiteral(std::string_view quoted_body);

}  // namespace rote::inference::grammar
