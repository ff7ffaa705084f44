// The normalizers: Unicode normalization forms (utf8proc, held to tokenizers' Unicode 9.0
// tables), Lowercase, Strip, Replace and Prepend, applied in tokenizer.json's order.
#include <utf8proc.h>

#include <cstdlib>

#include "inference/tokenizer/tokenizer_internal.h"
#include "inference/tokenizer/utf8.h"

namespace rote::inference {
namespace tokenizer_internal {

namespace {

struct CodeRange {
  char32_t first;
  char32_t last;
};

constexpr CodeRange kUnicode9Assigned[] = {
#include "inference/tokenizer/unicode9_assigned.inc"
};

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

bool IsAscii(std::string_view text) {
  for (char ch : text) {
    if (static_cast<unsigned char>(ch) >= 0x80) return false;
  }
  return true;
}

std::string Utf8procMap(std::string_view text, UnicodeForm form) {
  int options = UTF8PROC_STABLE;
  switch (form) {
    case UnicodeForm::kNfc: options |= UTF8PROC_COMPOSE; break;
    case UnicodeForm::kNfd: options |= UTF8PROC_DECOMPOSE; break;
    case UnicodeForm::kNfkc: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case UnicodeForm::kNfkd: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                          static_cast<utf8proc_ssize_t>(text.size()), &out,
                                          static_cast<utf8proc_option_t>(options));
  if (n < 0) {
    // Only invalid UTF-8 fails, and Encode sanitizes first; keep the text rather than lose it.
    return std::string(text);
  }
  std::string result(reinterpret_cast<char*>(out), static_cast<size_t>(n));
  std::free(out);
  return result;
}

// The lowercase mappings Unicode 16.0 and 17.0 added: utf8proc 2.8 has Unicode 15.0's tables,
// the Rust standard library tokenizers is built with has 17.0's.
char32_t LowercaseAddedAfter15(char32_t cp) {
  if (cp >= 0x10D50 && cp <= 0x10D65) return cp + 0x20;  // Garay capital letters (16.0)
  if (cp >= 0x16EA0 && cp <= 0x16EB8) return cp + 0x1B;  // Beria Erfe capital letters (17.0)
  switch (cp) {
    case 0xA7CE: return 0xA7CF;  // Latin capital letter pharyngeal voiced fricative (17.0)
    case 0xA7D2: return 0xA7D3;  // Latin capital letter double thorn (17.0)
    case 0xA7D4: return 0xA7D5;  // Latin capital letter double wynn (17.0)
    case 0x1C89: return 0x1C8A;  // Cyrillic capital letter tje
    case 0xA7CB: return 0x0264;  // Latin capital letter ram's horn
    case 0xA7CC: return 0xA7CD;  // Latin capital letter s with diagonal stroke
    case 0xA7DA: return 0xA7DB;  // Latin capital letter lambda
    case 0xA7DC: return 0x019B;  // Latin capital letter lambda with stroke
    default: return 0;
  }
}

// Rust's char::to_lowercase: the simple mapping, except U+0130, whose full lowercase is two
// characters (the one unconditional multi-character lowercase in SpecialCasing.txt).
std::string Lowercase(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const char32_t cp = utf8::DecodeAt(text, pos);
    if (cp < 0x80) {
      out += static_cast<char>(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp);
    } else if (cp == 0x130) {
      out += "i\xCC\x87";
    } else if (const char32_t added = LowercaseAddedAfter15(cp); added != 0) {
      utf8::Append(out, added);
    } else {
      utf8::Append(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))));
    }
  }
  return out;
}

std::string_view StripWhitespace(std::string_view text, bool left, bool right) {
  if (left) {
    size_t pos = 0;
    while (pos < text.size()) {
      size_t next = pos;
      if (!utf8::IsWhitespace(utf8::DecodeAt(text, next))) break;
      pos = next;
    }
    text.remove_prefix(pos);
  }
  if (right) {
    while (!text.empty()) {
      size_t start = text.size() - 1;
      while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
      size_t probe = start;
      if (!utf8::IsWhitespace(utf8::DecodeAt(text, probe))) break;
      text.remove_suffix(text.size() - start);
    }
  }
  return text;
}

}  // namespace

bool InUnicode9(char32_t cp) {
  size_t lo = 0;
  size_t hi = std::size(kUnicode9Assigned);
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (kUnicode9Assigned[mid].last < cp) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo < std::size(kUnicode9Assigned) && kUnicode9Assigned[lo].first <= cp;
}

