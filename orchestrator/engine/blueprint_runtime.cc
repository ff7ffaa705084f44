#include "orchestrator/engine/blueprint_runtime.h"

#include <algorithm>
#include <functional>
#include <lua.hpp>
#include <map>
#include <memory>

#include "absl/strings/str_cat.h"
#include "orchestrator/engine/names.h"
#include "orchestrator/engine/regex_artifact.h"

namespace rote::orchestrator::engine {

using sandbox::Array;
using sandbox::Map;
using sandbox::Value;

namespace {

// Registry keys (addresses of these objects, never their values).
const char kRuntimeKey = 0;
const char kBlueprintMeta[] = "rote.blueprint";
const char kPatternMeta[] = "rote.re2_pattern";
const char kFunctionMeta[] = "rote.lua_function";

enum class Phase { kLoading, kRunning };

struct PointRuntime {
  GenerationPoint spec;
  const BoundArtifact* artifact = nullptr;
  std::unique_ptr<RegexArtifact> regex;
};

// Everything the C functions of one Lua state share. Lives on the heap of the host, so a Lua
// error (a longjmp) never skips a destructor of something the C functions were building: they
// do their C++ work in *Impl functions that return an Outcome, and only the thin lua_CFunction
// wrappers raise, after those frames are gone.
struct Runtime {
  Phase phase = Phase::kLoading;
  std::string chunkname;
  bool declared = false;
  int blueprint_line = 0;
  std::string name;
  std::string version;
  std::vector<PointRuntime> points;

  const ExecuteOptions* options = nullptr;
  int64_t next_step = 0;
  absl::Status abort;  // a fatal status: stops the execution whatever the blueprint catches
  std::string error;   // the message of a catchable error to raise
  Value result;        // the value to push
  uint64_t log_bytes = 0;
};

enum Outcome : int { kNoResult = 0, kPushResult = 1, kRaiseError = -1, kAbort = -2 };

Runtime* GetRuntime(lua_State* L) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, &kRuntimeKey);
  auto* rt = static_cast<Runtime*>(lua_touserdata(L, -1));
  lua_pop(L, 1);
  return rt;
}

// Raised at every instruction once a run is interrupted or aborted, so that no pcall in the
// blueprint can swallow the stop.
void StopHook(lua_State* L, lua_Debug*) { luaL_error(L, "run stopped"); }

int Finish(lua_State* L, Runtime* rt, int outcome) {
  switch (outcome) {
    case kPushResult:
      sandbox::PushValueUnprotected(L, rt->result);
      rt->result = Value();
      return 1;
    case kRaiseError:
      luaL_where(L, 1);
      lua_pushlstring(L, rt->error.data(), rt->error.size());
      lua_concat(L, 2);
      return lua_error(L);
    case kAbort:
      lua_sethook(L, StopHook, LUA_MASKCOUNT, 1);
      lua_pushliteral(L, "run stopped");
      return lua_error(L);
    default:
      return 0;
  }
}

int CurrentLine(lua_State* L) {
  lua_Debug ar;
  if (lua_getstack(L, 1, &ar) && lua_getinfo(L, "l", &ar)) return ar.currentline;
  return 0;
}

bool HasMetatable(lua_State* L, int idx, const char* name) {
  if (!lua_getmetatable(L, idx)) return false;
  luaL_getmetatable(L, name);
  bool same = lua_rawequal(L, -1, -2);
  lua_pop(L, 2);
  return same;
}

// The string keys of the table at idx that are not in `allowed`, sorted (raw traversal order
// depends on the hash layout, and error messages must not).
std::vector<std::string> UnknownKeys(lua_State* L, int idx, std::initializer_list<const char*> allowed) {
  std::vector<std::string> unknown;
  lua_pushnil(L);
  while (lua_next(L, idx) != 0) {
    lua_pop(L, 1);
    if (lua_type(L, -1) != LUA_TSTRING) {
      unknown.push_back(absl::StrCat("(a ", luaL_typename(L, -1), " key)"));
      continue;
    }
    size_t len;
    const char* k = lua_tolstring(L, -1, &len);
    std::string key(k, len);
    if (std::none_of(allowed.begin(), allowed.end(), [&](const char* a) { return key == a; })) {
      unknown.push_back(std::move(key));
    }
  }
  std::sort(unknown.begin(), unknown.end());
  return unknown;
}

