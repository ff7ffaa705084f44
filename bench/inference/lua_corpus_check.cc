// Runs Lua files through the lua_chunk grammar (docs/grammar.md) and through luac, and prints
// where they agree: the grammar must accept every file luac 5.4 accepts (a corpus of real code,
// e.g. the Lua test suite), and each disagreement is listed with the first byte the grammar
// refused. A file luac refuses (another Lua version's syntax) is counted and skipped.
//
//   bench_lua_corpus FILE.lua...
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "inference/grammar/grammar.h"

using namespace rote::inference::grammar;

namespace {

std::string ReadAll(const char* path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool LuacAccepts(const char* path) {
  const std::string cmd = std::string("luac5.4 -p '") + path + "' >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> vocab;
  for (int b = 0; b < 256; ++b) vocab.push_back(std::string(1, static_cast<char>(b)));
  vocab.push_back("");
  auto g = CompiledGrammar::Compile(BuiltinGrammar("lua_chunk"), vocab, {256});
  if (!g.ok()) return 1;
  int files = 0, luac_refused = 0, agreed = 0;
  size_t bytes = 0;
  for (int i = 1; i < argc; ++i) {
    std::string text = ReadAll(argv[i]);
    // A first line starting with '#' (a shebang) is skipped by Lua's loader, not its grammar.
    if (!text.empty() && text[0] == '#') text.erase(0, text.find('\n'));
    ++files;
    if (!LuacAccepts(argv[i])) {
      ++luac_refused;
      continue;
    }
    auto m = Matcher::Create(*g);
    size_t at = 0;
    for (; at < text.size(); ++at)
      if (!m->AcceptBytes(std::string_view(text).substr(at, 1))) break;
    if (at == text.size() && m->IsComplete()) {
      ++agreed;
      bytes += text.size();
      continue;
    }
    const size_t line_start = text.rfind('\n', at == 0 ? 0 : at - 1);
    const size_t from = line_start == std::string::npos ? 0 : line_start + 1;
    const int line = 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<long>(at), '\n'));
    printf("{\"file\":\"%s\",\"refused_at_line\":%d,\"text\":\"%s\"}\n", argv[i], line,
           text.substr(from, std::min<size_t>(80, text.find('\n', at) - from)).c_str());
  }
  printf("{\"files\":%d,\"luac_refused\":%d,\"luac_accepted\":%d,\"grammar_accepted\":%d,\"bytes_accepted\":%zu}\n",
         files, luac_refused, files - luac_refused, agreed, bytes);
  return agreed == files - luac_refused ? 0 : 1;
}
