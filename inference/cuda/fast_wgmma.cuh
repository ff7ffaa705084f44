// The fast profile's product for prefill-sized steps on Hopper's warpgroup tensor-core
// instructions (wgmma), with the profile's order of the sums, so the bits of FastLinearKernel
// (fast_linear.h). Two launches:
//
// 1. FastPiecesKernel, one warp per token: the activations (times the norm weights, with the norm)
//    split into their three bf16 pieces (FastSplit) once, written as wgmma's B operand for every
//    16-column step (below); with the norm, each token's scale from its sum of squares added in
//    the profile's order (per slice: each of the 8 warp classes' 4 lanes' fma chains over its
//    steps, the lanes in the xor butterfly, the classes in order; the slices in order).
// 2. FastWgmmaKernel: a block is 1 to 4 consumer warpgroups of 64 weight rows each over 128 tokens,
//    and one producer warp that copies each step's weight tiles and the step's pieces into a ring
//    in shared memory (cp.async.bulk completing on the stage's mbarrier). The consumers take the
//    steps in the order of the sums: slice by slice, in each slice warp class w's steps w, w + 8,
//    ... (FastLinearKernel's warp w), each class's chain from zero with one wgmma per piece (lo,
//    mid, hi: the same instruction's bits as mma.sync's, bench/inference/wgmma_bits_probe.cu),
//    the classes' sums added in class order and the slices' in slice order. The weights are the A
//    operand in registers, straight from the tile layout (fast_tiles.h: a lane's 16 bytes of a
//    tile are its mma.m16n8k16 A registers, which are wgmma's per warp); the pieces, B, from
//    shared memory.
//
// The pieces' layout (kWgTokens = 128 tokens a tile): bf16 elements
//   ((tile * steps + step) * 3 + piece) * 2048 + ((token / 8 * 2 + khalf) * 8 + token % 8) * 8 + kk
// with pieces lo, mid, hi; kk the position within a k half of the step's tile permutation
// (fast_tiles.h: thread t's positions 2t, 2t + 1 hold columns 4t, 4t + 1 in k half 0, and
// 4t + 2, 4t + 3 in k half 1). That is wgmma's no-swizzle K-major layout of 8 x 8 core matrices
// (16 bytes a row; the two k halves 128 bytes apart, 8-token groups 256 apart), so one step's
// three pieces are one 12 KiB copy.
//
// A part of fast_linear.cu's translation unit, included after fast_kernel.cuh (its epilogue and
// copy helpers) and wgmma.cuh (the instruction's wrappers): not a header of its own.

constexpr int kWgTokens = 128;                   // tokens per tile (wgmma's N)
constexpr int kWgPieceBytes = kWgTokens * 16 * 2;  // one piece of one step: 4 KiB
constexpr int kWgStepPiecesBytes = 3 * kWgPieceBytes;

// Bytes of the pieces and the norm scales of `tokens` tokens over `cols_padded` columns.
inline int64_t FastWgmmaScratchBytes(int32_t tokens, int32_t cols_padded) {
  const int64_t tiles = (tokens + kWgTokens - 1) / kWgTokens;
  return tiles * (cols_padded / kStepCols) * kWgStepPiecesBytes + tiles * kWgTokens * 4;
}

__device__ __forceinline__ uint32_t PackHigh(uint32_t a, uint32_t b) { return __byte_perm(a, b, 0x7632); }

