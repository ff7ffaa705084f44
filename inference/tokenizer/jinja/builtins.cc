// Filters, tests, the methods of str/dict/list that the sandbox allows, and the globals
// transformers adds (raise_exception, strftime_now) besides Jinja's (range, namespace, dict).
#include <utf8proc.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <optional>

#include "inference/tokenizer/jinja/render.h"
#include "inference/tokenizer/utf8.h"

namespace rote::inference::jinja {
namespace {

// ---- text helpers (Python's str methods on code points) ----

bool IsPySpace(char32_t c) { return utf8::IsPythonSpace(c); }
char32_t Upper(char32_t c) { return static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c))); }
char32_t Lower(char32_t c) { return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))); }
bool IsCased(char32_t c) {
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
}
bool IsAlnum(char32_t c) {
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
         (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
}
bool IsWordChar(char32_t c) { return c == '_' || IsAlnum(c) || utf8::IsWordChar(c); }

std::string MapChars(const std::string& s, char32_t (*f)(char32_t)) {
  std::u32string u = Decode(s);
  for (char32_t& c : u) c = f(c);
  return Encode(u);
}

std::string Strip(const std::string& s, const Value& chars, bool left, bool right) {
  const std::u32string u = Decode(s);
  std::u32string set;
  const bool custom = chars.is_string();
  if (custom) set = Decode(chars.s());
  auto strip = [&](char32_t c) { return custom ? set.find(c) != std::u32string::npos : IsPySpace(c); };
  size_t b = 0, e = u.size();
  if (left) while (b < e && strip(u[b])) ++b;
  if (right) while (e > b && strip(u[e - 1])) --e;
  return Encode(std::u32string_view(u).substr(b, e - b));
}

std::string PyTitle(const std::string& s) {
  std::u32string u = Decode(s);
  bool prev_cased = false;
  for (char32_t& c : u) {
    const bool cased = IsCased(c);
    c = prev_cased ? Lower(c) : Upper(c);
    prev_cased = cased;
  }
  return Encode(u);
}

std::string Capitalize(const std::string& s) {
  std::u32string u = Decode(s);
  for (size_t k = 0; k < u.size(); ++k) u[k] = k == 0 ? Upper(u[k]) : Lower(u[k]);
  return Encode(u);
}

// Jinja's title filter: words begin after runs of '-', whitespace, '(', '{', '[', '<'.
std::string JinjaTitle(const std::string& s) {
  std::u32string u = Decode(s);
  bool start = true;
  for (char32_t& c : u) {
    const bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || IsPySpace(c);
    if (sep) { start = true; continue; }
    c = start ? Upper(c) : Lower(c);
    start = false;
  }
  return Encode(u);
}

std::string Replace(Renderer& r, const std::string& s, const std::string& old, const std::string& repl, int64_t count) {
  std::string out;
  if (old.empty()) {
    const std::u32string u = Decode(s);
    int64_t done = 0;
    for (size_t k = 0; k <= u.size(); ++k) {
      if (count < 0 || done < count) { out += repl; ++done; }
      if (k < u.size()) out += Encode(std::u32string(1, u[k]));
      r.CheckString(out.size());
    }
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  for (;;) {
    const size_t at = (count >= 0 && done >= count) ? std::string::npos : s.find(old, pos);
    if (at == std::string::npos) {
      out.append(s, pos, std::string::npos);
      break;
    }
    out.append(s, pos, at - pos);
    out += repl;
    r.CheckString(out.size());
    pos = at + old.size();
    ++done;
  }
  r.CheckString(out.size());
  return out;
}

std::vector<Value> Split(const std::string& s, const Value& sep, int64_t maxsplit) {
  std::vector<Value> out;
  if (sep.is_undefined() || sep.is_none()) {
    const std::u32string u = Decode(s);
    size_t k = 0;
    while (k < u.size()) {
      while (k < u.size() && IsPySpace(u[k])) ++k;
      if (k >= u.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
        size_t e = u.size();
        while (e > k && IsPySpace(u[e - 1])) --e;
        out.push_back(Value::String(Encode(std::u32string_view(u).substr(k, e - k))));
        break;
      }
      size_t e = k;
      while (e < u.size() && !IsPySpace(u[e])) ++e;
      out.push_back(Value::String(Encode(std::u32string_view(u).substr(k, e - k))));
      k = e;
    }
    return out;
  }
  if (!sep.is_string()) Fail("must be str or None, not " + sep.TypeName());
  const std::string& d = sep.s();
  if (d.empty()) Fail("empty separator");
  size_t pos = 0;
  for (;;) {
    const size_t at = (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) ? std::string::npos : s.find(d, pos);
    if (at == std::string::npos) {
      out.push_back(Value::String(s.substr(pos)));
      return out;
    }
    out.push_back(Value::String(s.substr(pos, at - pos)));
    pos = at + d.size();
  }
}

std::vector<std::string> SplitLines(const std::string& s) {
  std::vector<std::string> out;
  const std::u32string u = Decode(s);
  size_t start = 0;
  for (size_t k = 0; k < u.size(); ++k) {
    const char32_t c = u[k];
    const bool br = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D ||
                    c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!br) continue;
    out.push_back(Encode(std::u32string_view(u).substr(start, k - start)));
    if (c == '\r' && k + 1 < u.size() && u[k + 1] == '\n') ++k;
    start = k + 1;
  }
  if (start < u.size()) out.push_back(Encode(std::u32string_view(u).substr(start)));
  return out;
}

int64_t Length(const Value& v) {
  if (v.is_string()) return static_cast<int64_t>(Decode(v.s()).size());
  if (v.is_list()) return static_cast<int64_t>(v.list().items.size());
  if (v.is_dict() && !v.dict().is_namespace) return static_cast<int64_t>(v.dict().items.size());
  if (v.is_undefined()) return 0;
  Fail("object of type '" + v.TypeName() + "' has no len()");
}

int64_t IntArg(const Value& v, int64_t dflt, const char* what) {
  if (v.is_undefined() || v.is_none()) return dflt;
  if (!v.is_int() && !v.is_bool()) Fail(std::string(what) + " must be an integer, not " + v.TypeName());
  return v.i();
}

bool BoolArg(const Value& v, bool dflt) { return v.is_undefined() ? dflt : v.Truthy(); }

std::string StrArg(const Value& v, const char* what) {
  if (!v.is_string()) Fail(std::string(what) + " must be a string, not " + v.TypeName());
  return v.s();
}

// "a.b.0": Jinja's attribute paths for map/selectattr/sort/...
Value AttrPath(Renderer& r, Value v, const std::string& path) {
  size_t pos = 0;
  for (;;) {
    const size_t dot = path.find('.', pos);
    const std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (numeric && part.size() < 18) v = GetItem(r, v, Value::Int(std::stoll(part)));
    else v = GetItem(r, v, Value::String(part));
    if (dot == std::string::npos) return v;
    pos = dot + 1;
  }
}

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

Value Method(std::string name, NativeFn fn) { return Value::Function(std::move(name), std::move(fn)); }

// The sandbox's answer to a method that would modify a value: undefined, and an error when
// called.
Value Unsafe(const std::string& attr, const std::string& type) {
  return Value::Undefined("access to attribute '" + attr + "' of '" + type + "' object is unsafe.");
}

// str.format with positional and named fields; format specs are not supported.
std::string Format(Renderer& r, const std::string& fmt, CallArgs& args) {
  std::string out;
  size_t auto_idx = 0;
  for (size_t k = 0; k < fmt.size(); ++k) {
    const char c = fmt[k];
    if (c == '{' && k + 1 < fmt.size() && fmt[k + 1] == '{') { out += '{'; ++k; continue; }
    if (c == '}' && k + 1 < fmt.size() && fmt[k + 1] == '}') { out += '}'; ++k; continue; }
    if (c != '{') { out += c; continue; }
    const size_t close = fmt.find('}', k);
    if (close == std::string::npos) Fail("Single '{' encountered in format string");
    std::string field = fmt.substr(k + 1, close - k - 1);
    if (field.find(':') != std::string::npos || field.find('!') != std::string::npos) {
      Fail("format specifications are not supported in str.format");
    }
    Value v;
    if (field.empty()) {
      v = args.Get(auto_idx++, "\x01");
    } else if (std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; }) && field.size() < 9) {
      v = args.Get(static_cast<size_t>(std::stoul(field)), "\x01");
    } else {
      v = args.Get(SIZE_MAX, field);
    }
    if (v.is_undefined() && !args.Has(SIZE_MAX, field)) Fail("format field '" + field + "' has no argument");
    out += Str(v);
    r.CheckString(out.size());
    k = close;
  }
  return out;
}

