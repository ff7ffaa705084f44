// Hostile inputs: escape attempts, resource exhaustion, pathological patterns, malformed
// values. Every case must end in a clear error within its limits, the pool (standing in for
// the server) must survive it, and the next call must work.
#include <gtest/gtest.h>

#include <chrono>

#include "sandbox/regex.h"
#include "sandbox/value.h"
#include "sandbox/worker_pool.h"
#include "tests/sandbox/hostile_limits.h"

namespace rote::sandbox {
namespace {

using Code = absl::StatusCode;

struct LuaCase {
  const char* name;
  const char* body;  // the body of `return function(x) ... end`
  Code code;
  const char* needle;  // must appear in the error message
};

// Printed by name in test listings (the default prints the struct's bytes: pointers, which vary).
void PrintTo(const LuaCase& c, std::ostream* os) { *os << c.name; }

const LuaCase kLuaCases[] = {
    // Resource exhaustion.
    {"InfiniteLoop", "while true do end", Code::kResourceExhausted, "instruction limit exceeded (max_instructions=5000000)"},
    {"TableGrowth", "local t = {} for i = 1, 1e9 do t[i] = i end", Code::kResourceExhausted, "memory limit exceeded"},
    {"StringDoubling", "local s = 'x' while true do s = s .. s end", Code::kResourceExhausted, "memory limit exceeded"},
    {"StringRepBomb", "return ('x'):rep(1e10)", Code::kResourceExhausted, "instruction limit exceeded"},
    {"PrintFlood", "while true do print(('y'):rep(100)) end", Code::kResourceExhausted, "output limit exceeded (max_output_bytes=65536)"},
    {"PcallSwallowsInstructionLimit", "while true do pcall(function() while true do end end) end", Code::kResourceExhausted, "instruction limit exceeded"},
    {"PcallSwallowsMemoryLimit", "while true do pcall(function() local t = {} for i = 1, 1e8 do t[i] = {} end end) end", Code::kResourceExhausted, "memory limit exceeded"},
    {"XpcallHandlerLoops", "xpcall(function() error('x') end, function() while true do end end) return 1", Code::kResourceExhausted, "instruction limit exceeded"},
    {"CoroutineSpin", "local co = coroutine.wrap(function() while true do coroutine.yield() end end) while true do co() end", Code::kResourceExhausted, "instruction limit exceeded"},
    {"LoopInsideCoroutine", "coroutine.resume(coroutine.create(function() while true do end end)) while true do end", Code::kResourceExhausted, "instruction limit exceeded"},
    {"TableConcatHugeRange", "return table.concat({}, '', 1, 1e15)", Code::kResourceExhausted, "instruction limit exceeded"},
    {"QuadraticTableInsert", "local t = {} for i = 1, 1e6 do table.insert(t, 1, i) end", Code::kResourceExhausted, "instruction limit exceeded"},
    {"SortHugeArray", "local t = {} for i = 1, 1e6 do t[i] = -i end table.sort(t)", Code::kResourceExhausted, "limit exceeded"},
    {"SortComparatorLoops", "local t = {3, 1, 2} table.sort(t, function(a, b) while true do end end)", Code::kResourceExhausted, "instruction limit exceeded"},
    {"GsubBlowup", "local s = ('a'):rep(1000) for i = 1, 50 do s = s:gsub('a', 'aa') end", Code::kResourceExhausted, "limit exceeded"},
    {"DeepRecursion", "local function f(n) return 1 + f(n + 1) end return f(1)", Code::kResourceExhausted, "memory limit exceeded"},
    {"CStackOverflow", "local t = setmetatable({}, {__index = function(t, k) return t[k] end}) return t.x", Code::kFailedPrecondition, "stack overflow"},
    // Pathological Lua patterns: the stock matcher backtracks exponentially inside one C call.
    {"PatternBacktracking", "return (('a'):rep(40)):find(('a?'):rep(40) .. ('a'):rep(40) .. 'b')", Code::kResourceExhausted, "instruction limit exceeded"},
    {"PatternNestedStars", "return (('a'):rep(5000) .. 'b'):match('.-.-.-.-c')", Code::kResourceExhausted, "instruction limit exceeded"},
    {"PatternTooComplex", "return ('a'):rep(300):match(('a?'):rep(300))", Code::kFailedPrecondition, "pattern too complex"},
    {"PatternTooManyCaptures", "return ('a'):match(('()'):rep(40))", Code::kFailedPrecondition, "too many captures"},
    {"PatternMalformed", "return ('a'):find('[a')", Code::kFailedPrecondition, "malformed pattern (missing ']')"},
    {"PatternBadBackref", "return ('aa'):find('%1')", Code::kFailedPrecondition, "invalid capture index %1"},
    // Escape attempts: nothing outside the allow-list exists, shared tables are read-only.
    {"NoOs", "return os.execute('id')", Code::kFailedPrecondition, "global 'os'"},
    {"NoIo", "return io.open('/etc/passwd')", Code::kFailedPrecondition, "global 'io'"},
    {"NoRequire", "return require('os')", Code::kFailedPrecondition, "global 'require'"},
    {"NoDebug", "return debug.getinfo(1)", Code::kFailedPrecondition, "global 'debug'"},
    {"NoLoad", "return load('return 1')()", Code::kFailedPrecondition, "global 'load'"},
    {"NoDofile", "return dofile('/etc/passwd')", Code::kFailedPrecondition, "global 'dofile'"},
    {"NoStringDump", "return string.dump(print)", Code::kFailedPrecondition, "field 'dump'"},
    {"NoCollectgarbage", "return collectgarbage('count')", Code::kFailedPrecondition, "global 'collectgarbage'"},
    {"NoPackageLoaded", "return package.loaded.os", Code::kFailedPrecondition, "global 'package'"},
    {"LibraryReadOnly", "string.upper = function() return 'pwned' end", Code::kFailedPrecondition, "read-only table"},
    {"RawsetOnLibrary", "rawset(math, 'pi', 3)", Code::kFailedPrecondition, "read-only table"},
    {"StringMetatableLocked", "getmetatable('').__index = {}", Code::kFailedPrecondition, "attempt to index a string value"},
    {"SetmetatableOnLibrary", "setmetatable(table, {})", Code::kFailedPrecondition, "cannot change a protected metatable"},
    {"GcFinalizer", "setmetatable({}, {__gc = function() end})", Code::kFailedPrecondition, "__gc is not available"},
    {"WeakTable", "setmetatable({}, {__mode = 'k'})", Code::kFailedPrecondition, "__mode is not available"},
    {"FormatPointer", "return string.format('%p', {})", Code::kFailedPrecondition, "'%p' is not available"},
    {"FormatHexFloat", "return string.format('%a', 1.5)", Code::kFailedPrecondition, "'%a' is not available"},
    {"FormatQuotedFloat", "return string.format('%q', 0.1)", Code::kFailedPrecondition, "'%q' of a float is not available"},
    {"PairsOverTableKeys", "local t = {[{}] = 1} for k in pairs(t) do end", Code::kFailedPrecondition, "key of type table"},
    {"RandomseedNoArgs", "math.randomseed()", Code::kFailedPrecondition, "bad argument #1 to 'randomseed'"},
    {"IndexLoop", "local t = setmetatable({}, {}) getmetatable(t).__index = t return t.x", Code::kFailedPrecondition, "'__index' chain too long"},
    {"TostringReturnsTable", "return tostring(setmetatable({}, {__tostring = function() return {} end}))", Code::kFailedPrecondition, "'__tostring' must return a string"},
    {"ErrorWithTable", "error({code = 1})", Code::kFailedPrecondition, "(error object is a table value)"},
    {"IntegerDivideByZero", "local z = 0 return 1 // z", Code::kFailedPrecondition, "attempt to divide by zero"},
    {"ByteSliceTooLong", "return ('x'):rep(2e6):byte(1, -1)", Code::kFailedPrecondition, "string slice too long"},
    {"UnpackTooMany", "return table.unpack({}, 1, 1e6)", Code::kFailedPrecondition, "too many results to unpack"},
    // Results that have no value representation.
    {"ResultIsFunction", "return print", Code::kInvalidArgument, "is a function"},
    {"ResultHasCycle", "local t = {} t.self = t return t", Code::kInvalidArgument, "contains a cycle"},
    {"ResultTooDeep", "local t = {} for i = 1, 1000 do t = {t} end return t", Code::kInvalidArgument, "nested deeper than 200"},
    {"ResultMixedKeys", "return {1, 2, name = 'x'}", Code::kInvalidArgument, "mixes integer and string keys"},
    {"ResultWithHoles", "return {1, nil, 3}", Code::kInvalidArgument, "not exactly 1..n"},
    {"ResultFloatKey", "return {[1.5] = true}", Code::kInvalidArgument, "key of type float"},
    {"ResultCoroutine", "return {co = coroutine.create(print)}", Code::kInvalidArgument, "$.co is a thread"},
};

class HostileLuaTest : public testing::TestWithParam<LuaCase> {
 protected:
  static void SetUpTestSuite() {
    WorkerPoolOptions o;
    o.num_workers = 2;
    o.default_deadline = std::chrono::seconds(20);
    auto p = WorkerPool::Start(o);
    ASSERT_TRUE(p.ok()) << p.status();
    pool_ = p->release();
  }
  static void TearDownTestSuite() {
    delete pool_;
    pool_ = nullptr;
  }
  static WorkerPool* pool_;
};
WorkerPool* HostileLuaTest::pool_ = nullptr;

TEST_P(HostileLuaTest, EndsInAClearErrorAndThePoolSurvives) {
  ASSERT_NE(pool_, nullptr);
  const LuaCase& c = GetParam();
  std::string source = std::string("return function(x)\n") + c.body + "\nend\n";
  auto t0 = std::chrono::steady_clock::now();
  auto out = pool_->Call(source, "hostile.lua", {Value::Int(1)}, HostileLimits());
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(out.ok()) << "infrastructure failure instead of a per-call error: " << out.status();
  const CallResult& r = out->front();
  EXPECT_EQ(r.status.code(), c.code) << r.status;
  EXPECT_NE(r.status.message().find(c.needle), std::string::npos) << r.status;
  EXPECT_LE(r.usage.instructions, HostileLimits().max_instructions + kInstructionQuantum);
  EXPECT_LT(seconds, 5.0);
  // The same case fails the same way on replay.
  auto again = pool_->Call(source, "hostile.lua", {Value::Int(1)}, HostileLimits());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->front().status, r.status);
  // And the next ordinary call works.
  auto next = pool_->Call("return function(x) return x + 1 end", "ok.lua", {Value::Int(41)}, HostileLimits());
  ASSERT_TRUE(next.ok()) << next.status();
  ASSERT_TRUE(next->front().status.ok()) << next->front().status;
  EXPECT_EQ(next->front().value.as_int(), 42);
}

INSTANTIATE_TEST_SUITE_P(Cases, HostileLuaTest, testing::ValuesIn(kLuaCases),
                         [](const testing::TestParamInfo<LuaCase>& p) { return std::string(p.param.name); });

// Blueprints run in-process: every case must be just as contained there (this test process is
// the server), with the same outcome as in the worker.
class HostileInProcessTest : public testing::TestWithParam<LuaCase> {};

TEST_P(HostileInProcessTest, SameErrorInProcessAndTheProcessSurvives) {
  const LuaCase& c = GetParam();
  std::string source = std::string("return function(x)\n") + c.body + "\nend\n";
  auto out = RunFunctionArtifact(source, "hostile.lua", {Value::Int(1), Value::Int(2)}, HostileLimits(),
                                 LuaState::Clock::now() + std::chrono::seconds(20));
  ASSERT_TRUE(out.ok()) << out.status();
  for (const CallResult& r : *out) {
    EXPECT_EQ(r.status.code(), c.code) << r.status;
    EXPECT_NE(r.status.message().find(c.needle), std::string::npos) << r.status;
  }
  EXPECT_EQ((*out)[0].status, (*out)[1].status);
  EXPECT_EQ((*out)[0].usage.instructions, (*out)[1].usage.instructions);
  auto next = RunFunctionArtifact("return function(x) return x * 2 end", "ok.lua", {Value::Int(21)}, HostileLimits());
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->front().value.as_int(), 42);
}

