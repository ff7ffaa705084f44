// CUDA backend benchmark on synthesized Qwen2.5-0.5B / 1.5B shapes (random bf16 weights).
// Prints one JSON object per line: the card's measured ceilings (copy bandwidth, fp32 FMA
// rate), decode tokens/s at batch 1, 8, 32, 64 with bytes read per token and the fraction of
// the relevant ceiling reached, prefill tokens/s for 1,000-token prompts, and for every decode
// figure whether the needle sequence's tokens equal its tokens at batch 1 (invariance held) and
// the device's time per step with the step's graph replayed back to back. --engine-batches runs
// the same decode through the engine (greedy tokens on the device, then from logits copied to the
// host), --engine-sampling T:K:P adds sampled runs (on the device, on the host, and on the device
// with every column sorted, compared).
//
//   cuda_bench [--shape 0.5b|1.5b|7b|14b|32b|30b-a3b] [--dir /tmp/rote_synth_0.5b] [--steps 128] [--prompt 64] [--batches 1,8,32,64]
//              [--prefill 0|1] [--tiles -1,0,4] [--ablate 1,32] [--timeline 1,32]
//              [--attention-variants 0,2,5 --evict-first 0,1 --attention-batches 1,32 --attention-rounds 2]
//              [--one-token-kernels 0,1,3] [--ring-shapes 1:8,2:8] [--mlp-warps 16,4] [--step-prefetch 0,32] [--step-attention-split 0,512]
//              [--attention-parts 0,4,2] [--attention-parts-v-loads 4,16,32] [--attention-variant V] [--numerics exact|fast] [--fast-rope-fused 0] [--fast-wgmma N[:W[:C]]]
//              [--fast-merge 0|2|3[:STEPS]] [--fast-stream 0|1|2[:2|3]] [--fast-norm-staged 0] [--chain K]
//              [--late-prefetch 0] [--engine-batches 8,32] [--engine-sampling 0.8:40:1]
//              [--tokenizer tests/fixtures/qwen2] [--kv-interleave 1]
//              [--kv-capacity 4096:4,4096:32 --card-mib 81559] [--decode 0] [--prefill-reps 4]
//              [--prefill-len 256,512,1000] [--prefill-prompts 1,4,16] [--wgmma-variants 128:4,128:1,128:1:2,0] [--attention-tile-min N] [--attention-tile-blocks 1|2] [--attention-tile-variants 0,64,64:2] [--one-token-ring-from 3072] [--one-token-ring 1:4]
// --layers N: only the first N layers of a shape built in memory (7b .. 30b-a3b), for profiles
// of its layers without its whole size.
// --family F: the shape's dimensions in another family (ParseModelFamily's names: gemma2, mistral,
// phi3, ...; SynthesizeModelInMemory writes its features: Gemma 2's soft caps and alternating
// windows of 4,096, Mistral's window), built in memory at every shape.
// Settings compared side by side each run on a backend of their own (CudaBackendOptions::tuning
// is fixed per backend); the flags that set one CudaTuning field apply to every backend.
// --numerics fast: the fast profile (tensor-core products, docs/fast_profile.md); --tiles then
// lists its block shapes as 10 x token rows + 16-row tiles per block (0 the default choice; 4:
// 64 weight rows; 162: 16 tokens by 32 rows; 80: 8 tokens, rows by size).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "inference/cuda/cuda_backend.h"
#include "rote_source_revision.h"  // generated at build time (cmake/source_revision.cmake)
#include "inference/engine.h"
#include "inference/model/synth.h"
#include "inference/model/weights.h"
#include "bench/inference/call_times.h"
#include "tests/inference/cuda_synth_model.h"

namespace rote::bench {
double MeasureCopyBandwidth();  // cuda_ceilings.cu
double MeasureFmaRate();
double MeasureBf16TensorRate();
void DeviceMemory(int64_t* free_bytes, int64_t* total_bytes);
void* AllocateBallast(int64_t bytes);
void FreeBallast(void* p);
}  // namespace rote::bench

namespace {

using namespace rote::inference;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

std::string Arg(int argc, char** argv, const char* name, const std::string& def) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  return def;
}

// "1,8,32" -> {1, 8, 32}.
std::vector<int32_t> IntList(const std::string& s) {
  std::vector<int32_t> out;
  size_t p = 0;
  while (p < s.size()) {
    size_t q = s.find(',', p);
    if (q == std::string::npos) q = s.size();
    out.push_back(std::stoi(s.substr(p, q - p)));
    p = q + 1;
  }
  return out;
}

// "a,b" -> {"a", "b"}; "" -> {}.
std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  size_t p = 0;
  while (p < s.size()) {
    size_t q = s.find(',', p);
    if (q == std::string::npos) q = s.size();
    out.push_back(s.substr(p, q - p));
    p = q + 1;
  }
  return out;
}

std::vector<int32_t> RandomTokens(int32_t n, int32_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  return t;
}

struct Seq {
  std::vector<int32_t> tokens;
  std::vector<int32_t> blocks;
  int32_t cached = 0;
};

// A step over `seqs`, the new tokens being those past `cached`, one logits row each.
BatchPlan PendingPlan(const std::vector<Seq>& seqs) {
  BatchPlan plan;
  for (const Seq& s : seqs) {
    SequenceStep st;
    st.tokens = std::span<const int32_t>(s.tokens.data() + s.cached, s.tokens.size() - s.cached);
    st.start_pos = s.cached;
    st.block_table = s.blocks;
    st.num_logits = 1;
    plan.sequences.push_back(st);
  }
  return plan;
}

// Runs one step over `seqs` (PendingPlan); appends each greedy token.
bool Step(CudaBackend* b, std::vector<Seq>& seqs) {
  const BatchPlan plan = PendingPlan(seqs);
  std::vector<int32_t> next;
  Status st = b->ForwardGreedy(plan, &next);
  if (!st.ok()) {
    std::fprintf(stderr, "forward failed: %s\n", st.ToString().c_str());
    return false;
  }
  for (size_t i = 0; i < seqs.size(); ++i) {
    seqs[i].cached = static_cast<int32_t>(seqs[i].tokens.size());
    seqs[i].tokens.push_back(next[i]);
  }
  return true;
}

// `steps` greedy decode steps, as ForwardGreedySteps runs of up to `chain` steps each (1: one
// ForwardGreedy a step, as Step). Every sequence must be past its prompt (one token pending).
bool Steps(CudaBackend* b, std::vector<Seq>& seqs, int32_t steps, int32_t chain) {
  if (chain <= 1) {
    for (int32_t i = 0; i < steps; ++i)
      if (!Step(b, seqs)) return false;
    return true;
  }
  std::vector<int32_t> out;
  for (int32_t done = 0; done < steps;) {
    const int32_t run = std::min(chain, steps - done);
    Status st = b->ForwardGreedySteps(PendingPlan(seqs), run, &out);
    if (!st.ok()) {
      std::fprintf(stderr, "chained steps failed: %s\n", st.ToString().c_str());
      return false;
    }
    for (int32_t i = 0; i < run; ++i)
      for (size_t r = 0; r < seqs.size(); ++r) seqs[r].tokens.push_back(out[static_cast<size_t>(i) * seqs.size() + r]);
    for (Seq& s : seqs) s.cached = static_cast<int32_t>(s.tokens.size()) - 1;
    done += run;
  }
  return true;
}

