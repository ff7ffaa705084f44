// The model families beyond Qwen and Llama: config.json as the published checkpoints write it
// reads into the ModelConfig the backends follow; what rote cannot honour is INVALID_ARGUMENT
// naming the supported model types; every family synthesizes, loads and runs; sliding windows and
// Gemma's local/global alternation limit what a position sees, bit for bit. (The logits against
// transformers are reference_test's.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "inference/backend.h"
#include "inference/model/config.h"
#include "inference/model/synth.h"
#include "inference/model/weights.h"
#include "tests/inference/test_backend.h"
#include "tests/inference/test_models.h"

namespace rote::inference {
namespace {

using Json = nlohmann::json;
using ::testing::HasSubstr;

ModelConfig Parse(const Json& j) {
  auto c = ParseModelConfig(j.dump(), "", "dir/config.json");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? *c : ModelConfig{};
}

Json Base(const char* model_type, const char* architecture) {
  return {{"architectures", {architecture}}, {"model_type", model_type}, {"torch_dtype", "bfloat16"},
          {"bos_token_id", 1},           {"eos_token_id", 2}};
}

// The CPU backend's logits of every position of `tokens` (at most 16) under `model`.
std::vector<float> EveryLogit(const std::shared_ptr<const Model>& model, const std::vector<int32_t>& tokens) {
  auto backend = CreateCpuBackend(model, CpuBackendOptions{}).value();
  EXPECT_TRUE(backend->AllocateKvCache(2).ok());
  const std::vector<int32_t> blocks = {0};
  BatchPlan plan;
  plan.sequences.push_back({tokens, 0, blocks, static_cast<int32_t>(tokens.size())});
  std::vector<float> logits;
  EXPECT_TRUE(backend->Forward(plan, &logits).ok());
  return logits;
}

TEST(ModelFamiliesTest, MistralSlidesOnEveryLayer) {
  Json j = Base("mistral", "MistralForCausalLM");
  j.update({{"hidden_size", 4096}, {"intermediate_size", 14336}, {"num_hidden_layers", 32},
            {"num_attention_heads", 32}, {"num_key_value_heads", 8}, {"max_position_embeddings", 32768},
            {"rms_norm_eps", 1e-5}, {"rope_theta", 10000.0}, {"sliding_window", 4096},
            {"tie_word_embeddings", false}, {"vocab_size", 32000}, {"hidden_act", "silu"}});
  const ModelConfig c = Parse(j);
  EXPECT_EQ(c.family, ModelFamily::kMistral);
  EXPECT_EQ(c.model_type, "mistral");
  ASSERT_EQ(c.layer_plan.size(), 32u);
  for (const LayerPlan& p : c.layer_plan) EXPECT_EQ(p.sliding_window, 4096);
  EXPECT_EQ(c.scale(), 1.0f / sqrtf(128.0f));
  EXPECT_EQ(FirstVisibleKey(c.plan(0), 4095), 0);
  EXPECT_EQ(FirstVisibleKey(c.plan(0), 4096), 1);
  // Codestral / Nemo: no window.
  j["sliding_window"] = nullptr;
  EXPECT_TRUE(Parse(j).layer_plan.empty());
}

TEST(ModelFamiliesTest, Gemma2NormsCapsAndAlternatingLayers) {
  Json j = Base("gemma2", "Gemma2ForCausalLM");
  j.update({{"hidden_size", 2304}, {"intermediate_size", 9216}, {"num_hidden_layers", 26},
            {"num_attention_heads", 8}, {"num_key_value_heads", 4}, {"head_dim", 256},
            {"query_pre_attn_scalar", 256}, {"attn_logit_softcapping", 50.0}, {"final_logit_softcapping", 30.0},
            {"sliding_window", 4096}, {"vocab_size", 256000}, {"hidden_act", "gelu_pytorch_tanh"},
            {"hidden_activation", "gelu_pytorch_tanh"}, {"rms_norm_eps", 1e-6}, {"rope_theta", 10000.0},
            {"max_position_embeddings", 8192}, {"cache_implementation", "hybrid"}});
  const ModelConfig c = Parse(j);
  EXPECT_EQ(c.norm, NormKind::kRmsOffset);
  EXPECT_EQ(c.activation, Activation::kGeluTanh);
  EXPECT_TRUE(c.sandwich_norms);
  EXPECT_TRUE(c.tie_word_embeddings);  // Gemma's default
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.embedding_multiplier, 48.0f);
  EXPECT_EQ(c.scale(), 1.0f / 16.0f);
  EXPECT_EQ(c.attn_logit_softcap, 50.0f);
  EXPECT_EQ(c.final_logit_softcap, 30.0f);
  ASSERT_EQ(c.layer_plan.size(), 26u);
  for (int i = 0; i < 26; ++i) EXPECT_EQ(c.plan(i).sliding_window, i % 2 == 0 ? 4096 : 0) << i;
  // An explicit layer_types list wins over the pattern.
  j["layer_types"] = Json::array();
  for (int i = 0; i < 26; ++i) j["layer_types"].push_back(i < 2 ? "full_attention" : "sliding_attention");
  const ModelConfig d = Parse(j);
  EXPECT_EQ(d.plan(0).sliding_window, 0);
  EXPECT_EQ(d.plan(3).sliding_window, 4096);
  // Gemma 1's exact GELU is not GELU-tanh.
  j["hidden_activation"] = "gelu";
  const Status s = ParseModelConfig(j.dump(), "", "dir/config.json").status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("gelu"));
}

