// The pieces of the generation pipeline on their own: code extraction, the Lua name check and
// the sandbox probe, prompts, decoding parameters, review policy parsing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "orchestrator/generate/code_model.h"
#include "orchestrator/generate/extract.h"
#include "orchestrator/generate/lua_names.h"
#include "orchestrator/generate/pipeline.h"
#include "orchestrator/generate/prompt.h"
#include "orchestrator/generate/review_policy.h"

namespace rote::orchestrator::generate {
namespace {

using engine::ArtifactKind;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(ExtractCodeTest, TakesTheFirstFencedBlock) {
  auto code = ExtractCode(ArtifactKind::kLuaFunction,
                          "Here you go:\n```lua\nreturn function(x)\n  return x\nend\n```\nAnd another:\n```lua\nx\n```\n");
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, "return function(x)\n  return x\nend\n");
}

TEST(ExtractCodeTest, UnclosedBlockRunsToTheEnd) {
  auto code = ExtractCode(ArtifactKind::kLuaFunction, "```lua\nreturn function(x)\n  return");
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, "return function(x)\n  return\n");
}

TEST(ExtractCodeTest, NoFenceTakesEverything) {
  auto code = ExtractCode(ArtifactKind::kRe2Pattern, "  INV-\\d{4}-\\d{4}\n");
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, "INV-\\d{4}-\\d{4}");
}

TEST(ExtractCodeTest, RefusesEmptyOutputsAndMultiLinePatterns) {
  auto empty = ExtractCode(ArtifactKind::kLuaFunction, "  \n ");
  EXPECT_TRUE(absl::IsFailedPrecondition(empty.status()));
  EXPECT_THAT(std::string(empty.status().message()), HasSubstr("no code"));
  auto empty_block = ExtractCode(ArtifactKind::kLuaFunction, "```lua\n```\n");
  EXPECT_THAT(std::string(empty_block.status().message()), HasSubstr("code block is empty"));
  auto multi = ExtractCode(ArtifactKind::kRe2Pattern, "```re2\na\nb\n```");
  EXPECT_TRUE(absl::IsFailedPrecondition(multi.status()));
  EXPECT_THAT(std::string(multi.status().message()), HasSubstr("one line"));
}

TEST(ExtractCodeTest, FenceMustStartALine) {
  // A ``` inside a string on a code line is not a fence.
  auto code = ExtractCode(ArtifactKind::kLuaFunction, "return function(x) return '```' end");
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, "return function(x) return '```' end\n");
}

std::vector<std::string> Names(const std::vector<GlobalUse>& uses) {
  std::vector<std::string> out;
  for (const GlobalUse& u : uses) out.push_back(u.field.empty() ? u.name : u.name + "." + u.field);
  return out;
}

