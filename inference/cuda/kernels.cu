// Kernels of the exact profile. Built with -fmad=false -prec-div=true -prec-sqrt=true: every
// fma below is written as fmaf, every other operation rounds once, in the order written, which
// is the order docs/numerics.md gives and the CPU backend follows.
//
// One translation unit, by operation: the device helpers every family shares (below), then
//   linear.cuh        one-token products (register tile, register ring, bulk copies, MLP block)
//   tiled_linear.cuh  batched products in shared-memory tiles, and the choice among all products
//   small_ops.cuh     RMSNorm, the embedding, rotary and the KV store
//   attention.cuh     attention of a step's tokens, and of a KV head's query heads together
//   step.cuh          the one-launch decode step, and attention over parts of a long context
//   argmax.cuh        the greedy argmax
// and the launchers of kernels.h at the end. The one-launch step runs the products' and
// attention's device code, so the families compile together, each part seeing those before it.
#include "inference/cuda/kernels.h"
#include "inference/cuda/attention_parts.h"
#include "inference/cuda/class_fold.h"
#include "inference/cuda/fast_linear.h"
#include "inference/cuda/launch.cuh"
#include "inference/cuda/weights4.cuh"
#include "inference/cuda/timeline.cuh"

#include <cuda_fp16.h>  // __half2float: the exact fp16 -> fp32 widening
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <type_traits>

#include "inference/numerics/canonical.h"