// Reads t[key] raw (no metamethods): nullopt when absent, error text when not a string.
bool RawString(lua_State* L, int idx, const char* key, std::optional<std::string>* out,
               std::string* error) {
  lua_pushstring(L, key);
  int t = lua_rawget(L, idx);
  if (t == LUA_TNIL) {
    lua_pop(L, 1);
    *out = std::nullopt;
    return true;
  }
  if (t != LUA_TSTRING) {
    *error = absl::StrCat("'", key, "' must be a string, got a ", lua_typename(L, t));
    lua_pop(L, 1);
    return false;
  }
  size_t len;
  const char* s = lua_tolstring(L, -1, &len);
  *out = std::string(s, len);
  lua_pop(L, 1);
  return true;
}

// ---- loading: rote.blueprint, bp:regex, bp:lua -------------------------------------------------

int BlueprintImpl(lua_State* L, Runtime* rt) {
  std::vector<std::string> unknown = UnknownKeys(L, 1, {"name", "version"});
  if (!unknown.empty()) {
    rt->error = absl::StrCat("unknown field '", unknown[0], "' in rote.blueprint (fields: name, version)");
    return kRaiseError;
  }
  std::optional<std::string> name, version;
  if (!RawString(L, 1, "name", &name, &rt->error) || !RawString(L, 1, "version", &version, &rt->error)) {
    rt->error = absl::StrCat("rote.blueprint: ", rt->error);
    return kRaiseError;
  }
  if (!name || !IsValidPointName(*name)) {
    rt->error = "rote.blueprint needs a name of lowercase letters, digits and '_' starting with a "
                "letter: rote.blueprint { name = \"invoice_totals\", version = \"1.0.0\" }";
    return kRaiseError;
  }
  rt->name = *name;
  rt->version = version.value_or("");
  rt->declared = true;
  rt->blueprint_line = CurrentLine(L);
  return kNoResult;
}

int RoteBlueprint(lua_State* L) {
  Runtime* rt = GetRuntime(L);
  if (rt->phase != Phase::kLoading) return luaL_error(L, "rote.blueprint is called when the blueprint loads, not inside run()");
  if (rt->declared) {
    return luaL_error(L, "rote.blueprint may be called only once (it was called at line %d)", rt->blueprint_line);
  }
  if (lua_type(L, 1) != LUA_TTABLE) {
    return luaL_error(L, "rote.blueprint takes a table: rote.blueprint { name = \"...\", version = \"...\" }");
  }
  lua_settop(L, 1);
  if (int r = BlueprintImpl(L, rt); r != kNoResult) return Finish(L, rt, r);
  lua_newtable(L);
  luaL_setmetatable(L, kBlueprintMeta);
  return 1;
}

// An example list converts to an Array; an empty Lua table converts to an empty Map.
bool AsList(const Value& v, Array* out) {
  if (v.is_array()) {
    *out = v.as_array();
    return true;
  }
  if (v.is_map() && v.as_map().empty()) {
    out->clear();
    return true;
  }
  return false;
}

constexpr const char* kNamedExampleForm = "{ text = \"...\", matches = { \"match\", ... }, held_out = true }";
constexpr const char* kNamedTestForm = "{ input = ..., output = ..., held_out = true }";

// An example written with keys, the form that can carry `held_out`:
//   bp:lua    { input = ..., output = ..., held_out = true }
//   bp:regex  { text = "...", matches = { ... }, held_out = true }
absl::StatusOr<Example> NamedExample(const Map& m, bool pattern) {
  const char* in_key = pattern ? "text" : "input";
  const char* out_key = pattern ? "matches" : "output";
  const char* form = pattern ? kNamedExampleForm : kNamedTestForm;
  for (const auto& [key, value] : m) {
    if (key != in_key && key != out_key && key != "held_out") {
      return absl::InvalidArgumentError(absl::StrCat("has an unknown key ", QuoteInput(key), ": write ", form));
    }
  }
  auto in = m.find(in_key);
  auto out = m.find(out_key);
  if (in == m.end() || out == m.end()) {
    return absl::InvalidArgumentError(absl::StrCat("needs both `", in_key, "` and `", out_key, "` (", form,
                                                   "; nil cannot be written as a table field)"));
  }
  Example e{in->second, out->second};
  if (auto held = m.find("held_out"); held != m.end()) {
    if (!held->second.is_bool()) {
      return absl::InvalidArgumentError(absl::StrCat("has a held_out of type ", sandbox::KindName(held->second.kind()),
                                                     ": write held_out = true"));
    }
    e.held_out = held->second.as_bool();
  }
  return e;
}

