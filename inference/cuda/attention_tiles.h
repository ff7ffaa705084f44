// The query tiles of a prefill step's attention (LaunchTileAttention, attention_tile.cuh): runs of
// at most a tile's tokens of each sequence, consecutive tokens at consecutive positions. Host
// code, plain C++ (forward.cc builds the step's list; tests check it without a device).
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

namespace rote::inference::cuda {

// One sequence of a step: its tokens (consecutive in the step, in the order given) and the
// position of the first.
struct StepSequence {
  int32_t tokens = 0;
  int32_t start_pos = 0;
};

struct AttentionTile {
  int32_t first_token = 0;   // the step's token index of the tile's first token
  int32_t tokens = 0;        // 1 .. tile_tokens
  int32_t end_position = 0;  // the last token's position + 1: the keys the tile attends
};

// Tiles of at most `tile_tokens` (> 0) tokens cut from each sequence in order, every token of the
// step in exactly one, then ordered by end_position, longest first (a stable sort: ties keep step
// order). The longest take the longest, and a grid's blocks start in order; the order changes no
// output.
inline std::vector<AttentionTile> AttentionTilesFor(std::span<const StepSequence> sequences, int32_t tile_tokens) {
  std::vector<AttentionTile> tiles;
  int32_t first = 0;
  for (const StepSequence& s : sequences) {
    for (int32_t i = 0; i < s.tokens; i += tile_tokens) {
      const int32_t count = std::min(tile_tokens, s.tokens - i);
      tiles.push_back({first + i, count, s.start_pos + i + count});
    }
    first += s.tokens;
  }
  std::stable_sort(tiles.begin(), tiles.end(),
                   [](const AttentionTile& a, const AttentionTile& b) { return a.end_position > b.end_position; });
  return tiles;
}

// Whether the tiles are mostly full: their rows (tiles x tile_tokens) at most twice the step's
// tokens. A step of mostly decode tokens (a tile each) keeps the per-token kernels.
inline bool AttentionTilesMostlyFull(int64_t tiles, int32_t tile_tokens, int64_t step_tokens) {
  return tiles * tile_tokens <= 2 * step_tokens;
}

}  // namespace rote::inference::cuda
