// Synthesized model directories for the CUDA tests and benchmark: config.json plus
// model.safetensors with deterministic pseudo-random weights (SplitMix64), in any family and
// dtype, at any size (up to the real Qwen2.5-0.5B / 1.5B shapes).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "inference/model/config.h"
#include "inference/model/safetensors.h"

namespace rote::inference::cuda_test {

struct SynthSpec {
  ModelFamily family = ModelFamily::kQwen2;
  DType dtype = DType::kBF16;
  int32_t vocab = 512;
  int32_t hidden = 160;
  int32_t intermediate = 416;
  int32_t layers = 2;
  int32_t heads = 5;
  int32_t kv_heads = 1;
  int32_t head_dim = 32;
  bool tied = true;
  uint64_t seed = 1;
  // Llama only: HF's "linear" rope scaling of this factor instead of "llama3" (DeepSeek-Coder).
  double linear_rope_factor = 0.0;
};

inline uint64_t SplitMix(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [-scale, scale) (sum of two uniforms: a rough bell, cheap) stored as dtype.
inline std::string RandomTensorBytes(DType dtype, int64_t n, float scale, float offset, uint64_t seed) {
  std::string bytes(static_cast<size_t>(n) * DTypeSize(dtype), '\0');
  uint64_t state = seed * 0x2545F4914F6CDD1Dull + 12345;
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t r = SplitMix(state);
    const float u1 = static_cast<float>(r >> 40) * (1.0f / 16777216.0f);
    const float u2 = static_cast<float>((r >> 16) & 0xffffff) * (1.0f / 16777216.0f);
    const float v = offset + scale * (u1 + u2 - 1.0f);
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    if (dtype == DType::kF32) {
      std::memcpy(bytes.data() + i * 4, &bits, 4);
    } else if (dtype == DType::kBF16) {
      const uint16_t h = static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);  // round to nearest even
      std::memcpy(bytes.data() + i * 2, &h, 2);
    } else {
      // fp16 via a simple round-to-nearest of normal values (weights here are well inside range).
      const uint32_t sign = (bits >> 16) & 0x8000u;
      const float a = std::fabs(v);
      uint16_t h;
      if (a < 6.1035156e-05f) {
        h = static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(a / 5.9604645e-08f)));
      } else {
        uint32_t ab;
        std::memcpy(&ab, &a, 4);
        const uint32_t rounded = ab + 0xfffu + ((ab >> 13) & 1u);
        h = static_cast<uint16_t>(sign | (((rounded >> 23) - 112u) << 10) | ((rounded >> 13) & 0x3ffu));
      }
      std::memcpy(bytes.data() + i * 2, &h, 2);
    }
  }
  return bytes;
}

inline std::string DTypeTorchName(DType d) {
  return d == DType::kBF16 ? "bfloat16" : d == DType::kF16 ? "float16" : "float32";
}