int DeclareImpl(lua_State* L, Runtime* rt, ArtifactKind kind) {
  const bool pattern = kind == ArtifactKind::kRe2Pattern;
  const char* what = pattern ? "bp:regex" : "bp:lua";
  const char* list_key = pattern ? "examples" : "tests";
  std::vector<std::string> unknown = pattern ? UnknownKeys(L, 2, {"name", "task", "examples"})
                                             : UnknownKeys(L, 2, {"name", "task", "signature", "tests"});
  if (!unknown.empty()) {
    rt->error = absl::StrCat(
        "unknown field '", unknown[0], "' in ", what, " (fields: ",
        pattern ? "name, task, examples" : "name, task, signature, tests",
        "; RE2 patterns take `examples` of { text, { matches } }, Lua functions take `tests` of "
        "{ input, expected output })");
    return kRaiseError;
  }
  GenerationPoint p;
  p.kind = kind;
  p.line = CurrentLine(L);
  std::optional<std::string> name, task, signature;
  if (!RawString(L, 2, "name", &name, &rt->error) || !RawString(L, 2, "task", &task, &rt->error) ||
      !RawString(L, 2, "signature", &signature, &rt->error)) {
    rt->error = absl::StrCat(what, ": ", rt->error);
    return kRaiseError;
  }
  if (!name) {
    rt->error = absl::StrCat(what, " needs a name: ", what, " { name = \"...\", task = \"...\", ... }");
    return kRaiseError;
  }
  p.name = *name;
  p.task = task.value_or("");
  p.signature = signature.value_or("");
  for (const PointRuntime& other : rt->points) {
    if (other.spec.name == p.name) {
      rt->error = absl::StrCat("generation point '", p.name, "' is already declared at line ",
                               other.spec.line, "; names must be unique within a blueprint");
      return kRaiseError;
    }
  }
  lua_pushstring(L, list_key);
  int t = lua_rawget(L, 2);
  if (t != LUA_TTABLE) {
    lua_pop(L, 1);
    rt->error = absl::StrCat(what, " '", p.name, "' needs `", list_key, "`: ",
                             pattern ? "examples = { { \"text\", { \"match\", ... } }, ... }"
                                     : "tests = { { input, expected_output }, ... }");
    return kRaiseError;
  }
  absl::StatusOr<Value> list = sandbox::ToValue(L, -1);
  lua_pop(L, 1);
  Array items;
  if (!list.ok() || !AsList(*list, &items)) {
    rt->error = absl::StrCat(what, " '", p.name, "': `", list_key, "` must be a list of ",
                             pattern ? "{ text, { matches } }" : "{ input, expected_output }",
                             list.ok() ? "" : absl::StrCat(" (", list.status().message(), ")"));
    return kRaiseError;
  }
  for (size_t i = 0; i < items.size(); ++i) {
    Example e;
    if (items[i].is_map() && !items[i].as_map().empty()) {
      absl::StatusOr<Example> named = NamedExample(items[i].as_map(), pattern);
      if (!named.ok()) {
        rt->error = absl::StrCat(pattern ? "example " : "test ", i + 1, " of '", p.name, "' ", named.status().message());
        return kRaiseError;
      }
      e = *std::move(named);
    } else if (Array pair; AsList(items[i], &pair) && pair.size() == 2) {
      e = Example{pair[0], pair[1]};
    } else {
      rt->error = absl::StrCat(
          pattern ? "example " : "test ", i + 1, " of '", p.name, "' must be ",
          pattern ? "{ \"text\", { \"match\", ... } }" : "{ input, expected_output }",
          " (two elements; an expected output of nil cannot be written in a Lua list), or ",
          pattern ? kNamedExampleForm : kNamedTestForm);
      return kRaiseError;
    }
    Array matches;
    if (pattern && AsList(e.expected, &matches)) e.expected = Value::FromArray(std::move(matches));
    p.examples.push_back(std::move(e));
  }
  if (absl::Status s = Seal(&p); !s.ok()) {
    rt->error = std::string(s.message());
    return kRaiseError;
  }
  PointRuntime pr;
  pr.spec = std::move(p);
  rt->points.push_back(std::move(pr));
  return kNoResult;
}

