// Attention: AttentionKernel (a block per query head and token) and GroupAttentionKernel (the
// query heads of a KV head in one block).
//
// A part of kernels.cu's translation unit, included there inside its namespaces, after the
// helpers it defines and the parts before this one: not a header of its own.

// One block per (query head, token). Pass 1: each thread computes whole scores, emulating the
// 32 lanes of the canonical dot in registers (lane l's terms d ≡ l mod 32, then the tree), so
// many positions are in flight at once. Pass 2: max, exp, canonical sum. Pass 3: warp w owns 8
// dims at a time; lane t takes positions j ≡ t (mod 32) in increasing j, the butterfly is the
// canonical tree over positions.
constexpr int kAttnWarps = 8;
constexpr int kAttnThreads = kAttnWarps * 32;

// A K or V row's four values. `fresh`: the row was written during this launch by another block
// (the one-launch step), so it must come from L2, where every SM's writes meet; L1 is not
// coherent across multiprocessors. AttentionKernel passes false for every row: what it reads was
// written by earlier kernels, and L1 caching is what lets the blocks of a long prefill share
// K/V rows (reading them all from L2 made a 1,000-token prefill 19x slower).
__device__ __forceinline__ float4 LoadKv4(const float* p, bool fresh) {
  return fresh ? __ldcg(reinterpret_cast<const float4*>(p)) : *reinterpret_cast<const float4*>(p);
}

// The K and V terms that the first batch of AttendHead's batched loops (U > 0) uses, for rows of
// earlier steps (positions below `end`: nothing in this step writes them), loaded into registers
// before the kernel waits for the previous one, so that the loops' first round trip is gone.
// The lab's variant only (lab/cuda/attention.cu): it measured 1% slower than without (the
// registers double), and keeping every row in shared memory (variant 9) does this better where it
// fits.
template <int NG, int U>
struct AttnFirstBatch {
  float4 k[U > 0 ? U : 1][2 * NG];  // scores layout: position warp * 4 + lane / 8 + 32 u (8 warps)
  float4 v[U > 0 ? U : 1][NG][2];   // values layout: position class + 32 u
  int end = 0;                      // positions below end are held
};

template <int NG, int U>
__device__ __forceinline__ void LoadAttnFirstBatch(AttnFirstBatch<NG, U>& fb, const LayerKv& kv,
                                                   const AttentionShape& shape, int g, const int32_t* bt_s,
                                                   int end, int tid) {
  static_assert(U > 0, "only the batched loops have a first batch");
  const int warp = tid / 32, lane = tid % 32, r = lane % 8;
  const int hd = shape.head_dim, bs = shape.block_size, kv_dim = shape.num_kv_heads * hd;
  fb.end = end;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int j = warp * 4 + lane / 8 + kAttnWarps * 4 * u;
    const bool ok = j < end;
    const float* kp = kv.k + (ok ? CacheRow(bt_s, j, bs) : 0) * kv_dim + g * hd + 4 * r;
#pragma unroll
    for (int k = 0; k < 2 * NG; ++k)
      fb.k[u][k] = ok && 32 * k + 4 * r < hd ? *reinterpret_cast<const float4*>(kp + 32 * k)
                                              : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
  const int c = warp + 8 * (lane / 8);
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int j = c + 32 * u;
    const bool ok = j < end;
    const float* vrow = kv.v + g * hd + (ok ? CacheRow(bt_s, j, bs) : 0) * kv_dim + 8 * r;
#pragma unroll
    for (int n = 0; n < NG; ++n) {
      const bool in = ok && 8 * r + 64 * n < hd;
      fb.v[u][n][0] = in ? *reinterpret_cast<const float4*>(vrow + 64 * n) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      fb.v[u][n][1] = in ? *reinterpret_cast<const float4*>(vrow + 64 * n + 4) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
  }
}

