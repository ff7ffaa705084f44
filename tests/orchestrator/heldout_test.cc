// Held-out examples and trivially wrong candidates: how a spec marks examples held out (and
// which ones the deterministic share picks), that prompts never show them, what validation
// reports about them, and the candidates validation refuses however many examples they pass.
#include <algorithm>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "orchestrator/engine/blueprint_runtime.h"
#include "orchestrator/engine/validate.h"
#include "orchestrator/generate/lua_names.h"
#include "orchestrator/generate/pipeline.h"
#include "orchestrator/generate/prompt.h"
#include "absl/strings/str_cat.h"
#include "sandbox/value.h"
#include "store/digest.h"

namespace rote::orchestrator::engine {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using sandbox::Value;

GenerationPoint Sealed(GenerationPoint p) {
  absl::Status s = Seal(&p);
  EXPECT_TRUE(s.ok()) << s;
  return p;
}

GenerationPoint Point(ArtifactKind kind, std::vector<Example> examples) {
  GenerationPoint p;
  const bool lua = kind == ArtifactKind::kLuaFunction;
  p.name = lua ? "double" : "invoice_number";
  p.kind = kind;
  p.task = lua ? "Double the number." : "Invoice numbers like INV-2024-0001.";
  p.examples = std::move(examples);
  return Sealed(std::move(p));
}

GenerationPoint LuaPoint(std::vector<Example> examples) { return Point(ArtifactKind::kLuaFunction, std::move(examples)); }
GenerationPoint PatternPoint(std::vector<Example> examples) {
  return Point(ArtifactKind::kRe2Pattern, std::move(examples));
}

Example Num(int64_t in, int64_t out, bool held_out = false) {
  return Example{Value::Int(in), Value::Int(out), held_out};
}

Example Text(const std::string& text, std::vector<std::string> matches, bool held_out = false) {
  sandbox::Array a;
  for (std::string& m : matches) a.push_back(Value::String(std::move(m)));
  return Example{Value::String(text), Value::FromArray(std::move(a)), held_out};
}

Validation Validate(const GenerationPoint& p, ArtifactKind kind, const std::string& source) {
  static std::unique_ptr<LuaArtifactRunner> runner = MakeInProcessLuaRunner();
  const std::string options = kind == ArtifactKind::kRe2Pattern ? *NormalizeOptions(kind, "") : "{}";
  absl::StatusOr<Validation> v = ValidateArtifact(p, {kind, source, options}, runner.get(), {});
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : Validation{};
}

TEST(HeldOutSpec, TheMarkIsInTheEncodingOnlyWhenSet) {
  const GenerationPoint plain = LuaPoint({Num(2, 4), Num(3, 6)});
  EXPECT_EQ(plain.canonical,
            R"({"examples":[{"input":2,"output":4},{"input":3,"output":6}],"kind":"lua_function","name":"double",)"
            R"("signature":"","task":"Double the number."})");
  const GenerationPoint marked = LuaPoint({Num(2, 4), Num(3, 6, true)});
  EXPECT_THAT(marked.canonical, HasSubstr(R"({"held_out":true,"input":3,"output":6})"));
  EXPECT_NE(marked.digest, plain.digest);
  EXPECT_THAT(marked.ExamplesJson(), ElementsAre(R"({"input":2,"output":4})", R"({"held_out":true,"input":3,"output":6})"));

  // Stored and read back, the mark survives.
  absl::StatusOr<GenerationPoint> back = PointFromRecord(marked.ToRecord());
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->examples.size(), 2u);
  EXPECT_FALSE(back->examples[0].held_out);
  EXPECT_TRUE(back->examples[1].held_out);
}

TEST(HeldOutSpec, AtLeastOneExampleIsShown) {
  GenerationPoint p;
  p.name = "double";
  p.kind = ArtifactKind::kLuaFunction;
  p.task = "Double the number.";
  p.examples = {Num(2, 4, true)};
  absl::Status s = Seal(&p);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("every test of 'double' is held out"));
}

TEST(HeldOutSpec, ExplicitMarksWin) {
  const GenerationPoint p = LuaPoint({Num(1, 2), Num(2, 4), Num(3, 6, true), Num(4, 8), Num(5, 10), Num(6, 12),
                                      Num(7, 14), Num(8, 16)});
  EXPECT_THAT(HeldOutExamples(p), ElementsAre(false, false, true, false, false, false, false, false));
}

