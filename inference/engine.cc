// The engine: request bookkeeping, the scheduler thread (continuous batching with chunked
// prefill over a paged KV cache, preemption by recomputation), sampling and streaming.
// Nothing here touches a number the backend computes except to choose tokens, so batch
// invariance of the logits carries over to the tokens.
#include "inference/engine.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "inference/util/thread_pool.h"
#include "inference/cuda/cuda_backend.h"
#include "inference/kv_block_manager.h"

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

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kEndOfSequence: return "eos";
    case FinishReason::kStopSequence: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
  }
  return "unknown";
}

namespace {

int32_t BlocksFor(int64_t positions) { return static_cast<int32_t>((positions + kKvBlockSize - 1) / kKvBlockSize); }

struct Sequence {
  RequestId id = 0;
  SamplingParams sampling;
  uint64_t sampling_key = 0;
  TokenCallback on_token;
  std::vector<int32_t> all;  // prompt, then generated tokens
  size_t prompt_len = 0;
  int32_t computed = 0;      // positions whose K/V are in the cache
  std::vector<int32_t> blocks;
  std::unique_ptr<StreamDecoder> decoder;
  std::string text;          // decoded output so far
  size_t emitted = 0;        // bytes of text already streamed
  GenerationResult result;
  Status error;
  bool cancel_requested = false;  // guarded by Impl::mu
  bool done = false;              // guarded by Impl::mu
};

}  // namespace

struct Engine::Impl {
  std::shared_ptr<const Model> model;
  Tokenizer tokenizer;
  std::unique_ptr<Backend> backend;
  EngineOptions options;
  int32_t max_context = 0;
  std::vector<int32_t> stop_tokens;  // sorted
  std::unique_ptr<KvBlockManager> blocks;  // scheduler thread only
  std::vector<float> step_logits;          // scheduler thread only: the last step's logits
  std::unique_ptr<ThreadPool> sample_pool;  // scheduler thread only: sampled rows in parallel
  // Threads that sample a step's rows: the machine's cores, at most 16 (a step has at most
  // max_batch rows).
  int SamplingThreads() const {
    return static_cast<int>(std::clamp<unsigned>(std::thread::hardware_concurrency(), 1u, 16u));
  }
  // Prefix sharing (scheduler thread only): a full block is known by its parent block id and
  // its 16 tokens. Blocks keep their key after their last user leaves (a cache) until they are
  // allocated again; then their key and every descendant's key are forgotten, so a key never
  // names a block whose content or parent changed.
  std::map<std::vector<int32_t>, int32_t> prefix_blocks;
  std::map<int32_t, std::vector<int32_t>> block_keys;
  std::multimap<int32_t, int32_t> block_children;  // parent block -> child blocks with keys

  std::mutex mu;
  std::condition_variable work_cv;
  std::condition_variable done_cv;
  std::deque<std::shared_ptr<Sequence>> waiting;          // guarded by mu
  std::map<RequestId, std::shared_ptr<Sequence>> active;  // guarded by mu: submitted, not yet waited
  RequestId next_id = 1;                                   // guarded by mu
  bool stopping = false;                                   // guarded by mu
  std::vector<std::shared_ptr<Sequence>> running;          // scheduler thread only, admission order
  std::thread scheduler;

  Impl(std::shared_ptr<const Model> m, Tokenizer t) : model(std::move(m)), tokenizer(std::move(t)) {}

