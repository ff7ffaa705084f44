#include "orchestrator/engine/lockfile.h"

#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "orchestrator/engine/names.h"

namespace rote::orchestrator::engine {

namespace {

bool IsBareKeyChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

void AppendUtf8(std::string* out, uint32_t cp) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

class Parser {
 public:
  Parser(std::string_view text, std::string_view origin) : text_(text), origin_(origin) {}

  absl::StatusOr<Lockfile> Parse() {
    Lockfile lock;
    std::optional<int64_t> format;
    LockEntry* entry = nullptr;
    std::vector<std::pair<std::string, int>> seen;  // keys of the current table
    while (pos_ < text_.size()) {
      SkipBlank();
      if (pos_ >= text_.size()) break;
      char c = text_[pos_];
      if (c == '\n') { ++pos_; ++line_; continue; }
      if (c == '#') { SkipComment(); continue; }
      if (c == '[') {
        if (text_.substr(pos_, 9) != "[[point]]") return Error("expected [[point]] (the only table a lockfile has)");
        pos_ += 9;
        if (absl::Status s = EndOfLine(); !s.ok()) return s;
        lock.entries.emplace_back();
        entry = &lock.entries.back();
        entry->line = line_;
        kind_set_.push_back(false);
        seen.clear();
        continue;
      }
      size_t start = pos_;
      while (pos_ < text_.size() && IsBareKeyChar(text_[pos_])) ++pos_;
      if (start == pos_) return Error(absl::StrCat("unexpected character '", std::string(1, c), "'"));
      std::string key(text_.substr(start, pos_ - start));
      SkipBlank();
      if (pos_ >= text_.size() || text_[pos_] != '=') return Error(absl::StrCat("expected '=' after ", QuoteInput(key)));
      ++pos_;
      SkipBlank();
      const int key_line = line_;
      for (const auto& [k, l] : seen) {
        if (k == key) return Error(absl::StrCat(QuoteInput(key), " is set twice (first at line ", l, ")"));
      }
      seen.emplace_back(key, key_line);
      if (entry == nullptr) {
        if (key == "format") {
          absl::StatusOr<int64_t> v = Integer();
          if (!v.ok()) return v.status();
          format = *v;
        } else if (key == "blueprint" || key == "version") {
          absl::StatusOr<std::string> v = String();
          if (!v.ok()) return v.status();
          (key == "blueprint" ? lock.blueprint : lock.version) = *v;
        } else {
          return ErrorAt(key_line, absl::StrCat("unknown key ", QuoteInput(key), " (top level: format, blueprint, version)"));
        }
      } else {
        absl::StatusOr<std::string> v = String();
        if (!v.ok()) return v.status();
        if (key == "name") {
          entry->point = *v;
        } else if (key == "kind") {
          std::optional<ArtifactKind> k = ParseKind(*v);
          if (!k) return ErrorAt(key_line, absl::StrCat("unknown kind ", QuoteInput(*v), " (lua_function or re2_pattern)"));
          entry->kind = *k;
          kind_set_.back() = true;
        } else if (key == "spec") {
          entry->spec_digest = *v;
        } else if (key == "artifact") {
          entry->artifact_digest = *v;
        } else if (key == "options") {
          entry->options_json = *v;
        } else if (key == "source") {
          entry->source = *v;
        } else {
          return ErrorAt(key_line, absl::StrCat("unknown key ", QuoteInput(key),
                                                " in [[point]] (name, kind, spec, artifact, options, source)"));
        }
      }
      if (absl::Status s = EndOfLine(); !s.ok()) return s;
    }
    if (format && *format != 1) return ErrorAt(1, absl::StrCat("lockfile format ", *format, " is not supported (this rote reads format 1)"));
    for (const LockEntry& e : lock.entries) {
      if (e.point.empty()) return ErrorAt(e.line, "[[point]] without a name");
      if (e.source.empty()) return ErrorAt(e.line, absl::StrCat("point ", QuoteInput(e.point), " has no source"));
    }
    for (size_t i = 0; i < lock.entries.size(); ++i) {
      if (!kind_set_[i]) {
        return ErrorAt(lock.entries[i].line, absl::StrCat("point ", QuoteInput(lock.entries[i].point),
                                                          " has no kind (lua_function or re2_pattern)"));
      }
    }
    return lock;
  }

 private:
  absl::Status Error(std::string_view message) const { return ErrorAt(line_, message); }
  absl::Status ErrorAt(int line, std::string_view message) const {
    return absl::InvalidArgumentError(absl::StrCat(origin_, ":", line, ": ", std::string(message)));
  }

  void SkipBlank() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\r')) ++pos_;
  }
  void SkipComment() {
    while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
  }
  absl::Status EndOfLine() {
    SkipBlank();
    if (pos_ < text_.size() && text_[pos_] == '#') SkipComment();
    if (pos_ < text_.size() && text_[pos_] != '\n') return Error("unexpected text after the value");
    return absl::OkStatus();
  }

  absl::StatusOr<int64_t> Integer() {
    size_t start = pos_;
    if (pos_ < text_.size() && (text_[pos_] == '-' || text_[pos_] == '+')) ++pos_;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
    int64_t v = 0;
    if (!absl::SimpleAtoi(std::string(text_.substr(start, pos_ - start)), &v)) return Error("expected an integer");
    return v;
  }

