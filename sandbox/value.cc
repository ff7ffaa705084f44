#include "sandbox/value.h"

#include <charconv>
#include <cmath>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace rote::sandbox {

bool operator==(const Value& a, const Value& b) {
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kNil: return true;
    case Value::Kind::kBool: return a.as_bool() == b.as_bool();
    case Value::Kind::kInt: return a.as_int() == b.as_int();
    case Value::Kind::kFloat: {
      double x = a.as_float(), y = b.as_float();
      return std::memcmp(&x, &y, sizeof x) == 0;
    }
    case Value::Kind::kString: return a.as_string() == b.as_string();
    case Value::Kind::kArray: return a.as_array() == b.as_array();
    case Value::Kind::kMap: return a.as_map() == b.as_map();
  }
  return false;
}

const char* KindName(Value::Kind kind) {
  switch (kind) {
    case Value::Kind::kNil: return "nil";
    case Value::Kind::kBool: return "boolean";
    case Value::Kind::kInt: return "integer";
    case Value::Kind::kFloat: return "float";
    case Value::Kind::kString: return "string";
    case Value::Kind::kArray: return "array";
    case Value::Kind::kMap: return "map";
  }
  return "?";
}

size_t FindInvalidUtf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t n = s.size(), i = 0;
  while (i < n) {
    unsigned c = p[i];
    if (c < 0x80) { ++i; continue; }
    size_t len;
    uint32_t cp, min;
    if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; min = 0x80; }
    else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; min = 0x800; }
    else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; min = 0x10000; }
    else return i;
    if (i + len > n) return i;
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return std::string_view::npos;
}

namespace {

class JsonParser {
 public:
  explicit JsonParser(std::string_view text) : s_(text) {}

  absl::StatusOr<Value> ParseDocument() {
    SkipSpace();
    auto v = ParseValue(0);
    if (!v.ok()) return v;
    SkipSpace();
    if (pos_ != s_.size()) return Error("unexpected trailing characters");
    return v;
  }

 private:
  absl::Status Error(std::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("JSON: ", std::string(what), " at byte ", pos_));
  }
  void SkipSpace() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }
  bool Consume(std::string_view lit) {
    if (s_.substr(pos_, lit.size()) != lit) return false;
    pos_ += lit.size();
    return true;
  }

  absl::StatusOr<Value> ParseValue(int depth) {
    if (depth > kMaxJsonDepth) return Error(absl::StrCat("nesting deeper than ", kMaxJsonDepth));
    if (pos_ >= s_.size()) return Error("unexpected end of input");
    char c = s_[pos_];
    if (c == '{') return ParseObject(depth);
    if (c == '[') return ParseArray(depth);
    if (c == '"') {
      auto str = ParseString();
      if (!str.ok()) return str.status();
      return Value::String(*std::move(str));
    }
    if (Consume("null")) return Value::Nil();
    if (Consume("true")) return Value::Bool(true);
    if (Consume("false")) return Value::Bool(false);
    if (c == '-' || (c >= '0' && c <= '9')) return ParseNumber();
    return Error(absl::StrCat("unexpected character '", std::string(1, c), "'"));
  }

  absl::StatusOr<Value> ParseNumber() {
    size_t start = pos_;
    bool is_float = false;
    if (s_[pos_] == '-') ++pos_;
    auto digits = [&] {
      size_t d = pos_;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
      return pos_ - d;
    };
    size_t int_start = pos_;
    size_t nint = digits();
    if (nint == 0) return Error("malformed number");
    if (nint > 1 && s_[int_start] == '0') { pos_ = int_start; return Error("leading zero in number"); }
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      is_float = true;
      if (digits() == 0) return Error("malformed number fraction");
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      is_float = true;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (digits() == 0) return Error("malformed number exponent");
    }
    const char* b = s_.data() + start;
    const char* e = s_.data() + pos_;
    if (!is_float) {
      int64_t i;
      auto r = std::from_chars(b, e, i);
      if (r.ec != std::errc() || r.ptr != e) {
        pos_ = start;
        return Error("integer outside the int64 range (write it with a fraction or exponent for a float)");
      }
      return Value::Int(i);
    }
    double d;
    auto r = std::from_chars(b, e, d);
    if (r.ec == std::errc::result_out_of_range) {
      pos_ = start;
      return Error("number outside the double range");
    }
    if (r.ec != std::errc() || r.ptr != e) return Error("malformed number");
    return Value::Float(d);
  }

  static void AppendUtf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) out += static_cast<char>(cp);
    else if (cp < 0x800) { out += static_cast<char>(0xC0 | (cp >> 6)); out += static_cast<char>(0x80 | (cp & 0x3F)); }
    else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  absl::StatusOr<uint32_t> ParseHex4() {
    if (pos_ + 4 > s_.size()) return Error("truncated \\u escape");
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      char c = s_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= c - '0';
      else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
      else return Error("bad hex digit in \\u escape");
    }
    return v;
  }

  absl::StatusOr<std::string> ParseString() {
    ++pos_;  // opening quote
    std::string out;
    size_t run = pos_;
    while (true) {
      if (pos_ >= s_.size()) return Error("unterminated string");
      unsigned char c = static_cast<unsigned char>(s_[pos_]);
      if (c == '"') {
        out.append(s_.substr(run, pos_ - run));
        ++pos_;
        break;
      }
      if (c < 0x20) return Error("unescaped control character in string");
      if (c != '\\') { ++pos_; continue; }
      out.append(s_.substr(run, pos_ - run));
      ++pos_;
      if (pos_ >= s_.size()) return Error("unterminated escape");
      char e = s_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          auto hi = ParseHex4();
          if (!hi.ok()) return hi.status();
          uint32_t cp = *hi;
          if (cp >= 0xDC00 && cp <= 0xDFFF) return Error("unpaired low surrogate");
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (!Consume("\\u")) return Error("unpaired high surrogate");
            auto lo = ParseHex4();
            if (!lo.ok()) return lo.status();
            if (*lo < 0xDC00 || *lo > 0xDFFF) return Error("high surrogate not followed by a low one");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (*lo - 0xDC00);
          }
          AppendUtf8(out, cp);
          break;
        }
        default: --pos_; return Error("invalid escape");
      }
      run = pos_;
    }
    if (size_t bad = FindInvalidUtf8(out); bad != std::string::npos) {
      return Error(absl::StrCat("string is not valid UTF-8 (byte ", bad, " of the string)"));
    }
    return out;
  }

  absl::StatusOr<Value> ParseArray(int depth) {
    ++pos_;
    Array out;
    SkipSpace();
    if (pos_ < s_.size() && s_[pos_] == ']') { ++pos_; return Value::FromArray(std::move(out)); }
    while (true) {
      SkipSpace();
      auto v = ParseValue(depth + 1);
      if (!v.ok()) return v;
      out.push_back(*std::move(v));
      SkipSpace();
      if (pos_ >= s_.size()) return Error("unterminated array");
      if (s_[pos_] == ',') { ++pos_; continue; }
      if (s_[pos_] == ']') { ++pos_; break; }
      return Error("expected ',' or ']'");
    }
    return Value::FromArray(std::move(out));
  }

  absl::StatusOr<Value> ParseObject(int depth) {
    ++pos_;
    Map out;
    SkipSpace();
    if (pos_ < s_.size() && s_[pos_] == '}') { ++pos_; return Value::FromMap(std::move(out)); }
    while (true) {
      SkipSpace();
      if (pos_ >= s_.size() || s_[pos_] != '"') return Error("expected a string key");
      size_t key_pos = pos_;
      auto key = ParseString();
      if (!key.ok()) return key.status();
      SkipSpace();
      if (pos_ >= s_.size() || s_[pos_] != ':') return Error("expected ':'");
      ++pos_;
      SkipSpace();
      auto v = ParseValue(depth + 1);
      if (!v.ok()) return v;
      if (!out.emplace(*std::move(key), *std::move(v)).second) {
        pos_ = key_pos;
        return Error("duplicate object key");
      }
      SkipSpace();
      if (pos_ >= s_.size()) return Error("unterminated object");
      if (s_[pos_] == ',') { ++pos_; continue; }
      if (s_[pos_] == '}') { ++pos_; break; }
      return Error("expected ',' or '}'");
    }
    return Value::FromMap(std::move(out));
  }

  std::string_view s_;
  size_t pos_ = 0;
};

