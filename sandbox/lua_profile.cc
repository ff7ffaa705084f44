// The deterministic profile as a whole: the allow list of libraries and names (InstallProfile),
// the wrappers that charge stock library functions, the guards on the base library, read-only
// library tables, the per-call environment and the deterministic tostring and print.
#include "sandbox/lua_profile.h"

#include <algorithm>
#include <initializer_list>
#include <string_view>

#include "sandbox/lua_internal.h"
#include "sandbox/lua_runtime.h"

namespace rote::sandbox {
namespace internal {
namespace {

// Registry keys: addresses of these objects, used as light userdata (never observable).
char kProxiesKey;      // proxy table -> real table, for read-only library tables
char kIdsKey;          // weak-keyed object -> tostring sequence number, per call
char kNextIdKey;       // integer counter for the above
char kEnvMetaKey;      // metatable of every per-call global table
char kArrayMarkerKey;  // metatable marking an empty table as an empty array
char kRandomSeedKey;   // the stock math.randomseed, for reseeding per call

constexpr lua_Integer kRandomSeed = 0x726f7465;  // "rote"

int ReadOnlyError(lua_State* L) { return luaL_error(L, "attempt to modify a read-only table"); }

bool IsProxy(lua_State* L, int idx) {
  idx = lua_absindex(L, idx);
  lua_rawgetp(L, LUA_REGISTRYINDEX, &kProxiesKey);
  lua_pushvalue(L, idx);
  bool found = lua_rawget(L, -2) != LUA_TNIL;
  lua_pop(L, 2);
  return found;
}

int Tostring(lua_State* L) {
  luaL_checkany(L, 1);
  LuaState::PushToString(L, 1);
  return 1;
}

int Print(lua_State* L) {
  int n = lua_gettop(L);
  for (int i = 1; i <= n; ++i) {
    LuaState::PushToString(L, i);
    size_t len;
    const char* s = lua_tolstring(L, -1, &len);
    if (i > 1) LuaState::AppendOutput(L, "\t");
    LuaState::AppendOutput(L, std::string_view(s, len));
    lua_pop(L, 1);
  }
  LuaState::AppendOutput(L, "\n");
  return 0;
}

// ---- Library functions implemented in C. Each one whose work the script can make large is
// wrapped here (or replaced in lua_library.cc) so that it charges before it runs: at least one
// unit per iteration of its loop, whatever the iteration does (string.rep of an empty string
// still loops n times), and one unit per 16 bytes it reads (ChargeCall). Bytes it writes are
// charged as they are allocated (lua_allocator.h). A wrapper holds the stock function as its last upvalue, after
// the stock function's own upvalues (math.random's generator state), and runs it in its own
// frame: same arguments, same upvalues, same function name and stack levels in error messages,
// and yields work as they do unwrapped.

lua_CFunction Stock(lua_State* L) {
  int i = 1;
  while (lua_type(L, lua_upvalueindex(i + 1)) != LUA_TNONE) ++i;
  return lua_tocfunction(L, lua_upvalueindex(i));
}

// Replaces field `name` of the table on top of the stack with `wrapper` around it.
void WrapField(lua_State* L, const char* name, lua_CFunction wrapper) {
  lua_getfield(L, -1, name);
  int stock = lua_gettop(L);
  int n = 0;
  while (lua_getupvalue(L, stock, n + 1) != nullptr) ++n;
  lua_pushvalue(L, stock);
  lua_pushcclosure(L, wrapper, n + 1);
  lua_setfield(L, -3, name);
  lua_pop(L, 1);
}

// The stock function after ChargeCall(L, 0, First, Last).
template <int First, int Last>
int Charged(lua_State* L) {
  ChargeCall(L, 0, First, Last);
  return CallStock(L);
}

int GuardedSetmetatable(lua_State* L) {
  if (lua_type(L, 2) == LUA_TTABLE) {
    for (const char* field : {"__gc", "__mode"}) {
      if (lua_getfield(L, 2, field) != LUA_TNIL) {
        return luaL_error(L, "setmetatable: %s is not available in the deterministic profile "
                          "(it depends on when the garbage collector runs)", field);
      }
      lua_pop(L, 1);
    }
  }
  return CallStock(L);
}

int GuardedRawset(lua_State* L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  if (IsProxy(L, 1)) return ReadOnlyError(L);
  ChargeCall(L, 0, 2, 2);  // a long string key is hashed and compared
  return CallStock(L);
}

// The message handler of xpcall. Once a call is over (a limit, the deadline, a host stop) the
// user's handler is skipped and the error passes through unchanged: the error may have been
// raised from a count hook, and Lua runs message handlers before unwinding, while hooks are
// still disabled, so a handler that loops would never be stopped.
int XpcallHandler(lua_State* L) {
  if (StopRequested(LuaState::From(L))) return 1;
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, 1);
  return 1;
}

int GuardedXpcall(lua_State* L) {
  luaL_checktype(L, 2, LUA_TFUNCTION);
  lua_pushvalue(L, 2);
  lua_pushcclosure(L, XpcallHandler, 1);
  lua_replace(L, 2);
  return CallStock(L);
}

// error(message, level): adding the position walks `level` frames up the call stack.
int ChargedError(lua_State* L) {
  lua_Integer level = luaL_optinteger(L, 2, 1);
  ChargeCall(L, level > 0 ? static_cast<uint64_t>(level) : 0, 2, 2);
  return CallStock(L);
}

int RandomSeed(lua_State* L) {
  ChargeCall(L, 0, 1, 2);
  lua_Integer a = luaL_checkinteger(L, 1);
  lua_Integer b = luaL_optinteger(L, 2, 0);
  lua_rawgetp(L, LUA_REGISTRYINDEX, &kRandomSeedKey);
  lua_pushinteger(L, a);
  lua_pushinteger(L, b);
  lua_call(L, 2, 0);
  return 0;
}

// Removes fields from the table on top of the stack.
void RemoveFields(lua_State* L, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    lua_pushnil(L);
    lua_setfield(L, -2, n);
  }
}

void SetFunction(lua_State* L, const char* name, lua_CFunction f) {
  lua_pushcfunction(L, f);
  lua_setfield(L, -2, name);
}

int ArrayMarkerTostring(lua_State* L) {
  lua_pushliteral(L, "array");
  return 1;
}

}  // namespace

