// Values with the Python semantics Jinja inherits: str() and repr(), json.dumps, equality and
// ordering, truthiness.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "inference/tokenizer/jinja/jinja_internal.h"
#include "inference/tokenizer/utf8.h"

namespace rote::inference::jinja {

void Fail(std::string message, int line) { throw Error{line, std::move(message)}; }

const Value* DictObj::Find(std::string_view key) const {
  auto it = index.find(std::string(key));
  return it == index.end() ? nullptr : &items[it->second].second;
}

void DictObj::Set(const std::string& key, Value v) {
  depth = std::max(depth, 1 + v.depth());
  if (depth > kMaxValueDepth) Fail("value nested too deeply (limit " + std::to_string(kMaxValueDepth) + ")");
  auto it = index.find(key);
  if (it != index.end()) {
    items[it->second].second = std::move(v);
    return;
  }
  index.emplace(key, items.size());
  items.emplace_back(key, std::move(v));
}

Value Value::List(std::vector<Value> items, bool tuple) {
  auto l = std::make_shared<ListObj>();
  for (const Value& v : items) l->depth = std::max(l->depth, 1 + v.depth());
  if (l->depth > kMaxValueDepth) Fail("value nested too deeply (limit " + std::to_string(kMaxValueDepth) + ")");
  l->items = std::move(items);
  l->tuple = tuple;
  return Value(Rep(std::move(l)));
}

Value Value::Function(std::string name, NativeFn fn) {
  return Value(Rep(std::make_shared<FunctionObj>(FunctionObj{std::move(name), std::move(fn)})));
}

Value Value::FromJson(const nlohmann::ordered_json& j, int depth) {
  if (depth > kMaxValueDepth) Fail("value nested too deeply (limit " + std::to_string(kMaxValueDepth) + ")");
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return None();
    case nlohmann::ordered_json::value_t::boolean: return Bool(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Int(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Float(static_cast<double>(u));
      return Int(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Float(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return String(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(FromJson(e, depth + 1));
      return List(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      auto d = std::make_shared<DictObj>();
      for (auto it = j.begin(); it != j.end(); ++it) d->Set(it.key(), FromJson(it.value(), depth + 1));
      return Dict(std::move(d));
    }
    default: return None();
  }
}

int Value::depth() const {
  if (is_list()) return list().depth;
  if (is_dict()) return dict().depth;
  return 0;
}

const void* Value::identity() const {
  if (is_list()) return &list();
  if (is_dict()) return &dict();
  if (is_function()) return &fn();
  if (is_string()) return &s();
  return nullptr;
}

bool Value::Truthy() const {
  switch (rep_.index()) {
    case 0: case 1: return false;
    case 2: return b();
    case 3: return i() != 0;
    case 4: return f() != 0.0;
    case 5: return !s().empty();
    case 6: return !list().items.empty();
    case 7: return dict().is_namespace || !dict().items.empty();
    default: return true;
  }
}

std::string Value::TypeName() const {
  switch (rep_.index()) {
    case 0: return "Undefined";
    case 1: return "NoneType";
    case 2: return "bool";
    case 3: return "int";
    case 4: return "float";
    case 5: return "str";
    case 6: return list().tuple ? "tuple" : "list";
    case 7: return dict().is_namespace ? "Namespace" : "dict";
    default: return "function";
  }
}

nlohmann::ordered_json Value::ToJson() const {
  switch (rep_.index()) {
    case 1: return nullptr;
    case 2: return b();
    case 3: return i();
    case 4: return f();
    case 5: return s();
    case 6: {
      auto a = nlohmann::ordered_json::array();
      for (const Value& v : list().items) a.push_back(v.ToJson());
      return a;
    }
    case 7: {
      auto o = nlohmann::ordered_json::object();
      for (const auto& [k, v] : dict().items) o[k] = v.ToJson();
      return o;
    }
    default: return nullptr;
  }
}

std::u32string Decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) out.push_back(utf8::DecodeAt(s, pos));
  return out;
}

std::string Encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) utf8::Append(out, c);
  return out;
}

// Python's repr(float): the shortest digits that read back as the same double, positional for
// exponents -4..15, else scientific with a two-digit exponent at least.
std::string FloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  // sci: [-]D[.DDD]e[+-]XX
  bool neg = false;
  size_t p = 0;
  if (sci[0] == '-') { neg = true; p = 1; }
  const size_t e = sci.find('e');
  std::string digits;
  for (size_t k = p; k < e; ++k) if (sci[k] != '.') digits.push_back(sci[k]);
  const int exp = std::stoi(sci.substr(e + 1));
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out = neg ? "-" : "";
  if (exp >= 16 || exp < -4) {
    out += digits[0];
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += eb;
    return out;
  }
  if (exp < 0) {
    out += "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    return out;
  }
  const size_t int_len = static_cast<size_t>(exp) + 1;
  if (digits.size() <= int_len) {
    out += digits + std::string(int_len - digits.size(), '0') + ".0";
  } else {
    out += digits.substr(0, int_len) + "." + digits.substr(int_len);
  }
  return out;
}

