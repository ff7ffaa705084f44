// Kernels of the exact profile. Built with -fmad=false -prec-div=true -prec-sqrt=true: every
// fma below is written as fmaf, every other operation rounds once, in the order written, which
// is the order docs/numerics.md gives and the CPU backend follows.
#include "inference/cuda/kernels.h"
#include "inference/cuda/attention_parts.h"
#include "inference/cuda/fast_linear.h"
#include "inference/cuda/launch.cuh"
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

// Four consecutive weights of a lane, raw, and their exact fp32 values.
template <WeightType T>
struct Weights4;

template <>
struct Weights4<WeightType::kBF16> {
  using Raw = uint2;
  static __device__ __forceinline__ void ToF32(Raw r, float* f) {
    f[0] = __uint_as_float(r.x << 16);
    f[1] = __uint_as_float(r.x & 0xffff0000u);
    f[2] = __uint_as_float(r.y << 16);
    f[3] = __uint_as_float(r.y & 0xffff0000u);
  }
};

template <>
struct Weights4<WeightType::kF16> {
  using Raw = uint2;
  static __device__ __forceinline__ void ToF32(Raw r, float* f) {
    // Widening fp16 -> fp32 is exact, so __half2float equals the host's f16_to_f32 on every input.
    f[0] = __half2float(__ushort_as_half(static_cast<unsigned short>(r.x & 0xffffu)));
    f[1] = __half2float(__ushort_as_half(static_cast<unsigned short>(r.x >> 16)));
    f[2] = __half2float(__ushort_as_half(static_cast<unsigned short>(r.y & 0xffffu)));
    f[3] = __half2float(__ushort_as_half(static_cast<unsigned short>(r.y >> 16)));
  }
};

template <>
struct Weights4<WeightType::kF32> {
  using Raw = float4;
  static __device__ __forceinline__ void ToF32(Raw r, float* f) {
    f[0] = r.x;
    f[1] = r.y;
    f[2] = r.z;
    f[3] = r.w;
  }
};

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

// out = epilogue(W · norm(x)). Each warp owns ROWS output rows for TOKS tokens; lane t owns
// columns k ≡ t (mod 32) of all of them, in increasing k (four per 128-column group, one
// 8- or 16-byte weight load and one 16-byte activation load each), so every output is the
// canonical dot product whatever ROWS, TOKS or the batch are. Weight loads run U groups
// ahead of their use (issued before the norm's sum of squares, then double-buffered). Blocks
// along x share rows, so a batch's token tiles read a weight row from DRAM once.
template <WeightType WT, int ROWS, int TOKS>
__global__ void __launch_bounds__(kThreads) LinearKernel(LinearArgs a) {
  TimelineScope timeline(TimelineKind::kLinear);
  using W4 = Weights4<WT>;
  using Raw = typename W4::Raw;
  constexpr int U = kUnroll<ROWS, TOKS>;
  LetNextStart();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int m0 = blockIdx.x * TOKS;
  const int mt = min(TOKS, a.tokens - m0);
  const int K = a.w.cols, KP = a.w.cols_padded;
  const int groups = KP / kGroupCols;

  const int row_base = (blockIdx.y * kWarps + warp) * ROWS;
  const Raw* wrow[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const int row = min(row_base + r, a.w.rows - 1);
    wrow[r] = reinterpret_cast<const Raw*>(static_cast<const char*>(a.w.data) +
                                           static_cast<int64_t>(row) * KP * kWeightBytes<WT>) + lane;
  }
  Raw next[U][ROWS];
  const uint64_t policy = a.weight_evict_first ? EvictFirstPolicy() : 0;
#pragma unroll
  for (int u = 0; u < U; ++u)
    if (u < groups)
#pragma unroll
      for (int r = 0; r < ROWS; ++r) next[u][r] = LoadWeights(wrow[r] + u * 32, a.weight_evict_first, policy);
  WaitForPrevious();  // weights are constant; x, x_rows and out come from earlier work
  timeline.Waited();

  // Rows past the token count read row m0 (valid memory) and are never stored.
  const float4* xrow[TOKS];
#pragma unroll
  for (int m = 0; m < TOKS; ++m) {
    const int mm = m0 + (m < mt ? m : 0);
    const int src = a.x_rows != nullptr ? a.x_rows[mm] : mm;
    xrow[m] = reinterpret_cast<const float4*>(a.x + static_cast<int64_t>(src) * a.x_stride) + lane;
  }
  float rscale[TOKS];
#pragma unroll
  for (int m = 0; m < TOKS; ++m) rscale[m] = 0.0f;
  const float4* nw = reinterpret_cast<const float4*>(a.norm_weight) + lane;
  if (a.norm_weight != nullptr) {
#pragma unroll
    for (int m = 0; m < TOKS; ++m) {
      float ss = 0.0f;
      for (int g = 0; g < groups; ++g) {
        const float4 v = __ldg(xrow[m] + g * 32);
        ss = fmaf(v.x, v.x, ss);
        ss = fmaf(v.y, v.y, ss);
        ss = fmaf(v.z, v.z, ss);
        ss = fmaf(v.w, v.w, ss);
      }
      rscale[m] = canonical_rms_scale(WarpTree(ss), K, a.norm_eps);
    }
  }

  float acc[ROWS][TOKS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r)
#pragma unroll
    for (int m = 0; m < TOKS; ++m) acc[r][m] = 0.0f;

  // Activations (and norm weights) are double-buffered like the weights where registers allow,
  // so a group's FMAs never wait on an L2 round trip for x.
  constexpr bool kPrefetchX = TOKS >= 2 && ROWS * TOKS <= 32;
  constexpr int XU = kPrefetchX ? U : 1;
  constexpr int XT = kPrefetchX ? TOKS : 1;
  const bool has_norm = a.norm_weight != nullptr;
  float4 xnext[XU][XT];
  float4 nwnext[XU];
  if constexpr (kPrefetchX) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (u < groups) {
#pragma unroll
        for (int m = 0; m < TOKS; ++m) xnext[u][m] = __ldg(xrow[m] + u * 32);
        if (has_norm) nwnext[u] = __ldg(nw + u * 32);
      }
    }
  }

  for (int g0 = 0; g0 < groups; g0 += U) {
    Raw cur[U][ROWS];
    float4 xcur[XU][XT];
    float4 nwcur[XU];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int r = 0; r < ROWS; ++r) cur[u][r] = next[u][r];
    if constexpr (kPrefetchX) {
#pragma unroll
      for (int u = 0; u < U; ++u) {
#pragma unroll
        for (int m = 0; m < TOKS; ++m) xcur[u][m] = xnext[u][m];
        nwcur[u] = nwnext[u];
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (g0 + U + u < groups) {
#pragma unroll
        for (int r = 0; r < ROWS; ++r) next[u][r] = LoadWeights(wrow[r] + (g0 + U + u) * 32, a.weight_evict_first, policy);
        if constexpr (kPrefetchX) {
#pragma unroll
          for (int m = 0; m < TOKS; ++m) xnext[u][m] = __ldg(xrow[m] + (g0 + U + u) * 32);
          if (has_norm) nwnext[u] = __ldg(nw + (g0 + U + u) * 32);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (g0 + u >= groups) break;
      const int g = g0 + u;
      float wf[ROWS][4];
#pragma unroll
      for (int r = 0; r < ROWS; ++r) W4::ToF32(cur[u][r], wf[r]);
      float4 nwv = make_float4(0.f, 0.f, 0.f, 0.f);
      if (has_norm) {
        if constexpr (kPrefetchX) {
          nwv = nwcur[u];
        } else {
          nwv = __ldg(nw + g * 32);
        }
      }
#pragma unroll
      for (int m = 0; m < TOKS; ++m) {
        float4 xv;
        if constexpr (kPrefetchX) {
          xv = xcur[u][m];
        } else {
          xv = __ldg(xrow[m] + g * 32);
        }
        if (has_norm) xv = NormScale(xv, rscale[m], nwv);
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
          acc[r][m] = fmaf(wf[r][0], xv.x, acc[r][m]);
          acc[r][m] = fmaf(wf[r][1], xv.y, acc[r][m]);
          acc[r][m] = fmaf(wf[r][2], xv.z, acc[r][m]);
          acc[r][m] = fmaf(wf[r][3], xv.w, acc[r][m]);
        }
      }
    }
  }

#pragma unroll
  for (int r = 0; r < ROWS; ++r)
#pragma unroll
    for (int m = 0; m < TOKS; ++m) acc[r][m] = WarpTree(acc[r][m]);
  // Every lane holds every result; lane i stores the outputs of token i % 32.
#pragma unroll
  for (int m = 0; m < TOKS; ++m) {
    if (m >= mt) break;
    if (lane != m % 32) continue;
    float* out = a.out + static_cast<int64_t>(m0 + m) * a.out_stride;
    if (a.epilogue == LinearEpilogue::kSiluMul) {
#pragma unroll
      for (int r = 0; r + 1 < ROWS; r += 2) {
        const int row = row_base + r;
        if (row + 1 < a.w.rows) {
          const int n = row / 2;
          out[a.out_lane_rows ? PermutedIndex(n) : n] = canonical_silu(acc[r][m]) * acc[r + 1][m];
        }
      }
    } else {
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        const int row = row_base + r;
        if (row >= a.w.rows) break;
        const int o = a.out_lane_rows ? static_cast<int>(PermutedIndex(row)) : row;
        if (a.epilogue == LinearEpilogue::kAddBias) {
          out[o] = acc[r][m] + a.bias[row];
        } else if (a.epilogue == LinearEpilogue::kAddResidual) {
          out[o] = out[o] + acc[r][m];
        } else {
          out[o] = acc[r][m];
        }
      }
    }
  }
}


// Where the kRopeStore epilogue puts lane r's pair of rows (r even, r < ROWS), and the constants it
// needs: everything but the two results, so a kernel can look it up before waiting for the previous
// one (positions, block tables, rotary tables and biases are fixed for the whole step).
struct RopeTarget {
  float* dst0 = nullptr;  // null: this lane stores nothing
  float* dst1 = nullptr;
  float cos = 0.0f, sin = 0.0f, bias0 = 0.0f, bias1 = 0.0f;
  bool rotate = false;
};

template <int ROWS>
__device__ __forceinline__ RopeTarget PlanRopeStore(const LinearArgs& a, int row_base, int lane) {
  RopeTarget t;
  const int row = row_base + lane;
  if (lane >= ROWS || lane % 2 != 0 || row + 1 >= a.w.rows) return t;
  const RopeArgs& ra = a.rope;
  const int hd = ra.head_dim, half = hd / 2;
  const int q_rows = ra.num_heads * hd, qk_rows = q_rows + ra.num_kv_heads * hd, kv_dim = ra.num_kv_heads * hd;
  const int pos = ra.pos[0];
  const int64_t slot_row = CacheRow(ra.block_table, pos, ra.block_size);
  if (a.bias != nullptr) {
    t.bias0 = a.bias[row];
    t.bias1 = a.bias[row + 1];
  }
  if (row < qk_rows) {
    const int head = row / hd, i = (row % hd) / 2;
    t.rotate = true;
    t.cos = ra.cos[static_cast<int64_t>(pos) * half + i];
    t.sin = ra.sin[static_cast<int64_t>(pos) * half + i];
    float* dst = head < ra.num_heads ? ra.q_out + head * hd : ra.k_cache + slot_row * kv_dim + (head - ra.num_heads) * hd;
    t.dst0 = dst + i;
    t.dst1 = dst + i + half;
  } else {
    t.dst0 = ra.v_cache + slot_row * kv_dim + (row - qk_rows);
    t.dst1 = t.dst0 + 1;
  }
  return t;
}

// Rows (2p, 2p + 1) of the q|k|v product: a rotary pair of a q or k head, or two consecutive v
// dims; bias, rotary, then q out or k and v into the cache.
template <int ROWS>
__device__ __forceinline__ void StoreRope(const LinearArgs& a, const RopeTarget& t, const float* acc, int lane) {
  if (t.dst0 == nullptr) return;
#pragma unroll
  for (int r = 0; r + 1 < ROWS; r += 2) {
    if (lane != r) continue;
    float x0 = acc[r], x1 = acc[r + 1];
    if (a.bias != nullptr) {
      x0 = x0 + t.bias0;
      x1 = x1 + t.bias1;
    }
    if (t.rotate) canonical_rotate(x0, x1, t.cos, t.sin);
    *t.dst0 = x0;
    *t.dst1 = x1;
  }
}

// The epilogue of a one-token product: every lane holds every row's result; lane r stores row r.
// resid: when set, this lane's value of out at its row (kAddResidual; lane r stores row r), read
// earlier by the caller.
// epi: a.epilogue, or the same kind as a compile-time constant (TmaGemvKernel's EPI).
template <int ROWS>
__device__ __forceinline__ void StoreOneToken(const LinearArgs& a, LinearEpilogue epi, const float* acc, int row_base,
                                              int lane, const float* resid = nullptr) {
  float* out = a.out;
  if (epi == LinearEpilogue::kRopeStore) {
    StoreRope<ROWS>(a, PlanRopeStore<ROWS>(a, row_base, lane), acc, lane);
    return;
  }
  if (epi == LinearEpilogue::kSiluMul) {
#pragma unroll
    for (int r = 0; r + 1 < ROWS; r += 2) {
      const int row = row_base + r;
      if (lane == r && row + 1 < a.w.rows) {
        const int n = row / 2;
        out[a.out_lane_rows ? PermutedIndex(n) : n] = canonical_silu(acc[r]) * acc[r + 1];
      }
    }
  } else {
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      const int row = row_base + r;
      if (lane != r || row >= a.w.rows) continue;
      const int o = a.out_lane_rows ? static_cast<int>(PermutedIndex(row)) : row;
      if (epi == LinearEpilogue::kAddBias) {
        out[o] = acc[r] + a.bias[row];
      } else if (epi == LinearEpilogue::kAddResidual) {
        out[o] = (resid != nullptr ? *resid : out[o]) + acc[r];
      } else {
        out[o] = acc[r];
      }
    }
  }
}

// One-token products (decode at batch 1): a pure stream of the weights, so what matters is how
// many bytes each warp has in flight. A warp owns ROWS rows; lane t keeps a ring of D groups of
// its terms in registers per row and issues the first D groups before waiting for the previous
// kernel (weights never depend on it), so with programmatic dependent launch a layer's weight
// reads overlap the kernels before it. For K <= D x 128 the warp's whole share of the matrix is
// requested up front. The activation row is staged once per block in shared memory. Lane t owns
// the terms k ≡ t (mod 32) in increasing k, exactly as in LinearKernel: same bits.
template <WeightType WT, int ROWS, int D>
__global__ void __launch_bounds__(kThreads, 5) GemvKernel(LinearArgs a) {
  using W4 = Weights4<WT>;
  using Raw = typename W4::Raw;
  extern __shared__ float4 gemv_x[];  // the activation lane row: groups x 32 float4
  LetNextStart();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int K = a.w.cols, KP = a.w.cols_padded;
  const int groups = KP / kGroupCols;
  const int row_base = (blockIdx.x * kWarps + warp) * ROWS;
  const Raw* wrow[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const int row = min(row_base + r, a.w.rows - 1);
    wrow[r] = reinterpret_cast<const Raw*>(static_cast<const char*>(a.w.data) +
                                           static_cast<int64_t>(row) * KP * kWeightBytes<WT>) + lane;
  }
  Raw ring[D][ROWS];
#pragma unroll
  for (int u = 0; u < D; ++u)
    if (u < groups)
#pragma unroll
      for (int r = 0; r < ROWS; ++r) ring[u][r] = __ldg(wrow[r] + u * 32);
  WaitForPrevious();  // weights are constant; x, x_rows and out come from earlier work

  const int src = a.x_rows != nullptr ? a.x_rows[0] : 0;
  const float4* xg = reinterpret_cast<const float4*>(a.x + static_cast<int64_t>(src) * a.x_stride);
  for (int i = threadIdx.x; i < groups * 32; i += kThreads) gemv_x[i] = xg[i];
  __syncthreads();
  const bool has_norm = a.norm_weight != nullptr;
  float rscale = 0.0f;
  if (has_norm) {
    const float ss = LaneRowSumSquares<>(gemv_x, groups, lane);
    rscale = canonical_rms_scale(WarpTree(ss), K, a.norm_eps);
  }
  const float4* nw = reinterpret_cast<const float4*>(a.norm_weight) + lane;

  float acc[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) acc[r] = 0.0f;
  for (int g0 = 0; g0 < groups; g0 += D) {
#pragma unroll
    for (int u = 0; u < D; ++u) {
      const int g = g0 + u;
      if (g < groups) {
        float wf[ROWS][4];
#pragma unroll
        for (int r = 0; r < ROWS; ++r) W4::ToF32(ring[u][r], wf[r]);
        if (g + D < groups)
#pragma unroll
          for (int r = 0; r < ROWS; ++r) ring[u][r] = __ldg(wrow[r] + (g + D) * 32);
        float4 xv = gemv_x[g * 32 + lane];
        if (has_norm) xv = NormScale(xv, rscale, __ldg(nw + g * 32));
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
          acc[r] = fmaf(wf[r][0], xv.x, acc[r]);
          acc[r] = fmaf(wf[r][1], xv.y, acc[r]);
          acc[r] = fmaf(wf[r][2], xv.z, acc[r]);
          acc[r] = fmaf(wf[r][3], xv.w, acc[r]);
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < ROWS; ++r) acc[r] = WarpTree(acc[r]);
  StoreOneToken<ROWS>(a, a.epilogue, acc, row_base, lane);
}

// Registers a lane spends on its ring of weight groups, whatever ROWS and the weight type.
constexpr int kGemvRingRegs = 56;
template <WeightType WT, int ROWS>
constexpr int kGemvDepth = kGemvRingRegs / (ROWS * (WT == WeightType::kF32 ? 4 : 2));
constexpr int kGemvMaxSmem = 160 * 1024;

template <WeightType WT, int ROWS>
cudaError_t LaunchGemv(const LinearArgs& a, cudaStream_t stream) {
  constexpr int D = kGemvDepth<WT, ROWS>;
  static PerDevice<cudaError_t> prepared_on;
  const cudaError_t prepared = prepared_on.Get(
      [] { return cudaFuncSetAttribute(GemvKernel<WT, ROWS, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, kGemvMaxSmem); });
  if (prepared != cudaSuccess) return prepared;
  const int blocks = (a.w.rows + kWarps * ROWS - 1) / (kWarps * ROWS);
  return LaunchChained(GemvKernel<WT, ROWS, D>, dim3(blocks), dim3(kThreads),
                       static_cast<size_t>(a.w.cols_padded) * sizeof(float), stream, a);
}


}  // namespace

namespace {
bool g_programmatic_launch = true;
}  // namespace
bool ProgrammaticLaunch() { return g_programmatic_launch; }
void SetProgrammaticLaunch(bool on) { g_programmatic_launch = on; }

int MultiprocessorCount() {
  static PerDevice<int> count_on;
  return count_on.Get([] {
    int device = 0, n = 0;
    if (cudaGetDevice(&device) != cudaSuccess || cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)
      return 132;
    return n;
  });
}

namespace {

// Hopper's bulk copy engine (TMA, 1-D form) with an mbarrier: one thread asks for a warp's whole
// slice of the matrix in one instruction, the engine streams it into shared memory, and the warp
// waits on the barrier. No registers hold bytes in flight, so a block's slice is requested at
// once whatever its size, and it is requested before the kernel waits for the previous one.
__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void MbarInit(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(SmemAddr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void FenceMbarInit() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
__device__ __forceinline__ void MbarExpectTx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(SmemAddr(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void BulkCopyToShared(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   SmemAddr(dst)),
               "l"(src), "r"(bytes), "r"(SmemAddr(bar))
               : "memory");
}
// A bulk copy of weights, hinted evict_first where asked (see EvictFirstPolicy).
__device__ __forceinline__ void BulkCopyToSharedHinted(void* dst, const void* src, uint32_t bytes, uint64_t* bar,
                                                       bool evict_first, uint64_t policy) {
  if (!evict_first) {
    BulkCopyToShared(dst, src, bytes, bar);
    return;
  }
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(
          SmemAddr(dst)),
      "l"(src), "r"(bytes), "r"(SmemAddr(bar)), "l"(policy)
      : "memory");
}

__device__ __forceinline__ void MbarWait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" ::"r"(SmemAddr(bar)),
      "r"(parity)
      : "memory");
}

// acc[r] = canonical dot of row r of a band of ROWS weight rows in shared memory (permuted
// layout, row_bytes apart) with the activation lane row xs, normalised on the fly when nw is set
// ((x * rscale) * w, as NormScale). Lane t reads its four terms of group g at the same offsets as
// in global memory: the order of LinearKernel, the same bits.
template <WeightType WT, int ROWS, int UNROLL = 4>
__device__ __forceinline__ void SharedBandDot(const unsigned char* band, int64_t row_bytes, const float4* xs,
                                              int groups, int lane, const float4* nw, float rscale, float* acc) {
  using W4 = Weights4<WT>;
  using Raw = typename W4::Raw;
  const Raw* wrow[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) wrow[r] = reinterpret_cast<const Raw*>(band + r * row_bytes) + lane;
#pragma unroll
  for (int r = 0; r < ROWS; ++r) acc[r] = 0.0f;
#pragma unroll UNROLL
  for (int g = 0; g < groups; ++g) {
    float wf[ROWS][4];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) W4::ToF32(wrow[r][g * 32], wf[r]);
    float4 xv = xs[g * 32 + lane];
    if (nw != nullptr) xv = NormScale(xv, rscale, nw[g * 32 + lane]);
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      acc[r] = fmaf(wf[r][0], xv.x, acc[r]);
      acc[r] = fmaf(wf[r][1], xv.y, acc[r]);
      acc[r] = fmaf(wf[r][2], xv.z, acc[r]);
      acc[r] = fmaf(wf[r][3], xv.w, acc[r]);
    }
  }
}

