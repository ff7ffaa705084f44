// Regular expressions of tokenizer.json: patterns written for Oniguruma (tokenizers' engine) run
// in PCRE2, and tokenizers' find_matches / split / replace over their matches.
//
// The two engines agree on the syntax the published files use, but not on every class:
//   \s  Oniguruma: White_Space (U+0009..U+000D, U+0085, Zs, Zl, Zp). PCRE2 with UCP adds \h and
//       \v, which hold U+180E MONGOLIAN VOWEL SEPARATOR. Rewritten to \p{White_Space}.
//   \w  Oniguruma: Letter, Mark, Number, Connector_Punctuation. PCRE2: Letter, Number and '_'.
//       Rewritten to the explicit class.
//   \h  Oniguruma (Ruby syntax): a hexadecimal digit. PCRE2: horizontal space. Rewritten.
//   ^ $ Oniguruma (Ruby syntax): line anchors always. PCRE2: PCRE2_MULTILINE.
//   \p{..} general categories, \d: tokenizers' Oniguruma carries Unicode 16.0 tables, PCRE2 10.42
//       Unicode 14.0. The characters the newer tables add to a category are added to the class
//       (onig_unicode_delta.inc); a category that lost characters (Mn, C) is refused.
#include "inference/tokenizer/tokenizer_internal.h"
#include "inference/tokenizer/utf8.h"

namespace rote::inference {
namespace tokenizer_internal {

namespace {

constexpr std::string_view kOnigSpace = R"(\p{White_Space})";
constexpr std::string_view kOnigNotSpace = R"(\P{White_Space})";
constexpr std::string_view kHexItems = "0-9a-fA-F";

struct CategoryDelta {
  const char* name;
  const char* added;  // PCRE2 class items
  int removed;        // code points PCRE2 has in the category and Oniguruma does not
};

constexpr CategoryDelta kCategoryDeltas[] = {
#include "inference/tokenizer/onig_unicode_delta.inc"
};

const CategoryDelta* FindCategory(std::string_view name) {
  for (const CategoryDelta& d : kCategoryDeltas) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

// Class items for a general category as Oniguruma's tables define it; empty when `name` is not
// a general category (then PCRE2's own meaning stands).
StatusOr<std::string> CategoryItems(std::string_view name, const std::string& field, const std::string& pattern) {
  const CategoryDelta* d = FindCategory(name);
  if (d == nullptr) return std::string();
  if (d->removed > 0) {
    return InvalidArgument("tokenizer.json: field '" + field + "': \\p{" + std::string(name) +
                         "} differs between Oniguruma's and PCRE2's Unicode tables and is not supported (pattern: " +
                         pattern + ")");
  }
  return "\\p{" + std::string(name) + "}" + d->added;
}

std::string WordItems() {
  std::string items;
  for (const char* c : {"L", "M", "N"}) {
    items += std::string("\\p{") + c + "}" + FindCategory(c)->added;
  }
  return items + "\\p{Pc}";
}

// The pattern with Oniguruma's class escapes spelled out for PCRE2; an error names an escape
// that has no PCRE2 spelling where it stands.
StatusOr<std::string> TranslateOnig(const std::string& pattern, const std::string& field) {
  std::string out;
  out.reserve(pattern.size() + 32);
  int class_depth = 0;  // inside [...] (nested classes count)
  bool quoted = false;  // inside \Q...\E
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (quoted) {
      if (c == '\\' && i + 1 < pattern.size() && pattern[i + 1] == 'E') {
        quoted = false;
        out += "\\E";
        ++i;
      } else {
        out += c;
      }
      continue;
    }
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[i + 1];
      ++i;
      const bool in_class = class_depth > 0;
      switch (e) {
        case 'Q':
          quoted = true;
          out += "\\Q";
          break;
        case 's':
          out += kOnigSpace;
          break;
        case 'S':
          out += kOnigNotSpace;
          break;
        case 'w':
          if (in_class) out += WordItems();
          else out += "[" + WordItems() + "]";
          break;
        case 'W':
          if (in_class) {
            return InvalidArgument("tokenizer.json: field '" + field +
                                 "': \\W inside a character class is not supported (pattern: " + pattern + ")");
          }
          out += "[^" + WordItems() + "]";
          break;
        case 'd':
        case 'D':
        case 'p':
        case 'P': {
          // \d is Decimal_Number; \pX and \p{Name} name a property.
          std::string name;
          bool negated = e == 'D' || e == 'P';
          size_t end = i;  // last character of the escape
          if (e == 'd' || e == 'D') {
            name = "Nd";
          } else if (i + 1 < pattern.size() && pattern[i + 1] == '{') {
            const size_t close = pattern.find('}', i + 2);
            if (close == std::string::npos) {
              out += '\\';
              out += e;
              break;
            }
            name = pattern.substr(i + 2, close - i - 2);
            if (!name.empty() && name[0] == '^') {
              negated = !negated;
              name.erase(0, 1);
            }
            end = close;
          } else if (i + 1 < pattern.size()) {
            name = pattern.substr(i + 1, 1);
            end = i + 1;
          }
          ROTE_ASSIGN_OR_RETURN(const std::string items, CategoryItems(name, field, pattern));
          if (items.empty()) {  // not a general category: PCRE2's meaning
            out += pattern.substr(i - 1, end - i + 2);
            i = end;
            break;
          }
          i = end;
          if (!negated) {
            if (in_class) out += items;
            else out += "[" + items + "]";
          } else if (!in_class) {
            out += "[^" + items + "]";
          } else {
            return InvalidArgument("tokenizer.json: field '" + field +
                                 "': a negated category inside a character class is not supported (pattern: " +
                                 pattern + ")");
          }
          break;
        }
        case 'h':
          if (in_class) out += kHexItems;
          else out += "[" + std::string(kHexItems) + "]";
          break;
        case 'H':
          if (in_class) {
            return InvalidArgument("tokenizer.json: field '" + field +
                                 "': \\H inside a character class is not supported (pattern: " + pattern + ")");
          }
          out += "[^" + std::string(kHexItems) + "]";
          break;
        default:
          out += '\\';
          out += e;
      }
      continue;
    }
    if (c == '[') {
      ++class_depth;
      out += c;
      // A ']' or '^]' right after the opening bracket is a literal.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (c == ']' && class_depth > 0) --class_depth;
    out += c;
  }
  return out;
}

}  // namespace

StatusOr<Pcre2Code> CompileOnigRegex(const std::string& pattern, const std::string& field) {
  ROTE_ASSIGN_OR_RETURN(const std::string translated, TranslateOnig(pattern, field));
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof message);
    return InvalidArgument("tokenizer.json: field '" + field + "': regex does not compile with PCRE2 at offset " +
                           std::to_string(offset) + ": " + reinterpret_cast<char*>(message) +
                           " (pattern: " + pattern + ")");
  }
  // JIT is only a speed-up; the interpreter gives the same matches where it is unavailable.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return Pcre2Code(code);
}

