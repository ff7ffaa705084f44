// The fast profile's matrix product (fast_linear.h, docs/fast_profile.md).
//
// A block is 4 warps over 32 * NT weight rows (each warp NT groups of 8) and 16 * MT token rows;
// grid (row tiles, K slices, token tiles). A ring of kFastStages 64-column chunks in shared memory
// (cp.async: weights and raw activations) keeps kFastStages - 1 chunks in flight; per chunk the
// block splits its token rows' activations into three bf16 pieces, and each warp runs
// mma.m16n8k16 for every (token group, row group, piece, half step). A slice's block writes its
// sums to scratch; the last of a tile's slices to finish adds them in slice order.
//
// The k permutation inside a 64-column chunk. mma.m16n8k16 gives thread (g = lane / 4, t = lane
// % 4) the k pairs {2t, 2t + 1} and {2t + 8, 2t + 9} of a 16-k group, for A and B alike. Here
// step j of thread t takes the chunk's columns [8 t + 32 j, 8 t + 32 j + 8): words 0-1 are the
// first 16-k group's pairs and words 2-3 the second's. Every column is in exactly one group at
// one place, for the weights and the activations the same way, so each mma sums 16 distinct
// exact products.
#include "inference/cuda/fast_linear.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "inference/cuda/launch.cuh"
#include "inference/numerics/canonical.h"