// One-token products through shared memory: warp w of a block owns ROWS consecutive rows, which
// are contiguous in the permuted layout, so thread 0 requests each warp's rows with one bulk copy
// before the kernel waits for the previous one. Then the activation row is staged, and each warp
// waits for its own rows only. Lane t reads its four terms of group g at the same offsets as in
// global memory: the canonical order of LinearKernel, the same bits.
// NORM (0 or 1) and EPI (a LinearEpilogue as int): the fused norm and the epilogue's kind fixed at
// compile time for the common products, -1: read from a. A kernel without the code of the
// epilogues and norm it does not run measured faster (docs/cuda.md, "Code size").
template <WeightType WT, int ROWS, int NORM = -1, int EPI = -1>
__global__ void __launch_bounds__(kThreads) TmaGemvKernel(LinearArgs a) {
  TimelineScope timeline(TimelineKind::kTmaGemv);
  using W4 = Weights4<WT>;
  using Raw = typename W4::Raw;
  extern __shared__ __align__(128) unsigned char tma_smem[];
  __shared__ __align__(8) uint64_t bars[kWarps];
  LetNextStart();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int K = a.w.cols, KP = a.w.cols_padded;
  const int groups = KP / kGroupCols;
  const int64_t row_bytes = static_cast<int64_t>(KP) * kWeightBytes<WT>;
  const int block_row0 = blockIdx.x * kWarps * ROWS;
  unsigned char* wsm = tma_smem;  // (kWarps * ROWS, KP) weights
  float4* xs = reinterpret_cast<float4*>(tma_smem + kWarps * ROWS * row_bytes);  // the activation lane row
  float4* nws = xs + groups * 32;  // the norm's weights, when fused (constants: staged before the wait)
  if (threadIdx.x == 0) {
#pragma unroll
    for (int w = 0; w < kWarps; ++w) MbarInit(&bars[w], 1);
    FenceMbarInit();
    const uint64_t policy = a.weight_evict_first ? EvictFirstPolicy() : 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const int r0 = block_row0 + w * ROWS;
      const int valid = max(0, min(ROWS, a.w.rows - r0));
      const uint32_t bytes = a.bench_skip_weight_reads ? 0u : static_cast<uint32_t>(valid * row_bytes);
      MbarExpectTx(&bars[w], bytes);
      if (bytes > 0)
        BulkCopyToSharedHinted(wsm + w * ROWS * row_bytes, static_cast<const char*>(a.w.data) + r0 * row_bytes, bytes,
                               &bars[w], a.weight_evict_first, policy);
    }
  }
  const int row_base = block_row0 + warp * ROWS;
  const LinearEpilogue epi = EPI < 0 ? a.epilogue : static_cast<LinearEpilogue>(EPI);
  const bool rope = epi == LinearEpilogue::kRopeStore;
  RopeTarget rope_target;
  if (rope) rope_target = PlanRopeStore<ROWS>(a, row_base, lane);
  const bool has_norm = NORM < 0 ? a.norm_weight != nullptr : NORM == 1;
  if (has_norm)
    for (int i = threadIdx.x; i < groups * 32; i += kThreads) nws[i] = reinterpret_cast<const float4*>(a.norm_weight)[i];
  WaitForPrevious();  // weights are constant; x, x_rows and out come from earlier work
  timeline.Waited();

  // The residual this lane will add (row row_base + lane), read now so that its round trip
  // overlaps the activation's instead of ending the kernel.
  const bool residual = epi == LinearEpilogue::kAddResidual;
  float resid = 0.0f;
  if (residual && lane < ROWS && row_base + lane < a.w.rows)
    resid = a.out[a.out_lane_rows ? PermutedIndex(row_base + lane) : row_base + lane];
  TimelinePoint(4);
  const int src = a.x_rows != nullptr ? a.x_rows[0] : 0;
  const float4* xg = reinterpret_cast<const float4*>(a.x + static_cast<int64_t>(src) * a.x_stride);
  for (int i = threadIdx.x; i < groups * 32; i += kThreads) xs[i] = xg[i];
  TimelinePoint(5);
  __syncthreads();  // also publishes the barrier initialisation and the norm's weights to every warp
  TimelinePoint(1);
  float rscale = 0.0f;
  if (has_norm) {
    const float ss = LaneRowSumSquares<>(xs, groups, lane);
    rscale = canonical_rms_scale(WarpTree(ss), K, a.norm_eps);
  }
  MbarWait(&bars[warp], 0);
  TimelinePoint(2);
  float acc[ROWS];
  SharedBandDot<WT, ROWS>(wsm + warp * ROWS * row_bytes, row_bytes, xs, groups, lane,
                          has_norm ? nws : nullptr, rscale, acc);
#pragma unroll
  for (int r = 0; r < ROWS; ++r) acc[r] = WarpTree(acc[r]);
  TimelinePoint(3);
  if (rope) {
    StoreRope<ROWS>(a, rope_target, acc, lane);
  } else {
    StoreOneToken<ROWS>(a, epi, acc, row_base, lane, residual ? &resid : nullptr);
  }
}

constexpr int kTmaGemvMaxSmem = 200 * 1024;

// One-token products of large matrices as a stream: a persistent grid (one block per
// multiprocessor) in which every warp owns the row tiles w, w + W, w + 2W, ... (W warps in all)
// and keeps a ring of `stages` tiles in flight through bulk copies, each completing on its own
// mbarrier. Lane 0 refills a stage as soon as the warp has read it, so a multiprocessor always
// has about stages x 4 tiles of the matrix requested, whatever the matrix's size, and the
// first `stages` tiles are requested before the kernel waits for the previous one. Each tile
// is a whole row band, so every output is still one warp's canonical dot product: the same
// bits as every other kernel here.
constexpr int kStreamMaxStages = 8;

template <WeightType WT, int ROWS>
__global__ void __launch_bounds__(kThreads) StreamGemvKernel(LinearArgs a, int32_t stages) {
  using W4 = Weights4<WT>;
  using Raw = typename W4::Raw;
  extern __shared__ __align__(128) unsigned char stream_smem[];
  __shared__ __align__(8) uint64_t bars[kWarps][kStreamMaxStages];
  LetNextStart();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int K = a.w.cols, KP = a.w.cols_padded;
  const int groups = KP / kGroupCols;
  const int64_t row_bytes = static_cast<int64_t>(KP) * kWeightBytes<WT>;
  const int64_t tile_bytes = ROWS * row_bytes;
  const int tiles = (a.w.rows + ROWS - 1) / ROWS;
  const int stride = gridDim.x * kWarps;
  const int first = blockIdx.x * kWarps + warp;
  unsigned char* ring = stream_smem + static_cast<int64_t>(warp) * stages * tile_bytes;
  float4* xs = reinterpret_cast<float4*>(stream_smem + static_cast<int64_t>(kWarps) * stages * tile_bytes);
  const char* wbase = static_cast<const char*>(a.w.data);
  auto request = [&](int tile, int stage) {
    const int r0 = tile * ROWS;
    const uint32_t bytes = static_cast<uint32_t>(min(ROWS, a.w.rows - r0) * row_bytes);
    MbarExpectTx(&bars[warp][stage], bytes);
    BulkCopyToShared(ring + stage * tile_bytes, wbase + r0 * row_bytes, bytes, &bars[warp][stage]);
  };
  if (lane == 0) {
    for (int s = 0; s < stages; ++s) MbarInit(&bars[warp][s], 1);
    FenceMbarInit();
    for (int s = 0; s < stages; ++s)
      if (first + s * stride < tiles) request(first + s * stride, s);
  }
  WaitForPrevious();  // weights are constant; x, x_rows and out come from earlier work

  const int src = a.x_rows != nullptr ? a.x_rows[0] : 0;
  const float4* xg = reinterpret_cast<const float4*>(a.x + static_cast<int64_t>(src) * a.x_stride);
  for (int i = threadIdx.x; i < groups * 32; i += kThreads) xs[i] = xg[i];
  __syncthreads();  // also publishes the barrier initialisation to every lane
  if (a.norm_weight != nullptr) {
    const float ss = LaneRowSumSquares<>(xs, groups, lane);
    const float r = canonical_rms_scale(WarpTree(ss), K, a.norm_eps);
    const float4* nw = reinterpret_cast<const float4*>(a.norm_weight);
    __syncthreads();  // every warp has its sum of squares before x is overwritten
    for (int i = threadIdx.x; i < groups * 32; i += kThreads) xs[i] = NormScale(xs[i], r, nw[i]);
    __syncthreads();
  }

  int it = 0;
  for (int tile = first; tile < tiles; tile += stride, ++it) {
    const int stage = it % stages;
    MbarWait(&bars[warp][stage], static_cast<uint32_t>((it / stages) & 1));
    float acc[ROWS];
    SharedBandDot<WT, ROWS>(ring + stage * tile_bytes, row_bytes, xs, groups, lane, nullptr, 0.0f, acc);
    // Every lane has consumed the stage (its FMAs used every value it read), so it can be refilled.
    __syncwarp();
    if (lane == 0 && tile + stages * stride < tiles) request(tile + stages * stride, stage);
#pragma unroll
    for (int r = 0; r < ROWS; ++r) acc[r] = WarpTree(acc[r]);
    StoreOneToken<ROWS>(a, a.epilogue, acc, tile * ROWS, lane);
  }
}

// Shared memory of the streaming kernel's weight ring, per block (one block per multiprocessor,
// room left for the neighbouring kernels' blocks to become resident early).
constexpr int64_t kStreamRingBytes = 128 * 1024;

template <WeightType WT, int ROWS>
int StreamStages(const LinearArgs& a) {
  const int64_t tile_bytes = int64_t{ROWS} * a.w.cols_padded * kWeightBytes<WT>;
  return static_cast<int>(std::min<int64_t>(kStreamMaxStages, kStreamRingBytes / (kWarps * tile_bytes)));
}

template <WeightType WT, int ROWS>
cudaError_t LaunchStreamGemv(const LinearArgs& a, cudaStream_t stream) {
  const int stages = StreamStages<WT, ROWS>(a);
  if (stages < 1) return cudaErrorInvalidValue;
  const int64_t smem = int64_t{kWarps} * stages * ROWS * a.w.cols_padded * kWeightBytes<WT> +
                       int64_t{a.w.cols_padded} * sizeof(float);
  static PerDevice<cudaError_t> prepared_on;
  const cudaError_t prepared = prepared_on.Get([] {
    return cudaFuncSetAttribute(StreamGemvKernel<WT, ROWS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                static_cast<int>(kStreamRingBytes + 64 * 1024));
  });
  if (prepared != cudaSuccess) return prepared;
  if (smem > kStreamRingBytes + 64 * 1024) return cudaErrorInvalidValue;
  const int tiles = (a.w.rows + ROWS - 1) / ROWS;
  const int blocks = std::min((tiles + kWarps - 1) / kWarps, MultiprocessorCount());
  return LaunchChained(StreamGemvKernel<WT, ROWS>, dim3(blocks), dim3(kThreads), static_cast<size_t>(smem), stream, a,
                       stages);
}


template <WeightType WT, int ROWS>
int64_t TmaGemvSmem(const LinearArgs& a) {
  return static_cast<int64_t>(kWarps) * ROWS * a.w.cols_padded * kWeightBytes<WT> +
         static_cast<int64_t>(a.w.cols_padded) * sizeof(float) * (a.norm_weight != nullptr ? 2 : 1);
}

template <WeightType WT, int ROWS, int NORM, int EPI>
cudaError_t LaunchTmaGemvFor(const LinearArgs& a, cudaStream_t stream) {
  static PerDevice<cudaError_t> prepared_on;
  const cudaError_t prepared = prepared_on.Get([] {
    return cudaFuncSetAttribute(TmaGemvKernel<WT, ROWS, NORM, EPI>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                kTmaGemvMaxSmem);
  });
  if (prepared != cudaSuccess) return prepared;
  const int blocks = (a.w.rows + kWarps * ROWS - 1) / (kWarps * ROWS);
  return LaunchChained(TmaGemvKernel<WT, ROWS, NORM, EPI>, dim3(blocks), dim3(kThreads),
                       static_cast<size_t>(TmaGemvSmem<WT, ROWS>(a)), stream, a);
}

// The kernel compiled for the product where it is one of a layer's (the rows each takes, as
// LaunchLinearTyped chooses them): q|k|v's rotary store (2 rows), gate|up's SiLU (2 or 4), o's and
// down's residual (1), each with its norm fused or not; the rest take the kernel that reads both.
template <WeightType WT, int ROWS>
cudaError_t LaunchTmaGemv(const LinearArgs& a, cudaStream_t stream) {
  constexpr int kRope = static_cast<int>(LinearEpilogue::kRopeStore);
  constexpr int kSilu = static_cast<int>(LinearEpilogue::kSiluMul);
  constexpr int kResidual = static_cast<int>(LinearEpilogue::kAddResidual);
  const bool norm = a.norm_weight != nullptr;
  if constexpr (ROWS == 2) {
    if (a.epilogue == LinearEpilogue::kRopeStore)
      return norm ? LaunchTmaGemvFor<WT, ROWS, 1, kRope>(a, stream) : LaunchTmaGemvFor<WT, ROWS, 0, kRope>(a, stream);
  }
  if constexpr (ROWS >= 2) {
    if (a.epilogue == LinearEpilogue::kSiluMul)
      return norm ? LaunchTmaGemvFor<WT, ROWS, 1, kSilu>(a, stream) : LaunchTmaGemvFor<WT, ROWS, 0, kSilu>(a, stream);
  }
  if constexpr (ROWS == 1) {
    if (a.epilogue == LinearEpilogue::kAddResidual && !norm) return LaunchTmaGemvFor<WT, ROWS, 0, kResidual>(a, stream);
  }
  return LaunchTmaGemvFor<WT, ROWS, -1, -1>(a, stream);
}

// A barrier across the whole grid (every block resident: see LaunchMlpBlock). Sense by
// generation: thread 0 reads the generation, arrives, and the last block to arrive resets the
// count and bumps the generation, so the counters never need resetting between launches.
// Writes before the barrier are visible to reads after it that bypass L1 (__ldcg): L1 is not
// coherent across multiprocessors, so a block reads other blocks' results only through L2.
__device__ __forceinline__ void GridBarrier(uint32_t* counters) {
  __syncthreads();
  if (threadIdx.x == 0) {
    volatile uint32_t* generation = counters + 1;
    const uint32_t g = *generation;
    __threadfence();
    if (atomicAdd(counters, 1u) == gridDim.x - 1) {
      atomicExch(counters, 0u);
      __threadfence();
      atomicAdd(counters + 1, 1u);
    } else {
      while (*generation == g) {
      }
    }
    __threadfence();
  }
  __syncthreads();
}

// The tiles of the three products of MlpBlockKernel, in the order every warp visits them:
// phase 0 the o product (one row per tile), phase 1 gate|up (four rows: two gate/up pairs),
// phase 2 the down product (one row). Warp w of W takes tiles w, w + W, ... of each phase.
struct MlpCursor {
  int phase;
  int tile;
};

__device__ __forceinline__ const LinearArgs& MlpPhase(const MlpBlockArgs& f, int phase) {
  return phase == 0 ? f.out : phase == 1 ? f.gate_up : f.down;
}
__device__ __forceinline__ int MlpRows(int phase) { return phase == 1 ? 4 : 1; }
__device__ __forceinline__ int MlpTiles(const MlpBlockArgs& f, int phase) {
  return (MlpPhase(f, phase).w.rows + MlpRows(phase) - 1) / MlpRows(phase);
}
__device__ __forceinline__ void MlpSkipEmpty(const MlpBlockArgs& f, MlpCursor& c, int first) {
  while (c.phase < 3 && c.tile >= MlpTiles(f, c.phase)) {
    ++c.phase;
    c.tile = first;
  }
}

// One tile: the dot products, then `refill` (the band is free again), then the epilogue.
template <WeightType WT, int ROWS, typename Refill>
__device__ __forceinline__ void MlpTile(const LinearArgs& a, const unsigned char* band, const float4* xs, int tile,
                                        int lane, Refill refill) {
  const int64_t row_bytes = static_cast<int64_t>(a.w.cols_padded) * kWeightBytes<WT>;
  float acc[ROWS];
  SharedBandDot<WT, ROWS>(band, row_bytes, xs, a.w.cols_padded / kGroupCols, lane, nullptr, 0.0f, acc);
  __syncwarp();  // every lane has consumed the band (its FMAs used every value it read)
  refill();
  const int row = tile * ROWS + lane;
  float resid = 0.0f;  // through L2: other blocks wrote the residual stream since this SM last read it
  if (a.epilogue == LinearEpilogue::kAddResidual && lane < ROWS && row < a.w.rows)
    resid = __ldcg(a.out + (a.out_lane_rows ? PermutedIndex(row) : row));
#pragma unroll
  for (int r = 0; r < ROWS; ++r) acc[r] = WarpTree(acc[r]);
  StoreOneToken<ROWS>(a, a.epilogue, acc, tile * ROWS, lane,
                      a.epilogue == LinearEpilogue::kAddResidual ? &resid : nullptr);
}

// o product + residual, RMSNorm + gate|up + SiLU, down product + residual of one token in one
// persistent launch: the two dependencies between them are grid barriers instead of kernel
// boundaries, and every warp's ring of bulk copies runs ahead through all three matrices (the
// next phase's tiles arrive while the grid waits at a barrier). Each tile is a band of whole rows:
// every output is one warp's canonical dot product, the same bits as the separate kernels.
constexpr int kMlpMaxWarps = 16;

template <WeightType WT>
__global__ void __launch_bounds__(kMlpMaxWarps * 32) MlpBlockKernel(MlpBlockArgs f, int32_t slots, int32_t slot_bytes) {
  extern __shared__ __align__(128) unsigned char mlp_smem[];
  __shared__ __align__(8) uint64_t bars[kMlpMaxWarps][kStreamMaxStages];
  LetNextStart();
  const int warps = blockDim.x / 32, threads = blockDim.x;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int stride = gridDim.x * warps;
  const int first = blockIdx.x * warps + warp;
  unsigned char* ring = mlp_smem + static_cast<int64_t>(warp) * slots * slot_bytes;
  float4* xs = reinterpret_cast<float4*>(mlp_smem + static_cast<int64_t>(warps) * slots * slot_bytes);
  MlpCursor next{0, first};  // the next tile lane 0 requests
  auto request = [&](int slot) {
    const LinearArgs& a = MlpPhase(f, next.phase);
    const int rows = MlpRows(next.phase);
    const int64_t row_bytes = static_cast<int64_t>(a.w.cols_padded) * kWeightBytes<WT>;
    const int r0 = next.tile * rows;
    const uint32_t bytes = static_cast<uint32_t>(min(rows, a.w.rows - r0) * row_bytes);
    MbarExpectTx(&bars[warp][slot], bytes);
    BulkCopyToShared(ring + static_cast<int64_t>(slot) * slot_bytes, static_cast<const char*>(a.w.data) + r0 * row_bytes,
                     bytes, &bars[warp][slot]);
    next.tile += stride;
    MlpSkipEmpty(f, next, first);
  };
  if (lane == 0) {
    for (int s = 0; s < slots; ++s) MbarInit(&bars[warp][s], 1);
    FenceMbarInit();
    MlpSkipEmpty(f, next, first);
    for (int s = 0; s < slots && next.phase < 3; ++s) request(s);
  }
  WaitForPrevious();

  int it = 0;
  for (int phase = 0; phase < 3; ++phase) {
    const LinearArgs& a = MlpPhase(f, phase);
    if (phase > 0) GridBarrier(f.barrier);  // the previous phase's outputs are complete
    const int groups = a.w.cols_padded / kGroupCols;
    const float4* xg = reinterpret_cast<const float4*>(a.x);
    for (int i = threadIdx.x; i < groups * 32; i += threads) xs[i] = __ldcg(xg + i);
    __syncthreads();
    if (a.norm_weight != nullptr) {
      const float r = canonical_rms_scale(WarpTree(LaneRowSumSquares<>(xs, groups, lane)), a.w.cols, a.norm_eps);
      const float4* nw = reinterpret_cast<const float4*>(a.norm_weight);
      __syncthreads();  // every warp has its sum of squares before x is overwritten
      for (int i = threadIdx.x; i < groups * 32; i += threads) xs[i] = NormScale(xs[i], r, nw[i]);
      __syncthreads();
    }
    const int tiles = MlpTiles(f, phase);
    for (int tile = first; tile < tiles; tile += stride, ++it) {
      const int slot = it % slots;
      MbarWait(&bars[warp][slot], static_cast<uint32_t>((it / slots) & 1));
      const unsigned char* band = ring + static_cast<int64_t>(slot) * slot_bytes;
      auto refill = [&] {
        if (lane == 0 && next.phase < 3) request(slot);
      };
      if (phase == 1) {
        MlpTile<WT, 4>(a, band, xs, tile, lane, refill);
      } else {
        MlpTile<WT, 1>(a, band, xs, tile, lane, refill);
      }
    }
    __syncthreads();  // xs is restaged next phase
  }
}

// Per-block shared memory of MlpBlockKernel's rings (one block per multiprocessor).
constexpr int64_t kMlpRingBytes = 160 * 1024;

// The ring slot (the largest tile of the three matrices), the activation staging, and the most
// warps per block (16, 8 or 4) that still leave each warp two slots.
struct MlpBlockPlan {
  int64_t slot = 0, xs = 0;
  int warps = 0, slots = 0;
};

MlpBlockPlan PlanMlpBlock(const MlpBlockArgs& f, int max_warps) {
  const int64_t eb = f.out.w.type == WeightType::kF32 ? 4 : 2;
  MlpBlockPlan p;
  p.slot = std::max({int64_t{f.out.w.cols_padded} * eb, int64_t{4} * f.gate_up.w.cols_padded * eb,
                     int64_t{f.down.w.cols_padded} * eb});
  p.xs = int64_t{4} * std::max({f.out.w.cols_padded, f.gate_up.w.cols_padded, f.down.w.cols_padded});
  for (int w = max_warps; w >= 4; w /= 2) {
    const int64_t slots = std::min<int64_t>(kStreamMaxStages, kMlpRingBytes / (w * p.slot));
    if (slots >= 2 && w * slots * p.slot + p.xs <= kMlpRingBytes + 48 * 1024) {
      p.warps = w;
      p.slots = static_cast<int>(slots);
      return p;
    }
  }
  return p;  // warps 0: does not fit
}

int g_mlp_block_max_warps = kMlpMaxWarps;  // SetMlpBlockMaxWarps

template <WeightType WT>
cudaError_t LaunchMlpBlockTyped(const MlpBlockArgs& f, cudaStream_t stream) {
  const MlpBlockPlan p = PlanMlpBlock(f, g_mlp_block_max_warps);
  if (p.warps == 0) return cudaErrorInvalidValue;
  const int64_t smem = int64_t{p.warps} * p.slots * p.slot + p.xs;
  static PerDevice<cudaError_t> prepared_on;
  const cudaError_t prepared = prepared_on.Get([] {
    return cudaFuncSetAttribute(MlpBlockKernel<WT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                static_cast<int>(kMlpRingBytes + 48 * 1024));
  });
  if (prepared != cudaSuccess) return prepared;
  // One block per multiprocessor, and no more blocks than one per SM can hold: the grid barrier
  // needs every block resident at once. The kernel lets the next one launch only after all its
  // blocks have started, so a waiting successor never takes a block's place. Cooperative, so that
  // where they cannot all be resident the launch fails instead of hanging.
  return LaunchChainedImpl(/*cooperative=*/true, MlpBlockKernel<WT>, dim3(MultiprocessorCount()), dim3(p.warps * 32),
                           static_cast<size_t>(smem), stream, f, p.slots, static_cast<int32_t>(p.slot));
}

template <WeightType WT, int ROWS, int TOKS>
cudaError_t LaunchLinearTile(const LinearArgs& a, cudaStream_t stream) {
  const dim3 grid((a.tokens + TOKS - 1) / TOKS, (a.w.rows + kWarps * ROWS - 1) / (kWarps * ROWS));
  if (grid.y > 65535) return cudaErrorInvalidConfiguration;
  return LaunchChained(LinearKernel<WT, ROWS, TOKS>, grid, dim3(kThreads), 0, stream, a);
}

int g_large_batch_tile = -1;  // SetLargeBatchTile; -1: chosen by size
int g_late_prefetch = -1;  // SetLatePrefetch
std::atomic<int64_t> g_late_prefetch_launches{0};
int g_attention_variant = -1;  // SetAttentionVariant; -1: chosen by grid size (LaunchAttention)
int g_one_token_kernel = 0;   // SetOneTokenKernel; 0: chosen by size
bool g_weight_evict_first = true;  // SetWeightEvictFirst

