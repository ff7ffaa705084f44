// Attention of prefill steps in query tiles (TileAttentionKernel): the query rows of several
// consecutive tokens of one sequence and every query head of one KV head share each staged K and
// V row, where GroupAttentionKernel stages a token's whole context for one token (a 1,000-token
// prompt of Qwen3-30B-A3B read 4 GB a layer through L2).
//
// A part of kernels.cu's translation unit, included there inside its namespaces, after
// attention.cuh: not a header of its own.
//
// The arithmetic is docs/numerics.md section 5's, term for term, with no window and no soft cap
// (the launcher's callers run it only there):
//   - score i of row r: the canonical dot of q_r and k_i over the head dimension (term d to class
//     d mod 32, each class's terms in increasing d from +0, then the tree), times scale;
//   - m_r = max over the visible keys i <= p_r (exact in any order);
//   - e_i = canonical_expf(s_i - m_r), zero past p_r;
//   - the denominator and each output dim: class i mod 32 sums its keys in increasing i, then the
//     tree over the 32 classes; one divide.
// Where the other kernels keep a sum's 32 class accumulators side by side until the tree, a thread
// here takes one class at a time and folds each finished class into the tree at once: the classes
// in the order j = 0..31 of l = bitrev5(j) (0, 16, 8, 24, ...) make the canonical tree's pairs
// (l, l + 16), then (l, l + 8), ... complete in the order a binary counter carries, so a sum needs
// its running class sum and at most five pending subtree sums (TreeFold), not 32 accumulators. The
// additions are the tree's own (IEEE addition commutes), so the bits are the other kernels'
// (class_fold.h). That is what lets a block hold 32 rows x 128 dims of outputs.
//
// A block: one query tile (up to TileAttnTokens(group) consecutive tokens of one sequence, the
// host's list) x one KV head, rows r = token * group + head. Pass 1 stages the keys 0 .. L - 1 (L:
// the tile's last position + 1) in natural order, chunk by chunk, and keeps each row's max. Pass 2
// stages them again in class order (slot q: class bitrev5(q / T), its key 32 (q % T) + class, T =
// ceil(L / 32)) with their V rows, recomputes the scores (the same code, so the same bits), writes
// the weights, and runs the denominators' and the outputs' class sums, folding at each class's end.
// Keys past L are zero rows (zero weight, zero V: neutral in the sums).

constexpr int kTileAttnThreads = 256;
constexpr int kTileAttnRows = 32;  // query rows (token, head) a block
constexpr int kTileAttnKeys = 64;  // keys a staged chunk
// The most shared memory a block takes: its staging (91 KiB at head_dim 128) and the block table of
// its context (4 bytes a 16-position block). Past it (contexts of about 500,000 positions) the
// other kernels run.
constexpr int64_t kTileAttnMaxSmem = 220 * 1024;

// Tokens a query tile holds for `group` query heads per KV head (0: the kernel cannot take it).
ROTE_HD inline int TileAttnTokens(int group) { return group < 1 || group > kTileAttnRows ? 0 : kTileAttnRows / group; }

template <int HD>
struct TileAttnLayout {
  static constexpr int kTpc = HD / 32;   // terms a class of the dot
  // Row strides (floats) of the staged rows: 4 past a multiple of 32, so that the 16-byte pieces
  // of 8 consecutive rows fall in distinct banks.
  static constexpr int kKs = HD + 4;     // K and q rows, class-major
  static constexpr int kVs = HD + 4;     // V rows, natural order
  static constexpr int kKsOff = 0;                                  // [keys][kKs]
  static constexpr int kVsOff = kKsOff + kTileAttnKeys * kKs;       // [keys][kVs]
  static constexpr int kQsOff = kVsOff + kTileAttnKeys * kVs;       // [rows][kKs]
  static constexpr int kEsOff = kQsOff + kTileAttnRows * kKs;       // [keys][rows]: weights (TileAttnWeight)
  static constexpr int kMaxOff = kEsOff + kTileAttnKeys * kTileAttnRows;  // [rows]
  static constexpr int kDenOff = kMaxOff + kTileAttnRows;                 // [rows]
  static constexpr int kKeysOff = kDenOff + kTileAttnRows;                // [keys]: the chunk's keys (ints)
  static constexpr int kTableOff = kKeysOff + kTileAttnKeys;              // block table (ints)
  static int64_t Bytes(int32_t max_context, int32_t block_size) {
    return int64_t{kTableOff} * 4 + int64_t{(max_context + block_size - 1) / block_size + 1} * 4;
  }
};