  // Validates a request and builds its sequence (no id yet); errors as Submit's.
  StatusOr<std::shared_ptr<Sequence>> Prepare(GenerationRequest request);
  // Gives the sequences their ids and queues them together, under one lock: the scheduler sees
  // all of them or none.
  void Enqueue(const std::vector<std::shared_ptr<Sequence>>& seqs, std::vector<RequestId>* ids);
  void SchedulerLoop();
  // One sequence's share of a step: n new tokens, and whether its last one's logits are wanted.
  struct Part {
    std::shared_ptr<Sequence> seq;
    int32_t n;
    bool wants_logits;
  };
  void Step();
  // How many greedy steps the step planned as `parts` runs in one backend call (1: just itself;
  // EngineOptions::greedy_chain_steps), its blocks taken.
  int32_t ChainLength(const std::vector<Part>& parts);
  void Finish(const std::shared_ptr<Sequence>& s, FinishReason reason);
  void Fail(const std::shared_ptr<Sequence>& s, const Status& status);
  void Preempt(const std::shared_ptr<Sequence>& s);
  void ReleaseBlocks(Sequence& s);
  std::optional<int32_t> AllocateBlock();
  void ForgetBlock(int32_t block);
  std::vector<int32_t> BlockKey(const Sequence& s, size_t block_index) const;
  void ShareCachedPrefix(Sequence& s);
  void RegisterFullBlocks(const Sequence& s, int32_t computed_before);
  // Appends a chosen token, fills the event to stream; returns why the sequence ends, if it does.
  std::optional<FinishReason> Accept(Sequence& s, int32_t token, std::vector<float>* logits, TokenEvent* ev);
};

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

StatusOr<std::unique_ptr<Engine>> Engine::Load(const std::string& model_dir, const EngineOptions& options) {
  ROTE_ASSIGN_OR_RETURN(std::shared_ptr<const Model> model, Model::Load(model_dir, options.known_model_digest));
  ROTE_ASSIGN_OR_RETURN(Tokenizer tokenizer, Tokenizer::Load(model_dir));
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
  impl->backend = std::move(backend);
  impl->stop_tokens = impl->tokenizer.stop_token_ids();
  for (int32_t id : impl->model->config().eos_token_ids) impl->stop_tokens.push_back(id);
  std::sort(impl->stop_tokens.begin(), impl->stop_tokens.end());
  impl->stop_tokens.erase(std::unique(impl->stop_tokens.begin(), impl->stop_tokens.end()), impl->stop_tokens.end());
  Impl* raw = impl.get();
  impl->scheduler = std::thread([raw] { raw->SchedulerLoop(); });
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stopping = true;
  }
  impl_->work_cv.notify_all();
  impl_->scheduler.join();
}

const Model& Engine::model() const { return *impl_->model; }
const Tokenizer& Engine::tokenizer() const { return impl_->tokenizer; }
std::string Engine::device() const { return impl_->backend->device(); }
std::string Engine::numerics_profile() const { return impl_->backend->numerics_profile(); }
int32_t Engine::kv_blocks() const { return impl_->blocks->num_blocks(); }  // never resized after Create
int64_t Engine::kv_cache_bytes() const { return int64_t{kv_blocks()} * impl_->backend->KvBytesPerBlock(); }

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
    const std::string text = request.messages.empty()
                                 ? request.prompt
                                 : tokenizer.ApplyChatTemplate(request.messages, /*add_generation_prompt=*/true);
    // A raw prompt starts with the family's BOS when it has one (Llama 3), as HF's encode does;
    // the chat template writes its own markers.
    if (request.messages.empty() && tokenizer.bos_id().has_value()) seq->all.push_back(*tokenizer.bos_id());
    const std::vector<int32_t> ids = tokenizer.Encode(text, /*parse_special=*/true);
    seq->all.insert(seq->all.end(), ids.begin(), ids.end());
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
  if (BlocksFor(longest) > blocks->num_blocks()) {
    return ResourceExhausted("the request needs up to " + std::to_string(BlocksFor(longest)) +
                             " KV blocks; the cache has " + std::to_string(blocks->num_blocks()) +
                             " (raise kv_cache_bytes or lower max_tokens)");
  }
  seq->prompt_len = seq->all.size();
  seq->sampling = sp;
  seq->sampling_key = request.sampling_key;
  seq->on_token = std::move(request.on_token);
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
      waiting.push_back(seq);
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
      work_cv.wait(lock, [&] { return stopping || !waiting.empty() || !running.empty(); });
      if (stopping) {
        for (auto& s : waiting) running.push_back(s);
        waiting.clear();
        for (auto& s : running) {
          s->result.finish_reason = FinishReason::kCancelled;
          s->result.text = s->text;
          s->done = true;
        }
        running.clear();
        done_cv.notify_all();
        return;
      }
    }
    Step();
  }
}

