// CodeModel over the in-process inference engine (inference/engine.h).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "inference/engine.h"
#include "inference/engine_group.h"
#include "orchestrator/generate/code_model.h"

namespace rote::orchestrator::generate {

// absl::Status from the inference module's Status (the codes share their numbering).
absl::Status FromInference(const inference::Status& status);

// What GetModel and the server's start-up line say about a loaded model.
struct ModelDescription {
  std::string family;  // the config.json model_type spelling ("qwen2", "llama", "gemma2", ...)
  std::string directory;
  std::string digest;
  int64_t parameter_count = 0;
  int32_t num_layers = 0;
  int32_t hidden_size = 0;
  int32_t vocab_size = 0;
  std::string device;
  std::string numerics_profile;
};

class InferenceCodeModel final : public CodeModel {
 public:
  explicit InferenceCodeModel(std::unique_ptr<inference::EngineGroup> engines);
  // Over one engine (a group of one).
  explicit InferenceCodeModel(std::unique_ptr<inference::Engine> engine);
  ~InferenceCodeModel() override;

  // Loads a model directory (inference::EngineGroup::Load) on `device`: "cpu", "cuda", "cuda:N",
  // "cuda:N,M,..." or "cuda:all" (one engine per GPU; requests are spread over them).
  static absl::StatusOr<std::unique_ptr<InferenceCodeModel>> Load(const std::string& model_dir,
                                                                  const std::string& device,
                                                                  const inference::EngineOptions& base_options = {});

  ModelIdentity identity() const override;
  std::string RenderPrompt(const std::vector<ChatTurn>& messages) const override;
  // Submits every request before waiting for any, so they share the scheduler's batches.
  std::vector<absl::StatusOr<Completion>> CompleteAll(std::vector<CompletionRequest> requests,
                                                      const std::function<bool()>& cancelled) override;

  ModelDescription Describe() const;
  // The first engine (model, tokenizer, profile); engines() for counts over all of them.
  inference::Engine& engine() const { return engines_->primary(); }
  inference::EngineGroup& engines() const { return *engines_; }

 private:
  std::unique_ptr<inference::EngineGroup> engines_;
};

}  // namespace rote::orchestrator::generate