// Attention's weighted sum of V. The canonical order gives position j to class j mod 32, each
// class summing its positions in increasing j, then the tree over the 32 classes. Warp w owns the
// classes w + 8q (q = lane / 8: w, w + 8, w + 16, w + 24); lane r = lane % 8 of each group owns
// the dims 8r .. 8r + 7 (+ 64 n), so a load instruction reads four whole V rows, one per class,
// contiguously. The tree's first two levels (c + (c + 16), then c + (c + 8)) are xor 16 and xor 8
// inside the warp; its last three (off 4, 2, 1) run per dim over the 8 warps' results through
// shared memory (vpart: kAttnWarps x hd floats). One divide by the denominator.
// vbase: the head group's V at position row 0. FB: the first batch's rows below fb->end are in
// fb (registers) already.
// SM: every V row of the head group is in shared memory, vs + j * hd (AttentionKernel stages them).
// width, dim0: only the dims dim0 .. dim0 + width - 1 of the head (vbase and vs point at dim0
// already; rows stay kv_dim and hd apart): a slice of the output, each dim's sum in the same order.
template <int NG, int U, bool FB, bool SM, typename Sync>
__device__ __forceinline__ void AttendValues(const float* vbase, int kv_dim, int hd, int bs, const int32_t* bt_s,
                                             const float* weights, int L, int old_end, float denom, float* o, int h,
                                             float* vpart, const AttnFirstBatch<NG, U>* fb, const float* vs, int tid,
                                             Sync sync, int width = -1, int dim0 = 0) {
  static_assert(kAttnWarps == 8, "four position classes per warp: w, w + 8, w + 16, w + 24");
  const int wd = width < 0 ? hd : width;
  const int warp = tid / 32, lane = tid % 32;
  const int c = warp + 8 * (lane / 8), r = lane % 8;
  float acc[NG][8];
#pragma unroll
  for (int n = 0; n < NG; ++n)
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[n][i] = 0.0f;
  if constexpr (U == 0) {
#pragma unroll 4
    for (int j = c; j < L; j += 32) {
      const float p = weights[j];
      const float* vrow = SM ? vs + j * hd + 8 * r
                             : vbase + (CacheRow(bt_s, j, bs)) * kv_dim + 8 * r;
      const bool fresh = !SM && j >= old_end;
#pragma unroll
      for (int n = 0; n < NG; ++n) {
        if (8 * r + 64 * n < wd) {
          const float4 v0 = LoadKv4(vrow + 64 * n, fresh);
          const float4 v1 = LoadKv4(vrow + 64 * n + 4, fresh);
          acc[n][0] = fmaf(p, v0.x, acc[n][0]);
          acc[n][1] = fmaf(p, v0.y, acc[n][1]);
          acc[n][2] = fmaf(p, v0.z, acc[n][2]);
          acc[n][3] = fmaf(p, v0.w, acc[n][3]);
          acc[n][4] = fmaf(p, v1.x, acc[n][4]);
          acc[n][5] = fmaf(p, v1.y, acc[n][5]);
          acc[n][6] = fmaf(p, v1.z, acc[n][6]);
          acc[n][7] = fmaf(p, v1.w, acc[n][7]);
        }
      }
    }
  } else {
    // U positions of the class per batch: every load of the batch is issued before the first
    // FMA, so their round trips overlap (the plain loop above waits for one row at a time). The
    // FMAs then run in increasing j, the canonical order.
    // (With FB the first batch is written out apart, so that the registers of the preloaded rows
    // are free after it; without, one loop, as little code as possible: attention runs on a few
    // multiprocessors whose instruction caches start cold at every launch.)
    auto batch = [&](int j0, bool first) {
      float p[U];
      float4 va[U][NG][2];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int j = j0 + 32 * u;
        const bool ok = j < L;
        p[u] = ok ? weights[j] : 0.0f;
        if (FB && first && j < fb->end) {
#pragma unroll
          for (int n = 0; n < NG; ++n) {
            va[u][n][0] = fb->v[u][n][0];
            va[u][n][1] = fb->v[u][n][1];
          }
          continue;
        }
        const float* vrow = SM ? vs + (ok ? j : 0) * hd + 8 * r
                               : vbase + (ok ? CacheRow(bt_s, j, bs) : 0) * kv_dim + 8 * r;
        const bool fresh = !SM && j >= old_end;
#pragma unroll
        for (int n = 0; n < NG; ++n) {
          va[u][n][0] = va[u][n][1] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
          if (ok && 8 * r + 64 * n < wd) {
            va[u][n][0] = LoadKv4(vrow + 64 * n, fresh);
            va[u][n][1] = LoadKv4(vrow + 64 * n + 4, fresh);
          }
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (j0 + 32 * u < L) {
#pragma unroll
          for (int n = 0; n < NG; ++n) {
            const float4 v0 = va[u][n][0], v1 = va[u][n][1];
            acc[n][0] = fmaf(p[u], v0.x, acc[n][0]);
            acc[n][1] = fmaf(p[u], v0.y, acc[n][1]);
            acc[n][2] = fmaf(p[u], v0.z, acc[n][2]);
            acc[n][3] = fmaf(p[u], v0.w, acc[n][3]);
            acc[n][4] = fmaf(p[u], v1.x, acc[n][4]);
            acc[n][5] = fmaf(p[u], v1.y, acc[n][5]);
            acc[n][6] = fmaf(p[u], v1.z, acc[n][6]);
            acc[n][7] = fmaf(p[u], v1.w, acc[n][7]);
          }
        }
      }
    };
    if constexpr (FB) {
      if (c < L) batch(c, true);
      for (int j0 = c + 32 * U; j0 < L; j0 += 32 * U) batch(j0, false);
    } else {
      for (int j0 = c; j0 < L; j0 += 32 * U) batch(j0, false);
    }
  }
  TimelinePoint(5);
#pragma unroll
  for (int n = 0; n < NG; ++n)
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      float v = acc[n][i];
      v = v + __shfl_xor_sync(0xffffffffu, v, 16);  // classes c and c + 16
      v = v + __shfl_xor_sync(0xffffffffu, v, 8);   // then c and c + 8
      acc[n][i] = v;
    }
  if (lane < 8) {
#pragma unroll
    for (int n = 0; n < NG; ++n)
      if (8 * r + 64 * n < wd)
#pragma unroll
        for (int i = 0; i < 8; ++i) vpart[warp * hd + 64 * n + 8 * r + i] = acc[n][i];
  }
  sync();
  TimelinePoint(6);
  for (int d = tid; d < wd; d += kAttnThreads) {
    float v[kAttnWarps];
#pragma unroll
    for (int w = 0; w < kAttnWarps; ++w) v[w] = vpart[w * hd + d];
#pragma unroll
    for (int k = 0; k < 4; ++k) v[k] = v[k] + v[k + 4];
#pragma unroll
    for (int k = 0; k < 2; ++k) v[k] = v[k] + v[k + 2];
    v[0] = v[0] + v[1];
    o[PermutedIndex(h * hd + dim0 + d)] = v[0] / denom;
  }
}

