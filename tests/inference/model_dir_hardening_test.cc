// Damaged model directories: every field read from config.json, generation_config.json,
// tokenizer.json, tokenizer_config.json, the safetensors headers and the index is checked before
// use, and a bad one is an error naming the file and the field, never a crash, an abort, an
// allocation the file does not pay for, or a read that blocks. Each directory is a copy of a
// checked-in fixture (tests/fixtures/) with one thing broken.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <future>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "inference/commands.h"
#include "inference/model/config.h"
#include "inference/model/model_files.h"
#include "inference/model/safetensors.h"
#include "inference/model/weights.h"
#include "inference/tokenizer/chat_format.h"
#include "inference/tokenizer/tokenizer.h"
#include "tests/inference/test_models.h"

namespace rote::inference {
namespace {

using Json = nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

std::string Fixture(const std::string& family) { return std::string(ROTE_SOURCE_DIR) + "/tests/fixtures/" + family; }

using testing::ReadAll;
using testing::WriteAll;

// A copy of a fixture's model directory (config, generation config, tokenizer, weights).
std::string CopyFixture(const std::string& name, const std::string& family = "qwen2") {
  const std::string dir = testing::FreshDir("hardening_" + name);
  for (const char* f : {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                        "model.safetensors"}) {
    std::filesystem::copy_file(Fixture(family) + "/" + f, dir + "/" + f);
  }
  return dir;
}

// Rewrites one JSON file of `dir` through `edit`.
void EditJson(const std::string& dir, const std::string& file, const std::function<void(Json&)>& edit) {
  Json j = Json::parse(ReadAll(dir + "/" + file));
  edit(j);
  WriteAll(dir + "/" + file, j.dump());
}

// The status is an error (of `code`) whose message names `file` (with its directory) and `field`.
void ExpectNamed(const Status& s, StatusCode code, const std::string& file, const std::string& field) {
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), code) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr(file)) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr(field)) << s.ToString();
}

// Loads the directory as `rote model info` and the engine do: model, then tokenizer.
Status LoadDir(const std::string& dir) {
  StatusOr<std::shared_ptr<const Model>> m = Model::Load(dir);
  if (!m.ok()) return m.status();
  return Tokenizer::Load(dir).status();
}

// An edit of a JSON file and the field its error must name.
struct EditCase {
  std::function<void(Json&)> edit;
  std::string field;
};

Status ModelInfo(const std::string& dir) {
  std::ostringstream out, err;
  return tool::ModelCommand({"info", dir}, out, err);
}

TEST(ModelDirHardening, FixtureDirectoriesStillLoad) {
  for (const char* family : {"qwen2", "llama3", "qwen3"}) {
    const std::string dir = CopyFixture(std::string("ok_") + family, family);
    EXPECT_TRUE(LoadDir(dir).ok()) << family << ": " << LoadDir(dir).ToString();
    EXPECT_TRUE(ModelInfo(dir).ok()) << family;
  }
}

// --- tokenizer.json ---

// Was SIGSEGV: the id indexed the id tables unchecked.
TEST(ModelDirHardening, NegativeAddedTokenIdIsAnError) {
  const std::string dir = CopyFixture("added_negative");
  EditJson(dir, "tokenizer.json", [](Json& j) { j["added_tokens"][0]["id"] = -1; });
  ExpectNamed(LoadDir(dir), StatusCode::kInvalidArgument, dir + "/tokenizer.json", "added_tokens[0].id");
  ExpectNamed(ModelInfo(dir), StatusCode::kInvalidArgument, dir + "/tokenizer.json", "added_tokens[0].id");
}

// 2^40 was truncated to an int32 (0); 2^31 - 1 sized the tables to 2^31 strings (bad_alloc).
TEST(ModelDirHardening, AddedTokenIdBeyondTheFileIsAnError) {
  // 841 entries plus 65536 ids no token may have (tiktoken conversions leave a few).
  for (int64_t id : {int64_t{1} << 40, int64_t{2147483647}, int64_t{841 + 65536}}) {
    const std::string dir = CopyFixture("added_huge");
    EditJson(dir, "tokenizer.json", [&](Json& j) { j["added_tokens"][3]["id"] = id; });
    const Status s = LoadDir(dir);
    ExpectNamed(s, StatusCode::kInvalidArgument, dir + "/tokenizer.json", "added_tokens[3].id");
    EXPECT_THAT(s.message(), HasSubstr("out of range [0, 66376]"));
  }
}