INSTANTIATE_TEST_SUITE_P(Cases, HostileInProcessTest, testing::ValuesIn(kLuaCases),
                         [](const testing::TestParamInfo<LuaCase>& p) { return std::string(p.param.name); });

TEST(HostileArtifactTest, CompileTimeAttacks) {
  auto binary = RunFunctionArtifact("\x1bLua\x54\x00", "bin.lua", {Value::Nil()}, HostileLimits());
  ASSERT_FALSE(binary.ok());
  EXPECT_NE(binary.status().message().find("binary chunks are not accepted"), std::string::npos);
  auto syntax = RunFunctionArtifact("return function(x)\n  return x +\nend", "syn.lua", {Value::Nil()}, HostileLimits());
  ASSERT_FALSE(syntax.ok());
  EXPECT_EQ(syntax.status().code(), Code::kInvalidArgument);
  EXPECT_NE(syntax.status().message().find("syn.lua:3:"), std::string::npos) << syntax.status();
  auto not_fn = RunFunctionArtifact("return 42", "num.lua", {Value::Nil()}, HostileLimits());
  ASSERT_TRUE(not_fn.ok());
  EXPECT_NE(not_fn->front().status.message().find("must return a function, it returned a number"), std::string::npos);
  // A chunk that loops at load time is bounded like any call.
  auto load_loop = RunFunctionArtifact("while true do end", "l.lua", {Value::Nil()}, HostileLimits());
  ASSERT_TRUE(load_loop.ok());
  EXPECT_EQ(load_loop->front().status.code(), Code::kResourceExhausted);
}

