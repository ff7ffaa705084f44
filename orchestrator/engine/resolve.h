// The short forms of names (names.h), resolved against the store to the one resource they
// stand for:
//
//   a digest prefix (8 to 63 lowercase hex digits) names the one artifact or blueprint whose
//   digest starts with it: NOT_FOUND when none does, INVALID_ARGUMENT listing the candidates
//   (at most kMaxListedCandidates, and how many more) when several do;
//   a bare point name names the key "{blueprint}/{point}" of the one registered blueprint
//   (any version) that declares a point of that name: NOT_FOUND when none does,
//   INVALID_ARGUMENT listing the candidate keys when several blueprints do.
//
// Canonical names pass through unchanged, so every caller can resolve whatever it is given.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "orchestrator/engine/names.h"
#include "store/store.h"

namespace rote::orchestrator::engine {

// The most candidates an ambiguity error names.
inline constexpr int kMaxListedCandidates = 10;

// ParseArtifactName, then a digest prefix to the digest (`digest` set) and a bare point name in
// artifacts/{point}/revisions/{n} to its key.
absl::StatusOr<ArtifactName> ResolveArtifactName(store::Store* store, std::string_view name);

// ParseBlueprintName, then a digest prefix to the digest. An id that is both a display name
// and a digest prefix is the display name when a blueprint of that name is stored, else the
// prefix.
absl::StatusOr<BlueprintName> ResolveBlueprintName(store::Store* store, std::string_view name);

// A digest where a request field takes one ("sha256:<hex>"): the whole digest or an
// unambiguous prefix of at least kMinDigestPrefixHex hex digits of a stored artifact. `field`
// names the request field in errors.
absl::StatusOr<std::string> ResolveArtifactDigest(store::Store* store, std::string_view digest,
                                                  std::string_view field);

// A generation point key "{blueprint}/{point}" (checked as CheckGenerationPointKey does, not
// looked up), or a bare point name resolved to its key. `field` names the request field.
absl::StatusOr<std::string> ResolveGenerationPointKey(store::Store* store, std::string_view key,
                                                      std::string_view field);

}  // namespace rote::orchestrator::engine
