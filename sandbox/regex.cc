#include "sandbox/regex.h"

#include <cctype>

#include "absl/strings/str_cat.h"

namespace rote::sandbox {
namespace {

absl::Status Unsupported(std::string_view construct, size_t offset) {
  return absl::InvalidArgumentError(absl::StrCat("unsupported regex syntax: ", std::string(construct),
                                                 " at byte ", offset, " (RE2 has no such construct)"));
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// Length of a {n}, {n,} or {n,m} repetition starting at i, or 0 when it is not one (RE2 then
// reads '{' as a literal).
size_t RepetitionLength(std::string_view p, size_t i) {
  size_t j = i + 1;
  size_t digits = 0;
  while (j < p.size() && IsDigit(p[j])) ++j, ++digits;
  if (digits == 0) return 0;
  if (j < p.size() && p[j] == ',') {
    ++j;
    while (j < p.size() && IsDigit(p[j])) ++j;
  }
  if (j < p.size() && p[j] == '}') return j - i + 1;
  return 0;
}

}  // namespace

absl::Status CheckSupportedSyntax(std::string_view p) {
  bool after_quantifier = false;  // the previous token was *, +, ? or {n,m}
  for (size_t i = 0; i < p.size();) {
    char c = p[i];
    if (c == '\\') {
      if (i + 1 >= p.size()) return absl::OkStatus();  // RE2 reports the trailing backslash
      char e = p[i + 1];
      if (e >= '1' && e <= '9') return Unsupported(absl::StrCat("backreference \\", std::string(1, e)), i);
      if (e == 'k' || (e == 'g' && i + 2 < p.size() && (IsDigit(p[i + 2]) || p[i + 2] == '{' || p[i + 2] == '<' || p[i + 2] == '-'))) {
        return Unsupported(absl::StrCat("backreference \\", std::string(1, e)), i);
      }
      if (e == 'G') return Unsupported("\\G anchor", i);
      if (e == 'Z') return Unsupported("\\Z anchor (use \\z)", i);
      if (e == 'K') return Unsupported("\\K match reset", i);
      if (e == 'R') return Unsupported("\\R line-break class", i);
      if (e == 'X') return Unsupported("\\X grapheme cluster", i);
      if (e == 'Q') {  // \Q...\E quotes everything up to \E
        size_t end = p.find("\\E", i + 2);
        i = end == std::string_view::npos ? p.size() : end + 2;
        after_quantifier = false;
        continue;
      }
      i += 2;
      after_quantifier = false;
      continue;
    }
    if (c == '[') {  // a character class: nothing inside is a group or a quantifier
      size_t j = i + 1;
      if (j < p.size() && p[j] == '^') ++j;
      if (j < p.size() && p[j] == ']') ++j;  // a leading ']' is literal
      while (j < p.size() && p[j] != ']') {
        if (p[j] == '\\') j += 2;
        else if (p[j] == '[' && j + 1 < p.size() && p[j + 1] == ':') {
          size_t end = p.find(":]", j + 2);
          j = end == std::string_view::npos ? j + 1 : end + 2;
        } else {
          ++j;
        }
      }
      i = j + 1;
      after_quantifier = false;
      continue;
    }
    if (c == '(' && i + 1 < p.size() && p[i + 1] == '?') {
      std::string_view rest = p.substr(i + 2);
      auto starts = [&](std::string_view s) { return rest.substr(0, s.size()) == s; };
      if (starts("=")) return Unsupported("lookahead (?=...)", i);
      if (starts("!")) return Unsupported("negative lookahead (?!...)", i);
      if (starts("<=")) return Unsupported("lookbehind (?<=...)", i);
      if (starts("<!")) return Unsupported("negative lookbehind (?<!...)", i);
      if (starts(">")) return Unsupported("atomic group (?>...)", i);
      if (starts("(")) return Unsupported("conditional (?(...)...)", i);
      if (starts("#")) return Unsupported("comment group (?#...)", i);
      if (starts("|")) return Unsupported("branch reset group (?|...)", i);
      if (starts("&")) return Unsupported("subroutine call (?&name)", i);
      if (starts("P=")) return Unsupported("named backreference (?P=name)", i);
      if (starts("P>")) return Unsupported("subroutine call (?P>name)", i);
      if (starts("R") || (!rest.empty() && (IsDigit(rest[0]) || ((rest[0] == '+' || rest[0] == '-') && rest.size() > 1 && IsDigit(rest[1]))))) {
        return Unsupported("recursion (?R) / (?N)", i);
      }
      if (starts("<") || starts("'")) return Unsupported("named group (?<name>...) (write (?P<name>...))", i);
      i += 2;
      after_quantifier = false;
      continue;
    }
    if (c == '*' || c == '+' || c == '?') {
      if (after_quantifier && c == '+') return Unsupported("possessive quantifier", i - 1);
      // "x*?" is a lazy quantifier; a quantifier after it is an error RE2 reports itself.
      after_quantifier = !after_quantifier;
      ++i;
      continue;
    }
    if (c == '{') {
      if (size_t n = RepetitionLength(p, i); n > 0) {
        if (i + n < p.size() && p[i + n] == '+') return Unsupported("possessive quantifier", i);
        i += n;
        after_quantifier = true;
        continue;
      }
    }
    after_quantifier = false;
    ++i;
  }
  return absl::OkStatus();
}

std::string RegexOptions::CanonicalJson() const {
  auto b = [](bool v) { return v ? "true" : "false"; };
  return absl::StrCat("{\"case_insensitive\":", b(case_insensitive), ",\"dot_matches_newline\":",
                      b(dot_matches_newline), ",\"encoding\":\"utf-8\",\"literal\":", b(literal),
                      ",\"longest_match\":", b(longest_match), ",\"max_memory_bytes\":", max_memory_bytes,
                      ",\"syntax\":\"re2\"}");
}

absl::StatusOr<RegexOptions> RegexOptions::FromJson(std::string_view json) {
  auto v = ParseJson(json);
  if (!v.ok()) return v.status();
  if (!v->is_map()) return absl::InvalidArgumentError("regex options: expected a JSON object");
  RegexOptions o;
  const Map& m = v->as_map();
  auto get_bool = [&](const char* key, bool* out) -> absl::Status {
    auto it = m.find(key);
    if (it == m.end() || !it->second.is_bool()) {
      return absl::InvalidArgumentError(absl::StrCat("regex options: \"", key, "\" must be a boolean"));
    }
    *out = it->second.as_bool();
    return absl::OkStatus();
  };
  for (auto [key, field] : {std::pair{"case_insensitive", &o.case_insensitive},
                            std::pair{"dot_matches_newline", &o.dot_matches_newline},
                            std::pair{"literal", &o.literal}, std::pair{"longest_match", &o.longest_match}}) {
    if (auto s = get_bool(key, field); !s.ok()) return s;
  }
  auto mem = m.find("max_memory_bytes");
  if (mem == m.end() || !mem->second.is_int() || mem->second.as_int() <= 0) {
    return absl::InvalidArgumentError("regex options: \"max_memory_bytes\" must be a positive integer");
  }
  o.max_memory_bytes = mem->second.as_int();
  auto enc = m.find("encoding");
  auto syn = m.find("syntax");
  if (enc == m.end() || !enc->second.is_string() || enc->second.as_string() != "utf-8") {
    return absl::InvalidArgumentError("regex options: \"encoding\" must be \"utf-8\"");
  }
  if (syn == m.end() || !syn->second.is_string() || syn->second.as_string() != "re2") {
    return absl::InvalidArgumentError("regex options: \"syntax\" must be \"re2\"");
  }
  if (m.size() != 7) return absl::InvalidArgumentError("regex options: unknown keys");
  return o;
}

absl::StatusOr<Re2Matcher> Re2Matcher::Compile(std::string_view pattern, const RegexOptions& options) {
  if (!options.literal) {
    if (auto s = CheckSupportedSyntax(pattern); !s.ok()) return s;
  }
  if (options.max_memory_bytes <= 0) return absl::InvalidArgumentError("max_memory_bytes must be positive");
  RE2::Options o;
  o.set_encoding(RE2::Options::EncodingUTF8);
  o.set_posix_syntax(false);
  o.set_longest_match(options.longest_match);
  o.set_log_errors(false);
  o.set_max_mem(options.max_memory_bytes);
  o.set_literal(options.literal);
  o.set_never_nl(false);
  o.set_dot_nl(options.dot_matches_newline);
  o.set_never_capture(false);
  o.set_case_sensitive(!options.case_insensitive);
  auto re = std::make_shared<const re2::RE2>(re2::StringPiece(pattern.data(), pattern.size()), o);
  if (!re->ok()) {
    if (re->error_code() == RE2::ErrorPatternTooLarge) {
      return absl::ResourceExhaustedError(absl::StrCat("regex exceeds its memory budget (max_memory_bytes=",
                                                       options.max_memory_bytes, "): ", re->error()));
    }
    size_t at = pattern.find(re->error_arg());
    std::string where = (re->error_arg().empty() || at == std::string_view::npos)
                            ? std::string()
                            : absl::StrCat(" at byte ", at);
    return absl::InvalidArgumentError(absl::StrCat("invalid regex: ", re->error(), where));
  }
  return Re2Matcher(std::move(re), options);
}

bool Re2Matcher::FullMatch(std::string_view text) const {
  return RE2::FullMatch(re2::StringPiece(text.data(), text.size()), *re_);
}

void Re2Matcher::ForEachMatch(std::string_view text, const std::function<void(size_t, size_t)>& fn) const {
  re2::StringPiece input(text.data(), text.size());
  re2::StringPiece m;
  size_t pos = 0;
  size_t prev_end = std::string_view::npos;
  while (pos <= text.size()) {
    if (!re_->Match(input, pos, text.size(), RE2::UNANCHORED, &m, 1)) break;
    size_t start = static_cast<size_t>(m.data() - text.data());
    size_t end = start + m.size();
    if (!(m.empty() && start == prev_end)) {
      fn(start, m.size());
      prev_end = end;
    }
    if (end > start) {
      pos = end;
      continue;
    }
    if (start >= text.size()) break;
    // Step over one UTF-8 character (a lone invalid byte counts as one).
    unsigned char lead = static_cast<unsigned char>(text[start]);
    size_t step = lead < 0xC0 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
    pos = std::min(text.size(), start + step);
    if (pos == start) break;
    if (start + step > text.size()) pos = text.size();
  }
}

std::vector<std::string> Re2Matcher::FindAll(std::string_view text) const {
  std::vector<std::string> out;
  ForEachMatch(text, [&](size_t off, size_t len) { out.emplace_back(text.substr(off, len)); });
  return out;
}

std::vector<std::string> Re2Matcher::group_names() const {
  std::vector<std::string> names;
  for (const auto& [name, index] : re_->NamedCapturingGroups()) names.push_back(name);
  return names;  // std::map order: sorted bytewise
}

Value Re2Matcher::NamedCaptures(std::string_view text) const {
  const auto& groups = re_->NamedCapturingGroups();
  int ngroups = re_->NumberOfCapturingGroups();
  std::vector<re2::StringPiece> sub(static_cast<size_t>(ngroups) + 1);
  re2::StringPiece input(text.data(), text.size());
  Array records;
  ForEachMatch(text, [&](size_t off, size_t len) {
    // Re-match the known span anchored at both ends to get the groups of exactly this match.
    re_->Match(input, off, off + len, RE2::ANCHOR_BOTH, sub.data(), ngroups + 1);
    Map rec;
    for (const auto& [name, index] : groups) {
      const re2::StringPiece& g = sub[static_cast<size_t>(index)];
      rec[name] = g.data() == nullptr ? Value::Nil() : Value::String(std::string(g.data(), g.size()));
    }
    records.push_back(Value::FromMap(std::move(rec)));
  });
  return Value::FromArray(std::move(records));
}

}  // namespace rote::sandbox