std::string NormalizeUnicode(std::string_view text, UnicodeForm form) {
  if (form == UnicodeForm::kNfc ? TriviallyNfc(text) : IsAscii(text)) return std::string(text);
  // Under Unicode 9.0's tables a later character has no decomposition and combining class 0:
  // a starter that nothing composes with, so it separates the text into runs normalized on
  // their own. Normalization stability makes newer tables give 9.0's result on each run.
  std::string out;
  out.reserve(text.size());
  size_t run = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t start = pos;
    const char32_t cp = utf8::DecodeAt(text, pos);
    if (cp >= 0x300 && !InUnicode9(cp)) {
      if (run < start) out += Utf8procMap(text.substr(run, start - run), form);
      out += text.substr(start, pos - start);
      run = pos;
    }
  }
  if (run < text.size()) out += Utf8procMap(text.substr(run), form);
  return out;
}

std::string NormalizeNfc(std::string_view text) { return NormalizeUnicode(text, UnicodeForm::kNfc); }

std::string Normalize(const std::vector<NormalizerStep>& steps, std::string_view text) {
  std::string s(text);
  using Kind = NormalizerStep::Kind;
  for (const NormalizerStep& step : steps) {
    switch (step.kind) {
      case Kind::kNfc: s = NormalizeUnicode(s, UnicodeForm::kNfc); break;
      case Kind::kNfd: s = NormalizeUnicode(s, UnicodeForm::kNfd); break;
      case Kind::kNfkc: s = NormalizeUnicode(s, UnicodeForm::kNfkc); break;
      case Kind::kNfkd: s = NormalizeUnicode(s, UnicodeForm::kNfkd); break;
      case Kind::kLowercase: s = Lowercase(s); break;
      case Kind::kStrip: s = std::string(StripWhitespace(s, step.strip_left, step.strip_right)); break;
      case Kind::kReplace:
        s = step.literal.empty() ? ReplaceAll(step.pattern.get(), s, step.content)
                                 : ReplaceLiteral(s, step.literal, step.content);
        break;
      case Kind::kPrepend:
        if (!s.empty()) s = step.content + s;
        break;
    }
  }
  return s;
}

Status LoadNormalizer(const Json& n, const std::string& field, std::vector<NormalizerStep>& steps) {
  if (n.is_null()) return OkStatus();
  ROTE_ASSIGN_OR_RETURN(const std::string type, ComponentType(n, field));
  const JsonFields f(n, kTokenizerJson, field + ".");
  using Kind = NormalizerStep::Kind;
  NormalizerStep step;
  if (type == "Sequence") {
    ROTE_ASSIGN_OR_RETURN(const Json* children, Children(n, "normalizers", field));
    for (const Json& child : *children) {
      ROTE_RETURN_IF_ERROR(LoadNormalizer(child, field + ".normalizers[]", steps));
    }
    return OkStatus();
  }
  if (type == "NFC") {
    step.kind = Kind::kNfc;
  } else if (type == "NFD") {
    step.kind = Kind::kNfd;
  } else if (type == "NFKC") {
    step.kind = Kind::kNfkc;
  } else if (type == "NFKD") {
    step.kind = Kind::kNfkd;
  } else if (type == "Lowercase") {
    step.kind = Kind::kLowercase;
  } else if (type == "Strip") {
    step.kind = Kind::kStrip;
    ROTE_RETURN_IF_ERROR(f.Bool("strip_left", false, &step.strip_left));
    ROTE_RETURN_IF_ERROR(f.Bool("strip_right", false, &step.strip_right));
  } else if (type == "Replace") {
    step.kind = Kind::kReplace;
    ROTE_ASSIGN_OR_RETURN(step.pattern, CompilePatternNode(f.Find("pattern"), field + ".pattern", &step.literal));
    ROTE_RETURN_IF_ERROR(f.String("content", "", &step.content));
  } else if (type == "Prepend") {
    step.kind = Kind::kPrepend;
    ROTE_RETURN_IF_ERROR(f.String("prepend", "", &step.content));
  } else {
    return InvalidArgument("tokenizer.json: normalizer type '" + type +
                         "' is not supported (supported: NFC, NFD, NFKC, NFKD, Lowercase, Strip, "
                         "Replace, Prepend, Sequence)");
  }
  steps.push_back(std::move(step));
  return OkStatus();
}

}  // namespace tokenizer_internal
}  // namespace rote::inference
