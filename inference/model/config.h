// A model's architecture as read from a Hugging Face config.json (and generation_config.json).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "inference/status.h"

namespace rote::inference {

enum class ModelFamily {
  kQwen2,       // "qwen2": Qwen2, Qwen2.5 (Coder included): biases on q/k/v projections
  kLlama,       // "llama": Llama 3 / 3.1 / 3.2 (rope_type "llama3"), DeepSeek-Coder (rope "linear")
  kQwen3,       // "qwen3": Qwen3 dense: RMSNorm on each head of q and k before rotary
  kMistral,     // "mistral": the Llama layout with sliding-window attention on every layer
  kGemma2,      // "gemma2": (1 + w) RMSNorm, sandwich norms, soft-capping, local/global layers
  kGemma3,      // "gemma3_text": Gemma 2's layout with (1 + w) q/k norms and a local rope base
  kPhi3,        // "phi3": Phi-3 / 3.5-mini, Phi-4-mini: fused qkv and gate_up, longrope, partial rotary
  kStarcoder2,  // "starcoder2": LayerNorm with bias, biases everywhere, GELU c_fc/c_proj MLP
  kGranite,     // "granite": Llama layout with embedding/residual/attention/logits multipliers
  kGemma,       // "gemma": Gemma 1, CodeGemma: (1 + w) RMSNorm, sqrt(hidden) embedding scale, GELU-tanh
  kQwen3Moe,    // "qwen3_moe": Qwen3's attention; the MLP of most layers is a mixture of experts
                //   (Qwen3-Coder-30B-A3B, Qwen3-30B-A3B, Qwen3-235B-A22B)
};

// The config.json model_type spelling of a family ("qwen2", "llama", "gemma3_text", ...).
std::string_view ModelFamilyName(ModelFamily family);
// Every family, in the order above: error messages list them.
const std::vector<ModelFamily>& AllModelFamilies();
// "qwen2, llama, qwen3, mistral, ..." for error messages.
std::string SupportedFamiliesText();
// Accepts each family's model_type spelling (and "gemma3" for gemma3_text).
StatusOr<ModelFamily> ParseModelFamily(std::string_view name);

// Element type of a stored tensor (safetensors dtype names "BF16", "F16", "F32").
enum class DType { kBF16, kF16, kF32 };
std::string_view DTypeName(DType dtype);  // safetensors spelling
int DTypeSize(DType dtype);               // bytes per element

// Rotary frequency rules (docs/numerics.md section 4). kDefault: inv_freq_i = theta^(-2i/d)
// with d = rotary_dim. kLlama3: HF's "llama3" rope_type (low/high frequency bands, smooth
// interpolation). kLinear: HF's "linear" (inv_freq / factor; DeepSeek-Coder). kLongRope: HF's
// "longrope" (also spelled "su"; Phi-3, Phi-4-mini): inv_freq_i = 1 / (ext_i * theta^(2i/d)) with
// ext = short_factor for positions below original_max_position_embeddings and long_factor from
// there on, and cos/sin multiplied by fp32(attention_factor).
struct RopeScaling {
  enum class Type { kDefault, kLlama3, kLinear, kLongRope };
  Type type = Type::kDefault;
  double factor = 1.0;                       // kLlama3, kLinear
  double low_freq_factor = 1.0;              // kLlama3
  double high_freq_factor = 4.0;             // kLlama3
  int64_t original_max_position_embeddings = 8192;  // kLlama3, kLongRope
  std::vector<double> short_factor;          // kLongRope: rotary_dim / 2 entries
  std::vector<double> long_factor;           // kLongRope: rotary_dim / 2 entries
  double attention_factor = 1.0;             // kLongRope: cos/sin scale (1 elsewhere)
};

// How every norm of a model (per layer, final, per-head q/k) computes, with r the canonical
// reciprocal root (docs/numerics.md section 3).
enum class NormKind {
  kRms,        // y = (x * r) * w
  kRmsOffset,  // y = (x * r) * (1 + w): Gemma stores its norm weights as offsets from 1
  kLayerNorm,  // y = ((x - mean) * r) * w + b: LayerNorm with bias (StarCoder2)
};
enum class Activation {
  kSilu,      // x / (1 + e^-x)
  kGeluTanh,  // HF "gelu_pytorch_tanh": 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
};
enum class MlpKind {
  kGated,  // down(act(gate h) * up h)       (w_gate, w_up, w_down)
  kPlain,  // down(act(up h))                (StarCoder2's c_fc as w_up, c_proj as w_down)
};

// What one layer's attention does beyond the shared arithmetic. Both backends read it from
// ModelConfig::plan(layer), so they cannot disagree on which layers are local.
struct LayerPlan {
  // 0: full causal attention. W > 0: query at position p sees keys j with p - W < j <= p
  // (HF's sliding_window: W keys including its own). See FirstVisibleKey.
  int32_t sliding_window = 0;
  // true: rotary from RopeTables::local (rope_local_theta, unscaled): Gemma 3's local layers.
  bool local_rope = false;
};

// The first key position a query at `pos` attends to under `plan`.
inline int32_t FirstVisibleKey(const LayerPlan& plan, int32_t pos) {
  return plan.sliding_window > 0 && pos >= plan.sliding_window ? pos - plan.sliding_window + 1 : 0;
}

struct ModelConfig {
  ModelFamily family = ModelFamily::kQwen2;
  std::string model_type;          // config.json "model_type" as written (e.g. "llama" for DeepSeek-Coder)
  std::string architecture;        // config.json "architectures"[0], e.g. "Qwen2ForCausalLM"
  int32_t vocab_size = 0;          // rows of embed_tokens and lm_head
  int32_t hidden_size = 0;         // dim: width of the residual stream
  int32_t intermediate_size = 0;   // hidden width of the MLP
  int32_t num_layers = 0;
  int32_t num_heads = 0;           // query heads
  int32_t num_kv_heads = 0;        // key/value heads (grouped-query attention)
  int32_t head_dim = 0;            // hidden_size / num_heads unless config.json says otherwise
  int32_t max_position_embeddings = 0;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  // Leading dimensions of each q/k head that rotate, pairs (i, i + rotary_dim/2); the rest pass
  // through. 0 means head_dim (use rope_dim()). Phi-4-mini: int(head_dim * partial_rotary_factor).
  int32_t rotary_dim = 0;
  // Gemma 3: the rope base of local (sliding) layers (rope_local_base_freq), no scaling. 0: none.
  double rope_local_theta = 0.0;
  float rms_norm_eps = 1e-6f;        // epsilon of every norm (StarCoder2's norm_epsilon too)
  NormKind norm = NormKind::kRms;
  Activation activation = Activation::kSilu;
  MlpKind mlp = MlpKind::kGated;
  bool tie_word_embeddings = false;  // lm_head is embed_tokens
  bool attention_bias = false;       // q/k/v projections have biases (Qwen2, StarCoder2, ...)
  bool attention_out_bias = false;   // o_proj has a bias (Llama-layout attention_bias, StarCoder2)
  bool mlp_bias = false;             // every MLP projection has a bias (mlp_bias, StarCoder2)
  bool qk_norm = false;              // per-head norm (kind `norm`) of q and k before rotary (Qwen3, Gemma 3)
  // Gemma 2/3: the attention output goes through post_attention_layernorm and the MLP output
  // through post_feedforward_layernorm before each is added to the residual; the MLP input norm
  // is pre_feedforward_layernorm.
  bool sandwich_norms = false;
  float embedding_multiplier = 1.0f;  // x = embedding row * this (Gemma: fp32(sqrt(hidden)); Granite)
  float residual_multiplier = 1.0f;   // x = x + branch * this (Granite)
  // Attention scores s = dot(q, k) * attention_scale. Parsing sets it: 1 / sqrtf(head_dim), Gemma
  // 1 / sqrtf(query_pre_attn_scalar), Granite attention_multiplier. 0: 1 / sqrtf(head_dim)
  // (use scale()).
  float attention_scale = 0.0f;
  float attn_logit_softcap = 0.0f;   // > 0: s = tanh(s / cap) * cap before the mask (Gemma 2)
  float final_logit_softcap = 0.0f;  // > 0: logit = tanh(logit / cap) * cap (Gemma 2)
  float logits_divisor = 1.0f;       // logit = logit / this (Granite logits_scaling); 1: none
  // One entry per layer; empty means every layer is full attention with the global rope.
  std::vector<LayerPlan> layer_plan;
  // Mixture of experts (Qwen3-MoE): a layer whose moe_layers entry is set replaces its MLP by
  // num_experts gated MLPs of moe_intermediate_size and a router (mlp.gate, num_experts x hidden):
  // each token takes the experts_per_token experts of largest softmax(router logits) and sums
  // their outputs weighted by those probabilities (renormalised over the chosen ones where
  // norm_topk_prob). numerics::RouteToken fixes the choice and the order of the sum. Empty
  // moe_layers: a dense model.
  int32_t num_experts = 0;
  int32_t experts_per_token = 0;
  int32_t moe_intermediate_size = 0;
  bool norm_topk_prob = false;
  std::vector<uint8_t> moe_layers;
  DType dtype = DType::kBF16;        // config.json "torch_dtype" (weights may differ per tensor)
  // From generation_config.json (falling back to config.json).
  int32_t bos_token_id = -1;
  std::vector<int32_t> eos_token_ids;

