// Limits that Lua code cannot get around.
//  - Library functions that loop in C charge at least one unit per iteration (and per 16 bytes
//    read or allocated), so a huge count under a small instruction budget fails fast with the
//    instruction limit, in a worker and in-process (the blueprint path), instead of running
//    for seconds, hours or forever inside one C call where the count hook never fires.
//  - A limit cannot be caught: by pcall or xpcall, as a tail call, through coroutines, in a
//    message handler or a __close handler, each with each kind of limit.
//  - The deadline and a host's stop request reach a call that is inside a long C loop or a
//    coroutine.
#include <gtest/gtest.h>

#include <chrono>
#include <lua.hpp>
#include <string>
#include <thread>

#include "sandbox/lua_runtime.h"
#include "sandbox/value.h"
#include "sandbox/worker_pool.h"
#include "tests/sandbox/hostile_limits.h"

namespace rote::sandbox {
namespace {

using Code = absl::StatusCode;

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string Artifact(const char* body) { return std::string("return function(x)\n") + body + "\nend\n"; }

// One worker pool for the file; a case that broke a worker would show in the next call.
WorkerPool* Pool() {
  static WorkerPool* pool = [] {
    WorkerPoolOptions o;
    o.num_workers = 2;
    o.default_deadline = std::chrono::seconds(20);
    auto p = WorkerPool::Start(o);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? p->release() : nullptr;
  }();
  return pool;
}

// ---- C loops under a small budget ----------------------------------------------------------

struct LoopCase {
  const char* name;
  const char* body;  // of `return function(x) ... end`
  uint64_t budget;   // max_instructions: room for the setup, not for the attack
};
void PrintTo(const LoopCase& c, std::ostream* os) { *os << c.name; }

// A megabyte string built cheaply: two reps of a thousand.
#define MEGABYTE(ch) "(" ch "):rep(1000):rep(1000)"

const LoopCase kLoopCases[] = {
    // string.rep loops n times whatever it copies: an empty string or separator is no discount.
    {"RepEmptyString", "return #string.rep('', 1e12)", 1000},
    {"RepEmptyStringEmptySeparator", "return #string.rep('', 1e12, '')", 1000},
    {"RepEmptyStringMaxInteger", "return #string.rep('', math.maxinteger)", 1000},
    {"RepEmptyStringWithSeparator", "return #string.rep('', 1e12, ',')", 1000},
    {"RepOneByteHugeCount", "return #string.rep('x', 1e12)", 1000},
    {"RepEmptyStringInALoop", "local n = 0 while true do n = n + #(''):rep(1e6) end", 1'000'000},
    // Functions that loop over their arguments, called again and again with many of them.
    {"CharManyArguments", "local a = {} for i = 1, 10000 do a[i] = 65 end "
                          "local function f(...) while true do string.char(...) end end f(table.unpack(a))", 1'000'000},
    {"Utf8CharManyArguments", "local a = {} for i = 1, 10000 do a[i] = 65 end "
                              "local function f(...) while true do utf8.char(...) end end f(table.unpack(a))", 1'000'000},
    {"MathMaxManyArguments", "local a = {} for i = 1, 10000 do a[i] = i end "
                             "local function f(...) while true do math.max(...) end end f(table.unpack(a))", 1'000'000},
    {"SelectManyArguments", "local a = {} for i = 1, 10000 do a[i] = i end "
                            "local function f(...) while true do select('#', ...) end end f(table.unpack(a))", 1'000'000},
    {"ResumeManyArguments", "local a = {} for i = 1, 10000 do a[i] = i end "
                            "local co = coroutine.wrap(function() while true do coroutine.yield() end end) "
                            "local function f(...) while true do co(...) end end f(table.unpack(a))", 1'000'000},
    {"ByteWholeString", "local s = " MEGABYTE("'x'") " while true do s:byte(1, 100000) end", 1'000'000},
    // Ranges and lengths the script chooses.
    {"ConcatHugeRange", "return table.concat(setmetatable({}, {__index = function() return '' end}), '', 1, 1e15)", 100'000},
    {"UnpackHugeRange", "return table.unpack({}, 1, 1e15)", 100'000},
    {"MoveHugeRange", "return table.move({}, 1, 1e15, 1, {})", 100'000},
    {"InsertWithHugeLength", "table.insert(setmetatable({}, {__len = function() return 1e15 end}), 1, 'x')", 100'000},
    {"RemoveWithHugeLength", "table.remove(setmetatable({}, {__len = function() return 1e15 end}), 1)", 100'000},
    {"RemoveWithNegativeLength", "table.remove(setmetatable({}, {__len = function() return -1 end}), math.mininteger)", 100'000},
    {"ErrorWithHugeLevel", "local function deep(n) if n == 0 then while true do pcall(error, 'x', 1e9) end end "
                           "return (deep(n - 1)) end deep(10000)", 1'000'000},
    // Strings read in full: scanned to convert to a number, compared, decoded.
    {"TonumberOfLongString", "local s = " MEGABYTE("' '") " .. '1' while true do tonumber(s) end", 3'000'000},
    {"ArithmeticOnLongString", "local s = " MEGABYTE("' '") " .. '1' while true do local _ = s + 0 end", 3'000'000},
    {"MathFloorOfLongString", "local s = " MEGABYTE("' '") " .. '1' while true do math.floor(s) end", 3'000'000},
    {"RawequalLongStrings", "local a, b = " MEGABYTE("'x'") ", " MEGABYTE("'x'") " while true do rawequal(a, b) end", 3'000'000},
    {"SortLongStrings", "local s = " MEGABYTE("'x'") " local t = {} for i = 1, 16 do t[i] = s .. (16 - i) end "
                        "while true do table.sort(t) end", 10'000'000},
    {"Utf8CodesOverContinuationBytes", "local s = " MEGABYTE("'\\x80'") " while true do for _ in utf8.codes(s) do end end", 3'000'000},
    {"PatternWithLongBracketClass", "local class = '[' .. ('a'):rep(1000):rep(100) .. ']' "
                                    "return (('b'):rep(10000)):find(class)", 1'000'000},
    // Bytes produced: a concatenation copies both operands into a new string.
    {"ConcatenateLongStrings", "local s = " MEGABYTE("'x'") " while true do local t = s .. s end", 3'000'000},
    {"TableConcatLongStrings", "local s = " MEGABYTE("'x'") " while true do table.concat({s, s}) end", 3'000'000},
    // Traversals walk every slot of a table, empty ones included, and compare string keys.
    {"NextOverEmptiedArray", "local t = {} for i = 1, 1e5 do t[i] = i end for i = 1, 1e5 do t[i] = nil end "
                             "while true do next(t) end", 2'000'000},
    {"PairsOverEmptiedArray", "local t = {} for i = 1, 1e5 do t[i] = i end for i = 1, 1e5 do t[i] = nil end "
                              "while true do pairs(t) end", 2'000'000},
    {"PairsOverLongStringKeys", "local s = " MEGABYTE("'x'") " local t = {[s .. 'a'] = 1, [s .. 'b'] = 2} "
                                "while true do pairs(t) end", 3'000'000},
};

Limits LoopLimits(const LoopCase& c) {
  Limits l;
  l.max_instructions = c.budget;
  l.max_memory_bytes = 32ull << 20;
  return l;
}

void ExpectInstructionLimit(const CallResult& r, const LoopCase& c) {
  EXPECT_EQ(r.status.code(), Code::kResourceExhausted) << r.status;
  EXPECT_NE(r.status.message().find("instruction limit exceeded (max_instructions=" + std::to_string(c.budget) + ")"),
            std::string::npos)
      << r.status;
  EXPECT_LE(r.usage.instructions, c.budget + kInstructionQuantum);
}

class CLoopLimitTest : public testing::TestWithParam<LoopCase> {};

TEST_P(CLoopLimitTest, HugeCountFailsFastWithTheInstructionLimitInProcess) {
  const LoopCase& c = GetParam();
  auto t0 = std::chrono::steady_clock::now();
  auto out = RunFunctionArtifact(Artifact(c.body), "loop.lua", {Value::Int(1)}, LoopLimits(c),
                                 LuaState::Clock::now() + std::chrono::seconds(20));
  double seconds = SecondsSince(t0);
  ASSERT_TRUE(out.ok()) << out.status();
  ExpectInstructionLimit(out->front(), c);
  EXPECT_LT(seconds, 1.0);
}

TEST_P(CLoopLimitTest, HugeCountFailsFastWithTheInstructionLimitInAWorker) {
  const LoopCase& c = GetParam();
  ASSERT_NE(Pool(), nullptr);
  auto t0 = std::chrono::steady_clock::now();
  auto out = Pool()->Call(Artifact(c.body), "loop.lua", {Value::Int(1)}, LoopLimits(c));
  double seconds = SecondsSince(t0);
  ASSERT_TRUE(out.ok()) << "infrastructure failure instead of the limit: " << out.status();
  ExpectInstructionLimit(out->front(), c);
  EXPECT_LT(seconds, 1.0);
}

INSTANTIATE_TEST_SUITE_P(Cases, CLoopLimitTest, testing::ValuesIn(kLoopCases),
                         [](const testing::TestParamInfo<LoopCase>& p) { return std::string(p.param.name); });

// table.insert and table.remove read the length once, so a __len that answers 0 to the charge
// and 2^40 to the loop cannot shift 2^40 elements for the price of none.
TEST(CLoopLimitTest, LengthIsReadOnceByInsertAndRemove) {
  for (const char* op : {"table.insert(t, 1, 'x')", "table.remove(t, 1)"}) {
    std::string body = std::string(
        "local calls = 0 local t = setmetatable({}, {__len = function() calls = calls + 1 "
        "return calls == 1 and 0 or 1 << 40 end}) ") + op + " return calls";
    auto t0 = std::chrono::steady_clock::now();
    auto out = RunFunctionArtifact(Artifact(body.c_str()), "len.lua", {Value::Int(1)}, {},
                                   LuaState::Clock::now() + std::chrono::seconds(20));
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_TRUE(out->front().status.ok()) << op << ": " << out->front().status;
    EXPECT_EQ(out->front().value.as_int(), 1) << op;
    EXPECT_LT(SecondsSince(t0), 1.0) << op;
  }
}

// Widths and precisions have at most two digits, as in stock Lua: a huge width is an error,
// not a huge string.
TEST(CLoopLimitTest, FormatRefusesHugeWidths) {
  auto out = RunFunctionArtifact(Artifact("return string.format('%999999999d', 1)"), "fmt.lua", {Value::Int(1)}, {});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->front().status.code(), Code::kFailedPrecondition);
  EXPECT_NE(out->front().status.message().find("invalid conversion"), std::string::npos) << out->front().status;
}

// Charging does not change what the library functions return (the values stock Lua 5.4 gives).
TEST(CLoopLimitTest, ChargedFunctionsKeepTheirResults) {
  const char* body = R"LUA(
    local t = {}
    for i = 1, 5 do table.insert(t, i) end
    table.insert(t, 1, 0)
    local removed = table.remove(t, 2)
    local moved = table.move({1, 2, 3}, 1, 3, 2)
    local words = {}
    for w in ('b a c'):gmatch('%a') do words[#words + 1] = w end
    table.sort(words)
    local codes = {}
    for p, c in utf8.codes('hé!') do codes[#codes + 1] = p .. ':' .. c end
    local ok, err = pcall(error, 'boom', 1)
    local co = coroutine.wrap(function(a, b) local c = coroutine.yield(a + b) return c * 2 end)
    local first = co(1, 2)
    return {
      t = table.concat(t, ','), removed = removed, moved = table.concat(moved, ','),
      rep = ('ab'):rep(3, '-'), empty = ('x'):rep(0), bytes = {('AB'):byte(1, -1)},
      chars = string.char(72, 105), upper = ('abc'):upper(), sub = ('hello'):sub(2, 3),
      words = table.concat(words), codes = table.concat(codes, ' '), len = utf8.len('hé!'),
      cps = {utf8.codepoint('hé', 1, -1)}, max = math.max(3, 9, 4), floor = math.floor('2.5'),
      num = tonumber('  42  '), sel = select('#', 1, nil, 3), arith = '10' + 5,
      err = err, first = first, second = co(5), unpacked = {table.unpack({1, 2, 3}, 2)},
      fmt = string.format('%d|%5s|%-3s|%q', 7, 'ab', 'c', 'x"y'),
    }
  )LUA";
  auto out = RunFunctionArtifact(Artifact(body), "lib.lua", {Value::Int(1)}, {});
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_TRUE(out->front().status.ok()) << out->front().status;
  EXPECT_EQ(*CanonicalJson(out->front().value),
            R"({"arith":15,"bytes":[65,66],"chars":"Hi","codes":"1:104 2:233 4:33","cps":[104,233],)"
            R"("empty":"","err":"boom","first":3,"floor":2,"fmt":"7|   ab|c  |\"x\\\"y\"",)"
            R"("len":3,"max":9,"moved":"1,1,2,3","num":42,"removed":1,"rep":"ab-ab-ab","second":10,"sel":3,)"
            R"("sub":"el","t":"0,2,3,4,5","unpacked":[2,3],"upper":"ABC","words":"abc"})");
}

// ---- Limits cannot be caught ----------------------------------------------------------------

struct LimitKind {
  const char* name;
  const char* hit;  // a function that hits the limit
  const char* needle;
};

const LimitKind kLimitKinds[] = {
    {"Instructions", "function() while true do end end", "instruction limit exceeded (max_instructions=5000000)"},
    {"Memory", "function() local s = 'x' while true do s = s .. s end end", "memory limit exceeded (max_memory_bytes=33554432)"},
    {"Output", "function() while true do print(('y'):rep(100)) end end", "output limit exceeded (max_output_bytes=65536)"},
};

struct Route {
  const char* name;
  const char* body;  // uses `hit`
};

const Route kRoutes[] = {
    {"TailCalledPcall", "return pcall(hit)"},
    {"TailCalledXpcall", "return xpcall(hit, function(m) return m end)"},
    {"PcallThenReturn", "local ok, e = pcall(hit) return {ok = ok}"},
    {"PcallInALoop", "while true do pcall(hit) end"},
    {"NestedPcalls", "return pcall(pcall, pcall, hit)"},
    {"TailCalledSelectOfPcall", "return select(2, pcall(hit))"},
    {"XpcallHandlerRecovers", "return select(2, xpcall(hit, function() return 'recovered' end))"},
    {"XpcallHandlerLoops", "return xpcall(hit, function() while true do end end)"},
    {"XpcallHandlerCallsPcall", "return xpcall(hit, function() return pcall(hit) end)"},
    {"CoroutineWrapReturnsPcall", "return coroutine.wrap(function() return pcall(hit) end)()"},
    {"CoroutineResume", "return coroutine.resume(coroutine.create(hit))"},
    {"CoroutineResumeInsideWrap", "return coroutine.wrap(function() return coroutine.resume(coroutine.create(hit)) end)()"},
    {"PcallOfCoroutineWrap", "return pcall(coroutine.wrap(hit))"},
    {"CoroutineLoopsAfterCatch", "local co = coroutine.wrap(function() pcall(hit) while true do end end) return pcall(co)"},
    {"CloseHandlerLoops", "local x <close> = setmetatable({}, {__close = function() while true do end end}) hit()"},
    {"CloseHandlerReturnsPcall", "local x <close> = setmetatable({}, {__close = function() return pcall(hit) end}) return 1"},
    {"CloseHandlerInWrappedCoroutine", "return pcall(coroutine.wrap(function() "
                                       "local x <close> = setmetatable({}, {__close = function() while true do end end}) hit() end))"},
    {"CoroutineCloseAfterLimit", "local a = coroutine.create(function() "
                                 "local x <close> = setmetatable({}, {__close = function() while true do end end}) hit() end) "
                                 "return coroutine.wrap(function() coroutine.resume(a) return coroutine.close(a) end)()"},
    {"GcMetamethodAddedAfterSetmetatable", "local mt = {} local o = setmetatable({}, mt) "
                                           "mt.__gc = function() while true do end end o = nil return pcall(hit)"},
    {"SortComparator", "return pcall(table.sort, {3, 2, 1}, function(a, b) hit() end)"},
    {"GsubCallback", "return pcall(string.gsub, 'abc', '%w', function() hit() end)"},
    {"IndexMetamethod", "return pcall(function() return setmetatable({}, {__index = function() hit() end}).x end)"},
    {"TostringMetamethod", "return pcall(tostring, setmetatable({}, {__tostring = function() hit() end}))"},
    {"ErrorObjectReplaced", "local ok = pcall(hit) error({})"},
};

struct RouteCase {
  Route route;
  LimitKind kind;
};
void PrintTo(const RouteCase& c, std::ostream* os) { *os << c.route.name << "_" << c.kind.name; }

std::vector<RouteCase> AllRouteCases() {
  std::vector<RouteCase> out;
  for (const Route& r : kRoutes) {
    for (const LimitKind& k : kLimitKinds) out.push_back({r, k});
  }
  return out;
}

std::string RouteSource(const RouteCase& c) {
  return std::string("return function(x)\nlocal hit = ") + c.kind.hit + "\n" + c.route.body + "\nend\n";
}

class UncatchableLimitTest : public testing::TestWithParam<RouteCase> {};

TEST_P(UncatchableLimitTest, LimitIsTheResultInProcess) {
  const RouteCase& c = GetParam();
  auto t0 = std::chrono::steady_clock::now();
  auto out = RunFunctionArtifact(RouteSource(c), "route.lua", {Value::Int(1), Value::Int(2)}, HostileLimits(),
                                 LuaState::Clock::now() + std::chrono::seconds(20));
  ASSERT_TRUE(out.ok()) << out.status();
  for (const CallResult& r : *out) {
    EXPECT_EQ(r.status.code(), Code::kResourceExhausted) << r.status;
    EXPECT_NE(r.status.message().find(c.kind.needle), std::string::npos) << r.status;
  }
  EXPECT_EQ((*out)[0].usage.instructions, (*out)[1].usage.instructions);
  EXPECT_LT(SecondsSince(t0), 5.0);
}

TEST_P(UncatchableLimitTest, LimitIsTheResultInAWorker) {
  const RouteCase& c = GetParam();
  ASSERT_NE(Pool(), nullptr);
  auto out = Pool()->Call(RouteSource(c), "route.lua", {Value::Int(1)}, HostileLimits());
  ASSERT_TRUE(out.ok()) << "infrastructure failure instead of the limit: " << out.status();
  EXPECT_EQ(out->front().status.code(), Code::kResourceExhausted) << out->front().status;
  EXPECT_NE(out->front().status.message().find(c.kind.needle), std::string::npos) << out->front().status;
}

INSTANTIATE_TEST_SUITE_P(Routes, UncatchableLimitTest, testing::ValuesIn(AllRouteCases()),
                         [](const testing::TestParamInfo<RouteCase>& p) {
                           return std::string(p.param.route.name) + "_" + p.param.kind.name;
                         });

// The same routes against the wall-clock deadline (in-process; a worker is killed instead).
class UncatchableDeadlineTest : public testing::TestWithParam<Route> {};
void PrintTo(const Route& r, std::ostream* os) { *os << r.name; }

TEST_P(UncatchableDeadlineTest, DeadlineIsTheResult) {
  Limits unlimited;
  unlimited.max_instructions = UINT64_MAX / 2;
  std::string source = std::string("return function(x)\nlocal hit = function() while true do end end\n") +
                       GetParam().body + "\nend\n";
  auto t0 = std::chrono::steady_clock::now();
  auto out = RunFunctionArtifact(source, "route.lua", {Value::Int(1)}, unlimited,
                                 LuaState::Clock::now() + std::chrono::milliseconds(200));
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), Code::kDeadlineExceeded) << out.status();
  EXPECT_LT(SecondsSince(t0), 2.0);
}

INSTANTIATE_TEST_SUITE_P(Routes, UncatchableDeadlineTest, testing::ValuesIn(kRoutes),
                         [](const testing::TestParamInfo<Route>& p) { return std::string(p.param.name); });

// ---- A blueprint stuck in a long C call stops at the deadline and when the host stops it ----

const char* const kStuckCalls[] = {
    "string.rep('', 1 << 62)",
    "string.rep('', 1 << 62, '')",
    "table.move({}, 1, 1 << 62, 1, {})",
    "table.insert(setmetatable({}, {__len = function() return 1 << 62 end}), 1, 'x')",
    "table.remove(setmetatable({}, {__len = function() return 1 << 62 end}), 1)",
    "table.concat(setmetatable({}, {__index = function() return '' end}), '', 1, 1 << 62)",
    "coroutine.wrap(function() while true do end end)()",
    "coroutine.wrap(function() string.rep('', 1 << 62) end)()",
    "xpcall(function() while true do end end, function() while true do end end)",
    "xpcall(function() string.rep('', 1 << 62) end, function() while true do end end)",
};

// A blueprint's state as the orchestrator prepares one: a budget too large to matter, the
// chunk loaded in a fresh environment.
std::unique_ptr<LuaState> StuckState(const char* call) {
  Limits unlimited;
  unlimited.max_instructions = UINT64_MAX / 2;
  auto st = LuaState::Create(unlimited);
  EXPECT_TRUE(st.ok()) << st.status();
  EXPECT_TRUE((*st)->NewEnvironment().ok());
  EXPECT_TRUE((*st)->Load(std::string("local _ = ") + call, "stuck.lua").ok());
  return *std::move(st);
}

TEST(StuckBlueprintTest, DeadlineStopsACallInsideALongCLoop) {
  for (const char* call : kStuckCalls) {
    auto st = StuckState(call);
    st->set_deadline(LuaState::Clock::now() + std::chrono::milliseconds(100));
    auto t0 = std::chrono::steady_clock::now();
    absl::Status s = st->Call(0, 0);
    EXPECT_EQ(s.code(), Code::kDeadlineExceeded) << call << ": " << s;
    EXPECT_LT(SecondsSince(t0), 1.0) << call;
  }
}

// How the orchestrator cancels a run (RunInterrupt): from another thread, a count hook on the
// main thread that raises.
void StopHook(lua_State* L, lua_Debug*) { luaL_error(L, "run stopped"); }

TEST(StuckBlueprintTest, HostStopReachesACallInsideALongCLoopOrACoroutine) {
  for (const char* call : kStuckCalls) {
    auto st = StuckState(call);
    lua_State* L = st->raw();
    std::thread stopper([L] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      lua_sethook(L, StopHook, LUA_MASKCOUNT, 1);
    });
    auto t0 = std::chrono::steady_clock::now();
    absl::Status s = st->Call(0, 0);
    double seconds = SecondsSince(t0);
    stopper.join();
    EXPECT_EQ(s.code(), Code::kFailedPrecondition) << call << ": " << s;
    EXPECT_NE(s.message().find("run stopped"), std::string::npos) << call << ": " << s;
    EXPECT_LT(seconds, 1.0) << call;
  }
}

}  // namespace
}  // namespace rote::sandbox