// Grid: ceil(tiles * 128 / 8) blocks of 256 threads, warp = one token (past the batch: zeros).
__global__ void __launch_bounds__(256) FastPiecesKernel(LinearArgs a, int32_t splits, uint16_t* pieces, float* scales) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int m = blockIdx.x * 8 + warp;
  const int steps = a.w.cols_padded / kStepCols;
  const bool real = m < a.tokens;
  const float* x = real ? a.x + static_cast<int64_t>(a.x_rows != nullptr ? a.x_rows[m] : m) * a.x_stride : nullptr;
  const bool norm = a.norm_weight != nullptr;
  if (norm) {
    // Lane 4 w + t is FastLinearKernel's lane t of warp w (any g: the squares of a token).
    const int w = lane / 4, t = lane % 4;
    float total = 0.0f;
    for (int sl = 0; sl < splits; ++sl) {
      const int s_begin = static_cast<int>(static_cast<int64_t>(sl) * steps / splits);
      const int s_end = static_cast<int>(static_cast<int64_t>(sl + 1) * steps / splits);
      float q = 0.0f;
      if (real)
        for (int s = s_begin + w; s < s_end; s += kWarps) {
          const float4 v = *reinterpret_cast<const float4*>(x + s * kStepCols + 4 * t);
          q = fmaf(v.x, v.x, q);
          q = fmaf(v.y, v.y, q);
          q = fmaf(v.z, v.z, q);
          q = fmaf(v.w, v.w, q);
        }
      q = TokenLanesSum(q);  // (t0 + t1) + (t2 + t3), on every lane of the quad
      float u = __shfl_sync(0xffffffffu, q, 0);
      for (int c = 1; c < kWarps; ++c) u = u + __shfl_sync(0xffffffffu, q, 4 * c);
      total = sl == 0 ? u : total + u;
    }
    if (lane == 0 && real) scales[m] = canonical_rms_scale(total, a.w.cols, a.norm_eps);
  }
  const int tile = m / kWgTokens, mi = m % kWgTokens, grp = mi / 8, r = mi % 8;
  const int t = lane % 4;
  const float4* nw = reinterpret_cast<const float4*>(a.norm_weight);
  for (int s = lane / 4; s < steps; s += 8) {
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (real) {
      v = *reinterpret_cast<const float4*>(x + s * kStepCols + 4 * t);
      if (norm) {
        const float4 w = nw[s * (kStepCols / 4) + t];
        v = make_float4(v.x * w.x, v.y * w.y, v.z * w.z, v.w * w.w);
      }
    }
    const FastPieces q[4] = {FastSplit(v.x), FastSplit(v.y), FastSplit(v.z), FastSplit(v.w)};
    uint16_t* base = pieces + (static_cast<int64_t>(tile) * steps + s) * 3 * (kWgPieceBytes / 2);
    uint32_t* half0 = reinterpret_cast<uint32_t*>(base + ((grp * 2 + 0) * 8 + r) * 8 + 2 * t);
    uint32_t* half1 = reinterpret_cast<uint32_t*>(base + ((grp * 2 + 1) * 8 + r) * 8 + 2 * t);
    constexpr int kPieceWords = kWgPieceBytes / 4;
    half0[0] = PackHigh(q[0].lo, q[1].lo);
    half1[0] = PackHigh(q[2].lo, q[3].lo);
    half0[kPieceWords] = PackHigh(q[0].mid, q[1].mid);
    half1[kPieceWords] = PackHigh(q[2].mid, q[3].mid);
    half0[2 * kPieceWords] = PackHigh(q[0].hi, q[1].hi);
    half1[2 * kPieceWords] = PackHigh(q[2].hi, q[3].hi);
  }
}

__device__ __forceinline__ void WgBarrierInit(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void WgBarrierExpect(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void WgBarrierArrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void WgBarrierWait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  while (!done)
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
}
// An arrival on an mbarrier of any block of the cluster (`bar` from ClusterAddr). The stage's
// reads it releases are the consumer's wgmma reads, complete (wait_group) before it arrives; the
// copies that then overwrite the stage are issued only once the barrier's phase is seen complete.
__device__ __forceinline__ void WgBarrierArriveCluster(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ int WgClusterRank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return static_cast<int>(r);
}
// Every thread of every block of the cluster.
__device__ __forceinline__ void WgClusterSync() {
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// One copy into the same shared-memory offset of every block in `mask`, completing on the
// mbarrier at `bar`'s offset in each of them.
__device__ __forceinline__ void WgBulkCopyMulticast(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar,
                                                    uint16_t mask) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1], %2, [%3], %4;" ::"r"(dst),
      "l"(src), "r"(bytes), "r"(bar), "h"(mask)
      : "memory");
}
__device__ __forceinline__ void WgBulkCopy(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}