// The variant of the separate one-token launches: 7, 8 and 9 only choose whether the whole step runs
// as one DecodeStepKernel; where it does not, launches are chosen as by default.
int g_step_prefetch_tiles = 0;  // SetStepPrefetchTiles

int SeparateKernelVariant() { return g_one_token_kernel >= 7 ? 0 : g_one_token_kernel; }


// Batched products (more tokens than one warp's register tile holds) as a shared-memory tiled
// kernel. A block computes BR = R x WRW rows for BT = T x KS x WTW tokens over the canonical
// lanes (classes) [32 s / KS, 32 (s + 1) / KS) of K, s = blockIdx.z. Warp (wr, wt) owns R rows x
// T x KS tokens; its lane L takes class 32 s / KS + L % CPB (CPB = 32 / KS classes per block) for
// the T tokens of sub-tile L / CPB. The K dimension advances one 128-column group per pipeline
// stage (KS groups per stage when K is split): cp.async brings the block's slice of each group
// (its classes' terms of BR weight rows, raw, and of BT activation lane rows) into a ring of
// shared-memory stages, STAGES - 1 stages ahead of use, and a lane reads its four terms of each
// row and token there in increasing k, so every class sum is the canonical one. Each weight read
// serves T tokens, each activation R rows, so a
// multiprocessor's FMA units are not starved by load bandwidth the way LinearKernel's 4 x 8
// register tile (operands from L1/L2) is.
//
// Then the canonical tree. Its first log2(KS) levels pair classes that lie in different blocks
// (c and c + 16 are in blocks s and s + KS / 2), so with KS > 1 each block writes its class sums
// to a scratch buffer, and the last block of the tile to finish (a ticket counter it resets)
// combines the KS sums of each class in the tree's order (the tree over KS values: off KS/2..1),
// which does not depend on who finishes last. The remaining levels are a reduce-scatter
// butterfly inside the warp: at level off (CPB/2..1) lanes L and L ^ off add exactly the pairs
// the tree adds and each keeps half of the outputs (the upper half where L has bit off), so
// lane L ends with outputs (L % CPB) x RT/CPB + j of its sub-tile, and stores them.
// The activations must already be normalised (no norm_weight): the caller runs LaunchRmsNorm.
template <WeightType WT, int R, int T, int WRW, int WTW, int KS>
struct TiledShape {
  static constexpr int kWarpsN = WRW * WTW;
  static constexpr int kThreadsN = kWarpsN * 32;
  static constexpr int kCpb = 32 / KS;                // classes per block
  static constexpr int kRows = R * WRW;               // BR
  static constexpr int kWarpToks = T * KS;            // tokens per warp: KS sub-tiles of T
  static constexpr int kToks = kWarpToks * WTW;       // BT
  static constexpr int kWeightSliceBytes = kCpb * 4 * kWeightBytes<WT>;  // one row's classes of a group
  static constexpr int kActSliceBytes = kCpb * 16;
  // A stage holds kCg consecutive groups: a split block's stage carries as many terms as an
  // unsplit block's (one group's slice of 32 / KS classes would be all synchronisation).
  static constexpr int kCg = KS;
  static constexpr int kGroupBytes = kRows * kWeightSliceBytes + kToks * kActSliceBytes;  // one group's slices
  static constexpr int kStageBytes = kCg * kGroupBytes;
  static constexpr int kStages = KS == 1 ? 5 : 3;
  static constexpr int kSmemBytes = kStages * kStageBytes;
  static constexpr int kWeightChunksG = kRows * kWeightSliceBytes / 16;  // 16-byte cp.async per group
  static constexpr int kActChunksG = kToks * kActSliceBytes / 16;
  static constexpr int kWeightChunks = kCg * kWeightChunksG;  // per stage
  static constexpr int kActChunks = kCg * kActChunksG;
  static constexpr int kN = R * T;     // accumulators per lane
  static constexpr int kPer = kN / kCpb;  // outputs a lane stores
  static_assert(KS == 1 || KS == 2 || KS == 4 || KS == 8, "whole 16-byte class slices");
  static_assert(kWeightSliceBytes % 16 == 0, "16-byte cp.async chunks");
  static_assert(kN >= kCpb && (kN & (kN - 1)) == 0, "the reduce-scatter halves R x T down to RT / CPB");
  // The SiLU epilogue needs a gate/up row pair in one lane: two or more outputs per lane.
  static constexpr bool kCanSilu = kPer >= 2;
  static constexpr int64_t kScratchFloatsPerTile = int64_t{kRows} * kToks * 32;
};

__device__ __forceinline__ void CpAsync16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(SmemAddr(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// Levels OFF, OFF/2, .., 1 of the reduce-scatter: lanes L and L ^ off add the same pair of partial
// sums the canonical tree adds at that level (IEEE addition commutes) and keep one half each, the
// upper half where L has bit `off`. Level OFF picks the top index bit by lane bit OFF, the next
// level the next bit, so afterwards lane L holds the outputs (L % (2 OFF)) x N / (2 OFF) + j.
template <int N, int OFF>
__device__ __forceinline__ void ReduceScatter(float* v, int lane) {
  if constexpr (OFF >= 1) {
    const bool upper = (lane & OFF) != 0;
#pragma unroll
    for (int i = 0; i < N / 2; ++i) {
      const float send = upper ? v[i] : v[i + N / 2];
      const float keep = upper ? v[i + N / 2] : v[i];
      v[i] = keep + __shfl_xor_sync(0xffffffffu, send, OFF);
    }
    ReduceScatter<N / 2, OFF / 2>(v, lane);
  }
}

// Small tiles (R x T <= 32) leave registers for more than one block per multiprocessor.
template <WeightType WT, int R, int T, int WRW, int WTW, int KS>
__global__ void __launch_bounds__(WRW * WTW * 32, (R * T <= 32 ? (WRW * WTW <= 4 ? 3 : 2) : 1))
    TiledLinearKernel(LinearArgs a) {
  TimelineScope timeline(TimelineKind::kTiled);
  using S = TiledShape<WT, R, T, WRW, WTW, KS>;
  using W4 = Weights4<WT>;
  using Raw = typename W4::Raw;
  constexpr int N = S::kN;
  constexpr int kPer = S::kPer;
  constexpr int kCpb = S::kCpb;
  constexpr int kWeightPer = (S::kWeightChunks + S::kThreadsN - 1) / S::kThreadsN;
  constexpr int kActPer = (S::kActChunks + S::kThreadsN - 1) / S::kThreadsN;
  constexpr int kWeightRowChunks = S::kWeightSliceBytes / 16;
  constexpr int kActRowChunks = S::kActSliceBytes / 16;
  extern __shared__ __align__(16) unsigned char tiled_smem[];
  __shared__ int tiled_last;
  LetNextStart();
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wr = warp % WRW, wt = warp / WRW;
  const int cls = lane % kCpb, sub = lane / kCpb;
  const int split = blockIdx.z;
  const int m0 = blockIdx.x * S::kToks;
  const int mt = min(S::kToks, a.tokens - m0);
  const int row0 = blockIdx.y * S::kRows;
  const int groups = a.w.cols_padded / kGroupCols;

  constexpr int64_t kGroupWeightBytes = int64_t{kGroupCols} * kWeightBytes<WT>;
  const int pstages = (groups + S::kCg - 1) / S::kCg;  // pipeline stages of kCg groups

  // Each thread copies the same chunks of every stage: fixed rows, tokens and group-in-stage,
  // advancing one stage. Rows past the matrix and tokens past the batch read valid memory (the
  // last row, the first token) and are never stored; groups past K are not copied nor read.
  const char* wsrc[kWeightPer];
  int wdst[kWeightPer], wcg[kWeightPer];
#pragma unroll
  for (int q = 0; q < kWeightPer; ++q) {
    const int c = min(tid + q * S::kThreadsN, S::kWeightChunks - 1);
    const int cg = c / S::kWeightChunksG, cr = c % S::kWeightChunksG;
    const int r = cr / kWeightRowChunks, ch = cr % kWeightRowChunks;
    const int row = min(row0 + r, a.w.rows - 1);
    wsrc[q] = static_cast<const char*>(a.w.data) + static_cast<int64_t>(row) * a.w.cols_padded * kWeightBytes<WT> +
              cg * kGroupWeightBytes + split * S::kWeightSliceBytes + ch * 16;
    wdst[q] = cg * S::kGroupBytes + r * S::kWeightSliceBytes + ch * 16;
    wcg[q] = cg;
  }
  // (No L2 hint here: cp.async with L2::cache_hint stopped these kernels with an illegal
  // instruction on an H200, driver 580.)
  auto issue_weights = [&](int p, int buf) {
    unsigned char* st = tiled_smem + buf * S::kStageBytes;
#pragma unroll
    for (int q = 0; q < kWeightPer; ++q)
      if ((S::kWeightChunks % S::kThreadsN == 0 || tid + q * S::kThreadsN < S::kWeightChunks) &&
          (S::kCg == 1 || p * S::kCg + wcg[q] < groups))
        CpAsync16(st + wdst[q], wsrc[q] + static_cast<int64_t>(p) * S::kCg * kGroupWeightBytes);
  };
  const int stages = min(S::kStages - 1, pstages);  // stages requested ahead of the first use
  // Weights never depend on the previous kernel: request them before waiting for it.
  for (int st = 0; st < stages; ++st) issue_weights(st, st);
  CpAsyncCommit();
  // The epilogue's operands, so that no round trip ends the kernel: this lane's outputs j are
  // (token ep_m[j], row ep_row[j]); their biases (constants) are read now, the residual right
  // after the wait (final by then: this kernel is the one that updates it). Split tiles read them
  // in the one block that finishes the tile, at the end (8 blocks reading them all cost more).
  int ep_m[kPer], ep_row[kPer];
  float ep_add[kPer];
  auto read_bias = [&] {
#pragma unroll
    for (int j = 0; j < kPer; ++j)
      if (a.epilogue == LinearEpilogue::kAddBias && ep_m[j] < mt && ep_row[j] < a.w.rows)
        ep_add[j] = a.bias[ep_row[j]];
  };
  auto read_residual = [&] {
#pragma unroll
    for (int j = 0; j < kPer; ++j)
      if (a.epilogue == LinearEpilogue::kAddResidual && ep_m[j] < mt && ep_row[j] < a.w.rows)
        ep_add[j] = a.out[static_cast<int64_t>(m0 + ep_m[j]) * a.out_stride +
                          (a.out_lane_rows ? static_cast<int>(PermutedIndex(ep_row[j])) : ep_row[j])];
  };
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int i = cls * kPer + j;
    ep_m[j] = wt * S::kWarpToks + sub * T + i / R;
    ep_row[j] = row0 + wr * R + i % R;
    ep_add[j] = 0.0f;
  }
  if constexpr (KS == 1) read_bias();
  WaitForPrevious();
  timeline.Waited();
  if constexpr (KS == 1) read_residual();

  const float* xsrc[kActPer];
  int xdst[kActPer], xcg[kActPer];
#pragma unroll
  for (int q = 0; q < kActPer; ++q) {
    const int c = min(tid + q * S::kThreadsN, S::kActChunks - 1);
    const int cg = c / S::kActChunksG, cr = c % S::kActChunksG;
    const int m = cr / kActRowChunks, ch = cr % kActRowChunks;
    const int mm = m0 + (m < mt ? m : 0);
    const int src = a.x_rows != nullptr ? a.x_rows[mm] : mm;
    xsrc[q] = a.x + static_cast<int64_t>(src) * a.x_stride + cg * kGroupCols + split * (S::kActSliceBytes / 4) + ch * 4;
    xdst[q] = cg * S::kGroupBytes + S::kRows * S::kWeightSliceBytes + m * S::kActSliceBytes + ch * 16;
    xcg[q] = cg;
  }
  auto issue_acts = [&](int p, int buf) {
    unsigned char* st = tiled_smem + buf * S::kStageBytes;
#pragma unroll
    for (int q = 0; q < kActPer; ++q)
      if ((S::kActChunks % S::kThreadsN == 0 || tid + q * S::kThreadsN < S::kActChunks) &&
          (S::kCg == 1 || p * S::kCg + xcg[q] < groups))
        CpAsync16(st + xdst[q], xsrc[q] + static_cast<int64_t>(p) * S::kCg * kGroupCols);
  };
  for (int st = 0; st < S::kStages - 1; ++st) {
    if (st < stages) issue_acts(st, st);
    CpAsyncCommit();  // empty groups keep the count uniform: group st + 1 holds stage st's activations
  }

  float acc[N];  // acc[t * R + r]: row r, token t of this lane's sub-tile (SiLU pairs stay in one lane)
#pragma unroll
  for (int i = 0; i < N; ++i) acc[i] = 0.0f;

  for (int p = 0; p < pstages; ++p) {
    CpAsyncWait<S::kStages - 2>();  // this stage's weights and activations have landed (this thread's)
    __syncthreads();                // ... and everyone's; and stage p - 1's buffer is free again
    const int next = p + S::kStages - 1;
    if (next < pstages) {
      issue_weights(next, next % S::kStages);
      issue_acts(next, next % S::kStages);
    }
    CpAsyncCommit();
#pragma unroll
    for (int cg = 0; cg < S::kCg; ++cg) {
      if (S::kCg > 1 && p * S::kCg + cg >= groups) break;
      const unsigned char* st = tiled_smem + (p % S::kStages) * S::kStageBytes + cg * S::kGroupBytes;
      const Raw* ws = reinterpret_cast<const Raw*>(st + wr * R * S::kWeightSliceBytes) + cls;
      const float4* xs = reinterpret_cast<const float4*>(st + S::kRows * S::kWeightSliceBytes) +
                         (wt * S::kWarpToks + sub * T) * kCpb + cls;
      float wf[R][4];
#pragma unroll
      for (int r = 0; r < R; ++r) W4::ToF32(ws[r * (S::kWeightSliceBytes / static_cast<int>(sizeof(Raw)))], wf[r]);
#pragma unroll
      for (int t = 0; t < T; ++t) {
        const float4 xv = xs[t * kCpb];
#pragma unroll
        for (int r = 0; r < R; ++r) {
          float& c = acc[t * R + r];
          c = fmaf(wf[r][0], xv.x, c);
          c = fmaf(wf[r][1], xv.y, c);
          c = fmaf(wf[r][2], xv.z, c);
          c = fmaf(wf[r][3], xv.w, c);
        }
      }
    }
  }
  CpAsyncWait<0>();

  if constexpr (KS > 1) {
    // Publish this block's class sums; the tile's last block combines them.
    const int64_t tile = static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x;
    float* tile_scratch = a.split_scratch + tile * S::kScratchFloatsPerTile;
    const int64_t lane_base = static_cast<int64_t>(warp) * N * 32 + lane;
    const int64_t split_floats = static_cast<int64_t>(S::kWarpsN) * N * 32;
#pragma unroll
    for (int i = 0; i < N; ++i) __stcg(tile_scratch + split * split_floats + lane_base + i * 32, acc[i]);
    __threadfence();
    __syncthreads();
    if (tid == 0) {
      const unsigned ticket = atomicAdd(a.split_tickets + tile, 1u);
      tiled_last = ticket == KS - 1;
      if (ticket == KS - 1) a.split_tickets[tile] = 0;  // ready for the next launch (graph replays)
    }
    __syncthreads();
    if (!tiled_last) return;
    __threadfence();
    read_bias();
    read_residual();
#pragma unroll
    for (int i = 0; i < N; ++i) {
      float v[KS];
#pragma unroll
      for (int k = 0; k < KS; ++k)
        v[k] = k == split ? acc[i] : __ldcg(tile_scratch + k * split_floats + lane_base + i * 32);
      // Block k holds class k x CPB + cls: the tree's first levels pair blocks k and k + off.
#pragma unroll
      for (int off = KS / 2; off >= 1; off >>= 1)
#pragma unroll
        for (int k = 0; k < off; ++k) v[k] = v[k] + v[k + off];
      acc[i] = v[0];
    }
  }
  ReduceScatter<N, kCpb / 2>(acc, lane);

#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int m = ep_m[j], row = ep_row[j];
    if (m >= mt) continue;
    float* out = a.out + static_cast<int64_t>(m0 + m) * a.out_stride;
    if (a.epilogue == LinearEpilogue::kSiluMul) {
      // kPer is even and i starts even: rows (2n, 2n + 1) are j and j + 1 of this lane (the
      // launcher never runs SiLU with one output per lane).
      if (kPer >= 2 && j % 2 == 0 && j + 1 < kPer && row + 1 < a.w.rows) {
        const int n = row / 2;
        out[a.out_lane_rows ? PermutedIndex(n) : n] = canonical_silu(acc[j]) * acc[j + 1];
      }
      continue;
    }
    if (row >= a.w.rows) continue;
    const int o = a.out_lane_rows ? static_cast<int>(PermutedIndex(row)) : row;
    if (a.epilogue == LinearEpilogue::kAddBias) {
      out[o] = acc[j] + ep_add[j];  // bias
    } else if (a.epilogue == LinearEpilogue::kAddResidual) {
      out[o] = ep_add[j] + acc[j];  // the residual, read after the wait
    } else {
      out[o] = acc[j];
    }
  }
}

std::atomic<int64_t> g_tiled_launches{0};  // host-side count of TiledLinearKernel launches (tests)

template <WeightType WT, int R, int T, int WRW, int WTW, int KS>
int64_t TiledBlocks(const LinearArgs& a) {
  using S = TiledShape<WT, R, T, WRW, WTW, KS>;
  return static_cast<int64_t>((a.w.rows + S::kRows - 1) / S::kRows) * ((a.tokens + S::kToks - 1) / S::kToks) * KS;
}

// Whether the split tile's scratch and tickets (LinearArgs::split_*) cover this product.
template <WeightType WT, int R, int T, int WRW, int WTW, int KS>
bool TiledSplitFits(const LinearArgs& a) {
  using S = TiledShape<WT, R, T, WRW, WTW, KS>;
  if (KS == 1) return true;
  const int64_t tiles = TiledBlocks<WT, R, T, WRW, WTW, KS>(a) / KS;
  return a.split_scratch != nullptr && a.split_tickets != nullptr && tiles <= a.split_tickets_count &&
         tiles * S::kScratchFloatsPerTile <= a.split_scratch_floats;
}

template <WeightType WT, int R, int T, int WRW, int WTW, int KS>
cudaError_t LaunchTiledLinear(const LinearArgs& a, cudaStream_t stream) {
  using S = TiledShape<WT, R, T, WRW, WTW, KS>;
  if (a.epilogue == LinearEpilogue::kSiluMul && !S::kCanSilu) return cudaErrorInvalidValue;
  if (a.norm_weight != nullptr || a.epilogue == LinearEpilogue::kRopeStore) return cudaErrorInvalidValue;
  if (!TiledSplitFits<WT, R, T, WRW, WTW, KS>(a)) return cudaErrorInvalidValue;
  static PerDevice<cudaError_t> prepared_on;
  const cudaError_t prepared = prepared_on.Get([] {
    return cudaFuncSetAttribute(TiledLinearKernel<WT, R, T, WRW, WTW, KS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                S::kSmemBytes);
  });
  if (prepared != cudaSuccess) return prepared;
  const dim3 grid((a.tokens + S::kToks - 1) / S::kToks, (a.w.rows + S::kRows - 1) / S::kRows, KS);
  if (grid.y > 65535) return cudaErrorInvalidConfiguration;
  g_tiled_launches.fetch_add(1, std::memory_order_relaxed);
  return LaunchChained(TiledLinearKernel<WT, R, T, WRW, WTW, KS>, grid, dim3(S::kThreadsN), S::kSmemBytes, stream, a);
}

