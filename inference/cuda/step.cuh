// The one-launch decode step (DecodeStepKernel) and attention over parts of a long context
// (AttentionPartsKernel).
//
// A part of kernels.cu's translation unit, included there inside its namespaces, after the
// helpers it defines and the parts before this one: not a header of its own.

// ---- The decode step of one token as one launch (kernels.h, DecodeStepArgs) ----
//
// Every block (one per multiprocessor, all resident) has kStepWarps consumer warps and one
// producer warp. The producer's lane 0 walks the block's tiles of every matrix of the step in
// the order the consumers use them (layer by layer: q|k|v, o, gate|up, down; then the lm_head;
// block b takes tiles b, b + G, b + 2G, ... of each matrix) and copies each into the next slot of
// a ring in shared memory as soon as the slot is free; it never waits for an activation, so it
// runs up to a ring's worth of weights ahead, across grid barriers and attention. The block's
// n-th tile is consumed by warp n % kStepWarps from slot n % slots; slots is a multiple of
// kStepWarps, so every slot belongs to one warp, which waits on it in order (an mbarrier's
// parity only tells its last two phases apart). Phases are separated by grid
// barriers; activations written by other blocks are read through L2 (__ldcg), because L1 is not
// coherent across multiprocessors.
constexpr int kStepWarps = kAttnWarps;  // consumer warps: attention uses all of them
constexpr int kStepThreads = (kStepWarps + 1) * 32;
constexpr int kStepMaxSlots = 32;
constexpr int kStepRows = 4;      // rows per tile of every matrix but down (even: rotary and SiLU pairs)
constexpr int kStepDownRows = 1;  // rows per tile of the down product (its rows are long)
#ifndef ROTE_STEP_DOT_UNROLL
#define ROTE_STEP_DOT_UNROLL 4
#endif
constexpr int kStepDotUnroll = ROTE_STEP_DOT_UNROLL;
// Positions per batch of the one-launch step's attention loops (AttendHead's U), by V groups.
template <int NG>
constexpr int kStepAttnBatch = NG == 1 ? 8 : NG == 2 ? 4 : 2;
// The one-launch step attends each head in NG blocks, each the V pass of 64 of its dims (one
// group per warp), the scores computed whole in each: a V row's bytes are what bound the pass on
// one multiprocessor, and idle blocks are plenty (12 heads, 132 blocks at 1.5B).
template <int NG>
constexpr int kStepAttnSplit = NG;

__device__ __forceinline__ void ConsumerSync() { asm volatile("bar.sync 1, %0;" ::"n"(kStepWarps * 32) : "memory"); }

__device__ __forceinline__ void MbarArrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(SmemAddr(bar)) : "memory");
}

__device__ __forceinline__ unsigned long long GlobalTimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Benchmarks: thread 0 records a pair of timer readings in its block's next trace slot.
struct StepTrace {
  unsigned long long* slots = nullptr;  // this block's, or null
  int next = 0;
  __device__ __forceinline__ void Record(unsigned long long arrive, unsigned long long leave) {
    if (slots != nullptr && threadIdx.x == 0) {
      slots[2 * next] = arrive;
      slots[2 * next + 1] = leave;
    }
    ++next;
  }
};

