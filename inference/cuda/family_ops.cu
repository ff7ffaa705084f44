// The new families' kernels (family_ops.h). Built with the exact profile's flags (-fmad=false
// -prec-div=true -prec-sqrt=true): every fma is written as fmaf and every other operation rounds
// once, in the order written, which is the CPU backend's order (inference/cpu/cpu_backend.cc).
#include "inference/cuda/family_ops.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "inference/cuda/launch.cuh"
#include "inference/cuda/weights4.cuh"
#include "inference/numerics/canonical.h"
#include "inference/numerics/routing.h"

namespace rote::inference::cuda {
namespace {

using numerics::canonical_expf;
using numerics::canonical_rms_scale;
using numerics::canonical_rotate;

constexpr int kFamWarps = 8;
constexpr int kFamThreads = kFamWarps * 32;
constexpr int kFamMaxHeadDim = 256;

__device__ __forceinline__ float FamWarpTree(float v) {
#pragma unroll
  for (int off = 16; off >= 1; off >>= 1) v = v + __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

__device__ __forceinline__ float FamWarpMax(float v) {
#pragma unroll
  for (int off = 16; off >= 1; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// The canonical tree over 32 class accumulators held by one thread (acc[0] holds the result).
__device__ __forceinline__ void FamClassTree(float (&acc)[32]) {
#pragma unroll
  for (int level = 0; level < 5; ++level)
#pragma unroll
    for (int l = 0; l < 16; ++l)
      if (l < (16 >> level)) acc[l] = acc[l] + acc[l + (16 >> level)];
}

// Lane `lane`'s terms of a lane row in increasing column: group g's float4 (g * 32 + lane) holds
// columns 128 g + 32 i + lane, i = 0..3. f(value, column) for each term of a column below cols.
// kLaneBatch groups' loads are issued before their terms are used: a warp reads a row of a few
// thousand columns alone, so its time is the loads' latency unless many are in flight.
constexpr int kLaneBatch = 8;
template <typename F>
__device__ __forceinline__ void ForLaneTerms(const float* row, int cols, int lane, F f) {
  const int groups = (cols + kGroupCols - 1) / kGroupCols;
  const float4* r4 = reinterpret_cast<const float4*>(row) + lane;
  for (int g0 = 0; g0 < groups; g0 += kLaneBatch) {
    float4 v[kLaneBatch];
#pragma unroll
    for (int u = 0; u < kLaneBatch; ++u)
      if (g0 + u < groups) v[u] = r4[(g0 + u) * 32];
#pragma unroll
    for (int u = 0; u < kLaneBatch; ++u) {
      if (g0 + u >= groups) break;
      const int k0 = (g0 + u) * kGroupCols + lane;
      if (k0 < cols) f(v[u].x, k0);
      if (k0 + 32 < cols) f(v[u].y, k0 + 32);
      if (k0 + 64 < cols) f(v[u].z, k0 + 64);
      if (k0 + 96 < cols) f(v[u].w, k0 + 96);
    }
  }
}

// For every float4 of a lane row's padded width (lane `lane`'s share: index g * 32 + lane, its
// component x at column 128 g + lane), in batches of kLaneBatch: load(index, column) for the whole
// batch first, then store(index, column, loaded) (the stores may alias the loads' memory, so the
// compiler would not move a later load above them).
template <typename Load, typename Store>
__device__ __forceinline__ void ForLaneQuads(int cols, int lane, Load load, Store store) {
  const int groups = (cols + kGroupCols - 1) / kGroupCols;
  for (int g0 = 0; g0 < groups; g0 += kLaneBatch) {
    decltype(load(0, 0)) v[kLaneBatch];
#pragma unroll
    for (int u = 0; u < kLaneBatch; ++u)
      if (g0 + u < groups) v[u] = load((g0 + u) * 32 + lane, (g0 + u) * kGroupCols + lane);
#pragma unroll
    for (int u = 0; u < kLaneBatch; ++u)
      if (g0 + u < groups) store((g0 + u) * 32 + lane, (g0 + u) * kGroupCols + lane, v[u]);
  }
}
struct Quads3 {
  float4 a, b, c;
};

// One warp per row.
__global__ void __launch_bounds__(kFamThreads)
    FamilyNormKernel(int kind, const float* x, int32_t stride, int32_t tokens, int32_t cols, const float* weight,
                     const float* bias, float eps, float* y, const int32_t* x_rows) {
  LetNextStart();
  WaitForPrevious();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int m = blockIdx.x * kFamWarps + warp;
  if (m >= tokens) return;
  const float* xm = x + static_cast<int64_t>(x_rows != nullptr ? x_rows[m] : m) * stride;
  float* ym = y + static_cast<int64_t>(m) * stride;
  const float4* x4 = reinterpret_cast<const float4*>(xm);
  const float4* w4 = reinterpret_cast<const float4*>(weight);
  float4* y4 = reinterpret_cast<float4*>(ym);
  if (kind == static_cast<int>(FamilyNorm::kRms)) {
    float ss = 0.0f;
    ForLaneTerms(xm, cols, lane, [&](float v, int) { ss = fmaf(v, v, ss); });
    const float r = canonical_rms_scale(FamWarpTree(ss), cols, eps);
    ForLaneQuads(
        cols, lane, [&](int q, int) { return Quads3{x4[q], w4[q], {}}; },
        [&](int q, int, const Quads3& l) {
          const float4 v = l.a, w = l.b;
          y4[q] = make_float4((v.x * r) * w.x, (v.y * r) * w.y, (v.z * r) * w.z, (v.w * r) * w.w);
        });
    return;
  }
  float s = 0.0f;
  ForLaneTerms(xm, cols, lane, [&](float v, int) { s = s + v; });
  const float mean = numerics::canonical_mean(FamWarpTree(s), cols);
  float ss = 0.0f;
  ForLaneTerms(xm, cols, lane, [&](float v, int) {
    const float d = v - mean;
    ss = fmaf(d, d, ss);
  });
  const float r = canonical_rms_scale(FamWarpTree(ss), cols, eps);
  // Lane rows: component i of a float4 holds column k0 + 32 i; padding (k >= cols) stays zero.
  const float4* b4 = reinterpret_cast<const float4*>(bias);
  ForLaneQuads(cols, lane, [&](int q, int) { return Quads3{x4[q], w4[q], b4[q]}; }, [&](int q, int k0, const Quads3& l) {
    const float4 v = l.a, w = l.b, b = l.c;
    y4[q] = make_float4(k0 < cols ? ((v.x - mean) * r) * w.x + b.x : 0.0f,
                        k0 + 32 < cols ? ((v.y - mean) * r) * w.y + b.y : 0.0f,
                        k0 + 64 < cols ? ((v.z - mean) * r) * w.z + b.z : 0.0f,
                        k0 + 96 < cols ? ((v.w - mean) * r) * w.w + b.w : 0.0f);
  });
}

__global__ void __launch_bounds__(kFamThreads) ScaleRowsKernel(float* x, int64_t n, float m) {
  LetNextStart();
  WaitForPrevious();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kFamThreads) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * kFamThreads)
    x[i] = x[i] * m;
}

// One warp per row.
__global__ void __launch_bounds__(kFamThreads)
    ResidualAddKernel(float* x, const float* y, int32_t stride, int32_t tokens, int32_t cols, const float* norm_weight,
                      float eps, bool has_multiplier, float multiplier) {
  LetNextStart();
  WaitForPrevious();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int m = blockIdx.x * kFamWarps + warp;
  if (m >= tokens) return;
  const float* ym = y + static_cast<int64_t>(m) * stride;
  float* xm = x + static_cast<int64_t>(m) * stride;
  float r = 0.0f;
  if (norm_weight != nullptr) {
    float ss = 0.0f;
    ForLaneTerms(ym, cols, lane, [&](float v, int) { ss = fmaf(v, v, ss); });
    r = canonical_rms_scale(FamWarpTree(ss), cols, eps);
  }
  const float4* y4 = reinterpret_cast<const float4*>(ym);
  const float4* n4 = reinterpret_cast<const float4*>(norm_weight);
  float4* x4 = reinterpret_cast<float4*>(xm);
  auto term = [&](float t, float w) {
    if (norm_weight != nullptr) t = (t * r) * w;
    if (has_multiplier) t = t * multiplier;
    return t;
  };
  const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  auto load = [&](int q, int) { return Quads3{y4[q], norm_weight != nullptr ? n4[q] : zero, x4[q]}; };
  ForLaneQuads(cols, lane, load, [&](int q, int, const Quads3& l) {
    const float4 t = l.a, w = l.b;
    float4 v = l.c;
    v.x = v.x + term(t.x, w.x);
    v.y = v.y + term(t.y, w.y);
    v.z = v.z + term(t.z, w.z);
    v.w = v.w + term(t.w, w.w);
    x4[q] = v;
  });
}

__global__ void __launch_bounds__(kFamThreads)
    ActivationKernel(int kind, const float* in, int32_t in_stride, int32_t n, float* out, int32_t out_stride) {
  LetNextStart();
  WaitForPrevious();
  const int m = blockIdx.y;
  const int k = blockIdx.x * kFamThreads + threadIdx.x;
  if (k >= n) return;
  const float* row = in + static_cast<int64_t>(m) * in_stride;
  float v;
  if (kind == static_cast<int>(FamilyActivation::kSiluMul)) {
    v = numerics::canonical_silu(row[2 * k]) * row[2 * k + 1];
  } else if (kind == static_cast<int>(FamilyActivation::kGeluMul)) {
    v = numerics::canonical_gelu_tanh(row[2 * k]) * row[2 * k + 1];
  } else {
    v = numerics::canonical_gelu_tanh(row[k]);
  }
  out[static_cast<int64_t>(m) * out_stride + PermutedIndex(k)] = v;
}

// One warp per head of q and k (grid.x: groups of kFamWarps heads, grid.y: tokens); the block with
// blockIdx.x == 0 also copies v.
__global__ void __launch_bounds__(kFamThreads)
    FamilyRopeStoreKernel(const float* qkv, StepTokens step, AttentionShape shape, const float* q_norm,
                          const float* k_norm, float norm_eps, int32_t rotary_dim, const float* rope_cos,
                          const float* rope_sin, float* q_out, LayerKv kv) {
  __shared__ float head_buf[kFamWarps][kFamMaxHeadDim];
  LetNextStart();
  WaitForPrevious();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int m = blockIdx.y;
  const int hd = shape.head_dim, half = rotary_dim / 2;
  const int q_dim = shape.num_heads * hd, kv_dim = shape.num_kv_heads * hd;
  const int pos = step.pos[m];
  const int64_t slot_row = CacheRow(step.block_table + static_cast<int64_t>(m) * step.max_blocks, pos, shape.block_size);
  const float* cos_row = rope_cos + static_cast<int64_t>(pos) * half;
  const float* sin_row = rope_sin + static_cast<int64_t>(pos) * half;
  const float* row = qkv + static_cast<int64_t>(m) * (q_dim + 2 * kv_dim);
  float* buf = head_buf[warp];
  const int h = blockIdx.x * kFamWarps + warp;
  if (h < shape.num_heads + shape.num_kv_heads) {
    const bool is_q = h < shape.num_heads;
    const float* src = is_q ? row + h * hd : row + q_dim + (h - shape.num_heads) * hd;
    for (int d = lane; d < hd; d += 32) buf[d] = src[d];
    __syncwarp();
    const float* nw = is_q ? q_norm : k_norm;
    if (nw != nullptr) {
      float acc = 0.0f;
      for (int d = lane; d < hd; d += 32) acc = fmaf(buf[d], buf[d], acc);
      const float r = canonical_rms_scale(FamWarpTree(acc), hd, norm_eps);
      __syncwarp();
      for (int d = lane; d < hd; d += 32) buf[d] = (buf[d] * r) * nw[d];
      __syncwarp();
    }
    float* dst = is_q ? q_out + static_cast<int64_t>(m) * q_dim + h * hd
                      : kv.k + slot_row * kv_dim + (h - shape.num_heads) * hd;
    for (int i = lane; i < half; i += 32) {
      float x0 = buf[i], x1 = buf[i + half];
      canonical_rotate(x0, x1, cos_row[i], sin_row[i]);
      dst[i] = x0;
      dst[i + half] = x1;
    }
    for (int d = rotary_dim + lane; d < hd; d += 32) dst[d] = buf[d];
  }
  if (blockIdx.x == 0)
    for (int i = threadIdx.x; i < kv_dim; i += kFamThreads) kv.v[slot_row * kv_dim + i] = row[q_dim + kv_dim + i];
}

// One block per (query head, token). Scores: a thread per position, the 32 classes of the
// canonical dot in registers (term d to class d mod 32, increasing d), the tree, times scale, the
// soft cap. Weights: max (exact in any order), canonical_expf, the denominator by warp 0 (lane t
// sums the window indices i = t mod 32 in increasing i, the tree). V: a thread per dim, the 32
// classes by window index, the tree, one divide.
__global__ void __launch_bounds__(kFamThreads)
    FamilyAttentionKernel(const float* q, StepTokens step, AttentionShape shape, LayerKv kv, FamilyAttention attn,
                          float* out, int32_t out_stride) {
  extern __shared__ float fam_att_smem[];
  float* scores = fam_att_smem;  // (n)
  __shared__ float q_s[kFamMaxHeadDim];
  __shared__ float red[kFamWarps];
  __shared__ float denom_s;
  LetNextStart();
  WaitForPrevious();
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int h = blockIdx.x, m = blockIdx.y;
  const int hd = shape.head_dim, bs = shape.block_size;
  const int g = h / (shape.num_heads / shape.num_kv_heads);
  const int q_dim = shape.num_heads * hd, kv_dim = shape.num_kv_heads * hd;
  const int L = step.pos[m] + 1;
  const int lo = attn.window > 0 && L > attn.window ? L - attn.window : 0;
  const int n = L - lo;
  const int32_t* bt = step.block_table + static_cast<int64_t>(m) * step.max_blocks;
  for (int d = tid; d < hd; d += kFamThreads) q_s[d] = q[static_cast<int64_t>(m) * q_dim + h * hd + d];
  __syncthreads();

  for (int i = tid; i < n; i += kFamThreads) {
    const float* kr = kv.k + CacheRow(bt, lo + i, bs) * kv_dim + g * hd;
    float acc[32];
#pragma unroll
    for (int c = 0; c < 32; ++c) acc[c] = 0.0f;
    for (int d0 = 0; d0 < hd; d0 += 32) {
#pragma unroll
      for (int c = 0; c < 32; ++c)
        if (d0 + c < hd) acc[c] = fmaf(q_s[d0 + c], kr[d0 + c], acc[c]);
    }
    FamClassTree(acc);
    float s = acc[0] * attn.scale;
    if (attn.softcap > 0.0f) s = numerics::canonical_softcap(s, attn.softcap);
    scores[i] = s;
  }
  __syncthreads();

  float mx = -INFINITY;
  for (int i = tid; i < n; i += kFamThreads) mx = fmaxf(mx, scores[i]);
  mx = FamWarpMax(mx);
  if (lane == 0) red[warp] = mx;
  __syncthreads();
  mx = red[0];
#pragma unroll
  for (int w = 1; w < kFamWarps; ++w) mx = fmaxf(mx, red[w]);
  for (int i = tid; i < n; i += kFamThreads) scores[i] = canonical_expf(scores[i] - mx);
  __syncthreads();
  if (warp == 0) {
    float den = 0.0f;
    for (int i = lane; i < n; i += 32) den = den + scores[i];
    den = FamWarpTree(den);
    if (lane == 0) denom_s = den;
  }
  __syncthreads();
  const float denom = denom_s;

  float* o = out + static_cast<int64_t>(m) * out_stride;
  for (int d = tid; d < hd; d += kFamThreads) {
    const float* vbase = kv.v + g * hd + d;
    float acc[32];
#pragma unroll
    for (int c = 0; c < 32; ++c) acc[c] = 0.0f;
    for (int i0 = 0; i0 < n; i0 += 32) {
#pragma unroll
      for (int c = 0; c < 32; ++c)
        if (i0 + c < n) acc[c] = fmaf(scores[i0 + c], vbase[CacheRow(bt, lo + i0 + c, bs) * kv_dim], acc[c]);
    }
    FamClassTree(acc);
    o[PermutedIndex(h * hd + d)] = acc[0] / denom;
  }
}

__global__ void __launch_bounds__(kFamThreads)
    LogitsPostKernel(float* logits, int64_t n, float softcap, float divisor) {
  LetNextStart();
  WaitForPrevious();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kFamThreads) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * kFamThreads) {
    float v = logits[i];
    if (softcap > 0.0f) v = numerics::canonical_softcap(v, softcap);
    if (divisor != 1.0f) v = v / divisor;
    logits[i] = v;
  }
}

int GridFor(int64_t n) { return static_cast<int>(std::min<int64_t>((n + kFamThreads - 1) / kFamThreads, 4096)); }

}  // namespace

