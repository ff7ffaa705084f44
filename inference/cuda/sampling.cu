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
// Rows that keep at most kSampleCandidateMaxTopK ranks (top-k rules, greedy rows) read only
// their first k ranks, so step 1 can sort fewer keys (the candidate path): a histogram of each
// row's keys by their top kHistBits bits; per row, the first bin b* where the count reaches k;
// every key of the bins up to b* (they hold the first k ranks, whatever the ties) gathered in any
// order and sorted, column bits included, one block per row (a bitonic sort in shared memory).
// Its first k keys are the full sort's first k. Where a row has more than kSampleCandidateCap such keys, the call says so and
// the caller sorts every column instead.
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
constexpr int kHistBits = 12;  // the candidate path's bins: a descending key's top bits
constexpr int kHistBins = 1 << kHistBits;
constexpr int kHistColumnsPerThread = 8;

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

// Ranks a row's rule reads: 1 for a greedy row, else its kept top_k (the candidate path runs
// only where every row keeps at most kSampleCandidateMaxTopK).
__host__ __device__ __forceinline__ int RanksRead(const RowRule& rule, int32_t cols) {
  if (!(rule.temperature > 0.0f)) return 1;
  return rule.top_k > 0 && rule.top_k < cols ? rule.top_k : cols;
}

// hist[row][bin] += the row's keys whose top kHistBits bits are bin (hist zeroed by the caller):
// a block's counts in shared memory first, then one global add per bin it saw.
__global__ void __launch_bounds__(kKeysThreads) SampleHistogramKernel(const float* logits, int32_t cols,
                                                                       const RowRule* rules, uint32_t* hist) {
  __shared__ uint32_t counts[kHistBins];
  const int row = blockIdx.y;
  for (int b = threadIdx.x; b < kHistBins; b += kKeysThreads) counts[b] = 0;
  __syncthreads();
  const float* l = logits + static_cast<int64_t>(row) * cols;
  const float temperature = rules[row].temperature;
  const int c0 = blockIdx.x * kKeysThreads * kHistColumnsPerThread;
  for (int i = 0; i < kHistColumnsPerThread; ++i) {
    const int c = c0 + i * kKeysThreads + threadIdx.x;
    if (c < cols) atomicAdd(&counts[DescendingKey(ScaledLogit(l, c, temperature)) >> (kKeyBits - kHistBits)], 1u);
  }
  __syncthreads();
  uint32_t* h = hist + static_cast<int64_t>(row) * kHistBins;
  for (int b = threadIdx.x; b < kHistBins; b += kKeysThreads)
    if (counts[b] != 0) atomicAdd(h + b, counts[b]);
}

// One block per row: its candidates (seg_begin to seg_end, at most kSampleCandidateCap) sorted
// ascending in shared memory by a bitonic sort over the next power of two, padded with the
// largest key, then written back in order. The keys are distinct (the column is part of them), so
// the order has one answer.
__global__ void __launch_bounds__(kKeysThreads) SampleSortCandidatesKernel(const int32_t* seg_begin,
                                                                            const int32_t* seg_end,
                                                                            const uint64_t* candidates,
                                                                            uint64_t* sorted) {
  __shared__ uint64_t keys[kSampleCandidateCap];
  const int row = blockIdx.x, tid = threadIdx.x;
  const int begin = seg_begin[row], n = seg_end[row] - begin;
  int m = 1;
  while (m < n) m *= 2;
  for (int i = tid; i < m; i += kKeysThreads) keys[i] = i < n ? candidates[begin + i] : ~uint64_t{0};
  __syncthreads();
  for (int size = 2; size <= m; size *= 2)
    for (int stride = size / 2; stride > 0; stride /= 2) {
      for (int i = tid; i < m / 2; i += kKeysThreads) {
        const int lo = 2 * i - (i & (stride - 1)), hi = lo + stride;  // the pair (lo, hi) of this stride
        const bool ascending = (lo & size) == 0;
        const uint64_t a = keys[lo], b = keys[hi];
        if ((a > b) == ascending) {
          keys[lo] = b;
          keys[hi] = a;
        }
      }
      __syncthreads();
    }
  for (int i = tid; i < n; i += kKeysThreads) sorted[begin + i] = keys[i];
}

