#include "inference/model/synth.h"

#include <sys/stat.h>  // mkdir

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <thread>
#include <nlohmann/json.hpp>  // header-only JSON writer
#include <vector>

#include "inference/model/safetensors.h"
#include "inference/util/sha256.h"

namespace rote::inference {

using Json = nlohmann::json;

namespace {

uint64_t SplitMix64(uint64_t x) {
  uint64_t z = x + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t NameKey(const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// fp32 -> bf16 / fp16 with round-to-nearest-even (values here are small and finite).
uint16_t F32ToBf16(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  const uint32_t rounding = 0x7fffu + ((b >> 16) & 1u);
  return static_cast<uint16_t>((b + rounding) >> 16);
}

uint16_t F32ToF16(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  const uint32_t sign = (b >> 16) & 0x8000u;
  const int32_t exp = static_cast<int32_t>((b >> 23) & 0xff) - 127 + 15;
  uint32_t mant = b & 0x7fffffu;
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  if (exp <= 0) {
    if (exp < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000u;
    const int shift = 14 - exp;
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = sign | (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;
  return static_cast<uint16_t>(half);
}

struct Spec {
  std::string name;
  std::vector<int64_t> shape;
  enum Kind { kMatrix, kNorm, kBias, kEmbed } kind;
};

// The tensors the loader binds for `c`, named as the family publishes them (weights.cc).
std::vector<Spec> TensorSpecs(const ModelConfig& c) {
  std::vector<Spec> s;
  const int64_t dim = c.hidden_size, q = c.q_dim(), kv = c.kv_dim(), hid = c.intermediate_size;
  const bool layer_norm = c.norm == NormKind::kLayerNorm;
  const bool fused = c.family == ModelFamily::kPhi3;
  const bool plain = c.mlp == MlpKind::kPlain;
  const std::string up = plain ? "mlp.c_fc" : "mlp.up_proj", down = plain ? "mlp.c_proj" : "mlp.down_proj";
  s.push_back({"model.embed_tokens.weight", {c.vocab_size, dim}, Spec::kEmbed});
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    s.push_back({p + "input_layernorm.weight", {dim}, Spec::kNorm});
    if (layer_norm) s.push_back({p + "input_layernorm.bias", {dim}, Spec::kBias});
    if (fused) {
      s.push_back({p + "self_attn.qkv_proj.weight", {q + 2 * kv, dim}, Spec::kMatrix});
    } else {
      s.push_back({p + "self_attn.q_proj.weight", {q, dim}, Spec::kMatrix});
      s.push_back({p + "self_attn.k_proj.weight", {kv, dim}, Spec::kMatrix});
      s.push_back({p + "self_attn.v_proj.weight", {kv, dim}, Spec::kMatrix});
    }
    if (c.attention_bias) {
      s.push_back({p + "self_attn.q_proj.bias", {q}, Spec::kBias});
      s.push_back({p + "self_attn.k_proj.bias", {kv}, Spec::kBias});
      s.push_back({p + "self_attn.v_proj.bias", {kv}, Spec::kBias});
    }
    if (c.qk_norm) {
      s.push_back({p + "self_attn.q_norm.weight", {c.head_dim}, Spec::kNorm});
      s.push_back({p + "self_attn.k_norm.weight", {c.head_dim}, Spec::kNorm});
    }
    s.push_back({p + "self_attn.o_proj.weight", {dim, q}, Spec::kMatrix});
    if (c.attention_out_bias) s.push_back({p + "self_attn.o_proj.bias", {dim}, Spec::kBias});
    s.push_back({p + "post_attention_layernorm.weight", {dim}, Spec::kNorm});
    if (layer_norm) s.push_back({p + "post_attention_layernorm.bias", {dim}, Spec::kBias});
    if (c.sandwich_norms) {
      s.push_back({p + "pre_feedforward_layernorm.weight", {dim}, Spec::kNorm});
      s.push_back({p + "post_feedforward_layernorm.weight", {dim}, Spec::kNorm});
    }
    if (c.is_moe_layer(i)) {
      const int64_t moe = c.moe_intermediate_size;
      s.push_back({p + "mlp.gate.weight", {c.num_experts, dim}, Spec::kMatrix});
      for (int e = 0; e < c.num_experts; ++e) {
        const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
        s.push_back({x + "gate_proj.weight", {moe, dim}, Spec::kMatrix});
        s.push_back({x + "up_proj.weight", {moe, dim}, Spec::kMatrix});
        s.push_back({x + "down_proj.weight", {dim, moe}, Spec::kMatrix});
      }
      continue;
    }
    if (fused) {
      s.push_back({p + "mlp.gate_up_proj.weight", {2 * hid, dim}, Spec::kMatrix});
    } else {
      if (!plain) s.push_back({p + "mlp.gate_proj.weight", {hid, dim}, Spec::kMatrix});
      s.push_back({p + up + ".weight", {hid, dim}, Spec::kMatrix});
    }
    s.push_back({p + down + ".weight", {dim, hid}, Spec::kMatrix});
    if (c.mlp_bias) {
      if (!plain) s.push_back({p + "mlp.gate_proj.bias", {hid}, Spec::kBias});
      s.push_back({p + up + ".bias", {hid}, Spec::kBias});
      s.push_back({p + down + ".bias", {dim}, Spec::kBias});
    }
  }
  s.push_back({"model.norm.weight", {dim}, Spec::kNorm});
  if (layer_norm) s.push_back({"model.norm.bias", {dim}, Spec::kBias});
  if (!c.tie_word_embeddings) s.push_back({"lm_head.weight", {c.vocab_size, dim}, Spec::kMatrix});
  return s;
}

// Element i of a tensor: uniform noise of a scale that keeps activations O(1) through the
// layers (like the fixtures: norms near 1, matrices ~ 1/sqrt(fan_in)).
float SynthValue(const Spec& spec, uint64_t key, int64_t i, bool norm_offset) {
  const uint64_t h = SplitMix64(key ^ SplitMix64(static_cast<uint64_t>(i)));
  const float u = static_cast<float>(h >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f;  // [-1, 1)
  switch (spec.kind) {
    case Spec::kNorm: return (norm_offset ? 0.0f : 1.0f) + 0.2f * u;  // Gemma: (1 + w) norms
    case Spec::kBias: return 0.2f * u;
    case Spec::kEmbed: return 1.7f * u;
    case Spec::kMatrix: return 1.7f * u / std::sqrt(static_cast<float>(spec.shape.back()));
  }
  return 0.0f;
}

std::string ByteToUnicode(int b) {
  // GPT-2's byte-level alphabet: printable bytes map to themselves, the rest to U+0100 + n.
  static const std::vector<int> table = [] {
    std::vector<int> t(256, -1);
    int n = 0;
    for (int c = 0; c < 256; ++c) {
      if ((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF)) {
        t[c] = c;
      } else {
        t[c] = 256 + n++;
      }
    }
    return t;
  }();
  const int cp = table[b];
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

const char* kQwenPattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";
const char* kLlamaPattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";

std::vector<std::string> SpecialTokens(ModelFamily f) {
  if (f == ModelFamily::kLlama) {
    return {"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
  }
  return {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
}

Json TokenizerJson(ModelFamily f) {
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b) vocab[ByteToUnicode(b)] = b;
  Json added = Json::array();
  int id = 256;
  for (const std::string& t : SpecialTokens(f)) {
    added.push_back({{"id", id++},
                     {"content", t},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  Json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = added;
  j["normalizer"] = f == ModelFamily::kLlama ? Json(nullptr) : Json({{"type", "NFC"}});
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"},
         {"pattern", {{"Regex", f == ModelFamily::kLlama ? kLlamaPattern : kQwenPattern}}},
         {"behavior", "Isolated"},
         {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}}}};
  j["post_processor"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
  j["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
  j["model"] = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", f == ModelFamily::kLlama},
                {"vocab", vocab},
                {"merges", Json::array()}};
  return j;
}

Status WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return FailedPrecondition(path + ": cannot create");
  out << text;
  out.close();
  if (!out) return DataLoss(path + ": write failed");
  return OkStatus();
}

}  // namespace

namespace {

// The dimensions of a shape and the Qwen/Llama basics, before the family's own features.
StatusOr<ModelConfig> BaseConfig(const SynthOptions& o) {
  ModelConfig c;
  c.family = o.family;
  c.dtype = o.dtype;
  c.rms_norm_eps = 1e-6f;
  const bool moe = o.family == ModelFamily::kQwen3Moe;
  const bool qwen3 = o.family == ModelFamily::kQwen3 || moe;
  const bool llama = o.family == ModelFamily::kLlama;
  if (moe && o.shape == "30b-a3b") {
    // Qwen3-Coder-30B-A3B-Instruct (its experts: SynthJson).
    c.hidden_size = 2048; c.intermediate_size = 6144; c.num_layers = 48; c.num_heads = 32; c.num_kv_heads = 4;
    c.head_dim = 128; c.vocab_size = 151936; c.max_position_embeddings = 262144; c.tie_word_embeddings = false;
    c.architecture = "Qwen3MoeForCausalLM";
    c.rope_theta = 10000000.0;
    c.bos_token_id = 256;
    c.eos_token_ids = {258, 256};
    return c;
  }
  if (o.shape == "tiny") {
    c.hidden_size = 64; c.intermediate_size = 128; c.num_layers = 2; c.num_heads = 4; c.num_kv_heads = 2;
    c.head_dim = 16; c.vocab_size = 384; c.max_position_embeddings = 4096; c.tie_word_embeddings = !llama;
  } else if (o.shape == "small") {
    c.hidden_size = 256; c.intermediate_size = 512; c.num_layers = 4; c.num_heads = 4; c.num_kv_heads = 2;
    c.head_dim = 64; c.vocab_size = 1024; c.max_position_embeddings = 4096; c.tie_word_embeddings = false;
  } else if (o.shape == "0.5b") {
    if (qwen3) {
      c.hidden_size = 1024; c.intermediate_size = 3072; c.num_layers = 28; c.num_heads = 16; c.num_kv_heads = 8;
      c.head_dim = 128;
    } else {
      c.hidden_size = 896; c.intermediate_size = 4864; c.num_layers = 24; c.num_heads = 14; c.num_kv_heads = 2;
      c.head_dim = 64;
    }
    c.vocab_size = llama ? 128256 : 151936; c.max_position_embeddings = 32768; c.tie_word_embeddings = true;
  } else if (o.shape == "1.5b") {
    if (qwen3) {
      c.hidden_size = 2048; c.intermediate_size = 6144; c.num_layers = 28; c.num_heads = 16; c.num_kv_heads = 8;
      c.head_dim = 128;
    } else {
      c.hidden_size = 1536; c.intermediate_size = 8960; c.num_layers = 28; c.num_heads = 12; c.num_kv_heads = 2;
      c.head_dim = 128;
    }
    c.vocab_size = llama ? 128256 : 151936; c.max_position_embeddings = 32768; c.tie_word_embeddings = true;
  } else if (o.shape == "7b" || o.shape == "14b" || o.shape == "32b") {
    // Qwen2.5-Coder-7B / 14B / 32B (every family but Qwen3, which takes Qwen3-8B / 14B / 32B).
    const int s = o.shape == "7b" ? 0 : o.shape == "14b" ? 1 : 2;
    if (qwen3) {
      static constexpr int32_t kDim[] = {4096, 5120, 5120}, kHid[] = {12288, 17408, 25600}, kLayers[] = {36, 40, 64},
                               kHeads[] = {32, 40, 64};
      c.hidden_size = kDim[s]; c.intermediate_size = kHid[s]; c.num_layers = kLayers[s]; c.num_heads = kHeads[s];
      c.num_kv_heads = 8;
    } else {
      static constexpr int32_t kDim[] = {3584, 5120, 5120}, kHid[] = {18944, 13824, 27648}, kLayers[] = {28, 48, 64},
                               kHeads[] = {28, 40, 40}, kKv[] = {4, 8, 8};
      c.hidden_size = kDim[s]; c.intermediate_size = kHid[s]; c.num_layers = kLayers[s]; c.num_heads = kHeads[s];
      c.num_kv_heads = kKv[s];
    }
    c.head_dim = 128;
    c.vocab_size = llama ? 128256 : qwen3 ? 151936 : 152064; c.max_position_embeddings = 32768;
    c.tie_word_embeddings = false;
  } else {
    return InvalidArgument("unknown synth shape '" + o.shape + "' (tiny, small, 0.5b, 1.5b, 7b, 14b, 32b" +
                           (moe ? ", 30b-a3b)" : ")"));
  }
  if (llama) {
    c.architecture = "LlamaForCausalLM";
    c.rope_theta = 500000.0;
    c.rope_scaling.type = RopeScaling::Type::kLlama3;
    c.rope_scaling.factor = 32.0;
    c.rope_scaling.low_freq_factor = 1.0;
    c.rope_scaling.high_freq_factor = 4.0;
    c.rope_scaling.original_max_position_embeddings = 8192;
    c.rms_norm_eps = 1e-5f;
    c.bos_token_id = 256;
    c.eos_token_ids = {257, 260};  // <|end_of_text|>, <|eot_id|>
  } else {
    c.architecture = moe ? "Qwen3MoeForCausalLM" : qwen3 ? "Qwen3ForCausalLM" : "Qwen2ForCausalLM";
    c.rope_theta = 1000000.0;
    c.bos_token_id = 256;
    c.eos_token_ids = {258, 256};  // <|im_end|>, <|endoftext|>
  }
  return c;
}

// config.json and generation_config.json of a synthesized model: the published keys of its
// family. The ModelConfig of the model is what ParseModelConfig reads from them (SynthConfig).
StatusOr<std::pair<Json, Json>> SynthJson(const SynthOptions& o) {
  ROTE_ASSIGN_OR_RETURN(ModelConfig c, BaseConfig(o));
  if (o.layers < 0) return InvalidArgument("synth: layers must be 0 (the shape's) or more");
  if (o.layers > 0) c.num_layers = std::min(c.num_layers, o.layers);
  const ModelFamily fam = c.family;
  const bool llama = fam == ModelFamily::kLlama;
  const bool small = o.shape == "tiny" || o.shape == "small";
  // Windows shorter than the prompts the tests use at the small shapes; published sizes above.
  const int32_t window = small ? 24 : 4096;
  Json cfg;
  static const char* kArchitectures[] = {"Qwen2ForCausalLM",  "LlamaForCausalLM",      "Qwen3ForCausalLM",
                                         "MistralForCausalLM", "Gemma2ForCausalLM",     "Gemma3ForCausalLM",
                                         "Phi3ForCausalLM",    "Starcoder2ForCausalLM", "GraniteForCausalLM",
                                         "GemmaForCausalLM",   "Qwen3MoeForCausalLM"};
  cfg["architectures"] = {kArchitectures[static_cast<int>(fam)]};
  cfg["model_type"] = std::string(ModelFamilyName(fam));
  cfg["vocab_size"] = c.vocab_size;
  cfg["hidden_size"] = c.hidden_size;
  cfg["intermediate_size"] = c.intermediate_size;
  cfg["num_hidden_layers"] = c.num_layers;
  cfg["num_attention_heads"] = c.num_heads;
  cfg["num_key_value_heads"] = c.num_kv_heads;
  cfg["head_dim"] = c.head_dim;
  cfg["max_position_embeddings"] = c.max_position_embeddings;
  cfg["rope_theta"] = c.rope_theta;
  cfg["rms_norm_eps"] = c.rms_norm_eps;
  cfg["tie_word_embeddings"] = c.tie_word_embeddings;
  cfg["hidden_act"] = "silu";
  cfg["torch_dtype"] = c.dtype == DType::kBF16 ? "bfloat16" : c.dtype == DType::kF16 ? "float16" : "float32";
  cfg["bos_token_id"] = c.bos_token_id;
  cfg["eos_token_id"] = c.eos_token_ids[0];
  if (llama) {
    cfg["rope_scaling"] = {{"rope_type", "llama3"},
                           {"factor", c.rope_scaling.factor},
                           {"low_freq_factor", c.rope_scaling.low_freq_factor},
                           {"high_freq_factor", c.rope_scaling.high_freq_factor},
                           {"original_max_position_embeddings", c.rope_scaling.original_max_position_embeddings}};
    cfg["attention_bias"] = false;
    cfg["mlp_bias"] = false;
  } else if (fam == ModelFamily::kQwen2 || fam == ModelFamily::kQwen3 || fam == ModelFamily::kQwen3Moe) {
    cfg["rope_scaling"] = nullptr;
    cfg["use_sliding_window"] = false;
    if (fam != ModelFamily::kQwen2) cfg["attention_bias"] = false;
  }
  switch (fam) {
    case ModelFamily::kQwen2:
    case ModelFamily::kLlama:
    case ModelFamily::kQwen3:
      break;
    case ModelFamily::kQwen3Moe:
      // Qwen3-Coder-30B-A3B's experts at 30b-a3b; 40 experts, 4 a token, of an eighth of the dense
      // width at small; 8, 2 a token, of a quarter elsewhere; one dense layer (mlp_only_layers) at
      // tiny and small.
      if (o.shape == "30b-a3b") {
        cfg["num_experts"] = 128;
        cfg["num_experts_per_tok"] = 8;
        cfg["moe_intermediate_size"] = 768;
        cfg["mlp_only_layers"] = Json::array();
      } else if (o.shape == "small") {
        // More experts than a warp has lanes: the device route's lanes hold several each.
        cfg["num_experts"] = 40;
        cfg["num_experts_per_tok"] = 4;
        cfg["moe_intermediate_size"] = c.intermediate_size / 8;
        cfg["mlp_only_layers"] = Json::array({1});
      } else {
        cfg["num_experts"] = 8;
        cfg["num_experts_per_tok"] = 2;
        cfg["moe_intermediate_size"] = c.intermediate_size / 4;
        cfg["mlp_only_layers"] = small ? Json::array({1}) : Json::array();
      }
      cfg["norm_topk_prob"] = true;
      cfg["decoder_sparse_step"] = 1;
      break;
    case ModelFamily::kMistral:
      cfg["sliding_window"] = window;
      cfg["rms_norm_eps"] = 1e-5;
      break;
    case ModelFamily::kGemma2:
    case ModelFamily::kGemma3: {
      const bool g2 = fam == ModelFamily::kGemma2;
      cfg["hidden_act"] = "gelu_pytorch_tanh";
      cfg["hidden_activation"] = "gelu_pytorch_tanh";
      cfg["query_pre_attn_scalar"] = c.head_dim + 8;  // unlike head_dim, as Gemma 2 27B
      cfg["sliding_window"] = window;
      cfg["attn_logit_softcapping"] = g2 ? Json(50.0) : Json(nullptr);
      cfg["final_logit_softcapping"] = g2 ? Json(30.0) : Json(nullptr);
      cfg["tie_word_embeddings"] = true;
      if (!g2) {
        cfg["model_type"] = "gemma3_text";
        cfg["rope_local_base_freq"] = 10000.0;
        cfg["sliding_window_pattern"] = c.num_layers <= 4 ? 2 : 6;  // a global layer at every shape
      }
      break;
    }
    case ModelFamily::kPhi3: {
      // Phi-4-mini: three quarters of each head rotate; longrope with a switch to the long
      // factors that the small shapes' decode crosses.
      const int32_t half = c.head_dim * 3 / 8;
      Json shorts = Json::array(), longs = Json::array();
      for (int32_t i = 0; i < half; ++i) {
        shorts.push_back(1.0 + 0.125 * (i % 5));
        longs.push_back(1.0 + 1.5 * i);
      }
      cfg["partial_rotary_factor"] = 0.75;
      cfg["original_max_position_embeddings"] = small ? 32 : 4096;
      cfg["max_position_embeddings"] = small ? 4096 : 131072;
      cfg["rope_scaling"] = {{"type", "longrope"}, {"short_factor", shorts}, {"long_factor", longs}};
      cfg["sliding_window"] = small ? window : 262144;
      cfg["rms_norm_eps"] = 1e-5;
      cfg["tie_word_embeddings"] = true;
      break;
    }
    case ModelFamily::kStarcoder2:
      cfg.erase("rms_norm_eps");
      cfg["norm_epsilon"] = 1e-5;
      cfg["hidden_act"] = "gelu_pytorch_tanh";
      cfg["use_bias"] = true;
      cfg["sliding_window"] = window;
      cfg["tie_word_embeddings"] = true;
      break;
    case ModelFamily::kGemma:
      cfg["hidden_act"] = "gelu";  // as CodeGemma's config.json: ignored, hidden_activation decides
      cfg["hidden_activation"] = "gelu_pytorch_tanh";
      cfg["tie_word_embeddings"] = true;
      break;
    case ModelFamily::kGranite:
      cfg["embedding_multiplier"] = 12.0;
      cfg["residual_multiplier"] = 0.22;
      cfg["attention_multiplier"] = 1.0 / c.head_dim;
      cfg["logits_scaling"] = 8.0;
      cfg["attention_bias"] = false;
      cfg["mlp_bias"] = false;
      cfg["rope_theta"] = 10000000.0;
      cfg["rms_norm_eps"] = 1e-5;
      break;
  }
  if (cfg.contains("mlp_only_layers")) {  // a shape cut to its first layers keeps the dense ones among them
    Json kept = Json::array();
    for (const Json& i : cfg["mlp_only_layers"])
      if (i.get<int64_t>() < c.num_layers) kept.push_back(i);
    cfg["mlp_only_layers"] = kept;
  }
  Json gen = {{"bos_token_id", c.bos_token_id}, {"eos_token_id", c.eos_token_ids}, {"do_sample", false}};
  return std::make_pair(cfg, gen);
}

// A safetensors image of `c`'s tensors: the length-prefixed header (padded to 8 bytes), then
// the tensors in spec order at `offset` bytes past the header.
struct SynthImage {
  std::vector<Spec> specs;
  std::vector<int64_t> numel, offset;
  std::string header;  // the 8-byte length and the JSON header
  uint64_t bytes = 0;  // header plus data
};

SynthImage LayOut(const ModelConfig& c) {
  SynthImage image;
  image.specs = TensorSpecs(c);
  const int elem = DTypeSize(c.dtype);
  Json header = Json::object();
  uint64_t offset = 0;
  for (const Spec& s : image.specs) {
    int64_t n = 1;
    for (int64_t d : s.shape) n *= d;
    image.numel.push_back(n);
    image.offset.push_back(static_cast<int64_t>(offset));
    header[s.name] = {{"dtype", std::string(DTypeName(c.dtype))}, {"shape", s.shape},
                      {"data_offsets", {offset, offset + static_cast<uint64_t>(n) * elem}}};
    offset += static_cast<uint64_t>(n) * elem;
  }
  header["__metadata__"] = {{"format", "pt"}};
  std::string h = header.dump();
  while (h.size() % 8 != 0) h.push_back(' ');
  image.header.resize(8);
  for (int i = 0; i < 8; ++i) image.header[i] = static_cast<char>((h.size() >> (8 * i)) & 0xff);
  image.header += h;
  image.bytes = image.header.size() + offset;
  return image;
}

// Elements [first, last) of tensor `s`, in c.dtype, to `out` (element `first` first).
void FillTensor(const ModelConfig& c, uint64_t seed, const Spec& s, int64_t first, int64_t last, uint8_t* out) {
  const uint64_t key = SplitMix64(seed ^ NameKey(s.name));
  const bool offset_norm = c.norm == NormKind::kRmsOffset;
  for (int64_t i = first; i < last; ++i) {
    const float v = SynthValue(s, key, i, offset_norm);
    uint8_t* dst = out + (i - first) * DTypeSize(c.dtype);
    if (c.dtype == DType::kF32) {
      std::memcpy(dst, &v, 4);
    } else {
      const uint16_t b = c.dtype == DType::kBF16 ? F32ToBf16(v) : F32ToF16(v);
      std::memcpy(dst, &b, 2);
    }
  }
}

}  // namespace

StatusOr<ModelConfig> SynthConfig(const SynthOptions& o) {
  ROTE_ASSIGN_OR_RETURN(auto json, SynthJson(o));
  return ParseModelConfig(json.first.dump(), json.second.dump(), "synthesized config.json");
}

Status SynthesizeModel(const SynthOptions& o, const std::string& dir) {
  ROTE_ASSIGN_OR_RETURN(auto json, SynthJson(o));
  ROTE_ASSIGN_OR_RETURN(ModelConfig c, SynthConfig(o));
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return FailedPrecondition(dir + ": cannot create directory: " + std::strerror(errno));
  }
  const bool llama = c.family == ModelFamily::kLlama;
  ROTE_RETURN_IF_ERROR(WriteText(dir + "/config.json", json.first.dump(2) + "\n"));
  ROTE_RETURN_IF_ERROR(WriteText(dir + "/generation_config.json", json.second.dump(2) + "\n"));
  ROTE_RETURN_IF_ERROR(WriteText(dir + "/tokenizer.json", TokenizerJson(c.family).dump(2) + "\n"));
  Json tok_cfg = {{"add_bos_token", false},
                  {"bos_token", llama ? Json("<|begin_of_text|>") : Json(nullptr)},
                  {"eos_token", llama ? "<|eot_id|>" : "<|im_end|>"},
                  {"model_max_length", c.max_position_embeddings},
                  {"tokenizer_class", llama ? "PreTrainedTokenizerFast" : "Qwen2Tokenizer"}};
  ROTE_RETURN_IF_ERROR(WriteText(dir + "/tokenizer_config.json", tok_cfg.dump(2) + "\n"));

  // model.safetensors, streamed: header first, then each tensor generated and written.
  const SynthImage image = LayOut(c);
  const std::string path = dir + "/model.safetensors";
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return FailedPrecondition(path + ": cannot create");
  out.write(image.header.data(), static_cast<std::streamsize>(image.header.size()));
  std::vector<uint8_t> buf;
  for (size_t t = 0; t < image.specs.size(); ++t) {
    buf.resize(static_cast<size_t>(image.numel[t]) * DTypeSize(c.dtype));
    FillTensor(c, o.seed, image.specs[t], 0, image.numel[t], buf.data());
    out.write(reinterpret_cast<const char*>(buf.data()), static_cast<std::streamsize>(buf.size()));
  }
  out.close();
  if (!out) return DataLoss(path + ": write failed");
  return OkStatus();
}

StatusOr<std::shared_ptr<const Model>> SynthesizeModelInMemory(const SynthOptions& o, int threads) {
  ROTE_ASSIGN_OR_RETURN(auto json, SynthJson(o));
  ROTE_ASSIGN_OR_RETURN(ModelConfig c, SynthConfig(o));
  ModelTexts texts;
  texts.config_json = json.first.dump(2) + "\n";
  texts.generation_json = json.second.dump(2) + "\n";
  const SynthImage image = LayOut(c);
  const std::string label = "synth:" + std::string(ModelFamilyName(c.family)) + ":" + o.shape +
                            (o.layers > 0 ? ":" + std::to_string(c.num_layers) + "-layers" : "");
  // Work in chunks of at most 16 Mi elements, claimed in order by `threads` workers: every byte
  // is a function of (seed, tensor name, index) alone, so the split never changes the image.
  struct Chunk {
    size_t tensor;
    int64_t first, last;
  };
  std::vector<Chunk> chunks;
  for (size_t t = 0; t < image.specs.size(); ++t)
    for (int64_t f = 0; f < image.numel[t]; f += int64_t{1} << 24)
      chunks.push_back({t, f, std::min(image.numel[t], f + (int64_t{1} << 24))});
  auto fill = [&](uint8_t* base) -> Status {
    std::memcpy(base, image.header.data(), image.header.size());
    uint8_t* data = base + image.header.size();
    std::atomic<size_t> next{0};
    auto work = [&] {
      for (size_t k; (k = next.fetch_add(1)) < chunks.size();) {
        const Chunk& ch = chunks[k];
        FillTensor(c, o.seed, image.specs[ch.tensor], ch.first, ch.last,
                   data + image.offset[ch.tensor] + ch.first * DTypeSize(c.dtype));
      }
    };
    std::vector<std::thread> pool;
    for (int i = 1; i < std::max(1, threads); ++i) pool.emplace_back(work);
    work();
    for (std::thread& th : pool) th.join();
    return OkStatus();
  };
  ROTE_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> mapped, MappedFile::Anonymous(image.bytes, label, fill));
  // The digest names what decides every byte: the configs, the dtype (in config.json) and the seed.
  Sha256 h;
  const std::string identity = "rote-synth-model-v1\n" + texts.config_json + texts.generation_json + o.shape + "\n" +
                               std::to_string(o.seed);
  h.Update(identity.data(), identity.size());
  return Model::FromImage(label, texts, std::move(mapped), h.FinishHex());
}

}  // namespace rote::inference