StatusOr<Pcre2Code> CompilePatternNode(const Json* pattern, const std::string& field, std::string* literal_out) {
  static const Json kNone;
  const JsonFields pf(pattern == nullptr ? kNone : *pattern, kTokenizerJson, field + ".");
  if (pf.Find("Regex") != nullptr) {
    std::string regex;
    ROTE_RETURN_IF_ERROR(pf.String("Regex", "", &regex));
    return CompileOnigRegex(regex, field + ".Regex");
  }
  if (pf.Find("String") != nullptr) {
    std::string literal;
    ROTE_RETURN_IF_ERROR(pf.String("String", "", &literal));
    if (literal.empty()) return InvalidArgument("tokenizer.json: field '" + field + ".String' must not be empty");
    if (literal_out != nullptr) *literal_out = literal;
    // \Q..\E quotes everything but a literal "\E", which is spelled outside the quote.
    std::string quoted = "\\Q";
    for (size_t i = 0; i < literal.size(); ++i) {
      if (literal.compare(i, 2, "\\E") == 0) {
        quoted += "\\E\\\\E\\Q";
        ++i;
      } else {
        quoted += literal[i];
      }
    }
    quoted += "\\E";
    return CompileOnigRegex(quoted, field + ".String");
  }
  return InvalidArgument("tokenizer.json: field '" + field + "' must hold a Regex or a String");
}

