// The CUDA backend's implementation class, shared by its files: weight_upload.cc (the weights'
// device layout), forward.cc (a step: metadata, the device sampler, what is copied back),
// step_launch.cc (the kernels a step launches and their arguments), graphs.cc (captured steps,
// their replays and chained greedy runs), cuda_backend.cc (creation, the public entry points)
// and device_utils.cc. Internal to inference/cuda/.
#pragma once

#include "inference/cuda/cuda_backend.h"

#include <cuda_runtime.h>  // device memory, streams, graphs

#include <algorithm>
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

namespace rote::inference::cuda_impl {


using cuda::AttentionShape;
using cuda::DeviceMatrix;
using cuda::LayerKv;
using cuda::LinearArgs;
using cuda::LinearEpilogue;
using cuda::StepTokens;
using cuda::WeightType;

inline WeightType ToWeightType(DType d) {
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

inline int WeightTypeSize(WeightType t) { return t == WeightType::kF32 ? 4 : 2; }

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
  // The family path only (CudaBackendImpl::family_path_; null where the family has none): the
  // norms' biases (LayerNorm), the o, gate|up (or up) and down biases, Gemma's norms of the
  // attention and MLP outputs, this layer's rotary table and sliding window.
  const float* attn_norm_bias = nullptr;
  const float* mlp_norm_bias = nullptr;
  const float* bo = nullptr;
  const float* bgu = nullptr;
  const float* bdown = nullptr;
  const float* post_attn_norm = nullptr;
  const float* post_mlp_norm = nullptr;
  const float* rope_cos = nullptr;
  const float* rope_sin = nullptr;
  int32_t window = 0;
  // A mixture-of-experts layer (the family path): the router, every expert's gate|up (interleaved
  // as wgu; expert e's rows from e * 2 moe) and down (expert e's rows from e * dim), stacked, rows
  // only in both profiles: the experts' products are the exact profile's (LaunchExperts).
  DeviceMatrix router, experts_gu, experts_down;
};

// A captured decode step: what it computes (the tuning and instruments are the backend's, fixed
// at creation). A context bucket may hold two graphs of one-token steps: with and without the
// one-launch step's attention in parts (its context reaching CudaTuning::step_attention_split).
struct GraphKey {
  int32_t tokens;
  int32_t context_bucket;
  bool greedy;
  bool step_in_parts;
  bool operator<(const GraphKey& o) const {
    return std::tie(tokens, context_bucket, greedy, step_in_parts) <
           std::tie(o.tokens, o.context_bucket, o.greedy, o.step_in_parts);
  }
};

// A step's kernel timeline (cuda::KernelTimeline in device memory) as launches ordered by their
// first wait (CudaBackend::KernelTimeline; device_utils.cc).
std::vector<CudaKernelTime> ReadKernelTimeline(const void* device);

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
        tuning_(ResolveTuning(options.tuning, model_->config())),
        fast_(options.profile == NumericsProfile::kFast) {}

  // The tuning with its model-dependent defaults decided: from one_token_ring_from_hidden on,
  // the default one-token choice (0) is the ring of weights and activations (3). Same bits either
  // way.
  static CudaTuning ResolveTuning(CudaTuning t, const ModelConfig& c) {
    if (t.one_token_kernel == 0 && t.one_token_ring_from_hidden > 0 && c.hidden_size >= t.one_token_ring_from_hidden)
      t.one_token_kernel = 3;
    return t;
  }