void Engine::Impl::ReleaseBlocks(Sequence& s) {
  for (int32_t b : s.blocks) blocks->Release(b);
  s.blocks.clear();
  s.computed = 0;
}

void Engine::Impl::ForgetBlock(int32_t block) {
  auto it = block_keys.find(block);
  if (it == block_keys.end()) return;
  const int32_t parent = it->second[0];
  prefix_blocks.erase(it->second);
  block_keys.erase(it);
  for (auto [c, end] = block_children.equal_range(parent); c != end; ++c) {
    if (c->second == block) {
      block_children.erase(c);
      break;
    }
  }
  std::vector<int32_t> children;
  for (auto [c, end] = block_children.equal_range(block); c != end; ++c) children.push_back(c->second);
  for (int32_t child : children) ForgetBlock(child);
}

std::optional<int32_t> Engine::Impl::AllocateBlock() {
  std::optional<int32_t> b = blocks->Allocate();
  if (b.has_value()) ForgetBlock(*b);  // its cached content is about to be overwritten
  return b;
}

std::vector<int32_t> Engine::Impl::BlockKey(const Sequence& s, size_t block_index) const {
  std::vector<int32_t> key;
  key.reserve(kKvBlockSize + 1);
  key.push_back(block_index == 0 ? -1 : s.blocks[block_index - 1]);
  key.insert(key.end(), s.all.begin() + block_index * kKvBlockSize, s.all.begin() + (block_index + 1) * kKvBlockSize);
  return key;
}

void Engine::Impl::ShareCachedPrefix(Sequence& s) {
  if (!options.prefix_sharing || s.computed != 0 || !s.blocks.empty()) return;
  // At least the last token is always computed: its logits choose the next token.
  const size_t shareable = (s.all.size() - 1) / kKvBlockSize;
  for (size_t b = 0; b < shareable; ++b) {
    auto it = prefix_blocks.find(BlockKey(s, b));
    if (it == prefix_blocks.end()) break;
    blocks->Revive(it->second);
    s.blocks.push_back(it->second);
  }
  s.computed = static_cast<int32_t>(s.blocks.size()) * kKvBlockSize;
  s.result.prompt_tokens_reused = std::max(s.result.prompt_tokens_reused, s.computed);
}

void Engine::Impl::RegisterFullBlocks(const Sequence& s, int32_t computed_before) {
  if (!options.prefix_sharing) return;
  for (int32_t b = computed_before / kKvBlockSize; b < s.computed / kKvBlockSize; ++b) {
    if (block_keys.count(s.blocks[b])) continue;  // already known (a shared block)
    std::vector<int32_t> key = BlockKey(s, static_cast<size_t>(b));
    if (prefix_blocks.count(key)) continue;  // another sequence computed the same prefix first
    prefix_blocks.emplace(key, s.blocks[b]);
    block_children.emplace(key[0], s.blocks[b]);
    block_keys.emplace(s.blocks[b], std::move(key));
  }
}

void Engine::Impl::Preempt(const std::shared_ptr<Sequence>& s) {
  // Recomputation gives the same K/V bits (batch invariance), so a preempted sequence resumes
  // exactly where it was.
  ReleaseBlocks(*s);
  running.erase(std::find(running.begin(), running.end(), s));
  std::lock_guard<std::mutex> lock(mu);
  waiting.push_front(s);
}

void Engine::Impl::Finish(const std::shared_ptr<Sequence>& s, FinishReason reason) {
  s->result.finish_reason = reason;
  s->result.text = s->text;
  ReleaseBlocks(*s);
  running.erase(std::find(running.begin(), running.end(), s));
  std::lock_guard<std::mutex> lock(mu);
  s->done = true;
  done_cv.notify_all();
}

void Engine::Impl::Fail(const std::shared_ptr<Sequence>& s, const Status& status) {
  s->error = status;
  ReleaseBlocks(*s);
  running.erase(std::find(running.begin(), running.end(), s));
  std::lock_guard<std::mutex> lock(mu);
  s->done = true;
  done_cv.notify_all();
}