// Where the dot's term d of a row sits in the class-major rows: class d mod 32's terms together.
template <int HD>
__device__ __forceinline__ int TileAttnTerm(int d) {
  return (d % 32) * (HD / 32) + d / 32;
}

// A weight's place in the chunk's weights: key c's 32 rows in 4-row groups, group r / 4 stored at
// (r / 4) ^ (c % 8), so that the score threads' stores (16 keys a warp) spread over the banks and a
// 4-row group is still one 16-byte read.
__device__ __forceinline__ int TileAttnWeight(int c, int r) { return c * kTileAttnRows + 4 * ((r / 4) ^ (c & 7)) + (r & 3); }

// T consecutive floats of shared memory (T = 4 or 2: one aligned load).
template <int T>
__device__ __forceinline__ void TileAttnLoad(const float* p, float (&v)[T]) {
  if constexpr (T == 4) {
    const float4 x = *reinterpret_cast<const float4*>(p);
    v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
  } else {
    const float2 x = *reinterpret_cast<const float2*>(p);
    v[0] = x.x, v[1] = x.y;
  }
}

// Scores of rows 2 rr, 2 rr + 1 against chunk keys kk, kk + 16, kk + 32, kk + 48 (class-major q
// and K rows in shared memory): the canonical dot, one class at a time folded into the tree.
template <int HD>
__device__ __forceinline__ void TileAttnScores(const float* qs, const float* ks, int rr, int kk, float (&s)[2][4]) {
  using Lay = TileAttnLayout<HD>;
  constexpr int T = Lay::kTpc;
  float pend[2][4][5];
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    const int l = Bitrev5(j);
    float q[2][T], k[4][T];
#pragma unroll
    for (int a = 0; a < 2; ++a) TileAttnLoad<T>(qs + (2 * rr + a) * Lay::kKs + l * T, q[a]);
#pragma unroll
    for (int b = 0; b < 4; ++b) TileAttnLoad<T>(ks + (kk + 16 * b) * Lay::kKs + l * T, k[b]);
    // With j known at compile time (the loop is unrolled), the pending sums stay in registers.
    const int ones = TrailingOnes(j);
#pragma unroll
    for (int a = 0; a < 2; ++a)
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        float v = fmaf(q[a][0], k[b][0], 0.0f);
#pragma unroll
        for (int t = 1; t < T; ++t) v = fmaf(q[a][t], k[b][t], v);
#pragma unroll
        for (int z = 0; z < 5; ++z)
          if (z < ones) v = pend[a][b][z] + v;
        if (ones < 5) {
          pend[a][b][ones] = v;
        } else {
          s[a][b] = v;
        }
      }
  }
}