int Declare(lua_State* L, ArtifactKind kind) {
  Runtime* rt = GetRuntime(L);
  const char* what = kind == ArtifactKind::kRe2Pattern ? "bp:regex" : "bp:lua";
  if (rt->phase != Phase::kLoading) {
    return luaL_error(L, "%s: generation points are declared when the blueprint loads, not inside run()", what);
  }
  if (lua_type(L, 1) != LUA_TTABLE || !HasMetatable(L, 1, kBlueprintMeta)) {
    return luaL_error(L, "%s must be called with a colon on the blueprint: %s { ... }", what, what);
  }
  if (lua_type(L, 2) != LUA_TTABLE) {
    return luaL_error(L, "%s takes a table: %s { name = \"...\", task = \"...\", ... }", what, what);
  }
  lua_settop(L, 2);
  if (int r = DeclareImpl(L, rt, kind); r != kNoResult) return Finish(L, rt, r);
  auto* index = static_cast<size_t*>(lua_newuserdatauv(L, sizeof(size_t), 0));
  *index = rt->points.size() - 1;
  luaL_setmetatable(L, kind == ArtifactKind::kRe2Pattern ? kPatternMeta : kFunctionMeta);
  return 1;
}

int DeclareRegex(lua_State* L) { return Declare(L, ArtifactKind::kRe2Pattern); }
int DeclareLua(lua_State* L) { return Declare(L, ArtifactKind::kLuaFunction); }

// ---- running: artifact calls -------------------------------------------------------------------

// Errors of the artifact itself (deterministic: the same code and input fail the same way) are
// results the blueprint may catch; anything else is the infrastructure failing and stops the run.
bool IsArtifactError(const absl::Status& s) {
  return absl::IsFailedPrecondition(s) || absl::IsResourceExhausted(s) || absl::IsInvalidArgument(s) ||
         absl::IsOutOfRange(s);
}

int InvokeStep(Runtime* rt, size_t idx, Value input, const std::function<absl::StatusOr<Value>()>& exec) {
  const ExecuteOptions& o = *rt->options;
  if (o.interrupt != nullptr && o.interrupt->interrupted()) {
    rt->abort = o.interrupt->reason();
    return kAbort;
  }
  const PointRuntime& p = rt->points[idx];
  absl::StatusOr<Canonical> in = CanonicalOf(input);
  if (!in.ok()) {
    rt->error = absl::StrCat(p.spec.name, ": the argument has no JSON form: ", in.status().message());
    return kRaiseError;
  }
  StepCall step;
  step.index = rt->next_step++;
  step.point = p.spec.name;
  step.artifact_digest = p.artifact->digest;
  step.input = *std::move(in);
  if (o.observer != nullptr) {
    if (absl::Status s = o.observer->BeforeCall(step); !s.ok()) {
      rt->abort = s;
      return kAbort;
    }
  }
  absl::StatusOr<Value> out = exec();
  absl::Status failure;
  if (!out.ok()) {
    if (!IsArtifactError(out.status())) {
      rt->abort = out.status();
      return kAbort;
    }
    failure = out.status();
  }
  absl::StatusOr<Canonical> oc = failure.ok() ? CanonicalOf(*out) : absl::StatusOr<Canonical>(failure);
  if (failure.ok() && !oc.ok()) {
    failure = absl::InvalidArgumentError(absl::StrCat("its result has no JSON form: ", oc.status().message()));
  }
  if (!failure.ok()) {
    Map m;
    m["error"] = Value::String(std::string(failure.message()));
    oc = CanonicalOf(Value::FromMap(std::move(m)));
    if (!oc.ok()) {  // the message itself was not UTF-8
      Map safe;
      safe["error"] = Value::String("(error message is not valid UTF-8)");
      oc = CanonicalOf(Value::FromMap(std::move(safe)));
    }
  }
  step.output = *std::move(oc);
  if (o.observer != nullptr) {
    if (absl::Status s = o.observer->AfterCall(step); !s.ok()) {
      rt->abort = s;
      return kAbort;
    }
  }
  if (!failure.ok()) {
    rt->error = absl::StrCat(p.spec.name, " (artifact ", p.artifact->digest.substr(7, 12), ") failed: ",
                             failure.message());
    return kRaiseError;
  }
  rt->result = *std::move(out);
  return kPushResult;
}

enum class PatternOp { kMatch, kFindAll, kCaptures };