std::optional<FinishReason> Engine::Impl::Accept(Sequence& s, int32_t token, std::vector<float>* logits,
                                                 TokenEvent* ev) {
  s.all.push_back(token);
  s.result.tokens.push_back(token);
  if (options.capture_logits) s.result.step_logits.push_back(std::move(*logits));
  ev->token = token;
  ev->index = static_cast<int32_t>(s.result.tokens.size()) - 1;
  std::optional<FinishReason> finish;
  const bool is_stop_token =
      !s.sampling.ignore_eos && std::binary_search(stop_tokens.begin(), stop_tokens.end(), token);
  if (is_stop_token) {
    finish = FinishReason::kEndOfSequence;
  } else {
    s.text += s.decoder->Push(token);
    // A stop sequence ends the output where it begins; text that could still become one is
    // held back from the stream until it cannot.
    size_t longest_stop = 0;
    for (const std::string& st : s.sampling.stop) longest_stop = std::max(longest_stop, st.size());
    const size_t from = s.emitted > longest_stop ? s.emitted - longest_stop : 0;
    size_t cut = std::string::npos;
    for (const std::string& st : s.sampling.stop) cut = std::min(cut, s.text.find(st, from));
    if (cut != std::string::npos) {
      s.text.resize(cut);
      finish = FinishReason::kStopSequence;
    }
  }
  if (!finish.has_value()) {
    if (static_cast<int32_t>(s.result.tokens.size()) >= s.sampling.max_tokens ||
        static_cast<int64_t>(s.all.size()) >= max_context) {
      finish = FinishReason::kLength;
    }
  }
  if (finish.has_value() && *finish != FinishReason::kStopSequence) s.text += s.decoder->Finish();
  size_t safe = s.text.size();
  if (!finish.has_value()) {
    size_t held = 0;
    for (const std::string& st : s.sampling.stop) {
      for (size_t k = std::min(st.size() - 1, s.text.size()); k > held; --k) {
        if (s.text.compare(s.text.size() - k, k, st, 0, k) == 0) {
          held = k;
          break;
        }
      }
    }
    safe = s.text.size() - held;
  }
  if (safe > s.emitted) {
    ev->text = s.text.substr(s.emitted, safe - s.emitted);
    s.emitted = safe;
  }
  return finish;
}

