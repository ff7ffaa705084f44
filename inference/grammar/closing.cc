#include "inference/grammar/closing.h"

namespace rote::inference::grammar {
namespace {

constexpr int kWalks = 12;
constexpr int kMaxStepsPerWalk = 96;

uint64_t SplitMix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

const std::vector<std::string>& ClosingPieces(std::string_view builtin_name) {
  // Continuation bytes first: they are taken only inside a character a token left unfinished,
  // which nothing else can follow. Then closers of what may be open (strings, long brackets, blocks, brackets), then what
  // completes a statement or an expression, then single characters, and blanks last: a blank
  // is taken almost anywhere and closes nothing.
  static const std::vector<std::string> kLua = {
      "\x80", "\x90", "\xa0", "\n```", "\"", "'", "]]", "]=]", "]==]", "]===]", "]====]", " end", ")", "}", "]",
      " return function() end", " 0", "0", " then", " do", " in", " =", "::", " until 0", " local x", " x",
      "x", "(", ",", ".", ":", "\\", " return", " function", "e", "1", ";", "-", "+", "\n", " "};
  static const std::vector<std::string> kRe2 = {"\x80", "\x90", "\xa0", "\n```", ")", "]", "}", "a", "n>", "3}", ":", "d", "+",
                                                "*", "?", "-", "z", "1", ",", "{", "L", "x", "\\", " "};
  static const std::vector<std::string> kJson = {"\x80", "\x90", "\xa0", "\"", "}", "]", "0", " 0", ":", ",", "\"a\"", "null", "e",
                                                 "1", ".", "\\\\", "u", " "};
  static const std::vector<std::string> kNone;
  if (builtin_name == "lua_reply") return kLua;
  if (builtin_name == "re2_reply") return kRe2;
  if (builtin_name == "json") return kJson;
  return kNone;
}

std::optional<std::string> PlanClosing(const Matcher& matcher, const std::vector<std::string>& pieces,
                                       size_t max_bytes) {
  if (matcher.IsComplete()) return std::string();
  if (pieces.empty() || max_bytes == 0) return std::nullopt;
  std::optional<std::string> best;
  for (int walk = 0; walk < kWalks; ++walk) {
    Matcher m = matcher;
    std::string plan;
    for (int step = 0; step < kMaxStepsPerWalk && !m.IsComplete(); ++step) {
      // Walk 0 always takes the first piece the grammar accepts; the others take it half the
      // time and otherwise start the search at a pseudo-random piece, so a walk caught in a
      // loop of one piece (a blank inside a long string) is not the only one tried.
      const uint64_t r = SplitMix(static_cast<uint64_t>(walk) << 32 | static_cast<uint64_t>(step));
      const size_t start = walk == 0 || (r & 1) != 0 ? 0 : static_cast<size_t>((r >> 1) % pieces.size());
      bool moved = false;
      for (size_t k = 0; k < pieces.size() && !moved; ++k) {
        const std::string& piece = pieces[(start + k) % pieces.size()];
        if (plan.size() + piece.size() > max_bytes) continue;
        if (best.has_value() && plan.size() + piece.size() >= best->size()) continue;
        if (m.AcceptBytes(piece)) {
          plan += piece;
          moved = true;
        }
      }
      if (!moved) break;
    }
    if (m.IsComplete() && (!best.has_value() || plan.size() < best->size())) best = plan;
  }
  return best;
}

}  // namespace rote::inference::grammar
