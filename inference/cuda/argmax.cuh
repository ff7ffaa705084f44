// The greedy argmax and the chained greedy steps' token feedback.
//
// A part of kernels.cu's translation unit, included there inside its namespaces, after the
// helpers it defines and the parts before this one: not a header of its own.

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
