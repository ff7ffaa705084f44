// The CUDA backend: the exact profile (docs/numerics.md) on an NVIDIA GPU, equal bit for bit to
// the CPU backend. Weights live on the device in a lane-permuted layout (inference/cuda/kernels.h),
// the paged KV cache in device memory, decode steps replay captured CUDA graphs.
//
// This header needs no CUDA: in builds without nvcc, CreateCudaBackend returns UNIMPLEMENTED
// (inference/cuda/cuda_backend_unavailable.cc), so callers select the device at run time.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "inference/backend.h"
#include "inference/cuda/fast_shapes.h"
#include "inference/cuda/tuning.h"
#include "inference/model/weights.h"
#include "inference/status.h"

namespace rote::inference {

// Benchmarks: readings and ablations of what a step does (bench/inference/cuda_bench.cc). Off by
// default; none but skip_kernels changes what a step computes.
struct CudaInstruments {
  // Leave the kernels of these kinds (a mask of CudaKernelKind) out of every step, so that a
  // kind's share of a replayed step can be timed by ablation. Results are meaningless while not 0.
  uint32_t skip_kernels = 0;
  // Steps run as one DecodeStepKernel record, per block, timer readings (ns) at the start, at
  // every grid barrier's arrival and departure, and at the end (CudaBackend::StepTrace).
  bool step_trace = false;
  // In builds configured with ROTE_CUDA_TIMELINE (elsewhere the timeline stays empty): every step
  // records a timeline of its kernels (CudaBackend::KernelTimeline).
  bool kernel_timeline = false;
};

struct CudaBackendOptions {
  int device = 0;               // CUDA device ordinal
  int32_t max_positions = 0;    // longest context (rotary table length); 0 = min(max_position_embeddings, 32768)
  bool use_graphs = true;       // replay decode steps (one token per sequence) as CUDA graphs
  // kFast: every matrix product on the tensor cores (inference/cuda/fast_linear.h), bf16 weights
  // only; everything else as in the exact profile.
  NumericsProfile profile = NumericsProfile::kExact;
  // The kernels' choices that change only speed (inference/cuda/tuning.h); the defaults ship.
  CudaTuning tuning;
  CudaInstruments instruments;  // benchmarks only
};

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

// One kernel launch of a step's timeline (CudaInstruments::kernel_timeline): global-timer readings
// (ns) of the earliest block start, the first and last return from the wait for the previous
// kernel (programmatic dependent launch), and the last block's end (thread 0's). Kernels recorded:
// embed, the matrix kernels other than the persistent ones, RMSNorm, rotary, attention, argmax.
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

  // Launches the last step's CUDA graph `replays` times back to back, with no host turn between
  // them, and returns the seconds per replay. A replay repeats the step on the same inputs, so it
  // rewrites the same K/V rows and logits with the same bits. FAILED_PRECONDITION when the last
  // step ran without a graph.
  virtual StatusOr<double> TimeLastGraph(int32_t replays) = 0;

  // What this backend launched so far (tuning.h, CudaLaunchStats).
  virtual CudaLaunchStats launch_stats() const = 0;
  // Whether the model's steps run the family path (docs/cuda.md): the operations of Mistral's
  // sliding windows, Gemma, Phi-3's partial rotary, StarCoder2, Granite. Models without them
  // (whatever their family's name) run the ordinary kernels.
  virtual bool family_path() const = 0;

  // CudaInstruments::step_trace: the last traced step's readings, (blocks, slots, 2) values;
  // empty when none was traced.
  virtual std::vector<int64_t> StepTrace(int32_t* blocks, int32_t* slots) const = 0;
  // CudaInstruments::kernel_timeline: the last recorded step's kernels, ordered by first wait.
  virtual std::vector<CudaKernelTime> KernelTimeline() const = 0;
};

// The most tokens one step of the CUDA backend carries for this model and profile
// (Backend::max_step_tokens; Forward refuses a larger step with INVALID_ARGUMENT before it launches
// anything, and Engine::Create a larger max_step_tokens). Kernels that put a step's tokens on the
// grid's y dimension (the rotary store, attention a token a block) take at most 65,535; the fast
// profile's products address activations with 32-bit offsets (FastLinearMaxTokens) over the
// widest activation row (hidden, attention output, MLP activation; lane rows padded to 128):
// 7B fast 47,823 tokens, 32B fast 12,136. A mixture of experts activates its (token, expert)
// pairs with the pairs on y: 65,535 / experts_per_token (Qwen3-Coder-30B-A3B: 8,191).
inline int32_t CudaMaxStepTokens(const ModelConfig& config, NumericsProfile profile) {
  int64_t limit = 65535;
  if (config.has_moe()) limit /= std::max<int64_t>(1, config.experts_per_token);
  if (profile == NumericsProfile::kFast) {
    auto padded = [](int64_t cols) { return (cols + 127) / 128 * 128; };  // kernels.h's PaddedCols
    const int64_t widest =
        std::max({padded(config.hidden_size), padded(config.q_dim()), padded(config.intermediate_size)});
    limit = std::min(limit, cuda::FastLinearMaxTokens(widest));
  }
  return static_cast<int32_t>(std::max<int64_t>(limit, 1));
}

// FAILED_PRECONDITION when no CUDA device is present; UNIMPLEMENTED in builds without CUDA;
// INVALID_ARGUMENT for shapes the kernels do not support (head_dim > 256 or not a multiple of 8),
// and for the fast profile with weights other than bf16.
StatusOr<std::unique_ptr<CudaBackend>> CreateCudaBackend(std::shared_ptr<const Model> model,
                                                         const CudaBackendOptions& options);

// Number of CUDA devices, 0 when none or when the driver is missing (never an error).
int CudaDeviceCount();

// The calling thread's current CUDA device (-1 without CUDA). A backend makes its own device
// current for each call and gives the thread its device back afterwards.
int CudaCurrentDevice();

// The device's greedy argmax alone (the decode step's, kernels.h LaunchArgmax) of `rows` rows of
// `cols` logits: per row, the index of the largest value, the lowest on ties, NaN never taken (0
// for a row of NaN only). UNIMPLEMENTED in a build without CUDA; the device's error where there
// is no device.
StatusOr<std::vector<int32_t>> CudaArgmax(const std::vector<float>& logits, int32_t rows, int32_t cols);
// The device sampler alone (sampling.cu) over `rows` rows of `cols` logits, row r by rules[r], as
// ForwardSampled runs it under CudaTuning::sample_candidates = `candidates` (the candidate path
// where every rule allows it and it is on, every column sorted again where a row overflowed it).
// *path, where given: 0 every column sorted, 1 the candidate path, 2 the candidate path overflowed
// and every column was sorted. UNIMPLEMENTED in a build without CUDA; the device's error where
// there is no device.
StatusOr<std::vector<int32_t>> CudaSampleRows(const std::vector<float>& logits, int32_t rows, int32_t cols,
                                              const std::vector<RowSampling>& rules, int candidates = 1,
                                              int* path = nullptr);

}  // namespace rote::inference