  absl::StatusOr<std::string> String() {
    if (text_.substr(pos_, 3) == "'''") {
      pos_ += 3;
      if (pos_ < text_.size() && text_[pos_] == '\n') { ++pos_; ++line_; }
      else if (text_.substr(pos_, 2) == "\r\n") { pos_ += 2; ++line_; }
      size_t end = text_.find("'''", pos_);
      if (end == std::string_view::npos) return Error("unterminated ''' string");
      std::string out(text_.substr(pos_, end - pos_));
      for (char c : out) if (c == '\n') ++line_;
      pos_ = end + 3;
      return out;
    }
    if (pos_ < text_.size() && text_[pos_] == '\'') {
      size_t end = text_.find_first_of("'\n", pos_ + 1);
      if (end == std::string_view::npos || text_[end] != '\'') return Error("unterminated '...' string");
      std::string out(text_.substr(pos_ + 1, end - pos_ - 1));
      pos_ = end + 1;
      return out;
    }
    if (pos_ < text_.size() && text_[pos_] == '"') {
      ++pos_;
      std::string out;
      while (true) {
        if (pos_ >= text_.size() || text_[pos_] == '\n') return Error("unterminated \"...\" string");
        char c = text_[pos_++];
        if (c == '"') break;
        if (c != '\\') { out.push_back(c); continue; }
        if (pos_ >= text_.size()) return Error("unterminated escape");
        char e = text_[pos_++];
        switch (e) {
          case '\\': out.push_back('\\'); break;
          case '"': out.push_back('"'); break;
          case 'n': out.push_back('\n'); break;
          case 't': out.push_back('\t'); break;
          case 'r': out.push_back('\r'); break;
          case 'u': {
            uint32_t cp = 0;
            if (pos_ + 4 > text_.size()) return Error("short \\u escape");
            for (int i = 0; i < 4; ++i) {
              char h = text_[pos_++];
              cp <<= 4;
              if (h >= '0' && h <= '9') cp |= static_cast<uint32_t>(h - '0');
              else if (h >= 'a' && h <= 'f') cp |= static_cast<uint32_t>(h - 'a' + 10);
              else if (h >= 'A' && h <= 'F') cp |= static_cast<uint32_t>(h - 'A' + 10);
              else return Error("bad \\u escape");
            }
            if (cp >= 0xD800 && cp <= 0xDFFF) return Error("\\u escape of a surrogate");
            AppendUtf8(&out, cp);
            break;
          }
          default: return Error(absl::StrCat("unknown escape \\", std::string(1, e)));
        }
      }
      return out;
    }
    return Error("expected a string (\"...\", '...' or '''...''')");
  }

  std::string_view text_;
  std::string origin_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<bool> kind_set_;  // per entry: whether `kind` was given
};

std::string Basic(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          static const char kHex[] = "0123456789abcdef";
          out += "\\u00";
          out.push_back(kHex[(c >> 4) & 0xf]);
          out.push_back(kHex[c & 0xf]);
        } else {
          out.push_back(c);
        }
    }
  }
  out += "\"";
  return out;
}

bool HasControl(std::string_view s, bool allow_newline) {
  for (char c : s) {
    if (c == '\n' && allow_newline) continue;
    if (c == '\t') continue;
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return true;
  }
  return false;
}

// The most readable spelling that parses back to exactly `s`.
std::string Quote(std::string_view s) {
  if (s.find('\n') != std::string_view::npos && s.find("'''") == std::string_view::npos &&
      !HasControl(s, true) && s.back() != '\'') {
    return absl::StrCat("'''\n", std::string(s), "'''");
  }
  if (s.find('\'') == std::string_view::npos && s.find('\n') == std::string_view::npos && !HasControl(s, false)) {
    return absl::StrCat("'", std::string(s), "'");
  }
  return Basic(s);
}

}  // namespace

absl::StatusOr<Lockfile> ParseLockfile(std::string_view text, std::string_view origin) {
  return Parser(text, origin).Parse();
}

std::string FormatLockfile(const Lockfile& lock) {
  std::string out =
      "# rote lockfile: the artifact bound to each generation point of the blueprint.\n"
      "# Written by `rote blueprints lock NAME --write FILE`; read by `rote blueprints register`.\n"
      "# `spec` and `artifact` are checked on registration: after editing a `source`, delete its\n"
      "# `artifact` line (the server computes it) and lock again. See docs/blueprints.md.\n"
      "format = 1\n";
  absl::StrAppend(&out, "blueprint = ", Basic(lock.blueprint), "\n");
  if (!lock.version.empty()) absl::StrAppend(&out, "version = ", Basic(lock.version), "\n");
  for (const LockEntry& e : lock.entries) {
    absl::StrAppend(&out, "\n[[point]]\nname = ", Basic(e.point), "\nkind = ", Basic(KindName(e.kind)), "\n");
    if (!e.spec_digest.empty()) absl::StrAppend(&out, "spec = ", Basic(e.spec_digest), "\n");
    if (!e.artifact_digest.empty()) absl::StrAppend(&out, "artifact = ", Basic(e.artifact_digest), "\n");
    if (e.kind == ArtifactKind::kRe2Pattern && !e.options_json.empty()) {
      absl::StrAppend(&out, "options = ", Quote(e.options_json), "\n");
    }
    absl::StrAppend(&out, "source = ", Quote(e.source), "\n");
  }
  return out;
}

}  // namespace rote::orchestrator::engine