template <WeightType WT>
cudaError_t LaunchLinearTyped(const LinearArgs& a, cudaStream_t stream) {
  // Tile shapes only change which thread computes an output, never its order of operations.
  // The SiLU epilogue needs gate and up rows (2n, 2n + 1) in one warp: ROWS >= 2.
  const bool silu = a.epilogue == LinearEpilogue::kSiluMul;
  if (a.epilogue == LinearEpilogue::kRopeStore && !CanFuseRope(a)) return cudaErrorInvalidValue;
  if (a.tokens == 1) {
    // Pure weight streams. Matrices of many waves (the lm_head) already stream at the copy
    // bandwidth with the plain tile; the per-layer products are one or two waves and need
    // their loads issued early (GemvKernel).
    const int variant = SeparateKernelVariant();
    const bool many_waves = a.w.rows >= 65536 && variant != 3 && variant != 4;
    if (variant == 1 || many_waves) {
      if (a.w.rows >= 8192) return LaunchLinearTile<WT, 4, 1>(a, stream);
      if (silu) return LaunchLinearTile<WT, 2, 1>(a, stream);
      return LaunchLinearTile<WT, 1, 1>(a, stream);
    }
    const bool gemv = static_cast<int64_t>(a.w.cols_padded) * 4 <= kGemvMaxSmem;
    if (variant == 2 || !gemv) {
      if (a.w.rows >= 8192) return gemv ? LaunchGemv<WT, 4>(a, stream) : LaunchLinearTile<WT, 4, 1>(a, stream);
      if (silu) return gemv ? LaunchGemv<WT, 2>(a, stream) : LaunchLinearTile<WT, 2, 1>(a, stream);
      return gemv ? LaunchGemv<WT, 1>(a, stream) : LaunchLinearTile<WT, 1, 1>(a, stream);
    }
    // Streaming (persistent grid, a ring of bulk copies per warp): every product with variant 3,
    // the matrices of many tiles (gate|up, the lm_head) with variant 4.
    const int stream_rows = a.epilogue == LinearEpilogue::kRopeStore ? 2 : a.w.rows >= 8192 ? 4 : silu ? 2 : 1;
    const bool use_stream = variant == 3 || (variant == 4 && a.w.rows >= 8192);
    if (use_stream) {
      if (stream_rows == 4 && StreamStages<WT, 4>(a) >= 2) return LaunchStreamGemv<WT, 4>(a, stream);
      if (stream_rows >= 2 && StreamStages<WT, 2>(a) >= 2) return LaunchStreamGemv<WT, 2>(a, stream);
      if (stream_rows == 1 && StreamStages<WT, 1>(a) >= 1) return LaunchStreamGemv<WT, 1>(a, stream);
    }
    if (a.epilogue == LinearEpilogue::kRopeStore) {
      if (TmaGemvSmem<WT, 2>(a) > kTmaGemvMaxSmem) return cudaErrorInvalidValue;
      return LaunchTmaGemv<WT, 2>(a, stream);
    }
    if (a.w.rows >= 8192 && TmaGemvSmem<WT, 4>(a) <= kTmaGemvMaxSmem) return LaunchTmaGemv<WT, 4>(a, stream);
    if (silu && TmaGemvSmem<WT, 2>(a) <= kTmaGemvMaxSmem) return LaunchTmaGemv<WT, 2>(a, stream);
    if (!silu && TmaGemvSmem<WT, 1>(a) <= kTmaGemvMaxSmem) return LaunchTmaGemv<WT, 1>(a, stream);
    return silu ? LaunchGemv<WT, 2>(a, stream) : LaunchGemv<WT, 1>(a, stream);
  }
  // Shared-memory tiles (TiledLinearKernel), in order of operand bytes per FMA (L2 traffic), the
  // first whose grid has at least one block per multiprocessor: up to 8 tokens 64 x 8 (variant 10
  // skips it), then 32 x 8 with K's classes split over 8 blocks (the few-row matrices of a small
  // batch: o, down, q|k|v; variant 15 skips it, 16 forces it: +25% at batch 8), then 32 x 32,
  // 32 x 16, 16 x 16, then for the few-row matrices 16 x 8 with K's classes
  // split over 2 blocks where that gives two blocks per multiprocessor (variant 12 skips it: the
  // split measured +1% at 0.5B batch 32, its blocks being the only way to more warps per SM for
  // o and down), then 16 x 8; variant 11 forces 64 x 8, 13 puts 16 x 32 blocks of 4 warps (two
  // per SM) first (measured slower).
  // Variant 3 forces the smallest tile that fits the epilogue, 5 the largest, 6 16 x 16, 7 the
  // 4-way split of K and 8 the 8-way split, 9 the default order with the splits tried before the
  // 16-row tiles; 4 forbids them. They need normalised activations.
  // The splits are not chosen by default: for the few-row matrices (o, down) they measured
  // slower than the 16-row tiles at batch 32 and 64 (0.5B, H100: 11,403 / 11,220 vs 13,479 tok/s
  // at batch 32; docs/performance.md), their stages being too small (4 or 8 classes of a group).
  const int64_t sms = MultiprocessorCount();
  const int v = g_large_batch_tile;
  if (a.norm_weight == nullptr && a.epilogue != LinearEpilogue::kRopeStore && (v == -1 || v == 3 || v >= 5)) {
    if (v == 11) return LaunchTiledLinear<WT, 8, 8, 8, 1, 1>(a, stream);
    if (v == 16 && TiledSplitFits<WT, 8, 1, 4, 1, 8>(a)) return LaunchTiledLinear<WT, 8, 1, 4, 1, 8>(a, stream);
    const bool silu = a.epilogue == LinearEpilogue::kSiluMul;
    if (v == 5) return LaunchTiledLinear<WT, 8, 16, 4, 2, 1>(a, stream);
    if (v == 6)
      return silu ? LaunchTiledLinear<WT, 8, 8, 4, 2, 1>(a, stream) : LaunchTiledLinear<WT, 4, 8, 4, 2, 1>(a, stream);
    // (a product too large for the split scratch falls through to the default choice)
    if (v == 7 && TiledSplitFits<WT, 8, 4, 4, 2, 4>(a)) return LaunchTiledLinear<WT, 8, 4, 4, 2, 4>(a, stream);
    if (v == 8 && TiledSplitFits<WT, 4, 4, 8, 1, 8>(a)) return LaunchTiledLinear<WT, 4, 4, 8, 1, 8>(a, stream);
    if (v == 3) return silu ? LaunchTiledLinear<WT, 8, 8, 4, 2, 1>(a, stream) : LaunchTiledLinear<WT, 4, 8, 4, 1, 1>(a, stream);
    if (a.tokens <= 8 && v != 10 && TiledBlocks<WT, 8, 8, 8, 1, 1>(a) >= sms) return LaunchTiledLinear<WT, 8, 8, 8, 1, 1>(a, stream);
    if (v != 15 && a.tokens <= 8 && TiledBlocks<WT, 8, 1, 4, 1, 8>(a) >= sms && TiledSplitFits<WT, 8, 1, 4, 1, 8>(a))
      return LaunchTiledLinear<WT, 8, 1, 4, 1, 8>(a, stream);
    if (v == 13 && a.tokens > 16 && TiledBlocks<WT, 8, 16, 2, 2, 1>(a) >= 2 * sms)
      return LaunchTiledLinear<WT, 8, 16, 2, 2, 1>(a, stream);
    if (a.tokens > 16 && TiledBlocks<WT, 8, 16, 4, 2, 1>(a) >= sms) return LaunchTiledLinear<WT, 8, 16, 4, 2, 1>(a, stream);
    if (TiledBlocks<WT, 8, 8, 4, 2, 1>(a) >= sms) return LaunchTiledLinear<WT, 8, 8, 4, 2, 1>(a, stream);
    if (v == 9 && a.tokens > 16 && TiledBlocks<WT, 8, 4, 4, 2, 4>(a) >= sms && TiledSplitFits<WT, 8, 4, 4, 2, 4>(a))
      return LaunchTiledLinear<WT, 8, 4, 4, 2, 4>(a, stream);
    if (v == 9 && a.tokens > 16 && TiledBlocks<WT, 4, 4, 8, 1, 8>(a) >= sms && TiledSplitFits<WT, 4, 4, 8, 1, 8>(a))
      return LaunchTiledLinear<WT, 4, 4, 8, 1, 8>(a, stream);
    if (!silu && a.tokens > 8 && TiledBlocks<WT, 4, 8, 4, 2, 1>(a) >= sms) return LaunchTiledLinear<WT, 4, 8, 4, 2, 1>(a, stream);
    if (v != 12 && !silu && TiledBlocks<WT, 4, 4, 4, 1, 2>(a) >= 2 * sms && TiledSplitFits<WT, 4, 4, 4, 1, 2>(a))
      return LaunchTiledLinear<WT, 4, 4, 4, 1, 2>(a, stream);
    if (!silu && TiledBlocks<WT, 4, 8, 4, 1, 1>(a) >= sms) return LaunchTiledLinear<WT, 4, 8, 4, 1, 1>(a, stream);
  }
  if (g_large_batch_tile == 1) return LaunchLinearTile<WT, 4, 8>(a, stream);
  if (g_large_batch_tile == 2) return LaunchLinearTile<WT, 4, 16>(a, stream);
  if (g_large_batch_tile == 0) return LaunchLinearTile<WT, 8, 8>(a, stream);
  // Largest register tile that still gives every multiprocessor 16 warps: the canonical order
  // forbids splitting K beyond the 32 lanes, so parallelism comes from outputs alone.
  const int64_t want = 16 * sms;
  auto warps = [&](int rows, int toks) {
    return ((a.w.rows + rows - 1) / rows) * static_cast<int64_t>((a.tokens + toks - 1) / toks);
  };
  if (a.tokens >= 8 && warps(4, 8) >= want) return LaunchLinearTile<WT, 4, 8>(a, stream);
  if (a.tokens >= 4 && warps(4, 4) >= want) return LaunchLinearTile<WT, 4, 4>(a, stream);
  if (a.tokens >= 3) return LaunchLinearTile<WT, 2, 4>(a, stream);
  return LaunchLinearTile<WT, 2, 2>(a, stream);
}

// One warp per token: canonical sum of squares over the lane row, then (x * r) * w. The weights
// are constants, loaded before the wait (the weight stream evicts them from L2 every step, so they
// often come from DRAM); the row's first kNormRegGroups groups stay in registers between the two
// passes, so after the wait the chain is one load of x, the tree and the stores.
constexpr int kNormRegGroups = 16;  // hidden sizes up to 2,048 entirely in registers
__global__ void __launch_bounds__(kThreads)
    RmsNormKernel(const float* x, int32_t stride, int32_t tokens, int32_t cols, const float* weight, float eps,
                  float* y, const int32_t* x_rows) {
  TimelineScope timeline(TimelineKind::kRmsNorm);
  LetNextStart();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int groups = (cols + kGroupCols - 1) / kGroupCols;
  const float4* wr = reinterpret_cast<const float4*>(weight) + lane;
  const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  float4 wv[kNormRegGroups];
#pragma unroll
  for (int g = 0; g < kNormRegGroups; ++g) wv[g] = g < groups ? wr[g * 32] : zero;
  WaitForPrevious();
  timeline.Waited();
  const int m = blockIdx.x * kWarps + warp;
  if (m >= tokens) return;
  const float* xm = x + static_cast<int64_t>(x_rows != nullptr ? x_rows[m] : m) * stride;
  const float4* xr = reinterpret_cast<const float4*>(xm) + lane;
  float4* yr = reinterpret_cast<float4*>(y + static_cast<int64_t>(m) * stride) + lane;
  float4 xv[kNormRegGroups];
#pragma unroll
  for (int g = 0; g < kNormRegGroups; ++g) xv[g] = g < groups ? xr[g * 32] : zero;
  float ss = 0.0f;  // LaneRowSumSquares' order: groups in increasing order, x, y, z, w
#pragma unroll
  for (int g = 0; g < kNormRegGroups; ++g) {
    if (g < groups) {
      ss = fmaf(xv[g].x, xv[g].x, ss);
      ss = fmaf(xv[g].y, xv[g].y, ss);
      ss = fmaf(xv[g].z, xv[g].z, ss);
      ss = fmaf(xv[g].w, xv[g].w, ss);
    }
  }
  for (int g = kNormRegGroups; g < groups; ++g) {
    const float4 v = xr[g * 32];
    ss = fmaf(v.x, v.x, ss);
    ss = fmaf(v.y, v.y, ss);
    ss = fmaf(v.z, v.z, ss);
    ss = fmaf(v.w, v.w, ss);
  }
  const float r = canonical_rms_scale(WarpTree(ss), cols, eps);
#pragma unroll
  for (int g = 0; g < kNormRegGroups; ++g)
    if (g < groups) yr[g * 32] = NormScale(xv[g], r, wv[g]);
  for (int g = kNormRegGroups; g < groups; ++g) yr[g * 32] = NormScale(xr[g * 32], r, wr[g * 32]);
}

template <WeightType WT>
__global__ void EmbedKernel(const void* embed, int32_t cols_padded, const int32_t* tokens, float* out,
                            int32_t out_stride) {
  TimelineScope timeline(TimelineKind::kEmbed);
  LetNextStart();
  WaitForPrevious();
  timeline.Waited();
  const int m = blockIdx.x;
  const int64_t row = static_cast<int64_t>(tokens[m]) * cols_padded;
  for (int p = threadIdx.x; p < cols_padded; p += blockDim.x) {
    float v;
    if constexpr (WT == WeightType::kBF16) {
      v = numerics::bf16_to_f32(static_cast<const uint16_t*>(embed)[row + p]);
    } else if constexpr (WT == WeightType::kF16) {
      v = __half2float(__ushort_as_half(static_cast<const unsigned short*>(embed)[row + p]));
    } else {
      v = static_cast<const float*>(embed)[row + p];
    }
    out[static_cast<int64_t>(m) * out_stride + p] = v;
  }
}

constexpr int kMaxHeadDim = 256;

// One warp per head of q and k (grid.x: groups of kWarps heads, grid.y: tokens); the block with
// blockIdx.x == 0 also copies v.
__global__ void __launch_bounds__(kThreads)
    RopeStoreKernel(const float* qkv, StepTokens step, AttentionShape shape, const float* q_norm,
                    const float* k_norm, float norm_eps, const float* rope_cos, const float* rope_sin,
                    float* q_out, LayerKv kv) {
  TimelineScope timeline(TimelineKind::kRope);
  __shared__ float head_buf[kWarps][kMaxHeadDim];
  LetNextStart();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int m = blockIdx.y;
  const int hd = shape.head_dim, half = hd / 2;
  const int q_dim = shape.num_heads * hd, kv_dim = shape.num_kv_heads * hd;
  // Before the wait: the position, KV slot and rotary constants are step metadata (copied in
  // before the step's first kernel) and constants; lane i's cos/sin of pairs i + 32k.
  const int pos = step.pos[m];
  const int64_t slot_row = CacheRow(step.block_table + static_cast<int64_t>(m) * step.max_blocks, pos, shape.block_size);
  const float* cos_row = rope_cos + static_cast<int64_t>(pos) * half;
  const float* sin_row = rope_sin + static_cast<int64_t>(pos) * half;
  constexpr int kPairRegs = kMaxHeadDim / 2 / 32;
  float cv[kPairRegs], sv[kPairRegs];
#pragma unroll
  for (int k = 0; k < kPairRegs; ++k) {
    const int i = lane + 32 * k;
    cv[k] = i < half ? cos_row[i] : 0.0f;
    sv[k] = i < half ? sin_row[i] : 0.0f;
  }
  WaitForPrevious();
  timeline.Waited();
  const float* row = qkv + static_cast<int64_t>(m) * (q_dim + 2 * kv_dim);

  float* buf = head_buf[warp];
  for (int h = blockIdx.x * kWarps + warp; h < min(shape.num_heads + shape.num_kv_heads, (blockIdx.x + 1) * kWarps);
       h += kWarps) {
    const bool is_q = h < shape.num_heads;
    const float* src = is_q ? row + h * hd : row + q_dim + (h - shape.num_heads) * hd;
    for (int d = lane; d < hd; d += 32) buf[d] = src[RopePairRow(d, hd)];  // rotary pair order (kernels.h)
    const float* nw = is_q ? q_norm : k_norm;
    if (nw != nullptr) {
      float acc = 0.0f;
      for (int d = lane; d < hd; d += 32) acc = fmaf(buf[d], buf[d], acc);
      const float r = canonical_rms_scale(WarpTree(acc), hd, norm_eps);
      for (int d = lane; d < hd; d += 32) buf[d] = (buf[d] * r) * nw[d];
    }
    __syncwarp();
    float* dst = is_q ? q_out + static_cast<int64_t>(m) * q_dim + h * hd
                      : kv.k + slot_row * kv_dim + (h - shape.num_heads) * hd;
#pragma unroll
    for (int k = 0; k < kPairRegs; ++k) {
      const int i = lane + 32 * k;
      if (i >= half) continue;
      float x0 = buf[i], x1 = buf[i + half];
      canonical_rotate(x0, x1, cv[k], sv[k]);
      dst[i] = x0;
      dst[i + half] = x1;
    }
    __syncwarp();
  }
  if (blockIdx.x == 0)
    for (int i = threadIdx.x; i < kv_dim; i += kThreads) kv.v[slot_row * kv_dim + i] = row[q_dim + kv_dim + i];
}

// One block per (query head, token). Pass 1: each thread computes whole scores, emulating the
// 32 lanes of the canonical dot in registers (lane l's terms d ≡ l mod 32, then the tree), so
// many positions are in flight at once. Pass 2: max, exp, canonical sum. Pass 3: warp w owns 8
// dims at a time; lane t takes positions j ≡ t (mod 32) in increasing j, the butterfly is the
// canonical tree over positions.
constexpr int kAttnWarps = 8;
constexpr int kAttnThreads = kAttnWarps * 32;

// A K or V row's four values. `fresh`: the row was written during this launch by another block
// (the one-launch step), so it must come from L2, where every SM's writes meet; L1 is not
// coherent across multiprocessors. AttentionKernel passes false for every row: what it reads was
// written by earlier kernels, and L1 caching is what lets the blocks of a long prefill share
// K/V rows (reading them all from L2 made a 1,000-token prefill 19x slower).
__device__ __forceinline__ float4 LoadKv4(const float* p, bool fresh) {
  return fresh ? __ldcg(reinterpret_cast<const float4*>(p)) : *reinterpret_cast<const float4*>(p);
}

// The K and V terms that the first batch of AttendHead's batched loops (U > 0) uses, for rows of
// earlier steps (positions below `end`: nothing in this step writes them), loaded into registers
// before the kernel waits for the previous one, so that the loops' first round trip is gone.
// Attention variant 6 only: it measured 1% slower than without (the registers double; seventh
// session), and keeping every row in shared memory (variant 9) does this better where it fits.
template <int NG, int U>
struct AttnFirstBatch {
  float4 k[U > 0 ? U : 1][2 * NG];  // scores layout: position warp * 4 + lane / 8 + 32 u (8 warps)
  float4 v[U > 0 ? U : 1][NG][2];   // values layout: position class + 32 u
  int end = 0;                      // positions below end are held
};

template <int NG, int U>
__device__ __forceinline__ void LoadAttnFirstBatch(AttnFirstBatch<NG, U>& fb, const LayerKv& kv,
                                                   const AttentionShape& shape, int g, const int32_t* bt_s,
                                                   int end, int tid) {
  static_assert(U > 0, "only the batched loops have a first batch");
  const int warp = tid / 32, lane = tid % 32, r = lane % 8;
  const int hd = shape.head_dim, bs = shape.block_size, kv_dim = shape.num_kv_heads * hd;
  fb.end = end;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int j = warp * 4 + lane / 8 + kAttnWarps * 4 * u;
    const bool ok = j < end;
    const float* kp = kv.k + (ok ? CacheRow(bt_s, j, bs) : 0) * kv_dim + g * hd + 4 * r;
#pragma unroll
    for (int k = 0; k < 2 * NG; ++k)
      fb.k[u][k] = ok && 32 * k + 4 * r < hd ? *reinterpret_cast<const float4*>(kp + 32 * k)
                                              : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  const int c = warp + 8 * (lane / 8);
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int j = c + 32 * u;
    const bool ok = j < end;
    const float* vrow = kv.v + g * hd + (ok ? CacheRow(bt_s, j, bs) : 0) * kv_dim + 8 * r;
#pragma unroll
    for (int n = 0; n < NG; ++n) {
      const bool in = ok && 8 * r + 64 * n < hd;
      fb.v[u][n][0] = in ? *reinterpret_cast<const float4*>(vrow + 64 * n) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      fb.v[u][n][1] = in ? *reinterpret_cast<const float4*>(vrow + 64 * n + 4) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
  }
}

// Attention's weighted sum of V. The canonical order gives position j to class j mod 32, each
// class summing its positions in increasing j, then the tree over the 32 classes. Warp w owns the
// classes w + 8q (q = lane / 8: w, w + 8, w + 16, w + 24); lane r = lane % 8 of each group owns
// the dims 8r .. 8r + 7 (+ 64 n), so a load instruction reads four whole V rows, one per class,
// contiguously. The tree's first two levels (c + (c + 16), then c + (c + 8)) are xor 16 and xor 8
// inside the warp; its last three (off 4, 2, 1) run per dim over the 8 warps' results through
// shared memory (vpart: kAttnWarps x hd floats). One divide by the denominator.
// vbase: the head group's V at position row 0. FB: the first batch's rows below fb->end are in
// fb (registers) already.
// SM: every V row of the head group is in shared memory, vs + j * hd (AttentionKernel stages them).
// width, dim0: only the dims dim0 .. dim0 + width - 1 of the head (vbase and vs point at dim0
// already; rows stay kv_dim and hd apart): a slice of the output, each dim's sum in the same order.
template <int NG, int U, bool FB, bool SM, typename Sync>
__device__ __forceinline__ void AttendValues(const float* vbase, int kv_dim, int hd, int bs, const int32_t* bt_s,
                                             const float* weights, int L, int old_end, float denom, float* o, int h,
                                             float* vpart, const AttnFirstBatch<NG, U>* fb, const float* vs, int tid,
                                             Sync sync, int width = -1, int dim0 = 0) {
  static_assert(kAttnWarps == 8, "four position classes per warp: w, w + 8, w + 16, w + 24");
  const int wd = width < 0 ? hd : width;
  const int warp = tid / 32, lane = tid % 32;
  const int c = warp + 8 * (lane / 8), r = lane % 8;
  float acc[NG][8];
#pragma unroll
  for (int n = 0; n < NG; ++n)
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[n][i] = 0.0f;
  if constexpr (U == 0) {
#pragma unroll 4
    for (int j = c; j < L; j += 32) {
      const float p = weights[j];
      const float* vrow = SM ? vs + j * hd + 8 * r
                             : vbase + (CacheRow(bt_s, j, bs)) * kv_dim + 8 * r;
      const bool fresh = !SM && j >= old_end;
#pragma unroll
      for (int n = 0; n < NG; ++n) {
        if (8 * r + 64 * n < wd) {
          const float4 v0 = LoadKv4(vrow + 64 * n, fresh);
          const float4 v1 = LoadKv4(vrow + 64 * n + 4, fresh);
          acc[n][0] = fmaf(p, v0.x, acc[n][0]);
          acc[n][1] = fmaf(p, v0.y, acc[n][1]);
          acc[n][2] = fmaf(p, v0.z, acc[n][2]);
          acc[n][3] = fmaf(p, v0.w, acc[n][3]);
          acc[n][4] = fmaf(p, v1.x, acc[n][4]);
          acc[n][5] = fmaf(p, v1.y, acc[n][5]);
          acc[n][6] = fmaf(p, v1.z, acc[n][6]);
          acc[n][7] = fmaf(p, v1.w, acc[n][7]);
        }
      }
    }
  } else {
    // U positions of the class per batch: every load of the batch is issued before the first
    // FMA, so their round trips overlap (the plain loop above waits for one row at a time). The
    // FMAs then run in increasing j, the canonical order.
    // (With FB the first batch is written out apart, so that the registers of the preloaded rows
    // are free after it; without, one loop, as little code as possible: attention runs on a few
    // multiprocessors whose instruction caches start cold at every launch.)
    auto batch = [&](int j0, bool first) {
      float p[U];
      float4 va[U][NG][2];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int j = j0 + 32 * u;
        const bool ok = j < L;
        p[u] = ok ? weights[j] : 0.0f;
        if (FB && first && j < fb->end) {
#pragma unroll
          for (int n = 0; n < NG; ++n) {
            va[u][n][0] = fb->v[u][n][0];
            va[u][n][1] = fb->v[u][n][1];
          }
          continue;
        }
        const float* vrow = SM ? vs + (ok ? j : 0) * hd + 8 * r
                               : vbase + (ok ? CacheRow(bt_s, j, bs) : 0) * kv_dim + 8 * r;
        const bool fresh = !SM && j >= old_end;
#pragma unroll
        for (int n = 0; n < NG; ++n) {
          va[u][n][0] = va[u][n][1] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
          if (ok && 8 * r + 64 * n < wd) {
            va[u][n][0] = LoadKv4(vrow + 64 * n, fresh);
            va[u][n][1] = LoadKv4(vrow + 64 * n + 4, fresh);
          }
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (j0 + 32 * u < L) {
#pragma unroll
          for (int n = 0; n < NG; ++n) {
            const float4 v0 = va[u][n][0], v1 = va[u][n][1];
            acc[n][0] = fmaf(p[u], v0.x, acc[n][0]);
            acc[n][1] = fmaf(p[u], v0.y, acc[n][1]);
            acc[n][2] = fmaf(p[u], v0.z, acc[n][2]);
            acc[n][3] = fmaf(p[u], v0.w, acc[n][3]);
            acc[n][4] = fmaf(p[u], v1.x, acc[n][4]);
            acc[n][5] = fmaf(p[u], v1.y, acc[n][5]);
            acc[n][6] = fmaf(p[u], v1.z, acc[n][6]);
            acc[n][7] = fmaf(p[u], v1.w, acc[n][7]);
          }
        }
      }
    };
    if constexpr (FB) {
      if (c < L) batch(c, true);
      for (int j0 = c + 32 * U; j0 < L; j0 += 32 * U) batch(j0, false);
    } else {
      for (int j0 = c; j0 < L; j0 += 32 * U) batch(j0, false);
    }
  }
  TimelinePoint(5);
#pragma unroll
  for (int n = 0; n < NG; ++n)
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      float v = acc[n][i];
      v = v + __shfl_xor_sync(0xffffffffu, v, 16);  // classes c and c + 16
      v = v + __shfl_xor_sync(0xffffffffu, v, 8);   // then c and c + 8
      acc[n][i] = v;
    }
  if (lane < 8) {
#pragma unroll
    for (int n = 0; n < NG; ++n)
      if (8 * r + 64 * n < wd)
#pragma unroll
        for (int i = 0; i < 8; ++i) vpart[warp * hd + 64 * n + 8 * r + i] = acc[n][i];
  }
  sync();
  TimelinePoint(6);
  for (int d = tid; d < wd; d += kAttnThreads) {
    float v[kAttnWarps];
#pragma unroll
    for (int w = 0; w < kAttnWarps; ++w) v[w] = vpart[w * hd + d];
#pragma unroll
    for (int k = 0; k < 4; ++k) v[k] = v[k] + v[k + 4];
#pragma unroll
    for (int k = 0; k < 2; ++k) v[k] = v[k] + v[k + 2];
    v[0] = v[0] + v[1];
    o[PermutedIndex(h * hd + dim0 + d)] = v[0] / denom;
  }
}

