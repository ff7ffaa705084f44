// The exact profile's batched products for prefill-sized batches (QuadLinearKernel): warps own
// quads of canonical lanes (classes), so that shared-memory reads are broadcasts.
//
// A part of kernels.cu's translation unit, included there inside its namespaces, after
// tiled_linear.cuh (cp.async helpers, ReduceScatter): not a header of its own.

// TiledLinearKernel's lane L owns class L of every output of its warp's tile, so each of its
// 16-byte shared-memory reads is 32 distinct addresses: four wavefronts per activation read and
// two (bf16) or four (fp32) per weight read, 80 wavefronts per warp and 128-column group at its
// 8 x 16 register tile. With the copies into shared memory, that is about as many cycles of
// shared-memory bandwidth as the multiprocessor's FMA pipes need for the same work, so the
// product stops near half the FMA rate.
//
// Here a block computes BR = 4 R rows x BT = 2 T tokens, every warp the whole tile, warp q for
// the classes 4 q .. 4 q + 3 only: lane L takes class 4 q + L % 4 of the R x T outputs of
// sub-tile (rs, ts) = ((L / 4) % 4, L / 16). A read is then 8 (weights) or 8 (activations)
// distinct 16-byte or 8-byte addresses, each broadcast to 4 or 2 lanes, laid out contiguously:
// one wavefront each, 24 per warp and group (bf16). Each lane still takes its class's terms in
// increasing k, four per group, so every class sum is the canonical one.
//
// The canonical tree then runs as a reduce-scatter: its levels 16, 8 and 4 pair classes of
// warps q and q ^ 4, q ^ 2, q ^ 1 (exchanged through shared memory), levels 2 and 1 lanes
// L ^ 2 and L ^ 1 (shuffles). At each level the two sides add exactly the pairs the tree adds
// (IEEE addition commutes) and each keeps half of the outputs, so lane L of warp q ends with
// the outputs i = (4 q + L % 4) x N / 32 + j of its sub-tile, N = R x T (i = t R + r).
//
// Shared-memory layouts (per 128-column group): weights as 8 quad regions of BR rows x 4
// classes x 4 terms, a row's position p = r x 4 + rs holding block row
// (r / 2) x 8 + rs x 2 + r % 2 (so rows 2n and 2n + 1, a SiLU pair, stay in one lane and a
// warp's read of rows p .. p + 3 is one contiguous run); activations as 8 quad regions of BT
// tokens x 4 classes x 4 terms, token position t x 2 + ts. Each quad region is padded by one
// row so that a warp's 16-byte copies into it spread over all banks.
template <WeightType WT, int R, int T, int STAGES, int G, bool SP>
struct QuadShape {
  static constexpr int kThreadsN = 256;
  static constexpr int kRS = 4, kTS = 2;
  static constexpr int kRows = R * kRS;  // BR
  static constexpr int kToks = T * kTS;  // BT
  static constexpr int kClassBytes = 4 * kWeightBytes<WT>;         // one class's 4 terms of a row
  static constexpr int kWQuadRow = 4 * kClassBytes;                // one row's 4 classes x 4 terms
  static constexpr int kWQuadBytes = (kRows + 1) * kWQuadRow;      // padded by one row
  static constexpr int kAQuadBytes = (kToks + 1) * 64;
  static constexpr int kWRowBytes = 32 * kClassBytes;              // SP: a whole row's group slice
  static constexpr int kWeightBytesG = SP ? kRows * kWRowBytes : 8 * kWQuadBytes;
  static constexpr int kActBytesG = SP ? kToks * 512 : 8 * kAQuadBytes;
  static constexpr int kGroupBytes = kWeightBytesG + kActBytesG;
  // Bytes between a lane's weights of register rows r and r + 1, and float4s between its
  // activations of register tokens t and t + 1.
  static constexpr int kWStrideR = SP ? 4 * kWRowBytes : 4 * kWQuadRow;
  static constexpr int kAStrideT = SP ? 2 * 512 / 16 : 2 * 64 / 16;
  static constexpr int kStages = STAGES;
  static constexpr int kStageBytes = G * kGroupBytes;  // a stage holds G consecutive groups
  static constexpr int kN = R * T;
  static constexpr int kPer = kN / 32;  // outputs a lane stores
  static constexpr int kExchangeBytes = kThreadsN * (SP ? kN / 8 : kN / 2) * 4;
  static constexpr int kSmemBytes =
      kStages * kStageBytes > kExchangeBytes ? kStages * kStageBytes : kExchangeBytes;
  static constexpr int kWeightRowChunks = kGroupCols * kWeightBytes<WT> / 16;  // 16-byte copies per row
  static constexpr int kWeightChunks = kRows * kWeightRowChunks;               // per group
  static constexpr int kActChunks = kToks * 32;
  static_assert(kN % 64 == 0 && R % 2 == 0, "SiLU pairs: two or more outputs per lane, rows in pairs");
  static_assert(kWeightChunks % kThreadsN == 0 && kActChunks % kThreadsN == 0, "whole copy rounds");
  static constexpr bool kCanSilu = true;
};

