// The host side of a weight upload: a source row into a device row's lane order (kernels.h's
// PermutedIndex), and a bf16 matrix into the fast profile's tiles (fast_tiles.h's FastTileIndex),
// rows split over a thread pool. Every output element has one source element, so the bytes do not
// depend on the threads (tested against the element-by-element definitions). Host only.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "inference/cuda/fast_tiles.h"
#include "inference/util/thread_pool.h"

namespace rote::inference::cuda {

// Source row `src` of `cols` elements of `esize` bytes (2 or 4; others element by element) to
// `dst`, a device row whose element k sits at PermutedIndex(k) (128-column groups, column
// 128 g + 32 i + t at 128 g + 4 t + i). The padding of dst is left as it is.
inline void RowToLaneOrder(const uint8_t* src, int64_t cols, int esize, uint8_t* dst) {
  auto typed = [&](auto zero) {
    using T = decltype(zero);
    const T* s = reinterpret_cast<const T*>(src);
    T* d = reinterpret_cast<T*>(dst);
    int64_t k = 0;
    for (; k + 128 <= cols; k += 128)  // whole groups: no bounds in the inner loop
      for (int w = 0; w < 128; ++w) std::memcpy(d + k + (w & 31) * 4 + (w >> 5), s + k + w, sizeof(T));
    for (; k < cols; ++k) {
      const int64_t w = k % 128;
      std::memcpy(d + (k - w) + (w & 31) * 4 + (w >> 5), s + k, sizeof(T));
    }
  };
  if (esize == 2) {
    typed(uint16_t{});
  } else if (esize == 4) {
    typed(uint32_t{});
  } else {
    for (int64_t k = 0; k < cols; ++k) {
      const int64_t w = k % 128;
      std::memcpy(dst + ((k - w) + (w & 31) * 4 + (w >> 5)) * esize, src + k * esize, static_cast<size_t>(esize));
    }
  }
}

// FastTiles (fast_tiles.h) with the row tiles split over `pool` (nullptr: this thread).
inline std::vector<uint16_t> FastTilesOnPool(const uint16_t* rows_data, int64_t rows, int64_t cols_padded,
                                             ThreadPool* pool) {
  std::vector<uint16_t> tiles(static_cast<size_t>(FastTileRowsPadded(rows) * cols_padded), 0);
  const int64_t row_tiles = (rows + kFastTileRows - 1) / kFastTileRows;
  auto fill = [&](int64_t begin, int64_t end) {
    for (int64_t rt = begin; rt < end; ++rt)
      for (int64_t r = rt * kFastTileRows; r < rows && r < (rt + 1) * kFastTileRows; ++r)
        for (int64_t k = 0; k < cols_padded; ++k)
          tiles[static_cast<size_t>(FastTileIndex(r, k, cols_padded))] = rows_data[r * cols_padded + k];
  };
  if (pool != nullptr) {
    pool->ParallelFor(row_tiles, fill);
  } else {
    fill(0, row_tiles);
  }
  return tiles;
}

}  // namespace rote::inference::cuda
