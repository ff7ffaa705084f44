// Property tests of the shipped grammars over a realistic byte-level vocabulary (the qwen2
// fixture's tokenizer plus code pieces): random walks that choose only allowed tokens never
// reach a dead end, the mask equals the brute-force check, an accepted EOS means a complete
// reply that luac compiles, and the same tokens always give the same mask bits.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "grammar_test_util.h"
#include "inference/tokenizer/tokenizer.h"

namespace rote::inference::grammar {
namespace {

namespace fs = std::filesystem;
using testing::Allowed;
using testing::BruteForceMask;
using testing::Mask;

// Pieces a walk prefers once it should finish: closers first.
const std::vector<std::string> kClosers = {
    "\n```", " end", ")", "}", "]", "\"", "'", "]]", "]=]", "]==]", "]===]", "]====]", "\n", " then", " do",
    " until", " 1", "1", " return", " function", "(", " in", " =", " x", "::", "\"}", "null", "0"};

std::vector<std::string> Vocab() {
  std::vector<std::string> v;
  auto tok = Tokenizer::Load(std::string(ROTE_SOURCE_DIR) + "/tests/fixtures/qwen2");
  if (tok.ok()) {
    for (int32_t id = 0; id < tok->vocab_size(); ++id) v.push_back(tok->IsSpecial(id) ? "" : tok->TokenBytes(id));
  }
  for (int b = 0; b < 256; ++b) v.push_back(std::string(1, static_cast<char>(b)));
  for (const auto& p : kClosers) v.push_back(p);
  for (const char* p : {"```lua\n", "```re2\n", "```", "lua", "re2", "local", " local", "function", " function(",
                        "return", "(x)", " x =", " + ", " .. ", "--", "--[[", "[[", "[=[", "\\d", "\\b", "(?:", "(?P<",
                        "{2}", "{1,3}", "[a-z]", "a-z", "\\u00e9", "\xc3\xa9", "\xc3", "\xa9", "\xe2\x82", "\xac",
                        " string", ".format", "pairs", "ipairs", " table", "math", " os", ".time", "0x", "1e", ".5",
                        "..", "...", "~=", "==", "<=", "//", "<<", ">>", " <const>", " goto", "::done::", " true",
                        " false", " nil", "{\"", "\":", ", ", "[1,", "-0.5e+3", "true", "false"}) {
    v.push_back(p);
  }
  v.push_back("");  // EOS, the last id
  return v;
}

const std::vector<std::string> kGlobals = {"assert", "error", "ipairs", "pairs", "pcall", "select", "tonumber",
                                           "tostring", "type", "string", "table", "math", "utf8"};

// luac's complaint ("" when it compiles), or nullopt when luac is not installed.
std::optional<std::string> LuacError(const std::string& chunk) {
  if (!fs::exists("/usr/bin/luac5.4")) return std::nullopt;
  const std::string base = (fs::temp_directory_path() / ("rote_grammar_walk_" + std::to_string(::getpid()))).string();
  std::ofstream(base + ".lua", std::ios::binary) << chunk;
  const int rc = std::system(("/usr/bin/luac5.4 -p " + base + ".lua >" + base + ".err 2>&1").c_str());
  std::ifstream err(base + ".err");
  std::string message((std::istreambuf_iterator<char>(err)), std::istreambuf_iterator<char>());
  fs::remove(base + ".lua");
  fs::remove(base + ".err");
  return rc == 0 ? "" : message;
}

// The checks luac makes beyond syntax, which the grammar documents as left to compilation.
bool IsSemanticError(const std::string& message) {
  for (const char* known : {"unknown attribute", "outside a vararg function", "break outside a loop",
                            "no visible label", "attempt to assign to const variable", "multiple to-be-closed",
                            "too many local variables", "upvalues", "label '"}) {
    if (message.find(known) != std::string::npos) return true;
  }
  return false;
}

struct WalkStats {
  int finished = 0;
  int luac_checked = 0;
  int luac_semantic = 0;  // rejected by luac for a reason the grammar leaves to it
  std::string unfinished;  // the text of the last walk that ran out of steps
};

// One walk: `explore` random steps, then closers first. Checks every mask against the
// brute-force one every `brute_every` steps.
void Walk(std::shared_ptr<const CompiledGrammar> g, std::optional<std::vector<std::string>> globals, uint32_t seed,
          int explore, int max_steps, int brute_every, const std::string& fence, WalkStats* stats) {
  const int32_t vocab_size = g->vocab_size();
  const int32_t eos = vocab_size - 1;
  std::mt19937 rng(seed);
  auto m = Matcher::Create(g, globals);
  ASSERT_TRUE(m.ok());
  std::string text;
  std::map<std::string, int32_t> closer_id;
  static const auto vocab = Vocab();
  for (const auto& c : kClosers) {
    for (int32_t id = vocab_size - 1; id >= 0; --id) if (vocab[id] == c) closer_id[c] = id;
  }
  for (int step = 0; step < max_steps; ++step) {
    if (step == max_steps - 1) stats->unfinished = text;
    auto bits = Mask(*m, *g);
    if (brute_every > 0 && step % brute_every == 0) {
      ASSERT_EQ(bits, BruteForceMask(*m, *g)) << "seed " << seed << " text:\n" << text;
    }
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < vocab_size; ++id) if (Allowed(bits, id)) allowed.push_back(id);
    ASSERT_FALSE(allowed.empty()) << "dead end, seed " << seed << " text:\n" << text;
    int32_t pick = -1;
    if (step >= explore) {
      // EOS, else the first allowed closer half of the time, else any allowed closer.
      std::vector<int32_t> closers;
      for (const auto& c : kClosers) {
        auto it = closer_id.find(c);
        if (it != closer_id.end() && Allowed(bits, it->second)) closers.push_back(it->second);
      }
      if (Allowed(bits, eos)) {
        pick = eos;
      } else if (!closers.empty()) {
        pick = rng() % 2 ? closers[0] : closers[rng() % closers.size()];
      }
    }
    if (pick < 0) pick = allowed[rng() % allowed.size()];
    if (pick == eos && step < explore && allowed.size() > 1) pick = allowed[(rng() % (allowed.size() - 1))];
    ASSERT_TRUE(m->AcceptToken(pick));
    if (pick == eos) {
      ++stats->finished;
      ASSERT_TRUE(text.starts_with(fence)) << text;
      if (fence == "```lua\n") {
        const std::string chunk = text.substr(fence.size(), text.rfind("\n```") - fence.size());
        auto error = LuacError(chunk);
        if (error) {
          ++stats->luac_checked;
          if (IsSemanticError(*error)) {
            ++stats->luac_semantic;
          } else {
            EXPECT_EQ(*error, "") << "luac rejects a reply the grammar completed, seed " << seed << ":\n" << chunk;
          }
        }
      }
      // The parser itself agrees from scratch.
      EXPECT_TRUE(testing::AcceptsWhole(g, text, globals)) << text;
      return;
    }
    text += vocab[pick];
  }
}

std::shared_ptr<const CompiledGrammar> Compile(const char* name) {
  const auto vocab = Vocab();
  auto g = CompiledGrammar::Compile(BuiltinGrammar(name), vocab, {static_cast<int32_t>(vocab.size()) - 1});
  EXPECT_TRUE(g.ok()) << g.status().message();
  return *g;
}

TEST(GrammarWalks, LuaRepliesStayValidAndCompile) {
  auto g = Compile("lua_reply");
  WalkStats stats;
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    Walk(g, seed % 2 ? std::optional(kGlobals) : std::nullopt, seed, 10 + seed % 30, 800, seed <= 6 ? 9 : 0,
         "```lua\n", &stats);
    if (HasFatalFailure()) return;
  }
  EXPECT_GE(stats.finished, 8) << "a walk that did not finish:\n" << stats.unfinished;
  std::printf("lua walks: %d finished, %d checked by luac, %d refused by luac's semantic checks\n", stats.finished,
              stats.luac_checked, stats.luac_semantic);
}

