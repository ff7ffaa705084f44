#include "inference/grammar/closing.h"

namespace rote::inference::grammar {
namespace {

constexpr int kWalks = 12;
constexpr int kMaxStepsPerWalk = 96;
constexpr int kPieceUses = 4;

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
      "\x80", "\x90", "\xa0", "\n```", "\"", "'", "\n", "]]", "]=]", "]==]", "]===]", "]====]", " end", ")", "}", "]",
      " return function() end", " 0", "0", " then", " do", " in", " =", "::", " until 0", " local x", " x",
      "x", "(", ",", ".", ":", "\\", " return", " function", "e", "1", ";", "-", "+", " "};
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
  for (int walk = 0; walk < kWalks; ++walk) {
    Matcher m = matcher;
    std::string plan;
    // Each piece at most kPieceUses times a walk: a piece that fits anywhere and closes nothing
    // (a blank, a quote inside a comment) cannot hold a walk in a loop; the walk moves on down
    // the list to the piece that does close.
    std::vector<int> uses(pieces.size(), 0);
    for (int step = 0; step < kMaxStepsPerWalk && !m.IsComplete(); ++step) {
      // Walk 0 always takes the first piece the grammar accepts; the others take it half the
      // time and otherwise start the search at a pseudo-random piece, so a walk caught in a
      // loop of one piece (a blank inside a long string) is not the only one tried.
      const uint64_t r = SplitMix(static_cast<uint64_t>(walk) << 32 | static_cast<uint64_t>(step));
      const size_t start = walk == 0 || (r & 1) != 0 ? 0 : static_cast<size_t>((r >> 1) % pieces.size());
      bool moved = false;
      for (size_t k = 0; k < pieces.size() && !moved; ++k) {
        const size_t at = (start + k) % pieces.size();
        const std::string& piece = pieces[at];
        if (uses[at] >= kPieceUses || plan.size() + piece.size() > max_bytes) continue;
        if (m.AcceptBytes(piece)) {
          plan += piece;
          ++uses[at];
          moved = true;
        }
      }
      if (!moved) break;
    }
    // The first closing found is taken: a shorter one from more walks is not worth their cost
    // on every step of every request that nears its budget.
    if (m.IsComplete()) return plan;
  }
  return std::nullopt;
}

}  // namespace rote::inference::grammar
