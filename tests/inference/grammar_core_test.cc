// The grammar engine on small grammars: format errors, lexing rules, the mask against a
// brute-force check, names with roles, rollback and determinism.
#include <gtest/gtest.h>

#include <random>

#include "grammar_test_util.h"

namespace rote::inference::grammar {
namespace {

using testing::AcceptsWhole;
using testing::BruteForceMask;
using testing::ByteVocab;
using testing::CompileOrDie;
using testing::Mask;

const char kCalc[] = R"G(
# sums of names and numbers, with let-bindings
%ignore WS
WS = /[ \t\n]+/
NAME = /[a-z_][a-z0-9_]*/
NUM = /[0-9]+/ | /0x[0-9a-f]+/
prog ::= stmt* "return" sum
stmt ::= "let" NAME@decl "=" sum ";"
sum ::= sum ("+" | "-") term | term
term ::= NAME@ref | NUM | "(" sum ")" | NAME "." NAME
)G";

TEST(GrammarFormat, ReportsErrorsWithTheLine) {
  auto bad = CompiledGrammar::Compile("A = /[a-/\nr ::= A\n", ByteVocab({}), {256});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("line"), std::string::npos) << bad.status().message();
  auto undefined = CompiledGrammar::Compile("r ::= A b\nA = \"a\"\n", ByteVocab({}), {256});
  ASSERT_FALSE(undefined.ok());
  EXPECT_NE(undefined.status().message().find("b is not defined"), std::string::npos);
  auto role = CompiledGrammar::Compile("N = /x/\nr ::= N@what\n", ByteVocab({}), {256});
  ASSERT_FALSE(role.ok());
  auto eos = CompiledGrammar::Compile("r ::= \"a\"\n", ByteVocab({}), {9999});
  EXPECT_FALSE(eos.ok());
}

TEST(GrammarFormat, BuiltinGrammarsCompile) {
  for (const char* name : {"lua_reply", "re2_reply", "json"}) {
    auto g = CompiledGrammar::Compile(BuiltinGrammar(name), ByteVocab({}), {256});
    EXPECT_TRUE(g.ok()) << name << ": " << g.status().message();
  }
  EXPECT_TRUE(BuiltinGrammar("nope").empty());
}

TEST(GrammarLexing, KeywordsBeatNamesOnlyForTheWholeLexeme) {
  auto g = CompileOrDie(kCalc, ByteVocab({}));
  EXPECT_TRUE(AcceptsWhole(g, "return lets"));      // "lets" is a NAME
  EXPECT_TRUE(AcceptsWhole(g, "let x = 1; return x"));
  EXPECT_FALSE(AcceptsWhole(g, "return let"));      // "let" is the keyword
  EXPECT_FALSE(AcceptsWhole(g, "returnx"));         // one NAME, no "return"
  EXPECT_TRUE(AcceptsWhole(g, "return 0x1f+2"));
  EXPECT_FALSE(AcceptsWhole(g, "return 0x"));
  EXPECT_FALSE(AcceptsWhole(g, " return 1"));      // nothing is skipped before the first terminal
  EXPECT_TRUE(AcceptsWhole(g, "return 1 "));       // the sum could go on, so blanks may follow
  EXPECT_FALSE(AcceptsWhole(g, "return 1 +"));
}

TEST(GrammarNames, RefNeedsADeclarationOrAnAllowedGlobal) {
  auto g = CompileOrDie(kCalc, ByteVocab({}));
  std::vector<std::string> globals = {"pi", "tau"};
  EXPECT_TRUE(AcceptsWhole(g, "return pi + tau", globals));
  EXPECT_FALSE(AcceptsWhole(g, "return e", globals));
  EXPECT_TRUE(AcceptsWhole(g, "let e = 2; return e + pi", globals));
  EXPECT_TRUE(AcceptsWhole(g, "return e.x", globals));  // NAME "." NAME: plain names
  EXPECT_TRUE(AcceptsWhole(g, "return e", std::nullopt));
  auto m = Matcher::Create(g, globals);
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(m->AcceptBytes("return p"));  // a prefix of "pi"
  Matcher pi = *m;
  EXPECT_TRUE(pi.AcceptBytes("i"));
  EXPECT_TRUE(pi.IsComplete());
  EXPECT_TRUE(m->AcceptBytes("x"));  // "px" can only go on as a plain NAME: px.y
  EXPECT_FALSE(m->IsComplete());
  EXPECT_TRUE(m->AcceptBytes(".y"));
  EXPECT_TRUE(m->IsComplete());
}

