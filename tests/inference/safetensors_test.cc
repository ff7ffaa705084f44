// Loading: malformed safetensors files and model directories give errors naming the file and
// tensor (never a crash); sharded and single-file models load the same; the digest covers
// config, tokenizer and weights.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "inference/model/safetensors.h"
#include "inference/model/synth.h"
#include "inference/model/weights.h"
#include "tests/inference/test_models.h"

namespace rote::inference {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

std::string Image(const std::string& header_json, const std::string& body) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((header_json.size() >> (8 * i)) & 0xff);
  return out + header_json + body;
}

Status ParseStatus(const std::string& image) {
  auto r = ParseSafetensors(reinterpret_cast<const uint8_t*>(image.data()), image.size(), "x.safetensors");
  return r.status();
}

TEST(SafetensorsTest, ValidImageParses) {
  std::vector<SafetensorsWriteTensor> ts = {{"b", DType::kF32, {2}, std::string(8, '\1')},
                                           {"a", DType::kBF16, {3}, std::string(6, '\2')}};
  const std::string img = SerializeSafetensors(ts);
  auto r = ParseSafetensors(reinterpret_cast<const uint8_t*>(img.data()), img.size(), "x.safetensors");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].name, "a");  // name order
  EXPECT_EQ((*r)[0].dtype, DType::kBF16);
  EXPECT_EQ((*r)[0].shape, std::vector<int64_t>{3});
  EXPECT_EQ((*r)[1].size_bytes, 8);
}

TEST(SafetensorsTest, TooShort) {
  Status s = ParseStatus("abc");
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("x.safetensors"));
  EXPECT_THAT(s.message(), HasSubstr("too short"));
}

TEST(SafetensorsTest, HeaderPastTheEnd) {
  std::string img = Image("{}", "");
  img[0] = 100;  // claims a 100-byte header in a 10-byte file
  Status s = ParseStatus(img);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("past the end"));
  std::string huge = Image("{}", "");
  for (int i = 0; i < 8; ++i) huge[i] = '\xff';  // 2^64 - 1: must not overflow
  EXPECT_THAT(ParseStatus(huge).message(), HasSubstr("past the end"));
}

TEST(SafetensorsTest, HeaderNotJson) {
  EXPECT_THAT(ParseStatus(Image("{not json", "")).message(), HasSubstr("not a JSON object"));
}

TEST(SafetensorsTest, UnknownDtype) {
  Status s = ParseStatus(Image(R"({"w":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", std::string(8, '\0')));
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("x.safetensors: tensor 'w'"));
  EXPECT_THAT(s.message(), HasSubstr("unsupported dtype 'I64'"));
}

TEST(SafetensorsTest, ShapeAndDtypeDisagreeWithByteLength) {
  Status s = ParseStatus(Image(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, '\0')));
  EXPECT_THAT(s.message(), HasSubstr("tensor 'w'"));
  EXPECT_THAT(s.message(), HasSubstr("need 12 bytes but data_offsets span 8"));
}

TEST(SafetensorsTest, OverlappingOffsets) {
  Status s = ParseStatus(Image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                               R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                               std::string(12, '\0')));
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("tensor 'b'"));
  EXPECT_THAT(s.message(), HasSubstr("overlap tensor 'a'"));
}

TEST(SafetensorsTest, GappedOffsets) {
  Status s = ParseStatus(Image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                               R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                               std::string(12, '\0')));
  EXPECT_THAT(s.message(), HasSubstr("tensor 'b'"));
  EXPECT_THAT(s.message(), HasSubstr("gap of 4 unused bytes"));
}

