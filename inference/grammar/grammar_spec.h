// A grammar parsed from its text (grammar.h documents the format): terminals for the lexer and
// productions over grammar terminals (a terminal with a name role) and nonterminals.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "inference/grammar/lexer.h"
#include "inference/status.h"

namespace rote::inference::grammar {

enum class NameRole : int { kPlain = 0, kRef = 1, kDecl = 2 };

// A terminal as the parser sees it: which lexer terminal, and the role of this occurrence.
struct GrammarTerminal {
  int lex = 0;
  NameRole role = NameRole::kPlain;
};

// rhs symbols: s >= 0 is nonterminal s; s < 0 is grammar terminal ~s (that is, -1 - s).
struct Production {
  int lhs = 0;
  std::vector<int> rhs;
};

struct GrammarSpec {
  std::vector<TerminalDef> terminals;
  std::vector<GrammarTerminal> gterms;
  std::vector<std::string> nonterminal_names;
  std::vector<Production> productions;  // productions[0] is the augmented start: S' ::= start
  int start = 0;                        // the augmented start nonterminal
  bool leading_ignore = false;          // %ignore_leading: ignored lexemes may precede the first terminal
};

StatusOr<GrammarSpec> ParseGrammarText(std::string_view text);

}  // namespace rote::inference::grammar