// The CUDA backend, with ForwardGreedy either its own (the argmax on the device) or Backend's
// default (Forward's logits copied to the host, argmax there: what the engine did for every step
// before it asked for tokens only), and sampled steps on the device or on the host. `sorted`
// (may be null): a backend of the same model whose device sampler sorts every column, which takes
// every call while all_columns_sorted is set (each run starts its requests afresh, so the two
// backends' KV caches need not agree).
class GreedySwitch final : public Backend {
 public:
  GreedySwitch(std::unique_ptr<CudaBackend> inner, std::unique_ptr<CudaBackend> sorted)
      : inner_(std::move(inner)), sorted_(std::move(sorted)) {}
  std::string device() const override { return inner_->device(); }
  std::string numerics_profile() const override { return inner_->numerics_profile(); }
  int64_t KvBytesPerBlock() const override { return inner_->KvBytesPerBlock(); }
  Status AllocateKvCache(int32_t n) override {
    ROTE_RETURN_IF_ERROR(inner_->AllocateKvCache(n));
    return sorted_ != nullptr ? sorted_->AllocateKvCache(n) : OkStatus();
  }
  Status Forward(const BatchPlan& plan, std::vector<float>* logits) override { return active()->Forward(plan, logits); }
  Status ForwardGreedy(const BatchPlan& plan, std::vector<int32_t>* tokens) override {
    {
      // Into the rows' existing storage: this copy lies in the engine's measured turn, so it
      // allocates nothing once the rows have grown (it used to allocate every row every call).
      std::lock_guard<std::mutex> lock(calls_mu_);
      last_plan_.resize(plan.sequences.size());
      for (size_t i = 0; i < plan.sequences.size(); ++i) {
        const SequenceStep& st = plan.sequences[i];
        PlanRow& row = last_plan_[i];
        row.start_pos = st.start_pos;
        row.tokens = static_cast<int32_t>(st.tokens.size());
        row.blocks.assign(st.block_table.begin(), st.block_table.end());
      }
    }
    const Clock::time_point t0 = Clock::now();
    Status s = on_device ? active()->ForwardGreedy(plan, tokens) : Backend::ForwardGreedy(plan, tokens);
    Record(t0);
    return s;
  }
  // Sampled steps likewise: the device sampler, or the engine's own (logits to the host).
  bool samples_on_device() const override { return on_device; }
  Status ForwardSampled(const BatchPlan& plan, std::span<const RowSampling> rules,
                        std::vector<int32_t>* tokens) override {
    const Clock::time_point t0 = Clock::now();
    Status s = active()->ForwardSampled(plan, rules, tokens);
    Record(t0);
    return s;
  }
  // Seconds spent inside ForwardGreedy / ForwardSampled calls that lie wholly in [a, b], and how
  // many there were (the engine's time between them is the rest of the window).
  std::pair<double, int> BackendSecondsWithin(Clock::time_point a, Clock::time_point b) {
    return calls_.SecondsWithin(a, b);
  }
  // The last ForwardGreedy plan: each sequence's start position, token count and block table.
  struct PlanRow {
    int32_t start_pos, tokens;
    std::vector<int32_t> blocks;
  };
  std::vector<PlanRow> LastPlan() {
    std::lock_guard<std::mutex> lock(calls_mu_);
    return last_plan_;
  }
  void ClearCalls() { calls_.Clear(); }
  CudaBackend* active() const { return all_columns_sorted && sorted_ != nullptr ? sorted_.get() : inner_.get(); }
  std::atomic<bool> on_device{true};
  std::atomic<bool> all_columns_sorted{false};

 private:
  void Record(Clock::time_point t0) { calls_.Record(t0); }
  std::unique_ptr<CudaBackend> inner_, sorted_;
  std::mutex calls_mu_;  // guards last_plan_
  rote::bench::CallTimes calls_;
  std::vector<PlanRow> last_plan_;
};

// B sequences with blocks [i * stride, (i + 1) * stride); with interleave, sequence i's k-th
// block is k * batch + i instead (the blocks of a batch's sequences interleaved, as an engine's
// allocator hands them out while they grow together).
std::vector<Seq> MakeSeqs(int32_t batch, int32_t prompt, int32_t vocab, int32_t stride, const std::vector<int32_t>& needle,
                          bool interleave) {
  std::vector<Seq> seqs(batch);
  for (int32_t i = 0; i < batch; ++i) {
    seqs[i].tokens = i == 0 ? needle : RandomTokens(prompt, vocab, 1000 + i);
    for (int32_t k = 0; k < stride; ++k) seqs[i].blocks.push_back(interleave ? k * batch + i : i * stride + k);
  }
  return seqs;
}

void PrintError(const std::string& message) {
  std::printf("{\"what\":\"error\",\"message\":\"%s\"}\n", message.c_str());
}

// The run's model, its measured ceilings, the flags and what they fix for every backend.
class Bench {
 public:
  Bench(int argc, char** argv) : argc_(argc), argv_(argv) {}

  std::string Flag(const char* name, const std::string& def) const { return Arg(argc_, argv_, name, def); }

  // Flags, ceilings, the model; false (after printing the error) where any fails.
  bool Init();
  // The backend of `tuning` (the flags' by default) and `instruments`, its KV cache allocated.
  std::unique_ptr<CudaBackend> Create(const CudaTuning& tuning, const CudaInstruments& instruments = {}) const;
  std::unique_ptr<CudaBackend> Create() const { return Create(base_); }
  bool PrefillFigures(CudaBackend* b, int32_t tile, const std::string& profile, const std::string& wgmma);

  // Prefill, `warm` steps, then `steps` timed decode steps of `batch` sequences; returns the
  // seconds of the timed steps (negative on failure) and leaves the sequences in `seqs`.
  double TimeDecode(CudaBackend* b, int32_t batch, std::vector<Seq>& seqs) const;

  bool PrintModel(CudaBackend* b, double upload_s) const;
  bool OneTokenKernels();
  bool CompareSettings(const char* what, const char* key, const std::string& list,
                       const std::function<void(CudaTuning&, int32_t)>& set);
  bool TraceStep();
  bool Timeline();
  bool Ablate();
  bool DecodeAndPrefill(CudaBackend* base);
  bool KvCapacity(CudaBackend* b);
  bool EngineDecode(std::unique_ptr<CudaBackend> backend);

  const CudaTuning& base() const { return base_; }

 private:
  int argc_;
  char** argv_;
  std::string shape_;
  int32_t steps_ = 0, prompt_ = 0, chain_ = 1;
  static constexpr int32_t kWarm = 8;
  bool interleave_ = false;
  double bw_ = 0, fma_ = 0, bf16_ = 0;
  std::shared_ptr<const Model> model_;
  CudaBackendOptions options_;
  CudaTuning base_;
  int32_t stride_ = 0, blocks_ = 0;
  std::vector<int32_t> prefill_lens_;  // --prefill-len L[,L...]: prompt lengths of the prefill figures
  std::vector<int32_t> prefill_prompts_;  // --prefill-prompts N[,N...]: prompts a prefill step (1,4)
  static constexpr int32_t kCapacityDecodeSteps = 16;
  int32_t prefill_stride_ = 0;
  int64_t matrix_params_ = 0, kv_bytes_per_position_ = 0;
  double synth_s_ = 0, load_s_ = 0;
  std::vector<int32_t> needle_, needle_alone_;
  std::map<int32_t, double> direct_tps_;  // decode tok/s with the backend driven directly, by batch
};