TEST(HeldOutSpec, FewExamplesAreAllShown) {
  EXPECT_THAT(HeldOutExamples(LuaPoint({Num(1, 2), Num(2, 4), Num(3, 6)})), ElementsAre(false, false, false));
}

TEST(HeldOutSpec, ManyUnmarkedExamplesHoldOutAQuarterByLowestDigest) {
  for (int n : {4, 5, 8, 9, 13}) {
    std::vector<Example> examples;
    for (int i = 0; i < n; ++i) examples.push_back(Num(i, 2 * i));
    const GenerationPoint p = LuaPoint(examples);
    const std::vector<bool> held = HeldOutExamples(p);
    ASSERT_EQ(held.size(), static_cast<size_t>(n));
    EXPECT_EQ(std::count(held.begin(), held.end(), true), n / 4) << n;
    // Every held-out example's digest is below every shown one's.
    const std::vector<std::string> json = p.ExamplesJson();
    for (int h = 0; h < n; ++h) {
      for (int s = 0; s < n; ++s) {
        if (held[h] && !held[s]) {
          EXPECT_LT(store::Sha256Digest(json[h]), store::Sha256Digest(json[s])) << n;
        }
      }
    }
    // A function of the spec alone.
    EXPECT_EQ(HeldOutExamples(*PointFromRecord(p.ToRecord())), held);
  }
}

TEST(HeldOutBlueprint, ExamplesWithKeysCarryTheMark) {
  const char* kSource = R"lua(local bp = rote.blueprint { name = "marks", version = "1" }
local inv = bp:regex { name = "inv", task = "invoice numbers", examples = {
  { "pay INV-1", { "INV-1" } },
  { text = "and INV-22", matches = { "INV-22" }, held_out = true },
  { text = "none", matches = {} },
} }
local double = bp:lua { name = "double", task = "double", tests = {
  { 1, 2 },
  { input = 2, output = 4 },
  { input = 3, output = 6, held_out = true },
  { input = 4, output = 8, held_out = false },
} }
function bp.run(input) return input end
return bp
)lua";
  auto decl = LoadBlueprint(kSource, "marks.lua", sandbox::Limits{});
  ASSERT_TRUE(decl.ok()) << decl.status();
  ASSERT_EQ(decl->points.size(), 2u);
  const GenerationPoint& inv = decl->points[0];
  ASSERT_EQ(inv.examples.size(), 3u);
  EXPECT_FALSE(inv.examples[0].held_out);
  EXPECT_TRUE(inv.examples[1].held_out);
  EXPECT_EQ(inv.examples[1].input, Value::String("and INV-22"));
  EXPECT_TRUE(inv.examples[2].expected.is_array());  // {} is an empty list of matches
  const GenerationPoint& dbl = decl->points[1];
  EXPECT_THAT(HeldOutExamples(dbl), ElementsAre(false, false, true, false));
  EXPECT_EQ(dbl.examples[1].expected, Value::Int(4));
}

TEST(HeldOutBlueprint, MalformedExamplesWithKeysAreRefused) {
  auto load = [](const std::string& tests) {
    const std::string source = "local bp = rote.blueprint { name = \"m\", version = \"1\" }\n"
                               "local f = bp:lua { name = \"f\", task = \"t\", tests = { " + tests + " } }\n"
                               "function bp.run(input) return input end\nreturn bp\n";
    absl::StatusOr<BlueprintDecl> d = LoadBlueprint(source, "m.lua", sandbox::Limits{});
    return d.ok() ? std::string("ok") : std::string(d.status().message());
  };
  EXPECT_EQ(load("{ input = 1, output = 2 }"), "ok");
  EXPECT_THAT(load("{ input = 1, expected = 2 }"), HasSubstr("test 1 of 'f' has an unknown key"));
  EXPECT_THAT(load("{ input = 1, held_out = true }"), HasSubstr("needs both `input` and `output`"));
  EXPECT_THAT(load("{ input = 1, output = 2, held_out = 1 }"), HasSubstr("held_out of type"));
  EXPECT_THAT(load("{ input = 1, output = 2, held_out = true }"), HasSubstr("is held out"));
}