TEST(GlobalUsesTest, FindsFreeNamesAndLibraryFields) {
  auto uses = GlobalUses(R"lua(
local function helper(a, b) return a + b end
return function(text)
  local t = {}
  for i, v in ipairs({1, 2}) do t[i] = helper(v, 1) end
  local s = string.upper(text) .. os.time()
  t.name = s
  local r = { key = 1 }
  return tostring(#t) .. io.read()  -- print(nope)
end
)lua");
  ASSERT_TRUE(uses.ok()) << uses.status();
  EXPECT_EQ(Names(*uses), (std::vector<std::string>{"ipairs", "string.upper", "os.time", "tostring", "io.read"}));
  EXPECT_EQ((*uses)[2].line, 6);
}

TEST(GlobalUsesTest, DeclarationsAnywhereAreNotGlobal) {
  auto uses = GlobalUses(R"lua(
count = 0
function bump(n) count = count + n end
local obj = {}
function obj:get() return self.v end
local x <const>, y = 1, 2
a, b = 3, 4
return function(s)
  repeat local z = s until z
  ::again::
  goto again
  return [[os.time()]] .. "io" .. --[==[ math.sin ]==] bump(a + b + x + y)
end
)lua");
  ASSERT_TRUE(uses.ok()) << uses.status();
  EXPECT_TRUE(uses->empty()) << ::testing::PrintToString(Names(*uses));
}

TEST(GlobalUsesTest, UnfinishedStringIsAnError) {
  EXPECT_TRUE(absl::IsInvalidArgument(GlobalUses("return 'abc").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(GlobalUses("--[[ never closed").status()));
}

TEST(SandboxNamesTest, ProbeReflectsTheProfile) {
  auto names = ProbeSandboxNames();
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_TRUE(names->Provides({"ipairs", "", 1}));
  EXPECT_TRUE(names->Provides({"string", "format", 1}));
  EXPECT_TRUE(names->Provides({"math", "floor", 1}));
  EXPECT_FALSE(names->Provides({"string", "dump", 1}));
  EXPECT_FALSE(names->Provides({"math", "sin", 1}));
  EXPECT_FALSE(names->Provides({"os", "", 1}));
  EXPECT_FALSE(names->Provides({"io", "read", 1}));
  EXPECT_FALSE(names->Provides({"load", "", 1}));
  EXPECT_FALSE(names->Provides({"collectgarbage", "", 1}));
  const std::string described = names->Describe();
  EXPECT_THAT(described, HasSubstr("string: byte char find format"));
  EXPECT_THAT(described, Not(HasSubstr("dump")));
  EXPECT_THAT(described, Not(HasSubstr("collectgarbage")));
}

TEST(SandboxNamesTest, UnknownNamesMessageNamesEachOnce) {
  auto names = ProbeSandboxNames();
  ASSERT_TRUE(names.ok());
  std::vector<GlobalUse> uses = {{"os", "time", 3}, {"os", "date", 4}, {"string", "dump", 5},
                                 {"string", "format", 6}, {"ipairs", "", 7}};
  EXPECT_EQ(UnknownNamesMessage(uses, *names),
            "uses names the sandbox does not provide: os (line 3), string.dump (line 5)");
  EXPECT_EQ(UnknownNamesMessage({{"ipairs", "", 1}}, *names), "");
}

engine::GenerationPoint LuaPoint() {
  auto p = PointFromParts("parse_amount", ArtifactKind::kLuaFunction, "Parse an amount.",
                          "function(text) -> number", {R"({"input":"1,5","output":1.5})"});
  EXPECT_TRUE(p.ok()) << p.status();
  return *p;
}

TEST(PromptTest, CarriesTaskExamplesRulesAndTheRetry) {
  auto names = ProbeSandboxNames();
  ASSERT_TRUE(names.ok());
  const engine::GenerationPoint p = LuaPoint();
  std::vector<ChatTurn> first = BuildPrompt(p, *names, std::nullopt);
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0].role, "system");
  EXPECT_THAT(first[0].content, HasSubstr("math: "));
  EXPECT_THAT(first[1].content, HasSubstr("Task: Parse an amount."));
  EXPECT_THAT(first[1].content, HasSubstr("Signature: function(text) -> number"));
  EXPECT_THAT(first[1].content, HasSubstr("input: \"1,5\"\n   expected: 1.5"));

  std::vector<ChatTurn> retry = BuildPrompt(p, *names, PreviousAttempt{1, "return 1\n", "it failed test 1"});
  ASSERT_EQ(retry.size(), 4u);
  EXPECT_EQ(retry[2].role, "assistant");
  EXPECT_THAT(retry[2].content, HasSubstr("return 1\n"));
  EXPECT_THAT(retry[3].content, HasSubstr("Your attempt 1 was refused: it failed test 1"));
  // Deterministic: the same inputs give the same bytes.
  std::vector<ChatTurn> again = BuildPrompt(p, *names, PreviousAttempt{1, "return 1\n", "it failed test 1"});
  for (size_t i = 0; i < retry.size(); ++i) EXPECT_EQ(retry[i].content, again[i].content);
}