  ~CudaBackendImpl() override {
    // The members' buffers are freed after this body, with the device still current:
    // destruction_device_ is the first member, so it gives the thread its device back last.
    destruction_device_.Enter(options_.device);
    for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
    if (timeline_set_ && stream_ != nullptr) {  // the kernels must not write into freed memory
      cuda::SetKernelTimeline(nullptr, stream_);
      cudaStreamSynchronize(stream_);
    }
    if (host_meta_ != nullptr) cudaFreeHost(host_meta_);
    if (mask_host_ != nullptr) cudaFreeHost(mask_host_);
    if (host_out_ != nullptr) cudaFreeHost(host_out_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  Status Init();

  // Scratch of the batched products whose K is split over blocks (kernels.h, LinearArgs::split_*):
  // 256 output tiles of 32 x 32 x 32 class sums (32 MB). Products needing more are not split.
  static constexpr int64_t kSplitTickets = 256;
  static constexpr int64_t kSplitScratchFloats = kSplitTickets * 32 * 32 * 32;
  // (The fast profile's products add their K slices inside a cluster; their prefill-sized ones
  // take the pieces' scratch instead: fast_linear.h, FastWgmmaScratchBytesFor.)
  void WithSplitScratch(LinearArgs* a) const {
    if (fast_) {
      a->fast_scratch = fast_scratch_.as<void>();
      a->fast_scratch_bytes = static_cast<int64_t>(fast_scratch_.bytes());
      return;
    }
    a->split_scratch = split_scratch_.as<float>();
    a->split_scratch_floats = kSplitScratchFloats;
    a->split_tickets = split_tickets_.as<uint32_t>();
    a->split_tickets_count = static_cast<int32_t>(kSplitTickets);
  }

  std::string device() const override { return device_name_; }
  std::string numerics_profile() const override { return profile_name_; }
  int32_t max_step_tokens() const override {
    return CudaMaxStepTokens(config_, fast_ ? NumericsProfile::kFast : NumericsProfile::kExact);
  }

  int64_t KvBytesPerBlock() const override {
    return 2 * static_cast<int64_t>(config_.num_layers) * kKvBlockSize * config_.kv_dim() * 4;
  }

  int64_t WeightBytes() const override { return weight_bytes_; }
  CudaLaunchStats launch_stats() const override { return stats_; }
  bool family_path() const override { return family_path_; }

  std::vector<int64_t> StepTrace(int32_t* blocks, int32_t* slots) const override;

  std::vector<CudaKernelTime> KernelTimeline() const override;

  StatusOr<double> TimeLastGraph(int32_t replays) override;

  int64_t WeightBytesPerStep() const override;

  int32_t KvBlocksForFreeMemory(int64_t max_kv_bytes, int64_t reserve_bytes) const override;

  Status AllocateKvCache(int32_t num_blocks) override;

  Status Forward(const BatchPlan& plan, std::vector<float>* logits) override;

  Status ForwardGreedy(const BatchPlan& plan, std::vector<int32_t>* tokens) override;

  // Greedy steps chained on the device: within a run of decode steps that one captured graph
  // serves (the same context bucket, every block already in the tables), each step's graph is
  // followed by a kernel that feeds the chosen tokens back as the next step's (LaunchAdvanceGreedy),
  // so the host launches the run and waits once. Same kernels, same inputs, so the same tokens as
  // one ForwardGreedy per step (tested); what goes is the host's turn between the steps.
  Status ForwardGreedySteps(const BatchPlan& plan, int32_t steps, std::vector<int32_t>* tokens) override;

  // How many of `want` greedy steps from `plan` one chained run can take (1: this step alone): all
  // decode steps (one token, one row each) replayed by one graph, so every position stays inside
  // the first step's context bucket and every block it reaches is in its table.
  int32_t ChainableSteps(const BatchPlan& plan, int32_t want) const;

  // The logits stay on the device and are sampled there (sampling.cu), rows by their rules.
  bool samples_on_device() const override { return true; }
  Status ForwardSampled(const BatchPlan& plan, std::span<const RowSampling> rules,
                        std::vector<int32_t>* tokens) override;
  // ForwardSampled with masks: the host writes them (masks.fill) after the step's kernels are
  // launched, while the device runs them; they are copied over and applied to the logits rows
  // on the device (LaunchApplyTokenMask) before the sampler runs.
  Status ForwardMasked(const BatchPlan& plan, std::span<const RowSampling> rules, const StepMasks& masks,
                       std::vector<int32_t>* tokens) override;

 private:
  // Copies `parts` (same cols) into one device matrix, permuting each row into lane order and
  // zero-padding it. Parts of different dtypes are widened to fp32 (exact).
  // `row_order`, when given, moves logical row r to device row (*row_order)[r].
  // The fast profile uploads bf16 matrices as tiles (DeviceMatrix::fast_tiles) and keeps the rows
  // themselves only where `keep_rows` (the embedding, which is looked up by row).
  // `with_tiles` false: no tile copy in the fast profile either (rows only, for the exact kernels).
  StatusOr<DeviceMatrix> UploadMatrix(std::vector<MatrixPart> parts, int64_t rows, int64_t cols,
                                      const std::vector<int64_t>* row_order = nullptr, bool keep_rows = false,
                                      bool with_tiles = true);

  // Concatenates 1-D tensors, converted exactly to fp32.
  StatusOr<const float*> UploadVector(std::vector<const TensorView*> views,
                                      const std::vector<int64_t>* order = nullptr);

  // A 1-D tensor as a lane row (kernels.h): permuted, zero-padded, fp32.
  // offset != 0: offset + w (Gemma's norms multiply by fp32(1 + w), the CPU's value).
  StatusOr<const float*> UploadLaneRow(const TensorView& view, float offset = 0.0f);

  StatusOr<const float*> UploadFloats(const std::vector<float>& host);

  // A matrix product of the step: the exact profile's kernels, or the fast profile's.
  Status Product(const LinearArgs& a);

  // Grows activation buffers to hold `tokens` rows and `logit_rows` logits rows.
  Status EnsureCapacity(int32_t tokens, int32_t logit_rows, int32_t meta_ints);

  int32_t HiddenStride() const { return static_cast<int32_t>(cuda::PaddedCols(config_.hidden_size)); }
  int32_t AttStride() const { return static_cast<int32_t>(cuda::PaddedCols(config_.q_dim())); }
  int32_t ActStride() const { return static_cast<int32_t>(cuda::PaddedCols(config_.intermediate_size)); }

  Status AllocateZeroed(DeviceBuffer* b, size_t bytes) {
    ROTE_RETURN_IF_ERROR(b->Allocate(bytes));
    ROTE_CUDA_RETURN_IF_ERROR(cudaMemset(b->as<void>(), 0, bytes));
    return OkStatus();
  }

  void DropGraphs();

  // Device pointers of one step's metadata inside meta_.
  struct StepLayout {
    int32_t tokens = 0, logit_rows = 0, max_blocks = 0, context = 0;
    int32_t longest = 0;  // the most positions any sequence has after this step (context: its bucket)
    int32_t attention_tiles = 0;  // query tiles of LaunchTileAttention (0: the other kernels)
    int64_t tokens_off = 0, pos_off = 0, table_off = 0, logit_rows_off = 0, tiles_off = 0, total = 0;
  };

  Status Step(const BatchPlan& plan, bool greedy);

  // The step's kernels (Launch): replayed from the graph captured for the step's key, captured
  // first where there is none (use_graph), or launched one by one.
  Status LaunchStep(const StepLayout& lay, bool greedy, const cuda::DecodeStepArgs* decode_step, bool use_graph,
                    bool step_in_parts);

  // The device sampler's scratch for `rows` rows (grown, never shrunk), zeroed once: the chain's
  // last chunk of a row copies weights past its kept ranks, never used, but never uninitialized
  // either. A failed allocation leaves no error behind (cudaMalloc's is not sticky; cleared here).
  Status EnsureSampleScratch(int32_t rows);

  // ForwardSampled's tail: each logits row's token by its rule, on the device, into host_out_.
  Status LaunchSampling(const StepLayout& lay);
  // ForwardSampled and ForwardMasked (masks null for the former).
  Status SampledStep(const BatchPlan& plan, std::span<const RowSampling> rules, const StepMasks* masks,
                     std::vector<int32_t>* tokens);
  // ForwardMasked's part of LaunchSampling: the masks written on the host, copied and applied.
  Status LaunchMasks(int32_t rows);

  // The device sampler over the step's logits rows (rules already on the device), the tokens into
  // host_out_ and, on the candidate path, its overflow flag after them (host_out_ holds rows x
  // vocab floats).
  Status SampleAndCopy(int32_t rows, bool by_candidates, bool synchronize);

  // Kernels a benchmark leaves out of every step (CudaInstruments::skip_kernels).
  bool Skip(CudaKernelKind k) const { return (options_.instruments.skip_kernels & static_cast<uint32_t>(k)) != 0; }
  // What the kernels' launchers read: the tuning, and where they count their launches.
  cuda::LaunchContext Ctx() { return cuda::LaunchContext{&tuning_, &stats_}; }

  StepTokens StepOf(const StepLayout& lay) const;

  // The arguments of layer l's four products. Small batches normalise inside the matrix product
  // (no extra launch, the product is a memory stream anyway); larger ones normalise once into h
  // (the caller launches that norm) and spare every warp the work. One token without q/k norms:
  // rotary and the KV store run in the q|k|v product's epilogue (rope_fused).
  // Up to this many tokens RMSNorm is fused into the product that follows (LinearKernel); above
  // it the activations are normalised once so the products can run as TiledLinearKernel, which
  // measured faster from 8 tokens on (docs/performance.md).
  static constexpr int32_t kFusedNormMaxTokens = 4;
  struct LayerLaunch {
    cuda::StepLayerArgs args;
    bool rope_fused = false;
  };
  LayerLaunch LayerArgs(const StepLayout& lay, const StepTokens& step, int32_t l) const;

  // Up to kFusedNormMaxTokens logits rows the final norm is fused into the lm_head (each warp
  // normalises its rows' activations); more are normalised once into h (LaunchRmsNorm gathering
  // the logits rows), which lets the lm_head run as TiledLinearKernel.
  // The fast profile's products always apply the norm themselves (fast_linear.h: the norm's
  // scale multiplies the finished sums), for every token count, so no RMSNorm launch remains.
  bool LmHeadNormFused(const StepLayout& lay) const { return fast_ || lay.logit_rows <= kFusedNormMaxTokens; }
  bool FusedNorm(const StepLayout& lay) const { return fast_ || lay.tokens <= kFusedNormMaxTokens; }
  LinearArgs LmHeadArgs(const StepLayout& lay) const;

  // The whole step as one DecodeStepKernel (kernels.h): one token, one logits row, nothing left
  // out by a benchmark, and every layer's products fused as DecodeStepKernel needs them. Its
  // per-layer arguments live in device memory; they depend only on buffer addresses, so they
  // are uploaded here (before any capture) when those change.
  StatusOr<bool> PrepareDecodeStep(const StepLayout& lay, cuda::DecodeStepArgs* f);

  // Scratch of attention over parts of long contexts (one token; DecodeStepKernel and
  // LaunchAttentionParts): the scores of lay.context positions per head, the parts' maxes and
  // partials, a counter per head. Before any capture: growing it drops the graphs that hold the
  // old address.
  Status EnsureAttentionParts(const StepLayout& lay);
  cuda::AttentionParts AttentionPartsScratch();

  // The forward pass of docs/numerics.md section 5: per layer the q|k|v product (with rotary
  // and the KV store, or followed by them), attention, and the o, gate|up and down products;
  // or, for one token, all of it as one DecodeStepKernel (decode_step set).
  Status Launch(const StepLayout& lay, bool greedy, const cuda::DecodeStepArgs* decode_step);

  // The family path (family_launch.cc): models whose layers need more than the Qwen2/Llama 3/
  // Qwen3 forward pass (a sliding window shorter than max_positions, LayerNorm, Gemma's norms,
  // biases beyond q|k|v, GELU, multipliers, soft caps, partial rotary, a local rope), whatever
  // their family: a Mistral without a window (Codestral, Mistral 7B v0.3) is the Llama layout.
  // Their steps run the matrix products of either profile between the plain kernels of
  // family_ops.h, never the one-launch step, the MLP block or the fused rotary epilogue.
  static bool NeedsFamilyPath(const ModelConfig& c, int32_t max_positions);
  // The ordinary attention of the step's q_ into att_ (LaunchAttention, or over parts of a long
  // context for one token), on either path.
  Status LaunchPlainAttention(const StepLayout& lay, const StepTokens& step, const AttentionShape& shape, LayerKv kv);
  Status InitFamilyLayers();
  Status LaunchFamily(const StepLayout& lay, bool greedy);
  // A mixture-of-experts MLP of the step's normed rows h into o (lane rows): the router's product
  // (the profile's), each token's route on the device (LaunchRoute, RouteToken's bits), each
  // (token, expert) pair's products, the weighted sum (LaunchExpertsSum). Steps of up to
  // kExpertPairsByRow pairs run every pair's products in two launches (LaunchExpertRows, a
  // decode step's few pairs); larger ones group the pairs by expert on the device
  // (LaunchExpertGroups) and run each product over every expert's rows in one launch
  // (LaunchGroupedLinear), each expert's weights read once per tile of its rows. Both compute
  // every dot in the exact profile's canonical order, in both profiles, so a token's bits do not
  // depend on the path its step took; neither waits on the host, so every step can be a graph.
  Status LaunchExperts(const DeviceLayer& dl, int32_t tokens, const float* h, float* o);
  static constexpr int32_t kExpertPairsByRow = 64;
  // The experts' buffers for `tokens` rows (EnsureCapacity).
  Status EnsureExpertCapacity(int32_t tokens);
  int32_t ExpertActStride() const { return static_cast<int32_t>(cuda::PaddedCols(config_.moe_intermediate_size)); }
  // A norm of the family's kind (weights uploaded with Gemma's 1 + w folded in) of `rows` rows.
  Status FamilyNormInto(const float* x, int32_t rows, const float* weight, const float* bias, float* y,
                        const int32_t* x_rows = nullptr);

  DeviceScope destruction_device_;  // first: destroyed after every buffer (~CudaBackendImpl)
  std::shared_ptr<const Model> model_;
  CudaBackendOptions options_;
  ModelConfig config_;
  std::string device_name_;
  const CudaTuning tuning_;              // options_.tuning, fixed for the backend's life
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
  const float* final_norm_bias_ = nullptr;  // the family path's LayerNorm
  bool family_path_ = false;                // NeedsFamilyPath(config_)
  DeviceBuffer o_, mlp_tmp_;                // the family path: a product's output (lane rows), the up product's rows
  // Mixture of experts (LaunchExperts), for expert_capacity_ tokens: the router's logits; each
  // (token, expert) row's gate|up, activation and output; the route and its lists (expert_meta_).
  DeviceBuffer router_logits_, expert_gu_, expert_act_, expert_out_, expert_meta_;
  int32_t expert_capacity_ = 0;
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
  // ForwardMasked: the step's masks (null otherwise), their pinned host copy and device copy.
  const StepMasks* step_masks_ = nullptr;
  uint64_t* mask_host_ = nullptr;
  size_t mask_host_words_ = 0;
  DeviceBuffer mask_dev_;
  DeviceBuffer fast_scratch_;  // LinearArgs::fast_scratch, sized for token_capacity_ tokens
  DeviceBuffer split_scratch_, split_tickets_;  // LinearArgs::split_*: see WithSplitScratch
  DeviceBuffer mlp_barrier_;  // MlpBlockKernel's grid barrier: arrival count and generation
  DeviceBuffer step_barrier_;  // DecodeStepKernel's grid barrier: a 64-bit arrival counter
  // DecodeStepArgs::attn_*: attention over parts of long contexts (scores, maxes, partials, counters).
  DeviceBuffer attn_scores_, attn_maxes_, attn_vpart_, attn_sync_;
  DeviceBuffer step_layers_;   // DecodeStepKernel's per-layer arguments (PrepareDecodeStep)
  DeviceBuffer step_trace_;    // benchmarks: DecodeStepArgs::trace
  DeviceBuffer timeline_;      // benchmarks: cuda::KernelTimeline (CudaInstruments::kernel_timeline)
  bool timeline_set_ = false;  // the kernels' timeline pointer is timeline_
  bool timeline_recorded_ = false;  // a step recorded into timeline_
  int32_t step_trace_blocks_ = 0, step_trace_slots_ = 0;  // the last traced step's (step_trace_)
  CudaLaunchStats stats_;  // launch_stats()
  std::vector<const void*> step_layers_key_;  // the addresses step_layers_ was built from
  cuda::StepLayerArgs step_layer0_;
  int32_t token_capacity_ = 0, logit_capacity_ = 0, meta_capacity_ = 0;
  int32_t* host_meta_ = nullptr;  // pinned
  void* host_out_ = nullptr;      // pinned: logits or greedy tokens of the last step
  std::unique_ptr<ThreadPool> upload_pool_;  // while the weights upload (UploadMatrix)
  int32_t num_logit_rows_ = 0;
  std::map<GraphKey, cudaGraphExec_t> graphs_;
  cudaGraphExec_t last_graph_ = nullptr;  // the last step's graph (TimeLastGraph)
};

}  // namespace rote::inference::cuda_impl
