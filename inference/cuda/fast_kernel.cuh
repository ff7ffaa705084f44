// FastLinearKernel, the fast profile's product (fast_linear.h), and its device helpers: the
// tensor-core pieces, the copies' ring, the clusters' inbox and the epilogues.
//
// A part of fast_linear.cu's translation unit, included there inside its namespaces, after the
// helpers it defines and the parts before this one: not a header of its own.

// Not volatile: the compiler may interleave independent mma with other work; those on one
// accumulator stay in program order through their data dependence (the order of the sums).
__device__ __forceinline__ void Mma(float (&d)[4], const uint4& a, uint32_t b0, uint32_t b1) {
  asm(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b0), "r"(b1));
}

// The three pieces of four activations (fast_tiles.h, FastSplit), packed in pairs for the B
// operand: element 0 in the low half.
struct Pieces {
  uint32_t hi[2], mid[2], lo[2];
};
__device__ __forceinline__ Pieces SplitFour(const float4 v) {
  const FastPieces q[4] = {FastSplit(v.x), FastSplit(v.y), FastSplit(v.z), FastSplit(v.w)};
  Pieces p;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    p.hi[i] = __byte_perm(q[2 * i].hi, q[2 * i + 1].hi, 0x7632);
    p.mid[i] = __byte_perm(q[2 * i].mid, q[2 * i + 1].mid, 0x7632);
    p.lo[i] = __byte_perm(q[2 * i].lo, q[2 * i + 1].lo, 0x7632);
  }
  return p;
}

// One step of one (tile, token group): the pieces lo, mid, hi in that order (the order of the sums).
__device__ __forceinline__ void MmaPieces(float (&d)[4], const uint4& w, const Pieces& p) {
  Mma(d, w, p.lo[0], p.lo[1]);
  Mma(d, w, p.mid[0], p.mid[1]);
  Mma(d, w, p.hi[0], p.hi[1]);
}

// A token's sum of squares over its 4 lanes (t = lane % 4): (t0 + t1) + (t2 + t3) on lane t0,
// the order the norm adds them in.
__device__ __forceinline__ float TokenLanesSum(float q) {
  q = q + __shfl_xor_sync(0xffffffffu, q, 1);
  return q + __shfl_xor_sync(0xffffffffu, q, 2);
}

__device__ __forceinline__ uint32_t SharedAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void CopyAsync16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(SharedAddr(dst)), "l"(src) : "memory");
}
// To a shared-space address computed once (SharedAddr of a generic pointer into a cluster kernel's
// shared memory reads the CTA's cluster rank each time).
__device__ __forceinline__ void CopyAsync16To(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
// The same with the bytes read from src (16 or 0; the rest of the 16 are zeros).
__device__ __forceinline__ void CopyAsync16OrZerosTo(uint32_t dst, const void* src, uint32_t src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
// Volatile, so that no read of a slot moves above the wait for its copies.
__device__ __forceinline__ float4 LoadShared16(uint32_t at) {
  float4 v;
  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(at));
  return v;
}
__device__ __forceinline__ uint4 LoadShared16u(uint32_t at) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(at));
  return v;
}
__device__ __forceinline__ void CommitCopies() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// The cluster's split barrier: a sliced product arrives at the start and waits before its first
// push into another block's shared memory, which must have started.
__device__ __forceinline__ void ClusterArriveRelaxed() { asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory"); }
__device__ __forceinline__ void ClusterWait() { asm volatile("barrier.cluster.wait.aligned;" ::: "memory"); }
// A sliced product's inbox barrier (an mbarrier in the finishing block's shared memory): the
// cluster's blocks write their sums into the inbox with st.async, each store completing its share
// of the barrier's transaction bytes, so the owner waits for exactly its data; no fence and no
// cluster barrier stand between the pushes and the sums (cluster.sync() compiled to a GPU-scope
// memory barrier and an L1 invalidate: ncu put 14% of down's stall samples there).
__device__ __forceinline__ void InboxBarrierInit(uint64_t* bar, uint32_t bytes) {
  const uint32_t a = SharedAddr(bar);
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(a) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(a), "r"(bytes) : "memory");
}
// The address in cluster rank `rank`'s shared memory of this block's shared address `a`.
__device__ __forceinline__ uint32_t ClusterAddr(uint32_t a, int rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(rank));
  return r;
}
__device__ __forceinline__ void PushAsync(uint32_t dst, float2 v, uint32_t bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v2.f32 [%0], {%1, %2}, [%3];" ::"r"(dst),
               "f"(v.x), "f"(v.y), "r"(bar)
               : "memory");
}
__device__ __forceinline__ void PushAsync(uint32_t dst, float v, uint32_t bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.f32 [%0], %1, [%2];" ::"r"(dst), "f"(v), "r"(bar)
               : "memory");
}
// Every thread: until the inbox's bytes have all landed (phase 0), seen with cluster-scope acquire.
__device__ __forceinline__ void InboxBarrierWait(uint64_t* bar) {
  const uint32_t a = SharedAddr(bar);
  uint32_t done = 0;
  while (!done)
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], 0; selp.u32 %0, 1, 0, p; }"
        : "=r"(done)
        : "r"(a)
        : "memory");
}

