// Lua values to and from rote's values: the conversion rules in one place. A Lua value is
// encoded straight into the binary value encoding (value_encoding.h) and pushed straight from
// it, so the worker never builds a Value; ToValue and LuaState::Push go through the same rules.
//
// Dependencies go one way: value.h <- value_encoding.h <- lua_value_codec <- lua_runtime
// (lua_runtime.h includes this header, so hosts see these functions there too).
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "sandbox/value.h"

struct lua_State;

namespace rote::sandbox {

// Converts the Lua value at idx. Tables whose keys are exactly 1..n (n >= 1) become Arrays;
// tables with only string keys become Maps; an empty table becomes an empty Map unless it is
// the array-marked empty table that Push(empty Array) creates. Integer keys that are not a
// sequence, float/boolean/table keys, functions, userdata, threads, cycles and nesting deeper
// than kMaxJsonDepth are INVALID_ARGUMENT errors that name the path ("$.items[3].name").
absl::StatusOr<Value> ToValue(lua_State* L, int idx);

// Appends the Lua value at idx to `out` in the binary value encoding (value_encoding.h),
// under the rules of ToValue (which is this followed by protocol::DecodeValue). Never raises a Lua error.
absl::Status EncodeLuaValue(lua_State* L, int idx, std::string& out);

// Pushes a Value without protection; may raise a Lua error (memory limit). Inside C functions
// called from Lua, use this; from host code, use LuaState::Push.
void PushValueUnprotected(lua_State* L, const Value& v);

namespace internal {

// Pushes the value encoded in `bytes` (exactly one value, nothing after it); raises a Lua error
// on malformed bytes or a limit, so run it protected (LuaState::PushEncoded does).
void PushEncodedUnprotected(lua_State* L, std::string_view bytes);

}  // namespace internal
}  // namespace rote::sandbox