int PatternImpl(lua_State* L, Runtime* rt, size_t idx, PatternOp op, bool batch) {
  static const char* const kNames[3][2] = {{"match", "match_each"},
                                           {"find_all", "find_all_each"},
                                           {"captures", "captures_each"}};
  const char* method = kNames[static_cast<int>(op)][batch ? 1 : 0];
  const PointRuntime& p = rt->points[idx];
  Map input;
  input["method"] = Value::String(method);
  std::vector<std::string> texts;
  if (batch) {
    absl::StatusOr<Value> list = sandbox::ToValue(L, 2);
    Array items;
    if (list.ok()) AsList(*list, &items);
    if (!list.ok() || (!list->is_array() && !(list->is_map() && list->as_map().empty())) ||
        std::any_of(items.begin(), items.end(), [](const Value& v) { return !v.is_string(); })) {
      rt->error = absl::StrCat(p.spec.name, ":", method, " takes a list of strings");
      return kRaiseError;
    }
    for (const Value& v : items) texts.push_back(v.as_string());
    input["texts"] = Value::FromArray(std::move(items));
  } else {
    size_t len;
    const char* s = lua_tolstring(L, 2, &len);
    texts.emplace_back(s, len);
    input["text"] = Value::String(texts.back());
  }
  const RegexArtifact& re = *p.regex;
  auto one = [&](const std::string& text) {
    switch (op) {
      case PatternOp::kMatch: return re.Match(text);
      case PatternOp::kFindAll: return re.FindAll(text);
      case PatternOp::kCaptures: return re.Captures(text);
    }
    return Value();
  };
  return InvokeStep(rt, idx, Value::FromMap(std::move(input)), [&]() -> absl::StatusOr<Value> {
    if (!batch) return one(texts[0]);
    Array out;
    out.reserve(texts.size());
    for (const std::string& t : texts) {
      Value v = one(t);
      // nil cannot live in a Lua list; an element without a match is false.
      out.push_back(v.is_nil() ? Value::Bool(false) : std::move(v));
    }
    return Value::FromArray(std::move(out));
  });
}

int PatternMethod(lua_State* L, PatternOp op, bool batch) {
  Runtime* rt = GetRuntime(L);
  size_t idx = *static_cast<size_t*>(luaL_checkudata(L, 1, kPatternMeta));
  if (rt->phase != Phase::kRunning) {
    return luaL_error(L, "'%s' is called inside run(): generation points are bound to artifacts when a run starts",
                      rt->points[idx].spec.name.c_str());
  }
  size_t units = 1;
  if (batch) {
    if (lua_type(L, 2) != LUA_TTABLE) return luaL_error(L, "%s takes a list of strings", rt->points[idx].spec.name.c_str());
    units += lua_rawlen(L, 2);
  } else {
    if (lua_type(L, 2) != LUA_TSTRING) {
      return luaL_error(L, "%s: the text must be a string, got a %s", rt->points[idx].spec.name.c_str(),
                        luaL_typename(L, 2));
    }
    units += lua_rawlen(L, 2) / 64;
  }
  lua_settop(L, 2);
  sandbox::LuaState::Charge(L, units);
  return Finish(L, rt, PatternImpl(L, rt, idx, op, batch));
}

int PatternMatch(lua_State* L) { return PatternMethod(L, PatternOp::kMatch, false); }
int PatternFindAll(lua_State* L) { return PatternMethod(L, PatternOp::kFindAll, false); }
int PatternCaptures(lua_State* L) { return PatternMethod(L, PatternOp::kCaptures, false); }
int PatternMatchEach(lua_State* L) { return PatternMethod(L, PatternOp::kMatch, true); }
int PatternFindAllEach(lua_State* L) { return PatternMethod(L, PatternOp::kFindAll, true); }
int PatternCapturesEach(lua_State* L) { return PatternMethod(L, PatternOp::kCaptures, true); }

int FunctionImpl(lua_State* L, Runtime* rt, size_t idx, bool batch) {
  const PointRuntime& p = rt->points[idx];
  absl::StatusOr<Value> arg = sandbox::ToValue(L, 2);
  if (!arg.ok()) {
    rt->error = absl::StrCat(p.spec.name, ": the argument cannot be passed to an artifact: ", arg.status().message());
    return kRaiseError;
  }
  std::vector<Value> inputs;
  if (batch) {
    Array items;
    if (!AsList(*arg, &items)) {
      rt->error = absl::StrCat(p.spec.name, ":map takes a list");
      return kRaiseError;
    }
    inputs = std::move(items);
  } else {
    inputs.push_back(*arg);
  }
  const ExecuteOptions& o = *rt->options;
  return InvokeStep(rt, idx, *std::move(arg), [&]() -> absl::StatusOr<Value> {
    absl::StatusOr<std::vector<sandbox::CallResult>> results =
        o.lua_runner->Run(p.artifact->code.source, p.spec.name, inputs, o.limits, o.deadline);
    if (!results.ok()) return results.status();
    if (results->size() != inputs.size()) {
      return absl::InternalError(absl::StrCat("the Lua runner returned ", results->size(),
                                              " results for ", inputs.size(), " inputs"));
    }
    if (!batch) {
      sandbox::CallResult& r = (*results)[0];
      if (!r.status.ok()) return r.status;
      return std::move(r.value);
    }
    Array out;
    out.reserve(results->size());
    for (size_t i = 0; i < results->size(); ++i) {
      sandbox::CallResult& r = (*results)[i];
      if (!r.status.ok()) {
        return absl::Status(r.status.code(), absl::StrCat("element ", i + 1, ": ", r.status.message()));
      }
      if (r.value.is_nil()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "element ", i + 1, ": the function returned nil, which cannot be an element of a list"));
      }
      out.push_back(std::move(r.value));
    }
    return Value::FromArray(std::move(out));
  });
}