Value StringMethod(Renderer& r, const Value& self, const std::string& name) {
  const std::string s = self.s();
  auto m = [&](NativeFn fn) { return Method("str." + name, std::move(fn)); };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const bool left = name != "rstrip", right = name != "lstrip";
    return m([s, left, right](Renderer&, CallArgs& a) { return Value::String(Strip(s, a.Get(0, "chars"), left, right)); });
  }
  if (name == "upper") return m([s](Renderer&, CallArgs&) { return Value::String(MapChars(s, Upper)); });
  if (name == "lower") return m([s](Renderer&, CallArgs&) { return Value::String(MapChars(s, Lower)); });
  if (name == "title") return m([s](Renderer&, CallArgs&) { return Value::String(PyTitle(s)); });
  if (name == "capitalize") return m([s](Renderer&, CallArgs&) { return Value::String(Capitalize(s)); });
  if (name == "split" || name == "rsplit") {
    return m([s, name](Renderer& rr, CallArgs& a) {
      const int64_t maxsplit = IntArg(a.Get(1, "maxsplit"), -1, "maxsplit");
      if (name == "rsplit" && maxsplit >= 0) Fail("rsplit with maxsplit is not supported");
      std::vector<Value> parts = Split(s, a.Get(0, "sep"), maxsplit);
      rr.CheckItems(parts.size());
      return Value::List(std::move(parts));
    });
  }
  if (name == "splitlines") {
    return m([s](Renderer& rr, CallArgs&) {
      std::vector<Value> out;
      for (auto& line : SplitLines(s)) out.push_back(Value::String(line));
      rr.CheckItems(out.size());
      return Value::List(std::move(out));
    });
  }
  if (name == "startswith" || name == "endswith") {
    const bool starts = name == "startswith";
    return m([s, starts](Renderer&, CallArgs& a) {
      const Value p = a.Get(0, "prefix");
      std::vector<Value> options = p.is_list() ? p.list().items : std::vector<Value>{p};
      for (const Value& o : options) {
        const std::string t = StrArg(o, starts ? "startswith argument" : "endswith argument");
        if (starts ? s.compare(0, t.size(), t) == 0 && s.size() >= t.size()
                   : s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0) {
          return Value::Bool(true);
        }
      }
      return Value::Bool(false);
    });
  }
  if (name == "replace") {
    return m([s](Renderer& rr, CallArgs& a) {
      return Value::String(Replace(rr, s, StrArg(a.Get(0, "old"), "replace argument"),
                                   StrArg(a.Get(1, "new"), "replace argument"), IntArg(a.Get(2, "count"), -1, "count")));
    });
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    return m([s, name](Renderer&, CallArgs& a) {
      const std::string t = StrArg(a.Get(0, "sub"), name.c_str());
      if (name == "count") {
        if (t.empty()) return Value::Int(static_cast<int64_t>(Decode(s).size()) + 1);
        int64_t n = 0;
        for (size_t p = s.find(t); p != std::string::npos; p = s.find(t, p + t.size())) ++n;
        return Value::Int(n);
      }
      const size_t at = (name == "find" || name == "index") ? s.find(t) : s.rfind(t);
      if (at == std::string::npos) {
        if (name == "index" || name == "rindex") Fail("substring not found");
        return Value::Int(-1);
      }
      return Value::Int(static_cast<int64_t>(Decode(s.substr(0, at)).size()));
    });
  }
  if (name == "join") {
    return m([s](Renderer& rr, CallArgs& a) {
      std::string out;
      bool first = true;
      for (const Value& v : rr.Iterate(a.Get(0, "iterable"))) {
        if (!first) out += s;
        first = false;
        out += StrArg(v, "join item");
        rr.CheckString(out.size());
      }
      return Value::String(out);
    });
  }
  if (name == "format") return m([s](Renderer& rr, CallArgs& a) { return Value::String(Format(rr, s, a)); });
  if (name == "removeprefix" || name == "removesuffix") {
    const bool prefix = name == "removeprefix";
    return m([s, prefix](Renderer&, CallArgs& a) {
      const std::string t = StrArg(a.Get(0, "affix"), "affix");
      if (prefix && s.compare(0, t.size(), t) == 0 && s.size() >= t.size()) return Value::String(s.substr(t.size()));
      if (!prefix && s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0) {
        return Value::String(s.substr(0, s.size() - t.size()));
      }
      return Value::String(s);
    });
  }
  if (name == "isdigit" || name == "isnumeric" || name == "isdecimal" || name == "isalpha" || name == "isalnum" ||
      name == "isspace" || name == "islower" || name == "isupper") {
    return m([s, name](Renderer&, CallArgs&) {
      const std::u32string u = Decode(s);
      if (u.empty()) return Value::Bool(false);
      if (name == "islower" || name == "isupper") {
        bool any = false;
        for (char32_t c : u) {
          if (!IsCased(c)) continue;
          any = true;
          if (name == "islower" ? Lower(c) != c : Upper(c) != c) return Value::Bool(false);
        }
        return Value::Bool(any);
      }
      for (char32_t c : u) {
        const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
        const bool digit = cat == UTF8PROC_CATEGORY_ND;
        const bool alpha = cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
        bool ok = name == "isspace" ? IsPySpace(c) : name == "isalpha" ? alpha : name == "isalnum" ? (alpha || IsAlnum(c)) : digit;
        if (!ok) return Value::Bool(false);
      }
      return Value::Bool(true);
    });
  }
  (void)r;
  return Value::Undefined("'str object' has no attribute '" + name + "'");
}