// Attention of query head h of token m by kAttnThreads threads (tid, sync: their barrier), the
// block table of the token already in bt_s. q is read through L2 (another kernel or block wrote
// it); same_launch: this step's K/V rows were written by other blocks of this launch.
// FB: fb holds the first batch of the loops' rows of earlier steps (LoadAttnFirstBatch).
// SM: every K and V row of the head group is in shared memory (ks + j * hd, vs + j * hd).
// VNG, UV, width, dim0: the V pass covers only dims dim0 .. dim0 + width - 1, with VNG groups per
// warp in batches of UV (AttendValues); the scores are the whole head's in any case.
template <int NG, int U, bool FB, bool SM, int VNG = NG, int UV = U, typename Sync>
__device__ __forceinline__ void AttendHead(const float* q, const StepTokens& step, const AttentionShape& shape,
                                           const LayerKv& kv, float scale, float* out, int32_t out_stride, int h,
                                           int m, float* scores, const int32_t* bt_s, float* q_s, float* red,
                                           float* vpart, const AttnFirstBatch<NG, U>* fb, const float* ks,
                                           const float* vs, int tid, bool same_launch, Sync sync, int width = -1,
                                           int dim0 = 0) {
  const int warp = tid / 32, lane = tid % 32;
  const int hd = shape.head_dim, bs = shape.block_size;
  const int g = h / (shape.num_heads / shape.num_kv_heads);
  const int q_dim = shape.num_heads * hd, kv_dim = shape.num_kv_heads * hd;
  const int L = step.pos[m] + 1;
  // Rows from old_end on were written during this step: by this launch when same_launch (read
  // them through L2), else by an earlier kernel (any load is coherent).
  const int old_end = same_launch ? L - step.tokens : L;
  for (int d = tid; d < hd; d += kAttnThreads) q_s[d] = __ldcg(q + static_cast<int64_t>(m) * q_dim + h * hd + d);
  sync();
  TimelinePoint(1);

  // Pass 1: scores, eight lanes per position (four positions per warp instruction): lane r of a
  // group owns the classes 4r .. 4r + 3 of the canonical dot (terms d ≡ 4r + i mod 32, in
  // increasing d), so the group reads a K row contiguously; the tree's levels off 16, 8, 4 are
  // xor 4, 2, 1 inside the group, off 2 and 1 are inside the lane.
  {
    const int r = lane % 8;
    float qr[2 * NG][4];  // q terms 32k + 4r + i
#pragma unroll
    for (int k = 0; k < 2 * NG; ++k)
#pragma unroll
      for (int i = 0; i < 4; ++i) qr[k][i] = 32 * k + 4 * r < hd ? q_s[32 * k + 4 * r + i] : 0.0f;
    // One position's score from its K terms (the lane's four classes, then the tree).
    auto score = [&](const float4* k4, int j) {
      float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int k = 0; k < 2 * NG; ++k) {
        if (32 * k + 4 * r < hd) {  // hd is a multiple of 8: a lane's four terms are all in or all out
          v[0] = fmaf(qr[k][0], k4[k].x, v[0]);
          v[1] = fmaf(qr[k][1], k4[k].y, v[1]);
          v[2] = fmaf(qr[k][2], k4[k].z, v[2]);
          v[3] = fmaf(qr[k][3], k4[k].w, v[3]);
        }
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        v[i] = v[i] + __shfl_xor_sync(0xffffffffu, v[i], 4);  // classes c and c + 16
        v[i] = v[i] + __shfl_xor_sync(0xffffffffu, v[i], 2);  // c and c + 8
        v[i] = v[i] + __shfl_xor_sync(0xffffffffu, v[i], 1);  // c and c + 4
      }
      const float sc = (v[0] + v[2]) + (v[1] + v[3]);  // c and c + 2, then c and c + 1
      if (r == 0 && j < L) scores[j] = AttnScore(sc, scale, shape.softcap);
    };
    auto load_k = [&](float4* k4, int j) {
      const bool ok = j < L;
      const float* kp =
          SM ? ks + (ok ? j : 0) * hd + 4 * r
             : kv.k + (ok ? CacheRow(bt_s, j, bs) : 0) * kv_dim + g * hd + 4 * r;
      const bool fresh = !SM && j >= old_end;
#pragma unroll
      for (int k = 0; k < 2 * NG; ++k) {
        k4[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (ok && 32 * k + 4 * r < hd) k4[k] = LoadKv4(kp + 32 * k, fresh);
      }
    };
    if constexpr (U == 0) {
#pragma unroll 4
      for (int j = warp * 4 + lane / 8; j - lane / 8 < L; j += kAttnWarps * 4) {
        float4 k4[2 * NG];
        load_k(k4, j);
        score(k4, j);
      }
    } else {
      // U positions per batch, every load issued before the first FMA (see AttendValues; the
      // first batch apart with FB, as there).
      auto batch = [&](int j0, bool first) {
        float4 k4[U][2 * NG];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int j = j0 + kAttnWarps * 4 * u;
          if (FB && first && j < fb->end) {
#pragma unroll
            for (int k = 0; k < 2 * NG; ++k) k4[u][k] = fb->k[u][k];
          } else {
            load_k(k4[u], j);
          }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) score(k4[u], j0 + kAttnWarps * 4 * u);
      };
      const int first = warp * 4 + lane / 8;
      if constexpr (FB) {
        if (first - lane / 8 < L) batch(first, true);
        for (int j0 = first + kAttnWarps * 4 * U; j0 - lane / 8 < L; j0 += kAttnWarps * 4 * U) batch(j0, false);
      } else {
        for (int j0 = first; j0 - lane / 8 < L; j0 += kAttnWarps * 4 * U) batch(j0, false);
      }
    }
  }
  sync();
  TimelinePoint(2);

  // Pass 2: max (exact in any order), weights, canonical sum.
  float mx = -INFINITY;
  for (int j = tid; j < L; j += kAttnThreads) mx = fmaxf(mx, scores[j]);
  mx = WarpMax(mx);
  if (lane == 0) red[warp] = mx;
  sync();
  mx = red[0];