void PushReadOnlyProxy(lua_State* L, int idx) {
  idx = lua_absindex(L, idx);
  lua_newtable(L);  // proxy
  lua_createtable(L, 0, 3);
  lua_pushvalue(L, idx);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, ReadOnlyError);
  lua_setfield(L, -2, "__newindex");
  lua_pushliteral(L, "read-only table");
  lua_setfield(L, -2, "__metatable");
  lua_setmetatable(L, -2);
  lua_rawgetp(L, LUA_REGISTRYINDEX, &kProxiesKey);
  lua_pushvalue(L, -2);
  lua_pushvalue(L, idx);
  lua_rawset(L, -3);
  lua_pop(L, 1);
}

void UnwrapProxy(lua_State* L, int idx) {
  idx = lua_absindex(L, idx);
  lua_rawgetp(L, LUA_REGISTRYINDEX, &kProxiesKey);
  lua_pushvalue(L, idx);
  if (lua_rawget(L, -2) == LUA_TTABLE) lua_replace(L, idx);
  else lua_pop(L, 1);
  lua_pop(L, 1);
}

void PushArrayMarker(lua_State* L) { lua_rawgetp(L, LUA_REGISTRYINDEX, &kArrayMarkerKey); }

int CallStock(lua_State* L) { return Stock(L)(L); }

void ChargeCall(lua_State* L, uint64_t extra, int first, int last) {
  int n = lua_gettop(L);
  uint64_t bytes = 0;
  for (int i = std::max(first, 1); i <= std::min(last, n); ++i) {
    if (lua_type(L, i) == LUA_TSTRING) bytes += lua_rawlen(L, i);
  }
  LuaState::Charge(L, SaturatingAdd(SaturatingAdd(1 + static_cast<uint64_t>(n), extra), bytes / kBytesPerCharge));
}

