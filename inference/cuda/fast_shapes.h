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
// The profile's (fast5) slice rule: about kFastSplitTarget / (64-row tiles) slices, each giving
// every warp at least kFastMinStepsPerWarp steps. Against 32 and 2 (fast4: 0.5B's o in 3 slices
// of 2-3 steps per warp, down in 3 of 12-13), fast5 runs o in 2 (3-4 per warp, merged) and down
// in 4 (9-10 per warp): 0.5B batch 32 2.4-3.2% faster, 64 2.6%, batch 1 19%, 1,000-token prefill
// 1.8-2.6%, batch 8 0.4% slower (H100); 1.5B's slices are the same under both.
inline constexpr int kFastMinStepsPerWarp = 3;
inline constexpr int kFastSplitTarget = 48;
// Products of 2 or 3 short K slices run them in one block of 16 or 24 warps (merged slices,
// fast_linear.cu) instead of a cluster of 8-warp blocks: the same order of the sums, so the same
// bits. Up to this many slices by default, of at most kFastMergeMaxStepsPerWarp steps per warp:
// where the loop is that short, the chain after it (the push into the cluster's inboxes and the
// cluster barrier) is what a merged block saves; a long slice (0.5B's down, 13 steps per warp;
// 1.5B's, 35) gains more from a cluster spreading its bytes over more multiprocessors (merged,
// 0.5B's down ran 16-row blocks that read the activations twice as often: batch 32 lost 0.8 us
// a layer). 6 takes in 1.5B's o (batch 32 +3.0%, 64 +2.7%, H100).
inline constexpr int kFastMergeMaxSlices = 3;
inline constexpr int kFastMergeMaxStepsPerWarp = 6;

// The most tokens a fast product whose activation rows are `x_stride` floats apart runs: its
// kernels address activations with 32-bit offsets, a row index (x_rows names a row of the step,
// which holds fewer than 65,536) times the stride, so stride x (tokens + 65,536) must stay below
// 2^31. CanRunFastLinear refuses more; the backend's step limit (CudaMaxStepTokens) is the
// smallest of these over the model's strides. 32B's down (27,648 columns): 12,136 tokens.
inline constexpr int64_t FastLinearMaxTokens(int64_t x_stride) {
  return x_stride <= 0 ? 0 : ((int64_t{1} << 31) - 1) / x_stride - 65536;
}

// Whether a block of `splits` merged slices is compiled for a shape: the accumulators must fit the
// registers left to 16 (128 per thread) or 24 warps (85) per multiprocessor, and the ring keep 3
// slots in one multiprocessor's shared memory.
inline constexpr bool FastMergedShapeFits(int32_t row_tiles, int32_t token_groups, int32_t splits) {
  return (splits == 2 && row_tiles * token_groups <= 8) || (splits == 3 && row_tiles * token_groups <= 4);
}
// Whether a product of `splits` slices over `cols_padded` columns runs them merged when up to
// `merge_max_slices` slices of up to `max_steps_per_warp` steps per warp may.
inline constexpr bool FastMergesSlices(int32_t cols_padded, int32_t splits, int32_t merge_max_slices,
                                       int32_t max_steps_per_warp = kFastMergeMaxStepsPerWarp) {
  if (splits < 2 || splits > merge_max_slices || splits > kFastMergeMaxSlices) return false;
  const int32_t steps = cols_padded / kFastTileCols;
  const int32_t per_warp = (steps + splits * kFastWarps - 1) / (splits * kFastWarps);
  return per_warp <= max_steps_per_warp;
}

// K slices of a (rows, cols_padded) matrix: about `target` / ceil(rows / 64), at most 16, at
// least kFastMinStepsPerWarp 16-column steps per warp each. A function of the shape only: it fixes the order of
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
// chains of dependent mma per warp), then to more rows. Taking 64-row blocks whenever they give
// every multiprocessor one runs gate|up at batch 32 in 304 blocks, a full wave and 40 more, where
// 80-row blocks fit in one wave (244): the model is 7% faster at batch 32, 4% at 64 (0.5B, H100).
// The shape never changes the order of the sums.
// With merged slices (merged: FastMergesSlices), a block holds all the slices of its tile and runs alone on
// its multiprocessor: one slot per multiprocessor, no factor of `splits` in the blocks, and only
// the shapes compiled merged (FastMergedShapeFits). A warp copies what it would in a slice's
// block, so a block's bytes per column are counted the same.
inline FastLinearShape ChooseFastLinearShapeFor(int32_t rows, int32_t tokens, int32_t splits,
                                                int32_t multiprocessors, bool merged) {
  static constexpr FastLinearShape kCandidates[] = {{1, 1}, {2, 1}, {3, 1}, {4, 1}, {5, 1}, {6, 1},
                                                     {1, 2}, {2, 2}, {3, 2}, {4, 2}, {5, 2}, {6, 2},
                                                     {1, 4}, {2, 4}, {3, 4}, {4, 4}};
  const int64_t slots = (merged ? 1 : 2) * static_cast<int64_t>(std::max<int32_t>(multiprocessors, 1));
  const int64_t tiles = (rows + kFastTileRows - 1) / kFastTileRows;
  FastLinearShape best = {1, 1};
  int64_t best_cost = -1;
  for (const FastLinearShape c : kCandidates) {
    // Up to 8 tokens: one group; up to 16: two; beyond, two or four.
    if ((tokens <= 8) != (c.token_groups == 1) || (tokens <= 16 && c.token_groups == 4)) continue;
    if (merged && !FastMergedShapeFits(c.row_tiles, c.token_groups, splits)) continue;
    const int64_t token_tiles = (tokens + 8 * c.token_groups - 1) / (8 * c.token_groups);
    const int64_t blocks = (tiles + c.row_tiles - 1) / c.row_tiles * (merged ? 1 : splits) * token_tiles;
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