Value DictItems(const Value& d) {
  std::vector<Value> out;
  for (const auto& [k, v] : d.dict().items) out.push_back(Value::List({Value::String(k), v}, true));
  return Value::List(std::move(out));
}

std::optional<Value> DictMethod(const Value& self, const std::string& name) {
  if (name == "items") return Method("dict.items", [self](Renderer&, CallArgs&) { return DictItems(self); });
  if (name == "keys" || name == "values") {
    const bool keys = name == "keys";
    return Method("dict." + name, [self, keys](Renderer&, CallArgs&) {
      std::vector<Value> out;
      for (const auto& [k, v] : self.dict().items) out.push_back(keys ? Value::String(k) : v);
      return Value::List(std::move(out));
    });
  }
  if (name == "get") {
    return Method("dict.get", [self](Renderer&, CallArgs& a) {
      const Value key = a.Get(0, "key");
      const Value* v = key.is_string() ? self.dict().Find(key.s()) : nullptr;
      if (v) return *v;
      return a.Has(1, "default") ? a.Get(1, "default") : Value::None();
    });
  }
  if (name == "copy") return Method("dict.copy", [self](Renderer&, CallArgs&) { return Value::Dict(std::make_shared<DictObj>(self.dict())); });
  if (name == "pop" || name == "popitem" || name == "update" || name == "setdefault" || name == "clear") {
    return Unsafe(name, "dict");
  }
  return std::nullopt;
}

