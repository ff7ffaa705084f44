// RMSNorm, the embedding lookup, rotary and the KV store.
//
// A part of kernels.cu's translation unit, included there inside its namespaces, after the
// helpers it defines and the parts before this one: not a header of its own.

// One warp per token: canonical sum of squares over the lane row, then (x * r) * w. The weights
// are constants, loaded before the wait (the weight stream evicts them from L2 every step, so they
// often come from DRAM); the row's first kNormRegGroups groups stay in registers between the two
// passes, so after the wait the chain is one load of x, the tree and the stores.
constexpr int kNormRegGroups = 16;  // hidden sizes up to 2,048 entirely in registers
__global__ void __launch_bounds__(kThreads)
    RmsNormKernel(const float* x, int32_t stride, int32_t tokens, int32_t cols, const float* weight, float eps,
                  float* y, const int32_t* x_rows) {
  TimelineScope timeline(TimelineKind::kRmsNorm);
  LetNextStart();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int groups = (cols + kGroupCols - 1) / kGroupCols;
  const float4* wr = reinterpret_cast<const float4*>(weight) + lane;
  const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  float4 wv[kNormRegGroups];
#pragma unroll
  for (int g = 0; g < kNormRegGroups; ++g) wv[g] = g < groups ? wr[g * 32] : zero;
  WaitForPrevious();
  timeline.Waited();
  const int m = blockIdx.x * kWarps + warp;
  if (m >= tokens) return;
  const float* xm = x + static_cast<int64_t>(x_rows != nullptr ? x_rows[m] : m) * stride;
  const float4* xr = reinterpret_cast<const float4*>(xm) + lane;
  float4* yr = reinterpret_cast<float4*>(y + static_cast<int64_t>(m) * stride) + lane;
  float4 xv[kNormRegGroups];
#pragma unroll
  for (int g = 0; g < kNormRegGroups; ++g) xv[g] = g < groups ? xr[g * 32] : zero;
  float ss = 0.0f;  // LaneRowSumSquares' order: groups in increasing order, x, y, z, w
#pragma unroll
  for (int g = 0; g < kNormRegGroups; ++g) {
    if (g < groups) {
      ss = fmaf(xv[g].x, xv[g].x, ss);
      ss = fmaf(xv[g].y, xv[g].y, ss);
      ss = fmaf(xv[g].z, xv[g].z, ss);
      ss = fmaf(xv[g].w, xv[g].w, ss);
    }
  }
  for (int g = kNormRegGroups; g < groups; ++g) {
    const float4 v = xr[g * 32];
    ss = fmaf(v.x, v.x, ss);
    ss = fmaf(v.y, v.y, ss);
    ss = fmaf(v.z, v.z, ss);
    ss = fmaf(v.w, v.w, ss);
  }
  const float r = canonical_rms_scale(WarpTree(ss), cols, eps);
#pragma unroll
  for (int g = 0; g < kNormRegGroups; ++g)
    if (g < groups) yr[g * 32] = NormScale(xv[g], r, wv[g]);
  for (int g = kNormRegGroups; g < groups; ++g) yr[g * 32] = NormScale(xr[g * 32], r, wr[g * 32]);
}

template <WeightType WT>
__global__ void EmbedKernel(const void* embed, int32_t cols_padded, const int32_t* tokens, float* out,
                            int32_t out_stride) {
  TimelineScope timeline(TimelineKind::kEmbed);
  LetNextStart();
  WaitForPrevious();
  timeline.Waited();
  const int m = blockIdx.x;
  const int64_t row = static_cast<int64_t>(tokens[m]) * cols_padded;
  for (int p = threadIdx.x; p < cols_padded; p += blockDim.x) {
    float v;
    if constexpr (WT == WeightType::kBF16) {
      v = numerics::bf16_to_f32(static_cast<const uint16_t*>(embed)[row + p]);
    } else if constexpr (WT == WeightType::kF16) {
      v = __half2float(__ushort_as_half(static_cast<const unsigned short*>(embed)[row + p]));
    } else {
      v = static_cast<const float*>(embed)[row + p];
    }
    out[static_cast<int64_t>(m) * out_stride + p] = v;
  }
}