// The deepest ring a warp of a one-token-group block gets (FastShape::kStages); the kernel lab
// compiles other depths.
#ifndef ROTE_FAST_MAX_RING_SLOTS
#define ROTE_FAST_MAX_RING_SLOTS 12
#endif

template <int N>
__device__ __forceinline__ void WaitCopies() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// SB: the K slices one block runs (merged slices, fast_shapes.h FastMergesSlices): 8 * SB warps, warps
// 8 s to 8 s + 7 on slice s, so the slices' sums meet in the block's shared memory instead of a
// cluster's. 1 for the others (SLICED: the slices are a cluster's blocks).
// DEEP: a block of two token groups launched for one token tile (up to 16 tokens) takes the deep
// ring too (a second instance of the shape; kStages below).
template <int RT, int NTK, bool NORM, bool SLICED, int SB = 1, bool DEEP = false>
struct FastShape {
  static_assert(SB == 1 || !SLICED, "a block's own slices or a cluster's, not both");
  static constexpr int kBlockWarps = kWarps * SB;
  static constexpr int kThreads = kBlockWarps * 32;
  static constexpr int kBlocksPerSM = SB == 1 ? 2 : 1;
  static constexpr int kRows = kFastTileRows * RT;
  static constexpr int kToks = 8 * NTK;
  // One lane's ring slot: RT weight fragments and NTK activation float4s, 16 bytes each; slot i
  // of a warp is [RT + NTK][32 lanes] x 16 bytes, so lanes touch consecutive 16-byte words. (The
  // norm weights are staged apart, kNormOffset: a slot for them cost the 64 x 16 block a ring
  // slot, batch 32 -3%.)
  static constexpr int kSlotBytes = (RT + NTK) * 32 * 16;
  // Ring slots per warp (kStages - 1 steps in flight): as many as fit two blocks in a
  // multiprocessor's shared memory (about 110 KB of ring each), at most 12 in blocks of one token
  // group (up to 8 tokens) and in DEEP ones (two groups, up to 16 tokens), 5 in the others. The
  // loop waits on its copies most of the time (ncu: the instruction after the wait carries a
  // quarter of the stall samples), so the deeper ring pays where a step computes little: up to 8
  // tokens, 12 slots instead of 5 took decode at batch 1 from 183 to 261 tok/s at 7B and from
  // 1,292 to 1,745 at 0.5B (with the zero-filled copies below; H200, docs/fast_profile.md). With
  // two token groups 12 slots made 16 tokens 8-9% faster and 32 tokens 1.5-2.7% slower, hence
  // DEEP for launches of one token tile only. Otherwise 5: 64 rows by 16 tokens went from 3 slots
  // to 4 (batch 32 +4%, H100), while 64 rows by 32 tokens stays at 3 (4 would leave one block
  // per multiprocessor: batch 64 -5%).
  // A block of merged slices runs alone on its multiprocessor, with both blocks' budget.
  static constexpr int kRingBudget = 110 * 1024 * (SB == 1 ? 1 : 2);
  static constexpr int kFit = kRingBudget / (kBlockWarps * kSlotBytes);
  static constexpr int kMaxStages = SB == 1 && (NTK == 1 || DEEP) ? ROTE_FAST_MAX_RING_SLOTS : 5;
  static constexpr int kStages = kFit < kMaxStages ? kFit : kMaxStages;
  // (FastMergedShapeFits keeps merged slices to shapes whose ring has 3 slots.)
  static_assert(kStages >= 3, "a ring of fewer than 3 slots has nothing in flight while a step computes");
  static constexpr int kRingBytes = kBlockWarps * kStages * kSlotBytes;
  // The warps' sums: [warp][token][row], so that the epilogue reads a row pair as one float2;
  // rows padded by 4 floats so that a warp's stores of one accumulator (lanes g + 8 t) fall in 32
  // distinct banks (the earlier [warp][row][token] layout conflicted 4 ways: ncu, gate|up). With
  // the norm, then the warps' sums of squares, [warp][token].
  static constexpr int kSumRowStride = kRows + 4;
  static constexpr int kSquaresOffset = kBlockWarps * kToks * kSumRowStride * 4;
  // With the norm, each token's scale follows the squares ([token]): computed once per token
  // instead of once per row pair.
  static constexpr int kScalesOffset = kSquaresOffset + (NORM ? kBlockWarps * kToks * 4 : 0);
  static constexpr int kSumBytes = kScalesOffset + (NORM ? kToks * 4 : 0);
  // A sliced product's inbox, where the cluster's blocks push their sums of the row pairs this
  // block finishes ([slice][pair], float2, at most kPairs * kToks + splits - 1 pairs in all), then
  // with the norm their sums of squares ([slice][token]). Past the ring and the warps' sums: a
  // block may push into it while its owner is still in its loop.
  static constexpr int kInboxOffset = (kRingBytes > kSumBytes ? kRingBytes : kSumBytes + 15) / 16 * 16;
  static constexpr int kInboxBytes =
      (2 * (kRows / 2 * kToks + kFastMaxSplits) + (NORM ? kFastMaxSplits * kToks + kToks : 0)) * 4;
  static constexpr int kInboxBarrierOffset = (kInboxOffset + kInboxBytes + 7) / 8 * 8;  // its mbarrier
  static constexpr int kSmemBytes =
      SLICED ? kInboxBarrierOffset + 8 : (kRingBytes > kSumBytes ? kRingBytes : kSumBytes);
  static_assert(kBlocksPerSM * (kSmemBytes + 1024) <= 228 * 1024, "two blocks (one of merged slices) must fit in a multiprocessor");
  // With the norm, its weights for the block's steps (cols_padded floats, in their row order)
  // follow everything else, staged before the wait: one shared load a step in the loop instead
  // of a global one. With the global load, batch 32 ran about 4% slower than with no load at all
  // (an ablation), and reading it a step ahead recovered only a quarter of that; staged and read
  // a step ahead, batch 32 is 1.7% faster, 1.5B 3%. Up to what two blocks leave free; a longer row
  // keeps the global load (FastNormStaged).
  static constexpr int kNormOffset = (kSmemBytes + 15) / 16 * 16;
  static constexpr int kNormCapacityBytes = NORM ? (228 * 1024 / kBlocksPerSM - 1024 - kNormOffset) / 16 * 16 : 0;
  static constexpr int kMaxSmemBytes = kNormOffset + kNormCapacityBytes;
};