// Attention of query head h of token m by kAttnThreads threads (tid, sync: their barrier), the
// block table of the token already in bt_s. q is read through L2 (another kernel or block wrote
// it); same_launch: this step's K/V rows were written by other blocks of this launch.
// FB: fb holds the first batch of the loops' rows of earlier steps (LoadAttnFirstBatch).
// SM: every K and V row of the head group is in shared memory (ks + j * hd, vs + j * hd).
// VNG, UV, width, dim0: the V pass covers only dims dim0 .. dim0 + width - 1, with VNG groups per
// warp in batches of UV (AttendValues); the scores are the whole head's in any case.
template <int NG, int U, bool FB, bool SM, int VNG = NG, int UV = U, typename Sync>
__device__ __forceinline__ void AttendHead(const float* q, const StepTokens& step, const AttentionShape& shape,
                                           const LayerKv& kv, float scale, float* out, int32_t out_stride, int h,
                                           int m, float* scores, const int32_t* bt_s, float* q_s, float* red,
                                           float* vpart, const AttnFirstBatch<NG, U>* fb, const float* ks,
                                           const float* vs, int tid, bool same_launch, Sync sync, int width = -1,
                                           int dim0 = 0) {
  const int warp = tid / 32, lane = tid % 32;
  const int hd = shape.head_dim, bs = shape.block_size;
  const int g = h / (shape.num_heads / shape.num_kv_heads);
  const int q_dim = shape.num_heads * hd, kv_dim = shape.num_kv_heads * hd;
  const int L = step.pos[m] + 1;
  // Rows from old_end on were written during this step: by this launch when same_launch (read
  // them through L2), else by an earlier kernel (any load is coherent).
  const int old_end = same_launch ? L - step.tokens : L;
  for (int d = tid; d < hd; d += kAttnThreads) q_s[d] = __ldcg(q + static_cast<int64_t>(m) * q_dim + h * hd + d);
  sync();
  TimelinePoint(1);

  // Pass 1: scores, eight lanes per position (four positions per warp instruction): lane r of a
  // group owns the classes 4r .. 4r + 3 of the canonical dot (terms d ≡ 4r + i mod 32, in
  // increasing d), so the group reads a K row contiguously; the tree's levels off 16, 8, 4 are
  // xor 4, 2, 1 inside the group, off 2 and 1 are inside the lane.
  {
    const int r = lane % 8;
    float qr[2 * NG][4];  // q terms 32k + 4r + i
#pragma unroll
    for (int k = 0; k < 2 * NG; ++k)
#pragma unroll
      for (int i = 0; i < 4; ++i) qr[k][i] = 32 * k + 4 * r < hd ? q_s[32 * k + 4 * r + i] : 0.0f;
    // One position's score from its K terms (the lane's four classes, then the tree).
    auto score = [&](const float4* k4, int j) {
      float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int k = 0; k < 2 * NG; ++k) {
        if (32 * k + 4 * r < hd) {  // hd is a multiple of 8: a lane's four terms are all in or all out
          v[0] = fmaf(qr[k][0], k4[k].x, v[0]);
          v[1] = fmaf(qr[k][1], k4[k].y, v[1]);
          v[2] = fmaf(qr[k][2], k4[k].z, v[2]);
          v[3] = fmaf(qr[k][3], k4[k].w, v[3]);
        }
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        v[i] = v[i] + __shfl_xor_sync(0xffffffffu, v[i], 4);  // classes c and c + 16
        v[i] = v[i] + __shfl_xor_sync(0xffffffffu, v[i], 2);  // c and c + 8
        v[i] = v[i] + __shfl_xor_sync(0xffffffffu, v[i], 1);  // c and c + 4
      }
      const float sc = (v[0] + v[2]) + (v[1] + v[3]);  // c and c + 2, then c and c + 1
      if (r == 0 && j < L) scores[j] = sc * scale;
    };
    auto load_k = [&](float4* k4, int j) {
      const bool ok = j < L;
      const float* kp =
          SM ? ks + (ok ? j : 0) * hd + 4 * r
             : kv.k + (ok ? CacheRow(bt_s, j, bs) : 0) * kv_dim + g * hd + 4 * r;
      const bool fresh = !SM && j >= old_end;
#pragma unroll
      for (int k = 0; k < 2 * NG; ++k) {
        k4[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (ok && 32 * k + 4 * r < hd) k4[k] = LoadKv4(kp + 32 * k, fresh);
      }
    };
    if constexpr (U == 0) {
#pragma unroll 4
      for (int j = warp * 4 + lane / 8; j - lane / 8 < L; j += kAttnWarps * 4) {
        float4 k4[2 * NG];
        load_k(k4, j);
        score(k4, j);
      }
    } else {
      // U positions per batch, every load issued before the first FMA (see AttendValues; the
      // first batch apart with FB, as there).
      auto batch = [&](int j0, bool first) {
        float4 k4[U][2 * NG];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int j = j0 + kAttnWarps * 4 * u;
          if (FB && first && j < fb->end) {
#pragma unroll
            for (int k = 0; k < 2 * NG; ++k) k4[u][k] = fb->k[u][k];
          } else {
            load_k(k4[u], j);
          }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) score(k4[u], j0 + kAttnWarps * 4 * u);
      };
      const int first = warp * 4 + lane / 8;
      if constexpr (FB) {
        if (first - lane / 8 < L) batch(first, true);
        for (int j0 = first + kAttnWarps * 4 * U; j0 - lane / 8 < L; j0 += kAttnWarps * 4 * U) batch(j0, false);
      } else {
        for (int j0 = first; j0 - lane / 8 < L; j0 += kAttnWarps * 4 * U) batch(j0, false);
      }
    }
  }
  sync();
  TimelinePoint(2);

  // Pass 2: max (exact in any order), weights, canonical sum.
  float mx = -INFINITY;
  for (int j = tid; j < L; j += kAttnThreads) mx = fmaxf(mx, scores[j]);
  mx = WarpMax(mx);
  if (lane == 0) red[warp] = mx;
  sync();
  mx = red[0];
#pragma unroll
  for (int w = 1; w < kAttnWarps; ++w) mx = fmaxf(mx, red[w]);
  for (int j = tid; j < L; j += kAttnThreads) scores[j] = canonical_expf(scores[j] - mx);
  sync();
  TimelinePoint(3);
  float denom = 0.0f;
  for (int j = lane; j < L; j += 32) denom = denom + scores[j];
  denom = WarpTree(denom);
  TimelinePoint(4);

  // Pass 3: weighted sum of V (AttendValues).
  float* o = out + static_cast<int64_t>(m) * out_stride;
  if constexpr (VNG == NG && UV == U) {
    AttendValues<NG, U, FB, SM>(kv.v + g * hd + dim0, kv_dim, hd, bs, bt_s, scores, L, old_end, denom, o, h, vpart, fb,
                                SM ? vs + dim0 : vs, tid, sync, width, dim0);
  } else {
    static_assert(!FB, "the first batch's V rows are laid out for NG");
    AttendValues<VNG, UV, false, SM>(kv.v + g * hd + dim0, kv_dim, hd, bs, bt_s, scores, L, old_end, denom, o, h, vpart,
                                     static_cast<const AttnFirstBatch<VNG, UV>*>(nullptr), SM ? vs + dim0 : vs, tid,
                                     sync, width, dim0);
  }
}

// Where AttentionKernel<..., SM> puts the staged K rows in its dynamic shared memory (floats from
// the start, 16-byte aligned): after the scores and the block table.
__host__ __device__ constexpr int64_t AttnKvStageOffset(int32_t max_context) {
  return (int64_t{max_context} + max_context / 8 + 2 + 3) / 4 * 4;
}

// AttendHead's NG for a head dimension: the 8-dim groups of V one warp owns (kernels are
// instantiated per NG so each carries only the registers its head dimension needs).
__host__ __device__ constexpr int AttnGroups(int hd) { return hd <= kAttnWarps * 8 ? 1 : hd <= 2 * kAttnWarps * 8 ? 2 : kMaxHeadDim / (kAttnWarps * 8); }

// Pulls the K and V rows of positions [0, end) of a head's group toward this SM (L1 or L2).
// kL1: into this SM's L1; else into L2, `evict_last` asking L2 to keep them over the weights
// streaming past.
template <bool kL1, bool kEvictLast = false>
__device__ __forceinline__ void PrefetchKvRows(const LayerKv& kv, const int32_t* bt_s, int bs, int kv_dim, int hd,
                                               int g, int end, int tid, int threads) {
  for (int j = tid; j < end; j += threads) {
    const int64_t row = (CacheRow(bt_s, j, bs)) * kv_dim + g * hd;
    const char* kp = reinterpret_cast<const char*>(kv.k + row);
    const char* vp = reinterpret_cast<const char*>(kv.v + row);
    for (int off = 0; off < hd * 4; off += 128) {
      if constexpr (kL1) {
        asm volatile("prefetch.global.L1 [%0];" ::"l"(kp + off));
        asm volatile("prefetch.global.L1 [%0];" ::"l"(vp + off));
      } else if constexpr (kEvictLast) {
        asm volatile("prefetch.global.L2::evict_last [%0];" ::"l"(kp + off));
        asm volatile("prefetch.global.L2::evict_last [%0];" ::"l"(vp + off));
      } else {
        asm volatile("prefetch.global.L2 [%0];" ::"l"(kp + off));
        asm volatile("prefetch.global.L2 [%0];" ::"l"(vp + off));
      }
    }
  }
}

// prefetch: where the rows of earlier steps go before the wait (0: L1; 1: L2, kept there over the
// weight stream (evict_last); 2: both; 3: nowhere). U: positions a warp's loops load per batch before using
// them (0: the plain loops). FB: the loops' first batch of those rows goes to registers before
// the wait (AttnFirstBatch; U > 0), at the price of the registers. SM: every K and V row of the
// head group goes to shared memory (AttnKvStageOffset, max_context rows of each), those of earlier
// steps by cp.async before the wait, this step's with q after it, so the loops never wait on L2:
// with the weight stream running, each of their round trips there took about 1 us.
template <int NG, int U, bool FB = false, bool SM = false>
__global__ void __launch_bounds__(kAttnThreads)
    AttentionKernel(const float* q, StepTokens step, AttentionShape shape, LayerKv kv, float scale, float* out,
                    int32_t out_stride, int32_t max_context, int32_t prefetch) {
  TimelineScope timeline(TimelineKind::kAttention);
  extern __shared__ float4 att_smem_f4[];
  float* scores = reinterpret_cast<float*>(att_smem_f4);  // (context)
  int32_t* bt_s = reinterpret_cast<int32_t*>(scores + max_context);  // (max_context / block_size + 1)
  float* ks = reinterpret_cast<float*>(att_smem_f4) + AttnKvStageOffset(max_context);  // SM: (max_context, hd)
  float* vs = ks + static_cast<int64_t>(max_context) * shape.head_dim;                  // SM: (max_context, hd)
  __shared__ float q_s[kMaxHeadDim];
  __shared__ float red[kAttnWarps];
  __shared__ float vpart[kAttnWarps * 64 * NG];  // AttendValues' partials: NG covers head_dim <= 64 NG
  LetNextStart();
  const int h = blockIdx.x, m = blockIdx.y;
  const int hd = shape.head_dim, bs = shape.block_size;
  const int g = h / (shape.num_heads / shape.num_kv_heads);
  const int kv_dim = shape.num_kv_heads * hd;
  // Before waiting for the previous kernel: positions and block tables are the step's metadata,
  // copied in before the step's first kernel, so they can be read now; the block table goes to
  // shared memory once (one round trip instead of one per position). Rows of positions below
  // L - tokens were written by earlier steps (a step writes at most `tokens` positions of a
  // sequence, ending at pos), so they can be pulled into this SM's L1: nothing changes them
  // during the step. This step's own rows only go to L2, where every SM's writes meet, so a row
  // the previous kernel is still writing is read correctly after the wait.
  const int L = step.pos[m] + 1;
  const int32_t* bt = step.block_table + static_cast<int64_t>(m) * step.max_blocks;
  for (int b = threadIdx.x; b < (L + bs - 1) / bs; b += kAttnThreads) bt_s[b] = bt[b];
  __syncthreads();
  const int old_end = L - step.tokens;
  AttnFirstBatch<NG, U> fb;
  if constexpr (FB) LoadAttnFirstBatch(fb, kv, shape, g, bt_s, max(old_end, 0), threadIdx.x);
  if constexpr (SM) {
    const int chunks = hd / 4;  // 16-byte pieces of a row
    for (int i = threadIdx.x; i < max(old_end, 0) * chunks; i += kAttnThreads) {
      const int j = i / chunks, c4 = i % chunks;
      const int64_t row = (CacheRow(bt_s, j, bs)) * kv_dim + g * hd + 4 * c4;
      CpAsync16(ks + j * hd + 4 * c4, kv.k + row);
      CpAsync16(vs + j * hd + 4 * c4, kv.v + row);
    }
    CpAsyncCommit();
  }
  if (prefetch == 0 || prefetch == 2) PrefetchKvRows<true>(kv, bt_s, bs, kv_dim, hd, g, old_end, threadIdx.x, kAttnThreads);
  if (prefetch == 1 || prefetch == 2)
    PrefetchKvRows<false, true>(kv, bt_s, bs, kv_dim, hd, g, old_end, threadIdx.x, kAttnThreads);
  // (In a prefill, old_end is negative: every row is this step's.)
  for (int j = max(old_end, 0) + threadIdx.x; j < L; j += kAttnThreads) {
    const int64_t row = (CacheRow(bt_s, j, bs)) * kv_dim + g * hd;
    for (int off = 0; off < hd * 4; off += 128) {
      asm volatile("prefetch.global.L2 [%0];" ::"l"(reinterpret_cast<const char*>(kv.k + row) + off));
      asm volatile("prefetch.global.L2 [%0];" ::"l"(reinterpret_cast<const char*>(kv.v + row) + off));
    }
  }
  WaitForPrevious();
  timeline.Waited();
  if constexpr (SM) {
    // This step's rows (the previous kernel wrote them), in the round trip of q; AttendHead's
    // barrier after q publishes them and the copies.
    const int j0 = max(old_end, 0);
    for (int i = threadIdx.x; i < (L - j0) * hd; i += kAttnThreads) {
      const int j = j0 + i / hd, d = i % hd;
      const int64_t row = (CacheRow(bt_s, j, bs)) * kv_dim + g * hd + d;
      ks[j * hd + d] = __ldcg(kv.k + row);
      vs[j * hd + d] = __ldcg(kv.v + row);
    }
    CpAsyncWait<0>();
  }
  AttendHead<NG, U, FB, SM>(q, step, shape, kv, scale, out, out_stride, h, m, scores, bt_s, q_s, red, vpart,
                            FB ? &fb : nullptr, ks, vs, threadIdx.x, false, [] { __syncthreads(); });
}

// ---- Attention of the query heads that share a KV head, in one block (variant 10) ----
//
// One block per (KV head, part of its query heads, token): the K and V rows of the token's
// context are staged in shared memory once and serve every query head of the part, where
// AttentionKernel reads them once per query head (7 times through L2 at Qwen2.5-0.5B's grouping).
// The arithmetic is AttendHead's, term for term (docs/numerics.md section 5):
//   - one thread per (pair of heads, position) score, the K row read once for both: per head the
//     32 classes of the canonical dot (term d to class d mod 32, increasing d, from +0) in
//     registers, then the canonical tree, times scale;
//   - the first warp of each head's warps in the V pass computes the max, the weights
//     (canonical_expf) and the canonical denominator, and only that head's warps wait for them
//     (no block barrier between the weights and the V pass);
//   - one thread per (head, dim pair) of the weighted sum of V: the 32 classes by position
//     (increasing j), the tree, one divide.
// (Twenty-fifth session: one thread per (head, position) and a block barrier after the weights
// were 1.4% slower at batch 32, 1.8% at 64; docs/performance.md.)
// So its bits are the other variants' and the CPU's. Positions are staged in chunks of `chunk`
// rows (a multiple of 32, so a chunk starts at class 0); the scores of the whole context stay in
// shared memory. HD is the head dimension (64 or 128); a part has at most 512 / HD heads, so
// that a thread owns at most one dim pair (1.5B's six query heads per KV head run as two parts).
constexpr int kGroupAttnMaxOutputs = 2 * kAttnThreads;  // (head, dim) outputs of a block: a pair per thread
constexpr int64_t kGroupAttnStageBytes = 160 * 1024;     // K and V chunk buffers
constexpr int64_t kGroupAttnMaxSmem = 220 * 1024;

// The canonical tree over 32 class accumulators held by one thread (acc[l] + acc[l + off] for off
// 16, 8, 4, 2, 1; the result in acc[0]). Written with constant bounds so the array stays in
// registers.
__device__ __forceinline__ void ClassTree(float (&acc)[32]) {
#pragma unroll
  for (int level = 0; level < 5; ++level)
#pragma unroll
    for (int l = 0; l < 16; ++l)
      if (l < (16 >> level)) acc[l] = acc[l] + acc[l + (16 >> level)];
}

template <int HD>
__global__ void __launch_bounds__(kAttnThreads, 1)
    GroupAttentionKernel(const float* q, StepTokens step, AttentionShape shape, LayerKv kv, float scale, float* out,
                         int32_t out_stride, int32_t max_context, int32_t hsplit, int32_t chunk,
                         int32_t prefetch_early) {
  constexpr int KS = HD + 4;  // K row stride: 16-byte loads of consecutive rows hit distinct banks
  extern __shared__ float4 grp_smem_f4[];
  const int G = shape.num_heads / shape.num_kv_heads;
  const int HB = (G + hsplit - 1) / hsplit;
  const int es_stride = (max_context + 3) / 4 * 4;
  float* ks = reinterpret_cast<float*>(grp_smem_f4);  // [chunk][KS]
  float* vs = ks + chunk * KS;                         // [chunk][HD]
  float* es = vs + chunk * HD;                         // [HB][es_stride]: scores, then weights
  float* qs = es + HB * es_stride;                     // [HB][KS]
  float* dn = qs + HB * KS;                            // [HB]: denominators
  int32_t* bt_s = reinterpret_cast<int32_t*>(dn + HB); // (max_context / block_size + 2)
  TimelineScope timeline(TimelineKind::kAttention);
  LetNextStart();
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = blockIdx.x / hsplit, part = blockIdx.x % hsplit, m = blockIdx.y;
  const int h0 = g * G + part * HB, hn = min(HB, G - part * HB);
  const int bs = shape.block_size, kv_dim = shape.num_kv_heads * HD, q_dim = shape.num_heads * HD;
  // Positions and block tables are the step's metadata (readable before the wait, as in
  // AttentionKernel); rows below L - tokens were written by earlier steps.
  const int L = step.pos[m] + 1;
  const int32_t* bt = step.block_table + static_cast<int64_t>(m) * step.max_blocks;
  for (int b = tid; b < (L + bs - 1) / bs; b += kAttnThreads) bt_s[b] = bt[b];
  __syncthreads();
  const int old_end = L - step.tokens;
  const bool one_chunk = L <= chunk;
  auto stage = [&](const float* src, float* dst, int stride, int c0, int j0, int j1) {
    constexpr int kPieces = HD / 4;  // 16-byte pieces of a row
    for (int i = tid; i < (j1 - j0) * kPieces; i += kAttnThreads) {
      const int j = j0 + i / kPieces, c4 = i % kPieces;
      const int64_t row = (CacheRow(bt_s, j, bs)) * kv_dim + g * HD + 4 * c4;
      CpAsync16(dst + (j - c0) * stride + 4 * c4, src + row);
    }
  };
  // Late blocks (kernels.h, LatePrefetchEarlyBlocks): the first prefetch_early blocks in launch
  // order ask L2 for the K and V pages of the tokens past theirs: block b takes tokens m0 + b,
  // m0 + b + E, ... (m0: the first token with no early block), every page of each (8 KB at
  // 0.5B: all KV heads' rows of 16 positions).
  if (const int lin = static_cast<int>(blockIdx.x + blockIdx.y * gridDim.x); lin < prefetch_early) {
    const int m0 = (prefetch_early + static_cast<int>(gridDim.x) - 1) / static_cast<int>(gridDim.x);
    const uint32_t page_bytes = static_cast<uint32_t>(bs * kv_dim) * 4;
    for (int mm = m0 + lin; mm < step.tokens; mm += prefetch_early) {
      const int pages = (step.pos[mm] + bs) / bs;  // (L2 is coherent: this step's rows may be among them)
      const int32_t* table = step.block_table + static_cast<int64_t>(mm) * step.max_blocks;
      for (int i = tid; i < 2 * pages; i += kAttnThreads) {
        const float* base = (i & 1) ? kv.v : kv.k;
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(
                         base + static_cast<int64_t>(table[i >> 1]) * bs * kv_dim),
                     "r"(page_bytes)
                     : "memory");
      }
    }
  }
  const int pre_end = min(max(old_end, 0), min(L, chunk));
  // Commit groups: K rows before the wait, V rows before it, then (after it) this step's K rows
  // and V rows, so that the scores wait for K only.
  stage(kv.k, ks, KS, 0, 0, pre_end);
  CpAsyncCommit();
  if (one_chunk) stage(kv.v, vs, HD, 0, 0, pre_end);
  CpAsyncCommit();
  WaitForPrevious();
  timeline.Waited();
  // q (the previous kernel wrote it) joins the commit group of this step's K rows below, so both
  // come in one round trip to L2 (the q read used to finish before those copies were issued).
  for (int i = tid; i < hn * (HD / 4); i += kAttnThreads) {
    const int hh = i / (HD / 4), c4 = i % (HD / 4);
    CpAsync16(qs + hh * KS + 4 * c4, q + static_cast<int64_t>(m) * q_dim + (h0 + hh) * HD + 4 * c4);
  }
  TimelinePoint(1);  // q requested

  // Pass 1: scores, chunk by chunk.
  for (int c0 = 0; c0 < L; c0 += chunk) {
    const int c1 = min(L, c0 + chunk), n = c1 - c0;
    if (c0 == 0) {
      stage(kv.k, ks, KS, 0, pre_end, c1);
      CpAsyncCommit();
      if (one_chunk) stage(kv.v, vs, HD, 0, pre_end, c1);
      CpAsyncCommit();
      CpAsyncWait<1>();  // q and every K row (the last group is V's)
    } else {
      stage(kv.k, ks, KS, c0, c0, c1);
      CpAsyncCommit();
      CpAsyncWait<0>();
    }
    __syncthreads();
    // Heads 2p and 2p + 1 (the last alone where hn is odd) of position j, the K row read once.
    const int pairs = (hn + 1) / 2;
    for (int idx = tid; idx < pairs * n; idx += kAttnThreads) {
      const int ha = 2 * (idx / n), hb = min(ha + 1, hn - 1), j = c0 + idx % n;
      const float4* k4 = reinterpret_cast<const float4*>(ks + (j - c0) * KS);
      const float4* qa4 = reinterpret_cast<const float4*>(qs + ha * KS);
      const float4* qb4 = reinterpret_cast<const float4*>(qs + hb * KS);
      float acc[32], bcc[32];
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float4 kk = k4[i], qa = qa4[i], qb = qb4[i];
        acc[4 * i + 0] = fmaf(qa.x, kk.x, 0.0f);
        acc[4 * i + 1] = fmaf(qa.y, kk.y, 0.0f);
        acc[4 * i + 2] = fmaf(qa.z, kk.z, 0.0f);
        acc[4 * i + 3] = fmaf(qa.w, kk.w, 0.0f);
        bcc[4 * i + 0] = fmaf(qb.x, kk.x, 0.0f);
        bcc[4 * i + 1] = fmaf(qb.y, kk.y, 0.0f);
        bcc[4 * i + 2] = fmaf(qb.z, kk.z, 0.0f);
        bcc[4 * i + 3] = fmaf(qb.w, kk.w, 0.0f);
      }
#pragma unroll
      for (int b = 1; b < HD / 32; ++b)
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const float4 kk = k4[8 * b + i], qa = qa4[8 * b + i], qb = qb4[8 * b + i];
          acc[4 * i + 0] = fmaf(qa.x, kk.x, acc[4 * i + 0]);
          acc[4 * i + 1] = fmaf(qa.y, kk.y, acc[4 * i + 1]);
          acc[4 * i + 2] = fmaf(qa.z, kk.z, acc[4 * i + 2]);
          acc[4 * i + 3] = fmaf(qa.w, kk.w, acc[4 * i + 3]);
          bcc[4 * i + 0] = fmaf(qb.x, kk.x, bcc[4 * i + 0]);
          bcc[4 * i + 1] = fmaf(qb.y, kk.y, bcc[4 * i + 1]);
          bcc[4 * i + 2] = fmaf(qb.z, kk.z, bcc[4 * i + 2]);
          bcc[4 * i + 3] = fmaf(qb.w, kk.w, bcc[4 * i + 3]);
        }
      ClassTree(acc);
      ClassTree(bcc);
      es[ha * es_stride + j] = acc[0] * scale;
      if (hb != ha) es[hb * es_stride + j] = bcc[0] * scale;
    }
    // One chunk's V rows (the only copies still in flight at the last chunk) are waited for here,
    // so that this barrier publishes them for pass 2-3.
    if (c1 == L) CpAsyncWait<0>();
    __syncthreads();  // the chunk's K rows are free again; the last chunk's scores are complete
  }

  TimelinePoint(2);  // scores
  // Pass 2 in the warps of pass 3: the first warp of each head computes its max (exact in any
  // order), weights and canonical denominator (each lane sums the weights it wrote itself), and
  // only the head's own warps wait for them; the V rows of one chunk were waited for before the
  // scores' last barrier.
  constexpr int kWarpsPerHead = HD / 64;
  if (tid < hn * (HD / 2)) {
    const int h = tid / (HD / 2);
    if (warp % kWarpsPerHead == 0) {
      float* e = es + h * es_stride;
      float mx = -INFINITY;
      for (int j = lane; j < L; j += 32) mx = fmaxf(mx, e[j]);
      mx = WarpMax(mx);
      float den = 0.0f;
#pragma unroll 4
      for (int j = lane; j < L; j += 32) {
        const float w = canonical_expf(e[j] - mx);
        e[j] = w;
        den = den + w;
      }
      den = WarpTree(den);
      if (lane == 0) dn[h] = den;
    }
    if constexpr (kWarpsPerHead == 1) {
      __syncwarp();
    } else {
      asm volatile("bar.sync %0, %1;" ::"r"(1 + h), "n"(kWarpsPerHead * 32) : "memory");
    }
  }
  TimelinePoint(3);  // weights and denominators

  // Pass 3: weighted sum of V, a (head, dim pair) per thread, chunk by chunk.
  const bool active = tid < hn * (HD / 2);
  const int h = active ? tid / (HD / 2) : 0, d = 2 * (tid % (HD / 2));
  float a0[32], a1[32];