cudaError_t LaunchFamilyNorm(FamilyNorm kind, const float* x, int32_t stride, int32_t tokens, int32_t cols,
                             const float* weight, const float* bias, float eps, float* y, cudaStream_t stream,
                             const int32_t* x_rows) {
  if (tokens <= 0) return cudaSuccess;
  return LaunchChained(FamilyNormKernel, dim3((tokens + kFamWarps - 1) / kFamWarps), dim3(kFamThreads), 0, stream,
                       static_cast<int>(kind), x, stride, tokens, cols, weight, bias, eps, y, x_rows);
}

cudaError_t LaunchScaleRows(float* x, int32_t stride, int32_t tokens, float m, cudaStream_t stream) {
  const int64_t n = static_cast<int64_t>(stride) * tokens;
  if (n <= 0) return cudaSuccess;
  return LaunchChained(ScaleRowsKernel, dim3(GridFor(n)), dim3(kFamThreads), 0, stream, x, n, m);
}

cudaError_t LaunchResidualAdd(float* x, const float* y, int32_t stride, int32_t tokens, int32_t cols,
                              const float* norm_weight, float norm_eps, bool has_multiplier, float multiplier,
                              cudaStream_t stream) {
  if (tokens <= 0) return cudaSuccess;
  return LaunchChained(ResidualAddKernel, dim3((tokens + kFamWarps - 1) / kFamWarps), dim3(kFamThreads), 0, stream, x,
                       y, stride, tokens, cols, norm_weight, norm_eps, has_multiplier, multiplier);
}

