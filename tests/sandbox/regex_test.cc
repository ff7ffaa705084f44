#include "sandbox/regex.h"

#include <gtest/gtest.h>

namespace rote::sandbox {
namespace {

TEST(RegexTest, FindAllFullMatchAndNamedCaptures) {
  auto re = Re2Matcher::Compile(R"(INV-(?P<year>\d{4})-(?P<seq>\d{4})(?P<suffix>-[A-Z])?)");
  ASSERT_TRUE(re.ok()) << re.status();
  std::string text = "Pay INV-2024-0001 and INV-2023-0042-B, not INV-24-1.";
  EXPECT_EQ(re->FindAll(text), (std::vector<std::string>{"INV-2024-0001", "INV-2023-0042-B"}));
  EXPECT_TRUE(re->FullMatch("INV-2024-0001"));
  EXPECT_FALSE(re->FullMatch("xINV-2024-0001"));
  EXPECT_EQ(*CanonicalJson(re->NamedCaptures(text)),
            R"([{"seq":"0001","suffix":null,"year":"2024"},{"seq":"0042","suffix":"-B","year":"2023"}])");
  EXPECT_EQ(re->group_names(), (std::vector<std::string>{"seq", "suffix", "year"}));
}

TEST(RegexTest, EmptyMatchesAdvanceByOneCharacter) {
  auto re = Re2Matcher::Compile("x*");
  ASSERT_TRUE(re.ok());
  EXPECT_EQ(re->FindAll("axxb\xc3\xa9"), (std::vector<std::string>{"", "xx", "", ""}));
  auto word = Re2Matcher::Compile(R"(\w+)");
  EXPECT_EQ(word->FindAll("héllo wörld"), (std::vector<std::string>{"h", "llo", "w", "rld"}));  // \w is ASCII
}

TEST(RegexTest, UnsupportedConstructsAreNamedWithTheirPosition) {
  struct Case { const char* pattern; const char* construct; size_t offset; };
  for (const Case& c : {Case{"(a)\\1", "backreference \\1", 3}, Case{"foo(?=bar)", "lookahead", 3},
                        Case{"(?!x)y", "negative lookahead", 0}, Case{"a(?<=b)", "lookbehind", 1},
                        Case{"(?<!b)a", "negative lookbehind", 0}, Case{"x(?>ab|a)c", "atomic group", 1},
                        Case{"a++", "possessive quantifier", 1}, Case{"a{2,3}+", "possessive quantifier", 1},
                        Case{"(?(1)a|b)", "conditional", 0}, Case{"(a(?R)?)", "recursion", 2},
                        Case{"\\Gfoo", "\\G anchor", 0}, Case{"abc\\Z", "\\Z anchor", 3},
                        Case{"(?<y>\\d+)", "named group (?<name>", 0}, Case{"(?P<a>x)(?P=a)", "named backreference", 8},
                        Case{"a\\Kb", "\\K match reset", 1}, Case{"(?#note)a", "comment group", 0},
                        Case{"\\k<x>", "backreference \\k", 0}}) {
    auto re = Re2Matcher::Compile(c.pattern);
    ASSERT_FALSE(re.ok()) << c.pattern;
    std::string msg(re.status().message());
    EXPECT_NE(msg.find(c.construct), std::string::npos) << c.pattern << ": " << msg;
    EXPECT_NE(msg.find("at byte " + std::to_string(c.offset)), std::string::npos) << c.pattern << ": " << msg;
  }
  // Look-alikes that RE2 does support are not flagged.
  for (const char* ok : {"[(?=]", "a*?", "a+?b", "\\Q(?=\\E", "(?i)abc", "(?P<n>a)", "[\\1]", "a{2}?", "x{,}+"}) {
    EXPECT_TRUE(CheckSupportedSyntax(ok).ok()) << ok;
  }
}

TEST(RegexTest, OtherSyntaxErrorsCarryRe2sMessageAndOffset) {
  auto re = Re2Matcher::Compile("ab(cd");
  ASSERT_FALSE(re.ok());
  EXPECT_NE(re.status().message().find("missing )"), std::string::npos) << re.status();
  auto esc = Re2Matcher::Compile("ab\\h");
  ASSERT_FALSE(esc.ok());
  EXPECT_NE(esc.status().message().find("at byte 2"), std::string::npos) << esc.status();
}

TEST(RegexTest, MemoryBudgetIsEnforced) {
  RegexOptions small;
  small.max_memory_bytes = 64 << 10;
  auto re = Re2Matcher::Compile("(\\pL|\\d){500}", small);
  ASSERT_FALSE(re.ok());
  EXPECT_EQ(re.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(re.status().message().find("max_memory_bytes=65536"), std::string::npos) << re.status();
}

TEST(RegexTest, OptionsHaveACanonicalJsonThatRoundTrips) {
  RegexOptions o;
  o.case_insensitive = true;
  EXPECT_EQ(o.CanonicalJson(),
            R"({"case_insensitive":true,"dot_matches_newline":false,"encoding":"utf-8","literal":false,)"
            R"("longest_match":false,"max_memory_bytes":8388608,"syntax":"re2"})");
  auto back = RegexOptions::FromJson(o.CanonicalJson());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->CanonicalJson(), o.CanonicalJson());
  EXPECT_FALSE(RegexOptions::FromJson(R"({"case_insensitive":true})").ok());
  auto re = Re2Matcher::Compile("inv-\\d+", o);
  ASSERT_TRUE(re.ok());
  EXPECT_EQ(re->FindAll("INV-1 inv-2"), (std::vector<std::string>{"INV-1", "inv-2"}));
  RegexOptions lit;
  lit.literal = true;
  auto l = Re2Matcher::Compile("a.b(?=", lit);
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->FindAll("a.b(?= axb"), (std::vector<std::string>{"a.b(?="}));
}

}  // namespace
}  // namespace rote::sandbox
