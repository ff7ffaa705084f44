// The exact profile's one-token products from 7B up: RingGemvKernel and its launches.
//
// A part of kernels.cu's translation unit, included there inside its namespaces, after
// linear.cuh (the one-token epilogues it shares), inside the anonymous namespace: not a header
// of its own.

// One-token products as a register ring of everything a group needs (decode at batch 1 of the
// larger models). The plain tile (LinearKernel) keeps only the weights ahead and reads the
// activation (and the norm weight) of each group from L2 when it uses it, so a row of many groups
// waits an L2 round trip per group: 7B's down product (K = 18,944, a row a warp) streamed at 2.5
// TB/s where the lm_head, whose 4 rows a warp share each activation load, reached 4.3 (H200,
// kernel timeline). Here lane t keeps D groups of its weights, activations and norm weights in
// flight and refills a slot as soon as it has converted it, so every load is D groups ahead of its
// use. The sum of squares of the fused norm issues its activation loads 8 groups at a time. Lane t
// owns the terms k ≡ t (mod 32) of every group in increasing k, exactly as LinearKernel: the same
// bits. ROWS >= 2 is needed for the SiLU and rotary epilogues (row pairs in one warp).
template <WeightType WT, int ROWS, int D, bool NORM>
__global__ void __launch_bounds__(kThreads) RingGemvKernel(LinearArgs a) {
  TimelineScope timeline(TimelineKind::kLinear);
  using W4 = Weights4<WT>;
  using Raw = typename W4::Raw;
  LetNextStart();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int K = a.w.cols, KP = a.w.cols_padded;
  const int groups = KP / kGroupCols;
  const int row_base = (blockIdx.x * kWarps + warp) * ROWS;
  const Raw* wrow[ROWS];
  LaneWeightRows<WT, ROWS>(a, row_base, lane, wrow);
  const uint64_t policy = a.weight_evict_first ? EvictFirstPolicy() : 0;
  Raw wr[D][ROWS];
#pragma unroll
  for (int u = 0; u < D; ++u)
    if (u < groups)
#pragma unroll
      for (int r = 0; r < ROWS; ++r) wr[u][r] = LoadWeights(wrow[r] + u * 32, a.weight_evict_first, policy);
  // Where the rotary epilogue stores: fixed for the step, so looked up before the wait.
  RopeTarget rope;
  if (a.epilogue == LinearEpilogue::kRopeStore) rope = PlanRopeStore<ROWS>(a, row_base, lane);
  WaitForPrevious();  // weights are constant; x, x_rows and out come from earlier work
  timeline.Waited();

  const int src = a.x_rows != nullptr ? a.x_rows[0] : 0;
  const float4* xg = reinterpret_cast<const float4*>(a.x + static_cast<int64_t>(src) * a.x_stride) + lane;
  const float4* nw = reinterpret_cast<const float4*>(a.norm_weight) + lane;
  float4 xr[D];
  float4 nr[NORM ? D : 1];
#pragma unroll
  for (int u = 0; u < D; ++u)
    if (u < groups) {
      xr[u] = __ldg(xg + u * 32);
      if constexpr (NORM) nr[u] = __ldg(nw + u * 32);
    }
  float rscale = 0.0f;
  if constexpr (NORM) {
    // The canonical sum of squares (LaneRowSumSquares' order), its loads 8 groups at a time.
    float ss = 0.0f;
    for (int g0 = 0; g0 < groups; g0 += 8) {
      float4 v[8];
#pragma unroll
      for (int u = 0; u < 8; ++u)
        if (g0 + u < groups) v[u] = __ldg(xg + (g0 + u) * 32);
#pragma unroll
      for (int u = 0; u < 8; ++u)
        if (g0 + u < groups) {
          ss = fmaf(v[u].x, v[u].x, ss);
          ss = fmaf(v[u].y, v[u].y, ss);
          ss = fmaf(v[u].z, v[u].z, ss);
          ss = fmaf(v[u].w, v[u].w, ss);
        }
    }
    rscale = canonical_rms_scale(WarpTree(ss), K, a.norm_eps);
  }

  float acc[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) acc[r] = 0.0f;
  for (int g0 = 0; g0 < groups; g0 += D) {
#pragma unroll
    for (int u = 0; u < D; ++u) {
      const int g = g0 + u;
      if (g >= groups) break;
      float wf[ROWS][4];
#pragma unroll
      for (int r = 0; r < ROWS; ++r) W4::ToF32(wr[u][r], wf[r]);
      float4 xv = xr[u];
      if constexpr (NORM) xv = NormScale(xv, rscale, nr[u]);
      if (g + D < groups) {
#pragma unroll
        for (int r = 0; r < ROWS; ++r) wr[u][r] = LoadWeights(wrow[r] + (g + D) * 32, a.weight_evict_first, policy);
        xr[u] = __ldg(xg + (g + D) * 32);
        if constexpr (NORM) nr[u] = __ldg(nw + (g + D) * 32);
      }
      LaneGroupFma<ROWS>(wf, xv, acc);
    }
  }
#pragma unroll
  for (int r = 0; r < ROWS; ++r) acc[r] = WarpTree(acc[r]);
  if (a.epilogue == LinearEpilogue::kRopeStore) {
    StoreRope<ROWS>(a, rope, acc, lane);
    return;
  }
  StoreOneToken<ROWS>(a, a.epilogue, acc, row_base, lane);
}

template <WeightType WT, int ROWS, int D>
cudaError_t LaunchRingGemv(const LinearArgs& a, cudaStream_t stream) {
  const int blocks = (a.w.rows + kWarps * ROWS - 1) / (kWarps * ROWS);
  if (a.norm_weight != nullptr)
    return LaunchChained(RingGemvKernel<WT, ROWS, D, true>, dim3(blocks), dim3(kThreads), 0, stream, a);
  return LaunchChained(RingGemvKernel<WT, ROWS, D, false>, dim3(blocks), dim3(kThreads), 0, stream, a);
}

// The ring's shape for one product: rows a warp (gate|up 4, as its SiLU pairs and the shared
// activation loads want; the rotary epilogue at least 2; the others `rows`, 1, 2 or 4) and depth
// (groups in flight: `depth`, 4, 8 or 16, at most 8 with the norm's extra ring or 4 rows).
template <WeightType WT>
cudaError_t LaunchRingGemvShaped(const LinearArgs& a, int rows, int depth, cudaStream_t stream) {
  const bool silu = a.epilogue == LinearEpilogue::kSiluMul;
  if (silu) rows = a.w.rows % 4 == 0 ? 4 : 2;
  if (a.epilogue == LinearEpilogue::kRopeStore && rows < 2) rows = 2;
  if (rows != 2 && rows != 4) rows = 1;
  if (depth > 8 && (rows == 4 || a.norm_weight != nullptr)) depth = 8;
  if (depth != 4 && depth != 16) depth = 8;
  if (rows == 4) return depth == 4 ? LaunchRingGemv<WT, 4, 4>(a, stream) : LaunchRingGemv<WT, 4, 8>(a, stream);
  if (rows == 2)
    return depth == 4   ? LaunchRingGemv<WT, 2, 4>(a, stream)
           : depth == 8 ? LaunchRingGemv<WT, 2, 8>(a, stream)
                        : LaunchRingGemv<WT, 2, 16>(a, stream);
  return depth == 4   ? LaunchRingGemv<WT, 1, 4>(a, stream)
         : depth == 8 ? LaunchRingGemv<WT, 1, 8>(a, stream)
                      : LaunchRingGemv<WT, 1, 16>(a, stream);
}