  int32_t q_dim() const { return num_heads * head_dim; }
  int32_t kv_dim() const { return num_kv_heads * head_dim; }
  int32_t rope_dim() const { return rotary_dim > 0 ? rotary_dim : head_dim; }
  float scale() const;
  LayerPlan plan(int32_t layer) const {
    return layer_plan.empty() ? LayerPlan{} : layer_plan[static_cast<size_t>(layer)];
  }
  bool has_local_rope() const { return rope_local_theta > 0; }
  bool is_moe_layer(int32_t layer) const {
    return !moe_layers.empty() && moe_layers[static_cast<size_t>(layer)] != 0;
  }
  bool has_moe() const { return !moe_layers.empty(); }
  // How many trailing positions a query can see at most, over every layer: the largest sliding
  // window where every layer has one, 0 where some layer attends to every earlier position.
  // Positions before pos - kv_window() + 1 are read by no query at pos or later, so their K/V may
  // be dropped (the engine releases such KV blocks: docs/inference.md, "Sliding windows").
  int32_t kv_window() const {
    if (layer_plan.empty()) return 0;
    int32_t w = 0;
    for (const LayerPlan& p : layer_plan) {
      if (p.sliding_window <= 0) return 0;
      w = w > p.sliding_window ? w : p.sliding_window;
    }
    return w;
  }
  // The first key position any layer reads for a query at `pos` (0 without windows).
  int32_t first_read_key(int32_t pos) const {
    const int32_t w = kv_window();
    return w > 0 && pos >= w ? pos - w + 1 : 0;
  }
};

// Parses config.json text (and optionally generation_config.json text, may be empty).
// `source` names the file in error messages.
StatusOr<ModelConfig> ParseModelConfig(std::string_view config_json, std::string_view generation_config_json,
                                       std::string_view source);

// Checks sizes are positive and consistent (heads divide, head_dim even, ...).
Status ValidateModelConfig(const ModelConfig& config);

}  // namespace rote::inference
