// The methods of str/dict/list that the sandbox allows, Jinja's tests, and the globals
// transformers adds (raise_exception, strftime_now) besides Jinja's (range, namespace, dict); the
// filters are in filters.cc.
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

bool IsPySpace(char32_t c) { return utf8::IsPythonSpace(c); }

}  // namespace

// ---- text helpers (Python's str methods on code points) and argument checks, shared with
// filters.cc ----

char32_t Upper(char32_t c) { return static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c))); }
char32_t Lower(char32_t c) { return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))); }

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

int64_t IntArg(const Value& v, int64_t dflt, const char* what) {
  if (v.is_undefined() || v.is_none()) return dflt;
  if (!v.is_int() && !v.is_bool()) Fail(std::string(what) + " must be an integer, not " + v.TypeName());
  return v.i();
}

std::string StrArg(const Value& v, const char* what) {
  if (!v.is_string()) Fail(std::string(what) + " must be a string, not " + v.TypeName());
  return v.s();
}

Value DictItems(const Value& d) {
  std::vector<Value> out;
  for (const auto& [k, v] : d.dict().items) out.push_back(Value::List({Value::String(k), v}, true));
  return Value::List(std::move(out));
}

namespace {

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
  if (name == "upper") return m([s](Renderer&, CallArgs&) { return Value::String(PyUpper(s)); });
  if (name == "lower") return m([s](Renderer&, CallArgs&) { return Value::String(PyLower(s)); });
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
      if (name == "islower") return Value::Bool(PyIsLower(s));
      if (name == "isupper") return Value::Bool(PyIsUpper(s));
      for (char32_t c : u) {
        const bool ok = name == "isspace"     ? IsPySpace(c)
                        : name == "isalpha"   ? IsPyAlpha(c)
                        : name == "isalnum"   ? IsPyAlnum(c)
                        : name == "isnumeric" ? IsPyNumeric(c)
                        : name == "isdigit"   ? IsPyDigit(c)
                                              : utf8proc_category(static_cast<utf8proc_int32_t>(c)) == UTF8PROC_CATEGORY_ND;
        if (!ok) return Value::Bool(false);
      }
      return Value::Bool(true);
    });
  }
  (void)r;
  return Value::Undefined("'str object' has no attribute '" + name + "'");
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
