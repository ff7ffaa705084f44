// Sampling on the device: sampling.h. The host's rule (inference/sampler.cc,
// SampleTokenWithUniform) step by step, with the same arithmetic:
//   1. z = logit / temperature (IEEE divide; greedy rows keep the logit), and one 64-bit key per
//      column: row (8 bits) | the descending key of z (32 bits: -0 folded into +0, every NaN
//      largest) | column (18 bits). One stable radix sort over every row's keys (cub, bits 18 and
//      up: the input is in column order, so ties stay in column order) orders each row by (z
//      descending, column ascending), NaN last. A sort of these keys has one answer, whichever
//      algorithm produces it.
//   2. e_r = canonical_expf(z_r - z_0) for every row's kept ranks, over the whole grid.
//   3. One warp per row: lane l adds the terms of ranks l, l + 32, ... in rank order, keeping its
//      running sum at every rank, so P(r) is the canonical tree over 32 stored values; the top-p
//      cut and the draw bisect P as the host does. The same additions in the same order: the
//      same token.
#include "inference/cuda/sampling.h"

#include <cub/device/device_radix_sort.cuh>

#include "inference/numerics/canonical.h"

namespace rote::inference::cuda {
namespace {

using numerics::canonical_expf;

constexpr int kColumnBits = 18;
constexpr int kRowBits = 8;
constexpr int kKeyBits = 32;
constexpr int kKeysThreads = 256;

__device__ __forceinline__ uint32_t DescendingKey(float v) {
  if (v != v) return 0xFFFFFFFFu;
  if (v == 0.0f) v = 0.0f;
  const uint32_t b = __float_as_uint(v);
  const uint32_t ascending = (b & 0x80000000u) != 0 ? ~b : (b | 0x80000000u);
  return ~ascending;
}

// z of column c of a row under its rule: the logit itself for greedy rows.
__device__ __forceinline__ float ScaledLogit(const float* row, int c, float temperature) {
  const float v = row[c];
  return temperature > 0.0f ? v / temperature : v;
}

__global__ void __launch_bounds__(kKeysThreads) SampleKeysKernel(const float* logits, int32_t cols,
                                                                  const RowRule* rules, uint64_t* keys) {
  const int row = blockIdx.y;
  const int c = blockIdx.x * kKeysThreads + threadIdx.x;
  if (c >= cols) return;
  const float z = ScaledLogit(logits + static_cast<int64_t>(row) * cols, c, rules[row].temperature);
  keys[static_cast<int64_t>(row) * cols + c] = static_cast<uint64_t>(row) << (kKeyBits + kColumnBits) |
                                               static_cast<uint64_t>(DescendingKey(z)) << kColumnBits |
                                               static_cast<uint64_t>(c);
}

__device__ __forceinline__ int ColumnOf(uint64_t key) { return static_cast<int>(key & ((1u << kColumnBits) - 1)); }

// P(i), the canonical tree over the lanes' running sums after i + 1 terms (lanes not reached yet:
// 0), in every lane of the warp.
__device__ __forceinline__ float PrefixAt(const float* lane_sums, int i, int lane) {
  float v = lane <= i ? lane_sums[i - (i - lane) % 32] : 0.0f;
#pragma unroll
  for (int off = 16; off >= 1; off >>= 1) v = v + __shfl_down_sync(0xffffffffu, v, off);
  return __shfl_sync(0xffffffffu, v, 0);
}

// First i in [0, n) with pred(i), pred false then true; n when none. Warp-uniform.
template <typename Pred>
__device__ __forceinline__ int FirstTrue(int n, Pred pred) {
  int lo = 0, hi = n;
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    if (pred(mid)) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

// Each row's weights e_r = canonical_expf(z_r - z_0) for its kept ranks, over the whole grid
// (blocks of ranks by rows); greedy rows have none.
__global__ void __launch_bounds__(kKeysThreads) SampleWeightsKernel(const float* logits, int32_t cols,
                                                                     const RowRule* rules, const uint64_t* sorted,
                                                                     int64_t stride, float* weights) {
  const int row = blockIdx.y;
  const int r = blockIdx.x * kKeysThreads + threadIdx.x;
  const RowRule rule = rules[row];
  const int kept = rule.top_k > 0 && rule.top_k < cols ? rule.top_k : cols;
  if (!(rule.temperature > 0.0f) || r >= kept) return;
  const float* l = logits + static_cast<int64_t>(row) * cols;
  const uint64_t* order = sorted + static_cast<int64_t>(row) * cols;
  const float m = ScaledLogit(l, ColumnOf(order[0]), rule.temperature);
  weights[row * stride + r] = canonical_expf(ScaledLogit(l, ColumnOf(order[r]), rule.temperature) - m);
}

__device__ __forceinline__ unsigned SmemAddr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// One warp per row. Lane l adds the weights of ranks l, l + 32, ... in rank order from +0 (the
// host's acc[l]) and keeps its running sum at every rank; the weights come through a ring of
// kChainChunks chunks of 1,024 ranks in shared memory (cp.async, kChainChunks - 1 in flight), so
// the chain of additions does not wait on a round trip to L2 per rank. Then the top-p cut and the
// draw bisect P as the host does.
constexpr int kChainChunk = 1024;  // ranks per chunk: 32 per lane
constexpr int kChainChunks = 8;

__global__ void __launch_bounds__(32) SampleRowKernel(const float* logits, int32_t cols, const RowRule* rules,
                                                      const uint64_t* sorted, int64_t stride, const float* weights,
                                                      float* lane_sums, int32_t* out) {
  __shared__ __align__(16) float ring[kChainChunks][kChainChunk];
  const int row = blockIdx.x, lane = threadIdx.x;
  const RowRule rule = rules[row];
  const float* l = logits + static_cast<int64_t>(row) * cols;
  const uint64_t* order = sorted + static_cast<int64_t>(row) * cols;
  if (!(rule.temperature > 0.0f)) {
    // Greedy: the first column in (logit descending, column ascending) order; a row of NaN only
    // gives 0, as ArgmaxLowestIndex.
    if (lane == 0) {
      const int c = ColumnOf(order[0]);
      out[row] = l[c] != l[c] ? 0 : c;
    }
    return;
  }
  const int kept = rule.top_k > 0 && rule.top_k < cols ? rule.top_k : cols;
  const float* e = weights + row * stride;  // 16-byte aligned, whole chunks allocated
  float* sums = lane_sums + row * stride;
  const int chunks = (kept + kChainChunk - 1) / kChainChunk;
  auto issue = [&](int c) {
    if (c < chunks) {
#pragma unroll
      for (int k = 0; k < kChainChunk / 4 / 32; ++k) {
        const int piece = lane + 32 * k;  // 16-byte pieces of the chunk
        const unsigned dst = SmemAddr(&ring[c % kChainChunks][4 * piece]);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst),
                     "l"(e + static_cast<int64_t>(c) * kChainChunk + 4 * piece)
                     : "memory");
      }
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
  };
  for (int c = 0; c < kChainChunks - 1; ++c) issue(c);
  float run = 0.0f;
  for (int c = 0; c < chunks; ++c) {
    asm volatile("cp.async.wait_group %0;" ::"n"(kChainChunks - 2) : "memory");
    __syncwarp();  // every lane's pieces of chunk c have landed
    const float* chunk = ring[c % kChainChunks];
    const int r0 = c * kChainChunk;
#pragma unroll 8
    for (int j = 0; j < kChainChunk / 32; ++j) {
      const int r = r0 + 32 * j + lane;
      if (r < kept) {
        run = run + chunk[32 * j + lane];
        sums[r] = run;
      }
    }
    __syncwarp();  // chunk c's slot is free again
    issue(c + kChainChunks - 1);
  }
  asm volatile("cp.async.wait_group 0;" ::: "memory");
  __syncwarp();
  int cut = kept;
  if (rule.top_p > 0.0f && rule.top_p < 1.0f) {
    const float target = rule.top_p * PrefixAt(sums, kept - 1, lane);
    const int r = FirstTrue(kept, [&](int i) { return PrefixAt(sums, i, lane) >= target; });
    if (r < kept) cut = r + 1;
  }
  const float t = rule.uniform * PrefixAt(sums, cut - 1, lane);
  const int r = FirstTrue(cut, [&](int i) { return PrefixAt(sums, i, lane) > t; });
  if (lane == 0) out[row] = ColumnOf(order[r < cut ? r : cut - 1]);
}

int RowBitsFor(int32_t rows) {
  int bits = 1;
  while ((1 << bits) < rows) ++bits;
  return bits;
}

size_t SortTempBytes(int32_t rows, int32_t cols) {
  size_t bytes = 0;
  const int64_t n = static_cast<int64_t>(rows) * cols;
  cub::DeviceRadixSort::SortKeys(nullptr, bytes, static_cast<const uint64_t*>(nullptr), static_cast<uint64_t*>(nullptr),
                                 n, kColumnBits, kColumnBits + kKeyBits + RowBitsFor(rows));
  return bytes;
}

constexpr int64_t Align256(int64_t x) { return (x + 255) / 256 * 256; }

}  // namespace

bool CanSampleRows(int32_t rows, int32_t cols) {
  return rows >= 1 && rows <= (1 << kRowBits) && cols >= 1 && cols <= (1 << kColumnBits);
}

// The weights' and running sums' rows: whole chunks of the chain, 16-byte aligned.
static int64_t RowStride(int32_t cols) { return (static_cast<int64_t>(cols) + kChainChunk - 1) / kChainChunk * kChainChunk; }

int64_t SampleRowsScratchBytes(int32_t rows, int32_t cols) {
  if (!CanSampleRows(rows, cols)) return 0;
  const int64_t n = static_cast<int64_t>(rows) * cols, padded = rows * RowStride(cols);
  return 2 * Align256(n * 8) + 2 * Align256(padded * 4) + Align256(static_cast<int64_t>(SortTempBytes(rows, cols)));
}

cudaError_t SampleRows(const float* logits, int32_t rows, int32_t cols, const RowRule* rules, int32_t* out, void* scratch,
                       int64_t scratch_bytes, cudaStream_t stream) {
  if (!CanSampleRows(rows, cols) || scratch_bytes < SampleRowsScratchBytes(rows, cols)) return cudaErrorInvalidValue;
  const int64_t n = static_cast<int64_t>(rows) * cols, stride = RowStride(cols), padded = rows * stride;
  char* p = static_cast<char*>(scratch);
  uint64_t* keys_in = reinterpret_cast<uint64_t*>(p);
  uint64_t* keys_out = reinterpret_cast<uint64_t*>(p + Align256(n * 8));
  float* weights = reinterpret_cast<float*>(p + 2 * Align256(n * 8));
  float* lane_sums = reinterpret_cast<float*>(p + 2 * Align256(n * 8) + Align256(padded * 4));
  void* temp = p + 2 * Align256(n * 8) + 2 * Align256(padded * 4);
  size_t temp_bytes = SortTempBytes(rows, cols);
  const dim3 grid((cols + kKeysThreads - 1) / kKeysThreads, rows);
  SampleKeysKernel<<<grid, kKeysThreads, 0, stream>>>(logits, cols, rules, keys_in);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  if (cudaError_t e = cub::DeviceRadixSort::SortKeys(temp, temp_bytes, keys_in, keys_out, n, kColumnBits,
                                                     kColumnBits + kKeyBits + RowBitsFor(rows), stream);
      e != cudaSuccess)
    return e;
  SampleWeightsKernel<<<grid, kKeysThreads, 0, stream>>>(logits, cols, rules, keys_out, stride, weights);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  SampleRowKernel<<<rows, 32, 0, stream>>>(logits, cols, rules, keys_out, stride, weights, lane_sums, out);
  return cudaGetLastError();
}

}  // namespace rote::inference::cuda
