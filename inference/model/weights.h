// A loaded model: its config and views of its weight tensors, memory-mapped from the
// safetensors files as published (bf16, fp16 or fp32; converted to fp32 at use).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "inference/model/config.h"
#include "inference/status.h"

namespace rote::inference {

// A read-only view of one tensor inside a mapped file. Row-major; shape as stored.
struct TensorView {
  DType dtype = DType::kF32;
  const void* data = nullptr;  // nullptr: tensor absent (e.g. no biases in this family)
  std::vector<int64_t> shape;
  std::string name;            // safetensors name, for messages

  bool present() const { return data != nullptr; }
  int64_t numel() const;
  // Element i converted exactly to fp32.
  float At(int64_t i) const;
  // Row r (of a 2-D tensor; shape[1] elements) converted to fp32 into out.
  void RowToF32(int64_t r, float* out) const;
};

// Shapes use: dim = hidden_size, q_dim = num_heads * head_dim, kv_dim = num_kv_heads * head_dim,
// hidden = intermediate_size. A matrix (rows, cols) computes y[rows] = W x[cols]. A tensor the
// family does not have is absent (present() false). Fused published tensors (Phi-3's qkv_proj and
// gate_up_proj) are bound as row ranges of the stored matrix: wq, wk, wv and w_gate, w_up view
// consecutive rows of one mapped tensor.
struct LayerWeights {
  TensorView attn_norm;       // (dim)        input_layernorm.weight
  TensorView attn_norm_bias;  // (dim)        input_layernorm.bias              (LayerNorm: StarCoder2)
  TensorView wq;              // (q_dim, dim) self_attn.q_proj.weight           (Phi-3: qkv_proj rows [0, q_dim))
  TensorView wk;              // (kv_dim, dim) self_attn.k_proj.weight          (Phi-3: next kv_dim rows)
  TensorView wv;              // (kv_dim, dim) self_attn.v_proj.weight          (Phi-3: last kv_dim rows)
  TensorView bq;              // (q_dim)      self_attn.q_proj.bias             (attention_bias)
  TensorView bk;              // (kv_dim)     self_attn.k_proj.bias             (attention_bias)
  TensorView bv;              // (kv_dim)     self_attn.v_proj.bias             (attention_bias)
  TensorView q_norm;          // (head_dim)   self_attn.q_norm.weight           (qk_norm: Qwen3, Gemma 3)
  TensorView k_norm;          // (head_dim)   self_attn.k_norm.weight           (qk_norm)
  TensorView wo;              // (dim, q_dim) self_attn.o_proj.weight
  TensorView bo;              // (dim)        self_attn.o_proj.bias             (attention_out_bias)
  TensorView attn_post_norm;  // (dim)        post_attention_layernorm.weight   (sandwich_norms: Gemma)
  // The norm before the MLP: post_attention_layernorm, or pre_feedforward_layernorm with
  // sandwich_norms (Gemma).
  TensorView mlp_norm;        // (dim)
  TensorView mlp_norm_bias;   // (dim)        post_attention_layernorm.bias     (LayerNorm)
  TensorView w_gate;          // (hidden, dim) mlp.gate_proj.weight             (kGated; Phi-3: gate_up rows [0, hidden))
  TensorView w_up;            // (hidden, dim) mlp.up_proj.weight               (Phi-3: rows [hidden, 2 hidden);
                              //               StarCoder2: mlp.c_fc.weight)
  TensorView w_down;          // (dim, hidden) mlp.down_proj.weight             (StarCoder2: mlp.c_proj.weight)
  TensorView b_gate;          // (hidden)     mlp.gate_proj.bias                (mlp_bias)
  TensorView b_up;            // (hidden)     mlp.up_proj.bias / mlp.c_fc.bias  (mlp_bias)
  TensorView b_down;          // (dim)        mlp.down_proj.bias / mlp.c_proj.bias (mlp_bias)
  TensorView mlp_post_norm;   // (dim)        post_feedforward_layernorm.weight (sandwich_norms)
  // A mixture-of-experts layer (ModelConfig::is_moe_layer): the router and each expert's gated MLP
  // (moe = moe_intermediate_size), in place of w_gate, w_up and w_down. As published:
  // mlp.experts.{e}.gate_proj / up_proj / down_proj; as transformers 5 holds them (a 3-D tensor a
  // projection): rows of mlp.experts.gate_up_proj (experts, 2 moe, dim) and down_proj (experts,
  // dim, moe).
  TensorView router;          // (experts, dim) mlp.gate.weight
  struct Expert {
    TensorView w_gate;        // (moe, dim)
    TensorView w_up;          // (moe, dim)
    TensorView w_down;        // (dim, moe)
  };
  std::vector<Expert> experts;