#pragma unroll
  for (int w = 1; w < kAttnWarps; ++w) mx = fmaxf(mx, red[w]);
  for (int j = tid; j < L; j += kAttnThreads) scores[j] = canonical_expf(scores[j] - mx);
  sync();
  TimelinePoint(3);
  float denom = 0.0f;
  for (int j = lane; j < L; j += 32) denom = denom + scores[j];
  denom = WarpTree(denom);
  TimelinePoint(4);

  // Pass 3: weighted sum of V (AttendValues).
  float* o = out + static_cast<int64_t>(m) * out_stride;
  if constexpr (VNG == NG && UV == U) {
    AttendValues<NG, U, FB, SM>(kv.v + g * hd + dim0, kv_dim, hd, bs, bt_s, scores, L, old_end, denom, o, h, vpart, fb,
                                SM ? vs + dim0 : vs, tid, sync, width, dim0);
  } else {
    static_assert(!FB, "the first batch's V rows are laid out for NG");
    AttendValues<VNG, UV, false, SM>(kv.v + g * hd + dim0, kv_dim, hd, bs, bt_s, scores, L, old_end, denom, o, h, vpart,
                                     static_cast<const AttnFirstBatch<VNG, UV>*>(nullptr), SM ? vs + dim0 : vs, tid,
                                     sync, width, dim0);
  }
}

// Where AttentionKernel<..., SM> puts the staged K rows in its dynamic shared memory (floats from
// the start, 16-byte aligned): after the scores and the block table.
__host__ __device__ constexpr int64_t AttnKvStageOffset(int32_t max_context) {
  return (int64_t{max_context} + max_context / 8 + 2 + 3) / 4 * 4;
}

// AttendHead's NG for a head dimension: the 8-dim groups of V one warp owns (kernels are
// instantiated per NG so each carries only the registers its head dimension needs).
__host__ __device__ constexpr int AttnGroups(int hd) { return hd <= kAttnWarps * 8 ? 1 : hd <= 2 * kAttnWarps * 8 ? 2 : kMaxHeadDim / (kAttnWarps * 8); }

// Pulls the K and V rows of positions [0, end) of a head's group toward this SM (L1 or L2).
// kL1: into this SM's L1; else into L2, `evict_last` asking L2 to keep them over the weights
// streaming past.
template <bool kL1, bool kEvictLast = false>
__device__ __forceinline__ void PrefetchKvRows(const LayerKv& kv, const int32_t* bt_s, int bs, int kv_dim, int hd,
                                               int g, int end, int tid, int threads) {
  for (int j = tid; j < end; j += threads) {
    const int64_t row = (CacheRow(bt_s, j, bs)) * kv_dim + g * hd;
    const char* kp = reinterpret_cast<const char*>(kv.k + row);
    const char* vp = reinterpret_cast<const char*>(kv.v + row);
    for (int off = 0; off < hd * 4; off += 128) {
      if constexpr (kL1) {
        asm volatile("prefetch.global.L1 [%0];" ::"l"(kp + off));
        asm volatile("prefetch.global.L1 [%0];" ::"l"(vp + off));
      } else if constexpr (kEvictLast) {
        asm volatile("prefetch.global.L2::evict_last [%0];" ::"l"(kp + off));
        asm volatile("prefetch.global.L2::evict_last [%0];" ::"l"(vp + off));
      } else {
        asm volatile("prefetch.global.L2 [%0];" ::"l"(kp + off));
        asm volatile("prefetch.global.L2 [%0];" ::"l"(vp + off));
      }
    }
  }
}