absl::Status WriteString(std::string& out, std::string_view s) {
  if (size_t bad = FindInvalidUtf8(s); bad != std::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("canonical JSON: string is not valid UTF-8 (byte ", bad, ")"));
  }
  static constexpr char kHex[] = "0123456789abcdef";
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += kHex[c >> 4];
          out += kHex[c & 15];
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
  return absl::OkStatus();
}

absl::Status Write(std::string& out, const Value& v, int depth) {
  if (depth > kMaxJsonDepth) {
    return absl::InvalidArgumentError(absl::StrCat("canonical JSON: nesting deeper than ", kMaxJsonDepth));
  }
  switch (v.kind()) {
    case Value::Kind::kNil: out += "null"; return absl::OkStatus();
    case Value::Kind::kBool: out += v.as_bool() ? "true" : "false"; return absl::OkStatus();
    case Value::Kind::kInt: {
      char buf[32];
      auto r = std::to_chars(buf, buf + sizeof buf, v.as_int());
      out.append(buf, r.ptr);
      return absl::OkStatus();
    }
    case Value::Kind::kFloat: {
      double d = v.as_float();
      if (std::isnan(d)) return absl::InvalidArgumentError("canonical JSON: NaN is not representable");
      if (std::isinf(d)) return absl::InvalidArgumentError("canonical JSON: infinity is not representable");
      char buf[64];
      auto r = std::to_chars(buf, buf + sizeof buf, d);
      std::string_view txt(buf, r.ptr - buf);
      out.append(txt);
      if (txt.find_first_of(".e") == std::string_view::npos) out += ".0";
      return absl::OkStatus();
    }
    case Value::Kind::kString: return WriteString(out, v.as_string());
    case Value::Kind::kArray: {
      out += '[';
      bool first = true;
      for (const Value& e : v.as_array()) {
        if (!first) out += ',';
        first = false;
        if (auto s = Write(out, e, depth + 1); !s.ok()) return s;
      }
      out += ']';
      return absl::OkStatus();
    }
    case Value::Kind::kMap: {
      out += '{';
      bool first = true;
      for (const auto& [k, e] : v.as_map()) {
        if (!first) out += ',';
        first = false;
        if (auto s = WriteString(out, k); !s.ok()) return s;
        out += ':';
        if (auto s = Write(out, e, depth + 1); !s.ok()) return s;
      }
      out += '}';
      return absl::OkStatus();
    }
  }
  return absl::InternalError("canonical JSON: unknown value kind");
}

}  // namespace

absl::StatusOr<Value> ParseJson(std::string_view text) { return JsonParser(text).ParseDocument(); }

absl::StatusOr<std::string> CanonicalJson(const Value& value) {
  std::string out;
  if (auto s = Write(out, value, 0); !s.ok()) return s;
  return out;
}

}  // namespace rote::sandbox
