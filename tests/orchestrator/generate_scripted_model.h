// A scripted stand-in for the inference engine: the generation pipeline's tests decide what
// "the model" answers to each prompt. Like the real engine in its exact profile, an answer
// depends only on the prompt, never on what else is in the batch.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "orchestrator/generate/code_model.h"

namespace rote::orchestrator::generate::testing {

// The generation point's name ("Name: ..." in the first user turn) and the attempt number of a
// prompt: 1, or k + 1 when the last user turn says "Your attempt k was refused".
inline std::pair<std::string, int> PointAndAttempt(const std::vector<ChatTurn>& messages) {
  std::string name;
  int attempt = 1;
  for (const ChatTurn& t : messages) {
    if (t.role != "user") continue;
    if (name.empty() && t.content.rfind("Name: ", 0) == 0) name = t.content.substr(6, t.content.find('\n') - 6);
    if (t.content.rfind("Your attempt ", 0) == 0) attempt = std::stoi(t.content.substr(13)) + 1;
  }
  return {name, attempt};
}

class ScriptedCodeModel final : public CodeModel {
 public:
  using Script = std::function<std::string(const std::vector<ChatTurn>& messages)>;

  explicit ScriptedCodeModel(Script script, std::string digest = std::string("sha256:") + std::string(64, 'a'))
      : script_(std::move(script)), digest_(std::move(digest)) {}

  // Answers by (point name, attempt); a missing entry answers with prose and no code.
  static Script Table(std::map<std::pair<std::string, int>, std::string> table) {
    return [table = std::move(table)](const std::vector<ChatTurn>& messages) {
      auto it = table.find(PointAndAttempt(messages));
      return it == table.end() ? std::string("I am not sure what you mean.") : it->second;
    };
  }

  ModelIdentity identity() const override { return ModelIdentity{digest_, "exact", "scripted"}; }

  std::string RenderPrompt(const std::vector<ChatTurn>& messages) const override {
    std::string out;
    for (const ChatTurn& t : messages) out += "<|" + t.role + "|>\n" + t.content + "\n";
    return out + "<|assistant|>\n";
  }

  std::vector<absl::StatusOr<Completion>> CompleteAll(std::vector<CompletionRequest> requests,
                                                      const std::function<bool()>& cancelled) override {
    {
      std::unique_lock lock(mu_);
      batch_sizes_.push_back(requests.size());
      calls_ += static_cast<int>(requests.size());
      for (const CompletionRequest& r : requests) {
        decodings_.push_back({r.decoding.temperature, r.sampling_key});
        constraints_.push_back(r.constraint);
      }
      ++entered_;
      entered_cv_.notify_all();
      gate_cv_.wait(lock, [&] { return open_; });
    }
    std::vector<absl::StatusOr<Completion>> out;
    for (CompletionRequest& r : requests) {
      if (cancelled && cancelled()) {
        out.push_back(Completion{"", 0, "cancelled", 0, 0, 0});
        continue;
      }
      std::string text = script_(r.messages);
      const int32_t tokens = static_cast<int32_t>(text.size() / 4 + 1);
      if (r.on_text) r.on_text(text, tokens);
      // Prompt tokens as a real tokenizer might count them; times left to the pipeline.
      const int32_t prompt_tokens = static_cast<int32_t>(RenderPrompt(r.messages).size() / 4 + 1);
      out.push_back(Completion{std::move(text), tokens, "eos", prompt_tokens, 0, 0});
    }
    return out;
  }

  // Prompts answered so far, and the size of each CompleteAll batch.
  int calls() const {
    std::lock_guard lock(mu_);
    return calls_;
  }
  // (temperature, sampling key) of every request, in the order they came.
  std::vector<std::pair<float, uint64_t>> decodings() const {
    std::lock_guard lock(mu_);
    return decodings_;
  }
  // The constraint of every request, in the order they came.
  std::vector<CompletionConstraint> constraints() const {
    std::lock_guard lock(mu_);
    return constraints_;
  }
  std::vector<size_t> batch_sizes() const {
    std::lock_guard lock(mu_);
    return batch_sizes_;
  }
  // While closed, CompleteAll blocks after counting its requests (to hold a generation in flight).
  void SetGateOpen(bool open) {
    {
      std::lock_guard lock(mu_);
      open_ = open;
    }
    gate_cv_.notify_all();
  }
  void WaitEntered(int n) {
    std::unique_lock lock(mu_);
    entered_cv_.wait(lock, [&] { return entered_ >= n; });
  }

 private:
  Script script_;
  std::string digest_;
  mutable std::mutex mu_;
  std::condition_variable gate_cv_;
  std::condition_variable entered_cv_;
  bool open_ = true;
  int entered_ = 0;
  int calls_ = 0;
  std::vector<size_t> batch_sizes_;
  std::vector<std::pair<float, uint64_t>> decodings_;
  std::vector<CompletionConstraint> constraints_;
};

}  // namespace rote::orchestrator::generate::testing
