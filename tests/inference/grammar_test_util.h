// Helpers shared by the grammar suites: small vocabularies, a brute-force mask, and replies.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "inference/grammar/grammar.h"

namespace rote::inference::grammar::testing {

// A byte-level vocabulary: every single byte, then `extra` pieces (ids follow in order), then
// one EOS token with empty bytes (its id is returned by EosId()).
inline std::vector<std::string> ByteVocab(const std::vector<std::string>& extra) {
  std::vector<std::string> v;
  for (int b = 0; b < 256; ++b) v.push_back(std::string(1, static_cast<char>(b)));
  for (const auto& e : extra) v.push_back(e);
  v.push_back("");
  return v;
}

inline std::shared_ptr<const CompiledGrammar> CompileOrDie(std::string_view text, std::vector<std::string> vocab) {
  const auto eos = static_cast<int32_t>(vocab.size()) - 1;
  auto g = CompiledGrammar::Compile(text, std::move(vocab), {eos});
  if (!g.ok()) {
    fprintf(stderr, "compile: %s\n", g.status().message().c_str());
    abort();
  }
  return *g;
}

inline std::vector<uint64_t> Mask(Matcher& m, const CompiledGrammar& g) {
  std::vector<uint64_t> bits(g.mask_words());
  m.FillNextTokenMask(bits.data());
  return bits;
}

// The reference: token i is allowed iff a copy of the matcher accepts it.
inline std::vector<uint64_t> BruteForceMask(const Matcher& m, const CompiledGrammar& g) {
  std::vector<uint64_t> bits(g.mask_words());
  for (int32_t id = 0; id < g.vocab_size(); ++id) {
    Matcher c = m;
    if (c.AcceptToken(id)) bits[id / 64] |= 1ull << (id % 64);
  }
  return bits;
}

inline bool Allowed(const std::vector<uint64_t>& bits, int32_t id) { return (bits[id / 64] >> (id % 64)) & 1; }

inline std::string LuaReply(const std::string& chunk) { return "```lua\n" + chunk + "\n```"; }

// Accepts the whole text as bytes and says whether it is a complete sentence.
inline bool AcceptsWhole(std::shared_ptr<const CompiledGrammar> g, const std::string& text,
                         std::optional<std::vector<std::string>> globals = std::nullopt) {
  auto m = Matcher::Create(std::move(g), std::move(globals));
  if (!m.ok()) return false;
  return m->AcceptBytes(text) && m->IsComplete();
}

}  // namespace rote::inference::grammar::testing