int FunctionCallOrMap(lua_State* L, bool batch) {
  Runtime* rt = GetRuntime(L);
  size_t idx = *static_cast<size_t*>(luaL_checkudata(L, 1, kFunctionMeta));
  if (rt->phase != Phase::kRunning) {
    return luaL_error(L, "'%s' is called inside run(): generation points are bound to artifacts when a run starts",
                      rt->points[idx].spec.name.c_str());
  }
  if (batch && lua_type(L, 2) != LUA_TTABLE) {
    return luaL_error(L, "%s:map takes a list", rt->points[idx].spec.name.c_str());
  }
  lua_settop(L, 2);
  sandbox::LuaState::Charge(L, batch ? 1 + lua_rawlen(L, 2) : 1);
  return Finish(L, rt, FunctionImpl(L, rt, idx, batch));
}

int FunctionCall(lua_State* L) { return FunctionCallOrMap(L, false); }
int FunctionMap(lua_State* L) { return FunctionCallOrMap(L, true); }

int HandleToString(lua_State* L) {
  Runtime* rt = GetRuntime(L);
  auto* idx = static_cast<size_t*>(lua_touserdata(L, 1));
  const bool pattern = HasMetatable(L, 1, kPatternMeta);
  if (idx == nullptr || *idx >= rt->points.size()) return luaL_error(L, "not a generation point");
  lua_pushfstring(L, "%s '%s'", pattern ? "re2_pattern" : "lua_function", rt->points[*idx].spec.name.c_str());
  return 1;
}

void LogImpl(Runtime* rt, const char* s, size_t len) {
  if (rt->phase == Phase::kRunning && rt->options != nullptr && rt->options->observer != nullptr) {
    rt->options->observer->Log(std::string_view(s, len));
  }
}

int RoteLog(lua_State* L) {
  Runtime* rt = GetRuntime(L);
  int n = lua_gettop(L);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  for (int i = 1; i <= n; ++i) {
    if (i > 1) luaL_addchar(&b, ' ');
    sandbox::LuaState::PushToString(L, i);
    luaL_addvalue(&b);
  }
  luaL_pushresult(&b);
  size_t len;
  const char* s = lua_tolstring(L, -1, &len);
  sandbox::LuaState::Charge(L, 1 + len / 16);
  const uint64_t max = sandbox::LuaState::From(L)->limits().max_output_bytes;
  if (rt->log_bytes + len > max) {
    return luaL_error(L, "rote.log: log limit exceeded (max_output_bytes=%I)", static_cast<LUAI_UACINT>(max));
  }
  rt->log_bytes += len;
  LogImpl(rt, s, len);
  return 0;
}

void SetFunctions(lua_State* L, std::initializer_list<std::pair<const char*, lua_CFunction>> fns) {
  for (const auto& [name, fn] : fns) {
    lua_pushcfunction(L, fn);
    lua_setfield(L, -2, name);
  }
}

// Builds the metatables and returns the `rote` table (run under lua_pcall: may raise on memory).
int InstallRote(lua_State* L) {
  luaL_newmetatable(L, kBlueprintMeta);
  lua_newtable(L);
  SetFunctions(L, {{"regex", DeclareRegex}, {"lua", DeclareLua}});
  lua_setfield(L, -2, "__index");
  lua_pushliteral(L, "blueprint");
  lua_setfield(L, -2, "__metatable");
  lua_pop(L, 1);

  luaL_newmetatable(L, kPatternMeta);
  lua_newtable(L);
  SetFunctions(L, {{"match", PatternMatch},
                   {"find_all", PatternFindAll},
                   {"captures", PatternCaptures},
                   {"match_each", PatternMatchEach},
                   {"find_all_each", PatternFindAllEach},
                   {"captures_each", PatternCapturesEach}});
  lua_setfield(L, -2, "__index");
  SetFunctions(L, {{"__tostring", HandleToString}});
  lua_pushliteral(L, "re2_pattern");
  lua_setfield(L, -2, "__metatable");
  lua_pop(L, 1);

  luaL_newmetatable(L, kFunctionMeta);
  lua_newtable(L);
  SetFunctions(L, {{"map", FunctionMap}});
  lua_setfield(L, -2, "__index");
  SetFunctions(L, {{"__call", FunctionCall}, {"__tostring", HandleToString}});
  lua_pushliteral(L, "lua_function");
  lua_setfield(L, -2, "__metatable");
  lua_pop(L, 1);

  lua_newtable(L);
  SetFunctions(L, {{"blueprint", RoteBlueprint}, {"log", RoteLog}});
  return 1;
}