void Engine::Impl::Step() {
  // Admission and cancellation, under the lock.
  {
    std::lock_guard<std::mutex> lock(mu);
    for (auto it = waiting.begin(); it != waiting.end();) {
      if ((*it)->cancel_requested) {
        (*it)->result.finish_reason = FinishReason::kCancelled;
        (*it)->result.text = (*it)->text;
        (*it)->done = true;
        it = waiting.erase(it);
        done_cv.notify_all();
      } else {
        ++it;
      }
    }
    while (!waiting.empty() && static_cast<int32_t>(running.size()) < options.max_batch) {
      const auto& s = waiting.front();
      // Admit only when its current tokens fit in the free blocks, so a new arrival does not
      // immediately force a preemption.
      if (BlocksFor(static_cast<int64_t>(s->all.size()) + 1) > blocks->num_free() && !running.empty()) break;
      ShareCachedPrefix(*s);
      running.push_back(s);
      waiting.pop_front();
    }
  }
  std::vector<std::shared_ptr<Sequence>> cancelled;
  {
    std::lock_guard<std::mutex> lock(mu);
    for (auto& s : running) {
      if (s->cancel_requested) cancelled.push_back(s);
    }
  }
  for (auto& s : cancelled) Finish(s, FinishReason::kCancelled);
  if (running.empty()) return;

  // Plan: every decoding sequence takes one token, then prefilling sequences take chunks
  // while the step's token budget lasts.
  std::vector<Part> parts;
  int32_t budget = options.max_step_tokens;
  for (int pass = 0; pass < 2; ++pass) {
    for (auto& s : running) {
      const int32_t remaining = static_cast<int32_t>(s->all.size()) - s->computed;
      const bool decoding = remaining == 1;
      if ((pass == 0) != decoding || budget == 0) continue;
      const int32_t n = std::min({remaining, options.prefill_chunk, budget});
      budget -= n;
      parts.push_back({s, n, s->computed + n == static_cast<int32_t>(s->all.size())});
    }
  }
  // Blocks for every part's positions; when the cache is full, the most recently admitted
  // sequence is preempted (possibly the one asking).
  for (size_t i = 0; i < parts.size(); ++i) {
    Sequence& s = *parts[i].seq;
    bool dropped_self = false;
    while (BlocksFor(s.computed + parts[i].n) > static_cast<int32_t>(s.blocks.size())) {
      std::optional<int32_t> b = AllocateBlock();
      if (b.has_value()) {
        s.blocks.push_back(*b);
        continue;
      }
      std::shared_ptr<Sequence> victim = running.back();
      auto pit = std::find_if(parts.begin(), parts.end(), [&](const Part& p) { return p.seq == victim; });
      const size_t victim_index = static_cast<size_t>(pit - parts.begin());
      if (pit != parts.end()) parts.erase(pit);
      Preempt(victim);
      if (victim.get() == &s) {
        dropped_self = true;
        break;
      }
      if (victim_index < i) --i;  // the victim's part came earlier in the plan
    }
    if (dropped_self) --i;
  }
  if (parts.empty()) return;
  const int32_t chain = ChainLength(parts);

  BatchPlan plan;
  for (const Part& p : parts) {
    SequenceStep st;
    st.tokens = std::span<const int32_t>(p.seq->all).subspan(p.seq->computed, p.n);
    st.start_pos = p.seq->computed;
    st.block_table = p.seq->blocks;
    st.num_logits = p.wants_logits ? 1 : 0;
    plan.sequences.push_back(st);
  }
  // A step whose every sampled row is greedy, with no logits captured, needs only each row's
  // argmax: the backend picks the tokens where the logits are (ForwardGreedy; on a GPU they then
  // never cross to the host). SampleToken at temperature 0 is the same argmax, so the tokens are
  // the same either way.
  bool greedy_step = !options.capture_logits;
  for (const Part& p : parts)
    if (p.wants_logits && p.seq->sampling.temperature > 0.0f) greedy_step = false;
  // Sampled rows too are chosen where the logits are when the backend can (the CUDA backend's
  // device sampler: the same token as SampleToken, docs/numerics.md section 6).
  const bool device_sampled = !greedy_step && !options.capture_logits && backend->samples_on_device();
  std::vector<float>& logits = step_logits;  // kept across steps: no fresh pages each step
  std::vector<int32_t> backend_tokens;
  Status status;
  if (greedy_step && chain > 1) {
    status = backend->ForwardGreedySteps(plan, chain, &backend_tokens);
  } else if (greedy_step) {
    status = backend->ForwardGreedy(plan, &backend_tokens);
  } else if (device_sampled) {
    std::vector<RowSampling> rules;
    for (const Part& p : parts)
      if (p.wants_logits) rules.push_back(RowSamplingFor(p.seq->sampling, p.seq->sampling_key, p.seq->all.size()));
    status = backend->ForwardSampled(plan, rules, &backend_tokens);
  } else {
    status = backend->Forward(plan, &logits);
  }
  if (status.ok() && (greedy_step || device_sampled)) {
    size_t rows = 0;
    for (const Part& p : parts) rows += p.wants_logits ? 1 : 0;
    if (backend_tokens.size() != rows * static_cast<size_t>(chain))
      status = Internal("backend returned " + std::to_string(backend_tokens.size()) + " tokens for " +
                        std::to_string(rows) + " rows x " + std::to_string(chain) + " steps");
  }
  if (!status.ok()) {
    for (const Part& p : parts) Fail(p.seq, status);
    return;
  }
  const int32_t vocab = model->config().vocab_size;
  // The sampled rows' tokens, rows in parallel: each row's rule reads only its own logits and
  // keys, so the tokens do not depend on the threads (a row of a 152k vocabulary takes a few ms).
  std::vector<int32_t> sampled_tokens;
  if (!greedy_step && !device_sampled) {
    std::vector<const Part*> rows;
    for (const Part& p : parts)
      if (p.wants_logits) rows.push_back(&p);
    sampled_tokens.resize(rows.size());
    auto sample = [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const Sequence& s = *rows[static_cast<size_t>(r)]->seq;
        const std::span<const float> l(logits.data() + r * vocab, vocab);
        const uint64_t position = s.all.size();  // where the chosen token will sit
        sampled_tokens[static_cast<size_t>(r)] = SampleToken(l, s.sampling, s.sampling_key, position);
      }
    };
    size_t sampling_rows = 0;
    for (const Part* p : rows) sampling_rows += p->seq->sampling.temperature > 0.0f ? 1 : 0;
    if (sampling_rows >= 2) {
      if (!sample_pool) sample_pool = std::make_unique<ThreadPool>(SamplingThreads());
      sample_pool->ParallelFor(static_cast<int64_t>(rows.size()), sample);
    } else {
      sample(0, static_cast<int64_t>(rows.size()));
    }
  }
  // Step after step of a chained run (one step otherwise): in a chained run every part decodes one
  // token a step (ChainLength), and a request that finished at an earlier step takes no more.
  std::vector<bool> finished(parts.size(), false);
  size_t row = 0;
  for (int32_t step = 0; step < chain; ++step) {
    for (size_t i = 0; i < parts.size(); ++i) {
      const Part& p = parts[i];
      const size_t this_row = row;
      if (p.wants_logits) ++row;
      if (finished[i]) continue;
      const int32_t before = p.seq->computed;
      p.seq->computed += p.n;
      RegisterFullBlocks(*p.seq, before);
      if (!p.wants_logits) continue;
      int32_t token = 0;
      std::vector<float> captured;
      if (greedy_step || device_sampled) {
        token = backend_tokens[this_row];
      } else {
        token = sampled_tokens[this_row];
        if (options.capture_logits)
          captured.assign(logits.begin() + this_row * vocab, logits.begin() + (this_row + 1) * vocab);
      }
      TokenEvent event;
      const std::optional<FinishReason> finish = Accept(*p.seq, token, &captured, &event);
      // Stream before Finish marks the request done, so Wait never returns ahead of its tokens.
      if (p.seq->on_token) p.seq->on_token(event);
      if (finish.has_value()) {
        Finish(p.seq, *finish);
        finished[i] = true;
      }
    }
  }
}

