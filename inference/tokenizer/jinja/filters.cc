// Jinja's filters (`x | name(args)`), grouped by what they work on; the methods, tests and
// globals are in builtins.cc.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "inference/tokenizer/jinja/render.h"

namespace rote::inference::jinja {
namespace {

int64_t Length(const Value& v) {
  if (v.is_string()) return static_cast<int64_t>(Decode(v.s()).size());
  if (v.is_list()) return static_cast<int64_t>(v.list().items.size());
  if (v.is_dict() && !v.dict().is_namespace) return static_cast<int64_t>(v.dict().items.size());
  if (v.is_undefined()) return 0;
  Fail("object of type '" + v.TypeName() + "' has no len()");
}

bool BoolArg(const Value& v, bool dflt) { return v.is_undefined() ? dflt : v.Truthy(); }

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

std::vector<Value> SortValues(Renderer& r, std::vector<Value> items, bool reverse, bool case_sensitive, const Value& attribute) {
  auto key = [&](const Value& v) {
    Value k = attribute.is_undefined() || attribute.is_none() ? v : AttrPath(r, v, Str(attribute));
    if (!case_sensitive && k.is_string()) k = Value::String(PyLower(k.s()));
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
// Like map, they give nothing for a false input (None, 0, ''), as Jinja's `if value:` does.
std::vector<Value> SelectItems(Renderer& r, const Value& input, CallArgs& args, bool attr, bool keep) {
  std::vector<Value> out;
  if (!input.Truthy()) return out;
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

// Each group answers the filters it knows and nullopt for any other name.

std::optional<Value> StringFilter(Renderer& r, const std::string& name, const Value& in, CallArgs& a) {
  auto str_in = [&]() { return in.is_string() ? in.s() : Str(in); };
  if (name == "trim") return Value::String(Strip(str_in(), a.Get(0, "chars"), true, true));
  if (name == "upper") return Value::String(PyUpper(str_in()));
  if (name == "lower") return Value::String(PyLower(str_in()));
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
  if (name == "indent") {
    std::string out = Indent(str_in(), a.Get(0, "width"), BoolArg(a.Get(1, "first"), false), BoolArg(a.Get(2, "blank"), false));
    r.CheckString(out.size());
    return Value::String(std::move(out));
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
  return std::nullopt;
}

std::optional<Value> SequenceFilter(Renderer& r, const std::string& name, const Value& in, CallArgs& a) {
  if (name == "length" || name == "count") return Value::Int(Length(in));
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
      if (!cs && k.is_string()) k = Value::String(PyLower(k.s()));
      return k;
    };
    std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) { return rev ? Less(key(y), key(x)) : Less(key(x), key(y)); });
    return Value::List(std::move(items));
  }
  if (name == "map") {
    std::vector<Value> out;
    if (!in.Truthy()) return Value::List(std::move(out));  // Jinja's `if value:`: None maps to nothing
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
      if (!cs && k.is_string()) k = Value::String(PyLower(k.s()));
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
  return std::nullopt;
}

std::optional<Value> NumberFilter(const std::string& name, const Value& in, CallArgs& a) {
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
  return std::nullopt;
}

// Filters on any value: default, tojson, attr.
std::optional<Value> ValueFilter(Renderer& r, const std::string& name, const Value& in, CallArgs& a) {
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
  if (name == "attr") return GetAttr(r, in, StrArg(a.Get(0, "name"), "attribute name"));
  return std::nullopt;
}

}  // namespace

Value ApplyFilter(Renderer& r, const std::string& name, const Value& in, CallArgs& a) {
  r.Work(1);
  if (std::optional<Value> v = StringFilter(r, name, in, a)) return *std::move(v);
  if (std::optional<Value> v = SequenceFilter(r, name, in, a)) return *std::move(v);
  if (std::optional<Value> v = NumberFilter(name, in, a)) return *std::move(v);
  if (std::optional<Value> v = ValueFilter(r, name, in, a)) return *std::move(v);
  Fail("no filter named '" + name + "'");
}

}  // namespace rote::inference::jinja