cudaError_t LaunchFamilyActivation(FamilyActivation kind, const float* in, int32_t in_stride, int32_t tokens, int32_t n,
                                   float* out, int32_t out_stride, cudaStream_t stream) {
  if (tokens <= 0) return cudaSuccess;
  return LaunchChained(ActivationKernel, dim3((n + kFamThreads - 1) / kFamThreads, tokens), dim3(kFamThreads), 0,
                       stream, static_cast<int>(kind), in, in_stride, n, out, out_stride);
}

cudaError_t LaunchFamilyRopeStore(const float* qkv, const StepTokens& step, const AttentionShape& shape,
                                  const float* q_norm, const float* k_norm, float norm_eps, int32_t rotary_dim,
                                  const float* rope_cos, const float* rope_sin, float* q_out, LayerKv kv,
                                  cudaStream_t stream) {
  if (shape.head_dim > kFamMaxHeadDim || rotary_dim > shape.head_dim || rotary_dim % 2 != 0)
    return cudaErrorInvalidValue;
  if (step.tokens <= 0) return cudaSuccess;
  const dim3 grid((shape.num_heads + shape.num_kv_heads + kFamWarps - 1) / kFamWarps, step.tokens);
  return LaunchChained(FamilyRopeStoreKernel, grid, dim3(kFamThreads), 0, stream, qkv, step, shape, q_norm, k_norm,
                       norm_eps, rotary_dim, rope_cos, rope_sin, q_out, kv);
}