// As tokenizers: ids may leave gaps (GPT-4o's file has no token 199998 or 200000-200017); an
// id in a gap decodes to nothing.
TEST(ModelDirHardening, IdsNoTokenHasAreAcceptedAndDecodeToNothing) {
  const std::string dir = CopyFixture("added_gap");
  int32_t moved = -1;
  std::string content;
  EditJson(dir, "tokenizer.json", [&](Json& j) {
    Json& tok = j["added_tokens"][j["added_tokens"].size() - 3];  // <|rstrip_test|>, 838
    moved = tok["id"].get<int32_t>() + 20;
    tok["id"] = moved;
    content = tok["content"].get<std::string>();
  });
  StatusOr<Tokenizer> t = Tokenizer::Load(dir);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->vocab_size(), moved + 1);
  EXPECT_EQ(t->Encode(content), std::vector<int32_t>{moved});
  const std::vector<int32_t> gap = {838, moved - 1}, token = {moved};
  EXPECT_EQ(t->Decode(gap), "");
  EXPECT_EQ(t->Decode(token), content);
}

TEST(ModelDirHardening, VocabularyIdsOutOfRangeOrRepeatedAreErrors) {
  const std::string dir = CopyFixture("vocab_ids");
  const std::string tj = ReadAll(Fixture("qwen2") + "/tokenizer.json");
  for (const Json& bad : {Json(-3), Json(int64_t{1} << 35), Json("7"), Json(2.5)}) {
    Json j = Json::parse(tj);
    j["model"]["vocab"]["a"] = bad;
    WriteAll(dir + "/tokenizer.json", j.dump());
    ExpectNamed(LoadDir(dir), StatusCode::kInvalidArgument, dir + "/tokenizer.json", "model.vocab[\"a\"]");
  }
  Json j = Json::parse(tj);
  j["model"]["vocab"]["a"] = j["model"]["vocab"]["b"];
  StatusOr<Tokenizer> t = Tokenizer::FromJson(j.dump(), "", "", "");
  ExpectNamed(t.status(), StatusCode::kInvalidArgument, "tokenizer.json", "model.vocab");
  EXPECT_THAT(t.status().message(), HasSubstr("to both 'a' and 'b'"));
}

TEST(ModelDirHardening, AddedTokensThatCollideAreErrors) {
  const Json tj = Json::parse(ReadAll(Fixture("qwen2") + "/tokenizer.json"));
  Json same_id = tj;
  same_id["added_tokens"][1]["id"] = same_id["added_tokens"][0]["id"];
  ExpectNamed(Tokenizer::FromJson(same_id.dump(), "", "", "").status(), StatusCode::kInvalidArgument, "tokenizer.json",
              "added_tokens[1].id");
  Json vocab_id = tj;
  vocab_id["added_tokens"][0]["id"] = tj["model"]["vocab"]["a"];
  ExpectNamed(Tokenizer::FromJson(vocab_id.dump(), "", "", "").status(), StatusCode::kInvalidArgument,
              "tokenizer.json", "added_tokens[0].id");
  Json vocab_content = tj;
  vocab_content["added_tokens"][0]["content"] = "a";
  ExpectNamed(Tokenizer::FromJson(vocab_content.dump(), "", "", "").status(), StatusCode::kInvalidArgument,
              "tokenizer.json", "added_tokens[0].content");
  Json same_content = tj;
  same_content["added_tokens"][1]["content"] = tj["added_tokens"][0]["content"];
  ExpectNamed(Tokenizer::FromJson(same_content.dump(), "", "", "").status(), StatusCode::kInvalidArgument,
              "tokenizer.json", "added_tokens[1].content");
}