__device__ __forceinline__ unsigned long long LoadAcquire(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

// The grid barrier of the step kernel: a 64-bit arrival counter that only grows (it cannot wrap),
// so nothing is ever reset. Every launch passes the same number of barriers with the same grid,
// so a launch starts with the counter at a multiple of barriers x grid; `base` is that multiple,
// read by each block before its first arrival (at most grid - 1 arrivals can precede it). Barrier
// k then ends when the counter reaches base + k x grid: a block adds its arrival without waiting
// for the add to return (red) and polls. `returning`: the classic form instead, an atomicAdd
// whose returned value tells the block its target. It costs a round trip more per arrival but
// measured faster on an H100 (docs/performance.md: 132 pollers on the line slow the reds down),
// so it is the default; the red form is one-token variant 9.
// Consumer warps only: the producer never waits.
struct StepBarrier {
  unsigned long long* counter;
  unsigned long long base = 0;
  int k = 0;
  bool returning = false;
  __device__ __forceinline__ void Start(int barriers) {
    if (threadIdx.x == 0) {
      const unsigned long long v = LoadAcquire(counter), launch = static_cast<unsigned long long>(barriers) * gridDim.x;
      base = v - v % launch;
    }
  }
};

// hold: set for the producer (StepMatrixPhase clears it once the next activation row is staged).
__device__ __forceinline__ void StepGridBarrier(StepBarrier& bar, StepTrace& trace, volatile int* hold) {
  ConsumerSync();
  if (threadIdx.x == 0) {
    *hold = 1;
    const unsigned long long arrive = trace.slots != nullptr ? GlobalTimer() : 0;
    ++bar.k;
    __threadfence();
    unsigned long long target;
    if (bar.returning) {
      const unsigned long long old = atomicAdd(bar.counter, 1ull);
      target = old - old % gridDim.x + gridDim.x;
    } else {
      asm volatile("red.release.gpu.global.add.u64 [%0], 1;" ::"l"(bar.counter) : "memory");
      target = bar.base + static_cast<unsigned long long>(bar.k) * gridDim.x;
    }
    while (LoadAcquire(bar.counter) < target) {
    }
    if (trace.slots != nullptr) trace.Record(arrive, GlobalTimer());
  }
  ConsumerSync();
}

// Long contexts in the one-launch step: each head attended by P = 8, 4 or 2 blocks (parts p;
// AttentionPartsFor), each over a P-th of the positions, where one block per head (or per V
// slice) walked them all, a round trip per batch (1.5B batch 1 at 520 positions: scores 8.9 us
// and V 8.0 us per layer, H200). The order of every sum is the canonical one:
//   1. part p computes the scores of its contiguous chunk of positions with AttendHead's code
//      (the same per-position dot and tree), writes them and its chunk's max to scratch;
//   2. after the head's parts meet (a counter, as the grid barrier), each part takes the max of
//      the parts' maxes (exact in any order), every weight canonical_expf(s - m) and the canonical
//      denominator over all positions (the same values in every part);
//   3. part p owns the position classes c = p + P i (class = j mod 32), i < 32 / P: each class
//      sums its positions in increasing j for every dim, and the tree's levels off 16 .. P pair
//      classes of the same part (c and c + off are i and i + off / P), so they stay inside it:
//      thread group q (of 4) holds i = q + 4 s, adds the levels that pair its own classes (off
//      / P >= 4) in registers and the last two through shared memory; one partial per dim;
//   4. after the parts meet again, part p finishes dims [p hd / P, (p + 1) hd / P): the tree's
//      levels off P / 2 .. 1 over the parts, then one divide.
// With P = 8 these are exactly AttendValues' levels (its warp w holds the classes of part w).
constexpr int kStepAttnParts = kMaxAttentionParts;  // the most parts per head: the scratch's stride
// (Parts per head: AttentionPartsFor, inference/cuda/attention_parts.h.)

// Every meeting adds kStepAttnParts to the head's counter whatever the number of parts, so the
// counters stay aligned across launches that use different numbers.
__device__ __forceinline__ void HeadPartsSync(unsigned long long* counter, int parts) {
  ConsumerSync();
  if (threadIdx.x == 0) {
    __threadfence();
    const unsigned long long old = atomicAdd(counter, static_cast<unsigned long long>(kStepAttnParts / parts));
    const unsigned long long target = old - old % kStepAttnParts + kStepAttnParts;
    while (LoadAcquire(counter) < target) {
    }
  }
  ConsumerSync();
}

__device__ __forceinline__ float2 LoadKv2(const float* p, bool fresh) {
  return fresh ? __ldcg(reinterpret_cast<const float2*>(p)) : *reinterpret_cast<const float2*>(p);
}

// Part p of `parts` of head h (one token, batch 1; this step's K/V row, position L - 1, was written by
// other blocks of this launch and is read through L2). weights: L floats of shared memory;
// vsm: 4 x hd floats of shared memory.
// VD: positions each thread's V loads have in flight per class (4, or kDeepPartsV; the scores'
// positions per lane group double with it); kInterleavedPartsV: 32 positions' loads in flight
// over all of the thread's classes at once, through L2 only (each row is read once a block).
// Only when loads are issued changes, never a sum.
constexpr int kDeepPartsV = 16;
constexpr int kInterleavedPartsV = 32;
template <int NG, int VD, typename Sync>
__device__ __forceinline__ void AttendHeadPart(const DecodeStepArgs& f, const LayerKv& kv, int h, int p, int parts,
                                               const int32_t* bt_s, float* q_s, float* red, float* weights,
                                               float* vsm, Sync sync) {
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const AttentionShape& shape = f.shape;
  const int hd = shape.head_dim, bs = shape.block_size;
  const int g = h / (shape.num_heads / shape.num_kv_heads);
  const int kv_dim = shape.num_kv_heads * hd;
  const int L = f.step.pos[0] + 1, old_end = L - 1;
  float* scores_g = f.attn_scores + static_cast<int64_t>(h) * f.max_context;
  float* maxes_g = f.attn_maxes + h * kStepAttnParts;
  float* vpart_g = f.attn_vpart + static_cast<int64_t>(h) * kStepAttnParts * hd;
  unsigned long long* counter = f.attn_sync + h;
  for (int d = tid; d < hd; d += kStepWarps * 32) q_s[d] = __ldcg(f.q + h * hd + d);
  sync();

  // 1. Scores of positions [j0, j1), eight lanes per position (AttendHead's pass 1).
  const int chunk = (L + parts - 1) / parts;
  const int j0 = p * chunk, j1 = min(L, j0 + chunk);
  float mx = -INFINITY;
  {
    const int r = lane % 8;
    float qr[2 * NG][4];
#pragma unroll
    for (int k = 0; k < 2 * NG; ++k)
#pragma unroll
      for (int i = 0; i < 4; ++i) qr[k][i] = 32 * k + 4 * r < hd ? q_s[32 * k + 4 * r + i] : 0.0f;
    constexpr int U = (NG == 1 ? 4 : NG == 2 ? 2 : 1) * (VD > 4 ? 2 : 1);  // positions per lane group per batch
    for (int jb = j0 + warp * 4 + lane / 8; jb - lane / 8 < j1; jb += kStepWarps * 4 * U) {
      float4 k4[U][2 * NG];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int j = jb + kStepWarps * 4 * u;
        const bool ok = j < j1;
        const float* kp = kv.k + (ok ? CacheRow(bt_s, j, bs) : 0) * kv_dim + g * hd + 4 * r;
#pragma unroll
        for (int k = 0; k < 2 * NG; ++k) {
          k4[u][k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
          if (ok && 32 * k + 4 * r < hd) k4[u][k] = LoadKv4(kp + 32 * k, VD == kInterleavedPartsV || j >= old_end);
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int j = jb + kStepWarps * 4 * u;
        float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int k = 0; k < 2 * NG; ++k) {
          if (32 * k + 4 * r < hd) {
            v[0] = fmaf(qr[k][0], k4[u][k].x, v[0]);
            v[1] = fmaf(qr[k][1], k4[u][k].y, v[1]);
            v[2] = fmaf(qr[k][2], k4[u][k].z, v[2]);
            v[3] = fmaf(qr[k][3], k4[u][k].w, v[3]);
          }
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          v[i] = v[i] + __shfl_xor_sync(0xffffffffu, v[i], 4);  // classes c and c + 16
          v[i] = v[i] + __shfl_xor_sync(0xffffffffu, v[i], 2);  // c and c + 8
          v[i] = v[i] + __shfl_xor_sync(0xffffffffu, v[i], 1);  // c and c + 4
        }
        // c and c + 2, then c and c + 1
        const float sc = AttnScore((v[0] + v[2]) + (v[1] + v[3]), f.scale, shape.softcap);
        if (r == 0 && j < j1) {
          scores_g[j] = sc;
          mx = fmaxf(mx, sc);
        }
      }
    }
  }
  mx = WarpMax(mx);
  if (lane == 0) red[warp] = mx;
  sync();
  if (tid == 0) {
    float m = red[0];
#pragma unroll
    for (int w = 1; w < kStepWarps; ++w) m = fmaxf(m, red[w]);
    maxes_g[p] = m;
  }
  TimelinePoint(1);  // scores written
  HeadPartsSync(counter, parts);
  TimelinePoint(2);

  // 2. The max, every weight and the denominator, over all positions.
  mx = __ldcg(maxes_g);
#pragma unroll
  for (int k = 1; k < kStepAttnParts; ++k)
    if (k < parts) mx = fmaxf(mx, __ldcg(maxes_g + k));
  if constexpr (VD > 4) {
    // Eight scores' loads in flight per thread before their exps.
    constexpr int kStride = kStepWarps * 32;
    for (int j0 = tid; j0 < L; j0 += 8 * kStride) {
      float sc[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) sc[u] = j0 + u * kStride < L ? __ldcg(scores_g + j0 + u * kStride) : 0.0f;
#pragma unroll
      for (int u = 0; u < 8; ++u)
        if (j0 + u * kStride < L) weights[j0 + u * kStride] = canonical_expf(sc[u] - mx);
    }
  } else {
    for (int j = tid; j < L; j += kStepWarps * 32) weights[j] = canonical_expf(__ldcg(scores_g + j) - mx);
  }
  sync();
  TimelinePoint(5);  // weights
  float denom = 0.0f;
  for (int j = lane; j < L; j += 32) denom = denom + weights[j];
  denom = WarpTree(denom);
  TimelinePoint(6);  // denominator

  // 3. V over the classes p + P (q + 4 s) (q = tid / 64, s < 8 / P), two dims per thread (+ 128 n),
  // then the tree's levels inside the part: those pairing one thread's classes (s and s + off,
  // in registers), then q + (q + 2) and q + (q + 1) through shared memory.
  {
    const int q = tid / 64, d0 = 2 * (tid % 64);
    const int per_thread = 8 / parts;  // classes per thread group: 1, 2 or 4
    constexpr int KD = (kMaxHeadDim + 127) / 128;
    constexpr int UV = VD;
    float cls[4][KD][2];  // cls[s]: class p + P (q + 4 s)
    const float* vbase = kv.v + g * hd + d0;
    if constexpr (VD == kInterleavedPartsV) {
#pragma unroll
      for (int s = 0; s < 4; ++s)
#pragma unroll
        for (int n = 0; n < KD; ++n) cls[s][n][0] = cls[s][n][1] = 0.0f;
      // Round r: positions c_s + 32 (r UC + u), u < UC, of each class s < PT; in each class in
      // increasing j, as the loop below.
      auto rounds = [&](auto pt) {
        constexpr int PT = decltype(pt)::value;
        constexpr int UC = kInterleavedPartsV / PT;
        constexpr int KN = (NG * 64 + 127) / 128;  // 128-dim slices of this head size
        const int c0 = p + parts * q;
        for (int r = 0; 32 * r * UC < L; ++r) {
          float w[PT][UC];
          float2 va[PT][UC][KN];
#pragma unroll
          for (int t = 0; t < PT; ++t)
#pragma unroll
            for (int u = 0; u < UC; ++u) {
              const int j = c0 + 4 * parts * t + 32 * (r * UC + u);
              const bool ok = j < L;
              w[t][u] = ok ? weights[j] : 0.0f;
              const float* vrow = vbase + (ok ? CacheRow(bt_s, j, bs) : 0) * kv_dim;
#pragma unroll
              for (int n = 0; n < KN; ++n)
                va[t][u][n] = ok && d0 + 128 * n < hd ? __ldcg(reinterpret_cast<const float2*>(vrow + 128 * n))
                                                      : make_float2(0.0f, 0.0f);
            }
#pragma unroll
          for (int t = 0; t < PT; ++t)
#pragma unroll
            for (int u = 0; u < UC; ++u)
              if (c0 + 4 * parts * t + 32 * (r * UC + u) < L) {
#pragma unroll
                for (int n = 0; n < KN; ++n) {
                  cls[t][n][0] = fmaf(w[t][u], va[t][u][n].x, cls[t][n][0]);
                  cls[t][n][1] = fmaf(w[t][u], va[t][u][n].y, cls[t][n][1]);
                }
              }
        }
      };
      if (per_thread == 1)
        rounds(std::integral_constant<int, 1>{});
      else if (per_thread == 2)
        rounds(std::integral_constant<int, 2>{});
      else
        rounds(std::integral_constant<int, 4>{});
    }
#pragma unroll
    for (int s = 0; s < (VD == kInterleavedPartsV ? 0 : 4); ++s) {
      float(&acc)[KD][2] = cls[s];
#pragma unroll
      for (int n = 0; n < KD; ++n) acc[n][0] = acc[n][1] = 0.0f;
      if (s >= per_thread) continue;
      const int c = p + parts * (q + 4 * s);
      for (int jb = c; jb < L; jb += 32 * UV) {
        float w[UV];
        float2 va[UV][KD];
#pragma unroll
        for (int u = 0; u < UV; ++u) {
          const int j = jb + 32 * u;
          const bool ok = j < L;
          w[u] = ok ? weights[j] : 0.0f;
          const float* vrow = vbase + (ok ? CacheRow(bt_s, j, bs) : 0) * kv_dim;
#pragma unroll
          for (int n = 0; n < KD; ++n)
            va[u][n] = ok && d0 + 128 * n < hd ? LoadKv2(vrow + 128 * n, j >= old_end) : make_float2(0.0f, 0.0f);
        }
#pragma unroll
        for (int u = 0; u < UV; ++u) {
          if (jb + 32 * u < L) {
#pragma unroll
            for (int n = 0; n < KD; ++n) {
              acc[n][0] = fmaf(w[u], va[u][n].x, acc[n][0]);
              acc[n][1] = fmaf(w[u], va[u][n].y, acc[n][1]);
            }
          }
        }
      }
    }
    TimelinePoint(7);  // V classes' loops
    // The levels pairing this thread's own classes: s and s + off hold classes c and c + 4 P off
    // (off 2 and 1 in s: the tree's levels off 8 P and 4 P, where those are 16 or less).
#pragma unroll
    for (int off = 2; off >= 1; off /= 2)
      if (off < per_thread)
#pragma unroll
        for (int s = 0; s < off; ++s)
#pragma unroll
          for (int n = 0; n < KD; ++n) {
            cls[s][n][0] = cls[s][n][0] + cls[s + off][n][0];
            cls[s][n][1] = cls[s][n][1] + cls[s + off][n][1];
          }
#pragma unroll
    for (int n = 0; n < KD; ++n)
      if (d0 + 128 * n < hd) {
        vsm[q * hd + d0 + 128 * n] = cls[0][n][0];
        vsm[q * hd + d0 + 128 * n + 1] = cls[0][n][1];
      }
  }
  TimelinePoint(3);  // V classes summed
  sync();
  // The two levels between thread groups: classes i and i + 2 (q and q + 2), then i and i + 1.
  for (int d = tid; d < hd; d += kStepWarps * 32)
    vpart_g[p * hd + d] = (vsm[d] + vsm[2 * hd + d]) + (vsm[hd + d] + vsm[3 * hd + d]);
  HeadPartsSync(counter, parts);
  TimelinePoint(4);

  // 4. The tree's last levels, over the parts (off P / 2 .. 1), for this part's dims.
  const int per = hd / parts;  // hd is a multiple of 8
  for (int d = p * per + tid; d < (p + 1) * per; d += kStepWarps * 32) {
    float v[kStepAttnParts];
#pragma unroll
    for (int k = 0; k < kStepAttnParts; ++k) v[k] = k < parts ? __ldcg(vpart_g + k * hd + d) : 0.0f;
#pragma unroll
    for (int off = kStepAttnParts / 2; off >= 1; off /= 2)
      if (off < parts)
#pragma unroll
        for (int k = 0; k < off; ++k) v[k] = v[k] + v[k + off];
    f.att[PermutedIndex(h * hd + d)] = v[0] / denom;
  }
  sync();
}

// The same parts as a launch of their own, for one token decoding over a long context with
// separate launches (the 0.5B shape): heads x P blocks (f.attn_parts: 8, 4 or 2) of kAttnThreads
// threads, all resident (cooperative), meeting through f.attn_sync. Only the fields AttendHeadPart
// reads are set.
template <int NG, int VD>
__global__ void __launch_bounds__(kAttnThreads, 1) AttentionPartsKernel(const __grid_constant__ DecodeStepArgs f,
                                                                       LayerKv kv) {
  static_assert(kAttnThreads == kStepWarps * 32, "AttendHeadPart's barrier spans the block");
  TimelineScope timeline(TimelineKind::kAttentionParts);
  extern __shared__ __align__(16) unsigned char parts_smem[];
  __shared__ float q_s[kMaxHeadDim];
  __shared__ float red[kAttnWarps];
  LetNextStart();
  float* weights = reinterpret_cast<float*>(parts_smem);  // max_context
  float* vsm = weights + f.max_context;                    // 4 x head_dim
  int32_t* bt_s = reinterpret_cast<int32_t*>(vsm + 4 * kMaxHeadDim);
  // The step's metadata was copied in before its first kernel: the block table can be read now.
  const int bs = f.shape.block_size, L = f.step.pos[0] + 1;
  for (int b = threadIdx.x; b < (L + bs - 1) / bs; b += kAttnThreads) bt_s[b] = f.step.block_table[b];
  WaitForPrevious();
  timeline.Waited();
  __syncthreads();
  AttendHeadPart<NG, VD>(f, kv, blockIdx.x / f.attn_parts, blockIdx.x % f.attn_parts, f.attn_parts, bt_s, q_s, red,
                     weights, vsm, [] { ConsumerSync(); });
}

// Matrix idx of the step, in the order of use: 4 per layer (q|k|v, o, gate|up, down), then the lm_head.
__device__ __forceinline__ const LinearArgs& StepMatrix(const DecodeStepArgs& f, int idx) {
  if (idx == 4 * f.num_layers) return f.lm_head;
  const StepLayerArgs& l = f.layers[idx / 4];
  switch (idx % 4) {
    case 0:
      return l.qkv;
    case 1:
      return l.out;
    case 2:
      return l.gate_up;
    default:
      return l.down;
  }
}
__device__ __forceinline__ int StepTileRows(const DecodeStepArgs& f, int idx) {
  return idx < 4 * f.num_layers && idx % 4 == 3 ? kStepDownRows : kStepRows;
}

// A block's walk over its tiles of every matrix of the step, in the order of use. The current
// matrix's address and sizes are kept in registers: the producer issues a tile every few
// hundred cycles and must not chase the argument table for each one.
template <WeightType WT>
struct StepCursor {
  int idx = -1;  // matrix (StepMatrix); -1 before the first
  int tile = 0;  // tile of that matrix
  int tiles = 0, rows = 0, tile_rows = 0;
  int64_t row_bytes = 0;
  const char* data = nullptr;
  __device__ __forceinline__ bool Next(const DecodeStepArgs& f) {
    tile += gridDim.x;
    while (tile >= tiles) {
      if (++idx > 4 * f.num_layers) return false;
      const LinearArgs& a = StepMatrix(f, idx);
      tile_rows = StepTileRows(f, idx);
      rows = a.w.rows;
      tiles = (rows + tile_rows - 1) / tile_rows;
      row_bytes = static_cast<int64_t>(a.w.cols_padded) * kWeightBytes<WT>;
      data = static_cast<const char*>(a.w.data);
      tile = blockIdx.x;
    }
    return true;
  }
  __device__ __forceinline__ const char* Src() const { return data + static_cast<int64_t>(tile) * tile_rows * row_bytes; }
  __device__ __forceinline__ uint32_t Bytes() const {
    return static_cast<uint32_t>(min(tile_rows, rows - tile * tile_rows) * row_bytes);
  }
  __device__ __forceinline__ void PrefetchL2() const {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(Src()), "r"(Bytes()) : "memory");
  }
};

