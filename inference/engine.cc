// The engine facade: validates requests and turns them into sequences, runs the scheduler
// thread, and drives each step through the backend (the scheduler decides what runs; the backend
// computes; the tokens are chosen here and fed back to the sequences). Nothing here touches a
// number the backend computes except to choose tokens, so batch invariance of the logits carries
// over to the tokens.
#include "inference/engine.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "inference/cuda/cuda_backend.h"
#include "inference/kv_block_manager.h"
#include "inference/scheduler.h"
#include "inference/grammar/closing.h"
#include "inference/sequence.h"
#include "inference/util/sha256.h"
#include "inference/util/thread_pool.h"

namespace rote::inference {

Status ParseDeviceName(std::string_view name, EngineOptions* options) {
  const auto bad = [&] {
    return InvalidArgument("unknown device '" + std::string(name) + "': use cpu, cuda or cuda:N (N a device ordinal)");
  };
  if (name == "cpu") {
    options->device = Device::kCpu;
    options->cuda_device = 0;
    return OkStatus();
  }
  if (name.substr(0, 4) != "cuda") return bad();
  std::string_view rest = name.substr(4);
  int ordinal = 0;
  if (!rest.empty()) {
    // ":N", N decimal digits without a sign, at most 4 of them (ordinals are small).
    if (rest[0] != ':' || rest.size() < 2 || rest.size() > 5) return bad();
    for (char ch : rest.substr(1)) {
      if (ch < '0' || ch > '9') return bad();
      ordinal = ordinal * 10 + (ch - '0');
    }
  }
  options->device = Device::kCuda;
  options->cuda_device = ordinal;
  return OkStatus();
}

std::string GrammarDigest(const GrammarConstraint& constraint) {
  if (constraint.grammar.empty()) return "";
  const std::string_view builtin = grammar::BuiltinGrammar(constraint.grammar);
  std::string text = builtin.empty() ? constraint.grammar : std::string(builtin);
  if (constraint.allowed_globals.has_value()) {
    std::vector<std::string> names = *constraint.allowed_globals;
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    text += std::string(1, '\0') + "allowed_globals";
    for (const std::string& n : names) text += std::string(1, '\0') + n;
  }
  return Sha256Hex(text);
}

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kEndOfSequence: return "eos";
    case FinishReason::kStopSequence: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kGrammarDeadEnd: return "grammar";
  }
  return "unknown";
}

struct Engine::Impl {
  std::shared_ptr<const Model> model;
  Tokenizer tokenizer;
  std::unique_ptr<Backend> backend;
  EngineOptions options;
  int32_t max_context = 0;
  std::vector<int32_t> stop_tokens;  // sorted
  std::unique_ptr<KvBlockManager> blocks;  // scheduler thread only
  std::unique_ptr<Scheduler> scheduler;
  std::vector<float> step_logits;          // scheduler thread only: the last step's logits
  std::unique_ptr<ThreadPool> sample_pool;  // scheduler thread only: sampled rows in parallel
  std::vector<uint64_t> step_masks;         // scheduler thread only: the last step's token masks
  // Compiled grammars by text, shared by every request that names the same grammar, and the
  // vocabulary as bytes they are compiled for (built on the first constrained request).
  std::mutex grammar_mu;
  std::map<std::string, std::shared_ptr<const grammar::CompiledGrammar>> grammars;  // guarded by grammar_mu
  std::vector<std::string> token_bytes;                                             // guarded by grammar_mu
  // Token ids by their bytes, for closings (built with token_bytes, read-only after).
  std::unordered_map<std::string, std::vector<int32_t>> ids_by_bytes;               // guarded by grammar_mu
  // Threads that sample a step's rows: the machine's cores, at most 16 (a step has at most
  // max_batch rows).
  int SamplingThreads() const {
    return static_cast<int>(std::clamp<unsigned>(std::thread::hardware_concurrency(), 1u, 16u));
  }

  std::mutex mu;
  std::condition_variable work_cv;
  std::condition_variable done_cv;
  std::map<RequestId, std::shared_ptr<Sequence>> active;  // guarded by mu: submitted, not yet waited
  RequestId next_id = 1;                                   // guarded by mu
  bool stopping = false;                                   // guarded by mu
  std::thread scheduler_thread;
  // Written by the scheduler thread after each step, read by stats().
  mutable std::mutex stats_mu;
  EngineStats stats;  // guarded by stats_mu

  Impl(std::shared_ptr<const Model> m, Tokenizer t) : model(std::move(m)), tokenizer(std::move(t)) {}

