// The fast profile's matrix product (fast_linear.h, fast_tiles.h, docs/fast_profile.md).
//
// A block is 8 warps over 16 * RT weight rows (RT tiles of fast_tiles.h) and 8 * NTK token rows;
// grid (token tiles, row tiles, K slices). The warps split the slice's 16-column steps: warp w
// takes steps w, w + 8, w + 16, ... in increasing order. Per step a lane copies (cp.async) its own
// 16 bytes of each weight tile, already in mma order, and its own token's four activations of each
// 8-token group into a private ring of 3 to 12 steps in shared memory (FastShape::kStages), so
// copies run 2 to 11 steps ahead with no synchronisation between threads. It splits the activations
// into three bf16 pieces (truncation: hi + mid + lo == x exactly) and runs mma.m16n8k16 for every
// (tile, token group): pieces lo, mid, hi in that order. The warps' sums are added through shared
// memory in warp order. The slices of a tile are one thread-block cluster: every block finishes a
// share of the tile's outputs; each pushes its sums of every share into the finishing block's inbox
// (distributed shared memory, st.async onto the inbox's mbarrier), and once its inbox is complete
// each adds the slices' sums in slice order, then applies the epilogue. The cluster keeps the
// slices' sums on chip (through global scratch, a fence and a ticket counter they cost batch 8 12%,
// H100); pushing into an inbox spares the second cluster barrier that remote reads need, and the
// inbox's mbarrier the one between the pushes and the sums. Two or three short slices (at most 6
// steps per warp) run in one block instead, warps 8 s to 8 s + 7 on slice s, adding the slices'
// sums from their own shared memory (merged slices: no cluster launch; batch 32 3% faster).
//
// One translation unit: the kernel in fast_kernel.cuh, the streaming kernel of the lm_head in
// fast_stream.cuh, the choice of block shape and the launches below.
#include "inference/cuda/fast_linear.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "inference/cuda/fast_shapes.h"
#include "inference/cuda/fast_tiles.h"
#include "inference/cuda/launch.cuh"
#include "inference/cuda/timeline.cuh"
#include "inference/cuda/wgmma.cuh"
#include "inference/numerics/canonical.h"