// Whether a product's norm weights (cols_padded floats) fit in the block's shared memory.
template <class S>
constexpr bool FastNormStaged(int cols_padded) {
  return S::kNormCapacityBytes > 0 && cols_padded * 4 <= S::kNormCapacityBytes;
}


static_assert(kGroupCols == kFastLaneGroupCols, "FastLaneIndex is PermutedIndex's order");

// What the epilogue of rows (n, n + 1) of token m reads besides the sums. A thread loads it for
// its first row pair at the start of the kernel (constants and step metadata before waiting for
// the previous kernel, the residual right after), so no round trip to L2 stands between the
// finished sums and the store; further pairs (prefill-sized blocks) load it when they get there.
struct FastEpilogue {
  float add0 = 0.0f, add1 = 0.0f;  // the bias (kAddBias; kRopeStore with a bias), or the residual
  float cos = 0.0f, sin = 0.0f;    // kRopeStore, q and k rows: the pair's rotation
  float* dst = nullptr;            // kRopeStore: where the pair goes (x0 at dst, x1 at dst + gap)
  int gap = 1;
  bool rotate = false;
};

// Rows n, n + 1 of q|k|v are in rotary pair order (kernels.h, RopePairRow): dims i and i + half
// of a q or k head, or two consecutive v dims. Constants and step metadata only.
// E is a.epilogue as a constant (WithFastEpilogue), so a pair's chain has no branch on it.
template <LinearEpilogue E>
__device__ __forceinline__ FastEpilogue PlanFastEpilogue(const LinearArgs& a, int m, int n) {
  FastEpilogue e;
  const int rows = a.w.rows;
  if constexpr (E == LinearEpilogue::kAddBias || E == LinearEpilogue::kRopeStore) {
    if (a.bias != nullptr) {
      e.add0 = a.bias[n];
      if (n + 1 < rows) e.add1 = a.bias[n + 1];
    }
  }
  if (E == LinearEpilogue::kRopeStore && n + 1 < rows) {
    const RopeArgs& ra = a.rope;
    const int hd = ra.head_dim, half = hd / 2;
    const int q_rows = ra.num_heads * hd, qk_rows = q_rows + ra.num_kv_heads * hd, kv_dim = ra.num_kv_heads * hd;
    const int pos = ra.pos[m];
    const int64_t slot_row = CacheRow(ra.block_table + static_cast<int64_t>(m) * ra.max_blocks, pos, ra.block_size);
    if (n < qk_rows) {
      const int head = n / hd, i = (n % hd) / 2;
      e.cos = ra.cos[static_cast<int64_t>(pos) * half + i];
      e.sin = ra.sin[static_cast<int64_t>(pos) * half + i];
      e.dst = (head < ra.num_heads ? ra.q_out + static_cast<int64_t>(m) * q_rows + head * hd
                                   : ra.k_cache + slot_row * kv_dim + (head - ra.num_heads) * hd) +
              i;
      e.gap = half;
      e.rotate = true;
    } else {
      e.dst = ra.v_cache + slot_row * kv_dim + (n - qk_rows);
      e.gap = 1;
    }
  }
  return e;
}

// The residual the pair adds (kAddResidual): written by an earlier kernel, so read after the wait.
template <LinearEpilogue E>
__device__ __forceinline__ void LoadFastResidual(const LinearArgs& a, int m, int n, FastEpilogue* e) {
  if constexpr (E == LinearEpilogue::kAddResidual) {
    const float* out = a.out + static_cast<int64_t>(m) * a.out_stride;
    e->add0 = out[a.out_lane_rows ? FastLaneIndex(n) : n];
    if (n + 1 < a.w.rows) e->add1 = out[a.out_lane_rows ? FastLaneIndex(n + 1) : n + 1];
  }
}