  // Validates a request and builds its sequence (no id yet); errors as Submit's.
  StatusOr<std::shared_ptr<Sequence>> Prepare(GenerationRequest request);
  // Gives the sequences their ids and queues them together, under one lock: the scheduler sees
  // all of them or none.
  void Enqueue(const std::vector<std::shared_ptr<Sequence>>& seqs, std::vector<RequestId>* ids);
  void SchedulerLoop();
  void Step();
  // Sets the KV blocks in use and the running batch's size in `stats` (scheduler thread).
  void RecordOccupancy();
  // Adds one computed step to `stats`.
  void RecordStep(size_t rows, int64_t prefill_tokens, int64_t sampled_tokens,
                  std::chrono::steady_clock::duration elapsed);
  // Ends cancelled waiting requests and admits waiting ones, then ends cancelled running ones.
  void AdmitAndCancel();
  // Runs the step planned as `parts` (`chain` greedy steps of it) on the backend: the chosen
  // tokens in `backend_tokens` when the backend chooses them, else the logits in step_logits.
  Status Compute(const std::vector<StepPart>& parts, int32_t chain, bool greedy_step, bool device_sampled,
                 bool masked_step, std::vector<int32_t>* backend_tokens);
  // Samples the rows whose logits the backend returned, rows in parallel; `masked`: a
  // constrained row chooses from its logits under its mask in step_masks.
  std::vector<int32_t> SampleRows(const std::vector<StepPart>& parts, bool masked);
  // Feeds each part its token (`tokens`, one per row that wants logits, row after row of each
  // step of the chain), streams it and finishes the sequences that end.
  void Deliver(const std::vector<StepPart>& parts, int32_t chain, bool host_sampled,
               const std::vector<int32_t>& tokens);
  void Finish(const std::shared_ptr<Sequence>& s, FinishReason reason);
  void Fail(const std::shared_ptr<Sequence>& s, const Status& status);
  AcceptRules Rules() const { return {stop_tokens, max_context, options.capture_logits}; }
  // The compiled grammar of a constraint's text (compiled on first use, then shared).
  StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> CompiledFor(const std::string& text);
  // Writes every logits row's mask (all ones for an unconstrained row), rows in parallel.
  void FillMasks(const std::vector<StepPart>& parts, uint64_t* out);
  // Narrows a constrained row's mask to its closing once its budget is nearly spent
  // (EngineOptions::grammar_closing_tokens); plans the closing the first time.
  void RestrictToClosing(Sequence& s, uint64_t* row, size_t words);
  size_t MaskWords() const { return (static_cast<size_t>(model->config().vocab_size) + 63) / 64; }
};

StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> Engine::Impl::CompiledFor(const std::string& text) {
  std::lock_guard<std::mutex> lock(grammar_mu);
  if (auto it = grammars.find(text); it != grammars.end()) return it->second;
  const int32_t vocab = model->config().vocab_size;
  if (token_bytes.empty()) {
    // What each id adds to the text: its bytes; nothing for special tokens and for ids the
    // tokenizer does not know (a model's padded vocabulary), which a grammar then never allows
    // except as an end-of-sequence token.
    token_bytes.resize(static_cast<size_t>(vocab));
    for (int32_t id = 0; id < vocab && id < tokenizer.vocab_size(); ++id)
      if (!tokenizer.IsSpecial(id)) token_bytes[static_cast<size_t>(id)] = tokenizer.TokenBytes(id);
    for (int32_t id = 0; id < vocab; ++id)
      if (!token_bytes[static_cast<size_t>(id)].empty()) ids_by_bytes[token_bytes[static_cast<size_t>(id)]].push_back(id);
  }
  StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> g =
      grammar::CompiledGrammar::Compile(text, token_bytes, stop_tokens);
  if (!g.ok()) return InvalidArgument("the request's grammar does not compile: " + g.status().message());
  grammars.emplace(text, *g);
  return *g;
}

void Engine::Impl::RestrictToClosing(Sequence& s, uint64_t* row, size_t words) {
  if (s.closing_pieces == nullptr || s.closing_pieces->empty() || options.grammar_closing_tokens <= 0) return;
  const int64_t generated = static_cast<int64_t>(s.all.size() - s.prompt_len);
  const int64_t left = std::min<int64_t>(s.sampling.max_tokens - generated, max_context - static_cast<int64_t>(s.all.size()));
  if (!s.closing.has_value() && left <= options.grammar_closing_tokens && left >= 2 &&
      left <= s.next_closing_try) {
    // One token may be a single byte and the last one is the end of sequence: a plan of
    // left - 1 bytes always fits. Where no plan is found the request goes on and tries again
    // from its new text a few tokens later (a search every step would cost more than the step).
    s.closing = grammar::PlanClosing(*s.matcher, *s.closing_pieces, static_cast<size_t>(left - 1));
    if (!s.closing.has_value()) s.next_closing_try = left - std::max<int64_t>(1, std::min<int64_t>(8, left / 4));
  }
  if (!s.closing.has_value()) return;
  // Allowed: what the grammar allows and is a non-empty prefix of the rest of the plan; at its
  // end only what the grammar allows of the end-of-sequence tokens.
  std::vector<uint64_t> keep(words, 0);
  const std::string& rest = *s.closing;
  for (size_t n = 1; n <= rest.size(); ++n) {
    auto it = ids_by_bytes.find(rest.substr(0, n));
    if (it == ids_by_bytes.end()) continue;
    for (int32_t id : it->second) keep[static_cast<size_t>(id) / 64] |= uint64_t{1} << (id % 64);
  }
  if (rest.empty())
    for (int32_t id : stop_tokens)
      if (id >= 0 && static_cast<size_t>(id) / 64 < words) keep[static_cast<size_t>(id) / 64] |= uint64_t{1} << (id % 64);
  for (size_t w = 0; w < words; ++w) row[w] &= keep[w];
}

