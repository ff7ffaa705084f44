// The inference engine: the one public entry point of `inference`. Load a Hugging Face model
// directory, submit generation requests (raw prompt, chat messages or token ids), stream tokens,
// cancel, and get results with provenance. A scheduler thread runs continuous batching over a
// paged KV cache with chunked prefill; the backend follows the exact numerics profile, so a
// request's tokens do not depend on what else runs (docs/numerics.md, docs/inference.md).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "inference/backend.h"
#include "inference/model/weights.h"
#include "inference/sampler.h"
#include "inference/status.h"
#include "inference/tokenizer/tokenizer.h"

namespace rote::inference {

enum class Device { kCpu, kCuda };

struct EngineOptions {
  Device device = Device::kCpu;
  int threads = 0;                         // CPU backend threads; 0 = hardware concurrency
  int cuda_device = 0;
  // kFast runs on CUDA only (Load fails with INVALID_ARGUMENT on the CPU). Provenance records the
  // profile the backend ran (Backend::numerics_profile).
  NumericsProfile numerics_profile = NumericsProfile::kExact;
  // KV storage (fp32); blocks = bytes / KvBytesPerBlock. On CUDA, Engine::Load sizes it from free
  // device memory: 0 takes every block that fits after the weights, less 1 GiB kept for
  // activations, logits and graphs; a positive value caps it (at most that many bytes, and at
  // most what fits). On the CPU, and in Engine::Create, it is the size.
  int64_t kv_cache_bytes = 256ll << 20;
  int32_t max_batch = 16;                  // sequences in one step
  int32_t prefill_chunk = 256;             // prompt tokens one sequence feeds per step
  int32_t max_step_tokens = 512;           // tokens in one step (decodes first, then prefill)
  // After every prefilling sequence took its prefill_chunk, the step's unused token budget goes to
  // them, in order, up to their prompts' ends (fewer, larger prefill steps when few prompts
  // prefill). Chunking never changes a bit of any output (numerics.md), only the step sizes.
  // 7B fast, one generation point (H200): prefill 1.28-1.33 -> 1.11-1.21 s in three calls,
  // steps that prefill 20 -> 11 (docs/performance.md, "The generation workload").
  bool prefill_fills_step = true;
  int32_t max_context = 0;                 // positions per sequence; 0 = min(max_position_embeddings, 32768)
  // Reuse the KV blocks of a prompt prefix another request already computed (full 16-token
  // blocks only). The cached K/V are the same bits a recomputation gives (batch invariance),
  // so this changes speed, never output.
  bool prefix_sharing = true;
  // Where every layer of the model has a sliding window shorter than the context (Mistral,
  // StarCoder2, Phi-3 with a window; not Gemma, whose global layers read every position), a
  // sequence gives each KV block back as soon as no later query can see it, so it holds about
  // window + step positions however long it runs, and requests longer than the cache run. The
  // K/V that are read are the same bits either way; this changes capacity, never output.
  bool release_outside_window = true;
  // Greedy decode steps run as one backend call of up to this many steps (Backend::
  // ForwardGreedySteps; on a GPU each step's tokens feed the next there, with no host turn
  // between them) when every running request decodes greedily, none is waiting to be admitted,
  // none can reach its length limit sooner, and blocks for all the steps are free. A request that
  // stops inside a run ends where it stops (the tokens computed past it are dropped), so the
  // output is the same for any value; what moves is when a cancellation or an arrival is seen (up
  // to this many steps later) and the host's share of a step. 1: one step per call.
  int32_t greedy_chain_steps = 8;
  // Debug/test hook: keep, for every generated token, the logits it was chosen from
  // (GenerationResult::step_logits). Costs vocab_size floats per token.
  bool capture_logits = false;
  // A constrained request with a shipped grammar that has this many tokens of its budget left
  // (max_tokens, or the context) and has not ended plans a closing of its reply and from then
  // on may only write it (grammar/closing.h), so it ends on a whole sentence instead of being
  // cut off. 0: never.
  int32_t grammar_closing_tokens = 48;
  // Load(): a digest computed earlier for the same model files (see Model::FileIdentity);
  // skips re-hashing the weights.
  std::string known_model_digest;
};

// Where `name` says the model runs: "cpu", "cuda" (device 0) or "cuda:N" (device N, a decimal
// ordinal). Sets options->device and options->cuda_device; anything else is INVALID_ARGUMENT,
// naming the forms. (Whether device N exists is Engine::Load's question.)
Status ParseDeviceName(std::string_view name, EngineOptions* options);

enum class FinishReason {
  kEndOfSequence,  // the model produced one of its stop tokens
  kStopSequence,   // the text reached one of SamplingParams::stop
  kLength,         // max_tokens, or the context is full
  kCancelled,
  kGrammarDeadEnd,  // the grammar allowed no token (a grammar whose sentences cannot all end)
};
const char* FinishReasonName(FinishReason reason);  // "eos", "stop", "length", "cancelled"

// One generated token as it streams. `text` is the text it completed (may be empty: bytes of a
// character split across tokens, or text held back because it may start a stop sequence).
struct TokenEvent {
  int32_t token = 0;
  int32_t index = 0;  // 0 for the first generated token
  std::string text;
};
// Called on the scheduler thread; must not block for long or call back into the engine's Wait.
using TokenCallback = std::function<void(const TokenEvent&)>;

// A grammar the output must follow (docs/grammar.md): at every step only the tokens whose bytes
// extend the text so far to a prefix of a sentence of the grammar may be chosen, and the model's
// end-of-sequence tokens only where the text is a whole sentence. The mask is a function of the
// request's own tokens, so a constrained request gives the same tokens alone or in any batch and
// on any backend. The engine compiles each grammar text once for its vocabulary and shares it.
struct GrammarConstraint {
  // A grammar's text, or the name of one rote ships ("lua_reply", "re2_reply", "json",
  // "lua_chunk"; grammar::BuiltinGrammar). Empty: no constraint.
  std::string grammar;
  // The names NAME@ref terminals may use besides the text's own declarations (the Lua sandbox's
  // globals); nullopt: no restriction.
  std::optional<std::vector<std::string>> allowed_globals;
};

// sha256 (hex) of the constraint as it acts: the grammar's text (a builtin name resolved to its
// text), then, when names are restricted, each allowed name after a NUL, in sorted order. Empty
// for no constraint. Provenance and the generation pipeline record it.
std::string GrammarDigest(const GrammarConstraint& constraint);

struct GenerationRequest {
  // Exactly one prompt form: token ids, chat messages (the family's chat template with the
  // generation prompt), or raw text (special-token text is recognised).
  std::vector<int32_t> prompt_tokens;
  std::vector<ChatMessage> messages;
  std::string prompt;
  SamplingParams sampling;
  // Keys the sampling random numbers together with sampling.seed and the position: the same
  // key, seed and prompt give the same tokens whatever else is running.
  uint64_t sampling_key = 0;
  GrammarConstraint constraint;
  TokenCallback on_token;
  // Called on the scheduler thread after each step that read part of the prompt: prompt
  // positions whose K/V are now in the cache (shared prefix blocks included) and the prompt's
  // length. A long prompt on the CPU takes minutes; this says how far it got. May be empty.
  std::function<void(int32_t read, int32_t prompt)> on_prefill;
};

struct Provenance {
  std::string model_digest;               // Model::digest()
  std::string numerics_profile = "exact";
  std::string device;                     // Backend::device()
  SamplingParams decoding;                // as submitted
  uint64_t sampling_key = 0;
  std::string grammar_digest;             // GrammarDigest of the request's constraint; empty: none
};

struct GenerationResult {
  std::vector<int32_t> prompt_tokens;
  std::vector<int32_t> tokens;  // generated, including a final stop token if one ended it
  std::string text;             // decoded output, without the stop token or stop sequence
  FinishReason finish_reason = FinishReason::kLength;
  Provenance provenance;
  std::vector<std::vector<float>> step_logits;  // EngineOptions::capture_logits only
  int32_t prompt_tokens_reused = 0;  // positions taken from shared prefix blocks, not computed
};

using RequestId = uint64_t;

// What the engine has done since it was created, for an operator's metrics. A step is one batch
// computed on the backend; its time counts as prefill when any row of it computes prompt
// positions, else as decode.
struct EngineStats {
  int64_t steps = 0;
  int64_t prefill_steps = 0;     // of those, steps that computed prompt positions (their time is prefill_seconds)
  int64_t prefill_tokens = 0;    // prompt positions computed (not those reused from the prefix cache)
  int64_t generated_tokens = 0;  // tokens sampled
  double prefill_seconds = 0;
  double decode_seconds = 0;
  // Steps by batch size (rows): batch_size_steps[n] steps held n sequences; index 0 unused.
  std::vector<int64_t> batch_size_steps;
  int64_t batch_size_sum = 0;
  // KV blocks held by sequences (of kv_blocks()) and requests in the running batch, as of the
  // latest step or finished request; requests waiting to be admitted, at the call.
  int32_t kv_blocks_in_use = 0;
  int32_t waiting = 0;
  int32_t running = 0;
};

class Engine {
 public:
  // Loads model and tokenizer from `model_dir` and starts the scheduler.
  static StatusOr<std::unique_ptr<Engine>> Load(const std::string& model_dir, const EngineOptions& options);
  // Load's second half: the backend `options` names over a model and tokenizer already read (one
  // host copy of the weights shared by engines on several devices, engine_group.h). Load and Open
  // take max_step_tokens down to what the backend carries in one step (Backend::max_step_tokens);
  // Create refuses a larger one with INVALID_ARGUMENT.
  static StatusOr<std::unique_ptr<Engine>> Open(std::shared_ptr<const Model> model, Tokenizer tokenizer,
                                                const EngineOptions& options);
  // With a backend made by the caller (tests use CPU backend options this way).
  static StatusOr<std::unique_ptr<Engine>> Create(std::shared_ptr<const Model> model, Tokenizer tokenizer,
                                                  std::unique_ptr<Backend> backend, const EngineOptions& options);
  ~Engine();  // cancels what is still running and stops the scheduler
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request. Errors: no or several prompt forms, empty prompt, token ids outside the
  // vocabulary, a prompt that does not fit the context or the whole KV cache.
  StatusOr<RequestId> Submit(GenerationRequest request);
  // Queues several requests at once: the scheduler takes them up together (the first step holds
  // as many of them as its limits allow), where separate Submit calls may each start a step of
  // their own. All or nothing: if request i is invalid, none is queued and the error (Submit's)
  // starts with "request i: ". Ids in the requests' order.
  StatusOr<std::vector<RequestId>> SubmitAll(std::vector<GenerationRequest> requests);
  // Ends the request at the next step boundary (finish reason kCancelled). Unknown ids: no-op.
  void Cancel(RequestId id);
  // Blocks until the request finishes; each id can be waited for once.
  StatusOr<GenerationResult> Wait(RequestId id);
  // Submit and Wait in one call (the request still runs batched with everything else).
  StatusOr<GenerationResult> Generate(GenerationRequest request);

  const Model& model() const;
  const Tokenizer& tokenizer() const;
  std::string device() const;
  std::string numerics_profile() const;  // Backend::numerics_profile()
  // The KV cache the engine holds: its blocks and their bytes (fixed at creation).
  int32_t kv_blocks() const;
  int64_t kv_cache_bytes() const;
  // A snapshot (thread-safe).
  EngineStats stats() const;

  struct Impl;

 private:
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace rote::inference