namespace rote::inference::cuda {
namespace {

using numerics::canonical_silu;

constexpr int kFastWarps = 4;
constexpr int kFastThreads = kFastWarps * 32;
constexpr int kChunk = 64;        // columns per stage
constexpr int kPieces = 3;        // hi, mid, lo
constexpr int kMaxSplits = 4;
// Slices are chosen as if tiles were 32 rows: a matrix of R rows gets about kSplitTarget /
// ceil(R / 32) slices (at most kMaxSplits, at least 2 chunks each).
constexpr int kSplitTarget = 256;
constexpr int kMinTileRows = 32;
// Chunks in the shared-memory ring: PD - 1 are in flight while one is computed.
constexpr int kFastStages = 6;

std::atomic<int64_t> g_fast_launches{0};
int g_fast_tile = 0;

__device__ __forceinline__ void Mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                    uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// x = hi + mid + lo exactly (bf16 keeps fp32's exponent range; each piece takes the next 8
// significant bits, and the remainders are exact fp32 differences).
struct Split3 {
  uint32_t hi, mid, lo;  // two bf16 each: element 2i in the low half, 2i + 1 in the high half
};
__device__ __forceinline__ Split3 SplitPair(float x0, float x1) {
  const __nv_bfloat16 h0 = __float2bfloat16_rn(x0), h1 = __float2bfloat16_rn(x1);
  const float r0 = x0 - __bfloat162float(h0), r1 = x1 - __bfloat162float(h1);
  const __nv_bfloat16 m0 = __float2bfloat16_rn(r0), m1 = __float2bfloat16_rn(r1);
  const __nv_bfloat16 l0 = __float2bfloat16_rn(r0 - __bfloat162float(m0));
  const __nv_bfloat16 l1 = __float2bfloat16_rn(r1 - __bfloat162float(m1));
  auto pack = [](__nv_bfloat16 lo, __nv_bfloat16 hi) {
    return static_cast<uint32_t>(__bfloat16_as_ushort(lo)) | (static_cast<uint32_t>(__bfloat16_as_ushort(hi)) << 16);
  };
  return {pack(h0, h1), pack(m0, m1), pack(l0, l1)};
}


template <int MT, int NT>
struct FastShape {
  static constexpr int kToks = 16 * MT;
  static constexpr int kRows = kFastWarps * 8 * NT;
  static constexpr int kStages = kFastStages;
  // One ring slot: the chunk's weights (kRows x 128 bytes) and raw activations (kToks x 256 bytes).
  static constexpr int kWeightSlotBytes = kRows * kChunk * 2;
  static constexpr int kActSlotBytes = kToks * kChunk * 4;
  static constexpr int kSlotBytes = kWeightSlotBytes + kActSlotBytes;
  // Then the pieces of the chunk being computed: [piece][token row][16-byte unit].
  static constexpr int kPiecesBytes = kPieces * kToks * kChunk * 2;
  static constexpr int kSmemBytes = kStages * kSlotBytes + kPiecesBytes;
  static constexpr int kWeightCopies = kRows * (kChunk / 8) / kFastThreads;  // 16-byte copies per thread
  static constexpr int kActCopies = kToks * (kChunk / 4) / kFastThreads;
};

__device__ __forceinline__ uint32_t SharedAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void CopyAsync16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(SharedAddr(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void CommitCopies() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void WaitCopies() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
// 16-byte unit u of row r sits at u ^ 4 (r & 1): an 8-thread phase of 128-bit accesses covers two
// rows and four units each, so the two rows land in different halves of the banks.
__device__ __forceinline__ int Swizzle(int unit, int row) { return unit ^ ((row & 1) << 2); }

// out[m][n] (and n + 1) from the finished sums of columns n, n + 1 (n even).
__device__ __forceinline__ void StoreFast(const LinearArgs& a, int m, int n, float v0, float v1) {
  float* out = a.out + static_cast<int64_t>(m) * a.out_stride;
  const int rows = a.w.rows;
  if (a.epilogue == LinearEpilogue::kSiluMul) {
    // Rows 2n' (gate) and 2n' + 1 (up) of the interleaved matrix.
    if (n + 1 < rows) {
      const int np = n / 2;
      out[a.out_lane_rows ? PermutedIndex(np) : np] = canonical_silu(v0) * v1;
    }
    return;
  }
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int col = n + e;
    if (col >= rows) break;
    const float v = e == 0 ? v0 : v1;
    const int o = a.out_lane_rows ? static_cast<int>(PermutedIndex(col)) : col;
    if (a.epilogue == LinearEpilogue::kAddBias) {
      out[o] = v + a.bias[col];
    } else if (a.epilogue == LinearEpilogue::kAddResidual) {
      out[o] = out[o] + v;
    } else {
      out[o] = v;
    }
  }
}

template <int MT, int NT>
__global__ void __launch_bounds__(kFastThreads) FastLinearKernel(LinearArgs a, int32_t splits) {
  using S = FastShape<MT, NT>;
  constexpr int PD = S::kStages;
  extern __shared__ __align__(16) unsigned char fast_smem[];
  __shared__ int is_last;
  LetNextStart();
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int rows = a.w.rows;
  const int chunks = a.w.cols_padded / kChunk;
  const int split = blockIdx.y;
  const int c_begin = static_cast<int>(static_cast<int64_t>(split) * chunks / splits);
  const int nchunks = static_cast<int>(static_cast<int64_t>(split + 1) * chunks / splits) - c_begin;
  const int m0 = blockIdx.z * S::kToks;
  const int mcount = min(S::kToks, a.tokens - m0);
  const int tile_row0 = blockIdx.x * S::kRows;
  const int row0 = tile_row0 + warp * 8 * NT;
  auto weight_slot = [&](int slot) { return reinterpret_cast<uint4*>(fast_smem + slot * S::kSlotBytes); };
  auto act_slot = [&](int slot) {
    return reinterpret_cast<float4*>(fast_smem + slot * S::kSlotBytes + S::kWeightSlotBytes);
  };
  uint4* pieces = reinterpret_cast<uint4*>(fast_smem + PD * S::kSlotBytes);  // [piece][row][unit]

  // Copy k of this thread: weight row (k / 8) of the tile, unit k % 8; rows past the end repeat
  // the last (their sums are never stored).
  const __nv_bfloat16* wbase = static_cast<const __nv_bfloat16*>(a.w.data);
  auto issue_weights = [&](int i) {
    uint4* dst = weight_slot((i) % PD);
    const int c = c_begin + i;
#pragma unroll
    for (int q = 0; q < S::kWeightCopies; ++q) {
      const int k = tid + kFastThreads * q, r = k / 8, u = k % 8;
      const int wr = min(tile_row0 + r, rows - 1);
      CopyAsync16(dst + r * 8 + Swizzle(u, r),
                  wbase + static_cast<int64_t>(wr) * a.w.cols_padded + c * kChunk + u * 8);
    }
  };
  auto issue_acts = [&](int i) {
    float4* dst = act_slot(i % PD);
    const int c = c_begin + i;
#pragma unroll
    for (int q = 0; q < S::kActCopies; ++q) {
      const int k = tid + kFastThreads * q, r = k / (kChunk / 4), f = k % (kChunk / 4);
      if (r < mcount) {
        const int m = m0 + r;
        const int src = a.x_rows != nullptr ? a.x_rows[m] : m;
        CopyAsync16(dst + r * (kChunk / 4) + f, a.x + static_cast<int64_t>(src) * a.x_stride + c * kChunk + f * 4);
      }
    }
  };

  float acc[MT][NT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int i = 0; i < NT; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][i][e] = 0.0f;

  // Prologue: the first PD - 1 chunks' weights before the wait (they are constants), their
  // activations after it; PD - 1 groups, the first also holding every early weight copy.
#pragma unroll
  for (int i = 0; i < PD - 1; ++i)
    if (i < nchunks) issue_weights(i);
  WaitForPrevious();
#pragma unroll
  for (int i = 0; i < PD - 1; ++i) {
    if (i < nchunks) issue_acts(i);
    CommitCopies();
  }
  for (int i = 0; i < nchunks; ++i) {
    WaitCopies<PD - 2>();  // chunk i's group (exactly one group per chunk after it is pending)
    __syncthreads();       // everyone's copies of chunk i landed; everyone is done with chunk i - 1
    if (i + PD - 1 < nchunks) {
      issue_weights(i + PD - 1);  // into chunk i - 1's slot
      issue_acts(i + PD - 1);
    }
    CommitCopies();
    // Split the chunk's activations into pieces (rows past the batch: zeros).
    const float4* raw = act_slot(i % PD);
#pragma unroll
    for (int q = 0; q < S::kActCopies; ++q) {
      const int k = tid + kFastThreads * q, r = k / (kChunk / 4), f = k % (kChunk / 4);
      const float4 v = r < mcount ? raw[r * (kChunk / 4) + f] : make_float4(0.f, 0.f, 0.f, 0.f);
      const Split3 p01 = SplitPair(v.x, v.y), p23 = SplitPair(v.z, v.w);
      const int at = r * 8 + Swizzle(f / 2, r), half = f % 2;
      reinterpret_cast<uint2*>(pieces + at)[half] = make_uint2(p01.hi, p23.hi);
      reinterpret_cast<uint2*>(pieces + S::kToks * 8 + at)[half] = make_uint2(p01.mid, p23.mid);
      reinterpret_cast<uint2*>(pieces + 2 * S::kToks * 8 + at)[half] = make_uint2(p01.lo, p23.lo);
    }
    __syncthreads();
    const uint4* wslot = weight_slot(i % PD);
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      // Thread t's 8 columns of step j: [8 t + 32 j, 8 t + 32 j + 8), unit t + 4 j.
      uint4 w[NT];
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        const int r = warp * 8 * NT + 8 * n + g;
        w[n] = wslot[r * 8 + Swizzle(t + 4 * j, r)];
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        if (mt * 16 >= mcount) break;  // warp-uniform; later groups hold no token
        const int unit = Swizzle(t + 4 * j, g);
#pragma unroll
        for (int p = kPieces - 1; p >= 0; --p) {
          const uint4 lo = pieces[(p * S::kToks + mt * 16 + g) * 8 + unit];
          const uint4 hi = pieces[(p * S::kToks + mt * 16 + g + 8) * 8 + unit];
#pragma unroll
          for (int n = 0; n < NT; ++n) {
            Mma(acc[mt][n], lo.x, hi.x, lo.y, hi.y, w[n].x, w[n].y);
            Mma(acc[mt][n], lo.z, hi.z, lo.w, hi.w, w[n].z, w[n].w);
          }
        }
      }
    }
  }
  WaitCopies<0>();  // no copy outlives the block (the trailing groups are empty)