TEST(ModelDirHardening, MergesNamingUnknownTokensAreErrors) {
  Json j = Json::parse(ReadAll(Fixture("llama3") + "/tokenizer.json"));
  j["model"]["merges"][0] = Json::array({"a", "no-such-token"});
  StatusOr<Tokenizer> t = Tokenizer::FromJson(j.dump(), "", "", "");
  ExpectNamed(t.status(), StatusCode::kInvalidArgument, "tokenizer.json", "no-such-token");
  j["model"]["merges"] = "a b";
  ExpectNamed(Tokenizer::FromJson(j.dump(), "", "", "").status(), StatusCode::kInvalidArgument, "tokenizer.json",
              "model.merges");
}

// Each of these would throw a nlohmann exception or read a missing member of a const object
// (undefined behaviour) if read unchecked; each must be an error naming the field.
TEST(ModelDirHardening, WrongJsonTypesInTokenizerJsonAreErrors) {
  const Json tj = Json::parse(ReadAll(Fixture("qwen2") + "/tokenizer.json"));
  const std::vector<EditCase> cases = {
      {[](Json& j) { j["normalizer"] = 5; }, "normalizer"},
      {[](Json& j) { j["normalizer"] = {{"type", "Sequence"}}; }, "normalizer.normalizers"},
      {[](Json& j) { j["normalizer"] = {{"type", 3}}; }, "normalizer.type"},
      {[](Json& j) { j["pre_tokenizer"]["pretokenizers"] = "x"; }, "pre_tokenizer.pretokenizers"},
      {[](Json& j) { j["pre_tokenizer"]["pretokenizers"][0].erase("pattern"); }, "a Regex or a String"},
      {[](Json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = 1; },
       "pre_tokenizer.pretokenizers[].pattern.Regex"},
      {[](Json& j) { j["pre_tokenizer"]["pretokenizers"][0]["invert"] = "no"; }, "pre_tokenizer.pretokenizers[].invert"},
      {[](Json& j) { j["pre_tokenizer"]["pretokenizers"][1]["use_regex"] = 0; },
       "pre_tokenizer.pretokenizers[].use_regex"},
      {[](Json& j) { j["decoder"] = Json::array(); }, "decoder"},
      {[](Json& j) { j["model"] = Json::array(); }, "'model'"},
      {[](Json& j) { j["model"]["vocab"] = Json::array(); }, "model.vocab"},
      {[](Json& j) { j["model"]["dropout"] = "none"; }, "model.dropout"},
      {[](Json& j) { j["model"]["byte_fallback"] = 1; }, "model.byte_fallback"},
      {[](Json& j) { j["model"]["ignore_merges"] = "yes"; }, "model.ignore_merges"},
      {[](Json& j) { j["model"]["end_of_word_suffix"] = 7; }, "model.end_of_word_suffix"},
      {[](Json& j) { j["added_tokens"] = {{"id", 1}}; }, "added_tokens"},
      {[](Json& j) { j["added_tokens"][2] = 7; }, "added_tokens[2]"},
      {[](Json& j) { j["added_tokens"][2].erase("id"); }, "added_tokens[2].id"},
      {[](Json& j) { j["added_tokens"][2]["id"] = "815"; }, "added_tokens[2].id"},
      {[](Json& j) { j["added_tokens"][2]["content"] = 5; }, "added_tokens[2].content"},
      {[](Json& j) { j["added_tokens"][2]["content"] = ""; }, "added_tokens[2].content"},
      {[](Json& j) { j["added_tokens"][2]["special"] = "true"; }, "added_tokens[2].special"},
      {[](Json& j) { j["added_tokens"][2]["lstrip"] = 1; }, "added_tokens[2].lstrip"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    Json j = tj;
    cases[i].edit(j);
    StatusOr<Tokenizer> t = Tokenizer::FromJson(j.dump(), "", "", "");
    ASSERT_FALSE(t.ok()) << "case " << i;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument) << "case " << i << ": " << t.status().ToString();
    EXPECT_THAT(t.status().message(), HasSubstr("tokenizer.json")) << "case " << i;
    EXPECT_THAT(t.status().message(), HasSubstr(cases[i].field)) << "case " << i;
  }
}

