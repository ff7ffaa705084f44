// The CUDA backend. One stream; every step uploads its metadata (tokens, positions, block
// tables) in one copy, runs six kernels per layer, and copies the requested logits (or greedy
// tokens) back. Decode steps of the same shape replay one captured graph.
#include "inference/cuda/cuda_backend.h"

#include <cuda_runtime.h>  // device memory, streams, graphs

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "inference/cuda/check.h"
#include "inference/cuda/fast_linear.h"
#include "inference/cuda/fast_tiles.h"
#include "inference/cuda/host_layout.h"
#include "inference/cuda/kernels.h"
#include "inference/cuda/sampling.h"
#include "inference/numerics/rope.h"

namespace rote::inference {
namespace {

using cuda::AttentionShape;
using cuda::DeviceMatrix;
using cuda::LayerKv;
using cuda::LinearArgs;
using cuda::LinearEpilogue;
using cuda::StepTokens;
using cuda::WeightType;

WeightType ToWeightType(DType d) {
  switch (d) {
    case DType::kBF16:
      return WeightType::kBF16;
    case DType::kF16:
      return WeightType::kF16;
    case DType::kF32:
      return WeightType::kF32;
  }
  return WeightType::kF32;
}

int WeightTypeSize(WeightType t) { return t == WeightType::kF32 ? 4 : 2; }

// Device allocation owned by the backend.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { Reset(); }
  Status Allocate(size_t bytes) {
    Reset();
    if (bytes == 0) return OkStatus();
    ROTE_CUDA_RETURN_IF_ERROR(cudaMalloc(&ptr_, bytes));
    bytes_ = bytes;
    return OkStatus();
  }
  void Reset() {
    if (ptr_ != nullptr) cudaFree(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// One source matrix of a fused upload: its rows go to dst rows first_row + i * row_step.
struct MatrixPart {
  const TensorView* view;
  int64_t first_row;
  int64_t row_step;
};

struct DeviceLayer {
  DeviceMatrix wqkv, wo, wgu, wdown;
  const float* bqkv = nullptr;
  const float* attn_norm = nullptr;
  const float* mlp_norm = nullptr;
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
};

struct GraphKey {
  int32_t tokens;
  int32_t context_bucket;
  bool greedy;
  uint32_t skip;          // SetCudaSkipKernelsForBenchmark's mask when captured
  int one_token_kernel;   // SetCudaOneTokenKernelForTesting's choice when captured
  int mlp_block_warps;    // SetCudaMlpBlockMaxWarpsForTesting's choice when captured
  bool step_trace;        // SetCudaStepTraceForBenchmark's choice when captured
  int step_prefetch;      // SetCudaStepPrefetchTilesForTesting's choice when captured
  int large_batch_tile;   // SetCudaLargeBatchTileForTesting's choice when captured
  int attention_variant;  // SetCudaAttentionVariantForTesting's choice when captured
  bool weight_evict_first;  // SetCudaWeightEvictFirstForTesting's choice when captured
  int step_attention_split;  // SetCudaStepAttentionSplitForTesting's choice when captured
  bool step_in_parts;        // the one-launch step attends in parts (its context reaches the split)
  int attention_parts;       // SetCudaAttentionPartsForTesting's
  int fast_tile;             // SetCudaFastLinearTileForTesting's (both arguments)
  int fast_merge;            // SetCudaFastMergedSlicesForTesting's
  int fast_stream;           // SetCudaFastStreamForTesting's
  bool operator<(const GraphKey& o) const {
    return std::tie(tokens, context_bucket, greedy, skip, one_token_kernel, mlp_block_warps, step_trace,
                    step_prefetch, large_batch_tile, attention_variant, weight_evict_first, step_attention_split,
                    step_in_parts, attention_parts, fast_tile, fast_merge, fast_stream) <
           std::tie(o.tokens, o.context_bucket, o.greedy, o.skip, o.one_token_kernel, o.mlp_block_warps, o.step_trace,
                    o.step_prefetch, o.large_batch_tile, o.attention_variant, o.weight_evict_first,
                    o.step_attention_split, o.step_in_parts, o.attention_parts, o.fast_tile, o.fast_merge,
                    o.fast_stream);
  }
};

// Benchmarks only (SetCudaSkipKernelsForBenchmark): kernels left out of every step, to time
// each kind's share of a replayed step by ablation. Results are meaningless while set.
uint32_t g_skip_kernels = 0;
int g_one_token_kernel = 0;
int g_mlp_block_warps = 16;
int g_large_batch_tile = -1;
int g_fast_tile = 0;
int g_fast_merge = -1001;  // SetCudaFastMergedSlicesForTesting's arguments (the defaults)
int g_fast_stream = 100;   // SetCudaFastStreamForTesting's arguments (the defaults)
bool g_fast_rope_fused = true;  // SetCudaFastRopeFusedForTesting
int g_attention_variant = -1;
bool g_weight_evict_first = true;
int g_sample_candidates = 1;  // SetCudaSampleCandidatesForTesting
// Tiles DecodeStepKernel's producer asks L2 for ahead of its ring (kernels.h, SetStepPrefetchTiles).
constexpr int kDefaultStepPrefetchTiles = 0;
// Steps run as one DecodeStepKernel (CudaDecodeStepsForTesting).
std::atomic<int64_t> g_decode_steps{0};
// Those of them launched with the code that attends a head over parts of its positions
// (CudaDecodeStepsInPartsForTesting).
std::atomic<int64_t> g_decode_steps_in_parts{0};
// SetCudaStepTraceForBenchmark, and where the last traced step's readings are.
bool g_step_trace = false;
int g_step_prefetch_tiles = kDefaultStepPrefetchTiles;
// From how many positions the one-launch step attends each head in 8 (4, 2) blocks over parts of its
// positions (DecodeStepArgs::attn_split_min_context; 0: never). 1.5B batch 1 (H200, tenth
// session): even at 128-200 positions, +3% at 192-264, -4% at 64-136.
constexpr int kDefaultStepAttentionSplit = 192;
int g_step_attention_split = kDefaultStepAttentionSplit;
// The same for one token with separate launches (LaunchAttentionParts, decided per context bucket):
// 0.5B batch 1 on the H100 (tenth session), against AttentionKernel: -6% at 256-328 positions,
// -1% at 512-584, +7% at 1,000-1,072.
constexpr int kDefaultAttentionPartsMinContext = 512;
int g_attention_parts_min_context = kDefaultAttentionPartsMinContext;
// Blocks per head of those parts (8, 4 or 2; 0: 8 or 4, the most with heads x parts <= the grid).
int g_attention_parts = 0;
struct {
  const void* device = nullptr;
  int32_t blocks = 0, slots = 0;
} g_step_trace_last;
// SetCudaKernelTimelineForBenchmark, and the buffer of the last step it recorded.
bool g_kernel_timeline = false;
const void* g_kernel_timeline_last = nullptr;
bool Skip(CudaKernelKind k) { return (g_skip_kernels & static_cast<uint32_t>(k)) != 0; }

// CUDA's current device belongs to the calling thread: the engine calls the backend from its
// scheduler thread, an application from its own. Each entry point of the backend makes its
// device current for the call and gives the thread its own device back afterwards, so a backend
// on device N works from any thread and leaves the caller's choice alone.
class DeviceScope {
 public:
  DeviceScope() = default;
  explicit DeviceScope(int device) { Enter(device); }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  ~DeviceScope() { Leave(); }
  void Enter(int device) {
    int current = 0;
    if (cudaGetDevice(&current) == cudaSuccess && current != device && cudaSetDevice(device) == cudaSuccess)
      previous_ = current;
  }
  void Leave() {
    if (previous_ >= 0) cudaSetDevice(previous_);
    previous_ = -1;
  }

 private:
  int previous_ = -1;  // the thread's device before Enter, where Enter changed it
};

class CudaBackendImpl final : public CudaBackend {
 public:
  CudaBackendImpl(std::shared_ptr<const Model> model, const CudaBackendOptions& options)
      : model_(std::move(model)),
        options_(options),
        config_(model_->config()),
        fast_(options.profile == NumericsProfile::kFast) {}

  ~CudaBackendImpl() override {
    // The members' buffers are freed after this body, with the device still current:
    // destruction_device_ is the first member, so it gives the thread its device back last.
    destruction_device_.Enter(options_.device);
    for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
    if (timeline_set_ && stream_ != nullptr) {  // the kernels must not write into freed memory
      cuda::SetKernelTimeline(nullptr, stream_);
      cudaStreamSynchronize(stream_);
      g_kernel_timeline_last = nullptr;
    }
    if (host_meta_ != nullptr) cudaFreeHost(host_meta_);
    if (host_out_ != nullptr) cudaFreeHost(host_out_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  Status Init() {
    DeviceScope scope(options_.device);
    ROTE_CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
    cudaDeviceProp prop{};
    ROTE_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, options_.device));
    device_name_ = "cuda:" + std::to_string(options_.device) + " " + prop.name;
    // The fast profile's sums are the tensor cores' accumulation, which is the architecture's:
    // its name carries the compute capability, so provenance tells runs that may differ apart.
    if (fast_) profile_name_ = "fast5-sm" + std::to_string(prop.major) + std::to_string(prop.minor);
    ROTE_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));

    const ModelConfig& c = config_;
    if (c.head_dim > 256 || c.head_dim % 8 != 0)
      return InvalidArgument("CUDA backend: head_dim " + std::to_string(c.head_dim) +
                             " unsupported (needs a multiple of 8, at most 256)");
    max_positions_ = options_.max_positions > 0 ? options_.max_positions
                                                : std::min<int32_t>(c.max_position_embeddings, 32768);
    if (max_positions_ <= 0) max_positions_ = 32768;
    if (cuda::AttentionSharedBytes(max_positions_) > static_cast<int64_t>(prop.sharedMemPerBlockOptin) - 4096)
      return InvalidArgument("CUDA backend: max_positions " + std::to_string(max_positions_) +
                             " exceeds what attention holds in shared memory on " + prop.name);
    ROTE_CUDA_RETURN_IF_ERROR(cuda::PrepareAttention(max_positions_));

    const ModelWeights& w = model_->weights();
    // The weights' host-side layout runs on every core (rows are independent; the same bytes
    // whatever the threads): the 1.5B shape's upload took 4.7-7.6 s element by element on one.
    upload_pool_ = std::make_unique<ThreadPool>(
        static_cast<int>(std::clamp<unsigned>(std::thread::hardware_concurrency(), 1u, 32u)));
    const int64_t dim = c.hidden_size, q_dim = c.q_dim(), kv_dim = c.kv_dim(), hidden = c.intermediate_size;
    layers_.resize(c.num_layers);
    for (int32_t i = 0; i < c.num_layers; ++i) {
      const LayerWeights& lw = w.layers[i];
      DeviceLayer& dl = layers_[i];
      // q|k|v in rotary pair order (kernels.h, RopePairRow), biases likewise.
      std::vector<int64_t> qkv_rows(static_cast<size_t>(q_dim + 2 * kv_dim));
      for (int64_t row = 0; row < q_dim + 2 * kv_dim; ++row)
        qkv_rows[row] = row < q_dim + kv_dim ? row / c.head_dim * c.head_dim +
                                                   cuda::RopePairRow(static_cast<int32_t>(row % c.head_dim), c.head_dim)
                                             : row;
      auto r = UploadMatrix({{&lw.wq, 0, 1}, {&lw.wk, q_dim, 1}, {&lw.wv, q_dim + kv_dim, 1}}, q_dim + 2 * kv_dim,
                            dim, &qkv_rows);
      if (!r.ok()) return r.status();
      dl.wqkv = *r;
      r = UploadMatrix({{&lw.wo, 0, 1}}, dim, q_dim);
      if (!r.ok()) return r.status();
      dl.wo = *r;
      // gate row n -> 2n, up row n -> 2n + 1: one warp holds both for the SiLU epilogue.
      r = UploadMatrix({{&lw.w_gate, 0, 2}, {&lw.w_up, 1, 2}}, 2 * hidden, dim);
      if (!r.ok()) return r.status();
      dl.wgu = *r;
      r = UploadMatrix({{&lw.w_down, 0, 1}}, dim, hidden);
      if (!r.ok()) return r.status();
      dl.wdown = *r;
      if (lw.bq.present()) {
        auto b = UploadVector({&lw.bq, &lw.bk, &lw.bv}, &qkv_rows);
        if (!b.ok()) return b.status();
        dl.bqkv = *b;
      }
      auto v = UploadLaneRow(lw.attn_norm);
      if (!v.ok()) return v.status();
      dl.attn_norm = *v;
      v = UploadLaneRow(lw.mlp_norm);
      if (!v.ok()) return v.status();
      dl.mlp_norm = *v;
      if (lw.q_norm.present()) {
        v = UploadVector({&lw.q_norm});
        if (!v.ok()) return v.status();
        dl.q_norm = *v;
        v = UploadVector({&lw.k_norm});
        if (!v.ok()) return v.status();
        dl.k_norm = *v;
      }
    }
    auto e = UploadMatrix({{&w.embed, 0, 1}}, c.vocab_size, dim, nullptr, /*keep_rows=*/true);
    if (!e.ok()) return e.status();
    embed_ = *e;
    if (w.lm_head.data == w.embed.data) {
      lm_head_ = embed_;
    } else {
      auto l = UploadMatrix({{&w.lm_head, 0, 1}}, c.vocab_size, dim);
      if (!l.ok()) return l.status();
      lm_head_ = *l;
    }
    upload_pool_.reset();
    auto fn = UploadLaneRow(w.final_norm);
    if (!fn.ok()) return fn.status();
    final_norm_ = *fn;
    if (fast_) {
      bool bf16 = lm_head_.type == cuda::WeightType::kBF16;
      for (const DeviceLayer& dl : layers_)
        for (const DeviceMatrix* m : {&dl.wqkv, &dl.wo, &dl.wgu, &dl.wdown}) bf16 = bf16 && m->type == cuda::WeightType::kBF16;
      if (!bf16)
        return InvalidArgument("CUDA backend: the fast numerics profile needs bf16 weights (the tensor cores' products "
                               "are exact only for them); this model's are not: use the exact profile");
    }

    const numerics::RopeTable rope = numerics::BuildRopeTable(c, max_positions_);
    auto rc = UploadFloats(rope.cos);
    if (!rc.ok()) return rc.status();
    rope_cos_ = *rc;
    auto rs = UploadFloats(rope.sin);
    if (!rs.ok()) return rs.status();
    rope_sin_ = *rs;
    scale_ = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    ROTE_RETURN_IF_ERROR(AllocateZeroed(&mlp_barrier_, 2 * sizeof(uint32_t)));
    ROTE_RETURN_IF_ERROR(AllocateZeroed(&step_barrier_, sizeof(unsigned long long)));
    ROTE_RETURN_IF_ERROR(split_scratch_.Allocate(static_cast<size_t>(kSplitScratchFloats) * sizeof(float)));
    ROTE_RETURN_IF_ERROR(AllocateZeroed(&split_tickets_, static_cast<size_t>(kSplitTickets) * sizeof(uint32_t)));
    return OkStatus();
  }

  // Scratch of the batched products whose K is split over blocks (kernels.h, LinearArgs::split_*):
  // 256 output tiles of 32 x 32 x 32 class sums (32 MB). Products needing more are not split.
  static constexpr int64_t kSplitTickets = 256;
  static constexpr int64_t kSplitScratchFloats = kSplitTickets * 32 * 32 * 32;
  // (The fast profile's products add their K slices inside a cluster: no scratch.)
  void WithSplitScratch(LinearArgs* a) const {
    if (fast_) return;
    a->split_scratch = split_scratch_.as<float>();
    a->split_scratch_floats = kSplitScratchFloats;
    a->split_tickets = split_tickets_.as<uint32_t>();
    a->split_tickets_count = static_cast<int32_t>(kSplitTickets);
  }

  std::string device() const override { return device_name_; }
  std::string numerics_profile() const override { return profile_name_; }

  int64_t KvBytesPerBlock() const override {
    return 2 * static_cast<int64_t>(config_.num_layers) * kKvBlockSize * config_.kv_dim() * 4;
  }

  int64_t WeightBytes() const override { return weight_bytes_; }
  StatusOr<double> TimeLastGraphForBenchmark(int32_t replays) override {
    DeviceScope scope(options_.device);
    if (last_graph_ == nullptr) return FailedPrecondition("the last step ran without a CUDA graph");
    if (replays < 1) return InvalidArgument("replays must be at least 1");
    cudaEvent_t start = nullptr, end = nullptr;
    ROTE_CUDA_RETURN_IF_ERROR(cudaEventCreate(&start));
    ROTE_CUDA_RETURN_IF_ERROR(cudaEventCreate(&end));
    cudaError_t e = cudaEventRecord(start, stream_);
    for (int32_t i = 0; e == cudaSuccess && i < replays; ++i) e = cudaGraphLaunch(last_graph_, stream_);
    if (e == cudaSuccess) e = cudaEventRecord(end, stream_);
    if (e == cudaSuccess) e = cudaEventSynchronize(end);
    float ms = 0.0f;
    if (e == cudaSuccess) e = cudaEventElapsedTime(&ms, start, end);
    cudaEventDestroy(start);
    cudaEventDestroy(end);
    ROTE_CUDA_RETURN_IF_ERROR(e);
    return 1e-3 * ms / replays;
  }

  int64_t WeightBytesPerStep() const override {
    auto bytes = [&](const DeviceMatrix& m) {
      const int64_t rows = fast_ ? cuda::FastTileRowsPadded(m.rows) : m.rows;
      return rows * m.cols_padded * WeightTypeSize(m.type);
    };
    int64_t total = bytes(lm_head_);
    for (const DeviceLayer& dl : layers_) total += bytes(dl.wqkv) + bytes(dl.wo) + bytes(dl.wgu) + bytes(dl.wdown);
    return total;
  }

  int32_t KvBlocksForFreeMemory(int64_t max_kv_bytes, int64_t reserve_bytes) const override {
    DeviceScope scope(options_.device);  // free memory of this backend's device
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) return 0;
    int64_t usable = static_cast<int64_t>(free_bytes) + static_cast<int64_t>(kv_.bytes()) - reserve_bytes;
    if (max_kv_bytes > 0) usable = std::min(usable, max_kv_bytes);
    if (usable <= 0) return 0;
    return static_cast<int32_t>(std::min<int64_t>(usable / KvBytesPerBlock(), 1 << 30));
  }

