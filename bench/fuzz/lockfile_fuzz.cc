// Lockfiles (orchestrator/engine/lockfile.h): read from files a user commits beside a blueprint
// and from `rote blueprints register`. ParseLockfile must answer with a status naming a line;
// what it accepts, FormatLockfile must write so that it reads back the same. Each entry's match
// options go through what registration does with them: normalized once, they stay as they are.
#include <cstdint>

#include "bench/fuzz/fuzz_util.h"
#include "orchestrator/engine/artifact.h"
#include "orchestrator/engine/lockfile.h"

namespace {

using rote::orchestrator::engine::ArtifactKind;
using rote::orchestrator::engine::Lockfile;

bool SameEntries(const Lockfile& a, const Lockfile& b) {
  if (a.blueprint != b.blueprint || a.version != b.version || a.entries.size() != b.entries.size()) return false;
  for (size_t i = 0; i < a.entries.size(); ++i) {
    const auto& x = a.entries[i];
    const auto& y = b.entries[i];
    // Match options belong to patterns; FormatLockfile writes them for patterns only.
    const bool options_kept = x.kind == ArtifactKind::kRe2Pattern;
    if (x.point != y.point || x.kind != y.kind || x.spec_digest != y.spec_digest ||
        x.artifact_digest != y.artifact_digest || x.source != y.source ||
        (options_kept && x.options_json != y.options_json)) {
      return false;
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rote::orchestrator::engine;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<Lockfile> lock = ParseLockfile(text, "fuzz.lock");
  if (!lock.ok()) {
    ROTE_FUZZ_CHECK(lock.status().message().rfind("fuzz.lock:", 0) == 0);
    return 0;
  }
  const std::string written = FormatLockfile(*lock);
  absl::StatusOr<Lockfile> back = ParseLockfile(written, "written.lock");
  ROTE_FUZZ_CHECK(back.ok());
  ROTE_FUZZ_CHECK(SameEntries(*lock, *back));
  ROTE_FUZZ_CHECK(FormatLockfile(*back) == written);

  for (const LockEntry& e : lock->entries) {
    absl::StatusOr<std::string> options = NormalizeOptions(e.kind, e.options_json);
    if (!options.ok()) continue;
    absl::StatusOr<std::string> again = NormalizeOptions(e.kind, *options);
    ROTE_FUZZ_CHECK(again.ok() && *again == *options);
    if (e.kind == ArtifactKind::kRe2Pattern) ROTE_FUZZ_CHECK(ParseRe2Options(*options).ok());
    (void)ArtifactDigest(ArtifactCode{e.kind, e.source, *options});
  }
  return 0;
}