TEST(HostileArtifactTest, NonFiniteResultsHaveNoCanonicalForm) {
  auto out = RunFunctionArtifact("return function() return {v = 0/0, w = math.huge} end", "nan.lua", {Value::Nil()}, {});
  ASSERT_TRUE(out.ok());
  ASSERT_TRUE(out->front().status.ok());
  auto json = CanonicalJson(out->front().value);
  ASSERT_FALSE(json.ok());
  EXPECT_NE(json.status().message().find("NaN"), std::string::npos) << json.status();
}

TEST(HostileArtifactTest, InvalidUtf8ResultIsAnErrorOnlyAtSerialization) {
  auto out = RunFunctionArtifact("return function() return '\\xff\\xfe' end", "bytes.lua", {Value::Nil()}, {});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->front().value.as_string(), "\xff\xfe");
  EXPECT_FALSE(CanonicalJson(out->front().value).ok());
}

TEST(HostileValueTest, MalformedInputsAreRejectedWithReasons) {
  std::string deep(300, '[');
  deep += std::string(300, ']');
  auto d = ParseJson(deep);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("nesting deeper than 200"), std::string::npos);
  EXPECT_NE(ParseJson("{\"a\":\"\xc3\"}").status().message().find("UTF-8"), std::string::npos);
  EXPECT_NE(ParseJson("123456789012345678901234567890").status().message().find("int64"), std::string::npos);
  EXPECT_NE(ParseJson("[1, 2").status().message().find("unterminated"), std::string::npos);
  EXPECT_NE(ParseJson("\"\\u12\"").status().message().find("truncated \\u escape"), std::string::npos);
}