TEST(HeldOutValidation, TheReportMarksEachTestAndNeverQuotesAHeldOutOne) {
  const GenerationPoint p = LuaPoint({Num(2, 4), Num(3, 6), Num(5, 10, true)});
  const Validation good = Validate(p, ArtifactKind::kLuaFunction, "return function(x) return x * 2 end");
  EXPECT_TRUE(good.passed);
  EXPECT_TRUE(good.auto_approvable);
  EXPECT_THAT(good.report_json, HasSubstr(R"({"expected":10,"got":10,"held_out":true,"input":5,"passed":true})"));
  EXPECT_THAT(good.report_json, HasSubstr(R"({"expected":4,"got":4,"held_out":false,"input":2,"passed":true})"));

  // Passes what was shown, fails the held-out test: not passed, and the failure names it by
  // number only.
  const Validation overfit = Validate(p, ArtifactKind::kLuaFunction,
                                      "return function(x) if x == 2 then return 4 end return 6 end");
  EXPECT_FALSE(overfit.passed);
  EXPECT_FALSE(overfit.auto_approvable);
  EXPECT_THAT(overfit.first_failure, HasSubstr("held-out test 3"));
  EXPECT_THAT(overfit.first_failure, Not(HasSubstr("10")));
  EXPECT_THAT(overfit.first_failure, Not(HasSubstr("5")));
  EXPECT_THAT(overfit.report_json, HasSubstr(R"({"expected":10,"got":6,"held_out":true,"input":5,"passed":false})"));

  // A failure the model was shown is quoted in preference to a held-out one.
  const Validation wrong = Validate(p, ArtifactKind::kLuaFunction, "return function(x) return x + 2 end");
  EXPECT_EQ(wrong.first_failure, "test 2 (input 3): expected 6, got 5");
}

TEST(TrivialCandidates, PatternMatchingTheEmptyStringIsRefused) {
  const GenerationPoint p = PatternPoint({Text("pay INV-2024-0001", {"INV-2024-0001"}), Text("nothing", {})});
  for (const char* pattern : {"(INV-\\d{4}-\\d{4})?", "x*", "\\b", "^"}) {
    const Validation v = Validate(p, ArtifactKind::kRe2Pattern, pattern);
    EXPECT_FALSE(v.passed) << pattern;
    EXPECT_TRUE(v.refused) << pattern;
    EXPECT_THAT(v.first_failure, HasSubstr("refused as trivially wrong: the pattern matches the empty string")) << pattern;
    EXPECT_THAT(v.report_json, HasSubstr(R"("refused":"the pattern matches the empty string)")) << pattern;
  }
  // Unless an example expects an empty match.
  const GenerationPoint empty_expected = PatternPoint({Text("ab", {"", ""}), Text("x", {"x"})});
  EXPECT_FALSE(Validate(empty_expected, ArtifactKind::kRe2Pattern, "x?").refused);
}

TEST(TrivialCandidates, PatternThatCannotMatchAnyExpectedTextIsRefused) {
  const GenerationPoint p = PatternPoint({Text("pay INV-2024-0001 and INV-2023-0420", {"INV-2024-0001", "INV-2023-0420"}),
                                          Text("nothing", {})});
  const Validation v = Validate(p, ArtifactKind::kRe2Pattern, "INV-\\d{4}");
  EXPECT_FALSE(v.passed);
  EXPECT_TRUE(v.refused);
  EXPECT_THAT(v.first_failure, HasSubstr("cannot match any text the examples expect it to find: it matches none of "
                                         "the 2 expected matches in full"));
  // The example it fails is still named, for the next attempt.
  EXPECT_THAT(v.first_failure, HasSubstr(R"(; it fails example 1)"));
  const Validation right = Validate(p, ArtifactKind::kRe2Pattern, "INV-\\d{4}-\\d{4}");
  EXPECT_TRUE(right.passed);
  EXPECT_TRUE(right.auto_approvable);
}

TEST(TrivialCandidates, FunctionIgnoringItsInputIsRefusedWithAClearReason) {
  const GenerationPoint p = LuaPoint({Num(2, 4), Num(3, 6)});
  const Validation v = Validate(p, ArtifactKind::kLuaFunction, "return function(x) return 4 end");
  EXPECT_FALSE(v.passed);
  EXPECT_TRUE(v.refused);
  EXPECT_THAT(v.first_failure, HasSubstr("refused as trivially wrong: the function returns the same value, 4, for all 2 "
                                         "test inputs while the tests expect different values: it ignores its input"));
  // When every test expects the same value, a constant is no sign of anything.
  const GenerationPoint same = LuaPoint({Num(2, 1), Num(3, 1)});
  EXPECT_TRUE(Validate(same, ArtifactKind::kLuaFunction, "return function(x) return 1 end").passed);
}

TEST(TrivialCandidates, SingleNulPatternOnASpecExpectingNoMatchIsNeverAutoApprovable) {
  const GenerationPoint p = PatternPoint({Text("no invoice here", {})});
  for (const std::string& pattern : {std::string("\\x00"), std::string(1, '\0')}) {
    const Validation v = Validate(p, ArtifactKind::kRe2Pattern, pattern);
    EXPECT_TRUE(v.passed);  // it finds nothing, as the one example asks
    EXPECT_FALSE(v.auto_approvable);
    EXPECT_THAT(v.review_reason, HasSubstr("no example expects a match"));
    EXPECT_THAT(v.review_reason, HasSubstr("the auto review policy does not approve it"));
    EXPECT_THAT(v.report_json, HasSubstr(R"("review":"no example expects a match)"));
  }
}

}  // namespace
}  // namespace rote::orchestrator::engine

