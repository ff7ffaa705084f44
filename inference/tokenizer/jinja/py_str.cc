// Python's str case mappings and character classes, for the methods and filters of chat
// templates: transformers renders them in Python, so `'ß'.upper()` is 'SS', `'ΣΑΣ'.lower()` ends
// in a final sigma and `'ǆ'.title()` is 'ǅ'. utf8proc gives the simple mappings and the general
// categories; py_unicode.inc (tools/make_py_unicode_tables.py) what Python adds to them.
#include <utf8proc.h>

#include <algorithm>
#include <iterator>

#include "inference/tokenizer/jinja/render.h"
#include "inference/tokenizer/utf8.h"

namespace rote::inference::jinja {
namespace {

struct PyCaseEntry {
  char32_t cp;
  const char* utf8;
};
struct PyRange {
  char32_t lo, hi;
};

#include "inference/tokenizer/jinja/py_unicode.inc"

template <size_t N>
const char* FindEntry(const PyCaseEntry (&table)[N], char32_t c) {
  auto it = std::lower_bound(std::begin(table), std::end(table), c,
                             [](const PyCaseEntry& e, char32_t v) { return e.cp < v; });
  return it != std::end(table) && it->cp == c ? it->utf8 : nullptr;
}

template <size_t N>
bool InRanges(const PyRange (&table)[N], char32_t c) {
  auto it = std::upper_bound(std::begin(table), std::end(table), c,
                             [](char32_t v, const PyRange& r) { return v < r.lo; });
  return it != std::begin(table) && c <= std::prev(it)->hi;
}

utf8proc_category_t Category(char32_t c) { return utf8proc_category(static_cast<utf8proc_int32_t>(c)); }

void AppendFull(std::u32string& out, const char* full, char32_t simple) {
  if (full != nullptr) {
    out += Decode(full);
  } else {
    out += simple;
  }
}

void AppendUpper(std::u32string& out, char32_t c) { AppendFull(out, FindEntry(kPyUpperFull, c), Upper(c)); }

void AppendTitle(std::u32string& out, char32_t c) {
  if (const char* t = FindEntry(kPyTitleFull, c)) {
    out += Decode(t);
  } else {
    AppendUpper(out, c);
  }
}

bool IsCaseIgnorable(char32_t c) {
  switch (Category(c)) {
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_SK:
      return true;
    default:
      return InRanges(kPyCaseIgnorableExtra, c);
  }
}

// Python's lower_ucs4 at u[i]: capital sigma is final after a cased letter (case-ignorable
// characters between) unless a cased letter follows (case-ignorable characters between).
void AppendLower(std::u32string& out, const std::u32string& u, size_t i) {
  const char32_t c = u[i];
  if (c != 0x3A3) {
    AppendFull(out, FindEntry(kPyLowerFull, c), Lower(c));
    return;
  }
  size_t j = i;
  while (j > 0 && IsCaseIgnorable(u[j - 1])) --j;
  bool final_sigma = j > 0 && IsPyCased(u[j - 1]);
  if (final_sigma) {
    size_t k = i + 1;
    while (k < u.size() && IsCaseIgnorable(u[k])) ++k;
    final_sigma = k == u.size() || !IsPyCased(u[k]);
  }
  out += final_sigma ? char32_t{0x3C2} : char32_t{0x3C3};
}

bool IsPyLowerChar(char32_t c) { return Category(c) == UTF8PROC_CATEGORY_LL || InRanges(kPyOtherLower, c); }
bool IsPyUpperChar(char32_t c) { return Category(c) == UTF8PROC_CATEGORY_LU || InRanges(kPyOtherUpper, c); }

}  // namespace

bool IsPyCased(char32_t c) { return IsPyLowerChar(c) || IsPyUpperChar(c) || Category(c) == UTF8PROC_CATEGORY_LT; }

std::string PyUpper(const std::string& s) {
  std::u32string out;
  for (char32_t c : Decode(s)) AppendUpper(out, c);
  return Encode(out);
}

std::string PyLower(const std::string& s) {
  const std::u32string u = Decode(s);
  std::u32string out;
  for (size_t i = 0; i < u.size(); ++i) AppendLower(out, u, i);
  return Encode(out);
}

std::string PyTitle(const std::string& s) {
  const std::u32string u = Decode(s);
  std::u32string out;
  bool prev_cased = false;
  for (size_t i = 0; i < u.size(); ++i) {
    if (prev_cased) {
      AppendLower(out, u, i);
    } else {
      AppendTitle(out, u[i]);
    }
    prev_cased = IsPyCased(u[i]);
  }
  return Encode(out);
}

std::string Capitalize(const std::string& s) {
  const std::u32string u = Decode(s);
  std::u32string out;
  for (size_t i = 0; i < u.size(); ++i) {
    if (i == 0) {
      AppendTitle(out, u[i]);
    } else {
      AppendLower(out, u, i);
    }
  }
  return Encode(out);
}

// Jinja's title filter: re.split(r"([-\s({\[<]+)") and, per piece, piece[0].upper() +
// piece[1:].lower() (the lower() sees the piece alone, so its final sigmas are the piece's).
std::string JinjaTitle(const std::string& s) {
  const std::u32string u = Decode(s);
  auto is_sep = [](char32_t c) { return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || utf8::IsPythonSpace(c); };
  std::string out;
  size_t k = 0;
  while (k < u.size()) {
    const bool sep = is_sep(u[k]);
    size_t e = k + 1;
    while (e < u.size() && is_sep(u[e]) == sep) ++e;
    std::u32string first;
    AppendUpper(first, u[k]);
    out += Encode(first);
    out += PyLower(Encode(std::u32string_view(u).substr(k + 1, e - k - 1)));
    k = e;
  }
  return out;
}

// str.islower / str.isupper: no cased character of the other case or titlecase, and one at least.
bool PyIsLower(const std::string& s) {
  bool cased = false;
  for (char32_t c : Decode(s)) {
    if (IsPyUpperChar(c) || Category(c) == UTF8PROC_CATEGORY_LT) return false;
    cased = cased || IsPyLowerChar(c);
  }
  return cased;
}

bool PyIsUpper(const std::string& s) {
  bool cased = false;
  for (char32_t c : Decode(s)) {
    if (IsPyLowerChar(c) || Category(c) == UTF8PROC_CATEGORY_LT) return false;
    cased = cased || IsPyUpperChar(c);
  }
  return cased;
}

bool IsPyDigit(char32_t c) { return Category(c) == UTF8PROC_CATEGORY_ND || InRanges(kPyDigitExtra, c); }

bool IsPyNumeric(char32_t c) {
  const auto cat = Category(c);
  return cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO ||
         InRanges(kPyNumericExtra, c);
}

bool IsPyAlpha(char32_t c) {
  const auto cat = Category(c);
  return cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
}

// str.isalnum per character, and what Python's re counts as \w (wordcount): no marks.
bool IsPyAlnum(char32_t c) { return IsPyAlpha(c) || IsPyNumeric(c); }
bool IsWordChar(char32_t c) { return c == '_' || IsPyAlnum(c); }

}  // namespace rote::inference::jinja