// out[m][n] and out[m][n + 1] from the finished sums of rows n, n + 1 (n even) and the
// epilogue's operands (PlanFastEpilogue, LoadFastResidual).
template <LinearEpilogue E>
__device__ __forceinline__ void StoreFast(const LinearArgs& a, int m, int n, float v0, float v1, const FastEpilogue& e) {
  const int rows = a.w.rows;
  if constexpr (E == LinearEpilogue::kRopeStore) {
    // Bias, rotary (q and k rows), then q to its buffer and k, v into the cache: RopeStoreKernel's
    // arithmetic (no q/k norms), so the same bits.
    if (e.dst == nullptr) return;
    float x0 = v0, x1 = v1;
    if (a.bias != nullptr) {
      x0 = x0 + e.add0;
      x1 = x1 + e.add1;
    }
    if (e.rotate) canonical_rotate(x0, x1, e.cos, e.sin);
    e.dst[0] = x0;
    e.dst[e.gap] = x1;
  } else if constexpr (E == LinearEpilogue::kSiluMul) {
    // Rows 2n' (gate) and 2n' + 1 (up) of the interleaved matrix.
    float* out = a.out + static_cast<int64_t>(m) * a.out_stride;
    if (n + 1 < rows) {
      const int np = n / 2;
      out[a.out_lane_rows ? FastLaneIndex(np) : np] = canonical_silu(v0) * v1;
    }
  } else {
    float* out = a.out + static_cast<int64_t>(m) * a.out_stride;
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const int col = n + k;
      if (col >= rows) break;
      const float v = k == 0 ? v0 : v1;
      const float add = k == 0 ? e.add0 : e.add1;
      const int o = a.out_lane_rows ? FastLaneIndex(col) : col;
      if constexpr (E == LinearEpilogue::kAddBias) {
        out[o] = v + add;
      } else if constexpr (E == LinearEpilogue::kAddResidual) {
        out[o] = add + v;
      } else {
        out[o] = v;
      }
    }
  }
}

// Calls f(std::integral_constant<LinearEpilogue, E>{}) with E = kind: the epilogue's code is
// compiled once per kind, and the kind is branched on once per block instead of in every pair.
template <typename F>
__device__ __forceinline__ void WithFastEpilogue(LinearEpilogue kind, F&& f) {
  switch (kind) {
    case LinearEpilogue::kAddBias:
      f(std::integral_constant<LinearEpilogue, LinearEpilogue::kAddBias>{});
      break;
    case LinearEpilogue::kAddResidual:
      f(std::integral_constant<LinearEpilogue, LinearEpilogue::kAddResidual>{});
      break;
    case LinearEpilogue::kSiluMul:
      f(std::integral_constant<LinearEpilogue, LinearEpilogue::kSiluMul>{});
      break;
    case LinearEpilogue::kRopeStore:
      f(std::integral_constant<LinearEpilogue, LinearEpilogue::kRopeStore>{});
      break;
    default:
      f(std::integral_constant<LinearEpilogue, LinearEpilogue::kStore>{});
      break;
  }
}

// EPI: the epilogue's kind fixed at compile time (a LinearEpilogue as int), or -1: a.epilogue's,
// branched on once per block (WithFastEpilogue). The kernels of the common products carry only
// their own epilogue: five kinds, each unrolled over the thread's pairs, were half of a kernel's
// code, and code that a block does not run but jumps over measured slower in the one-launch step
// (docs/cuda.md, "Code size").
template <int EPI, typename F>
__device__ __forceinline__ void WithKernelEpilogue(LinearEpilogue kind, F&& f) {
  if constexpr (EPI >= 0)
    f(std::integral_constant<LinearEpilogue, static_cast<LinearEpilogue>(EPI)>{});
  else
    WithFastEpilogue(kind, f);
}

