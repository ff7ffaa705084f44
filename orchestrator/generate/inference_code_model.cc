#include "orchestrator/generate/inference_code_model.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"

namespace rote::orchestrator::generate {

absl::Status FromInference(const inference::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.code()), status.message());
}

InferenceCodeModel::InferenceCodeModel(std::unique_ptr<inference::EngineGroup> engines)
    : engines_(std::move(engines)) {}
namespace {
std::unique_ptr<inference::EngineGroup> GroupOfOne(std::unique_ptr<inference::Engine> engine) {
  std::vector<std::unique_ptr<inference::Engine>> one;
  one.push_back(std::move(engine));
  return std::move(inference::EngineGroup::Create(std::move(one))).value();  // one engine: never refused
}
}  // namespace

InferenceCodeModel::InferenceCodeModel(std::unique_ptr<inference::Engine> engine)
    : engines_(GroupOfOne(std::move(engine))) {}
InferenceCodeModel::~InferenceCodeModel() = default;

absl::StatusOr<std::unique_ptr<InferenceCodeModel>> InferenceCodeModel::Load(const std::string& model_dir,
                                                                             const std::string& device,
                                                                             const inference::EngineOptions& base) {
  inference::DeviceSet devices;
  if (inference::Status s = inference::ParseDeviceSet(device, &devices); !s.ok())
    return absl::InvalidArgumentError(s.message());
  inference::StatusOr<std::unique_ptr<inference::EngineGroup>> engines =
      inference::EngineGroup::Load(model_dir, devices, base);
  if (!engines.ok()) return FromInference(engines.status());
  return std::make_unique<InferenceCodeModel>(std::move(*engines));
}

ModelIdentity InferenceCodeModel::identity() const {
  ModelIdentity id;
  id.digest = absl::StrCat("sha256:", engine().model().digest());
  id.numerics_profile = engine().numerics_profile();  // "exact", or the fast profile's versioned name
  id.device = engines_->device();
  return id;
}

ModelDescription InferenceCodeModel::Describe() const {
  const inference::Model& m = engine().model();
  const inference::ModelConfig& c = m.config();
  ModelDescription d;
  d.family = std::string(inference::ModelFamilyName(c.family));
  d.directory = m.dir();
  const ModelIdentity id = identity();
  d.digest = id.digest;
  d.device = id.device;
  d.numerics_profile = id.numerics_profile;
  d.num_layers = c.num_layers;
  d.hidden_size = c.hidden_size;
  d.vocab_size = c.vocab_size;
  d.parameter_count = m.weights().parameter_count(c.tie_word_embeddings);
  return d;
}

namespace {
std::vector<inference::ChatMessage> ToChat(const std::vector<ChatTurn>& turns) {
  std::vector<inference::ChatMessage> out;
  out.reserve(turns.size());
  for (const ChatTurn& t : turns) out.push_back({t.role, t.content});
  return out;
}
}  // namespace

std::string InferenceCodeModel::RenderPrompt(const std::vector<ChatTurn>& messages) const {
  // The same call the engine makes for a request given as messages.
  return engine().tokenizer().ApplyChatTemplate(ToChat(messages), /*add_generation_prompt=*/true);
}

