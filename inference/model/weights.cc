#include "inference/model/weights.h"

#include <sys/stat.h>

#include <filesystem>

#include <algorithm>
#include <cstring>
#include <map>

#include "inference/model/model_files.h"
#include "inference/model/safetensors.h"
#include "inference/numerics/canonical.h"
#include "inference/util/sha256.h"

namespace rote::inference {

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

float TensorView::At(int64_t i) const {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  switch (dtype) {
    case DType::kBF16: {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      return numerics::bf16_to_f32(h);
    }
    case DType::kF16: {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      return numerics::f16_to_f32(h);
    }
    case DType::kF32: {
      float f;
      std::memcpy(&f, p + 4 * i, 4);
      return f;
    }
  }
  return 0.0f;
}

void TensorView::RowToF32(int64_t r, float* out) const {
  const int64_t cols = shape.size() == 2 ? shape[1] : numel();
  for (int64_t c = 0; c < cols; ++c) out[c] = At(r * cols + c);
}

Model::~Model() = default;

namespace {

void PutU64(Sha256& h, uint64_t v) {
  uint8_t b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(v >> (8 * i));
  h.Update(b, 8);
}

void PutBytes(Sha256& h, std::string_view s) {
  PutU64(h, s.size());
  h.Update(s);
}

struct TensorSource {
  const SafetensorsTensor* tensor;
  std::string file;
};

class WeightBinder {
 public:
  WeightBinder(const std::map<std::string, TensorSource>& all, std::string dir) : all_(all), dir_(std::move(dir)) {}

  // Binds a required (or optional) tensor and checks its shape.
  Status Bind(const std::string& name, std::vector<int64_t> shape, bool required, TensorView* out) {
    auto it = all_.find(name);
    if (it == all_.end()) {
      if (!required) return OkStatus();
      return NotFound(dir_ + ": tensor '" + name + "' is missing from the model's safetensors files");
    }
    const SafetensorsTensor& t = *it->second.tensor;
    if (t.shape != shape) {
      auto fmt = [](const std::vector<int64_t>& s) {
        std::string r = "[";
        for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
        return r + "]";
      };
      return InvalidArgument(it->second.file + ": tensor '" + name + "' has shape " + fmt(t.shape) +
                             " but config.json implies " + fmt(shape));
    }
    out->dtype = t.dtype;
    out->data = t.data;
    out->shape = std::move(shape);
    out->name = name;
    return OkStatus();
  }

  // Binds matrix `index` (rows x cols) of the 3-D tensor `stacked` (already bound), rows
  // [row0, row0 + rows) of it, as its own 2-D view.
  static TensorView Slice(const TensorView& stacked, int64_t index, int64_t row0, int64_t rows, const std::string& name) {
    TensorView v;
    v.dtype = stacked.dtype;
    const int64_t cols = stacked.shape[2];
    v.data = static_cast<const uint8_t*>(stacked.data) + (index * stacked.shape[1] + row0) * cols * DTypeSize(stacked.dtype);
    v.shape = {rows, cols};
    v.name = name;
    return v;
  }
  bool Has(const std::string& name) const { return all_.count(name) != 0; }
  // Binds rows [row0, row0 + rows) of the 2-D tensor `fused` (already bound) as its own view.
  static TensorView Rows(const TensorView& fused, int64_t row0, int64_t rows, const std::string& name) {
    TensorView v;
    v.dtype = fused.dtype;
    v.data = static_cast<const uint8_t*>(fused.data) + row0 * fused.shape[1] * DTypeSize(fused.dtype);
    v.shape = {rows, fused.shape[1]};
    v.name = name;
    return v;
  }