TEST(ModelFamiliesTest, CodeGemmaReadsHiddenActivationOnly) {
  Json j = Base("gemma", "GemmaForCausalLM");
  j.update({{"hidden_size", 3072}, {"intermediate_size", 24576}, {"num_hidden_layers", 28},
            {"num_attention_heads", 16}, {"num_key_value_heads", 16}, {"head_dim", 256},
            {"hidden_act", "gelu"}, {"vocab_size", 256000}, {"rms_norm_eps", 1e-6}, {"rope_theta", 10000.0},
            {"max_position_embeddings", 8192}});
  const ModelConfig c = Parse(j);
  EXPECT_EQ(c.family, ModelFamily::kGemma);
  EXPECT_EQ(c.activation, Activation::kGeluTanh);  // transformers ignores Gemma's hidden_act
  EXPECT_EQ(c.norm, NormKind::kRmsOffset);
  EXPECT_FALSE(c.sandwich_norms);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.embedding_multiplier, static_cast<float>(std::sqrt(3072.0)));
  EXPECT_EQ(c.scale(), 1.0f / 16.0f);
  EXPECT_TRUE(c.layer_plan.empty());
}

TEST(ModelFamiliesTest, Gemma3LocalRopeAndPattern) {
  Json j = Base("gemma3_text", "Gemma3ForCausalLM");
  j.update({{"hidden_size", 1152}, {"intermediate_size", 6912}, {"num_hidden_layers", 26},
            {"num_attention_heads", 4}, {"num_key_value_heads", 1}, {"head_dim", 256},
            {"query_pre_attn_scalar", 256}, {"sliding_window", 512}, {"sliding_window_pattern", 6},
            {"rope_local_base_freq", 10000.0}, {"rope_theta", 1000000.0}, {"vocab_size", 262144},
            {"final_logit_softcapping", nullptr}, {"attn_logit_softcapping", nullptr}, {"rope_scaling", nullptr},
            {"hidden_activation", "gelu_pytorch_tanh"}, {"max_position_embeddings", 32768}});
  const ModelConfig c = Parse(j);
  EXPECT_EQ(c.family, ModelFamily::kGemma3);
  EXPECT_EQ(c.model_type, "gemma3_text");
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.norm, NormKind::kRmsOffset);
  EXPECT_EQ(c.attn_logit_softcap, 0.0f);
  EXPECT_EQ(c.final_logit_softcap, 0.0f);
  EXPECT_EQ(c.rope_local_theta, 10000.0);
  for (int i = 0; i < 26; ++i) {
    const bool global = (i + 1) % 6 == 0;
    EXPECT_EQ(c.plan(i).sliding_window, global ? 0 : 512) << i;
    EXPECT_EQ(c.plan(i).local_rope, !global) << i;
  }
}

// Gemma 3 4B-27B: Gemma3ForConditionalGeneration, whose text_config (as gemma-3-4b-it publishes
// it) leaves out what equals the text config's defaults.
TEST(ModelFamiliesTest, Gemma3MultimodalRunsItsTextModel) {
  Json mm = Base("gemma3", "Gemma3ForConditionalGeneration");
  mm["eos_token_id"] = {1, 106};
  mm["text_config"] = {{"hidden_size", 2560}, {"intermediate_size", 10240}, {"model_type", "gemma3_text"},
                       {"num_hidden_layers", 34}, {"rope_scaling", {{"factor", 8.0}, {"rope_type", "linear"}}},
                       {"sliding_window", 1024}};
  mm["vision_config"] = {{"model_type", "siglip_vision_model"}};
  const ModelConfig c = Parse(mm);
  EXPECT_EQ(c.family, ModelFamily::kGemma3);
  EXPECT_EQ(c.model_type, "gemma3");
  EXPECT_EQ(c.architecture, "Gemma3ForConditionalGeneration");
  EXPECT_EQ(c.vocab_size, 262208);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.num_heads, 8);
  EXPECT_EQ(c.rope_theta, 1000000.0);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kLinear);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{1, 106}));
  EXPECT_EQ(c.plan(5).sliding_window, 0);
  EXPECT_EQ(c.plan(4).sliding_window, 1024);
  mm.erase("text_config");
  const Status s = ParseModelConfig(mm.dump(), "", "dir/config.json").status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("text_config"));
}