  Status AllocateKvCache(int32_t num_blocks) override {
    DeviceScope scope(options_.device);
    if (num_blocks <= 0) return InvalidArgument("AllocateKvCache: num_blocks must be positive");
    DropGraphs();
    kv_.Reset();
    ROTE_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
    Status s = kv_.Allocate(static_cast<size_t>(num_blocks) * KvBytesPerBlock());
    if (!s.ok())
      return ResourceExhausted("CUDA backend: no room for " + std::to_string(num_blocks) + " KV blocks (" +
                               std::to_string(static_cast<int64_t>(num_blocks) * KvBytesPerBlock()) +
                               " bytes): " + s.message());
    num_blocks_ = num_blocks;
    return OkStatus();
  }

  Status Forward(const BatchPlan& plan, std::vector<float>* logits) override {
    DeviceScope scope(options_.device);
    Status s = Step(plan, /*greedy=*/false);
    if (!s.ok()) return s;
    const size_t n = static_cast<size_t>(num_logit_rows_) * config_.vocab_size;
    logits->resize(n);
    if (n > 0) std::memcpy(logits->data(), host_out_, n * sizeof(float));
    return OkStatus();
  }

  Status ForwardGreedy(const BatchPlan& plan, std::vector<int32_t>* tokens) override {
    DeviceScope scope(options_.device);
    Status s = Step(plan, /*greedy=*/true);
    if (!s.ok()) return s;
    tokens->assign(static_cast<const int32_t*>(host_out_), static_cast<const int32_t*>(host_out_) + num_logit_rows_);
    return OkStatus();
  }

  // Greedy steps chained on the device: within a run of decode steps that one captured graph
  // serves (the same context bucket, every block already in the tables), each step's graph is
  // followed by a kernel that feeds the chosen tokens back as the next step's (LaunchAdvanceGreedy),
  // so the host launches the run and waits once. Same kernels, same inputs, so the same tokens as
  // one ForwardGreedy per step (tested); what goes is the host's turn between the steps.
  Status ForwardGreedySteps(const BatchPlan& plan, int32_t steps, std::vector<int32_t>* tokens) override {
    DeviceScope scope(options_.device);
    if (steps < 1) return InvalidArgument("ForwardGreedySteps: steps must be positive, got " + std::to_string(steps));
    for (const SequenceStep& st : plan.sequences)
      if (st.num_logits != 1) return InvalidArgument("ForwardGreedySteps: every sequence needs num_logits 1");
    tokens->clear();
    const size_t rows = plan.sequences.size();
    BatchPlan cur = plan;
    std::vector<int32_t> fed(rows);
    for (int32_t done = 0; done < steps;) {
      const int32_t run = ChainableSteps(cur, steps - done);
      if (run > 1) {
        const size_t need = static_cast<size_t>(run) * rows * sizeof(int32_t);
        if (chain_tokens_.bytes() < need) {
          ROTE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
          ROTE_RETURN_IF_ERROR(chain_tokens_.Allocate(need));
        }
      }
      chain_steps_ = run;
      Status s = Step(cur, /*greedy=*/true);
      chain_steps_ = 1;
      if (!s.ok()) return s;
      const int32_t* out = static_cast<const int32_t*>(host_out_);
      tokens->insert(tokens->end(), out, out + static_cast<size_t>(run) * rows);
      done += run;
      for (size_t r = 0; r < rows; ++r) {
        SequenceStep& st = cur.sequences[r];
        st.start_pos += static_cast<int32_t>(st.tokens.size()) + run - 1;
        fed[r] = tokens->at(tokens->size() - rows + r);
        st.tokens = std::span<const int32_t>(&fed[r], 1);
      }
    }
    return OkStatus();
  }