// NORM (a.norm_weight set): x is the residual stream and the product is RMSNorm's, computed as
// rms_scale(sum of x^2) * (W (x * norm_weight)): each lane scales its activations by the norm
// weights before splitting them and sums their squares as they pass; the squares are added like
// the products (lanes t in an xor butterfly, warps in warp order, slices in slice order) and the
// scale multiplies the finished sums, before the epilogue. No separate norm launch, no pass over
// the rows before the loop.
//
// SB > 1 (merged slices): the block runs all SB = splits slices of its tile, warp w on slice
// w / 8 as warp w % 8 of a slice's block would, and adds the slices' sums from its own shared
// memory in slice order: the same order, so the same bits, with no cluster, no push and no
// cluster barrier.
template <int RT, int NTK, bool NORM, bool SLICED, int SB, int EPI, bool DEEP = false>
__global__ void __launch_bounds__(FastShape<RT, NTK, NORM, SLICED, SB, DEEP>::kThreads,
                                  FastShape<RT, NTK, NORM, SLICED, SB, DEEP>::kBlocksPerSM)
    FastLinearKernel(LinearArgs a, int32_t splits, bool norm_staged) {
  using S = FastShape<RT, NTK, NORM, SLICED, SB, DEEP>;
  constexpr int kThreads = S::kThreads;
  constexpr int kStages = S::kStages;
  extern __shared__ __align__(16) unsigned char fast_smem[];
  TimelineScope timeline(TimelineKind::kLinear);
  LetNextStart();
  // warp: the block's; slice_warp: its place in its slice (which steps it takes).
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int slice_warp = warp % kWarps;
  const int rows = a.w.rows;
  const int steps = a.w.cols_padded / kStepCols;
  const int split = SB > 1 ? warp / kWarps : static_cast<int>(blockIdx.z);
  uint64_t* inbox_full = reinterpret_cast<uint64_t*>(fast_smem + S::kInboxBarrierOffset);
  if constexpr (SLICED) {
    // The inbox's barrier expects every slice's pushes of the pairs this block finishes (idx =
    // split mod splits: float2 each) and, with the norm, of its tokens' squares; initialised before
    // this block reports that it has started (the pushes wait for that).
    if (tid == 0) {
      constexpr int kTotal = S::kRows / 2 * S::kToks;
      const int finished = (kTotal - split + splits - 1) / splits;
      InboxBarrierInit(inbox_full, static_cast<uint32_t>(splits * (8 * finished + (NORM ? 4 * S::kToks : 0))));
    }
    ClusterArriveRelaxed();  // this block has started
  }
  const int s_begin = static_cast<int>(static_cast<int64_t>(split) * steps / splits);
  const int s_end = static_cast<int>(static_cast<int64_t>(split + 1) * steps / splits);
  const int nsteps = s_end - s_begin > slice_warp ? (s_end - s_begin - slice_warp + kWarps - 1) / kWarps : 0;
  const int m0 = blockIdx.x * S::kToks;
  const int mcount = min(S::kToks, a.tokens - m0);
  const int tile0 = blockIdx.y * RT;
  const int last_tile = (rows + kFastTileRows - 1) / kFastTileRows - 1;
  const uint4* tiles = static_cast<const uint4*>(a.w.fast_tiles);
  unsigned char* ring = fast_smem + warp * kStages * S::kSlotBytes;

  // This lane's activation rows. A token past the batch copies zeros (the copy's source size 0):
  // its column of the mma gives only its own sums, which are never stored, and every lane still
  // issues its copy (no divergent branches). Reading a token of the tile again instead cost the
  // lanes of a copy one address at 1 token (7B's o at one token took 19.2 us against 14.6 at 8,
  // H200). Offsets in floats (32 bits: fewer registers than pointers; CanRunFastLinear checks
  // the range).
  int32_t xoff[NTK];
  uint32_t act_bytes[NTK];
#pragma unroll
  for (int j = 0; j < NTK; ++j) {
    const int m = m0 + (8 * j + g) % mcount;
    xoff[j] = (a.x_rows != nullptr ? a.x_rows[m] : m) * a.x_stride + 4 * t;
    act_bytes[j] = 8 * j + g < mcount ? 16u : 0u;
  }
  // Each copy's source advances by a fixed stride from one of the warp's steps to the next, and its
  // destination slot goes round the ring: pointers and offsets kept and advanced, not recomputed
  // from the step's index (that arithmetic, 64-bit with i % kStages, and the shared window's base
  // read back at every copy, were about a third of the loop's instructions in the SASS). Tiles
  // past the matrix repeat the last one (their sums are never stored).
  constexpr int kWeightStride = kWarps * 32 * 16;      // bytes from one of the warp's steps to the next
  constexpr int kActStride = kWarps * kStepCols * 4;  // the same in an activation row
  const int s_first = s_begin + slice_warp;
  const unsigned char* weight_src[RT];
#pragma unroll
  for (int r = 0; r < RT; ++r)
    weight_src[r] = reinterpret_cast<const unsigned char*>(
        tiles + (static_cast<int64_t>(min(tile0 + r, last_tile)) * steps + s_first) * 32 + lane);
  const uint32_t ring_s = SharedAddr(ring) + lane * 16;  // this lane's word of slot 0
  auto issue_weights = [&](uint32_t slot_s) {
#pragma unroll
    for (int r = 0; r < RT; ++r) {
      CopyAsync16To(slot_s + r * 32 * 16, weight_src[r]);
      weight_src[r] += kWeightStride;
    }
  };
  const unsigned char* act_src[NTK];  // set after the wait (the activations are the previous kernel's)
  auto issue_acts = [&](uint32_t slot_s) {
#pragma unroll
    for (int j = 0; j < NTK; ++j) {
      CopyAsync16OrZerosTo(slot_s + (RT + j) * 32 * 16, act_src[j], act_bytes[j]);
      act_src[j] += kActStride;
    }
  };

  float squares[NTK];  // NORM: this lane's token's sum of squares over its columns
#pragma unroll
  for (int j = 0; j < NTK; ++j) squares[j] = 0.0f;
  float acc[RT][NTK][4];
#pragma unroll
  for (int r = 0; r < RT; ++r)
#pragma unroll
    for (int j = 0; j < NTK; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[r][j][e] = 0.0f;

  // Prologue: the first kStages - 1 steps' weights before the wait (they are constants), their
  // activations after it; one commit group per step, the first also holding the early weights.
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i)
    if (i < nsteps) issue_weights(ring_s + i * S::kSlotBytes);
  // The epilogue's operands of this thread's first row pair (FastEpilogue): the pairs of the
  // finishing loops below, sliced (the cluster's ranks interleave) or not.
  constexpr int kPairs = S::kRows / 2;
  const int row0 = tile0 * kFastTileRows;
  const int first_idx = SLICED ? split + splits * tid : tid;
  const int first_tok = first_idx / kPairs, first_n = row0 + 2 * (first_idx % kPairs);
  // Not for 64 x 32 blocks (the lm_head from 17 tokens, prefill): the operands' registers, held
  // through the loop, made them spill.
  constexpr bool kEarlyEpilogue = RT * NTK < 16;
  const bool first_ok =
      kEarlyEpilogue && first_idx < kPairs * S::kToks && first_tok < mcount && first_n < rows;
  FastEpilogue first_epilogue;
  if (first_ok)
    WithKernelEpilogue<EPI>(a.epilogue, [&](auto kind) {
      first_epilogue = PlanFastEpilogue<decltype(kind)::value>(a, m0 + first_tok, first_n);
    });
  if constexpr (!SLICED && SB == 1) {
    // Late blocks (kernels.h, LatePrefetchEarlyBlocks): the first prefetch_early_blocks blocks in
    // launch order ask L2 for what every later row block copies before its wait, the first
    // kStages - 1 steps of each warp (steps 0 .. 8 (kStages - 1) - 1: contiguous in each row
    // tile). Block b takes the row blocks y0 + b, y0 + b + E, ... (y0: the first with no early
    // block).
    const int early = a.prefetch_early_blocks;
    const int b = static_cast<int>(blockIdx.x + blockIdx.y * gridDim.x);
    if (b < early) {
      const int y0 = (early + static_cast<int>(gridDim.x) - 1) / static_cast<int>(gridDim.x);
      const uint32_t bytes = static_cast<uint32_t>(min((kStages - 1) * kWarps, steps)) * 32 * 16;
      for (int job = tid;; job += kThreads) {
        const int y = y0 + b + early * (job / RT), tile = y * RT + job % RT;
        if (y >= static_cast<int>(gridDim.y)) break;
        if (tile <= last_tile)
          asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(tiles + static_cast<int64_t>(tile) * steps * 32),
                       "r"(bytes)
                       : "memory");
      }
    }
  }
  // The norm weights are a lane row like the activations: the same offset in the row. They are
  // constants, so each warp stages its own steps' before the wait (lane (g, t): steps g, g + 8,
  // ..., column group t), and only its own lanes read them.
  const float4* norm_weights = reinterpret_cast<const float4*>(a.norm_weight) + t;
  float4* staged_norm = reinterpret_cast<float4*>(fast_smem + S::kNormOffset) + t;
  if constexpr (NORM) {
    if (norm_staged) {  // FastNormStaged, unless CudaTuning::fast_norm_staged is off
      for (int i = g; i < nsteps; i += 8) {
        const int at = (s_begin + slice_warp + kWarps * i) * (kStepCols / 4);
        staged_norm[at] = __ldg(norm_weights + at);
      }
      __syncwarp();
    }
  }
  WaitForPrevious();
  timeline.Waited();
  if (first_ok && a.epilogue == LinearEpilogue::kAddResidual)
    LoadFastResidual<LinearEpilogue::kAddResidual>(a, m0 + first_tok, first_n, &first_epilogue);
