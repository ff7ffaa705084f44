// Rendering: statements, expressions and Python's operators over the parsed tree, bounded by
// Limits. Template is the boundary where errors become Status.
#include <algorithm>
#include <cmath>
#include <optional>
#include <limits>

#include "inference/tokenizer/jinja/render.h"

namespace rote::inference::jinja {
namespace {

struct DepthGuard {
  int& d;
  DepthGuard(int& depth, int limit, const char* what) : d(depth) {
    if (++d > limit) Fail(std::string(what) + " nested too deeply (limit " + std::to_string(limit) + ")");
  }
  ~DepthGuard() { --d; }
};

int64_t CheckedInt(Int128 v) {
  if (v > std::numeric_limits<int64_t>::max() || v < std::numeric_limits<int64_t>::min()) {
    Fail("integer overflow");
  }
  return static_cast<int64_t>(v);
}

int64_t FloorDiv(int64_t a, int64_t b) {
  if (b == 0) Fail("integer division or modulo by zero");
  if (a == std::numeric_limits<int64_t>::min() && b == -1) Fail("integer overflow");
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t FloorMod(int64_t a, int64_t b) {
  if (b == 0) Fail("integer division or modulo by zero");
  if (b == -1) return 0;
  int64_t m = a % b;
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

double PyFloatMod(double a, double b) {
  if (b == 0) Fail("float modulo");
  double m = std::fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

}  // namespace

void Renderer::Emit(std::string_view s) {
  if (out_->size() + s.size() > limits_.max_output_bytes) {
    Fail("output exceeds the limit of " + std::to_string(limits_.max_output_bytes) + " bytes");
  }
  Work(1 + s.size() / 64);
  out_->append(s);
}

std::string Renderer::Run(const Node& root, ScopeP globals) {
  std::string out;
  out_ = &out;
  Exec(root, globals);
  return out;
}

std::string Renderer::Capture(const Node& body, const ScopeP& scope) {
  std::string buf;
  std::string* saved = out_;
  out_ = &buf;
  try {
    Exec(body, scope);
  } catch (...) {
    out_ = saved;
    throw;
  }
  out_ = saved;
  return buf;
}

std::vector<Value> Renderer::Iterate(const Value& v) {
  if (v.is_list()) {
    Work(v.list().items.size());
    return v.list().items;
  }
  if (v.is_dict() && !v.dict().is_namespace) {
    std::vector<Value> keys;
    for (const auto& kv : v.dict().items) keys.push_back(Value::String(kv.first));
    Work(keys.size());
    return keys;
  }
  if (v.is_string()) {
    std::vector<Value> chars;
    for (char32_t c : Decode(v.s())) chars.push_back(Value::String(Encode(std::u32string(1, c))));
    Work(chars.size());
    return chars;
  }
  if (v.is_undefined()) return {};
  Fail("'" + v.TypeName() + "' object is not iterable");
}

Value Renderer::Call(const Value& fn, CallArgs& args) {
  if (fn.is_undefined()) FailUndefined(fn);
  if (!fn.is_function()) Fail("'" + fn.TypeName() + "' object is not callable");
  DepthGuard g(call_depth_, limits_.max_depth, "calls");
  Work(1);
  return fn.fn().fn(*this, args);
}

CallArgs Renderer::EvalArgs(const Node& n, size_t first, const ScopeP& scope) {
  CallArgs args;
  args.line = n.line;
  const size_t nkw = n.kwarg_names.size();
  const size_t npos = n.kids.size() - first - nkw;
  for (size_t k = 0; k < npos; ++k) args.positional.push_back(Eval(*n.kids[first + k], scope));
  for (size_t k = 0; k < nkw; ++k) {
    args.keyword.emplace_back(n.kwarg_names[k], Eval(*n.kids[first + npos + k], scope));
  }
  return args;
}

Value Renderer::MakeMacro(const Node& n, const ScopeP& scope) {
  const Node* node = &n;
  // The macro keeps the scope it was defined in (its closure), as Jinja's macros do.
  return Value::Function(n.text, [node, scope](Renderer& r, CallArgs& args) -> Value {
    ScopeP local = r.NewScope(scope);
    const size_t nparams = node->names.size();
    const size_t ndefaults = node->kwarg_names.size();
    std::vector<Value> extra;
    for (size_t k = 0; k < args.positional.size(); ++k) {
      if (k < nparams) local->vars[node->names[k]] = args.positional[k];
      else extra.push_back(args.positional[k]);
    }
    auto kwargs = std::make_shared<DictObj>();
    for (auto& [name, v] : args.keyword) {
      bool known = false;
      for (const auto& p : node->names) known = known || p == name;
      if (known || name == "caller") local->vars[name] = v;
      else kwargs->Set(name, v);
    }
    for (size_t k = 0; k < nparams; ++k) {
      const std::string& p = node->names[k];
      if (local->vars.count(p)) continue;
      const size_t first_default = nparams - ndefaults;
      if (k >= first_default) {
        local->vars[p] = r.Eval(*node->kids[1 + (k - first_default)], local);
      } else {
        local->vars[p] = Value::Undefined(p);
      }
    }
    local->vars["varargs"] = Value::List(std::move(extra));
    local->vars["kwargs"] = Value::Dict(kwargs);
    return Value::String(r.Capture(*node->kids[0], local));
  });
}

void Renderer::ExecFor(const Node& n, const ScopeP& scope) {
  const Value iterable = Eval(*n.kids[0], scope);
  std::vector<Value> items = Iterate(iterable);
  size_t k = 1;
  const Node* filter = n.has_filter ? n.kids[k++].get() : nullptr;
  const Node& body = *n.kids[k++];
  const Node* else_body = n.has_else ? n.kids[k].get() : nullptr;

  ScopeP local = NewScope(scope);
  auto bind = [&](Scope& s, const Value& item) {
    if (n.names.size() == 1) {
      s.vars[n.names[0]] = item;
      return;
    }
    std::vector<Value> parts = Iterate(item);
    if (parts.size() != n.names.size()) {
      Fail("cannot unpack " + std::to_string(parts.size()) + " values into " + std::to_string(n.names.size()) + " names");
    }
    for (size_t j = 0; j < parts.size(); ++j) s.vars[n.names[j]] = parts[j];
  };
  if (filter != nullptr) {
    // `for x in xs if cond`: the loop (and loop.length) sees only the items that pass.
    std::vector<Value> kept;
    ScopeP probe = NewScope(scope);
    for (const Value& item : items) {
      bind(*probe, item);
      if (Eval(*filter, probe).Truthy()) kept.push_back(item);
    }
    items = std::move(kept);
  }
  const int64_t len = static_cast<int64_t>(items.size());
  // One loop object per loop, updated in place: a fresh one per iteration would cost more
  // than most loop bodies.
  auto loop = std::make_shared<DictObj>();
  auto position = std::make_shared<int64_t>(0);
  loop->Set("length", Value::Int(len));
  loop->Set("depth", Value::Int(1));
  loop->Set("depth0", Value::Int(0));
  loop->Set("cycle", Value::Function("loop.cycle", [position](Renderer&, CallArgs& args) -> Value {
    if (args.positional.empty()) Fail("no items for cycling given");
    return args.positional[static_cast<size_t>(*position) % args.positional.size()];
  }));
  const Value loop_value = Value::Dict(loop);
  for (int64_t idx = 0; idx < len; ++idx) {
    Work(1);
    *position = idx;
    loop->Set("index", Value::Int(idx + 1));
    loop->Set("index0", Value::Int(idx));
    loop->Set("revindex", Value::Int(len - idx));
    loop->Set("revindex0", Value::Int(len - idx - 1));
    loop->Set("first", Value::Bool(idx == 0));
    loop->Set("last", Value::Bool(idx == len - 1));
    loop->Set("previtem", idx > 0 ? items[static_cast<size_t>(idx - 1)] : Value::Undefined("loop.previtem"));
    loop->Set("nextitem", idx + 1 < len ? items[static_cast<size_t>(idx + 1)] : Value::Undefined("loop.nextitem"));
    local->vars["loop"] = loop_value;
    bind(*local, items[static_cast<size_t>(idx)]);
    const Flow f = Exec(body, local);
    if (f == Flow::kBreak) break;
  }
  if (len == 0 && else_body != nullptr) Exec(*else_body, scope);
}

Renderer::Flow Renderer::Exec(const Node& n, const ScopeP& scope) {
  line_ = n.line;
  Work(1);
  switch (n.kind) {
    case NodeKind::kBody:
      for (const auto& kid : n.kids) {
        const Flow f = Exec(*kid, scope);
        if (f != Flow::kNormal) return f;
      }
      return Flow::kNormal;
    case NodeKind::kText:
      Emit(n.text);
      return Flow::kNormal;
    case NodeKind::kOutput: {
      const Value v = Eval(*n.kids[0], scope);
      line_ = n.line;
      if (v.is_string()) Emit(v.s());
      else Emit(Str(v));
      return Flow::kNormal;
    }
    case NodeKind::kIf:
      if (Eval(*n.kids[0], scope).Truthy()) return Exec(*n.kids[1], scope);
      if (n.has_else) return Exec(*n.kids[2], scope);
      return Flow::kNormal;
    case NodeKind::kFor: {
      DepthGuard g(eval_depth_, limits_.max_depth, "blocks");
      ExecFor(n, scope);
      return Flow::kNormal;
    }
    case NodeKind::kBreak: return Flow::kBreak;
    case NodeKind::kContinue: return Flow::kContinue;
    case NodeKind::kSet: {
      Value v = Eval(*n.kids[0], scope);
      if (n.flag) {
        const Value* ns = scope->Find(n.names[0]);
        if (ns == nullptr || !ns->is_dict() || !ns->dict().is_namespace) {
          Fail("cannot assign attribute on non-namespace object '" + n.names[0] + "'", n.line);
        }
        ns->dict().Set(n.names[1], std::move(v));
        return Flow::kNormal;
      }
      if (n.names.size() == 1) {
        scope->vars[n.names[0]] = std::move(v);
        return Flow::kNormal;
      }
      std::vector<Value> parts = Iterate(v);
      if (parts.size() != n.names.size()) Fail("cannot unpack " + std::to_string(parts.size()) + " values", n.line);
      for (size_t k = 0; k < parts.size(); ++k) scope->vars[n.names[k]] = parts[k];
      return Flow::kNormal;
    }
    case NodeKind::kSetBlock: {
      Value v = Value::String(Capture(*n.kids[0], scope));
      for (size_t k = 1; k < n.kids.size(); ++k) {
        CallArgs args = EvalArgs(*n.kids[k], 1, scope);
        v = ApplyFilter(*this, n.kids[k]->text, v, args);
      }
      scope->vars[n.names[0]] = std::move(v);
      return Flow::kNormal;
    }
    case NodeKind::kFilterBlock: {
      Value v = Value::String(Capture(*n.kids[0], scope));
      for (size_t k = 1; k < n.kids.size(); ++k) {
        CallArgs args = EvalArgs(*n.kids[k], 1, scope);
        v = ApplyFilter(*this, n.kids[k]->text, v, args);
      }
      Emit(Str(v));
      return Flow::kNormal;
    }
    case NodeKind::kMacro:
      scope->vars[n.text] = MakeMacro(n, scope);
      return Flow::kNormal;
    case NodeKind::kCallBlock: {
      // The body becomes `caller`, a macro with the block's parameters.
      auto caller_node = std::make_shared<Node>(n);
      caller_node->kind = NodeKind::kMacro;
      caller_node->text = "caller";
      caller_node->kids.pop_back();  // the call expression
      // Keep the Node alive as long as the function value: capture it in the closure.
      Value caller = MakeMacro(*caller_node, scope);
      Value keep = Value::Function("caller", [caller_node, caller](Renderer& r, CallArgs& a) {
        return r.Call(caller, a);
      });
      const Node& call = *n.kids.back();
      Value fn = Eval(*call.kids[0], scope);
      CallArgs args = EvalArgs(call, 1, scope);
      args.keyword.emplace_back("caller", keep);
      Emit(Str(Call(fn, args)));
      return Flow::kNormal;
    }
    default:
      Fail("internal: not a statement");
  }
}

Value Renderer::EvalBinary(const Node& n, const Value& a, const Value& b) {
  const std::string& op = n.text;
  if (a.is_undefined()) FailUndefined(a);
  if (b.is_undefined()) FailUndefined(b);
  auto type_error = [&]() -> Value {
    Fail("unsupported operand type(s) for " + op + ": '" + a.TypeName() + "' and '" + b.TypeName() + "'");
  };
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      CheckString(a.s().size() + b.s().size());
      return Value::String(a.s() + b.s());
    }
    if (a.is_list() && b.is_list()) {
      CheckItems(a.list().items.size() + b.list().items.size());
      std::vector<Value> items = a.list().items;
      items.insert(items.end(), b.list().items.begin(), b.list().items.end());
      return Value::List(std::move(items), a.list().tuple);
    }
    if (a.is_number() && b.is_number()) {
      if (a.is_float() || b.is_float()) return Value::Float(a.f() + b.f());
      return Value::Int(CheckedInt(static_cast<Int128>(a.i()) + b.i()));
    }
    return type_error();
  }
  if (op == "*") {
    const Value* seq = a.is_string() || a.is_list() ? &a : b.is_string() || b.is_list() ? &b : nullptr;
    const Value* count = seq == &a ? &b : &a;
    if (seq != nullptr && (count->is_int() || count->is_bool())) {
      const int64_t times = std::max<int64_t>(0, count->i());
      if (seq->is_string()) {
        const Int128 total = static_cast<Int128>(seq->s().size()) * times;
        if (total > static_cast<Int128>(limits_.max_output_bytes)) CheckString(limits_.max_output_bytes + 1);
        CheckString(static_cast<size_t>(total));
        std::string s;
        s.reserve(static_cast<size_t>(total));
        for (int64_t k = 0; k < times; ++k) s += seq->s();
        return Value::String(std::move(s));
      }
      const Int128 total = static_cast<Int128>(seq->list().items.size()) * times;
      if (total > static_cast<Int128>(limits_.max_items)) CheckItems(limits_.max_items + 1);
      CheckItems(static_cast<size_t>(total));
      std::vector<Value> items;
      for (int64_t k = 0; k < times; ++k) items.insert(items.end(), seq->list().items.begin(), seq->list().items.end());
      return Value::List(std::move(items), seq->list().tuple);
    }
  }
  if (!a.is_number() || !b.is_number()) return type_error();
  const bool fl = a.is_float() || b.is_float();
  if (op == "-") {
    if (fl) return Value::Float(a.f() - b.f());
    return Value::Int(CheckedInt(static_cast<Int128>(a.i()) - b.i()));
  }
  if (op == "*") {
    if (fl) return Value::Float(a.f() * b.f());
    return Value::Int(CheckedInt(static_cast<Int128>(a.i()) * b.i()));
  }
  if (op == "/") {
    if (b.f() == 0) Fail("division by zero");
    return Value::Float(a.f() / b.f());
  }
  if (op == "//") {
    if (fl) {
      if (b.f() == 0) Fail("float floor division by zero");
      return Value::Float(std::floor(a.f() / b.f()));
    }
    return Value::Int(FloorDiv(a.i(), b.i()));
  }
  if (op == "%") {
    if (fl) return Value::Float(PyFloatMod(a.f(), b.f()));
    return Value::Int(FloorMod(a.i(), b.i()));
  }
  if (op == "**") {
    if (!fl && b.i() >= 0) {
      Int128 result = 1;
      Int128 base = a.i();
      int64_t e = b.i();
      while (e > 0) {
        Work(1);
        if (e & 1) result = CheckedInt(result * base);
        e >>= 1;
        if (e > 0) base = CheckedInt(base * base);
      }
      return Value::Int(static_cast<int64_t>(result));
    }
    if (a.f() == 0 && b.f() < 0) Fail("0.0 cannot be raised to a negative power");
    return Value::Float(std::pow(a.f(), b.f()));
  }
  return type_error();
}

bool Renderer::Compare(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return Equal(a, b);
  if (op == "!=") return !Equal(a, b);
  if (op == "in" || op == "notin") {
    CallArgs args;
    args.positional.push_back(b);
    const bool in = ApplyTest(*this, "in", a, args);
    return op == "in" ? in : !in;
  }
  if (a.is_undefined()) FailUndefined(a);
  if (b.is_undefined()) FailUndefined(b);
  if (op == "<") return Less(a, b);
  if (op == ">") return Less(b, a);
  if (op == "<=") return !Less(b, a);
  if (op == ">=") return !Less(a, b);
  Fail("unknown comparison " + op);
}

Value Renderer::Eval(const Node& n, const ScopeP& scope) {
  DepthGuard g(eval_depth_, limits_.max_depth * 2, "expressions");
  line_ = n.line;
  Work(1);
  switch (n.kind) {
    case NodeKind::kLiteral: return n.value;
    case NodeKind::kName: {
      const Value* v = scope->Find(n.text);
      return v ? *v : Value::Undefined(n.text);
    }
    case NodeKind::kList:
    case NodeKind::kTuple: {
      std::vector<Value> items;
      for (const auto& kid : n.kids) items.push_back(Eval(*kid, scope));
      return Value::List(std::move(items), n.kind == NodeKind::kTuple);
    }
    case NodeKind::kDict: {
      auto d = std::make_shared<DictObj>();
      for (size_t k = 0; k + 1 < n.kids.size(); k += 2) {
        const Value key = Eval(*n.kids[k], scope);
        d->Set(key.is_string() ? key.s() : Str(key), Eval(*n.kids[k + 1], scope));
      }
      return Value::Dict(d);
    }
    case NodeKind::kGetAttr: {
      const Value obj = Eval(*n.kids[0], scope);
      return GetAttr(*this, obj, n.text);
    }
    case NodeKind::kGetItem: {
      const Value obj = Eval(*n.kids[0], scope);
      const Value key = Eval(*n.kids[1], scope);
      return GetItem(*this, obj, key);
    }
    case NodeKind::kSlice: {
      const Value obj = Eval(*n.kids[0], scope);
      if (obj.is_undefined()) FailUndefined(obj);
      auto part = [&](int bit, int idx) -> std::optional<int64_t> {
        if (!(n.slice_mask & bit)) return std::nullopt;
        const Value v = Eval(*n.kids[static_cast<size_t>(idx)], scope);
        if (v.is_none()) return std::nullopt;
        if (!v.is_int() && !v.is_bool()) Fail("slice indices must be integers or None");
        return v.i();
      };
      const auto start = part(1, 1), stop = part(2, 2), step_opt = part(4, 3);
      const int64_t step = step_opt.value_or(1);
      if (step == 0) Fail("slice step cannot be zero");
      std::u32string chars;
      int64_t len = 0;
      if (obj.is_string()) {
        chars = Decode(obj.s());
        len = static_cast<int64_t>(chars.size());
      } else if (obj.is_list()) {
        len = static_cast<int64_t>(obj.list().items.size());
      } else {
        Fail("'" + obj.TypeName() + "' object is not subscriptable");
      }
      // Python's slice.indices().
      auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
        if (!v) return dflt;
        int64_t x = *v;
        if (x < 0) x += len;
        if (step > 0) return std::clamp<int64_t>(x, 0, len);
        return std::clamp<int64_t>(x, -1, len - 1);
      };
      const int64_t lo = clamp(start, step > 0 ? 0 : len - 1);
      const int64_t hi = clamp(stop, step > 0 ? len : -1);
      std::vector<size_t> idx;
      for (int64_t k = lo; step > 0 ? k < hi : k > hi; k += step) idx.push_back(static_cast<size_t>(k));
      Work(idx.size());
      if (obj.is_string()) {
        std::u32string out;
        for (size_t k : idx) out.push_back(chars[k]);
        return Value::String(Encode(out));
      }
      std::vector<Value> items;
      for (size_t k : idx) items.push_back(obj.list().items[k]);
      return Value::List(std::move(items), obj.list().tuple);
    }
    case NodeKind::kCall: {
      const Node& callee = *n.kids[0];
      Value fn = Eval(callee, scope);
      CallArgs args = EvalArgs(n, 1, scope);
      line_ = n.line;
      return Call(fn, args);
    }
    case NodeKind::kFilter: {
      const Value input = Eval(*n.kids[0], scope);
      if (n.text == "default" || n.text == "d") {
        // Evaluated lazily would not matter: arguments have no side effects.
      }
      CallArgs args = EvalArgs(n, 1, scope);
      line_ = n.line;
      return ApplyFilter(*this, n.text, input, args);
    }
    case NodeKind::kTest: {
      const Value v = Eval(*n.kids[0], scope);
      CallArgs args = EvalArgs(n, 1, scope);
      line_ = n.line;
      return Value::Bool(ApplyTest(*this, n.text, v, args));
    }
    case NodeKind::kUnary: {
      const Value v = Eval(*n.kids[0], scope);
      if (v.is_undefined()) FailUndefined(v);
      if (!v.is_number()) Fail("bad operand type for unary " + n.text + ": '" + v.TypeName() + "'");
      if (n.text == "+") return v.is_bool() ? Value::Int(v.i()) : v;
      if (v.is_float()) return Value::Float(-v.f());
      return Value::Int(CheckedInt(-static_cast<Int128>(v.i())));
    }
    case NodeKind::kBinary: {
      const Value a = Eval(*n.kids[0], scope);
      const Value b = Eval(*n.kids[1], scope);
      line_ = n.line;
      return EvalBinary(n, a, b);
    }
    case NodeKind::kConcat: {
      const Value a = Eval(*n.kids[0], scope);
      const Value b = Eval(*n.kids[1], scope);
      std::string s = Str(a);
      s += Str(b);
      CheckString(s.size());
      return Value::String(std::move(s));
    }
    case NodeKind::kAnd: {
      Value a = Eval(*n.kids[0], scope);
      if (!a.Truthy()) return a;
      return Eval(*n.kids[1], scope);
    }
    case NodeKind::kOr: {
      Value a = Eval(*n.kids[0], scope);
      if (a.Truthy()) return a;
      return Eval(*n.kids[1], scope);
    }
    case NodeKind::kNot: return Value::Bool(!Eval(*n.kids[0], scope).Truthy());
    case NodeKind::kCondExpr: {
      if (Eval(*n.kids[0], scope).Truthy()) return Eval(*n.kids[1], scope);
      if (n.kids.size() > 2) return Eval(*n.kids[2], scope);
      return Value::Undefined("conditional expression");
    }
    case NodeKind::kCompare: {
      Value a = Eval(*n.kids[0], scope);
      for (size_t k = 0; k < n.names.size(); ++k) {
        Value b = Eval(*n.kids[k + 1], scope);
        line_ = n.line;
        if (!Compare(n.names[k], a, b)) return Value::Bool(false);
        a = std::move(b);
      }
      return Value::Bool(true);
    }
    default:
      Fail("internal: not an expression");
  }
}

StatusOr<Template> Template::Parse(std::string_view source, const Limits& limits) {
  Template t;
  t.limits_ = limits;
  try {
    t.root_ = ParseTemplate(source, limits);
  } catch (const Error& e) {
    return InvalidArgument("chat template line " + std::to_string(e.line) + ": " + e.message);
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("chat template: out of memory while parsing");
  }
  return t;
}

StatusOr<std::string> Template::Render(const nlohmann::ordered_json& context, const Date& date) const {
  if (!root_) return FailedPrecondition("chat template: not parsed");
  Renderer r(limits_, date);
  try {
    ScopeP globals = r.NewScope(nullptr);
    AddGlobals(*globals);
    ScopeP vars = r.NewScope(globals);
    if (context.is_object()) {
      for (auto it = context.begin(); it != context.end(); ++it) vars->vars[it.key()] = Value::FromJson(it.value());
    }
    return r.Run(*root_, vars);
  } catch (const Error& e) {
    return InvalidArgument("chat template line " + std::to_string(e.line != 0 ? e.line : r.line()) + ": " + e.message);
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("chat template: out of memory while rendering");
  }
}

}  // namespace rote::inference::jinja
