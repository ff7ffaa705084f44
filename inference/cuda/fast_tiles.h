// The fast profile's weight layout (docs/fast_profile.md): each bf16 matrix is stored as tiles of
// 16 rows x 16 columns in the order the tensor cores' mma.m16n8k16 takes its A operand, so a
// warp reads one tile as one coalesced 512-byte load (16 bytes per lane) and needs no shared
// memory shuffling. A pure function of (row, column, padded columns), shared by the upload (host),
// the kernel and the tests; compiles under g++ and nvcc.
//
// Tile (row / 16, k / 16) holds 32 lanes x 8 bf16. Lane (g = lane / 4, t = lane % 4) holds the
// A registers a0..a3 of mma.m16n8k16 (two bf16 each) with the 16 columns of the tile permuted so
// that thread t's k positions {2t, 2t + 1, 2t + 8, 2t + 9} are the tile's columns 4t..4t + 3:
//   a0 = (row g,     cols 4t, 4t + 1)   a1 = (row g + 8, cols 4t, 4t + 1)
//   a2 = (row g,     cols 4t + 2, 4t + 3)   a3 = (row g + 8, cols 4t + 2, 4t + 3)
// The activations use the same permutation (thread t reads its token's columns 4t..4t + 3 as one
// float4), so every mma sums the products of matching columns. "Columns" are the device row's
// physical columns (kernels.h's lane order); weights and activations share that order too.
#pragma once

#include <cstdint>
#include <vector>

#include "inference/numerics/canonical.h"  // ROTE_HD, the bit casts

namespace rote::inference::cuda {

inline constexpr int kFastTileRows = 16;
inline constexpr int kFastTileCols = 16;

ROTE_HD inline int64_t FastTileRowsPadded(int64_t rows) {
  return (rows + kFastTileRows - 1) / kFastTileRows * kFastTileRows;
}

// Index (in bf16 elements) of weight (row, k) in the tile layout of a matrix whose rows hold
// cols_padded columns (a multiple of 16).
ROTE_HD inline int64_t FastTileIndex(int64_t row, int64_t k, int64_t cols_padded) {
  const int64_t tile_row = row / kFastTileRows, r = row % kFastTileRows;
  const int64_t step = k / kFastTileCols, kk = k % kFastTileCols;
  const int64_t g = r % 8, upper = r / 8, t = kk / 4, e = kk % 4;
  const int64_t lane = g * 4 + t;
  const int64_t reg = (e / 2) * 2 + upper;  // a0, a1, a2, a3 as above
  return ((tile_row * (cols_padded / kFastTileCols) + step) * 32 + lane) * 8 + reg * 2 + e % 2;
}

// kernels.h's PermutedIndex (the lane order of a device row: 128-column groups, column
// 128 g + 32 i + t at 128 g + 4 t + i) for a column k >= 0, in 32-bit arithmetic: the int64
// form's signed divides were about 20 of the ~110 instructions of a row pair's epilogue (ncu,
// gate|up at batch 32).
inline constexpr int kFastLaneGroupCols = 128;
ROTE_HD inline int32_t FastLaneIndex(int32_t k) { return (k & ~127) + (k & 31) * 4 + ((k & 127) >> 5); }

// x == hi + mid + lo exactly, each a bf16 (the top 16 bits of an fp32): hi is x truncated to
// bf16; x - hi is exact (same sign, at most 16 significant bits left) and truncated gives mid;
// the rest has at most 8 significant bits, so it is a bf16 as it stands (for |x| >= 2^-103;
// below, lo may be an fp32 subnormal whose last bits bf16 cannot hold, and they are dropped).
// Returned as fp32 bit patterns; the kernel packs their top halves in pairs.
struct FastPieces {
  uint32_t hi, mid, lo;
};
ROTE_HD inline FastPieces FastSplit(float x) {
  using numerics::bits_from_float;
  using numerics::float_from_bits;
  const uint32_t hi = bits_from_float(x) & 0xffff0000u;
  const float rest = x - float_from_bits(hi);
  const uint32_t mid = bits_from_float(rest) & 0xffff0000u;
  return {hi, mid, bits_from_float(rest - float_from_bits(mid))};
}

// The tile layout of a row-major (rows, cols_padded) matrix of 16-bit elements; rows past the
// end (up to the next multiple of 16) are zeros.
inline std::vector<uint16_t> FastTiles(const uint16_t* rows_data, int64_t rows, int64_t cols_padded) {
  std::vector<uint16_t> tiles(static_cast<size_t>(FastTileRowsPadded(rows) * cols_padded), 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < cols_padded; ++k)
      tiles[static_cast<size_t>(FastTileIndex(r, k, cols_padded))] = rows_data[r * cols_padded + k];
  return tiles;
}

}  // namespace rote::inference::cuda
