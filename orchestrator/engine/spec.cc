#include "orchestrator/engine/spec.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "orchestrator/engine/canonical.h"
#include "orchestrator/engine/names.h"
#include "store/digest.h"

namespace rote::orchestrator::engine {

using sandbox::Array;
using sandbox::Map;
using sandbox::Value;

const char* KindName(ArtifactKind kind) {
  switch (kind) {
    case ArtifactKind::kLuaFunction: return "lua_function";
    case ArtifactKind::kRe2Pattern: return "re2_pattern";
  }
  return "unknown";
}

std::optional<ArtifactKind> ParseKind(std::string_view name) {
  if (name == "lua_function") return ArtifactKind::kLuaFunction;
  if (name == "re2_pattern") return ArtifactKind::kRe2Pattern;
  return std::nullopt;
}

bool IsValidPointName(std::string_view name) {
  if (name.empty() || name.size() > 64 || !(name[0] >= 'a' && name[0] <= 'z')) return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  }
  return true;
}

namespace {

Value ExampleValue(ArtifactKind kind, const Example& e) {
  Map m;
  m["input"] = e.input;
  m[kind == ArtifactKind::kRe2Pattern ? "matches" : "output"] = e.expected;
  if (e.held_out) m["held_out"] = Value::Bool(true);
  return Value::FromMap(std::move(m));
}

absl::Status CheckExamples(const GenerationPoint& p) {
  const char* what = p.kind == ArtifactKind::kRe2Pattern ? "example" : "test";
  if (p.examples.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "generation point '", p.name, "' has no ", what,
        "s: generated code is validated against them, so give at least one"));
  }
  for (size_t i = 0; i < p.examples.size(); ++i) {
    const Example& e = p.examples[i];
    if (p.kind == ArtifactKind::kRe2Pattern) {
      if (!e.input.is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "example ", i + 1, " of pattern '", p.name, "': the text must be a string, got ",
            sandbox::KindName(e.input.kind()), " (write { \"text\", { \"match\", ... } })"));
      }
      if (!e.expected.is_array()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "example ", i + 1, " of pattern '", p.name,
            "': the expected matches must be a list of strings, got ",
            sandbox::KindName(e.expected.kind())));
      }
      for (const Value& m : e.expected.as_array()) {
        if (!m.is_string()) {
          return absl::InvalidArgumentError(absl::StrCat(
              "example ", i + 1, " of pattern '", p.name,
              "': every expected match must be a string, got ", sandbox::KindName(m.kind())));
        }
      }
    }
    if (absl::StatusOr<Canonical> c = CanonicalOf(ExampleValue(p.kind, e)); !c.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(what, " ", i + 1, " of '", p.name,
                                                     "' has no JSON form: ", c.status().message()));
    }
  }
  bool any_shown = false;
  for (const Example& e : p.examples) any_shown = any_shown || !e.held_out;
  if (!any_shown) {
    return absl::InvalidArgumentError(absl::StrCat(
        "every ", what, " of '", p.name, "' is held out: the model must be shown at least one"));
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<std::string> GenerationPoint::ExamplesJson() const {
  std::vector<std::string> out;
  out.reserve(examples.size());
  for (const Example& e : examples) {
    absl::StatusOr<Canonical> c = CanonicalOf(ExampleValue(kind, e));
    out.push_back(c.ok() ? c->json : std::string("null"));
  }
  return out;
}

std::vector<bool> HeldOutExamples(const GenerationPoint& p) {
  std::vector<bool> held(p.examples.size(), false);
  bool marked = false;
  for (size_t i = 0; i < p.examples.size(); ++i) {
    held[i] = p.examples[i].held_out;
    marked = marked || held[i];
  }
  if (marked || p.examples.size() < kHeldOutMinExamples) return held;
  const std::vector<std::string> json = p.ExamplesJson();
  std::vector<std::pair<std::string, size_t>> order;
  order.reserve(json.size());
  for (size_t i = 0; i < json.size(); ++i) order.emplace_back(store::Sha256Digest(json[i]), i);
  std::sort(order.begin(), order.end());
  for (size_t k = 0; k < p.examples.size() / 4; ++k) held[order[k].second] = true;
  return held;
}

store::GenerationSpecRecord GenerationPoint::ToRecord() const {
  return store::GenerationSpecRecord{digest, std::string(KindName(kind)), name, canonical};
}

absl::StatusOr<std::string> CanonicalSpec(const GenerationPoint& p) {
  Array examples;
  for (const Example& e : p.examples) examples.push_back(ExampleValue(p.kind, e));
  Map m;
  m["examples"] = Value::FromArray(std::move(examples));
  m["kind"] = Value::String(std::string(KindName(p.kind)));
  m["name"] = Value::String(p.name);
  m["signature"] = Value::String(p.signature);
  m["task"] = Value::String(p.task);
  return sandbox::CanonicalJson(Value::FromMap(std::move(m)));
}

absl::Status Seal(GenerationPoint* p) {
  if (!IsValidPointName(p->name)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "generation point name ", QuoteInput(p->name),
        " is not valid: use lowercase letters, digits and '_', starting with a letter (at most 64)"));
  }
  if (p->task.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "generation point '", p->name, "' has no task: say in plain words what the code must do"));
  }
  if (p->kind == ArtifactKind::kRe2Pattern && !p->signature.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pattern '", p->name, "' has a signature; only bp:lua points take one"));
  }
  if (absl::Status s = CheckExamples(*p); !s.ok()) return s;
  absl::StatusOr<std::string> canonical = CanonicalSpec(*p);
  if (!canonical.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("generation point '", p->name,
                                                   "' has no canonical form: ", canonical.status().message()));
  }
  p->canonical = *std::move(canonical);
  p->digest = store::Sha256Digest(p->canonical);
  return absl::OkStatus();
}