  // How many of `want` greedy steps from `plan` one chained run can take (1: this step alone): all
  // decode steps (one token, one row each) replayed by one graph, so every position stays inside
  // the first step's context bucket and every block it reaches is in its table.
  int32_t ChainableSteps(const BatchPlan& plan, int32_t want) const {
    if (want <= 1 || !options_.use_graphs || plan.sequences.empty()) return 1;
    int32_t first_len = 0;
    int64_t run = std::min<int64_t>(want, config_.vocab_size);  // host_out_ holds a row of logits per row
    for (const SequenceStep& s : plan.sequences) {
      if (s.tokens.size() != 1 || s.num_logits != 1 || s.start_pos < 0) return 1;
      first_len = std::max(first_len, s.start_pos + 1);
    }
    int32_t bucket = 256;
    while (bucket < first_len) bucket *= 2;
    bucket = std::min(bucket, max_positions_);
    // A one-token step's graph holds the attention-in-parts code or not by its first step's length
    // (PrepareDecodeStep): a run stays on one side of that length, as separate steps would.
    if (plan.sequences.size() == 1 && g_step_attention_split > 0 && first_len < g_step_attention_split)
      run = std::min<int64_t>(run, g_step_attention_split - first_len);
    for (const SequenceStep& s : plan.sequences) {
      const int64_t covered = static_cast<int64_t>(s.block_table.size()) * kKvBlockSize;
      run = std::min<int64_t>(run, std::min<int64_t>(bucket, covered) - s.start_pos);
      for (int64_t b = s.start_pos / kKvBlockSize; b < static_cast<int64_t>(s.block_table.size()) &&
                                                   b * kKvBlockSize < s.start_pos + run; ++b)
        if (s.block_table[b] < 0 || s.block_table[b] >= num_blocks_) run = std::min<int64_t>(run, b * kKvBlockSize - s.start_pos);
    }
    return static_cast<int32_t>(std::max<int64_t>(run, 1));
  }

  // The logits stay on the device and are sampled there (sampling.cu), rows by their rules.
  bool samples_on_device() const override { return true; }
  Status ForwardSampled(const BatchPlan& plan, std::span<const RowSampling> rules,
                        std::vector<int32_t>* tokens) override {
    DeviceScope scope(options_.device);
    // Where the device sampler cannot take the step (more rows than its keys hold, or no memory
    // left for its scratch once the KV cache took the rest), the host samples Forward's logits:
    // the same tokens, more slowly.
    int32_t rows = 0;
    for (const SequenceStep& st : plan.sequences) rows += st.num_logits;
    if (!cuda::CanSampleRows(rows, config_.vocab_size) || !EnsureSampleScratch(rows).ok())
      return Backend::ForwardSampled(plan, rules, tokens);
    sample_rules_ = rules;
    sampling_ = true;
    sampled_by_candidates_ = false;  // set by SampleAndCopy, which a step without rows never reaches
    Status s = Step(plan, /*greedy=*/false);
    // A row with more candidates than the candidate path holds (ties, NaN): every column sorted,
    // from the logits still on the device.
    if (s.ok() && sampled_by_candidates_ &&
        (static_cast<const int32_t*>(host_out_)[num_logit_rows_] != 0 || g_sample_candidates == 2))
      s = SampleAndCopy(num_logit_rows_, /*by_candidates=*/false, /*synchronize=*/true);
    sampling_ = false;
    sample_rules_ = {};
    if (!s.ok()) return s;
    tokens->assign(static_cast<const int32_t*>(host_out_), static_cast<const int32_t*>(host_out_) + num_logit_rows_);
    return OkStatus();
  }

 private:
  // Copies `parts` (same cols) into one device matrix, permuting each row into lane order and
  // zero-padding it. Parts of different dtypes are widened to fp32 (exact).
  // `row_order`, when given, moves logical row r to device row (*row_order)[r].
  // The fast profile uploads bf16 matrices as tiles (DeviceMatrix::fast_tiles) and keeps the rows
  // themselves only where `keep_rows` (the embedding, which is looked up by row).
  StatusOr<DeviceMatrix> UploadMatrix(std::vector<MatrixPart> parts, int64_t rows, int64_t cols,
                                      const std::vector<int64_t>* row_order = nullptr, bool keep_rows = false) {
    DType dtype = parts[0].view->dtype;
    for (const MatrixPart& p : parts) {
      if (!p.view->present()) return InvalidArgument("CUDA backend: missing tensor for a fused matrix");
      if (p.view->shape.size() != 2 || p.view->shape[1] != cols)
        return InvalidArgument("CUDA backend: tensor " + p.view->name + " has an unexpected shape");
      if (p.view->dtype != dtype) dtype = DType::kF32;
    }
    const WeightType wt = ToWeightType(dtype);
    const int esize = WeightTypeSize(wt);
    const int64_t padded = cuda::PaddedCols(cols);
    std::vector<uint8_t> host(static_cast<size_t>(rows * padded * esize), 0);
    // Rows are independent: split over the upload's pool (each writes only its own device row).
    for (const MatrixPart& p : parts) {
      const int64_t src_rows = p.view->shape[0];
      const int src_size = DTypeSize(p.view->dtype);
      upload_pool_->ParallelFor(src_rows, [&](int64_t begin, int64_t end) {
        std::vector<float> row_f32;
        for (int64_t r = begin; r < end; ++r) {
          const int64_t logical = p.first_row + r * p.row_step;
          const int64_t row = row_order != nullptr ? (*row_order)[logical] : logical;
          uint8_t* dst = host.data() + row * padded * esize;
          if (p.view->dtype == dtype) {
            cuda::RowToLaneOrder(static_cast<const uint8_t*>(p.view->data) + r * cols * src_size, cols, esize, dst);
          } else {
            row_f32.resize(static_cast<size_t>(cols));
            p.view->RowToF32(r, row_f32.data());
            cuda::RowToLaneOrder(reinterpret_cast<const uint8_t*>(row_f32.data()), cols, 4, dst);
          }
        }
      });
    }
    DeviceMatrix m;
    if (!fast_ || keep_rows) {
      auto& buf = buffers_.emplace_back(std::make_unique<DeviceBuffer>());
      ROTE_RETURN_IF_ERROR(buf->Allocate(host.size()));
      ROTE_CUDA_RETURN_IF_ERROR(cudaMemcpy(buf->as<void>(), host.data(), host.size(), cudaMemcpyHostToDevice));
      weight_bytes_ += static_cast<int64_t>(host.size());
      m.data = buf->as<void>();
    }
    if (fast_ && wt == cuda::WeightType::kBF16) {
      // The fast profile's products read only the tile copy (fast_tiles.h).
      const std::vector<uint16_t> tiles =
          cuda::FastTilesOnPool(reinterpret_cast<const uint16_t*>(host.data()), rows, padded, upload_pool_.get());
      auto& tbuf = buffers_.emplace_back(std::make_unique<DeviceBuffer>());
      ROTE_RETURN_IF_ERROR(tbuf->Allocate(tiles.size() * sizeof(uint16_t)));
      ROTE_CUDA_RETURN_IF_ERROR(
          cudaMemcpy(tbuf->as<void>(), tiles.data(), tiles.size() * sizeof(uint16_t), cudaMemcpyHostToDevice));
      weight_bytes_ += static_cast<int64_t>(tiles.size() * sizeof(uint16_t));
      m.fast_tiles = tbuf->as<void>();
    }
    m.type = wt;
    m.rows = static_cast<int32_t>(rows);
    m.cols = static_cast<int32_t>(cols);
    m.cols_padded = static_cast<int32_t>(padded);
    return m;
  }

  // Concatenates 1-D tensors, converted exactly to fp32.
  StatusOr<const float*> UploadVector(std::vector<const TensorView*> views,
                                      const std::vector<int64_t>* order = nullptr) {
    std::vector<float> host;
    for (const TensorView* v : views) {
      if (!v->present()) return InvalidArgument("CUDA backend: missing vector tensor");
      for (int64_t i = 0; i < v->numel(); ++i) host.push_back(v->At(i));
    }
    if (order != nullptr) {
      if (order->size() != host.size()) return InvalidArgument("CUDA backend: bias length does not match its matrix");
      std::vector<float> moved(host.size());
      for (size_t i = 0; i < host.size(); ++i) moved[(*order)[i]] = host[i];
      host.swap(moved);
    }
    return UploadFloats(host);
  }

  // A 1-D tensor as a lane row (kernels.h): permuted, zero-padded, fp32.
  StatusOr<const float*> UploadLaneRow(const TensorView& view) {
    if (!view.present()) return InvalidArgument("CUDA backend: missing norm weight");
    std::vector<float> host(static_cast<size_t>(cuda::PaddedCols(view.numel())), 0.0f);
    for (int64_t i = 0; i < view.numel(); ++i) host[cuda::PermutedIndex(i)] = view.At(i);
    return UploadFloats(host);
  }