 private:
  const std::map<std::string, TensorSource>& all_;
  std::string dir_;
};

// A mixture-of-experts layer's router and experts: each expert's three tensors as published, or
// the two 3-D tensors transformers 5 keeps (never a mix of the two).
Status BindExperts(WeightBinder& b, const ModelConfig& c, const std::string& p, LayerWeights* l) {
  const int64_t dim = c.hidden_size, moe = c.moe_intermediate_size, n = c.num_experts;
  ROTE_RETURN_IF_ERROR(b.Bind(p + "mlp.gate.weight", {n, dim}, true, &l->router));
  l->experts.resize(static_cast<size_t>(n));
  if (b.Has(p + "mlp.experts.gate_up_proj")) {
    TensorView gate_up, down;
    ROTE_RETURN_IF_ERROR(b.Bind(p + "mlp.experts.gate_up_proj", {n, 2 * moe, dim}, true, &gate_up));
    ROTE_RETURN_IF_ERROR(b.Bind(p + "mlp.experts.down_proj", {n, dim, moe}, true, &down));
    if (b.Has(p + "mlp.experts.0.gate_proj.weight"))
      return InvalidArgument(gate_up.name + ": the experts are stored both stacked and one by one");
    for (int64_t e = 0; e < n; ++e) {
      const std::string tag = "[" + std::to_string(e) + "]";
      l->experts[e].w_gate = WeightBinder::Slice(gate_up, e, 0, moe, gate_up.name + tag + "[gate]");
      l->experts[e].w_up = WeightBinder::Slice(gate_up, e, moe, moe, gate_up.name + tag + "[up]");
      l->experts[e].w_down = WeightBinder::Slice(down, e, 0, dim, down.name + tag);
    }
    return OkStatus();
  }
  for (int64_t e = 0; e < n; ++e) {
    const std::string q = p + "mlp.experts." + std::to_string(e) + ".";
    LayerWeights::Expert& x = l->experts[static_cast<size_t>(e)];
    ROTE_RETURN_IF_ERROR(b.Bind(q + "gate_proj.weight", {moe, dim}, true, &x.w_gate));
    ROTE_RETURN_IF_ERROR(b.Bind(q + "up_proj.weight", {moe, dim}, true, &x.w_up));
    ROTE_RETURN_IF_ERROR(b.Bind(q + "down_proj.weight", {dim, moe}, true, &x.w_down));
  }
  return OkStatus();
}

}  // namespace

StatusOr<std::shared_ptr<const Model>> Model::Load(const std::string& dir, const std::string& known_digest) {
  ModelTexts texts;
  ROTE_ASSIGN_OR_RETURN(texts.config_json, ReadModelFile(dir + "/config.json", true));
  ROTE_ASSIGN_OR_RETURN(texts.generation_json, ReadModelFile(dir + "/generation_config.json", false));
  ROTE_ASSIGN_OR_RETURN(texts.tokenizer_json, ReadModelFile(dir + "/tokenizer.json", false));
  ROTE_ASSIGN_OR_RETURN(texts.tokenizer_config_json, ReadModelFile(dir + "/tokenizer_config.json", false));

  // Weight files: one model.safetensors, or the shards an index names.
  std::vector<std::string> files;
  std::map<std::string, std::string> index_map;  // tensor -> shard file, when sharded
  ROTE_ASSIGN_OR_RETURN(std::string index_json, ReadModelFile(dir + "/model.safetensors.index.json", false));
  if (!index_json.empty()) {
    ROTE_ASSIGN_OR_RETURN(index_map, ParseSafetensorsIndex(index_json, dir + "/model.safetensors.index.json"));
    for (const auto& [name, file] : index_map) {
      if (std::find(files.begin(), files.end(), file) == files.end()) files.push_back(file);
    }
    std::sort(files.begin(), files.end());
  } else {
    files.push_back("model.safetensors");
  }
  std::vector<std::unique_ptr<SafetensorsFile>> opened;
  for (const std::string& f : files) {
    ROTE_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> st, SafetensorsFile::Open(dir + "/" + f));
    opened.push_back(std::move(st));
  }
  return Assemble(dir, texts, std::move(opened), index_map, known_digest);
}

StatusOr<std::shared_ptr<const Model>> Model::FromImage(const std::string& label, const ModelTexts& texts,
                                                        std::unique_ptr<MappedFile> image, const std::string& digest) {
  ROTE_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> st, SafetensorsFile::FromMapping(std::move(image)));
  std::vector<std::unique_ptr<SafetensorsFile>> opened;
  opened.push_back(std::move(st));
  return Assemble(label, texts, std::move(opened), {}, digest);
}

