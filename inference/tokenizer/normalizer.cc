// The normalizer: NFC (utf8proc), the one normalization the supported families use.
#include <utf8proc.h>

#include <cstdlib>

#include "inference/tokenizer/tokenizer_internal.h"

namespace rote::inference {
namespace tokenizer_internal {

namespace {

// True when every code point is below U+0300: no such character changes under NFC, and none
// composes with another (combining marks start at U+0300, Hangul jamo at U+1100). In UTF-8 that
// is ASCII, lead bytes C2..CB and continuation bytes.
bool TriviallyNfc(std::string_view text) {
  for (char ch : text) {
    const auto b = static_cast<unsigned char>(ch);
    if (b >= 0xCC) return false;
  }
  return true;
}

}  // namespace

std::string NormalizeNfc(std::string_view text) {
  if (TriviallyNfc(text)) return std::string(text);
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                   static_cast<utf8proc_ssize_t>(text.size()), &out,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) {
    // Only invalid UTF-8 fails, and Encode sanitizes first; keep the text rather than lose it.
    return std::string(text);
  }
  std::string result(reinterpret_cast<char*>(out), static_cast<size_t>(n));
  std::free(out);
  return result;
}

Status LoadNormalizer(const Json& n, const std::string& field, bool& nfc) {
  if (n.is_null()) return OkStatus();
  ROTE_ASSIGN_OR_RETURN(const std::string type, ComponentType(n, field));
  if (type == "NFC") {
    nfc = true;
    return OkStatus();
  }
  if (type == "Sequence") {
    ROTE_ASSIGN_OR_RETURN(const Json* children, Children(n, "normalizers", field));
    for (const Json& child : *children) ROTE_RETURN_IF_ERROR(LoadNormalizer(child, field + ".normalizers[]", nfc));
    return OkStatus();
  }
  return Unimplemented("tokenizer.json: normalizer type '" + type +
                       "' is not supported (supported: NFC, Sequence)");
}

}  // namespace tokenizer_internal
}  // namespace rote::inference
