// The canonical tree (docs/numerics.md section 2) built one class at a time: the 32 class sums in
// the order j = 0..31 of class bitrev5(j), each folded into the tree as it finishes. Shared by the
// CUDA kernels that sum that way (attention_tile.cuh) and by host-side tests; no CUDA headers.
#pragma once

#include "inference/numerics/canonical.h"  // ROTE_HD

namespace rote::inference::cuda {

// The class summed j-th: 0, 16, 8, 24, 4, 20, ... (the bits of j reversed).
ROTE_HD constexpr int Bitrev5(int j) {
  return ((j & 1) << 4) | ((j & 2) << 2) | (j & 4) | ((j & 8) >> 2) | ((j & 16) >> 4);
}

// The tree levels that finishing the j-th class completes: j's trailing one bits.
ROTE_HD constexpr int TrailingOnes(int j) { return j & 1 ? 1 + TrailingOnes(j >> 1) : 0; }

// Folds the j-th class's finished sum `v` into the tree: a binary counter over j, where
// pending[level * stride] holds the left subtree whose right sibling was being summed. Consecutive
// j differ in their lowest bit, the highest bit of the class, so the first carry adds classes l
// and l + 16, the next l and l + 8, ...: each addition is one the tree makes (IEEE addition
// commutes). Returns true after j = 31, with the whole tree in `v` (canonical_tree32's acc[0]).
ROTE_HD inline bool TreeFold(float& v, float* pending, int stride, int j) {
  int level = 0;
  while (level < 5 && ((j >> level) & 1)) {
    v = pending[level * stride] + v;
    ++level;
  }
  if (level < 5) {
    pending[level * stride] = v;
    return false;
  }
  return true;
}

}  // namespace rote::inference::cuda
