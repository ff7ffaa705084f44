#include "inference/model/config.h"

#include <nlohmann/json.hpp>  // header-only JSON parser

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

// Reads an integer field; absent -> fallback. Present with the wrong type -> error.
Status GetInt(const Json& j, const char* key, int64_t fallback, int64_t* out, std::string_view source) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    *out = fallback;
    return OkStatus();
  }
  if (!it->is_number_integer()) {
    return InvalidArgument(std::string(source) + ": field '" + key + "' must be an integer");
  }
  *out = it->get<int64_t>();
  return OkStatus();
}

Status GetNumber(const Json& j, const char* key, double fallback, double* out, std::string_view source) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    *out = fallback;
    return OkStatus();
  }
  if (!it->is_number()) return InvalidArgument(std::string(source) + ": field '" + key + "' must be a number");
  *out = it->get<double>();
  return OkStatus();
}

Status GetBool(const Json& j, const char* key, bool fallback, bool* out, std::string_view source) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    *out = fallback;
    return OkStatus();
  }
  if (!it->is_boolean()) return InvalidArgument(std::string(source) + ": field '" + key + "' must be a boolean");
  *out = it->get<bool>();
  return OkStatus();
}

// eos_token_id may be an int or a list of ints.
Status GetTokenIds(const Json& j, const char* key, std::vector<int32_t>* out, std::string_view source) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return OkStatus();
  out->clear();
  if (it->is_number_integer()) {
    out->push_back(it->get<int32_t>());
    return OkStatus();
  }
  if (it->is_array()) {
    for (const Json& v : *it) {
      if (!v.is_number_integer()) return InvalidArgument(std::string(source) + ": '" + key + "' must hold integers");
      out->push_back(v.get<int32_t>());
    }
    return OkStatus();
  }
  return InvalidArgument(std::string(source) + ": '" + key + "' must be an integer or a list of integers");
}

Status CheckRange(int64_t v, const char* key, std::string_view source) {
  if (v <= 0 || v > (int64_t{1} << 30)) {
    return InvalidArgument(std::string(source) + ": field '" + key + "' = " + std::to_string(v) + " is out of range");
  }
  return OkStatus();
}

}  // namespace

