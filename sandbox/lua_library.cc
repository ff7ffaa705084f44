// Library functions whose loops the script controls (string.rep, byte and format; table.concat,
// unpack, insert, remove, move and sort; utf8; coroutine.resume and wrap), reimplemented or
// wrapped so that they charge before they run: at least one unit per iteration, whatever the
// iteration does, and a Poll every kIterationsPerPoll iterations of a long loop.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <lua.hpp>

#include "sandbox/lua_internal.h"
#include "sandbox/lua_profile.h"
#include "sandbox/lua_runtime.h"

namespace rote::sandbox::internal {
namespace {

// The iterations of `for (i = from; i < to; ++i)` (or down from `to` to `from`), for any two
// integers: a __len can answer anything.
uint64_t Iterations(lua_Integer from, lua_Integer to) {
  return to > from ? static_cast<lua_Unsigned>(to) - static_cast<lua_Unsigned>(from) : 0;
}

// Units for a loop over the indices first..last.
uint64_t RangeUnits(lua_Integer first, lua_Integer last) {
  if (last < first) return 0;
  lua_Unsigned span = static_cast<lua_Unsigned>(last) - static_cast<lua_Unsigned>(first);
  return span > (1ull << 60) ? (1ull << 60) : span + 1;
}

}  // namespace

// string.rep(s, n, sep): one unit per copy, also of an empty string (the loop runs n times
// whatever it copies), charged before anything is built.
int StringRep(lua_State* L) {
  size_t l, lsep;
  const char* s = luaL_checklstring(L, 1, &l);
  lua_Integer n = luaL_checkinteger(L, 2);
  const char* sep = luaL_optlstring(L, 3, "", &lsep);
  ChargeCall(L, n > 0 ? static_cast<uint64_t>(n) : 0, 2, 2);
  if (n <= 0) {
    lua_pushliteral(L, "");
    return 1;
  }
  constexpr size_t kMaxResult = INT_MAX;  // lstrlib.c's MAXSIZE
  if (l + lsep < l || l + lsep > kMaxResult / static_cast<size_t>(n)) {
    return luaL_error(L, "resulting string too large");
  }
  size_t total = static_cast<size_t>(n) * l + static_cast<size_t>(n - 1) * lsep;
  luaL_Buffer b;
  char* p = luaL_buffinitsize(L, &b, total);
  for (lua_Integer i = 1; i < n; ++i) {
    if (i % kIterationsPerPoll == 0) LuaState::Poll(L);
    std::memcpy(p, s, l);
    p += l;
    if (lsep > 0) {
      std::memcpy(p, sep, lsep);
      p += lsep;
    }
  }
  std::memcpy(p, s, l);
  luaL_pushresultsize(&b, total);
  return 1;
}

// string.byte(s, i, j): one unit per byte returned.
int StringByte(lua_State* L) {
  size_t l;
  luaL_checklstring(L, 1, &l);
  lua_Integer pi = luaL_optinteger(L, 2, 1);
  size_t posi = PosRelatI(pi, l);
  size_t pose = GetEndPos(L, 3, pi, l);
  ChargeCall(L, posi <= pose ? pose - posi + 1 : 0, 2, 3);
  return CallStock(L);
}

// string.format: "%s" goes through the deterministic tostring (the stock one prints
// addresses for tables), "%p" and "%a" are refused. One unit per conversion on top of the
// bytes (widths and precisions are at most two digits: the stock function refuses more).
int StringFormat(lua_State* L) {
  size_t len;
  const char* fmt = luaL_checklstring(L, 1, &len);
  int top = lua_gettop(L);
  int arg = 1;
  uint64_t conversions = 0;
  for (size_t i = 0; i < len; ++i) {
    if (fmt[i] != '%') continue;
    if (++i < len && fmt[i] == '%') continue;
    ++arg;
    ++conversions;
    while (i < len && std::strchr("-+ #0123456789.", fmt[i]) != nullptr) ++i;
    if (i >= len) break;  // the stock function reports the malformed format
    char conv = fmt[i];
    if (conv == 'p') {
      return luaL_error(L, "string.format: '%%p' is not available in the deterministic profile "
                        "(addresses differ between runs)");
    }
    if (conv == 'a' || conv == 'A') {
      return luaL_error(L, "string.format: '%%%c' is not available in the deterministic profile "
                        "(hexadecimal float output differs between C libraries)", conv);
    }
    if (conv == 'q' && arg <= top && lua_type(L, arg) == LUA_TNUMBER && !lua_isinteger(L, arg)) {
      return luaL_error(L, "string.format: '%%q' of a float is not available in the deterministic profile "
                        "(it writes hexadecimal floats, whose text differs between C libraries)");
    }
    if (conv == 's' && arg <= top && lua_type(L, arg) != LUA_TSTRING && lua_type(L, arg) != LUA_TNUMBER) {
      LuaState::PushToString(L, arg);
      lua_replace(L, arg);
    }
  }
  ChargeCall(L, conversions, 1, kAllArgs);
  return CallStock(L);
}

// ---- table: concat, insert, remove and move are ltablib.c's, with the length read once (a
// __len that answers differently the second time must not decide the loop after the charge)
// and a Poll in their loops, which can run for as many iterations as the budget allows.

namespace {

void AddField(lua_State* L, luaL_Buffer* b, lua_Integer i) {
  lua_geti(L, 1, i);
  if (!lua_isstring(L, -1)) {
    luaL_error(L, "invalid value (%s) at index %I in table for 'concat'", luaL_typename(L, -1),
               static_cast<LUAI_UACINT>(i));
  }
  luaL_addvalue(b);
}

}  // namespace

int TableConcat(lua_State* L) {
  ChargeCall(L, 0, 3, 4);
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_Integer last = luaL_len(L, 1);
  size_t lsep;
  const char* sep = luaL_optlstring(L, 2, "", &lsep);
  lua_Integer i = luaL_optinteger(L, 3, 1);
  last = luaL_optinteger(L, 4, last);
  LuaState::Charge(L, RangeUnits(i, last));
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  for (uint64_t k = 1; i < last; ++i, ++k) {
    if (k % kIterationsPerPoll == 0) LuaState::Poll(L);
    AddField(L, &b, i);
    luaL_addlstring(&b, sep, lsep);
  }
  if (i == last) AddField(L, &b, i);
  luaL_pushresult(&b);
  return 1;
}

int TableUnpack(lua_State* L) {
  ChargeCall(L, 0, 2, 3);
  lua_Integer i = luaL_optinteger(L, 2, 1);
  lua_Integer e = luaL_opt(L, luaL_checkinteger, 3, luaL_len(L, 1));
  if (i > e) return 0;
  LuaState::Charge(L, RangeUnits(i, e));
  lua_Unsigned n = static_cast<lua_Unsigned>(e) - static_cast<lua_Unsigned>(i);
  if (n >= static_cast<unsigned int>(INT_MAX) || !lua_checkstack(L, static_cast<int>(++n))) {
    return luaL_error(L, "too many results to unpack");
  }
  for (; i < e; ++i) lua_geti(L, 1, i);
  lua_geti(L, 1, e);
  return static_cast<int>(n);
}

int TableInsert(lua_State* L) {
  ChargeCall(L, 0, 2, lua_gettop(L) == 3 ? 2 : 0);
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_Integer e = luaL_intop(+, luaL_len(L, 1), 1);  // first empty element
  lua_Integer pos;
  switch (lua_gettop(L)) {
    case 2:
      pos = e;
      break;
    case 3: {
      pos = luaL_checkinteger(L, 2);
      luaL_argcheck(L, static_cast<lua_Unsigned>(pos) - 1u < static_cast<lua_Unsigned>(e), 2,
                    "position out of bounds");
      LuaState::Charge(L, Iterations(pos, e));
      uint64_t k = 0;
      for (lua_Integer i = e; i > pos; --i) {  // move up elements
        if (++k % kIterationsPerPoll == 0) LuaState::Poll(L);
        lua_geti(L, 1, i - 1);
        lua_seti(L, 1, i);
      }
      break;
    }
    default:
      return luaL_error(L, "wrong number of arguments to 'insert'");
  }
  lua_seti(L, 1, pos);
  return 0;
}

int TableRemove(lua_State* L) {
  ChargeCall(L, 0, 2, 2);
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_Integer size = luaL_len(L, 1);
  lua_Integer pos = luaL_optinteger(L, 2, size);
  if (pos != size) {  // validate 'pos' if given; the stock message names argument 1
    luaL_argcheck(L, static_cast<lua_Unsigned>(pos) - 1u <= static_cast<lua_Unsigned>(size), 1,
                  "position out of bounds");
  }
  LuaState::Charge(L, Iterations(pos, size));
  lua_geti(L, 1, pos);
  for (uint64_t k = 1; pos < size; ++pos, ++k) {
    if (k % kIterationsPerPoll == 0) LuaState::Poll(L);
    lua_geti(L, 1, pos + 1);
    lua_seti(L, 1, pos);
  }
  lua_pushnil(L);
  lua_seti(L, 1, pos);
  return 1;
}

int TableMove(lua_State* L) {
  ChargeCall(L, 0, 2, 4);
  lua_Integer f = luaL_checkinteger(L, 2);
  lua_Integer e = luaL_checkinteger(L, 3);
  lua_Integer t = luaL_checkinteger(L, 4);
  int tt = !lua_isnoneornil(L, 5) ? 5 : 1;  // destination table
  luaL_checktype(L, 1, LUA_TTABLE);
  luaL_checktype(L, tt, LUA_TTABLE);
  if (e >= f) {
    luaL_argcheck(L, f > 0 || e < LUA_MAXINTEGER + f, 3, "too many elements to move");
    lua_Integer n = e - f + 1;
    luaL_argcheck(L, t <= LUA_MAXINTEGER - n + 1, 4, "destination wrap around");
    LuaState::Charge(L, RangeUnits(f, e));
    bool forward = t > e || t <= f || (tt != 1 && !lua_compare(L, 1, tt, LUA_OPEQ));
    for (lua_Integer k = 0; k < n; ++k) {
      if ((k + 1) % static_cast<lua_Integer>(kIterationsPerPoll) == 0) LuaState::Poll(L);
      lua_Integer i = forward ? k : n - 1 - k;
      lua_geti(L, 1, f + i);
      lua_seti(L, tt, t + i);
    }
  }
  lua_pushvalue(L, tt);
  return 1;
}

// table.sort: a stable bottom-up merge sort. The stock sort is a quicksort whose pivot choice
// for large arrays mixes in clock() and time(), so with equal elements or an inconsistent
// comparator its result differs from run to run. Any comparator gives one fixed result here.
// One unit per comparison; two strings are compared here, bytewise as the C locale's strcoll
// does (Lua's l_strcmp), and charged one unit per 16 bytes compared.
namespace {

bool SortLess(lua_State* L, bool has_comparator, int a, int b) {
  a = lua_absindex(L, a);
  b = lua_absindex(L, b);
  if (has_comparator) {
    LuaState::Charge(L, 1);
    lua_pushvalue(L, 2);
    lua_pushvalue(L, a);
    lua_pushvalue(L, b);
    lua_call(L, 2, 1);
    bool r = lua_toboolean(L, -1);
    lua_pop(L, 1);
    return r;
  }
  if (lua_type(L, a) == LUA_TSTRING && lua_type(L, b) == LUA_TSTRING) {
    size_t la, lb;
    const char* sa = lua_tolstring(L, a, &la);
    const char* sb = lua_tolstring(L, b, &lb);
    size_t n = std::min(la, lb);
    LuaState::Charge(L, 1 + n / kBytesPerCharge);
    int c = std::memcmp(sa, sb, n);
    return c != 0 ? c < 0 : la < lb;
  }
  LuaState::Charge(L, 1);
  return lua_compare(L, a, b, LUA_OPLT);
}

}  // namespace

int TableSort(lua_State* L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_Integer n = luaL_len(L, 1);
  if (n > INT32_MAX) return luaL_argerror(L, 1, "array too big");
  bool has_comparator = !lua_isnoneornil(L, 2);
  if (has_comparator) luaL_checktype(L, 2, LUA_TFUNCTION);
  lua_settop(L, 2);
  if (n < 2) return 0;
  LuaState::Charge(L, static_cast<uint64_t>(n));
  lua_createtable(L, static_cast<int>(n), 0);  // 3: source run
  lua_createtable(L, static_cast<int>(n), 0);  // 4: destination run
  for (lua_Integer i = 1; i <= n; ++i) {
    lua_geti(L, 1, i);
    lua_rawseti(L, 3, i);
  }
  int src = 3, dst = 4;
  for (lua_Integer width = 1; width < n; width *= 2) {
    LuaState::Charge(L, static_cast<uint64_t>(n));  // every element is copied once per pass
    for (lua_Integer lo = 1; lo <= n; lo += 2 * width) {
      lua_Integer mid = std::min(lo + width, n + 1), hi = std::min(lo + 2 * width, n + 1);
      lua_Integer i = lo, j = mid, k = lo;
      while (i < mid && j < hi) {
        lua_rawgeti(L, src, i);
        lua_rawgeti(L, src, j);
        // Take from the right run only when it is strictly less: keeps the sort stable.
        if (SortLess(L, has_comparator, -1, -2)) {
          lua_rawseti(L, dst, k++);
          lua_pop(L, 1);
          ++j;
        } else {
          lua_pop(L, 1);
          lua_rawseti(L, dst, k++);
          ++i;
        }
      }
      for (; i < mid; ++i) { lua_rawgeti(L, src, i); lua_rawseti(L, dst, k++); }
      for (; j < hi; ++j) { lua_rawgeti(L, src, j); lua_rawseti(L, dst, k++); }
    }
    std::swap(src, dst);
  }
  for (lua_Integer i = 1; i <= n; ++i) {
    lua_rawgeti(L, src, i);
    lua_seti(L, 1, i);
  }
  return 0;
}

// ---- utf8

namespace {

lua_Integer Utf8Position(lua_Integer pos, size_t len) {  // lutf8lib.c's u_posrelat
  if (pos >= 0) return pos;
  if (0u - static_cast<size_t>(pos) > len) return 0;
  return static_cast<lua_Integer>(len) + pos + 1;
}

}  // namespace

// utf8.codepoint(s, i, j): one unit per byte of the range (each decoded character is at
// least one byte and one result).
int Utf8Codepoint(lua_State* L) {
  size_t len;
  luaL_checklstring(L, 1, &len);
  lua_Integer posi = Utf8Position(luaL_optinteger(L, 2, 1), len);
  lua_Integer pose = Utf8Position(luaL_optinteger(L, 3, posi), len);
  bool in_range = posi >= 1 && pose <= static_cast<lua_Integer>(len) && posi <= pose;
  ChargeCall(L, in_range ? static_cast<uint64_t>(pose - posi + 1) : 0, 2, 3);
  return CallStock(L);
}

// utf8.len(s, i, j): the bytes up front and one unit per character counted after the count.
int Utf8Len(lua_State* L) {
  ChargeCall(L, 0, 1, 3);
  int r = CallStock(L);
  if (r == 1 && lua_isinteger(L, -1)) LuaState::Charge(L, static_cast<uint64_t>(lua_tointeger(L, -1)));
  return r;
}

namespace {

// The iterator that utf8.codes returns: the stock one skips any run of continuation bytes
// before a character, so one step can scan the whole string; charged for what it skipped.
int Utf8CodesStep(lua_State* L) {
  size_t len;
  luaL_checklstring(L, 1, &len);
  lua_Integer from = lua_tointeger(L, 2);
  int r = CallStock(L);
  lua_Integer to = r == 2 ? lua_tointeger(L, -2) : static_cast<lua_Integer>(len);
  LuaState::Charge(L, 1 + static_cast<uint64_t>(std::max<lua_Integer>(0, to - from)) / kBytesPerCharge);
  return r;
}

}  // namespace

int Utf8Codes(lua_State* L) {
  ChargeCall(L, 0, 1, 0);
  int r = CallStock(L);  // iterator, s, 0
  lua_pushvalue(L, -r);
  lua_pushcclosure(L, Utf8CodesStep, 1);
  lua_replace(L, -r - 1);
  return r;
}

// ---- coroutine

// coroutine.resume(co, ...): the arguments are moved into the coroutine and its results out.
int CoroutineResume(lua_State* L) {
  ChargeCall(L, 0, 1, 0);
  int r = CallStock(L);
  LuaState::Charge(L, static_cast<uint64_t>(r));
  return r;
}

namespace {

// The function coroutine.wrap returns (lcorolib.c's auxwrap; upvalue 1 is the coroutine),
// charged like resume, and with one difference: a coroutine that died because the call is over
// (a limit, the deadline, a host stop) is not reset. Resetting runs its pending __close
// handlers, and a coroutine that died inside the count hook has hooks disabled for good, so a
// handler that loops would never be stopped.
int WrappedCoroutineCall(lua_State* L) {
  ChargeCall(L, 0, 1, 0);
  lua_State* co = lua_tothread(L, lua_upvalueindex(1));
  int narg = lua_gettop(L);
  int r = -1;
  if (!lua_checkstack(co, narg)) {
    lua_pushliteral(L, "too many arguments to resume");
  } else {
    lua_xmove(L, co, narg);
    int nres = 0;
    int status = lua_resume(co, L, narg, &nres);
    if (status == LUA_OK || status == LUA_YIELD) {
      if (!lua_checkstack(L, nres + 1)) {
        lua_pop(co, nres);
        lua_pushliteral(L, "too many results to resume");
      } else {
        lua_xmove(co, L, nres);
        r = nres;
      }
    } else {
      lua_xmove(co, L, 1);
    }
  }
  if (r >= 0) {
    LuaState::Charge(L, static_cast<uint64_t>(r));
    return r;
  }
  int stat = lua_status(co);
  if (stat != LUA_OK && stat != LUA_YIELD) {  // the coroutine died of the error
    if (StopRequested(LuaState::From(L))) return lua_error(L);
    stat = lua_resetthread(co);  // close its to-be-closed variables
    lua_xmove(co, L, 1);
  }
  if (stat != LUA_ERRMEM && lua_type(L, -1) == LUA_TSTRING) {
    luaL_where(L, 1);
    lua_insert(L, -2);
    lua_concat(L, 2);
  }
  return lua_error(L);
}

}  // namespace

int CoroutineWrap(lua_State* L) {
  ChargeCall(L, 0, 1, 0);
  luaL_checktype(L, 1, LUA_TFUNCTION);
  lua_State* co = lua_newthread(L);
  lua_pushvalue(L, 1);
  lua_xmove(L, co, 1);
  lua_pushcclosure(L, WrappedCoroutineCall, 1);
  return 1;
}

}  // namespace rote::sandbox::internal
