// The lexer: every terminal of a grammar compiled into one byte-level DFA.
//
// Lexing is maximal munch without backtracking: a lexeme grows while the DFA has a move for the
// next byte; when it has none, the lexeme ends and must sit in an accepting state, whose
// terminal is the one of highest priority among those accepting there (literals first, then
// regex terminals, each in definition order). Lua's keywords win over NAME this way.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "inference/status.h"

namespace rote::inference::grammar {

struct TerminalDef {
  std::string name;
  bool literal = false;
  std::string pattern;  // literal bytes when `literal`, else the regex text
  bool ignore = false;  // %ignore: skipped between terminals
};

class LexerDfa {
 public:
  static constexpr int kDead = -1;
  static constexpr int kStart = 0;

  static StatusOr<LexerDfa> Build(const std::vector<TerminalDef>& terminals);

  int Next(int state, uint8_t byte) const { return next_[static_cast<size_t>(state) * 256 + byte]; }
  // The terminal a lexeme ending in `state` is, or -1.
  int Accept(int state) const { return accept_[state]; }
  // Terminals some lexeme through `state` can still end as (bitset, words() words).
  const uint64_t* Possible(int state) const { return &possible_[static_cast<size_t>(state) * words_]; }
  int num_states() const { return static_cast<int>(accept_.size()); }
  int words() const { return words_; }

 private:
  std::vector<int32_t> next_;     // num_states x 256
  std::vector<int32_t> accept_;   // num_states
  std::vector<uint64_t> possible_;
  int words_ = 1;
};

}  // namespace rote::inference::grammar
