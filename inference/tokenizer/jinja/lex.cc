// The lexer: template text to tokens. Whitespace control follows Jinja2 with the options
// transformers sets (trim_blocks, lstrip_blocks, no trailing newline kept).
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "inference/tokenizer/jinja/jinja_internal.h"
#include "inference/tokenizer/utf8.h"

namespace rote::inference::jinja {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

class Lexer {
 public:
  explicit Lexer(std::string_view src) : src_(src) {}

  std::vector<Token> Run() {
    std::string data;
    int data_line = 1;
    bool strip_next = false;  // a '-' closed the previous tag
    bool trim_next = false;   // trim_blocks after a block tag or comment
    while (pos_ < src_.size()) {
      const size_t open = FindOpen(pos_);
      std::string_view chunk = src_.substr(pos_, open - pos_);
      if (strip_next) {
        size_t k = 0;
        while (k < chunk.size() && IsSpace(chunk[k])) ++k;
        Advance(k);
        chunk.remove_prefix(k);
      } else if (trim_next && !chunk.empty() && chunk[0] == '\n') {
        Advance(1);
        chunk.remove_prefix(1);
      }
      strip_next = trim_next = false;
      data_line = line_;
      data.assign(chunk);
      Advance(chunk.size());
      if (pos_ >= src_.size()) {
        Emit(Tok::kData, data, data_line);
        break;
      }
      const char kind = src_[pos_ + 1];  // '{', '%' or '#'
      const char mod = pos_ + 2 < src_.size() ? src_[pos_ + 2] : '\0';
      if (mod == '-') {
        while (!data.empty() && IsSpace(data.back())) data.pop_back();
      } else if (mod != '+' && kind != '{') {
        LStripBlock(data, open);
      }
      Emit(Tok::kData, data, data_line);
      const int tag_line = line_;
      Advance(2 + ((mod == '-' || mod == '+') ? 1 : 0));
      if (kind == '#') {
        const size_t end = src_.find("#}", pos_);
        if (end == std::string_view::npos) Fail("unclosed comment", tag_line);
        const bool minus = end > pos_ && src_[end - 1] == '-';
        const bool plus = end > pos_ && src_[end - 1] == '+';
        Advance(end + 2 - pos_);
        strip_next = minus;
        trim_next = !minus && !plus;
        continue;
      }
      if (kind == '%' && TryRaw(tag_line, strip_next, trim_next)) continue;
      const Tok end_type = kind == '{' ? Tok::kVarEnd : Tok::kBlockEnd;
      Emit(kind == '{' ? Tok::kVarBegin : Tok::kBlockBegin, "", tag_line);
      const char* close = kind == '{' ? "}}" : "%}";
      int brackets = 0;
      for (;;) {
        while (pos_ < src_.size() && IsSpace(src_[pos_])) Advance(1);
        if (pos_ >= src_.size()) Fail(std::string("unexpected end of template: missing '") + close + "'", tag_line);
        if (brackets == 0 || kind == '%') {
          const std::string_view rest = src_.substr(pos_);
          if (rest.substr(0, 2) == close) {
            Advance(2);
            trim_next = kind == '%';
            break;
          }
          if ((rest[0] == '-' || rest[0] == '+') && rest.substr(1, 2) == close) {
            strip_next = rest[0] == '-';
            trim_next = false;
            Advance(3);
            break;
          }
        }
        LexToken(brackets);
      }
      Emit(end_type, "", line_);
    }
    Emit(Tok::kEof, "", line_);
    return std::move(tokens_);
  }

