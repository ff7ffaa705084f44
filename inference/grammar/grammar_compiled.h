// Internals of CompiledGrammar: the lexer, the parser tables, the vocabulary, and per lexer
// state a token table that groups the vocabulary by how the lexer splits each token.
#pragma once

#include <array>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "inference/grammar/earley.h"
#include "inference/grammar/grammar.h"
#include "inference/grammar/grammar_spec.h"
#include "inference/grammar/lexer.h"

namespace rote::inference::grammar {

// Where a token's one name-sensitive lexeme (a terminal used with a role) sits in its bytes.
struct NamePiece {
  uint16_t offset = 0;
  uint16_t length = 0;
  bool after_partial = false;  // the lexeme began before the token: the text is partial + piece
};

// The vocabulary as seen from one lexer state. Running a token's bytes through the lexer from
// that state gives the lexemes it completes and the state it ends in; tokens with the same
// lexemes (a path in the emission trie) and end state behave alike unless a name-sensitive
// lexeme is involved, and those carry their piece so the matcher can check the name.
struct TokenTable {
  enum Kind : uint8_t {
    kPlain = 0,          // no name-sensitive lexeme
    kCompleteName = 1,   // one, completed inside the token
    kPartialName = 2,    // one, the unfinished lexeme at the token's end
    kSeveralNames = 3,   // checked token by token
  };
  struct Group {
    int node = 0;
    int final_state = 0;
    Kind kind = kPlain;
    uint32_t begin = 0, end = 0;  // range of `tokens` (and `pieces`)
    int dense = -1;               // a large group's tokens as a mask in `dense_bits`, or -1
    // An ignored lexeme comes before the first lexeme the parser takes: the matcher must allow
    // one where it stands. Later ignored lexemes need nothing: the parser takes a terminal (or
    // the final lexeme) after them, so it expects something there, which is all they need.
    bool leading_ignore = false;
  };
  // Trie of completed lexemes: node -> (key, child). The key is the terminal, or terminal +
  // number of terminals for a name lexeme that is the matcher's unfinished lexeme alone.
  std::vector<std::vector<std::pair<int, int>>> children;
  std::vector<std::vector<int>> groups_at;                  // node -> groups
  std::vector<Group> groups;
  std::vector<int32_t> tokens;
  std::vector<NamePiece> pieces;
  std::vector<int32_t> several_names;  // tokens of kind kSeveralNames
  // Large groups OR a whole mask instead of setting thousands of bits one by one.
  std::vector<uint64_t> dense_bits;
  size_t mask_words = 0;
  size_t MemoryBytes() const;
};

struct CompiledGrammarImpl {
  GrammarSpec spec;
  LexerDfa lexer;
  std::unique_ptr<EarleyTables> tables;
  std::vector<std::string> token_bytes;
  std::vector<int32_t> eos_ids;
  std::vector<char> is_eos;
  std::vector<uint64_t> ignore_bits;     // lexer terminals skipped between terminals
  std::vector<uint64_t> sensitive_bits;  // lexer terminals used with a role

  const TokenTable& Table(int lex_state) const;

  mutable std::mutex mu;
  mutable std::vector<std::shared_ptr<const TokenTable>> table_cache;  // by lexer state
};

TokenTable BuildTokenTable(const CompiledGrammarImpl& g, int lex_state);

}  // namespace rote::inference::grammar