namespace rote::inference::cuda {
namespace {

using numerics::canonical_expf;
using numerics::canonical_softcap;
using numerics::canonical_rms_scale;
using numerics::canonical_rotate;
using numerics::canonical_silu;

constexpr int kWarps = 4;  // warps per block of the matrix and attention kernels
constexpr int kThreads = kWarps * 32;

// The canonical tree of docs/numerics.md section 2 (commutativity makes the xor butterfly
// compute acc[l] + acc[l + off] for every l < off; every lane ends with the result).
__device__ __forceinline__ float WarpTree(float v) {
#pragma unroll
  for (int off = 16; off >= 1; off >>= 1) v = v + __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int off = 16; off >= 1; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}


// The benchmarks' kernel timeline: timeline.cuh.

template <WeightType T>
constexpr int kWeightBytes = T == WeightType::kF32 ? 4 : 2;

// A lane's raw weights through the read-only path; with evict_first, hinted.
__device__ __forceinline__ uint2 LoadWeights(const uint2* p, bool evict_first, uint64_t policy) {
  if (!evict_first) return __ldg(p);
  uint2 v;
  asm volatile("ld.global.nc.L2::cache_hint.v2.u32 {%0, %1}, [%2], %3;" : "=r"(v.x), "=r"(v.y) : "l"(p), "l"(policy));
  return v;
}
__device__ __forceinline__ float4 LoadWeights(const float4* p, bool evict_first, uint64_t policy) {
  if (!evict_first) return __ldg(p);
  float4 v;
  asm volatile("ld.global.nc.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, [%4], %5;"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "l"(p), "l"(policy));
  return v;
}

// Tile shapes (rows per warp, tokens per block) by batch size, and how many 128-column groups
// of loads a lane issues before their first use: batch-1 decode is a pure stream of the
// weights and needs many bytes in flight; larger tiles have enough independent FMAs.
template <int ROWS, int TOKS>
constexpr int kUnroll = ROWS * TOKS == 1 ? 8 : TOKS == 1 ? 4 : ROWS * TOKS <= 8 ? 2 : 1;

__device__ __forceinline__ float4 NormScale(float4 v, float r, float4 w) {
  return make_float4((v.x * r) * w.x, (v.y * r) * w.y, (v.z * r) * w.z, (v.w * r) * w.w);
}

// The canonical sum of squares of a lane row (its lane's share; WarpTree finishes it): lane t
// takes its four terms of each 128-column group in increasing k.
// UNROLL: 0 leaves the unrolling to the compiler.
template <int UNROLL = 0>
__device__ __forceinline__ float LaneRowSumSquares(const float4* row, int groups, int lane) {
  float ss = 0.0f;
  if constexpr (UNROLL > 0) {
#pragma unroll UNROLL
    for (int g = 0; g < groups; ++g) {
      const float4 v = row[g * 32 + lane];
      ss = fmaf(v.x, v.x, ss);
      ss = fmaf(v.y, v.y, ss);
      ss = fmaf(v.z, v.z, ss);
      ss = fmaf(v.w, v.w, ss);
    }
  } else {
    for (int g = 0; g < groups; ++g) {
      const float4 v = row[g * 32 + lane];
      ss = fmaf(v.x, v.x, ss);
      ss = fmaf(v.y, v.y, ss);
      ss = fmaf(v.z, v.z, ss);
      ss = fmaf(v.w, v.w, ss);
    }
  }
  return ss;
}

// An attention score as the CPU's attention makes it: the scaled dot, then the model's soft cap
// (AttentionShape::softcap) where it has one.
__device__ __forceinline__ float AttnScore(float dot, float scale, float softcap) {
  const float s = dot * scale;
  return softcap > 0.0f ? canonical_softcap(s, softcap) : s;
}

#include "inference/cuda/linear.cuh"
#include "inference/cuda/ring_gemv.cuh"
#include "inference/cuda/tiled_linear.cuh"
#include "inference/cuda/small_ops.cuh"
#include "inference/cuda/attention.cuh"
#include "inference/cuda/attention_tile.cuh"
#include "inference/cuda/step.cuh"
#include "inference/cuda/argmax.cuh"

}  // namespace

bool CanRunAttentionParts(const StepTokens& step, const AttentionShape& shape, int32_t max_context, int32_t parts) {
  return CanRunAttentionPartsImpl(step, shape, max_context, parts);
}
cudaError_t LaunchAttentionParts(const float* q, const StepTokens& step, const AttentionShape& shape, LayerKv kv,
                                 float scale, int32_t max_context, float* out, const AttentionParts& parts,
                                 const LaunchContext& ctx, cudaStream_t stream) {
  return LaunchAttentionPartsImpl(q, step, shape, kv, scale, max_context, out, parts, ctx, stream);
}

int LatePrefetchEarlyBlocks(int32_t tokens, const CudaTuning& tuning) {
  if (tuning.late_prefetch_blocks >= 0) return tuning.late_prefetch_blocks;
  // Batches of 1 and 8 measured slower with it (their grids leave few blocks late, and the
  // prefetches only add traffic): 17 to 64 tokens.
  return tokens > 16 && tokens <= 64 ? std::max(1, MultiprocessorCount() / 4) : 0;
}
cudaError_t SetKernelTimeline(KernelTimeline* device_buffer, cudaStream_t stream) {
#ifdef ROTE_CUDA_TIMELINE
  const cudaError_t e =
      cudaMemcpyToSymbolAsync(g_timeline, &device_buffer, sizeof(device_buffer), 0, cudaMemcpyHostToDevice, stream);
  return e != cudaSuccess ? e : SetFastLinearTimeline(device_buffer, stream);
#else
  (void)stream;
  return device_buffer == nullptr ? cudaSuccess : cudaErrorNotSupported;
#endif
}

bool CanFuseRope(const LinearArgs& a, const CudaTuning& tuning) {
  const int variant = SeparateKernelVariant(tuning);
  if (a.tokens != 1 || variant == 1 || variant == 2 || a.w.rows >= 65536 || a.w.rows % 2 != 0) return false;
  if (variant == 3) return a.w.type != WeightType::kF32;  // the ring (RingGemvKernel) takes row pairs
  const int64_t esize = a.w.type == WeightType::kF32 ? 4 : 2;
  const int64_t smem = static_cast<int64_t>(kWarps) * 2 * a.w.cols_padded * esize + int64_t{a.w.cols_padded} * 4;
  return smem <= kTmaGemvMaxSmem && static_cast<int64_t>(a.w.cols_padded) * 4 <= kGemvMaxSmem;
}

cudaError_t LaunchLinear(const LinearArgs& args_in, const LaunchContext& ctx, cudaStream_t stream) {
  if (args_in.tokens <= 0) return cudaSuccess;
  LinearArgs args = args_in;
  args.weight_evict_first = args.weight_evict_first || ctx.tuning->weight_evict_first;
  switch (args.w.type) {
    case WeightType::kBF16:
      return LaunchLinearTyped<WeightType::kBF16>(args, ctx, stream);
    case WeightType::kF16:
      return LaunchLinearTyped<WeightType::kF16>(args, ctx, stream);
    case WeightType::kF32:
      return LaunchLinearTyped<WeightType::kF32>(args, ctx, stream);
  }
  return cudaErrorInvalidValue;
}

int32_t GroupedTileTokens(int32_t tokens, int32_t groups) { return GroupedTile(tokens, groups); }

cudaError_t LaunchGroupedLinear(const LinearArgs& args_in, const LaunchContext& ctx, cudaStream_t stream) {
  if (args_in.tokens <= 0) return cudaSuccess;
  const LinearArgs& a = args_in;
  if (a.groups <= 0 || a.group_first == nullptr || a.group_tiles == nullptr || a.norm_weight != nullptr ||
      a.epilogue == LinearEpilogue::kRopeStore || a.epilogue == LinearEpilogue::kSiluMul)
    return cudaErrorInvalidValue;
  switch (a.w.type) {
    case WeightType::kBF16:
      return LaunchGroupedTyped<WeightType::kBF16>(a, ctx, stream);
    case WeightType::kF16:
      return LaunchGroupedTyped<WeightType::kF16>(a, ctx, stream);
    case WeightType::kF32:
      return LaunchGroupedTyped<WeightType::kF32>(a, ctx, stream);
  }
  return cudaErrorInvalidValue;
}

bool CanRunMlpBlock(const MlpBlockArgs& f, const CudaTuning& tuning) {
  const int variant = SeparateKernelVariant(tuning);
  if (variant != 5 && variant != 0) return false;
  const int64_t eb = f.out.w.type == WeightType::kF32 ? 4 : 2;
  // By default only where gate|up does not fit in one wave of shared memory (about 160 KB per
  // multiprocessor): there the persistent ring streams it faster than waves of blocks do; a
  // matrix that fits is already requested whole, before the previous kernel ends (TmaGemvKernel).
  // Measured on an H100 (docs/performance.md): 1.5B +8%, 0.5B -15%.
  const int64_t gate_up_bytes = int64_t{f.gate_up.w.rows} * f.gate_up.w.cols_padded * eb;
  if (variant == 0 && gate_up_bytes <= int64_t{MultiprocessorCount()} * kMlpRingBytes) return false;
  if (f.out.tokens != 1 || f.gate_up.tokens != 1 || f.down.tokens != 1 || f.barrier == nullptr) return false;
  if (f.gate_up.norm_weight == nullptr || f.gate_up.epilogue != LinearEpilogue::kSiluMul) return false;  // norm fused
  if (f.out.w.type != f.gate_up.w.type || f.out.w.type != f.down.w.type || f.gate_up.w.rows % 4 != 0) return false;
  return PlanMlpBlock(f, 4).warps > 0;
}

cudaError_t LaunchMlpBlock(const MlpBlockArgs& f, const CudaTuning& tuning, cudaStream_t stream) {
  if (!CanRunMlpBlock(f, tuning)) return cudaErrorInvalidValue;
  switch (f.out.w.type) {
    case WeightType::kBF16:
      return LaunchMlpBlockTyped<WeightType::kBF16>(f, tuning, stream);
    case WeightType::kF16:
      return LaunchMlpBlockTyped<WeightType::kF16>(f, tuning, stream);
    case WeightType::kF32:
      return LaunchMlpBlockTyped<WeightType::kF32>(f, tuning, stream);
  }
  return cudaErrorInvalidValue;
}

bool CanRunDecodeStep(const DecodeStepArgs& f, const StepLayerArgs& l0, const CudaTuning& tuning) {
  const int variant = tuning.one_token_kernel;
  if (variant != 0 && variant != 7 && variant != 9 && variant != 10) return false;
  if (f.layers == nullptr || f.num_layers < 1 || f.barrier == nullptr || f.step.tokens != 1) return false;
  const WeightType wt = l0.qkv.w.type;
  for (const LinearArgs* a : {&l0.qkv, &l0.out, &l0.gate_up, &l0.down, &f.lm_head})
    if (a->tokens != 1 || a->w.type != wt) return false;
  if (l0.qkv.epilogue != LinearEpilogue::kRopeStore || l0.qkv.w.rows % 2 != 0) return false;
  if (l0.gate_up.epilogue != LinearEpilogue::kSiluMul || l0.gate_up.w.rows % 2 != 0) return false;
  if (l0.out.epilogue != LinearEpilogue::kAddResidual || l0.down.epilogue != LinearEpilogue::kAddResidual) return false;
  if (f.lm_head.epilogue != LinearEpilogue::kStore) return false;
  // The phases' fused norms are fixed in the kernel (StepMatrixPhase's NORM).
  if (l0.qkv.norm_weight == nullptr || l0.gate_up.norm_weight == nullptr || f.lm_head.norm_weight == nullptr ||
      l0.out.norm_weight != nullptr || l0.down.norm_weight != nullptr)
    return false;
  // By default only where gate|up exceeds one wave of shared memory (the rule of MlpBlockKernel):
  // there the ring that runs across barriers streams the step's weights faster than separate
  // launches; where a layer's matrices fit in one wave, separate launches with programmatic
  // dependent launch request each whole matrix early and measured faster. H100, side by side
  // (docs/performance.md): the one launch is 14% faster at 1.5B batch 1, 3.5% slower at 0.5B.
  const int64_t gate_up_bytes = int64_t{l0.gate_up.w.rows} * l0.gate_up.w.cols_padded * kWeightBytes<WeightType::kBF16> *
                                (wt == WeightType::kF32 ? 2 : 1);
  if (variant == 0 && gate_up_bytes <= int64_t{MultiprocessorCount()} * kMlpRingBytes) return false;
  const AttentionShape& s = f.shape;
  if (s.head_dim > kMaxHeadDim || s.head_dim % 8 != 0 || s.block_size < 8 || s.num_kv_heads < 1 ||
      s.num_heads % s.num_kv_heads != 0)
    return false;
  return PlanDecodeStep(f, l0).slots >= kStepWarps;
}

cudaError_t LaunchDecodeStep(const DecodeStepArgs& f, const StepLayerArgs& l0, const CudaTuning& tuning,
                             cudaStream_t stream) {
  if (!CanRunDecodeStep(f, l0, tuning)) return cudaErrorInvalidValue;
  const DecodeStepPlan p = PlanDecodeStep(f, l0);
  switch (l0.qkv.w.type) {
    case WeightType::kBF16:
      return LaunchDecodeStepTyped<WeightType::kBF16>(f, p, tuning, stream);
    case WeightType::kF16:
      return LaunchDecodeStepTyped<WeightType::kF16>(f, p, tuning, stream);
    case WeightType::kF32:
      return LaunchDecodeStepTyped<WeightType::kF32>(f, p, tuning, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchEmbed(const DeviceMatrix& embed, const int32_t* tokens, int32_t num_tokens, float* out,
                        int32_t out_stride, cudaStream_t stream) {
  if (num_tokens <= 0) return cudaSuccess;
  switch (embed.type) {
    case WeightType::kBF16:
      return LaunchChained(EmbedKernel<WeightType::kBF16>, dim3(num_tokens), dim3(256), 0, stream, embed.data,
                           embed.cols_padded, tokens, out, out_stride);
    case WeightType::kF16:
      return LaunchChained(EmbedKernel<WeightType::kF16>, dim3(num_tokens), dim3(256), 0, stream, embed.data,
                           embed.cols_padded, tokens, out, out_stride);
    case WeightType::kF32:
      return LaunchChained(EmbedKernel<WeightType::kF32>, dim3(num_tokens), dim3(256), 0, stream, embed.data,
                           embed.cols_padded, tokens, out, out_stride);
  }
  return cudaGetLastError();
}

cudaError_t LaunchRopeStore(const float* qkv, const StepTokens& step, const AttentionShape& shape,
                            const float* q_norm, const float* k_norm, float norm_eps, const float* rope_cos,
                            const float* rope_sin, float* q_out, LayerKv kv, cudaStream_t stream) {
  if (step.tokens <= 0) return cudaSuccess;
  if (shape.head_dim > kMaxHeadDim || shape.head_dim % 8 != 0) return cudaErrorInvalidValue;
  const dim3 grid((shape.num_heads + shape.num_kv_heads + kWarps - 1) / kWarps, step.tokens);
  return LaunchChained(RopeStoreKernel, grid, dim3(kThreads), 0, stream, qkv, step, shape, q_norm, k_norm, norm_eps,
                       rope_cos, rope_sin, q_out, kv);
}

// Scores of max_context positions, then the block table: ceil(max_context / block_size) ids,
// within max_context / 8 + 2 for block sizes of 8 or more (LaunchAttention checks).
int64_t AttentionSharedBytes(int32_t max_context) {
  return static_cast<int64_t>(max_context) * sizeof(float) + (max_context / 8 + 2) * sizeof(int32_t);
}

// The K/V rows in shared memory (AttentionKernel<..., SM>): at most this much, so that the
// products' blocks still find room beside the attention blocks.
constexpr int64_t kAttnKvStageMaxBytes = 160 * 1024;
int64_t AttentionKvStageBytes(int32_t max_context, int32_t head_dim) {
  return (AttnKvStageOffset(max_context) + int64_t{2} * max_context * head_dim) * static_cast<int64_t>(sizeof(float));
}

cudaError_t PrepareAttention(int32_t max_context) {
  const int bytes = static_cast<int>(AttentionSharedBytes(max_context));
  for (auto* kernel : {AttentionKernel<1, 0>, AttentionKernel<2, 0>, AttentionKernel<AttnGroups(kMaxHeadDim), 0>,
                       AttentionKernel<1, 8>, AttentionKernel<2, 8>, AttentionKernel<AttnGroups(kMaxHeadDim), 4>,
                       AttentionKernel<1, 2>, AttentionKernel<2, 2>, AttentionKernel<AttnGroups(kMaxHeadDim), 1>}) {
    const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (e != cudaSuccess) return e;
  }
  for (auto* kernel : {GroupAttentionKernel<64>, GroupAttentionKernel<128>}) {
    const cudaError_t e =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kGroupAttnMaxSmem));
    if (e != cudaSuccess) return e;
  }
  // The query tiles' kernel where its block table fits (AttentionTilesPay leaves longer contexts
  // to the other kernels).
  for (auto* kernel : {TileAttentionKernel<64, 1>, TileAttentionKernel<64, 2>}) {
    const cudaError_t e = cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
        static_cast<int>(std::min(TileAttnLayout<64>::Bytes(max_context, 8), kTileAttnMaxSmem)));
    if (e != cudaSuccess) return e;
  }
  for (auto* kernel : {TileAttentionKernel<128, 1>, TileAttentionKernel<128, 2>}) {
    const cudaError_t e = cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
        static_cast<int>(std::min(TileAttnLayout<128>::Bytes(max_context, 8), kTileAttnMaxSmem)));
    if (e != cudaSuccess) return e;
  }
  return cudaFuncSetAttribute(AttentionKernel<1, 2, false, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              static_cast<int>(kAttnKvStageMaxBytes));
}