void Engine::Impl::FillMasks(const std::vector<StepPart>& parts, uint64_t* out) {
  const size_t words = MaskWords();
  std::vector<Sequence*> rows;
  size_t constrained = 0;
  for (const StepPart& p : parts) {
    if (!p.wants_logits) continue;
    rows.push_back(p.seq.get());
    constrained += p.seq->matcher.has_value() ? 1 : 0;
  }
  // Each row's mask is a function of its own matcher only, so threads do not change it.
  auto fill = [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      uint64_t* row = out + static_cast<size_t>(r) * words;
      Sequence* s = rows[static_cast<size_t>(r)];
      if (s->matcher.has_value()) {
        s->matcher->FillNextTokenMask(row);
        RestrictToClosing(*s, row, words);
      } else {
        std::fill(row, row + words, ~uint64_t{0});
      }
    }
  };
  if (constrained >= 2) {
    if (!sample_pool) sample_pool = std::make_unique<ThreadPool>(SamplingThreads());
    sample_pool->ParallelFor(static_cast<int64_t>(rows.size()), fill);
  } else {
    fill(0, static_cast<int64_t>(rows.size()));
  }
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

StatusOr<std::unique_ptr<Engine>> Engine::Load(const std::string& model_dir, const EngineOptions& options) {
  ROTE_ASSIGN_OR_RETURN(std::shared_ptr<const Model> model, Model::Load(model_dir, options.known_model_digest));
  ROTE_ASSIGN_OR_RETURN(Tokenizer tokenizer, Tokenizer::Load(model_dir));
  return Open(std::move(model), std::move(tokenizer), options);
}

StatusOr<std::unique_ptr<Engine>> Engine::Open(std::shared_ptr<const Model> model, Tokenizer tokenizer,
                                               const EngineOptions& options) {
  if (model == nullptr) return InvalidArgument("Engine::Open needs a model");
  const int32_t max_pos = model->config().max_position_embeddings;
  const int32_t context = options.max_context > 0 ? std::min(options.max_context, max_pos) : std::min(max_pos, 32768);
  std::unique_ptr<Backend> backend;
  int64_t kv_cache_bytes = options.kv_cache_bytes;
  if (options.device == Device::kCpu && options.numerics_profile != NumericsProfile::kExact)
    return InvalidArgument("the fast numerics profile runs on CUDA only (tensor cores): use the CUDA device, or the exact profile");
  if (options.device == Device::kCpu) {
    CpuBackendOptions o;
    o.threads = options.threads > 0 ? options.threads : std::max(1u, std::thread::hardware_concurrency());
    o.max_positions = context;
    ROTE_ASSIGN_OR_RETURN(backend, CreateCpuBackend(model, o));
  } else {
    CudaBackendOptions o;
    o.device = options.cuda_device;
    o.max_positions = context;
    o.profile = options.numerics_profile;
    ROTE_ASSIGN_OR_RETURN(std::unique_ptr<CudaBackend> cuda, CreateCudaBackend(model, o));
    // As many KV blocks as free device memory holds, less 1 GiB kept for activations, logits and
    // graphs, and at most kv_cache_bytes when that is positive (a cap: a server sharing the
    // device, or a test). Nothing fitting is an error here rather than a zero-block cache.
    const int32_t fitting = cuda->KvBlocksForFreeMemory(std::max<int64_t>(options.kv_cache_bytes, 0), int64_t{1} << 30);
    if (fitting < 1)
      return ResourceExhausted("CUDA device: no free memory left for the KV cache after the weights (" +
                               std::to_string(cuda->KvBytesPerBlock()) + " bytes a block, 1 GiB kept for activations)");
    kv_cache_bytes = int64_t{fitting} * cuda->KvBytesPerBlock();
    backend = std::move(cuda);
  }
  EngineOptions opts = options;
  opts.kv_cache_bytes = kv_cache_bytes;
  opts.max_context = context;
  // Open sizes the engine for its device, as it sizes the KV cache: the step budget asked for,
  // within what the backend carries in one step (Backend::max_step_tokens; rote serve derives
  // 32 x max_batch, up to 8,192, where Qwen3-Coder-30B-A3B carries 8,191). Outputs do not
  // depend on the budget. Create, given a backend, refuses a larger one instead.
  opts.max_step_tokens = std::min(opts.max_step_tokens, backend->max_step_tokens());
  return Create(std::move(model), std::move(tokenizer), std::move(backend), opts);
}

