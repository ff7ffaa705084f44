// Resource names of the API (AIP-122) and how user input appears in error messages.
//
// Every resource has one canonical name, and the parsers here accept only that spelling and
// the short forms below: no surrounding or inner spaces, no signs, no leading zeros, no
// alternative digest forms, no missing collection prefix. Anything else is INVALID_ARGUMENT.
//
//   runs/{id}                                    id: 1, 2, ... in decimal, no leading zeros
//   blueprints/{digest hex}                      64 lowercase hex digits
//   blueprints/{display name}                    [a-z][a-z0-9_]*, at most 64 (the newest version)
//   artifacts/{digest hex}                       64 lowercase hex digits
//   artifacts/{point key}/revisions/{n}          n: 1, 2, ... in decimal, no leading zeros
//   {point key} = {blueprint}/{point}            both [a-z][a-z0-9_]*, or _adhoc/{point}
//
// Short forms, which resolve.h turns into the canonical name against the store (or refuses as
// ambiguous): a digest prefix of kMinDigestPrefixHex to 63 lowercase hex digits in place of the
// digest hex, and a bare point name in place of a point key.
//
// Error messages quote what the caller sent through QuoteInput only, so a message stays
// bounded (gRPC carries it in metadata, which has a size limit) whatever the input's size.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace rote::orchestrator::engine {

// The fewest hex digits a digest prefix has.
inline constexpr size_t kMinDigestPrefixHex = 8;

// The most bytes of one piece of user input an error message quotes.
inline constexpr size_t kQuotedInputBytes = 80;

// `text` in single quotes for an error message: control characters and quotes escaped, cut
// after kQuotedInputBytes bytes (at a UTF-8 boundary) with "... (N bytes)" appended.
std::string QuoteInput(std::string_view text);

// "sha256:<hex>" for a digest id (64 lowercase hex digits), else nullopt.
std::optional<std::string> DigestFromId(std::string_view id);

// runs/{id} -> id.
absl::StatusOr<int64_t> ParseRunName(std::string_view name);

// blueprints/{digest hex}, blueprints/{display name} or blueprints/{digest prefix}. An id that
// is both a display name and a digest prefix (e.g. "deadbeef") sets both.
struct BlueprintName {
  std::string digest;         // "sha256:<hex>" when named by digest
  std::string display_name;   // otherwise
  std::string digest_prefix;  // "sha256:<8 to 63 hex digits>"
};
absl::StatusOr<BlueprintName> ParseBlueprintName(std::string_view name);

// artifacts/{digest hex}, artifacts/{digest prefix}, artifacts/{point key}/revisions/{n} or
// artifacts/{point name}/revisions/{n}.
struct ArtifactName {
  std::string digest;         // "sha256:<hex>" when named by digest
  std::string digest_prefix;  // "sha256:<8 to 63 hex digits>" when named by a prefix
  std::string key;            // otherwise the generation point key (or a bare point name), and
  int64_t revision = 0;
};
absl::StatusOr<ArtifactName> ParseArtifactName(std::string_view name);

// A generation point key, "{blueprint}/{point}" (or "_adhoc/{point}"); `field` names the
// request field in the error.
absl::Status CheckGenerationPointKey(std::string_view key, std::string_view field);

}  // namespace rote::orchestrator::engine
