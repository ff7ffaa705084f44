#include "orchestrator/engine/validate.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "orchestrator/engine/canonical.h"
#include "sandbox/regex.h"

namespace rote::orchestrator::engine {

using sandbox::Array;
using sandbox::Map;
using sandbox::Value;

namespace {

std::string JsonOrPlaceholder(const Value& v) {
  absl::StatusOr<std::string> j = sandbox::CanonicalJson(v);
  return j.ok() ? *j : std::string("(not JSON)");
}

// A value quoted in a refusal: short, cut at a UTF-8 character boundary.
std::string Quoted(const Value& v) {
  constexpr size_t kMax = 200;
  std::string j = JsonOrPlaceholder(v);
  if (j.size() <= kMax) return j;
  size_t cut = kMax;
  while (cut > 0 && (static_cast<unsigned char>(j[cut]) & 0xC0) == 0x80) --cut;
  j.resize(cut);
  return absl::StrCat(j, "...");
}

// How many strings the examples expect find_all to return, over all examples.
size_t ExpectedMatchCount(const GenerationPoint& spec) {
  size_t n = 0;
  for (const Example& e : spec.examples) n += e.expected.is_array() ? e.expected.as_array().size() : 0;
  return n;
}

// Why an RE2 candidate that compiled is trivially wrong; empty when it is not. Messages never
// quote an example (held-out ones must not reach a prompt through them).
std::string Re2Refusal(const GenerationPoint& spec, const sandbox::Re2Matcher& matcher, const std::vector<Value>& got) {
  bool expects_empty = false;
  bool matches_an_expected = false;
  for (const Example& e : spec.examples) {
    if (!e.expected.is_array()) continue;  // Seal refuses such specs
    for (const Value& m : e.expected.as_array()) {
      if (!m.is_string()) continue;
      expects_empty = expects_empty || m.as_string().empty();
      matches_an_expected = matches_an_expected || matcher.FullMatch(m.as_string());
    }
  }
  if (!expects_empty) {
    bool empty_match = matcher.FullMatch("");
    for (const Value& g : got) {
      if (!g.is_array()) continue;
      for (const Value& m : g.as_array()) empty_match = empty_match || (m.is_string() && m.as_string().empty());
    }
    if (empty_match) {
      return "the pattern matches the empty string, so find_all returns empty matches where it should find "
             "text; no example expects an empty match";
    }
  }
  if (const size_t expected = ExpectedMatchCount(spec); expected > 0 && !matches_an_expected) {
    return absl::StrCat("the pattern cannot match any text the examples expect it to find: it matches none of the ",
                        expected, expected == 1 ? " expected match" : " expected matches", " in full");
  }
  return "";
}

// Why a Lua candidate is trivially wrong; empty when it is not.
std::string LuaRefusal(const GenerationPoint& spec, const std::vector<Value>& got,
                       const std::vector<std::string>& errors) {
  if (spec.examples.size() < 2) return "";
  bool same_got = true;
  bool same_expected = true;
  for (size_t i = 0; i < spec.examples.size(); ++i) {
    if (!errors[i].empty()) return "";
    same_got = same_got && got[i] == got[0];
    same_expected = same_expected && spec.examples[i].expected == spec.examples[0].expected;
  }
  if (!same_got || same_expected) return "";
  return absl::StrCat("the function returns the same value, ", Quoted(got[0]), ", for all ", spec.examples.size(),
                      " test inputs while the tests expect different values: it ignores its input");
}

std::string FailureOf(const GenerationPoint& spec, size_t i, bool held_out, const Value& got, const std::string& error) {
  const Example& e = spec.examples[i];
  const char* what = spec.kind == ArtifactKind::kRe2Pattern ? "example " : "test ";
  if (held_out) {
    return absl::StrCat("held-out ", what, i + 1,
                        " (its input, expected value and result are not shown to the model: the code must do what "
                        "the task says, not only what the shown examples show)");
  }
  return absl::StrCat(what, i + 1, " (input ", JsonOrPlaceholder(e.input), "): expected ", JsonOrPlaceholder(e.expected),
                      ", ", error.empty() ? absl::StrCat("got ", JsonOrPlaceholder(got)) : absl::StrCat("error: ", error));
}

}  // namespace

absl::StatusOr<Validation> ValidateArtifact(const GenerationPoint& spec, const ArtifactCode& code,
                                            LuaArtifactRunner* lua_runner, const sandbox::Limits& limits) {
  Validation v;
  Array tests;
  std::string compile_error;
  std::string refusal;
  std::vector<Value> got(spec.examples.size());
  std::vector<std::string> errors(spec.examples.size());
  if (code.kind != spec.kind) {
    compile_error = absl::StrCat("the artifact is a ", KindName(code.kind), " but the point asks for a ",
                                 KindName(spec.kind));
  } else if (code.kind == ArtifactKind::kRe2Pattern) {
    absl::StatusOr<sandbox::RegexOptions> options = ParseRe2Options(code.options_json);
    absl::StatusOr<sandbox::Re2Matcher> re = options.ok() ? sandbox::Re2Matcher::Compile(code.source, *options)
                                                          : absl::StatusOr<sandbox::Re2Matcher>(options.status());
    if (!re.ok()) {
      compile_error = std::string(re.status().message());
    } else {
      for (size_t i = 0; i < spec.examples.size(); ++i) {
        Array matches;
        for (std::string& s : re->FindAll(spec.examples[i].input.as_string())) matches.push_back(Value::String(std::move(s)));
        got[i] = Value::FromArray(std::move(matches));
      }
      refusal = Re2Refusal(spec, *re, got);
    }
  } else {
    std::vector<Value> inputs;
    for (const Example& e : spec.examples) inputs.push_back(e.input);
    absl::StatusOr<std::vector<sandbox::CallResult>> results =
        lua_runner->Run(code.source, spec.name, inputs, limits, std::nullopt);
    if (!results.ok()) {
      if (!absl::IsInvalidArgument(results.status())) return results.status();
      compile_error = std::string(results.status().message());
    } else {
      for (size_t i = 0; i < results->size() && i < got.size(); ++i) {
        if ((*results)[i].status.ok()) got[i] = (*results)[i].value;
        else errors[i] = std::string((*results)[i].status.message());
      }
      refusal = LuaRefusal(spec, got, errors);
    }
  }
  const std::vector<bool> held_out = HeldOutExamples(spec);
  v.passed = refusal.empty();
  std::string first_shown_failure;
  std::string first_held_out_failure;
  for (size_t i = 0; i < spec.examples.size(); ++i) {
    const Example& e = spec.examples[i];
    if (!compile_error.empty()) errors[i] = compile_error;
    const bool passed = errors[i].empty() && got[i] == e.expected;
    Map t;
    t["input"] = e.input;
    t["expected"] = e.expected;
    t["got"] = errors[i].empty() ? got[i] : Value::Nil();
    t["held_out"] = Value::Bool(held_out[i]);
    t["passed"] = Value::Bool(passed);
    if (!errors[i].empty()) t["error"] = Value::String(errors[i]);
    tests.push_back(Value::FromMap(std::move(t)));
    if (passed) continue;
    v.passed = false;
    std::string& first = held_out[i] ? first_held_out_failure : first_shown_failure;
    if (first.empty()) first = FailureOf(spec, i, held_out[i], got[i], errors[i]);
  }
  if (!refusal.empty()) {
    v.refused = true;
    // The failing example the model was shown, if any, says more about what to change.
    v.first_failure = absl::StrCat("refused as trivially wrong: ", refusal,
                                   first_shown_failure.empty() ? "" : "; it fails ", first_shown_failure);
  } else if (!v.passed) {
    // A failure the model was shown is the more useful one to quote back to it.
    v.first_failure = first_shown_failure.empty() ? first_held_out_failure : first_shown_failure;
  }
  if (v.passed && spec.kind == ArtifactKind::kRe2Pattern && ExpectedMatchCount(spec) == 0) {
    v.review_reason =
        "no example expects a match, so passing them shows nothing about what the pattern finds (a pattern that "
        "matches nothing passes too): the auto review policy does not approve it, a person must review it; add an "
        "example that expects a match to let the policy decide";
  }
  v.auto_approvable = v.passed && v.review_reason.empty();

  Map report;
  report["passed"] = Value::Bool(v.passed);
  report["tests"] = Value::FromArray(std::move(tests));
  if (v.refused) report["refused"] = Value::String(refusal);
  if (!v.review_reason.empty()) report["review"] = Value::String(v.review_reason);
  absl::StatusOr<Canonical> c = CanonicalOf(Value::FromMap(std::move(report)));
  if (!c.ok()) {
    // A result that is not JSON (invalid UTF-8 from the code) cannot be reported verbatim.
    v.passed = false;
    v.auto_approvable = false;
    if (v.first_failure.empty()) v.first_failure = absl::StrCat("a result is not JSON: ", c.status().message());
    v.report_json = absl::StrCat("{\"error\":\"the report is not JSON\",\"passed\":false}");
  } else {
    v.report_json = c->json;
  }
  return v;
}

}  // namespace rote::orchestrator::engine