// prefetch: where the rows of earlier steps go before the wait (0: L1; 1: L2, kept there over the
// weight stream (evict_last); 2: both; 3: nowhere). U: positions a warp's loops load per batch before using
// them (0: the plain loops). FB: the loops' first batch of those rows goes to registers before
// the wait (AttnFirstBatch; U > 0), at the price of the registers. SM: every K and V row of the
// head group goes to shared memory (AttnKvStageOffset, max_context rows of each), those of earlier
// steps by cp.async before the wait, this step's with q after it, so the loops never wait on L2:
// with the weight stream running, each of their round trips there took about 1 us.
template <int NG, int U, bool FB = false, bool SM = false>
__global__ void __launch_bounds__(kAttnThreads)
    AttentionKernel(const float* q, StepTokens step, AttentionShape shape, LayerKv kv, float scale, float* out,
                    int32_t out_stride, int32_t max_context, int32_t prefetch) {
  TimelineScope timeline(TimelineKind::kAttention);
  extern __shared__ float4 att_smem_f4[];
  float* scores = reinterpret_cast<float*>(att_smem_f4);  // (context)
  int32_t* bt_s = reinterpret_cast<int32_t*>(scores + max_context);  // (max_context / block_size + 1)
  float* ks = reinterpret_cast<float*>(att_smem_f4) + AttnKvStageOffset(max_context);  // SM: (max_context, hd)
  float* vs = ks + static_cast<int64_t>(max_context) * shape.head_dim;                  // SM: (max_context, hd)
  __shared__ float q_s[kMaxHeadDim];
  __shared__ float red[kAttnWarps];
  __shared__ float vpart[kAttnWarps * 64 * NG];  // AttendValues' partials: NG covers head_dim <= 64 NG
  LetNextStart();
  const int h = blockIdx.x, m = blockIdx.y;
  const int hd = shape.head_dim, bs = shape.block_size;
  const int g = h / (shape.num_heads / shape.num_kv_heads);
  const int kv_dim = shape.num_kv_heads * hd;
  // Before waiting for the previous kernel: positions and block tables are the step's metadata,
  // copied in before the step's first kernel, so they can be read now; the block table goes to
  // shared memory once (one round trip instead of one per position). Rows of positions below
  // L - tokens were written by earlier steps (a step writes at most `tokens` positions of a
  // sequence, ending at pos), so they can be pulled into this SM's L1: nothing changes them
  // during the step. This step's own rows only go to L2, where every SM's writes meet, so a row
  // the previous kernel is still writing is read correctly after the wait.
  const int L = step.pos[m] + 1;
  const int32_t* bt = step.block_table + static_cast<int64_t>(m) * step.max_blocks;
  for (int b = threadIdx.x; b < (L + bs - 1) / bs; b += kAttnThreads) bt_s[b] = bt[b];
  __syncthreads();
  const int old_end = L - step.tokens;
  AttnFirstBatch<NG, U> fb;
  if constexpr (FB) LoadAttnFirstBatch(fb, kv, shape, g, bt_s, max(old_end, 0), threadIdx.x);
  if constexpr (SM) {
    const int chunks = hd / 4;  // 16-byte pieces of a row
    for (int i = threadIdx.x; i < max(old_end, 0) * chunks; i += kAttnThreads) {
      const int j = i / chunks, c4 = i % chunks;
      const int64_t row = (CacheRow(bt_s, j, bs)) * kv_dim + g * hd + 4 * c4;
      CpAsync16(ks + j * hd + 4 * c4, kv.k + row);
      CpAsync16(vs + j * hd + 4 * c4, kv.v + row);
    }
    CpAsyncCommit();
  }
  if (prefetch == 0 || prefetch == 2) PrefetchKvRows<true>(kv, bt_s, bs, kv_dim, hd, g, old_end, threadIdx.x, kAttnThreads);
  if (prefetch == 1 || prefetch == 2)
    PrefetchKvRows<false, true>(kv, bt_s, bs, kv_dim, hd, g, old_end, threadIdx.x, kAttnThreads);
  // (In a prefill, old_end is negative: every row is this step's.)
  for (int j = max(old_end, 0) + threadIdx.x; j < L; j += kAttnThreads) {
    const int64_t row = (CacheRow(bt_s, j, bs)) * kv_dim + g * hd;
    for (int off = 0; off < hd * 4; off += 128) {
      asm volatile("prefetch.global.L2 [%0];" ::"l"(reinterpret_cast<const char*>(kv.k + row) + off));
      asm volatile("prefetch.global.L2 [%0];" ::"l"(reinterpret_cast<const char*>(kv.v + row) + off));
    }
  }
  WaitForPrevious();
  timeline.Waited();
  if constexpr (SM) {
    // This step's rows (the previous kernel wrote them), in the round trip of q; AttendHead's
    // barrier after q publishes them and the copies.
    const int j0 = max(old_end, 0);
    for (int i = threadIdx.x; i < (L - j0) * hd; i += kAttnThreads) {
      const int j = j0 + i / hd, d = i % hd;
      const int64_t row = (CacheRow(bt_s, j, bs)) * kv_dim + g * hd + d;
      ks[j * hd + d] = __ldcg(kv.k + row);
      vs[j * hd + d] = __ldcg(kv.v + row);
    }
    CpAsyncWait<0>();
  }
  AttendHead<NG, U, FB, SM>(q, step, shape, kv, scale, out, out_stride, h, m, scores, bt_s, q_s, red, vpart,
                            FB ? &fb : nullptr, ks, vs, threadIdx.x, false, [] { __syncthreads(); });
}