int64_t FamilyAttentionSharedBytes(int32_t max_context) { return static_cast<int64_t>(max_context) * 4; }

cudaError_t PrepareFamilyAttention(int32_t max_context) {
  return cudaFuncSetAttribute(FamilyAttentionKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              static_cast<int>(FamilyAttentionSharedBytes(max_context)));
}

cudaError_t LaunchFamilyAttention(const float* q, const StepTokens& step, const AttentionShape& shape, LayerKv kv,
                                  const FamilyAttention& attn, int32_t max_context, float* out, int32_t out_stride,
                                  cudaStream_t stream) {
  if (shape.head_dim > kFamMaxHeadDim) return cudaErrorInvalidValue;
  if (step.tokens <= 0) return cudaSuccess;
  const dim3 grid(shape.num_heads, step.tokens);
  return LaunchChained(FamilyAttentionKernel, grid, dim3(kFamThreads),
                       static_cast<size_t>(FamilyAttentionSharedBytes(max_context)), stream, q, step, shape, kv, attn,
                       out, out_stride);
}

namespace {

// Block e: expert e's part of a stable counting sort of the pairs by expert. Every block counts
// every expert (integer adds in shared memory: the counts do not depend on their order), so it
// knows where expert e's rows and tiles begin; then each warp takes a contiguous run of the pairs,
// counts e's pairs in it, and after the block's prefix over the warps writes them in pair order.
__global__ void __launch_bounds__(kFamThreads) ExpertGroupsKernel(const int32_t* experts, int32_t pairs, int32_t k,
                                                                 int32_t num_experts, int32_t tile,
                                                                 int32_t* row_token, int32_t* pair_row,
                                                                 int32_t* first, int32_t* tiles) {
  LetNextStart();
  WaitForPrevious();
  extern __shared__ int32_t group_count[];  // num_experts
  __shared__ int32_t warp_part[2][kFamWarps];
  const int32_t e = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int32_t j = threadIdx.x; j < num_experts; j += kFamThreads) group_count[j] = 0;
  __syncthreads();
  for (int32_t s = threadIdx.x; s < pairs; s += kFamThreads) atomicAdd(&group_count[experts[s]], 1);
  __syncthreads();
  // Rows and tiles of the experts below e.
  int32_t rows = 0, tile_count = 0;
  for (int32_t j = threadIdx.x; j < e; j += kFamThreads) {
    rows += group_count[j];
    tile_count += (group_count[j] + tile - 1) / tile;
  }
  for (int off = 16; off >= 1; off >>= 1) {
    rows += __shfl_xor_sync(0xffffffffu, rows, off);
    tile_count += __shfl_xor_sync(0xffffffffu, tile_count, off);
  }
  if (lane == 0) {
    warp_part[0][warp] = rows;
    warp_part[1][warp] = tile_count;
  }
  __syncthreads();
  int32_t base = 0, tile_base = 0;
  for (int32_t w = 0; w < kFamWarps; ++w) {
    base += warp_part[0][w];
    tile_base += warp_part[1][w];
  }
  const int32_t n = group_count[e];
  if (threadIdx.x == 0) {
    first[e] = base;
    tiles[e] = tile_base;
    if (e == num_experts - 1) {
      first[num_experts] = base + n;
      tiles[num_experts] = tile_base + (n + tile - 1) / tile;
    }
  }
  // This warp's run of pairs, whole 32-pair rounds.
  const int32_t per_warp = ((pairs + kFamWarps - 1) / kFamWarps + 31) / 32 * 32;
  const int32_t begin = warp * per_warp, end = min(pairs, begin + per_warp);
  int32_t mine = 0;
  for (int32_t s0 = begin; s0 < end; s0 += 32) {
    const int32_t s = s0 + lane;
    mine += __popc(__ballot_sync(0xffffffffu, s < end && experts[s] == e));
  }
  __syncthreads();  // every thread has read warp_part
  if (lane == 0) warp_part[0][warp] = mine;
  __syncthreads();
  int32_t at = base;
  for (int32_t w = 0; w < warp; ++w) at += warp_part[0][w];
  for (int32_t s0 = begin; s0 < end; s0 += 32) {
    const int32_t s = s0 + lane;
    const bool hit = s < end && experts[s] == e;
    const uint32_t ballot = __ballot_sync(0xffffffffu, hit);
    if (hit) {
      const int32_t row = at + __popc(ballot & ((1u << lane) - 1u));
      row_token[row] = s / k;
      pair_row[s] = row;
    }
    at += __popc(ballot);
  }
}