#pragma unroll
  for (int j = 0; j < NTK; ++j)
    act_src[j] = reinterpret_cast<const unsigned char*>(a.x + xoff[j] + s_first * kStepCols);
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) {
    if (i < nsteps) issue_acts(ring_s + i * S::kSlotBytes);
    CommitCopies();
  }
  // Each step's norm weights are read a step ahead (batch 32 +0.7% over reading them in the step).
  const uint32_t norm_s = SharedAddr(staged_norm + s_first * (kStepCols / 4));
  const float4* norm_g = norm_weights + s_first * (kStepCols / 4);
  auto norm_weights_of = [&](int i) {  // the warp's step i: a stride as in an activation row
    return norm_staged ? LoadShared16(norm_s + i * kActStride) : __ldg(norm_g + i * (kActStride / 16));
  };
  float4 w_next = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if constexpr (NORM)
    if (nsteps > 0) w_next = norm_weights_of(0);
  // Step i reads slot i % kStages; its copies (step i + kStages - 1) go to slot (i - 1) % kStages.
  constexpr uint32_t kRingSpan = kStages * S::kSlotBytes;
  uint32_t read_off = 0, issue_off = (kStages - 1) * S::kSlotBytes;
  for (int i = 0; i < nsteps; ++i) {
    const float4 w = w_next;
    if constexpr (NORM)
      if (i + 1 < nsteps) w_next = norm_weights_of(i + 1);
    // Step i's group has landed. Every lane reads only what it copied itself, so no other
    // thread is waited for, and slot (i - 1) % kStages is free for step i + kStages - 1.
    WaitCopies<kStages - 2>();
    if (i == 0) TimelinePoint(5);           // thread 0's first step has landed
    if (i == nsteps - 1) TimelinePoint(6);  // and its last
    if (i + kStages - 1 < nsteps) {
      issue_weights(ring_s + issue_off);
      issue_acts(ring_s + issue_off);
    }
    CommitCopies();
    issue_off = issue_off + S::kSlotBytes == kRingSpan ? 0 : issue_off + S::kSlotBytes;
    const uint32_t slot_s = ring_s + read_off;
    read_off = read_off + S::kSlotBytes == kRingSpan ? 0 : read_off + S::kSlotBytes;
    Pieces p[NTK];
#pragma unroll
    for (int j = 0; j < NTK; ++j) {
      float4 v = LoadShared16(slot_s + (RT + j) * 32 * 16);
      if constexpr (NORM) {
        squares[j] = fmaf(v.x, v.x, squares[j]);
        squares[j] = fmaf(v.y, v.y, squares[j]);
        squares[j] = fmaf(v.z, v.z, squares[j]);
        squares[j] = fmaf(v.w, v.w, squares[j]);
        v = make_float4(v.x * w.x, v.y * w.y, v.z * w.z, v.w * w.w);
      }
      p[j] = SplitFour(v);
    }
#pragma unroll
    for (int r = 0; r < RT; ++r) {
      const uint4 wr = LoadShared16u(slot_s + r * 32 * 16);
#pragma unroll
      for (int j = 0; j < NTK; ++j) MmaPieces(acc[r][j], wr, p[j]);
    }
  }
  WaitCopies<0>();  // no copy outlives the loop (the trailing groups are empty)
  TimelinePoint(1);  // this warp's loop done
  __syncthreads();  // the ring becomes the warps' sums

  // acc[r][j][e]: weight row 16 r + g (+ 8 for e >= 2), token 8 j + 2 t (+ 1 for odd e).
  float* sums = reinterpret_cast<float*>(fast_smem);