std::optional<Value> ListMethod(const Value& self, const std::string& name) {
  if (name == "index" || name == "count") {
    const bool count = name == "count";
    return Method("list." + name, [self, count](Renderer&, CallArgs& a) {
      const Value x = a.Get(0, "value");
      int64_t n = 0;
      const auto& items = self.list().items;
      for (size_t k = 0; k < items.size(); ++k) {
        if (!Equal(items[k], x)) continue;
        if (!count) return Value::Int(static_cast<int64_t>(k));
        ++n;
      }
      if (!count) Fail(Repr(x) + " is not in list");
      return Value::Int(n);
    });
  }
  if (name == "append" || name == "extend" || name == "insert" || name == "pop" || name == "remove" ||
      name == "sort" || name == "reverse" || name == "clear") {
    return Unsafe(name, self.TypeName());
  }
  return std::nullopt;
}

std::vector<Value> SortValues(Renderer& r, std::vector<Value> items, bool reverse, bool case_sensitive, const Value& attribute) {
  auto key = [&](const Value& v) {
    Value k = attribute.is_undefined() || attribute.is_none() ? v : AttrPath(r, v, Str(attribute));
    if (!case_sensitive && k.is_string()) k = Value::String(MapChars(k.s(), Lower));
    return k;
  };
  std::vector<std::pair<Value, Value>> keyed;
  for (auto& v : items) keyed.emplace_back(key(v), v);
  r.Work(keyed.size() * 8);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    return reverse ? Less(b.first, a.first) : Less(a.first, b.first);
  });
  std::vector<Value> out;
  for (auto& kv : keyed) out.push_back(kv.second);
  return out;
}

// select/reject/selectattr/rejectattr: the test named by args[first] with the rest as its args.
std::vector<Value> SelectItems(Renderer& r, const Value& input, CallArgs& args, bool attr, bool keep) {
  std::vector<Value> out;
  size_t first = 0;
  std::string attribute;
  if (attr) {
    if (args.positional.empty()) Fail("selectattr/rejectattr need an attribute");
    attribute = StrArg(args.positional[0], "attribute");
    first = 1;
  }
  std::optional<std::string> test;
  CallArgs test_args;
  test_args.line = args.line;
  if (args.positional.size() > first) {
    test = StrArg(args.positional[first], "test name");
    test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(first) + 1, args.positional.end());
    test_args.keyword = args.keyword;
  }
  for (const Value& item : r.Iterate(input)) {
    const Value v = attr ? AttrPath(r, item, attribute) : item;
    const bool pass = test ? ApplyTest(r, *test, v, test_args) : v.Truthy();
    if (pass == keep) out.push_back(item);
  }
  return out;
}

Value FilterInt(const Value& v, const Value& dflt, int64_t base) {
  const Value d = dflt.is_undefined() ? Value::Int(0) : dflt;
  if (v.is_int() || v.is_bool()) return Value::Int(v.i());
  if (v.is_float()) {
    if (!std::isfinite(v.f()) || std::fabs(v.f()) > 9.2e18) return d;
    return Value::Int(static_cast<int64_t>(v.f()));
  }
  if (v.is_string()) {
    std::string t = Strip(v.s(), Value(), true, true);
    std::string digits;
    for (char c : t) if (c != '_') digits.push_back(c);
    if (digits.empty()) return d;
    char* end = nullptr;
    errno = 0;
    const long long n = std::strtoll(digits.c_str(), &end, static_cast<int>(base));
    if (errno == 0 && end && *end == '\0') return Value::Int(n);
    errno = 0;
    const double f = std::strtod(digits.c_str(), &end);
    if (errno == 0 && end && *end == '\0' && std::isfinite(f) && std::fabs(f) < 9.2e18) return Value::Int(static_cast<int64_t>(f));
    return d;
  }
  return d;
}

Value FilterFloat(const Value& v, const Value& dflt) {
  const Value d = dflt.is_undefined() ? Value::Float(0.0) : dflt;
  if (v.is_number()) return Value::Float(v.f());
  if (v.is_string()) {
    const std::string t = Strip(v.s(), Value(), true, true);
    if (t.empty()) return d;
    char* end = nullptr;
    const double f = std::strtod(t.c_str(), &end);
    if (end && *end == '\0') return Value::Float(f);
  }
  return d;
}

std::string Indent(const std::string& in, const Value& width, bool first, bool blank) {
  const std::string ind = width.is_string() ? width.s() : std::string(static_cast<size_t>(std::clamp<int64_t>(IntArg(width, 4, "width"), 0, 1 << 16)), ' ');
  std::vector<std::string> lines = SplitLines(in + "\n");
  std::string rv;
  if (blank) {
    for (size_t k = 0; k < lines.size(); ++k) {
      if (k) rv += "\n" + ind;
      rv += lines[k];
    }
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t k = 1; k < lines.size(); ++k) rv += "\n" + (lines[k].empty() ? "" : ind + lines[k]);
  }
  if (first) rv = ind + rv;
  return rv;
}

}  // namespace

[[noreturn]] void FailUndefined(const Value& v) {
  const std::string& n = v.undefined_name();
  if (n.empty()) Fail("undefined value used");
  if (n.find(' ') != std::string::npos) Fail(n);  // a whole message, not a name
  Fail("'" + n + "' is undefined");
}