StatusOr<std::unique_ptr<Engine>> Engine::Create(std::shared_ptr<const Model> model, Tokenizer tokenizer,
                                                 std::unique_ptr<Backend> backend, const EngineOptions& options) {
  if (model == nullptr || backend == nullptr) return InvalidArgument("Engine::Create needs a model and a backend");
  if (options.max_batch < 1) return InvalidArgument("max_batch must be at least 1");
  if (options.prefill_chunk < 1) return InvalidArgument("prefill_chunk must be at least 1");
  if (options.max_step_tokens < options.max_batch) {
    return InvalidArgument("max_step_tokens must be at least max_batch (every running sequence decodes each step)");
  }
  if (options.max_step_tokens > backend->max_step_tokens()) {
    return InvalidArgument("max_step_tokens " + std::to_string(options.max_step_tokens) + " exceeds the " +
                           std::to_string(backend->max_step_tokens()) + " tokens one step of the " +
                           backend->device() + " backend carries for this model under the " +
                           backend->numerics_profile() + " profile");
  }
  auto impl = std::make_unique<Impl>(std::move(model), std::move(tokenizer));
  impl->options = options;
  const int32_t max_pos = impl->model->config().max_position_embeddings;
  impl->max_context =
      options.max_context > 0 ? std::min(options.max_context, max_pos) : std::min(max_pos, 32768);
  const int64_t per_block = backend->KvBytesPerBlock();
  const int64_t n_blocks = options.kv_cache_bytes / per_block;
  if (n_blocks < 1) {
    return InvalidArgument("kv_cache_bytes " + std::to_string(options.kv_cache_bytes) + " is below one KV block (" +
                           std::to_string(per_block) + " bytes)");
  }
  const int32_t blocks = static_cast<int32_t>(std::min<int64_t>(n_blocks, 1 << 24));
  ROTE_RETURN_IF_ERROR(backend->AllocateKvCache(blocks));
  impl->blocks = std::make_unique<KvBlockManager>(blocks);
  SchedulerLimits limits;
  limits.max_batch = options.max_batch;
  limits.prefill_chunk = options.prefill_chunk;
  limits.max_step_tokens = options.max_step_tokens;
  limits.prefill_fills_step = options.prefill_fills_step;
  limits.greedy_chain_steps = options.greedy_chain_steps;
  limits.capture_logits = options.capture_logits;
  limits.prefix_sharing = options.prefix_sharing;
  limits.max_context = impl->max_context;
  // A window of at least the context never hides a position.
  const int32_t window = impl->model->config().kv_window();
  if (options.release_outside_window && window > 0 && window < impl->max_context) limits.kv_window = window;
  impl->scheduler = std::make_unique<Scheduler>(limits, impl->blocks.get(), &impl->mu);
  impl->backend = std::move(backend);
  impl->stop_tokens = impl->tokenizer.stop_token_ids();
  for (int32_t id : impl->model->config().eos_token_ids) impl->stop_tokens.push_back(id);
  std::sort(impl->stop_tokens.begin(), impl->stop_tokens.end());
  impl->stop_tokens.erase(std::unique(impl->stop_tokens.begin(), impl->stop_tokens.end()), impl->stop_tokens.end());
  Impl* raw = impl.get();
  impl->scheduler_thread = std::thread([raw] { raw->SchedulerLoop(); });
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stopping = true;
  }
  impl_->work_cv.notify_all();
  impl_->scheduler_thread.join();
}

const Model& Engine::model() const { return *impl_->model; }
const Tokenizer& Engine::tokenizer() const { return impl_->tokenizer; }
std::string Engine::device() const { return impl_->backend->device(); }
std::string Engine::numerics_profile() const { return impl_->backend->numerics_profile(); }
int32_t Engine::kv_blocks() const { return impl_->blocks->num_blocks(); }  // never resized after Create
int64_t Engine::kv_cache_bytes() const { return int64_t{kv_blocks()} * impl_->backend->KvBytesPerBlock(); }