// Block row of weight position p (see above).
template <int R>
__device__ __forceinline__ int QuadBlockRow(int p) {
  const int r = p / 4, rs = p % 4;
  return (r / 2) * 8 + rs * 2 + (r % 2);
}

// One level of the canonical tree between warps q and q ^ WBIT: each side sends the half of its
// N values it gives away through shared memory and adds the partner's half to the one it keeps
// (the upper half where q has the bit). buf holds kThreadsN x N / 2 floats, float4 by float4,
// thread-major so that both the writes and the partner's reads are conflict-free.
template <int N, int WBIT>
__device__ __forceinline__ void QuadWarpLevel(float* v, float4* buf, int tid, int warp) {
  // Selects between values, never indices chosen at run time (which would put v in local memory).
  const bool upper = (warp & WBIT) != 0;
  const int partner = tid ^ (WBIT * 32);
  if constexpr (N / 2 < 4) {
    float* fbuf = reinterpret_cast<float*>(buf);
#pragma unroll
    for (int i = 0; i < N / 2; ++i) fbuf[i * 256 + tid] = upper ? v[i] : v[i + N / 2];
    __syncthreads();
#pragma unroll
    for (int i = 0; i < N / 2; ++i) v[i] = (upper ? v[i + N / 2] : v[i]) + fbuf[i * 256 + partner];
  } else {
#pragma unroll
    for (int i = 0; i < N / 2; i += 4) {
      buf[(i / 4) * 256 + tid] =
          make_float4(upper ? v[i] : v[i + N / 2], upper ? v[i + 1] : v[i + 1 + N / 2],
                      upper ? v[i + 2] : v[i + 2 + N / 2], upper ? v[i + 3] : v[i + 3 + N / 2]);
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < N / 2; i += 4) {
      const float4 o = buf[(i / 4) * 256 + partner];
      v[i] = (upper ? v[i + N / 2] : v[i]) + o.x;
      v[i + 1] = (upper ? v[i + 1 + N / 2] : v[i + 1]) + o.y;
      v[i + 2] = (upper ? v[i + 2 + N / 2] : v[i + 2]) + o.z;
      v[i + 3] = (upper ? v[i + 3 + N / 2] : v[i + 3]) + o.w;
    }
  }
  __syncthreads();
}

constexpr int kQuadBand = 8;

