// The fast profile's K slices and block shapes (docs/fast_profile.md): pure functions of the
// matrix's shape, the token count and the device's multiprocessors, shared by the launcher
// (fast_linear.cu) and the tests; plain C++, no CUDA header, so the tests build without nvcc.
#pragma once

#include <algorithm>
#include <cstdint>

#include "inference/cuda/fast_tiles.h"

namespace rote::inference::cuda {

inline constexpr int kFastWarps = 8;             // warps per block (they split a slice's steps)
inline constexpr int kFastMaxSplits = 16;        // Hopper's non-portable cluster limit
inline constexpr int kFastSplitRows = 64;        // the slice target counts 64-row tiles
inline constexpr int kFastMinStepsPerWarp = 2;
inline constexpr int kFastSplitTarget = 32;      // the profile's (fast4) slice target

// K slices of a (rows, cols_padded) matrix: about `target` / ceil(rows / 64), at most 16, at
// least two 16-column steps per warp each. A function of the shape only: it fixes the order of
// the sums (the profile's version names the target).
inline int32_t FastLinearSplitsFor(int32_t rows, int32_t cols_padded, int32_t target) {
  const int32_t steps = cols_padded / kFastTileCols;
  const int32_t tiles = std::max<int32_t>((rows + kFastSplitRows - 1) / kFastSplitRows, 1);
  int32_t s = (target + tiles - 1) / tiles;
  s = std::min(s, kFastMaxSplits);
  s = std::min(s, std::max<int32_t>(1, steps / (kFastWarps * kFastMinStepsPerWarp)));
  return std::max<int32_t>(s, 1);
}

// A block's shape: 16-row tiles by 8-token groups.
struct FastLinearShape {
  int32_t row_tiles, token_groups;
};

// The block shape of a product of up to 64 tokens (beyond, prefill keeps 64-row blocks of up to
// 32 tokens): among the instantiated shapes (fast_linear.cu, LaunchFastShape), the one whose grid
// finishes soonest by a simple model. Every shape runs two blocks per multiprocessor, so a grid
// runs in ceil(blocks / (2 x multiprocessors)) waves, and a block lasts about as long as the bytes
// it copies per column: 32 per 16-row tile (bf16 weights) and 32 per 8-token group (fp32
// activations). The model is waves x bytes per column; ties go to fewer token groups (shorter
// chains of dependent mma per warp), then to more rows. Before it, 64-row blocks were taken
// whenever they gave every multiprocessor one: gate|up at batch 32 ran 304 blocks, a full wave and
// 40 more, where 80-row blocks fit in one wave (244): batch 32 +7%, batch 64 +4% (0.5B, H100,
// fifteenth session). The shape never changes the order of the sums.
inline FastLinearShape ChooseFastLinearShapeFor(int32_t rows, int32_t tokens, int32_t splits,
                                                int32_t multiprocessors) {
  static constexpr FastLinearShape kCandidates[] = {{1, 1}, {2, 1}, {3, 1}, {4, 1}, {5, 1}, {6, 1},
                                                     {1, 2}, {2, 2}, {3, 2}, {4, 2}, {5, 2}, {6, 2},
                                                     {1, 4}, {2, 4}, {3, 4}, {4, 4}};
  const int64_t slots = 2 * static_cast<int64_t>(std::max<int32_t>(multiprocessors, 1));
  const int64_t tiles = (rows + kFastTileRows - 1) / kFastTileRows;
  FastLinearShape best = {1, 1};
  int64_t best_cost = -1;
  for (const FastLinearShape c : kCandidates) {
    // Up to 8 tokens: one group; up to 16: two; beyond, two or four.
    if ((tokens <= 8) != (c.token_groups == 1) || (tokens <= 16 && c.token_groups == 4)) continue;
    const int64_t token_tiles = (tokens + 8 * c.token_groups - 1) / (8 * c.token_groups);
    const int64_t blocks = (tiles + c.row_tiles - 1) / c.row_tiles * splits * token_tiles;
    const int64_t cost = (blocks + slots - 1) / slots * (32 * c.row_tiles + 32 * c.token_groups);
    const bool better = best_cost < 0 || cost < best_cost ||
                        (cost == best_cost && (c.token_groups < best.token_groups ||
                                               (c.token_groups == best.token_groups && c.row_tiles > best.row_tiles)));
    if (better) {
      best = c;
      best_cost = cost;
    }
  }
  return best;
}

}  // namespace rote::inference::cuda