EngineStats Engine::stats() const {
  EngineStats out;
  {
    std::lock_guard<std::mutex> lock(impl_->stats_mu);
    out = impl_->stats;
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  out.waiting = static_cast<int32_t>(impl_->scheduler->waiting().size());
  return out;
}

StatusOr<std::shared_ptr<Sequence>> Engine::Impl::Prepare(GenerationRequest request) {
  const int forms = !request.prompt_tokens.empty() + !request.messages.empty() + !request.prompt.empty();
  if (forms != 1) {
    return InvalidArgument("a generation request needs exactly one of prompt_tokens, messages or prompt (got " +
                           std::to_string(forms) + ")");
  }
  const SamplingParams& sp = request.sampling;
  if (!(sp.temperature >= 0.0f) || sp.temperature > 1e6f) return InvalidArgument("temperature must be >= 0");
  if (!(sp.top_p > 0.0f && sp.top_p <= 1.0f)) return InvalidArgument("top_p must be in (0, 1]");
  if (sp.top_k < 0) return InvalidArgument("top_k must be >= 0");
  if (sp.max_tokens < 1) return InvalidArgument("max_tokens must be >= 1");
  for (const std::string& s : sp.stop) {
    if (s.empty()) return InvalidArgument("stop sequences must not be empty");
  }
  auto seq = std::make_shared<Sequence>();
  if (!request.prompt_tokens.empty()) {
    seq->all = std::move(request.prompt_tokens);
  } else {
    if (request.messages.empty()) {
      // A raw prompt gets what tokenizers' encode(text) adds: the tokenizer.json post-processor's
      // special tokens (Llama 2's BOS, ...).
      seq->all = tokenizer.Encode(request.prompt, Tokenizer::AddSpecialTokens::kYes, /*parse_special=*/true);
    } else {
      // The model's chat template writes its own markers, so its text is encoded without added
      // specials (transformers' apply_chat_template(tokenize=True)). A template that fails is
      // the request's error, not a silent fallback to another format.
      Tokenizer::ChatRequest chat;
      chat.messages = request.messages;
      chat.add_generation_prompt = true;
      ROTE_ASSIGN_OR_RETURN(const std::string text, tokenizer.RenderChat(chat));
      seq->all = tokenizer.Encode(text, /*parse_special=*/true);
    }
  }
  if (seq->all.empty()) return InvalidArgument("the prompt encodes to no tokens");
  const int32_t vocab = model->config().vocab_size;
  for (int32_t id : seq->all) {
    if (id < 0 || id >= vocab) {
      return InvalidArgument("prompt token id " + std::to_string(id) + " is outside the vocabulary of " +
                             std::to_string(vocab));
    }
  }
  const int64_t len = static_cast<int64_t>(seq->all.size());
  if (len >= max_context) {
    return InvalidArgument("the prompt has " + std::to_string(len) + " tokens; the context holds " +
                           std::to_string(max_context));
  }
  const int64_t longest = std::min<int64_t>(len + sp.max_tokens, max_context);
  if (const int32_t need = MostBlocksHeld(scheduler->limits(), longest); need > blocks->num_blocks()) {
    return ResourceExhausted("the request needs up to " + std::to_string(need) +
                             " KV blocks; the cache has " + std::to_string(blocks->num_blocks()) +
                             " (raise kv_cache_bytes or lower max_tokens)");
  }
  if (!request.constraint.grammar.empty()) {
    const std::string_view builtin = grammar::BuiltinGrammar(request.constraint.grammar);
    ROTE_ASSIGN_OR_RETURN(std::shared_ptr<const grammar::CompiledGrammar> g,
                          CompiledFor(builtin.empty() ? request.constraint.grammar : std::string(builtin)));
    StatusOr<grammar::Matcher> m = grammar::Matcher::Create(std::move(g), request.constraint.allowed_globals);
    if (!m.ok()) return InvalidArgument("the request's grammar: " + m.status().message());
    seq->matcher.emplace(std::move(m).value());
    seq->closing_pieces = &grammar::ClosingPieces(request.constraint.grammar);
    seq->result.provenance.grammar_digest = GrammarDigest(request.constraint);
  }
  seq->prompt_len = seq->all.size();
  seq->sampling = sp;
  seq->sampling_key = request.sampling_key;
  seq->on_token = std::move(request.on_token);
  seq->on_prefill = std::move(request.on_prefill);
  seq->decoder = std::make_unique<StreamDecoder>(tokenizer);
  seq->result.prompt_tokens = seq->all;
  seq->result.provenance.model_digest = model->digest();
  seq->result.provenance.device = backend->device();
  seq->result.provenance.numerics_profile = backend->numerics_profile();
  seq->result.provenance.decoding = sp;
  seq->result.provenance.sampling_key = request.sampling_key;
  return seq;
}

void Engine::Impl::Enqueue(const std::vector<std::shared_ptr<Sequence>>& seqs, std::vector<RequestId>* ids) {
  {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& seq : seqs) {
      seq->id = next_id++;
      ids->push_back(seq->id);
      active[seq->id] = seq;
      scheduler->Add(seq);
    }
  }
  work_cv.notify_all();
}

