// Determinism: the same script and input give byte-identical results in fresh processes
// (each with its own string hash seed, address layout, environment and clock), in worker
// processes, in-process, and whatever else ran before in the same batch.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <lua.hpp>

#include "sandbox/lua_runtime.h"
#include "sandbox/value.h"
#include "sandbox/worker_pool.h"

namespace rote::sandbox {
namespace {

struct Script {
  const char* file;
  const char* input_json;
};

// Printed by name in test listings (the default prints the struct's bytes: pointers, which vary).
void PrintTo(const Script& s, std::ostream* os) { *os << s.file; }

// Every script targets a source of nondeterminism in stock Lua (see the comment at its top).
const Script kScripts[] = {
    {"pairs_order.lua", R"({"b":1,"a":2,"c":{"x":1}})"},
    {"tostring_ids.lua", "null"},
    {"random.lua", R"({"seed":12345})"},
    {"sort.lua", "null"},
    {"locale_numbers.lua", "null"},
    {"patterns.lua", "null"},
    {"holes_and_limits.lua", R"({"mode":"none"})"},
    {"holes_and_limits.lua", R"({"mode":"memory"})"},
    {"holes_and_limits.lua", R"({"mode":"instructions"})"},
    {"errors.lua", R"({"fail":"yes"})"},
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string ScriptPath(const char* file) { return std::string(ROTE_SANDBOX_TESTDATA) + "/determinism/" + file; }

// Runs the helper in a fresh process with the given environment and returns its stdout.
std::string RunFresh(const Script& s, const std::string& env) {
  std::string cmd = "env -i " + env + " " ROTE_SANDBOX_RUN_SCRIPT " '" + ScriptPath(s.file) + "' '" + s.input_json + "'";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return "popen failed";
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int rc = pclose(p);
  if (rc != 0) out += "\nexit status " + std::to_string(rc);
  return out;
}

class DeterminismTest : public testing::TestWithParam<Script> {};

TEST_P(DeterminismTest, FreshProcessesAgreeByteForByte) {
  const Script& s = GetParam();
  // Different environments, locales and stack layouts (the padding shifts the initial stack).
  const char* envs[] = {"LC_ALL=C", "LC_ALL=C.UTF-8 LANG=C.UTF-8 TZ=Asia/Tokyo",
                        "TZ=America/New_York PAD=xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
                        "LC_NUMERIC=C.UTF-8 LUA_INIT='error(1)'"};
  std::string first = RunFresh(s, envs[0]);
  ASSERT_NE(first.find("instructions: "), std::string::npos) << first;
  for (size_t i = 1; i < std::size(envs); ++i) {
    EXPECT_EQ(RunFresh(s, envs[i]), first) << s.file << " under " << envs[i];
  }
}

INSTANTIATE_TEST_SUITE_P(Scripts, DeterminismTest, testing::ValuesIn(kScripts),
                         [](const testing::TestParamInfo<Script>& p) {
                           std::string name = p.param.file;
                           name = name.substr(0, name.find('.'));
                           std::string input = p.param.input_json;
                           if (input.find("memory") != std::string::npos) name += "_memory";
                           if (input.find("instructions") != std::string::npos) name += "_instructions";
                           return name;
                         });

// Worker processes and the in-process runtime give identical results, and a result does not
// depend on which inputs ran before it in the same batch.
TEST(DeterminismAcrossModesTest, WorkerInProcessAndBatchPositionAgree) {
  WorkerPoolOptions o;
  o.num_workers = 1;
  auto pool = WorkerPool::Start(o);
  ASSERT_TRUE(pool.ok()) << pool.status();
  for (const Script& s : kScripts) {
    std::string source = ReadFile(ScriptPath(s.file));
    auto input = ParseJson(s.input_json);
    ASSERT_TRUE(input.ok());
    auto alone = RunFunctionArtifact(source, s.file, {*input}, {});
    ASSERT_TRUE(alone.ok()) << alone.status();
    // The same input after other inputs in one batch (they leave garbage, globals, RNG state).
    std::vector<Value> batch = {Value::Nil(), *ParseJson(R"({"seed":1,"mode":"none"})"), *input, *input};
    auto batched = (*pool)->Call(source, s.file, batch, {});
    ASSERT_TRUE(batched.ok()) << batched.status();
    for (size_t i : {2u, 3u}) {
      const CallResult& a = alone->front();
      const CallResult& b = (*batched)[i];
      EXPECT_EQ(a.status, b.status) << s.file;
      EXPECT_TRUE(a.value == b.value) << s.file;
      EXPECT_EQ(a.output, b.output) << s.file;
      EXPECT_EQ(a.usage.instructions, b.usage.instructions) << s.file;
      EXPECT_EQ(a.usage.peak_memory_bytes, b.usage.peak_memory_bytes) << s.file;
    }
  }
}

// Golden values: the profile's documented choices, checked directly.
TEST(DeterministicProfileTest, DocumentedChoices) {
  auto run = [](const char* body, const char* input = "null") {
    auto r = RunFunctionArtifact(std::string("return function(x)\n") + body + "\nend", "g.lua", {*ParseJson(input)}, {});
    EXPECT_TRUE(r.ok()) << r.status();
    const CallResult& c = r->front();
    EXPECT_TRUE(c.status.ok()) << c.status;
    return c.output + (c.status.ok() ? *CanonicalJson(c.value) : std::string(c.status.message()));
  };
  // pairs: numbers ascending (integers and floats together), then strings bytewise, then false, true.
  EXPECT_EQ(run("local t = {b=1, a=1, B=1, [10]=1, [2]=1, [1.5]=1, [-3]=1, [true]=1, [false]=1} "
                "local o = {} for k in pairs(t) do o[#o+1] = tostring(k) end return table.concat(o, ' ')"),
            R"("-3 1.5 2 10 B a b false true")");
  // tostring numbers objects by first use within the call.
  EXPECT_EQ(run("local a, b = {}, {} return tostring(b) .. ' ' .. tostring(a) .. ' ' .. tostring(b) .. ' ' .. tostring(print)"),
            R"("table: 1 table: 2 table: 1 function: 3")");
  // The stable sort keeps equal elements in input order.
  EXPECT_EQ(run("local t = {{k=1,v='a'},{k=0,v='b'},{k=1,v='c'},{k=0,v='d'}} table.sort(t, function(p, q) return p.k < q.k end) "
                "local o = {} for i, e in ipairs(t) do o[i] = e.v end return table.concat(o)"),
            R"("bdac")");
  // Fresh environment per call: globals and upvalues do not survive to the next input.
  auto r = RunFunctionArtifact("local n = 0 return function(x) n = n + 1 counter = (counter or 0) + 1 return {n, counter} end",
                               "state.lua", {Value::Nil(), Value::Nil(), Value::Nil()}, {});
  ASSERT_TRUE(r.ok());
  for (const CallResult& c : *r) EXPECT_EQ(*CanonicalJson(c.value), "[1,1]");
  // Values: integers and floats stay apart, empty arrays from the host round-trip.
  EXPECT_EQ(run("return x", R"({"i":1,"f":1.0,"e":[],"m":{},"s":"\u00e9"})"), R"({"e":[],"f":1.0,"i":1,"m":{},"s":"é"})");
  EXPECT_EQ(run("return {math.type(x.i), math.type(x.f), 3 // 2, 3 / 2, 2^2}", R"({"i":1,"f":1.0})"),
            R"(["integer","float",1,1.5,4.0])");
  // print goes to the output buffer, tab-separated.
  EXPECT_EQ(run("print(1, 'a', nil, {}) return true"), "1\ta\tnil\ttable: 1\ntrue");
}

}  // namespace
}  // namespace rote::sandbox

namespace rote::sandbox {
namespace {

// The raw hash layout (stock next order) does not depend on a per-process seed: two states
// in one process (different addresses, so different seeds in stock Lua) agree, and so do fresh
// processes (the determinism suite).
std::string RawNextOrder(LuaState& st) {
  lua_State* L = st.raw();
  lua_createtable(L, 0, 0);
  for (int i = 0; i < 60; ++i) {
    lua_pushfstring(L, "key%d", i * 7919 % 1000);
    lua_pushinteger(L, i);
    lua_rawset(L, -3);
  }
  std::string order;
  lua_pushnil(L);
  while (lua_next(L, -2) != 0) {
    lua_pop(L, 1);
    order += lua_tostring(L, -1);
    order += ' ';
  }
  lua_pop(L, 1);
  return order;
}

TEST(StringHashSeedTest, PinnedSoTheHashLayoutIsTheSameInEveryState) {
  auto a = LuaState::Create({});
  auto b = LuaState::Create({});
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE((*a)->seed_pinned()) << "the global_State layout of this Lua build was not recognized";
  ASSERT_TRUE((*b)->seed_pinned());
  EXPECT_EQ(RawNextOrder(**a), RawNextOrder(**b));
}

}  // namespace
}  // namespace rote::sandbox