#pragma unroll
  for (int r = 0; r < RT; ++r)
#pragma unroll
    for (int j = 0; j < NTK; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = 16 * r + g + 8 * (e / 2), tok = 8 * j + 2 * t + (e % 2);
        sums[(warp * S::kToks + tok) * S::kSumRowStride + row] = acc[r][j][e];
      }
  float* warp_squares = reinterpret_cast<float*>(fast_smem + S::kSquaresOffset);
  if constexpr (NORM) {
#pragma unroll
    for (int j = 0; j < NTK; ++j) {
      const float q = TokenLanesSum(squares[j]);
      if (t == 0) warp_squares[warp * S::kToks + 8 * j + g] = q;
    }
  }
  __syncthreads();

  // Each thread finishes row pairs (n, n + 1) of tokens: the warps' sums in warp order.
  auto epilogue_of = [&](auto kind, int idx, int m, int n) {
    if (first_ok && idx == first_idx) return first_epilogue;  // planned before the loop
    FastEpilogue e = PlanFastEpilogue<decltype(kind)::value>(a, m, n);
    LoadFastResidual<decltype(kind)::value>(a, m, n, &e);
    return e;
  };
  // Rows (row, row + 1) of a token (row even): each slice's warps in warp order, then (merged
  // slices) the slices in slice order, the two rows side by side.
  auto pair_sum = [&](int row, int tok) {
    float2 v = make_float2(0.0f, 0.0f);
#pragma unroll
    for (int sl = 0; sl < SB; ++sl) {
      float2 u = *reinterpret_cast<const float2*>(sums + (kWarps * sl * S::kToks + tok) * S::kSumRowStride + row);
#pragma unroll
      for (int w = 1; w < kWarps; ++w) {
        const float2 x =
            *reinterpret_cast<const float2*>(sums + ((kWarps * sl + w) * S::kToks + tok) * S::kSumRowStride + row);
        u.x = u.x + x.x;
        u.y = u.y + x.y;
      }
      if (sl == 0) {
        v = u;
      } else {
        v.x = v.x + u.x;
        v.y = v.y + u.y;
      }
    }
    return v;
  };
  auto block_squares = [&](int tok) {
    float q = 0.0f;
#pragma unroll
    for (int sl = 0; sl < SB; ++sl) {
      float u = warp_squares[kWarps * sl * S::kToks + tok];
#pragma unroll
      for (int w = 1; w < kWarps; ++w) u = u + warp_squares[(kWarps * sl + w) * S::kToks + tok];
      q = sl == 0 ? u : q + u;
    }
    return q;
  };
  auto norm_scale = [&](float squares_of_row) {
    return canonical_rms_scale(squares_of_row, a.w.cols, a.norm_eps);
  };
  if constexpr (SLICED) {
    // The K slices of a tile are one cluster (blockIdx.z is the rank), and block `split` finishes
    // the row pairs idx = split (mod splits). Each block pushes its sums of those pairs into their
    // finishing block's inbox (distributed shared memory, slot `split`) with st.async, completing
    // the bytes the owner's inbox barrier expects; each block waits on its own barrier, reads its
    // inbox locally and adds the slices' sums in slice order. No block reads another's shared
    // memory, and none waits for another to finish its epilogue: reading the slices' sums
    // remotely would need a cluster barrier before the reads and a second one to keep the shared
    // memory alive for them, and a barrier between the pushes and the sums waits longer than the
    // inbox's.
    float* inbox = reinterpret_cast<float*>(fast_smem + S::kInboxOffset);
    float* inbox_squares = inbox + 2 * (kPairs * S::kToks + kFastMaxSplits);
    const int per_owner = (kPairs * S::kToks + splits - 1) / splits;  // pairs each block finishes
    const uint32_t inbox_addr = SharedAddr(inbox), squares_addr = SharedAddr(inbox_squares);
    const uint32_t bar_addr = SharedAddr(inbox_full);
    ClusterWait();  // every block of the cluster has started, its inbox barrier ready
    for (int idx = tid; idx < kPairs * S::kToks; idx += kThreads) {
      const int row = 2 * (idx % kPairs), tok = idx / kPairs, owner = idx % splits;
      PushAsync(ClusterAddr(inbox_addr + 8 * (split * per_owner + idx / splits), owner), pair_sum(row, tok),
                ClusterAddr(bar_addr, owner));
    }
    if constexpr (NORM)
      for (int k = tid; k < splits * S::kToks; k += kThreads) {
        const int owner = k / S::kToks, tok = k % S::kToks;
        PushAsync(ClusterAddr(squares_addr + 4 * (split * S::kToks + tok), owner), block_squares(tok),
                  ClusterAddr(bar_addr, owner));
      }
    ClusterArriveRelaxed();  // this block's pushes are issued (waited for before it exits)
    TimelinePoint(2);        // the block's sums pushed
    InboxBarrierWait(inbox_full);  // every slice's sums of this block's pairs have landed
    TimelinePoint(3);              // the inbox is complete
    // With the norm, each token's scale once (the slices' squares in slice order), not per pair.
    float* token_scales = inbox_squares + kFastMaxSplits * S::kToks;
    if constexpr (NORM) {
      if (tid < S::kToks) {
        float q = inbox_squares[tid];
        for (int sl = 1; sl < splits; ++sl) q = q + inbox_squares[sl * S::kToks + tid];
        token_scales[tid] = norm_scale(q);
      }
      __syncthreads();
    }
    WithKernelEpilogue<EPI>(a.epilogue, [&](auto kind) {
      for (int idx = split + splits * tid; idx < kPairs * S::kToks; idx += splits * kThreads) {
        const int row = 2 * (idx % kPairs), tok = idx / kPairs, n = row0 + row;
        if (tok >= mcount || n >= rows) continue;
        const float2* in = reinterpret_cast<const float2*>(inbox) + idx / splits;
        float v0 = in[0].x, v1 = in[0].y;
        for (int sl = 1; sl < splits; ++sl) {
          v0 = v0 + in[sl * per_owner].x;
          v1 = v1 + in[sl * per_owner].y;
        }
        if constexpr (NORM) {
          const float r = token_scales[tok];
          v0 = r * v0;
          v1 = r * v1;
        }
        StoreFast<decltype(kind)::value>(a, m0 + tok, n, v0, v1, epilogue_of(kind, idx, m0 + tok, n));
      }
    });
    TimelinePoint(4);  // the block's outputs stored
    // No block leaves while another's pushes may be in flight (they land in inboxes that are
    // waited for, but the pushing block's exit is not ordered after them otherwise).
    ClusterWait();
    return;
  }
  TimelinePoint(2);  // the warps' sums in shared memory
  // With the norm, each token's scale once, not per row pair (a block of 80 rows finishes 40
  // pairs of every token; the scale's divides and square root were most of a pair's chain).
  float* token_scales = reinterpret_cast<float*>(fast_smem + S::kScalesOffset);
  if constexpr (NORM) {
    if (tid < S::kToks) token_scales[tid] = norm_scale(block_squares(tid));
    __syncthreads();
  }
  TimelinePoint(3);  // the tokens' norm scales in shared memory
  // A thread's pairs (up to kIters) as independent chains: every pair's sums first, then every
  // pair's epilogue, with the epilogue's kind a constant (a pair's chain was one long sequence of
  // dependent instructions and branches: ncu, gate|up's 2.5 pairs a thread).
  constexpr int kItems = kPairs * S::kToks;
  constexpr int kIters = (kItems + kThreads - 1) / kThreads;
  WithKernelEpilogue<EPI>(a.epilogue, [&](auto kind) {
    float2 v[kIters];
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      const int idx = tid + it * kThreads;
      v[it] = idx < kItems ? pair_sum(2 * (idx % kPairs), idx / kPairs) : make_float2(0.0f, 0.0f);
    }
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      const int idx = tid + it * kThreads;
      const int row = 2 * (idx % kPairs), tok = idx / kPairs, n = row0 + row;
      if (idx >= kItems || tok >= mcount || n >= rows) continue;
      float v0 = v[it].x, v1 = n + 1 < rows ? v[it].y : 0.0f;
      if constexpr (NORM) {
        const float r = token_scales[tok];
        v0 = r * v0;
        v1 = r * v1;
      }
      StoreFast<decltype(kind)::value>(a, m0 + tok, n, v0, v1, epilogue_of(kind, idx, m0 + tok, n));
    }
  });
  TimelinePoint(4);  // thread 0's outputs stored
}