Value GetAttr(Renderer& r, const Value& obj, const std::string& name) {
  if (obj.is_undefined()) FailUndefined(obj);
  if (obj.is_dict()) {
    if (!obj.dict().is_namespace) {
      if (std::optional<Value> m = DictMethod(obj, name)) return *m;
    }
    const Value* v = obj.dict().Find(name);
    if (v) return *v;
    return Value::Undefined("'" + std::string(obj.dict().is_namespace ? "Namespace" : "dict object") + "' has no attribute '" + name + "'");
  }
  if (obj.is_string()) return StringMethod(r, obj, name);
  if (obj.is_list()) {
    if (std::optional<Value> m = ListMethod(obj, name)) return *m;
  }
  return Value::Undefined("'" + obj.TypeName() + " object' has no attribute '" + name + "'");
}

Value GetItem(Renderer& r, const Value& obj, const Value& key) {
  if (obj.is_undefined()) FailUndefined(obj);
  if (obj.is_dict()) {
    if (key.is_string()) {
      const Value* v = obj.dict().Find(key.s());
      if (v) return *v;
      if (!obj.dict().is_namespace) {
        if (std::optional<Value> m = DictMethod(obj, key.s())) return *m;
      }
    }
    return Value::Undefined("'dict object' has no attribute " + Repr(key));
  }
  if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.i();
    if (obj.is_list()) {
      const int64_t n = static_cast<int64_t>(obj.list().items.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::Undefined("list index out of range");
      return obj.list().items[static_cast<size_t>(i)];
    }
    const std::u32string u = Decode(obj.s());
    const int64_t n = static_cast<int64_t>(u.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value::Undefined("string index out of range");
    return Value::String(Encode(std::u32string(1, u[static_cast<size_t>(i)])));
  }
  if (key.is_string()) return GetAttr(r, obj, key.s());
  return Value::Undefined("'" + obj.TypeName() + " object' has no item " + Repr(key));
}

Value ApplyFilter(Renderer& r, const std::string& name, const Value& in, CallArgs& a) {
  r.Work(1);
  auto str_in = [&]() { return in.is_string() ? in.s() : Str(in); };
  if (name == "trim") return Value::String(Strip(str_in(), a.Get(0, "chars"), true, true));
  if (name == "length" || name == "count") return Value::Int(Length(in));
  if (name == "upper") return Value::String(MapChars(str_in(), Upper));
  if (name == "lower") return Value::String(MapChars(str_in(), Lower));
  if (name == "title") return Value::String(JinjaTitle(str_in()));
  if (name == "capitalize") return Value::String(Capitalize(str_in()));
  if (name == "string") return in.is_string() ? in : Value::String(Str(in));
  if (name == "safe" || name == "forceescape" || name == "e" || name == "escape") {
    if (name == "safe") return in.is_string() ? in : Value::String(Str(in));
    return Value::String(Escape(str_in()));
  }
  if (name == "replace") {
    return Value::String(Replace(r, str_in(), Str(a.Get(0, "old")), Str(a.Get(1, "new")), IntArg(a.Get(2, "count"), -1, "count")));
  }
  if (name == "default" || name == "d") {
    const bool boolean = BoolArg(a.Get(1, "boolean"), false);
    if (in.is_undefined() || (boolean && !in.Truthy())) return a.Has(0, "default_value") ? a.Get(0, "default_value") : Value::String("");
    return in;
  }
  if (name == "tojson") {
    const Value indent = a.Get(0, "indent");
    const Value seps = a.Get(2, "separators");
    const bool has_indent = !indent.is_undefined() && !indent.is_none();
    std::string item_sep = has_indent ? "," : ", ", key_sep = ": ";
    if (seps.is_list() && seps.list().items.size() == 2) {
      item_sep = StrArg(seps.list().items[0], "separator");
      key_sep = StrArg(seps.list().items[1], "separator");
    }
    const int width = has_indent ? static_cast<int>(std::clamp<int64_t>(IntArg(indent, 0, "indent"), 0, 64)) : 0;
    std::string out = ToJsonText(in, width, has_indent, item_sep, key_sep, BoolArg(a.Get(3, "sort_keys"), false));
    r.CheckString(out.size());
    return Value::String(std::move(out));
  }
  if (name == "join") {
    const Value attr = a.Get(1, "attribute");
    const Value sep = a.Get(0, "d");
    const std::string d = sep.is_undefined() ? "" : Str(sep);
    std::string out;
    bool first = true;
    for (const Value& item : r.Iterate(in)) {
      if (!first) out += d;
      first = false;
      out += Str(attr.is_undefined() ? item : AttrPath(r, item, Str(attr)));
      r.CheckString(out.size());
    }
    return Value::String(std::move(out));
  }
  if (name == "first" || name == "last") {
    std::vector<Value> items = r.Iterate(in);
    if (items.empty()) return Value::Undefined("No first item, sequence was empty.");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") return Value::List(r.Iterate(in));
  if (name == "items") {
    if (in.is_undefined()) return Value::List({});
    if (!in.is_dict()) Fail("items filter needs a mapping, got " + in.TypeName());
    return DictItems(in);
  }
  if (name == "dictsort") {
    if (!in.is_dict()) Fail("dictsort needs a mapping, got " + in.TypeName());
    const bool by_value = Str(a.Get(1, "by")) == "value";
    std::vector<Value> items = DictItems(in).list().items;
    const bool cs = BoolArg(a.Get(0, "case_sensitive"), false);
    const bool rev = BoolArg(a.Get(2, "reverse"), false);
    auto key = [&](const Value& kv) {
      Value k = kv.list().items[by_value ? 1 : 0];
      if (!cs && k.is_string()) k = Value::String(MapChars(k.s(), Lower));
      return k;
    };
    std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) { return rev ? Less(key(y), key(x)) : Less(key(x), key(y)); });
    return Value::List(std::move(items));
  }
  if (name == "map") {
    std::vector<Value> out;
    const Value attr = a.Get(SIZE_MAX, "attribute");
    if (!attr.is_undefined()) {
      const Value dflt = a.Get(SIZE_MAX, "default");
      for (const Value& item : r.Iterate(in)) {
        Value v = AttrPath(r, item, Str(attr));
        out.push_back(v.is_undefined() && !dflt.is_undefined() ? dflt : v);
      }
      return Value::List(std::move(out));
    }
    if (a.positional.empty()) Fail("map needs a filter name or attribute=");
    const std::string filter = StrArg(a.positional[0], "filter name");
    CallArgs rest;
    rest.line = a.line;
    rest.positional.assign(a.positional.begin() + 1, a.positional.end());
    rest.keyword = a.keyword;
    for (const Value& item : r.Iterate(in)) out.push_back(ApplyFilter(r, filter, item, rest));
    return Value::List(std::move(out));
  }
  if (name == "select" || name == "reject") return Value::List(SelectItems(r, in, a, false, name == "select"));
  if (name == "selectattr" || name == "rejectattr") return Value::List(SelectItems(r, in, a, true, name == "selectattr"));
  if (name == "unique") {
    const bool cs = BoolArg(a.Get(0, "case_sensitive"), false);
    const Value attr = a.Get(1, "attribute");
    std::vector<Value> out, seen;
    for (const Value& item : r.Iterate(in)) {
      Value k = attr.is_undefined() ? item : AttrPath(r, item, Str(attr));
      if (!cs && k.is_string()) k = Value::String(MapChars(k.s(), Lower));
      bool dup = false;
      for (const Value& s : seen) {
        r.Work(1);
        if (Equal(s, k)) { dup = true; break; }
      }
      if (!dup) {
        seen.push_back(k);
        out.push_back(item);
      }
    }
    return Value::List(std::move(out));
  }
  if (name == "sort") {
    return Value::List(SortValues(r, r.Iterate(in), BoolArg(a.Get(0, "reverse"), false),
                                  BoolArg(a.Get(1, "case_sensitive"), false), a.Get(2, "attribute")));
  }
  if (name == "max" || name == "min") {
    std::vector<Value> sorted = SortValues(r, r.Iterate(in), false, BoolArg(a.Get(0, "case_sensitive"), false), a.Get(1, "attribute"));
    if (sorted.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
    return name == "min" ? sorted.front() : sorted.back();
  }
  if (name == "sum") {
    const Value attr = a.Get(0, "attribute");
    Value total = a.Has(1, "start") ? a.Get(1, "start") : Value::Int(0);
    for (const Value& item : r.Iterate(in)) {
      const Value v = attr.is_undefined() ? item : AttrPath(r, item, Str(attr));
      if (!v.is_number() || !total.is_number()) Fail("sum needs numbers");
      total = total.is_float() || v.is_float() ? Value::Float(total.f() + v.f()) : Value::Int(total.i() + v.i());
    }
    return total;
  }
  if (name == "reverse") {
    if (in.is_string()) {
      std::u32string u = Decode(in.s());
      std::reverse(u.begin(), u.end());
      return Value::String(Encode(u));
    }
    std::vector<Value> items = r.Iterate(in);
    std::reverse(items.begin(), items.end());
    return Value::List(std::move(items));
  }
  if (name == "indent") {
    std::string out = Indent(str_in(), a.Get(0, "width"), BoolArg(a.Get(1, "first"), false), BoolArg(a.Get(2, "blank"), false));
    r.CheckString(out.size());
    return Value::String(std::move(out));
  }
  if (name == "int") return FilterInt(in, a.Get(0, "default"), std::clamp<int64_t>(IntArg(a.Get(1, "base"), 10, "base"), 2, 36));
  if (name == "float") return FilterFloat(in, a.Get(0, "default"));
  if (name == "abs") {
    if (in.is_float()) return Value::Float(std::fabs(in.f()));
    if (in.is_int() || in.is_bool()) {
      if (in.i() == INT64_MIN) Fail("integer overflow");
      return Value::Int(in.i() < 0 ? -in.i() : in.i());
    }
    Fail("bad operand type for abs(): '" + in.TypeName() + "'");
  }
  if (name == "round") {
    if (!in.is_number()) Fail("round needs a number, got " + in.TypeName());
    const int64_t precision = std::clamp<int64_t>(IntArg(a.Get(0, "precision"), 0, "precision"), -300, 300);
    const std::string method = a.Has(1, "method") ? Str(a.Get(1, "method")) : "common";
    if (method == "common") {
      // Python's round(): ints stay ints; floats round half to even on their exact value, which
      // printf's %.Nf does too.
      if (!in.is_float()) return Value::Int(in.i());
      if (precision >= 0 && precision <= 60 && std::isfinite(in.f())) {
        char buf[512];
        std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(precision), in.f());
        return Value::Float(std::strtod(buf, nullptr));
      }
      const double scale = std::pow(10.0, static_cast<double>(precision));
      return Value::Float(std::nearbyint(in.f() * scale) / scale);
    }
    const double scale = std::pow(10.0, static_cast<double>(precision));
    const double x = in.f() * scale;
    double y;
    if (method == "ceil") y = std::ceil(x);
    else if (method == "floor") y = std::floor(x);
    else Fail("method must be common, ceil or floor");
    return Value::Float(y / scale);
  }
  if (name == "wordcount") {
    const std::u32string u = Decode(str_in());
    int64_t n = 0;
    bool in_word = false;
    for (char32_t c : u) {
      const bool w = IsWordChar(c);
      if (w && !in_word) ++n;
      in_word = w;
    }
    return Value::Int(n);
  }
  if (name == "attr") return GetAttr(r, in, StrArg(a.Get(0, "name"), "attribute name"));
  if (name == "batch") {
    const int64_t size = IntArg(a.Get(0, "linecount"), 1, "linecount");
    if (size <= 0) Fail("batch size must be positive");
    std::vector<Value> out, cur;
    for (const Value& item : r.Iterate(in)) {
      cur.push_back(item);
      if (static_cast<int64_t>(cur.size()) == size) { out.push_back(Value::List(std::move(cur))); cur.clear(); }
    }
    if (!cur.empty()) {
      if (a.Has(1, "fill_with")) while (static_cast<int64_t>(cur.size()) < size) cur.push_back(a.Get(1, "fill_with"));
      out.push_back(Value::List(std::move(cur)));
    }
    return Value::List(std::move(out));
  }
  if (name == "center") {
    const int64_t width = std::clamp<int64_t>(IntArg(a.Get(0, "width"), 80, "width"), 0, 1 << 16);
    const std::string s = str_in();
    const int64_t len = static_cast<int64_t>(Decode(s).size());
    if (len >= width) return Value::String(s);
    // Python's str.center: the extra space goes right when the margin is odd and the width even.
    const int64_t marg = width - len;
    const int64_t left = marg / 2 + (marg & width & 1);
    return Value::String(std::string(static_cast<size_t>(left), ' ') + s + std::string(static_cast<size_t>(marg - left), ' '));
  }
  if (name == "format") {
    // printf-style with %s and %d only.
    const std::string fmt = str_in();
    std::string out;
    size_t next = 0;
    for (size_t k = 0; k < fmt.size(); ++k) {
      if (fmt[k] != '%' || k + 1 >= fmt.size()) { out += fmt[k]; continue; }
      const char spec = fmt[++k];
      if (spec == '%') { out += '%'; continue; }
      if (spec != 's' && spec != 'd') Fail(std::string("format: unsupported conversion %") + spec);
      if (next >= a.positional.size()) Fail("not enough arguments for format string");
      const Value& v = a.positional[next++];
      out += spec == 'd' ? std::to_string(FilterInt(v, Value::Int(0), 10).i()) : Str(v);
      r.CheckString(out.size());
    }
    return Value::String(out);
  }
  Fail("no filter named '" + name + "'");
}