StatusOr<RequestId> Engine::Submit(GenerationRequest request) {
  ROTE_ASSIGN_OR_RETURN(std::shared_ptr<Sequence> seq, impl_->Prepare(std::move(request)));
  std::vector<RequestId> ids;
  impl_->Enqueue({seq}, &ids);
  return ids[0];
}

StatusOr<std::vector<RequestId>> Engine::SubmitAll(std::vector<GenerationRequest> requests) {
  std::vector<std::shared_ptr<Sequence>> seqs;
  seqs.reserve(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    StatusOr<std::shared_ptr<Sequence>> seq = impl_->Prepare(std::move(requests[i]));
    if (!seq.ok()) return Status(seq.status().code(), "request " + std::to_string(i) + ": " + seq.status().message());
    seqs.push_back(std::move(seq).value());
  }
  std::vector<RequestId> ids;
  ids.reserve(seqs.size());
  impl_->Enqueue(seqs, &ids);
  return ids;
}

void Engine::Cancel(RequestId id) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    auto it = impl_->active.find(id);
    if (it == impl_->active.end()) return;
    it->second->cancel_requested = true;
  }
  impl_->work_cv.notify_all();
}

StatusOr<GenerationResult> Engine::Wait(RequestId id) {
  std::unique_lock<std::mutex> lock(impl_->mu);
  auto it = impl_->active.find(id);
  if (it == impl_->active.end()) return NotFound("no request " + std::to_string(id) + " (unknown or already waited for)");
  std::shared_ptr<Sequence> s = it->second;
  impl_->done_cv.wait(lock, [&] { return s->done; });
  impl_->active.erase(id);
  if (!s->error.ok()) return s->error;
  return std::move(s->result);
}

StatusOr<GenerationResult> Engine::Generate(GenerationRequest request) {
  ROTE_ASSIGN_OR_RETURN(RequestId id, Submit(std::move(request)));
  return Wait(id);
}

void Engine::Impl::SchedulerLoop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu);
      work_cv.wait(lock, [&] { return stopping || scheduler->has_work(); });
      if (stopping) {
        for (auto& s : scheduler->TakeAll()) {
          s->result.finish_reason = FinishReason::kCancelled;
          s->result.text = s->text;
          s->done = true;
        }
        done_cv.notify_all();
        return;
      }
    }
    Step();
  }
}

void Engine::Impl::Finish(const std::shared_ptr<Sequence>& s, FinishReason reason) {
  s->result.finish_reason = reason;
  s->result.text = s->text;
  scheduler->Remove(s);
  RecordOccupancy();
  std::lock_guard<std::mutex> lock(mu);
  s->done = true;
  done_cv.notify_all();
}

void Engine::Impl::Fail(const std::shared_ptr<Sequence>& s, const Status& status) {
  s->error = status;
  scheduler->Remove(s);
  RecordOccupancy();
  std::lock_guard<std::mutex> lock(mu);
  s->done = true;
  done_cv.notify_all();
}

void Engine::Impl::AdmitAndCancel() {
  {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& s : scheduler->TakeCancelledWaiting()) {
      s->result.finish_reason = FinishReason::kCancelled;
      s->result.text = s->text;
      s->done = true;
      done_cv.notify_all();
    }
    scheduler->Admit();
  }
  std::vector<std::shared_ptr<Sequence>> cancelled;
  {
    std::lock_guard<std::mutex> lock(mu);
    cancelled = scheduler->CancelledRunning();
  }
  for (auto& s : cancelled) Finish(s, FinishReason::kCancelled);
}