// ---- Attention of the query heads that share a KV head, in one block (variant 10) ----
//
// One block per (KV head, part of its query heads, token): the K and V rows of the token's
// context are staged in shared memory once and serve every query head of the part, where
// AttentionKernel reads them once per query head (7 times through L2 at Qwen2.5-0.5B's grouping).
// The arithmetic is AttendHead's, term for term (docs/numerics.md section 5):
//   - one thread per (pair of heads, position) score, the K row read once for both: per head the
//     32 classes of the canonical dot (term d to class d mod 32, increasing d, from +0) in
//     registers, then the canonical tree, times scale;
//   - the first warp of each head's warps in the V pass computes the max, the weights
//     (canonical_expf) and the canonical denominator, and only that head's warps wait for them
//     (no block barrier between the weights and the V pass);
//   - one thread per (head, dim pair) of the weighted sum of V: the 32 classes by position
//     (increasing j), the tree, one divide.
// (One thread per (head, position) and a block barrier after the weights measured 1.4% slower
// at batch 32, 1.8% at 64.)
// So its bits are the other variants' and the CPU's. Positions are staged in chunks of `chunk`
// rows (a multiple of 32, so a chunk starts at class 0); the scores of the whole context stay in
// shared memory. HD is the head dimension (64 or 128); a part has at most 512 / HD heads, so
// that a thread owns at most one dim pair (1.5B's six query heads per KV head run as two parts).
constexpr int kGroupAttnMaxOutputs = 2 * kAttnThreads;  // (head, dim) outputs of a block: a pair per thread
constexpr int64_t kGroupAttnStageBytes = 160 * 1024;     // K and V chunk buffers
constexpr int64_t kGroupAttnMaxSmem = 220 * 1024;

// The canonical tree over 32 class accumulators held by one thread (acc[l] + acc[l + off] for off
// 16, 8, 4, 2, 1; the result in acc[0]). Written with constant bounds so the array stays in
// registers.
__device__ __forceinline__ void ClassTree(float (&acc)[32]) {
#pragma unroll
  for (int level = 0; level < 5; ++level)
#pragma unroll
    for (int l = 0; l < 16; ++l)
      if (l < (16 >> level)) acc[l] = acc[l] + acc[l + (16 >> level)];
}