StatusOr<ModelConfig> ParseModelConfig(std::string_view config_json, std::string_view generation_config_json,
                                       std::string_view source) {
  Json j = Json::parse(config_json.begin(), config_json.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument(std::string(source) + ": not a JSON object");
  ModelConfig c;
  std::string model_type = j.value("model_type", std::string());
  if (auto it = j.find("architectures"); it != j.end() && it->is_array() && !it->empty() && (*it)[0].is_string()) {
    c.architecture = (*it)[0].get<std::string>();
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
  int64_t v = 0;
  ROTE_RETURN_IF_ERROR(GetInt(j, "vocab_size", 0, &v, source));
  ROTE_RETURN_IF_ERROR(CheckRange(v, "vocab_size", source));
  c.vocab_size = static_cast<int32_t>(v);
  ROTE_RETURN_IF_ERROR(GetInt(j, "hidden_size", 0, &v, source));
  ROTE_RETURN_IF_ERROR(CheckRange(v, "hidden_size", source));
  c.hidden_size = static_cast<int32_t>(v);
  ROTE_RETURN_IF_ERROR(GetInt(j, "intermediate_size", 0, &v, source));
  ROTE_RETURN_IF_ERROR(CheckRange(v, "intermediate_size", source));
  c.intermediate_size = static_cast<int32_t>(v);
  ROTE_RETURN_IF_ERROR(GetInt(j, "num_hidden_layers", 0, &v, source));
  ROTE_RETURN_IF_ERROR(CheckRange(v, "num_hidden_layers", source));
  c.num_layers = static_cast<int32_t>(v);
  ROTE_RETURN_IF_ERROR(GetInt(j, "num_attention_heads", 0, &v, source));
  ROTE_RETURN_IF_ERROR(CheckRange(v, "num_attention_heads", source));
  c.num_heads = static_cast<int32_t>(v);
  ROTE_RETURN_IF_ERROR(GetInt(j, "num_key_value_heads", c.num_heads, &v, source));
  ROTE_RETURN_IF_ERROR(CheckRange(v, "num_key_value_heads", source));
  c.num_kv_heads = static_cast<int32_t>(v);
  ROTE_RETURN_IF_ERROR(GetInt(j, "head_dim", c.hidden_size / c.num_heads, &v, source));
  ROTE_RETURN_IF_ERROR(CheckRange(v, "head_dim", source));
  c.head_dim = static_cast<int32_t>(v);
  ROTE_RETURN_IF_ERROR(GetInt(j, "max_position_embeddings", 32768, &v, source));
  ROTE_RETURN_IF_ERROR(CheckRange(v, "max_position_embeddings", source));
  c.max_position_embeddings = static_cast<int32_t>(v);
  ROTE_RETURN_IF_ERROR(GetNumber(j, "rope_theta", 10000.0, &c.rope_theta, source));
  double eps = 0;
  ROTE_RETURN_IF_ERROR(GetNumber(j, "rms_norm_eps", 1e-6, &eps, source));
  c.rms_norm_eps = static_cast<float>(eps);
  ROTE_RETURN_IF_ERROR(GetBool(j, "tie_word_embeddings", false, &c.tie_word_embeddings, source));

  bool bias = false;
  ROTE_RETURN_IF_ERROR(GetBool(j, "attention_bias", false, &bias, source));
  bool mlp_bias = false;
  ROTE_RETURN_IF_ERROR(GetBool(j, "mlp_bias", false, &mlp_bias, source));
  if (c.family == ModelFamily::kQwen2) {
    c.attention_bias = true;  // Qwen2 always has q/k/v biases (and none on o_proj)
  } else if (bias || mlp_bias) {
    return Unimplemented(std::string(source) + ": attention_bias / mlp_bias = true is not supported for " +
                         std::string(ModelFamilyName(c.family)));
  }
  c.qk_norm = c.family == ModelFamily::kQwen3;
  bool sliding = false;
  ROTE_RETURN_IF_ERROR(GetBool(j, "use_sliding_window", false, &sliding, source));
  if (sliding) return Unimplemented(std::string(source) + ": use_sliding_window = true is not supported");
  const std::string act = j.value("hidden_act", std::string("silu"));
  if (act != "silu") return Unimplemented(std::string(source) + ": hidden_act '" + act + "' is not supported (silu)");

  std::string dtype = j.value("torch_dtype", j.value("dtype", std::string("bfloat16")));
  if (dtype == "bfloat16") {
    c.dtype = DType::kBF16;
  } else if (dtype == "float16") {
    c.dtype = DType::kF16;
  } else if (dtype == "float32") {
    c.dtype = DType::kF32;
  } else {
    return InvalidArgument(std::string(source) + ": torch_dtype '" + dtype + "' is not bfloat16, float16 or float32");
  }

  if (auto it = j.find("rope_scaling"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) return InvalidArgument(std::string(source) + ": rope_scaling must be an object or null");
    std::string type = it->value("rope_type", it->value("type", std::string("default")));
    if (type == "llama3") {
      c.rope_scaling.type = RopeScaling::Type::kLlama3;
      ROTE_RETURN_IF_ERROR(GetNumber(*it, "factor", 8.0, &c.rope_scaling.factor, source));
      ROTE_RETURN_IF_ERROR(GetNumber(*it, "low_freq_factor", 1.0, &c.rope_scaling.low_freq_factor, source));
      ROTE_RETURN_IF_ERROR(GetNumber(*it, "high_freq_factor", 4.0, &c.rope_scaling.high_freq_factor, source));
      ROTE_RETURN_IF_ERROR(GetInt(*it, "original_max_position_embeddings", 8192,
                                  &c.rope_scaling.original_max_position_embeddings, source));
      if (!(c.rope_scaling.factor > 0) || !(c.rope_scaling.high_freq_factor > c.rope_scaling.low_freq_factor) ||
          !(c.rope_scaling.low_freq_factor > 0) || c.rope_scaling.original_max_position_embeddings <= 0) {
        return InvalidArgument(std::string(source) + ": rope_scaling llama3 parameters are inconsistent");
      }
    } else if (type != "default") {
      return Unimplemented(std::string(source) + ": rope_scaling type '" + type + "' is not supported (llama3)");
    }
  }

  ROTE_RETURN_IF_ERROR(GetInt(j, "bos_token_id", -1, &v, source));
  c.bos_token_id = static_cast<int32_t>(v);
  ROTE_RETURN_IF_ERROR(GetTokenIds(j, "eos_token_id", &c.eos_token_ids, source));
  if (!generation_config_json.empty()) {
    Json g = Json::parse(generation_config_json.begin(), generation_config_json.end(), nullptr, false);
    if (g.is_discarded() || !g.is_object()) {
      return InvalidArgument("generation_config.json: not a JSON object");
    }
    ROTE_RETURN_IF_ERROR(GetTokenIds(g, "eos_token_id", &c.eos_token_ids, "generation_config.json"));
    ROTE_RETURN_IF_ERROR(GetInt(g, "bos_token_id", c.bos_token_id, &v, "generation_config.json"));
    c.bos_token_id = static_cast<int32_t>(v);
  }
  ROTE_RETURN_IF_ERROR(ValidateModelConfig(c));
  return c;
}

Status ValidateModelConfig(const ModelConfig& c) {
  if (c.vocab_size <= 0 || c.hidden_size <= 0 || c.intermediate_size <= 0 || c.num_layers <= 0 || c.num_heads <= 0 ||
      c.num_kv_heads <= 0 || c.head_dim <= 0) {
    return InvalidArgument("model config: every size must be positive");
  }
  if (c.num_heads % c.num_kv_heads != 0) {
    return InvalidArgument("model config: num_attention_heads " + std::to_string(c.num_heads) +
                           " is not a multiple of num_key_value_heads " + std::to_string(c.num_kv_heads));
  }
  if (c.head_dim % 2 != 0) return InvalidArgument("model config: head_dim must be even for rotary embeddings");
  if (!(c.rope_theta > 0)) return InvalidArgument("model config: rope_theta must be positive");
  if (!(c.rms_norm_eps >= 0)) return InvalidArgument("model config: rms_norm_eps must be non-negative");
  return OkStatus();
}

}  // namespace rote::inference
