#include "inference/model/config.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>  // header-only JSON parser

#include "inference/model/model_files.h"
#include "inference/numerics/rope.h"

namespace rote::inference {

using Json = nlohmann::json;

std::string_view ModelFamilyName(ModelFamily family) {
  switch (family) {
    case ModelFamily::kQwen2: return "qwen2";
    case ModelFamily::kLlama: return "llama";
    case ModelFamily::kQwen3: return "qwen3";
    case ModelFamily::kMistral: return "mistral";
    case ModelFamily::kGemma2: return "gemma2";
    case ModelFamily::kGemma3: return "gemma3_text";
    case ModelFamily::kPhi3: return "phi3";
    case ModelFamily::kStarcoder2: return "starcoder2";
    case ModelFamily::kGranite: return "granite";
    case ModelFamily::kGemma: return "gemma";
    case ModelFamily::kQwen3Moe: return "qwen3_moe";
  }
  return "unknown";
}

const std::vector<ModelFamily>& AllModelFamilies() {
  static const std::vector<ModelFamily> all = {
      ModelFamily::kQwen2,  ModelFamily::kLlama, ModelFamily::kQwen3,      ModelFamily::kMistral,
      ModelFamily::kGemma2, ModelFamily::kGemma3, ModelFamily::kPhi3, ModelFamily::kStarcoder2,
      ModelFamily::kGranite, ModelFamily::kGemma, ModelFamily::kQwen3Moe};
  return all;
}

std::string SupportedFamiliesText() {
  std::string out;
  for (ModelFamily f : AllModelFamilies()) out += (out.empty() ? "" : ", ") + std::string(ModelFamilyName(f));
  return out;
}

StatusOr<ModelFamily> ParseModelFamily(std::string_view name) {
  for (ModelFamily f : AllModelFamilies()) {
    if (name == ModelFamilyName(f)) return f;
  }
  if (name == "gemma3") return ModelFamily::kGemma3;
  return InvalidArgument("unknown model family '" + std::string(name) + "' (want one of " + SupportedFamiliesText() +
                         ")");
}

float ModelConfig::scale() const {
  return attention_scale > 0 ? attention_scale : 1.0f / sqrtf(static_cast<float>(head_dim));
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
constexpr int64_t kMaxExperts = 1024;  // Qwen3-235B-A22B: 128; DeepSeek-V3: 256

// generation_config.json beside the config.json that `config_source` names.
std::string GenerationConfigSource(std::string_view config_source) {
  const size_t slash = config_source.rfind('/');
  return (slash == std::string_view::npos ? std::string() : std::string(config_source.substr(0, slash + 1))) +
         "generation_config.json";
}

StatusOr<ModelConfig> ParseModelConfigChecked(std::string_view config_json, std::string_view generation_config_json,
                                              std::string_view source);

// Gemma 3 4B-27B are published as Gemma3ForConditionalGeneration (model_type "gemma3"): the text
// model's config is "text_config", which leaves out what equals Gemma3TextConfig's defaults. rote
// runs the text model (the vision tower's tensors are not read).
StatusOr<ModelConfig> ParseGemma3Multimodal(const Json& outer, std::string_view generation_config_json,
                                            std::string_view source) {
  const JsonFields f(outer, source);
  const Json* tc = f.Find("text_config");
  if (tc == nullptr || !tc->is_object()) {
    return f.Error("text_config", "is missing: a model_type 'gemma3' checkpoint without a text model");
  }
  Json text = *tc;
  const Json defaults = {{"vocab_size", 262208},      {"hidden_size", 2304},         {"intermediate_size", 9216},
                         {"num_hidden_layers", 26},   {"num_attention_heads", 8},    {"num_key_value_heads", 4},
                         {"head_dim", 256},           {"max_position_embeddings", 131072},
                         {"rope_theta", 1000000.0},   {"rms_norm_eps", 1e-6},       {"tie_word_embeddings", true}};
  for (const auto& [key, value] : defaults.items()) {
    if (!text.contains(key) || text[key].is_null()) text[key] = value;
  }
  for (const char* key : {"bos_token_id", "eos_token_id", "torch_dtype", "dtype"}) {
    if ((!text.contains(key) || text[key].is_null()) && outer.contains(key)) text[key] = outer[key];
  }
  text["model_type"] = "gemma3_text";
  ROTE_ASSIGN_OR_RETURN(ModelConfig c, ParseModelConfigChecked(text.dump(), generation_config_json, source));
  c.model_type = "gemma3";
  if (const Json* a = f.Find("architectures"); a != nullptr && a->is_array() && !a->empty() && (*a)[0].is_string()) {
    c.architecture = (*a)[0].get<std::string>();
  }
  return c;
}

// Qwen3-MoE's experts (HF Qwen3MoeConfig; transformers 5 writes num_experts as num_local_experts):
// layer i is a mixture of experts unless it is listed in mlp_only_layers or (i + 1) is not a
// multiple of decoder_sparse_step.
Status ParseExperts(const JsonFields& f, ModelConfig* c) {
  int64_t v = 0;
  const char* experts_key = f.Find("num_experts") != nullptr ? "num_experts" : "num_local_experts";
  if (f.Find(experts_key) == nullptr) return f.Error("num_experts", "is missing");
  ROTE_RETURN_IF_ERROR(f.Int(experts_key, 0, 1, kMaxExperts, &v));
  c->num_experts = static_cast<int32_t>(v);
  if (f.Find("num_experts_per_tok") == nullptr) return f.Error("num_experts_per_tok", "is missing");
  ROTE_RETURN_IF_ERROR(f.Int("num_experts_per_tok", 0, 1, c->num_experts, &v));
  c->experts_per_token = static_cast<int32_t>(v);
  if (f.Find("moe_intermediate_size") == nullptr) return f.Error("moe_intermediate_size", "is missing");
  ROTE_RETURN_IF_ERROR(f.Int("moe_intermediate_size", 0, 1, kMaxIntermediate, &v));
  c->moe_intermediate_size = static_cast<int32_t>(v);
  ROTE_RETURN_IF_ERROR(f.Bool("norm_topk_prob", false, &c->norm_topk_prob));
  int64_t step = 1;
  ROTE_RETURN_IF_ERROR(f.Int("decoder_sparse_step", 1, 1, kMaxLayers, &step));
  std::vector<uint8_t> moe(static_cast<size_t>(c->num_layers), 0);
  for (int32_t i = 0; i < c->num_layers; ++i) moe[static_cast<size_t>(i)] = (i + 1) % step == 0 ? 1 : 0;
  if (const Json* only = f.Find("mlp_only_layers")) {
    if (!only->is_array()) return f.Error("mlp_only_layers", "must be a list of layer indices");
    for (const Json& x : *only) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() >= c->num_layers)
        return f.Error("mlp_only_layers", "entries must be layer indices below num_hidden_layers");
      moe[static_cast<size_t>(x.get<int64_t>())] = 0;
    }
  }
  // A model whose every layer is dense is a dense model: no experts are bound.
  if (std::find(moe.begin(), moe.end(), 1) != moe.end()) c->moe_layers = std::move(moe);
  return OkStatus();
}

