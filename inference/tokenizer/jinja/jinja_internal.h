// The interpreter's pieces: values with Python's semantics, the parsed tree, and the error that
// unwinds a parse or a render (caught at Template's boundary and turned into a Status).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "inference/tokenizer/jinja/jinja.h"

namespace rote::inference::jinja {

// Exact intermediate for int64 overflow checks (Python's ints are unbounded; rote's stop there).
__extension__ typedef __int128 Int128;

// Thrown for every template error; `line` 0 means "the line of the node being evaluated".
struct Error {
  int line = 0;
  std::string message;
};
[[noreturn]] void Fail(std::string message, int line = 0);

class Value;
class Renderer;
struct CallArgs;

// Values nest at most this deep: printing, comparing and freeing them recurse.
inline constexpr int kMaxValueDepth = 512;

struct ListObj {
  std::vector<Value> items;
  bool tuple = false;  // prints as (a, b)
  int depth = 1;       // 1 + the deepest item's depth
};

struct DictObj {
  std::vector<std::pair<std::string, Value>> items;  // insertion order, as Python's dict
  std::unordered_map<std::string, size_t> index;
  bool is_namespace = false;  // namespace(): attributes may be assigned
  int depth = 1;
  const Value* Find(std::string_view key) const;
  void Set(const std::string& key, Value v);
};

using NativeFn = std::function<Value(Renderer&, CallArgs&)>;
struct FunctionObj {
  std::string name;
  NativeFn fn;
};

struct Undef {
  std::string name;  // what was looked up, for error messages
};
struct NoneV {};

class Value {
 public:
  using Str = std::shared_ptr<const std::string>;
  using Rep = std::variant<Undef, NoneV, bool, int64_t, double, Str, std::shared_ptr<ListObj>,
                           std::shared_ptr<DictObj>, std::shared_ptr<FunctionObj>>;

  Value() : rep_(Undef{}) {}
  static Value Undefined(std::string name = {}) { return Value(Rep(Undef{std::move(name)})); }
  static Value None() { return Value(Rep(NoneV{})); }
  static Value Bool(bool b) { return Value(Rep(b)); }
  static Value Int(int64_t i) { return Value(Rep(i)); }
  static Value Float(double d) { return Value(Rep(d)); }
  static Value String(std::string s) { return Value(Rep(std::make_shared<const std::string>(std::move(s)))); }
  static Value List(std::vector<Value> items, bool tuple = false);
  static Value Dict(std::shared_ptr<DictObj> d) { return Value(Rep(std::move(d))); }
  static Value Function(std::string name, NativeFn fn);
  static Value FromJson(const nlohmann::ordered_json& j, int depth = 0);

  bool is_undefined() const { return rep_.index() == 0; }
  bool is_none() const { return rep_.index() == 1; }
  bool is_bool() const { return rep_.index() == 2; }
  bool is_int() const { return rep_.index() == 3; }
  bool is_float() const { return rep_.index() == 4; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }  // Python: bool is an int
  bool is_string() const { return rep_.index() == 5; }
  bool is_list() const { return rep_.index() == 6; }
  bool is_dict() const { return rep_.index() == 7; }
  bool is_function() const { return rep_.index() == 8; }

  bool b() const { return std::get<bool>(rep_); }
  int64_t i() const { return is_bool() ? (b() ? 1 : 0) : std::get<int64_t>(rep_); }
  double f() const { return is_float() ? std::get<double>(rep_) : static_cast<double>(i()); }
  const std::string& s() const { return *std::get<Str>(rep_); }
  ListObj& list() const { return *std::get<std::shared_ptr<ListObj>>(rep_); }
  DictObj& dict() const { return *std::get<std::shared_ptr<DictObj>>(rep_); }
  const FunctionObj& fn() const { return *std::get<std::shared_ptr<FunctionObj>>(rep_); }
  const std::string& undefined_name() const { return std::get<Undef>(rep_).name; }
  const void* identity() const;  // for `is sameas` and namespace identity
  int depth() const;              // 0 for scalars

  bool Truthy() const;
  std::string TypeName() const;  // Python's type name, for messages
  nlohmann::ordered_json ToJson() const;

 private:
  explicit Value(Rep r) : rep_(std::move(r)) {}
  Rep rep_;
};

// Python's str() and repr().
std::string Str(const Value& v);
std::string Repr(const Value& v);
std::string FloatRepr(double d);
// json.dumps(v, ensure_ascii=False, indent=..., separators=..., sort_keys=...).
std::string ToJsonText(const Value& v, int indent, bool has_indent, std::string_view item_sep,
                       std::string_view key_sep, bool sort_keys);
bool Equal(const Value& a, const Value& b);
// Python's <: numbers with numbers, strings with strings, lists element-wise.
bool Less(const Value& a, const Value& b);

// UTF-8 text as code points and back (Python indexes strings by code point).
std::u32string Decode(std::string_view s);
std::string Encode(std::u32string_view s);

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  int line = 0;
  // The i-th positional or the named keyword argument, or undefined.
  Value Get(size_t i, std::string_view name) const;
  bool Has(size_t i, std::string_view name) const;
};

// ---- The parsed tree ----

enum class NodeKind {
  // statements
  kText, kOutput, kIf, kFor, kSet, kSetBlock, kMacro, kCallBlock, kFilterBlock, kBreak, kContinue,
  kBody,
  // expressions
  kLiteral, kName, kList, kTuple, kDict, kGetAttr, kGetItem, kSlice, kCall, kFilter, kTest,
  kUnary, kBinary, kAnd, kOr, kNot, kCompare, kCondExpr, kConcat,
};

struct Node {
  NodeKind kind;
  int line = 0;
  std::string text;  // literal text, names, operators, attribute/filter/test names
  Value value;       // kLiteral
  std::vector<std::shared_ptr<const Node>> kids;
  // Call-like nodes (kCall, kFilter, kTest, kMacro defaults): keyword arguments' names; the
  // values are the last kwarg_names.size() kids.
  std::vector<std::string> kwarg_names;
  // kFor: target names; kSet: target names (or {ns, attr} for a namespace attribute);
  // kMacro: parameter names.
  std::vector<std::string> names;
  // Body slots: for kIf [cond, then, else?] live in kids; kFor: kids = [iter, filter?, body,
  // else?] with flags telling which are present.
  bool has_filter = false;
  bool has_else = false;
  bool flag = false;  // kSet: target is ns.attr; kSlice: which parts exist (see parser)
  int slice_mask = 0;
};
using NodeP = std::shared_ptr<const Node>;

// ---- Lexing (lex.cc) and parsing (parse.cc) ----

enum class Tok { kData, kVarBegin, kBlockBegin, kVarEnd, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEof };

struct Token {
  Tok type;
  std::string text;
  int line;
  Value value;  // numbers and strings
};

// The template's tokens, ending with kEof; line breaks are normalized first as Jinja's lexer does.
std::vector<Token> Lex(std::string_view source);

NodeP ParseTemplate(std::string_view source, const Limits& limits);

}  // namespace rote::inference::jinja
