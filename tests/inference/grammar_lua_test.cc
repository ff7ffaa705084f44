// The Lua reply grammar: every Lua function rote ships is accepted, real-world Lua 5.4 is
// accepted, broken Lua is rejected, and luac agrees with the grammar on the snippets the tests
// of the repository hold.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "grammar_test_util.h"

namespace rote::inference::grammar {
namespace {

namespace fs = std::filesystem;
using testing::AcceptsWhole;
using testing::ByteVocab;
using testing::CompileOrDie;
using testing::LuaReply;

// What the deterministic sandbox profile offers (a subset is enough for these tests).
const std::vector<std::string> kGlobals = {
    "assert", "error", "ipairs", "next", "pairs", "pcall", "rawequal", "rawget", "rawlen", "rawset", "select",
    "setmetatable", "getmetatable", "tonumber", "tostring", "type", "xpcall", "string", "table", "math", "utf8"};

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::shared_ptr<const CompiledGrammar> Lua() {
  static auto g = CompileOrDie(BuiltinGrammar("lua_reply"), ByteVocab({}));
  return g;
}

// luac's verdict, or nullopt when luac is not installed.
std::optional<bool> LuacAccepts(const std::string& chunk) {
  static const char* luac = fs::exists("/usr/bin/luac5.4") ? "/usr/bin/luac5.4" : nullptr;
  if (!luac) return std::nullopt;
  const fs::path file = fs::temp_directory_path() / ("rote_grammar_luac_" + std::to_string(::getpid()) + ".lua");
  std::ofstream(file, std::ios::binary) << chunk;
  const std::string cmd = std::string(luac) + " -p " + file.string() + " >/dev/null 2>&1";
  const int rc = std::system(cmd.c_str());
  fs::remove(file);
  return rc == 0;
}

// `source = '''...'''` and `source = '...'` of the lua_function points of a lockfile.
std::vector<std::string> LockfileLuaSources(const std::string& text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while ((pos = text.find("kind = \"lua_function\"", pos)) != std::string::npos) {
    size_t src = text.find("source = '", pos);
    if (src == std::string::npos) break;
    src += 10;
    if (text.compare(src, 2, "''") == 0) {
      src += 2;
      if (text[src] == '\n') ++src;  // TOML drops the newline after the opening quotes
      size_t end = text.find("'''", src);
      out.push_back(text.substr(src, end - src));
    } else {
      size_t end = text.find('\'', src);
      out.push_back(text.substr(src, end - src));
    }
    pos = src;
  }
  return out;
}

TEST(LuaGrammar, AcceptsEveryLockfileFunctionWithTheSandboxNames) {
  int count = 0;
  for (const auto& e : fs::directory_iterator(fs::path(ROTE_SOURCE_DIR) / "blueprints")) {
    if (e.path().extension() != ".lock") continue;
    for (const auto& src : LockfileLuaSources(ReadFile(e.path()))) {
      ++count;
      EXPECT_TRUE(AcceptsWhole(Lua(), LuaReply(src), kGlobals)) << e.path() << ":\n" << src;
    }
  }
  EXPECT_GE(count, 3);
}

TEST(LuaGrammar, AcceptsEveryBlueprintFile) {
  auto chunk = CompileOrDie(BuiltinGrammar("lua_chunk"), ByteVocab({}));
  int count = 0;
  for (const auto& e : fs::directory_iterator(fs::path(ROTE_SOURCE_DIR) / "blueprints")) {
    if (e.path().extension() != ".lua") continue;
    ++count;
    EXPECT_TRUE(AcceptsWhole(chunk, ReadFile(e.path()))) << e.path();
  }
  EXPECT_GE(count, 3);
}

// One-line C++ string literals holding "return function", unescaped.
std::vector<std::string> TestSnippets() {
  std::vector<std::string> out;
  for (const char* dir : {"tests/sandbox", "tests/orchestrator", "tests/e2e", "tests/cli"}) {
    const fs::path root = fs::path(ROTE_SOURCE_DIR) / dir;
    if (!fs::exists(root)) continue;
    for (const auto& e : fs::recursive_directory_iterator(root)) {
      if (e.path().extension() != ".cc") continue;
      const std::string text = ReadFile(e.path());
      for (size_t at = text.find("\"return function"); at != std::string::npos;
           at = text.find("\"return function", at + 1)) {
        std::string s;
        size_t i = at + 1;
        for (; i < text.size() && text[i] != '"' && text[i] != '\n'; ++i) {
          if (text[i] != '\\') { s.push_back(text[i]); continue; }
          const char c = text[++i];
          s.push_back(c == 'n' ? '\n' : c == 't' ? '\t' : c);
        }
        if (i < text.size() && text[i] == '"' && s.find("```") == std::string::npos) out.push_back(s);
      }
    }
  }
  return out;
}

TEST(LuaGrammar, AgreesWithLuacOnTheSnippetsOfTheTests) {
  auto snippets = TestSnippets();
  EXPECT_GE(snippets.size(), 20u);
  for (const auto& s : snippets) {
    auto luac = LuacAccepts(s);
    if (!luac) GTEST_SKIP() << "luac5.4 not installed";
    EXPECT_EQ(AcceptsWhole(Lua(), LuaReply(s)), *luac) << s;
  }
}

// Real-world Lua 5.4: every statement, operator and lexical form.
const char* const kCorpus[] = {
    "return function(x) return x end",
    "return function(...) local a, b = ... return select('#', ...), a, b end",
    "local t <const> = {1, 2, 3}\nreturn function() return #t end",
    "local f <close> = nil\nreturn function() end",
    "local x <const>, y = 1, 2 return function() return x + y end",
    "return function(s)\n  local n = 0\n  for w in string.gmatch(s, '%a+') do n = n + 1 end\n  return n\nend",
    "return function(t)\n  for i = #t, 1, -1 do\n    if t[i] == nil then goto continue end\n    t[i] = t[i] * 2\n    ::continue::\n  end\n  return t\nend",
    "return function(n)\n  local i = 0\n  repeat i = i + 1 until i >= n\n  while true do break end\n  do local z = 1 end\n  return i\nend",
    "return function(a, b)\n  if a < b then return -1 elseif a > b then return 1 else return 0 end\nend",
    "return function(x) return x // 2, x % 3, x ^ 2, -x ^ 2, 2 ^ -1, not x, #'abc' end",
    "return function(x, y) return x & y, x | y, x ~ y, ~x, x << 2, y >> 1, x .. y .. 'z' end",
    "return function(a, b) return a == b, a ~= b, a <= b, a >= b, a and b or nil end",
    "return function() return 0x10, 0xA.8p1, 0x.1p-4, 1e10, 3.14, .5, 5., 1E-3, 0XFF end",
    "return function() return \"a\\tb\\n\\\\ \\\"q\\\" \\65\\066\\0067 \\x41 \\u{48}\\u{10FFFF} \\z\n   end\" end",
    "return function() return 'it\\'s', \"\\255\\1x\", '\\12a' end",
    "return function() return [[long\nstring]], [==[with ]] inside]==], [=[]=] end",
    "--[[ a long\ncomment ]] --[==[ another ]] ]==]\n-- a line comment\nreturn function() end -- trailing",
    "local M = {}\nfunction M.add(a, b) return a + b end\nfunction M:name() return self.n end\nreturn function(x) return M.add(x, 1) end",
    "local function fib(n) if n < 2 then return n end return fib(n - 1) + fib(n - 2) end\nreturn function(n) return fib(n) end",
    "return function(t) table.sort(t, function(a, b) return a > b end) return t end",
    "return function(s) return s:upper():lower(), (\"x\"):rep(3), #s end",
    "return function(t) return { t[1], x = 1, [\"y\"] = 2, [3] = 3; 4, f = function() end, } end",
    "return function(s) local r = string.format('%d %s', 1, s) print = nil return r end",
    "return function(x) local t = setmetatable({}, { __index = function(_, k) return k end }) return t[x] end",
    "return function(x) local ok, err = pcall(error, 'boom') return ok, err end",
    "return function(s) return utf8.char(72, 105), utf8.len(s), math.maxinteger, math.pi end",
    "return function(s) return tostring(s) .. tonumber('10') .. type(s) end",
    "local count = 0\nreturn function(x)\n  count = count + 1;\n  ;;\n  return count\nend;",
    "return function(f) return f{1, 2}, f'str', f[[raw]], f\"s\" end",
    "return function(a) a.b.c = 1; a[1][2] = 3; a.b:c(1); return a end",
    "return function(x) local a = {} a[#a + 1] = x return a end",
    "return function(x) return (x) end",
};

TEST(LuaGrammar, AcceptsRealWorldLua) {
  for (const char* src : kCorpus) {
    auto luac = LuacAccepts(src);
    if (luac) {
      EXPECT_TRUE(*luac) << "corpus entry is not valid Lua: " << src;
    }
    EXPECT_TRUE(AcceptsWhole(Lua(), LuaReply(src))) << src;
  }
}

const char* const kBroken[] = {
    "return function(x) return x +* 1 end",
    "return function(x) if x then return 1 end",
    "return function(x) return x end end",
    "return function(x)\n  return x +\nend",
    "return function(x",
    "return function(x) x === 1 end",
    "return function(x) return x != 1 end",
    "return function(x) return 1..2 end",
    "return function(x) return 3x end",
    "return function() return 0x end",
    "return function() return \"unterminated end",
    "return function() return \"bad \\q escape\" end",
    "return function() return \"\\256\" end",
    "return function() return [==[ mismatched ]=] end",
    "return function() x = end",
    "return function() end\nlocal after = 1",
    "return function() return a.. end",
    "return function() for i = 1 do end end",
    "return function() goto end",
    "return function() return 1 2 end",
    "return function() return [=",
    "return function() end\n--[[ unterminated comment",
    "return function() return `x` end",
    "return function() return @x end",
    "return function() return x !x end",
};

TEST(LuaGrammar, RejectsBrokenLua) {
  for (const char* src : kBroken) {
    EXPECT_FALSE(AcceptsWhole(Lua(), LuaReply(src))) << src;
    auto luac = LuacAccepts(src);
    if (luac) {
      EXPECT_FALSE(*luac) << "entry is valid Lua: " << src;
    }
  }
}

TEST(LuaGrammar, RejectsValidLuaThatIsNoReply) {
  for (const char* src : {"local f = function() end", "return 1", "return function() end, 1", "return (function() end)"}) {
    EXPECT_FALSE(AcceptsWhole(Lua(), LuaReply(src))) << src;
  }
  EXPECT_FALSE(AcceptsWhole(Lua(), "return function() end"));               // no fence
  EXPECT_FALSE(AcceptsWhole(Lua(), "```lua\nreturn function() end```"));  // the fence closes a line
  EXPECT_FALSE(AcceptsWhole(Lua(), LuaReply("return function() end") + "\n"));
  EXPECT_TRUE(AcceptsWhole(Lua(), "```lua\n\n  return function() end  \n\n```"));
}

TEST(LuaGrammar, RejectsUnknownGlobalsWhenRestricted) {
  EXPECT_FALSE(AcceptsWhole(Lua(), LuaReply("return function(text) return os.time() end"), kGlobals));
  EXPECT_FALSE(AcceptsWhole(Lua(), LuaReply("return function(text) return io.read() end"), kGlobals));
  EXPECT_FALSE(AcceptsWhole(Lua(), LuaReply("return function(text) return load(text)() end"), kGlobals));
  EXPECT_TRUE(AcceptsWhole(Lua(), LuaReply("return function(text) return os.time() end")));
  // Locals, parameters, loop variables, local functions and assigned names are declared.
  EXPECT_TRUE(AcceptsWhole(Lua(), LuaReply("local os = {time = 1}\nreturn function(t) return os.time end"), kGlobals));
  EXPECT_TRUE(AcceptsWhole(Lua(), LuaReply("helper = 1\nreturn function(t) return helper end"), kGlobals));
  EXPECT_TRUE(AcceptsWhole(Lua(), LuaReply("return function(t) for k, v in pairs(t) do return k, v end end"), kGlobals));
  EXPECT_FALSE(AcceptsWhole(Lua(), LuaReply("return function(t) return k end"), kGlobals));
  // Field names and table keys are free.
  EXPECT_TRUE(AcceptsWhole(Lua(), LuaReply("return function(t) return t.os, { io = 1 }, t:exit() end"), kGlobals));
  // A partial name is allowed while some allowed name continues it.
  auto m = Matcher::Create(Lua(), kGlobals);
  ASSERT_TRUE(m.ok());
  ASSERT_TRUE(m->AcceptBytes("```lua\nreturn function(t) return str"));
  EXPECT_FALSE(Matcher(*m).AcceptBytes("x"));
  EXPECT_TRUE(m->AcceptBytes("ing.len(t) end\n```"));
  EXPECT_TRUE(m->IsComplete());
}

}  // namespace
}  // namespace rote::inference::grammar
