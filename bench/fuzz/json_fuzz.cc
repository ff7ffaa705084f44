// Run inputs and every other JSON a client sends: sandbox::ParseJson and the canonical form that
// digests, journals and replay compare (orchestrator/engine/canonical.h). What parses must have
// one canonical form, that form must parse back to the same value and be its own canonical form,
// and the value must survive the worker wire encoding unchanged.
#include <cstdint>

#include "bench/fuzz/fuzz_util.h"
#include "orchestrator/engine/canonical.h"
#include "sandbox/worker_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rote;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<sandbox::Value> value = sandbox::ParseJson(text);
  absl::StatusOr<orchestrator::engine::Canonical> canonical = orchestrator::engine::CanonicalizeJson(text);
  ROTE_FUZZ_CHECK(value.ok() == canonical.ok());
  if (!canonical.ok()) return 0;

  absl::StatusOr<sandbox::Value> reparsed = sandbox::ParseJson(canonical->json);
  ROTE_FUZZ_CHECK(reparsed.ok());
  ROTE_FUZZ_CHECK(*reparsed == *value);
  absl::StatusOr<orchestrator::engine::Canonical> again = orchestrator::engine::CanonicalizeJson(canonical->json);
  ROTE_FUZZ_CHECK(again.ok());
  ROTE_FUZZ_CHECK(again->json == canonical->json);
  ROTE_FUZZ_CHECK(again->digest == canonical->digest);

  std::string wire;
  sandbox::protocol::EncodeValue(*value, wire);
  absl::StatusOr<sandbox::Value> decoded = sandbox::protocol::DecodeValue(wire);
  ROTE_FUZZ_CHECK(decoded.ok());
  ROTE_FUZZ_CHECK(*decoded == *value);
  return 0;
}