StatusOr<ModelConfig> ParseModelConfigChecked(std::string_view config_json, std::string_view generation_config_json,
                                              std::string_view source) {
  ROTE_ASSIGN_OR_RETURN(Json j, ParseJsonObject(config_json, source));
  const JsonFields f(j, source);
  ModelConfig c;
  std::string model_type;
  ROTE_RETURN_IF_ERROR(f.String("model_type", "", &model_type));
  if (model_type == "gemma3") return ParseGemma3Multimodal(j, generation_config_json, source);
  if (const Json* a = f.Find("architectures")) {
    if (!a->is_array()) return f.Error("architectures", "must be a list of strings");
    for (const Json& name : *a) {
      if (!name.is_string()) return f.Error("architectures", "must be a list of strings");
    }
    if (!a->empty()) c.architecture = (*a)[0].get<std::string>();
  }
  struct Known {
    ModelFamily family;
    const char* architecture;
  };
  static const Known kKnown[] = {
      {ModelFamily::kQwen2, "Qwen2ForCausalLM"},         {ModelFamily::kLlama, "LlamaForCausalLM"},
      {ModelFamily::kQwen3, "Qwen3ForCausalLM"},         {ModelFamily::kMistral, "MistralForCausalLM"},
      {ModelFamily::kGemma2, "Gemma2ForCausalLM"},       {ModelFamily::kGemma3, "Gemma3ForCausalLM"},
      {ModelFamily::kPhi3, "Phi3ForCausalLM"},           {ModelFamily::kStarcoder2, "Starcoder2ForCausalLM"},
      {ModelFamily::kGranite, "GraniteForCausalLM"},     {ModelFamily::kGemma, "GemmaForCausalLM"},
      {ModelFamily::kQwen3Moe, "Qwen3MoeForCausalLM"},
  };
  bool found = false;
  for (const Known& k : kKnown) {  // model_type decides; the architecture only when it is absent
    if (model_type == ModelFamilyName(k.family)) {
      c.family = k.family;
      found = true;
      break;
    }
  }
  for (const Known& k : kKnown) {
    if (found || !model_type.empty()) break;
    if (c.architecture == k.architecture) {
      c.family = k.family;
      found = true;
    }
  }
  if (!found) {
    return InvalidArgument(std::string(source) + ": model_type '" + model_type + "' (architecture '" +
                           c.architecture + "') is not supported; supported model types: " +
                           SupportedFamiliesText() + " (decoder-only checkpoints)");
  }
  c.model_type = model_type.empty() ? std::string(ModelFamilyName(c.family)) : model_type;
  const ModelFamily fam = c.family;
  const bool gemma = fam == ModelFamily::kGemma2 || fam == ModelFamily::kGemma3;  // Gemma 2 and 3
  const bool any_gemma = gemma || fam == ModelFamily::kGemma;                     // and Gemma 1
  // A feature config.json asks for that this family's loader cannot honour.
  auto refuse = [&](const std::string& what) {
    return InvalidArgument(std::string(source) + ": " + what + " is not supported for model_type '" + c.model_type +
                           "'");
  };
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
  if (fam == ModelFamily::kStarcoder2) {
    ROTE_RETURN_IF_ERROR(f.Number("norm_epsilon", 1e-5, 0.0, /*open_lo=*/false, 1.0, &eps));
  } else {
    ROTE_RETURN_IF_ERROR(f.Number("rms_norm_eps", 1e-6, 0.0, /*open_lo=*/false, 1.0, &eps));
  }
  c.rms_norm_eps = static_cast<float>(eps);
  // Each family's class default where config.json says nothing (HF's *Config constructors).
  const bool tie_default = any_gemma || fam == ModelFamily::kStarcoder2;
  ROTE_RETURN_IF_ERROR(f.Bool("tie_word_embeddings", tie_default, &c.tie_word_embeddings));

  bool bias = false;
  ROTE_RETURN_IF_ERROR(f.Bool("attention_bias", false, &bias));
  bool mlp_bias = false;
  ROTE_RETURN_IF_ERROR(f.Bool("mlp_bias", false, &mlp_bias));
  switch (fam) {
    case ModelFamily::kQwen2:
      c.attention_bias = true;  // Qwen2 always has q/k/v biases (and none on o_proj)
      if (mlp_bias) return refuse("mlp_bias = true");
      break;
    case ModelFamily::kLlama:
    case ModelFamily::kGranite:
      // LlamaAttention / GraniteAttention: attention_bias on q, k, v and o; mlp_bias on all three.
      c.attention_bias = c.attention_out_bias = bias;
      c.mlp_bias = mlp_bias;
      break;
    case ModelFamily::kQwen3:
    case ModelFamily::kQwen3Moe:
    case ModelFamily::kGemma:
    case ModelFamily::kGemma2:
    case ModelFamily::kGemma3:
      c.attention_bias = c.attention_out_bias = bias;
      if (mlp_bias) return refuse("mlp_bias = true");
      break;
    case ModelFamily::kStarcoder2: {
      bool use_bias = true;
      ROTE_RETURN_IF_ERROR(f.Bool("use_bias", true, &use_bias));
      c.attention_bias = c.attention_out_bias = c.mlp_bias = use_bias;
      break;
    }
    case ModelFamily::kMistral:
    case ModelFamily::kPhi3:
      if (bias || mlp_bias) return refuse("attention_bias / mlp_bias = true");
      break;
  }
  c.qk_norm = fam == ModelFamily::kQwen3 || fam == ModelFamily::kQwen3Moe || fam == ModelFamily::kGemma3;
  c.norm = any_gemma ? NormKind::kRmsOffset : fam == ModelFamily::kStarcoder2 ? NormKind::kLayerNorm : NormKind::kRms;
  c.mlp = fam == ModelFamily::kStarcoder2 ? MlpKind::kPlain : MlpKind::kGated;
  c.sandwich_norms = gemma;

  std::string act;
  if (any_gemma) {
    // Gemma's MLP reads hidden_activation only (gelu_pytorch_tanh when absent or null); the
    // hidden_act of early Gemma configs ("gelu") is ignored by transformers.
    ROTE_RETURN_IF_ERROR(f.String("hidden_activation", "gelu_pytorch_tanh", &act));
  } else {
    ROTE_RETURN_IF_ERROR(f.String("hidden_act", fam == ModelFamily::kStarcoder2 ? "gelu_pytorch_tanh" : "silu", &act));
  }
  if (act == "silu" || act == "swish") {
    c.activation = Activation::kSilu;
  } else if (act == "gelu_pytorch_tanh") {
    c.activation = Activation::kGeluTanh;
  } else {
    return refuse("hidden_act '" + act + "' (supported: silu, gelu_pytorch_tanh)");
  }

  // Sliding windows and which layers use them.
  int64_t window = 0;
  ROTE_RETURN_IF_ERROR(f.Int("sliding_window", gemma ? 4096 : 0, 1, kMaxPositions, &window));
  std::vector<bool> sliding(static_cast<size_t>(c.num_layers), false);
  switch (fam) {
    case ModelFamily::kQwen2:
    case ModelFamily::kQwen3:
    case ModelFamily::kQwen3Moe: {
      bool use = false;
      ROTE_RETURN_IF_ERROR(f.Bool("use_sliding_window", false, &use));
      if (use) return refuse("use_sliding_window = true");
      window = 0;
      break;
    }
    case ModelFamily::kLlama:
    case ModelFamily::kGranite:
    case ModelFamily::kGemma:
      window = 0;  // their attention takes no window
      break;
    case ModelFamily::kMistral:
    case ModelFamily::kPhi3:
    case ModelFamily::kStarcoder2:
      sliding.assign(sliding.size(), window > 0);  // every layer, when config.json sets one
      break;
    case ModelFamily::kGemma2:
    case ModelFamily::kGemma3: {
      int64_t pattern = 2;  // Gemma 2: even layers local, odd global
      if (fam == ModelFamily::kGemma3) {
        ROTE_RETURN_IF_ERROR(f.Int("sliding_window_pattern", 6, 1, kMaxLayers, &pattern));
      }
      for (int32_t i = 0; i < c.num_layers; ++i) sliding[i] = (i + 1) % pattern != 0;
      break;
    }
  }
  if (const Json* lt = f.Find("layer_types"); lt != nullptr && gemma) {
    if (!lt->is_array() || lt->size() != static_cast<size_t>(c.num_layers)) {
      return f.Error("layer_types", "must be a list of num_hidden_layers strings");
    }
    for (int32_t i = 0; i < c.num_layers; ++i) {
      const Json& t = (*lt)[static_cast<size_t>(i)];
      if (t == "sliding_attention") {
        sliding[i] = true;
      } else if (t == "full_attention") {
        sliding[i] = false;
      } else {
        return refuse("layer_types entry " + t.dump());
      }
    }
  }
  if (gemma) {
    double scalar = 0;
    ROTE_RETURN_IF_ERROR(f.Number("query_pre_attn_scalar", 256, 0.0, /*open_lo=*/true, 1e9, &scalar));
    c.attention_scale = 1.0f / sqrtf(static_cast<float>(scalar));
    double cap = 0;
    ROTE_RETURN_IF_ERROR(f.Number("attn_logit_softcapping", fam == ModelFamily::kGemma2 ? 50.0 : 0.0, 0.0,
                                  /*open_lo=*/false, 1e9, &cap));
    c.attn_logit_softcap = static_cast<float>(cap);
    ROTE_RETURN_IF_ERROR(f.Number("final_logit_softcapping", fam == ModelFamily::kGemma2 ? 30.0 : 0.0, 0.0,
                                  /*open_lo=*/false, 1e9, &cap));
    c.final_logit_softcap = static_cast<float>(cap);
    if (fam == ModelFamily::kGemma3) {
      ROTE_RETURN_IF_ERROR(f.Number("rope_local_base_freq", 10000.0, 0.0, /*open_lo=*/true, 1e30, &c.rope_local_theta));
    }
  }
  if (any_gemma) {
    // HF: embeddings * tensor(hidden_size ** 0.5) in the activations' dtype (fp32 here).
    c.embedding_multiplier = static_cast<float>(std::sqrt(static_cast<double>(c.hidden_size)));
  }
  if (fam == ModelFamily::kGranite) {
    double m = 0;
    ROTE_RETURN_IF_ERROR(f.Number("embedding_multiplier", 1.0, -1e9, /*open_lo=*/false, 1e9, &m));
    c.embedding_multiplier = static_cast<float>(m);
    ROTE_RETURN_IF_ERROR(f.Number("residual_multiplier", 1.0, -1e9, /*open_lo=*/false, 1e9, &m));
    c.residual_multiplier = static_cast<float>(m);
    ROTE_RETURN_IF_ERROR(f.Number("attention_multiplier", 1.0, 0.0, /*open_lo=*/true, 1e9, &m));
    c.attention_scale = static_cast<float>(m);
    ROTE_RETURN_IF_ERROR(f.Number("logits_scaling", 1.0, 0.0, /*open_lo=*/true, 1e9, &m));
    c.logits_divisor = static_cast<float>(m);
  }
  if (fam == ModelFamily::kPhi3) {
    double partial = 1.0;
    ROTE_RETURN_IF_ERROR(f.Number("partial_rotary_factor", 1.0, 0.0, /*open_lo=*/true, 1.0, &partial));
    // HF: dim = int(head_dim * partial_rotary_factor), truncating.
    c.rotary_dim = static_cast<int32_t>(static_cast<double>(c.head_dim) * partial);
    if (c.rotary_dim < 2 || c.rotary_dim % 2 != 0) {
      return f.Error("partial_rotary_factor", "gives " + std::to_string(c.rotary_dim) +
                                                  " rotary dimensions, which must be even and at least 2");
    }
  }
  if (fam == ModelFamily::kQwen3Moe) ROTE_RETURN_IF_ERROR(ParseExperts(f, &c));
  bool any_local = false;
  for (int32_t i = 0; i < c.num_layers; ++i) {
    LayerPlan p;
    if (sliding[i] && window > 0) {
      p.sliding_window = static_cast<int32_t>(window);
      p.local_rope = c.rope_local_theta > 0;
    }
    any_local = any_local || p.sliding_window > 0 || p.local_rope;
    c.layer_plan.push_back(p);
  }
  if (!any_local) c.layer_plan.clear();  // every layer full attention: the plain plan

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
    RopeScaling& s = c.rope_scaling;
    if (type == "llama3") {
      s.type = RopeScaling::Type::kLlama3;
      ROTE_RETURN_IF_ERROR(r.Number("factor", 8.0, 0.0, /*open_lo=*/true, 1e6, &s.factor));
      ROTE_RETURN_IF_ERROR(r.Number("low_freq_factor", 1.0, 0.0, /*open_lo=*/true, 1e6, &s.low_freq_factor));
      ROTE_RETURN_IF_ERROR(r.Number("high_freq_factor", 4.0, 0.0, /*open_lo=*/true, 1e6, &s.high_freq_factor));
      ROTE_RETURN_IF_ERROR(r.Int("original_max_position_embeddings", 8192, 1, kMaxPositions,
                                 &s.original_max_position_embeddings));
      if (!(s.high_freq_factor > s.low_freq_factor)) {
        return r.Error("high_freq_factor", "must be greater than low_freq_factor");
      }
    } else if (type == "linear") {
      s.type = RopeScaling::Type::kLinear;
      if (r.Find("factor") == nullptr) return r.Error("factor", "is missing");
      ROTE_RETURN_IF_ERROR(r.Number("factor", 1.0, 0.0, /*open_lo=*/true, 1e6, &s.factor));
    } else if (type == "longrope" || type == "su") {
      s.type = RopeScaling::Type::kLongRope;
      int64_t top_orig = 0;
      ROTE_RETURN_IF_ERROR(f.Int("original_max_position_embeddings", c.max_position_embeddings, 1, kMaxPositions,
                                 &top_orig));
      ROTE_RETURN_IF_ERROR(r.Int("original_max_position_embeddings", top_orig, 1, kMaxPositions,
                                 &s.original_max_position_embeddings));
      const int32_t half = c.rope_dim() / 2;
      for (const char* key : {"short_factor", "long_factor"}) {
        const Json* list = r.Find(key);
        if (list == nullptr || !list->is_array() || list->size() != static_cast<size_t>(half)) {
          return r.Error(key, "must be a list of " + std::to_string(half) + " numbers (rotary dimensions / 2)");
        }
        std::vector<double>& out = std::string(key) == "short_factor" ? s.short_factor : s.long_factor;
        for (const Json& x : *list) {
          if (!x.is_number() || !(x.get<double>() > 0) || !std::isfinite(x.get<double>())) {
            return r.Error(key, "entries must be positive finite numbers");
          }
          out.push_back(x.get<double>());
        }
      }
      // HF: factor = max_position_embeddings / original (Phi-3's convention) unless given;
      // attention_factor = sqrt(1 + ln(factor) / ln(original)) when factor > 1, unless given.
      double factor = static_cast<double>(c.max_position_embeddings) /
                      static_cast<double>(s.original_max_position_embeddings);
      ROTE_RETURN_IF_ERROR(r.Number("factor", factor, 0.0, /*open_lo=*/true, 1e6, &factor));
      s.factor = factor;
      double attention_factor = 1.0;
      if (factor > 1.0) {
        // rote_log, not libm: the value feeds the rotary tables, which every host must build alike.
        attention_factor = std::sqrt(1.0 + numerics::rote_log(factor) /
                                               numerics::rote_log(static_cast<double>(
                                                   s.original_max_position_embeddings)));
      }
      ROTE_RETURN_IF_ERROR(r.Number("attention_factor", attention_factor, 0.0, /*open_lo=*/true, 1e6,
                                    &s.attention_factor));
    } else if (type != "default") {
      return refuse("rope_scaling type '" + type + "' (supported: default, linear, llama3, longrope)");
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
  if (c.rotary_dim < 0 || c.rotary_dim > c.head_dim || c.rotary_dim % 2 != 0) {
    return InvalidArgument("model config: rotary_dim must be even and at most head_dim");
  }
  if (!c.layer_plan.empty() && c.layer_plan.size() != static_cast<size_t>(c.num_layers)) {
    return InvalidArgument("model config: the layer plan must have one entry per layer");
  }
  for (const LayerPlan& p : c.layer_plan) {
    if (p.sliding_window < 0) return InvalidArgument("model config: a sliding window must not be negative");
    if (p.local_rope && !c.has_local_rope()) {
      return InvalidArgument("model config: a layer uses the local rope but rope_local_theta is not set");
    }
  }
  if (!c.moe_layers.empty()) {
    if (c.moe_layers.size() != static_cast<size_t>(c.num_layers))
      return InvalidArgument("model config: the experts' layer list must have one entry per layer");
    if (c.num_experts <= 0 || c.num_experts > kMaxExperts) return out_of("num_experts", c.num_experts, kMaxExperts);
    if (c.experts_per_token <= 0 || c.experts_per_token > c.num_experts)
      return out_of("num_experts_per_tok", c.experts_per_token, c.num_experts);
    if (c.moe_intermediate_size <= 0 || c.moe_intermediate_size > kMaxIntermediate)
      return out_of("moe_intermediate_size", c.moe_intermediate_size, kMaxIntermediate);
  }
  if (!(c.rope_local_theta >= 0) || !std::isfinite(c.rope_local_theta)) {
    return InvalidArgument("model config: rope_local_theta must be non-negative and finite");
  }
  for (float v : {c.embedding_multiplier, c.residual_multiplier, c.attention_scale, c.attn_logit_softcap,
                  c.final_logit_softcap, c.logits_divisor}) {
    if (!std::isfinite(v)) return InvalidArgument("model config: multipliers and caps must be finite");
  }
  if (c.attention_scale < 0 || c.attn_logit_softcap < 0 || c.final_logit_softcap < 0 || !(c.logits_divisor > 0)) {
    return InvalidArgument("model config: attention scale and soft-caps must not be negative, logits_scaling positive");
  }
  const RopeScaling& rs = c.rope_scaling;
  if (rs.type == RopeScaling::Type::kLongRope) {
    const size_t half = static_cast<size_t>(c.rope_dim() / 2);
    if (rs.short_factor.size() != half || rs.long_factor.size() != half) {
      return InvalidArgument("model config: longrope factors must have rotary_dim / 2 entries each");
    }
  }
  if (rs.type != RopeScaling::Type::kDefault && (!(rs.factor > 0) || !std::isfinite(rs.factor))) {
    return InvalidArgument("model config: rope_scaling factor must be positive and finite");
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