void FindRegexMatches(const pcre2_code* regex, std::string_view text, std::vector<Match>& out) {
  out.clear();
  if (text.empty()) {
    out.push_back({0, 0, false});
    return;
  }
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(regex, nullptr);
  size_t prev = 0;
  size_t search = 0;
  bool have_last = false;
  size_t last_match_end = 0;
  while (search <= text.size()) {
    // PCRE2 validates the whole subject on every call unless told not to; checking it once
    // keeps splitting linear in the text length.
    const uint32_t options = search == 0 && !have_last ? 0 : PCRE2_NO_UTF_CHECK;
    const int rc = pcre2_match(regex, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), search,
                               options, md, nullptr);
    if (rc < 0) break;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t s = ov[0];
    const size_t e = ov[1];
    // Oniguruma's find_iter: an empty match right where the last match ended is skipped by one
    // character.
    if (s == e && have_last && last_match_end == e) {
      if (search >= text.size()) break;
      utf8::DecodeAt(text, search);
      continue;
    }
    search = e;
    have_last = true;
    last_match_end = e;
    if (prev != s) out.push_back({prev, s, false});
    out.push_back({s, e, true});
    prev = e;
  }
  pcre2_match_data_free(md);
  if (prev != text.size()) out.push_back({prev, text.size(), false});
}

void FindCharMatches(std::string_view text, const std::function<bool(char32_t)>& pred, std::vector<Match>& out) {
  out.clear();
  if (text.empty()) {
    out.push_back({0, 0, false});
    return;
  }
  size_t last = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t start = pos;
    const char32_t cp = utf8::DecodeAt(text, pos);
    if (pred(cp)) {
      if (last < start) out.push_back({last, start, false});
      out.push_back({start, pos, true});
      last = pos;
    }
  }
  if (last < text.size()) out.push_back({last, text.size(), false});
}

void ApplySplitBehavior(const std::vector<Match>& matches, SplitBehavior behavior,
                        std::vector<std::pair<size_t, size_t>>& out) {
  out.clear();
  if (behavior == SplitBehavior::kIsolated) {  // the common case, without the merging pass
    for (const Match& m : matches) {
      if (m.end > m.start) out.emplace_back(m.start, m.end);
    }
    return;
  }
  struct Kept {
    size_t start, end;
    bool remove;
  };
  thread_local std::vector<Kept> splits;  // scratch, reused across calls
  splits.clear();
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      break;  // handled above
    case SplitBehavior::kRemoved:
      for (const Match& m : matches) splits.push_back({m.start, m.end, m.is_match});
      break;
    case SplitBehavior::kContiguous:
      for (const Match& m : matches) {
        if (m.is_match == previous_match && !splits.empty()) {
          splits.back().end = m.end;
        } else {
          splits.push_back({m.start, m.end, false});
        }
        previous_match = m.is_match;
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Match& m : matches) {
        if (m.is_match && !previous_match && !splits.empty()) {
          splits.back().end = m.end;
        } else {
          splits.push_back({m.start, m.end, false});
        }
        previous_match = m.is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = matches.rbegin(); it != matches.rend(); ++it) {
        if (it->is_match && !previous_match && !splits.empty()) {
          splits.back().start = it->start;
        } else {
          splits.push_back({it->start, it->end, false});
        }
        previous_match = it->is_match;
      }
      std::reverse(splits.begin(), splits.end());
      break;
  }
  for (const Kept& k : splits) {
    if (!k.remove && k.end > k.start) out.emplace_back(k.start, k.end);
  }
}

std::string ReplaceAll(const pcre2_code* pattern, std::string_view text, std::string_view content) {
  std::vector<Match> matches;
  FindRegexMatches(pattern, text, matches);
  std::string out;
  out.reserve(text.size());
  for (const Match& m : matches) {
    if (m.is_match) {
      out += content;
    } else {
      out += text.substr(m.start, m.end - m.start);
    }
  }
  return out;
}

std::string ReplaceLiteral(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (true) {
    const size_t at = text.find(from, pos);
    if (at == std::string_view::npos) break;
    out.append(text.substr(pos, at - pos));
    out.append(to);
    pos = at + from.size();
  }
  out.append(text.substr(pos));
  return out;
}

}  // namespace tokenizer_internal
}  // namespace rote::inference
