// Blueprint declarations: a Lua chunk a user registers, loaded in the deterministic sandbox
// (orchestrator/engine/blueprint_runtime.h). Loading must answer with a status, never crash,
// and within its limits; every generation point it declares must be sealed, and its stored
// form must read back as the same point.
#include <cstdint>

#include "bench/fuzz/fuzz_util.h"
#include "orchestrator/engine/blueprint_runtime.h"
#include "store/digest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rote::orchestrator::engine;
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  // Small limits keep one input to milliseconds; the checks are the same at any size.
  rote::sandbox::Limits limits;
  limits.max_instructions = 2'000'000;
  limits.max_memory_bytes = 16ull << 20;
  limits.max_output_bytes = 64 << 10;
  absl::StatusOr<BlueprintDecl> decl = LoadBlueprint(source, "fuzz.lua", limits);
  if (!decl.ok()) {
    ROTE_FUZZ_CHECK(absl::IsInvalidArgument(decl.status()));
    return 0;
  }
  ROTE_FUZZ_CHECK(IsValidPointName(decl->name));
  for (const GenerationPoint& p : decl->points) {
    ROTE_FUZZ_CHECK(IsValidPointName(p.name));
    ROTE_FUZZ_CHECK(!p.canonical.empty());
    ROTE_FUZZ_CHECK(p.digest == rote::store::Sha256Digest(p.canonical));
    absl::StatusOr<std::string> canonical = CanonicalSpec(p);
    ROTE_FUZZ_CHECK(canonical.ok() && *canonical == p.canonical);
    absl::StatusOr<GenerationPoint> back = PointFromRecord(p.ToRecord());
    ROTE_FUZZ_CHECK(back.ok());
    ROTE_FUZZ_CHECK(back->name == p.name && back->kind == p.kind && back->task == p.task &&
                    back->signature == p.signature && back->digest == p.digest);
    ROTE_FUZZ_CHECK(back->examples.size() == p.examples.size());
    for (size_t i = 0; i < p.examples.size(); ++i) {
      ROTE_FUZZ_CHECK(back->examples[i].input == p.examples[i].input);
      ROTE_FUZZ_CHECK(back->examples[i].expected == p.examples[i].expected);
    }
  }
  return 0;
}