int32_t Engine::Impl::ChainLength(const std::vector<Part>& parts) {
  if (options.greedy_chain_steps <= 1 || options.capture_logits) return 1;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!waiting.empty()) return 1;  // an arrival is admitted at the next step, as without chaining
  }
  int64_t run = options.greedy_chain_steps;
  for (const Part& p : parts) {
    const Sequence& s = *p.seq;
    if (p.n != 1 || !p.wants_logits || s.sampling.temperature > 0.0f) return 1;
    // No request may reach its length limit before the run's last step (a stop token or sequence
    // may: the tokens past it are dropped).
    run = std::min<int64_t>(run, static_cast<int64_t>(s.sampling.max_tokens) - static_cast<int64_t>(s.result.tokens.size()));
    run = std::min<int64_t>(run, static_cast<int64_t>(max_context) - static_cast<int64_t>(s.all.size()));
  }
  // Blocks for every step's position, taken only where free (a run never preempts).
  for (const Part& p : parts) {
    Sequence& s = *p.seq;
    while (run > 1 && BlocksFor(s.computed + run) > static_cast<int32_t>(s.blocks.size())) {
      std::optional<int32_t> b = AllocateBlock();
      if (!b.has_value()) {
        run = std::min<int64_t>(run, static_cast<int64_t>(s.blocks.size()) * kKvBlockSize - s.computed);
        break;
      }
      s.blocks.push_back(*b);
    }
  }
  return static_cast<int32_t>(std::max<int64_t>(run, 1));
}

}  // namespace rote::inference
