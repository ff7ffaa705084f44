// Internals shared by the files of the Lua runtime; not part of the module's interface.
#pragma once

#include <cstddef>
#include <cstdint>
#include <lua.hpp>

namespace rote::sandbox::internal {

// Replaces find, match, gmatch and gsub in the string library table at index `string_lib`
// with a reimplementation of Lua 5.4 patterns that charges every matching step to the
// instruction budget (the stock matcher can backtrack for exponential time inside one C call,
// invisible to the count hook).
void InstallPatternFunctions(lua_State* L, int string_lib);

// Work units charged per matching step / per byte copied (LuaState::Charge).
inline constexpr unsigned kBytesPerCharge = 16;

// C loops that charged for all their iterations up front call LuaState::Poll once every this
// many iterations, so that the deadline and a host's stop request reach them.
inline constexpr uint64_t kIterationsPerPoll = 4096;

// Charges one call of a library function before it runs: one unit, one per argument (it checks
// or moves each), `extra` units for its loop, and one per 16 bytes of the string arguments in
// positions [first, last]: strings it reads, and strings passed where it wants a number (Lua
// converts those by scanning the whole string).
void ChargeCall(lua_State* L, uint64_t extra, int first, int last);

// a + b, saturating: charges computed from script-controlled counts must not wrap around.
inline uint64_t SaturatingAdd(uint64_t a, uint64_t b) { return a + b < a ? UINT64_MAX : a + b; }

// String positions as the stock string library translates them (lstrlib.c): a relative initial
// position clipped to [1, inf), and an optional end position clipped to [0, len].
inline size_t PosRelatI(lua_Integer pos, size_t len) {
  if (pos > 0) return static_cast<size_t>(pos);
  if (pos == 0) return 1;
  if (pos < -static_cast<lua_Integer>(len)) return 1;
  return len + static_cast<size_t>(pos) + 1;
}
inline size_t GetEndPos(lua_State* L, int arg, lua_Integer def, size_t len) {
  lua_Integer pos = luaL_optinteger(L, arg, def);
  if (pos > static_cast<lua_Integer>(len)) return len;
  if (pos >= 0) return static_cast<size_t>(pos);
  if (pos < -static_cast<lua_Integer>(len)) return 0;
  return len + static_cast<size_t>(pos) + 1;
}

}  // namespace rote::sandbox::internal
