// The exact profile's batched matrix products in shared-memory tiles (TiledLinearKernel) and
// the choice among every product kernel (LaunchLinearTyped).
//
// A part of kernels.cu's translation unit, included there inside its namespaces, after the
// helpers it defines and the parts before this one: not a header of its own.

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
// GROUPED: a grouped product (LaunchGroupedLinear; KS 1), compiled apart so that the ordinary
// products' code is the same as without it.
template <WeightType WT, int R, int T, int WRW, int WTW, int KS, bool GROUPED = false>
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
  int m0 = blockIdx.x * S::kToks;
  int mt = min(S::kToks, a.tokens - m0);
  const char* wdata = static_cast<const char*>(a.w.data);
  if constexpr (GROUPED) {
    static_assert(KS == 1, "a grouped product's tiles are whole");
    __shared__ int tiled_group;
    // A grouped product: which group's tile this block is comes from the previous kernels, so
    // wait for them before the first weight read. Tile blockIdx.x lies in the one group g with
    // group_tiles[g] <= x < group_tiles[g + 1] (empty groups have no tiles); the threads test the
    // groups side by side, one round of loads.
    WaitForPrevious();
    const int bx = blockIdx.x;
    if (bx >= a.group_tiles[a.groups]) return;
    for (int g = tid; g < a.groups; g += S::kThreadsN)
      if (a.group_tiles[g] <= bx && bx < a.group_tiles[g + 1]) tiled_group = g;
    __syncthreads();
    const int g = tiled_group;
    m0 = a.group_first[g] + (bx - a.group_tiles[g]) * S::kToks;
    mt = min(S::kToks, a.group_first[g + 1] - m0);
    wdata += static_cast<int64_t>(g) * a.w.rows * a.w.cols_padded * kWeightBytes<WT>;
  }
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
    wsrc[q] = wdata + static_cast<int64_t>(row) * a.w.cols_padded * kWeightBytes<WT> +
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
  // Weights never depend on the previous kernel (a grouped product's group does, and it has
  // waited already): request them before waiting for it.
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
cudaError_t LaunchTiledLinear(const LinearArgs& a, CudaLaunchStats* stats, cudaStream_t stream) {
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
  if (stats != nullptr) ++stats->tiled_linear_launches;
  return LaunchChained(TiledLinearKernel<WT, R, T, WRW, WTW, KS>, grid, dim3(S::kThreadsN), S::kSmemBytes, stream, a);
}

template <WeightType WT, int R, int T, int WRW, int WTW>
cudaError_t LaunchTiledGrouped(const LinearArgs& a, CudaLaunchStats* stats, cudaStream_t stream) {
  using S = TiledShape<WT, R, T, WRW, WTW, 1>;
  static PerDevice<cudaError_t> prepared_on;
  const cudaError_t prepared = prepared_on.Get([] {
    return cudaFuncSetAttribute(TiledLinearKernel<WT, R, T, WRW, WTW, 1, true>,
                                cudaFuncAttributeMaxDynamicSharedMemorySize, S::kSmemBytes);
  });
  if (prepared != cudaSuccess) return prepared;
  // The most tiles `tokens` rows can take: every nonempty group's last tile may be partial.
  const int64_t tiles = (int64_t{a.tokens} + S::kToks - 1) / S::kToks + std::min(a.groups, a.tokens);
  const dim3 grid(static_cast<unsigned>(tiles), (a.w.rows + S::kRows - 1) / S::kRows, 1);
  if (grid.y > 65535 || tiles > 0x7fffffff) return cudaErrorInvalidConfiguration;
  if (stats != nullptr) ++stats->tiled_linear_launches;
  return LaunchChained(TiledLinearKernel<WT, R, T, WRW, WTW, 1, true>, grid, dim3(S::kThreadsN), S::kSmemBytes, stream,
                       a);
}

// Tiles of 32 tokens where the groups average more than 16 rows (prefill), 16 above 8, else 8
// (64 weight rows a block: a decode step's experts hold a few rows each, and a block reads its
// weights once whatever its tokens).
inline int32_t GroupedTile(int32_t tokens, int32_t groups) {
  const int64_t used = std::max<int64_t>(1, std::min(groups, tokens));
  const int64_t mean = tokens / used;
  return mean > 16 ? 32 : mean > 8 ? 16 : 8;
}

template <WeightType WT>
cudaError_t LaunchGroupedTyped(const LinearArgs& a, const LaunchContext& ctx, cudaStream_t stream) {
  switch (GroupedTile(a.tokens, a.groups)) {
    case 32:
      return LaunchTiledGrouped<WT, 8, 16, 4, 2>(a, ctx.stats, stream);
    case 16:
      return LaunchTiledGrouped<WT, 8, 8, 4, 2>(a, ctx.stats, stream);
    default:
      return LaunchTiledGrouped<WT, 8, 8, 8, 1>(a, ctx.stats, stream);
  }
}