// SP layouts (warp q holds classes q + 8 cq): the 8-byte or 16-byte slot of class c in a
// weight row at position p, and in an activation row at position m. Each is c with some of its
// low bits flipped by bits of c above them and by the position (a permutation of the row's
// slots), chosen so that a warp's 16 weight or 8 activation addresses of one read fall on
// distinct banks (two wavefronts for a weight read, the fewest 256 bytes of fp32 take; one for
// an activation read) and its copies of whole rows spread over all banks.
template <WeightType WT>
__device__ __forceinline__ int QuadWeightSlot(int c, int p) {
  if constexpr (WT == WeightType::kF32) return c ^ ((c >> 4) & 1) ^ (2 * (p & 3));
  return c ^ (2 * (p & 3));  // even flips: a 16-byte copy's two classes stay in order
}
__device__ __forceinline__ int QuadActSlot(int c, int m) { return c ^ (((c >> 3) & 3) | ((m & 1) << 2)); }

// Tiles of 64 accumulators a lane leave registers for two blocks per multiprocessor.
template <WeightType WT, int R, int T, int STAGES, int G, bool SP>
__global__ void __launch_bounds__(256, (R * T <= 64 ? 2 : 1)) QuadLinearKernel(LinearArgs a) {
  TimelineScope timeline(TimelineKind::kTiled);
  using S = QuadShape<WT, R, T, STAGES, G, SP>;
  using W4 = Weights4<WT>;
  using Raw = typename W4::Raw;
  constexpr int N = S::kN;
  constexpr int kWeightPer = S::kWeightChunks / S::kThreadsN;
  constexpr int kActPer = S::kActChunks / S::kThreadsN;
  extern __shared__ __align__(16) unsigned char quad_smem[];
  LetNextStart();
  const int tid = threadIdx.x, q = tid / 32, lane = tid % 32;
  const int cq = lane % 4, rs = (lane / 4) % 4, ts = lane / 16;
  const int cls = SP ? q + 8 * cq : 4 * q + cq;  // this lane's class
  // Blocks in bands of kQuadBand token tiles: inside a band token tiles fastest, then row tiles,
  // so that the blocks resident together (a wave: 8 token tiles by about 16 row tiles) share
  // their activations and weights in L2. In plain order a wave at 4,096 tokens would read every
  // token tile of one row tile: all the activations, more than L2 holds at the 7B widths.
  const int tiles_m = (a.tokens + S::kToks - 1) / S::kToks;
  const int tiles_n = (a.w.rows + S::kRows - 1) / S::kRows;
  const int band = blockIdx.x / (kQuadBand * tiles_n);
  const int band_m = min(tiles_m - band * kQuadBand, kQuadBand);
  const int in_band = blockIdx.x - band * kQuadBand * tiles_n;
  const int m0 = (band * kQuadBand + in_band % band_m) * S::kToks;
  const int mt = min(S::kToks, a.tokens - m0);
  const int row0 = (in_band / band_m) * S::kRows;
  const int groups = a.w.cols_padded / kGroupCols;
  constexpr int64_t kGroupWeightBytes = int64_t{kGroupCols} * kWeightBytes<WT>;

  // Fixed chunks per thread, advancing one group per stage. Consecutive threads copy consecutive
  // 16 bytes of a row (coalesced); rows past the matrix and tokens past the batch read valid
  // memory (the last row, the first token) and are never stored.
  const char* wsrc[kWeightPer];
  int wdst[kWeightPer];
#pragma unroll
  for (int u = 0; u < kWeightPer; ++u) {
    const int c = tid + u * S::kThreadsN;
    const int p = c / S::kWeightRowChunks, ch = c % S::kWeightRowChunks;
    const int row = min(row0 + QuadBlockRow<R>(p), a.w.rows - 1);
    wsrc[u] = static_cast<const char*>(a.w.data) + static_cast<int64_t>(row) * a.w.cols_padded * kWeightBytes<WT> +
              ch * 16;
    const int byte = ch * 16;  // within the row's group slice
    if constexpr (SP) {
      wdst[u] = p * S::kWRowBytes + QuadWeightSlot<WT>(byte / S::kClassBytes, p) * S::kClassBytes;
    } else {
      wdst[u] = (byte / S::kWQuadRow) * S::kWQuadBytes + p * S::kWQuadRow + byte % S::kWQuadRow;
    }
  }
  const int pstages = (groups + G - 1) / G;
  // Stage p holds groups p G .. p G + G - 1 (those below `groups`).
  auto issue_weights = [&](int p, int buf) {
#pragma unroll
    for (int gi = 0; gi < G; ++gi) {
      const int g = p * G + gi;
      if (G > 1 && g >= groups) break;
      unsigned char* st = quad_smem + buf * S::kStageBytes + gi * S::kGroupBytes;
#pragma unroll
      for (int u = 0; u < kWeightPer; ++u) CpAsync16(st + wdst[u], wsrc[u] + g * kGroupWeightBytes);
    }
  };
  const int ahead = min(S::kStages - 1, pstages);
  for (int p = 0; p < ahead; ++p) issue_weights(p, p);
  CpAsyncCommit();
  WaitForPrevious();
  timeline.Waited();

  const float* xsrc[kActPer];
  int xdst[kActPer];
#pragma unroll
  for (int u = 0; u < kActPer; ++u) {
    const int c = tid + u * S::kThreadsN;
    const int m = c / 32, ch = c % 32;  // token position, class
    const int mm = m0 + (m < mt ? m : 0);
    const int src = a.x_rows != nullptr ? a.x_rows[mm] : mm;
    xsrc[u] = a.x + static_cast<int64_t>(src) * a.x_stride + ch * 4;
    xdst[u] = S::kWeightBytesG +
              (SP ? m * 512 + QuadActSlot(ch, m) * 16 : (ch / 4) * S::kAQuadBytes + m * 64 + (ch % 4) * 16);
  }
  auto issue_acts = [&](int p, int buf) {
#pragma unroll
    for (int gi = 0; gi < G; ++gi) {
      const int g = p * G + gi;
      if (G > 1 && g >= groups) break;
      unsigned char* st = quad_smem + buf * S::kStageBytes + gi * S::kGroupBytes;
#pragma unroll
      for (int u = 0; u < kActPer; ++u) CpAsync16(st + xdst[u], xsrc[u] + g * kGroupCols);
    }
  };
  for (int p = 0; p < S::kStages - 1; ++p) {
    if (p < ahead) issue_acts(p, p);
    CpAsyncCommit();  // empty groups keep the count uniform: group p + 1 holds stage p's activations
  }

  float acc[N];  // acc[t * R + r]: position r x 4 + rs, token t x 2 + ts, class 4 q + cq
#pragma unroll
  for (int i = 0; i < N; ++i) acc[i] = 0.0f;
  const int wofs = SP ? rs * S::kWRowBytes + QuadWeightSlot<WT>(cls, rs) * S::kClassBytes
                     : q * S::kWQuadBytes + rs * S::kWQuadRow + cq * S::kClassBytes;
  const int aofs = S::kWeightBytesG + (SP ? ts * 512 + QuadActSlot(cls, ts) * 16 : q * S::kAQuadBytes + ts * 64 + cq * 16);

  for (int p = 0; p < pstages; ++p) {
    CpAsyncWait<S::kStages - 2>();
    __syncthreads();
    const int next = p + S::kStages - 1;
    if (next < pstages) {
      issue_weights(next, next % S::kStages);
      issue_acts(next, next % S::kStages);
    }
    CpAsyncCommit();
#pragma unroll
    for (int gi = 0; gi < G; ++gi) {
      if (G > 1 && p * G + gi >= groups) break;
      const unsigned char* st = quad_smem + (p % S::kStages) * S::kStageBytes + gi * S::kGroupBytes;
      float wf[R][4];
#pragma unroll
      for (int r = 0; r < R; ++r)
        W4::ToF32(*reinterpret_cast<const Raw*>(st + wofs + r * S::kWStrideR), wf[r]);
      FmaGroup<R, T, S::kAStrideT>(acc, wf, reinterpret_cast<const float4*>(st + aofs));  // positions t x 2 + ts
    }
  }
  CpAsyncWait<0>();
  __syncthreads();

  float4* xbuf = reinterpret_cast<float4*>(quad_smem);
  if constexpr (SP) {
    ReduceScatter<N, 2>(acc, lane);               // classes c, c + 16 and c, c + 8: lanes L ^ 2, L ^ 1
    QuadWarpLevel<N / 4, 4>(acc, xbuf, tid, q);   // c, c + 4
    QuadWarpLevel<N / 8, 2>(acc, xbuf, tid, q);   // c, c + 2
    QuadWarpLevel<N / 16, 1>(acc, xbuf, tid, q);  // c, c + 1
  } else {
    QuadWarpLevel<N, 4>(acc, xbuf, tid, q);      // classes c, c + 16
    QuadWarpLevel<N / 2, 2>(acc, xbuf, tid, q);  // c, c + 8
    QuadWarpLevel<N / 4, 1>(acc, xbuf, tid, q);  // c, c + 4
    ReduceScatter<N / 8, 2>(acc, lane);          // c, c + 2 and c, c + 1
  }
  const int kept = SP ? 8 * cq + q : 4 * q + cq;  // which N / 32 outputs the lane kept

#pragma unroll
  for (int j = 0; j < S::kPer; ++j) {
    const int i = kept * S::kPer + j;
    const int t = i / R, r = i % R;
    const int m = t * 2 + ts;
    const int row = row0 + (r / 2) * 8 + rs * 2 + (r % 2);
    if (m >= mt) continue;
    float* out = a.out + static_cast<int64_t>(m0 + m) * a.out_stride;
    if (a.epilogue == LinearEpilogue::kSiluMul) {
      // j even: rows (2n, 2n + 1) are j and j + 1 of this lane.
      if (j % 2 == 0 && row + 1 < a.w.rows) {
        const int n = row / 2;
        out[a.out_lane_rows ? PermutedIndex(n) : n] = canonical_silu(acc[j]) * acc[j + 1];
      }
      continue;
    }
    if (row >= a.w.rows) continue;
    const int o = a.out_lane_rows ? static_cast<int>(PermutedIndex(row)) : row;
    if (a.epilogue == LinearEpilogue::kAddBias) {
      out[o] = acc[j] + a.bias[row];
    } else if (a.epilogue == LinearEpilogue::kAddResidual) {
      out[o] = out[o] + acc[j];
    } else {
      out[o] = acc[j];
    }
  }
}