// The multimodal checkpoint's tensors nest the text model under language_model.model. (or
// model.language_model.); the same weights load and compute the same logits.
TEST(ModelFamiliesTest, Gemma3MultimodalTensorNamesLoad) {
  const std::string src = testing::SynthModelDir(ModelFamily::kGemma3, "tiny");
  auto plain = Model::Load(src);
  ASSERT_TRUE(plain.ok());
  for (const std::string prefix : {"language_model.model.", "model.language_model."}) {
    const std::string dir = testing::FreshDir("gemma3_mm_" + std::to_string(prefix.size()));
    // config.json: the text config nested; model.safetensors: the names prefixed, data unchanged.
    std::ifstream cin(src + "/config.json");
    Json text = Json::parse(cin);
    Json outer = {{"architectures", {"Gemma3ForConditionalGeneration"}}, {"model_type", "gemma3"},
                  {"text_config", text}, {"torch_dtype", text["torch_dtype"]}};
    std::ofstream(dir + "/config.json") << outer.dump();
    for (const char* f : {"generation_config.json", "tokenizer.json", "tokenizer_config.json"}) {
      std::ifstream in(src + "/" + f, std::ios::binary);
      std::ofstream(dir + "/" + f, std::ios::binary) << in.rdbuf();
    }
    std::ifstream in(src + "/model.safetensors", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);
    const Json header = Json::parse(bytes.substr(8, n));
    Json renamed = Json::object();
    for (const auto& [name, value] : header.items()) {
      renamed[name.rfind("model.", 0) == 0 ? prefix + name.substr(6) : name] = value;
    }
    // A vision tensor after the text model's data, which the load leaves alone.
    const uint64_t data_len = bytes.size() - 8 - n;
    renamed["vision_tower.unused.weight"] = {{"dtype", "BF16"}, {"shape", {1}},
                                             {"data_offsets", {data_len, data_len + 2}}};
    std::string h = renamed.dump();
    while (h.size() % 8 != 0) h.push_back(' ');
    std::ofstream out(dir + "/model.safetensors", std::ios::binary);
    const uint64_t hn = h.size();
    out.write(reinterpret_cast<const char*>(&hn), 8);
    out << h << bytes.substr(8 + n) << std::string(2, '\0');
    out.close();
    auto m = Model::Load(dir);
    ASSERT_TRUE(m.ok()) << prefix << ": " << m.status().ToString();
    EXPECT_EQ((*m)->config().model_type, "gemma3");
    const std::vector<int32_t> tokens = {5, 77, 300, 12, 9, 250};
    EXPECT_EQ(EveryLogit(*plain, tokens), EveryLogit(*m, tokens));
  }
}

TEST(ModelFamiliesTest, Phi4MiniPartialRotaryAndLongrope) {
  Json j = Base("phi3", "Phi3ForCausalLM");
  Json shorts = Json::array(), longs = Json::array();
  for (int i = 0; i < 48; ++i) {
    shorts.push_back(1.0 + 0.01 * i);
    longs.push_back(1.0 + i);
  }
  j.update({{"hidden_size", 3072}, {"intermediate_size", 8192}, {"num_hidden_layers", 32},
            {"num_attention_heads", 24}, {"num_key_value_heads", 8}, {"partial_rotary_factor", 0.75},
            {"rope_theta", 10000.0}, {"original_max_position_embeddings", 4096},
            {"max_position_embeddings", 131072},
            {"rope_scaling", {{"type", "longrope"}, {"short_factor", shorts}, {"long_factor", longs}}},
            {"sliding_window", 262144}, {"tie_word_embeddings", true}, {"vocab_size", 200064},
            {"hidden_act", "silu"}, {"rms_norm_eps", 1e-5}});
  const ModelConfig c = Parse(j);
  EXPECT_EQ(c.rope_dim(), 96);
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kLongRope);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 4096);
  EXPECT_NEAR(c.rope_scaling.attention_factor, std::sqrt(1 + std::log(32.0) / std::log(4096.0)), 1e-15);
  EXPECT_EQ(c.rope_scaling.long_factor[47], 48.0);
  // Factors for the wrong number of dimensions (Phi-3 counts half of head_dim, here 64).
  j["rope_scaling"]["short_factor"] = Json::array();
  for (int i = 0; i < 64; ++i) j["rope_scaling"]["short_factor"].push_back(1.0);
  const Status s = ParseModelConfig(j.dump(), "", "dir/config.json").status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("short_factor"));
}