// Grid: (query tiles, KV heads). tiles: (m0, count) pairs, count tokens from step token m0, all of
// one sequence at consecutive positions.
// MINB: blocks a multiprocessor must hold (2: registers capped at 128 a thread).
template <int HD, int MINB>
__global__ void __launch_bounds__(kTileAttnThreads, MINB)
    TileAttentionKernel(const float* q, StepTokens step, AttentionShape shape, LayerKv kv, float scale, float* out,
                        int32_t out_stride, const int32_t* tiles) {
  using Lay = TileAttnLayout<HD>;
  constexpr int KC = kTileAttnKeys;
  extern __shared__ float4 tile_attn_smem_f4[];
  float* sm = reinterpret_cast<float*>(tile_attn_smem_f4);
  float* ks = sm + Lay::kKsOff;
  float* vs = sm + Lay::kVsOff;
  float* qs = sm + Lay::kQsOff;
  float* es = sm + Lay::kEsOff;
  float* rmax = sm + Lay::kMaxOff;
  float* den_s = sm + Lay::kDenOff;
  int32_t* keys_s = reinterpret_cast<int32_t*>(sm + Lay::kKeysOff);
  int32_t* bt_s = reinterpret_cast<int32_t*>(sm + Lay::kTableOff);
  TimelineScope timeline(TimelineKind::kAttention);
  LetNextStart();
  const int tid = threadIdx.x, lane = tid % 32;
  const int G = shape.num_heads / shape.num_kv_heads, g = blockIdx.y;
  const int m0 = tiles[2 * blockIdx.x], count = tiles[2 * blockIdx.x + 1];
  const int R = count * G;
  const int bs = shape.block_size, kv_dim = shape.num_kv_heads * HD, q_dim = shape.num_heads * HD;
  const int L = step.pos[m0 + count - 1] + 1;
  const int32_t* bt = step.block_table + static_cast<int64_t>(m0) * step.max_blocks;
  for (int b = tid; b < (L + bs - 1) / bs; b += kTileAttnThreads) bt_s[b] = bt[b];
  // Score thread: rows 2 rr, 2 rr + 1, keys kk + 16 b of a chunk. Row r's position.
  const int rr = tid / 16, kk = tid % 16;
  int prow[2];
#pragma unroll
  for (int a = 0; a < 2; ++a) {
    const int r = 2 * rr + a;
    prow[a] = r < R ? step.pos[m0 + r / G] : -1;  // -1: no row, no visible key
  }
  WaitForPrevious();
  timeline.Waited();
  // q rows, class-major.
  for (int i = tid; i < kTileAttnRows * (HD / 4); i += kTileAttnThreads) {
    const int r = i / (HD / 4), d = 4 * (i % (HD / 4));
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (r < R) v = *reinterpret_cast<const float4*>(q + static_cast<int64_t>(m0 + r / G) * q_dim + (g * G + r % G) * HD + d);
    float* row = qs + r * Lay::kKs;
    row[TileAttnTerm<HD>(d)] = v.x;
    row[TileAttnTerm<HD>(d + 1)] = v.y;
    row[TileAttnTerm<HD>(d + 2)] = v.z;
    row[TileAttnTerm<HD>(d + 3)] = v.w;
  }
  __syncthreads();  // the block table
  // A chunk's K rows go through registers into their class-major places; its V rows (natural
  // order) by cp.async, issued first so that both are in flight together. A warp's 32 pieces: PQ
  // pieces 8 apart (p / 8) of each of 32 / PQ rows, so that the class-major stores fall in
  // distinct banks; the piece's p % 8 and the rows' next 32 / PQ in the following rounds. (Loading
  // the next chunk's K pieces into registers during this chunk's scores spilled at 128 registers
  // and measured slower.) Keys past L are zero rows.
  constexpr int P = HD / 4, PQ = P / 8, CL = 32 / PQ;
  auto stage = [&](bool with_v) {
    if (with_v) {
      for (int i = tid; i < kTileAttnKeys * P; i += kTileAttnThreads) {
        const int c = i / P, d = 4 * (i % P);
        const int key = keys_s[c];
        float* dst = vs + c * Lay::kVs + d;
        if (key < L)
          CpAsync16(dst, kv.v + CacheRow(bt_s, key, bs) * kv_dim + g * HD + d);
        else
          *reinterpret_cast<float4*>(dst) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
      CpAsyncCommit();
    }
    for (int i = tid; i < kTileAttnKeys * P; i += kTileAttnThreads) {
      const int pq = i % PQ, c_low = (i / PQ) % CL, rest = i / 32;
      const int c = (rest / 8) * CL + c_low, d = 4 * (8 * pq + rest % 8);
      const int key = keys_s[c];
      const float4 k4 = key < L ? *reinterpret_cast<const float4*>(kv.k + CacheRow(bt_s, key, bs) * kv_dim + g * HD + d)
                                : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      float* krow = ks + c * Lay::kKs;
      krow[TileAttnTerm<HD>(d)] = k4.x;
      krow[TileAttnTerm<HD>(d + 1)] = k4.y;
      krow[TileAttnTerm<HD>(d + 2)] = k4.z;
      krow[TileAttnTerm<HD>(d + 3)] = k4.w;
    }
  };

  // Pass 1: each row's max over its visible keys.
  float mx[2] = {-INFINITY, -INFINITY};
  for (int c0 = 0; c0 < L; c0 += KC) {
    if (tid < KC) keys_s[tid] = c0 + tid;
    __syncthreads();
    stage(false);
    __syncthreads();
    float s[2][4];
    TileAttnScores<HD>(qs, ks, rr, kk, s);
#pragma unroll
    for (int a = 0; a < 2; ++a)
#pragma unroll
      for (int b = 0; b < 4; ++b)
        if (c0 + kk + 16 * b <= prow[a]) mx[a] = fmaxf(mx[a], AttnScore(s[a][b], scale, shape.softcap));
    __syncthreads();  // the chunk's K rows are free again
  }
#pragma unroll
  for (int a = 0; a < 2; ++a) {
#pragma unroll
    for (int off = 8; off >= 1; off /= 2) mx[a] = fmaxf(mx[a], __shfl_xor_sync(0xffffffffu, mx[a], off));
    if (kk == 0) rmax[2 * rr + a] = mx[a];
  }
  __syncthreads();

  // Pass 2: the keys in class order. Output thread: rows 4 w + a (a < 4), dims DV lane + t.
  constexpr int DV = HD / 32;
  const int w = tid / 32;
  float acc[4][DV];
  float pend[5][4 * DV];  // the outputs' pending subtree sums (local memory: touched once a class)
  float dacc = 0.0f, dpend[5];  // row tid's denominator (threads of warp 0 with a row)
#pragma unroll
  for (int a = 0; a < 4; ++a)
#pragma unroll
    for (int t = 0; t < DV; ++t) acc[a][t] = 0.0f;
  const int per_class = (L + 31) / 32, slots = 32 * per_class;
  auto slot_key = [&](int qslot) { return qslot < slots ? Bitrev5(qslot / per_class) + 32 * (qslot % per_class) : L; };
  for (int q0 = 0; q0 < slots; q0 += KC) {
    const int n = min(KC, slots - q0);
    if (tid < KC) keys_s[tid] = slot_key(q0 + tid);
    __syncthreads();
    stage(true);
    __syncthreads();
    {
      float s[2][4];
      TileAttnScores<HD>(qs, ks, rr, kk, s);
#pragma unroll
      for (int a = 0; a < 2; ++a) {
        const int r = 2 * rr + a;
        const float m = rmax[r];
#pragma unroll
        for (int b = 0; b < 4; ++b) {
          const int c = kk + 16 * b;
          const int key = keys_s[c];
          es[TileAttnWeight(c, r)] =
              key <= prow[a] ? canonical_expf(AttnScore(s[a][b], scale, shape.softcap) - m) : 0.0f;
        }
      }
    }
    CpAsyncWait<0>();
    __syncthreads();  // the weights and the V rows
    // The chunk's slots in order, folding at each class's end (slot q ends class q / per_class).
    for (int c = 0; c < n;) {
      const int qslot = q0 + c;
      const int seg_end = min(n, (qslot / per_class + 1) * per_class - q0);
      for (; c < seg_end; ++c) {
        const float4 e4 = *reinterpret_cast<const float4*>(es + TileAttnWeight(c, 4 * w));
        const float e[4] = {e4.x, e4.y, e4.z, e4.w};
        float v[DV];
        if constexpr (DV == 4) {
          const float4 v4 = *reinterpret_cast<const float4*>(vs + c * Lay::kVs + 4 * lane);
          v[0] = v4.x, v[1] = v4.y, v[2] = v4.z, v[3] = v4.w;
        } else {
          const float2 v2 = *reinterpret_cast<const float2*>(vs + c * Lay::kVs + 2 * lane);
          v[0] = v2.x, v[1] = v2.y;
        }
#pragma unroll
        for (int a = 0; a < 4; ++a)
#pragma unroll
          for (int t = 0; t < DV; ++t) acc[a][t] = fmaf(e[a], v[t], acc[a][t]);
        if (tid < kTileAttnRows) dacc = dacc + es[TileAttnWeight(c, tid)];
      }
      if ((q0 + c) % per_class == 0) {  // class (q0 + c) / per_class - 1 is whole
        const int j = (q0 + c) / per_class - 1;
        // A class sum starts again from +0; after class 31 the sums hold the whole tree.
#pragma unroll
        for (int a = 0; a < 4; ++a)
#pragma unroll
          for (int t = 0; t < DV; ++t)
            if (!TreeFold(acc[a][t], &pend[0][a * DV + t], 4 * DV, j)) acc[a][t] = 0.0f;
        if (tid < kTileAttnRows && !TreeFold(dacc, dpend, 1, j)) dacc = 0.0f;
      }
    }
    __syncthreads();  // the chunk's rows and weights are free again
  }
  if (tid < kTileAttnRows) den_s[tid] = dacc;
  __syncthreads();
#pragma unroll
  for (int a = 0; a < 4; ++a) {
    const int r = 4 * w + a;
    if (r >= R) continue;
    float* o = out + static_cast<int64_t>(m0 + r / G) * out_stride;
    const int h = g * G + r % G;
#pragma unroll
    for (int t = 0; t < DV; ++t) o[PermutedIndex(h * HD + DV * lane + t)] = acc[a][t] / den_s[r];
  }
}