// A thread a column of a token (blocks: tokens x column blocks, flattened): its k terms' rows and
// weights first, then their loads, then the sum in order.
__global__ void __launch_bounds__(kFamThreads) ExpertsSumKernel(const float* y, int32_t stride, const int32_t* rows,
                                                                const float* weights, int32_t k, int32_t cols,
                                                                float* out) {
  LetNextStart();
  WaitForPrevious();
  const int32_t col_blocks = (cols + kFamThreads - 1) / kFamThreads;
  const int32_t t = blockIdx.x / col_blocks;
  const int32_t c = (blockIdx.x % col_blocks) * kFamThreads + threadIdx.x;
  if (c >= cols) return;
  float term[32], w[32];
#pragma unroll 8
  for (int32_t j = 0; j < k; ++j) {
    const int32_t slot = t * k + j;
    const int64_t row = rows != nullptr ? rows[slot] : slot;
    term[j] = y[row * stride + c];
    w[j] = weights[slot];
  }
  float m = 0.0f;
  for (int32_t j = 0; j < k; ++j) m = __fadd_rn(m, __fmul_rn(term[j], w[j]));
  out[static_cast<int64_t>(t) * stride + c] = m;
}

// One block a token: the route of numerics::RouteToken, term for term. The largest logit (a NaN
// anywhere makes every probability NaN both ways), e_i elementwise, the canonical sum as lane l's
// sequential sum of experts l, l + 32, ... and the xor tree (canonical_tree32), p_i = e_i / s; the
// experts RouteToken's k rounds take (the largest p not yet taken, lowest index on ties, a NaN only
// where nothing else is left), by rank; then FinishRoute's renormalisation and order, a lane a
// chosen expert.
__device__ __forceinline__ bool RouteBetter(float a, int32_t ia, float b, int32_t ib) {
  const bool an = a != a, bn = b != b;
  if (an != bn) return bn;          // a number beats a NaN
  if (!an && a != b) return a > b;  // two numbers: the larger
  return ia < ib;                   // equal, or both NaN: the lower index
}