cudaError_t LaunchAttention(const float* q, const StepTokens& step, const AttentionShape& shape, LayerKv kv,
                            float scale, int32_t max_context, float* out, int32_t out_stride,
                            const LaunchContext& ctx, cudaStream_t stream) {
  if (step.tokens <= 0) return cudaSuccess;
  if (shape.head_dim > kMaxHeadDim || shape.head_dim % 8 != 0 || shape.block_size < 8) return cudaErrorInvalidValue;
  const dim3 grid(shape.num_heads, step.tokens);
  // By default, at head_dim <= 64, batches of 2 positions for grids of up to 8 blocks per
  // multiprocessor (decode: at batch 1 they beat the 8-deep batches by 2.6% once the weight stream
  // stopped evicting the K/V rows (H200), the shorter code being the likely reason: these blocks
  // start with cold instruction caches); otherwise the 8-deep batches where the grid is one block per
  // multiprocessor or less (each block's chain is the step's critical path), the plain loops
  // elsewhere (prefill, where occupancy matters more). Measured in performance.md.
  // Before those, the K/V rows in shared memory (variant 9) where the grid has at most one block
  // per four multiprocessors, head_dim <= 64, and max_context rows of them fit (kAttnKvStageMaxBytes:
  // contexts of up to 256 positions with graphs, whose context is bucketed). H100, side by side:
  // 0.5B batch 1 5.5% faster; at batch 8 (112 blocks) 1% slower, the staged rows' shared memory
  // keeping the products' blocks off those multiprocessors, hence the limit.
  const int blocks = shape.num_heads * step.tokens;
  const bool kv_stage_fits = shape.head_dim <= kAttnWarps * 8 &&
                             AttentionKvStageBytes(max_context, shape.head_dim) <= kAttnKvStageMaxBytes;
  // Where the grid has at most one block per multiprocessor and the context is long, the 8-deep
  // batches again: at 1,000 positions, 0.5B batch 1, they measured 10% faster than batches of 2
  // (H100); at contexts of up to 256 positions batches of 2 won (batch 8 by 2.6%).
  const bool short_context = max_context <= 256;
  const int forced = ctx.tuning->attention_variant;
  const int variant = forced >= 0 ? forced
                      : 4 * blocks <= MultiprocessorCount() && kv_stage_fits              ? 9
                      : blocks <= MultiprocessorCount() && !short_context                 ? 2
                      : blocks <= 8 * MultiprocessorCount() && shape.head_dim <= kAttnWarps * 8 ? 5
                      : blocks <= MultiprocessorCount()                                   ? 2
                                                                                                 : 0;
  // Steps whose grid of (query head, token) blocks more than fills the device: the query heads
  // of a KV head share one block and one staging of its K/V rows (variant 10), in as many parts
  // per KV head as leave about one block per multiprocessor. Same bits. 0.5B side by side, H200:
  // fast profile batch 32 5.0% faster, 64 6.8%, 1,000-token prefill 14.5%; exact batch 32 2.3%,
  // 64 3.4%; batch 8 (parts of one head: no sharing) keeps the rules below.
  const int group_size = shape.num_kv_heads > 0 ? shape.num_heads / shape.num_kv_heads : 1;
  const int group_parts = static_cast<int>(std::max<int64_t>(
      1, MultiprocessorCount() / std::max<int64_t>(1, int64_t{shape.num_kv_heads} * step.tokens)));
  GroupAttentionPlan plan;
  auto AttentionLatePrefetch = [&ctx](int32_t tokens) {
    const int early = LatePrefetchEarlyBlocks(tokens, *ctx.tuning);
    if (early > 0 && ctx.stats != nullptr) ++ctx.stats->late_prefetch_launches;
    return static_cast<int32_t>(early);
  };
  const bool grouped = variant == 10 || variant == 11 ||
                       (forced < 0 && group_parts < group_size);
  if (grouped && PlanGroupAttention(shape, max_context, &plan, variant == 11 ? 1 : group_parts))
    return LaunchChained(shape.head_dim == 64 ? GroupAttentionKernel<64> : GroupAttentionKernel<128>,
                         dim3(shape.num_kv_heads * plan.hsplit, step.tokens), dim3(kAttnThreads), plan.smem, stream, q,
                         step, shape, kv, scale, out, out_stride, max_context, plan.hsplit, plan.chunk,
                         AttentionLatePrefetch(step.tokens));
  if (variant == 9 && kv_stage_fits)
    return LaunchChained(AttentionKernel<1, 2, false, true>, grid, dim3(kAttnThreads),
                         AttentionKvStageBytes(max_context, shape.head_dim), stream, q, step, shape, kv, scale, out,
                         out_stride, max_context, int32_t{3});
  // batches of 2 positions (1 at head_dim over 128); variants 9 and 10 where they cannot run.
  // Rows of earlier steps are prefetched into L1 (prefetch 0): into L2 kept over the weight stream
  // (evict_last), into both, or nowhere measured no faster, nor the first batch of rows loaded
  // into registers before the wait (lab/cuda/attention.cu).
  const bool shallow = variant == 5 || variant == 9 || variant == 10 || variant == 11;
  const bool batched = variant >= 2 && !shallow;
  const int32_t prefetch = 0;
  auto* kernel = shape.head_dim <= kAttnWarps * 8
                     ? (batched   ? AttentionKernel<1, 8>
                        : shallow ? AttentionKernel<1, 2>
                                  : AttentionKernel<1, 0>)
                 : shape.head_dim <= 2 * kAttnWarps * 8
                     ? (batched ? AttentionKernel<2, 8> : shallow ? AttentionKernel<2, 2> : AttentionKernel<2, 0>)
                     : (batched   ? AttentionKernel<AttnGroups(kMaxHeadDim), 4>
                        : shallow ? AttentionKernel<AttnGroups(kMaxHeadDim), 1>
                                  : AttentionKernel<AttnGroups(kMaxHeadDim), 0>);
  return LaunchChained(kernel, grid, dim3(kAttnThreads), AttentionSharedBytes(max_context), stream, q, step, shape, kv,
                       scale, out, out_stride, max_context, prefetch);
}

