// FastStreamKernel: weights streamed past activations held in shared memory (the lm_head), and
// where it runs.
//
// A part of fast_linear.cu's translation unit, included there inside its namespaces, after the
// helpers it defines and the parts before this one: not a header of its own.

// Weights streamed past resident activations. A matrix of very many rows
// (the lm_head, 151,936 at 0.5B) in FastLinearKernel's 64 x 32 blocks copies each block's tokens'
// activations again beside its weights: half of what its blocks take in. Here one block per
// multiprocessor copies its token tile's activations into shared memory once (multiplied by the
// norm weights, after their squares are summed), and each warp streams whole units of RT row
// tiles through its lane-private ring. For each unit a warp computes what FastLinearKernel's 8
// warps would, one after another: virtual warp v's steps v, v + 8, ... from zero, pieces lo, mid,
// hi per step, and adds the virtual warps' sums in warp order as it goes. The same order, so the
// same bits, and no barrier after the start. Unsliced products only (the slices' order is not
// this), and epilogues that finish single outputs (store, bias, residual).
//
// 12 warps per block (16 of 6 slots each were slower: batch 32 -0.3% to -1.0%, batch 64 -1.6% to
// -1.8%, H200), each with a ring of STAGES slots of RT row tiles: units of 32 rows in rings of 8
// slots, or for 32-token tiles, where splitting the activations is most of a step's instructions
// (4 float4 for 24 mma), units of 48 rows in rings of 6 (one split serves 36 mma).
constexpr int kStreamWarps = 12;
constexpr int kStreamMaxSmem = 227 * 1024;
// A block asks for at least this much shared memory, so two never share a multiprocessor.
constexpr int kStreamMinSmem = 116 * 1024;

template <int RT, int NTK, int STAGES>
struct StreamShape {
  static constexpr int kToks = 8 * NTK;
  static constexpr int kSlotBytes = RT * 32 * 16;
  static constexpr int kRingBytes = STAGES * kSlotBytes;  // per warp
  // [steps][NTK][32 lanes] float4, each lane's four columns of its token, as the ring holds them.
  __host__ __device__ static int64_t ActBytes(int steps) { return static_cast<int64_t>(steps) * NTK * 32 * 16; }
  // Activations, the warps' rings, the virtual warps' sums of squares [8][kToks].
  __host__ __device__ static int64_t SmemBytes(int steps, int warps) {
    return ActBytes(steps) + static_cast<int64_t>(warps) * kRingBytes + kWarps * kToks * 4;
  }
};