// Vocabulary pieces that cross lexemes, split keywords, and carry names.
std::vector<std::string> CalcPieces() {
  return {"return", "ret", "urn", " ", "  ", "\n", "let", " let", "let ", " x", "x", "xy", "pi", " pi",
          "p", "i", " =", "= ", ";", "; ", "+", " +", "+(", "(", ")", ")+", "1", "12", " 1", "0x", "x1",
          "1+1", "x.x", "pi+pi", ".", "a", " a", "tau", "ta", "u", ";\nreturn", "let e=1;", "e", " e"};
}

void CheckWalks(std::shared_ptr<const CompiledGrammar> g, std::optional<std::vector<std::string>> globals,
                int walks, int steps, uint32_t seed) {
  std::mt19937 rng(seed);
  for (int w = 0; w < walks; ++w) {
    auto m = Matcher::Create(g, globals);
    ASSERT_TRUE(m.ok());
    for (int s = 0; s < steps; ++s) {
      auto fast = Mask(*m, *g);
      auto slow = BruteForceMask(*m, *g);
      ASSERT_EQ(fast, slow) << "walk " << w << " step " << s;
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < g->vocab_size(); ++id) if (testing::Allowed(fast, id)) allowed.push_back(id);
      if (allowed.empty()) {
        ASSERT_TRUE(m->finished()) << "dead end at walk " << w << " step " << s;
        break;
      }
      ASSERT_TRUE(m->AcceptToken(allowed[rng() % allowed.size()]));
      if (m->finished()) break;
    }
  }
}

TEST(GrammarMask, EqualsBruteForceAlongRandomWalks) {
  auto g = CompileOrDie(kCalc, ByteVocab(CalcPieces()));
  CheckWalks(g, std::nullopt, 20, 25, 1);
  CheckWalks(g, std::vector<std::string>{"pi", "tau"}, 20, 25, 2);
}

TEST(GrammarMask, RollbackAndCopiesGiveTheSameMasks) {
  auto g = CompileOrDie(kCalc, ByteVocab(CalcPieces()));
  auto m = Matcher::Create(g, std::vector<std::string>{"pi"});
  ASSERT_TRUE(m.ok());
  ASSERT_TRUE(m->AcceptBytes("let "));
  auto before = Mask(*m, *g);
  Matcher copy = *m;
  ASSERT_TRUE(m->AcceptBytes("e = 1; return e"));
  EXPECT_TRUE(m->IsComplete());
  m->Rollback(1);
  EXPECT_EQ(Mask(*m, *g), before);
  EXPECT_EQ(Mask(copy, *g), before);
  EXPECT_EQ(m->num_steps(), 1);
  // After the rollback "e" is no longer declared.
  ASSERT_TRUE(m->AcceptBytes("f = 1; return "));
  EXPECT_TRUE(m->AcceptBytes("e"));  // could still become e.x
  EXPECT_FALSE(m->IsComplete());
  m->Rollback(1);
  EXPECT_TRUE(m->AcceptBytes("f"));
  EXPECT_TRUE(m->IsComplete());
}

TEST(GrammarMask, EosOnlyWhereComplete) {
  auto g = CompileOrDie(kCalc, ByteVocab(CalcPieces()));
  const int32_t eos = g->vocab_size() - 1;
  auto m = Matcher::Create(g);
  ASSERT_TRUE(m.ok());
  EXPECT_FALSE(testing::Allowed(Mask(*m, *g), eos));
  ASSERT_TRUE(m->AcceptBytes("return 1"));
  EXPECT_TRUE(testing::Allowed(Mask(*m, *g), eos));
  ASSERT_TRUE(m->AcceptToken(eos));
  EXPECT_TRUE(m->finished());
  EXPECT_FALSE(m->AcceptBytes("+1"));
  auto after = Mask(*m, *g);
  for (uint64_t w : after) EXPECT_EQ(w, 0u);
}

}  // namespace
}  // namespace rote::inference::grammar
