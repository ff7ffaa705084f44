#include "orchestrator/engine/artifact.h"

#include "absl/strings/str_cat.h"
#include "orchestrator/engine/canonical.h"
#include "orchestrator/engine/names.h"

namespace rote::orchestrator::engine {

using sandbox::Map;
using sandbox::Value;

absl::StatusOr<sandbox::RegexOptions> ParseRe2Options(std::string_view json) {
  if (json.empty()) return sandbox::RegexOptions{};
  absl::StatusOr<sandbox::RegexOptions> o = sandbox::RegexOptions::FromJson(json);
  if (!o.ok()) return absl::InvalidArgumentError(absl::StrCat("RE2 options: ", o.status().message()));
  return o;
}

absl::StatusOr<std::string> NormalizeOptions(ArtifactKind kind, std::string_view json) {
  if (kind == ArtifactKind::kLuaFunction) {
    if (json.empty() || json == "{}") return std::string("{}");
    return absl::InvalidArgumentError("Lua function artifacts take no options");
  }
  const std::string defaults = sandbox::RegexOptions{}.CanonicalJson();
  if (json.empty()) return defaults;
  absl::StatusOr<Value> given = sandbox::ParseJson(json);
  if (!given.ok()) return absl::InvalidArgumentError(absl::StrCat("RE2 options: ", given.status().message()));
  if (!given->is_map()) return absl::InvalidArgumentError("RE2 options must be a JSON object");
  absl::StatusOr<Value> merged = sandbox::ParseJson(defaults);
  if (!merged.ok()) return merged.status();
  for (const auto& [key, value] : given->as_map()) {
    if (!merged->as_map().count(key)) {
      return absl::InvalidArgumentError(absl::StrCat("unknown RE2 option ", QuoteInput(key), " (known: ", defaults, ")"));
    }
    merged->as_map()[key] = value;
  }
  absl::StatusOr<std::string> text = sandbox::CanonicalJson(*merged);
  if (!text.ok()) return text.status();
  absl::StatusOr<sandbox::RegexOptions> o = ParseRe2Options(*text);
  if (!o.ok()) return o.status();
  return o->CanonicalJson();
}

absl::StatusOr<std::string> ArtifactDigest(const ArtifactCode& code) {
  absl::StatusOr<Value> options = sandbox::ParseJson(code.options_json.empty() ? "{}" : code.options_json);
  if (!options.ok()) return options.status();
  Map m;
  m["bytes"] = Value::String(code.source);
  m["kind"] = Value::String(std::string(KindName(code.kind)));
  m["options"] = *std::move(options);
  absl::StatusOr<Canonical> c = CanonicalOf(Value::FromMap(std::move(m)));
  if (!c.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("artifact source has no canonical form: ",
                                                   c.status().message()));
  }
  return c->digest;
}

absl::StatusOr<ArtifactCode> VerifiedCode(const store::ArtifactRecord& record) {
  std::optional<ArtifactKind> kind = ParseKind(record.kind);
  if (!kind) {
    return absl::DataLossError(absl::StrCat("artifact ", record.digest, " has unknown kind '",
                                            record.kind, "'"));
  }
  ArtifactCode code{*kind, record.source, record.options_json};
  absl::StatusOr<std::string> digest = ArtifactDigest(code);
  if (!digest.ok() || *digest != record.digest) {
    return absl::DataLossError(absl::StrCat(
        "artifact ", record.digest, " (", record.generation_point,
        ") no longer matches its digest: its stored source or options were altered",
        digest.ok() ? absl::StrCat(" (they now hash to ", *digest, ")") : std::string()));
  }
  return code;
}

}  // namespace rote::orchestrator::engine