  StatusOr<const float*> UploadFloats(const std::vector<float>& host) {
    auto& buf = buffers_.emplace_back(std::make_unique<DeviceBuffer>());
    ROTE_RETURN_IF_ERROR(buf->Allocate(host.size() * sizeof(float)));
    ROTE_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(buf->as<void>(), host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
    return static_cast<const float*>(buf->as<float>());
  }

  // A matrix product of the step: the exact profile's kernels, or the fast profile's.
  Status Product(const LinearArgs& a) {
    if (fast_) {
      if (!cuda::CanRunFastLinear(a))
        return Internal("CUDA backend: a fast-profile product of " + std::to_string(a.w.rows) + " x " +
                        std::to_string(a.w.cols) + " for " + std::to_string(a.tokens) + " tokens cannot run");
      ROTE_CUDA_RETURN_IF_ERROR(cuda::LaunchFastLinear(a, stream_));
      return OkStatus();
    }
    ROTE_CUDA_RETURN_IF_ERROR(cuda::LaunchLinear(a, stream_));
    return OkStatus();
  }

  // Grows activation buffers to hold `tokens` rows and `logit_rows` logits rows.
  Status EnsureCapacity(int32_t tokens, int32_t logit_rows, int32_t meta_ints) {
    const ModelConfig& c = config_;
    if (tokens > token_capacity_) {
      DropGraphs();
      int32_t cap = std::max<int32_t>(tokens, 64);
      ROTE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
      // Lane-row buffers start zeroed: their padding is read (times zero weights) and never written.
      ROTE_RETURN_IF_ERROR(AllocateZeroed(&x_, static_cast<size_t>(cap) * HiddenStride() * 4));
      ROTE_RETURN_IF_ERROR(AllocateZeroed(&h_, static_cast<size_t>(cap) * HiddenStride() * 4));
      ROTE_RETURN_IF_ERROR(qkv_.Allocate(static_cast<size_t>(cap) * (c.q_dim() + 2 * c.kv_dim()) * 4));
      ROTE_RETURN_IF_ERROR(q_.Allocate(static_cast<size_t>(cap) * c.q_dim() * 4));
      ROTE_RETURN_IF_ERROR(AllocateZeroed(&att_, static_cast<size_t>(cap) * AttStride() * 4));
      ROTE_RETURN_IF_ERROR(AllocateZeroed(&act_, static_cast<size_t>(cap) * ActStride() * 4));
      token_capacity_ = cap;
    }
    if (logit_rows > logit_capacity_) {
      DropGraphs();
      int32_t cap = std::max<int32_t>(logit_rows, 64);
      ROTE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
      ROTE_RETURN_IF_ERROR(logits_.Allocate(static_cast<size_t>(cap) * c.vocab_size * 4));
      ROTE_RETURN_IF_ERROR(greedy_.Allocate(static_cast<size_t>(cap) * 4));
      ROTE_RETURN_IF_ERROR(AllocateZeroed(&argmax_scratch_, static_cast<size_t>(cuda::ArgmaxScratchBytes(cap))));
      if (host_out_ != nullptr) cudaFreeHost(host_out_);
      host_out_ = nullptr;
      ROTE_CUDA_RETURN_IF_ERROR(cudaMallocHost(&host_out_, static_cast<size_t>(cap) * c.vocab_size * 4));
      logit_capacity_ = cap;
    }
    if (meta_ints > meta_capacity_) {
      DropGraphs();
      int32_t cap = std::max<int32_t>(meta_ints, 1 << 16);
      ROTE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
      ROTE_RETURN_IF_ERROR(meta_.Allocate(static_cast<size_t>(cap) * 4));
      if (host_meta_ != nullptr) cudaFreeHost(host_meta_);
      host_meta_ = nullptr;
      ROTE_CUDA_RETURN_IF_ERROR(cudaMallocHost(&host_meta_, static_cast<size_t>(cap) * 4));
      meta_capacity_ = cap;
    }
    return OkStatus();
  }

  int32_t HiddenStride() const { return static_cast<int32_t>(cuda::PaddedCols(config_.hidden_size)); }
  int32_t AttStride() const { return static_cast<int32_t>(cuda::PaddedCols(config_.q_dim())); }
  int32_t ActStride() const { return static_cast<int32_t>(cuda::PaddedCols(config_.intermediate_size)); }

  Status AllocateZeroed(DeviceBuffer* b, size_t bytes) {
    ROTE_RETURN_IF_ERROR(b->Allocate(bytes));
    ROTE_CUDA_RETURN_IF_ERROR(cudaMemset(b->as<void>(), 0, bytes));
    return OkStatus();
  }

  void DropGraphs() {
    for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
    graphs_.clear();
    last_graph_ = nullptr;
  }

  // Device pointers of one step's metadata inside meta_.
  struct StepLayout {
    int32_t tokens = 0, logit_rows = 0, max_blocks = 0, context = 0;
    int32_t longest = 0;  // the most positions any sequence has after this step (context: its bucket)
    int64_t tokens_off = 0, pos_off = 0, table_off = 0, logit_rows_off = 0, total = 0;
  };

  Status Step(const BatchPlan& plan, bool greedy) {
    if (num_blocks_ == 0) return FailedPrecondition("CUDA backend: AllocateKvCache was not called");
    const ModelConfig& c = config_;
    StepLayout lay;
    int32_t max_len = 0;
    bool decode_only = true;
    for (const SequenceStep& s : plan.sequences) {
      const int32_t n = static_cast<int32_t>(s.tokens.size());
      if (n < 1) return InvalidArgument("Forward: a sequence step has no tokens");
      if (s.num_logits < 0 || s.num_logits > n) return InvalidArgument("Forward: num_logits out of range");
      const int32_t end = s.start_pos + n;
      if (s.start_pos < 0 || end > max_positions_)
        return InvalidArgument("Forward: positions up to " + std::to_string(end) + " exceed max_positions " +
                               std::to_string(max_positions_));
      const int64_t need_blocks = (end + kKvBlockSize - 1) / kKvBlockSize;
      if (static_cast<int64_t>(s.block_table.size()) < need_blocks)
        return InvalidArgument("Forward: block table too short for position " + std::to_string(end - 1));
      for (int64_t b = 0; b < need_blocks; ++b)
        if (s.block_table[b] < 0 || s.block_table[b] >= num_blocks_)
          return InvalidArgument("Forward: block id " + std::to_string(s.block_table[b]) + " out of range");
      lay.tokens += n;
      lay.logit_rows += s.num_logits;
      max_len = std::max(max_len, end);
      if (n != 1 || s.num_logits != 1) decode_only = false;
    }
    if (lay.tokens == 0) {
      num_logit_rows_ = 0;
      return OkStatus();
    }
    // Decode steps bucket the context so that one graph serves many steps: the attention
    // kernel's shared memory and the block-table width are fixed per bucket.
    const bool use_graph = options_.use_graphs && decode_only;
    lay.context = max_len;
    lay.longest = max_len;
    if (use_graph) {
      int32_t bucket = 256;
      while (bucket < max_len) bucket *= 2;
      lay.context = std::min(bucket, max_positions_);
    }
    lay.max_blocks = (lay.context + kKvBlockSize - 1) / kKvBlockSize;
    lay.tokens_off = 0;
    lay.pos_off = lay.tokens_off + lay.tokens;
    lay.logit_rows_off = lay.pos_off + lay.tokens;
    lay.table_off = lay.logit_rows_off + lay.logit_rows;
    lay.total = lay.table_off + static_cast<int64_t>(lay.tokens) * lay.max_blocks;
    if (lay.total > (1 << 30)) return InvalidArgument("Forward: step too large");
    ROTE_RETURN_IF_ERROR(EnsureCapacity(lay.tokens, lay.logit_rows, static_cast<int32_t>(lay.total)));

    // Per token: id, position, its sequence's block table (padded with block 0, never read).
    int32_t* h = host_meta_;
    int32_t t = 0, lr = 0;
    for (const SequenceStep& s : plan.sequences) {
      const int32_t n = static_cast<int32_t>(s.tokens.size());
      const int64_t nb = std::min<int64_t>(static_cast<int64_t>(s.block_table.size()), lay.max_blocks);
      for (int32_t i = 0; i < n; ++i, ++t) {
        h[lay.tokens_off + t] = s.tokens[i];
        h[lay.pos_off + t] = s.start_pos + i;
        int32_t* row = h + lay.table_off + static_cast<int64_t>(t) * lay.max_blocks;
        std::memcpy(row, s.block_table.data(), nb * sizeof(int32_t));
        std::fill(row + nb, row + lay.max_blocks, 0);
        if (i >= n - s.num_logits) h[lay.logit_rows_off + lr++] = t;
      }
    }
    for (int32_t i = 0; i < lay.tokens; ++i)
      if (h[lay.tokens_off + i] < 0 || h[lay.tokens_off + i] >= c.vocab_size)
        return InvalidArgument("Forward: token id " + std::to_string(h[lay.tokens_off + i]) + " out of range");
    ROTE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(meta_.as<int32_t>(), host_meta_, lay.total * sizeof(int32_t),
                                              cudaMemcpyHostToDevice, stream_));

    if (lay.tokens == 1 && (g_step_attention_split > 0 || g_attention_parts_min_context > 0))
      ROTE_RETURN_IF_ERROR(EnsureAttentionParts(lay));
    cuda::DecodeStepArgs decode_step_args;
    ROTE_ASSIGN_OR_RETURN(const bool one_launch, PrepareDecodeStep(lay, &decode_step_args));
    const cuda::DecodeStepArgs* decode_step = one_launch ? &decode_step_args : nullptr;
    const bool step_in_parts = one_launch && decode_step_args.attn_sync != nullptr;
    if (one_launch) g_decode_steps.fetch_add(1, std::memory_order_relaxed);
    if (step_in_parts) g_decode_steps_in_parts.fetch_add(1, std::memory_order_relaxed);
    if (g_kernel_timeline || timeline_set_) {  // benchmarks only (SetCudaKernelTimelineForBenchmark)
      if (g_kernel_timeline && timeline_.bytes() == 0)
        ROTE_RETURN_IF_ERROR(AllocateZeroed(&timeline_, sizeof(cuda::KernelTimeline)));
      if (g_kernel_timeline)
        ROTE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(timeline_.as<void>(), 0, offsetof(cuda::KernelTimeline, log), stream_));
      ROTE_CUDA_RETURN_IF_ERROR(cuda::SetKernelTimeline(
          g_kernel_timeline ? static_cast<cuda::KernelTimeline*>(timeline_.as<void>()) : nullptr, stream_));
      timeline_set_ = g_kernel_timeline;
      if (g_kernel_timeline) g_kernel_timeline_last = timeline_.as<void>();
    }
    if (use_graph) {
      const GraphKey key{lay.tokens, lay.context, greedy, g_skip_kernels, g_one_token_kernel, g_mlp_block_warps,
                         g_step_trace, g_step_prefetch_tiles, g_large_batch_tile, g_attention_variant,
                         g_weight_evict_first, g_step_attention_split, step_in_parts, g_attention_parts, g_fast_tile,
                         g_fast_merge, g_fast_stream};
      auto it = graphs_.find(key);
      if (it == graphs_.end()) {
        cudaGraph_t graph = nullptr;
        ROTE_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
        Status s = Launch(lay, greedy, decode_step);
        cudaError_t end = cudaStreamEndCapture(stream_, &graph);
        if (!s.ok()) {
          if (graph != nullptr) cudaGraphDestroy(graph);
          return s;
        }
        ROTE_CUDA_RETURN_IF_ERROR(end);
        cudaGraphExec_t exec = nullptr;
        cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
        cudaGraphDestroy(graph);
        ROTE_CUDA_RETURN_IF_ERROR(inst);
        it = graphs_.emplace(key, exec).first;
      }
      ROTE_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(it->second, stream_));
      last_graph_ = it->second;
    } else {
      ROTE_RETURN_IF_ERROR(Launch(lay, greedy, decode_step));
      last_graph_ = nullptr;
    }
    if (sampling_) {
      ROTE_RETURN_IF_ERROR(LaunchSampling(lay));
    } else if (greedy && chain_steps_ > 1) {  // ForwardGreedySteps: the rest of the run, then its tokens
      if (!use_graph) return Internal("ForwardGreedySteps: a chained run without its graph");
      int32_t* history = chain_tokens_.as<int32_t>();
      int32_t* next_tokens = meta_.as<int32_t>() + lay.tokens_off;
      int32_t* next_pos = meta_.as<int32_t>() + lay.pos_off;
      for (int32_t i = 1; i < chain_steps_; ++i) {
        ROTE_CUDA_RETURN_IF_ERROR(cuda::LaunchAdvanceGreedy(greedy_.as<int32_t>(), lay.logit_rows,
                                                            history + static_cast<int64_t>(i - 1) * lay.logit_rows,
                                                            next_tokens, next_pos, stream_));
        ROTE_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(last_graph_, stream_));
      }
      ROTE_CUDA_RETURN_IF_ERROR(cuda::LaunchAdvanceGreedy(
          greedy_.as<int32_t>(), lay.logit_rows, history + static_cast<int64_t>(chain_steps_ - 1) * lay.logit_rows,
          nullptr, nullptr, stream_));
      ROTE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_out_, history,
                                                static_cast<size_t>(chain_steps_) * lay.logit_rows * sizeof(int32_t),
                                                cudaMemcpyDeviceToHost, stream_));
    } else if (greedy) {
      ROTE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_out_, greedy_.as<int32_t>(), lay.logit_rows * sizeof(int32_t),
                                                cudaMemcpyDeviceToHost, stream_));
    } else {
      ROTE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_out_, logits_.as<float>(),
                                                static_cast<size_t>(lay.logit_rows) * c.vocab_size * sizeof(float),
                                                cudaMemcpyDeviceToHost, stream_));
    }
    ROTE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    num_logit_rows_ = lay.logit_rows;
    return OkStatus();
  }

  // The device sampler's scratch for `rows` rows (grown, never shrunk), zeroed once: the chain's
  // last chunk of a row copies weights past its kept ranks, never used, but never uninitialized
  // either. A failed allocation leaves no error behind (cudaMalloc's is not sticky; cleared here).
  Status EnsureSampleScratch(int32_t rows) {
    const int64_t need = cuda::SampleRowsScratchBytes(rows, config_.vocab_size);
    if (static_cast<int64_t>(sample_scratch_.bytes()) >= need) return OkStatus();
    ROTE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    Status s = sample_scratch_.Allocate(static_cast<size_t>(need));
    if (!s.ok()) {
      cudaGetLastError();
      return s;
    }
    ROTE_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(sample_scratch_.as<void>(), 0, sample_scratch_.bytes(), stream_));
    return OkStatus();
  }

  // ForwardSampled's tail: each logits row's token by its rule, on the device, into host_out_.
  Status LaunchSampling(const StepLayout& lay) {
    const int32_t rows = lay.logit_rows, cols = config_.vocab_size;
    if (static_cast<int64_t>(sample_rules_.size()) != rows)
      return InvalidArgument("ForwardSampled: " + std::to_string(sample_rules_.size()) + " rules for " +
                             std::to_string(rows) + " logits rows");
    if (rows == 0) return OkStatus();
    if (!cuda::CanSampleRows(rows, cols))
      return InvalidArgument("ForwardSampled: " + std::to_string(rows) + " rows of " + std::to_string(cols) +
                             " logits are more than the device sampler takes (256 rows of 262,144)");
    ROTE_RETURN_IF_ERROR(EnsureSampleScratch(rows));
    if (static_cast<int64_t>(sample_rules_dev_.bytes()) < static_cast<int64_t>(rows) * static_cast<int64_t>(sizeof(cuda::RowRule)))
      ROTE_RETURN_IF_ERROR(sample_rules_dev_.Allocate(std::max<size_t>(64, rows) * sizeof(cuda::RowRule)));
    sample_rules_host_.resize(static_cast<size_t>(rows));
    for (int32_t r = 0; r < rows; ++r) {
      const RowSampling& in = sample_rules_[static_cast<size_t>(r)];
      sample_rules_host_[static_cast<size_t>(r)] = {in.temperature, in.top_k, in.top_p, in.uniform};
    }
    ROTE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(sample_rules_dev_.as<void>(), sample_rules_host_.data(),
                                              static_cast<size_t>(rows) * sizeof(cuda::RowRule), cudaMemcpyHostToDevice,
                                              stream_));
    return SampleAndCopy(rows, g_sample_candidates != 0 && cuda::SampleByCandidates(sample_rules_host_.data(), rows, cols),
                         /*synchronize=*/false);
  }

  // The device sampler over the step's logits rows (rules already on the device), the tokens into
  // host_out_ and, on the candidate path, its overflow flag after them (host_out_ holds rows x
  // vocab floats).
  Status SampleAndCopy(int32_t rows, bool by_candidates, bool synchronize) {
    sampled_by_candidates_ = by_candidates;
    ROTE_CUDA_RETURN_IF_ERROR(cuda::SampleRows(logits_.as<float>(), rows, config_.vocab_size,
                                               sample_rules_dev_.as<cuda::RowRule>(), greedy_.as<int32_t>(),
                                               sample_scratch_.as<void>(), static_cast<int64_t>(sample_scratch_.bytes()),
                                               stream_, by_candidates));
    ROTE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_out_, greedy_.as<int32_t>(), static_cast<size_t>(rows) * sizeof(int32_t),
                                              cudaMemcpyDeviceToHost, stream_));
    if (by_candidates)
      ROTE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(static_cast<int32_t*>(host_out_) + rows,
                                                cuda::SampleRowsOverflow(sample_scratch_.as<void>()), sizeof(int32_t),
                                                cudaMemcpyDeviceToHost, stream_));
    if (synchronize) ROTE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    return OkStatus();
  }

  StepTokens StepOf(const StepLayout& lay) const {
    const int32_t* meta = meta_.as<int32_t>();
    StepTokens step;
    step.pos = meta + lay.pos_off;
    step.block_table = meta + lay.table_off;
    step.max_blocks = lay.max_blocks;
    step.tokens = lay.tokens;
    return step;
  }

  // The arguments of layer l's four products. Small batches normalise inside the matrix product
  // (no extra launch, the product is a memory stream anyway); larger ones normalise once into h
  // (the caller launches that norm) and spare every warp the work. One token without q/k norms:
  // rotary and the KV store run in the q|k|v product's epilogue (rope_fused).
  // Up to this many tokens RMSNorm is fused into the product that follows (LinearKernel); above
  // it the activations are normalised once so the products can run as TiledLinearKernel, which
  // measured faster from 8 tokens on (docs/performance.md, fifth session).
  static constexpr int32_t kFusedNormMaxTokens = 4;
  struct LayerLaunch {
    cuda::StepLayerArgs args;
    bool rope_fused = false;
  };
  LayerLaunch LayerArgs(const StepLayout& lay, const StepTokens& step, int32_t l) const {
    const ModelConfig& c = config_;
    const DeviceLayer& dl = layers_[l];
    const bool fused_norm = FusedNorm(lay);
    const bool skip_weights = Skip(CudaKernelKind::kLayerWeightReads);
    float* x = x_.as<float>();
    const int32_t xs = HiddenStride();
    const int64_t layer_floats = static_cast<int64_t>(num_blocks_) * kKvBlockSize * c.kv_dim();
    float* kv_base = kv_.as<float>();
    LayerLaunch r;
    r.args.kv = LayerKv{kv_base + (2 * l) * layer_floats, kv_base + (2 * l + 1) * layer_floats};

    LinearArgs a;
    a.w = dl.wqkv;
    a.tokens = lay.tokens;
    a.x_stride = xs;
    a.x = fused_norm ? x : h_.as<float>();
    if (fused_norm) {
      a.norm_weight = dl.attn_norm;
      a.norm_eps = c.rms_norm_eps;
    }
    a.epilogue = dl.bqkv != nullptr ? LinearEpilogue::kAddBias : LinearEpilogue::kStore;
    a.bias = dl.bqkv;
    a.out = qkv_.as<float>();
    a.out_stride = c.q_dim() + 2 * c.kv_dim();
    a.bench_skip_weight_reads = skip_weights;
    // The fast profile fuses it at every token count (FastLinearKernel's epilogue, the same bits
    // as the rotary kernel).
    if ((fast_ ? g_fast_rope_fused : lay.tokens == 1) && dl.q_norm == nullptr) {
      LinearArgs f = a;
      f.epilogue = LinearEpilogue::kRopeStore;
      f.rope.pos = step.pos;
      f.rope.block_table = step.block_table;
      f.rope.max_blocks = step.max_blocks;
      f.rope.block_size = kKvBlockSize;
      f.rope.num_heads = c.num_heads;
      f.rope.num_kv_heads = c.num_kv_heads;
      f.rope.head_dim = c.head_dim;
      f.rope.cos = rope_cos_;
      f.rope.sin = rope_sin_;
      f.rope.q_out = q_.as<float>();
      f.rope.k_cache = r.args.kv.k;
      f.rope.v_cache = r.args.kv.v;
      if (fast_ ? cuda::CanRunFastLinear(f) : cuda::CanFuseRope(f)) {
        a = f;
        r.rope_fused = true;
      }
    }
    r.args.qkv = a;

    // The o and down products add into the residual stream x.
    auto residual_product = [&](const DeviceMatrix& w, const float* in, int32_t in_stride) {
      LinearArgs p;
      p.w = w;
      p.x = in;
      p.x_stride = in_stride;
      p.tokens = lay.tokens;
      p.epilogue = LinearEpilogue::kAddResidual;
      p.out = x;
      p.out_stride = xs;
      p.out_lane_rows = true;
      p.bench_skip_weight_reads = skip_weights;
      return p;
    };
    r.args.out = residual_product(dl.wo, att_.as<float>(), AttStride());

    a = LinearArgs{};
    a.w = dl.wgu;
    a.tokens = lay.tokens;
    a.x_stride = xs;
    a.x = fused_norm ? x : h_.as<float>();
    if (fused_norm) {
      a.norm_weight = dl.mlp_norm;
      a.norm_eps = c.rms_norm_eps;
    }
    a.epilogue = LinearEpilogue::kSiluMul;
    a.out = act_.as<float>();
    a.out_stride = ActStride();
    a.out_lane_rows = true;
    a.bench_skip_weight_reads = skip_weights;
    r.args.gate_up = a;

    r.args.down = residual_product(dl.wdown, act_.as<float>(), ActStride());
    for (LinearArgs* p : {&r.args.qkv, &r.args.out, &r.args.gate_up, &r.args.down}) WithSplitScratch(p);
    return r;
  }

  // Up to kFusedNormMaxTokens logits rows the final norm is fused into the lm_head (each warp
  // normalises its rows' activations); more are normalised once into h (LaunchRmsNorm gathering
  // the logits rows), which lets the lm_head run as TiledLinearKernel.
  // The fast profile's products always apply the norm themselves (fast_linear.h: the norm's
  // scale multiplies the finished sums), for every token count, so no RMSNorm launch remains.
  bool LmHeadNormFused(const StepLayout& lay) const { return fast_ || lay.logit_rows <= kFusedNormMaxTokens; }
  bool FusedNorm(const StepLayout& lay) const { return fast_ || lay.tokens <= kFusedNormMaxTokens; }
  LinearArgs LmHeadArgs(const StepLayout& lay) const {
    LinearArgs a;
    a.w = lm_head_;
    a.x_stride = HiddenStride();
    a.tokens = lay.logit_rows;
    if (LmHeadNormFused(lay)) {
      a.x = x_.as<float>();
      a.x_rows = meta_.as<int32_t>() + lay.logit_rows_off;
      a.norm_weight = final_norm_;
      a.norm_eps = config_.rms_norm_eps;
    } else {
      a.x = h_.as<float>();
    }
    WithSplitScratch(&a);
    a.epilogue = LinearEpilogue::kStore;
    a.out = logits_.as<float>();
    a.out_stride = config_.vocab_size;
    return a;
  }

  // The whole step as one DecodeStepKernel (kernels.h): one token, one logits row, nothing left
  // out by a benchmark, and every layer's products fused as DecodeStepKernel needs them. Its
  // per-layer arguments live in device memory; they depend only on buffer addresses, so they
  // are uploaded here (before any capture) when those change.
  StatusOr<bool> PrepareDecodeStep(const StepLayout& lay, cuda::DecodeStepArgs* f) {
    if (fast_) return false;  // the one-launch step runs the exact profile's products
    if (lay.tokens != 1 || lay.logit_rows != 1 || g_skip_kernels != 0) return false;
    const ModelConfig& c = config_;
    const StepTokens step = StepOf(lay);
    std::vector<cuda::StepLayerArgs> host;
    host.reserve(c.num_layers);
    for (int32_t l = 0; l < c.num_layers; ++l) {
      LayerLaunch ll = LayerArgs(lay, step, l);
      if (!ll.rope_fused) return false;
      host.push_back(ll.args);
    }
    f->num_layers = c.num_layers;
    f->lm_head = LmHeadArgs(lay);
    f->step = step;
    f->shape = AttentionShape{c.num_heads, c.num_kv_heads, c.head_dim, kKvBlockSize};
    f->scale = scale_;
    f->max_context = lay.context;
    f->q = q_.as<float>();
    f->att = att_.as<float>();
    f->barrier = step_barrier_.as<unsigned long long>();
    // Attention over parts of long contexts (EnsureAttentionParts sized the scratch), only where
    // this step reaches them: the other steps run the kernel without that code (decided per step,
    // so one context bucket may hold a graph of each).
    if (g_step_attention_split > 0 && attn_sync_.as<void>() != nullptr && lay.longest >= g_step_attention_split) {
      const cuda::AttentionParts parts = AttentionPartsScratch();
      f->attn_split_min_context = g_step_attention_split;
      f->attn_scores = parts.scores;
      f->attn_maxes = parts.maxes;
      f->attn_vpart = parts.vpart;
      f->attn_sync = parts.sync;
      f->attn_parts = parts.parts;
    }
    if (step_layers_.as<void>() == nullptr)
      ROTE_RETURN_IF_ERROR(step_layers_.Allocate(host.size() * sizeof(cuda::StepLayerArgs)));
    f->layers = reinterpret_cast<const cuda::StepLayerArgs*>(step_layers_.as<void>());
    if (!cuda::CanRunDecodeStep(*f, host[0])) return false;
    if (g_step_trace) {
      int device = 0, sms = 0;
      ROTE_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
      ROTE_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
      const int32_t slots = cuda::DecodeStepTraceSlots(c.num_layers);
      const size_t trace_bytes = static_cast<size_t>(sms) * slots * 2 * sizeof(unsigned long long);
      if (step_trace_.bytes() < trace_bytes) ROTE_RETURN_IF_ERROR(AllocateZeroed(&step_trace_, trace_bytes));
      f->trace = step_trace_.as<unsigned long long>();
      g_step_trace_last = {step_trace_.as<void>(), sms, slots};
    }
    // The arguments depend on these addresses only (compared as addresses: the structs' padding
    // bytes are indeterminate).
    const std::vector<const void*> key = {x_.as<void>(),   h_.as<void>(),     qkv_.as<void>(), q_.as<void>(),
                                          att_.as<void>(), act_.as<void>(),   logits_.as<void>(),
                                          meta_.as<void>(), kv_.as<void>(),
                                          reinterpret_cast<const void*>(static_cast<uintptr_t>(num_blocks_))};
    const size_t bytes = host.size() * sizeof(cuda::StepLayerArgs);
    if (step_layers_key_ != key) {
      ROTE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
      ROTE_CUDA_RETURN_IF_ERROR(cudaMemcpy(step_layers_.as<void>(), host.data(), bytes, cudaMemcpyHostToDevice));
      step_layers_key_ = key;
    }
    step_layer0_ = host[0];
    return true;
  }

  // Scratch of attention over parts of long contexts (one token; DecodeStepKernel and
  // LaunchAttentionParts): the scores of lay.context positions per head, the parts' maxes and
  // partials, a counter per head. Before any capture: growing it drops the graphs that hold the
  // old address.
  Status EnsureAttentionParts(const StepLayout& lay) {
    const ModelConfig& c = config_;
    const size_t heads = static_cast<size_t>(c.num_heads);
    const size_t scores = heads * static_cast<size_t>(lay.context);
    if (attn_scores_.bytes() < scores * sizeof(float)) {
      ROTE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
      DropGraphs();
      ROTE_RETURN_IF_ERROR(attn_scores_.Allocate(scores * sizeof(float)));
    }
    if (attn_sync_.as<void>() == nullptr) {
      ROTE_RETURN_IF_ERROR(attn_maxes_.Allocate(heads * 8 * sizeof(float)));
      ROTE_RETURN_IF_ERROR(attn_vpart_.Allocate(heads * 8 * static_cast<size_t>(c.head_dim) * sizeof(float)));
      ROTE_RETURN_IF_ERROR(AllocateZeroed(&attn_sync_, heads * sizeof(unsigned long long)));
    }
    return OkStatus();
  }
  cuda::AttentionParts AttentionPartsScratch() {
    return {attn_scores_.as<float>(), attn_maxes_.as<float>(), attn_vpart_.as<float>(),
            attn_sync_.as<unsigned long long>(), g_attention_parts};
  }

  // The forward pass of docs/numerics.md section 5: per layer the q|k|v product (with rotary
  // and the KV store, or followed by them), attention, and the o, gate|up and down products;
  // or, for one token, all of it as one DecodeStepKernel (decode_step set).
  Status Launch(const StepLayout& lay, bool greedy, const cuda::DecodeStepArgs* decode_step) {
    const ModelConfig& c = config_;
    const int32_t* meta = meta_.as<int32_t>();
    const StepTokens step = StepOf(lay);
    AttentionShape shape{c.num_heads, c.num_kv_heads, c.head_dim, kKvBlockSize};
    float* x = x_.as<float>();
    float* h = h_.as<float>();
    const int32_t xs = HiddenStride();
    if (!Skip(CudaKernelKind::kEmbed))
      ROTE_CUDA_RETURN_IF_ERROR(cuda::LaunchEmbed(embed_, meta + lay.tokens_off, lay.tokens, x, xs, stream_));
    if (decode_step != nullptr) {
      ROTE_CUDA_RETURN_IF_ERROR(cuda::LaunchDecodeStep(*decode_step, step_layer0_, stream_));
    } else {
      const bool fused_norm = FusedNorm(lay);
      for (int32_t l = 0; l < c.num_layers; ++l) {
        const DeviceLayer& dl = layers_[l];
        const LayerLaunch ll = LayerArgs(lay, step, l);
        const cuda::StepLayerArgs& la = ll.args;
        if (!fused_norm)
          ROTE_CUDA_RETURN_IF_ERROR(
              cuda::LaunchRmsNorm(x, xs, lay.tokens, c.hidden_size, dl.attn_norm, c.rms_norm_eps, h, stream_));
        if (!Skip(CudaKernelKind::kQkv)) ROTE_RETURN_IF_ERROR(Product(la.qkv));
        if (!ll.rope_fused && !Skip(CudaKernelKind::kRope))
          ROTE_CUDA_RETURN_IF_ERROR(cuda::LaunchRopeStore(qkv_.as<float>(), step, shape, dl.q_norm, dl.k_norm,
                                                          c.rms_norm_eps, rope_cos_, rope_sin_, q_.as<float>(), la.kv,
                                                          stream_));
        // One token over a context bucket whose every position count reaches the split's threshold
        // (a bucket holds contexts over half its size): each head in 8 (4, 2) blocks over parts of it.
        const bool parts = lay.tokens == 1 && g_attention_variant < 0 && g_attention_parts_min_context > 0 &&
                           lay.context / 2 >= g_attention_parts_min_context && attn_sync_.as<void>() != nullptr &&
                           cuda::CanRunAttentionParts(step, shape, lay.context, g_attention_parts);
        if (!Skip(CudaKernelKind::kAttention) && parts)
          ROTE_CUDA_RETURN_IF_ERROR(cuda::LaunchAttentionParts(q_.as<float>(), step, shape, la.kv, scale_, lay.context,
                                                               att_.as<float>(), AttentionPartsScratch(), stream_));
        if (!Skip(CudaKernelKind::kAttention) && !parts)
          ROTE_CUDA_RETURN_IF_ERROR(cuda::LaunchAttention(q_.as<float>(), step, shape, la.kv, scale_, lay.context,
                                                          att_.as<float>(), AttStride(), stream_));
        // One token: the o, gate|up and down products may run as one persistent launch with grid
        // barriers between them (kernels.h, MlpBlockArgs), unless the benchmark leaves one out.
        const uint32_t mlp_kinds = static_cast<uint32_t>(CudaKernelKind::kOut) |
                                   static_cast<uint32_t>(CudaKernelKind::kGateUp) |
                                   static_cast<uint32_t>(CudaKernelKind::kDown) |
                                   static_cast<uint32_t>(CudaKernelKind::kLayerWeightReads);
        const cuda::MlpBlockArgs mlp{la.out, la.gate_up, la.down, mlp_barrier_.as<uint32_t>()};
        if (!fast_ && lay.tokens == 1 && fused_norm && (g_skip_kernels & mlp_kinds) == 0 && cuda::CanRunMlpBlock(mlp)) {
          ROTE_CUDA_RETURN_IF_ERROR(cuda::LaunchMlpBlock(mlp, stream_));
          continue;
        }
        if (!Skip(CudaKernelKind::kOut)) ROTE_RETURN_IF_ERROR(Product(la.out));
        if (!fused_norm)
          ROTE_CUDA_RETURN_IF_ERROR(
              cuda::LaunchRmsNorm(x, xs, lay.tokens, c.hidden_size, dl.mlp_norm, c.rms_norm_eps, h, stream_));
        if (!Skip(CudaKernelKind::kGateUp)) ROTE_RETURN_IF_ERROR(Product(la.gate_up));
        if (!Skip(CudaKernelKind::kDown)) ROTE_RETURN_IF_ERROR(Product(la.down));
      }
      if (lay.logit_rows > 0 && !Skip(CudaKernelKind::kLmHead)) {
        if (!LmHeadNormFused(lay))
          ROTE_CUDA_RETURN_IF_ERROR(cuda::LaunchRmsNorm(x, xs, lay.logit_rows, c.hidden_size, final_norm_,
                                                        c.rms_norm_eps, h, stream_,
                                                        meta + lay.logit_rows_off));
        ROTE_RETURN_IF_ERROR(Product(LmHeadArgs(lay)));
      }
    }
    if (lay.logit_rows > 0 && greedy && !Skip(CudaKernelKind::kArgmax))
      ROTE_CUDA_RETURN_IF_ERROR(cuda::LaunchArgmax(logits_.as<float>(), lay.logit_rows, c.vocab_size,
                                                   greedy_.as<int32_t>(), argmax_scratch_.as<void>(),
                                                   logit_capacity_, stream_));
    return OkStatus();
  }

  DeviceScope destruction_device_;  // first: destroyed after every buffer (~CudaBackendImpl)
  std::shared_ptr<const Model> model_;
  CudaBackendOptions options_;
  ModelConfig config_;
  std::string device_name_;
  const bool fast_;                      // NumericsProfile::kFast: every product LaunchFastLinear
  std::string profile_name_ = "exact";   // Backend::numerics_profile
  cudaStream_t stream_ = nullptr;
  int32_t max_positions_ = 0;
  float scale_ = 0.0f;

  std::vector<std::unique_ptr<DeviceBuffer>> buffers_;  // weights, norms, biases, rope tables
  int64_t weight_bytes_ = 0;
  std::vector<DeviceLayer> layers_;
  DeviceMatrix embed_, lm_head_;
  const float* final_norm_ = nullptr;
  const float* rope_cos_ = nullptr;
  const float* rope_sin_ = nullptr;

  DeviceBuffer kv_;  // (layers, K|V, blocks, kKvBlockSize, kv_dim) fp32
  int32_t num_blocks_ = 0;

  // x_, h_, att_, act_ hold lane rows (kernels.h); qkv_, q_ and logits_ plain rows.
  DeviceBuffer x_, h_, qkv_, q_, att_, act_, logits_, greedy_, argmax_scratch_, meta_;
  DeviceBuffer chain_tokens_;  // ForwardGreedySteps: a chained run's tokens, step after step
  int32_t chain_steps_ = 1;    // steps the next Step runs as one chained run (ForwardGreedySteps)
  // ForwardSampled: the rules of the step being run, and the device sampler's buffers.
  bool sampling_ = false;
  bool sampled_by_candidates_ = false;  // the last SampleAndCopy's path
  std::span<const RowSampling> sample_rules_;
  std::vector<cuda::RowRule> sample_rules_host_;
  DeviceBuffer sample_rules_dev_, sample_scratch_;
  DeviceBuffer split_scratch_, split_tickets_;  // LinearArgs::split_*: see WithSplitScratch
  DeviceBuffer mlp_barrier_;  // MlpBlockKernel's grid barrier: arrival count and generation
  DeviceBuffer step_barrier_;  // DecodeStepKernel's grid barrier: a 64-bit arrival counter
  // DecodeStepArgs::attn_*: attention over parts of long contexts (scores, maxes, partials, counters).
  DeviceBuffer attn_scores_, attn_maxes_, attn_vpart_, attn_sync_;
  DeviceBuffer step_layers_;   // DecodeStepKernel's per-layer arguments (PrepareDecodeStep)
  DeviceBuffer step_trace_;    // benchmarks: DecodeStepArgs::trace
  DeviceBuffer timeline_;      // benchmarks: cuda::KernelTimeline (SetCudaKernelTimelineForBenchmark)
  bool timeline_set_ = false;  // the kernels' timeline pointer is timeline_
  std::vector<const void*> step_layers_key_;  // the addresses step_layers_ was built from
  cuda::StepLayerArgs step_layer0_;
  int32_t token_capacity_ = 0, logit_capacity_ = 0, meta_capacity_ = 0;
  int32_t* host_meta_ = nullptr;  // pinned
  void* host_out_ = nullptr;      // pinned: logits or greedy tokens of the last step
  std::unique_ptr<ThreadPool> upload_pool_;  // while the weights upload (UploadMatrix)
  int32_t num_logit_rows_ = 0;
  std::map<GraphKey, cudaGraphExec_t> graphs_;
  cudaGraphExec_t last_graph_ = nullptr;  // the last step's graph (TimeLastGraphForBenchmark)
};

}  // namespace

