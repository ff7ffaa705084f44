#include "inference/model/config.h"

#include <cmath>
#include <nlohmann/json.hpp>  // header-only JSON parser

#include "inference/model/model_files.h"

namespace rote::inference {

using Json = nlohmann::json;

std::string_view ModelFamilyName(ModelFamily family) {
  switch (family) {
    case ModelFamily::kQwen2: return "qwen2";
    case ModelFamily::kLlama: return "llama";
    case ModelFamily::kQwen3: return "qwen3";
  }
  return "unknown";
}

StatusOr<ModelFamily> ParseModelFamily(std::string_view name) {
  if (name == "qwen2") return ModelFamily::kQwen2;
  if (name == "llama") return ModelFamily::kLlama;
  if (name == "qwen3") return ModelFamily::kQwen3;
  return InvalidArgument("unknown model family '" + std::string(name) + "' (want qwen2, llama or qwen3)");
}

std::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kBF16: return "BF16";
    case DType::kF16: return "F16";
    case DType::kF32: return "F32";
  }
  return "?";
}

int DTypeSize(DType dtype) { return dtype == DType::kF32 ? 4 : 2; }

namespace {

// Limits on config.json's sizes: every published model of the supported families is well inside
// them (the largest, Llama 3.1 405B: hidden 16384, 126 layers, 128 heads, MLP 53248, vocabulary
// 128256). They keep every derived product (q_dim, KV bytes, table sizes) far from overflow; the
// weights themselves are then checked against these sizes tensor by tensor.
constexpr int64_t kMaxVocab = int64_t{1} << 22;
constexpr int64_t kMaxHidden = int64_t{1} << 16;
constexpr int64_t kMaxIntermediate = int64_t{1} << 18;
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxHeads = 4096;
constexpr int64_t kMaxHeadDim = 1024;
constexpr int64_t kMaxQDim = int64_t{1} << 18;  // num_attention_heads * head_dim
constexpr int64_t kMaxPositions = int64_t{1} << 24;

// generation_config.json beside the config.json that `config_source` names.
std::string GenerationConfigSource(std::string_view config_source) {
  const size_t slash = config_source.rfind('/');
  return (slash == std::string_view::npos ? std::string() : std::string(config_source.substr(0, slash + 1))) +
         "generation_config.json";
}

StatusOr<ModelConfig> ParseModelConfigChecked(std::string_view config_json, std::string_view generation_config_json,
                                              std::string_view source) {
  ROTE_ASSIGN_OR_RETURN(Json j, ParseJsonObject(config_json, source));
  const JsonFields f(j, source);
  ModelConfig c;
  std::string model_type;
  ROTE_RETURN_IF_ERROR(f.String("model_type", "", &model_type));
  if (const Json* a = f.Find("architectures")) {
    if (!a->is_array()) return f.Error("architectures", "must be a list of strings");
    for (const Json& name : *a) {
      if (!name.is_string()) return f.Error("architectures", "must be a list of strings");
    }
    if (!a->empty()) c.architecture = (*a)[0].get<std::string>();
  }
  if (model_type == "qwen2" || c.architecture == "Qwen2ForCausalLM") {
    c.family = ModelFamily::kQwen2;
  } else if (model_type == "llama" || c.architecture == "LlamaForCausalLM") {
    c.family = ModelFamily::kLlama;
  } else if (model_type == "qwen3" || c.architecture == "Qwen3ForCausalLM") {
    c.family = ModelFamily::kQwen3;
  } else {
    return Unimplemented(std::string(source) + ": model_type '" + model_type + "' / architecture '" + c.architecture +
                         "' is not supported (qwen2, llama, qwen3 dense)");
  }
  // The sizes config.json must give; each read as an integer in [1, hi].
  auto required = [&](const char* key, int64_t hi, int32_t* out) -> Status {
    if (f.Find(key) == nullptr) return f.Error(key, "is missing");
    int64_t x = 0;
    ROTE_RETURN_IF_ERROR(f.Int(key, 0, 1, hi, &x));
    *out = static_cast<int32_t>(x);
    return OkStatus();
  };
  ROTE_RETURN_IF_ERROR(required("vocab_size", kMaxVocab, &c.vocab_size));
  ROTE_RETURN_IF_ERROR(required("hidden_size", kMaxHidden, &c.hidden_size));
  ROTE_RETURN_IF_ERROR(required("intermediate_size", kMaxIntermediate, &c.intermediate_size));
  ROTE_RETURN_IF_ERROR(required("num_hidden_layers", kMaxLayers, &c.num_layers));
  ROTE_RETURN_IF_ERROR(required("num_attention_heads", kMaxHeads, &c.num_heads));
  int64_t v = 0;
  ROTE_RETURN_IF_ERROR(f.Int("num_key_value_heads", c.num_heads, 1, c.num_heads, &v));
  c.num_kv_heads = static_cast<int32_t>(v);
  if (f.Find("head_dim") == nullptr && c.hidden_size % c.num_heads != 0) {
    // Without head_dim the width of a head is hidden_size / num_attention_heads, which must be whole.
    return f.Error("hidden_size", "= " + std::to_string(c.hidden_size) +
                                      " is not a multiple of num_attention_heads = " + std::to_string(c.num_heads) +
                                      " (and there is no head_dim)");
  }
  ROTE_RETURN_IF_ERROR(f.Int("head_dim", c.hidden_size / c.num_heads, 2, kMaxHeadDim, &v));
  c.head_dim = static_cast<int32_t>(v);
  if (c.head_dim < 2 || c.head_dim > kMaxHeadDim) {
    return f.Error("head_dim", "= " + std::to_string(c.head_dim) + " is out of range [2, " +
                                   std::to_string(kMaxHeadDim) + "]");
  }
  if (static_cast<int64_t>(c.num_heads) * c.head_dim > kMaxQDim) {
    return f.Error("num_attention_heads", "times head_dim is " +
                                              std::to_string(static_cast<int64_t>(c.num_heads) * c.head_dim) +
                                              ", more than " + std::to_string(kMaxQDim));
  }
  if (c.head_dim % 2 != 0) {
    return f.Error("head_dim", "= " + std::to_string(c.head_dim) + " is odd: rotary embeddings pair the dimensions");
  }
  if (c.num_heads % c.num_kv_heads != 0) {
    return f.Error("num_key_value_heads", "= " + std::to_string(c.num_kv_heads) + ": num_attention_heads = " +
                                              std::to_string(c.num_heads) + " is not a multiple of it");
  }
  ROTE_RETURN_IF_ERROR(f.Int("max_position_embeddings", 32768, 1, kMaxPositions, &v));
  c.max_position_embeddings = static_cast<int32_t>(v);
  ROTE_RETURN_IF_ERROR(f.Number("rope_theta", 10000.0, 0.0, /*open_lo=*/true, 1e30, &c.rope_theta));
  double eps = 0;
  ROTE_RETURN_IF_ERROR(f.Number("rms_norm_eps", 1e-6, 0.0, /*open_lo=*/false, 1.0, &eps));
  c.rms_norm_eps = static_cast<float>(eps);
  ROTE_RETURN_IF_ERROR(f.Bool("tie_word_embeddings", false, &c.tie_word_embeddings));

  bool bias = false;
  ROTE_RETURN_IF_ERROR(f.Bool("attention_bias", false, &bias));
  bool mlp_bias = false;
  ROTE_RETURN_IF_ERROR(f.Bool("mlp_bias", false, &mlp_bias));
  if (c.family == ModelFamily::kQwen2) {
    c.attention_bias = true;  // Qwen2 always has q/k/v biases (and none on o_proj)
  } else if (bias || mlp_bias) {
    return Unimplemented(std::string(source) + ": attention_bias / mlp_bias = true is not supported for " +
                         std::string(ModelFamilyName(c.family)));
  }
  c.qk_norm = c.family == ModelFamily::kQwen3;
  bool sliding = false;
  ROTE_RETURN_IF_ERROR(f.Bool("use_sliding_window", false, &sliding));
  if (sliding) return Unimplemented(std::string(source) + ": use_sliding_window = true is not supported");
  std::string act;
  ROTE_RETURN_IF_ERROR(f.String("hidden_act", "silu", &act));
  if (act != "silu") return Unimplemented(std::string(source) + ": hidden_act '" + act + "' is not supported (silu)");

  std::string dtype;
  ROTE_RETURN_IF_ERROR(f.String("dtype", "bfloat16", &dtype));
  ROTE_RETURN_IF_ERROR(f.String("torch_dtype", dtype, &dtype));
  if (dtype == "bfloat16") {
    c.dtype = DType::kBF16;
  } else if (dtype == "float16") {
    c.dtype = DType::kF16;
  } else if (dtype == "float32") {
    c.dtype = DType::kF32;
  } else {
    return f.Error("torch_dtype", "= '" + dtype + "' is not bfloat16, float16 or float32");
  }

  if (const Json* rs = f.Find("rope_scaling")) {
    if (!rs->is_object()) return f.Error("rope_scaling", "must be an object or null");
    const JsonFields r(*rs, source, "rope_scaling.");
    std::string type;
    ROTE_RETURN_IF_ERROR(r.String("type", "default", &type));
    ROTE_RETURN_IF_ERROR(r.String("rope_type", type, &type));
    if (type == "llama3") {
      RopeScaling& s = c.rope_scaling;
      s.type = RopeScaling::Type::kLlama3;
      ROTE_RETURN_IF_ERROR(r.Number("factor", 8.0, 0.0, /*open_lo=*/true, 1e6, &s.factor));
      ROTE_RETURN_IF_ERROR(r.Number("low_freq_factor", 1.0, 0.0, /*open_lo=*/true, 1e6, &s.low_freq_factor));
      ROTE_RETURN_IF_ERROR(r.Number("high_freq_factor", 4.0, 0.0, /*open_lo=*/true, 1e6, &s.high_freq_factor));
      ROTE_RETURN_IF_ERROR(r.Int("original_max_position_embeddings", 8192, 1, kMaxPositions,
                                 &s.original_max_position_embeddings));
      if (!(s.high_freq_factor > s.low_freq_factor)) {
        return r.Error("high_freq_factor", "must be greater than low_freq_factor");
      }
    } else if (type != "default") {
      return Unimplemented(std::string(source) + ": rope_scaling type '" + type + "' is not supported (llama3)");
    }
  }

  ROTE_RETURN_IF_ERROR(f.Int("bos_token_id", -1, -1, c.vocab_size - 1, &v));
  c.bos_token_id = static_cast<int32_t>(v);
  ROTE_RETURN_IF_ERROR(f.TokenIds("eos_token_id", c.vocab_size, &c.eos_token_ids));
  if (!generation_config_json.empty()) {
    const std::string gen_source = GenerationConfigSource(source);
    ROTE_ASSIGN_OR_RETURN(Json g, ParseJsonObject(generation_config_json, gen_source));
    const JsonFields gf(g, gen_source);
    ROTE_RETURN_IF_ERROR(gf.TokenIds("eos_token_id", c.vocab_size, &c.eos_token_ids));
    ROTE_RETURN_IF_ERROR(gf.Int("bos_token_id", c.bos_token_id, -1, c.vocab_size - 1, &v));
    c.bos_token_id = static_cast<int32_t>(v);
  }
  ROTE_RETURN_IF_ERROR(ValidateModelConfig(c));
  return c;
}

}  // namespace