  // acc[mt][i]: token rows m0 + 16 mt + g (e 0, 1) and + 8 (e 2, 3), weight rows
  // row0 + 8 i + 2 t (+ 1).
  if (splits > 1) {
    float* part = a.split_scratch;
    const int64_t plane = static_cast<int64_t>(a.tokens) * rows;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int i = 0; i < NT; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int m = 16 * mt + g + 8 * h, n = row0 + 8 * i + 2 * t;
          if (m >= mcount) continue;
          float* p = part + split * plane + static_cast<int64_t>(m0 + m) * rows + n;
          if (n < rows) __stcg(p, acc[mt][i][2 * h]);
          if (n + 1 < rows) __stcg(p + 1, acc[mt][i][2 * h + 1]);
        }
    __threadfence();
    __syncthreads();
    if (tid == 0) {
      uint32_t* ticket = a.split_tickets + static_cast<int64_t>(blockIdx.z) * gridDim.x + blockIdx.x;
      const unsigned prev = atomicAdd(ticket, 1u);
      is_last = prev == static_cast<unsigned>(splits - 1);
      if (is_last) *ticket = 0;  // ready for the next launch (graph replays)
    }
    __syncthreads();
    if (!is_last) return;
    __threadfence();
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int i = 0; i < NT; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int m = 16 * mt + g + 8 * h, n = row0 + 8 * i + 2 * t;
          if (m >= mcount || n >= rows) continue;
          const float* p = part + static_cast<int64_t>(m0 + m) * rows + n;
          const bool pair = n + 1 < rows;
          float v0 = __ldcg(p), v1 = pair ? __ldcg(p + 1) : 0.0f;
          for (int s = 1; s < splits; ++s) {
            v0 = v0 + __ldcg(p + s * plane);
            if (pair) v1 = v1 + __ldcg(p + s * plane + 1);
          }
          acc[mt][i][2 * h] = v0;
          acc[mt][i][2 * h + 1] = v1;
        }
  }
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int i = 0; i < NT; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int m = 16 * mt + g + 8 * h, n = row0 + 8 * i + 2 * t;
        if (m >= mcount || n >= rows) continue;
        StoreFast(a, m0 + m, n, acc[mt][i][2 * h], acc[mt][i][2 * h + 1]);
      }
}