constexpr int kMaxHeadDim = 256;

// One warp per head of q and k (grid.x: groups of kWarps heads, grid.y: tokens); the block with
// blockIdx.x == 0 also copies v.
__global__ void __launch_bounds__(kThreads)
    RopeStoreKernel(const float* qkv, StepTokens step, AttentionShape shape, const float* q_norm,
                    const float* k_norm, float norm_eps, const float* rope_cos, const float* rope_sin,
                    float* q_out, LayerKv kv) {
  TimelineScope timeline(TimelineKind::kRope);
  __shared__ float head_buf[kWarps][kMaxHeadDim];
  LetNextStart();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int m = blockIdx.y;
  const int hd = shape.head_dim, half = hd / 2;
  const int q_dim = shape.num_heads * hd, kv_dim = shape.num_kv_heads * hd;
  // Before the wait: the position, KV slot and rotary constants are step metadata (copied in
  // before the step's first kernel) and constants; lane i's cos/sin of pairs i + 32k.
  const int pos = step.pos[m];
  const int64_t slot_row = CacheRow(step.block_table + static_cast<int64_t>(m) * step.max_blocks, pos, shape.block_size);
  const float* cos_row = rope_cos + static_cast<int64_t>(pos) * half;
  const float* sin_row = rope_sin + static_cast<int64_t>(pos) * half;
  constexpr int kPairRegs = kMaxHeadDim / 2 / 32;
  float cv[kPairRegs], sv[kPairRegs];
#pragma unroll
  for (int k = 0; k < kPairRegs; ++k) {
    const int i = lane + 32 * k;
    cv[k] = i < half ? cos_row[i] : 0.0f;
    sv[k] = i < half ? sin_row[i] : 0.0f;
  }
  WaitForPrevious();
  timeline.Waited();
  const float* row = qkv + static_cast<int64_t>(m) * (q_dim + 2 * kv_dim);

  float* buf = head_buf[warp];
  for (int h = blockIdx.x * kWarps + warp; h < min(shape.num_heads + shape.num_kv_heads, (blockIdx.x + 1) * kWarps);
       h += kWarps) {
    const bool is_q = h < shape.num_heads;
    const float* src = is_q ? row + h * hd : row + q_dim + (h - shape.num_heads) * hd;
    for (int d = lane; d < hd; d += 32) buf[d] = src[RopePairRow(d, hd)];  // rotary pair order (kernels.h)
    const float* nw = is_q ? q_norm : k_norm;
    if (nw != nullptr) {
      float acc = 0.0f;
      for (int d = lane; d < hd; d += 32) acc = fmaf(buf[d], buf[d], acc);
      const float r = canonical_rms_scale(WarpTree(acc), hd, norm_eps);
      for (int d = lane; d < hd; d += 32) buf[d] = (buf[d] * r) * nw[d];
    }
    __syncwarp();
    float* dst = is_q ? q_out + static_cast<int64_t>(m) * q_dim + h * hd
                      : kv.k + slot_row * kv_dim + (h - shape.num_heads) * hd;
#pragma unroll
    for (int k = 0; k < kPairRegs; ++k) {
      const int i = lane + 32 * k;
      if (i >= half) continue;
      float x0 = buf[i], x1 = buf[i + half];
      canonical_rotate(x0, x1, cv[k], sv[k]);
      dst[i] = x0;
      dst[i + half] = x1;
    }
    __syncwarp();
  }
  if (blockIdx.x == 0)
    for (int i = threadIdx.x; i < kv_dim; i += kThreads) kv.v[slot_row * kv_dim + i] = row[q_dim + kv_dim + i];
}