TEST(ModelFamiliesTest, Starcoder2LayerNormBiasesPlainMlp) {
  Json j = Base("starcoder2", "Starcoder2ForCausalLM");
  j.update({{"hidden_size", 3072}, {"intermediate_size", 12288}, {"num_hidden_layers", 30},
            {"num_attention_heads", 24}, {"num_key_value_heads", 2}, {"norm_epsilon", 1e-5},
            {"rope_theta", 999999.4420358813}, {"sliding_window", 4096}, {"use_bias", true},
            {"vocab_size", 49152}, {"hidden_act", "gelu_pytorch_tanh"}, {"max_position_embeddings", 16384}});
  const ModelConfig c = Parse(j);
  EXPECT_EQ(c.norm, NormKind::kLayerNorm);
  EXPECT_EQ(c.rms_norm_eps, 1e-5f);
  EXPECT_EQ(c.mlp, MlpKind::kPlain);
  EXPECT_EQ(c.activation, Activation::kGeluTanh);
  EXPECT_TRUE(c.attention_bias && c.attention_out_bias && c.mlp_bias);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.plan(29).sliding_window, 4096);
}

TEST(ModelFamiliesTest, GraniteMultipliersAndDeepSeekLinearRope) {
  Json j = Base("granite", "GraniteForCausalLM");
  j.update({{"hidden_size", 4096}, {"intermediate_size", 12800}, {"num_hidden_layers", 40},
            {"num_attention_heads", 32}, {"num_key_value_heads", 8}, {"embedding_multiplier", 12.0},
            {"residual_multiplier", 0.22}, {"attention_multiplier", 0.0078125}, {"logits_scaling", 16.0},
            {"rope_theta", 10000000.0}, {"vocab_size", 49155}, {"tie_word_embeddings", true},
            {"attention_bias", false}, {"mlp_bias", false}, {"rms_norm_eps", 1e-5}});
  const ModelConfig g = Parse(j);
  EXPECT_EQ(g.embedding_multiplier, 12.0f);
  EXPECT_EQ(g.residual_multiplier, 0.22f);
  EXPECT_EQ(g.scale(), 0.0078125f);
  EXPECT_EQ(g.logits_divisor, 16.0f);

  Json d = Base("llama", "LlamaForCausalLM");
  d.update({{"hidden_size", 4096}, {"intermediate_size", 11008}, {"num_hidden_layers", 32},
            {"num_attention_heads", 32}, {"num_key_value_heads", 32}, {"rope_theta", 100000},
            {"rope_scaling", {{"factor", 4.0}, {"type", "linear"}}}, {"vocab_size", 32256},
            {"max_position_embeddings", 16384}, {"rms_norm_eps", 1e-6}});
  const ModelConfig c = Parse(d);
  EXPECT_EQ(c.family, ModelFamily::kLlama);
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.rope_scaling.type, RopeScaling::Type::kLinear);
  EXPECT_EQ(c.rope_scaling.factor, 4.0);
  d["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}};
  const Status s = ParseModelConfig(d.dump(), "", "dir/config.json").status();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("yarn"));
}