// WGS consumer warpgroups (64 weight rows each) and a producer warp. With 3 or 4 (192 or 256
// rows: each step's pieces serve 1.5 or 2 times the rows of 2), the warp classes' running sum
// lives in the block's sums in shared memory instead of registers (the registers hold one
// accumulator a thread), so only unsliced products take them.
template <int WGS>
struct FastWgShape {
  static constexpr bool kSumInShared = WGS >= 3;
  static constexpr int kConsumers = WGS * 128;
  static constexpr int kThreads = kConsumers + 32;
  static constexpr int kRows = 64 * WGS;
  static constexpr int kTiles = 4 * WGS;  // 16-row weight tiles per block
  static constexpr int kStageBytes = kTiles * 512 + kWgStepPiecesBytes;
  static constexpr int kStages = WGS == 4 ? 4 : WGS >= 2 ? 6 : 5;
  static constexpr int kRingBytes = kStages * kStageBytes;
  static constexpr int kSumStride = kRows + 4;  // floats: [token][row], conflict-free fragment stores
  static constexpr int kSumsOffset = kRingBytes;
  static constexpr int kBarriersOffset = kSumsOffset + kWgTokens * kSumStride * 4;
  static constexpr int kSmemBytes = kBarriersOffset + 2 * kStages * 8;
  static constexpr int kBlocksPerSM = WGS >= 2 ? 1 : 2;
  // The registers a thread may take: the multiprocessor's four schedulers each hold 16,384, and
  // the busiest one holds ceil(warps / 4) of the kBlocksPerSM blocks' warps (a multiple of 8).
  // 4 warpgroups and the producer warp, 17 warps: 96, too few for 64 accumulators in flight, so
  // ptxas serializes every wgmma there (its C7512); 3 warpgroups and the producer (13 warps)
  // get 128 and keep them asynchronous. Given to ptxas as __maxnreg__.
  static constexpr int kWarpsPerScheduler = (kThreads / 32 * kBlocksPerSM + 3) / 4;
  static constexpr int kMaxRegs = 16384 / kWarpsPerScheduler / 32 / 8 * 8;
  static_assert(kBlocksPerSM * (kSmemBytes + 1024) <= 228 * 1024, "blocks must fit a multiprocessor");
};

// The steps a block takes, in the order of the sums: slice sl, class c, then c's steps in order.
struct WgSteps {
  int steps, splits;
  __device__ __forceinline__ int Begin(int sl) const { return static_cast<int>(static_cast<int64_t>(sl) * steps / splits); }
  __device__ __forceinline__ int End(int sl) const { return static_cast<int>(static_cast<int64_t>(sl + 1) * steps / splits); }
};