__global__ void __launch_bounds__(kFamThreads) RouteKernel(const float* logits, int32_t num_experts, int32_t k,
                                                          bool normalize, int32_t* experts, float* weights) {
  LetNextStart();
  WaitForPrevious();
  // num_experts probabilities, then the chosen probabilities in rank order and their experts
  // (32 each): no array of the route lives in local memory.
  extern __shared__ float route_p[];
  const int32_t lane = threadIdx.x % 32;
  const int64_t t = blockIdx.x;
  const float* l = logits + t * num_experts;
  float* p = route_p;
  float* chosen = p + num_experts;
  int32_t* chosen_ex = reinterpret_cast<int32_t*>(chosen + 32);
  __shared__ float route_max[kFamWarps];
  // The largest logit: RouteToken scans in order, which differs from a reduction only where a
  // logit is NaN, and then every probability is NaN either way. Then e_i, a thread an expert.
  float m = l[0];
  for (int32_t e = threadIdx.x; e < num_experts; e += kFamThreads) m = fmaxf(m, l[e]);
  m = FamWarpMax(m);
  if (lane == 0) route_max[threadIdx.x / 32] = m;
  __syncthreads();
  m = route_max[0];
#pragma unroll
  for (int w = 1; w < kFamWarps; ++w) m = fmaxf(m, route_max[w]);
  for (int32_t e = threadIdx.x; e < num_experts; e += kFamThreads) p[e] = numerics::canonical_expf(l[e] - m);
  __syncthreads();
  if (threadIdx.x < 32) {
    // The canonical sum: lane l adds experts l, l + 32, ... in order, then the tree.
    float acc = 0.0f;
    for (int32_t e = lane; e < num_experts; e += 32) acc = acc + p[e];
    route_max[0] = FamWarpTree(acc);  // every lane holds it; read after the barrier
  }
  __syncthreads();
  const float s = route_max[0];
  for (int32_t e = threadIdx.x; e < num_experts; e += kFamThreads) p[e] = p[e] / s;
  __syncthreads();
  // RouteToken's k rounds take the experts in the order RouteBetter defines (a strict total
  // order: numbers by value, then NaNs, ties to the lower index), so the expert chosen in round r
  // is the one with exactly r experts better than it. A thread an expert counts them, four
  // independent counts at a time: one token's route took 12 µs as k rounds of a warp-wide argmax
  // (a chain of shuffles), and 39 µs as one warp's counts.
  for (int32_t e = threadIdx.x; e < num_experts; e += kFamThreads) {
    const float pe = p[e];
    int32_t c[4] = {0, 0, 0, 0};
    int32_t o = 0;
    for (; o + 4 <= num_experts; o += 4) {
#pragma unroll
      for (int32_t u = 0; u < 4; ++u) c[u] += RouteBetter(p[o + u], o + u, pe, e) ? 1 : 0;
    }
    for (; o < num_experts; ++o) c[0] += RouteBetter(p[o], o, pe, e) ? 1 : 0;
    const int32_t rank = (c[0] + c[1]) + (c[2] + c[3]);
    if (rank < k) {
      chosen[rank] = pe;
      chosen_ex[rank] = e;
    }
  }
  __syncthreads();
  if (threadIdx.x >= 32) return;
  // numerics::FinishRoute, a lane a chosen expert (k <= 32): the canonical sum of the k chosen
  // probabilities (class r holds 0 + chosen[r], the rest 0, then the tree), each weight divided
  // by it, and each (expert, weight) stored at its place in increasing expert index (the experts
  // are distinct, so that place is the count of smaller ones: FinishRoute's insertion sort).
  const bool mine = lane < k;
  const float pc = mine ? chosen[lane] : 0.0f;
  const int32_t ec = mine ? chosen_ex[lane] : 0;
  const float denom = normalize ? FamWarpTree(mine ? 0.0f + pc : 0.0f) : 1.0f;
  if (!mine) return;
  const float wc = normalize ? pc / denom : pc;
  int32_t at = 0;
  for (int32_t r = 0; r < k; ++r) at += chosen_ex[r] < ec ? 1 : 0;
  experts[t * k + at] = ec;
  weights[t * k + at] = wc;
}