StatusOr<std::shared_ptr<const Model>> Model::Assemble(const std::string& dir, const ModelTexts& texts,
                                                       std::vector<std::unique_ptr<SafetensorsFile>>&& opened,
                                                       const std::map<std::string, std::string>& index_map,
                                                       const std::string& known_digest) {
  std::shared_ptr<Model> m(new Model());
  m->dir_ = dir;
  const std::string& config_json = texts.config_json;
  const std::string& gen_json = texts.generation_json;
  const std::string& tok_json = texts.tokenizer_json;
  const std::string& tok_config_json = texts.tokenizer_config_json;
  ROTE_ASSIGN_OR_RETURN(m->config_, ParseModelConfig(config_json, gen_json, dir + "/config.json"));

  std::map<std::string, TensorSource> all;
  for (const std::unique_ptr<SafetensorsFile>& st : opened) {
    const std::string& path = st->path();
    const std::string f = path.substr(path.find_last_of('/') + 1);
    for (const SafetensorsTensor& t : st->tensors()) {
      if (!index_map.empty()) {
        auto it = index_map.find(t.name);
        if (it == index_map.end() || it->second != f) {
          return DataLoss(path + ": tensor '" + t.name + "' is not assigned to this file by the index");
        }
      }
      auto [pos, inserted] = all.emplace(t.name, TensorSource{&t, path});
      if (!inserted) return DataLoss(path + ": tensor '" + t.name + "' also appears in " + pos->second.file);
    }
  }
  for (const auto& [name, file] : index_map) {
    if (all.find(name) == all.end()) {
      return DataLoss(dir + "/" + file + ": tensor '" + name + "' listed in the index is missing from the file");
    }
  }

  const ModelConfig& c = m->config_;
  WeightBinder b(all, dir);
  ModelWeights& w = m->weights_;
  const int64_t dim = c.hidden_size, q = c.q_dim(), kv = c.kv_dim(), hid = c.intermediate_size;
  // The text model's tensors: "model." as causal LMs publish them; Gemma 3's multimodal
  // checkpoints nest it ("language_model.model." as published, "model.language_model." as newer
  // transformers saves them).
  std::string mp = "model.", head = "lm_head.weight";
  for (const auto& [prefix, lm_head] : {std::pair<const char*, const char*>{"language_model.model.", "language_model.lm_head.weight"},
                                        {"model.language_model.", "lm_head.weight"}}) {
    if (c.model_type == "gemma3" && all.count(std::string(prefix) + "embed_tokens.weight") != 0) {
      mp = prefix;
      head = lm_head;
    }
  }
  ROTE_RETURN_IF_ERROR(b.Bind(mp + "embed_tokens.weight", {c.vocab_size, dim}, true, &w.embed));
  const bool layer_norm = c.norm == NormKind::kLayerNorm;
  ROTE_RETURN_IF_ERROR(b.Bind(mp + "norm.weight", {dim}, true, &w.final_norm));
  if (layer_norm) ROTE_RETURN_IF_ERROR(b.Bind(mp + "norm.bias", {dim}, true, &w.final_norm_bias));
  if (c.tie_word_embeddings) {
    w.lm_head = w.embed;
  } else {
    ROTE_RETURN_IF_ERROR(b.Bind(head, {c.vocab_size, dim}, true, &w.lm_head));
  }
  const bool fused = c.family == ModelFamily::kPhi3;  // qkv_proj and gate_up_proj
  const bool plain_mlp = c.mlp == MlpKind::kPlain;
  const std::string up_name = plain_mlp ? "mlp.c_fc" : "mlp.up_proj";
  const std::string down_name = plain_mlp ? "mlp.c_proj" : "mlp.down_proj";
  // Layers are bound one at a time, so the memory they take follows the tensors the files hold,
  // not the count config.json claims: a layer that is not there stops the load at its first tensor.
  w.layers.reserve(std::min<size_t>(static_cast<size_t>(c.num_layers), all.size()));
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string p = mp + "layers." + std::to_string(i) + ".";
    LayerWeights& l = w.layers.emplace_back();
    ROTE_RETURN_IF_ERROR(b.Bind(p + "input_layernorm.weight", {dim}, true, &l.attn_norm));
    if (layer_norm) ROTE_RETURN_IF_ERROR(b.Bind(p + "input_layernorm.bias", {dim}, true, &l.attn_norm_bias));
    if (fused) {
      TensorView qkv;
      ROTE_RETURN_IF_ERROR(b.Bind(p + "self_attn.qkv_proj.weight", {q + 2 * kv, dim}, true, &qkv));
      l.wq = WeightBinder::Rows(qkv, 0, q, qkv.name + "[q]");
      l.wk = WeightBinder::Rows(qkv, q, kv, qkv.name + "[k]");
      l.wv = WeightBinder::Rows(qkv, q + kv, kv, qkv.name + "[v]");
    } else {
      ROTE_RETURN_IF_ERROR(b.Bind(p + "self_attn.q_proj.weight", {q, dim}, true, &l.wq));
      ROTE_RETURN_IF_ERROR(b.Bind(p + "self_attn.k_proj.weight", {kv, dim}, true, &l.wk));
      ROTE_RETURN_IF_ERROR(b.Bind(p + "self_attn.v_proj.weight", {kv, dim}, true, &l.wv));
    }
    if (c.attention_bias) {
      ROTE_RETURN_IF_ERROR(b.Bind(p + "self_attn.q_proj.bias", {q}, true, &l.bq));
      ROTE_RETURN_IF_ERROR(b.Bind(p + "self_attn.k_proj.bias", {kv}, true, &l.bk));
      ROTE_RETURN_IF_ERROR(b.Bind(p + "self_attn.v_proj.bias", {kv}, true, &l.bv));
    }
    if (c.qk_norm) {
      ROTE_RETURN_IF_ERROR(b.Bind(p + "self_attn.q_norm.weight", {c.head_dim}, true, &l.q_norm));
      ROTE_RETURN_IF_ERROR(b.Bind(p + "self_attn.k_norm.weight", {c.head_dim}, true, &l.k_norm));
    }
    ROTE_RETURN_IF_ERROR(b.Bind(p + "self_attn.o_proj.weight", {dim, q}, true, &l.wo));
    if (c.attention_out_bias) ROTE_RETURN_IF_ERROR(b.Bind(p + "self_attn.o_proj.bias", {dim}, true, &l.bo));
    if (c.sandwich_norms) {
      ROTE_RETURN_IF_ERROR(b.Bind(p + "post_attention_layernorm.weight", {dim}, true, &l.attn_post_norm));
      ROTE_RETURN_IF_ERROR(b.Bind(p + "pre_feedforward_layernorm.weight", {dim}, true, &l.mlp_norm));
      ROTE_RETURN_IF_ERROR(b.Bind(p + "post_feedforward_layernorm.weight", {dim}, true, &l.mlp_post_norm));
    } else {
      ROTE_RETURN_IF_ERROR(b.Bind(p + "post_attention_layernorm.weight", {dim}, true, &l.mlp_norm));
      if (layer_norm) {
        ROTE_RETURN_IF_ERROR(b.Bind(p + "post_attention_layernorm.bias", {dim}, true, &l.mlp_norm_bias));
      }
    }
    if (c.is_moe_layer(i)) {
      ROTE_RETURN_IF_ERROR(BindExperts(b, c, p, &l));
      continue;
    }
    if (fused) {
      TensorView gate_up;
      ROTE_RETURN_IF_ERROR(b.Bind(p + "mlp.gate_up_proj.weight", {2 * hid, dim}, true, &gate_up));
      l.w_gate = WeightBinder::Rows(gate_up, 0, hid, gate_up.name + "[gate]");
      l.w_up = WeightBinder::Rows(gate_up, hid, hid, gate_up.name + "[up]");
    } else {
      if (!plain_mlp) ROTE_RETURN_IF_ERROR(b.Bind(p + "mlp.gate_proj.weight", {hid, dim}, true, &l.w_gate));
      ROTE_RETURN_IF_ERROR(b.Bind(p + up_name + ".weight", {hid, dim}, true, &l.w_up));
    }
    ROTE_RETURN_IF_ERROR(b.Bind(p + down_name + ".weight", {dim, hid}, true, &l.w_down));
    if (c.mlp_bias) {
      if (!plain_mlp) ROTE_RETURN_IF_ERROR(b.Bind(p + "mlp.gate_proj.bias", {hid}, true, &l.b_gate));
      ROTE_RETURN_IF_ERROR(b.Bind(p + up_name + ".bias", {hid}, true, &l.b_up));
      ROTE_RETURN_IF_ERROR(b.Bind(p + down_name + ".bias", {dim}, true, &l.b_down));
    }
  }

  // The digest: independent of sharding, covers everything that decides the output.
  if (!known_digest.empty()) {
    m->digest_ = known_digest;
    for (auto& st : opened) m->files_.push_back(st->ReleaseMapping());
    return std::shared_ptr<const Model>(std::move(m));
  }
  Sha256 h;
  PutBytes(h, "rote-model-digest-v1");
  PutBytes(h, config_json);
  PutBytes(h, gen_json);
  PutBytes(h, tok_json);
  PutBytes(h, tok_config_json);
  PutU64(h, all.size());
  for (const auto& [name, src] : all) {
    PutBytes(h, name);
    PutBytes(h, DTypeName(src.tensor->dtype));
    PutU64(h, src.tensor->shape.size());
    for (int64_t d : src.tensor->shape) PutU64(h, static_cast<uint64_t>(d));
    PutU64(h, static_cast<uint64_t>(src.tensor->size_bytes));
    h.Update(src.tensor->data, static_cast<size_t>(src.tensor->size_bytes));
  }
  m->digest_ = h.FinishHex();
  for (auto& st : opened) m->files_.push_back(st->ReleaseMapping());
  return std::shared_ptr<const Model>(std::move(m));
}