// One block per row: the first bin b* at which the row's count reaches the ranks its rule reads,
// and the number of keys in bins 0..b* (the row's candidates, at most kSampleCandidateCap: else the
// overflow flag). seg_begin/seg_end bound the row's candidates in the gathered keys; fill counts
// the gathered ones (zeroed here).
__global__ void __launch_bounds__(kKeysThreads) SampleThresholdKernel(const RowRule* rules, int32_t cols,
                                                                       const uint32_t* hist, int32_t* bin_limit,
                                                                       int32_t* seg_begin, int32_t* seg_end,
                                                                       uint32_t* fill, int32_t* overflow) {
  constexpr int kPerThread = kHistBins / kKeysThreads;
  __shared__ uint32_t h[kHistBins];
  __shared__ uint32_t partial[kKeysThreads];
  const int row = blockIdx.x, tid = threadIdx.x;
  const int ranks = RanksRead(rules[row], cols);
  const uint32_t need = static_cast<uint32_t>(ranks);
  for (int b = tid; b < kHistBins; b += kKeysThreads) h[b] = hist[static_cast<int64_t>(row) * kHistBins + b];
  __syncthreads();
  uint32_t mine = 0;
  for (int i = 0; i < kPerThread; ++i) mine += h[tid * kPerThread + i];
  partial[tid] = mine;
  __syncthreads();
  if (tid == 0) {
    uint32_t before = 0;  // keys in the bins of the threads before t
    int t = 0;
    while (t < kKeysThreads - 1 && before + partial[t] < need) before += partial[t++];
    int b = t * kPerThread;
    uint32_t through = before + h[b];
    while (through < need && b < kHistBins - 1) through += h[++b];
    const int64_t base = static_cast<int64_t>(row) * kSampleCandidateCap;
    bin_limit[row] = b;
    seg_begin[row] = static_cast<int32_t>(base);
    seg_end[row] = static_cast<int32_t>(base + min(through, static_cast<uint32_t>(kSampleCandidateCap)));
    fill[row] = 0;
    // More candidates than slots, or a rule reading past the ranks the later kernels compute
    // (the caller's SampleByCandidates excludes it): the caller sorts every column instead.
    if (through > static_cast<uint32_t>(kSampleCandidateCap) || ranks > kSampleCandidateMaxTopK) *overflow = 1;
  }
}

// Every key of a row whose bin is at most the row's b*, gathered (in any order: the sort that
// follows includes the column bits) into the row's kSampleCandidateCap slots. The key without the
// row: descending key << 18 | column.
__global__ void __launch_bounds__(kKeysThreads) SampleGatherKernel(const float* logits, int32_t cols,
                                                                    const RowRule* rules, const int32_t* bin_limit,
                                                                    uint32_t* fill, uint64_t* candidates) {
  const int row = blockIdx.y;
  const int c = blockIdx.x * kKeysThreads + threadIdx.x;
  if (c >= cols) return;
  const uint32_t key = DescendingKey(ScaledLogit(logits + static_cast<int64_t>(row) * cols, c, rules[row].temperature));
  if (static_cast<int>(key >> (kKeyBits - kHistBits)) > bin_limit[row]) return;
  const uint32_t slot = atomicAdd(fill + row, 1u);
  if (slot < static_cast<uint32_t>(kSampleCandidateCap))
    candidates[static_cast<int64_t>(row) * kSampleCandidateCap + slot] =
        static_cast<uint64_t>(key) << kColumnBits | static_cast<uint64_t>(c);
}

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
                                                                     int64_t order_stride, int64_t stride, float* weights) {
  const int row = blockIdx.y;
  const int r = blockIdx.x * kKeysThreads + threadIdx.x;
  const RowRule rule = rules[row];
  const int kept = rule.top_k > 0 && rule.top_k < cols ? rule.top_k : cols;
  if (!(rule.temperature > 0.0f) || r >= kept) return;
  const float* l = logits + static_cast<int64_t>(row) * cols;
  const uint64_t* order = sorted + static_cast<int64_t>(row) * order_stride;
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
                                                      const uint64_t* sorted, int64_t order_stride, int64_t stride,
                                                      const float* weights, float* lane_sums, int32_t* out) {
  __shared__ __align__(16) float ring[kChainChunks][kChainChunk];
  const int row = blockIdx.x, lane = threadIdx.x;
  const RowRule rule = rules[row];
  const float* l = logits + static_cast<int64_t>(row) * cols;
  const uint64_t* order = sorted + static_cast<int64_t>(row) * order_stride;
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

// Scratch, in order: the overflow flag and the candidate path's histogram (zeroed together), the
// keys twice (the candidate path's
// gathered and sorted keys use the same space: rows x cap <= rows x cols where it runs), the
// weights, the lanes' running sums, the candidate path's per-row ints, the sort's temporary
// storage.
struct SampleScratch {
  int32_t* overflow;
  uint64_t *keys_in, *keys_out;
  float *weights, *lane_sums;
  uint32_t* hist;
  int32_t *bin_limit, *seg_begin, *seg_end;
  uint32_t* fill;
  void* temp;
  size_t temp_bytes;
  int64_t total;
};

}  // namespace