int AttentionTileTokens(const AttentionShape& shape) {
  if ((shape.head_dim != 64 && shape.head_dim != 128) || shape.num_kv_heads <= 0 ||
      shape.num_heads % shape.num_kv_heads != 0 || shape.block_size < 8)
    return 0;
  return TileAttnTokens(shape.num_heads / shape.num_kv_heads);
}

bool AttentionTileFits(const AttentionShape& shape, int32_t max_context) {
  if (AttentionTileTokens(shape) == 0) return false;
  const int64_t bytes = shape.head_dim == 64 ? TileAttnLayout<64>::Bytes(max_context, shape.block_size)
                                             : TileAttnLayout<128>::Bytes(max_context, shape.block_size);
  return bytes <= kTileAttnMaxSmem;
}

bool AttentionTilesPay(const AttentionShape& shape, int64_t tiles, const CudaTuning& tuning) {
  if (!tuning.attention_tile_by_rule) return true;
  return shape.head_dim == 128 && tiles * shape.num_kv_heads >= static_cast<int64_t>(std::max(
                                                                    1, tuning.attention_tile_blocks_per_sm)) *
                                                                    MultiprocessorCount();
}

cudaError_t LaunchTileAttention(const float* q, const StepTokens& step, const AttentionShape& shape, LayerKv kv,
                                float scale, int32_t max_context, float* out, int32_t out_stride,
                                const int32_t* tiles, int32_t num_tiles, const LaunchContext& ctx,
                                cudaStream_t stream) {
  if (num_tiles <= 0) return cudaSuccess;
  if (!AttentionTileFits(shape, max_context)) return cudaErrorInvalidValue;
  if (ctx.stats != nullptr) ++ctx.stats->attention_tile_launches;
  const dim3 grid(num_tiles, shape.num_kv_heads);
  const bool two = ctx.tuning->attention_tile_blocks_per_sm == 2;
  if (shape.head_dim == 64)
    return LaunchChained(two ? TileAttentionKernel<64, 2> : TileAttentionKernel<64, 1>, grid,
                         dim3(kTileAttnThreads), TileAttnLayout<64>::Bytes(max_context, shape.block_size), stream, q,
                         step, shape, kv, scale, out, out_stride, tiles);
  return LaunchChained(two ? TileAttentionKernel<128, 2> : TileAttentionKernel<128, 1>, grid,
                       dim3(kTileAttnThreads), TileAttnLayout<128>::Bytes(max_context, shape.block_size), stream, q,
                       step, shape, kv, scale, out, out_stride, tiles);
}