bool Bench::Init() {
  shape_ = Flag("--shape", "0.5b");
  interleave_ = Flag("--kv-interleave", "0") == "1";
  const std::string dir = Flag("--dir", "/tmp/rote_synth_" + shape_);
  steps_ = std::stoi(Flag("--steps", "128"));
  // --prompt N: the decode runs' prompt length (64 by default; prefill figures use 1,000 tokens).
  prompt_ = std::stoi(Flag("--prompt", "64"));
  // --chain K: the timed decode steps as ForwardGreedySteps runs of up to K steps (the host waits
  // once a run; 1, the default: one ForwardGreedy a step). The needle's run alone stays one step
  // at a time, so its comparison also checks chained against single steps. --timeline and
  // --ablate time their steps this way too.
  chain_ = std::max(1, std::stoi(Flag("--chain", "1")));

  if (CudaDeviceCount() == 0) {
    PrintError("no CUDA device");
    return false;
  }
  bw_ = rote::bench::MeasureCopyBandwidth();
  fma_ = rote::bench::MeasureFmaRate();
  bf16_ = rote::bench::MeasureBf16TensorRate();
  std::printf("{\"what\":\"ceilings\",\"copy_bandwidth_TBps\":%.4f,\"fp32_fma_TFMAps\":%.3f,\"fp32_TFLOPs\":%.3f,"
              "\"bf16_wgmma_TFLOPs\":%.1f}\n",
              bw_ / 1e12, fma_ / 1e12, 2 * fma_ / 1e12, bf16_ / 1e12);
  std::fflush(stdout);

  // --prefill-len: the prefill figures' prompt lengths (1,000 unless given), each with the
  // --prefill-prompts counts (1 and 4 unless given), all of a count's prompts in one step.
  prefill_lens_ = IntList(Flag("--prefill-len", "1000"));
  if (prefill_lens_.empty()) {
    PrintError("--prefill-len takes one or more lengths");
    return false;
  }
  prefill_prompts_ = IntList(Flag("--prefill-prompts", "1,4"));
  if (prefill_prompts_.empty() ||
      *std::min_element(prefill_prompts_.begin(), prefill_prompts_.end()) < 1 ||
      *std::max_element(prefill_prompts_.begin(), prefill_prompts_.end()) > 64) {
    PrintError("--prefill-prompts takes counts from 1 to 64");
    return false;
  }
  options_.max_positions = 2048;
  for (int32_t len : prefill_lens_) {
    if (len < 1) {
      PrintError("--prefill-len takes positive lengths");
      return false;
    }
    options_.max_positions = std::max(options_.max_positions, len + 1);
  }
  for (const std::string& entry : Split(Flag("--kv-capacity", ""))) {
    options_.max_positions = std::max(options_.max_positions, std::stoi(entry) + kCapacityDecodeSteps + 1);
  }
  const std::string numerics = Flag("--numerics", "exact");
  if (numerics == "fast") {
    options_.profile = NumericsProfile::kFast;
  } else if (numerics != "exact") {
    PrintError("--numerics must be exact or fast");
    return false;
  }
  // --fast-merge N[:STEPS]: the fast profile's products of at most N K slices (of at most STEPS
  // steps per warp) run them in one block; 0: every sliced product is a cluster (same bits).
  if (const std::string r = Flag("--fast-merge", ""); !r.empty()) {
    const size_t colon = r.find(':');
    base_.fast_merge_max_slices = std::stoi(r.substr(0, colon));
    base_.fast_merge_max_steps_per_warp = colon == std::string::npos ? -1 : std::stoi(r.substr(colon + 1));
  }
  // --fast-stream 0|1|2: where the fast profile streams weights past activations held in shared
  // memory (0 never, 1 the lm_head, the default, 2 every product it can run; same bits).
  // :RT, the rows of a warp's unit for 32-token tiles in 16-row tiles (2 or 3).
  if (const std::string r = Flag("--fast-stream", ""); !r.empty()) {
    const size_t colon = r.find(':');
    base_.fast_stream_mode = std::stoi(r.substr(0, colon));
    base_.fast_stream_row_tiles = colon == std::string::npos ? 0 : std::stoi(r.substr(colon + 1));
  }
  // --fast-norm-staged 0: the fast profile's products read their norm weights from global memory
  // at every step instead of staging them in shared memory (same bits).
  if (const std::string r = Flag("--fast-norm-staged", ""); !r.empty()) base_.fast_norm_staged = r != "0";
  // --late-prefetch 0: no block asks L2 for the first weights or K/V pages of the blocks that start
  // only when the previous kernel's leave (N: the first N blocks of each such launch do; same bits).
  if (const std::string r = Flag("--late-prefetch", ""); !r.empty()) base_.late_prefetch_blocks = std::stoi(r);
  // --fast-rope-fused 0: the fast profile's rotary as its own kernel, not in the q|k|v product's
  // epilogue (same bits).
  if (const std::string r = Flag("--fast-rope-fused", ""); !r.empty()) base_.fast_rope_fused = r != "0";
  // --fast-wgmma N[:W[:C]]: the fast profile's products of at least N tokens run on wgmma (0:
  // never; same bits); W: CudaTuning::fast_wgmma_warpgroups (every such product, W warpgroups a
  // block); C: CudaTuning::fast_wgmma_cluster.
  if (const std::string r = Flag("--fast-wgmma", ""); !r.empty()) {
    std::string fields = r;
    std::replace(fields.begin(), fields.end(), ':', ',');
    const std::vector<int32_t> f = IntList(fields);
    if (f.empty() || f.size() > 3) {
      PrintError("--fast-wgmma takes N[:W[:C]], got " + r);
      return false;
    }
    base_.fast_wgmma_min_tokens = f[0];
    if (f.size() > 1) base_.fast_wgmma_warpgroups = f[1];
    if (f.size() > 2) base_.fast_wgmma_cluster = f[2];
  }
  // --attention-tile-min N: CudaTuning::attention_tile_min_tokens (0: prefill attention never in
  // query tiles; same bits).
  if (const std::string r = Flag("--attention-tile-min", ""); !r.empty()) base_.attention_tile_min_tokens = std::stoi(r);
  // --attention-tile-blocks B: CudaTuning::attention_tile_blocks_per_sm (1 or 2).
  if (const std::string r = Flag("--attention-tile-blocks", ""); !r.empty()) base_.attention_tile_blocks_per_sm = std::stoi(r);
  // --one-token-ring-from H: CudaTuning::one_token_ring_from_hidden (0: the size rule never
  // takes the ring; same bits). --one-token-ring R:D: its rows a warp and depth.
  if (const std::string r = Flag("--one-token-ring-from", ""); !r.empty()) base_.one_token_ring_from_hidden = std::stoi(r);
  if (const std::string r = Flag("--one-token-ring", ""); !r.empty()) {
    const size_t colon = r.find(':');
    base_.one_token_ring_rows = std::stoi(r.substr(0, colon));
    if (colon != std::string::npos) base_.one_token_ring_depth = std::stoi(r.substr(colon + 1));
  }
  // --attention-variant V: every backend with attention variant V (same bits).
  if (const std::string av = Flag("--attention-variant", ""); !av.empty()) base_.attention_variant = std::stoi(av);

  auto t0 = Clock::now();
  // The Qwen2.5-Coder sizes are built in memory (inference/model/synth.h): 32b's 65.5 GB would not
  // fit the disk of every GPU machine, and no file is faster. The small shapes keep their file.
  // 30b-a3b: Qwen3-Coder-30B-A3B, a mixture of experts (qwen3_moe).
  const bool moe = shape_ == "30b-a3b";
  const std::string family_name = Flag("--family", "");
  rote::inference::ModelFamily family = moe ? rote::inference::ModelFamily::kQwen3Moe : rote::inference::ModelFamily::kQwen2;
  if (!family_name.empty()) {
    StatusOr<rote::inference::ModelFamily> parsed = rote::inference::ParseModelFamily(family_name);
    if (!parsed.ok()) {
      PrintError(parsed.status().ToString());
      return false;
    }
    family = *parsed;
  }
  const bool in_memory =
      shape_ == "7b" || shape_ == "14b" || shape_ == "32b" || moe || family != rote::inference::ModelFamily::kQwen2;
  if (!in_memory && !std::filesystem::exists(dir + "/model.safetensors")) {
    if (!rote::inference::cuda_test::WriteSynthModel(dir, rote::inference::cuda_test::Qwen25Shape(shape_))) {
      PrintError("cannot write " + dir);
      return false;
    }
  }
  auto t1 = Clock::now();
  StatusOr<std::shared_ptr<const Model>> model = in_memory ? StatusOr<std::shared_ptr<const Model>>(InvalidArgument(""))
                                                           : Model::Load(dir);
  if (in_memory) {
    SynthOptions so;
    so.shape = shape_;
    so.seed = 1;
    so.layers = std::stoi(Flag("--layers", "0"));
    so.family = family;
    model = SynthesizeModelInMemory(so, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  }
  if (!model.ok()) {
    PrintError(model.status().ToString());
    return false;
  }
  model_ = *model;
  auto t2 = Clock::now();
  synth_s_ = Seconds(t0, t1);
  load_s_ = Seconds(t1, t2);

  const ModelConfig& c = model_->config();
  const int64_t d = c.hidden_size, qd = c.q_dim(), kvd = c.kv_dim(), h = c.intermediate_size;
  matrix_params_ = c.num_layers * (d * (qd + 2 * kvd) + qd * d + 3 * d * h) + static_cast<int64_t>(c.vocab_size) * d;
  stride_ = (prompt_ + kWarm + steps_ + 2 + kKvBlockSize - 1) / kKvBlockSize;
  prefill_stride_ = (*std::max_element(prefill_lens_.begin(), prefill_lens_.end()) + kKvBlockSize) / kKvBlockSize;
  blocks_ = std::max(64 * stride_, *std::max_element(prefill_prompts_.begin(), prefill_prompts_.end()) * prefill_stride_);
  needle_ = RandomTokens(prompt_, c.vocab_size, 7);
  kv_bytes_per_position_ = int64_t{2} * c.num_layers * c.kv_dim() * 4;
  return true;
}

std::unique_ptr<CudaBackend> Bench::Create(const CudaTuning& tuning, const CudaInstruments& instruments) const {
  CudaBackendOptions o = options_;
  o.tuning = tuning;
  o.instruments = instruments;
  auto created = CreateCudaBackend(model_, o);
  if (!created.ok()) {
    PrintError(created.status().ToString());
    return nullptr;
  }
  if (Status s = (*created)->AllocateKvCache(blocks_); !s.ok()) {
    PrintError(s.ToString());
    return nullptr;
  }
  return std::move(created).value();
}

double Bench::TimeDecode(CudaBackend* b, int32_t batch, std::vector<Seq>& seqs) const {
  seqs = MakeSeqs(batch, prompt_, model_->config().vocab_size, stride_, needle_, interleave_);
  bool ok = Step(b, seqs);
  for (int32_t i = 0; ok && i < kWarm; ++i) ok = Step(b, seqs);
  auto s0 = Clock::now();
  ok = ok && Steps(b, seqs, steps_, chain_);
  auto s1 = Clock::now();
  return ok ? Seconds(s0, s1) : -1.0;
}

bool Bench::PrintModel(CudaBackend* b, double upload_s) const {
  std::printf("{\"what\":\"model\",\"source_revision\":\"%s\",\"shape\":\"%s\",\"family\":\"%s\",\"device\":\"%s\",\"numerics\":\"%s\","
              "\"weight_bytes_on_device\":%lld,\"matrix_params\":%lld,\"synth_s\":%.1f,\"load_s\":%.1f,\"upload_s\":%.1f,"
              "\"kv_blocks_fitting_free_memory\":%d}\n",
              ROTE_SOURCE_REVISION, shape_.c_str(), std::string(rote::inference::ModelFamilyName(model_->config().family)).c_str(),
              b->device().c_str(), b->numerics_profile().c_str(),
              static_cast<long long>(b->WeightBytes()), static_cast<long long>(matrix_params_), synth_s_, load_s_,
              upload_s, b->KvBlocksForFreeMemory(0, int64_t{4} << 30));
  std::fflush(stdout);
  return true;
}

// --one-token-kernels 0,1,2: batch-1 decode with each one-token product kernel
// (CudaTuning::one_token_kernel), side by side; every variant's tokens must equal the first one's.
// --ring-shapes 1:8,2:8: variant 3 (RingGemvKernel) with each rows a warp : depth.
// --mlp-warps 16,4: repeat the variants with each most-warps-per-block of the MLP-block kernel.
// --step-prefetch 0,32: and with each L2 prefetch distance of the one-launch step (tiles).
// --step-attention-split 0,512: and with each context from which the one-launch step attends a
// head in 8 blocks over parts of its positions (0: never; -1: the default).
// --attention-parts 0,4,2: and with each number of those blocks per head (0: the most that fit).
bool Bench::OneTokenKernels() {
  const std::string otk = Flag("--one-token-kernels", "");
  if (otk.empty()) return true;
  std::vector<int32_t> first_tokens;
  for (int32_t parts : IntList(Flag("--attention-parts", "0")))
    for (int32_t split : IntList(Flag("--step-attention-split", "-1")))
      for (int32_t prefetch : IntList(Flag("--step-prefetch", "-1")))
        for (int32_t mlp_warps : IntList(Flag("--mlp-warps", "16")))
          for (int32_t variant : IntList(otk))
            for (const std::string& ring : Split(variant == 3 ? Flag("--ring-shapes", "1:8") : std::string("0:0"))) {
            const size_t colon = ring.find(':');
            const int32_t ring_rows = std::stoi(ring.substr(0, colon));
            const int32_t ring_depth = colon == std::string::npos ? 8 : std::stoi(ring.substr(colon + 1));
            CudaTuning t = base_;
            if (variant == 3) {
              t.one_token_ring_rows = ring_rows;
              t.one_token_ring_depth = ring_depth;
            }
            t.attention_parts = parts;
            if (split >= 0) t.step_attention_split = t.attention_parts_min_context = split;
            if (prefetch >= 0) t.step_prefetch_tiles = prefetch;
            t.mlp_block_max_warps = mlp_warps;
            t.one_token_kernel = variant;
            auto b = Create(t);
            if (!b) return false;
            std::vector<Seq> seqs;
            const double secs = TimeDecode(b.get(), 1, seqs);
            if (secs < 0) return false;
            const bool one_launch = b->launch_stats().decode_steps > 0;
            if (first_tokens.empty()) first_tokens = seqs[0].tokens;
            const double tps = steps_ / secs;
            const double bytes = static_cast<double>(b->WeightBytesPerStep());
            std::printf("{\"what\":\"one_token_kernel\",\"shape\":\"%s\",\"variant\":%d,\"ring\":\"%s\","
                        "\"mlp_warps\":%d,"
                        "\"tokens_per_s\":%.1f,\"us_per_step\":%.1f,\"weights_TBps\":%.4f,"
                        "\"fraction_of_copy_bandwidth\":%.3f,\"tokens_equal_first_variant\":%s,"
                        "\"step_as_one_launch\":%s,\"step_prefetch_tiles\":%d,\"step_attention_split\":%d,"
                        "\"attention_parts\":%d}\n",
                        shape_.c_str(), variant, variant == 3 ? ring.c_str() : "", mlp_warps, tps, 1e6 / tps, bytes * tps / 1e12, bytes * tps / bw_,
                        seqs[0].tokens == first_tokens ? "true" : "false", one_launch ? "true" : "false", prefetch,
                        split, parts);
            std::fflush(stdout);
          }
  return true;
}

// Decode at --attention-batches (default 1,32) with each setting of a tuning field, side by side,
// --attention-rounds times interleaved; every setting's tokens must equal the first one's.
bool Bench::CompareSettings(const char* what, const char* key, const std::string& list,
                            const std::function<void(CudaTuning&, int32_t)>& set) {
  const int32_t rounds = std::stoi(Flag("--attention-rounds", "1"));
  for (int32_t batch : IntList(Flag("--attention-batches", "1,32"))) {
    std::vector<int32_t> first_tokens;
    for (int32_t round = 0; round < rounds; ++round) {
      for (int32_t value : IntList(list)) {
        CudaTuning t = base_;
        set(t, value);
        auto b = Create(t);
        if (!b) return false;
        std::vector<Seq> seqs;
        const double secs = TimeDecode(b.get(), batch, seqs);
        if (secs < 0) return false;
        if (first_tokens.empty()) first_tokens = seqs[0].tokens;
        std::printf("{\"what\":\"%s\",\"shape\":\"%s\",\"batch\":%d,\"%s\":%d,\"round\":%d,"
                    "\"tokens_per_s\":%.1f,\"us_per_step\":%.1f,\"tokens_equal_first_setting\":%s}\n",
                    what, shape_.c_str(), batch, key, value, round, batch * steps_ / secs, 1e6 * secs / steps_,
                    seqs[0].tokens == first_tokens ? "true" : "false");
        std::fflush(stdout);
      }
    }
  }
  return true;
}

// --trace-step 1: one batch-1 decode step as one DecodeStepKernel with timer readings at every
// grid barrier: per phase kind, the mean time from the first block leaving the previous barrier
// to the last block arriving (work), from that arrival to the last block leaving (barrier), and
// from the first block arriving to the last (the blocks' spread, part of the work).
// --trace-step-kernel 9: with that one-launch variant (CudaTuning::one_token_kernel; 7).
bool Bench::TraceStep() {
  if (Flag("--trace-step", "0") != "1") return true;
  const ModelConfig& c = model_->config();
  CudaTuning tuning = base_;
  tuning.one_token_kernel = std::stoi(Flag("--trace-step-kernel", "7"));
  CudaInstruments instruments;
  instruments.step_trace = true;
  auto b = Create(tuning, instruments);
  if (!b) return false;
  std::vector<Seq> seqs;
  if (TimeDecode(b.get(), 1, seqs) < 0) return false;
  const bool ran = b->launch_stats().decode_steps > 0;
  int32_t grid = 0, slots = 0;
  const std::vector<int64_t> t = b->StepTrace(&grid, &slots);
  if (!ran || t.empty()) {
    PrintError("the step did not run as one launch");
    return false;
  }
  auto at = [&](int32_t blk, int32_t k, int32_t which) { return t[(static_cast<size_t>(blk) * slots + k) * 2 + which]; };
  const char* kinds[] = {"qkv", "attention", "out", "gate_up", "down", "lm_head"};
  double work[6] = {}, barrier[6] = {}, spread[6] = {};
  int32_t count[6] = {};
  // Slots past the barriers' (timeline builds: attention's points, below) are not pairs.
  const int32_t barrier_slots = 5 * c.num_layers + 2;
  for (int32_t k = 1; k < barrier_slots; ++k) {
    int64_t first_leave_prev = INT64_MAX, first_arrive = INT64_MAX, last_arrive = 0, last_leave = 0;
    for (int32_t g = 0; g < grid; ++g) {
      first_leave_prev = std::min(first_leave_prev, at(g, k - 1, 1));
      first_arrive = std::min(first_arrive, at(g, k, 0));
      last_arrive = std::max(last_arrive, at(g, k, 0));
      last_leave = std::max(last_leave, at(g, k, 1));
    }
    const int kind = k == barrier_slots - 1 ? 5 : (k - 1) % 5;
    work[kind] += static_cast<double>(last_arrive - first_leave_prev) / 1e3;
    barrier[kind] += static_cast<double>(last_leave - last_arrive) / 1e3;
    spread[kind] += static_cast<double>(last_arrive - first_arrive) / 1e3;
    ++count[kind];
  }
  int64_t start = INT64_MAX, end = 0;
  for (int32_t g = 0; g < grid; ++g) {
    start = std::min(start, at(g, 0, 0));
    end = std::max(end, at(g, barrier_slots - 1, 0));
  }
  std::printf("{\"what\":\"step_trace\",\"shape\":\"%s\",\"blocks\":%d,\"kernel_us\":%.1f", shape_.c_str(), grid,
              static_cast<double>(end - start) / 1e3);
  for (int i = 0; i < 6; ++i)
    std::printf(",\"%s_us\":[%.2f,%.2f,%.2f]", kinds[i], work[i] / std::max(1, count[i]),
                barrier[i] / std::max(1, count[i]), spread[i] / std::max(1, count[i]));
  std::printf(",\"per_layer_work_barrier_and_arrival_spread\":true}\n");
  // ROTE_CUDA_TIMELINE builds: attention's block barriers in the attending blocks, us after the
  // barrier before attention (per layer, the latest attending block; mean over layers).
  const int32_t points = 2 * (slots - barrier_slots) / std::max(1, c.num_layers);
  if (points > 0) {
    std::vector<double> sum(points + 1, 0.0);
    for (int32_t l = 0; l < c.num_layers; ++l) {
      std::vector<int64_t> latest(points + 1, 0);
      for (int32_t g = 0; g < std::min(grid, c.num_heads); ++g) {
        const int64_t from = at(g, 1 + 5 * l, 1);
        for (int32_t p = 0; p < points; ++p) {
          const int64_t v = t[static_cast<size_t>(g) * slots * 2 + 2 * barrier_slots + l * points + p];
          if (v != 0) latest[p] = std::max(latest[p], v - from);
        }
        latest[points] = std::max(latest[points], at(g, 2 + 5 * l, 0) - from);
      }
      for (int32_t p = 0; p <= points; ++p) sum[p] += static_cast<double>(latest[p]) / 1e3;
    }
    std::printf("{\"what\":\"step_attention_trace\",\"shape\":\"%s\",\"us_after_barrier\":[", shape_.c_str());
    for (int32_t p = 0; p <= points; ++p) std::printf("%s%.2f", p ? "," : "", sum[p] / c.num_layers);
    std::printf("],\"points\":\"q staged, scores, max, weights, V partials, (unused...), arrival\"}\n");
  }
  std::fflush(stdout);
  return true;
}

// --timeline B1,B2: one decode step's kernels at these batches, in launch order, from the
// kernels' own timer readings (CudaInstruments::kernel_timeline): per kernel, the gap from the
// previous kernel's last warp ending to this one's first return from its wait (the price of the
// boundary), the spread of that return over its blocks, and the run from that return to its last
// warp's end. One JSON line per kernel, then a summary by kind.
// --timeline-one-token-kernel 8: batch 1 as separate launches where it would run as one.
// --timeline-skip MASK: with these kernel kinds left out (CudaInstruments::skip_kernels; 512: the
// layers read no weights), to see what the rest does without them.
bool Bench::Timeline() {
  const std::string timeline = Flag("--timeline", "");
  if (timeline.empty()) return true;
  const char* kind_names[] = {"?",    "embed",     "linear", "tma_gemv", "tiled",
                              "rmsnorm", "rope", "attention", "argmax",  "attention_parts"};
  constexpr uint32_t kKinds = sizeof(kind_names) / sizeof(kind_names[0]);
  CudaTuning tuning = base_;
  tuning.one_token_kernel = std::stoi(Flag("--timeline-one-token-kernel", "0"));
  CudaInstruments instruments;
  instruments.kernel_timeline = true;
  instruments.skip_kernels = static_cast<uint32_t>(std::stoul(Flag("--timeline-skip", "0")));
  for (int32_t batch : IntList(timeline)) {
    auto b = Create(tuning, instruments);
    if (!b) return false;
    std::vector<Seq> seqs;
    const double secs = TimeDecode(b.get(), batch, seqs);
    if (secs < 0) return false;
    const std::vector<CudaKernelTime> t = b->KernelTimeline();
    if (t.empty()) {
      PrintError("no timeline recorded (configure with -DROTE_CUDA_TIMELINE=ON)");
      return false;
    }
    double gap_sum[kKinds] = {}, run_sum[kKinds] = {}, spread_sum[kKinds] = {};
    int32_t count[kKinds] = {};
    size_t prev = 0;  // the last kernel (not a point inside one)
    for (size_t i = 0; i < t.size(); ++i) {
      for (int p = 1; p < 8; ++p)  // points inside the body, from its first wait
        if (t[i].point_last_ns[p] != 0)
          std::printf("{\"what\":\"timeline_point\",\"shape\":\"%s\",\"batch\":%d,\"i\":%zu,\"point\":%d,"
                      "\"first_us\":%.2f,\"last_us\":%.2f}\n",
                      shape_.c_str(), batch, i, p, (t[i].point_first_ns[p] - t[i].first_wait_ns) / 1e3,
                      (t[i].point_last_ns[p] - t[i].first_wait_ns) / 1e3);
      const uint32_t kind = t[i].kind < kKinds ? t[i].kind : 0;
      const double gap = i == 0 ? 0.0 : (t[i].first_wait_ns - t[prev].end_ns) / 1e3;
      const double spread = (t[i].last_wait_ns - t[i].first_wait_ns) / 1e3;
      const double run = (t[i].end_ns - t[i].first_wait_ns) / 1e3;
      const double early = (t[i].first_wait_ns - t[i].start_ns) / 1e3;  // resident before its wait returned
      gap_sum[kind] += gap;
      run_sum[kind] += run;
      spread_sum[kind] += spread;
      ++count[kind];
      std::printf("{\"what\":\"timeline_kernel\",\"shape\":\"%s\",\"batch\":%d,\"i\":%zu,\"kind\":\"%s\","
                  "\"blocks\":%u,\"blocks_recorded\":%u,\"started_before_wait_us\":%.2f,\"gap_us\":%.2f,"
                  "\"wait_spread_us\":%.2f,\"run_us\":%.2f,\"late_blocks\":%u,\"late_prologue_max_us\":%.2f,"
                  "\"late_prologue_mean_us\":%.2f}\n",
                  shape_.c_str(), batch, i, kind_names[kind], t[i].blocks, t[i].blocks_recorded, early, gap, spread,
                  run, t[i].late_blocks, t[i].late_prologue_max_ns / 1e3, t[i].late_prologue_mean_ns / 1e3);
      prev = i;
    }
    std::printf("{\"what\":\"timeline\",\"shape\":\"%s\",\"batch\":%d,\"kernels\":%zu,\"span_us\":%.1f,"
                "\"us_per_step_timed\":%.1f",
                shape_.c_str(), batch, t.size(), (t.back().end_ns - t.front().start_ns) / 1e3, 1e6 * secs / steps_);
    for (uint32_t k = 1; k < kKinds; ++k)
      if (count[k] > 0)
        std::printf(",\"%s\":{\"n\":%d,\"gap_us\":%.1f,\"run_us\":%.1f,\"spread_us\":%.1f}", kind_names[k], count[k],
                    gap_sum[k], run_sum[k], spread_sum[k]);
    std::printf("}\n");
    std::fflush(stdout);
  }
  return true;
}

// --ablate B1,B2: time decode steps at these batches with each kernel kind left out, and with
// only that kind kept: a kind's marginal share of a replayed step (full - without it) and its
// cost alone (only it - nothing). Results are meaningless in these runs; only times count.
bool Bench::Ablate() {
  const std::string ablate = Flag("--ablate", "");
  const std::pair<const char*, uint32_t> kinds[] = {
      {"embed", 1}, {"qkv", 2}, {"rope", 4}, {"attention", 8}, {"out", 16},
      {"gate_up", 32}, {"down", 64}, {"lm_head", 128}, {"argmax", 256}};
  for (int32_t batch : IntList(ablate)) {
    auto time_mask = [&](uint32_t mask) {
      CudaInstruments instruments;
      instruments.skip_kernels = mask;
      auto b = Create(base_, instruments);
      std::vector<Seq> seqs;
      const double secs = b ? TimeDecode(b.get(), batch, seqs) : -1.0;
      return secs < 0 ? -1.0 : 1e6 * secs / steps_;
    };
    const double full = time_mask(0), nothing = time_mask(kAllCudaKernelKinds);
    const double no_weights = time_mask(static_cast<uint32_t>(CudaKernelKind::kLayerWeightReads));
    std::printf("{\"what\":\"ablate\",\"shape\":\"%s\",\"batch\":%d,\"us_per_step\":%.1f,"
                "\"us_per_step_no_kernels\":%.1f,\"us_per_step_no_layer_weight_reads\":%.1f}\n",
                shape_.c_str(), batch, full, nothing, no_weights);
    for (const auto& [name, bit] : kinds) {
      const double without = time_mask(bit), only = time_mask(kAllCudaKernelKinds & ~bit);
      std::printf("{\"what\":\"ablate\",\"shape\":\"%s\",\"batch\":%d,\"kind\":\"%s\",\"marginal_us\":%.1f,"
                  "\"alone_us\":%.1f}\n",
                  shape_.c_str(), batch, name, full - without, only - nothing);
      std::fflush(stdout);
    }
  }
  return true;
}

// The decode figures at --batches and the prefill figures, for each of --tiles: the batched
// products' tile (CudaTuning::large_batch_tile; -1 the default choice, 0-2 register tiles, 4
// never the shared-memory tile). --numerics fast: the fast profile's block shapes as 10 x token
// rows + 16-row tiles per block (0 the default choice; 4: 64 weight rows; 162: 16 tokens by 32
// rows; 80: 8 tokens, rows by size). The default runs on `base`.
bool Bench::DecodeAndPrefill(CudaBackend* base) {
  const ModelConfig& c = model_->config();
  const bool fast = options_.profile == NumericsProfile::kFast;
  for (int32_t tile : IntList(Flag("--tiles", "-1"))) {
    std::unique_ptr<CudaBackend> tiled;
    CudaBackend* b = base;
    if (tile >= 0) {
      CudaTuning t = base_;
      if (fast) {
        t.fast_row_tiles = tile % 10;
        t.fast_token_tile = tile / 10;
      } else {
        t.large_batch_tile = tile;
      }
      tiled = Create(t);
      if (!tiled) return false;
      b = tiled.get();
    }
    const std::string profile = b->numerics_profile();
    // Any batch sizes from 1 to 64 (the figures are 1, 8, 32 and 64).
    for (int32_t batch : IntList(Flag("--batches", "1,8,32,64"))) {
      if (batch < 1 || batch > 64) {
        PrintError("--batches takes 1 to 64, got " + std::to_string(batch));
        return false;
      }
      if (!fast && tile >= 0 && batch == 1) continue;  // forced tiles apply above one token
      std::vector<Seq> seqs;
      const double secs = TimeDecode(b, batch, seqs);
      if (secs < 0) return false;
      // The last step's graph replayed back to back: the device's time per step without the host's
      // turn between steps (which the figure below includes, as a user's steps do). Before the
      // needle's run alone, which would make its graph the last.
      auto replay = b->TimeLastGraph(steps_);
      const double graph_ms = replay.ok() ? 1e3 * *replay : 0.0;
      if (batch == 1) needle_alone_ = seqs[0].tokens;
      if (needle_alone_.empty()) {
        // Batch 1 was not asked for: run the needle alone (untimed) for the comparison.
        std::vector<Seq> alone = MakeSeqs(1, prompt_, c.vocab_size, stride_, needle_, interleave_);
        bool alone_ok = Step(b, alone);
        for (int32_t i = 0; alone_ok && i < kWarm + steps_; ++i) alone_ok = Step(b, alone);
        if (!alone_ok) return false;
        needle_alone_ = alone[0].tokens;
      }
      const bool invariant = seqs[0].tokens == needle_alone_;
      // FNV-1a of every sequence's tokens: two builds (or flags) that claim the same bits must
      // print the same value.
      uint64_t tokens_fnv = 1469598103934665603ull;
      for (const Seq& q : seqs)
        for (int32_t tk : q.tokens) tokens_fnv = (tokens_fnv ^ static_cast<uint32_t>(tk)) * 1099511628211ull;
      const double tps = batch * steps_ / secs;
      direct_tps_[batch] = tps;
      const double mean_context = prompt_ + kWarm + 1 + steps_ / 2.0;
      const double bytes_per_step =
          static_cast<double>(b->WeightBytesPerStep()) + batch * mean_context * kv_bytes_per_position_;
      const double bytes_per_token = bytes_per_step / batch;
      const double flops_per_token =
          2.0 * matrix_params_ + 4.0 * mean_context * c.q_dim() * c.num_layers;  // scores + weighted sum
      std::printf("{\"what\":\"decode\",\"shape\":\"%s\",\"batch\":%d,\"steps\":%d,\"tokens_per_s\":%.1f,"
                  "\"ms_per_step\":%.3f,\"bytes_per_token\":%.0f,\"achieved_TBps\":%.4f,\"fraction_of_copy_bandwidth\":%.3f,"
                  "\"achieved_TFLOPs\":%.3f,\"fraction_of_fp32_fma\":%.3f,\"needle_tokens_equal_batch1\":%s,\"tile\":%d,"
                  "\"numerics\":\"%s\",\"tokens_fnv\":\"%016llx\",\"graph_replay_ms_per_step\":%.3f,\"chain\":%d}\n",
                  shape_.c_str(), batch, steps_, tps, 1e3 * secs / steps_, bytes_per_token,
                  bytes_per_token * tps / 1e12, bytes_per_token * tps / bw_, flops_per_token * tps / 1e12,
                  flops_per_token * tps / (2 * fma_), invariant ? "true" : "false", tile, profile.c_str(),
                  static_cast<unsigned long long>(tokens_fnv), graph_ms, chain_);
      std::fflush(stdout);
    }

    if (Flag("--prefill", "1") == "1" && !PrefillFigures(b, tile, profile, "")) return false;
  }
  // --wgmma-variants N:W[:C][,...]: the prefill figures again on a backend whose fast products of
  // at least N tokens run on wgmma (0: never) in blocks of W warpgroups (0: the default rule), in
  // clusters of C blocks of 1 warpgroup sharing the pieces (CudaTuning::fast_wgmma_cluster), side
  // by side with the default above (same bits: `last_token` must repeat across variants too).
  for (const std::string& v : Split(Flag("--wgmma-variants", ""))) {
    std::string fields = v;
    std::replace(fields.begin(), fields.end(), ':', ',');
    const std::vector<int32_t> f = IntList(fields);
    if (f.empty() || f.size() > 3 || (f.size() >= 2 && (f[1] < 0 || f[1] > 4)) ||
        (f.size() == 3 && f[2] != 1 && f[2] != 2 && f[2] != 4)) {
      PrintError("--wgmma-variants takes N:W[:C] with W from 0 to 4 and C 1, 2 or 4, got " + v);
      return false;
    }
    CudaTuning t = base_;
    t.fast_wgmma_min_tokens = f[0];
    if (f.size() > 1) t.fast_wgmma_warpgroups = f[1];
    if (f.size() > 2) t.fast_wgmma_cluster = f[2];
    std::unique_ptr<CudaBackend> b = Create(t);
    if (!b || !PrefillFigures(b.get(), -1, b->numerics_profile(), v)) return false;
  }
  // --attention-tile-variants N[:B][,...]: the prefill figures again on a backend whose attention
  // runs in query tiles from steps of N tokens (0: never), side by side with the default above
  // (same bits: `last_token` must repeat); labelled "attention_tile:N".
  // N:B: B blocks a multiprocessor (CudaTuning::attention_tile_blocks_per_sm).
  for (const std::string& v : Split(Flag("--attention-tile-variants", ""))) {
    std::string fields = v;
    std::replace(fields.begin(), fields.end(), ':', ',');
    const std::vector<int32_t> f = IntList(fields);
    if (f.empty() || f.size() > 2 || (f.size() == 2 && f[1] != 1 && f[1] != 2)) {
      PrintError("--attention-tile-variants takes N[:B] with B 1 or 2, got " + v);
      return false;
    }
    CudaTuning t = base_;
    t.attention_tile_min_tokens = f[0];
    if (f.size() == 2) t.attention_tile_blocks_per_sm = f[1];
    std::unique_ptr<CudaBackend> b = Create(t);
    if (!b || !PrefillFigures(b.get(), -1, b->numerics_profile(), "attention_tile:" + v)) return false;
  }
  return true;
}

// The prefill figures: each --prefill-prompts count of prompts of each --prefill-len, --prefill-reps runs each (the first
// untimed). `wgmma`: the variant (--wgmma-variants or --attention-tile-variants entry) the backend was
// made for, printed as "variant" ("" the default).
bool Bench::PrefillFigures(CudaBackend* b, int32_t tile, const std::string& profile, const std::string& wgmma) {
  const ModelConfig& c = model_->config();
  // --prefill-reps R: R runs of each prefill, the first untimed (its figure is the median of the rest).
  const int prefill_reps = std::max(2, std::stoi(Flag("--prefill-reps", "4")));
  for (int32_t prefill_len : prefill_lens_)
  for (int32_t n : prefill_prompts_) {
    std::vector<double> times;
    std::vector<int32_t> first_tokens;
    for (int rep = 0; rep < prefill_reps; ++rep) {
      std::vector<Seq> seqs(n);
      for (int32_t i = 0; i < n; ++i) {
        seqs[i].tokens = RandomTokens(prefill_len, c.vocab_size, 77 + i);
        for (int32_t k = 0; k < prefill_stride_; ++k) seqs[i].blocks.push_back(i * prefill_stride_ + k);
      }
      auto p0 = Clock::now();
      if (!Step(b, seqs)) return false;
      auto p1 = Clock::now();
      if (rep > 0) times.push_back(Seconds(p0, p1));
      if (rep == 0) first_tokens.push_back(seqs[0].tokens.back());
      else if (seqs[0].tokens.back() != first_tokens[0]) first_tokens.push_back(-1);
    }
    std::sort(times.begin(), times.end());
    const double secs = times[times.size() / 2];
    const double tps = n * prefill_len / secs;
    const double flops_per_token = 2.0 * (matrix_params_ - static_cast<int64_t>(c.vocab_size) * c.hidden_size) +
                                   4.0 * (prefill_len / 2.0) * c.q_dim() * c.num_layers;
    std::printf("{\"what\":\"prefill\",\"shape\":\"%s\",\"prompts\":%d,\"prompt_tokens\":%d,\"tokens_per_s\":%.1f,"
                "\"seconds\":%.4f,\"achieved_TFLOPs\":%.3f,\"fraction_of_fp32_fma\":%.3f,\"fraction_of_bf16_wgmma\":%.3f,"
                "\"repeat_equal\":%s,\"tile\":%d,\"numerics\":\"%s\",\"variant\":\"%s\",\"last_token\":%d}\n",
                shape_.c_str(), n, prefill_len, tps, secs, flops_per_token * tps / 1e12,
                flops_per_token * tps / (2 * fma_), bf16_ > 0 ? flops_per_token * tps / bf16_ : 0.0,
                first_tokens.size() == 1 ? "true" : "false", tile, profile.c_str(), wgmma.c_str(),
                first_tokens[0]);
    std::fflush(stdout);
  }
  return true;
}

// --kv-capacity L:N[,L:N]: whether N sequences of L tokens fit the KV cache beside the weights when
// it is sized as `rote serve` sizes it on CUDA (free device memory less 1 GiB, engine.cc), and the
// run that shows it: each sequence prefilled in chunks of --kv-chunk tokens (1024), then
// kCapacityDecodeSteps greedy steps of all N together. --card-mib M first takes memory away (a
// ballast allocation) until the card holds M MiB in all, as a smaller card of the same
// architecture would: 81559 is an 80 GB H100's total. The KV cache is fp32 in both profiles (the
// exact profile's bits need it), so the figures hold for both.
bool Bench::KvCapacity(CudaBackend* b) {
  const std::vector<std::string> entries = Split(Flag("--kv-capacity", ""));
  if (entries.empty()) return true;
  const ModelConfig& c = model_->config();
  int64_t free_bytes = 0, total_bytes = 0;
  rote::bench::DeviceMemory(&free_bytes, &total_bytes);
  const int64_t card_mib = std::stoll(Flag("--card-mib", "0"));
  void* ballast = nullptr;
  const int64_t ballast_bytes = card_mib > 0 ? total_bytes - (card_mib << 20) : 0;
  if (ballast_bytes > 0 && (ballast = rote::bench::AllocateBallast(ballast_bytes)) == nullptr) {
    PrintError("cannot take " + std::to_string(ballast_bytes) + " bytes away for --card-mib");
    return false;
  }
  const int32_t chunk = std::max(1, std::stoi(Flag("--kv-chunk", "1024")));
  bool ok = true;
  for (const std::string& entry : entries) {
    const size_t colon = entry.find(':');
    const int32_t len = std::stoi(entry.substr(0, colon));
    const int32_t n = colon == std::string::npos ? 1 : std::stoi(entry.substr(colon + 1));
    const int32_t per_seq = (len + kCapacityDecodeSteps + 1 + kKvBlockSize - 1) / kKvBlockSize;
    const int32_t needed = n * per_seq;
    const int32_t fitting = b->KvBlocksForFreeMemory(0, int64_t{1} << 30);
    const int64_t card_bytes = ballast_bytes > 0 ? (card_mib << 20) : total_bytes;
    std::printf("{\"what\":\"kv_capacity\",\"shape\":\"%s\",\"numerics\":\"%s\",\"card_GiB\":%.1f,"
                "\"weight_GiB\":%.2f,\"kv_bytes_per_token\":%lld,\"sequences\":%d,\"tokens_each\":%d,"
                "\"kv_GiB_needed\":%.2f,\"tokens_fitting\":%lld,\"fits\":%s}\n",
                shape_.c_str(), b->numerics_profile().c_str(), card_bytes / 1073741824.0,
                b->WeightBytes() / 1073741824.0, static_cast<long long>(kv_bytes_per_position_), n, len,
                static_cast<double>(needed) * b->KvBytesPerBlock() / 1073741824.0,
                static_cast<long long>(fitting) * kKvBlockSize, fitting >= needed ? "true" : "false");
    std::fflush(stdout);
    if (fitting < needed) continue;
    if (Status s = b->AllocateKvCache(needed); !s.ok()) {
      PrintError(s.ToString());
      ok = false;
      break;
    }
    std::vector<Seq> seqs(n);
    const auto p0 = Clock::now();
    for (int32_t i = 0; ok && i < n; ++i) {
      seqs[i].tokens = RandomTokens(len, c.vocab_size, 500 + i);
      for (int32_t k = 0; k < per_seq; ++k) seqs[i].blocks.push_back(i * per_seq + k);
      for (int32_t at = 0; ok && at < len; at += chunk) {
        const int32_t count = std::min(chunk, len - at);
        BatchPlan plan;
        SequenceStep st;
        st.tokens = std::span<const int32_t>(seqs[i].tokens.data() + at, count);
        st.start_pos = at;
        st.block_table = seqs[i].blocks;
        st.num_logits = 1;
        plan.sequences.push_back(st);
        std::vector<int32_t> next;
        Status s = b->ForwardGreedy(plan, &next);
        if (!s.ok()) {
          PrintError(s.ToString());
          ok = false;
        } else if (at + count == len) {
          seqs[i].cached = len;
          seqs[i].tokens.push_back(next[0]);
        }
      }
    }
    const auto p1 = Clock::now();
    ok = ok && Steps(b, seqs, kCapacityDecodeSteps, 1);
    const auto p2 = Clock::now();
    if (!ok) break;
    int64_t left = 0, total = 0;
    rote::bench::DeviceMemory(&left, &total);
    std::printf("{\"what\":\"kv_capacity_run\",\"shape\":\"%s\",\"numerics\":\"%s\",\"sequences\":%d,"
                "\"tokens_each\":%d,\"prefill_tokens_per_s\":%.1f,\"decode_tokens_per_s\":%.1f,"
                "\"decode_ms_per_step\":%.2f,\"device_GiB_free_after\":%.2f}\n",
                shape_.c_str(), b->numerics_profile().c_str(), n, len, static_cast<double>(n) * len / Seconds(p0, p1),
                static_cast<double>(n) * kCapacityDecodeSteps / Seconds(p1, p2),
                1e3 * Seconds(p1, p2) / kCapacityDecodeSteps, left / 1073741824.0);
    std::fflush(stdout);
  }
  // The bench's own cache back, whatever happened above, for the runs after this one.
  if (Status s = b->AllocateKvCache(blocks_); !s.ok()) {
    PrintError(s.ToString());
    ok = false;
  }
  rote::bench::FreeBallast(ballast);
  return ok;
}

// --engine-batches 8,32: the same decode through the engine (scheduler, paged-KV allocator,
// stream decoding, stop checks) that `rote generate` and the service use: `batch` greedy
// requests of the same prompts submitted at once, timed from the step that gives every request
// its token `warm` to the one that gives token `warm + steps`. Each batch runs twice, tokens
// chosen on the device (ForwardGreedy) and from logits copied to the host, side by side; the
// ratio is against the backend driven directly above. The engine takes the backend, so this
// comes last.
bool Bench::EngineDecode(std::unique_ptr<CudaBackend> backend) {
  const std::vector<int32_t> engine_batches = IntList(Flag("--engine-batches", ""));
  SamplingParams engine_sampling;
  if (const std::string es = Flag("--engine-sampling", ""); !es.empty()) {
    if (std::sscanf(es.c_str(), "%f:%d:%f", &engine_sampling.temperature, &engine_sampling.top_k,
                    &engine_sampling.top_p) != 3 ||
        !(engine_sampling.temperature > 0.0f)) {
      PrintError("--engine-sampling wants T:K:P with T > 0, got " + es);
      return false;
    }
    engine_sampling.seed = 3;
  }
  if (engine_batches.empty()) return true;
  const ModelConfig& c = model_->config();
  const std::string profile = backend->numerics_profile();
  // --tokenizer DIR: the engine's tokenizer (the synthesized model has none); ids past its
  // vocabulary decode to nothing. Relative to the working directory, the repository's root.
  auto tokenizer = Tokenizer::Load(Flag("--tokenizer", "tests/fixtures/qwen2"));
  if (!tokenizer.ok()) {
    PrintError(tokenizer.status().ToString());
    return false;
  }
  const bool sampling = engine_sampling.temperature > 0.0f;
  // Sampled runs with every column sorted (the candidate path off) take a backend of their own.
  std::unique_ptr<CudaBackend> sorted;
  if (sampling) {
    CudaTuning t = base_;
    t.sample_candidates = 0;
    if (!(sorted = Create(t))) return false;
  }
  CudaBackend* b = backend.get();
  const int32_t max_batch = *std::max_element(engine_batches.begin(), engine_batches.end());
  EngineOptions eo;
  eo.device = Device::kCuda;
  eo.numerics_profile = options_.profile;
  eo.max_batch = max_batch;
  eo.max_context = prompt_ + kWarm + steps_ + 2 * kKvBlockSize;
  eo.kv_cache_bytes = static_cast<int64_t>(max_batch) * ((eo.max_context + kKvBlockSize - 1) / kKvBlockSize + 1) *
                      b->KvBytesPerBlock();
  eo.prefix_sharing = false;
  // Every prompt in the first step, so that all requests decode in step with each other as the
  // direct runs do.
  eo.prefill_chunk = prompt_;
  eo.max_step_tokens = max_batch * prompt_;
  auto switched = std::make_unique<GreedySwitch>(std::move(backend), std::move(sorted));
  GreedySwitch* greedy_switch = switched.get();
  auto engine = Engine::Create(model_, std::move(*tokenizer), std::move(switched), eo);
  if (!engine.ok()) {
    PrintError(engine.status().ToString());
    return false;
  }
  std::vector<std::vector<int32_t>> sampled_on_device;
  for (int32_t batch : engine_batches) {
    // Runs: 0 greedy, tokens on the device; 1 greedy, logits to the host; with
    // --engine-sampling T:K:P (temperature, top-k, top-p), 2 sampled on the device, 3 sampled
    // on the host, 4 sampled on the device with every column sorted (the candidate path off:
    // the same as 2 where the rule keeps more than its 1,024 ranks).
    for (int run = 0; run < (sampling ? 5 : 2); ++run) {
      const bool on_device = run == 0 || run == 2 || run == 4;
      const bool sampled = run >= 2;
      greedy_switch->on_device = on_device;  // the engine is idle between runs
      greedy_switch->all_columns_sorted = run == 4;
      greedy_switch->ClearCalls();
      rote::bench::StepWindow window(batch, kWarm, steps_);
      // Submitted together (SubmitAll), so the engine's first step holds every prompt, as the
      // direct runs' does (separate Submit calls let the scheduler start on the first few).
      std::vector<GenerationRequest> requests;
      for (int32_t i = 0; i < batch; ++i) {
        GenerationRequest r;
        r.prompt_tokens = i == 0 ? needle_ : RandomTokens(prompt_, c.vocab_size, 1000 + i);
        if (sampled) {
          r.sampling = engine_sampling;
          r.sampling_key = static_cast<uint64_t>(i);
        }
        r.sampling.max_tokens = kWarm + steps_ + 1;
        r.sampling.ignore_eos = true;
        r.on_token = window.Callback<TokenEvent>();
        requests.push_back(std::move(r));
      }
      auto submitted = (*engine)->SubmitAll(std::move(requests));
      if (!submitted.ok()) {
        PrintError(submitted.status().ToString());
        return false;
      }
      const std::vector<RequestId> ids = std::move(submitted).value();
      std::vector<int32_t> needle_tokens;
      std::vector<std::vector<int32_t>> all_tokens;
      for (RequestId id : ids) {
        auto res = (*engine)->Wait(id);
        if (!res.ok()) {
          PrintError(res.status().ToString());
          return false;
        }
        if (id == ids[0]) needle_tokens = res->tokens;
        all_tokens.push_back(res->tokens);
      }
      // Sampled on the device (run 2) against on the host (run 3) and with every column sorted
      // (run 4): every request's tokens.
      if (run == 2) sampled_on_device = all_tokens;
      const char* sampled_equal = run < 3 ? "null" : sampled_on_device == all_tokens ? "true" : "false";
      const double tps = batch * steps_ / Seconds(window.begin(), window.end());
      // Where the window went: inside the backend's calls, or between them (the engine's own
      // turn: planning, the callbacks, waking its thread).
      const auto [backend_s, backend_calls] = greedy_switch->BackendSecondsWithin(window.begin(), window.end());
      const double outside_us =
          backend_calls > 0 ? 1e6 * (Seconds(window.begin(), window.end()) - backend_s) / backend_calls : 0.0;
      const double inside_ms = backend_calls > 0 ? 1e3 * backend_s / backend_calls : 0.0;
      // The engine's last step (all requests), replayed.
      auto replay = greedy_switch->active()->TimeLastGraph(steps_);
      const double graph_ms = replay.ok() ? 1e3 * *replay : 0.0;
      // The direct runs' needle: its prompt, then its generated tokens.
      const bool same_needle =
          !needle_alone_.empty() && needle_tokens.size() <= needle_alone_.size() - needle_.size() &&
          std::equal(needle_tokens.begin(), needle_tokens.end(), needle_alone_.begin() + needle_.size());
      const auto direct = direct_tps_.find(batch);
      std::printf("{\"what\":\"engine_decode\",\"shape\":\"%s\",\"batch\":%d,\"steps\":%d,"
                  "\"on_device\":%s,\"sampled\":%s,\"tokens_per_s\":%.1f,\"ms_per_step\":%.3f,"
                  "\"ratio_to_backend_direct\":%.3f,\"needle_tokens_equal_direct\":%s,\"numerics\":\"%s\","
                  "\"graph_replay_ms_per_step\":%.3f,\"sampled_tokens_equal_on_device\":%s,\"sample_candidates\":%s,"
                  "\"backend_ms_per_call\":%.3f,\"engine_us_between_calls\":%.1f}\n",
                  shape_.c_str(), batch, steps_, on_device ? "true" : "false", sampled ? "true" : "false", tps,
                  1e3 * batch / tps, direct == direct_tps_.end() ? 0.0 : tps / direct->second,
                  sampled ? "null" : same_needle ? "true" : "false", profile.c_str(), graph_ms, sampled_equal,
                  !sampled || !on_device ? "null" : run == 4 ? "false" : "true", inside_ms, outside_us);
      std::fflush(stdout);
      if (run == 0) {  // the engine's last greedy plan, for comparison with the direct runs'
        std::string rows;
        for (const GreedySwitch::PlanRow& pr : greedy_switch->LastPlan()) {
          rows += rows.empty() ? "[" : ",[";
          rows += std::to_string(pr.start_pos) + "," + std::to_string(pr.tokens);
          for (int32_t blk : pr.blocks) rows += "," + std::to_string(blk);
          rows += "]";
        }
        std::printf("{\"what\":\"engine_last_plan\",\"batch\":%d,\"rows\":[%s]}\n", batch, rows.c_str());
        std::fflush(stdout);
      }
    }
  }
  greedy_switch->all_columns_sorted = false;
  // The first engine batch driven directly again, on the same backend after the engine's runs
  // (its KV cache now the engine's, every request finished): whether the engine's steps are
  // slower for their plans or for the backend's state after them.
  const int32_t again = engine_batches.front();
  if (again * stride_ <= static_cast<int32_t>(eo.kv_cache_bytes / b->KvBytesPerBlock())) {
    std::vector<Seq> seqs = MakeSeqs(again, prompt_, c.vocab_size, stride_, needle_, interleave_);
    bool ok = Step(b, seqs);
    for (int32_t i = 0; ok && i < kWarm; ++i) ok = Step(b, seqs);
    auto s0 = Clock::now();
    for (int32_t i = 0; ok && i < steps_; ++i) ok = Step(b, seqs);
    auto s1 = Clock::now();
    if (!ok) return false;
    auto replay = b->TimeLastGraph(steps_);
    std::printf("{\"what\":\"decode_after_engine\",\"shape\":\"%s\",\"batch\":%d,\"steps\":%d,\"tokens_per_s\":%.1f,"
                "\"ms_per_step\":%.3f,\"graph_replay_ms_per_step\":%.3f,\"needle_tokens_equal_batch1\":%s}\n",
                shape_.c_str(), again, steps_, again * steps_ / Seconds(s0, s1), 1e3 * Seconds(s0, s1) / steps_,
                replay.ok() ? 1e3 * *replay : 0.0, seqs[0].tokens == needle_alone_ ? "true" : "false");
    std::fflush(stdout);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Bench bench(argc, argv);
  if (!bench.Init()) return 1;
  const auto t0 = Clock::now();
  std::unique_ptr<CudaBackend> backend = bench.Create();
  if (!backend) return 1;
  bench.PrintModel(backend.get(), Seconds(t0, Clock::now()));
  if (!bench.OneTokenKernels()) return 1;
  // --attention-variants 0,2,5: each attention variant (CudaTuning::attention_variant).
  if (const std::string list = bench.Flag("--attention-variants", ""); !list.empty() &&
      !bench.CompareSettings("attention_variant", "variant", list,
                             [](CudaTuning& t, int32_t v) { t.attention_variant = v; }))
    return 1;
  // --attention-parts-v-loads 4,16,32: the separate attention-in-parts launch with that many V
  // loads in flight per thread (CudaTuning::attention_parts_v_loads); decode at --prompt positions.
  if (const std::string list = bench.Flag("--attention-parts-v-loads", ""); !list.empty() &&
      !bench.CompareSettings("attention_parts_v_loads", "v_loads", list,
                             [](CudaTuning& t, int32_t n) { t.attention_parts_v_loads = n; }))
    return 1;
  // --evict-first 0,1: weight reads hinted L2 evict_first off and on (CudaTuning::weight_evict_first).
  if (const std::string list = bench.Flag("--evict-first", ""); !list.empty() &&
      !bench.CompareSettings("weight_evict_first", "evict_first", list,
                             [](CudaTuning& t, int32_t on) { t.weight_evict_first = on != 0; }))
    return 1;
  if (!bench.TraceStep() || !bench.Timeline()) return 1;
  if (!bench.Flag("--ablate", "").empty()) return bench.Ablate() ? 0 : 1;
  if (bench.Flag("--decode", "1") != "0" && !bench.DecodeAndPrefill(backend.get())) return 1;
  if (!bench.KvCapacity(backend.get())) return 1;
  return bench.EngineDecode(std::move(backend)) ? 0 : 1;
}
