// pairs and next in a deterministic key order, charged by the size of the table they walk.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <lua.hpp>

#include "sandbox/lua_internal.h"
#include "sandbox/lua_profile.h"
#include "sandbox/lua_runtime.h"

namespace rote::sandbox::internal {
namespace {

// ---- Table sizes. lua_next visits every slot of a table's array and hash parts, empty ones
// included, so what a traversal costs is the table's allocated size, not its key count: a table
// whose million elements were set to nil keeps its million slots until it is next rehashed, and
// next() over it would otherwise be one unit for a million steps. The size is read from the
// Table itself, whose layout is lobject.h's in Lua 5.4.0 to 5.4.8; VerifyTableLayout checks it
// against tables of known sizes when a state is created, and refuses other builds.
struct TableLayout {
  void* next;
  uint8_t tt;
  uint8_t marked;
  uint8_t flags;      // bit 7 set: `alimit` is less than the array part's real size
  uint8_t lsizenode;  // log2 of the hash part's size
  unsigned int alimit;
  void* array;
  void* node;
  void* lastfree;  // null for the shared empty hash part
  void* metatable;
  void* gclist;
};
static_assert(offsetof(TableLayout, alimit) == 12 && offsetof(TableLayout, lastfree) == 32,
              "Table layout of Lua 5.4 on LP64");

TableLayout ReadTable(lua_State* L, int idx) {
  TableLayout t;
  std::memcpy(&t, lua_topointer(L, idx), sizeof t);
  return t;
}

// Slots in the array and hash parts of the table at idx (ltable.c's luaH_realasize and
// allocsizenode).
uint64_t TableSlots(lua_State* L, int idx) {
  TableLayout t = ReadTable(L, idx);
  uint64_t array = t.alimit;
  if ((t.flags & 0x80) != 0 && (array & (array - 1)) != 0) array = std::bit_ceil(array);
  uint64_t hash = t.lastfree == nullptr ? 0 : uint64_t{1} << t.lsizenode;
  return array + hash;
}

// ---- Deterministic key order: numbers (integers and floats numerically), then strings
// bytewise, then false, then true. Tables, functions and other keys have no order that does
// not depend on addresses, so iterating a table that has them is an error.
struct SortKey {
  int kind;  // 0 number, 1 string, 2 boolean
  bool is_int;
  lua_Integer i;
  double d;
  const char* s;
  size_t len;
};

bool MakeSortKey(lua_State* L, int idx, SortKey* k) {
  switch (lua_type(L, idx)) {
    case LUA_TNUMBER:
      k->kind = 0;
      k->is_int = lua_isinteger(L, idx);
      if (k->is_int) k->i = lua_tointeger(L, idx);
      else k->d = lua_tonumber(L, idx);
      return true;
    case LUA_TSTRING:
      k->kind = 1;
      k->s = lua_tolstring(L, idx, &k->len);
      return true;
    case LUA_TBOOLEAN:
      k->kind = 2;
      k->i = lua_toboolean(L, idx);
      return true;
    default:
      return false;
  }
}

// Integer vs non-integral float (float keys with integral values are normalized to integers
// by Lua, so the two are never equal).
bool IntLessFloat(lua_Integer i, double d) {
  if (d >= 9223372036854775808.0) return true;
  if (d < -9223372036854775808.0) return false;
  return i <= static_cast<lua_Integer>(std::floor(d));
}

// What comparing keys cost: one unit per comparison and one per 16 bytes of strings compared.
struct CompareCost {
  uint64_t comparisons = 0;
  uint64_t bytes = 0;
  uint64_t units() const { return comparisons + bytes / kBytesPerCharge; }
};

bool KeyLess(const SortKey& a, const SortKey& b, CompareCost* cost) {
  ++cost->comparisons;
  if (a.kind != b.kind) return a.kind < b.kind;
  switch (a.kind) {
    case 0:
      if (a.is_int && b.is_int) return a.i < b.i;
      if (!a.is_int && !b.is_int) return a.d < b.d;
      if (a.is_int) return IntLessFloat(a.i, b.d);
      return !IntLessFloat(b.i, a.d);
    case 1: {
      size_t n = std::min(a.len, b.len);
      cost->bytes += n;
      int c = std::memcmp(a.s, b.s, n);
      return c != 0 ? c < 0 : a.len < b.len;
    }
    default: return a.i < b.i;
  }
}

[[noreturn]] void UnorderableKey(lua_State* L, int idx, const char* fn) {
  luaL_error(L, "%s: table has a key of type %s; only number, string and boolean keys have a "
             "deterministic iteration order", fn, luaL_typename(L, idx));
  abort();  // unreachable: luaL_error does not return
}

// Charged before a function walks the table at t with lua_next `walks` times.
void ChargeWalks(lua_State* L, int t, uint64_t walks) {
  LuaState::Charge(L, SaturatingAdd(1, walks * TableSlots(L, t)));
}

int CountKeys(lua_State* L, int t) {
  int n = 0;
  lua_pushnil(L);
  while (lua_next(L, t) != 0) {
    lua_pop(L, 1);
    ++n;
  }
  return n;
}

// Iterator closure of pairs: upvalue 1 = the table, 2 = sorted keys, 3 = position.
int PairsStep(lua_State* L) {
  lua_Integer pos = lua_tointeger(L, lua_upvalueindex(3));
  lua_Integer n = static_cast<lua_Integer>(lua_rawlen(L, lua_upvalueindex(2)));
  while (pos < n) {
    ++pos;
    lua_rawgeti(L, lua_upvalueindex(2), pos);
    lua_pushvalue(L, -1);
    if (lua_rawget(L, lua_upvalueindex(1)) != LUA_TNIL) {  // skip keys removed meanwhile
      lua_pushinteger(L, pos);
      lua_replace(L, lua_upvalueindex(3));
      return 2;
    }
    lua_pop(L, 2);
  }
  lua_pushinteger(L, pos);
  lua_replace(L, lua_upvalueindex(3));
  lua_pushnil(L);
  return 1;
}

}  // namespace

bool VerifyTableLayout(lua_State* L) {
  lua_createtable(L, 0, 0);
  lua_createtable(L, 5, 9);  // an array part of 5 and a hash part of 16
  TableLayout e = ReadTable(L, -2), t = ReadTable(L, -1);
  bool ok = e.tt == LUA_TTABLE && e.alimit == 0 && e.lastfree == nullptr && e.array == nullptr &&
            t.tt == LUA_TTABLE && t.alimit == 5 && t.lsizenode == 4 && (t.flags & 0x80) == 0 &&
            t.array != nullptr && t.node != nullptr && t.lastfree != nullptr && e.node != t.node &&
            TableSlots(L, -2) == 0 && TableSlots(L, -1) == 21;
  lua_pop(L, 2);
  return ok;
}

// next(t, k): the smallest key greater than k (or the smallest key when k is nil). O(n) per
// step, but it never depends on the hash layout.
int DeterministicNext(lua_State* L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 2);
  UnwrapProxy(L, 1);
  SortKey after{};
  bool have_after = !lua_isnil(L, 2);
  if (have_after && !MakeSortKey(L, 2, &after)) UnorderableKey(L, 2, "next");
  ChargeWalks(L, 1, 1);
  CompareCost cost;
  bool found = false;
  SortKey best{};
  lua_pushnil(L);  // slot 3: best key so far
  lua_pushnil(L);  // iteration key
  while (lua_next(L, 1) != 0) {
    lua_pop(L, 1);
    SortKey k{};
    if (!MakeSortKey(L, -1, &k)) UnorderableKey(L, -1, "next");
    if ((!have_after || KeyLess(after, k, &cost)) && (!found || KeyLess(k, best, &cost))) {
      found = true;
      best = k;
      lua_pushvalue(L, -1);
      lua_replace(L, 3);
    }
  }
  LuaState::Charge(L, cost.units());
  if (!found) {
    lua_pushnil(L);
    return 1;
  }
  lua_pushvalue(L, 3);
  lua_rawget(L, 1);
  return 2;
}