// CL > 1: the grid's blocks in clusters of CL consecutive row blocks over the same 128 tokens.
// Each block's producer copies its own weight tiles and a CL-th of every step's pieces,
// multicast into the same stage of every block of the cluster, so the pieces (12 KiB a step
// against 2 KiB of weights a warpgroup) cross from L2 once a cluster instead of once a block: L2
// bandwidth is what holds a block of 1 warpgroup (ncu, 7B gate|up: L2 at 73% of its throughput,
// the tensor pipe at 44%). A stage is free again once the consumers of every block of the cluster
// released it (each consumer warp arrives on every block's empty barrier).
template <int WGS, int CL, bool NORM, int EPI>
__global__ void __launch_bounds__(FastWgShape<WGS>::kThreads) __maxnreg__(FastWgShape<WGS>::kMaxRegs)
    FastWgmmaKernel(LinearArgs a, int32_t splits, const uint16_t* pieces, const float* scales) {
  using S = FastWgShape<WGS>;
  static_assert(CL == 1 || CL == 2 || CL == 4, "a step's pieces in CL equal 16-byte-aligned parts");
  constexpr int kPartBytes = kWgStepPiecesBytes / CL;
  static_assert(kPartBytes % 16 == 0, "bulk copies of whole 16-byte units");
  extern __shared__ __align__(128) unsigned char wg_smem[];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int rows = a.w.rows, steps = a.w.cols_padded / kStepCols;
  const WgSteps order{steps, splits};
  const int tt = blockIdx.x, m0 = tt * kWgTokens, mcount = min(kWgTokens, a.tokens - m0);
  const int tile0 = blockIdx.y * S::kTiles;
  const int last_tile = (rows + kFastTileRows - 1) / kFastTileRows - 1;
  const uint32_t smem = SharedAddr(wg_smem);
  const uint32_t full0 = smem + S::kBarriersOffset, empty0 = full0 + S::kStages * 8;
  if (tid == 0) {
    for (int i = 0; i < S::kStages; ++i) {
      WgBarrierInit(full0 + 8 * i, 1);
      WgBarrierInit(empty0 + 8 * i, S::kTiles * CL);  // every consumer warp of the cluster releases it
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  // With clusters, no block copies into another before that one's barriers exist.
  if constexpr (CL > 1) {
    WgClusterSync();
  } else {
    __syncthreads();
  }
  const int rank = CL > 1 ? WgClusterRank() : 0;

  if (warp == WGS * 4) {  // the producer warp: one lane issues every copy
    if (lane == 0) {
      const unsigned char* tiles = static_cast<const unsigned char*>(a.w.fast_tiles);
      const unsigned char* step_pieces =
          reinterpret_cast<const unsigned char*>(pieces) + static_cast<int64_t>(tt) * steps * kWgStepPiecesBytes;
      int i = 0;
      for (int sl = 0; sl < splits; ++sl)
        for (int c = 0; c < kWarps; ++c)
          for (int s = order.Begin(sl) + c; s < order.End(sl); s += kWarps, ++i) {
            const int stage = i % S::kStages, round = i / S::kStages;
            if (round > 0) WgBarrierWait(empty0 + 8 * stage, (round - 1) & 1);
            const uint32_t full = full0 + 8 * stage, dst = smem + stage * S::kStageBytes;
            WgBarrierExpect(full, S::kStageBytes);
            for (int r = 0; r < S::kTiles; ++r) {
              const int tile = min(tile0 + r, last_tile);
              WgBulkCopy(dst + r * 512, tiles + (static_cast<int64_t>(tile) * steps + s) * 512, 512, full);
            }
            const unsigned char* src = step_pieces + static_cast<int64_t>(s) * kWgStepPiecesBytes;
            if constexpr (CL > 1) {
              WgBulkCopyMulticast(dst + S::kTiles * 512 + rank * kPartBytes, src + rank * kPartBytes, kPartBytes,
                                  full, static_cast<uint16_t>((1u << CL) - 1));
            } else {
              WgBulkCopy(dst + S::kTiles * 512, src, kWgStepPiecesBytes, full);
            }
          }
    }
    __syncwarp();
    // A cluster's blocks leave together: another block's consumers still arrive on this one's
    // barriers until they are done.
    if constexpr (CL > 1) WgClusterSync();
    return;
  }

  // A consumer: warpgroup wg, its warp wi holds weight rows 64 wg + 16 wi (+ g, + 8) of the tile.
  const int wg = warp / 4, wi = warp % 4, g = lane / 4, t = lane % 4;
  float* sums = reinterpret_cast<float*>(wg_smem + S::kSumsOffset);
  float acc[64], u[S::kSumInShared ? 1 : 64];
  // acc[4 j + e]: row 16 wi + g (+ 8 for e >= 2), token 8 j + 2 t (+ 1 for odd e): its place in sums.
  auto sum_at = [&](int k) -> float& {
    const int jj = k / 4, e = k % 4;
    const int row = 64 * wg + 16 * wi + g + 8 * (e / 2), tok = 8 * jj + 2 * t + (e % 2);
    return sums[tok * S::kSumStride + row];
  };
  int i = 0;
  auto step = [&](uint4& w, int) {
    const int stage = i % S::kStages;
    WgBarrierWait(full0 + 8 * stage, (i / S::kStages) & 1);
    const uint32_t base = smem + stage * S::kStageBytes;
    w = LoadShared16u(base + (wg * 4 + wi) * 512 + lane * 16);
    const uint32_t b = base + S::kTiles * 512;
    WgFence();
    WgMma(acc, w, WgDescriptor(b, 128, 256));
    WgMma(acc, w, WgDescriptor(b + kWgPieceBytes, 128, 256));
    WgMma(acc, w, WgDescriptor(b + 2 * kWgPieceBytes, 128, 256));
    WgCommit();
    ++i;
  };
  // Step i - 1's instructions are done once at most the newest group (step i's) is in flight.
  // A stage's release: on this block's empty barrier, or with clusters on every block's.
  auto release = [&](int stage) {
    if (lane != 0) return;
    if constexpr (CL > 1) {
#pragma unroll
      for (int r = 0; r < CL; ++r) WgBarrierArriveCluster(ClusterAddr(empty0 + 8 * stage, r));
    } else {
      WgBarrierArrive(empty0 + 8 * stage);
    }
  };
  auto release_previous = [&] { release((i - 2 + S::kStages) % S::kStages); };
  for (int sl = 0; sl < splits; ++sl) {
    for (int c = 0; c < kWarps; ++c) {
#pragma unroll
      for (int k = 0; k < 64; ++k) acc[k] = 0.0f;
      const int first = order.Begin(sl) + c, end = order.End(sl);
      const int n = first < end ? (end - first + kWarps - 1) / kWarps : 0;
      // Two register sets for the weights: a step's are overwritten only two steps later, once
      // the instructions that read them are done (wait_group 1).
      uint4 w0, w1;
      int j = 0;
      for (; j + 1 < n; j += 2) {
        step(w0, j);
        if (j > 0) {
          WgWait<1>(acc);
          release_previous();
        }
        step(w1, j + 1);
        WgWait<1>(acc);
        release_previous();
      }
      if (j < n) {
        step(w0, j);
        if (j > 0) {
          WgWait<1>(acc);
          release_previous();
        }
      }
      WgWait<0>(acc);
      if (n > 0) release((i - 1) % S::kStages);
      if constexpr (S::kSumInShared) {
#pragma unroll
        for (int k = 0; k < 64; ++k) {
          float& v = sum_at(k);
          v = c == 0 ? acc[k] : v + acc[k];
        }
      } else {
#pragma unroll
        for (int k = 0; k < 64; ++k) u[k] = c == 0 ? acc[k] : u[k] + acc[k];
      }
    }
    // The slices' sums in slice order, in the block's sums ([token][row]): each element is this
    // thread's alone. (With the classes' sum in shared memory there is one slice, the launcher's
    // rule, and its sums are in place.)
    if constexpr (!S::kSumInShared) {
#pragma unroll
      for (int k = 0; k < 64; ++k) {
        float& v = sum_at(k);
        v = sl == 0 ? u[k] : v + u[k];
      }
    }
  }
  asm volatile("bar.sync 1, %0;" ::"n"(S::kConsumers) : "memory");  // the consumers' sums are in

  constexpr int kPairs = S::kRows / 2;
  const int row0 = tile0 * kFastTileRows;
  WithKernelEpilogue<EPI>(a.epilogue, [&](auto kind) {
    constexpr LinearEpilogue E = decltype(kind)::value;
    for (int idx = tid; idx < kPairs * kWgTokens; idx += S::kConsumers) {
      const int row = 2 * (idx % kPairs), tok = idx / kPairs, n = row0 + row;
      if (tok >= mcount || n >= rows) continue;
      const float2 v = *reinterpret_cast<const float2*>(sums + tok * S::kSumStride + row);
      float v0 = v.x, v1 = n + 1 < rows ? v.y : 0.0f;
      if constexpr (NORM) {
        const float r = scales[m0 + tok];
        v0 = r * v0;
        v1 = r * v1;
      }
      FastEpilogue e = PlanFastEpilogue<E>(a, m0 + tok, n);
      LoadFastResidual<E>(a, m0 + tok, n, &e);
      StoreFast<E>(a, m0 + tok, n, v0, v1, e);
    }
  });
  if constexpr (CL > 1) WgClusterSync();  // with the producer's: the cluster's blocks leave together
}