template <int MT, int NT>
int64_t FastBlocks(const LinearArgs& a, int32_t splits) {
  using S = FastShape<MT, NT>;
  return static_cast<int64_t>((a.w.rows + S::kRows - 1) / S::kRows) * splits * ((a.tokens + S::kToks - 1) / S::kToks);
}

template <int MT, int NT>
cudaError_t LaunchFast(const LinearArgs& a, int32_t splits, cudaStream_t stream) {
  using S = FastShape<MT, NT>;
  const dim3 grid((a.w.rows + S::kRows - 1) / S::kRows, splits, (a.tokens + S::kToks - 1) / S::kToks);
  if (grid.z > 65535) return cudaErrorInvalidConfiguration;
  static const cudaError_t prepared = cudaFuncSetAttribute(
      FastLinearKernel<MT, NT>, cudaFuncAttributeMaxDynamicSharedMemorySize, S::kSmemBytes);
  if (prepared != cudaSuccess) return prepared;
  g_fast_launches.fetch_add(1, std::memory_order_relaxed);
  return LaunchChained(FastLinearKernel<MT, NT>, grid, dim3(kFastThreads), static_cast<size_t>(S::kSmemBytes), stream,
                       a, splits);
}

template <int MT>
cudaError_t LaunchFastRows(const LinearArgs& a, int32_t splits, cudaStream_t stream) {
  // The widest warp tile (fewest activation reads per weight) whose grid still gives every
  // multiprocessor a block; else the narrowest.
  const int64_t want = static_cast<int64_t>(MultiprocessorCount());
  if (g_fast_tile == 4 || (g_fast_tile == 0 && FastBlocks<MT, 4>(a, splits) >= want))
    return LaunchFast<MT, 4>(a, splits, stream);
  if (g_fast_tile == 2 || (g_fast_tile == 0 && FastBlocks<MT, 2>(a, splits) >= want))
    return LaunchFast<MT, 2>(a, splits, stream);
  return LaunchFast<MT, 1>(a, splits, stream);
}

}  // namespace

