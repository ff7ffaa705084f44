// The in-process API as the orchestrator uses it for blueprints: host functions installed in
// the environment, a chunk returning an object with run(input), errors with line numbers,
// limits, snapshots.
#include <gtest/gtest.h>

#include <lua.hpp>

#include "sandbox/lua_runtime.h"
#include "sandbox/value.h"

namespace rote::sandbox {
namespace {

// rote.twice(n): a host C function that charges for its work like the stock library does.
int Twice(lua_State* L) {
  lua_Integer n = luaL_checkinteger(L, 1);
  LuaState::Charge(L, 1);
  lua_pushinteger(L, 2 * n);
  return 1;
}

// rote.blueprint{ name = ... }: returns an object whose method name() reads back its spec.
int BlueprintName(lua_State* L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_getfield(L, 1, "spec_name");
  return 1;
}

int Blueprint(lua_State* L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_createtable(L, 0, 2);
  lua_getfield(L, 1, "name");
  lua_setfield(L, -2, "spec_name");
  lua_pushcfunction(L, BlueprintName);
  lua_setfield(L, -2, "name");
  return 1;
}

std::unique_ptr<LuaState> HostState(const Limits& limits = {}) {
  auto st = LuaState::Create(limits);
  EXPECT_TRUE(st.ok()) << st.status();
  lua_State* L = (*st)->raw();
  lua_createtable(L, 0, 2);
  lua_pushcfunction(L, Twice);
  lua_setfield(L, -2, "twice");
  lua_pushcfunction(L, Blueprint);
  lua_setfield(L, -2, "blueprint");
  (*st)->SetGlobal("rote", /*read_only=*/true);
  EXPECT_TRUE((*st)->NewEnvironment().ok());
  return *std::move(st);
}

constexpr const char* kBlueprint = R"LUA(local bp = rote.blueprint { name = "totals" }
function bp.run(input)
  if input.fail then error("asked to fail") end
  local out = {}
  for i, n in ipairs(input.items) do out[i] = rote.twice(n) end
  return { name = bp:name(), doubled = out }
end
return bp
)LUA";

absl::StatusOr<Value> RunBlueprint(LuaState& st, const char* input_json) {
  lua_State* L = st.raw();
  lua_settop(L, 0);
  if (auto s = st.Load(kBlueprint, "totals.lua"); !s.ok()) return s;
  if (auto s = st.Call(0, 1); !s.ok()) return s;
  lua_getfield(L, -1, "run");
  if (auto s = st.Push(*ParseJson(input_json)); !s.ok()) return s;
  if (auto s = st.Call(1, 1); !s.ok()) return s;
  return ToValue(L, -1);
}

TEST(HostApiTest, BlueprintWithHostFunctionsRuns) {
  auto st = HostState();
  auto out = RunBlueprint(*st, R"({"items":[1,2,3]})");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*CanonicalJson(*out), R"({"doubled":[2,4,6],"name":"totals"})");
}

TEST(HostApiTest, ErrorsCarryChunkNameAndLine) {
  auto st = HostState();
  auto out = RunBlueprint(*st, R"({"fail":true})");
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(out.status().message(), "totals.lua:3: asked to fail");
  auto bad_arg = RunBlueprint(*st, R"({"items":["x"]})");
  ASSERT_FALSE(bad_arg.ok());
  EXPECT_EQ(bad_arg.status().message(), "totals.lua:5: bad argument #1 to 'twice' (number expected, got string)");
}

TEST(HostApiTest, HostTablesAreReadOnlyAndLimitsApply) {
  Limits tight;
  tight.max_instructions = 100'000;
  auto st = HostState(tight);
  ASSERT_TRUE(st->Load("rote.twice = nil", "evil.lua").ok());
  auto s = st->Call(0, 0);
  EXPECT_NE(s.message().find("read-only table"), std::string::npos) << s;
  ASSERT_TRUE(st->NewEnvironment().ok());
  ASSERT_TRUE(st->Load("while true do rote.twice(1) end", "loop.lua").ok());
  s = st->Call(0, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  // The state is usable again after a fresh environment.
  ASSERT_TRUE(st->NewEnvironment().ok());
  auto out = RunBlueprint(*st, R"({"items":[5]})");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*CanonicalJson(*out), R"({"doubled":[10],"name":"totals"})");
}

TEST(HostApiTest, SnapshotsGiveIdenticalRuns) {
  auto st = HostState();
  lua_State* L = st->raw();
  ASSERT_TRUE(st->Load("local calls = 0 return function(x) calls = calls + 1 g = (g or 0) + 1 "
                       "return {calls, g, math.random(100), tostring({})} end",
                       "f.lua")
                  .ok());
  ASSERT_TRUE(st->Call(0, 1).ok());
  int fn = luaL_ref(L, LUA_REGISTRYINDEX);
  st->TakeSnapshot();
  std::string first;
  uint64_t first_instructions = 0;
  for (int i = 0; i < 3; ++i) {
    st->RestoreSnapshot();
    lua_rawgeti(L, LUA_REGISTRYINDEX, fn);
    ASSERT_TRUE(st->Push(Value::Int(i)).ok());
    ASSERT_TRUE(st->Call(1, 1).ok());
    auto v = ToValue(L, -1);
    ASSERT_TRUE(v.ok());
    lua_settop(L, 0);
    if (i == 0) {
      first = *CanonicalJson(*v);
      first_instructions = st->usage().instructions;
    }
    EXPECT_EQ(*CanonicalJson(*v), first);
    EXPECT_EQ(st->usage().instructions, first_instructions);
  }
  EXPECT_EQ(first.substr(0, 5), "[1,1,");
}

}  // namespace
}  // namespace rote::sandbox