template <int RT, int NTK, bool NORM, int STAGES>
__global__ void __launch_bounds__(kStreamWarps * 32, 1) FastStreamKernel(LinearArgs a, int32_t units_per_warp) {
  constexpr int kStreamStages = STAGES;
  using S = StreamShape<RT, NTK, kStreamStages>;
  extern __shared__ __align__(16) unsigned char fast_smem[];
  TimelineScope timeline(TimelineKind::kLinear);
  LetNextStart();
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int nthreads = static_cast<int>(blockDim.x), nwarps = nthreads / 32;
  const int rows = a.w.rows;
  const int steps = a.w.cols_padded / kStepCols;
  const int m0 = static_cast<int>(blockIdx.y) * S::kToks;
  const int mcount = min(S::kToks, a.tokens - m0);
  const int last_tile = (rows + kFastTileRows - 1) / kFastTileRows - 1;
  const int units = (last_tile + RT) / RT;
  const int unit_begin = min(units, (static_cast<int>(blockIdx.x) * nwarps + warp) * units_per_warp);
  const int unit_end = min(units, unit_begin + units_per_warp);
  const uint4* tiles = static_cast<const uint4*>(a.w.fast_tiles);
  float4* acts = reinterpret_cast<float4*>(fast_smem);
  unsigned char* ring = fast_smem + S::ActBytes(steps) + warp * S::kRingBytes;
  float* warp_squares = reinterpret_cast<float*>(fast_smem + S::ActBytes(steps) + nwarps * S::kRingBytes);

  // The warp's stream of steps: its units in order, in each the virtual warps 0 to 7, in each
  // their steps v, v + 8, ... (none for v >= steps). (p_unit, p_v, p_s): the next one to copy.
  // Its sources are pointers advanced by a virtual warp's stride and re-aimed only where a
  // virtual warp's steps end (every steps / 8 copies); its slots are rotating shared offsets. The
  // 64-bit index recomputed at every copy, i % STAGES and the shared window's base were about a
  // fifth of the loop's instructions in the SASS, as in FastLinearKernel.
  constexpr int kWeightStride = kWarps * 32 * 16;  // bytes from one of a virtual warp's steps to the next
  constexpr uint32_t kRingSpan = kStreamStages * S::kSlotBytes;
  int p_unit = unit_begin, p_v = 0, p_s = 0;
  const unsigned char* src[RT];
  auto aim = [&] {  // src at (p_unit, p_v, p_s)
#pragma unroll
    for (int r = 0; r < RT; ++r)
      src[r] = reinterpret_cast<const unsigned char*>(
          tiles + (static_cast<int64_t>(min(p_unit * RT + r, last_tile)) * steps + p_s) * 32 + lane);
  };
  aim();
  const uint32_t ring_s = SharedAddr(ring) + lane * 16;  // this lane's word of slot 0
  uint32_t issue_off = 0;
  auto issue_next = [&] {
    if (p_unit < unit_end) {
#pragma unroll
      for (int r = 0; r < RT; ++r) {  // tiles past the matrix repeat the last: their sums are never stored
        CopyAsync16To(ring_s + issue_off + r * 32 * 16, src[r]);
        src[r] += kWeightStride;
      }
      p_s += kWarps;
      if (p_s >= steps) {
        do {
          if (++p_v == kWarps) {
            p_v = 0;
            ++p_unit;
          }
          p_s = p_v;
        } while (p_s >= steps);
        aim();
      }
    }
    CommitCopies();  // one group per step, empty past the stream's end
    issue_off = issue_off + S::kSlotBytes == kRingSpan ? 0 : issue_off + S::kSlotBytes;
  };
  // Before the wait: the first steps' weights, this lane's activation rows (step metadata) and,
  // with the norm, its norm weights of the first 8 steps it copies (constants).
#pragma unroll 1
  for (int i = 0; i < kStreamStages - 1; ++i) issue_next();
  int64_t xoff[NTK];
#pragma unroll
  for (int j = 0; j < NTK; ++j) {
    const int m = m0 + (8 * j + g) % mcount;  // past the batch: one of the tile's tokens again
    xoff[j] = static_cast<int64_t>(a.x_rows != nullptr ? a.x_rows[m] : m) * a.x_stride + 4 * t;
  }
  constexpr int kEarlyNormSteps = 8;
  const float4* norm_weights = reinterpret_cast<const float4*>(a.norm_weight) + t;
  float4 early_norm[kEarlyNormSteps];
  if constexpr (NORM) {
#pragma unroll
    for (int k = 0; k < kEarlyNormSteps; ++k) {
      const int s = warp + kWarps * k;
      early_norm[k] = warp < kWarps && s < steps ? __ldg(norm_weights + s * (kStepCols / 4)) : make_float4(0, 0, 0, 0);
    }
  }
  WaitForPrevious();
  timeline.Waited();
  // Warp v (< 8) copies virtual warp v's steps v, v + 8, ... and, with the norm, sums their
  // squares as FastLinearKernel's warp v does (lane t's columns in step order, the token's 4 lanes
  // in an xor butterfly) and scales them by the norm weights itself: no other warp touches them
  // before the block's one barrier.
  for (int v = warp; v < kWarps; v += nwarps)
    for (int s = v; s < steps; s += kWarps)
#pragma unroll
      for (int j = 0; j < NTK; ++j) CopyAsync16(acts + (s * NTK + j) * 32 + lane, a.x + xoff[j] + s * kStepCols);
  CommitCopies();
  WaitCopies<0>();
  TimelinePoint(2);  // this warp's activations have landed
  if constexpr (NORM) {
    for (int v = warp; v < kWarps; v += nwarps) {
      float q[NTK];
#pragma unroll
      for (int j = 0; j < NTK; ++j) q[j] = 0.0f;
      auto square_and_scale = [&](int s, const float4 w) {
#pragma unroll
        for (int j = 0; j < NTK; ++j) {
          float4& x = acts[(s * NTK + j) * 32 + lane];
          const float4 r = x;
          q[j] = fmaf(r.x, r.x, q[j]);
          q[j] = fmaf(r.y, r.y, q[j]);
          q[j] = fmaf(r.z, r.z, q[j]);
          q[j] = fmaf(r.w, r.w, q[j]);
          x = make_float4(r.x * w.x, r.y * w.y, r.z * w.z, r.w * w.w);
        }
      };
      int s = v;
      if (v == warp) {  // the norm weights loaded before the wait
#pragma unroll
        for (int k = 0; k < kEarlyNormSteps; ++k, s += kWarps)
          if (s < steps) square_and_scale(s, early_norm[k]);
      }
      for (; s < steps; s += kWarps) square_and_scale(s, __ldg(norm_weights + s * (kStepCols / 4)));
#pragma unroll
      for (int j = 0; j < NTK; ++j) {
        const float u = TokenLanesSum(q[j]);
        if (t == 0) warp_squares[v * S::kToks + 8 * j + g] = u;
      }
    }
  }
  __syncthreads();
  TimelinePoint(3);  // the block's activations in place
  // The norm's scales of the tokens this lane finishes (8 j + 2 t + e): lane l adds token l's
  // virtual warps' squares in warp order and takes its scale; the lanes that need it read it.
  float scale[NTK][2] = {};
  if constexpr (NORM) {
    float lane_scale = 0.0f;
    if (lane < S::kToks) {
      float q = warp_squares[lane];
      for (int v = 1; v < kWarps; ++v) q = q + warp_squares[v * S::kToks + lane];
      lane_scale = canonical_rms_scale(q, a.w.cols, a.norm_eps);
    }
#pragma unroll
    for (int j = 0; j < NTK; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) scale[j][e] = __shfl_sync(0xffffffffu, lane_scale, (8 * j + 2 * t + e) % 32);
  }

  uint32_t read_off = 0;
  const uint32_t acts_s = SharedAddr(acts) + lane * 16;  // this lane's word of step 0, token group 0
  constexpr uint32_t kActStepBytes = NTK * 32 * 16;
  TimelinePoint(5);  // the activations in place: the first warp's loop starts
#pragma unroll 1
  for (int unit = unit_begin; unit < unit_end; ++unit) {
    float total[RT][NTK][4];
#pragma unroll 1
    for (int v = 0; v < kWarps; ++v) {
      float acc[RT][NTK][4];
#pragma unroll
      for (int r = 0; r < RT; ++r)
#pragma unroll
        for (int j = 0; j < NTK; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[r][j][e] = 0.0f;
      uint32_t act_s = acts_s + v * kActStepBytes;
#pragma unroll 1
      for (int s = v; s < steps; s += kWarps, act_s += kWarps * kActStepBytes) {
        WaitCopies<kStreamStages - 2>();  // this step's group has landed (lane-private, as above)
        issue_next();
        const uint32_t slot_s = ring_s + read_off;
        read_off = read_off + S::kSlotBytes == kRingSpan ? 0 : read_off + S::kSlotBytes;
        Pieces p[NTK];
#pragma unroll
        for (int j = 0; j < NTK; ++j) p[j] = SplitFour(LoadShared16(act_s + j * 32 * 16));
#pragma unroll
        for (int r = 0; r < RT; ++r) {
          const uint4 w = LoadShared16u(slot_s + r * 32 * 16);
#pragma unroll
          for (int j = 0; j < NTK; ++j) MmaPieces(acc[r][j], w, p[j]);
        }
      }
#pragma unroll
      for (int r = 0; r < RT; ++r)
#pragma unroll
        for (int j = 0; j < NTK; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) total[r][j][e] = v == 0 ? acc[r][j][e] : total[r][j][e] + acc[r][j][e];
    }
    // acc[r][j][e]: row 16 (unit RT + r) + g (+ 8 for e >= 2), token 8 j + 2 t (+ 1 for odd e).
#pragma unroll
    for (int r = 0; r < RT; ++r)
#pragma unroll
      for (int j = 0; j < NTK; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int n = (unit * RT + r) * kFastTileRows + g + 8 * (e / 2), tok = 8 * j + 2 * t + (e % 2);
          if (n >= rows || tok >= mcount) continue;
          float v = total[r][j][e];
          if constexpr (NORM) v = scale[j][e % 2] * v;
          float* out = a.out + static_cast<int64_t>(m0 + tok) * a.out_stride +
                       (a.out_lane_rows ? FastLaneIndex(n) : n);
          if (a.epilogue == LinearEpilogue::kAddBias) {
            *out = v + a.bias[n];
          } else if (a.epilogue == LinearEpilogue::kAddResidual) {
            *out = *out + v;
          } else {
            *out = v;
          }
        }
  }
  WaitCopies<0>();  // the trailing groups are empty
  TimelinePoint(1);
}

// Whether FastStreamKernel computes `a` (splits: its K slices) with NTK token groups per tile.
template <int RT, int NTK, int STAGES>
bool CanStream(const LinearArgs& a, int32_t splits) {
  if (splits != 1) return false;
  if (a.epilogue != LinearEpilogue::kStore && a.epilogue != LinearEpilogue::kAddResidual &&
      !(a.epilogue == LinearEpilogue::kAddBias && a.bias != nullptr))
    return false;
  return StreamShape<RT, NTK, STAGES>::SmemBytes(a.w.cols_padded / kStepCols, kStreamWarps) <= kStreamMaxSmem;
}

template <int RT, int NTK, bool NORM, int STAGES>
cudaError_t LaunchStreamCompiled(const LinearArgs& a, const LaunchContext& ctx, cudaStream_t stream) {
  using S = StreamShape<RT, NTK, STAGES>;
  static PerDevice<cudaError_t> prepared_on;
  const cudaError_t prepared = prepared_on.Get([] {
    return cudaFuncSetAttribute(FastStreamKernel<RT, NTK, NORM, STAGES>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                kStreamMaxSmem);
  });
  if (prepared != cudaSuccess) return prepared;
  const int steps = a.w.cols_padded / kStepCols;
  const int token_tiles = (a.tokens + S::kToks - 1) / S::kToks;
  // A block per multiprocessor, shared out over the token tiles; the units (RT row tiles) dealt
  // out evenly: as few per warp as kStreamWarps warps allow, then as few warps as that needs.
  const int per_tile = std::max(1, MultiprocessorCount() / token_tiles);
  const int units = (((a.w.rows + kFastTileRows - 1) / kFastTileRows) + RT - 1) / RT;
  const int units_per_warp = (units + per_tile * kStreamWarps - 1) / (per_tile * kStreamWarps);
  const int warps = (units + per_tile * units_per_warp - 1) / (per_tile * units_per_warp);
  const int blocks = (units + warps * units_per_warp - 1) / (warps * units_per_warp);
  if (ctx.stats != nullptr) {
    ++ctx.stats->fast_linear_launches;
    ++ctx.stats->fast_stream_launches;
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(token_tiles));
  cfg.blockDim = dim3(static_cast<unsigned>(32 * warps));
  cfg.dynamicSmemBytes = static_cast<size_t>(std::max<int64_t>(S::SmemBytes(steps, warps), kStreamMinSmem));
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, FastStreamKernel<RT, NTK, NORM, STAGES>, a, units_per_warp);
}

