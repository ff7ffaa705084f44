// Internals shared by the files of the Lua runtime; not part of the module's interface.
#pragma once

#include <lua.hpp>

namespace rote::sandbox::internal {

// Replaces find, match, gmatch and gsub in the string library table at index `string_lib`
// with a reimplementation of Lua 5.4 patterns that charges every matching step to the
// instruction budget (the stock matcher can backtrack for exponential time inside one C call,
// invisible to the count hook).
void InstallPatternFunctions(lua_State* L, int string_lib);

// Work units charged per matching step / per byte copied (LuaState::Charge).
inline constexpr unsigned kBytesPerCharge = 16;

}  // namespace rote::sandbox::internal
