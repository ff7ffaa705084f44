#include "orchestrator/engine/names.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "orchestrator/engine/spec.h"

namespace rote::orchestrator::engine {

namespace {

constexpr std::string_view kAdhocBlueprint = "_adhoc";

bool IsLowerHex(std::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// Length of the valid UTF-8 sequence at the start of `s`, or 0.
size_t Utf8SequenceLength(std::string_view s) {
  const auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char lead = b(0);
  size_t n = 0;
  if (lead < 0x80) return 1;
  if (lead >= 0xc2 && lead <= 0xdf) n = 2;
  else if (lead >= 0xe0 && lead <= 0xef) n = 3;
  else if (lead >= 0xf0 && lead <= 0xf4) n = 4;
  else return 0;
  if (s.size() < n) return 0;
  for (size_t i = 1; i < n; ++i) {
    if ((b(i) & 0xc0) != 0x80) return 0;
  }
  // Overlong forms, surrogates and code points above U+10FFFF.
  if ((lead == 0xe0 && b(1) < 0xa0) || (lead == 0xed && b(1) > 0x9f) || (lead == 0xf0 && b(1) < 0x90) ||
      (lead == 0xf4 && b(1) > 0x8f)) {
    return 0;
  }
  return n;
}

// A positive decimal integer in its one spelling: [1-9][0-9]*, within int64.
bool ParsePositive(std::string_view s, int64_t* out) {
  if (s.empty() || s.size() > 19 || s[0] < '1' || s[0] > '9') return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
  *out = static_cast<int64_t>(v);
  return true;
}

bool IsPointKey(std::string_view key) {
  const size_t slash = key.find('/');
  if (slash == std::string_view::npos) return false;
  std::string_view blueprint = key.substr(0, slash);
  return (blueprint == kAdhocBlueprint || IsValidPointName(blueprint)) && IsValidPointName(key.substr(slash + 1));
}

// "sha256:<id>" when `id` is a digest prefix (kMinDigestPrefixHex to 63 hex digits); empty
// when it is not hex at all or too long; INVALID_ARGUMENT when it is hex but too short to be one.
absl::StatusOr<std::string> DigestPrefixFromId(std::string_view id, std::string_view name) {
  if (id.empty() || id.size() >= 64 || !IsLowerHex(id)) return std::string();
  if (id.size() < kMinDigestPrefixHex) {
    return absl::InvalidArgumentError(absl::StrCat(QuoteInput(name), ": a digest prefix needs at least ",
                                                   kMinDigestPrefixHex, " hex digits, '", std::string(id), "' has ",
                                                   id.size()));
  }
  return absl::StrCat("sha256:", std::string(id));
}

}  // namespace

std::string QuoteInput(std::string_view text) {
  std::string out = "'";
  size_t i = 0;
  while (i < text.size() && i < kQuotedInputBytes) {
    const size_t n = Utf8SequenceLength(text.substr(i));
    if (n > 1 && i + n > kQuotedInputBytes) break;  // never cut a character in two
    const char c = text[i];
    if (n > 1) {
      out.append(text.substr(i, n));
      i += n;
      continue;
    }
    switch (c) {
      case '\'': out += "\\'"; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (n == 0 || static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          static const char kHex[] = "0123456789abcdef";
          out += "\\x";
          out.push_back(kHex[(static_cast<unsigned char>(c) >> 4) & 0xf]);
          out.push_back(kHex[c & 0xf]);
        } else {
          out.push_back(c);
        }
    }
    ++i;
  }
  out += "'";
  if (i < text.size()) absl::StrAppend(&out, "... (", text.size(), " bytes)");
  return out;
}

std::optional<std::string> DigestFromId(std::string_view id) {
  if (id.size() != 64 || !IsLowerHex(id)) return std::nullopt;
  return absl::StrCat("sha256:", std::string(id));
}

absl::StatusOr<int64_t> ParseRunName(std::string_view name) {
  int64_t id = 0;
  if (!name.starts_with("runs/") || !ParsePositive(name.substr(5), &id)) {
    return absl::InvalidArgumentError(absl::StrCat(QuoteInput(name),
                                                   " is not a run name; expected runs/{id}, e.g. runs/1"));
  }
  return id;
}

absl::StatusOr<BlueprintName> ParseBlueprintName(std::string_view name) {
  BlueprintName out;
  if (name.starts_with("blueprints/")) {
    std::string_view id = name.substr(11);
    if (std::optional<std::string> digest = DigestFromId(id)) {
      out.digest = *std::move(digest);
      return out;
    }
    if (IsValidPointName(id)) out.display_name = std::string(id);
    // A short hex id that is a valid display name stays a name: it is not refused as a prefix.
    absl::StatusOr<std::string> prefix = DigestPrefixFromId(id, name);
    if (!prefix.ok() && out.display_name.empty()) return prefix.status();
    if (prefix.ok()) out.digest_prefix = *std::move(prefix);
    if (!out.display_name.empty() || !out.digest_prefix.empty()) return out;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      QuoteInput(name), " is not a blueprint name; expected blueprints/{digest hex} (64 lowercase hex digits, "
      "or a unique prefix of at least ", kMinDigestPrefixHex,
      ") or blueprints/{name} ([a-z][a-z0-9_]*), e.g. blueprints/invoice_totals"));
}

absl::StatusOr<ArtifactName> ParseArtifactName(std::string_view name) {
  ArtifactName out;
  if (name.starts_with("artifacts/")) {
    std::string_view id = name.substr(10);
    if (std::optional<std::string> digest = DigestFromId(id)) {
      out.digest = *std::move(digest);
      return out;
    }
    absl::StatusOr<std::string> prefix = DigestPrefixFromId(id, name);
    if (!prefix.ok()) return prefix.status();
    if (!prefix->empty()) {
      out.digest_prefix = *std::move(prefix);
      return out;
    }
    const size_t r = id.rfind("/revisions/");
    if (r != std::string_view::npos && (IsPointKey(id.substr(0, r)) || IsValidPointName(id.substr(0, r))) &&
        ParsePositive(id.substr(r + 11), &out.revision)) {
      out.key = std::string(id.substr(0, r));
      return out;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      QuoteInput(name), " is not an artifact name; expected artifacts/{digest hex} (64 lowercase hex digits, or a "
      "unique prefix of at least ", kMinDigestPrefixHex, ") or artifacts/{blueprint}/{point}/revisions/{n}"));
}

absl::Status CheckGenerationPointKey(std::string_view key, std::string_view field) {
  if (IsPointKey(key)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      std::string(field), " ", QuoteInput(key),
      " is not a generation point; expected {blueprint}/{point}, e.g. invoice_totals/parse_amount"));
}

}  // namespace rote::orchestrator::engine
