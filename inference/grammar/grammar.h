// Grammar-constrained decoding: a grammar compiled once per (grammar, vocabulary) and a Matcher
// per request that says which tokens may come next.
//
// Grammar format (docs/grammar.md has the longer version)
// --------------------------------------------------------
//   # a comment runs to the end of the line
//   %start reply               the start rule (default: the first rule)
//   %ignore WS COMMENT         terminals skipped between terminals (never once the start rule
//                              can take no more terminals; before the first terminal only
//   %ignore_leading            with this directive)
//   NAME = /[A-Za-z_][A-Za-z0-9_]*/        a terminal: a byte regex...
//   ARROW = "->"                           ...or a literal; pieces may be joined with |
//   call ::= NAME@ref "(" args? ")"        a rule: sequences, alternatives |, groups ( ),
//          | NAME "!"                      ?, *, +; "text" inline is a literal terminal
//
// Regexes work on bytes: literal bytes; escapes \n \t \r \f \v \0 \xNN and \ before any
// punctuation; classes [a-z_] [^"\\\n] with the escapes \d \w \s \D \W \S inside or outside
// them; '.' (any byte but \n); ( ), (?: ), |, *, +, ?, {m}, {m,}, {m,n}; and (?until:TEXT),
// the shortest run of bytes that ends in TEXT (block comments, Lua's long brackets).
// Literals take the escapes \n \t \r \\ \" \xNN.
//
// Lexing: all terminals become one DFA. A lexeme grows while the DFA can take the next byte
// (maximal munch, no backtracking); it is then the terminal of highest priority accepting it:
// literals before regexes, each in definition order, so a keyword literal beats NAME when the
// whole lexeme equals it. Lua's long brackets [==[ ]==] are not regular; grammars list the
// levels they accept as alternatives (the Lua grammar takes levels 0 to 4).
//
// Parsing: an Earley parser, so any context-free grammar works without conflicts.
//
// Name roles: a terminal occurrence may carry a role. NAME@decl declares its text; NAME@ref
// accepts only a name declared earlier (by any @decl) or one of the allowed globals given to
// the Matcher; plain NAME accepts any text. Scoping is conservative: a declared name stays
// allowed to the end of the text. Without an allowed-globals list roles restrict nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "inference/status.h"

namespace rote::inference::grammar {

struct CompiledGrammarImpl;  // grammar_compiled.h
struct MatcherState;         // matcher.cc

// Immutable and thread-safe: one per (grammar, vocabulary), shared by every request. Per-lexer
// -state token tables are built on first use, under a mutex.
class CompiledGrammar {
 public:
  // token_bytes[id] is the byte string of token id; an empty string marks a token that never
  // extends the text (special tokens). eos_ids end a sentence.
  static StatusOr<std::shared_ptr<const CompiledGrammar>> Compile(std::string_view grammar_text,
                                                                  std::vector<std::string> token_bytes,
                                                                  std::vector<int32_t> eos_ids);
  ~CompiledGrammar();

  int32_t vocab_size() const;
  // Words of a token mask: (vocab_size() + 63) / 64.
  size_t mask_words() const;
  // Bytes the lexer, parser tables and the token tables built so far occupy (approximate).
  size_t MemoryBytes() const;
  const CompiledGrammarImpl& impl() const { return *impl_; }

 private:
  CompiledGrammar();
  std::unique_ptr<CompiledGrammarImpl> impl_;
};

// The state of one request. Cheap to Rollback; copyable (a copy is independent).
class Matcher {
 public:
  // allowed_globals: the names NAME@ref may use besides declared ones; nullopt = no restriction.
  static StatusOr<Matcher> Create(std::shared_ptr<const CompiledGrammar> grammar,
                                  std::optional<std::vector<std::string>> allowed_globals = std::nullopt);
  Matcher(const Matcher& other);
  Matcher& operator=(const Matcher& other);
  Matcher(Matcher&&) noexcept;
  Matcher& operator=(Matcher&&) noexcept;
  ~Matcher();

  // Appends the token when the mask allows it (an EOS id only where IsComplete()); returns false
  // and changes nothing otherwise. An accepted EOS ends the matcher: nothing more is accepted.
  bool AcceptToken(int32_t id);
  // Appends raw bytes (a forced prefix, tests) as one step; same rule as AcceptToken.
  bool AcceptBytes(std::string_view bytes);
  // bits[i / 64] bit (i % 64) set = token i allowed; mask_words() words are written. A pure
  // function of the steps accepted so far.
  void FillNextTokenMask(uint64_t* bits);
  // The text so far is a whole sentence of the grammar.
  bool IsComplete() const;
  // Undoes the last n accepted steps (tokens or AcceptBytes calls).
  void Rollback(int n);
  int num_steps() const;
  bool finished() const;  // an EOS was accepted

 private:
  Matcher();
  std::unique_ptr<MatcherState> s_;
};

// Grammars rote ships: "lua_reply", "re2_reply", "json", and "lua_chunk" (any Lua 5.4 chunk,
// no fence). Empty for an unknown name.
std::string_view BuiltinGrammar(std::string_view name);

}  // namespace rote::inference::grammar