TEST(HostileRegexTest, PathologicalPatternsRunInLinearTime) {
  std::string as(1 << 20, 'a');  // 1 MiB of 'a', no 'b': exponential for a backtracking engine
  for (const char* p : {"(a*)*b", "(a|aa)*b", "(x+x+)+y", "(a|a?)+b", "^(a+)+$b"}) {
    auto re = Re2Matcher::Compile(p);
    ASSERT_TRUE(re.ok()) << p << ": " << re.status();
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_TRUE(re->FindAll(as).empty()) << p;
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0) << p;
  }
}

TEST(HostileRegexTest, MalformedAndOversizedPatterns) {
  EXPECT_EQ(Re2Matcher::Compile("a{1001}").status().code(), Code::kInvalidArgument);
  EXPECT_NE(Re2Matcher::Compile("a{1001}").status().message().find("invalid repetition size: {1001} at byte 1"), std::string::npos);
  EXPECT_NE(Re2Matcher::Compile("\xff(").status().message().find("invalid UTF-8"), std::string::npos);
  EXPECT_NE(Re2Matcher::Compile("(?<=a)b").status().message().find("lookbehind"), std::string::npos);
  EXPECT_NE(Re2Matcher::Compile("[z-a]").status().message().find("invalid character class range: z-a"), std::string::npos);
  RegexOptions tiny;
  tiny.max_memory_bytes = 32 << 10;
  EXPECT_EQ(Re2Matcher::Compile("[a-z]{50}[0-9]{50}\\pL{50}", tiny).status().code(), Code::kResourceExhausted);
}

}  // namespace
}  // namespace rote::sandbox
