#include "inference/tokenizer/utf8.h"

#include <utf8proc.h>

namespace rote::inference::utf8 {

namespace {

bool IsContinuation(unsigned char b) { return (b & 0xC0) == 0x80; }

// Length of the sequence a lead byte announces and the allowed range of its second byte
// (Unicode Table 3-7); 0 when `lead` can never start a character.
struct LeadInfo {
  int length;
  unsigned char second_lo, second_hi;
};

LeadInfo Lead(unsigned char b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};  // excludes the UTF-16 surrogates
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

// Length of the valid character at `pos`, or minus the length of the maximal invalid subpart
// there (at least 1). `incomplete` is set when the subpart is invalid only because the input
// ends.
int Scan(std::string_view s, size_t pos, bool* incomplete) {
  *incomplete = false;
  const auto b0 = static_cast<unsigned char>(s[pos]);
  const LeadInfo info = Lead(b0);
  if (info.length == 1) return 1;
  if (info.length == 0) return -1;
  int have = 1;
  for (int k = 1; k < info.length; ++k) {
    if (pos + k >= s.size()) {
      *incomplete = true;
      return -have;
    }
    const auto b = static_cast<unsigned char>(s[pos + k]);
    const bool ok = k == 1 ? (b >= info.second_lo && b <= info.second_hi) : IsContinuation(b);
    if (!ok) return -have;
    ++have;
  }
  return info.length;
}

}  // namespace

std::string Sanitize(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    bool incomplete;
    const int n = Scan(text, pos, &incomplete);
    if (n > 0) {
      out.append(text.substr(pos, n));
      pos += n;
    } else {
      out.append(kReplacement);
      pos += -n;
    }
  }
  return out;
}

bool IsValid(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    bool incomplete;
    const int n = Scan(text, pos, &incomplete);
    if (n < 0) return false;
    pos += n;
  }
  return true;
}

size_t StreamablePrefixLength(std::string_view bytes) {
  // Only the last character start can be unfinished: step back over at most 3 continuation
  // bytes to it and ask whether the bytes from there are a valid, incomplete prefix.
  const size_t n = bytes.size();
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    const auto b = static_cast<unsigned char>(bytes[n - back]);
    if (IsContinuation(b)) continue;
    bool incomplete;
    Scan(bytes, n - back, &incomplete);
    return incomplete ? n - back : n;
  }
  return n;
}

char32_t DecodeAt(std::string_view text, size_t& pos) {
  const auto b0 = static_cast<unsigned char>(text[pos]);
  int len = b0 < 0x80 ? 1 : b0 < 0xE0 ? 2 : b0 < 0xF0 ? 3 : 4;
  char32_t cp = len == 1 ? b0 : len == 2 ? (b0 & 0x1F) : len == 3 ? (b0 & 0x0F) : (b0 & 0x07);
  for (int k = 1; k < len && pos + k < text.size(); ++k) {
    cp = (cp << 6) | (static_cast<unsigned char>(text[pos + k]) & 0x3F);
  }
  pos += len;
  return cp;
}

void Append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool IsWhitespace(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

bool IsPythonSpace(char32_t cp) { return IsWhitespace(cp) || (cp >= 0x1C && cp <= 0x1F); }

bool IsWordChar(char32_t cp) {
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO: case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

}  // namespace rote::inference::utf8
