// How many blocks attend each head of a long context (docs/cuda.md, "Long contexts"): a pure
// function of the model's heads and the grid, shared by the kernels and by host-side tests.
// Compiles under g++ and nvcc, with no CUDA headers.
#pragma once

#if defined(__CUDACC__)
#define ROTE_PARTS_HD __host__ __device__
#else
#define ROTE_PARTS_HD
#endif

namespace rote::inference::cuda {

// The most blocks per head: the stride of the parts' scratch (maxes, V partials).
inline constexpr int kMaxAttentionParts = 8;

// Blocks per head: `requested` (8, 4 or 2) where heads x requested blocks fit in `blocks`, else
// (requested anything else, 0 by default) 8 or 4, the most that fit; 0 where none does (the
// caller then attends each head in one block). Never 2 unless asked: with two parts each thread
// walks four position classes one after another, and 1.5B batch 1 at 1,000-1,072 positions
// measured 14% slower than without parts (H100; 4 parts 10% faster, 8 parts 25%).
ROTE_PARTS_HD inline int AttentionPartsFor(int requested, int heads, int blocks) {
  if (requested == 8 || requested == 4 || requested == 2) return heads * requested <= blocks ? requested : 0;
  if (heads * kMaxAttentionParts <= blocks) return kMaxAttentionParts;
  return heads * 4 <= blocks ? 4 : 0;
}

}  // namespace rote::inference::cuda

#undef ROTE_PARTS_HD