// Writes dir/config.json and dir/model.safetensors. Returns false on an I/O error.
inline bool WriteSynthModel(const std::string& dir, const SynthSpec& s) {
  std::filesystem::create_directories(dir);
  const char* arch = s.family == ModelFamily::kQwen2   ? "Qwen2ForCausalLM"
                     : s.family == ModelFamily::kLlama ? "LlamaForCausalLM"
                                                       : "Qwen3ForCausalLM";
  const char* type = s.family == ModelFamily::kQwen2 ? "qwen2" : s.family == ModelFamily::kLlama ? "llama" : "qwen3";
  std::string config = std::string("{\"architectures\": [\"") + arch + "\"], \"model_type\": \"" + type + "\"" +
                       ", \"vocab_size\": " + std::to_string(s.vocab) + ", \"hidden_size\": " +
                       std::to_string(s.hidden) + ", \"intermediate_size\": " + std::to_string(s.intermediate) +
                       ", \"num_hidden_layers\": " + std::to_string(s.layers) + ", \"num_attention_heads\": " +
                       std::to_string(s.heads) + ", \"num_key_value_heads\": " + std::to_string(s.kv_heads) +
                       ", \"head_dim\": " + std::to_string(s.head_dim) +
                       ", \"max_position_embeddings\": 32768, \"rms_norm_eps\": 1e-06" +
                       ", \"tie_word_embeddings\": " + (s.tied ? "true" : "false") + ", \"torch_dtype\": \"" +
                       DTypeTorchName(s.dtype) + "\"";
  if (s.family == ModelFamily::kLlama && s.linear_rope_factor > 0) {
    config += ", \"rope_theta\": 100000.0, \"rope_scaling\": {\"type\": \"linear\", \"factor\": " +
              std::to_string(s.linear_rope_factor) + "}";
  } else if (s.family == ModelFamily::kLlama) {
    config += ", \"rope_theta\": 500000.0, \"rope_scaling\": {\"factor\": 32.0, \"low_freq_factor\": 1.0, "
              "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"}";
  } else {
    config += ", \"rope_theta\": 1000000.0";
  }
  if (s.family == ModelFamily::kQwen2) config += ", \"attention_bias\": true";
  config += ", \"bos_token_id\": 1, \"eos_token_id\": 2}\n";

  std::vector<SafetensorsWriteTensor> tensors;
  uint64_t seed = s.seed * 1000003;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, float scale, float offset) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    tensors.push_back({name, s.dtype, shape, RandomTensorBytes(s.dtype, n, scale, offset, ++seed)});
  };
  const int64_t qd = static_cast<int64_t>(s.heads) * s.head_dim, kvd = static_cast<int64_t>(s.kv_heads) * s.head_dim;
  const float ws = 1.0f / std::sqrt(static_cast<float>(s.hidden));
  const float ds = 1.0f / std::sqrt(static_cast<float>(s.intermediate));
  add("model.embed_tokens.weight", {s.vocab, s.hidden}, 0.5f, 0.0f);
  for (int l = 0; l < s.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {s.hidden}, 0.2f, 1.0f);
    add(p + "self_attn.q_proj.weight", {qd, s.hidden}, ws, 0.0f);
    add(p + "self_attn.k_proj.weight", {kvd, s.hidden}, ws, 0.0f);
    add(p + "self_attn.v_proj.weight", {kvd, s.hidden}, ws, 0.0f);
    if (s.family == ModelFamily::kQwen2) {
      add(p + "self_attn.q_proj.bias", {qd}, 0.5f, 0.0f);
      add(p + "self_attn.k_proj.bias", {kvd}, 0.5f, 0.0f);
      add(p + "self_attn.v_proj.bias", {kvd}, 0.5f, 0.0f);
    }
    if (s.family == ModelFamily::kQwen3) {
      add(p + "self_attn.q_norm.weight", {s.head_dim}, 0.2f, 1.0f);
      add(p + "self_attn.k_norm.weight", {s.head_dim}, 0.2f, 1.0f);
    }
    add(p + "self_attn.o_proj.weight", {s.hidden, qd}, ws, 0.0f);
    add(p + "post_attention_layernorm.weight", {s.hidden}, 0.2f, 1.0f);
    add(p + "mlp.gate_proj.weight", {s.intermediate, s.hidden}, ws, 0.0f);
    add(p + "mlp.up_proj.weight", {s.intermediate, s.hidden}, ws, 0.0f);
    add(p + "mlp.down_proj.weight", {s.hidden, s.intermediate}, ds, 0.0f);
  }
  add("model.norm.weight", {s.hidden}, 0.2f, 1.0f);
  if (!s.tied) add("lm_head.weight", {s.vocab, s.hidden}, ws, 0.0f);

  std::ofstream cf(dir + "/config.json", std::ios::binary);
  cf << config;
  if (!cf) return false;
  const std::string image = SerializeSafetensors(tensors);
  std::ofstream mf(dir + "/model.safetensors", std::ios::binary);
  mf.write(image.data(), static_cast<std::streamsize>(image.size()));
  return static_cast<bool>(mf);
}

// Qwen2.5 shapes of the benchmark (hf_peer.py's SHAPES), vocab 151936, tied embeddings.
inline SynthSpec Qwen25Shape(const std::string& name) {
  SynthSpec s;
  s.family = ModelFamily::kQwen2;
  s.dtype = DType::kBF16;
  s.vocab = 151936;
  s.tied = true;
  if (name == "1.5b") {
    s.hidden = 1536, s.intermediate = 8960, s.layers = 28, s.heads = 12, s.kv_heads = 2, s.head_dim = 128;
  } else {
    s.hidden = 896, s.intermediate = 4864, s.layers = 24, s.heads = 14, s.kv_heads = 2, s.head_dim = 64;
  }
  return s;
}

}  // namespace rote::inference::cuda_test
