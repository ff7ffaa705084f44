// The interface the engine drives: one forward step over a batch of sequences. The engine owns
// scheduling and the paged-KV block allocator (which block ids a sequence uses); the backend
// owns the KV storage and the arithmetic, and must follow docs/numerics.md exactly so that a
// sequence's logits do not depend on the rest of the batch, on chunking, threads or device.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "inference/model/weights.h"
#include "inference/sampler.h"
#include "inference/status.h"

namespace rote::inference {

// The numerics profiles (docs/numerics.md, docs/fast_profile.md). kExact: canonical orders, the
// same bits on the CPU and on any CUDA GPU. kFast (CUDA only): matrix products on the tensor
// cores, batch-invariant on one GPU architecture; its provenance name carries the architecture.
enum class NumericsProfile { kExact, kFast };

// Tokens per KV-cache block.
inline constexpr int32_t kKvBlockSize = 16;
static_assert((kKvBlockSize & (kKvBlockSize - 1)) == 0, "the CUDA kernels index the cache with shifts");
// A block-table entry whose block was released (SequenceStep::block_table).
inline constexpr int32_t kNoKvBlock = -1;

// One sequence's part of a step: a run of new tokens at consecutive positions (a prefill chunk,
// or one decode token). Attention for token t (position start_pos + t) covers positions
// 0 .. start_pos + t: the earlier ones were written to the KV cache by previous steps, the new
// ones are written by this step before attention reads them.
struct SequenceStep {
  std::span<const int32_t> tokens;       // new token ids, tokens.size() >= 1
  int32_t start_pos = 0;                 // position of tokens[0]
  // KV block ids for positions 0 .. start_pos + tokens.size() - 1: position p lives in block
  // block_table[p / kKvBlockSize], slot p % kKvBlockSize. An entry whose every position lies
  // before ModelConfig::first_read_key(start_pos) may be kNoKvBlock: no layer reads it (a model
  // whose every layer has a sliding window; the engine released the block). Backends refuse
  // kNoKvBlock anywhere else.
  std::span<const int32_t> block_table;
  // Logits wanted for the last num_logits tokens of this run (0 for a non-final prefill
  // chunk, 1 for decode or the final chunk, tokens.size() to capture every position).
  int32_t num_logits = 1;
};

struct BatchPlan {
  std::vector<SequenceStep> sequences;
};

// The token masks of a step (Backend::ForwardMasked): `words` 64-bit words per logits row, bit
// t % 64 of word t / 64 set = token t allowed. `fill(out)` writes rows x words words, row after
// row in Forward's row order; an unconstrained row is all ones.
struct StepMasks {
  size_t words = 0;
  std::function<void(uint64_t* out)> fill;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // "cpu" or e.g. "cuda:0 NVIDIA H100 80GB HBM3"; recorded in provenance.
  virtual std::string device() const = 0;

  // The profile's name as provenance records it: "exact", or "fast5-sm90" (the fast profile on
  // compute capability 9.0). Two runs can be compared bit for bit only under the same name.
  virtual std::string numerics_profile() const { return "exact"; }

  // The most tokens one step (the sum of its sequences' new tokens) may carry; Forward and its
  // kin refuse a larger step with INVALID_ARGUMENT, and Engine::Create refuses a max_step_tokens
  // above it. The CPU backend has no limit; the CUDA backend's is CudaMaxStepTokens.
  virtual int32_t max_step_tokens() const { return std::numeric_limits<int32_t>::max(); }

  // Bytes of KV storage one block takes for this model (K and V, all layers, fp32).
  virtual int64_t KvBytesPerBlock() const = 0;

  // (Re)allocates storage for num_blocks blocks, ids 0 .. num_blocks - 1. Contents undefined
  // until written by Forward.
  virtual Status AllocateKvCache(int32_t num_blocks) = 0;