// nlohmann's copies recurse: a normalizer nested a million levels deep overflowed the stack.
TEST(ModelDirHardening, DeeplyNestedJsonIsRefusedBeforeParsing) {
  const std::string tj = ReadAll(Fixture("qwen2") + "/tokenizer.json");
  const std::string deep = std::string(1'000'000, '[') + std::string(1'000'000, ']');
  std::string nested = tj;
  nested.insert(1, "\"extra\": " + deep + ", ");
  ExpectNamed(Tokenizer::FromJson(nested, "", "", "").status(), StatusCode::kInvalidArgument, "tokenizer.json",
              "nests deeper");
  ExpectNamed(Tokenizer::FromJson(tj, "{\"x\": " + deep + "}", "", "").status(), StatusCode::kInvalidArgument,
              "tokenizer_config.json", "nests deeper");
  ExpectNamed(ParseModelConfig("{\"x\": " + deep + "}", "", "config.json").status(), StatusCode::kInvalidArgument,
              "config.json", "nests deeper");
  // Brackets inside strings do not count.
  EXPECT_TRUE(JsonNestingWithin("{\"a\": \"" + std::string(1000, '[') + "\\\"\"}"));
  EXPECT_FALSE(JsonNestingWithin(std::string(65, '[')));
}

TEST(ModelDirHardening, TokenizerConfigFieldsOfTheWrongTypeAreErrors) {
  const std::string dir = CopyFixture("tokenizer_config");
  const std::string original = ReadAll(dir + "/tokenizer_config.json");
  const std::vector<EditCase> cases = {
      {[](Json& j) { j["eos_token"] = 5; }, "eos_token"},
      {[](Json& j) { j["bos_token"] = {{"content", 1}}; }, "bos_token"},
      {[](Json& j) { j["chat_template"] = 7; }, "chat_template"},
      {[](Json& j) { j["chat_template"] = Json::array({{{"name", "default"}, {"template", 1}}}); },
       "chat_template[].template"},
  };
  for (const EditCase& c : cases) {
    Json j = Json::parse(original);
    c.edit(j);
    WriteAll(dir + "/tokenizer_config.json", j.dump());
    ExpectNamed(Tokenizer::Load(dir).status(), StatusCode::kInvalidArgument, dir + "/tokenizer_config.json", c.field);
  }
  // transformers' list form of several templates: the one named "default" applies.
  Json j = Json::parse(original);
  const std::string tpl = j["chat_template"].get<std::string>();
  j["chat_template"] = Json::array({{{"name", "tool_use"}, {"template", "x"}}, {{"name", "default"}, {"template", tpl}}});
  WriteAll(dir + "/tokenizer_config.json", j.dump());
  StatusOr<Tokenizer> listed = Tokenizer::Load(dir);
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  StatusOr<Tokenizer> plain = Tokenizer::Load(Fixture("qwen2"));
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(listed->ApplyChatTemplate({{"user", "hi"}}, true), plain->ApplyChatTemplate({{"user", "hi"}}, true));
}

TEST(ModelDirHardening, StopTokenIdsMustBeTokenIds) {
  const std::string tj = ReadAll(Fixture("qwen2") + "/tokenizer.json");
  for (const char* gen : {R"({"eos_token_id": -1})", R"({"eos_token_id": 1099511627776})", R"({"eos_token_id": [1, "x"]})",
                          R"({"eos_token_id": "815"})"}) {
    ExpectNamed(Tokenizer::FromJson(tj, "", R"({"model_type": "qwen2"})", gen).status(), StatusCode::kInvalidArgument,
                "generation_config.json", "eos_token_id");
  }
  ExpectNamed(Tokenizer::FromJson(tj, "", R"({"model_type": 2})", "").status(), StatusCode::kInvalidArgument,
              "config.json", "model_type");
}