std::vector<absl::StatusOr<Completion>> InferenceCodeModel::CompleteAll(std::vector<CompletionRequest> requests,
                                                                        const std::function<bool()>& cancelled) {
  // Tokens arrive on the scheduler thread, which must not block: it only appends here, and
  // this thread hands the text to the callers.
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::string> pending;
    std::vector<int32_t> tokens;
    std::vector<int32_t> prefill_read, prefill_of, prefill_told;  // prompt tokens read, prompt length, last relayed
    bool all_done = false;
  };
  auto shared = std::make_shared<Shared>();
  const size_t n = requests.size();
  shared->pending.resize(n);
  shared->tokens.assign(n, 0);
  shared->prefill_read.assign(n, 0);
  shared->prefill_of.assign(n, 0);
  shared->prefill_told.assign(n, 0);

  std::vector<absl::StatusOr<Completion>> results(n, absl::InternalError("not submitted"));
  std::vector<std::optional<inference::RequestId>> ids(n);
  std::vector<inference::GenerationRequest> built;
  built.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    inference::GenerationRequest r;
    r.messages = ToChat(requests[i].messages);
    r.sampling.temperature = requests[i].decoding.temperature;
    r.sampling.top_k = requests[i].decoding.top_k;
    r.sampling.top_p = requests[i].decoding.top_p;
    r.sampling.seed = requests[i].decoding.seed;
    r.sampling.max_tokens = requests[i].decoding.max_tokens;
    r.sampling_key = requests[i].sampling_key;
    r.constraint.grammar = requests[i].constraint.grammar;
    r.constraint.allowed_globals = requests[i].constraint.allowed_globals;
    r.on_prefill = [shared, i](int32_t read, int32_t prompt) {
      {
        std::lock_guard lock(shared->mu);
        shared->prefill_read[i] = read;
        shared->prefill_of[i] = prompt;
      }
      shared->cv.notify_all();
    };
    r.on_token = [shared, i](const inference::TokenEvent& e) {
      {
        std::lock_guard lock(shared->mu);
        shared->pending[i] += e.text;
        shared->tokens[i] = e.index + 1;
      }
      shared->cv.notify_all();
    };
    built.push_back(std::move(r));
  }
  // Together, so that the engine's first step holds every candidate; if one is refused, each
  // alone, so that the others still run and the refused one gets its own error.
  const int64_t submitted_ms = UnixNowMs();
  std::vector<inference::GenerationRequest> copies = built;
  inference::StatusOr<std::vector<inference::RequestId>> together = engines_->SubmitAll(std::move(copies));
  if (together.ok()) {
    for (size_t i = 0; i < n; ++i) ids[i] = (*together)[i];
  } else {
    for (size_t i = 0; i < n; ++i) {
      inference::StatusOr<inference::RequestId> id = engines_->Submit(std::move(built[i]));
      if (id.ok()) {
        ids[i] = *id;
      } else {
        results[i] = FromInference(id.status());
      }
    }
  }

  std::thread waiter([&] {
    for (size_t i = 0; i < n; ++i) {
      if (!ids[i]) continue;
      inference::StatusOr<inference::GenerationResult> r = engines_->Wait(*ids[i]);
      if (!r.ok()) {
        results[i] = FromInference(r.status());
        continue;
      }
      Completion c;
      c.text = r->text;
      c.tokens = static_cast<int32_t>(r->tokens.size());
      c.finish_reason = inference::FinishReasonName(r->finish_reason);
      c.grammar_digest = r->provenance.grammar_digest;
      c.prompt_tokens = static_cast<int32_t>(r->prompt_tokens.size());
      c.start_ms = submitted_ms;
      c.duration_ms = std::max<int64_t>(0, UnixNowMs() - submitted_ms);
      results[i] = std::move(c);
    }
    {
      std::lock_guard lock(shared->mu);
      shared->all_done = true;
    }
    shared->cv.notify_all();
  });

  bool cancel_sent = false;
  std::unique_lock lock(shared->mu);
  for (;;) {
    shared->cv.wait_for(lock, std::chrono::milliseconds(100));
    const bool finished = shared->all_done;
    for (size_t i = 0; i < n; ++i) {
      if (shared->prefill_read[i] > shared->prefill_told[i]) {
        const int32_t read = shared->prefill_read[i], prompt = shared->prefill_of[i];
        shared->prefill_told[i] = read;
        if (requests[i].on_prefill) {
          lock.unlock();
          requests[i].on_prefill(read, prompt);
          lock.lock();
        }
      }
      if (shared->pending[i].empty()) continue;
      std::string text = std::move(shared->pending[i]);
      shared->pending[i].clear();
      const int32_t tokens = shared->tokens[i];
      if (requests[i].on_text) {
        lock.unlock();
        requests[i].on_text(text, tokens);
        lock.lock();
      }
    }
    if (finished) break;
    if (!cancel_sent && cancelled && cancelled()) {
      cancel_sent = true;
      lock.unlock();
      for (const std::optional<inference::RequestId>& id : ids) {
        if (id) engines_->Cancel(*id);
      }
      lock.lock();
    }
  }
  lock.unlock();
  waiter.join();
  return results;
}

}  // namespace rote::orchestrator::generate