// Qwen3-Coder-30B-A3B's config.json (the fields that shape the model): every layer a mixture of
// 128 experts, 8 a token, renormalised; mlp_only_layers and decoder_sparse_step pick dense layers.
TEST(ModelFamiliesTest, Qwen3MoeExpertsAndDenseLayers) {
  Json j = Base("qwen3_moe", "Qwen3MoeForCausalLM");
  j.update({{"hidden_size", 2048}, {"intermediate_size", 6144}, {"moe_intermediate_size", 768},
            {"num_hidden_layers", 48}, {"num_attention_heads", 32}, {"num_key_value_heads", 4}, {"head_dim", 128},
            {"num_experts", 128}, {"num_experts_per_tok", 8}, {"norm_topk_prob", true}, {"decoder_sparse_step", 1},
            {"mlp_only_layers", Json::array()}, {"max_position_embeddings", 262144}, {"rope_theta", 10000000},
            {"rms_norm_eps", 1e-6}, {"vocab_size", 151936}, {"tie_word_embeddings", false},
            {"use_sliding_window", false}, {"sliding_window", nullptr}, {"attention_bias", false}});
  ModelConfig c = Parse(j);
  EXPECT_EQ(c.family, ModelFamily::kQwen3Moe);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.num_experts, 128);
  EXPECT_EQ(c.experts_per_token, 8);
  EXPECT_EQ(c.moe_intermediate_size, 768);
  EXPECT_TRUE(c.norm_topk_prob);
  ASSERT_TRUE(c.has_moe());
  for (int i = 0; i < 48; ++i) EXPECT_TRUE(c.is_moe_layer(i)) << i;
  // HF: layer i has experts unless listed in mlp_only_layers or (i + 1) % decoder_sparse_step != 0.
  j["mlp_only_layers"] = {0, 5};
  j["decoder_sparse_step"] = 2;
  c = Parse(j);
  for (int i = 0; i < 48; ++i) EXPECT_EQ(c.is_moe_layer(i), i != 5 && (i + 1) % 2 == 0) << i;
  // transformers 5 writes num_experts as num_local_experts; norm_topk_prob defaults to false.
  j.erase("num_experts");
  j.erase("norm_topk_prob");
  j["num_local_experts"] = 64;
  c = Parse(j);
  EXPECT_EQ(c.num_experts, 64);
  EXPECT_FALSE(c.norm_topk_prob);
  // Every layer dense: a dense model, no experts bound.
  j["mlp_only_layers"] = Json::array();
  for (int i = 0; i < 48; ++i) j["mlp_only_layers"].push_back(i);
  EXPECT_FALSE(Parse(j).has_moe());
  // What a loader cannot honour is refused, naming the field.
  struct Bad {
    Json edit;
    const char* field;
  };
  const Bad bad[] = {
      {{{"num_experts_per_tok", 65}}, "num_experts_per_tok"},
      {{{"num_experts_per_tok", 0}}, "num_experts_per_tok"},
      {{{"num_local_experts", 0}}, "num_local_experts"},
      {{{"num_local_experts", 1 << 20}}, "num_local_experts"},
      {{{"moe_intermediate_size", nullptr}}, "moe_intermediate_size"},
      {{{"moe_intermediate_size", "768"}}, "moe_intermediate_size"},
      {{{"mlp_only_layers", {48}}}, "mlp_only_layers"},
      {{{"mlp_only_layers", {-1}}}, "mlp_only_layers"},
      {{{"mlp_only_layers", "0"}}, "mlp_only_layers"},
      {{{"decoder_sparse_step", 0}}, "decoder_sparse_step"},
      {{{"use_sliding_window", true}}, "use_sliding_window"},
  };
  for (const Bad& b : bad) {
    Json k = j;
    k["mlp_only_layers"] = Json::array();
    k.update(b.edit);
    const Status s = ParseModelConfig(k.dump(), "", "dir/config.json").status();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << b.edit.dump();
    EXPECT_THAT(s.message(), HasSubstr(b.field)) << b.edit.dump();
  }
}