// One (token, expert) pair a blockIdx.y, kExpertRows rows a warp: the canonical dot of each of the
// expert's rows with the pair's input lane row. Lane t sums its terms (columns t, t + 32, ... in
// increasing order: group g of a lane row holds them at g * 128 + 4 t .. + 3, one load) with fmaf,
// then the xor tree. kExpertGroups groups' loads are issued before their FMAs.
constexpr int kExpertRows = 2;
constexpr int kExpertGroups = 4;
template <WeightType WT>
__global__ void __launch_bounds__(kFamThreads) ExpertRowsKernel(ExpertRowsArgs a) {
  using LW = Weights4<WT>;
  using Raw = typename LW::Raw;
  LetNextStart();
  WaitForPrevious();
  const int32_t pair = blockIdx.y;
  const int32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int32_t row0 = (blockIdx.x * kFamWarps + warp) * kExpertRows;
  if (row0 >= a.rows) return;
  const int32_t expert = a.experts[pair];
  const int32_t groups = a.cols_padded / 128;
  const Raw* w[kExpertRows];
#pragma unroll
  for (int r = 0; r < kExpertRows; ++r) {
    const int64_t row = min(row0 + r, a.rows - 1);  // a last odd row computes a copy, never stored
    w[r] = reinterpret_cast<const Raw*>(static_cast<const char*>(a.weights) +
                                        (static_cast<int64_t>(expert) * a.rows + row) * a.cols_padded *
                                            (WT == WeightType::kF32 ? 4 : 2)) + lane;
  }
  const float4* x = reinterpret_cast<const float4*>(a.x + static_cast<int64_t>(pair / a.pairs_per_input) * a.x_stride) +
                    lane;
  float acc[kExpertRows];
#pragma unroll
  for (int r = 0; r < kExpertRows; ++r) acc[r] = 0.0f;
  for (int32_t g0 = 0; g0 < groups; g0 += kExpertGroups) {
    Raw wr[kExpertGroups][kExpertRows];
    float4 xv[kExpertGroups];
#pragma unroll
    for (int u = 0; u < kExpertGroups; ++u) {
      if (g0 + u < groups) {
        xv[u] = x[(g0 + u) * 32];
#pragma unroll
        for (int r = 0; r < kExpertRows; ++r) wr[u][r] = w[r][(g0 + u) * 32];
      }
    }
#pragma unroll
    for (int u = 0; u < kExpertGroups; ++u) {
      if (g0 + u < groups) {
#pragma unroll
        for (int r = 0; r < kExpertRows; ++r) {
          float f[4];
          LW::ToF32(wr[u][r], f);
          acc[r] = fmaf(f[0], xv[u].x, acc[r]);
          acc[r] = fmaf(f[1], xv[u].y, acc[r]);
          acc[r] = fmaf(f[2], xv[u].z, acc[r]);
          acc[r] = fmaf(f[3], xv[u].w, acc[r]);
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kExpertRows; ++r) {
    const float v = FamWarpTree(acc[r]);
    const int32_t row = row0 + r;
    if (lane == 0 && row < a.rows)
      a.out[static_cast<int64_t>(pair) * a.out_stride + (a.out_lane_rows ? PermutedIndex(row) : row)] = v;
  }
}

}  // namespace

cudaError_t LaunchRoute(const float* logits, int32_t tokens, int32_t num_experts, int32_t k, bool normalize,
                        int32_t* experts, float* weights, cudaStream_t stream) {
  if (tokens <= 0) return cudaSuccess;
  if (num_experts < 1 || num_experts > 1024 || k < 1 || k > 32 || k > num_experts) return cudaErrorInvalidValue;
  const size_t smem = static_cast<size_t>(num_experts + 64) * sizeof(float);
  return LaunchChained(RouteKernel, dim3(tokens), dim3(kFamThreads), smem, stream, logits, num_experts, k, normalize,
                       experts, weights);
}

cudaError_t LaunchExpertRows(const ExpertRowsArgs& a, cudaStream_t stream) {
  if (a.pairs <= 0) return cudaSuccess;
  if (a.pairs > 65535 || a.cols_padded % 128 != 0 || a.pairs_per_input < 1) return cudaErrorInvalidValue;
  const int32_t rows_per_block = kFamWarps * kExpertRows;
  const dim3 grid((a.rows + rows_per_block - 1) / rows_per_block, a.pairs);
  switch (a.type) {
    case WeightType::kBF16:
      return LaunchChained(ExpertRowsKernel<WeightType::kBF16>, grid, dim3(kFamThreads), 0, stream, a);
    case WeightType::kF16:
      return LaunchChained(ExpertRowsKernel<WeightType::kF16>, grid, dim3(kFamThreads), 0, stream, a);
    case WeightType::kF32:
      return LaunchChained(ExpertRowsKernel<WeightType::kF32>, grid, dim3(kFamThreads), 0, stream, a);
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchExpertGroups(const int32_t* experts, int32_t tokens, int32_t k, int32_t num_experts, int32_t tile,
                               int32_t* row_token, int32_t* pair_row, int32_t* first, int32_t* tiles,
                               cudaStream_t stream) {
  if (num_experts < 1 || num_experts > 1024 || k < 1 || k > num_experts || tile < 1 || tokens < 0) return cudaErrorInvalidValue;
  const int64_t pairs = static_cast<int64_t>(tokens) * k;
  if (pairs > 0x7fffffff - 32 * kFamWarps) return cudaErrorInvalidValue;
  return LaunchChained(ExpertGroupsKernel, dim3(num_experts), dim3(kFamThreads), num_experts * sizeof(int32_t),
                       stream, experts, static_cast<int32_t>(pairs), k, num_experts, tile, row_token, pair_row, first,
                       tiles);
}

cudaError_t LaunchExpertsSum(const float* y, int32_t stride, const int32_t* rows, const float* weights, int32_t tokens,
                             int32_t k, int32_t cols, float* out, cudaStream_t stream) {
  if (tokens <= 0 || cols <= 0) return cudaSuccess;
  if (k < 1 || k > 32) return cudaErrorInvalidValue;
  const int64_t blocks = static_cast<int64_t>(tokens) * ((cols + kFamThreads - 1) / kFamThreads);
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  return LaunchChained(ExpertsSumKernel, dim3(static_cast<unsigned>(blocks)), dim3(kFamThreads), 0, stream, y, stride, rows, weights, k, cols, out);
}

cudaError_t LaunchLogitsPost(float* logits, int32_t rows, int32_t cols, float softcap, float divisor,
                             cudaStream_t stream) {
  const int64_t n = static_cast<int64_t>(rows) * cols;
  if (n <= 0) return cudaSuccess;
  return LaunchChained(LogitsPostKernel, dim3(GridFor(n)), dim3(kFamThreads), 0, stream, logits, n, softcap, divisor);
}

}  // namespace rote::inference::cuda
