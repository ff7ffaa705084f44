// The exact profile's one-token matrix products (LinearKernel, GemvKernel, TmaGemvKernel,
// MlpBlockKernel) and the register-tile launches.
//
// A part of kernels.cu's translation unit, included there inside its namespaces, after the
// helpers it defines and the parts before this one: not a header of its own.

// Lane `lane`'s pointers to its first group of rows row_base .. row_base + ROWS - 1; rows past the
// matrix point at its last row (valid memory, read and never stored).
template <WeightType WT, int ROWS>
__device__ __forceinline__ void LaneWeightRows(const LinearArgs& a, int row_base, int lane,
                                               const typename Weights4<WT>::Raw* (&wrow)[ROWS]) {
  using Raw = typename Weights4<WT>::Raw;
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const int row = min(row_base + r, a.w.rows - 1);
    wrow[r] = reinterpret_cast<const Raw*>(static_cast<const char*>(a.w.data) +
                                           static_cast<int64_t>(row) * a.w.cols_padded * kWeightBytes<WT>) + lane;
  }
}

// acc[r] += lane's four terms of one group of row r, in increasing k (the canonical lane order).
template <int ROWS>
__device__ __forceinline__ void LaneGroupFma(const float (&wf)[ROWS][4], float4 xv, float* acc) {
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    acc[r] = fmaf(wf[r][0], xv.x, acc[r]);
    acc[r] = fmaf(wf[r][1], xv.y, acc[r]);
    acc[r] = fmaf(wf[r][2], xv.z, acc[r]);
    acc[r] = fmaf(wf[r][3], xv.w, acc[r]);
  }
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
  LaneWeightRows<WT, ROWS>(a, row_base, lane, wrow);
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
  LaneWeightRows<WT, ROWS>(a, row_base, lane, wrow);
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
        LaneGroupFma<ROWS>(wf, xv, acc);
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
    LaneGroupFma<ROWS>(wf, xv, acc);
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

// The most ring slots per warp of the persistent one-token kernels (MlpBlockKernel).
constexpr int kStreamMaxStages = 8;

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

template <WeightType WT>
cudaError_t LaunchMlpBlockTyped(const MlpBlockArgs& f, const CudaTuning& tuning, cudaStream_t stream) {
  const MlpBlockPlan p = PlanMlpBlock(f, tuning.mlp_block_max_warps);
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

// The variant of the separate one-token launches: 7 to 10 only choose whether and how the whole
// step runs as one DecodeStepKernel; where it does not, launches are chosen as by default.
int SeparateKernelVariant(const CudaTuning& t) { return t.one_token_kernel >= 7 ? 0 : t.one_token_kernel; }