int CountLines(std::string_view source) {
  int n = 1 + static_cast<int>(std::count(source.begin(), source.end(), '\n'));
  if (!source.empty() && source.back() == '\n') --n;
  return n;
}

// A fresh state with the `rote` library, the chunk loaded and run: on success the blueprint
// table is on top of the stack.
absl::StatusOr<std::unique_ptr<sandbox::LuaState>> LoadChunk(std::string_view source,
                                                              std::string_view chunkname,
                                                              const sandbox::Limits& limits,
                                                              std::optional<sandbox::LuaState::Clock::time_point> deadline,
                                                              Runtime* rt) {
  absl::StatusOr<std::unique_ptr<sandbox::LuaState>> state = sandbox::LuaState::Create(limits);
  if (!state.ok()) return state.status();
  sandbox::LuaState& s = **state;
  lua_State* L = s.raw();
  s.set_deadline(deadline);
  lua_pushlightuserdata(L, rt);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &kRuntimeKey);
  lua_pushcfunction(L, InstallRote);
  if (lua_pcall(L, 0, 1, 0) != LUA_OK) {
    return absl::ResourceExhaustedError("cannot install the rote library: out of memory");
  }
  s.SetGlobal("rote", /*read_only=*/true);
  if (absl::Status st = s.NewEnvironment(); !st.ok()) return st;
  if (absl::Status st = s.Load(source, chunkname); !st.ok()) return st;
  if (absl::Status st = s.Call(0, 1); !st.ok()) return st;
  const std::string name(chunkname);
  if (lua_type(L, -1) != LUA_TTABLE || !HasMetatable(L, -1, kBlueprintMeta)) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ":", CountLines(source), ": the chunk must end with `return bp`, returning the object ",
        "made by rote.blueprint { ... } (it returned ", luaL_typename(L, -1), ")"));
  }
  lua_pushliteral(L, "run");
  if (lua_rawget(L, -2) != LUA_TFUNCTION) {
    lua_pop(L, 1);
    return absl::InvalidArgumentError(absl::StrCat(
        name, ":", rt->blueprint_line, ": blueprint '", rt->name,
        "' has no run function: define `function bp.run(input) ... end` before `return bp`"));
  }
  lua_pop(L, 1);
  return state;
}

}  // namespace

void RunInterrupt::Interrupt(absl::Status reason) {
  std::lock_guard lock(mu_);
  if (interrupted_.load(std::memory_order_relaxed)) return;
  reason_ = std::move(reason);
  interrupted_.store(true, std::memory_order_release);
  // lua_sethook is the one Lua API function meant to be called asynchronously (lua.c sets it
  // from a signal handler to stop a running script); the hook then raises on the next
  // instruction of the executing thread.
  if (L_ != nullptr) lua_sethook(L_, StopHook, LUA_MASKCOUNT, 1);
}

absl::Status RunInterrupt::reason() const {
  std::lock_guard lock(mu_);
  return reason_;
}

void RunInterrupt::Attach(lua_State* L) {
  std::lock_guard lock(mu_);
  L_ = L;
  if (interrupted_.load(std::memory_order_relaxed)) lua_sethook(L_, StopHook, LUA_MASKCOUNT, 1);
}

void RunInterrupt::Detach() {
  std::lock_guard lock(mu_);
  L_ = nullptr;
}

absl::StatusOr<BlueprintDecl> LoadBlueprint(std::string_view source, std::string_view chunkname,
                                            const sandbox::Limits& limits) {
  Runtime rt;
  rt.chunkname = std::string(chunkname);
  absl::StatusOr<std::unique_ptr<sandbox::LuaState>> state =
      LoadChunk(source, chunkname, limits, std::nullopt, &rt);
  if (!state.ok()) {
    std::string message(state.status().message());
    if (absl::IsResourceExhausted(state.status())) {
      message = absl::StrCat(std::string(chunkname), ": loading the blueprint exceeded a limit: ", message);
    }
    return absl::InvalidArgumentError(message);
  }
  BlueprintDecl decl;
  decl.name = rt.name;
  decl.version = rt.version;
  decl.line = rt.blueprint_line;
  for (PointRuntime& p : rt.points) decl.points.push_back(std::move(p.spec));
  return decl;
}