int32_t FastLinearSplits(int32_t rows, int32_t cols_padded) {
  const int32_t chunks = cols_padded / kChunk;
  const int32_t tiles = (rows + kMinTileRows - 1) / kMinTileRows;
  int32_t s = std::max<int32_t>(1, kSplitTarget / std::max<int32_t>(tiles, 1));
  s = std::min(s, kMaxSplits);
  s = std::min(s, std::max<int32_t>(1, chunks / 2));
  return s;
}

int64_t FastLinearScratchFloats(int32_t rows, int32_t cols_padded, int32_t tokens) {
  const int32_t s = FastLinearSplits(rows, cols_padded);
  return s > 1 ? static_cast<int64_t>(s) * tokens * rows : 0;
}

int64_t FastLinearTickets(int32_t rows, int32_t cols_padded, int32_t tokens) {
  if (FastLinearSplits(rows, cols_padded) == 1) return 0;
  // The most tiles any warp tile gives: 32-row tiles of 16 tokens.
  return static_cast<int64_t>((rows + kMinTileRows - 1) / kMinTileRows) * ((tokens + 15) / 16);
}

bool CanRunFastLinear(const LinearArgs& a) {
  if (a.w.type != WeightType::kBF16 || a.norm_weight != nullptr || a.epilogue == LinearEpilogue::kRopeStore)
    return false;
  if (a.w.cols_padded % kChunk != 0 || a.tokens < 1 || a.w.rows < 1) return false;
  const int32_t splits = FastLinearSplits(a.w.rows, a.w.cols_padded);
  if (splits > 1) {
    if (a.split_scratch == nullptr || a.split_tickets == nullptr) return false;
    if (FastLinearScratchFloats(a.w.rows, a.w.cols_padded, a.tokens) > a.split_scratch_floats) return false;
    if (FastLinearTickets(a.w.rows, a.w.cols_padded, a.tokens) > a.split_tickets_count) return false;
  }
  return true;
}

cudaError_t LaunchFastLinear(const LinearArgs& a, cudaStream_t stream) {
  if (!CanRunFastLinear(a)) return cudaErrorInvalidValue;
  const int32_t splits = FastLinearSplits(a.w.rows, a.w.cols_padded);
  // Token tiles: one 16-row group for a token or a few, two up to 32, four beyond (prefill).
  if (a.tokens <= 16) return LaunchFastRows<1>(a, splits, stream);
  if (a.tokens <= 32) return LaunchFastRows<2>(a, splits, stream);
  return LaunchFastRows<4>(a, splits, stream);
}

int64_t FastLinearLaunches() { return g_fast_launches.load(std::memory_order_relaxed); }

void SetFastLinearTile(int n8_per_warp) { g_fast_tile = n8_per_warp; }

}  // namespace rote::inference::cuda