absl::StatusOr<GenerationPoint> PointFromRecord(const store::GenerationSpecRecord& record) {
  auto bad = [&](std::string_view why) {
    return absl::DataLossError(absl::StrCat("stored spec ", record.digest, " is unreadable: ",
                                            std::string(why)));
  };
  if (store::Sha256Digest(record.canonical) != record.digest) return bad("its digest does not match");
  absl::StatusOr<Value> v = sandbox::ParseJson(record.canonical);
  if (!v.ok()) return bad(std::string(v.status().message()));
  if (!v->is_map()) return bad("not an object");
  const Map& m = v->as_map();
  auto str = [&](const char* key) -> const std::string* {
    auto it = m.find(key);
    return it != m.end() && it->second.is_string() ? &it->second.as_string() : nullptr;
  };
  const std::string* kind = str("kind");
  const std::string* name = str("name");
  const std::string* task = str("task");
  const std::string* signature = str("signature");
  auto ex = m.find("examples");
  if (!kind || !name || !task || !signature || ex == m.end() || !ex->second.is_array()) {
    return bad("missing fields");
  }
  GenerationPoint p;
  std::optional<ArtifactKind> k = ParseKind(*kind);
  if (!k) return bad("unknown kind");
  p.kind = *k;
  p.name = *name;
  p.task = *task;
  p.signature = *signature;
  const char* expected_key = p.kind == ArtifactKind::kRe2Pattern ? "matches" : "output";
  for (const Value& e : ex->second.as_array()) {
    if (!e.is_map()) return bad("an example is not an object");
    auto in = e.as_map().find("input");
    auto out = e.as_map().find(expected_key);
    if (in == e.as_map().end() || out == e.as_map().end()) return bad("an example lacks fields");
    auto held = e.as_map().find("held_out");
    if (held != e.as_map().end() && !held->second.is_bool()) return bad("an example's held_out is not a boolean");
    p.examples.push_back(Example{in->second, out->second, held != e.as_map().end() && held->second.as_bool()});
  }
  p.canonical = record.canonical;
  p.digest = record.digest;
  return p;
}

}  // namespace rote::orchestrator::engine