absl::StatusOr<Canonical> ExecuteBlueprint(std::string_view source, std::string_view chunkname,
                                           const std::vector<BoundArtifact>& artifacts,
                                           const sandbox::Value& input,
                                           const ExecuteOptions& options) {
  Runtime rt;
  rt.chunkname = std::string(chunkname);
  rt.options = &options;
  absl::StatusOr<std::unique_ptr<sandbox::LuaState>> state =
      LoadChunk(source, chunkname, options.limits, options.deadline, &rt);
  if (!state.ok()) {
    if (absl::IsInvalidArgument(state.status())) return absl::FailedPreconditionError(state.status().message());
    return state.status();
  }
  sandbox::LuaState& s = **state;
  lua_State* L = s.raw();

  for (PointRuntime& p : rt.points) {
    auto it = std::find_if(artifacts.begin(), artifacts.end(),
                           [&](const BoundArtifact& a) { return a.point == p.spec.name; });
    if (it == artifacts.end()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "generation point '", p.spec.name, "' (line ", p.spec.line, ") is not bound to an artifact"));
    }
    if (it->code.kind != p.spec.kind) {
      return absl::FailedPreconditionError(absl::StrCat(
          "generation point '", p.spec.name, "' is a ", KindName(p.spec.kind), " but is bound to a ",
          KindName(it->code.kind), " artifact (", it->digest, ")"));
    }
    p.artifact = &*it;
    if (p.spec.kind == ArtifactKind::kRe2Pattern) {
      absl::StatusOr<sandbox::RegexOptions> ro = ParseRe2Options(it->code.options_json);
      if (!ro.ok()) return absl::FailedPreconditionError(absl::StrCat(p.spec.name, ": ", ro.status().message()));
      absl::StatusOr<std::unique_ptr<RegexArtifact>> re = RegexArtifact::Compile(it->code.source, *ro);
      if (!re.ok()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "the pattern bound to '", p.spec.name, "' (", it->digest, ") does not compile: ", re.status().message()));
      }
      p.regex = *std::move(re);
    } else if (options.lua_runner == nullptr) {
      return absl::InternalError("no Lua runner for function artifacts");
    }
  }

  rt.phase = Phase::kRunning;
  lua_pushliteral(L, "run");
  lua_rawget(L, -2);
  if (absl::Status st = s.Push(input); !st.ok()) return st;
  if (options.interrupt != nullptr) options.interrupt->Attach(L);
  absl::Status status = s.Call(1, 1);
  if (options.interrupt != nullptr) options.interrupt->Detach();
  if (!rt.abort.ok()) return rt.abort;
  if (options.interrupt != nullptr && options.interrupt->interrupted()) return options.interrupt->reason();
  if (!status.ok()) return status;
  if (options.observer != nullptr && !s.output().empty()) {
    // print() output becomes log lines too, after the run (rote.log keeps the order).
    std::string_view out = s.output();
    while (!out.empty()) {
      size_t nl = out.find('\n');
      options.observer->Log(out.substr(0, nl));
      out = nl == std::string_view::npos ? std::string_view() : out.substr(nl + 1);
    }
  }
  absl::StatusOr<Value> output = sandbox::ToValue(L, -1);
  if (!output.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(std::string(chunkname), ": run returned a value that is not JSON: ",
                                                      output.status().message()));
  }
  absl::StatusOr<Canonical> canonical = CanonicalOf(*output);
  if (!canonical.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(std::string(chunkname), ": run returned a value that is not JSON: ",
                                                      canonical.status().message()));
  }
  // JSON escapes can make the output several times the memory the value took (a control
  // character takes six bytes); the run's memory limit, recorded in its engine profile, bounds
  // what is stored so every server and every replay draws the line in the same place.
  if (canonical->json.size() > options.limits.max_memory_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        std::string(chunkname), ": run returned ", canonical->json.size(),
        " bytes of JSON, more than the run's memory limit (max_memory_bytes=", options.limits.max_memory_bytes,
        "), which also bounds its output; return less, or submit with a larger policy.max_memory_bytes"));
  }
  return canonical;
}

}  // namespace rote::orchestrator::engine