namespace rote::inference::cuda {
namespace {

using numerics::canonical_rms_scale;
using numerics::canonical_rotate;
using numerics::canonical_silu;

constexpr int kWarps = kFastWarps;  // per slice
constexpr int kStepCols = kFastTileCols;  // columns per step: one mma's k
// Slices: a matrix of R rows gets about kSplitTarget / ceil(R / 64) of them, never fewer than
// kFastMinStepsPerWarp steps per warp each (fast_shapes.h). A function of the shape only: it
// fixes the order of the sums, so it is part of the profile (fast5).
constexpr int kSplitTarget = kFastSplitTarget;

// CudaTuning's merged slices, negative values standing for fast_shapes.h's defaults.
int MergeMaxSlices(const CudaTuning& t) {
  return t.fast_merge_max_slices < 0 ? kFastMergeMaxSlices : t.fast_merge_max_slices;
}
int MergeMaxSteps(const CudaTuning& t) {
  return t.fast_merge_max_steps_per_warp < 0 ? kFastMergeMaxStepsPerWarp : t.fast_merge_max_steps_per_warp;
}

#include "inference/cuda/fast_kernel.cuh"
#include "inference/cuda/fast_stream.cuh"
#include "inference/cuda/fast_wgmma.cuh"

template <int WGS, int CL, bool NORM, int EPI>
cudaError_t LaunchWgmmaFor(const LinearArgs& a, int32_t splits, const uint16_t* pieces, const float* scales,
                           cudaStream_t stream) {
  using S = FastWgShape<WGS>;
  static PerDevice<cudaError_t> prepared_on;
  const cudaError_t prepared = prepared_on.Get([] {
    return cudaFuncSetAttribute(FastWgmmaKernel<WGS, CL, NORM, EPI>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                S::kSmemBytes);
  });
  if (prepared != cudaSuccess) return prepared;
  // Clusters of CL row blocks: the row blocks rounded up to whole clusters (a block past the last
  // row reads the last tile again and stores nothing).
  const unsigned row_blocks = static_cast<unsigned>((a.w.rows + S::kRows - 1) / S::kRows);
  const dim3 grid((a.tokens + kWgTokens - 1) / kWgTokens, (row_blocks + CL - 1) / CL * CL);
  if (grid.y > 65535) return cudaErrorInvalidConfiguration;
  if constexpr (CL == 1) {
    FastWgmmaKernel<WGS, CL, NORM, EPI><<<grid, S::kThreads, S::kSmemBytes, stream>>>(a, splits, pieces, scales);
    return cudaGetLastError();
  } else {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = dim3(S::kThreads);
    cfg.dynamicSmemBytes = S::kSmemBytes;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = 1;
    attr[0].val.clusterDim.y = CL;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    return cudaLaunchKernelEx(&cfg, FastWgmmaKernel<WGS, CL, NORM, EPI>, a, splits, pieces, scales);
  }
}

// The product's own epilogue compiled in where it is a common one, as LaunchFastCompiled does.
template <int WGS, int CL>
cudaError_t LaunchWgmma(const LinearArgs& a, int32_t splits, const uint16_t* pieces, const float* scales,
                        cudaStream_t stream) {
  constexpr int kRope = static_cast<int>(LinearEpilogue::kRopeStore);
  constexpr int kSilu = static_cast<int>(LinearEpilogue::kSiluMul);
  constexpr int kResidual = static_cast<int>(LinearEpilogue::kAddResidual);
  if (a.norm_weight != nullptr) {
    if (a.epilogue == LinearEpilogue::kRopeStore)
      return LaunchWgmmaFor<WGS, CL, true, kRope>(a, splits, pieces, scales, stream);
    if (a.epilogue == LinearEpilogue::kSiluMul)
      return LaunchWgmmaFor<WGS, CL, true, kSilu>(a, splits, pieces, scales, stream);
    return LaunchWgmmaFor<WGS, CL, true, -1>(a, splits, pieces, scales, stream);
  }
  if (a.epilogue == LinearEpilogue::kAddResidual)
    return LaunchWgmmaFor<WGS, CL, false, kResidual>(a, splits, pieces, scales, stream);
  return LaunchWgmmaFor<WGS, CL, false, -1>(a, splits, pieces, scales, stream);
}

// Prefill-sized products on wgmma (fast_wgmma.cuh): false where they do not run there. By
// default only where they measured faster than FastLinearKernel: unsliced products of at least
// CudaTuning::fast_wgmma_min_cols columns (7B prefill of 1,000 tokens: 5,834 -> 6,407 tok/s with
// one prompt, 4,825 -> 6,537 with four; 1.5B's products, K of 1,536 or sliced, measured 0-13%
// slower, so they keep the kernel), in blocks of 1 warpgroup, two a multiprocessor: against 4
// warpgroups a block, 7B one prompt of 256 tokens 3,660 -> 6,097 tok/s, 512 5,657 -> 7,351, 1,024
// 6,432 -> 6,609, four of 1,024 level (H200, docs/fast_profile.md).
bool LaunchFastWgmma(const LinearArgs& a, int32_t splits, const LaunchContext& ctx, cudaStream_t stream,
                     cudaError_t* error) {
  const CudaTuning& t = *ctx.tuning;
  if (t.fast_wgmma_min_tokens <= 0 || a.tokens < t.fast_wgmma_min_tokens || a.fast_scratch == nullptr) return false;
  if (FastWgmmaScratchBytes(a.tokens, a.w.cols_padded) > a.fast_scratch_bytes) return false;
  const int64_t token_tiles = (a.tokens + kWgTokens - 1) / kWgTokens;
  // Warpgroups a block (64 rows each; 3 and 4 only unsliced, the others take 2).
  int wgs = t.fast_wgmma_warpgroups;
  if (wgs == 0) {
    if (splits != 1 || a.w.cols_padded < t.fast_wgmma_min_cols) return false;
    wgs = 1;
  }
  if (wgs >= 3 && splits != 1) wgs = 2;
  if (wgs < 1 || wgs > 4) return false;
  uint16_t* pieces = static_cast<uint16_t*>(a.fast_scratch);
  float* scales = reinterpret_cast<float*>(static_cast<unsigned char*>(a.fast_scratch) +
                                           token_tiles * (a.w.cols_padded / kStepCols) * kWgStepPiecesBytes);
  if (ctx.stats != nullptr) {
    ++ctx.stats->fast_linear_launches;
    ++ctx.stats->fast_wgmma_launches;
  }
  FastPiecesKernel<<<static_cast<unsigned>(token_tiles * kWgTokens / 8), 256, 0, stream>>>(a, splits, pieces, scales);
  if ((*error = cudaGetLastError()) != cudaSuccess) return true;
  // Clusters sharing the pieces: blocks of 1 warpgroup only (the larger blocks share them already).
  const int cluster = wgs == 1 ? t.fast_wgmma_cluster : 1;
  *error = wgs == 4       ? LaunchWgmma<4, 1>(a, splits, pieces, scales, stream)
           : wgs == 3     ? LaunchWgmma<3, 1>(a, splits, pieces, scales, stream)
           : wgs == 2     ? LaunchWgmma<2, 1>(a, splits, pieces, scales, stream)
           : cluster == 4 ? LaunchWgmma<1, 4>(a, splits, pieces, scales, stream)
           : cluster == 2 ? LaunchWgmma<1, 2>(a, splits, pieces, scales, stream)
                          : LaunchWgmma<1, 1>(a, splits, pieces, scales, stream);
  return true;
}

template <int RT, int NTK>
int64_t FastBlocks(const LinearArgs& a, int32_t splits) {
  using S = FastShape<RT, NTK, false, false>;
  return static_cast<int64_t>((a.w.rows + S::kRows - 1) / S::kRows) * splits *
         ((a.tokens + S::kToks - 1) / S::kToks);
}

template <int RT, int NTK, bool NORM, bool SLICED, int SB, int EPI, bool DEEP>
cudaError_t LaunchFastCompiledFor(const LinearArgs& a, int32_t splits, const LaunchContext& ctx, cudaStream_t stream) {
  using S = FastShape<RT, NTK, NORM, SLICED, SB, DEEP>;
  const dim3 grid((a.tokens + S::kToks - 1) / S::kToks, (a.w.rows + S::kRows - 1) / S::kRows, SB > 1 ? 1 : splits);
  if (grid.y > 65535) return cudaErrorInvalidConfiguration;
  static PerDevice<cudaError_t> prepared_on;
  const cudaError_t prepared = prepared_on.Get([] {
    cudaError_t e = cudaFuncSetAttribute(FastLinearKernel<RT, NTK, NORM, SLICED, SB, EPI, DEEP>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, S::kMaxSmemBytes);
    if (e == cudaSuccess && SLICED)  // clusters of up to 16 slices (more than the portable 8)
      e = cudaFuncSetAttribute(FastLinearKernel<RT, NTK, NORM, SLICED, SB, EPI, DEEP>,
                               cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    return e;
  });
  if (prepared != cudaSuccess) return prepared;
  if (ctx.stats != nullptr) {
    ++ctx.stats->fast_linear_launches;
    if (SB > 1) ++ctx.stats->fast_merged_launches;
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(S::kThreads);
  const bool norm_staged = NORM && ctx.tuning->fast_norm_staged && FastNormStaged<S>(a.w.cols_padded);
  if (norm_staged && ctx.stats != nullptr) ++ctx.stats->fast_norm_staged_launches;
  cfg.dynamicSmemBytes = static_cast<size_t>(norm_staged ? S::kNormOffset + a.w.cols_padded * 4 : S::kSmemBytes);
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  attr[1].id = cudaLaunchAttributeClusterDimension;
  attr[1].val.clusterDim.x = 1;
  attr[1].val.clusterDim.y = 1;
  attr[1].val.clusterDim.z = static_cast<unsigned>(splits);
  cfg.attrs = attr;
  cfg.numAttrs = SLICED ? 2 : 1;  // unsliced products and merged slices launch no clusters
  return cudaLaunchKernelEx(&cfg, FastLinearKernel<RT, NTK, NORM, SLICED, SB, EPI, DEEP>, a, splits, norm_staged);
}

// The kernel with the product's epilogue compiled in where it is a common one: with the norm,
// q|k|v's rotary store and gate|up's SiLU; without, o's and down's residual. Other products (the
// lm_head, q|k|v with a separate rotary kernel) take the kernel that branches on the kind.
template <int RT, int NTK, bool NORM, bool SLICED, int SB = 1, bool DEEP = false>
cudaError_t LaunchFastCompiled(const LinearArgs& a, int32_t splits, const LaunchContext& ctx, cudaStream_t stream) {
  constexpr int kRope = static_cast<int>(LinearEpilogue::kRopeStore);
  constexpr int kSilu = static_cast<int>(LinearEpilogue::kSiluMul);
  constexpr int kResidual = static_cast<int>(LinearEpilogue::kAddResidual);
  if constexpr (NORM) {
    if (a.epilogue == LinearEpilogue::kRopeStore)
      return LaunchFastCompiledFor<RT, NTK, NORM, SLICED, SB, kRope, DEEP>(a, splits, ctx, stream);
    if (a.epilogue == LinearEpilogue::kSiluMul)
      return LaunchFastCompiledFor<RT, NTK, NORM, SLICED, SB, kSilu, DEEP>(a, splits, ctx, stream);
  } else {
    if (a.epilogue == LinearEpilogue::kAddResidual)
      return LaunchFastCompiledFor<RT, NTK, NORM, SLICED, SB, kResidual, DEEP>(a, splits, ctx, stream);
  }
  return LaunchFastCompiledFor<RT, NTK, NORM, SLICED, SB, -1, DEEP>(a, splits, ctx, stream);
}

// DEEP (two token groups, one token tile): the deep ring's instance (FastShape), merged slices
// excepted.
template <int RT, int NTK, bool DEEP = false>
cudaError_t LaunchFast(const LinearArgs& a, int32_t splits, const LaunchContext& ctx, cudaStream_t stream) {
  // Merged slices where the shape is compiled with them and they are on for this product.
  if (FastMergesSlices(a.w.cols_padded, splits, MergeMaxSlices(*ctx.tuning), MergeMaxSteps(*ctx.tuning))) {
    if constexpr (FastMergedShapeFits(RT, NTK, 2))
      if (splits == 2)
        return a.norm_weight != nullptr ? LaunchFastCompiled<RT, NTK, true, false, 2>(a, splits, ctx, stream)
                                        : LaunchFastCompiled<RT, NTK, false, false, 2>(a, splits, ctx, stream);
    if constexpr (FastMergedShapeFits(RT, NTK, 3))
      if (splits == 3)
        return a.norm_weight != nullptr ? LaunchFastCompiled<RT, NTK, true, false, 3>(a, splits, ctx, stream)
                                        : LaunchFastCompiled<RT, NTK, false, false, 3>(a, splits, ctx, stream);
  }
  // Sliced products (a cluster per tile) and the others are compiled apart: only the first need
  // the inbox and its code (registers).
  if (splits > 1)
    return a.norm_weight != nullptr ? LaunchFastCompiled<RT, NTK, true, true, 1, DEEP>(a, splits, ctx, stream)
                                    : LaunchFastCompiled<RT, NTK, false, true, 1, DEEP>(a, splits, ctx, stream);
  return a.norm_weight != nullptr ? LaunchFastCompiled<RT, NTK, true, false, 1, DEEP>(a, splits, ctx, stream)
                                  : LaunchFastCompiled<RT, NTK, false, false, 1, DEEP>(a, splits, ctx, stream);
}

// The instantiated block shapes, by value. Two token groups over at most 16 tokens (one token
// tile) take the deep ring (FastShape's DEEP).
cudaError_t LaunchFastShape(int rt, int ntk, const LinearArgs& a, int32_t splits, const LaunchContext& ctx, cudaStream_t stream) {
  if (ntk == 2 && a.tokens <= 16) switch (rt) {
      case 1: return LaunchFast<1, 2, true>(a, splits, ctx, stream);
      case 2: return LaunchFast<2, 2, true>(a, splits, ctx, stream);
      case 3: return LaunchFast<3, 2, true>(a, splits, ctx, stream);
      case 4: return LaunchFast<4, 2, true>(a, splits, ctx, stream);
      case 5: return LaunchFast<5, 2, true>(a, splits, ctx, stream);
      case 6: return LaunchFast<6, 2, true>(a, splits, ctx, stream);
      default: return cudaErrorInvalidValue;
    }
  switch (10 * ntk + rt) {
    case 11: return LaunchFast<1, 1>(a, splits, ctx, stream);
    case 12: return LaunchFast<2, 1>(a, splits, ctx, stream);
    case 13: return LaunchFast<3, 1>(a, splits, ctx, stream);
    case 14: return LaunchFast<4, 1>(a, splits, ctx, stream);
    case 15: return LaunchFast<5, 1>(a, splits, ctx, stream);
    case 16: return LaunchFast<6, 1>(a, splits, ctx, stream);
    case 21: return LaunchFast<1, 2>(a, splits, ctx, stream);
    case 22: return LaunchFast<2, 2>(a, splits, ctx, stream);
    case 23: return LaunchFast<3, 2>(a, splits, ctx, stream);
    case 24: return LaunchFast<4, 2>(a, splits, ctx, stream);
    case 25: return LaunchFast<5, 2>(a, splits, ctx, stream);
    case 26: return LaunchFast<6, 2>(a, splits, ctx, stream);
    case 41: return LaunchFast<1, 4>(a, splits, ctx, stream);
    case 42: return LaunchFast<2, 4>(a, splits, ctx, stream);
    case 43: return LaunchFast<3, 4>(a, splits, ctx, stream);
    case 44: return LaunchFast<4, 4>(a, splits, ctx, stream);
    default: return cudaErrorInvalidValue;
  }
}

template <int NTK>
cudaError_t LaunchFastRows(const LinearArgs& a, int32_t splits, const LaunchContext& ctx, cudaStream_t stream) {
  // The most weight rows per block (each activation read serves more rows) whose grid still
  // gives every multiprocessor a block; else one tile per block.
  // A forced row tile (CudaTuning::fast_row_tiles) of more than 4 has no 32-token shape: 16 tokens then.
  const int forced = ctx.tuning->fast_row_tiles;
  if (forced > 0) return LaunchFastShape(forced, NTK == 4 && forced > 4 ? 2 : NTK, a, splits, ctx, stream);
  const int64_t want = static_cast<int64_t>(MultiprocessorCount());
  if (FastBlocks<4, NTK>(a, splits) >= want) return LaunchFast<4, NTK>(a, splits, ctx, stream);
  if (FastBlocks<2, NTK>(a, splits) >= want) return LaunchFast<2, NTK>(a, splits, ctx, stream);
  return LaunchFast<1, NTK>(a, splits, ctx, stream);
}

}  // namespace

int64_t FastWgmmaScratchBytesFor(int32_t tokens, int32_t cols_padded) { return FastWgmmaScratchBytes(tokens, cols_padded); }

int32_t FastLinearSplits(int32_t rows, int32_t cols_padded) { return FastLinearSplitsFor(rows, cols_padded, kSplitTarget); }

FastLinearShape ChooseFastLinearShape(int32_t rows, int32_t cols_padded, int32_t tokens, int32_t multiprocessors,
                                      const CudaTuning& tuning) {
  const int32_t splits = FastLinearSplits(rows, cols_padded);
  return ChooseFastLinearShapeFor(rows, tokens, splits, multiprocessors,
                                  FastMergesSlices(cols_padded, splits, MergeMaxSlices(tuning), MergeMaxSteps(tuning)));
}

bool CanRunFastLinear(const LinearArgs& a) {
  if (a.w.type != WeightType::kBF16 || a.w.fast_tiles == nullptr) return false;
  // The rotary epilogue finishes rotary pairs, which are row pairs (n, n + 1), n even.
  if (a.epilogue == LinearEpilogue::kRopeStore &&
      (a.w.rows % 2 != 0 || a.rope.head_dim % 2 != 0 || a.rope.head_dim <= 0 || a.rope.block_size <= 0))
    return false;
  if (a.w.cols_padded % kStepCols != 0 || a.tokens < 1 || a.w.rows < 1) return false;
  if (a.x_stride % 4 != 0) return false;  // 16-byte activation copies
  // 32-bit activation offsets: rows (x_rows index the step's token rows; a step never holds
  // 65,536 of them) times the stride must stay below 2^31 floats.
  if (a.tokens > FastLinearMaxTokens(a.x_stride)) return false;
  return true;
}

cudaError_t LaunchFastLinear(const LinearArgs& args, const LaunchContext& ctx, cudaStream_t stream) {
  if (!CanRunFastLinear(args)) return cudaErrorInvalidValue;
  const int32_t splits = FastLinearSplits(args.w.rows, args.w.cols_padded);
  LinearArgs a = args;
  // Late blocks' first weights (kernels.h): gate|up, behind o's merged blocks. (q|k|v, behind
  // down, measured no faster with it.)
  a.prefetch_early_blocks = 0;
  if (a.norm_weight != nullptr && a.epilogue == LinearEpilogue::kSiluMul && splits == 1 &&
      (a.prefetch_early_blocks = LatePrefetchEarlyBlocks(a.tokens, *ctx.tuning)) > 0 && ctx.stats != nullptr)
    ++ctx.stats->late_prefetch_launches;
  if (cudaError_t e; LaunchFastStream(a, splits, ctx, stream, &e)) return e;
  if (cudaError_t e; LaunchFastWgmma(a, splits, ctx, stream, &e)) return e;
  // Token tiles of 8 rows for a batch of up to 8; 16 up to 32 (two blocks share each weight
  // tile through L2, and each warp's chain of dependent instructions halves: measured faster at
  // batch 32 than 32-row tiles); 32 beyond.
  const int token_tile = ctx.tuning->fast_token_tile, row_tiles = ctx.tuning->fast_row_tiles;
  const int tokens = token_tile > 0 ? std::min(a.tokens, token_tile) : a.tokens;
  if (tokens <= 64 && row_tiles == 0 && token_tile == 0) {
    const FastLinearShape c =
        ChooseFastLinearShape(a.w.rows, a.w.cols_padded, tokens, MultiprocessorCount(), *ctx.tuning);
    return LaunchFastShape(c.row_tiles, c.token_groups, a, splits, ctx, stream);
  }
  // Prefill (and forced tiles):
  if (tokens <= 8) return LaunchFastRows<1>(a, splits, ctx, stream);
  // A matrix of so many rows (the lm_head) that 64-row blocks give every multiprocessor 8 of
  // them: one 32-token block reads each weight once, where two 16-token ones would read it twice
  // through L2 (which ncu had 75% busy there). Batch 32 +2% (H100).
  if (tokens > 16 && tokens <= 32 && row_tiles == 0 && token_tile == 0 &&
      FastBlocks<4, 4>(a, splits) >= 8 * static_cast<int64_t>(MultiprocessorCount()))
    return LaunchFast<4, 4>(a, splits, ctx, stream);
  if (tokens <= 32) return LaunchFastRows<2>(a, splits, ctx, stream);
  return LaunchFastRows<4>(a, splits, ctx, stream);
}

cudaError_t SetFastLinearTimeline(KernelTimeline* device_buffer, cudaStream_t stream) {
#ifdef ROTE_CUDA_TIMELINE
  return cudaMemcpyToSymbolAsync(g_timeline, &device_buffer, sizeof(device_buffer), 0, cudaMemcpyHostToDevice, stream);
#else
  (void)stream;
  return device_buffer == nullptr ? cudaSuccess : cudaErrorNotSupported;
#endif
}

}  // namespace rote::inference::cuda