  // Runs the model over every sequence's new tokens, writes their K/V into the blocks of the
  // block table, and writes the requested logits to `logits`, resized to
  // (sum of num_logits) * vocab_size floats: sequence order, then token order.
  virtual Status Forward(const BatchPlan& plan, std::vector<float>* logits) = 0;
  // Forward, keeping only each logits row's greedy token: `tokens` gets one id per row, in
  // Forward's row order, the same as ArgmaxLowestIndex over that row (lowest index on ties, NaN
  // never taken). The engine calls it for steps whose every sampled row is greedy and whose
  // logits nobody captures. This default takes the argmax of Forward's logits; a backend whose
  // logits live elsewhere (the CUDA backend) overrides it so that they never cross to the host
  // (at batch 32 and a 152k vocabulary, 19 MB a step).
  virtual Status ForwardGreedy(const BatchPlan& plan, std::vector<int32_t>* tokens) {
    std::vector<float> logits;
    if (Status s = Forward(plan, &logits); !s.ok()) return s;
    size_t rows = 0;
    for (const SequenceStep& st : plan.sequences) rows += static_cast<size_t>(st.num_logits);
    tokens->clear();
    if (rows == 0) return OkStatus();
    const size_t vocab = logits.size() / rows;
    for (size_t r = 0; r < rows; ++r)
      tokens->push_back(ArgmaxLowestIndex(std::span<const float>(logits.data() + r * vocab, vocab)));
    return OkStatus();
  }
  // `steps` greedy steps in one call: the first is `plan`; each later one feeds every sequence the
  // token chosen for it at the step before, at the position after its last. Every sequence must
  // ask for one logits row (num_logits 1), and its block table must already cover the positions
  // of all the steps. `tokens` gets steps x rows ids, step after step, each step's in Forward's
  // row order: the same tokens as `steps` calls of ForwardGreedy. This default makes those calls;
  // a backend that can feed the chosen tokens back where they are chosen (the CUDA backend)
  // overrides it, so that no host turn stands between the steps.
  virtual Status ForwardGreedySteps(const BatchPlan& plan, int32_t steps, std::vector<int32_t>* tokens) {
    if (steps < 1) return InvalidArgument("ForwardGreedySteps: steps must be positive, got " + std::to_string(steps));
    for (const SequenceStep& st : plan.sequences)
      if (st.num_logits != 1) return InvalidArgument("ForwardGreedySteps: every sequence needs num_logits 1");
    tokens->clear();
    BatchPlan step = plan;
    std::vector<int32_t> chosen, fed(plan.sequences.size());  // one row per sequence
    for (int32_t i = 0; i < steps; ++i) {
      if (i > 0) {
        for (size_t r = 0; r < step.sequences.size(); ++r) {
          SequenceStep& st = step.sequences[r];
          st.start_pos += static_cast<int32_t>(st.tokens.size());
          fed[r] = chosen[r];
          st.tokens = std::span<const int32_t>(&fed[r], 1);
        }
      }
      if (Status s = ForwardGreedy(step, &chosen); !s.ok()) return s;
      tokens->insert(tokens->end(), chosen.begin(), chosen.end());
    }
    return OkStatus();
  }
  // Forward, keeping only each logits row's token chosen by `rules` (one per row, in Forward's
  // row order; temperature <= 0: greedy): the same token as SampleTokenWithUniform over that
  // row. This default samples Forward's logits on the host, one row after another; a backend
  // that samples where its logits are (samples_on_device) overrides it, and the engine calls it
  // only then (otherwise it samples Forward's rows itself, several at once).
  virtual bool samples_on_device() const { return false; }
  virtual Status ForwardSampled(const BatchPlan& plan, std::span<const RowSampling> rules,
                                std::vector<int32_t>* tokens) {
    size_t rows = 0;
    for (const SequenceStep& st : plan.sequences) rows += static_cast<size_t>(st.num_logits);
    if (rules.size() != rows)
      return InvalidArgument("ForwardSampled: " + std::to_string(rules.size()) + " rules for " + std::to_string(rows) +
                             " logits rows");
    std::vector<float> logits;
    if (Status s = Forward(plan, &logits); !s.ok()) return s;
    tokens->clear();
    if (rows == 0) return OkStatus();
    const size_t vocab = logits.size() / rows;
    for (size_t r = 0; r < rules.size(); ++r)
      tokens->push_back(SampleTokenWithUniform(std::span<const float>(logits.data() + r * vocab, vocab), rules[r]));
    return OkStatus();
  }
  // ForwardSampled with token masks (grammar-constrained requests): before row r's rule chooses,
  // every token the row's mask forbids gets the logit -inf (ApplyTokenMask), so the token is the
  // one SampleTokenWithUniform picks from the masked row. `masks.fill` writes the masks; the
  // backend calls it exactly once per step, as late as it can: a backend that computes on a
  // device (CUDA) calls it after launching the forward pass, so the host builds the masks while
  // the device computes the logits. This default runs Forward, then fill, then the rules on the
  // host.
  virtual Status ForwardMasked(const BatchPlan& plan, std::span<const RowSampling> rules, const StepMasks& masks,
                               std::vector<int32_t>* tokens) {
    size_t rows = 0;
    for (const SequenceStep& st : plan.sequences) rows += static_cast<size_t>(st.num_logits);
    if (rules.size() != rows)
      return InvalidArgument("ForwardMasked: " + std::to_string(rules.size()) + " rules for " + std::to_string(rows) +
                             " logits rows");
    std::vector<float> logits;
    if (Status s = Forward(plan, &logits); !s.ok()) return s;
    tokens->clear();
    if (rows == 0) return OkStatus();
    const size_t vocab = logits.size() / rows;
    std::vector<uint64_t> bits(rows * masks.words);
    masks.fill(bits.data());
    for (size_t r = 0; r < rows; ++r) {
      const std::span<float> row(logits.data() + r * vocab, vocab);
      ApplyTokenMask(row, std::span<const uint64_t>(bits.data() + r * masks.words, masks.words));
      tokens->push_back(SampleTokenWithUniform(row, rules[r]));
    }
    return OkStatus();
  }
};

// Bytes of one KV block in the exact profile: K and V, every layer, kv_dim fp32 per position.
int64_t KvBytesPerBlock(const ModelConfig& config);

struct CpuBackendOptions {
  int threads = 1;          // fixed pool; work is split across output rows, never a reduction
  int32_t max_positions = 0;  // rotary table length; 0 = min(max_position_embeddings, 32768)
  bool use_avx2 = true;     // false forces the scalar kernels (same bits, tested)
  // TEST ONLY: when the batch holds more than one token, sum matrix-product dot products in
  // plain sequential order instead of the canonical one. Exists so tests can show that the
  // invariance tests catch a non-canonical reduction.
  bool debug_noncanonical_when_batched = false;
};

StatusOr<std::unique_ptr<Backend>> CreateCpuBackend(std::shared_ptr<const Model> model,
                                                    const CpuBackendOptions& options);

}  // namespace rote::inference