#pragma unroll
  for (int c = 0; c < 32; ++c) a0[c] = a1[c] = 0.0f;
  for (int c0 = 0; c0 < L; c0 += chunk) {
    const int c1 = min(L, c0 + chunk);
    if (!one_chunk) {
      stage(kv.v, vs, HD, c0, c0, c1);
      CpAsyncCommit();
      CpAsyncWait<0>();
      __syncthreads();
    }
    if (active) {
      const float* e = es + h * es_stride;
      int j = c0;
      for (; j + 32 <= c1; j += 32) {
#pragma unroll
        for (int c = 0; c < 32; ++c) {
          const float w = e[j + c];
          const float2 v = *reinterpret_cast<const float2*>(vs + (j + c - c0) * HD + d);
          a0[c] = fmaf(w, v.x, a0[c]);
          a1[c] = fmaf(w, v.y, a1[c]);
        }
      }
#pragma unroll
      for (int c = 0; c < 32; ++c) {
        if (j + c < c1) {
          const float w = e[j + c];
          const float2 v = *reinterpret_cast<const float2*>(vs + (j + c - c0) * HD + d);
          a0[c] = fmaf(w, v.x, a0[c]);
          a1[c] = fmaf(w, v.y, a1[c]);
        }
      }
    }
    if (!one_chunk) __syncthreads();  // the chunk's V rows are free again
  }
  TimelinePoint(4);  // V loop done
  if (active) {
    ClassTree(a0);
    ClassTree(a1);
    float* o = out + static_cast<int64_t>(m) * out_stride;
    o[PermutedIndex((h0 + h) * HD + d)] = a0[0] / dn[h];
    o[PermutedIndex((h0 + h) * HD + d + 1)] = a1[0] / dn[h];
  }
}

// How GroupAttentionKernel runs a shape (false: it cannot).
struct GroupAttentionPlan {
  int32_t hsplit = 0, chunk = 0;
  int64_t smem = 0;
};
// parts: query-head parts per KV head wanted (at least what the threads need, at most one head
// each).
bool PlanGroupAttention(const AttentionShape& shape, int32_t max_context, GroupAttentionPlan* plan, int parts) {
  const int hd = shape.head_dim;
  if ((hd != 64 && hd != 128) || shape.num_kv_heads <= 0 || shape.num_heads % shape.num_kv_heads != 0) return false;
  if (shape.block_size < 8 || max_context < 1) return false;
  const int G = shape.num_heads / shape.num_kv_heads;
  const int hsplit = std::min(G, std::max(parts, (G * hd + kGroupAttnMaxOutputs - 1) / kGroupAttnMaxOutputs));
  const int hb = (G + hsplit - 1) / hsplit;
  if (hb * hd > kGroupAttnMaxOutputs) return false;
  const int64_t row_bytes = int64_t{2 * hd + 4} * 4;
  const int32_t max_chunk = static_cast<int32_t>(kGroupAttnStageBytes / row_bytes) / 32 * 32;
  const int32_t chunk = std::min<int32_t>((max_context + 31) / 32 * 32, max_chunk);
  const int64_t es_stride = (max_context + 3) / 4 * 4;
  const int64_t smem = chunk * row_bytes + 4 * (hb * es_stride + hb * (hd + 4) + hb) + 4 * (max_context / 8 + 2);
  if (smem > kGroupAttnMaxSmem) return false;
  *plan = {hsplit, chunk, smem};
  return true;
}

// ---- The decode step of one token as one launch (kernels.h, DecodeStepArgs) ----
//
// Every block (one per multiprocessor, all resident) has kStepWarps consumer warps and one
// producer warp. The producer's lane 0 walks the block's tiles of every matrix of the step in
// the order the consumers use them (layer by layer: q|k|v, o, gate|up, down; then the lm_head;
// block b takes tiles b, b + G, b + 2G, ... of each matrix) and copies each into the next slot of
// a ring in shared memory as soon as the slot is free; it never waits for an activation, so it
// runs up to a ring's worth of weights ahead, across grid barriers and attention. The block's
// n-th tile is consumed by warp n % kStepWarps from slot n % slots; slots is a multiple of
// kStepWarps, so every slot belongs to one warp, which waits on it in order (an mbarrier's
// parity only tells its last two phases apart). Phases are separated by grid
// barriers; activations written by other blocks are read through L2 (__ldcg), because L1 is not
// coherent across multiprocessors.
constexpr int kStepWarps = kAttnWarps;  // consumer warps: attention uses all of them
constexpr int kStepThreads = (kStepWarps + 1) * 32;
constexpr int kStepMaxSlots = 32;
constexpr int kStepRows = 4;      // rows per tile of every matrix but down (even: rotary and SiLU pairs)
constexpr int kStepDownRows = 1;  // rows per tile of the down product (its rows are long)
#ifndef ROTE_STEP_DOT_UNROLL
#define ROTE_STEP_DOT_UNROLL 4
#endif
constexpr int kStepDotUnroll = ROTE_STEP_DOT_UNROLL;
// Positions per batch of the one-launch step's attention loops (AttendHead's U), by V groups.
template <int NG>
constexpr int kStepAttnBatch = NG == 1 ? 8 : NG == 2 ? 4 : 2;
// The one-launch step attends each head in NG blocks, each the V pass of 64 of its dims (one
// group per warp), the scores computed whole in each: a V row's bytes are what bound the pass on
// one multiprocessor, and idle blocks are plenty (12 heads, 132 blocks at 1.5B).
template <int NG>
constexpr int kStepAttnSplit = NG;

__device__ __forceinline__ void ConsumerSync() { asm volatile("bar.sync 1, %0;" ::"n"(kStepWarps * 32) : "memory"); }

__device__ __forceinline__ void MbarArrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(SmemAddr(bar)) : "memory");
}

__device__ __forceinline__ unsigned long long GlobalTimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Benchmarks: thread 0 records a pair of timer readings in its block's next trace slot.
struct StepTrace {
  unsigned long long* slots = nullptr;  // this block's, or null
  int next = 0;
  __device__ __forceinline__ void Record(unsigned long long arrive, unsigned long long leave) {
    if (slots != nullptr && threadIdx.x == 0) {
      slots[2 * next] = arrive;
      slots[2 * next + 1] = leave;
    }
    ++next;
  }
};

__device__ __forceinline__ unsigned long long LoadAcquire(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

// The grid barrier of the step kernel: a 64-bit arrival counter that only grows (it cannot wrap),
// so nothing is ever reset. Every launch passes the same number of barriers with the same grid,
// so a launch starts with the counter at a multiple of barriers x grid; `base` is that multiple,
// read by each block before its first arrival (at most grid - 1 arrivals can precede it). Barrier
// k then ends when the counter reaches base + k x grid: a block adds its arrival without waiting
// for the add to return (red) and polls. `returning`: the classic form instead, an atomicAdd
// whose returned value tells the block its target. It costs a round trip more per arrival but
// measured faster on an H100 (docs/performance.md: 132 pollers on the line slow the reds down),
// so it is the default; the red form is one-token variant 9.
// Consumer warps only: the producer never waits.
struct StepBarrier {
  unsigned long long* counter;
  unsigned long long base = 0;
  int k = 0;
  bool returning = false;
  __device__ __forceinline__ void Start(int barriers) {
    if (threadIdx.x == 0) {
      const unsigned long long v = LoadAcquire(counter), launch = static_cast<unsigned long long>(barriers) * gridDim.x;
      base = v - v % launch;
    }
  }
};

// hold: set for the producer (StepMatrixPhase clears it once the next activation row is staged).
__device__ __forceinline__ void StepGridBarrier(StepBarrier& bar, StepTrace& trace, volatile int* hold) {
  ConsumerSync();
  if (threadIdx.x == 0) {
    *hold = 1;
    const unsigned long long arrive = trace.slots != nullptr ? GlobalTimer() : 0;
    ++bar.k;
    __threadfence();
    unsigned long long target;
    if (bar.returning) {
      const unsigned long long old = atomicAdd(bar.counter, 1ull);
      target = old - old % gridDim.x + gridDim.x;
    } else {
      asm volatile("red.release.gpu.global.add.u64 [%0], 1;" ::"l"(bar.counter) : "memory");
      target = bar.base + static_cast<unsigned long long>(bar.k) * gridDim.x;
    }
    while (LoadAcquire(bar.counter) < target) {
    }
    if (trace.slots != nullptr) trace.Record(arrive, GlobalTimer());
  }
  ConsumerSync();
}

// Long contexts in the one-launch step: each head attended by P = 8, 4 or 2 blocks (parts p;
// AttentionPartsFor), each over a P-th of the positions, where one block per head (or per V
// slice) walked them all, a round trip per batch (1.5B batch 1 at 520 positions: scores 8.9 us
// and V 8.0 us per layer, H200). The order of every sum is the canonical one:
//   1. part p computes the scores of its contiguous chunk of positions with AttendHead's code
//      (the same per-position dot and tree), writes them and its chunk's max to scratch;
//   2. after the head's parts meet (a counter, as the grid barrier), each part takes the max of
//      the parts' maxes (exact in any order), every weight canonical_expf(s - m) and the canonical
//      denominator over all positions (the same values in every part);
//   3. part p owns the position classes c = p + P i (class = j mod 32), i < 32 / P: each class
//      sums its positions in increasing j for every dim, and the tree's levels off 16 .. P pair
//      classes of the same part (c and c + off are i and i + off / P), so they stay inside it:
//      thread group q (of 4) holds i = q + 4 s, adds the levels that pair its own classes (off
//      / P >= 4) in registers and the last two through shared memory; one partial per dim;
//   4. after the parts meet again, part p finishes dims [p hd / P, (p + 1) hd / P): the tree's
//      levels off P / 2 .. 1 over the parts, then one divide.
// With P = 8 these are exactly AttendValues' levels (its warp w holds the classes of part w).
constexpr int kStepAttnParts = kMaxAttentionParts;  // the most parts per head: the scratch's stride
// (Parts per head: AttentionPartsFor, inference/cuda/attention_parts.h.)

// Every meeting adds kStepAttnParts to the head's counter whatever the number of parts, so the
// counters stay aligned across launches that use different numbers.
__device__ __forceinline__ void HeadPartsSync(unsigned long long* counter, int parts) {
  ConsumerSync();
  if (threadIdx.x == 0) {
    __threadfence();
    const unsigned long long old = atomicAdd(counter, static_cast<unsigned long long>(kStepAttnParts / parts));
    const unsigned long long target = old - old % kStepAttnParts + kStepAttnParts;
    while (LoadAcquire(counter) < target) {
    }
  }
  ConsumerSync();
}

__device__ __forceinline__ float2 LoadKv2(const float* p, bool fresh) {
  return fresh ? __ldcg(reinterpret_cast<const float2*>(p)) : *reinterpret_cast<const float2*>(p);
}

// Part p of `parts` of head h (one token, batch 1; this step's K/V row, position L - 1, was written by
// other blocks of this launch and is read through L2). weights: L floats of shared memory;
// vsm: 4 x hd floats of shared memory.
template <int NG, typename Sync>
__device__ __forceinline__ void AttendHeadPart(const DecodeStepArgs& f, const LayerKv& kv, int h, int p, int parts,
                                               const int32_t* bt_s, float* q_s, float* red, float* weights,
                                               float* vsm, Sync sync) {
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const AttentionShape& shape = f.shape;
  const int hd = shape.head_dim, bs = shape.block_size;
  const int g = h / (shape.num_heads / shape.num_kv_heads);
  const int kv_dim = shape.num_kv_heads * hd;
  const int L = f.step.pos[0] + 1, old_end = L - 1;
  float* scores_g = f.attn_scores + static_cast<int64_t>(h) * f.max_context;
  float* maxes_g = f.attn_maxes + h * kStepAttnParts;
  float* vpart_g = f.attn_vpart + static_cast<int64_t>(h) * kStepAttnParts * hd;
  unsigned long long* counter = f.attn_sync + h;
  for (int d = tid; d < hd; d += kStepWarps * 32) q_s[d] = __ldcg(f.q + h * hd + d);
  sync();

  // 1. Scores of positions [j0, j1), eight lanes per position (AttendHead's pass 1).
  const int chunk = (L + parts - 1) / parts;
  const int j0 = p * chunk, j1 = min(L, j0 + chunk);
  float mx = -INFINITY;
  {
    const int r = lane % 8;
    float qr[2 * NG][4];
#pragma unroll
    for (int k = 0; k < 2 * NG; ++k)
#pragma unroll
      for (int i = 0; i < 4; ++i) qr[k][i] = 32 * k + 4 * r < hd ? q_s[32 * k + 4 * r + i] : 0.0f;
    constexpr int U = NG == 1 ? 4 : NG == 2 ? 2 : 1;  // positions per lane group per batch
    for (int jb = j0 + warp * 4 + lane / 8; jb - lane / 8 < j1; jb += kStepWarps * 4 * U) {
      float4 k4[U][2 * NG];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int j = jb + kStepWarps * 4 * u;
        const bool ok = j < j1;
        const float* kp = kv.k + (ok ? CacheRow(bt_s, j, bs) : 0) * kv_dim + g * hd + 4 * r;
#pragma unroll
        for (int k = 0; k < 2 * NG; ++k) {
          k4[u][k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
          if (ok && 32 * k + 4 * r < hd) k4[u][k] = LoadKv4(kp + 32 * k, j >= old_end);
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int j = jb + kStepWarps * 4 * u;
        float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int k = 0; k < 2 * NG; ++k) {
          if (32 * k + 4 * r < hd) {
            v[0] = fmaf(qr[k][0], k4[u][k].x, v[0]);
            v[1] = fmaf(qr[k][1], k4[u][k].y, v[1]);
            v[2] = fmaf(qr[k][2], k4[u][k].z, v[2]);
            v[3] = fmaf(qr[k][3], k4[u][k].w, v[3]);
          }
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          v[i] = v[i] + __shfl_xor_sync(0xffffffffu, v[i], 4);  // classes c and c + 16
          v[i] = v[i] + __shfl_xor_sync(0xffffffffu, v[i], 2);  // c and c + 8
          v[i] = v[i] + __shfl_xor_sync(0xffffffffu, v[i], 1);  // c and c + 4
        }
        const float sc = ((v[0] + v[2]) + (v[1] + v[3])) * f.scale;  // c and c + 2, then c and c + 1
        if (r == 0 && j < j1) {
          scores_g[j] = sc;
          mx = fmaxf(mx, sc);
        }
      }
    }
  }
  mx = WarpMax(mx);
  if (lane == 0) red[warp] = mx;
  sync();
  if (tid == 0) {
    float m = red[0];
#pragma unroll
    for (int w = 1; w < kStepWarps; ++w) m = fmaxf(m, red[w]);
    maxes_g[p] = m;
  }
  HeadPartsSync(counter, parts);

  // 2. The max, every weight and the denominator, over all positions.
  mx = __ldcg(maxes_g);
#pragma unroll
  for (int k = 1; k < kStepAttnParts; ++k)
    if (k < parts) mx = fmaxf(mx, __ldcg(maxes_g + k));
  for (int j = tid; j < L; j += kStepWarps * 32) weights[j] = canonical_expf(__ldcg(scores_g + j) - mx);
  sync();
  float denom = 0.0f;
  for (int j = lane; j < L; j += 32) denom = denom + weights[j];
  denom = WarpTree(denom);

  // 3. V over the classes p + P (q + 4 s) (q = tid / 64, s < 8 / P), two dims per thread (+ 128 n),
  // then the tree's levels inside the part: those pairing one thread's classes (s and s + off,
  // in registers), then q + (q + 2) and q + (q + 1) through shared memory.
  {
    const int q = tid / 64, d0 = 2 * (tid % 64);
    const int per_thread = 8 / parts;  // classes per thread group: 1, 2 or 4
    constexpr int KD = (kMaxHeadDim + 127) / 128;
    constexpr int UV = 4;
    float cls[4][KD][2];  // cls[s]: class p + P (q + 4 s)
    const float* vbase = kv.v + g * hd + d0;
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      float(&acc)[KD][2] = cls[s];
#pragma unroll
      for (int n = 0; n < KD; ++n) acc[n][0] = acc[n][1] = 0.0f;
      if (s >= per_thread) continue;
      const int c = p + parts * (q + 4 * s);
      for (int jb = c; jb < L; jb += 32 * UV) {
        float w[UV];
        float2 va[UV][KD];
#pragma unroll
        for (int u = 0; u < UV; ++u) {
          const int j = jb + 32 * u;
          const bool ok = j < L;
          w[u] = ok ? weights[j] : 0.0f;
          const float* vrow = vbase + (ok ? CacheRow(bt_s, j, bs) : 0) * kv_dim;
#pragma unroll
          for (int n = 0; n < KD; ++n)
            va[u][n] = ok && d0 + 128 * n < hd ? LoadKv2(vrow + 128 * n, j >= old_end) : make_float2(0.0f, 0.0f);
        }
#pragma unroll
        for (int u = 0; u < UV; ++u) {
          if (jb + 32 * u < L) {
#pragma unroll
            for (int n = 0; n < KD; ++n) {
              acc[n][0] = fmaf(w[u], va[u][n].x, acc[n][0]);
              acc[n][1] = fmaf(w[u], va[u][n].y, acc[n][1]);
            }
          }
        }
      }
    }
    // The levels pairing this thread's own classes: s and s + off hold classes c and c + 4 P off
    // (off 2 and 1 in s: the tree's levels off 8 P and 4 P, where those are 16 or less).
#pragma unroll
    for (int off = 2; off >= 1; off /= 2)
      if (off < per_thread)
#pragma unroll
        for (int s = 0; s < off; ++s)
#pragma unroll
          for (int n = 0; n < KD; ++n) {
            cls[s][n][0] = cls[s][n][0] + cls[s + off][n][0];
            cls[s][n][1] = cls[s][n][1] + cls[s + off][n][1];
          }
#pragma unroll
    for (int n = 0; n < KD; ++n)
      if (d0 + 128 * n < hd) {
        vsm[q * hd + d0 + 128 * n] = cls[0][n][0];
        vsm[q * hd + d0 + 128 * n + 1] = cls[0][n][1];
      }
  }
  sync();
  // The two levels between thread groups: classes i and i + 2 (q and q + 2), then i and i + 1.
  for (int d = tid; d < hd; d += kStepWarps * 32)
    vpart_g[p * hd + d] = (vsm[d] + vsm[2 * hd + d]) + (vsm[hd + d] + vsm[3 * hd + d]);
  HeadPartsSync(counter, parts);

  // 4. The tree's last levels, over the parts (off P / 2 .. 1), for this part's dims.
  const int per = hd / parts;  // hd is a multiple of 8
  for (int d = p * per + tid; d < (p + 1) * per; d += kStepWarps * 32) {
    float v[kStepAttnParts];
#pragma unroll
    for (int k = 0; k < kStepAttnParts; ++k) v[k] = k < parts ? __ldcg(vpart_g + k * hd + d) : 0.0f;
#pragma unroll
    for (int off = kStepAttnParts / 2; off >= 1; off /= 2)
      if (off < parts)
#pragma unroll
        for (int k = 0; k < off; ++k) v[k] = v[k] + v[k + off];
    f.att[PermutedIndex(h * hd + d)] = v[0] / denom;
  }
  sync();
}