 private:
  void Advance(size_t n) {
    for (size_t k = 0; k < n; ++k) if (src_[pos_ + k] == '\n') ++line_;
    pos_ += n;
  }
  void Emit(Tok t, std::string text, int line, Value v = {}) {
    if (t == Tok::kData && text.empty()) return;
    tokens_.push_back(Token{t, std::move(text), line, std::move(v)});
  }
  size_t FindOpen(size_t from) const {
    for (size_t k = from; k + 1 < src_.size(); ++k) {
      if (src_[k] == '{' && (src_[k + 1] == '{' || src_[k + 1] == '%' || src_[k + 1] == '#')) return k;
    }
    return src_.size();
  }
  // lstrip_blocks: spaces and tabs between a line start and a block tag or comment go.
  void LStripBlock(std::string& data, size_t tag_pos) const {
    size_t k = tag_pos;
    while (k > 0 && (src_[k - 1] == ' ' || src_[k - 1] == '\t')) --k;
    if (k > 0 && src_[k - 1] != '\n') return;
    const size_t n = tag_pos - k;
    if (n <= data.size()) data.resize(data.size() - n);
  }
  // {% raw %} ... {% endraw %}: the text between goes out verbatim.
  bool TryRaw(int tag_line, bool& strip_next, bool& trim_next) {
    size_t p = pos_;
    while (p < src_.size() && IsSpace(src_[p])) ++p;
    if (src_.substr(p, 3) != "raw") return false;
    p += 3;
    while (p < src_.size() && IsSpace(src_[p])) ++p;
    bool strip_inside = false;
    if (src_.substr(p, 3) == "-%}") { strip_inside = true; p += 3; }
    else if (src_.substr(p, 2) == "%}") p += 2;
    else return false;
    // Find {%[-+]? endraw [-+]?%}
    size_t q = p;
    for (;;) {
      q = src_.find("{%", q);
      if (q == std::string_view::npos) Fail("missing endraw", tag_line);
      size_t r = q + 2;
      const bool minus_before = r < src_.size() && src_[r] == '-';
      if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) ++r;
      while (r < src_.size() && IsSpace(src_[r])) ++r;
      if (src_.substr(r, 6) != "endraw") { q += 2; continue; }
      r += 6;
      while (r < src_.size() && IsSpace(src_[r])) ++r;
      bool minus_after = false;
      if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) { minus_after = src_[r] == '-'; ++r; }
      if (src_.substr(r, 2) != "%}") { q += 2; continue; }
      std::string body(src_.substr(p, q - p));
      if (strip_inside) {
        size_t k = 0;
        while (k < body.size() && IsSpace(body[k])) ++k;
        body.erase(0, k);
      }
      if (minus_before) while (!body.empty() && IsSpace(body.back())) body.pop_back();
      Emit(Tok::kData, body, line_);
      Advance(r + 2 - pos_);
      strip_next = minus_after;
      trim_next = !minus_after;
      return true;
    }
  }
  void LexToken(int& brackets) {
    const int line = line_;
    const char c = src_[pos_];
    if (IsNameStart(c)) {
      size_t e = pos_ + 1;
      while (e < src_.size() && (IsNameStart(src_[e]) || IsDigit(src_[e]))) ++e;
      Emit(Tok::kName, std::string(src_.substr(pos_, e - pos_)), line);
      Advance(e - pos_);
      return;
    }
    if (IsDigit(c)) {
      size_t e = pos_;
      bool is_float = false;
      while (e < src_.size() && (IsDigit(src_[e]) || src_[e] == '_')) ++e;
      if (e + 1 < src_.size() && src_[e] == '.' && IsDigit(src_[e + 1])) {
        is_float = true;
        ++e;
        while (e < src_.size() && (IsDigit(src_[e]) || src_[e] == '_')) ++e;
      }
      if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
        size_t f = e + 1;
        if (f < src_.size() && (src_[f] == '+' || src_[f] == '-')) ++f;
        if (f < src_.size() && IsDigit(src_[f])) {
          is_float = true;
          e = f;
          while (e < src_.size() && IsDigit(src_[e])) ++e;
        }
      }
      std::string text;
      for (char ch : src_.substr(pos_, e - pos_)) if (ch != '_') text.push_back(ch);
      Value v;
      if (is_float) {
        v = Value::Float(std::strtod(text.c_str(), nullptr));
      } else {
        errno = 0;
        const long long n = std::strtoll(text.c_str(), nullptr, 10);
        if (errno == ERANGE) Fail("integer literal too large", line);
        v = Value::Int(n);
      }
      Emit(is_float ? Tok::kFloat : Tok::kInt, text, line, v);
      Advance(e - pos_);
      return;
    }
    if (c == '\'' || c == '"') {
      LexString(c);
      return;
    }
    static const char* const kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%",
                                       "~", "(", ")", "[", "]", "{", "}", ",", ".", ":", "|",
                                       "=", "<", ">"};
    for (const char* op : kOps) {
      const size_t n = std::strlen(op);
      if (src_.substr(pos_, n) == op) {
        if (op[0] == '(' || op[0] == '[' || op[0] == '{') ++brackets;
        if ((op[0] == ')' || op[0] == ']' || op[0] == '}') && brackets > 0) --brackets;
        Emit(Tok::kOp, op, line);
        Advance(n);
        return;
      }
    }
    Fail(std::string("unexpected character '") + c + "'", line);
  }
  static int Hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  // Python's "unicode-escape" of the literal's body, as Jinja's lexer applies it.
  void LexString(char quote) {
    const int line = line_;
    size_t p = pos_ + 1;
    std::string out;
    for (;;) {
      if (p >= src_.size()) Fail("unterminated string literal", line);
      const char ch = src_[p];
      if (ch == quote) break;
      if (ch != '\\') {
        out += ch;
        ++p;
        continue;
      }
      if (p + 1 >= src_.size()) Fail("unterminated string literal", line);
      const char e = src_[p + 1];
      p += 2;
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case '\n': break;
        case 'x': case 'u': case 'U': {
          const int n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          char32_t cp = 0;
          for (int k = 0; k < n; ++k) {
            if (p >= src_.size() || Hex(src_[p]) < 0) Fail("truncated \\" + std::string(1, e) + " escape", line);
            cp = cp * 16 + static_cast<char32_t>(Hex(src_[p++]));
          }
          if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) cp = 0xFFFD;
          utf8::Append(out, cp);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            char32_t cp = static_cast<char32_t>(e - '0');
            for (int k = 0; k < 2 && p < src_.size() && src_[p] >= '0' && src_[p] <= '7'; ++k) {
              cp = cp * 8 + static_cast<char32_t>(src_[p++] - '0');
            }
            utf8::Append(out, cp);
          } else {
            out += '\\';
            out += e;
          }
      }
    }
    const size_t len = p + 1 - pos_;
    Emit(Tok::kString, out, line, Value::String(out));
    Advance(len);
  }

  std::string_view src_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

// Jinja's lexer first does "\n".join(source.splitlines()): every line break Python knows
// becomes "\n", and the final one goes (keep_trailing_newline=False).
std::string NormalizeNewlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  size_t pos = 0;
  while (pos < source.size()) {
    const size_t start = pos;
    const char32_t c = utf8::DecodeAt(source, pos);
    const bool br = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D ||
                    c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!br) {
      out.append(source.substr(start, pos - start));
      continue;
    }
    if (c == '\r' && pos < source.size() && source[pos] == '\n') ++pos;
    if (pos < source.size()) out += '\n';
  }
  return out;
}

}  // namespace

std::vector<Token> Lex(std::string_view source) {
  const std::string normalized = NormalizeNewlines(source);
  Lexer lexer(normalized);
  return lexer.Run();
}

}  // namespace rote::inference::jinja
