// The CUDA kernels of the exact profile (docs/numerics.md) and their launchers. Every kernel
// keeps the canonical 32-lane order: lane t of a warp owns the terms k ≡ t (mod 32) of each
// reduction, in increasing k, and the warp's xor butterfly (off 16..1) is the canonical tree.
// Plain pointers and sizes only, so each kernel could be checked alone against the scalar
// reference in canonical.h; today they are checked together, against the CPU backend
// (tests/inference/cuda_backend_test.cc). Every launch is chained (programmatic dependent
// launch): a kernel waits for the previous one before reading its results.
#pragma once

#include <cuda_runtime.h>  // cudaStream_t, cudaError_t

#include <cstdint>

#include "inference/cuda/tuning.h"
#include "inference/numerics/canonical.h"  // ROTE_HD

namespace rote::inference::cuda {

enum class WeightType : int { kBF16 = 0, kF16 = 1, kF32 = 2 };

// What the launchers that choose among kernels read: the backend's tuning (tuning.h), and the
// backend's counters of what they launched (null: not counted).
struct LaunchContext {
  const CudaTuning* tuning = nullptr;
  CudaLaunchStats* stats = nullptr;
};

// Terms a lane reads per 16-byte-aligned group step: group g of a permuted row holds the
// 128 columns [128 g, 128 g + 128); lane t's four terms k = 128 g + 32 i + t (i = 0..3) sit
// contiguously at [128 g + 4 t, 128 g + 4 t + 4), so one 8-byte (bf16/fp16) or 16-byte (fp32)
// load brings a lane its next four terms in canonical order.
inline constexpr int kGroupCols = 128;

ROTE_HD inline int64_t PaddedCols(int64_t cols) { return (cols + kGroupCols - 1) / kGroupCols * kGroupCols; }
// Column k of a logical row -> its index in the permuted row.
ROTE_HD inline int64_t PermutedIndex(int64_t k) {
  const int64_t g = k / kGroupCols, w = k % kGroupCols;
  return g * kGroupCols + (w % 32) * 4 + w / 32;
}

// The KV cache row of position j of a sequence whose block table is bt: entry j / block_size,
// slot j % block_size. Block sizes are powers of two (kKvBlockSize, backend.h), so a shift and a
// mask instead of two integer divides (the attention kernels' staging did them for every 16-byte
// piece of every row, before their wait).
ROTE_HD inline int64_t CacheRow(const int32_t* bt, int j, int block_size) {
#ifdef __CUDA_ARCH__
  const int shift = __ffs(block_size) - 1;
#else
  const int shift = __builtin_ctz(static_cast<unsigned>(block_size));
#endif
  return (static_cast<int64_t>(bt[j >> shift]) << shift) + (j & (block_size - 1));
}

// A matrix (rows, cols) in device memory, rows permuted as above and zero-padded to
// cols_padded (zeros are neutral in the canonical order: docs/numerics.md section 2).
struct DeviceMatrix {
  const void* data = nullptr;  // (rows, cols_padded) of `type`
  WeightType type = WeightType::kBF16;
  int32_t rows = 0;
  int32_t cols = 0;
  int32_t cols_padded = 0;
  // The fast profile's copy of a bf16 matrix in tensor-core tile order (fast_tiles.h); null in
  // the exact profile.
  const void* fast_tiles = nullptr;
};

enum class LinearEpilogue : int {
  kStore = 0,        // out[m][n] = dot
  kAddBias = 1,      // out[m][n] = dot + bias[n]
  kAddResidual = 2,  // out[m][n] = out[m][n] + dot     (the residual stream, in place)
  kSiluMul = 3,      // rows interleaved gate/up: out[m][n] = silu(dot(2n)) * dot(2n + 1)
  kRopeStore = 4,    // the q|k|v product (+ bias), rotary on q and k, k and v into the KV cache:
                     // LinearArgs::rope (one-token exact products, and the fast profile's)
};

// The q|k|v matrix's rows are uploaded in "rotary pair order": inside each q and k head, the
// rows of dims i and i + head_dim / 2 are adjacent (rows 2i and 2i + 1 of the head), so the warp
// that computes one also computes its rotary partner. v rows keep their order. The product of
// a batch (plain rows) is in this order too; the rotary kernel reads it accordingly.
ROTE_HD inline int32_t RopePairRow(int32_t dim_in_head, int32_t head_dim) {
  const int32_t half = head_dim / 2;
  return dim_in_head < half ? 2 * dim_in_head : 2 * (dim_in_head - half) + 1;
}

// What the kRopeStore epilogue needs: the token's position and KV slot, the rotary tables, and
// where q, k and v go (exactly what LaunchRopeStore does for a batch, without Qwen3's q/k norms).
struct RopeArgs {
  const int32_t* pos = nullptr;          // (tokens) the tokens' positions
  const int32_t* block_table = nullptr;  // (tokens, max_blocks): each token's sequence's table
  int32_t max_blocks = 0;                // the table's row stride (one token: unused)
  int32_t block_size = 0;
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  const float* cos = nullptr;  // (positions, head_dim / 2)
  const float* sin = nullptr;
  float* q_out = nullptr;    // (tokens, q_dim)
  float* k_cache = nullptr;  // this layer's (blocks, block_size, kv_dim)
  float* v_cache = nullptr;
};

// Activations that feed a matrix product (the residual stream, the normalised stream, the
// attention output, the MLP activation) are stored as "lane rows": width PaddedCols(cols),
// element k at PermutedIndex(k), zeros in the padding. A lane then reads its next four terms
// with one 16-byte load, in canonical order, with no staging; and a warp reading a lane row
// group by group visits every lane's terms in increasing k (the canonical sum of squares too).

// out = epilogue(W · norm(x)) for `tokens` activation rows.
//   x: (tokens, x_stride) lane rows of w.cols; row m of the product reads x row x_rows[m]
//      (x_rows may be null: identity). When norm_weight (a lane row of w.cols) is set, x is
//      RMS-normalised first, exactly as the CPU does it (canonical sum of squares, (x * r) * w).
//   out: (tokens, out_stride) fp32, plain rows, or lane rows when out_lane_rows.
struct LinearArgs {
  DeviceMatrix w;
  const float* x = nullptr;
  int32_t x_stride = 0;
  const int32_t* x_rows = nullptr;
  int32_t tokens = 0;
  const float* norm_weight = nullptr;
  float norm_eps = 0.0f;
  LinearEpilogue epilogue = LinearEpilogue::kStore;
  const float* bias = nullptr;  // (w.rows) for kAddBias
  float* out = nullptr;
  int32_t out_stride = 0;
  bool out_lane_rows = false;
  RopeArgs rope;  // kRopeStore only
  // Batched products whose K is split over several blocks (TiledLinearKernel with KS > 1): each
  // block's class sums (split_scratch_floats floats of device memory) and one ticket counter per
  // output tile (split_tickets_count zeroed uint32; every launch leaves them zero again). Shared
  // by every product on one stream (each reads them only after the previous kernel finished).
  // Null: products are never split.
  float* split_scratch = nullptr;
  int64_t split_scratch_floats = 0;
  uint32_t* split_tickets = nullptr;
  int32_t split_tickets_count = 0;
  bool bench_skip_weight_reads = false;  // benchmarks only: one-token bulk-copy kernels read no weights
  // Weight reads hinted L2 evict_first (one-token bulk copies and register tiles; LaunchLinear also
  // sets it where CudaTuning::weight_evict_first is on).
  bool weight_evict_first = false;
  // FastLinearKernel, unsliced: blocks 0 .. prefetch_early_blocks - 1 in launch order ask L2,
  // before their wait, for the weights that the later blocks copy before theirs (LatePrefetch
  // below). 0: none.
  int32_t prefetch_early_blocks = 0;
  // The fast profile's prefill products on wgmma (fast_linear.h, FastWgmmaScratchBytes): device
  // memory for the activations' pieces and the norm's scales, shared by every product on one
  // stream. Null: those products take FastLinearKernel.
  void* fast_scratch = nullptr;
  int64_t fast_scratch_bytes = 0;
  // Grouped products (LaunchGroupedLinear only): w stacks `groups` matrices of w.rows rows each
  // (group g's row r at g x w.rows + r). Input rows [group_first[g], group_first[g + 1]) take
  // group g's matrix and write the same rows of out; group_tiles[g] counts the token tiles of the
  // groups below g, tiles of GroupedTileTokens(tokens, groups) rows (groups + 1 entries each, in
  // device memory, written by an earlier kernel on the stream: ExpertGroups).
  const int32_t* group_first = nullptr;
  const int32_t* group_tiles = nullptr;
  int32_t groups = 0;
};
// The kernel and its tile are chosen by size and ctx.tuning (CudaTuning::one_token_kernel and
// large_batch_tile); every choice gives the same bits.
cudaError_t LaunchLinear(const LinearArgs& args, const LaunchContext& ctx, cudaStream_t stream);
// `tokens` rows split over `groups` matrices (LinearArgs::groups: a mixture of experts' rows
// grouped by expert) in one launch, each group's rows through the exact profile's tiled kernel,
// whatever the profile: every output is the canonical dot LaunchLinear gives. Normalised
// activations, kStore, kAddBias or kAddResidual. The grid covers the most tiles `tokens` rows can
// take (ceil(tokens / tile) + groups); blocks past group_tiles[groups] end at once.
cudaError_t LaunchGroupedLinear(const LinearArgs& args, const LaunchContext& ctx, cudaStream_t stream);
// The token tile LaunchGroupedLinear takes for `tokens` rows over `groups` groups: 32, 16 or 8.
int32_t GroupedTileTokens(int32_t tokens, int32_t groups);
// Whether LaunchLinear can run `args` (one token) with the kRopeStore epilogue; when it cannot,
// the caller runs kAddBias / kStore and LaunchRopeStore.
bool CanFuseRope(const LinearArgs& args, const CudaTuning& tuning);
// The o product + residual, RMSNorm + gate|up + SiLU, and down product + residual of one token
// as one persistent launch with grid barriers between them (MlpBlockKernel): `out`, `gate_up`
// and `down` are exactly the LinearArgs the three separate launches would get (tokens 1, no
// x_rows, gate_up with kSiluMul). barrier: two zeroed uint32 in device memory, reused by every
// launch on the stream. Same bits as the separate launches.
struct MlpBlockArgs {
  LinearArgs out, gate_up, down;
  uint32_t* barrier = nullptr;
};
// At most CudaTuning::mlp_block_max_warps warps per block.
bool CanRunMlpBlock(const MlpBlockArgs& args, const CudaTuning& tuning);
cudaError_t LaunchMlpBlock(const MlpBlockArgs& args, const CudaTuning& tuning, cudaStream_t stream);

// Late blocks. A kernel's blocks that find no multiprocessor free beside the previous kernel's
// (gate|up behind o's merged blocks, attention behind q|k|v's) start only when those leave, and
// then wait for their first reads from DRAM (2.2-2.9 us for gate|up at 0.5B batch 32, H100). So
// the first blocks in launch order, which do find one, ask L2 for those reads
// (cp.async.bulk.prefetch.L2) before their own wait: gate|up's first steps of every later row
// tile (fast profile), grouped attention's K and V pages of every later token. A prefetch moves
// no bits. How many blocks ask, for a launch of `tokens` token rows: CudaTuning::
// late_prefetch_blocks.
int LatePrefetchEarlyBlocks(int32_t tokens, const CudaTuning& tuning);

// y = RMSNorm(x) * weight over lane rows of `cols` (padding stays zero), one warp per token.
// x_rows (may be null: identity): row m of y normalises x row x_rows[m].
cudaError_t LaunchRmsNorm(const float* x, int32_t stride, int32_t tokens, int32_t cols, const float* weight,
                          float eps, float* y, cudaStream_t stream, const int32_t* x_rows = nullptr);

// out row m (a lane row) = embed row tokens[m], converted exactly to fp32.
cudaError_t LaunchEmbed(const DeviceMatrix& embed, const int32_t* tokens, int32_t num_tokens, float* out,
                        int32_t out_stride, cudaStream_t stream);

// The per-token metadata of a step, in device memory.
struct StepTokens {
  const int32_t* pos = nullptr;          // (tokens) absolute position
  const int32_t* block_table = nullptr;  // (tokens, max_blocks): the token's sequence's table
  int32_t max_blocks = 0;
  int32_t tokens = 0;
};

// KV cache of one layer: (num_blocks, block_size, kv_dim) fp32 for K and for V.
struct LayerKv {
  float* k = nullptr;
  float* v = nullptr;
};

struct AttentionShape {
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t block_size = 0;  // a power of two (CacheRow)
  // Above 0, each scaled score s becomes canonical_softcap(s, softcap), as the CPU's attention
  // makes it (Gemma 2's attn_logit_softcapping); every attention kernel applies it.
  float softcap = 0.0f;
};

// One decode step of one token as one persistent launch (DecodeStepKernel): for every layer the
// q|k|v product (norm fused, rotary and the KV store in its epilogue), attention, the o product +
// residual, RMSNorm + gate|up + SiLU, the down product + residual; then the final norm and the
// lm_head. Dependencies are grid barriers instead of kernel boundaries, and a producer warp per
// block streams the weights of every matrix, in the order they are used, into a ring of shared
// memory slots through bulk copies: it never waits for activations, so the next layer's weights
// arrive while the grid waits at a barrier. Every output is one warp's canonical dot product and
// attention is AttentionKernel's code: the same bits as the separate launches.
struct StepLayerArgs {
  LinearArgs qkv;      // kRopeStore, norm fused
  LinearArgs out;      // kAddResidual
  LinearArgs gate_up;  // kSiluMul, norm fused
  LinearArgs down;     // kAddResidual
  LayerKv kv;
};
struct DecodeStepArgs {
  const StepLayerArgs* layers = nullptr;  // device memory, num_layers entries
  int32_t num_layers = 0;
  LinearArgs lm_head;  // kStore into the logits, final norm fused
  StepTokens step;     // one token
  AttentionShape shape;
  float scale = 0.0f;
  int32_t max_context = 0;  // bounds pos + 1 (sizes the scores in shared memory)
  const float* q = nullptr;  // the q|k|v epilogue's q_out
  float* att = nullptr;      // attention output: the o product's input (lane rows)
  unsigned long long* barrier = nullptr;  // one zeroed counter, reused by every launch
  // Benchmarks only (null otherwise): per block, DecodeStepTraceSlots(num_layers) pairs of
  // global-timer readings (ns): slot 0 after the previous kernel, then every grid barrier's
  // arrival and departure, then the end of the lm_head.
  unsigned long long* trace = nullptr;
  // Long contexts (pos + 1 >= attn_split_min_context; 0: never): each head attended by P = 8, 4
  // or 2 blocks over parts of its positions (attn_parts; 0: 8 or 4, the most with num_heads x P <=
  // the grid), meeting through these (null: never). attn_scores: (num_heads, max_context) floats;
  // attn_maxes: (num_heads, 8); attn_vpart: (num_heads, 8, head_dim); attn_sync: num_heads zeroed
  // counters, reused by every launch. The host sets them only for steps that reach
  // attn_split_min_context: without them the kernel is launched without the parts' code.
  int32_t attn_split_min_context = 0;
  int32_t attn_parts = 0;
  float* attn_scores = nullptr;
  float* attn_maxes = nullptr;
  float* attn_vpart = nullptr;
  unsigned long long* attn_sync = nullptr;
};
// In ROTE_CUDA_TIMELINE builds the attending blocks also record, per layer, the timer at each of
// attention's block barriers (kStepAttentionTracePoints single readings after the pairs, so
// kStepAttentionTracePoints / 2 slots per layer): q staged, scores, max, weights, V partials.
#ifdef ROTE_CUDA_TIMELINE
constexpr int32_t kStepAttentionTracePoints = 8;
#else
constexpr int32_t kStepAttentionTracePoints = 0;
#endif
ROTE_HD inline int32_t DecodeStepTraceSlots(int32_t num_layers) {
  return 5 * num_layers + 2 + num_layers * kStepAttentionTracePoints / 2;
}
// layer0: the host's copy of layers[0] (every layer has the same shapes).
// CudaTuning::one_token_kernel decides where it runs, and how its barrier and producer behave.
bool CanRunDecodeStep(const DecodeStepArgs& args, const StepLayerArgs& layer0, const CudaTuning& tuning);
cudaError_t LaunchDecodeStep(const DecodeStepArgs& args, const StepLayerArgs& layer0, const CudaTuning& tuning,
                             cudaStream_t stream);

// From the fused q|k|v rows (tokens, q_dim + 2 kv_dim): optional per-head RMSNorm of q and k
// (Qwen3), rotary at each token's position, q to q_out (tokens, q_dim), k and v into the cache.
// rope_cos/rope_sin: (positions, head_dim / 2).
cudaError_t LaunchRopeStore(const float* qkv, const StepTokens& step, const AttentionShape& shape,
                            const float* q_norm, const float* k_norm, float norm_eps, const float* rope_cos,
                            const float* rope_sin, float* q_out, LayerKv kv, cudaStream_t stream);

// Two-pass attention of every query head of every token over positions 0 .. pos: scores,
// max, canonical_expf, canonical sum, canonical weighted sum of V, one divide.
// out: (tokens, out_stride) lane rows of q_dim. max_context bounds pos + 1 (sizes the scores
// in shared memory).
// The variant: CudaTuning::attention_variant (by grid size by default).
cudaError_t LaunchAttention(const float* q, const StepTokens& step, const AttentionShape& shape, LayerKv kv,
                            float scale, int32_t max_context, float* out, int32_t out_stride,
                            const LaunchContext& ctx, cudaStream_t stream);
// One token decoding over a long context: each head attended by 8, 4 or 2 blocks over parts of its
// positions, meeting through counters (the one-launch step's long-context attention as a launch
// of its own; docs/cuda.md). Same bits as LaunchAttention. The scratch is DecodeStepArgs::attn_*'s.
struct AttentionParts {
  float* scores = nullptr;  // (num_heads, max_context)
  float* maxes = nullptr;   // (num_heads, 8)
  float* vpart = nullptr;   // (num_heads, 8, head_dim)
  unsigned long long* sync = nullptr;  // num_heads zeroed counters, reused by every launch
  int32_t parts = 0;  // blocks per head: 8, 4 or 2; 0: 8 or 4, the most with num_heads x parts <= multiprocessors
  int32_t v_loads = 32;  // CudaTuning::attention_parts_v_loads: 4, 16 or 32
};
bool CanRunAttentionParts(const StepTokens& step, const AttentionShape& shape, int32_t max_context, int32_t parts);
cudaError_t LaunchAttentionParts(const float* q, const StepTokens& step, const AttentionShape& shape, LayerKv kv,
                                 float scale, int32_t max_context, float* out, const AttentionParts& parts,
                                 const LaunchContext& ctx, cudaStream_t stream);
// Attention of a prefill step in query tiles (TileAttentionKernel, attention_tile.cuh): `tiles`
// holds num_tiles (first token, tokens) pairs on the device, each a run of consecutive positions
// of one sequence of at most AttentionTileTokens(shape) tokens, every token of the step in one.
// No window and no soft cap. Same bits as LaunchAttention.
int AttentionTileTokens(const AttentionShape& shape);  // 0: the kernel cannot take the shape
// Whether its shared memory (the staging, and the block table of max_context positions) fits a
// block; LaunchTileAttention refuses steps where it does not.
bool AttentionTileFits(const AttentionShape& shape, int32_t max_context);
// Whether `tiles` query tiles of a step run faster than the other kernels (CudaTuning::
// attention_tile_by_rule): at head_dim 128, with blocks (tiles x KV heads) for one full wave of the
// device (attention_tile_blocks_per_sm a multiprocessor); fewer leave it partly idle, where the
// other kernels' (query head, token) blocks fill it. At head_dim 64 (two terms a class of the dot)
// the grouped kernel measured faster.
bool AttentionTilesPay(const AttentionShape& shape, int64_t tiles, const CudaTuning& tuning);
cudaError_t LaunchTileAttention(const float* q, const StepTokens& step, const AttentionShape& shape, LayerKv kv,
                                float scale, int32_t max_context, float* out, int32_t out_stride,
                                const int32_t* tiles, int32_t num_tiles, const LaunchContext& ctx,
                                cudaStream_t stream);
// Shared memory LaunchAttention needs for max_context positions (it raises the kernel's limit).
int64_t AttentionSharedBytes(int32_t max_context);
cudaError_t PrepareAttention(int32_t max_context);

// Greedy: out[m] = argmax of logits row m (lowest index on ties, NaN never wins). `scratch`:
// ArgmaxScratchBytes(scratch_rows) bytes of device memory for up to scratch_rows rows, zeroed
// once before first use (its ticket counters return to zero at the end of every launch).
int64_t ArgmaxScratchBytes(int32_t scratch_rows);
cudaError_t LaunchArgmax(const float* logits, int32_t rows, int32_t cols, int32_t* out, void* scratch,
                         int32_t scratch_rows, cudaStream_t stream);

// Between two chained greedy decode steps (CudaBackend's ForwardGreedySteps): history[t] =
// chosen[t] for the `rows` rows, and, where tokens is not null, the next step's metadata: its token
// tokens[t] = chosen[t] and its position positions[t] + 1 (a decode step's token t is its row t).
cudaError_t LaunchAdvanceGreedy(const int32_t* chosen, int32_t rows, int32_t* history, int32_t* tokens,
                                int32_t* positions, cudaStream_t stream);

// Benchmarks only: a timeline of the kernels a step launches, in builds configured with
// ROTE_CUDA_TIMELINE (the bookkeeping changes the kernels' code, so it is not in other builds;
// there SetKernelTimeline returns cudaErrorNotSupported). While a buffer is set, thread 0 of every
// block of an instrumented kernel (embed, the matrix kernels but the persistent ones, RMSNorm,
// rotary, attention, argmax) appends one record to its multiprocessor's log when it returns:
// the grid's launch number (%gridid), the kind, global-timer readings (ns) at the block's start,
// at its return from the wait for the previous kernel, and at its end. Zero the buffer before a
// step; null turns recording off. One cursor and log per multiprocessor: no shared counter.
enum class TimelineKind : uint32_t {
  kEmbed = 1, kLinear = 2, kTmaGemv = 3, kTiled = 4, kRmsNorm = 5, kRope = 6, kAttention = 7, kArgmax = 8,
  kAttentionParts = 9,
};
constexpr int kTimelineMaxSms = 160;
constexpr int kTimelineRecordsPerSm = 2048;
struct KernelTimelineRecord {
  unsigned long long grid, start, waited, end;
  uint32_t kind, blocks, pad0, pad1;
};
// Points inside a kernel's body (TimelinePoint: thread 0 of each block passing point p), per
// launch number modulo kTimelinePointGrids: the earliest (as ~t) and the latest block there.
constexpr int kTimelinePoints = 8;
constexpr int kTimelinePointGrids = 4096;
struct KernelTimeline {
  uint32_t cursor[kTimelineMaxSms];
  unsigned long long point_not_first[kTimelinePointGrids][kTimelinePoints];
  unsigned long long point_last[kTimelinePointGrids][kTimelinePoints];
  KernelTimelineRecord log[kTimelineMaxSms][kTimelineRecordsPerSm];
};
cudaError_t SetKernelTimeline(KernelTimeline* device_buffer, cudaStream_t stream);

}  // namespace rote::inference::cuda