// The same parts as a launch of their own, for one token decoding over a long context with
// separate launches (the 0.5B shape): heads x P blocks (f.attn_parts: 8, 4 or 2) of kAttnThreads
// threads, all resident (cooperative), meeting through f.attn_sync. Only the fields AttendHeadPart
// reads are set.
template <int NG>
__global__ void __launch_bounds__(kAttnThreads, 1) AttentionPartsKernel(const __grid_constant__ DecodeStepArgs f,
                                                                       LayerKv kv) {
  static_assert(kAttnThreads == kStepWarps * 32, "AttendHeadPart's barrier spans the block");
  extern __shared__ __align__(16) unsigned char parts_smem[];
  __shared__ float q_s[kMaxHeadDim];
  __shared__ float red[kAttnWarps];
  LetNextStart();
  float* weights = reinterpret_cast<float*>(parts_smem);  // max_context
  float* vsm = weights + f.max_context;                    // 4 x head_dim
  int32_t* bt_s = reinterpret_cast<int32_t*>(vsm + 4 * kMaxHeadDim);
  // The step's metadata was copied in before its first kernel: the block table can be read now.
  const int bs = f.shape.block_size, L = f.step.pos[0] + 1;
  for (int b = threadIdx.x; b < (L + bs - 1) / bs; b += kAttnThreads) bt_s[b] = f.step.block_table[b];
  WaitForPrevious();
  __syncthreads();
  AttendHeadPart<NG>(f, kv, blockIdx.x / f.attn_parts, blockIdx.x % f.attn_parts, f.attn_parts, bt_s, q_s, red,
                     weights, vsm, [] { ConsumerSync(); });
}

// Matrix idx of the step, in the order of use: 4 per layer (q|k|v, o, gate|up, down), then the lm_head.
__device__ __forceinline__ const LinearArgs& StepMatrix(const DecodeStepArgs& f, int idx) {
  if (idx == 4 * f.num_layers) return f.lm_head;
  const StepLayerArgs& l = f.layers[idx / 4];
  switch (idx % 4) {
    case 0:
      return l.qkv;
    case 1:
      return l.out;
    case 2:
      return l.gate_up;
    default:
      return l.down;
  }
}
__device__ __forceinline__ int StepTileRows(const DecodeStepArgs& f, int idx) {
  return idx < 4 * f.num_layers && idx % 4 == 3 ? kStepDownRows : kStepRows;
}

// A block's walk over its tiles of every matrix of the step, in the order of use. The current
// matrix's address and sizes are kept in registers: the producer issues a tile every few
// hundred cycles and must not chase the argument table for each one.
template <WeightType WT>
struct StepCursor {
  int idx = -1;  // matrix (StepMatrix); -1 before the first
  int tile = 0;  // tile of that matrix
  int tiles = 0, rows = 0, tile_rows = 0;
  int64_t row_bytes = 0;
  const char* data = nullptr;
  __device__ __forceinline__ bool Next(const DecodeStepArgs& f) {
    tile += gridDim.x;
    while (tile >= tiles) {
      if (++idx > 4 * f.num_layers) return false;
      const LinearArgs& a = StepMatrix(f, idx);
      tile_rows = StepTileRows(f, idx);
      rows = a.w.rows;
      tiles = (rows + tile_rows - 1) / tile_rows;
      row_bytes = static_cast<int64_t>(a.w.cols_padded) * kWeightBytes<WT>;
      data = static_cast<const char*>(a.w.data);
      tile = blockIdx.x;
    }
    return true;
  }
  __device__ __forceinline__ const char* Src() const { return data + static_cast<int64_t>(tile) * tile_rows * row_bytes; }
  __device__ __forceinline__ uint32_t Bytes() const {
    return static_cast<uint32_t>(min(tile_rows, rows - tile * tile_rows) * row_bytes);
  }
  __device__ __forceinline__ void PrefetchL2() const {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(Src()), "r"(Bytes()) : "memory");
  }
};

// What a one-launch step tile's epilogue reads besides its sums: the residual a lane adds
// (kAddResidual) or the bias, rotary constants and destinations of a rotary pair (kRopeStore).
// StepMatrixPhase loads them for a warp's next tile before it waits for that tile, so their round
// trip to L2 overlaps the wait and the dot product instead of following them.
struct StepEpilogueOperands {
  float resid = 0.0f;
  RopeTarget rope;
};

template <int ROWS, LinearEpilogue EPI>
__device__ __forceinline__ StepEpilogueOperands LoadStepEpilogue(const LinearArgs& a, int tile, int lane) {
  StepEpilogueOperands e;
  const int row = tile * ROWS + lane;
  if constexpr (EPI == LinearEpilogue::kAddResidual) {
    // Through L2: other blocks wrote the residual stream (before the grid barrier that began
    // this phase; in this phase only this lane writes its row).
    if (lane < ROWS && row < a.w.rows) e.resid = __ldcg(a.out + (a.out_lane_rows ? PermutedIndex(row) : row));
  } else if constexpr (EPI == LinearEpilogue::kRopeStore) {
    e.rope = PlanRopeStore<ROWS>(a, tile * ROWS, lane);
  }
  return e;
}

// The consumers' part of one matrix: stage (and normalise) the activation row, then every tile
// of this block that falls to this warp: wait for its slot, the dot products, free the slot, the
// epilogue. `seq` counts the block's tiles (the producer's order): the block's i-th tile of the
// matrix is its tile seq + i, and falls to warp (seq + i) % kStepWarps. EPI: the matrix's
// epilogue (a.epilogue) and NORM: whether its RMSNorm is fused (a.norm_weight set), fixed per call
// site so that each inlined phase holds only its own code (CanRunDecodeStep checks both). The
// kernel's code is about 140 KB and its multiprocessors fetch it again every step: less of it
// measured faster (182 -> 162 -> 147 KB: 1.5B batch 1 +3.5%, +0.9%), except where the saving cost
// the dot product's unrolling or put calls in the tile loop (docs/performance.md, eighth session).
template <WeightType WT, int ROWS, LinearEpilogue EPI, bool NORM>
__device__ __forceinline__ void StepMatrixPhase(const LinearArgs& a, const unsigned char* ring, int slots,
                                                int slot_bytes, uint64_t* full, uint64_t* empty, float4* xs,
                                                int& seq, volatile int* hold) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int groups = a.w.cols_padded / kGroupCols;
  const int tiles = (a.w.rows + ROWS - 1) / ROWS;
  const int block_tiles = tiles > static_cast<int>(blockIdx.x) ? (tiles - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
  int t = (warp - seq % kStepWarps + kStepWarps) % kStepWarps;  // this warp's first tile of the matrix
  // Its epilogue operands first: their round trip overlaps the activation row's.
  StepEpilogueOperands next;
  if (t < block_tiles) next = LoadStepEpilogue<ROWS, EPI>(a, blockIdx.x + t * gridDim.x, lane);
  // The norm's weights (constants) are loaded first, into registers for the first kStepNormRegs
  // chunks of each thread, so their round trip overlaps the activation's.
  constexpr int kStepNormRegs = 2;
  const float4* nw = reinterpret_cast<const float4*>(a.norm_weight);
  float4 nwr[kStepNormRegs];
  if constexpr (NORM) {
#pragma unroll
    for (int k = 0; k < kStepNormRegs; ++k) {
      const int i = threadIdx.x + k * kStepWarps * 32;
      nwr[k] = i < groups * 32 ? nw[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
  }
  const int src = a.x_rows != nullptr ? a.x_rows[0] : 0;
  const float4* xg = reinterpret_cast<const float4*>(a.x + static_cast<int64_t>(src) * a.x_stride);
  for (int i = threadIdx.x; i < groups * 32; i += kStepWarps * 32) xs[i] = __ldcg(xg + i);
  ConsumerSync();
  if constexpr (NORM) {
    // (Four groups per unrolled iteration: the sum is a chain of FMAs anyway, and the compiler's
    // own unrolling put several hundred instructions into each of the three normalising phases.)
    const float r =
        canonical_rms_scale(WarpTree(LaneRowSumSquares<4>(xs, groups, lane)), a.w.cols, a.norm_eps);
    ConsumerSync();  // every warp has its sum of squares before x is overwritten
#pragma unroll
    for (int k = 0; k < kStepNormRegs; ++k) {
      const int i = threadIdx.x + k * kStepWarps * 32;
      if (i < groups * 32) xs[i] = NormScale(xs[i], r, nwr[k]);
    }
    for (int i = threadIdx.x + kStepNormRegs * kStepWarps * 32; i < groups * 32; i += kStepWarps * 32)
      xs[i] = NormScale(xs[i], r, nw[i]);
    ConsumerSync();
  }
  if (threadIdx.x == 0) *hold = 0;  // the activation row is staged: the producer may copy again
  const int64_t row_bytes = static_cast<int64_t>(a.w.cols_padded) * kWeightBytes<WT>;
  for (; t < block_tiles; t += kStepWarps) {
    const int tile = blockIdx.x + t * gridDim.x;
    const int slot = (seq + t) % slots;
    MbarWait(&full[slot], static_cast<uint32_t>(((seq + t) / slots) & 1));
    float acc[ROWS];
    SharedBandDot<WT, ROWS, kStepDotUnroll>(ring + static_cast<int64_t>(slot) * slot_bytes, row_bytes, xs, groups, lane,
                                             nullptr, 0.0f,
                            acc);
    __syncwarp();  // every lane has consumed the slot (its FMAs used every value it read)
    if (lane == 0) MbarArrive(&empty[slot]);
    const StepEpilogueOperands e = next;
    if (t + kStepWarps < block_tiles) next = LoadStepEpilogue<ROWS, EPI>(a, tile + kStepWarps * gridDim.x, lane);
#pragma unroll
    for (int r = 0; r < ROWS; ++r) acc[r] = WarpTree(acc[r]);
    if constexpr (EPI == LinearEpilogue::kRopeStore) {
      StoreRope<ROWS>(a, e.rope, acc, lane);
    } else if constexpr (EPI == LinearEpilogue::kSiluMul) {
#pragma unroll
      for (int r = 0; r + 1 < ROWS; r += 2) {
        const int row = tile * ROWS + r;
        if (lane == r && row + 1 < a.w.rows) {
          const int n = row / 2;
          a.out[a.out_lane_rows ? PermutedIndex(n) : n] = canonical_silu(acc[r]) * acc[r + 1];
        }
      }
    } else {
      static_assert(EPI == LinearEpilogue::kAddResidual || EPI == LinearEpilogue::kStore, "step epilogues");
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        const int row = tile * ROWS + r;
        if (lane != r || row >= a.w.rows) continue;
        const int o = a.out_lane_rows ? static_cast<int>(PermutedIndex(row)) : row;
        a.out[o] = EPI == LinearEpilogue::kAddResidual ? e.resid + acc[r] : acc[r];
      }
    }
  }
  seq += block_tiles;
}

// NG: attention's V groups per warp for the model's head dimension (AttnGroups), so the batched
// attention loops (two positions per batch) hold only the registers that dimension needs.
// SPLIT: whether the step may attend a head over parts of its positions (AttendHeadPart); the host
// launches the kernel without that code where the step's context is below f.attn_split_min_context.
template <WeightType WT, int NG, bool SPLIT>
__global__ void __launch_bounds__(kStepThreads, 1)
    DecodeStepKernel(const __grid_constant__ DecodeStepArgs f, int32_t slots, int32_t slot_bytes, int32_t union_bytes,
                     int32_t returning_barrier, int32_t prefetch_tiles, int32_t weight_evict_first,
                     int32_t hold_copies) {
  extern __shared__ __align__(128) unsigned char step_smem[];
  __shared__ __align__(8) uint64_t full[kStepMaxSlots];
  __shared__ __align__(8) uint64_t empty[kStepMaxSlots];
  __shared__ float q_s[kMaxHeadDim];
  __shared__ float red[kAttnWarps];
  // Set from a grid barrier until the next activation row is staged: with hold_copies the producer
  // issues no copy meanwhile, since the data of its copies and the consumers' loads (the barrier's
  // polls, the row) come back to the multiprocessor the same way, and the loads are on the step's
  // critical path (1.5B batch 1: +2%, H100).
  __shared__ volatile int hold;
  LetNextStart();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  unsigned char* ring = step_smem;
  // The activation row of a matrix phase and attention's scores share one region.
  float4* xs = reinterpret_cast<float4*>(step_smem + static_cast<int64_t>(slots) * slot_bytes);
  float* scores = reinterpret_cast<float*>(xs);
  int32_t* bt_s = reinterpret_cast<int32_t*>(step_smem + static_cast<int64_t>(slots) * slot_bytes + union_bytes);
  if (threadIdx.x == 0) {
    for (int s = 0; s < slots; ++s) {
      MbarInit(&full[s], 1);
      MbarInit(&empty[s], 1);
    }
    FenceMbarInit();
    hold = 0;
  }
  __syncthreads();

  if (warp == kStepWarps) {  // the producer: weights only, so it never waits for the previous kernel
    if (lane != 0) return;
    // A second cursor runs prefetch_tiles tiles ahead and asks L2 for them (no shared memory
    // needed), so DRAM keeps streaming while the ring is full: at a barrier, or in attention.
    StepCursor<WT> cur, ahead;
    const uint64_t policy = weight_evict_first ? EvictFirstPolicy() : 0;
    for (int i = 0; i < prefetch_tiles && ahead.Next(f); ++i) ahead.PrefetchL2();
    for (int seq = 0; cur.Next(f); ++seq) {
      if (prefetch_tiles > 0 && ahead.Next(f)) ahead.PrefetchL2();
      const int slot = seq % slots;
      if (seq >= slots) MbarWait(&empty[slot], static_cast<uint32_t>((seq / slots - 1) & 1));
      if (hold_copies)
        while (hold) {
        }
      const uint32_t bytes = cur.Bytes();
      MbarExpectTx(&full[slot], bytes);
      BulkCopyToSharedHinted(ring + static_cast<int64_t>(slot) * slot_bytes, cur.Src(), bytes, &full[slot],
                             weight_evict_first != 0, policy);
    }
    return;
  }

  // Consumers. The step's metadata was copied in before its first kernel: the block table can be
  // read now, once for every layer.
  const AttentionShape& shape = f.shape;
  const int bs = shape.block_size, hd = shape.head_dim;
  const int kv_dim = shape.num_kv_heads * hd;
  const int L = f.step.pos[0] + 1;
  for (int b = threadIdx.x; b < (L + bs - 1) / bs; b += kStepWarps * 32) bt_s[b] = f.step.block_table[b];
  // Long contexts: each head in `parts` blocks over parts of its positions (AttendHeadPart).
  const int parts = AttentionPartsFor(f.attn_parts, shape.num_heads, static_cast<int>(gridDim.x));
  const bool split_attention = SPLIT && f.attn_sync != nullptr && f.attn_split_min_context > 0 && L >= f.attn_split_min_context &&
                               parts > 0 && hd % 8 == 0;
  StepBarrier bar{f.barrier};
  bar.returning = returning_barrier != 0;
  bar.Start(5 * f.num_layers);
  WaitForPrevious();
  StepTrace trace;
  if (f.trace != nullptr) {
    trace.slots = f.trace + static_cast<int64_t>(blockIdx.x) * 2 * DecodeStepTraceSlots(f.num_layers);
    const unsigned long long t = GlobalTimer();
    trace.Record(t, t);
  }
  ConsumerSync();
  int seq = 0;
  for (int layer = 0; layer < f.num_layers; ++layer) {
    const StepLayerArgs& ly = f.layers[layer];
    if (layer > 0) StepGridBarrier(bar, trace, &hold);  // the previous layer's residual stream is complete
    // Blocks that will attend pull this layer's K/V rows of earlier steps into L2 meanwhile.
    if (!split_attention) {
      for (int it = blockIdx.x; it < shape.num_heads * kStepAttnSplit<NG>; it += gridDim.x)
        PrefetchKvRows<false>(ly.kv, bt_s, bs, kv_dim, hd,
                              it / kStepAttnSplit<NG> / (shape.num_heads / shape.num_kv_heads), L - 1, threadIdx.x,
                              kStepWarps * 32);
    } else if (static_cast<int>(blockIdx.x) < shape.num_heads * parts) {
      // A part's K rows (its chunk) and V rows (its classes).
      const int h = blockIdx.x / parts, p = blockIdx.x % parts;
      const int g = h / (shape.num_heads / shape.num_kv_heads);
      const int chunk = (L + parts - 1) / parts;
      for (int j = p * chunk + threadIdx.x; j < min(L - 1, (p + 1) * chunk); j += kStepWarps * 32) {
        const char* kp = reinterpret_cast<const char*>(ly.kv.k + (CacheRow(bt_s, j, bs)) * kv_dim + g * hd);
        for (int off = 0; off < hd * 4; off += 128) asm volatile("prefetch.global.L2 [%0];" ::"l"(kp + off));
      }
      const int classes = 32 / parts;  // the part's position classes p + parts k
      for (int i = threadIdx.x; i < (L - 1 + parts - 1) / parts; i += kStepWarps * 32) {
        const int j = 32 * (i / classes) + p + parts * (i % classes);
        if (j >= L - 1) continue;
        const char* vp = reinterpret_cast<const char*>(ly.kv.v + (CacheRow(bt_s, j, bs)) * kv_dim + g * hd);
        for (int off = 0; off < hd * 4; off += 128) asm volatile("prefetch.global.L2 [%0];" ::"l"(vp + off));
      }
    }
    StepMatrixPhase<WT, kStepRows, LinearEpilogue::kRopeStore, true>(ly.qkv, ring, slots, slot_bytes, full, empty, xs, seq, &hold);
    StepGridBarrier(bar, trace, &hold);  // q, and this step's K and V rows, are complete
    if (threadIdx.x == 0) hold = 0;  // (attention reads no activation row)
#ifdef ROTE_CUDA_TIMELINE
    // Benchmarks: the timer at each of attention's block barriers, after the barrier pairs.
    unsigned long long* points =
        trace.slots != nullptr
            ? trace.slots + 2 * (5 * f.num_layers + 2) + static_cast<int64_t>(layer) * kStepAttentionTracePoints
            : nullptr;
    int point = 0;
    auto attention_sync = [&] {
      ConsumerSync();
      if (points != nullptr && threadIdx.x == 0 && point < kStepAttentionTracePoints) points[point] = GlobalTimer();
      ++point;
    };
#else
    auto attention_sync = [] { ConsumerSync(); };
#endif
    if (split_attention) {
      if (static_cast<int>(blockIdx.x) < shape.num_heads * parts)
        AttendHeadPart<NG>(f, ly.kv, blockIdx.x / parts, blockIdx.x % parts, parts, bt_s, q_s, red, scores,
                           scores + f.max_context, attention_sync);
    } else
    for (int it = blockIdx.x; it < shape.num_heads * kStepAttnSplit<NG>; it += gridDim.x) {
      constexpr int kSplit = kStepAttnSplit<NG>, kVng = NG / kSplit;
      // Slices of whole 8-dim lane groups (hd is a multiple of 8), at most 64 dims each (hd is at
      // most 64 NG); the last takes what is left.
      const int slice = (hd / kSplit + 7) / 8 * 8, dim0 = it % kSplit * slice;
      AttendHead<NG, kStepAttnBatch<NG>, false, false, kVng, kStepAttnBatch<kVng>>(
          f.q, f.step, shape, ly.kv, f.scale, f.att, 0, it / kSplit, 0, scores, bt_s, q_s, red, scores + f.max_context,
          static_cast<const AttnFirstBatch<NG, kStepAttnBatch<NG>>*>(nullptr), nullptr, nullptr, threadIdx.x, true,
          attention_sync, max(0, min(slice, hd - dim0)), dim0);
    }
    StepGridBarrier(bar, trace, &hold);
    StepMatrixPhase<WT, kStepRows, LinearEpilogue::kAddResidual, false>(ly.out, ring, slots, slot_bytes, full, empty, xs, seq, &hold);
    StepGridBarrier(bar, trace, &hold);
    StepMatrixPhase<WT, kStepRows, LinearEpilogue::kSiluMul, true>(ly.gate_up, ring, slots, slot_bytes, full, empty, xs, seq, &hold);
    StepGridBarrier(bar, trace, &hold);
    StepMatrixPhase<WT, kStepDownRows, LinearEpilogue::kAddResidual, false>(ly.down, ring, slots, slot_bytes, full, empty, xs, seq, &hold);
  }
  StepGridBarrier(bar, trace, &hold);
  StepMatrixPhase<WT, kStepRows, LinearEpilogue::kStore, true>(f.lm_head, ring, slots, slot_bytes, full, empty, xs, seq, &hold);
  if (f.trace != nullptr) {
    ConsumerSync();
    const unsigned long long t = GlobalTimer();
    trace.Record(t, t);
  }
}

// The ring's slot (the largest tile), the shared activation/scores region, the block table,
// and how many slots fit (a multiple of kStepWarps; 0: the step does not fit).
struct DecodeStepPlan {
  int64_t slot = 0, union_bytes = 0, table_bytes = 0;
  int slots = 0;
  int64_t smem() const { return slots * slot + union_bytes + table_bytes; }
};

int StepKernelSmemLimit() {
  static PerDevice<int> limit_on;
  return limit_on.Get([] {
    int device = 0, optin = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess)
      return 0;
    cudaFuncAttributes attr{};
    if (cudaFuncGetAttributes(&attr, DecodeStepKernel<WeightType::kBF16, AttnGroups(kMaxHeadDim), true>) != cudaSuccess)
      return 0;
    return optin - static_cast<int>(attr.sharedSizeBytes);
  });
}

DecodeStepPlan PlanDecodeStep(const DecodeStepArgs& f, const StepLayerArgs& l0) {
  const int64_t eb = l0.qkv.w.type == WeightType::kF32 ? 4 : 2;
  DecodeStepPlan p;
  p.slot = std::max({int64_t{kStepRows} * l0.qkv.w.cols_padded, int64_t{kStepRows} * l0.out.w.cols_padded,
                     int64_t{kStepRows} * l0.gate_up.w.cols_padded, int64_t{kStepDownRows} * l0.down.w.cols_padded,
                     int64_t{kStepRows} * f.lm_head.w.cols_padded}) *
           eb;
  p.slot = (p.slot + 127) / 128 * 128;
  const int64_t xs = int64_t{4} * std::max({l0.qkv.w.cols_padded, l0.out.w.cols_padded, l0.gate_up.w.cols_padded,
                                            l0.down.w.cols_padded, f.lm_head.w.cols_padded});
  // Attention's scores and its V-pass partials (AttendValues' vpart) follow each other there.
  p.union_bytes = (std::max<int64_t>(xs, int64_t{4} * (f.max_context + kAttnWarps * f.shape.head_dim)) + 127) / 128 * 128;
  p.table_bytes = (int64_t{f.max_context} / std::max(1, f.shape.block_size) + 2) * 4;
  const int64_t room = StepKernelSmemLimit() - p.union_bytes - p.table_bytes;
  const int64_t fit = room > 0 ? room / p.slot : 0;
  p.slots = static_cast<int>(std::min<int64_t>(kStepMaxSlots, fit) / kStepWarps * kStepWarps);
  return p;
}