void InstallProfile(lua_State* L) {
  if (!VerifyTableLayout(L)) {
    luaL_error(L, "this Lua build's table layout is not Lua 5.4's; the sandbox cannot charge for "
               "traversing tables");
  }
  lua_newtable(L);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &kProxiesKey);

  luaL_requiref(L, "_G", luaopen_base, 0);  // the global table, now "base"
  RemoveFields(L, {"_G", "collectgarbage", "dofile", "load", "loadfile", "require", "warn",
                   "loadstring", "module", "unpack", "setfenv", "getfenv"});
  SetFunction(L, "pairs", DeterministicPairs);
  SetFunction(L, "next", DeterministicNext);
  SetFunction(L, "tostring", Tostring);
  SetFunction(L, "print", Print);
  WrapField(L, "setmetatable", GuardedSetmetatable);
  WrapField(L, "rawset", GuardedRawset);
  WrapField(L, "xpcall", GuardedXpcall);
  WrapField(L, "error", ChargedError);
  WrapField(L, "select", Charged<1, 1>);
  WrapField(L, "tonumber", Charged<1, kAllArgs>);
  WrapField(L, "assert", Charged<1, 0>);
  WrapField(L, "rawequal", Charged<1, 2>);
  WrapField(L, "rawget", Charged<2, 2>);
  int base = lua_gettop(L);

  luaL_requiref(L, "string", luaopen_string, 0);
  RemoveFields(L, {"dump", "pack", "packsize", "unpack"});
  for (const char* f : {"char", "lower", "upper", "reverse"}) WrapField(L, f, Charged<1, kAllArgs>);
  WrapField(L, "sub", Charged<2, 3>);
  WrapField(L, "byte", StringByte);
  WrapField(L, "rep", StringRep);
  WrapField(L, "format", StringFormat);
  InstallPatternFunctions(L, lua_gettop(L));
  // The string metatable's __index is this real table; protect the metatable itself. Its
  // arithmetic metamethods convert strings to numbers by scanning them.
  lua_pushliteral(L, "");
  lua_getmetatable(L, -1);
  for (const char* f : {"__add", "__sub", "__mul", "__mod", "__pow", "__div", "__idiv", "__unm"}) {
    WrapField(L, f, Charged<1, 2>);
  }
  lua_pushliteral(L, "read-only table");
  lua_setfield(L, -2, "__metatable");
  lua_pop(L, 2);
  PushReadOnlyProxy(L, -1);
  lua_setfield(L, base, "string");
  lua_pop(L, 1);

  luaL_requiref(L, "table", luaopen_table, 0);
  SetFunction(L, "concat", TableConcat);
  SetFunction(L, "unpack", TableUnpack);
  SetFunction(L, "move", TableMove);
  SetFunction(L, "insert", TableInsert);
  SetFunction(L, "remove", TableRemove);
  SetFunction(L, "sort", TableSort);
  WrapField(L, "pack", Charged<1, 0>);
  PushReadOnlyProxy(L, -1);
  lua_setfield(L, base, "table");
  lua_pop(L, 1);

  luaL_requiref(L, "math", luaopen_math, 0);
  // glibc picks FMA or non-FMA variants of these at run time by CPU, and their results are not
  // correctly rounded, so they can differ between machines. sqrt is exact everywhere.
  RemoveFields(L, {"sin", "cos", "tan", "asin", "acos", "atan", "exp", "log", "pow", "ldexp",
                   "frexp", "cosh", "sinh", "tanh", "log10", "atan2"});
  for (const char* f : {"abs", "ceil", "floor", "fmod", "max", "min", "modf", "sqrt", "tointeger", "ult", "random"}) {
    WrapField(L, f, Charged<1, kAllArgs>);
  }
  lua_getfield(L, -1, "randomseed");
  lua_rawsetp(L, LUA_REGISTRYINDEX, &kRandomSeedKey);
  SetFunction(L, "randomseed", RandomSeed);
  PushReadOnlyProxy(L, -1);
  lua_setfield(L, base, "math");
  lua_pop(L, 1);

  luaL_requiref(L, "utf8", luaopen_utf8, 0);
  for (const char* f : {"char", "offset"}) WrapField(L, f, Charged<1, kAllArgs>);
  WrapField(L, "codepoint", Utf8Codepoint);
  WrapField(L, "len", Utf8Len);
  WrapField(L, "codes", Utf8Codes);
  PushReadOnlyProxy(L, -1);
  lua_setfield(L, base, "utf8");
  lua_pop(L, 1);

  luaL_requiref(L, "coroutine", luaopen_coroutine, 0);
  for (const char* f : {"create", "yield", "close"}) WrapField(L, f, Charged<1, 0>);
  WrapField(L, "resume", CoroutineResume);
  SetFunction(L, "wrap", CoroutineWrap);
  PushReadOnlyProxy(L, -1);
  lua_setfield(L, base, "coroutine");
  lua_pop(L, 1);

  // package.loaded (in the registry) still holds the real tables; scripts cannot reach it.
  lua_createtable(L, 0, 2);  // metatable of every per-call global table
  lua_pushvalue(L, base);
  lua_setfield(L, -2, "__index");
  lua_pushboolean(L, 0);
  lua_setfield(L, -2, "__metatable");
  lua_rawsetp(L, LUA_REGISTRYINDEX, &kEnvMetaKey);

  lua_createtable(L, 0, 2);
  lua_pushliteral(L, "read-only table");
  lua_setfield(L, -2, "__metatable");
  lua_pushcfunction(L, ArrayMarkerTostring);
  lua_setfield(L, -2, "__name");
  lua_rawsetp(L, LUA_REGISTRYINDEX, &kArrayMarkerKey);

  lua_pop(L, 1);  // base
}