namespace {

std::string StrRepr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char q = has_single && !has_double ? '"' : '\'';
  std::string out(1, q);
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (ch == q || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\r') {
      out += "\\r";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  out += q;
  return out;
}

void JsonString(const std::string& s, std::string& out) {
  out += '"';
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

struct JsonWriter {
  int indent;
  bool has_indent;
  std::string_view item_sep, key_sep;
  bool sort_keys;
  std::string out;

  void Newline(int depth) {
    out += '\n';
    out.append(static_cast<size_t>(indent) * static_cast<size_t>(depth), ' ');
  }
  void Write(const Value& v, int depth) {
    if (depth > 512) Fail("tojson: value nested too deeply");
    if (v.is_none()) { out += "null"; return; }
    if (v.is_bool()) { out += v.b() ? "true" : "false"; return; }
    if (v.is_int()) { out += std::to_string(v.i()); return; }
    if (v.is_float()) {
      const double d = v.f();
      if (std::isnan(d)) out += "NaN";
      else if (std::isinf(d)) out += d > 0 ? "Infinity" : "-Infinity";
      else out += FloatRepr(d);
      return;
    }
    if (v.is_string()) { JsonString(v.s(), out); return; }
    if (v.is_list()) {
      const auto& items = v.list().items;
      if (items.empty()) { out += "[]"; return; }
      out += '[';
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += item_sep;
        if (has_indent) Newline(depth + 1);
        Write(items[k], depth + 1);
      }
      if (has_indent) Newline(depth);
      out += ']';
      return;
    }
    if (v.is_dict() && !v.dict().is_namespace) {
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.dict().items) items.push_back(&kv);
      if (items.empty()) { out += "{}"; return; }
      if (sort_keys) {
        std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
      }
      out += '{';
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += item_sep;
        if (has_indent) Newline(depth + 1);
        JsonString(items[k]->first, out);
        out += key_sep;
        Write(items[k]->second, depth + 1);
      }
      if (has_indent) Newline(depth);
      out += '}';
      return;
    }
    Fail("Object of type " + v.TypeName() + " is not JSON serializable");
  }
};

void ReprInto(const Value& v, std::string& out, int depth);

void ReprSeq(const Value& v, std::string& out, int depth) {
  if (v.is_list()) {
    const bool tuple = v.list().tuple;
    out += tuple ? '(' : '[';
    const auto& items = v.list().items;
    for (size_t k = 0; k < items.size(); ++k) {
      if (k) out += ", ";
      ReprInto(items[k], out, depth + 1);
    }
    if (tuple && items.size() == 1) out += ',';
    out += tuple ? ')' : ']';
    return;
  }
  if (v.dict().is_namespace) {
    out += "<Namespace ";
    out += std::to_string(v.dict().items.size());
    out += ">";
    return;
  }
  out += '{';
  bool first = true;
  for (const auto& [k, val] : v.dict().items) {
    if (!first) out += ", ";
    first = false;
    out += StrRepr(k);
    out += ": ";
    ReprInto(val, out, depth + 1);
  }
  out += '}';
}

void ReprInto(const Value& v, std::string& out, int depth) {
  if (depth > 512) Fail("value nested too deeply to print");
  if (v.is_string()) out += StrRepr(v.s());
  else if (v.is_list() || v.is_dict()) ReprSeq(v, out, depth);
  else out += Str(v);
}

}  // namespace

std::string Str(const Value& v) {
  if (v.is_undefined()) return "";
  if (v.is_none()) return "None";
  if (v.is_bool()) return v.b() ? "True" : "False";
  if (v.is_int()) return std::to_string(v.i());
  if (v.is_float()) return FloatRepr(v.f());
  if (v.is_string()) return v.s();
  if (v.is_function()) return "<function " + v.fn().name + ">";
  std::string out;
  ReprSeq(v, out, 0);
  return out;
}

std::string Repr(const Value& v) {
  std::string out;
  ReprInto(v, out, 0);
  return out;
}

std::string ToJsonText(const Value& v, int indent, bool has_indent, std::string_view item_sep,
                       std::string_view key_sep, bool sort_keys) {
  JsonWriter w{indent, has_indent, item_sep, key_sep, sort_keys, {}};
  w.Write(v, 0);
  return std::move(w.out);
}

bool Equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.f() == b.f();
    return a.i() == b.i();
  }
  if (a.is_undefined() || b.is_undefined()) return a.is_undefined() && b.is_undefined();
  if (a.is_none() || b.is_none()) return a.is_none() && b.is_none();
  if (a.is_string() && b.is_string()) return a.s() == b.s();
  if (a.is_list() && b.is_list()) {
    if (a.list().tuple != b.list().tuple) return false;
    const auto& x = a.list().items;
    const auto& y = b.list().items;
    if (x.size() != y.size()) return false;
    for (size_t k = 0; k < x.size(); ++k) if (!Equal(x[k], y[k])) return false;
    return true;
  }
  if (a.is_dict() && b.is_dict()) {
    if (a.dict().is_namespace || b.dict().is_namespace) return &a.dict() == &b.dict();
    const auto& x = a.dict().items;
    if (x.size() != b.dict().items.size()) return false;
    for (const auto& [k, v] : x) {
      const Value* other = b.dict().Find(k);
      if (other == nullptr || !Equal(v, *other)) return false;
    }
    return true;
  }
  if (a.is_function() && b.is_function()) return &a.fn() == &b.fn();
  return false;
}

bool Less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.f() < b.f();
    return a.i() < b.i();
  }
  if (a.is_string() && b.is_string()) return Decode(a.s()) < Decode(b.s());
  if (a.is_list() && b.is_list()) {
    const auto& x = a.list().items;
    const auto& y = b.list().items;
    for (size_t k = 0; k < x.size() && k < y.size(); ++k) {
      if (!Equal(x[k], y[k])) return Less(x[k], y[k]);
    }
    return x.size() < y.size();
  }
  Fail("'<' not supported between instances of '" + a.TypeName() + "' and '" + b.TypeName() + "'");
}

Value CallArgs::Get(size_t i, std::string_view name) const {
  for (const auto& [k, v] : keyword) if (k == name) return v;
  if (i < positional.size()) return positional[i];
  return Value::Undefined();
}

bool CallArgs::Has(size_t i, std::string_view name) const {
  for (const auto& kv : keyword) if (kv.first == name) return true;
  return i < positional.size();
}

}  // namespace rote::inference::jinja
