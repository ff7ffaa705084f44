// The CUDA backend: the exact profile (docs/numerics.md) on an NVIDIA GPU, equal bit for bit to
// the CPU backend. Weights live on the device in a lane-permuted layout (inference/cuda/kernels.h),
// the paged KV cache in device memory, decode steps replay captured CUDA graphs.
//
// This header needs no CUDA: in builds without nvcc, CreateCudaBackend returns UNIMPLEMENTED
// (inference/cuda/cuda_backend_unavailable.cc), so callers select the device at run time.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "inference/backend.h"
#include "inference/model/weights.h"
#include "inference/status.h"

namespace rote::inference {

struct CudaBackendOptions {
  int device = 0;               // CUDA device ordinal
  int32_t max_positions = 0;    // longest context (rotary table length); 0 = min(max_position_embeddings, 32768)
  bool use_graphs = true;       // replay decode steps (one token per sequence) as CUDA graphs
  // kFast: every matrix product on the tensor cores (inference/cuda/fast_linear.h), bf16 weights
  // only; everything else as in the exact profile.
  NumericsProfile profile = NumericsProfile::kExact;
};

class CudaBackend : public Backend {
 public:
  // KV blocks that fit in the device's free memory now, keeping `reserve_bytes` free for
  // activations and logits, capped at max_kv_bytes of KV storage (0: no cap).
  virtual int32_t KvBlocksForFreeMemory(int64_t max_kv_bytes, int64_t reserve_bytes) const = 0;

  // ForwardGreedy (Backend) keeps the logits on the device: the argmax runs there and only the
  // tokens are copied back. Same tokens as argmax over Forward's logits.

  // Bytes of device memory the weights take (permuted and padded).
  virtual int64_t WeightBytes() const = 0;
  // Bytes of weights one decode step reads: every layer's matrices and the lm_head, as the
  // profile's kernels read them (the embedding's rows, looked up a few at a time, not counted).
  virtual int64_t WeightBytesPerStep() const = 0;