void Engine::Impl::Step() {
  AdmitAndCancel();
  const std::vector<StepPart> parts = scheduler->Schedule();
  for (const auto& s : scheduler->TakeUnschedulable())
    Fail(s, ResourceExhausted("one step of the request needs more than the KV cache's " +
                              std::to_string(blocks->num_blocks()) + " blocks"));
  if (parts.empty()) return;
  // A row of a constrained request chooses from its masked logits: the step takes one token per
  // row (each mask needs the token before it) and goes through ForwardMasked or the host.
  bool masked_step = false;
  for (const StepPart& p : parts)
    if (p.wants_logits && p.seq->matcher.has_value()) masked_step = true;
  const int32_t chain = masked_step ? 1 : scheduler->ChainLength(parts);
  // A step whose every sampled row is greedy, with no logits captured, needs only each row's
  // argmax: the backend picks the tokens where the logits are (ForwardGreedy; on a GPU they then
  // never cross to the host). SampleToken at temperature 0 is the same argmax, so the tokens are
  // the same either way.
  bool greedy_step = !options.capture_logits && !masked_step;
  for (const StepPart& p : parts)
    if (p.wants_logits && p.seq->sampling.temperature > 0.0f) greedy_step = false;
  // Sampled rows too are chosen where the logits are when the backend can (the CUDA backend's
  // device sampler: the same token as SampleToken, docs/numerics.md section 6).
  const bool device_sampled = !greedy_step && !options.capture_logits && backend->samples_on_device();
  const auto step_start = std::chrono::steady_clock::now();
  int64_t prefill = 0;
  int64_t sampled = 0;
  for (const StepPart& p : parts) {
    const int64_t prompt_left = static_cast<int64_t>(p.seq->prompt_len) - p.seq->computed;
    prefill += std::clamp<int64_t>(prompt_left, 0, p.n);
    sampled += p.wants_logits ? chain : 0;
  }
  std::vector<int32_t> backend_tokens;
  const Status status = Compute(parts, chain, greedy_step, device_sampled, masked_step, &backend_tokens);
  if (!status.ok()) {
    for (const StepPart& p : parts) Fail(p.seq, status);
    return;
  }
  const bool host_sampled = !greedy_step && !device_sampled;
  if (host_sampled) {
    if (masked_step) {
      step_masks.resize(MaskWords() * static_cast<size_t>(std::count_if(
                                          parts.begin(), parts.end(), [](const StepPart& p) { return p.wants_logits; })));
      FillMasks(parts, step_masks.data());
    }
    backend_tokens = SampleRows(parts, masked_step);
  }
  // Counted before the tokens are delivered: a caller whose Wait returns sees its step counted.
  RecordStep(parts.size(), prefill, sampled, std::chrono::steady_clock::now() - step_start);
  Deliver(parts, chain, host_sampled, backend_tokens);
  RecordOccupancy();
}

void Engine::Impl::RecordOccupancy() {
  std::lock_guard<std::mutex> lock(stats_mu);
  stats.kv_blocks_in_use = blocks->num_blocks() - blocks->num_free();
  stats.running = static_cast<int32_t>(scheduler->running().size());
}

void Engine::Impl::RecordStep(size_t rows, int64_t prefill_tokens, int64_t sampled_tokens,
                              std::chrono::steady_clock::duration elapsed) {
  const double seconds = std::chrono::duration<double>(elapsed).count();
  std::lock_guard<std::mutex> lock(stats_mu);
  stats.steps++;
  if (prefill_tokens > 0) stats.prefill_steps++;
  stats.prefill_tokens += prefill_tokens;
  stats.generated_tokens += sampled_tokens;
  (prefill_tokens > 0 ? stats.prefill_seconds : stats.decode_seconds) += seconds;
  if (stats.batch_size_steps.size() <= rows) stats.batch_size_steps.resize(rows + 1, 0);
  stats.batch_size_steps[rows]++;
  stats.batch_size_sum += static_cast<int64_t>(rows);
}

Status Engine::Impl::Compute(const std::vector<StepPart>& parts, int32_t chain, bool greedy_step,
                             bool device_sampled, bool masked_step, std::vector<int32_t>* backend_tokens) {
  BatchPlan plan;
  for (const StepPart& p : parts) {
    SequenceStep st;
    st.tokens = std::span<const int32_t>(p.seq->all).subspan(p.seq->computed, p.n);
    st.start_pos = p.seq->computed;
    st.block_table = p.seq->blocks;
    st.num_logits = p.wants_logits ? 1 : 0;
    plan.sequences.push_back(st);
  }
  Status status;
  if (greedy_step && chain > 1) {
    status = backend->ForwardGreedySteps(plan, chain, backend_tokens);
  } else if (greedy_step) {
    status = backend->ForwardGreedy(plan, backend_tokens);
  } else if (device_sampled) {
    std::vector<RowSampling> rules;
    for (const StepPart& p : parts)
      if (p.wants_logits) rules.push_back(RowSamplingFor(p.seq->sampling, p.seq->sampling_key, p.seq->all.size()));
    if (masked_step) {
      StepMasks masks;
      masks.words = MaskWords();
      masks.fill = [&](uint64_t* out) { FillMasks(parts, out); };
      status = backend->ForwardMasked(plan, rules, masks, backend_tokens);
    } else {
      status = backend->ForwardSampled(plan, rules, backend_tokens);
    }
  } else {
    // The logits buffer is kept across steps: no fresh pages each step.
    status = backend->Forward(plan, &step_logits);
  }
  if (status.ok() && (greedy_step || device_sampled)) {
    size_t rows = 0;
    for (const StepPart& p : parts) rows += p.wants_logits ? 1 : 0;
    if (backend_tokens->size() != rows * static_cast<size_t>(chain))
      status = Internal("backend returned " + std::to_string(backend_tokens->size()) + " tokens for " +
                        std::to_string(rows) + " rows x " + std::to_string(chain) + " steps");
  }
  return status;
}