// FastStreamKernel where CudaTuning::fast_stream_mode asks for it and it can run `a` (1: matrices of so many rows
// that 64-row blocks would give every multiprocessor 8 of them, the lm_head): tiles of 8 tokens
// for up to 8, 16 for up to 16, else 32. Where 32 tokens' activations do not fit beside the rings,
// as at 1.5B, it does not run: 16-token tiles would read the weights twice (1.5B's batch 32
// lost 2%). Returns false where it does not run.
template <int RT, int NTK, int STAGES>
bool LaunchStreamIf(const LinearArgs& a, int32_t splits, const LaunchContext& ctx, cudaStream_t stream,
                    cudaError_t* result) {
  if (!CanStream<RT, NTK, STAGES>(a, splits)) return false;
  *result = a.norm_weight != nullptr ? LaunchStreamCompiled<RT, NTK, true, STAGES>(a, ctx, stream)
                                     : LaunchStreamCompiled<RT, NTK, false, STAGES>(a, ctx, stream);
  return true;
}

bool LaunchFastStream(const LinearArgs& a, int32_t splits, const LaunchContext& ctx, cudaStream_t stream,
                      cudaError_t* result) {
  const int mode = ctx.tuning->fast_stream_mode < 0 ? 1 : ctx.tuning->fast_stream_mode;
  const int row_tiles = ctx.tuning->fast_stream_row_tiles == 2 ? 2 : 3;
  if (mode == 0 || a.tokens > 64) return false;
  if (mode == 1 && static_cast<int64_t>(a.w.rows) < int64_t{8} * 64 * MultiprocessorCount()) return false;
  if (a.tokens <= 8) return LaunchStreamIf<2, 1, 8>(a, splits, ctx, stream, result);
  if (a.tokens <= 16) return LaunchStreamIf<2, 2, 8>(a, splits, ctx, stream, result);
  return row_tiles == 3 ? LaunchStreamIf<3, 4, 6>(a, splits, ctx, stream, result)
                        : LaunchStreamIf<2, 4, 8>(a, splits, ctx, stream, result);
}