  // Benchmarks only: launches the last step's CUDA graph `replays` times back to back, with no
  // host turn between them, and returns the seconds per replay. A replay repeats the step on the
  // same inputs, so it rewrites the same K/V rows and logits with the same bits. FAILED_PRECONDITION
  // when the last step ran without a graph.
  virtual StatusOr<double> TimeLastGraphForBenchmark(int32_t replays) = 0;
};

// FAILED_PRECONDITION when no CUDA device is present; UNIMPLEMENTED in builds without CUDA;
// INVALID_ARGUMENT for shapes the kernels do not support (head_dim > 256 or not a multiple of 8),
// and for the fast profile with weights other than bf16.
StatusOr<std::unique_ptr<CudaBackend>> CreateCudaBackend(std::shared_ptr<const Model> model,
                                                         const CudaBackendOptions& options);

// Number of CUDA devices, 0 when none or when the driver is missing (never an error).
int CudaDeviceCount();

// Tests only: the calling thread's current CUDA device (-1 without CUDA). A backend makes its
// own device current for each call and gives the thread its device back afterwards.
int CudaCurrentDeviceForTesting();

// Tests and benchmarks only: force the matrix kernels' register tile for batches of more than
// one token (0: 8 rows x 8 tokens per warp, 1: 4 x 8, 2: 4 x 16; -1, the default: chosen by
// size). Every choice gives the same bits; only speed differs. No-op without CUDA.
void SetCudaLargeBatchTileForTesting(int variant);

// Tests and benchmarks only: the fast profile's block shape (fast_linear.h): 16-row tiles per
// block (1 to 6) and the most token rows per block (8, 16 or 32); 0, the default: by size.
// Same bits. No-op without CUDA.
void SetCudaFastLinearTileForTesting(int row_tiles, int token_tile = 0);
// Benchmarks only, and NOT the same bits: the fast profile's K-slice target
// (fast_linear.h, SetFastLinearSplitTargetForBenchmark; 0 the default). Set it before creating
// the backend. No-op without CUDA.
void SetCudaFastSplitTargetForBenchmark(int target);
// Benchmarks only, and NOT the same bits: the fast profile's products of (rows x cols_padded)
// matrices in `splits` K slices (fast_linear.h, SetFastLinearSplitsForBenchmark; rows <= 0
// clears). Set before creating the backend. No-op without CUDA.
void SetCudaFastSplitsForBenchmark(int rows, int cols_padded, int splits);
// Benchmarks only: the fast profile's products of matrices with `rows` rows (and `cols` columns,
// unless 0) use blocks of
// row_tiles x 16 rows by token_groups x 8 tokens (rows <= 0 clears). Set before creating the
// backend (captured graphs keep their shapes). Same bits.
void SetCudaFastShapeForRowsForBenchmark(int rows, int cols, int row_tiles, int token_groups);
// Benchmarks only: 1 brings back the fast profile's block-shape rule before the wave model (0, the
// default). Set before creating the backend. Same bits.
void SetCudaFastShapeRuleForBenchmark(int rule);
// Tests and benchmarks only: whether the fast profile's q|k|v product applies rotary and stores
// k and v itself (true, the default, for models without q/k norms) or leaves them to the rotary
// kernel. Set before creating the backend. Same bits.
void SetCudaFastRopeFusedForTesting(bool fused);
// Tests and benchmarks only: whether the fast profile's products with the norm stage its weights in
// shared memory before their wait (true, the default) or read them from global memory at every
// step. Set before creating the backend. Same bits.
void SetCudaFastNormStagedForTesting(bool staged);
// Tests and benchmarks: how many blocks of gate|up (the fast profile) and of grouped attention ask
// L2, before their wait, for the first weights or K/V pages of the blocks that start only when the
// previous kernel's leave (cuda::SetLatePrefetch): -1 the default (a quarter of the
// multiprocessors, for steps of 17 to 64 tokens), 0 none, N the first N. Set before the first step
// (graphs keep what they captured). Same bits.
void SetCudaLatePrefetchForTesting(int early_blocks);
// Tests: launches so far that asked L2 for later blocks' first reads (0 without CUDA).
int64_t CudaLatePrefetchLaunchesForTesting();
// Tests only: FastLinearKernel launches so far that staged their norm weights (0 without CUDA).
int64_t CudaFastNormStagedLaunchesForTesting();
// Benchmarks only: false launches every kernel without programmatic dependent launch (each waits
// for the previous one to end before it starts). Set before creating the backend. Same bits.
void SetCudaProgrammaticLaunchForBenchmark(bool on);
// Tests only: the device's greedy argmax (the decode step's, kernels.h LaunchArgmax) of `rows`
// rows of `cols` logits: per row, the index of the largest value, the lowest on ties, NaN never
// taken (0 for a row of NaN only). UNIMPLEMENTED in a build without CUDA; the device's error
// where there is no device.
StatusOr<std::vector<int32_t>> CudaArgmaxForTesting(const std::vector<float>& logits, int32_t rows, int32_t cols);
// Tests: the device sampler (sampling.cu) over `rows` rows of `cols` logits, row r by rules[r],
// as ForwardSampled runs it (the candidate path where every rule allows it and it is on, every
// column sorted again where a row overflowed it). *path, where given: 0 every column sorted, 1 the
// candidate path, 2 the candidate path overflowed and every column was sorted. UNIMPLEMENTED in a
// build without CUDA; the device's error where there is no device.
StatusOr<std::vector<int32_t>> CudaSampleRowsForTesting(const std::vector<float>& logits, int32_t rows, int32_t cols,
                                                       const std::vector<RowSampling>& rules, int* path = nullptr);
// Tests and benchmarks only: whether the device sampler may take its candidate path (sampling.h):
// 0 never, 1 where the rules allow it (the default), 2 as 1 and then every column sorted again as
// after an overflow (ForwardSampled only: its fallback, tested). Same tokens in every mode.
void SetCudaSampleCandidatesForTesting(int mode);
// How many fast-profile products have been launched (a captured graph counts once), and how many
// of them ran their K slices in one block (merged slices).
int64_t CudaFastLinearLaunchesForTesting();
int64_t CudaFastMergedLaunchesForTesting();
// Tests and benchmarks only: the fast profile's products of at most `max_slices` K slices (2 or
// 3) of at most `max_steps_per_warp` steps per warp run them in one block instead of a cluster
// (fast_linear.h, SetFastLinearMergedSlices; 0: always a cluster; negative: the defaults). Set
// before creating the backend. Same bits.
void SetCudaFastMergedSlicesForTesting(int max_slices, int max_steps_per_warp = -1);
// Tests and benchmarks only: where the fast profile streams a product's weights past its tokens'
// activations held in shared memory (fast_linear.h, SetFastLinearStream: 0 never, 1 the
// default, the lm_head, 2 every product it can run; row_tiles per warp's unit for 32-token tiles, 2
// or 3, 0 the default), and how many such launches were issued. Same bits.
void SetCudaFastStreamForTesting(int mode, int row_tiles = 0);
int64_t CudaFastStreamLaunchesForTesting();

// Tests and benchmarks only: the attention kernel's variant (kernels.h, SetAttentionVariant; -1 the
// default). Same bits; only speed differs. No-op without CUDA.
void SetCudaAttentionVariantForTesting(int variant);

// Tests and benchmarks only: the kernel of one-token matrix products (0, the default: weights
// brought into shared memory by bulk copies where they fit; 1: the plain register tile; 2: a
// register ring issued before the previous kernel ends). Same bits; only speed differs.
void SetCudaOneTokenKernelForTesting(int variant);

// Tests and benchmarks only: whether weight reads are hinted L2 evict_first (kernels.h,
// SetWeightEvictFirst; true, the default). Same bits; only speed differs. No-op without CUDA.
void SetCudaWeightEvictFirstForTesting(bool on);

// Tests and benchmarks only: the most warps per block of the one-token MLP-block kernel (16, 8 or
// 4; default 16). Same bits; only speed differs. No-op without CUDA.
void SetCudaMlpBlockMaxWarpsForTesting(int warps);
// How many steps ran as one DecodeStepKernel (the whole decode step of one token in one launch):
// tests and benchmarks check that the variant they time ran.
int64_t CudaDecodeStepsForTesting();
// Those of them launched with the code that attends each head over parts of its positions (steps
// whose context reaches SetCudaStepAttentionSplitForTesting's; the others run without that code).
int64_t CudaDecodeStepsInPartsForTesting();
// How many batched products ran as the shared-memory TiledLinearKernel (launches issued; a
// captured graph counts once): tests check that the tile variant they force ran.
int64_t CudaTiledLinearLaunchesForTesting();
// How many attention launches ran each head in 8 (4, 2) blocks over parts of a long context (separate
// launches; the one-launch step's parts are inside CudaDecodeStepsForTesting's launches).
int64_t CudaAttentionPartsLaunchesForTesting();
// Benchmarks only: steps run as one DecodeStepKernel record, per block, timer readings (ns) at the
// start, at every grid barrier's arrival and departure, and at the end; the last such step's
// readings: (blocks, slots, 2) values. No-op and empty without CUDA.
void SetCudaStepTraceForBenchmark(bool on);
// Tests and benchmarks only: how many tiles ahead of its shared-memory ring the one-launch decode
// step asks L2 for weights (-1: the default). Same bits. No-op without CUDA.
void SetCudaStepPrefetchTilesForTesting(int tiles);
// From how many positions one token's attention runs each head in 8 (4, 2) blocks over parts of its
// positions: in the one-launch decode step (per step) and as separate launches (per context
// bucket, whose every context must reach it). 0: never; -1: the defaults, 192 in the step and 512
// for separate launches. Same bits; only speed differs. No-op without CUDA.
void SetCudaStepAttentionSplitForTesting(int min_context);
// Blocks per head of that split: 8, 4 or 2, where num_heads x that many blocks fit on the device
// (else the split is not used); 0: 8 or 4, the most that fit (2 is slower than no split). Same
// bits. No-op without CUDA.
void SetCudaAttentionPartsForTesting(int parts);
std::vector<int64_t> CudaStepTraceForBenchmark(int32_t* blocks, int32_t* slots);

// Benchmarks only, in builds configured with ROTE_CUDA_TIMELINE (elsewhere the timeline stays
// empty): while on, every step records a timeline of its kernels (embed, the matrix kernels other
// than the persistent ones, RMSNorm, rotary, attention, argmax): per launch, global-timer readings
// (ns) of the earliest block start, the first and last return from the wait for the previous
// kernel (programmatic dependent launch), and the last block's end (thread 0's).
// CudaKernelTimelineForBenchmark returns the last recorded step's, ordered by first wait.
struct CudaKernelTime {
  uint32_t kind;    // 1 embed, 2 register-tile product, 3 bulk-copy one-token product, 4 shared-memory
                    // tile product, 5 RMSNorm, 6 rotary + KV store, 7 attention, 8 argmax
  uint32_t blocks;  // the grid's
  int64_t start_ns, first_wait_ns, last_wait_ns, end_ns;
  uint32_t blocks_recorded;
  // Points inside the kernel's body, the first and the last block passing each (0: none). Attention:
  // 1 q read, 2 scores, 3 softmax weights, 4 denominator, 5 V loop, 6 V partials shared. Bulk-copy
  // one-token products: 1 activation staged, 2 warp 0's weights arrived, 3 its sums done.
  int64_t point_first_ns[8], point_last_ns[8];  // fewer than blocks when a log filled up
  // Blocks that started after the previous kernel's last block had ended (resident only once it was
  // done, so whatever stands before their wait is on the step's path): how many, and the longest and
  // mean time from their start to their own return from the wait.
  uint32_t late_blocks = 0;
  int64_t late_prologue_max_ns = 0, late_prologue_mean_ns = 0;
};
void SetCudaKernelTimelineForBenchmark(bool on);
std::vector<CudaKernelTime> CudaKernelTimelineForBenchmark();

// The kinds of kernel a step launches (per layer, except embed, lm_head and argmax).
enum class CudaKernelKind : uint32_t {
  kEmbed = 1,
  kQkv = 2,
  kRope = 4,
  kAttention = 8,
  kOut = 16,
  kGateUp = 32,
  kDown = 64,
  kLmHead = 128,
  kArgmax = 256,
  // Not a kernel: the layers' one-token products launch as usual but read no weights (their
  // bulk copies are not issued), so a replayed step shows what is left without the weight stream.
  kLayerWeightReads = 512,
};
inline constexpr uint32_t kAllCudaKernelKinds = 511;

// Benchmarks only: leave the kernels of these kinds (a mask of CudaKernelKind) out of every
// step, so that a kind's share of a replayed step can be timed by ablation. The results are
// meaningless while the mask is not 0. No-op without CUDA.
void SetCudaSkipKernelsForBenchmark(uint32_t mask);

}  // namespace rote::inference