// The experts as transformers 5 holds them (mlp.experts.gate_up_proj (experts, 2 moe, dim) and
// down_proj (experts, dim, moe)) load as the published per-expert tensors do: the same logits.
// Both forms at once are refused.
TEST(ModelFamiliesTest, Qwen3MoeStackedExpertsLoadLikePublishedOnes) {
  const std::string src = testing::SynthModelDir(ModelFamily::kQwen3Moe, "tiny");
  auto plain = Model::Load(src);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  const ModelConfig& c = (*plain)->config();
  ASSERT_TRUE(c.is_moe_layer(0));
  ASSERT_FALSE(c.is_moe_layer(1));
  std::ifstream in(src + "/model.safetensors", std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  const Json header = Json::parse(bytes.substr(8, n));
  const std::string data = bytes.substr(8 + n);
  auto tensor = [&](const std::string& name) {
    const Json& t = header.at(name);
    const uint64_t b = t["data_offsets"][0], e = t["data_offsets"][1];
    return data.substr(b, e - b);
  };
  auto write = [&](const std::string& dir, bool keep_per_expert) {
    for (const char* f : {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"}) {
      std::ifstream i(src + "/" + f, std::ios::binary);
      std::ofstream(dir + "/" + f, std::ios::binary) << i.rdbuf();
    }
    Json out = Json::object();
    std::string body;
    auto add = [&](const std::string& name, const Json& shape, const std::string& payload) {
      out[name] = {{"dtype", "BF16"}, {"shape", shape}, {"data_offsets", {body.size(), body.size() + payload.size()}}};
      body += payload;
    };
    const std::string p = "model.layers.0.mlp.experts.";
    std::string gate_up, down;
    for (int e = 0; e < c.num_experts; ++e) {
      const std::string q = p + std::to_string(e) + ".";
      gate_up += tensor(q + "gate_proj.weight") + tensor(q + "up_proj.weight");
      down += tensor(q + "down_proj.weight");
    }
    for (const auto& [name, value] : header.items()) {
      if (name == "__metadata__") continue;
      if (name.rfind(p, 0) == 0 && !keep_per_expert) continue;
      add(name, value["shape"], tensor(name));
    }
    add(p + "gate_up_proj", {c.num_experts, 2 * c.moe_intermediate_size, c.hidden_size}, gate_up);
    add(p + "down_proj", {c.num_experts, c.hidden_size, c.moe_intermediate_size}, down);
    std::string h = out.dump();
    while (h.size() % 8 != 0) h.push_back(' ');
    std::ofstream o(dir + "/model.safetensors", std::ios::binary);
    const uint64_t hn = h.size();
    o.write(reinterpret_cast<const char*>(&hn), 8);
    o << h << body;
  };
  const std::string stacked_dir = testing::FreshDir("qwen3_moe_stacked");
  write(stacked_dir, false);
  auto stacked = Model::Load(stacked_dir);
  ASSERT_TRUE(stacked.ok()) << stacked.status().ToString();
  const std::vector<int32_t> tokens = {5, 77, 300, 12, 9, 250, 31, 64, 2, 199};
  EXPECT_EQ(EveryLogit(*plain, tokens), EveryLogit(*stacked, tokens));
  const std::string both_dir = testing::FreshDir("qwen3_moe_both");
  write(both_dir, true);
  auto both = Model::Load(both_dir);
  EXPECT_EQ(both.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(both.status().message(), HasSubstr("both stacked and one by one"));
}

// The router and every expert bind as published beside a dense layer, and a decode step counts
// the share of the experts' bytes a token reads.
TEST(ModelFamiliesTest, Qwen3MoeBindsExpertsAndCountsTheBytesATokenReads) {
  auto m = Model::Load(testing::SynthModelDir(ModelFamily::kQwen3Moe, "tiny"));
  ASSERT_TRUE(m.ok());
  const LayerWeights& l = (*m)->weights().layers[0];
  ASSERT_EQ(l.experts.size(), 8u);
  ASSERT_EQ(l.router.shape, (std::vector<int64_t>{8, 64}));
  EXPECT_EQ(l.experts[3].w_down.shape, (std::vector<int64_t>{64, 32}));
  EXPECT_FALSE(l.w_gate.present());
  EXPECT_TRUE((*m)->weights().layers[1].w_gate.present());  // the dense layer (mlp_only_layers)
  // A token reads 2 of the 8 experts: a quarter of their bytes count toward a decode step's.
  int64_t all_experts = 0;
  for (const LayerWeights::Expert& e : l.experts)
    all_experts += (e.w_gate.numel() + e.w_up.numel() + e.w_down.numel()) * 2;
  int64_t dense = 0;
  for (const LayerWeights& layer : (*m)->weights().layers)
    for (const TensorView* t : layer.all()) dense += t->present() ? t->numel() * 2 : 0;
  dense -= all_experts;
  const int64_t head = (*m)->weights().lm_head.numel() * 2 + 64 * 2 + 64 * 2;
  EXPECT_EQ((*m)->weight_bytes_per_token(), dense + all_experts / 4 + head);
}

TEST(ModelFamiliesTest, UnsupportedIsInvalidArgumentNamingTheSupportedTypes) {
  for (const char* type : {"mixtral", "qwen2_moe", "deepseek_v2", "gpt_bigcode", "phi"}) {
    const Status s = ParseModelConfig(Base(type, "X").dump(), "", "dir/config.json").status();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << type;
    EXPECT_THAT(s.message(), HasSubstr(std::string("'") + type + "'"));
    EXPECT_THAT(s.message(), HasSubstr(SupportedFamiliesText()));
  }
  Json q = Base("qwen2", "Qwen2ForCausalLM");
  q.update({{"hidden_size", 64}, {"intermediate_size", 128}, {"num_hidden_layers", 2}, {"num_attention_heads", 4},
            {"vocab_size", 100}, {"use_sliding_window", true}, {"sliding_window", 16}});
  EXPECT_EQ(ParseModelConfig(q.dump(), "", "c").status().code(), StatusCode::kInvalidArgument);
}

// The new fields are typed and range-checked like the rest: each error names its field.
TEST(ModelFamiliesTest, NewFieldsAreChecked) {
  const Json small = {{"hidden_size", 64}, {"intermediate_size", 128}, {"num_hidden_layers", 2},
                      {"num_attention_heads", 4}, {"vocab_size", 100}};
  struct Bad {
    const char* model_type;
    Json edit;
    const char* field;
  };
  Json shorts = Json::array({1.0, 1.0, 1.0, "x", 1.0, 1.0, 1.0, 1.0});
  const Bad cases[] = {
      {"mistral", {{"sliding_window", "4096"}}, "sliding_window"},
      {"mistral", {{"sliding_window", 0}}, "sliding_window"},
      {"gemma2", {{"query_pre_attn_scalar", "x"}}, "query_pre_attn_scalar"},
      {"gemma2", {{"attn_logit_softcapping", -1}}, "attn_logit_softcapping"},
      {"gemma2", {{"layer_types", {"full_attention"}}}, "layer_types"},
      {"gemma2", {{"layer_types", {"full_attention", "chunked_attention"}}}, "chunked_attention"},
      {"gemma3_text", {{"sliding_window_pattern", 0}}, "sliding_window_pattern"},
      {"gemma3_text", {{"rope_local_base_freq", -5}}, "rope_local_base_freq"},
      {"phi3", {{"partial_rotary_factor", 0.1}}, "partial_rotary_factor"},
      {"phi3", {{"rope_scaling", {{"type", "longrope"}, {"short_factor", shorts}, {"long_factor", shorts}}}},
       "short_factor"},
      {"starcoder2", {{"use_bias", "yes"}}, "use_bias"},
      {"starcoder2", {{"norm_epsilon", 2.0}}, "norm_epsilon"},
      {"granite", {{"embedding_multiplier", "12"}}, "embedding_multiplier"},
      {"granite", {{"logits_scaling", 0}}, "logits_scaling"},
      {"llama", {{"rope_scaling", {{"type", "linear"}}}}, "factor"},
  };
  for (const Bad& b : cases) {
    Json j = small;
    j["model_type"] = b.model_type;
    j.update(b.edit);
    const Status s = ParseModelConfig(j.dump(), "", "dir/config.json").status();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << b.model_type << " " << b.edit.dump();
    EXPECT_THAT(s.message(), HasSubstr(b.field)) << b.edit.dump();
  }
}

// Every family synthesizes (its published tensor names), loads and runs.
TEST(ModelFamiliesTest, EveryFamilySynthesizesLoadsAndRuns) {
  for (ModelFamily f : AllModelFamilies()) {
    SCOPED_TRACE(std::string(ModelFamilyName(f)));
    auto m = Model::Load(testing::SynthModelDir(f, "tiny"));
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    const ModelConfig& c = (*m)->config();
    EXPECT_EQ(c.family, f);
    SynthOptions o;
    o.family = f;
    EXPECT_EQ(SynthConfig(o)->layer_plan.size(), c.layer_plan.size());
    if (f == ModelFamily::kPhi3) {  // fused tensors split into row ranges of one mapping
      const LayerWeights& l = (*m)->weights().layers[0];
      const int64_t row = static_cast<int64_t>(c.hidden_size) * DTypeSize(l.wq.dtype);
      EXPECT_EQ(static_cast<const uint8_t*>(l.wk.data), static_cast<const uint8_t*>(l.wq.data) + c.q_dim() * row);
      EXPECT_EQ(static_cast<const uint8_t*>(l.wv.data),
                static_cast<const uint8_t*>(l.wq.data) + (c.q_dim() + c.kv_dim()) * row);
      EXPECT_EQ(static_cast<const uint8_t*>(l.w_up.data),
                static_cast<const uint8_t*>(l.w_gate.data) + c.intermediate_size * row);
    }
    CpuBackendOptions opt;
    opt.max_positions = 128;
    auto b = testing::CreateTestBackend(*m, opt);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    ASSERT_TRUE((*b)->AllocateKvCache(8).ok());
    std::vector<int32_t> tokens(40), blocks = {0, 1, 2};
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 37) % c.vocab_size);
    BatchPlan plan;
    plan.sequences.push_back({tokens, 0, blocks, 1});
    std::vector<float> logits;
    ASSERT_TRUE((*b)->Forward(plan, &logits).ok());
    for (float v : logits) ASSERT_TRUE(std::isfinite(v));
  }
}

// Logits of every position of `tokens` under the synthesized tiny model of `family`.
std::vector<float> AllLogits(ModelFamily family, const std::vector<int32_t>& tokens) {
  auto m = Model::Load(testing::SynthModelDir(family, "tiny"));
  EXPECT_TRUE(m.ok());
  CpuBackendOptions opt;
  opt.max_positions = 128;
  auto b = CreateCpuBackend(*m, opt).value();
  EXPECT_TRUE(b->AllocateKvCache(8).ok());
  const std::vector<int32_t> blocks = {0, 1, 2, 3};
  BatchPlan plan;
  plan.sequences.push_back({tokens, 0, blocks, static_cast<int32_t>(tokens.size())});
  std::vector<float> logits;
  EXPECT_TRUE(b->Forward(plan, &logits).ok());
  return logits;
}

bool RowsEqual(const std::vector<float>& a, const std::vector<float>& b, int pos, int vocab) {
  return std::memcmp(a.data() + static_cast<size_t>(pos) * vocab, b.data() + static_cast<size_t>(pos) * vocab,
                     static_cast<size_t>(vocab) * 4) == 0;
}

// Two layers with windows of 24: position p sees tokens from p - 46 on. Changing the first two
// tokens must leave positions 48.. bit for bit alone and change earlier ones. Gemma 2 has a
// global second layer, through which the change reaches every later position.
TEST(ModelFamiliesTest, SlidingWindowsBoundWhatAPositionSees) {
  std::vector<int32_t> tokens(60);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 53 + 7) % 300);
  std::vector<int32_t> changed = tokens;
  changed[0] = 11;
  changed[1] = 12;
  for (ModelFamily f : {ModelFamily::kMistral, ModelFamily::kStarcoder2, ModelFamily::kGemma2}) {
    SCOPED_TRACE(std::string(ModelFamilyName(f)));
    SynthOptions o;
    o.family = f;
    const ModelConfig c = SynthConfig(o).value();
    ASSERT_EQ(c.num_layers, 2);
    const std::vector<float> a = AllLogits(f, tokens), b = AllLogits(f, changed);
    EXPECT_FALSE(RowsEqual(a, b, 10, c.vocab_size));
    for (int p = 48; p < 60; ++p) {
      EXPECT_EQ(RowsEqual(a, b, p, c.vocab_size), f != ModelFamily::kGemma2) << "position " << p;
    }
  }
}

