// Earley parser over grammar terminals, fed one lexeme at a time.
//
// Earley handles any context-free grammar, so grammars need no conflict resolution. Sets live
// in one flat array; scanning appends a set and Pop() drops it, so the mask computation forks a
// state by pushing and popping on the matcher's own parser, and Rollback truncates. Nullable
// nonterminals follow Aycock and Horspool (a prediction of a nullable symbol also advances past
// it), so completions never need to revisit the set being built.
#pragma once

#include <cstdint>
#include <vector>

#include "inference/grammar/grammar_spec.h"

namespace rote::inference::grammar {

// Immutable tables derived from a GrammarSpec, shared by every parser of a grammar.
struct EarleyTables {
  explicit EarleyTables(const GrammarSpec& spec);

  std::vector<GrammarTerminal> gterms;
  std::vector<int> prod_lhs;
  std::vector<std::vector<int>> prod_rhs;
  std::vector<std::vector<int>> prods_of;  // per nonterminal
  std::vector<char> nullable;              // per nonterminal
  std::vector<char> lex_has_role;          // per lexer terminal: used with @ref or @decl
  int lex_words = 1;                       // words of a lexer-terminal bitset
};

class EarleyParser {
 public:
  explicit EarleyParser(const EarleyTables* tables);

  // Scans a lexeme of lexer terminal `lex`. Occurrences with role ref accept it only when
  // `ref_ok`. Returns false, leaving the parser unchanged, when nothing advances; sets
  // *declared when an occurrence with role decl advanced.
  bool Scan(int lex, bool ref_ok, bool* declared);
  void Pop();  // drops the last set (never the first)
  void Truncate(size_t num_sets);
  size_t num_sets() const { return set_start_.size() - 1; }

  bool IsComplete() const;
  // Lexer terminals the last set expects in an occurrence without role ref (plain or decl)...
  const uint64_t* ExpectFree() const { return &exp_free_[(num_sets() - 1) * tables_->lex_words]; }
  // ...and in an occurrence with role ref.
  const uint64_t* ExpectRef() const { return &exp_ref_[(num_sets() - 1) * tables_->lex_words]; }
  bool ExpectsAnything() const;

 private:
  void Close(size_t set_index);
  bool Insert(uint64_t item);
  void IndexSet(size_t set_index);

  const EarleyTables* tables_;
  std::vector<uint64_t> items_;
  std::vector<uint32_t> set_start_;  // num_sets + 1 offsets into items_
  std::vector<uint64_t> exp_free_, exp_ref_;
  // Completion looks up the items of an origin set waiting for a nonterminal: each set's items
  // sorted by the symbol after the dot (kNoSymbol when none), built the first time a completion
  // needs that set, so a committed set is indexed once and serves every later mask.
  std::vector<int32_t> by_next_symbol_;
  std::vector<uint64_t> by_next_item_;
  std::vector<char> indexed_;  // per set
  // Dedup table of the set being built: open addressing, entries valid when stamp matches.
  std::vector<uint64_t> seen_key_;
  std::vector<uint32_t> seen_stamp_;
  uint32_t stamp_ = 0;
  size_t cur_base_ = 0;  // first item of the set being built
};

}  // namespace rote::inference::grammar