// What a one-launch step tile's epilogue reads besides its sums: the residual a lane adds
// (kAddResidual) or the bias, rotary constants and destinations of a rotary pair (kRopeStore).
// StepMatrixPhase loads them for a warp's next tile before it waits for that tile, so their round
// trip to L2 overlaps the wait and the dot product instead of following them.
struct StepEpilogueOperands {
  float resid = 0.0f;
  RopeTarget rope;
};

template <int ROWS, LinearEpilogue EPI>
__device__ __forceinline__ StepEpilogueOperands LoadStepEpilogue(const LinearArgs& a, int tile, int lane) {
  StepEpilogueOperands e;
  const int row = tile * ROWS + lane;
  if constexpr (EPI == LinearEpilogue::kAddResidual) {
    // Through L2: other blocks wrote the residual stream (before the grid barrier that began
    // this phase; in this phase only this lane writes its row).
    if (lane < ROWS && row < a.w.rows) e.resid = __ldcg(a.out + (a.out_lane_rows ? PermutedIndex(row) : row));
  } else if constexpr (EPI == LinearEpilogue::kRopeStore) {
    e.rope = PlanRopeStore<ROWS>(a, tile * ROWS, lane);
  }
  return e;
}

// The consumers' part of one matrix: stage (and normalise) the activation row, then every tile
// of this block that falls to this warp: wait for its slot, the dot products, free the slot, the
// epilogue. `seq` counts the block's tiles (the producer's order): the block's i-th tile of the
// matrix is its tile seq + i, and falls to warp (seq + i) % kStepWarps. EPI: the matrix's
// epilogue (a.epilogue) and NORM: whether its RMSNorm is fused (a.norm_weight set), fixed per call
// site so that each inlined phase holds only its own code (CanRunDecodeStep checks both). The
// kernel's code is about 140 KB and its multiprocessors fetch it again every step: less of it
// measured faster (each 20 KB less: 1.5B batch 1 about 1-3% faster), except where the saving cost
// the dot product's unrolling or put calls in the tile loop.
template <WeightType WT, int ROWS, LinearEpilogue EPI, bool NORM>
__device__ __forceinline__ void StepMatrixPhase(const LinearArgs& a, const unsigned char* ring, int slots,
                                                int slot_bytes, uint64_t* full, uint64_t* empty, float4* xs,
                                                int& seq, volatile int* hold) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int groups = a.w.cols_padded / kGroupCols;
  const int tiles = (a.w.rows + ROWS - 1) / ROWS;
  const int block_tiles = tiles > static_cast<int>(blockIdx.x) ? (tiles - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
  int t = (warp - seq % kStepWarps + kStepWarps) % kStepWarps;  // this warp's first tile of the matrix
  // Its epilogue operands first: their round trip overlaps the activation row's.
  StepEpilogueOperands next;
  if (t < block_tiles) next = LoadStepEpilogue<ROWS, EPI>(a, blockIdx.x + t * gridDim.x, lane);
  // The norm's weights (constants) are loaded first, into registers for the first kStepNormRegs
  // chunks of each thread, so their round trip overlaps the activation's.
  constexpr int kStepNormRegs = 2;
  const float4* nw = reinterpret_cast<const float4*>(a.norm_weight);
  float4 nwr[kStepNormRegs];
  if constexpr (NORM) {
#pragma unroll
    for (int k = 0; k < kStepNormRegs; ++k) {
      const int i = threadIdx.x + k * kStepWarps * 32;
      nwr[k] = i < groups * 32 ? nw[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
  }
  const int src = a.x_rows != nullptr ? a.x_rows[0] : 0;
  const float4* xg = reinterpret_cast<const float4*>(a.x + static_cast<int64_t>(src) * a.x_stride);
  for (int i = threadIdx.x; i < groups * 32; i += kStepWarps * 32) xs[i] = __ldcg(xg + i);
  ConsumerSync();
  if constexpr (NORM) {
    // (Four groups per unrolled iteration: the sum is a chain of FMAs anyway, and the compiler's
    // own unrolling put several hundred instructions into each of the three normalising phases.)
    const float r =
        canonical_rms_scale(WarpTree(LaneRowSumSquares<4>(xs, groups, lane)), a.w.cols, a.norm_eps);
    ConsumerSync();  // every warp has its sum of squares before x is overwritten
#pragma unroll
    for (int k = 0; k < kStepNormRegs; ++k) {
      const int i = threadIdx.x + k * kStepWarps * 32;
      if (i < groups * 32) xs[i] = NormScale(xs[i], r, nwr[k]);
    }
    for (int i = threadIdx.x + kStepNormRegs * kStepWarps * 32; i < groups * 32; i += kStepWarps * 32)
      xs[i] = NormScale(xs[i], r, nw[i]);
    ConsumerSync();
  }
  if (threadIdx.x == 0) *hold = 0;  // the activation row is staged: the producer may copy again
  const int64_t row_bytes = static_cast<int64_t>(a.w.cols_padded) * kWeightBytes<WT>;
  for (; t < block_tiles; t += kStepWarps) {
    const int tile = blockIdx.x + t * gridDim.x;
    const int slot = (seq + t) % slots;
    MbarWait(&full[slot], static_cast<uint32_t>(((seq + t) / slots) & 1));
    float acc[ROWS];
    SharedBandDot<WT, ROWS, kStepDotUnroll>(ring + static_cast<int64_t>(slot) * slot_bytes, row_bytes, xs, groups, lane,
                                             nullptr, 0.0f,
                            acc);
    __syncwarp();  // every lane has consumed the slot (its FMAs used every value it read)
    if (lane == 0) MbarArrive(&empty[slot]);
    const StepEpilogueOperands e = next;
    if (t + kStepWarps < block_tiles) next = LoadStepEpilogue<ROWS, EPI>(a, tile + kStepWarps * gridDim.x, lane);
#pragma unroll
    for (int r = 0; r < ROWS; ++r) acc[r] = WarpTree(acc[r]);
    if constexpr (EPI == LinearEpilogue::kRopeStore) {
      StoreRope<ROWS>(a, e.rope, acc, lane);
    } else if constexpr (EPI == LinearEpilogue::kSiluMul) {
#pragma unroll
      for (int r = 0; r + 1 < ROWS; r += 2) {
        const int row = tile * ROWS + r;
        if (lane == r && row + 1 < a.w.rows) {
          const int n = row / 2;
          a.out[a.out_lane_rows ? PermutedIndex(n) : n] = canonical_silu(acc[r]) * acc[r + 1];
        }
      }
    } else {
      static_assert(EPI == LinearEpilogue::kAddResidual || EPI == LinearEpilogue::kStore, "step epilogues");
#pragma unroll
      for (int r = 0; r < ROWS; ++r) {
        const int row = tile * ROWS + r;
        if (lane != r || row >= a.w.rows) continue;
        const int o = a.out_lane_rows ? static_cast<int>(PermutedIndex(row)) : row;
        a.out[o] = EPI == LinearEpilogue::kAddResidual ? e.resid + acc[r] : acc[r];
      }
    }
  }
  seq += block_tiles;
}

// NG: attention's V groups per warp for the model's head dimension (AttnGroups), so the batched
// attention loops (two positions per batch) hold only the registers that dimension needs.
// SPLIT: whether the step may attend a head over parts of its positions (AttendHeadPart); the host
// launches the kernel without that code where the step's context is below f.attn_split_min_context.
template <WeightType WT, int NG, bool SPLIT>
__global__ void __launch_bounds__(kStepThreads, 1)
    DecodeStepKernel(const __grid_constant__ DecodeStepArgs f, int32_t slots, int32_t slot_bytes, int32_t union_bytes,
                     int32_t returning_barrier, int32_t prefetch_tiles, int32_t weight_evict_first,
                     int32_t hold_copies) {
  extern __shared__ __align__(128) unsigned char step_smem[];
  __shared__ __align__(8) uint64_t full[kStepMaxSlots];
  __shared__ __align__(8) uint64_t empty[kStepMaxSlots];
  __shared__ float q_s[kMaxHeadDim];
  __shared__ float red[kAttnWarps];
  // Set from a grid barrier until the next activation row is staged: with hold_copies the producer
  // issues no copy meanwhile, since the data of its copies and the consumers' loads (the barrier's
  // polls, the row) come back to the multiprocessor the same way, and the loads are on the step's
  // critical path (1.5B batch 1: +2%, H100).
  __shared__ volatile int hold;
  LetNextStart();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  unsigned char* ring = step_smem;
  // The activation row of a matrix phase and attention's scores share one region.
  float4* xs = reinterpret_cast<float4*>(step_smem + static_cast<int64_t>(slots) * slot_bytes);
  float* scores = reinterpret_cast<float*>(xs);
  int32_t* bt_s = reinterpret_cast<int32_t*>(step_smem + static_cast<int64_t>(slots) * slot_bytes + union_bytes);
  if (threadIdx.x == 0) {
    for (int s = 0; s < slots; ++s) {
      MbarInit(&full[s], 1);
      MbarInit(&empty[s], 1);
    }
    FenceMbarInit();
    hold = 0;
  }
  __syncthreads();

  if (warp == kStepWarps) {  // the producer: weights only, so it never waits for the previous kernel
    if (lane != 0) return;
    // A second cursor runs prefetch_tiles tiles ahead and asks L2 for them (no shared memory
    // needed), so DRAM keeps streaming while the ring is full: at a barrier, or in attention.
    StepCursor<WT> cur, ahead;
    const uint64_t policy = weight_evict_first ? EvictFirstPolicy() : 0;
    for (int i = 0; i < prefetch_tiles && ahead.Next(f); ++i) ahead.PrefetchL2();
    for (int seq = 0; cur.Next(f); ++seq) {
      if (prefetch_tiles > 0 && ahead.Next(f)) ahead.PrefetchL2();
      const int slot = seq % slots;
      if (seq >= slots) MbarWait(&empty[slot], static_cast<uint32_t>((seq / slots - 1) & 1));
      if (hold_copies)
        while (hold) {
        }
      const uint32_t bytes = cur.Bytes();
      MbarExpectTx(&full[slot], bytes);
      BulkCopyToSharedHinted(ring + static_cast<int64_t>(slot) * slot_bytes, cur.Src(), bytes, &full[slot],
                             weight_evict_first != 0, policy);
    }
    return;
  }

  // Consumers. The step's metadata was copied in before its first kernel: the block table can be
  // read now, once for every layer.
  const AttentionShape& shape = f.shape;
  const int bs = shape.block_size, hd = shape.head_dim;
  const int kv_dim = shape.num_kv_heads * hd;
  const int L = f.step.pos[0] + 1;
  for (int b = threadIdx.x; b < (L + bs - 1) / bs; b += kStepWarps * 32) bt_s[b] = f.step.block_table[b];
  // Long contexts: each head in `parts` blocks over parts of its positions (AttendHeadPart).
  const int parts = AttentionPartsFor(f.attn_parts, shape.num_heads, static_cast<int>(gridDim.x));
  const bool split_attention = SPLIT && f.attn_sync != nullptr && f.attn_split_min_context > 0 && L >= f.attn_split_min_context &&
                               parts > 0 && hd % 8 == 0;
  StepBarrier bar{f.barrier};
  bar.returning = returning_barrier != 0;
  bar.Start(5 * f.num_layers);
  WaitForPrevious();
  StepTrace trace;
  if (f.trace != nullptr) {
    trace.slots = f.trace + static_cast<int64_t>(blockIdx.x) * 2 * DecodeStepTraceSlots(f.num_layers);
    const unsigned long long t = GlobalTimer();
    trace.Record(t, t);
  }
  ConsumerSync();
  int seq = 0;
  for (int layer = 0; layer < f.num_layers; ++layer) {
    const StepLayerArgs& ly = f.layers[layer];
    if (layer > 0) StepGridBarrier(bar, trace, &hold);  // the previous layer's residual stream is complete
    // Blocks that will attend pull this layer's K/V rows of earlier steps into L2 meanwhile.
    if (!split_attention) {
      for (int it = blockIdx.x; it < shape.num_heads * kStepAttnSplit<NG>; it += gridDim.x)
        PrefetchKvRows<false>(ly.kv, bt_s, bs, kv_dim, hd,
                              it / kStepAttnSplit<NG> / (shape.num_heads / shape.num_kv_heads), L - 1, threadIdx.x,
                              kStepWarps * 32);
    } else if (static_cast<int>(blockIdx.x) < shape.num_heads * parts) {
      // A part's K rows (its chunk) and V rows (its classes).
      const int h = blockIdx.x / parts, p = blockIdx.x % parts;
      const int g = h / (shape.num_heads / shape.num_kv_heads);
      const int chunk = (L + parts - 1) / parts;
      for (int j = p * chunk + threadIdx.x; j < min(L - 1, (p + 1) * chunk); j += kStepWarps * 32) {
        const char* kp = reinterpret_cast<const char*>(ly.kv.k + (CacheRow(bt_s, j, bs)) * kv_dim + g * hd);
        for (int off = 0; off < hd * 4; off += 128) asm volatile("prefetch.global.L2 [%0];" ::"l"(kp + off));
      }
      const int classes = 32 / parts;  // the part's position classes p + parts k
      for (int i = threadIdx.x; i < (L - 1 + parts - 1) / parts; i += kStepWarps * 32) {
        const int j = 32 * (i / classes) + p + parts * (i % classes);
        if (j >= L - 1) continue;
        const char* vp = reinterpret_cast<const char*>(ly.kv.v + (CacheRow(bt_s, j, bs)) * kv_dim + g * hd);
        for (int off = 0; off < hd * 4; off += 128) asm volatile("prefetch.global.L2 [%0];" ::"l"(vp + off));
      }
    }
    StepMatrixPhase<WT, kStepRows, LinearEpilogue::kRopeStore, true>(ly.qkv, ring, slots, slot_bytes, full, empty, xs, seq, &hold);
    StepGridBarrier(bar, trace, &hold);  // q, and this step's K and V rows, are complete
    if (threadIdx.x == 0) hold = 0;  // (attention reads no activation row)
#ifdef ROTE_CUDA_TIMELINE
    // Benchmarks: the timer at each of attention's block barriers, after the barrier pairs.
    unsigned long long* points =
        trace.slots != nullptr
            ? trace.slots + 2 * (5 * f.num_layers + 2) + static_cast<int64_t>(layer) * kStepAttentionTracePoints
            : nullptr;
    int point = 0;
    auto attention_sync = [&] {
      ConsumerSync();
      if (points != nullptr && threadIdx.x == 0 && point < kStepAttentionTracePoints) points[point] = GlobalTimer();
      ++point;
    };
#else
    auto attention_sync = [] { ConsumerSync(); };
#endif
    if (split_attention) {
      if (static_cast<int>(blockIdx.x) < shape.num_heads * parts)
        AttendHeadPart<NG, kInterleavedPartsV>(f, ly.kv, blockIdx.x / parts, blockIdx.x % parts, parts, bt_s, q_s, red, scores,
                           scores + f.max_context, attention_sync);
    } else
    for (int it = blockIdx.x; it < shape.num_heads * kStepAttnSplit<NG>; it += gridDim.x) {
      constexpr int kSplit = kStepAttnSplit<NG>, kVng = NG / kSplit;
      // Slices of whole 8-dim lane groups (hd is a multiple of 8), at most 64 dims each (hd is at
      // most 64 NG); the last takes what is left.
      const int slice = (hd / kSplit + 7) / 8 * 8, dim0 = it % kSplit * slice;
      AttendHead<NG, kStepAttnBatch<NG>, false, false, kVng, kStepAttnBatch<kVng>>(
          f.q, f.step, shape, ly.kv, f.scale, f.att, 0, it / kSplit, 0, scores, bt_s, q_s, red, scores + f.max_context,
          static_cast<const AttnFirstBatch<NG, kStepAttnBatch<NG>>*>(nullptr), nullptr, nullptr, threadIdx.x, true,
          attention_sync, max(0, min(slice, hd - dim0)), dim0);
    }
    StepGridBarrier(bar, trace, &hold);
    StepMatrixPhase<WT, kStepRows, LinearEpilogue::kAddResidual, false>(ly.out, ring, slots, slot_bytes, full, empty, xs, seq, &hold);
    StepGridBarrier(bar, trace, &hold);
    StepMatrixPhase<WT, kStepRows, LinearEpilogue::kSiluMul, true>(ly.gate_up, ring, slots, slot_bytes, full, empty, xs, seq, &hold);
    StepGridBarrier(bar, trace, &hold);
    StepMatrixPhase<WT, kStepDownRows, LinearEpilogue::kAddResidual, false>(ly.down, ring, slots, slot_bytes, full, empty, xs, seq, &hold);
  }
  StepGridBarrier(bar, trace, &hold);
  StepMatrixPhase<WT, kStepRows, LinearEpilogue::kStore, true>(f.lm_head, ring, slots, slot_bytes, full, empty, xs, seq, &hold);
  if (f.trace != nullptr) {
    ConsumerSync();
    const unsigned long long t = GlobalTimer();
    trace.Record(t, t);
  }
}

// The ring's slot (the largest tile), the shared activation/scores region, the block table,
// and how many slots fit (a multiple of kStepWarps; 0: the step does not fit).
struct DecodeStepPlan {
  int64_t slot = 0, union_bytes = 0, table_bytes = 0;
  int slots = 0;
  int64_t smem() const { return slots * slot + union_bytes + table_bytes; }
};

int StepKernelSmemLimit() {
  static PerDevice<int> limit_on;
  return limit_on.Get([] {
    int device = 0, optin = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess)
      return 0;
    cudaFuncAttributes attr{};
    if (cudaFuncGetAttributes(&attr, DecodeStepKernel<WeightType::kBF16, AttnGroups(kMaxHeadDim), true>) != cudaSuccess)
      return 0;
    return optin - static_cast<int>(attr.sharedSizeBytes);
  });
}

DecodeStepPlan PlanDecodeStep(const DecodeStepArgs& f, const StepLayerArgs& l0) {
  const int64_t eb = l0.qkv.w.type == WeightType::kF32 ? 4 : 2;
  DecodeStepPlan p;
  p.slot = std::max({int64_t{kStepRows} * l0.qkv.w.cols_padded, int64_t{kStepRows} * l0.out.w.cols_padded,
                     int64_t{kStepRows} * l0.gate_up.w.cols_padded, int64_t{kStepDownRows} * l0.down.w.cols_padded,
                     int64_t{kStepRows} * f.lm_head.w.cols_padded}) *
           eb;
  p.slot = (p.slot + 127) / 128 * 128;
  const int64_t xs = int64_t{4} * std::max({l0.qkv.w.cols_padded, l0.out.w.cols_padded, l0.gate_up.w.cols_padded,
                                            l0.down.w.cols_padded, f.lm_head.w.cols_padded});
  // Attention's scores and its V-pass partials (AttendValues' vpart) follow each other there.
  p.union_bytes = (std::max<int64_t>(xs, int64_t{4} * (f.max_context + kAttnWarps * f.shape.head_dim)) + 127) / 128 * 128;
  p.table_bytes = (int64_t{f.max_context} / std::max(1, f.shape.block_size) + 2) * 4;
  const int64_t room = StepKernelSmemLimit() - p.union_bytes - p.table_bytes;
  const int64_t fit = room > 0 ? room / p.slot : 0;
  p.slots = static_cast<int>(std::min<int64_t>(kStepMaxSlots, fit) / kStepWarps * kStepWarps);
  return p;
}

template <WeightType WT>
cudaError_t LaunchDecodeStepTyped(const DecodeStepArgs& f, const DecodeStepPlan& p, const CudaTuning& tuning,
                                  cudaStream_t stream) {
  const int hd = f.shape.head_dim;
  // Without the parts' code where this step does not attend in parts: the kernel is 50 KB
  // shorter, and attention measured 0.3 us a layer faster (1.5B batch 1, docs/performance.md).
  const bool split = f.attn_sync != nullptr;
  auto* kernel = hd <= kAttnWarps * 8       ? (split ? DecodeStepKernel<WT, 1, true> : DecodeStepKernel<WT, 1, false>)
                 : hd <= 2 * kAttnWarps * 8 ? (split ? DecodeStepKernel<WT, 2, true> : DecodeStepKernel<WT, 2, false>)
                                            : (split ? DecodeStepKernel<WT, AttnGroups(kMaxHeadDim), true>
                                                     : DecodeStepKernel<WT, AttnGroups(kMaxHeadDim), false>);
  static PerDevice<cudaError_t> prepared_on;
  const cudaError_t prepared = prepared_on.Get([] {
    for (auto* k : {DecodeStepKernel<WT, 1, true>, DecodeStepKernel<WT, 2, true>,
                    DecodeStepKernel<WT, AttnGroups(kMaxHeadDim), true>, DecodeStepKernel<WT, 1, false>,
                    DecodeStepKernel<WT, 2, false>, DecodeStepKernel<WT, AttnGroups(kMaxHeadDim), false>}) {
      const cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, StepKernelSmemLimit());
      if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
  });
  if (prepared != cudaSuccess) return prepared;
  // One block per multiprocessor (its shared memory allows no second), all resident at once, as
  // the grid barrier needs; the kernel lets the next one launch only after every block started.
  // Cooperative: the grid barrier needs every block resident; where they cannot be (MPS giving
  // this process part of the device), the launch fails with an error instead of hanging.
  return LaunchChainedImpl(/*cooperative=*/true, kernel, dim3(MultiprocessorCount()), dim3(kStepThreads),
                       static_cast<size_t>(p.smem()), stream, f, p.slots, static_cast<int32_t>(p.slot),
                       static_cast<int32_t>(p.union_bytes), static_cast<int32_t>(tuning.one_token_kernel != 9),
                       tuning.step_prefetch_tiles, static_cast<int32_t>(tuning.weight_evict_first),
                       static_cast<int32_t>(tuning.one_token_kernel != 10));
}

int64_t AttentionPartsSmem(int32_t max_context, int32_t block_size) {
  return (int64_t{max_context} + 4 * kMaxHeadDim) * 4 + (int64_t{max_context} / block_size + 1) * 4;
}

bool CanRunAttentionPartsImpl(const StepTokens& step, const AttentionShape& shape, int32_t max_context, int32_t parts) {
  static PerDevice<int> optin_on;
  const int optin = optin_on.Get([] {
    int device = 0, v = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess)
      return 0;
    return v;
  });
  return step.tokens == 1 && shape.head_dim % 8 == 0 && shape.head_dim <= kMaxHeadDim && shape.block_size >= 1 &&
         AttentionPartsFor(parts, shape.num_heads, static_cast<int>(MultiprocessorCount())) > 0 &&
         AttentionPartsSmem(max_context, shape.block_size) + 2048 <= optin;
}