std::vector<int32_t> Engine::Impl::SampleRows(const std::vector<StepPart>& parts, bool masked) {
  // Each row's rule reads only its own logits and keys, so the tokens do not depend on the
  // threads (a row of a 152k vocabulary takes a few ms).
  const int32_t vocab = model->config().vocab_size;
  std::vector<const StepPart*> rows;
  for (const StepPart& p : parts)
    if (p.wants_logits) rows.push_back(&p);
  std::vector<int32_t> sampled_tokens(rows.size());
  auto sample = [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const Sequence& s = *rows[static_cast<size_t>(r)]->seq;
      std::span<const float> l(step_logits.data() + r * vocab, vocab);
      const uint64_t position = s.all.size();  // where the chosen token will sit
      std::vector<float> masked_row;  // the logits stay as the model gave them (capture_logits)
      if (masked && s.matcher.has_value()) {
        masked_row.assign(l.begin(), l.end());
        const size_t words = MaskWords();
        ApplyTokenMask(masked_row, std::span<const uint64_t>(step_masks.data() + static_cast<size_t>(r) * words, words));
        l = masked_row;
      }
      sampled_tokens[static_cast<size_t>(r)] = SampleToken(l, s.sampling, s.sampling_key, position);
    }
  };
  size_t sampling_rows = 0;
  for (const StepPart* p : rows)
    sampling_rows += p->seq->sampling.temperature > 0.0f || (masked && p->seq->matcher.has_value()) ? 1 : 0;
  if (sampling_rows >= 2) {
    if (!sample_pool) sample_pool = std::make_unique<ThreadPool>(SamplingThreads());
    sample_pool->ParallelFor(static_cast<int64_t>(rows.size()), sample);
  } else {
    sample(0, static_cast<int64_t>(rows.size()));
  }
  return sampled_tokens;
}

void Engine::Impl::Deliver(const std::vector<StepPart>& parts, int32_t chain, bool host_sampled,
                           const std::vector<int32_t>& tokens) {
  const int32_t vocab = model->config().vocab_size;
  const AcceptRules rules = Rules();
  // In a chained run every part decodes one token a step (Scheduler::ChainLength), and a request
  // that finished at an earlier step takes no more.
  std::vector<bool> finished(parts.size(), false);
  size_t row = 0;
  for (int32_t step = 0; step < chain; ++step) {
    for (size_t i = 0; i < parts.size(); ++i) {
      const StepPart& p = parts[i];
      const size_t this_row = row;
      if (p.wants_logits) ++row;
      if (finished[i]) continue;
      const bool read_prompt = static_cast<size_t>(p.seq->computed) < p.seq->prompt_len;
      scheduler->Advance(*p.seq, p.n);
      if (read_prompt && p.seq->on_prefill) {
        const int32_t prompt = static_cast<int32_t>(p.seq->prompt_len);
        p.seq->on_prefill(std::min(p.seq->computed, prompt), prompt);
      }
      if (!p.wants_logits) continue;
      std::vector<float> captured;
      if (host_sampled && options.capture_logits)
        captured.assign(step_logits.begin() + this_row * vocab, step_logits.begin() + (this_row + 1) * vocab);
      // A constrained request's matcher takes the token the mask allowed; a token it refuses
      // (the mask allowed none, or NaN logits left only forbidden ones) ends the request
      // without it.
      if (p.seq->matcher.has_value() && !p.seq->matcher->AcceptToken(tokens[this_row])) {
        p.seq->text += p.seq->decoder->Finish();
        Finish(p.seq, FinishReason::kGrammarDeadEnd);
        finished[i] = true;
        continue;
      }
      if (p.seq->closing.has_value()) {
        // The token was a prefix of the plan (the mask allowed nothing else).
        const size_t n = std::min(p.seq->closing->size(), tokenizer.TokenBytes(tokens[this_row]).size());
        p.seq->closing->erase(0, n);
      }
      TokenEvent event;
      const std::optional<FinishReason> finish = p.seq->Accept(tokens[this_row], &captured, rules, &event);
      // Stream before Finish marks the request done, so Wait never returns ahead of its tokens.
      if (p.seq->on_token) p.seq->on_token(event);
      if (finish.has_value()) {
        Finish(p.seq, *finish);
        finished[i] = true;
      }
    }
  }
}

}  // namespace rote::inference
