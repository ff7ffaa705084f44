#include "orchestrator/engine/canonical.h"

#include "store/digest.h"

namespace rote::orchestrator::engine {

absl::StatusOr<Canonical> CanonicalOf(const sandbox::Value& value) {
  absl::StatusOr<std::string> json = sandbox::CanonicalJson(value);
  if (!json.ok()) return json.status();
  Canonical c;
  c.digest = store::Sha256Digest(*json);
  c.json = *std::move(json);
  return c;
}

absl::StatusOr<Canonical> CanonicalizeJson(std::string_view json) {
  absl::StatusOr<sandbox::Value> value = sandbox::ParseJson(json);
  if (!value.ok()) return value.status();
  return CanonicalOf(*value);
}

}  // namespace rote::orchestrator::engine