bool ApplyTest(Renderer& r, const std::string& name, const Value& v, CallArgs& a) {
  r.Work(1);
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.b();
  if (name == "false") return v.is_bool() && !v.b();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict() && !v.dict().is_namespace;
  if (name == "iterable") return v.is_string() || v.is_list() || (v.is_dict() && !v.dict().is_namespace) || v.is_undefined();
  if (name == "sequence") return v.is_string() || v.is_list() || (v.is_dict() && !v.dict().is_namespace) || v.is_undefined();
  if (name == "callable") return v.is_function() || v.is_undefined();
  if (name == "escaped") return false;
  if (name == "sameas") {
    // Identity: None and the booleans are singletons; Python caches small ints, and rote treats
    // all ints alike.
    const Value o = a.Get(0, "other");
    if (v.is_none() || v.is_bool() || v.is_undefined()) {
      return (v.is_none() && o.is_none()) || (v.is_bool() && o.is_bool() && v.b() == o.b());
    }
    if (v.is_int() && o.is_int()) return v.i() == o.i();
    return v.identity() != nullptr && v.identity() == o.identity();
  }
  if (name == "lower" || name == "upper") {
    if (!v.is_string()) return false;
    CallArgs none;
    return StringMethod(r, v, name == "lower" ? "islower" : "isupper").fn().fn(r, none).Truthy();
  }
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (!v.is_int() && !v.is_bool()) Fail("test '" + name + "' needs an integer, got " + v.TypeName());
    if (name == "divisibleby") {
      const int64_t d = IntArg(a.Get(0, "num"), 1, "divisor");
      if (d == 0) Fail("integer division or modulo by zero");
      return d == -1 || v.i() % d == 0;
    }
    const bool odd = (v.i() % 2) != 0;
    return name == "odd" ? odd : !odd;
  }
  if (name == "eq" || name == "equalto" || name == "==") return Equal(v, a.Get(0, "other"));
  if (name == "ne" || name == "!=") return !Equal(v, a.Get(0, "other"));
  if (name == "lt" || name == "lessthan" || name == "<") return Less(v, a.Get(0, "other"));
  if (name == "gt" || name == "greaterthan" || name == ">") return Less(a.Get(0, "other"), v);
  if (name == "le" || name == "<=") return !Less(a.Get(0, "other"), v);
  if (name == "ge" || name == ">=") return !Less(v, a.Get(0, "other"));
  if (name == "in") {
    const Value c = a.Get(0, "seq");
    if (c.is_string()) {
      if (!v.is_string()) Fail("'in <string>' requires string as left operand, not " + v.TypeName());
      return c.s().find(v.s()) != std::string::npos;
    }
    if (c.is_list()) {
      for (const Value& x : c.list().items) {
        r.Work(1);
        if (Equal(x, v)) return true;
      }
      return false;
    }
    if (c.is_dict() && !c.dict().is_namespace) return v.is_string() && c.dict().Find(v.s()) != nullptr;
    if (c.is_undefined()) return false;
    Fail("argument of type '" + c.TypeName() + "' is not iterable");
  }
  if (name == "filter" || name == "test") return false;
  Fail("no test named '" + name + "'");
}