// A block-table entry may say kNoKvBlock only where every layer's window has passed it: Mistral's
// window of 24 lets a query at 60 skip blocks 0 and 1 (positions before 37) with the same logits;
// anywhere else, and for Gemma 2 (a global layer reads every position), it is INVALID_ARGUMENT.
TEST(ModelFamiliesTest, ReleasedBlocksBeforeTheWindowAreNeverRead) {
  std::vector<int32_t> tokens(61);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 37 + 5) % 300);
  for (ModelFamily f : {ModelFamily::kMistral, ModelFamily::kGemma2}) {
    SCOPED_TRACE(std::string(ModelFamilyName(f)));
    auto m = Model::Load(testing::SynthModelDir(f, "tiny"));
    ASSERT_TRUE(m.ok());
    const ModelConfig& c = (*m)->config();
    EXPECT_EQ(c.kv_window(), f == ModelFamily::kMistral ? 24 : 0);
    EXPECT_EQ(c.first_read_key(60), f == ModelFamily::kMistral ? 37 : 0);
    CpuBackendOptions opt;
    opt.max_positions = 128;
    auto b = CreateCpuBackend(*m, opt).value();
    ASSERT_TRUE(b->AllocateKvCache(8).ok());
    const std::span<const int32_t> prompt(tokens.data(), 60), last(tokens.data() + 60, 1);
    const std::vector<int32_t> blocks = {0, 1, 2, 3};
    BatchPlan prefill;
    prefill.sequences.push_back({prompt, 0, blocks, 1});
    std::vector<float> logits;
    ASSERT_TRUE(b->Forward(prefill, &logits).ok());
    auto step = [&](std::vector<int32_t> table, std::vector<float>* out) {
      BatchPlan plan;
      plan.sequences.push_back({last, 60, table, 1});
      return b->Forward(plan, out);
    };
    std::vector<float> kept, released;
    ASSERT_TRUE(step(blocks, &kept).ok());
    const Status s = step({kNoKvBlock, kNoKvBlock, 2, 3}, &released);
    if (f == ModelFamily::kMistral) {
      ASSERT_TRUE(s.ok()) << s.ToString();
      EXPECT_EQ(std::memcmp(kept.data(), released.data(), kept.size() * 4), 0);
    } else {
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    }
    EXPECT_EQ(step({0, 1, kNoKvBlock, 3}, &released).code(), StatusCode::kInvalidArgument);  // 37..47 are read
    EXPECT_EQ(step({0, 1, 2, kNoKvBlock}, &released).code(), StatusCode::kInvalidArgument);  // written
  }
}

}  // namespace
}  // namespace rote::inference