cudaError_t LaunchAttentionPartsImpl(const float* q, const StepTokens& step, const AttentionShape& shape, LayerKv kv,
                                     float scale, int32_t max_context, float* out, const AttentionParts& parts,
                                     const LaunchContext& ctx, cudaStream_t stream) {
  if (!CanRunAttentionPartsImpl(step, shape, max_context, parts.parts)) return cudaErrorInvalidValue;
  DecodeStepArgs f;
  f.step = step;
  f.shape = shape;
  f.scale = scale;
  f.max_context = max_context;
  f.q = q;
  f.att = out;
  f.attn_scores = parts.scores;
  f.attn_maxes = parts.maxes;
  f.attn_vpart = parts.vpart;
  f.attn_sync = parts.sync;
  f.attn_parts = AttentionPartsFor(parts.parts, shape.num_heads, static_cast<int>(MultiprocessorCount()));
  const int hd = shape.head_dim;
  constexpr int kBig = AttnGroups(kMaxHeadDim);
  const int loads = parts.v_loads;
  auto* kernel = hd <= kAttnWarps * 8
                     ? (loads == kInterleavedPartsV ? AttentionPartsKernel<1, kInterleavedPartsV>
                        : loads == kDeepPartsV      ? AttentionPartsKernel<1, kDeepPartsV>
                                                    : AttentionPartsKernel<1, 4>)
                 : hd <= 2 * kAttnWarps * 8
                     ? (loads == kInterleavedPartsV ? AttentionPartsKernel<2, kInterleavedPartsV>
                        : loads == kDeepPartsV      ? AttentionPartsKernel<2, kDeepPartsV>
                                                    : AttentionPartsKernel<2, 4>)
                     : (loads == kInterleavedPartsV ? AttentionPartsKernel<kBig, kInterleavedPartsV>
                        : loads == kDeepPartsV      ? AttentionPartsKernel<kBig, kDeepPartsV>
                                                    : AttentionPartsKernel<kBig, 4>);
  const int64_t smem = AttentionPartsSmem(max_context, shape.block_size);
  // The largest shared memory each kernel was allowed so far, per device (attributes are the
  // device's); backends on several threads may launch at once.
  static std::mutex prepared_mu;
  static int64_t prepared_smem[kMaxCachedDevices][9] = {};
  const int which = (hd <= kAttnWarps * 8 ? 0 : hd <= 2 * kAttnWarps * 8 ? 1 : 2) +
                    (loads == kInterleavedPartsV ? 6 : loads == kDeepPartsV ? 3 : 0);
  int device = 0;
  if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  {
    std::lock_guard<std::mutex> lock(prepared_mu);
    int64_t* prepared = device >= 0 && device < kMaxCachedDevices ? &prepared_smem[device][which] : nullptr;
    if (prepared == nullptr || smem > *prepared) {
      const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
      if (e != cudaSuccess) return e;
      if (prepared != nullptr) *prepared = smem;
    }
  }
  if (ctx.stats != nullptr) ++ctx.stats->attention_parts_launches;
  // Cooperative: the parts of a head wait for each other, so every block must be resident.
  return LaunchChainedImpl(/*cooperative=*/true, kernel, dim3(shape.num_heads * f.attn_parts), dim3(kAttnThreads),
                           static_cast<size_t>(smem), stream, f, kv);
}