int NewCallEnvironment(lua_State* L) {
  lua_newtable(L);  // the call's global table
  lua_pushvalue(L, -1);
  lua_setfield(L, -2, "_G");
  lua_rawgetp(L, LUA_REGISTRYINDEX, &kEnvMetaKey);
  lua_setmetatable(L, -2);
  lua_pushnil(L);  // tostring sequence numbers: created on first use
  lua_rawsetp(L, LUA_REGISTRYINDEX, &kIdsKey);
  lua_pushinteger(L, 0);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &kNextIdKey);
  lua_rawgetp(L, LUA_REGISTRYINDEX, &kRandomSeedKey);
  lua_pushinteger(L, kRandomSeed);
  lua_pushinteger(L, 0);
  lua_call(L, 2, 0);
  return 1;
}

}  // namespace internal

void LuaState::PushToString(lua_State* L, int idx) {
  idx = lua_absindex(L, idx);
  switch (lua_type(L, idx)) {
    case LUA_TNIL: lua_pushliteral(L, "nil"); return;
    case LUA_TBOOLEAN: lua_pushstring(L, lua_toboolean(L, idx) ? "true" : "false"); return;
    case LUA_TNUMBER:
      lua_pushvalue(L, idx);
      lua_tolstring(L, -1, nullptr);  // converts the copy in place ("%.14g" / "%d", C locale)
      return;
    case LUA_TSTRING: lua_pushvalue(L, idx); return;
    default: break;
  }
  if (luaL_callmeta(L, idx, "__tostring")) {
    if (!lua_isstring(L, -1)) luaL_error(L, "'__tostring' must return a string");
    return;
  }
  // "<type>: <n>", n counting from 1 in order of first use within the call.
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &internal::kIdsKey) != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_createtable(L, 0, 0);  // weak keys: an object's number lives as long as the object
    lua_createtable(L, 0, 1);
    lua_pushliteral(L, "k");
    lua_setfield(L, -2, "__mode");
    lua_setmetatable(L, -2);
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &internal::kIdsKey);
  }
  lua_pushvalue(L, idx);
  lua_Integer id;
  if (lua_rawget(L, -2) == LUA_TNUMBER) {
    id = lua_tointeger(L, -1);
    lua_pop(L, 1);
  } else {
    lua_pop(L, 1);
    lua_rawgetp(L, LUA_REGISTRYINDEX, &internal::kNextIdKey);
    id = lua_tointeger(L, -1) + 1;
    lua_pop(L, 1);
    lua_pushinteger(L, id);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &internal::kNextIdKey);
    lua_pushvalue(L, idx);
    lua_pushinteger(L, id);
    lua_rawset(L, -3);
  }
  lua_pop(L, 1);
  const char* type = luaL_typename(L, idx);
  lua_pushfstring(L, "%s: %I", type, static_cast<LUAI_UACINT>(id));
}

}  // namespace rote::sandbox