bool CanSampleRows(int32_t rows, int32_t cols) {
  return rows >= 1 && rows <= (1 << kRowBits) && cols >= 1 && cols <= (1 << kColumnBits);
}

bool SampleByCandidates(const RowRule* rules, int32_t rows, int32_t cols) {
  if (!CanSampleRows(rows, cols) || cols <= kSampleCandidateCap) return false;
  for (int32_t r = 0; r < rows; ++r)
    if (RanksRead(rules[r], cols) > kSampleCandidateMaxTopK) return false;
  return true;
}

// The weights' and running sums' rows: whole chunks of the chain, 16-byte aligned.
static int64_t RowStride(int32_t cols) { return (static_cast<int64_t>(cols) + kChainChunk - 1) / kChainChunk * kChainChunk; }

static SampleScratch LayOutScratch(void* scratch, int32_t rows, int32_t cols) {
  SampleScratch s{};
  const int64_t n = static_cast<int64_t>(rows) * cols, padded = rows * RowStride(cols);
  char* base = static_cast<char*>(scratch);
  int64_t at = 0;
  auto take = [&](int64_t bytes) {
    char* p = base == nullptr ? nullptr : base + at;
    at += Align256(bytes);
    return p;
  };
  s.overflow = reinterpret_cast<int32_t*>(take(4));
  s.hist = reinterpret_cast<uint32_t*>(take(static_cast<int64_t>(rows) * kHistBins * 4));
  s.keys_in = reinterpret_cast<uint64_t*>(take(n * 8));
  s.keys_out = reinterpret_cast<uint64_t*>(take(n * 8));
  s.weights = reinterpret_cast<float*>(take(padded * 4));
  s.lane_sums = reinterpret_cast<float*>(take(padded * 4));
  s.bin_limit = reinterpret_cast<int32_t*>(take(rows * 4));
  s.seg_begin = reinterpret_cast<int32_t*>(take(rows * 4));
  s.seg_end = reinterpret_cast<int32_t*>(take(rows * 4));
  s.fill = reinterpret_cast<uint32_t*>(take(rows * 4));
  s.temp_bytes = SortTempBytes(rows, cols);
  s.temp = take(static_cast<int64_t>(s.temp_bytes));
  s.total = at;
  return s;
}

int64_t SampleRowsScratchBytes(int32_t rows, int32_t cols) {
  if (!CanSampleRows(rows, cols)) return 0;
  return LayOutScratch(nullptr, rows, cols).total;
}

int32_t* SampleRowsOverflow(void* scratch) { return static_cast<int32_t*>(scratch); }