// pairs(t): snapshots the keys, sorts them, iterates the snapshot. __pairs is not honoured
// (a metamethod could reintroduce any order). Assigning to existing fields during the
// traversal is fine; keys added during it are not visited.
int DeterministicPairs(lua_State* L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_settop(L, 1);
  UnwrapProxy(L, 1);
  ChargeWalks(L, 1, 2);
  int n = CountKeys(L, 1);
  LuaState::Charge(L, static_cast<uint64_t>(n));  // each key is copied twice and looked up once
  // Scratch space as userdata so that a Lua error (memory limit) cannot leak it.
  auto* keys = static_cast<SortKey*>(lua_newuserdatauv(L, sizeof(SortKey) * (n ? n : 1), 0));
  CompareCost cost;
  int i = 0;
  lua_pushnil(L);
  while (lua_next(L, 1) != 0) {
    lua_pop(L, 1);
    if (!MakeSortKey(L, -1, &keys[i])) UnorderableKey(L, -1, "pairs");
    if (keys[i].kind == 1) cost.bytes += keys[i].len;  // hashed and compared again by PairsStep
    ++i;
  }
  std::sort(keys, keys + n, [&cost](const SortKey& a, const SortKey& b) { return KeyLess(a, b, &cost); });
  LuaState::Charge(L, cost.units());
  lua_pushvalue(L, 1);            // upvalue 1
  lua_createtable(L, n, 0);       // upvalue 2
  for (i = 0; i < n; ++i) {
    const SortKey& k = keys[i];
    if (k.kind == 0) {
      if (k.is_int) lua_pushinteger(L, k.i);
      else lua_pushnumber(L, k.d);
    } else if (k.kind == 1) {
      lua_pushlstring(L, k.s, k.len);
    } else {
      lua_pushboolean(L, static_cast<int>(k.i));
    }
    lua_rawseti(L, -2, i + 1);
  }
  lua_pushinteger(L, 0);          // upvalue 3
  lua_pushcclosure(L, PairsStep, 3);
  lua_pushvalue(L, 1);
  lua_pushnil(L);
  return 3;
}

}  // namespace rote::sandbox::internal