cudaError_t LaunchRmsNorm(const float* x, int32_t stride, int32_t tokens, int32_t cols, const float* weight,
                          float eps, float* y, cudaStream_t stream, const int32_t* x_rows) {
  if (tokens <= 0) return cudaSuccess;
  return LaunchChained(RmsNormKernel, dim3((tokens + kWarps - 1) / kWarps), dim3(kThreads), 0, stream, x, stride, tokens,
                       cols, weight, eps, y, x_rows);
}

int64_t ArgmaxScratchBytes(int32_t rows) {
  return static_cast<int64_t>(rows) * (kArgmaxChunks * (sizeof(float) + sizeof(int32_t)) + sizeof(uint32_t));
}

cudaError_t LaunchAdvanceGreedy(const int32_t* chosen, int32_t rows, int32_t* history, int32_t* tokens,
                                int32_t* positions, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  const int threads = 256;
  AdvanceGreedyKernel<<<(rows + threads - 1) / threads, threads, 0, stream>>>(chosen, rows, history, tokens, positions);
  return cudaGetLastError();
}

cudaError_t LaunchArgmax(const float* logits, int32_t rows, int32_t cols, int32_t* out, void* scratch,
                         int32_t scratch_rows, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  if (rows > 65535 || rows > scratch_rows) return cudaErrorInvalidConfiguration;
  // The layout depends on the capacity only, so every launch finds its tickets at zero.
  char* p = static_cast<char*>(scratch);
  uint32_t* tickets = reinterpret_cast<uint32_t*>(p);
  float* part_v = reinterpret_cast<float*>(p + static_cast<int64_t>(scratch_rows) * sizeof(uint32_t));
  int32_t* part_i = reinterpret_cast<int32_t*>(part_v + static_cast<int64_t>(scratch_rows) * kArgmaxChunks);
  const int32_t chunks =
      std::clamp<int32_t>(MultiprocessorCount() * kArgmaxBlocksPerSM / rows, 1, kArgmaxChunks);
  return LaunchChained(ArgmaxKernel, dim3(chunks, rows), dim3(kArgmaxThreads), 0, stream, logits, cols, chunks, out,
                       part_v, part_i, tickets);
}

}  // namespace rote::inference::cuda
