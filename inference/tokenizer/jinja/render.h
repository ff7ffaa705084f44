// The evaluator's state shared by render.cc (statements and operators), builtins.cc (tests,
// methods, globals) and filters.cc (filters).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "inference/tokenizer/jinja/jinja_internal.h"

namespace rote::inference::jinja {

struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;
  const Value* Find(const std::string& name) const {
    for (const Scope* s = this; s != nullptr; s = s->parent.get()) {
      auto it = s->vars.find(name);
      if (it != s->vars.end()) return &it->second;
    }
    return nullptr;
  }
};
using ScopeP = std::shared_ptr<Scope>;

class Renderer {
 public:
  Renderer(const Limits& limits, const Date& date) : limits_(limits), date_(date) {}

  std::string Run(const Node& root, ScopeP globals);

  // Bookkeeping every builtin calls for the work it does.
  void Work(uint64_t units) {
    work_ += units;
    if (work_ > limits_.max_work) Fail("template exceeded its work limit (" + std::to_string(limits_.max_work) + " steps)");
  }
  void CheckString(size_t bytes) {
    if (bytes > limits_.max_output_bytes) Fail("string of " + std::to_string(bytes) + " bytes exceeds the limit of " + std::to_string(limits_.max_output_bytes));
    Work(bytes / 64);
  }
  void CheckItems(size_t n) {
    if (n > limits_.max_items) Fail("list of " + std::to_string(n) + " items exceeds the limit of " + std::to_string(limits_.max_items));
    Work(n);
  }
  // Macros keep their defining scope and namespaces may hold themselves, so values can form
  // reference cycles; every scope and namespace of a render is recorded here and emptied when
  // the render ends, which frees them.
  ScopeP NewScope(ScopeP parent) {
    auto s = std::make_shared<Scope>();
    s->parent = std::move(parent);
    scopes_.push_back(s);
    return s;
  }
  void TrackNamespace(std::shared_ptr<DictObj> ns) { namespaces_.push_back(std::move(ns)); }
  ~Renderer() {
    for (auto& s : scopes_) s->vars.clear();
    for (auto& n : namespaces_) n->items.clear();
  }
  const Limits& limits() const { return limits_; }
  const Date& date() const { return date_; }
  int line() const { return line_; }

  // Calls a function value (macro, builtin, bound method).
  Value Call(const Value& fn, CallArgs& args);
  // The items a `for` loop or a filter walks (dict: keys; string: characters).
  std::vector<Value> Iterate(const Value& v);

  // Body statements and expressions.
  enum class Flow { kNormal, kBreak, kContinue };
  Flow Exec(const Node& n, const ScopeP& scope);
  Value Eval(const Node& n, const ScopeP& scope);
  // Renders `body` into a string of its own (macros, set blocks, filter blocks).
  std::string Capture(const Node& body, const ScopeP& scope);

 private:
  void Emit(std::string_view s);
  Value EvalBinary(const Node& n, const Value& a, const Value& b);
  bool Compare(const std::string& op, const Value& a, const Value& b);
  Value MakeMacro(const Node& n, const ScopeP& scope);
  void ExecFor(const Node& n, const ScopeP& scope);
  CallArgs EvalArgs(const Node& n, size_t first, const ScopeP& scope);

  const Limits& limits_;
  Date date_;
  std::vector<ScopeP> scopes_;
  std::vector<std::shared_ptr<DictObj>> namespaces_;
  std::string* out_ = nullptr;
  uint64_t work_ = 0;
  int call_depth_ = 0;
  int eval_depth_ = 0;
  int line_ = 0;
};

// builtins.cc
Value GetAttr(Renderer& r, const Value& obj, const std::string& name);
Value GetItem(Renderer& r, const Value& obj, const Value& key);
bool ApplyTest(Renderer& r, const std::string& name, const Value& v, CallArgs& args);
void AddGlobals(Scope& globals);
[[noreturn]] void FailUndefined(const Value& v);

// builtins.cc: Python's str operations on code points, for the methods and the filters alike.
char32_t Upper(char32_t c);
char32_t Lower(char32_t c);
// str.strip/lstrip/rstrip: `chars` a string of code points to strip, else whitespace.
std::string Strip(const std::string& s, const Value& chars, bool left, bool right);

// py_str.cc: Python's case mappings (full, with the final sigma) and character classes.
std::string PyUpper(const std::string& s);
std::string PyLower(const std::string& s);
std::string PyTitle(const std::string& s);  // str.title
std::string Capitalize(const std::string& s);  // str.capitalize (titlecase first)
// Jinja's title filter (words begin after '-', whitespace and opening brackets).
std::string JinjaTitle(const std::string& s);
bool PyIsLower(const std::string& s);
bool PyIsUpper(const std::string& s);
bool IsPyCased(char32_t c);
bool IsPyAlpha(char32_t c);
bool IsPyAlnum(char32_t c);
bool IsPyDigit(char32_t c);
bool IsPyNumeric(char32_t c);
bool IsWordChar(char32_t c);  // Python's re \w: '_' and str.isalnum() characters (wordcount)
// str.replace; count < 0 replaces all.
std::string Replace(Renderer& r, const std::string& s, const std::string& old, const std::string& repl, int64_t count);
std::vector<std::string> SplitLines(const std::string& s);
// An argument that must be an int (dflt when undefined or none) or a string; fails naming `what`.
int64_t IntArg(const Value& v, int64_t dflt, const char* what);
std::string StrArg(const Value& v, const char* what);
// dict.items(): (key, value) tuples in insertion order.
Value DictItems(const Value& d);

// filters.cc
Value ApplyFilter(Renderer& r, const std::string& name, const Value& input, CallArgs& args);

}  // namespace rote::inference::jinja