StatusOr<ModelConfig> ParseModelConfig(std::string_view config_json, std::string_view generation_config_json,
                                       std::string_view source) {
  // Every access above is typed; this is a second line against a JSON exception escaping as an abort.
  try {
    return ParseModelConfigChecked(config_json, generation_config_json, source);
  } catch (const Json::exception& e) {
    return InvalidArgument(std::string(source) + ": unexpected structure: " + e.what());
  }
}

Status ValidateModelConfig(const ModelConfig& c) {
  auto out_of = [](const char* what, int64_t v, int64_t hi) {
    return InvalidArgument(std::string("model config: ") + what + " = " + std::to_string(v) + " is out of range [1, " +
                           std::to_string(hi) + "]");
  };
  if (c.vocab_size <= 0 || c.vocab_size > kMaxVocab) return out_of("vocab_size", c.vocab_size, kMaxVocab);
  if (c.hidden_size <= 0 || c.hidden_size > kMaxHidden) return out_of("hidden_size", c.hidden_size, kMaxHidden);
  if (c.intermediate_size <= 0 || c.intermediate_size > kMaxIntermediate) {
    return out_of("intermediate_size", c.intermediate_size, kMaxIntermediate);
  }
  if (c.num_layers <= 0 || c.num_layers > kMaxLayers) return out_of("num_hidden_layers", c.num_layers, kMaxLayers);
  if (c.num_heads <= 0 || c.num_heads > kMaxHeads) return out_of("num_attention_heads", c.num_heads, kMaxHeads);
  if (c.num_kv_heads <= 0 || c.num_kv_heads > c.num_heads) {
    return out_of("num_key_value_heads", c.num_kv_heads, c.num_heads);
  }
  if (c.head_dim <= 0 || c.head_dim > kMaxHeadDim) return out_of("head_dim", c.head_dim, kMaxHeadDim);
  if (c.max_position_embeddings <= 0 || c.max_position_embeddings > kMaxPositions) {
    return out_of("max_position_embeddings", c.max_position_embeddings, kMaxPositions);
  }
  if (static_cast<int64_t>(c.num_heads) * c.head_dim > kMaxQDim) {
    return InvalidArgument("model config: num_attention_heads * head_dim is more than " + std::to_string(kMaxQDim));
  }
  if (c.num_heads % c.num_kv_heads != 0) {
    return InvalidArgument("model config: num_attention_heads " + std::to_string(c.num_heads) +
                           " is not a multiple of num_key_value_heads " + std::to_string(c.num_kv_heads));
  }
  if (c.head_dim % 2 != 0) return InvalidArgument("model config: head_dim must be even for rotary embeddings");
  if (!(c.rope_theta > 0) || !std::isfinite(c.rope_theta)) {
    return InvalidArgument("model config: rope_theta must be positive and finite");
  }
  if (!(c.rms_norm_eps >= 0) || !std::isfinite(c.rms_norm_eps)) {
    return InvalidArgument("model config: rms_norm_eps must be non-negative and finite");
  }
  if (c.bos_token_id < -1 || c.bos_token_id >= c.vocab_size) {
    return InvalidArgument("model config: bos_token_id " + std::to_string(c.bos_token_id) + " is not below vocab_size");
  }
  for (int32_t id : c.eos_token_ids) {
    if (id < 0 || id >= c.vocab_size) {
      return InvalidArgument("model config: eos_token_id " + std::to_string(id) + " is not below vocab_size");
    }
  }
  return OkStatus();
}

}  // namespace rote::inference