template <WeightType WT, int R, int T, int STAGES, int G, bool SP>
int64_t QuadBlocks(const LinearArgs& a) {
  using S = QuadShape<WT, R, T, STAGES, G, SP>;
  return static_cast<int64_t>((a.w.rows + S::kRows - 1) / S::kRows) * ((a.tokens + S::kToks - 1) / S::kToks);
}

template <WeightType WT, int R, int T, int STAGES, int G, bool SP>
cudaError_t LaunchQuadLinear(const LinearArgs& a, CudaLaunchStats* stats, cudaStream_t stream) {
  using S = QuadShape<WT, R, T, STAGES, G, SP>;
  if (a.norm_weight != nullptr || a.epilogue == LinearEpilogue::kRopeStore) return cudaErrorInvalidValue;
  static PerDevice<cudaError_t> prepared_on;
  const cudaError_t prepared = prepared_on.Get([] {
    return cudaFuncSetAttribute(QuadLinearKernel<WT, R, T, STAGES, G, SP>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                S::kSmemBytes);
  });
  if (prepared != cudaSuccess) return prepared;
  const int64_t blocks = QuadBlocks<WT, R, T, STAGES, G, SP>(a);
  if (blocks > 0x7fffffff) return cudaErrorInvalidConfiguration;
  if (stats != nullptr) ++stats->quad_linear_launches;
  return LaunchChained(QuadLinearKernel<WT, R, T, STAGES, G, SP>, dim3(static_cast<unsigned>(blocks)), dim3(S::kThreadsN),
                       S::kSmemBytes, stream, a);
}