cudaError_t SampleRows(const float* logits, int32_t rows, int32_t cols, const RowRule* rules, int32_t* out, void* scratch,
                       int64_t scratch_bytes, cudaStream_t stream, bool by_candidates) {
  if (!CanSampleRows(rows, cols) || scratch_bytes < SampleRowsScratchBytes(rows, cols)) return cudaErrorInvalidValue;
  if (by_candidates && cols <= kSampleCandidateCap) return cudaErrorInvalidValue;
  const int64_t n = static_cast<int64_t>(rows) * cols, stride = RowStride(cols);
  SampleScratch sc = LayOutScratch(scratch, rows, cols);
  size_t temp_bytes = sc.temp_bytes;
  const dim3 grid((cols + kKeysThreads - 1) / kKeysThreads, rows);
  const uint64_t* order = sc.keys_out;
  int64_t order_stride = cols;
  if (by_candidates) {
    // The flag and the histogram lie together: one memset.
    const size_t zeroed = static_cast<size_t>(reinterpret_cast<char*>(sc.hist + static_cast<int64_t>(rows) * kHistBins) -
                                              reinterpret_cast<char*>(sc.overflow));
    if (cudaError_t e = cudaMemsetAsync(sc.overflow, 0, zeroed, stream); e != cudaSuccess) return e;
    const int per_block = kKeysThreads * kHistColumnsPerThread;
    SampleHistogramKernel<<<dim3((cols + per_block - 1) / per_block, rows), kKeysThreads, 0, stream>>>(logits, cols, rules,
                                                                                                        sc.hist);
    SampleThresholdKernel<<<rows, kKeysThreads, 0, stream>>>(rules, cols, sc.hist, sc.bin_limit, sc.seg_begin, sc.seg_end,
                                                             sc.fill, sc.overflow);
    SampleGatherKernel<<<grid, kKeysThreads, 0, stream>>>(logits, cols, rules, sc.bin_limit, sc.fill, sc.keys_in);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    SampleSortCandidatesKernel<<<rows, kKeysThreads, 0, stream>>>(sc.seg_begin, sc.seg_end, sc.keys_in, sc.keys_out);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    order_stride = kSampleCandidateCap;
  } else {
    SampleKeysKernel<<<grid, kKeysThreads, 0, stream>>>(logits, cols, rules, sc.keys_in);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    if (cudaError_t e = cub::DeviceRadixSort::SortKeys(sc.temp, temp_bytes, sc.keys_in, sc.keys_out, n, kColumnBits,
                                                       kColumnBits + kKeyBits + RowBitsFor(rows), stream);
        e != cudaSuccess)
      return e;
  }
  // The candidate path's rows read at most kSampleCandidateMaxTopK ranks.
  const dim3 weights_grid = by_candidates ? dim3(kSampleCandidateMaxTopK / kKeysThreads, rows) : grid;
  SampleWeightsKernel<<<weights_grid, kKeysThreads, 0, stream>>>(logits, cols, rules, order, order_stride, stride,
                                                                  sc.weights);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  SampleRowKernel<<<rows, 32, 0, stream>>>(logits, cols, rules, order, order_stride, stride, sc.weights, sc.lane_sums,
                                           out);
  return cudaGetLastError();
}

namespace {

// One block per (row, chunk of 256 columns); a row with no bit set keeps its logits, as the host
// rule does (RowAnyBitKernel writes each row's flag first).
__global__ void RowAnyBitKernel(const uint64_t* mask, int64_t words, int32_t cols, int32_t* any) {
  const int32_t row = blockIdx.x;
  const uint64_t* m = mask + static_cast<int64_t>(row) * words;
  int found = 0;
  for (int64_t w = threadIdx.x; w < words && w * 64 < cols; w += blockDim.x) {
    uint64_t bits = m[w];
    const int64_t left = cols - w * 64;
    if (left < 64) bits &= (uint64_t{1} << left) - 1;
    found |= bits != 0;
  }
  found = __syncthreads_or(found);
  if (threadIdx.x == 0) any[row] = found;
}

__global__ void ApplyTokenMaskKernel(float* logits, int32_t cols, const uint64_t* mask, int64_t words,
                                     const int32_t* any) {
  const int32_t row = blockIdx.y;
  if (!any[row]) return;
  const int32_t c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  if (((mask[static_cast<int64_t>(row) * words + c / 64] >> (c % 64)) & 1) == 0)
    logits[static_cast<int64_t>(row) * cols + c] = -__int_as_float(0x7f800000);
}

}  // namespace

cudaError_t LaunchApplyTokenMask(float* logits, int32_t rows, int32_t cols, const uint64_t* mask, int64_t words,
                                 int32_t* row_any, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  if (rows > 65535 || words * 64 < cols) return cudaErrorInvalidValue;
  RowAnyBitKernel<<<rows, 256, 0, stream>>>(mask, words, cols, row_any);
  const dim3 grid((cols + 255) / 256, rows);
  ApplyTokenMaskKernel<<<grid, 256, 0, stream>>>(logits, cols, mask, words, row_any);
  return cudaGetLastError();
}

}  // namespace rote::inference::cuda