  // Every view above, present or not (parameter counts, byte totals), the experts' last.
  std::vector<const TensorView*> all() const {
    std::vector<const TensorView*> v = {&attn_norm, &attn_norm_bias, &wq,     &wk,     &wv,  &bq,
                                        &bk,        &bv,             &q_norm, &k_norm, &wo,  &bo,
                                        &attn_post_norm, &mlp_norm,  &mlp_norm_bias,   &w_gate, &w_up, &w_down,
                                        &b_gate,    &b_up,           &b_down, &mlp_post_norm, &router};
    for (const Expert& e : experts) v.insert(v.end(), {&e.w_gate, &e.w_up, &e.w_down});
    return v;
  }
};

struct ModelWeights {
  TensorView embed;                 // (vocab, dim)   model.embed_tokens.weight
  std::vector<LayerWeights> layers; // (num_layers)   model.layers.{i}.*
  TensorView final_norm;            // (dim)          model.norm.weight
  TensorView final_norm_bias;       // (dim)          model.norm.bias (LayerNorm)
  TensorView lm_head;               // (vocab, dim)   lm_head.weight, or embed when tied

  // Every stored parameter once (a tied lm_head is the embedding, not a second matrix; Phi-3's
  // fused projections are counted through their split views, which cover them exactly).
  int64_t parameter_count(bool tied_lm_head) const {
    auto n = [](const TensorView& t) -> int64_t { return t.present() ? t.numel() : 0; };
    int64_t total = n(embed) + n(final_norm) + n(final_norm_bias) + (tied_lm_head ? 0 : n(lm_head));
    for (const LayerWeights& l : layers)
      for (const TensorView* t : l.all()) total += n(*t);
    return total;
  }
};

class MappedFile;       // inference/model/safetensors.h
class SafetensorsFile;  // inference/model/safetensors.h

// The JSON files of a model directory (an absent optional file: empty text).
struct ModelTexts {
  std::string config_json;
  std::string generation_json;
  std::string tokenizer_json;
  std::string tokenizer_config_json;
};

// A model directory loaded and checked: config, generation config, tokenizer file paths,
// weights mapped read-only. Immutable after Load; shared by the engine and its backend.
class Model {
 public:
  // Reads config.json, generation_config.json (optional), model.safetensors or the shards
  // named by model.safetensors.index.json; checks every tensor's presence, dtype and shape.
  // Errors name the file and tensor. `known_digest`, when not empty, is a digest computed
  // earlier for the same files (the caller vouches for that, e.g. through FileIdentity):
  // hashing every tensor is skipped and digest() returns it.
  static StatusOr<std::shared_ptr<const Model>> Load(const std::string& dir,
                                                     const std::string& known_digest = "");
  // What identifies the files the digest covers without reading them: name, size and
  // modification time (ns) of every *.json and *.safetensors file in `dir`, in name order.
  // Two equal identities mean the files were not rewritten (short of someone restoring an
  // mtime), so a digest cached under the identity can stand in for re-hashing.
  static StatusOr<std::string> FileIdentity(const std::string& dir);
  // A model whose weights are one safetensors image in memory (synthesized models too large for
  // a file: inference/model/synth.h), checked and bound as Load does. `label` stands for the
  // directory in dir() and in errors; `digest` is taken as the model's digest (not computed).
  static StatusOr<std::shared_ptr<const Model>> FromImage(const std::string& label, const ModelTexts& texts,
                                                          std::unique_ptr<MappedFile> image,
                                                          const std::string& digest);

  ~Model();
  const std::string& dir() const { return dir_; }
  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  // sha256 (hex) over a canonical encoding of config.json, generation_config.json,
  // tokenizer.json, tokenizer_config.json and every tensor (name, dtype, shape, bytes) in
  // name order: independent of how the weights are sharded.
  const std::string& digest() const { return digest_; }
  // Bytes of weights one decode step reads (every matrix once, one embedding row).
  int64_t weight_bytes_per_token() const;

 private:
  Model() = default;
  // Parses the config, binds every tensor of `opened` (the shards `index_map` assigns, when
  // sharded) and computes the digest unless `known_digest` is given.
  static StatusOr<std::shared_ptr<const Model>> Assemble(const std::string& dir, const ModelTexts& texts,
                                                         std::vector<std::unique_ptr<SafetensorsFile>>&& opened,
                                                         const std::map<std::string, std::string>& index_map,
                                                         const std::string& known_digest);
  std::string dir_;
  ModelConfig config_;
  ModelWeights weights_;
  std::string digest_;
  std::vector<std::unique_ptr<MappedFile>> files_;
};

}  // namespace rote::inference
