// The tokenizer against the Hugging Face libraries: every encoding, decoding and chat text in
// tests/fixtures/<family>/tokenizer_cases.json was produced by tokenizers 0.23 / transformers 5
// (tools/make_fixtures.py) from the corpus in tools/tokenizer_corpus.json.
#include "inference/tokenizer/tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "inference/tokenizer/utf8.h"
#include "tests/inference/tokenizer_test_util.h"

namespace rote::inference {
namespace {

using Json = nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string FixtureDir(const std::string& family) {
  return std::string(ROTE_SOURCE_DIR) + "/tests/fixtures/" + family;
}

using tokenizer_test::CaseInput;
using tokenizer_test::ReadText;

Json ReadJson(const std::string& path) {
  const std::string text = ReadText(path);
  EXPECT_FALSE(text.empty()) << "missing " << path;
  return Json::parse(text);
}


std::vector<int32_t> Ids(const Json& v) { return v.get<std::vector<int32_t>>(); }

const Tokenizer& Loaded(const std::string& family) {
  static std::map<std::string, Tokenizer>* cache = new std::map<std::string, Tokenizer>();
  auto it = cache->find(family);
  if (it == cache->end()) {
    StatusOr<Tokenizer> t = Tokenizer::Load(FixtureDir(family));
    if (!t.ok()) {
      ADD_FAILURE() << family << ": " << t.status().ToString();
      std::abort();
    }
    it = cache->emplace(family, *t).first;
  }
  return it->second;
}

class FamilyTest : public ::testing::TestWithParam<std::string> {
 protected:
  const Tokenizer& tok() { return Loaded(GetParam()); }
  Json Cases() { return ReadJson(FixtureDir(GetParam()) + "/tokenizer_cases.json"); }
};

TEST_P(FamilyTest, EncodesEveryCorpusStringLikeTokenizers) {
  const Json cases = Cases();
  ASSERT_GE(cases["cases"].size(), 90u);
  int mismatches = 0;
  for (const Json& c : cases["cases"]) {
    const std::vector<int32_t> got = tok().Encode(CaseInput(c));
    const std::vector<int32_t> want = Ids(c["ids"]);
    if (got != want) ++mismatches;
    EXPECT_EQ(got, want) << GetParam() << " case " << c["name"] << " tokens "
                         << c["tokens"].dump();
  }
  EXPECT_EQ(mismatches, 0);
}

TEST_P(FamilyTest, EncodesWithSpecialTokensAsTextLikeEncodeSpecialTokens) {
  const Json cases = Cases();
  for (const Json& c : cases["cases"]) {
    EXPECT_EQ(tok().Encode(CaseInput(c), /*parse_special=*/false), Ids(c["ids_no_special"]))
        << GetParam() << " case " << c["name"];
  }
}

TEST_P(FamilyTest, DecodesCorpusEncodingsLikeTokenizers) {
  const Json cases = Cases();
  for (const Json& c : cases["cases"]) {
    const std::vector<int32_t> ids = Ids(c["ids"]);
    EXPECT_EQ(tok().Decode(ids), c["decoded"].get<std::string>()) << c["name"];
    EXPECT_EQ(tok().Decode(ids, /*skip_special=*/true), c["decoded_skip_special"].get<std::string>())
        << c["name"];
  }
}

TEST_P(FamilyTest, RoundTripsTextThatTokenizersRoundTrips) {
  // Decode(Encode(x)) == x wherever the reference does so: valid UTF-8 that NFC leaves alone and
  // that no space-stripping added token touches. The byte-level BPE itself loses nothing.
  const Json cases = Cases();
  int checked = 0;
  for (const Json& c : cases["cases"]) {
    if (c.contains("hex")) continue;
    const std::string text = c["text"].get<std::string>();
    if (c["decoded"].get<std::string>() != text) continue;
    EXPECT_EQ(tok().Decode(tok().Encode(text)), text) << c["name"];
    ++checked;
  }
  EXPECT_GT(checked, 85);
}

TEST_P(FamilyTest, DecodesArbitraryIdSequencesLikeTokenizers) {
  const Json cases = Cases();
  ASSERT_FALSE(cases["decode_cases"].empty());
  for (const Json& c : cases["decode_cases"]) {
    const std::vector<int32_t> ids = Ids(c["ids"]);
    EXPECT_EQ(tok().Decode(ids), c["decoded"].get<std::string>()) << c["ids"].dump();
    EXPECT_EQ(tok().Decode(ids, true), c["decoded_skip_special"].get<std::string>())
        << c["ids"].dump();
  }
}

TEST_P(FamilyTest, ChatTemplateMatchesTransformers) {
  const Json cases = Cases();
  ASSERT_GE(cases["chat"].size(), 10u);
  for (const Json& c : cases["chat"]) {
    std::vector<ChatMessage> messages;
    for (const Json& m : c["messages"]) {
      messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
    }
    const std::string text = tok().ApplyChatTemplate(messages, c["add_generation_prompt"].get<bool>());
    EXPECT_EQ(text, c["text"].get<std::string>()) << c["messages"].dump();
    EXPECT_EQ(tok().Encode(text), Ids(c["ids"])) << c["messages"].dump();
  }
}

TEST_P(FamilyTest, StreamingDecodeEqualsDecodeAndEmitsOnlyWholeCharacters) {
  const Json cases = Cases();
  std::vector<std::vector<int32_t>> sequences;
  for (const Json& c : cases["cases"]) sequences.push_back(Ids(c["ids"]));
  for (const Json& c : cases["decode_cases"]) sequences.push_back(Ids(c["ids"]));
  int held_back = 0;
  for (const auto& ids : sequences) {
    for (bool skip : {false, true}) {
      StreamDecoder stream(tok(), skip);
      std::string all;
      for (int32_t id : ids) {
        const std::string chunk = stream.Push(id);
        EXPECT_TRUE(utf8::IsValid(chunk));
        if (chunk.empty() && !tok().TokenBytes(id).empty()) ++held_back;
        all += chunk;
      }
      all += stream.Finish();
      EXPECT_EQ(all, tok().Decode(ids, skip));
    }
  }
  // The corpus (emoji, CJK) must have cut some characters across tokens, or this test proves
  // little.
  EXPECT_GT(held_back, 0);
}

TEST_P(FamilyTest, StreamingHoldsBackAFourByteCharacterSplitIntoSingleBytes) {
  // U+1F600 as four single-byte tokens (every byte has one in a byte-level vocabulary).
  const std::string emoji = "\xF0\x9F\x98\x80";
  std::vector<int32_t> ids;
  for (unsigned char b : emoji) {
    bool found = false;
    for (int32_t id = 0; id < tok().vocab_size(); ++id) {
      if (tok().TokenBytes(id) == std::string(1, static_cast<char>(b)) && !tok().IsSpecial(id)) {
        ids.push_back(id);
        found = true;
        break;
      }
    }
    ASSERT_TRUE(found) << "no token for byte " << int(b);
  }
  StreamDecoder stream(tok());
  EXPECT_EQ(stream.Push(tok().Encode("a")[0]), "a");
  EXPECT_EQ(stream.Push(ids[0]), "");
  EXPECT_EQ(stream.Push(ids[1]), "");
  EXPECT_EQ(stream.Push(ids[2]), "");
  EXPECT_EQ(stream.Push(ids[3]), emoji);
  // An unfinished character at the end of the stream becomes U+FFFD, as Decode does.
  EXPECT_EQ(stream.Push(ids[0]), "");
  EXPECT_EQ(stream.Finish(), "\xEF\xBF\xBD");
  EXPECT_EQ(tok().Decode(std::vector<int32_t>{ids[0], ids[1]}), "\xEF\xBF\xBD");
}

TEST_P(FamilyTest, VocabularySizeAndAddedTokensMatchTheFixture) {
  const Json cases = Cases();
  EXPECT_EQ(tok().vocab_size(), cases["vocab_size"].get<int32_t>());
  for (const Json& a : cases["added_tokens"]) {
    EXPECT_EQ(tok().TokenToId(a["content"].get<std::string>()), a["id"].get<int32_t>());
  }
}

TEST_P(FamilyTest, EncodingIsTheSameFromManyThreads) {
  const Json cases = Cases();
  std::vector<std::string> inputs;
  std::vector<std::vector<int32_t>> want;
  for (const Json& c : cases["cases"]) {
    inputs.push_back(CaseInput(c));
    want.push_back(Ids(c["ids"]));
  }
  std::vector<int> failures(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 5; ++round) {
        for (size_t i = 0; i < inputs.size(); ++i) {
          if (tok().Encode(inputs[(i + t) % inputs.size()]) != want[(i + t) % inputs.size()]) {
            ++failures[t];
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_THAT(failures, ElementsAre(0, 0, 0, 0));
}

TEST_P(FamilyTest, LongUnbrokenTextEncodesInLinearTime) {
  // One 400 KB piece with no added token to split it: each regex match must not rescan the
  // subject (PCRE2 re-validates UTF-8 per call unless told not to, which made this quadratic:
  // minutes instead of milliseconds). CPU time, with a wide margin for loaded machines.
  std::string text;
  while (text.size() < 400000) text += "word 123 \u4f60\u597d, ";
  const std::clock_t start = std::clock();
  const std::vector<int32_t> ids = tok().Encode(text);
  const double seconds = double(std::clock() - start) / CLOCKS_PER_SEC;
  EXPECT_GT(ids.size(), 100000u);
  EXPECT_LT(seconds, 2.0);
  EXPECT_EQ(tok().Decode(ids), text);
}

INSTANTIATE_TEST_SUITE_P(Families, FamilyTest, ::testing::Values("qwen2", "llama3", "qwen3"));

TEST(TokenizerFixtures, ExerciseBothMergeFormats) {
  // Older tokenizer.json files write merges as "a b", newer ones as ["a", "b"].
  EXPECT_TRUE(ReadJson(FixtureDir("qwen2") + "/tokenizer.json")["model"]["merges"][0].is_string());
  EXPECT_TRUE(ReadJson(FixtureDir("llama3") + "/tokenizer.json")["model"]["merges"][0].is_array());
}

TEST(TokenizerStopTokens, ComeFromTheModelsConfigFiles) {
  const Tokenizer& qwen2 = Loaded("qwen2");
  EXPECT_EQ(qwen2.chat_family(), ChatFamily::kQwen2);
  EXPECT_EQ(qwen2.bos_id(), std::nullopt);
  EXPECT_EQ(qwen2.eos_id(), qwen2.TokenToId("<|im_end|>"));
  EXPECT_THAT(qwen2.stop_token_ids(),
              ElementsAre(*qwen2.TokenToId("<|endoftext|>"), *qwen2.TokenToId("<|im_end|>")));

  const Tokenizer& llama = Loaded("llama3");
  EXPECT_EQ(llama.chat_family(), ChatFamily::kLlama3);
  EXPECT_EQ(llama.bos_id(), llama.TokenToId("<|begin_of_text|>"));
  EXPECT_THAT(llama.stop_token_ids(),
              ElementsAre(*llama.TokenToId("<|end_of_text|>"), *llama.TokenToId("<|eom_id|>"),
                          *llama.TokenToId("<|eot_id|>")));

  const Tokenizer& qwen3 = Loaded("qwen3");
  EXPECT_EQ(qwen3.chat_family(), ChatFamily::kQwen3);
  EXPECT_TRUE(qwen3.IsSpecial(*qwen3.TokenToId("<|im_end|>")));
  EXPECT_FALSE(qwen3.IsSpecial(*qwen3.TokenToId("<think>")));
}

TEST(TokenizerStopTokens, FallBackToConfigThenTokenizerConfig) {
  const std::string dir = FixtureDir("llama3");
  const std::string tokenizer_json = ReadText(dir + "/tokenizer.json");
  const std::string tokenizer_config = ReadText(dir + "/tokenizer_config.json");
  // No generation_config: config.json's eos list ([end_of_text, eom, eot]).
  StatusOr<Tokenizer> t = Tokenizer::FromJson(tokenizer_json, tokenizer_config,
                                              R"({"model_type": "llama", "eos_token_id": 829})", "");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_THAT(t->stop_token_ids(), ElementsAre(829, *t->TokenToId("<|eot_id|>")));
  // Neither: tokenizer_config's eos_token, plus the turn end.
  t = Tokenizer::FromJson(tokenizer_json, R"({"eos_token": "<|end_of_text|>"})",
                          R"({"model_type": "llama"})", "");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_THAT(t->stop_token_ids(),
              ElementsAre(*t->TokenToId("<|end_of_text|>"), *t->TokenToId("<|eot_id|>")));
}

TEST(TokenizerChat, Llama30TemplateHasNoDatedSystemHeader) {
  const std::string dir = FixtureDir("llama3");
  const std::string tpl =
      "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
      "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | "
      "trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}"
      "{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
      "'<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";
  Json config = {{"bos_token", "<|begin_of_text|>"}, {"chat_template", tpl}};
  StatusOr<Tokenizer> t = Tokenizer::FromJson(ReadText(dir + "/tokenizer.json"), config.dump(),
                                              ReadText(dir + "/config.json"), "");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->ApplyChatTemplate({{"system", " S "}, {"user", "hi\n"}}, true),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(TokenizerChat, Qwen2DefaultSystemPromptComesFromTheTemplate) {
  const std::string dir = FixtureDir("qwen2");
  const std::string qwen2_template =
      "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
      "'<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' "
      "+ message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if "
      "add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
  Json config = {{"eos_token", "<|im_end|>"}, {"chat_template", qwen2_template}};
  StatusOr<Tokenizer> t = Tokenizer::FromJson(ReadText(dir + "/tokenizer.json"), config.dump(),
                                              ReadText(dir + "/config.json"), "");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->ApplyChatTemplate({{"user", "hi"}}, true),
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(TokenizerChat, Qwen2WithoutADefaultInItsTemplateInsertsNoSystemPrompt) {
  // A qwen2 model whose template has no default system literal (here Qwen3's template).
  StatusOr<Tokenizer> t = Tokenizer::FromJson(ReadText(FixtureDir("qwen2") + "/tokenizer.json"),
                                              ReadText(FixtureDir("qwen3") + "/tokenizer_config.json"),
                                              ReadText(FixtureDir("qwen2") + "/config.json"), "");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->chat_family(), ChatFamily::kQwen2);
  EXPECT_EQ(t->ApplyChatTemplate({{"user", "hi"}}, true),
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(TokenizerErrors, NameWhatIsWrong) {
  StatusOr<Tokenizer> missing = Tokenizer::Load("/nonexistent/model");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("tokenizer.json"));

  Json tj = ReadJson(FixtureDir("qwen2") + "/tokenizer.json");
  Json bad_normalizer = tj;
  bad_normalizer["normalizer"] = {{"type", "BertNormalizer"}};
  StatusOr<Tokenizer> t = Tokenizer::FromJson(bad_normalizer.dump(), "", "", "");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("BertNormalizer"));

  Json bad_pre = tj;
  bad_pre["pre_tokenizer"] = {{"type", "WhitespaceSplit"}};
  t = Tokenizer::FromJson(bad_pre.dump(), "", "", "");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("WhitespaceSplit"));

  Json bad_decoder = tj;
  bad_decoder["decoder"] = {{"type", "WordPiece"}};
  t = Tokenizer::FromJson(bad_decoder.dump(), "", "", "");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("WordPiece"));

  Json bad_post = tj;
  bad_post["post_processor"] = {{"type", "TemplateProcessing"}, {"single", Json::array()}};
  t = Tokenizer::FromJson(bad_post.dump(), "", "", "");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("post_processor.single"));

  Json bad_unk = tj;
  bad_unk["model"]["unk_token"] = "<nosuchunk>";
  t = Tokenizer::FromJson(bad_unk.dump(), "", "", "");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("<nosuchunk>"));

  Json bad_regex = tj;
  bad_regex["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
  t = Tokenizer::FromJson(bad_regex.dump(), "", "", "");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("(unclosed"));

  Json bad_merge = tj;
  bad_merge["model"]["merges"][0] = "nosuchtoken x";
  t = Tokenizer::FromJson(bad_merge.dump(), "", "", "");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("nosuchtoken"));

  // Tokenizing does not depend on the model type: a family rote cannot run is refused by the
  // model loader (ParseModelConfig), not here, so `model tokenize` works on any directory.
  t = Tokenizer::FromJson(tj.dump(), "", R"({"model_type": "gpt2"})", "");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_FALSE(t->Encode("hello").empty());

  t = Tokenizer::FromJson("{not json", "", "", "");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("tokenizer.json"));
}

TEST(TokenizerUtf8, ReplacesMaximalInvalidSubpartsLikePython) {
  EXPECT_EQ(utf8::Sanitize("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(utf8::Sanitize("\xF0\x9F\x98"), "\xEF\xBF\xBD");
  EXPECT_EQ(utf8::Sanitize("a\xC0\xAF"), "a\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(utf8::StreamablePrefixLength("ab\xF0\x9F\x98"), 2u);
  EXPECT_EQ(utf8::StreamablePrefixLength("ab\xED\xA0"), 4u);  // never valid: emit now
  EXPECT_EQ(utf8::StreamablePrefixLength("ab\xF0\x9F\x98\x80"), 6u);
}

}  // namespace
}  // namespace rote::inference
