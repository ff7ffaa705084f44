// A model's architecture as read from a Hugging Face config.json (and generation_config.json).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "inference/status.h"

namespace rote::inference {

enum class ModelFamily {
  kQwen2,  // Qwen2, Qwen2.5 (Coder included): biases on q/k/v projections
  kLlama,  // Llama 3 / 3.1 / 3.2: rope_scaling of type "llama3"
  kQwen3,  // Qwen3 dense: RMSNorm on each head of q and k before rotary
};

std::string_view ModelFamilyName(ModelFamily family);  // "qwen2", "llama", "qwen3"
StatusOr<ModelFamily> ParseModelFamily(std::string_view name);

// Element type of a stored tensor (safetensors dtype names "BF16", "F16", "F32").
enum class DType { kBF16, kF16, kF32 };
std::string_view DTypeName(DType dtype);  // safetensors spelling
int DTypeSize(DType dtype);               // bytes per element

// Rotary frequency rules. kDefault: inv_freq_i = theta^(-2i/d). kLlama3: HF's "llama3"
// rope_type (low/high frequency bands, smooth interpolation between them).
struct RopeScaling {
  enum class Type { kDefault, kLlama3 };
  Type type = Type::kDefault;
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct ModelConfig {
  ModelFamily family = ModelFamily::kQwen2;
  std::string architecture;        // config.json "architectures"[0], e.g. "Qwen2ForCausalLM"
  int32_t vocab_size = 0;          // rows of embed_tokens and lm_head
  int32_t hidden_size = 0;         // dim: width of the residual stream
  int32_t intermediate_size = 0;   // hidden width of the SwiGLU MLP
  int32_t num_layers = 0;
  int32_t num_heads = 0;           // query heads
  int32_t num_kv_heads = 0;        // key/value heads (grouped-query attention)
  int32_t head_dim = 0;            // hidden_size / num_heads unless config.json says otherwise
  int32_t max_position_embeddings = 0;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  float rms_norm_eps = 1e-6f;
  bool tie_word_embeddings = false;  // lm_head is embed_tokens
  bool attention_bias = false;       // q/k/v projections have biases (Qwen2)
  bool qk_norm = false;              // per-head RMSNorm of q and k (Qwen3)
  DType dtype = DType::kBF16;        // config.json "torch_dtype" (weights may differ per tensor)
  // From generation_config.json (falling back to config.json).
  int32_t bos_token_id = -1;
  std::vector<int32_t> eos_token_ids;

  int32_t q_dim() const { return num_heads * head_dim; }
  int32_t kv_dim() const { return num_kv_heads * head_dim; }
};

// Parses config.json text (and optionally generation_config.json text, may be empty).
// `source` names the file in error messages.
StatusOr<ModelConfig> ParseModelConfig(std::string_view config_json, std::string_view generation_config_json,
                                       std::string_view source);

// Checks sizes are positive and consistent (heads divide, head_dim even, ...).
Status ValidateModelConfig(const ModelConfig& config);

}  // namespace rote::inference