TEST(SafetensorsTest, TrailingBytesAndOffsetsPastEnd) {
  EXPECT_THAT(ParseStatus(Image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", std::string(6, '\0')))
                  .message(),
              HasSubstr("2 bytes after the last tensor"));
  EXPECT_THAT(ParseStatus(Image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", std::string(4, '\0')))
                  .message(),
              HasSubstr("past the end of the data"));
  EXPECT_THAT(ParseStatus(Image(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", std::string(4, '\0')))
                  .message(),
              HasSubstr("tensor 'a'"));
  EXPECT_THAT(ParseStatus(Image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", std::string(4, '\0')))
                  .message(),
              HasSubstr("begin after they end"));
}

// Copies a synthesized model directory so a test may damage it.
std::string CopyModel(const std::string& name) {
  const std::string src = testing::SynthModelDir(ModelFamily::kQwen2, "tiny");
  const std::string dst = testing::FreshDir(name);
  for (const auto& e : std::filesystem::directory_iterator(src)) {
    std::filesystem::copy_file(e.path(), std::filesystem::path(dst) / e.path().filename());
  }
  return dst;
}

using testing::ReadAll;
using testing::WriteAll;

// Rewrites model.safetensors without one tensor (or with one tensor's shape changed).
void RewriteWeights(const std::string& dir, const std::string& drop, const std::string& reshape) {
  const std::string path = dir + "/model.safetensors";
  const std::string img = ReadAll(path);
  auto parsed = ParseSafetensors(reinterpret_cast<const uint8_t*>(img.data()), img.size(), path);
  ASSERT_TRUE(parsed.ok());
  std::vector<SafetensorsWriteTensor> out;
  for (const auto& t : *parsed) {
    if (t.name == drop) continue;
    SafetensorsWriteTensor w{t.name, t.dtype, t.shape, std::string(reinterpret_cast<const char*>(t.data), t.size_bytes)};
    if (t.name == reshape) w.shape = {t.shape[0] * t.shape[1]};
    out.push_back(std::move(w));
  }
  WriteAll(path, SerializeSafetensors(out));
}

TEST(ModelLoadTest, LoadsSynthesizedModel) {
  auto m = Model::Load(testing::SynthModelDir(ModelFamily::kQwen2, "tiny"));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ((*m)->config().family, ModelFamily::kQwen2);
  EXPECT_TRUE((*m)->config().attention_bias);
  EXPECT_TRUE((*m)->weights().layers[1].bq.present());
  EXPECT_EQ((*m)->weights().lm_head.data, (*m)->weights().embed.data);  // tied
  EXPECT_EQ((*m)->digest().size(), 64u);
}

TEST(ModelLoadTest, MissingTensorIsNamed) {
  const std::string dir = CopyModel("missing_tensor");
  RewriteWeights(dir, "model.layers.1.mlp.up_proj.weight", "");
  auto m = Model::Load(dir);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(m.status().message(), HasSubstr("model.layers.1.mlp.up_proj.weight"));
  EXPECT_THAT(m.status().message(), HasSubstr(dir));
}

TEST(ModelLoadTest, WrongShapeIsNamed) {
  const std::string dir = CopyModel("wrong_shape");
  RewriteWeights(dir, "", "model.layers.0.self_attn.o_proj.weight");
  auto m = Model::Load(dir);
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("model.safetensors: tensor 'model.layers.0.self_attn.o_proj.weight'"));
  EXPECT_THAT(m.status().message(), HasSubstr("[4096]"));
}

TEST(ModelLoadTest, TruncatedFileIsDataLossNamingTheFile) {
  const std::string dir = CopyModel("truncated");
  const std::string img = ReadAll(dir + "/model.safetensors");
  WriteAll(dir + "/model.safetensors", img.substr(0, img.size() - 10));
  auto m = Model::Load(dir);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kDataLoss);
  EXPECT_THAT(m.status().message(), HasSubstr(dir + "/model.safetensors"));
}

TEST(ModelLoadTest, MissingConfigAndWeights) {
  const std::string dir = CopyModel("no_weights");
  std::filesystem::remove(dir + "/model.safetensors");
  EXPECT_EQ(Model::Load(dir).status().code(), StatusCode::kNotFound);
  EXPECT_THAT(Model::Load(dir).status().message(), HasSubstr("model.safetensors"));
  std::filesystem::remove(dir + "/config.json");
  EXPECT_THAT(Model::Load(dir).status().message(), HasSubstr("config.json"));
}

// Splits model.safetensors into two shards plus an index, as large published models are.
void Shard(const std::string& dir) {
  const std::string img = ReadAll(dir + "/model.safetensors");
  auto parsed = ParseSafetensors(reinterpret_cast<const uint8_t*>(img.data()), img.size(), "m");
  ASSERT_TRUE(parsed.ok());
  std::vector<SafetensorsWriteTensor> a, b;
  Json index;
  index["metadata"] = {{"total_size", 0}};
  for (size_t i = 0; i < parsed->size(); ++i) {
    const auto& t = (*parsed)[i];
    SafetensorsWriteTensor w{t.name, t.dtype, t.shape, std::string(reinterpret_cast<const char*>(t.data), t.size_bytes)};
    const bool first = i % 2 == 0;
    index["weight_map"][t.name] = first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
    (first ? a : b).push_back(std::move(w));
  }
  WriteAll(dir + "/model-00001-of-00002.safetensors", SerializeSafetensors(a));
  WriteAll(dir + "/model-00002-of-00002.safetensors", SerializeSafetensors(b));
  WriteAll(dir + "/model.safetensors.index.json", index.dump());
  std::filesystem::remove(dir + "/model.safetensors");
}

TEST(ModelLoadTest, ShardedEqualsSingleFileIncludingDigest) {
  const std::string dir = CopyModel("sharded");
  Shard(dir);
  auto sharded = Model::Load(dir);
  ASSERT_TRUE(sharded.ok()) << sharded.status().ToString();
  auto single = Model::Load(testing::SynthModelDir(ModelFamily::kQwen2, "tiny"));
  ASSERT_TRUE(single.ok());
  EXPECT_EQ((*sharded)->digest(), (*single)->digest());
  EXPECT_EQ((*sharded)->weights().layers[1].w_down.At(5), (*single)->weights().layers[1].w_down.At(5));
}

TEST(ModelLoadTest, IndexNamingAnAbsentTensorIsAnError) {
  const std::string dir = CopyModel("bad_index");
  Shard(dir);
  Json index = Json::parse(ReadAll(dir + "/model.safetensors.index.json"));
  index["weight_map"]["model.layers.9.extra.weight"] = "model-00002-of-00002.safetensors";
  WriteAll(dir + "/model.safetensors.index.json", index.dump());
  auto m = Model::Load(dir);
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("model-00002-of-00002.safetensors"));
  EXPECT_THAT(m.status().message(), HasSubstr("model.layers.9.extra.weight"));
}

TEST(ModelLoadTest, DigestCoversWeightsTokenizerAndConfig) {
  const std::string base = testing::SynthModelDir(ModelFamily::kQwen2, "tiny");
  const std::string d0 = Model::Load(base).value()->digest();
  {
    const std::string dir = CopyModel("digest_tok");
    WriteAll(dir + "/tokenizer.json", ReadAll(dir + "/tokenizer.json") + " ");
    EXPECT_NE(Model::Load(dir).value()->digest(), d0);
  }
  {
    const std::string dir = CopyModel("digest_cfg");
    WriteAll(dir + "/tokenizer_config.json", "{}");
    EXPECT_NE(Model::Load(dir).value()->digest(), d0);
  }
  {
    const std::string dir = CopyModel("digest_weights");
    std::string img = ReadAll(dir + "/model.safetensors");
    img[img.size() - 1] ^= 1;  // one bit of the last tensor
    WriteAll(dir + "/model.safetensors", img);
    EXPECT_NE(Model::Load(dir).value()->digest(), d0);
  }
  // Same seed, same bytes, same digest; another seed differs.
  const std::string again = testing::FreshDir("digest_again");
  SynthOptions o;
  o.shape = "tiny";
  o.seed = 7;
  ASSERT_TRUE(SynthesizeModel(o, again).ok());
  EXPECT_EQ(Model::Load(again).value()->digest(), d0);
  o.seed = 8;
  ASSERT_TRUE(SynthesizeModel(o, again).ok());
  EXPECT_NE(Model::Load(again).value()->digest(), d0);
}

// A model built in memory holds the same tensors, byte for byte, as the file of the same options,
// whatever the number of threads that built it; it is read-only and bound like a loaded model.
TEST(ModelLoadTest, InMemorySynthesisEqualsTheFile) {
  for (ModelFamily family : {ModelFamily::kQwen2, ModelFamily::kGemma2, ModelFamily::kPhi3}) {
    SynthOptions o;
    o.family = family;
    o.shape = "tiny";
    o.seed = 3;
    const std::string dir = testing::FreshDir("in_memory_" + std::string(ModelFamilyName(family)));
    ASSERT_TRUE(SynthesizeModel(o, dir).ok());
    auto file = Model::Load(dir);
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    for (int threads : {1, 3}) {
      auto mem = SynthesizeModelInMemory(o, threads);
      ASSERT_TRUE(mem.ok()) << mem.status().ToString();
      EXPECT_EQ((*mem)->dir(), "synth:" + std::string(ModelFamilyName(family)) + ":tiny");
      EXPECT_EQ((*mem)->config().num_layers, (*file)->config().num_layers);
      const ModelWeights& a = (*file)->weights();
      const ModelWeights& b = (*mem)->weights();
      ASSERT_EQ(a.layers.size(), b.layers.size());
      auto same = [](const TensorView& x, const TensorView& y) {
        if (x.present() != y.present()) return false;
        if (!x.present()) return true;
        return x.shape == y.shape && x.dtype == y.dtype &&
               std::memcmp(x.data, y.data, static_cast<size_t>(x.numel()) * DTypeSize(x.dtype)) == 0;
      };
      EXPECT_TRUE(same(a.embed, b.embed));
      EXPECT_TRUE(same(a.lm_head, b.lm_head));
      EXPECT_TRUE(same(a.final_norm, b.final_norm));
      for (size_t l = 0; l < a.layers.size(); ++l) {
        const auto ta = a.layers[l].all(), tb = b.layers[l].all();
        for (size_t t = 0; t < ta.size(); ++t) EXPECT_TRUE(same(*ta[t], *tb[t])) << "layer " << l << " tensor " << t;
      }
      EXPECT_EQ((*mem)->weight_bytes_per_token(), (*file)->weight_bytes_per_token());
    }
    // The digest names the options: another seed is another model.
    SynthOptions other = o;
    other.seed = 4;
    EXPECT_NE(SynthesizeModelInMemory(other, 2).value()->digest(), SynthesizeModelInMemory(o, 2).value()->digest());
    EXPECT_EQ(SynthesizeModelInMemory(o, 1).value()->digest(), SynthesizeModelInMemory(o, 2).value()->digest());
  }
}

// SynthOptions::layers keeps a shape's first N layers (its config says so, and so does the
// digest, which covers the config); more than the shape has is the shape; below 0 is refused.
TEST(ModelLoadTest, SynthesizedLayerCount) {
  SynthOptions o;
  o.family = ModelFamily::kQwen3Moe;
  o.shape = "small";
  const ModelConfig whole = SynthConfig(o).value();
  ASSERT_GT(whole.num_layers, 2);
  o.layers = 2;
  const ModelConfig two = SynthConfig(o).value();
  EXPECT_EQ(two.num_layers, 2);
  EXPECT_EQ(two.hidden_size, whole.hidden_size);
  EXPECT_EQ(two.num_experts, whole.num_experts);
  auto mem = SynthesizeModelInMemory(o, 2);
  ASSERT_TRUE(mem.ok()) << mem.status().ToString();
  EXPECT_EQ((*mem)->weights().layers.size(), 2u);
  EXPECT_EQ((*mem)->dir(), "synth:qwen3_moe:small:2-layers");
  SynthOptions all = o;
  all.layers = 0;
  EXPECT_NE((*mem)->digest(), SynthesizeModelInMemory(all, 2).value()->digest());
  o.layers = 1;  // the shape's dense layer (index 1) is past the cut
  auto one = SynthConfig(o);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ(one->num_layers, 1);
  EXPECT_TRUE(one->is_moe_layer(0));
  o.layers = 1000;
  EXPECT_EQ(SynthConfig(o).value().num_layers, whole.num_layers);
  o.layers = -1;
  EXPECT_EQ(SynthConfig(o).status().code(), StatusCode::kInvalidArgument);
}

// The published sizes' configs: Qwen2.5-Coder-7B / 14B / 32B (untied, vocabulary 152,064).
TEST(ModelLoadTest, SynthesizedCoderSizes) {
  struct Want {
    const char* shape;
    int32_t dim, hidden, layers, heads, kv;
    double params_b;
  };
  for (const Want& w : {Want{"7b", 3584, 18944, 28, 28, 4, 7.6}, Want{"14b", 5120, 13824, 48, 40, 8, 14.8},
                        Want{"32b", 5120, 27648, 64, 40, 8, 32.8}}) {
    SynthOptions o;
    o.shape = w.shape;
    auto c = SynthConfig(o);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(c->hidden_size, w.dim);
    EXPECT_EQ(c->intermediate_size, w.hidden);
    EXPECT_EQ(c->num_layers, w.layers);
    EXPECT_EQ(c->num_heads, w.heads);
    EXPECT_EQ(c->num_kv_heads, w.kv);
    EXPECT_EQ(c->vocab_size, 152064);
    EXPECT_FALSE(c->tie_word_embeddings);
    const double d = c->hidden_size, h = c->intermediate_size, q = c->q_dim(), kv = c->kv_dim();
    const double params = c->num_layers * (d * (q + 2 * kv) + q + 2 * kv + q * d + 3 * d * h + 2 * d) +
                          2.0 * c->vocab_size * d + d;
    EXPECT_NEAR(params / 1e9, w.params_b, 0.05) << w.shape;
  }
  SynthOptions bad;
  bad.shape = "70b";
  EXPECT_EQ(SynthConfig(bad).status().code(), StatusCode::kInvalidArgument);
}

// An anonymous image that is not a safetensors image is refused with the label in the message.
TEST(ModelLoadTest, AnonymousImageIsChecked) {
  auto junk = MappedFile::Anonymous(64, "synth:junk", [](uint8_t* p) {
    std::memset(p, 0xff, 64);
    return OkStatus();
  });
  ASSERT_TRUE(junk.ok());
  EXPECT_TRUE(std::all_of((*junk)->data(), (*junk)->data() + 64, [](uint8_t b) { return b == 0xff; }));
  ModelTexts texts;
  texts.config_json = R"({"model_type":"qwen2","architectures":["Qwen2ForCausalLM"]})";
  auto m = Model::FromImage("synth:junk", texts, std::move(junk).value(), "d");
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("synth:junk"));
  // A fill that fails returns its error.
  auto failed = MappedFile::Anonymous(64, "synth:fail", [](uint8_t*) { return ResourceExhausted("no"); });
  EXPECT_EQ(failed.status().code(), StatusCode::kResourceExhausted);
}

TEST(ModelLoadTest, BadConfigValues) {
  // An unknown family is the caller's input, not an internal failure: INVALID_ARGUMENT naming
  // the model type it read and every supported one.
  const Status gpt2 = ParseModelConfig(R"({"model_type":"gpt2","architectures":["GPT2LMHeadModel"]})", "", "c").status();
  EXPECT_EQ(gpt2.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(gpt2.message(), HasSubstr("'gpt2'"));
  for (ModelFamily f : AllModelFamilies()) EXPECT_THAT(gpt2.message(), HasSubstr(std::string(ModelFamilyName(f))));
  // model_type decides over the architecture: a mistral folder is never read as another family.
  EXPECT_EQ(ParseModelConfig(R"({"model_type":"mixtral","architectures":["MistralForCausalLM"]})", "", "c")
                .status()
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_THAT(ParseModelConfig(R"({"model_type":"qwen2","vocab_size":"x"})", "", "c").status().message(),
              HasSubstr("vocab_size"));
  EXPECT_THAT(ParseModelConfig(R"({"model_type":"llama","vocab_size":10,"hidden_size":8,"intermediate_size":8,)"
                               R"("num_hidden_layers":1,"num_attention_heads":3,"num_key_value_heads":2})",
                               "", "c")
                  .status()
                  .message(),
              HasSubstr("not a multiple"));
}

}  // namespace
}  // namespace rote::inference
