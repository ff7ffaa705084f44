#include "orchestrator/engine/regex_artifact.h"

#include <vector>

#include "absl/strings/str_cat.h"

namespace rote::orchestrator::engine {

using sandbox::Array;
using sandbox::Map;
using sandbox::Value;

std::string Re2ProfileJson() {
  return absl::StrCat("{\"default_options\":", sandbox::RegexOptions{}.CanonicalJson(),
                      ",\"library\":\"re2 2022-06-01\",\"matcher\":\"rote.sandbox.Re2Matcher/1\"}");
}

absl::StatusOr<std::unique_ptr<RegexArtifact>> RegexArtifact::Compile(std::string_view pattern,
                                                                      const sandbox::RegexOptions& options) {
  absl::StatusOr<sandbox::Re2Matcher> m = sandbox::Re2Matcher::Compile(pattern, options);
  if (!m.ok()) return m.status();
  return std::unique_ptr<RegexArtifact>(new RegexArtifact(*std::move(m)));
}

Value RegexArtifact::FindAll(std::string_view text) const {
  Array out;
  for (std::string& s : matcher_.FindAll(text)) out.push_back(Value::String(std::move(s)));
  return Value::FromArray(std::move(out));
}

Value RegexArtifact::Captures(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> spans;
  matcher_.ForEachMatch(text, [&](size_t off, size_t len) { spans.emplace_back(off, len); });
  Value named = matcher_.NamedCaptures(text);  // one record per match, same order
  Array out;
  for (size_t i = 0; i < spans.size(); ++i) {
    Map rec;
    Map groups;
    if (named.is_array() && i < named.as_array().size() && named.as_array()[i].is_map()) {
      for (const auto& [k, v] : named.as_array()[i].as_map()) {
        if (!v.is_nil()) groups[k] = v;
      }
    }
    rec["match"] = Value::String(std::string(text.substr(spans[i].first, spans[i].second)));
    rec["named"] = Value::FromMap(std::move(groups));
    rec["offset"] = Value::Int(static_cast<int64_t>(spans[i].first));
    out.push_back(Value::FromMap(std::move(rec)));
  }
  return Value::FromArray(std::move(out));
}

Value RegexArtifact::Match(std::string_view text) const {
  Value all = Captures(text);
  if (all.as_array().empty()) return Value::Nil();
  return all.as_array()[0];
}

}  // namespace rote::orchestrator::engine