// A Qwen template made of openings of the default-system literal and no close: a naive scan takes
// time quadratic in its length; the scan must be one pass.
TEST(ModelDirHardening, ChatTemplateScanIsLinear) {
  std::string tpl;
  for (int i = 0; i < 50'000; ++i) tpl += "'<|im_start|>system\\n";
  const auto start = std::chrono::steady_clock::now();
  const ChatFormat f = ChatFormatFor(ChatFamily::kQwen2, tpl);
  EXPECT_FALSE(f.default_system_prompt.has_value());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

// --- config.json ---

StatusOr<ModelConfig> ConfigWith(const std::function<void(Json&)>& edit, const std::string& family = "qwen2") {
  Json j = Json::parse(ReadAll(Fixture(family) + "/config.json"));
  edit(j);
  return ParseModelConfig(j.dump(), "", "dir/config.json");
}

// One bad value of a config.json field.
struct FieldCase {
  const char* field;
  Json value;
};

// Each case, alone in the family's fixture config.json (in its object `within`, when given), is an
// error naming the file and the field.
void ExpectEachRejected(const std::vector<FieldCase>& cases, const std::string& family = "qwen2",
                        const std::string& within = "") {
  for (const FieldCase& c : cases) {
    StatusOr<ModelConfig> r = ConfigWith(
        [&](Json& j) {
          Json& target = within.empty() ? j : j[within];
          target[c.field] = c.value;
        },
        family);
    const std::string field = within.empty() ? c.field : within + "." + c.field;
    ExpectNamed(r.status(), StatusCode::kInvalidArgument, "dir/config.json", field);
  }
}

// Was std::bad_alloc and an abort: the layer table was sized by the claim before any tensor was seen.
TEST(ModelDirHardening, HugeLayerCountIsAnErrorNamingTheField) {
  const std::string dir = CopyFixture("layers_1e9");
  EditJson(dir, "config.json", [](Json& j) { j["num_hidden_layers"] = 1000000000; });
  ExpectNamed(LoadDir(dir), StatusCode::kInvalidArgument, dir + "/config.json", "num_hidden_layers");
  ExpectNamed(ModelInfo(dir), StatusCode::kInvalidArgument, dir + "/config.json", "num_hidden_layers");
}

// Within the limits but more layers than the weights hold: the first missing tensor is named,
// and nothing was allocated for the layers that are not there.
TEST(ModelDirHardening, MoreLayersThanTheWeightsHoldNamesTheFirstMissingTensor) {
  const std::string dir = CopyFixture("layers_4096");
  EditJson(dir, "config.json", [](Json& j) { j["num_hidden_layers"] = 4096; });
  const Status s = LoadDir(dir);
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr("model.layers.2.input_layernorm.weight"));
}

TEST(ModelDirHardening, SizesOutOfRangeAreErrorsNamingTheField) {
  ExpectEachRejected({
      {"hidden_size", -64},
      {"hidden_size", 0},
      {"hidden_size", int64_t{1} << 40},
      {"vocab_size", -1},
      {"vocab_size", 18446744073709551615ull},
      {"intermediate_size", 0},
      {"num_attention_heads", -4},
      {"num_key_value_heads", 8},  // more than the 4 query heads
      {"num_key_value_heads", 0},
      {"head_dim", 3},             // odd: no rotary pairs
      {"head_dim", 1 << 20},
      {"max_position_embeddings", -1},
      {"max_position_embeddings", int64_t{1} << 31},
      {"rope_theta", 0},
      {"rope_theta", -10000.0},
      {"rms_norm_eps", -1e-6},
      {"rms_norm_eps", 2.0},
      {"eos_token_id", 896},        // vocab_size is 896
      {"eos_token_id", Json::array({817, -1})},
      {"bos_token_id", 1 << 30},
  });
}

TEST(ModelDirHardening, HiddenSizeNotDivisibleByHeadsIsAnError) {
  StatusOr<ModelConfig> r = ConfigWith([](Json& j) { j["hidden_size"] = 66; });
  ExpectNamed(r.status(), StatusCode::kInvalidArgument, "dir/config.json", "hidden_size");
  EXPECT_THAT(r.status().message(), HasSubstr("not a multiple of num_attention_heads"));
  // With an explicit head_dim (Qwen3) the width of a head need not divide hidden_size.
  EXPECT_TRUE(ConfigWith([](Json& j) { j["hidden_size"] = 66; }, "qwen3").ok());
  // Heads times head_dim past any published model.
  r = ConfigWith([](Json& j) { j["num_attention_heads"] = 4096; j["num_key_value_heads"] = 1; j["head_dim"] = 1024; },
                 "qwen3");
  ExpectNamed(r.status(), StatusCode::kInvalidArgument, "dir/config.json", "num_attention_heads");
}

// Wrong JSON types would throw out of nlohmann's value() (an abort) or be read as something else.
TEST(ModelDirHardening, WrongJsonTypesInConfigAreErrors) {
  ExpectEachRejected({
      {"model_type", 2},
      {"architectures", "Qwen2ForCausalLM"},
      {"hidden_size", "64"},
      {"hidden_size", 64.5},
      {"num_hidden_layers", true},
      {"tie_word_embeddings", "true"},
      {"tie_word_embeddings", 1},
      {"rope_theta", "1e6"},
      {"rms_norm_eps", Json::array()},
      {"hidden_act", 1},
      {"torch_dtype", Json::object()},
      {"use_sliding_window", "no"},
      {"rope_scaling", 8},
      {"eos_token_id", "817"},
  });
  ExpectNamed(ConfigWith([](Json& j) { j.erase("num_hidden_layers"); }).status(), StatusCode::kInvalidArgument,
              "dir/config.json", "num_hidden_layers");
}

TEST(ModelDirHardening, RopeScalingParametersAreChecked) {
  ExpectEachRejected({
      {"factor", 0},
      {"factor", "8"},
      {"low_freq_factor", -1},
      {"high_freq_factor", 0.5},  // below low_freq_factor
      {"original_max_position_embeddings", 0},
      {"original_max_position_embeddings", int64_t{1} << 40},
      {"rope_type", 3},
  }, "llama3", "rope_scaling");
}

TEST(ModelDirHardening, GenerationConfigIdsAreChecked) {
  const std::string config = ReadAll(Fixture("qwen2") + "/config.json");
  for (const char* gen : {R"({"eos_token_id": 5000})", R"({"eos_token_id": [817, "x"]})", R"({"bos_token_id": -7})",
                          R"([1, 2])"}) {
    StatusOr<ModelConfig> r = ParseModelConfig(config, gen, "dir/config.json");
    EXPECT_FALSE(r.ok()) << gen;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << gen;
    EXPECT_THAT(r.status().message(), HasSubstr("dir/generation_config.json")) << gen;
  }
}

// --- safetensors files and the index ---

void WriteHeaderLength(const std::string& path, uint64_t length) {
  std::string img = ReadAll(path);
  for (int i = 0; i < 8; ++i) img[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  WriteAll(path, img);
}

TEST(ModelDirHardening, SafetensorsHeaderLongerThanTheFileIsAnError) {
  const std::string dir = CopyFixture("header_long");
  const std::string path = dir + "/model.safetensors";
  const uint64_t size = std::filesystem::file_size(path);
  for (uint64_t length : {size - 7, ~uint64_t{0}, ~uint64_t{0} - 6}) {
    WriteHeaderLength(path, length);
    const Status s = LoadDir(dir);
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
    EXPECT_THAT(s.message(), HasSubstr(path));
    EXPECT_THAT(s.message(), HasSubstr("header length"));
  }
}

// A header claiming more than 100 MB is refused before a byte of it is parsed, even when the
// (sparse) file is that long.
TEST(ModelDirHardening, SafetensorsHeaderOverTheCapIsRefusedUnread) {
  const std::string dir = CopyFixture("header_cap");
  const std::string path = dir + "/model.safetensors";
  WriteHeaderLength(path, kMaxSafetensorsHeaderBytes + 1);
  std::filesystem::resize_file(path, kMaxSafetensorsHeaderBytes + 64);
  const Status s = LoadDir(dir);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr(path));
  EXPECT_THAT(s.message(), HasSubstr("100000000 bytes a header may have"));
}

TEST(ModelDirHardening, SafetensorsOffsetsPastTheEndOrOverlappingAreErrors) {
  const std::string src = ReadAll(Fixture("qwen2") + "/model.safetensors");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<unsigned char>(src[i]);
  const Json header = Json::parse(src.substr(8, header_len));
  const std::string body = src.substr(8 + header_len);
  auto rebuilt = [&](const Json& h) {
    std::string text = h.dump();
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
    return out + text + body;
  };
  const std::string name = "model.norm.weight";
  const uint64_t begin = header[name]["data_offsets"][0];
  const uint64_t end = header[name]["data_offsets"][1];
  ASSERT_NE(begin, 0u) << "the overlap case below needs a tensor that does not start the data";
  struct Case {
    Json offsets;
    std::string says;
  };
  const std::vector<Case> cases = {
      {Json::array({body.size(), body.size() + (end - begin)}), "past the end of the data"},
      {Json::array({~uint64_t{0} - 1, ~uint64_t{0}}), "past the end of the data"},
      {Json::array({end, begin}), "begin after they end"},
      {Json::array({-1, 127}), "two non-negative integers"},
      {Json::array({0, end - begin}), "overlap"},
  };
  const std::string dir = CopyFixture("offsets");
  for (const Case& c : cases) {
    Json h = header;
    h[name]["data_offsets"] = c.offsets;
    WriteAll(dir + "/model.safetensors", rebuilt(h));
    const Status s = LoadDir(dir);
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
    EXPECT_THAT(s.message(), HasSubstr(dir + "/model.safetensors"));
    EXPECT_THAT(s.message(), HasSubstr(c.says)) << s.ToString();
  }
  // A shape whose element count overflows 64 bits when multiplied out.
  Json h = header;
  h[name]["shape"] = Json::array({uint64_t{1} << 32, uint64_t{1} << 32, 4});
  WriteAll(dir + "/model.safetensors", rebuilt(h));
  EXPECT_THAT(LoadDir(dir).message(), HasSubstr("tensor 'model.norm.weight': shape is too large"));
  // A shape that disagrees with config.json.
  h = header;
  h[name]["shape"] = Json::array({32, 2});
  WriteAll(dir + "/model.safetensors", rebuilt(h));
  const Status s = LoadDir(dir);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_THAT(s.message(), HasSubstr("tensor 'model.norm.weight' has shape [32, 2] but config.json implies [64]"));
}

TEST(ModelDirHardening, IndexCannotNameFilesOutsideTheDirectory) {
  for (const std::string& target : {std::string("../../etc/passwd"), std::string("/etc/passwd"), std::string("..\\x.safetensors"),
                                    std::string("config.json"), std::string(".hidden.safetensors"),
                                    std::string("sub/model.safetensors"), std::string("a\nb.safetensors"),
                                    std::string("model.safetensors\0.x", 20), std::string("")}) {
    const std::string dir = CopyFixture("index_escape");
    Json index;
    index["weight_map"]["model.norm.weight"] = target;
    WriteAll(dir + "/model.safetensors.index.json", index.dump());
    const Status s = LoadDir(dir);
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.ToString();
    EXPECT_THAT(s.message(), HasSubstr(dir + "/model.safetensors.index.json"));
    EXPECT_THAT(s.message(), HasSubstr("weight_map[\"model.norm.weight\"]"));
  }
  ExpectNamed(ParseSafetensorsIndex(R"({"weight_map": [1]})", "i.json").status(), StatusCode::kDataLoss, "i.json",
              "weight_map");
  ExpectNamed(ParseSafetensorsIndex(R"({"weight_map": {"t": 5}})", "i.json").status(), StatusCode::kDataLoss, "i.json",
              "weight_map[\"t\"]");
}

// --- what kind of file, how large ---

// Runs `load` with a deadline; a load that blocks is released by opening the FIFO for writing.
Status LoadWithDeadline(const std::function<Status()>& load, const std::string& fifo) {
  auto result = std::async(std::launch::async, load);
  if (result.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    ADD_FAILURE() << "loading blocked on the FIFO " << fifo;
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
  }
  return result.get();
}

// Opening a FIFO for reading waits for a writer, so a FIFO must be refused before it is opened.
TEST(ModelDirHardening, FifoInPlaceOfAFileIsRefusedWithoutBlocking) {
  for (const char* file : {"model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json",
                           "model.safetensors.index.json"}) {
    const std::string dir = CopyFixture("fifo");
    const std::string path = dir + "/" + file;
    std::filesystem::remove(path);
    ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
    const Status s = LoadWithDeadline([&] { return LoadDir(dir); }, path);
    ExpectNamed(s, StatusCode::kFailedPrecondition, path, "a FIFO, not a regular file");
    if (std::string(file) == "tokenizer.json") {
      ExpectNamed(LoadWithDeadline([&] { return Tokenizer::Load(dir).status(); }, path),
                  StatusCode::kFailedPrecondition, path, "a FIFO");
    }
  }
}

TEST(ModelDirHardening, DirectoryOrDeviceInPlaceOfAFileIsRefused) {
  const std::string dir = CopyFixture("not_regular");
  std::filesystem::remove(dir + "/config.json");
  std::filesystem::create_directory(dir + "/config.json");
  ExpectNamed(LoadDir(dir), StatusCode::kFailedPrecondition, dir + "/config.json", "a directory");
  std::filesystem::remove(dir + "/config.json");
  std::filesystem::copy_file(Fixture("qwen2") + "/config.json", dir + "/config.json");
  std::filesystem::remove(dir + "/model.safetensors");
  std::filesystem::create_symlink("/dev/zero", dir + "/model.safetensors");
  ExpectNamed(LoadDir(dir), StatusCode::kFailedPrecondition, dir + "/model.safetensors", "a character device");
}

// A JSON file over the cap is refused from its size, before anything is allocated for it.
TEST(ModelDirHardening, OversizedJsonFileIsRefusedFromItsSize) {
  const std::string dir = CopyFixture("big_json");
  std::filesystem::resize_file(dir + "/tokenizer.json", kMaxModelJsonBytes + 1);  // sparse
  ExpectNamed(LoadDir(dir), StatusCode::kInvalidArgument, dir + "/tokenizer.json", "67108865 bytes");
}

// --- rote model info ---

// A model whose tokenizer cannot load is not a usable model: info fails rather than printing
// "tokenizer: not loadable" and exiting 0.
TEST(ModelDirHardening, ModelInfoFailsWhenTheTokenizerCannotLoad) {
  const std::string dir = CopyFixture("info_no_tokenizer");
  std::filesystem::remove(dir + "/tokenizer.json");
  std::ostringstream out, err;
  const Status s = tool::ModelCommand({"info", dir}, out, err);
  ExpectNamed(s, StatusCode::kNotFound, dir + "/tokenizer.json", "no such file");
  EXPECT_THAT(out.str(), Not(HasSubstr("not loadable")));
}

// A mixture of experts says so: how many experts, how wide, how many a token, in which layers.
TEST(ModelDirHardening, ModelInfoNamesTheExperts) {
  std::ostringstream out, err;
  const Status s = tool::ModelCommand({"info", Fixture("qwen3_moe")}, out, err);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_THAT(out.str(), HasSubstr("family:           qwen3_moe (Qwen3MoeForCausalLM)"));
  EXPECT_THAT(out.str(), HasSubstr("experts:          8 of MLP 32, 2 a token (weights renormalised), in 2 of 3 layers"));
  std::ostringstream dense;
  ASSERT_TRUE(tool::ModelCommand({"info", Fixture("qwen2")}, dense, err).ok());
  EXPECT_THAT(dense.str(), Not(HasSubstr("experts:")));
}

}  // namespace
}  // namespace rote::inference