StatusOr<std::string> Model::FileIdentity(const std::string& dir) {
  std::error_code ec;
  std::vector<std::string> lines;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const bool relevant = (name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0) ||
                          (name.size() > 12 && name.compare(name.size() - 12, 12, ".safetensors") == 0);
    if (!relevant || !entry.is_regular_file()) continue;
    struct stat st {};
    if (::stat(entry.path().c_str(), &st) != 0) return NotFound(entry.path().string() + ": cannot stat");
    lines.push_back(name + " " + std::to_string(st.st_size) + " " + std::to_string(st.st_mtim.tv_sec) + "." +
                    std::to_string(st.st_mtim.tv_nsec));
  }
  if (ec) return NotFound(dir + ": cannot list the model directory: " + ec.message());
  std::sort(lines.begin(), lines.end());
  std::string identity = "rote-model-files-v1\n";
  for (const std::string& l : lines) identity += l + "\n";
  return identity;
}

int64_t Model::weight_bytes_per_token() const {
  auto bytes = [](const TensorView& t) { return t.present() ? t.numel() * DTypeSize(t.dtype) : 0; };
  int64_t total = 0;
  // A token reads experts_per_token of a layer's experts: their share of the experts' bytes.
  int64_t expert_bytes = 0;
  for (const LayerWeights& l : weights_.layers) {
    for (const TensorView* t : l.all()) total += bytes(*t);
    for (const LayerWeights::Expert& e : l.experts) {
      const int64_t b = bytes(e.w_gate) + bytes(e.w_up) + bytes(e.w_down);
      total -= b;
      expert_bytes += b;
    }
  }
  if (config_.num_experts > 0) total += expert_bytes / config_.num_experts * config_.experts_per_token;
  total += bytes(weights_.final_norm) + bytes(weights_.final_norm_bias) + bytes(weights_.lm_head);
  total += static_cast<int64_t>(config_.hidden_size) * DTypeSize(weights_.embed.dtype);  // one embedding row
  return total;
}

}  // namespace rote::inference