template <WeightType WT>
cudaError_t LaunchLinearTyped(const LinearArgs& a, const LaunchContext& ctx, cudaStream_t stream) {
  // Tile shapes only change which thread computes an output, never its order of operations.
  // The SiLU epilogue needs gate and up rows (2n, 2n + 1) in one warp: ROWS >= 2.
  const bool silu = a.epilogue == LinearEpilogue::kSiluMul;
  if (a.epilogue == LinearEpilogue::kRopeStore && !CanFuseRope(a, *ctx.tuning)) return cudaErrorInvalidValue;
  if (a.tokens == 1) {
    // Pure weight streams. Matrices of many waves (the lm_head) already stream at the copy
    // bandwidth with the plain tile; the per-layer products are one or two waves and need
    // their loads issued early (GemvKernel).
    const int variant = SeparateKernelVariant(*ctx.tuning);
    const bool many_waves = a.w.rows >= 65536;
    if constexpr (WT != WeightType::kF32) {
      if (variant == 3 && !many_waves) {
        if (ctx.stats != nullptr) ++ctx.stats->ring_gemv_launches;
        return LaunchRingGemvShaped<WT>(a, ctx.tuning->one_token_ring_rows, ctx.tuning->one_token_ring_depth, stream);
      }
    }
    if (variant == 1 || variant == 3 || many_waves) {
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
  // first whose grid has at least one block per multiprocessor: up to 8 tokens 64 x 8 (tuning 10
  // skips it), then 32 x 8 with K's classes split over 8 blocks (the few-row matrices of a small
  // batch: o, down, q|k|v; tuning 15 skips it: 25% faster at batch 8), then 32 x 32, 32 x 16,
  // 16 x 16, then for the few-row matrices 16 x 8 with K's classes split over 2 blocks where that
  // gives two blocks per multiprocessor (tuning 12 skips it: its blocks are the only way to more
  // warps per multiprocessor for o and down, 1% faster at 0.5B batch 32), then 16 x 8. They need
  // normalised activations. Splitting K over 4 or 8 blocks for larger batches is not chosen: for
  // the few-row matrices (o, down) it measured slower than the 16-row tiles at batch 32 and 64
  // (0.5B, H100), its stages being too small (4 or 8 classes of a group); lab/cuda/linear.cu keeps
  // those tiles.
  const int64_t sms = MultiprocessorCount();
  const int v = ctx.tuning->large_batch_tile;
  if (a.norm_weight == nullptr && a.epilogue != LinearEpilogue::kRopeStore && (v == -1 || v >= 5)) {
    if (a.tokens <= 8 && v != 10 && TiledBlocks<WT, 8, 8, 8, 1, 1>(a) >= sms)
      return LaunchTiledLinear<WT, 8, 8, 8, 1, 1>(a, ctx.stats, stream);
    if (v != 15 && a.tokens <= 8 && TiledBlocks<WT, 8, 1, 4, 1, 8>(a) >= sms && TiledSplitFits<WT, 8, 1, 4, 1, 8>(a))
      return LaunchTiledLinear<WT, 8, 1, 4, 1, 8>(a, ctx.stats, stream);
    if (a.tokens > 16 && TiledBlocks<WT, 8, 16, 4, 2, 1>(a) >= sms)
      return LaunchTiledLinear<WT, 8, 16, 4, 2, 1>(a, ctx.stats, stream);
    if (TiledBlocks<WT, 8, 8, 4, 2, 1>(a) >= sms) return LaunchTiledLinear<WT, 8, 8, 4, 2, 1>(a, ctx.stats, stream);
    if (!silu && a.tokens > 8 && TiledBlocks<WT, 4, 8, 4, 2, 1>(a) >= sms)
      return LaunchTiledLinear<WT, 4, 8, 4, 2, 1>(a, ctx.stats, stream);
    if (v != 12 && !silu && TiledBlocks<WT, 4, 4, 4, 1, 2>(a) >= 2 * sms && TiledSplitFits<WT, 4, 4, 4, 1, 2>(a))
      return LaunchTiledLinear<WT, 4, 4, 4, 1, 2>(a, ctx.stats, stream);
    if (!silu && TiledBlocks<WT, 4, 8, 4, 1, 1>(a) >= sms) return LaunchTiledLinear<WT, 4, 8, 4, 1, 1>(a, ctx.stats, stream);
  }
  if (v == 1) return LaunchLinearTile<WT, 4, 8>(a, stream);
  if (v == 2) return LaunchLinearTile<WT, 4, 16>(a, stream);
  if (v == 0) return LaunchLinearTile<WT, 8, 8>(a, stream);
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