template <WeightType WT>
cudaError_t LaunchDecodeStepTyped(const DecodeStepArgs& f, const DecodeStepPlan& p, cudaStream_t stream) {
  const int hd = f.shape.head_dim;
  // Without the parts' code where this step does not attend in parts: the kernel is 50 KB
  // shorter, and attention measured 0.3 us a layer faster (1.5B batch 1, docs/performance.md).
  const bool split = f.attn_sync != nullptr;
  auto* kernel = hd <= kAttnWarps * 8       ? (split ? DecodeStepKernel<WT, 1, true> : DecodeStepKernel<WT, 1, false>)
                 : hd <= 2 * kAttnWarps * 8 ? (split ? DecodeStepKernel<WT, 2, true> : DecodeStepKernel<WT, 2, false>)
                                            : (split ? DecodeStepKernel<WT, AttnGroups(kMaxHeadDim), true>
                                                     : DecodeStepKernel<WT, AttnGroups(kMaxHeadDim), false>);
  static PerDevice<cudaError_t> prepared_on;
  const cudaError_t prepared = prepared_on.Get([] {
    for (auto* k : {DecodeStepKernel<WT, 1, true>, DecodeStepKernel<WT, 2, true>,
                    DecodeStepKernel<WT, AttnGroups(kMaxHeadDim), true>, DecodeStepKernel<WT, 1, false>,
                    DecodeStepKernel<WT, 2, false>, DecodeStepKernel<WT, AttnGroups(kMaxHeadDim), false>}) {
      const cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, StepKernelSmemLimit());
      if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
  });
  if (prepared != cudaSuccess) return prepared;
  // One block per multiprocessor (its shared memory allows no second), all resident at once, as
  // the grid barrier needs; the kernel lets the next one launch only after every block started.
  // Cooperative: the grid barrier needs every block resident; where they cannot be (MPS giving
  // this process part of the device), the launch fails with an error instead of hanging.
  return LaunchChainedImpl(/*cooperative=*/true, kernel, dim3(MultiprocessorCount()), dim3(kStepThreads),
                       static_cast<size_t>(p.smem()), stream, f, p.slots, static_cast<int32_t>(p.slot),
                       static_cast<int32_t>(p.union_bytes), static_cast<int32_t>(g_one_token_kernel != 9),
                       g_step_prefetch_tiles, static_cast<int32_t>(g_weight_evict_first),
                       static_cast<int32_t>(g_one_token_kernel != 10));
}

std::atomic<int64_t> g_attention_parts_launches{0};  // LaunchAttentionParts launches issued (tests)

int64_t AttentionPartsSmem(int32_t max_context, int32_t block_size) {
  return (int64_t{max_context} + 4 * kMaxHeadDim) * 4 + (int64_t{max_context} / block_size + 1) * 4;
}

bool CanRunAttentionPartsImpl(const StepTokens& step, const AttentionShape& shape, int32_t max_context, int32_t parts) {
  static PerDevice<int> optin_on;
  const int optin = optin_on.Get([] {
    int device = 0, v = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess)
      return 0;
    return v;
  });
  return step.tokens == 1 && shape.head_dim % 8 == 0 && shape.head_dim <= kMaxHeadDim && shape.block_size >= 1 &&
         AttentionPartsFor(parts, shape.num_heads, static_cast<int>(MultiprocessorCount())) > 0 &&
         AttentionPartsSmem(max_context, shape.block_size) + 2048 <= optin;
}

cudaError_t LaunchAttentionPartsImpl(const float* q, const StepTokens& step, const AttentionShape& shape, LayerKv kv,
                                     float scale, int32_t max_context, float* out, const AttentionParts& parts,
                                     cudaStream_t stream) {
  if (!CanRunAttentionPartsImpl(step, shape, max_context, parts.parts)) return cudaErrorInvalidValue;
  DecodeStepArgs f;
  f.step = step;
  f.shape = shape;
  f.scale = scale;
  f.max_context = max_context;
  f.q = q;
  f.att = out;
  f.attn_scores = parts.scores;
  f.attn_maxes = parts.maxes;
  f.attn_vpart = parts.vpart;
  f.attn_sync = parts.sync;
  f.attn_parts = AttentionPartsFor(parts.parts, shape.num_heads, static_cast<int>(MultiprocessorCount()));
  const int hd = shape.head_dim;
  auto* kernel = hd <= kAttnWarps * 8       ? AttentionPartsKernel<1>
                 : hd <= 2 * kAttnWarps * 8 ? AttentionPartsKernel<2>
                                            : AttentionPartsKernel<AttnGroups(kMaxHeadDim)>;
  const int64_t smem = AttentionPartsSmem(max_context, shape.block_size);
  // The largest shared memory each kernel was allowed so far, per device (attributes are the
  // device's); backends on several threads may launch at once.
  static std::mutex prepared_mu;
  static int64_t prepared_smem[kMaxCachedDevices][3] = {};
  const int which = hd <= kAttnWarps * 8 ? 0 : hd <= 2 * kAttnWarps * 8 ? 1 : 2;
  int device = 0;
  if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  {
    std::lock_guard<std::mutex> lock(prepared_mu);
    int64_t* prepared = device >= 0 && device < kMaxCachedDevices ? &prepared_smem[device][which] : nullptr;
    if (prepared == nullptr || smem > *prepared) {
      const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
      if (e != cudaSuccess) return e;
      if (prepared != nullptr) *prepared = smem;
    }
  }
  g_attention_parts_launches.fetch_add(1, std::memory_order_relaxed);
  // Cooperative: the parts of a head wait for each other, so every block must be resident.
  return LaunchChainedImpl(/*cooperative=*/true, kernel, dim3(shape.num_heads * f.attn_parts), dim3(kAttnThreads),
                           static_cast<size_t>(smem), stream, f, kv);
}

// Greedy argmax over a logits row in two levels inside one launch: `chunks` blocks per row (at
// most kArgmaxChunks) each reduce a contiguous chunk, and the last block of the row to finish (a
// ticket counter) reduces their results. Max with lowest-index tie-breaking is exact in any order
// and any partition, so the result depends neither on which block finishes last nor on how many
// chunks a row has. The chunks per row are as many as let every row's blocks run in one wave
// (kArgmaxBlocksPerSM per multiprocessor): 64 chunks for 32 rows were 2,048 blocks in two waves,
// 11.9 us at 0.5B batch 32 (H200 timeline).
constexpr int kArgmaxChunks = 64;
constexpr int kArgmaxThreads = 256;
constexpr int kArgmaxBlocksPerSM = 2048 / kArgmaxThreads;

__device__ __forceinline__ bool ArgBetter(float v1, int32_t i1, float v2, int32_t i2) {
  // Is (v2, i2) better than (v1, i1)? Larger value wins; equal values take the lower index;
  // -1 (nothing seen, or only NaN) never wins.
  if (i2 < 0) return false;
  if (i1 < 0) return true;
  return v2 > v1 || (v2 == v1 && i2 < i1);
}

// Block-wide best of (bv, bi); the result is valid in thread 0.
__device__ __forceinline__ void BlockArgBest(float& bv, int32_t& bi) {
  __shared__ float best_v[kArgmaxThreads / 32];
  __shared__ int32_t best_i[kArgmaxThreads / 32];
  for (int off = 16; off >= 1; off >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
    const int32_t oi = __shfl_xor_sync(0xffffffffu, bi, off);
    if (ArgBetter(bv, bi, ov, oi)) {
      bv = ov;
      bi = oi;
    }
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    best_v[warp] = bv;
    best_i[warp] = bi;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kArgmaxThreads / 32; ++w) {
      if (ArgBetter(bv, bi, best_v[w], best_i[w])) {
        bv = best_v[w];
        bi = best_i[w];
      }
    }
  }
}

__global__ void AdvanceGreedyKernel(const int32_t* chosen, int32_t rows, int32_t* history, int32_t* tokens,
                                    int32_t* positions) {
  for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < rows; t += gridDim.x * blockDim.x) {
    const int32_t c = chosen[t];
    history[t] = c;
    if (tokens != nullptr) {
      tokens[t] = c;
      positions[t] += 1;
    }
  }
}

__global__ void __launch_bounds__(kArgmaxThreads)
    ArgmaxKernel(const float* logits, int32_t cols, int32_t chunks, int32_t* out, float* part_v, int32_t* part_i,
                 uint32_t* tickets) {
  TimelineScope timeline(TimelineKind::kArgmax);
  __shared__ bool last;
  LetNextStart();
  WaitForPrevious();
  timeline.Waited();
  const int row = blockIdx.y, chunk = blockIdx.x;
  const float* r = logits + static_cast<int64_t>(row) * cols;
  // Rows of a multiple of 4 columns (every vocabulary rote has met) are read as float4, chunks of a
  // multiple of 4 columns, several loads in flight per thread: the scalar loop's one load per
  // iteration made this a chain of ~10 round trips to L2 (12.4 us at 0.5B batch 32, H100).
  const bool by4 = cols % 4 == 0;
  const int per = by4 ? (cols + 4 * chunks - 1) / (4 * chunks) * 4 : (cols + chunks - 1) / chunks;
  const int c0 = min(cols, chunk * per), c1 = min(cols, c0 + per);
  float bv = -INFINITY;
  int32_t bi = -1;
  auto take = [&](float v, int32_t k) {
    if (v > bv || (bi < 0 && v == v)) {  // strictly greater: the first (lowest) index wins ties
      bv = v;
      bi = k;
    }
  };
  if (by4) {
    const float4* r4 = reinterpret_cast<const float4*>(r);
#pragma unroll 4
    for (int k4 = c0 / 4 + threadIdx.x; k4 < c1 / 4; k4 += kArgmaxThreads) {
      const float4 v = r4[k4];
      take(v.x, 4 * k4);
      take(v.y, 4 * k4 + 1);
      take(v.z, 4 * k4 + 2);
      take(v.w, 4 * k4 + 3);
    }
  } else {
    for (int k = c0 + threadIdx.x; k < c1; k += kArgmaxThreads) take(r[k], k);
  }
  BlockArgBest(bv, bi);
  if (threadIdx.x == 0) {
    part_v[row * kArgmaxChunks + chunk] = bv;
    part_i[row * kArgmaxChunks + chunk] = bi;
    __threadfence();
    last = atomicAdd(&tickets[row], 1u) == static_cast<uint32_t>(chunks - 1);
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  bv = -INFINITY;
  bi = -1;
  if (threadIdx.x < chunks) {
    bv = __ldcg(&part_v[row * kArgmaxChunks + threadIdx.x]);
    bi = __ldcg(&part_i[row * kArgmaxChunks + threadIdx.x]);
  }
  __syncthreads();  // BlockArgBest's shared arrays are reused
  BlockArgBest(bv, bi);
  if (threadIdx.x == 0) {
    out[row] = bi < 0 ? 0 : bi;
    tickets[row] = 0;  // ready for the next step (graphs replay this launch)
  }
}

}  // namespace

bool CanRunAttentionParts(const StepTokens& step, const AttentionShape& shape, int32_t max_context, int32_t parts) {
  return CanRunAttentionPartsImpl(step, shape, max_context, parts);
}
int64_t AttentionPartsLaunches() { return g_attention_parts_launches.load(std::memory_order_relaxed); }
cudaError_t LaunchAttentionParts(const float* q, const StepTokens& step, const AttentionShape& shape, LayerKv kv,
                                 float scale, int32_t max_context, float* out, const AttentionParts& parts,
                                 cudaStream_t stream) {
  return LaunchAttentionPartsImpl(q, step, shape, kv, scale, max_context, out, parts, stream);
}

void SetLargeBatchTile(int variant) { g_large_batch_tile = variant; }
void SetAttentionVariant(int variant) { g_attention_variant = variant; }
int LatePrefetchEarlyBlocks(int32_t tokens) {
  if (g_late_prefetch >= 0) return g_late_prefetch;
  // Batches of 1 and 8 measured slower with it (their grids leave few blocks late, and the
  // prefetches only add traffic): 17 to 64 tokens.
  return tokens > 16 && tokens <= 64 ? std::max(1, MultiprocessorCount() / 4) : 0;
}
void SetLatePrefetch(int early_blocks) { g_late_prefetch = early_blocks < 0 ? -1 : early_blocks; }
void CountLatePrefetchLaunch() { g_late_prefetch_launches.fetch_add(1, std::memory_order_relaxed); }
int64_t LatePrefetchLaunches() { return g_late_prefetch_launches.load(std::memory_order_relaxed); }
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
int64_t TiledLinearLaunches() { return g_tiled_launches.load(std::memory_order_relaxed); }
void SetOneTokenKernel(int variant) { g_one_token_kernel = variant; }
void SetWeightEvictFirst(bool on) { g_weight_evict_first = on; }
void SetStepPrefetchTiles(int tiles) { g_step_prefetch_tiles = tiles; }
void SetMlpBlockMaxWarps(int warps) { g_mlp_block_max_warps = warps; }

bool CanFuseRope(const LinearArgs& a) {
  if (a.tokens != 1 || SeparateKernelVariant() == 1 || SeparateKernelVariant() == 2 || a.w.rows >= 65536 || a.w.rows % 2 != 0)
    return false;
  const int64_t esize = a.w.type == WeightType::kF32 ? 4 : 2;
  const int64_t smem = static_cast<int64_t>(kWarps) * 2 * a.w.cols_padded * esize + int64_t{a.w.cols_padded} * 4;
  return smem <= kTmaGemvMaxSmem && static_cast<int64_t>(a.w.cols_padded) * 4 <= kGemvMaxSmem;
}

cudaError_t LaunchLinear(const LinearArgs& args_in, cudaStream_t stream) {
  if (args_in.tokens <= 0) return cudaSuccess;
  LinearArgs args = args_in;
  args.weight_evict_first = args.weight_evict_first || g_weight_evict_first;
  switch (args.w.type) {
    case WeightType::kBF16:
      return LaunchLinearTyped<WeightType::kBF16>(args, stream);
    case WeightType::kF16:
      return LaunchLinearTyped<WeightType::kF16>(args, stream);
    case WeightType::kF32:
      return LaunchLinearTyped<WeightType::kF32>(args, stream);
  }
  return cudaErrorInvalidValue;
}

bool CanRunMlpBlock(const MlpBlockArgs& f) {
  if (SeparateKernelVariant() != 5 && SeparateKernelVariant() != 0) return false;
  const int64_t eb = f.out.w.type == WeightType::kF32 ? 4 : 2;
  // By default only where gate|up does not fit in one wave of shared memory (about 160 KB per
  // multiprocessor): there the persistent ring streams it faster than waves of blocks do; a
  // matrix that fits is already requested whole, before the previous kernel ends (TmaGemvKernel).
  // Measured on an H100 (docs/performance.md): 1.5B +8%, 0.5B -15%.
  const int64_t gate_up_bytes = int64_t{f.gate_up.w.rows} * f.gate_up.w.cols_padded * eb;
  if (SeparateKernelVariant() == 0 && gate_up_bytes <= int64_t{MultiprocessorCount()} * kMlpRingBytes) return false;
  if (f.out.tokens != 1 || f.gate_up.tokens != 1 || f.down.tokens != 1 || f.barrier == nullptr) return false;
  if (f.gate_up.norm_weight == nullptr || f.gate_up.epilogue != LinearEpilogue::kSiluMul) return false;  // norm fused
  if (f.out.w.type != f.gate_up.w.type || f.out.w.type != f.down.w.type || f.gate_up.w.rows % 4 != 0) return false;
  return PlanMlpBlock(f, 4).warps > 0;
}

cudaError_t LaunchMlpBlock(const MlpBlockArgs& f, cudaStream_t stream) {
  if (!CanRunMlpBlock(f)) return cudaErrorInvalidValue;
  switch (f.out.w.type) {
    case WeightType::kBF16:
      return LaunchMlpBlockTyped<WeightType::kBF16>(f, stream);
    case WeightType::kF16:
      return LaunchMlpBlockTyped<WeightType::kF16>(f, stream);
    case WeightType::kF32:
      return LaunchMlpBlockTyped<WeightType::kF32>(f, stream);
  }
  return cudaErrorInvalidValue;
}

bool CanRunDecodeStep(const DecodeStepArgs& f, const StepLayerArgs& l0) {
  if (g_one_token_kernel != 0 && g_one_token_kernel != 7 && g_one_token_kernel != 9 && g_one_token_kernel != 10)
    return false;
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
  // (docs/performance.md): 1.5B 451 -> 516 tok/s, 0.5B 1,115 -> 1,076.
  const int64_t gate_up_bytes = int64_t{l0.gate_up.w.rows} * l0.gate_up.w.cols_padded * kWeightBytes<WeightType::kBF16> *
                                (wt == WeightType::kF32 ? 2 : 1);
  if (g_one_token_kernel == 0 && gate_up_bytes <= int64_t{MultiprocessorCount()} * kMlpRingBytes) return false;
  const AttentionShape& s = f.shape;
  if (s.head_dim > kMaxHeadDim || s.head_dim % 8 != 0 || s.block_size < 8 || s.num_kv_heads < 1 ||
      s.num_heads % s.num_kv_heads != 0)
    return false;
  return PlanDecodeStep(f, l0).slots >= kStepWarps;
}

cudaError_t LaunchDecodeStep(const DecodeStepArgs& f, const StepLayerArgs& l0, cudaStream_t stream) {
  if (!CanRunDecodeStep(f, l0)) return cudaErrorInvalidValue;
  const DecodeStepPlan p = PlanDecodeStep(f, l0);
  switch (l0.qkv.w.type) {
    case WeightType::kBF16:
      return LaunchDecodeStepTyped<WeightType::kBF16>(f, p, stream);
    case WeightType::kF16:
      return LaunchDecodeStepTyped<WeightType::kF16>(f, p, stream);
    case WeightType::kF32:
      return LaunchDecodeStepTyped<WeightType::kF32>(f, p, stream);
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
                       AttentionKernel<1, 2>, AttentionKernel<2, 2>, AttentionKernel<AttnGroups(kMaxHeadDim), 1>,
                       AttentionKernel<1, 8, true>}) {
    const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (e != cudaSuccess) return e;
  }
  for (auto* kernel : {GroupAttentionKernel<64>, GroupAttentionKernel<128>}) {
    const cudaError_t e =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kGroupAttnMaxSmem));
    if (e != cudaSuccess) return e;
  }
  return cudaFuncSetAttribute(AttentionKernel<1, 2, false, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              static_cast<int>(kAttnKvStageMaxBytes));
}

cudaError_t LaunchAttention(const float* q, const StepTokens& step, const AttentionShape& shape, LayerKv kv,
                            float scale, int32_t max_context, float* out, int32_t out_stride,
                            cudaStream_t stream) {
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
  // 0.5B batch 1 1,487 -> 1,569 tok/s; at batch 8 (112 blocks) 6,412 -> 6,352, the staged rows'
  // shared memory keeping the products' blocks off those multiprocessors, hence the limit.
  const int blocks = shape.num_heads * step.tokens;
  const bool kv_stage_fits = shape.head_dim <= kAttnWarps * 8 &&
                             AttentionKvStageBytes(max_context, shape.head_dim) <= kAttnKvStageMaxBytes;
  // Where the grid has at most one block per multiprocessor and the context is long, the 8-deep
  // batches again: at 1,000 positions, 0.5B batch 1, they measured 940 tok/s against 858 for
  // batches of 2 (H100); at contexts of up to 256 positions batches of 2 won (batch 8: 6,408 vs
  // 6,243).
  const bool short_context = max_context <= 256;
  const int variant = g_attention_variant >= 0 ? g_attention_variant
                      : 4 * blocks <= MultiprocessorCount() && kv_stage_fits              ? 9
                      : blocks <= MultiprocessorCount() && !short_context                 ? 2
                      : blocks <= 8 * MultiprocessorCount() && shape.head_dim <= kAttnWarps * 8 ? 5
                      : blocks <= MultiprocessorCount()                                   ? 2
                                                                                                 : 0;
  // Steps whose grid of (query head, token) blocks more than fills the device: the query heads
  // of a KV head share one block and one staging of its K/V rows (variant 10), in as many parts
  // per KV head as leave about one block per multiprocessor. Same bits. 0.5B, fifteenth session,
  // side by side: fast profile batch 32 +6.6% in two parts (+3.0% in one), batch 64 +6.5% in one
  // (H100); with this rule (H200) fast batch 32 +5.0%, 64 +6.8%, 1,000-token prefill +14.5%,
  // exact batch 32 +2.3%, 64 +3.4%; batch 8 (parts of one head: no sharing) keeps the rules below.
  const int group_size = shape.num_kv_heads > 0 ? shape.num_heads / shape.num_kv_heads : 1;
  const int group_parts = static_cast<int>(std::max<int64_t>(
      1, MultiprocessorCount() / std::max<int64_t>(1, int64_t{shape.num_kv_heads} * step.tokens)));
  GroupAttentionPlan plan;
  auto AttentionLatePrefetch = [](int32_t tokens) {
    const int early = LatePrefetchEarlyBlocks(tokens);
    if (early > 0) CountLatePrefetchLaunch();
    return static_cast<int32_t>(early);
  };
  const bool grouped = variant == 10 || variant == 11 ||
                       (g_attention_variant < 0 && group_parts < group_size);
  if (grouped && PlanGroupAttention(shape, max_context, &plan, variant == 11 ? 1 : group_parts))
    return LaunchChained(shape.head_dim == 64 ? GroupAttentionKernel<64> : GroupAttentionKernel<128>,
                         dim3(shape.num_kv_heads * plan.hsplit, step.tokens), dim3(kAttnThreads), plan.smem, stream, q,
                         step, shape, kv, scale, out, out_stride, max_context, plan.hsplit, plan.chunk,
                         AttentionLatePrefetch(step.tokens));
  if (variant == 9 && kv_stage_fits)
    return LaunchChained(AttentionKernel<1, 2, false, true>, grid, dim3(kAttnThreads),
                         AttentionKvStageBytes(max_context, shape.head_dim), stream, q, step, shape, kv, scale, out,
                         out_stride, max_context, int32_t{3});
  // batches of 2 positions (1 at head_dim over 128); variants 9 and 10 where they cannot run
  const bool shallow = variant == 5 || variant == 7 || variant == 8 || variant == 9 || variant == 10 || variant == 11;
  const bool batched = variant >= 2 && !shallow;
  const bool first_batch = variant == 6;  // (head_dim <= 64; elsewhere as 2)
  const int32_t prefetch = variant == 1 || variant == 3 || variant == 8 ? 1 : variant == 4 ? 2 : variant == 7 ? 3 : 0;
  auto* kernel = shape.head_dim <= kAttnWarps * 8
                     ? (first_batch ? AttentionKernel<1, 8, true>
                        : batched   ? AttentionKernel<1, 8>
                        : shallow   ? AttentionKernel<1, 2>
                                    : AttentionKernel<1, 0>)
                 : shape.head_dim <= 2 * kAttnWarps * 8
                     ? (batched ? AttentionKernel<2, 8> : shallow ? AttentionKernel<2, 2> : AttentionKernel<2, 0>)
                     : (batched   ? AttentionKernel<AttnGroups(kMaxHeadDim), 4>
                        : shallow ? AttentionKernel<AttnGroups(kMaxHeadDim), 1>
                                  : AttentionKernel<AttnGroups(kMaxHeadDim), 0>);
  return LaunchChained(kernel, grid, dim3(kAttnThreads), AttentionSharedBytes(max_context), stream, q, step, shape, kv,
                       scale, out, out_stride, max_context, prefetch);
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