void SetCudaLargeBatchTileForTesting(int variant) {
  g_large_batch_tile = variant;
  cuda::SetLargeBatchTile(variant);
}
void SetCudaSkipKernelsForBenchmark(uint32_t mask) { g_skip_kernels = mask; }
int64_t CudaDecodeStepsForTesting() { return g_decode_steps.load(std::memory_order_relaxed); }
int64_t CudaDecodeStepsInPartsForTesting() { return g_decode_steps_in_parts.load(std::memory_order_relaxed); }
int64_t CudaTiledLinearLaunchesForTesting() { return cuda::TiledLinearLaunches(); }
int64_t CudaFastLinearLaunchesForTesting() { return cuda::FastLinearLaunches(); }
int64_t CudaFastMergedLaunchesForTesting() { return cuda::FastLinearMergedLaunches(); }
int64_t CudaFastStreamLaunchesForTesting() { return cuda::FastLinearStreamLaunches(); }
void SetCudaFastStreamForTesting(int mode, int row_tiles) {
  g_fast_stream = (mode < 0 ? 1 : mode) * 100 + row_tiles;  // the graph key
  cuda::SetFastLinearStream(mode, row_tiles);
}
void SetCudaFastMergedSlicesForTesting(int max_slices, int max_steps_per_warp) {
  g_fast_merge = max_slices * 1000 + max_steps_per_warp;  // the graph key
  cuda::SetFastLinearMergedSlices(max_slices, max_steps_per_warp);
}
void SetCudaFastSplitTargetForBenchmark(int target) { cuda::SetFastLinearSplitTargetForBenchmark(target); }
void SetCudaFastSplitsForBenchmark(int rows, int cols_padded, int splits) {
  cuda::SetFastLinearSplitsForBenchmark(rows, cols_padded, splits);
}
void SetCudaProgrammaticLaunchForBenchmark(bool on) { cuda::SetProgrammaticLaunch(on); }
void SetCudaFastShapeForRowsForBenchmark(int rows, int cols, int row_tiles, int token_groups) {
  cuda::SetFastLinearShapeForRowsForBenchmark(rows, cols, row_tiles, token_groups);
}
void SetCudaFastRopeFusedForTesting(bool fused) { g_fast_rope_fused = fused; }
void SetCudaFastNormStagedForTesting(bool staged) { cuda::SetFastLinearNormStaged(staged); }
void SetCudaLatePrefetchForTesting(int early_blocks) { cuda::SetLatePrefetch(early_blocks); }
int64_t CudaLatePrefetchLaunchesForTesting() { return cuda::LatePrefetchLaunches(); }
int64_t CudaFastNormStagedLaunchesForTesting() { return cuda::FastLinearNormStagedLaunches(); }
void SetCudaFastShapeRuleForBenchmark(int rule) { cuda::SetFastLinearShapeRuleForBenchmark(rule); }
void SetCudaFastLinearTileForTesting(int row_tiles, int token_tile) {
  g_fast_tile = token_tile * 10 + row_tiles;  // the graph key: captured launches keep their shape
  cuda::SetFastLinearTile(row_tiles);
  cuda::SetFastLinearTokenTile(token_tile);
}
int64_t CudaAttentionPartsLaunchesForTesting() { return cuda::AttentionPartsLaunches(); }
StatusOr<std::vector<int32_t>> CudaArgmaxForTesting(const std::vector<float>& logits, int32_t rows, int32_t cols) {
  if (rows <= 0 || cols <= 0 || logits.size() != static_cast<size_t>(rows) * cols)
    return InvalidArgument("CudaArgmaxForTesting: logits must hold rows x cols values");
  DeviceBuffer d_logits, d_out, d_scratch;
  ROTE_RETURN_IF_ERROR(d_logits.Allocate(logits.size() * sizeof(float)));
  ROTE_RETURN_IF_ERROR(d_out.Allocate(static_cast<size_t>(rows) * sizeof(int32_t)));
  ROTE_RETURN_IF_ERROR(d_scratch.Allocate(static_cast<size_t>(cuda::ArgmaxScratchBytes(rows))));
  ROTE_CUDA_RETURN_IF_ERROR(cudaMemset(d_scratch.as<void>(), 0, d_scratch.bytes()));
  ROTE_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(d_logits.as<void>(), logits.data(), logits.size() * sizeof(float), cudaMemcpyHostToDevice));
  for (int round = 0; round < 2; ++round)  // twice: the tickets must be ready again after a launch
    ROTE_CUDA_RETURN_IF_ERROR(
        cuda::LaunchArgmax(d_logits.as<float>(), rows, cols, d_out.as<int32_t>(), d_scratch.as<void>(), rows, nullptr));
  ROTE_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  std::vector<int32_t> out(static_cast<size_t>(rows));
  ROTE_CUDA_RETURN_IF_ERROR(cudaMemcpy(out.data(), d_out.as<void>(), out.size() * sizeof(int32_t), cudaMemcpyDeviceToHost));
  return out;
}
StatusOr<std::vector<int32_t>> CudaSampleRowsForTesting(const std::vector<float>& logits, int32_t rows, int32_t cols,
                                                       const std::vector<RowSampling>& rules, int* path) {
  if (rows <= 0 || cols <= 0 || logits.size() != static_cast<size_t>(rows) * cols || rules.size() != static_cast<size_t>(rows))
    return InvalidArgument("CudaSampleRowsForTesting: logits must hold rows x cols values and rules one per row");
  if (!cuda::CanSampleRows(rows, cols)) return InvalidArgument("CudaSampleRowsForTesting: too many rows or columns");
  DeviceBuffer d_logits, d_rules, d_out, d_scratch;
  ROTE_RETURN_IF_ERROR(d_logits.Allocate(logits.size() * sizeof(float)));
  ROTE_RETURN_IF_ERROR(d_rules.Allocate(rules.size() * sizeof(cuda::RowRule)));
  ROTE_RETURN_IF_ERROR(d_out.Allocate(static_cast<size_t>(rows) * sizeof(int32_t)));
  ROTE_RETURN_IF_ERROR(d_scratch.Allocate(static_cast<size_t>(cuda::SampleRowsScratchBytes(rows, cols))));
  ROTE_CUDA_RETURN_IF_ERROR(cudaMemset(d_scratch.as<void>(), 0, d_scratch.bytes()));
  std::vector<cuda::RowRule> host_rules;
  for (const RowSampling& r : rules) host_rules.push_back({r.temperature, r.top_k, r.top_p, r.uniform});
  ROTE_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(d_logits.as<void>(), logits.data(), logits.size() * sizeof(float), cudaMemcpyHostToDevice));
  ROTE_CUDA_RETURN_IF_ERROR(cudaMemcpy(d_rules.as<void>(), host_rules.data(), host_rules.size() * sizeof(cuda::RowRule),
                                       cudaMemcpyHostToDevice));
  const bool by_candidates = g_sample_candidates != 0 && cuda::SampleByCandidates(host_rules.data(), rows, cols);
  int taken = by_candidates ? 1 : 0;
  ROTE_CUDA_RETURN_IF_ERROR(cuda::SampleRows(d_logits.as<float>(), rows, cols, d_rules.as<cuda::RowRule>(),
                                             d_out.as<int32_t>(), d_scratch.as<void>(),
                                             static_cast<int64_t>(d_scratch.bytes()), nullptr, by_candidates));
  ROTE_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  if (by_candidates) {
    int32_t overflow = 0;
    ROTE_CUDA_RETURN_IF_ERROR(cudaMemcpy(&overflow, cuda::SampleRowsOverflow(d_scratch.as<void>()), sizeof(overflow),
                                         cudaMemcpyDeviceToHost));
    if (overflow != 0) {
      taken = 2;
      ROTE_CUDA_RETURN_IF_ERROR(cuda::SampleRows(d_logits.as<float>(), rows, cols, d_rules.as<cuda::RowRule>(),
                                                 d_out.as<int32_t>(), d_scratch.as<void>(),
                                                 static_cast<int64_t>(d_scratch.bytes()), nullptr, false));
      ROTE_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
    }
  }
  if (path != nullptr) *path = taken;
  std::vector<int32_t> out(static_cast<size_t>(rows));
  ROTE_CUDA_RETURN_IF_ERROR(cudaMemcpy(out.data(), d_out.as<void>(), out.size() * sizeof(int32_t), cudaMemcpyDeviceToHost));
  return out;
}
void SetCudaStepTraceForBenchmark(bool on) { g_step_trace = on; }
void SetCudaStepPrefetchTilesForTesting(int tiles) {
  g_step_prefetch_tiles = tiles < 0 ? kDefaultStepPrefetchTiles : tiles;
  cuda::SetStepPrefetchTiles(g_step_prefetch_tiles);
}
void SetCudaStepAttentionSplitForTesting(int min_context) {
  g_step_attention_split = min_context < 0 ? kDefaultStepAttentionSplit : min_context;
  g_attention_parts_min_context = min_context < 0 ? kDefaultAttentionPartsMinContext : min_context;
}
void SetCudaAttentionPartsForTesting(int parts) { g_attention_parts = parts; }
void SetCudaKernelTimelineForBenchmark(bool on) { g_kernel_timeline = on; }
void SetCudaSampleCandidatesForTesting(int mode) { g_sample_candidates = mode; }
void SetCudaAttentionVariantForTesting(int variant) {
  g_attention_variant = variant;
  cuda::SetAttentionVariant(variant);
}
void SetCudaWeightEvictFirstForTesting(bool on) {
  g_weight_evict_first = on;
  cuda::SetWeightEvictFirst(on);
}
std::vector<CudaKernelTime> CudaKernelTimelineForBenchmark() {
  if (g_kernel_timeline_last == nullptr) return {};
  auto host = std::make_unique<cuda::KernelTimeline>();
  if (cudaMemcpy(host.get(), g_kernel_timeline_last, sizeof(cuda::KernelTimeline), cudaMemcpyDeviceToHost) !=
      cudaSuccess)
    return {};
  std::map<unsigned long long, CudaKernelTime> by_grid;  // one launch per grid id
  for (int sm = 0; sm < cuda::kTimelineMaxSms; ++sm) {
    const uint32_t n = std::min<uint32_t>(host->cursor[sm], cuda::kTimelineRecordsPerSm);
    for (uint32_t i = 0; i < n; ++i) {
      const cuda::KernelTimelineRecord& r = host->log[sm][i];
      auto [it, fresh] = by_grid.try_emplace(r.grid, CudaKernelTime{r.kind, r.blocks, INT64_MAX, INT64_MAX, 0, 0, 0, {}, {}});
      CudaKernelTime& k = it->second;
      k.start_ns = std::min(k.start_ns, static_cast<int64_t>(r.start));
      k.first_wait_ns = std::min(k.first_wait_ns, static_cast<int64_t>(r.waited));
      k.last_wait_ns = std::max(k.last_wait_ns, static_cast<int64_t>(r.waited));
      k.end_ns = std::max(k.end_ns, static_cast<int64_t>(r.end));
      ++k.blocks_recorded;
      if (fresh)
        for (int p = 0; p < cuda::kTimelinePoints; ++p) {
          const int g = static_cast<int>(r.grid % cuda::kTimelinePointGrids);
          k.point_first_ns[p] = host->point_last[g][p] == 0 ? 0 : static_cast<int64_t>(~host->point_not_first[g][p]);
          k.point_last_ns[p] = static_cast<int64_t>(host->point_last[g][p]);
        }
    }
  }
  std::vector<std::pair<unsigned long long, CudaKernelTime>> order(by_grid.begin(), by_grid.end());
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return std::tie(a.second.first_wait_ns, a.second.start_ns) < std::tie(b.second.first_wait_ns, b.second.start_ns);
  });
  // The late blocks (CudaKernelTime): a second pass, once the kernels' order and ends are known.
  std::map<unsigned long long, int64_t> previous_end;  // by grid: the end of the kernel before it
  for (size_t i = 1; i < order.size(); ++i) previous_end[order[i].first] = order[i - 1].second.end_ns;
  std::map<unsigned long long, int64_t> late_sum;
  for (int sm = 0; sm < cuda::kTimelineMaxSms; ++sm) {
    const uint32_t n = std::min<uint32_t>(host->cursor[sm], cuda::kTimelineRecordsPerSm);
    for (uint32_t i = 0; i < n; ++i) {
      const cuda::KernelTimelineRecord& r = host->log[sm][i];
      const auto prev = previous_end.find(r.grid);
      if (prev == previous_end.end() || static_cast<int64_t>(r.start) <= prev->second) continue;
      CudaKernelTime& k = by_grid.at(r.grid);
      const int64_t prologue = static_cast<int64_t>(r.waited) - static_cast<int64_t>(r.start);
      ++k.late_blocks;
      k.late_prologue_max_ns = std::max(k.late_prologue_max_ns, prologue);
      late_sum[r.grid] += prologue;
    }
  }
  std::vector<CudaKernelTime> out;
  for (const auto& [grid, unused] : order) {
    CudaKernelTime& k = by_grid.at(grid);
    if (k.late_blocks > 0) k.late_prologue_mean_ns = late_sum[grid] / k.late_blocks;
    out.push_back(k);
  }
  return out;
}
std::vector<int64_t> CudaStepTraceForBenchmark(int32_t* blocks, int32_t* slots) {
  *blocks = g_step_trace_last.blocks;
  *slots = g_step_trace_last.slots;
  std::vector<int64_t> host(static_cast<size_t>(*blocks) * *slots * 2);
  if (host.empty() || cudaMemcpy(host.data(), g_step_trace_last.device, host.size() * sizeof(int64_t),
                                 cudaMemcpyDeviceToHost) != cudaSuccess)
    return {};
  return host;
}
void SetCudaMlpBlockMaxWarpsForTesting(int warps) {
  g_mlp_block_warps = warps;
  cuda::SetMlpBlockMaxWarps(warps);
}

void SetCudaOneTokenKernelForTesting(int variant) {
  g_one_token_kernel = variant;
  cuda::SetOneTokenKernel(variant);
}

int CudaDeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

int CudaCurrentDeviceForTesting() {
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return device;
}

StatusOr<std::unique_ptr<CudaBackend>> CreateCudaBackend(std::shared_ptr<const Model> model,
                                                         const CudaBackendOptions& options) {
  if (model == nullptr) return InvalidArgument("CreateCudaBackend: no model");
  const int count = CudaDeviceCount();
  if (count == 0) return FailedPrecondition("CUDA backend: no CUDA device is present (or no driver)");
  if (options.device < 0 || options.device >= count)
    return InvalidArgument("CUDA backend: device " + std::to_string(options.device) + " does not exist (" +
                           std::to_string(count) + " present)");
  auto backend = std::make_unique<CudaBackendImpl>(std::move(model), options);
  Status s = backend->Init();
  if (!s.ok()) return s;
  return std::unique_ptr<CudaBackend>(std::move(backend));
}

}  // namespace rote::inference