TEST(PromptTest, QuotedCandidatesAreValidUtf8AndBounded) {
  EXPECT_EQ(ValidUtf8("a\xff" "b"), "a\xEF\xBF\xBD" "b");
  EXPECT_EQ(ValidUtf8("\xC3\xA9"), "\xC3\xA9");
  const std::string long_text = std::string(10, 'x') + "\xC3\xA9" + std::string(10, 'y');
  const std::string cut = Truncated(long_text, 11);  // would split the two-byte character
  EXPECT_EQ(cut.substr(0, 10), std::string(10, 'x'));
  EXPECT_THAT(cut, HasSubstr("more bytes cut"));
}

TEST(DecodingTest, JsonRoundTripsExactly) {
  Decoding d;
  d.temperature = 0.7f;
  d.top_k = 40;
  d.top_p = 0.9f;
  d.seed = 18446744073709551615ull;
  d.max_tokens = 300;
  d.max_attempts = 4;
  const std::string json = DecodingJson(d);
  EXPECT_EQ(json.find(' '), std::string::npos);
  auto back = ParseDecodingJson(json);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->temperature, d.temperature);
  EXPECT_EQ(back->top_p, d.top_p);
  EXPECT_EQ(back->seed, d.seed);
  EXPECT_EQ(back->max_tokens, 300);
  EXPECT_EQ(back->max_attempts, 4);
  EXPECT_EQ(DecodingJson(*back), json);
}

TEST(DecodingTest, RangesAreChecked) {
  Decoding d;
  d.max_attempts = 0;
  EXPECT_THAT(std::string(CheckDecoding(d).message()), HasSubstr("max_attempts"));
  d = Decoding{};
  d.top_p = 0.0f;
  EXPECT_THAT(std::string(CheckDecoding(d).message()), HasSubstr("top_p"));
  d = Decoding{};
  d.temperature = -1.0f;
  EXPECT_THAT(std::string(CheckDecoding(d).message()), HasSubstr("temperature"));
  EXPECT_TRUE(absl::IsInvalidArgument(ParseDecodingJson("{\"max_tokens\":1}").status()));
}

TEST(PointFromPartsTest, ChecksExampleShapes) {
  EXPECT_TRUE(PointFromParts("p", ArtifactKind::kRe2Pattern, "t", "", {R"({"input":"a","matches":["a"]})"}).ok());
  auto wrong_key = PointFromParts("p", ArtifactKind::kRe2Pattern, "t", "", {R"({"input":"a","output":["a"]})"});
  EXPECT_THAT(std::string(wrong_key.status().message()), HasSubstr("\"matches\""));
  auto not_json = PointFromParts("p", ArtifactKind::kLuaFunction, "t", "", {"{"});
  EXPECT_THAT(std::string(not_json.status().message()), HasSubstr("example 1 is not JSON"));
  EXPECT_TRUE(absl::IsInvalidArgument(PointFromParts("P!", ArtifactKind::kLuaFunction, "t", "", {}).status()));
}

TEST(ReviewPolicyTest, ParsesServerAndBlueprintModes) {
  auto policy = ReviewPolicy::Parse("auto", {"invoice_totals=approval"});
  ASSERT_TRUE(policy.ok()) << policy.status();
  EXPECT_EQ(policy->ModeFor("anything"), ReviewMode::kAuto);
  EXPECT_EQ(policy->ModeFor("invoice_totals"), ReviewMode::kApproval);
  EXPECT_EQ(policy->ModeForKey("invoice_totals/parse_amount"), ReviewMode::kApproval);
  EXPECT_EQ(policy->ModeForKey("other/parse_amount"), ReviewMode::kAuto);
  EXPECT_THAT(std::string(ReviewPolicy::Parse("maybe", {}).status().message()), HasSubstr("'maybe'"));
  EXPECT_THAT(std::string(ReviewPolicy::Parse("auto", {"noequals"}).status().message()), HasSubstr("NAME=MODE"));
}

}  // namespace
}  // namespace rote::orchestrator::generate