void AddGlobals(Scope& g) {
  g.vars["range"] = Value::Function("range", [](Renderer& r, CallArgs& a) -> Value {
    int64_t start = 0, stop, step = 1;
    if (a.positional.size() == 1) {
      stop = IntArg(a.positional[0], 0, "range argument");
    } else if (a.positional.size() == 2 || a.positional.size() == 3) {
      start = IntArg(a.positional[0], 0, "range argument");
      stop = IntArg(a.positional[1], 0, "range argument");
      if (a.positional.size() == 3) step = IntArg(a.positional[2], 1, "range argument");
    } else {
      Fail("range expected 1 to 3 arguments");
    }
    if (step == 0) Fail("range() arg 3 must not be zero");
    const Int128 span = step > 0 ? static_cast<Int128>(stop) - start : static_cast<Int128>(start) - stop;
    const Int128 abs_step = step > 0 ? step : -static_cast<Int128>(step);
    const Int128 n = span <= 0 ? 0 : (span + abs_step - 1) / abs_step;
    if (n > static_cast<Int128>(r.limits().max_items)) r.CheckItems(r.limits().max_items + 1);
    r.CheckItems(static_cast<size_t>(n));
    std::vector<Value> out;
    out.reserve(static_cast<size_t>(n));
    for (Int128 k = 0; k < n; ++k) out.push_back(Value::Int(static_cast<int64_t>(start + k * step)));
    return Value::List(std::move(out));
  });
  g.vars["namespace"] = Value::Function("namespace", [](Renderer& r, CallArgs& a) -> Value {
    auto ns = std::make_shared<DictObj>();
    ns->is_namespace = true;
    r.TrackNamespace(ns);
    for (const Value& p : a.positional) {
      if (!p.is_dict()) Fail("namespace() takes mappings and keyword arguments");
      for (const auto& [k, v] : p.dict().items) ns->Set(k, v);
    }
    for (const auto& [k, v] : a.keyword) ns->Set(k, v);
    return Value::Dict(ns);
  });
  g.vars["dict"] = Value::Function("dict", [](Renderer&, CallArgs& a) -> Value {
    auto d = std::make_shared<DictObj>();
    for (const Value& p : a.positional) {
      if (!p.is_dict()) Fail("dict() takes a mapping and keyword arguments");
      for (const auto& [k, v] : p.dict().items) d->Set(k, v);
    }
    for (const auto& [k, v] : a.keyword) d->Set(k, v);
    return Value::Dict(d);
  });
  g.vars["raise_exception"] = Value::Function("raise_exception", [](Renderer&, CallArgs& a) -> Value {
    Fail("raise_exception: " + Str(a.Get(0, "message")));
  });
  g.vars["strftime_now"] = Value::Function("strftime_now", [](Renderer& r, CallArgs& a) -> Value {
    const std::string fmt = StrArg(a.Get(0, "format"), "strftime_now format");
    if (fmt.size() > 256) Fail("strftime_now format too long");
    std::tm tm{};
    const Date& d = r.date();
    tm.tm_year = d.year - 1900;
    tm.tm_mon = std::clamp(d.month, 1, 12) - 1;
    tm.tm_mday = std::clamp(d.day, 1, 31);
    // Day of the week and of the year from the civil date (no clock, no time zone).
    static const int kCum[] = {0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334};
    const int y = d.year;
    const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    tm.tm_yday = kCum[tm.tm_mon] + tm.tm_mday - 1 + (leap && tm.tm_mon > 1 ? 1 : 0);
    static const int kT[] = {0, 3, 2, 5, 0, 3, 5, 1, 4, 6, 2, 4};
    const int yy = tm.tm_mon < 2 ? y - 1 : y;
    tm.tm_wday = (yy + yy / 4 - yy / 100 + yy / 400 + kT[tm.tm_mon] + tm.tm_mday) % 7;
    char buf[1024];
    const size_t n = fmt.empty() ? 0 : std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
    return Value::String(std::string(buf, n));
  });
}

}  // namespace rote::inference::jinja