TEST(GrammarWalks, Re2RepliesStayValid) {
  auto g = Compile("re2_reply");
  WalkStats stats;
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    Walk(g, std::nullopt, seed, 5 + seed % 20, 200, seed <= 6 ? 7 : 0, "```re2\n", &stats);
    if (HasFatalFailure()) return;
  }
  EXPECT_GE(stats.finished, 20) << "a walk that did not finish:\n" << stats.unfinished;
}

TEST(GrammarWalks, JsonValuesStayValid) {
  auto g = Compile("json");
  WalkStats stats;
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    Walk(g, std::nullopt, seed, 5 + seed % 20, 200, seed <= 6 ? 7 : 0, "", &stats);
    if (HasFatalFailure()) return;
  }
  EXPECT_GE(stats.finished, 20) << "a walk that did not finish:\n" << stats.unfinished;
}

TEST(GrammarWalks, MasksAreAPureFunctionOfTheTokens) {
  auto g1 = Compile("lua_reply");
  auto g2 = Compile("lua_reply");  // a second compilation: no addresses or hash order leak in
  const std::string reply = "```lua\nlocal n = 0 -- count\nreturn function(t)\n  for k, v in pairs(t) do n = n + #k end\n  return n\nend\n```";
  auto a = Matcher::Create(g1, kGlobals);
  auto b = Matcher::Create(g2, kGlobals);
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<std::vector<uint64_t>> first;
  for (char c : reply) {
    auto ma = Mask(*a, *g1);
    auto mb = Mask(*b, *g2);
    ASSERT_EQ(ma, mb);
    first.push_back(ma);
    ASSERT_TRUE(a->AcceptBytes(std::string(1, c)));
    ASSERT_TRUE(b->AcceptBytes(std::string(1, c)));
  }
  // Replaying after a rollback gives the same bits again.
  a->Rollback(static_cast<int>(reply.size()));
  for (size_t i = 0; i < reply.size(); ++i) {
    ASSERT_EQ(Mask(*a, *g1), first[i]) << i;
    ASSERT_TRUE(a->AcceptBytes(std::string(1, reply[i])));
  }
  EXPECT_TRUE(a->IsComplete());
}

}  // namespace
}  // namespace rote::inference::grammar