template <int HD>
__global__ void __launch_bounds__(kAttnThreads, 1)
    GroupAttentionKernel(const float* q, StepTokens step, AttentionShape shape, LayerKv kv, float scale, float* out,
                         int32_t out_stride, int32_t max_context, int32_t hsplit, int32_t chunk,
                         int32_t prefetch_early) {
  constexpr int KS = HD + 4;  // K row stride: 16-byte loads of consecutive rows hit distinct banks
  extern __shared__ float4 grp_smem_f4[];
  const int G = shape.num_heads / shape.num_kv_heads;
  const int HB = (G + hsplit - 1) / hsplit;
  const int es_stride = (max_context + 3) / 4 * 4;
  float* ks = reinterpret_cast<float*>(grp_smem_f4);  // [chunk][KS]
  float* vs = ks + chunk * KS;                         // [chunk][HD]
  float* es = vs + chunk * HD;                         // [HB][es_stride]: scores, then weights
  float* qs = es + HB * es_stride;                     // [HB][KS]
  float* dn = qs + HB * KS;                            // [HB]: denominators
  int32_t* bt_s = reinterpret_cast<int32_t*>(dn + HB); // (max_context / block_size + 2)
  TimelineScope timeline(TimelineKind::kAttention);
  LetNextStart();
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = blockIdx.x / hsplit, part = blockIdx.x % hsplit, m = blockIdx.y;
  const int h0 = g * G + part * HB, hn = min(HB, G - part * HB);
  const int bs = shape.block_size, kv_dim = shape.num_kv_heads * HD, q_dim = shape.num_heads * HD;
  // Positions and block tables are the step's metadata (readable before the wait, as in
  // AttentionKernel); rows below L - tokens were written by earlier steps.
  const int L = step.pos[m] + 1;
  const int32_t* bt = step.block_table + static_cast<int64_t>(m) * step.max_blocks;
  for (int b = tid; b < (L + bs - 1) / bs; b += kAttnThreads) bt_s[b] = bt[b];
  __syncthreads();
  const int old_end = L - step.tokens;
  const bool one_chunk = L <= chunk;
  auto stage = [&](const float* src, float* dst, int stride, int c0, int j0, int j1) {
    constexpr int kPieces = HD / 4;  // 16-byte pieces of a row
    for (int i = tid; i < (j1 - j0) * kPieces; i += kAttnThreads) {
      const int j = j0 + i / kPieces, c4 = i % kPieces;
      const int64_t row = (CacheRow(bt_s, j, bs)) * kv_dim + g * HD + 4 * c4;
      CpAsync16(dst + (j - c0) * stride + 4 * c4, src + row);
    }
  };
  // Late blocks (kernels.h, LatePrefetchEarlyBlocks): the first prefetch_early blocks in launch
  // order ask L2 for the K and V pages of the tokens past theirs: block b takes tokens m0 + b,
  // m0 + b + E, ... (m0: the first token with no early block), every page of each (8 KB at
  // 0.5B: all KV heads' rows of 16 positions).
  if (const int lin = static_cast<int>(blockIdx.x + blockIdx.y * gridDim.x); lin < prefetch_early) {
    const int m0 = (prefetch_early + static_cast<int>(gridDim.x) - 1) / static_cast<int>(gridDim.x);
    const uint32_t page_bytes = static_cast<uint32_t>(bs * kv_dim) * 4;
    for (int mm = m0 + lin; mm < step.tokens; mm += prefetch_early) {
      const int pages = (step.pos[mm] + bs) / bs;  // (L2 is coherent: this step's rows may be among them)
      const int32_t* table = step.block_table + static_cast<int64_t>(mm) * step.max_blocks;
      for (int i = tid; i < 2 * pages; i += kAttnThreads) {
        const float* base = (i & 1) ? kv.v : kv.k;
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(
                         base + static_cast<int64_t>(table[i >> 1]) * bs * kv_dim),
                     "r"(page_bytes)
                     : "memory");
      }
    }
  }
  const int pre_end = min(max(old_end, 0), min(L, chunk));
  // Commit groups: K rows before the wait, V rows before it, then (after it) this step's K rows
  // and V rows, so that the scores wait for K only.
  stage(kv.k, ks, KS, 0, 0, pre_end);
  CpAsyncCommit();
  if (one_chunk) stage(kv.v, vs, HD, 0, 0, pre_end);
  CpAsyncCommit();
  WaitForPrevious();
  timeline.Waited();
  // q (the previous kernel wrote it) joins the commit group of this step's K rows below, so both
  // come in one round trip to L2 (reading q first would finish before those copies are issued).
  for (int i = tid; i < hn * (HD / 4); i += kAttnThreads) {
    const int hh = i / (HD / 4), c4 = i % (HD / 4);
    CpAsync16(qs + hh * KS + 4 * c4, q + static_cast<int64_t>(m) * q_dim + (h0 + hh) * HD + 4 * c4);
  }
  TimelinePoint(1);  // q requested

  // Pass 1: scores, chunk by chunk.
  for (int c0 = 0; c0 < L; c0 += chunk) {
    const int c1 = min(L, c0 + chunk), n = c1 - c0;
    if (c0 == 0) {
      stage(kv.k, ks, KS, 0, pre_end, c1);
      CpAsyncCommit();
      if (one_chunk) stage(kv.v, vs, HD, 0, pre_end, c1);
      CpAsyncCommit();
      CpAsyncWait<1>();  // q and every K row (the last group is V's)
    } else {
      stage(kv.k, ks, KS, c0, c0, c1);
      CpAsyncCommit();
      CpAsyncWait<0>();
    }
    __syncthreads();
    // Heads 2p and 2p + 1 (the last alone where hn is odd) of position j, the K row read once.
    const int pairs = (hn + 1) / 2;
    for (int idx = tid; idx < pairs * n; idx += kAttnThreads) {
      const int ha = 2 * (idx / n), hb = min(ha + 1, hn - 1), j = c0 + idx % n;
      const float4* k4 = reinterpret_cast<const float4*>(ks + (j - c0) * KS);
      const float4* qa4 = reinterpret_cast<const float4*>(qs + ha * KS);
      const float4* qb4 = reinterpret_cast<const float4*>(qs + hb * KS);
      float acc[32], bcc[32];
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float4 kk = k4[i], qa = qa4[i], qb = qb4[i];
        acc[4 * i + 0] = fmaf(qa.x, kk.x, 0.0f);
        acc[4 * i + 1] = fmaf(qa.y, kk.y, 0.0f);
        acc[4 * i + 2] = fmaf(qa.z, kk.z, 0.0f);
        acc[4 * i + 3] = fmaf(qa.w, kk.w, 0.0f);
        bcc[4 * i + 0] = fmaf(qb.x, kk.x, 0.0f);
        bcc[4 * i + 1] = fmaf(qb.y, kk.y, 0.0f);
        bcc[4 * i + 2] = fmaf(qb.z, kk.z, 0.0f);
        bcc[4 * i + 3] = fmaf(qb.w, kk.w, 0.0f);
      }
#pragma unroll
      for (int b = 1; b < HD / 32; ++b)
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const float4 kk = k4[8 * b + i], qa = qa4[8 * b + i], qb = qb4[8 * b + i];
          acc[4 * i + 0] = fmaf(qa.x, kk.x, acc[4 * i + 0]);
          acc[4 * i + 1] = fmaf(qa.y, kk.y, acc[4 * i + 1]);
          acc[4 * i + 2] = fmaf(qa.z, kk.z, acc[4 * i + 2]);
          acc[4 * i + 3] = fmaf(qa.w, kk.w, acc[4 * i + 3]);
          bcc[4 * i + 0] = fmaf(qb.x, kk.x, bcc[4 * i + 0]);
          bcc[4 * i + 1] = fmaf(qb.y, kk.y, bcc[4 * i + 1]);
          bcc[4 * i + 2] = fmaf(qb.z, kk.z, bcc[4 * i + 2]);
          bcc[4 * i + 3] = fmaf(qb.w, kk.w, bcc[4 * i + 3]);
        }
      ClassTree(acc);
      ClassTree(bcc);
      es[ha * es_stride + j] = AttnScore(acc[0], scale, shape.softcap);
      if (hb != ha) es[hb * es_stride + j] = AttnScore(bcc[0], scale, shape.softcap);
    }
    // One chunk's V rows (the only copies still in flight at the last chunk) are waited for here,
    // so that this barrier publishes them for pass 2-3.
    if (c1 == L) CpAsyncWait<0>();
    __syncthreads();  // the chunk's K rows are free again; the last chunk's scores are complete
  }

  TimelinePoint(2);  // scores
  // Pass 2 in the warps of pass 3: the first warp of each head computes its max (exact in any
  // order), weights and canonical denominator (each lane sums the weights it wrote itself), and
  // only the head's own warps wait for them; the V rows of one chunk were waited for before the
  // scores' last barrier.
  constexpr int kWarpsPerHead = HD / 64;
  if (tid < hn * (HD / 2)) {
    const int h = tid / (HD / 2);
    if (warp % kWarpsPerHead == 0) {
      float* e = es + h * es_stride;
      float mx = -INFINITY;
      for (int j = lane; j < L; j += 32) mx = fmaxf(mx, e[j]);
      mx = WarpMax(mx);
      float den = 0.0f;
#pragma unroll 4
      for (int j = lane; j < L; j += 32) {
        const float w = canonical_expf(e[j] - mx);
        e[j] = w;
        den = den + w;
      }
      den = WarpTree(den);
      if (lane == 0) dn[h] = den;
    }
    if constexpr (kWarpsPerHead == 1) {
      __syncwarp();
    } else {
      asm volatile("bar.sync %0, %1;" ::"r"(1 + h), "n"(kWarpsPerHead * 32) : "memory");
    }
  }
  TimelinePoint(3);  // weights and denominators

  // Pass 3: weighted sum of V, a (head, dim pair) per thread, chunk by chunk.
  const bool active = tid < hn * (HD / 2);
  const int h = active ? tid / (HD / 2) : 0, d = 2 * (tid % (HD / 2));
  float a0[32], a1[32];
