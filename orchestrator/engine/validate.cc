#include "orchestrator/engine/validate.h"

#include "absl/strings/str_cat.h"
#include "orchestrator/engine/canonical.h"
#include "orchestrator/engine/regex_artifact.h"

namespace rote::orchestrator::engine {

using sandbox::Array;
using sandbox::Map;
using sandbox::Value;

namespace {

std::string JsonOrPlaceholder(const Value& v) {
  absl::StatusOr<std::string> j = sandbox::CanonicalJson(v);
  return j.ok() ? *j : std::string("(not JSON)");
}

}  // namespace

absl::StatusOr<Validation> ValidateArtifact(const GenerationPoint& spec, const ArtifactCode& code,
                                            LuaArtifactRunner* lua_runner, const sandbox::Limits& limits) {
  Validation v;
  Array tests;
  std::string compile_error;
  std::vector<Value> got(spec.examples.size());
  std::vector<std::string> errors(spec.examples.size());
  if (code.kind != spec.kind) {
    compile_error = absl::StrCat("the artifact is a ", KindName(code.kind), " but the point asks for a ",
                                 KindName(spec.kind));
  } else if (code.kind == ArtifactKind::kRe2Pattern) {
    absl::StatusOr<sandbox::RegexOptions> options = ParseRe2Options(code.options_json);
    absl::StatusOr<std::unique_ptr<RegexArtifact>> re =
        options.ok() ? RegexArtifact::Compile(code.source, *options)
                     : absl::StatusOr<std::unique_ptr<RegexArtifact>>(options.status());
    if (!re.ok()) {
      compile_error = std::string(re.status().message());
    } else {
      for (size_t i = 0; i < spec.examples.size(); ++i) got[i] = (*re)->FindAll(spec.examples[i].input.as_string());
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
    }
  }
  v.passed = true;
  for (size_t i = 0; i < spec.examples.size(); ++i) {
    const Example& e = spec.examples[i];
    if (!compile_error.empty()) errors[i] = compile_error;
    const bool passed = errors[i].empty() && got[i] == e.expected;
    Map t;
    t["input"] = e.input;
    t["expected"] = e.expected;
    t["got"] = errors[i].empty() ? got[i] : Value::Nil();
    t["passed"] = Value::Bool(passed);
    if (!errors[i].empty()) t["error"] = Value::String(errors[i]);
    tests.push_back(Value::FromMap(std::move(t)));
    if (!passed && v.passed) {
      v.passed = false;
      v.first_failure = absl::StrCat(
          spec.kind == ArtifactKind::kRe2Pattern ? "example " : "test ", i + 1, " (input ",
          JsonOrPlaceholder(e.input), "): expected ", JsonOrPlaceholder(e.expected), ", ",
          errors[i].empty() ? absl::StrCat("got ", JsonOrPlaceholder(got[i])) : absl::StrCat("error: ", errors[i]));
    }
  }
  Map report;
  report["passed"] = Value::Bool(v.passed);
  report["tests"] = Value::FromArray(std::move(tests));
  absl::StatusOr<Canonical> c = CanonicalOf(Value::FromMap(std::move(report)));
  if (!c.ok()) {
    // A result that is not JSON (invalid UTF-8 from the code) cannot be reported verbatim.
    v.passed = false;
    if (v.first_failure.empty()) v.first_failure = absl::StrCat("a result is not JSON: ", c.status().message());
    v.report_json = absl::StrCat("{\"error\":\"the report is not JSON\",\"passed\":false}");
  } else {
    v.report_json = c->json;
  }
  return v;
}

}  // namespace rote::orchestrator::engine
