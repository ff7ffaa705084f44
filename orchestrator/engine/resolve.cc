#include "orchestrator/engine/resolve.h"

#include <functional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "orchestrator/engine/spec.h"

namespace rote::orchestrator::engine {
namespace {

// "a, b, c" or "a, b, ... and N more".
std::string CandidateList(const store::Store::Matches& m, const std::function<std::string(const std::string&)>& show) {
  std::vector<std::string> shown;
  for (const std::string& item : m.items) shown.push_back(show(item));
  std::string out = absl::StrJoin(shown, ", ");
  if (m.total > static_cast<int64_t>(m.items.size())) {
    absl::StrAppend(&out, ", and ", m.total - static_cast<int64_t>(m.items.size()), " more");
  }
  return out;
}

using FindByPrefix = absl::StatusOr<store::Store::Matches> (store::Store::*)(std::string_view, int);

// The one digest of `collection` starting with `prefix` ("sha256:<hex>"); `what` quotes the
// caller's spelling in errors.
absl::StatusOr<std::string> UniqueDigest(store::Store* store, FindByPrefix find, std::string_view collection,
                                         std::string_view prefix, std::string_view what) {
  absl::StatusOr<store::Store::Matches> m = (store->*find)(prefix, kMaxListedCandidates);
  if (!m.ok()) return m.status();
  const std::string_view hex = prefix.substr(7);
  if (m->total == 0 || m->items.empty()) {
    return absl::NotFoundError(absl::StrCat("no ", std::string(collection.substr(0, collection.size() - 1)), " has a digest starting with ",
                                            std::string(hex), " (", std::string(what), ")"));
  }
  if (m->total > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        std::string(what), " is ambiguous: ", m->total, " ", std::string(collection), " have a digest starting with ", std::string(hex), ": ",
        CandidateList(*m, [&](const std::string& d) { return absl::StrCat(std::string(collection), "/", d.substr(7)); }),
        "; give more hex digits"));
  }
  return std::move(m->items.front());
}

}  // namespace

absl::StatusOr<ArtifactName> ResolveArtifactName(store::Store* store, std::string_view name) {
  absl::StatusOr<ArtifactName> n = ParseArtifactName(name);
  if (!n.ok()) return n.status();
  if (!n->digest_prefix.empty()) {
    absl::StatusOr<std::string> digest =
        UniqueDigest(store, &store::Store::FindArtifactsByDigestPrefix, "artifacts", n->digest_prefix, QuoteInput(name));
    if (!digest.ok()) return digest.status();
    n->digest = *std::move(digest);
    n->digest_prefix.clear();
  } else if (n->digest.empty()) {
    absl::StatusOr<std::string> key = ResolveGenerationPointKey(store, n->key, QuoteInput(name));
    if (!key.ok()) return key.status();
    n->key = *std::move(key);
  }
  return n;
}

absl::StatusOr<BlueprintName> ResolveBlueprintName(store::Store* store, std::string_view name) {
  absl::StatusOr<BlueprintName> n = ParseBlueprintName(name);
  if (!n.ok() || n->digest_prefix.empty()) return n;
  if (!n->display_name.empty()) {
    absl::StatusOr<std::vector<store::BlueprintRecord>> named = store->FindBlueprintsByName(n->display_name);
    if (!named.ok()) return named.status();
    if (!named->empty()) {
      n->digest_prefix.clear();
      return n;
    }
  }
  absl::StatusOr<std::string> digest =
      UniqueDigest(store, &store::Store::FindBlueprintsByDigestPrefix, "blueprints", n->digest_prefix, QuoteInput(name));
  if (absl::IsNotFound(digest.status()) && !n->display_name.empty()) {
    return absl::NotFoundError(absl::StrCat("no blueprint is named '", n->display_name, "' or has a digest starting with it; register it with `rote blueprints register FILE.lua`"));
  }
  if (!digest.ok()) return digest.status();
  return BlueprintName{*std::move(digest), "", ""};
}

absl::StatusOr<std::string> ResolveArtifactDigest(store::Store* store, std::string_view digest, std::string_view field) {
  const std::string what = absl::StrCat(std::string(field), " ", QuoteInput(digest));
  std::string_view hex = digest.starts_with("sha256:") ? digest.substr(7) : std::string_view();
  bool hex_ok = !hex.empty() && hex.size() <= 64;
  for (char c : hex) hex_ok = hex_ok && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
  if (!hex_ok) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is not a digest; expected sha256: and 64 lowercase hex "
                                                   "digits, or a unique prefix of at least ", kMinDigestPrefixHex));
  }
  if (hex.size() < kMinDigestPrefixHex) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": a digest prefix needs at least ", kMinDigestPrefixHex,
                                                   " hex digits, '", std::string(hex), "' has ", hex.size()));
  }
  if (hex.size() == 64) return std::string(digest);
  return UniqueDigest(store, &store::Store::FindArtifactsByDigestPrefix, "artifacts", digest, what);
}

absl::StatusOr<std::string> ResolveGenerationPointKey(store::Store* store, std::string_view key, std::string_view field) {
  if (key.find('/') != std::string_view::npos || !IsValidPointName(key)) {
    if (absl::Status s = CheckGenerationPointKey(key, field); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(s.message(), ", or a point name that one registered blueprint declares"));
    }
    return std::string(key);
  }
  absl::StatusOr<store::Store::Matches> m = store->FindBlueprintNamesDeclaringPoint(key, kMaxListedCandidates);
  if (!m.ok()) return m.status();
  if (m->total == 0 || m->items.empty()) {
    return absl::NotFoundError(absl::StrCat(std::string(field), ": no registered blueprint declares a generation point named '",
                                            std::string(key), "'"));
  }
  if (m->total > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        std::string(field), ": point name '", std::string(key), "' is ambiguous: ", m->total, " registered blueprints declare it: ",
        CandidateList(*m, [&](const std::string& bp) { return absl::StrCat(bp, "/", std::string(key)); }),
        "; name one as {blueprint}/{point}"));
  }
  return absl::StrCat(m->items.front(), "/", std::string(key));
}

}  // namespace rote::orchestrator::engine