#pragma unroll
  for (int c = 0; c < 32; ++c) a0[c] = a1[c] = 0.0f;
  for (int c0 = 0; c0 < L; c0 += chunk) {
    const int c1 = min(L, c0 + chunk);
    if (!one_chunk) {
      stage(kv.v, vs, HD, c0, c0, c1);
      CpAsyncCommit();
      CpAsyncWait<0>();
      __syncthreads();
    }
    if (active) {
      const float* e = es + h * es_stride;
      int j = c0;
      for (; j + 32 <= c1; j += 32) {
#pragma unroll
        for (int c = 0; c < 32; ++c) {
          const float w = e[j + c];
          const float2 v = *reinterpret_cast<const float2*>(vs + (j + c - c0) * HD + d);
          a0[c] = fmaf(w, v.x, a0[c]);
          a1[c] = fmaf(w, v.y, a1[c]);
        }
      }
#pragma unroll
      for (int c = 0; c < 32; ++c) {
        if (j + c < c1) {
          const float w = e[j + c];
          const float2 v = *reinterpret_cast<const float2*>(vs + (j + c - c0) * HD + d);
          a0[c] = fmaf(w, v.x, a0[c]);
          a1[c] = fmaf(w, v.y, a1[c]);
        }
      }
    }
    if (!one_chunk) __syncthreads();  // the chunk's V rows are free again
  }
  TimelinePoint(4);  // V loop done
  if (active) {
    ClassTree(a0);
    ClassTree(a1);
    float* o = out + static_cast<int64_t>(m) * out_stride;
    o[PermutedIndex((h0 + h) * HD + d)] = a0[0] / dn[h];
    o[PermutedIndex((h0 + h) * HD + d + 1)] = a1[0] / dn[h];
  }
}

// How GroupAttentionKernel runs a shape (false: it cannot).
struct GroupAttentionPlan {
  int32_t hsplit = 0, chunk = 0;
  int64_t smem = 0;
};
// parts: query-head parts per KV head wanted (at least what the threads need, at most one head
// each).
bool PlanGroupAttention(const AttentionShape& shape, int32_t max_context, GroupAttentionPlan* plan, int parts) {
  const int hd = shape.head_dim;
  if ((hd != 64 && hd != 128) || shape.num_kv_heads <= 0 || shape.num_heads % shape.num_kv_heads != 0) return false;
  if (shape.block_size < 8 || max_context < 1) return false;
  const int G = shape.num_heads / shape.num_kv_heads;
  const int hsplit = std::min(G, std::max(parts, (G * hd + kGroupAttnMaxOutputs - 1) / kGroupAttnMaxOutputs));
  const int hb = (G + hsplit - 1) / hsplit;
  if (hb * hd > kGroupAttnMaxOutputs) return false;
  const int64_t row_bytes = int64_t{2 * hd + 4} * 4;
  const int32_t max_chunk = static_cast<int32_t>(kGroupAttnStageBytes / row_bytes) / 32 * 32;
  const int32_t chunk = std::min<int32_t>((max_context + 31) / 32 * 32, max_chunk);
  const int64_t es_stride = (max_context + 3) / 4 * 4;
  const int64_t smem = chunk * row_bytes + 4 * (hb * es_stride + hb * (hd + 4) + hb) + 4 * (max_context / 8 + 2);
  if (smem > kGroupAttnMaxSmem) return false;
  *plan = {hsplit, chunk, smem};
  return true;
}