namespace rote::orchestrator::generate {
namespace {

using engine::ArtifactKind;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(HeldOutPrompt, HeldOutExamplesNeverAppearInAPrompt) {
  absl::StatusOr<SandboxNames> names = ProbeSandboxNames();
  ASSERT_TRUE(names.ok()) << names.status();
  // Marked in the spec.
  absl::StatusOr<engine::GenerationPoint> marked = PointFromParts(
      "parse_amount", ArtifactKind::kLuaFunction, "Parse a decimal number written with a comma.", "",
      {R"({"input":"1,5","output":1.5})", R"({"input":"731,125","output":731.125,"held_out":true})",
       R"({"input":"10,25","output":10.25})"});
  ASSERT_TRUE(marked.ok()) << marked.status();
  // Held out by the deterministic share (8 examples: 2 of them).
  std::vector<std::string> many;
  for (int i = 0; i < 8; ++i) {
    many.push_back(absl::StrCat(R"({"input":"pay INV-20)", 10 + i, "-0", 100 + i, R"(","matches":["INV-20)", 10 + i,
                                "-0", 100 + i, R"("]})"));
  }
  absl::StatusOr<engine::GenerationPoint> shared =
      PointFromParts("invoice_number", ArtifactKind::kRe2Pattern, "Invoice numbers.", "", many);
  ASSERT_TRUE(shared.ok()) << shared.status();

  for (const engine::GenerationPoint& p : {*marked, *shared}) {
    const std::vector<bool> held = engine::HeldOutExamples(p);
    ASSERT_GT(std::count(held.begin(), held.end(), true), 0) << p.name;
    // On a first attempt and on a retry whose failure names a held-out example.
    for (const std::optional<PreviousAttempt>& previous :
         {std::optional<PreviousAttempt>(),
          std::optional<PreviousAttempt>(PreviousAttempt{1, "return 1", "it failed held-out test 2 (...)"})}) {
      std::string prompt;
      for (const ChatTurn& t : BuildPrompt(p, *names, previous)) prompt += t.content + "\n";
      for (size_t i = 0; i < p.examples.size(); ++i) {
        const std::string input = *sandbox::CanonicalJson(p.examples[i].input);
        const std::string expected = *sandbox::CanonicalJson(p.examples[i].expected);
        if (held[i]) {
          EXPECT_THAT(prompt, Not(HasSubstr(input))) << p.name << " example " << i + 1;
          EXPECT_THAT(prompt, Not(HasSubstr(expected))) << p.name << " example " << i + 1;
        } else {
          EXPECT_THAT(prompt, HasSubstr(input)) << p.name << " example " << i + 1;
          EXPECT_THAT(prompt, HasSubstr(expected)) << p.name << " example " << i + 1;
        }
      }
    }
  }
}

}  // namespace
}  // namespace rote::orchestrator::generate
