// The deterministic profile: which libraries and names a script sees, what each library call
// is charged, and the per-call environment (lua_runtime.h lists the rules). Internal to the Lua
// runtime; lua_internal.h maps its files.
//
// Dependencies go one way: lua_runtime.cc and lua_value_codec.cc use this header; the
// profile's functions run under the limits like any host C function, through LuaState's public
// Charge, Poll and AppendOutput (lua_runtime.h).
#pragma once

#include <climits>
#include <cstddef>
#include <cstdint>
#include <lua.hpp>

namespace rote::sandbox::internal {

// ---- lua_profile.cc: the profile as a whole.

// Builds the profile in the state's real global table ("base"), which scripts never see
// directly: each call's global table falls back to it through __index. Raises on a Lua build
// whose table layout the sandbox cannot read (run it protected).
void InstallProfile(lua_State* L);

// A lua_CFunction that returns a fresh global table for one call (its misses fall through to
// base) and resets what the profile keeps per call: tostring's sequence numbers and the seed
// of math.random.
int NewCallEnvironment(lua_State* L);

// Pushes a proxy for the table at idx: reads fall through, writes raise, the metatable is
// protected, and the deterministic pairs/next see the real table's contents.
void PushReadOnlyProxy(lua_State* L, int idx);
// If the table at idx is a read-only proxy, replaces it in place with the real table.
void UnwrapProxy(lua_State* L, int idx);

// Pushes the metatable that marks an empty table as an empty array (lua_value_codec.h).
void PushArrayMarker(lua_State* L);

// A stock library function wrapped by the profile runs through this: the wrapper holds the
// stock function as its last upvalue (lua_profile.cc, WrapField).
int CallStock(lua_State* L);

// ChargeCall's `last` for "every argument".
inline constexpr int kAllArgs = INT_MAX;

// Charges one call of a library function before it runs: one unit, one per argument (it checks
// or moves each), `extra` units for its loop, and one per 16 bytes of the string arguments in
// positions [first, last]: strings it reads, and strings passed where it wants a number (Lua
// converts those by scanning the whole string).
void ChargeCall(lua_State* L, uint64_t extra, int first, int last);

// C loops that charged for all their iterations up front call LuaState::Poll once every this
// many iterations, so that the deadline and a host's stop request reach them.
inline constexpr uint64_t kIterationsPerPoll = 4096;

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

// ---- lua_iteration.cc: pairs and next in a deterministic key order.

// Checks that this Lua build's Table layout is the one TableSlots reads.
bool VerifyTableLayout(lua_State* L);
int DeterministicPairs(lua_State* L);
int DeterministicNext(lua_State* L);

// ---- lua_library.cc: library functions whose loops the script controls, charged per
// iteration before they run.

int StringRep(lua_State* L);
int StringByte(lua_State* L);
int StringFormat(lua_State* L);
int TableConcat(lua_State* L);
int TableUnpack(lua_State* L);
int TableInsert(lua_State* L);
int TableRemove(lua_State* L);
int TableMove(lua_State* L);
int TableSort(lua_State* L);
int Utf8Codepoint(lua_State* L);
int Utf8Len(lua_State* L);
int Utf8Codes(lua_State* L);
int CoroutineResume(lua_State* L);
int CoroutineWrap(lua_State* L);

// ---- lua_patterns.cc

// Replaces find, match, gmatch and gsub in the string library table at index `string_lib`
// with a reimplementation of Lua 5.4 patterns that charges every matching step to the
// instruction budget (the stock matcher can backtrack for exponential time inside one C call,
// invisible to the count hook).
void InstallPatternFunctions(lua_State* L, int string_lib);

}  // namespace rote::sandbox::internal
