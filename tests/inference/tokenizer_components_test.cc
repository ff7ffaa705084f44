// Each tokenizer.json component on small hand-written tokenizers, with the results tokenizers'
// code gives (the expectations follow its source: NormalizedString::split, merge_word, the
// decoders' decode_chain). The published files exercise them together in
// tokenizer_real_test.cc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>

#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "inference/tokenizer/tokenizer.h"
#include "inference/tokenizer/tokenizer_internal.h"

namespace rote::inference {
namespace {

using Json = nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Add = Tokenizer::AddSpecialTokens;

const char* const kMeta = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// A BPE tokenizer.json over `vocab` (ids in order) with `merges`; the caller sets components.
Json Base(const std::vector<std::string>& vocab, const std::vector<std::string>& merges) {
  Json v = Json::object();
  for (size_t i = 0; i < vocab.size(); ++i) v[vocab[i]] = i;
  Json tj = {{"version", "1.0"},
             {"added_tokens", Json::array()},
             {"normalizer", nullptr},
             {"pre_tokenizer", nullptr},
             {"post_processor", nullptr},
             {"decoder", nullptr},
             {"model", {{"type", "BPE"}, {"vocab", v}, {"merges", merges}}}};
  return tj;
}

Json Added(int id, const std::string& content) {
  return {{"id", id}, {"content", content}, {"special", true}, {"lstrip", false}, {"rstrip", false},
          {"single_word", false}, {"normalized", false}};
}

Tokenizer Make(const Json& tj) {
  StatusOr<Tokenizer> t = Tokenizer::FromJson(tj.dump(), "", "", "");
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  if (!t.ok()) std::abort();
  return *t;
}

// The tokens' own strings joined by '|'.
std::string Pieces(const Tokenizer& t, const std::vector<int32_t>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) out += (i ? "|" : "") + t.TokenText(ids[i]);
  return out;
}

std::string Streamed(const Tokenizer& t, const std::vector<int32_t>& ids, bool skip = false) {
  StreamDecoder s(t, skip);
  std::string out;
  for (int32_t id : ids) out += s.Push(id);
  return out + s.Finish();
}

// Llama 2's layout: Prepend + Replace normalizers, no pre-tokenizer, byte fallback, BOS template,
// Replace/ByteFallback/Fuse/Strip decoder.
Json SentencePieceStyle(bool fuse_unk) {
  Json tj = Base({"<unk>", "<s>", "</s>", kMeta, "a", "b", std::string(kMeta) + "a", "ab", "<0xE4>", "<0xB8>",
                  "<0xAD>", "c"},
                 {std::string(kMeta) + " a", "a b"});
  tj["added_tokens"] = {Added(0, "<unk>"), Added(1, "<s>"), Added(2, "</s>")};
  tj["normalizer"] = {{"type", "Sequence"},
                      {"normalizers",
                       {{{"type", "Prepend"}, {"prepend", kMeta}},
                        {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kMeta}}}}};
  tj["model"]["byte_fallback"] = true;
  tj["model"]["unk_token"] = "<unk>";
  tj["model"]["fuse_unk"] = fuse_unk;
  tj["post_processor"] = {{"type", "TemplateProcessing"},
                          {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                      {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
                          {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}};
  tj["decoder"] = {{"type", "Sequence"},
                   {"decoders",
                    {{{"type", "Replace"}, {"pattern", {{"String", kMeta}}}, {"content", " "}},
                     {{"type", "ByteFallback"}},
                     {{"type", "Fuse"}},
                     {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  return tj;
}

TEST(TokenizerSentencePiece, MergesBytesFallBackAndUnknownsFuse) {
  const Tokenizer t = Make(SentencePieceStyle(/*fuse_unk=*/true));
  EXPECT_THAT(t.Encode("ab a"), ElementsAre(6, 5, 6));
  EXPECT_THAT(t.Encode("ab a", Add::kYes), ElementsAre(1, 6, 5, 6));
  EXPECT_THAT(t.Encode("ab a", Add::kNo), ElementsAre(6, 5, 6));
  EXPECT_THAT(t.special_prefix_ids(), ElementsAre(1));
  EXPECT_THAT(t.Encode("\xE4\xB8\xAD"), ElementsAre(3, 8, 9, 10));  // 中 by its bytes
  EXPECT_THAT(t.Encode("xy"), ElementsAre(3, 0));                   // one fused unk
  // Prepend applies to every piece between added tokens, as in tokenizers.
  EXPECT_THAT(t.Encode("a<s>a"), ElementsAre(6, 1, 6));
  EXPECT_THAT(t.Encode(""), ElementsAre());
  EXPECT_THAT(t.Encode("", Add::kYes), ElementsAre(1));

  const Tokenizer unfused = Make(SentencePieceStyle(/*fuse_unk=*/false));
  EXPECT_THAT(unfused.Encode("xy"), ElementsAre(3, 0, 0));
}

TEST(TokenizerSentencePiece, DecodesThroughReplaceByteFallbackFuseStrip) {
  const Tokenizer t = Make(SentencePieceStyle(true));
  const std::vector<int32_t> ids{1, 6, 5, 6};
  EXPECT_EQ(t.Decode(ids), "<s> ab a");
  EXPECT_EQ(t.Decode(ids, /*skip_special=*/true), "ab a");
  EXPECT_EQ(t.Decode(std::vector<int32_t>{3, 8, 9, 10}), "\xE4\xB8\xAD");
  // An invalid run of byte tokens: one U+FFFD per byte token.
  EXPECT_EQ(t.Decode(std::vector<int32_t>{8, 9}), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(t.Decode(std::vector<int32_t>{8, 11}), "\xEF\xBF\xBD" "c");
  EXPECT_EQ(t.TokenBytes(8), "\xE4");
  EXPECT_EQ(t.TokenBytes(6), " a");
  for (const std::vector<int32_t>& seq : std::vector<std::vector<int32_t>>{
           {1, 6, 5, 6}, {3, 8, 9, 10}, {8, 9}, {8, 11}, {3, 3, 6}, {6, 8, 9, 10, 5}, {3}, {8, 9, 10, 8}}) {
    for (bool skip : {false, true}) EXPECT_EQ(Streamed(t, seq, skip), t.Decode(seq, skip));
  }
}

Json MetaspaceStyle(const std::string& scheme) {
  Json tj = Base({"<s>", kMeta, "a", "b", std::string(kMeta) + "a", std::string(kMeta) + "b"},
                 {std::string(kMeta) + " a", std::string(kMeta) + " b"});
  tj["added_tokens"] = {Added(0, "<s>")};
  tj["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", kMeta}, {"prepend_scheme", scheme}, {"split", true}};
  tj["decoder"] = {{"type", "Metaspace"}, {"replacement", kMeta}, {"prepend_scheme", scheme}, {"split", true}};
  return tj;
}

TEST(TokenizerMetaspace, PrependsBySchemeSplitsBeforeEachSpaceAndDecodes) {
  const Tokenizer first = Make(MetaspaceStyle("first"));
  EXPECT_EQ(Pieces(first, first.Encode("a b")), "\xE2\x96\x81" "a|\xE2\x96\x81" "b");
  // After an added token the text no longer starts the input: no prefix under "first".
  EXPECT_EQ(Pieces(first, first.Encode("<s>a b")), "<s>|a|\xE2\x96\x81" "b");
  const Tokenizer always = Make(MetaspaceStyle("always"));
  EXPECT_EQ(Pieces(always, always.Encode("<s>a b")), "<s>|\xE2\x96\x81" "a|\xE2\x96\x81" "b");
  const Tokenizer never = Make(MetaspaceStyle("never"));
  EXPECT_EQ(Pieces(never, never.Encode("a b")), "a|\xE2\x96\x81" "b");

  // The decoder drops the replacement in the first token only (unless "never").
  EXPECT_EQ(first.Decode(first.Encode("a b")), "a b");
  EXPECT_EQ(never.Decode(never.Encode("a b")), "a b");
  EXPECT_EQ(never.Decode(std::vector<int32_t>{4, 5}), " a b");
  EXPECT_EQ(Streamed(first, std::vector<int32_t>{4, 5, 4}), "a b a");
}

// A tokenizer whose merges join every neighbouring pair, so the pieces show in the tokens.
Tokenizer SplitBy(const std::string& behavior, bool invert) {
  Json tj = Base({"a", "b", "c", "-", "a-", "-b", "b-", "--", "-c", "1", "2", "12"},
                 {"a -", "- b", "b -", "- -", "- c", "1 2"});
  tj["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", behavior}, {"invert", invert}};
  return Make(tj);
}

TEST(TokenizerSplit, EveryDelimiterBehaviorCutsAsTokenizersDoes) {
  const std::string text = "a-b--c";
  auto pieces = [&](const std::string& behavior, bool invert = false) {
    const Tokenizer t = SplitBy(behavior, invert);
    return Pieces(t, t.Encode(text));
  };
  EXPECT_EQ(pieces("Isolated"), "a|-|b|-|-|c");
  EXPECT_EQ(pieces("Removed"), "a|b|c");
  EXPECT_EQ(pieces("MergedWithPrevious"), "a-|b-|-|c");
  EXPECT_EQ(pieces("MergedWithNext"), "a|-b|-|-c");
  EXPECT_EQ(pieces("Contiguous"), "a|-|b|--|c");
  // invert: the gaps are the delimiters.
  EXPECT_EQ(pieces("Removed", true), "-|-|-");
  EXPECT_EQ(pieces("MergedWithPrevious", true), "a|-b|-|-c");
}

TEST(TokenizerSplit, DigitsIsolateOrJoinNumbers) {
  Json tj = Base({"a", "1", "2", "12", "a1"}, {"1 2", "a 1"});
  tj["pre_tokenizer"] = {{"type", "Digits"}, {"individual_digits", true}};
  Tokenizer t = Make(tj);
  EXPECT_EQ(Pieces(t, t.Encode("a12")), "a|1|2");
  tj["pre_tokenizer"]["individual_digits"] = false;
  t = Make(tj);
  EXPECT_EQ(Pieces(t, t.Encode("a12")), "a|12");
  // Digits of Unicode 16 (Garay) and 17 (Tolong Siki) are numeric to Rust's standard library.
  Json nj = Base({"\U00010D40", "\U00011DE0", "\U00010D40\U00011DE0"}, {"\U00010D40 \U00011DE0"});
  nj["pre_tokenizer"] = {{"type", "Digits"}, {"individual_digits", true}};
  t = Make(nj);
  EXPECT_EQ(Pieces(t, t.Encode("\U00010D40\U00011DE0")), "\U00010D40|\U00011DE0");
}

TEST(TokenizerRegex, ClassesMeanWhatOnigurumaMakesThem) {
  // \s is White_Space: U+180E MONGOLIAN VOWEL SEPARATOR is not (PCRE2's UCP \s would take it).
  auto pieces_by = [](const std::string& regex, const std::string& text) {
    std::vector<tokenizer_internal::Match> matches;
    StatusOr<tokenizer_internal::Pcre2Code> code = tokenizer_internal::CompileOnigRegex(regex, "test");
    EXPECT_TRUE(code.ok()) << code.status().ToString();
    tokenizer_internal::FindRegexMatches(code->get(), text, matches);
    std::string out;
    for (const auto& m : matches) {
      if (m.is_match) out += "[" + text.substr(m.start, m.end - m.start) + "]";
    }
    return out;
  };
  EXPECT_EQ(pieces_by(R"(\s+)", "a\xE1\xA0\x8E" "b c\xC2\x85" "d"), "[ ][\xC2\x85]");
  EXPECT_EQ(pieces_by(R"([^\s]+)", "a\xE1\xA0\x8E" "b c"), "[a\xE1\xA0\x8E" "b][c]");
  EXPECT_EQ(pieces_by(R"(\S+)", "x\xE3\x80\x80y"), "[x][y]");  // U+3000 is space
  // \w takes marks and every number, as Oniguruma's Word does.
  EXPECT_EQ(pieces_by(R"(\w+)", "e\xCC\x81x\xC2\xBD-y"), "[e\xCC\x81x\xC2\xBD][y]");
  // \h is a hexadecimal digit in Oniguruma's Ruby syntax.
  EXPECT_EQ(pieces_by(R"(\h+)", "xx 0fA9 zz"), "[0fA9]");
  // ^ and $ are line anchors.
  EXPECT_EQ(pieces_by(R"(^a)", "a\na"), "[a][a]");
  // Categories follow Oniguruma's Unicode 16.0 tables: U+105C0 TODHRI LETTER A (16.0) is a
  // letter, U+11F50 KAWI DIGIT ZERO (15.0) a decimal digit, U+0897 (16.0) a mark.
  EXPECT_EQ(pieces_by(R"(\p{L}+)", "x\xF0\x90\x97\x80y"), "[x\xF0\x90\x97\x80y]");
  EXPECT_EQ(pieces_by(R"([^\s\pL]+)", "x\xF0\x90\x97\x80-"), "[-]");
  EXPECT_EQ(pieces_by(R"(\d+)", "1\xF0\x91\xBD\x90"), "[1\xF0\x91\xBD\x90]");
  EXPECT_EQ(pieces_by(R"([\p{L}\p{M}]+)", "a\xE0\xA2\x97"), "[a\xE0\xA2\x97]");
  EXPECT_EQ(pieces_by(R"(\P{N}+)", "a\xF0\x91\xBD\x90" "b"), "[a][b]");
  // An empty match right after a match is skipped, as Oniguruma's find_iter does.
  EXPECT_EQ(pieces_by(R"(a*)", "aab"), "[aa][]");
}

TEST(TokenizerNormalizer, UnicodeFormsUseTokenizersUnicode9Tables) {
  using tokenizer_internal::NormalizeUnicode;
  using tokenizer_internal::UnicodeForm;
  // Old characters compose as always.
  EXPECT_EQ(NormalizeUnicode("e\xCC\x81", UnicodeForm::kNfc), "\xC3\xA9");
  EXPECT_EQ(NormalizeUnicode("a\xCC\xA3\xCC\x87", UnicodeForm::kNfc), "\xE1\xBA\xA1\xCC\x87");
  // U+1AC1 (Unicode 14, combining class 230) is a plain starter to Unicode 9.0: no reordering
  // of U+0323 before it, so nothing composes with the 'a'.
  EXPECT_EQ(NormalizeUnicode("a\xE1\xAB\x81\xCC\xA3", UnicodeForm::kNfc), "a\xE1\xAB\x81\xCC\xA3");
  // U+11935 U+11930 composes to U+11938 since Unicode 13; not under 9.0.
  EXPECT_EQ(NormalizeUnicode("\xF0\x91\xA4\xB5\xF0\x91\xA4\xB0", UnicodeForm::kNfc),
            "\xF0\x91\xA4\xB5\xF0\x91\xA4\xB0");
  EXPECT_EQ(NormalizeUnicode("\xF0\x91\xA4\xB8", UnicodeForm::kNfd), "\xF0\x91\xA4\xB8");
  EXPECT_EQ(NormalizeUnicode("\xEF\xAC\x81\xE2\x91\xA0", UnicodeForm::kNfkc), "fi1");  // ﬁ①
  EXPECT_EQ(NormalizeUnicode("\xC3\xA9", UnicodeForm::kNfd), "e\xCC\x81");
  EXPECT_TRUE(tokenizer_internal::InUnicode9(0x0041));
  EXPECT_TRUE(tokenizer_internal::InUnicode9(0x1F9C0));   // Unicode 8
  EXPECT_FALSE(tokenizer_internal::InUnicode9(0x1AC1));   // Unicode 14
  EXPECT_FALSE(tokenizer_internal::InUnicode9(0x0378));   // unassigned
}

TEST(TokenizerNormalizer, LowercaseStripReplacePrependInOrder) {
  Json tj = Base({"i", "\xCC\x87", "a", "x", "-"}, {});
  tj["normalizer"] = {{"type", "Sequence"},
                      {"normalizers",
                       {{{"type", "Strip"}, {"strip_left", true}, {"strip_right", true}},
                        {{"type", "Lowercase"}},
                        {{"type", "Replace"}, {"pattern", {{"Regex", "[0-9]+"}}}, {"content", "x"}},
                        {{"type", "Prepend"}, {"prepend", "-"}}}}};
  const Tokenizer t = Make(tj);
  // U+0130 lowercases to i + U+0307, as Rust's char::to_lowercase.
  EXPECT_EQ(Pieces(t, t.Encode("  \xC4\xB0" "A12 \t")), "-|i|\xCC\x87|a|x");
  // Case pairs of Unicode 16 and 17 (Garay, Beria Erfe, Latin additions) lowercase as the Rust
  // standard library does, though utf8proc's tables predate them.
  Json bytes = Base({"a"}, {});
  bytes["normalizer"] = {{"type", "Lowercase"}};
  bytes["model"]["byte_fallback"] = true;
  bytes["decoder"] = {{"type", "Sequence"}, {"decoders", {{{"type", "ByteFallback"}}, {{"type", "Fuse"}}}}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    bytes["model"]["vocab"][name] = 1 + b;
  }
  const Tokenizer lower = Make(bytes);
  const std::string upper = "\U00010D50\U00016EA0\uA7CB\uA7CE\u1C89\u0130";
  EXPECT_EQ(lower.Decode(lower.Encode(upper)), "\U00010D70\U00016EBB\u0264\uA7CF\u1C8Ai\u0307");
}

TEST(TokenizerDecoder, StreamingEqualsDecodeWhateverTheDecoderOrder) {
  Json tj = Base({"a", "b", "c", "<0x41>", "<0xC3>", "<0xA9>", " "}, {});
  const std::vector<std::vector<int32_t>> seqs{{0, 1, 2}, {0, 1, 0, 1}, {3, 0, 1}, {4, 5, 1}, {4, 0}, {6, 0, 6, 6}};
  const std::vector<Json> decoders{
      {{"type", "Sequence"}, {"decoders", {{{"type", "Fuse"}}, {{"type", "Replace"}, {"pattern", {{"String", "ab"}}}, {"content", "X"}}}}},
      {{"type", "Sequence"}, {"decoders", {{{"type", "ByteFallback"}}, {{"type", "Fuse"}}, {{"type", "Strip"}, {"content", " "}, {"start", 2}, {"stop", 2}}}}},
      {{"type", "Sequence"}, {"decoders", {{{"type", "Replace"}, {"pattern", {{"Regex", "b+"}}}, {"content", ""}}, {{"type", "ByteFallback"}}}}},
      {{"type", "Sequence"}, {"decoders", {{{"type", "ByteLevel"}}, {{"type", "Replace"}, {"pattern", {{"String", "a"}}}, {"content", "\xC3\xA9"}}}}},
      // Strip without Fuse strips every token; Metaspace after Fuse sees one token.
      {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}},
      {{"type", "Sequence"}, {"decoders", {{{"type", "Replace"}, {"pattern", {{"String", "a"}}}, {"content", " "}}, {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}},
      {{"type", "Sequence"}, {"decoders", {{{"type", "Fuse"}}, {{"type", "Metaspace"}, {"replacement", "a"}, {"prepend_scheme", "always"}}}}}};
  for (const Json& d : decoders) {
    tj["decoder"] = d;
    const Tokenizer t = Make(tj);
    for (const auto& seq : seqs) EXPECT_EQ(Streamed(t, seq), t.Decode(seq)) << d.dump();
  }
  tj["decoder"] = decoders[0];
  EXPECT_EQ(Make(tj).Decode(std::vector<int32_t>{0, 1, 2}), "Xc");  // across tokens, as tokenizers
}

TEST(TokenizerPostProcessor, RobertaBertAndSequencesWrapTheSequence) {
  Json tj = Base({"<s>", "</s>", "a"}, {});
  tj["added_tokens"] = {Added(0, "<s>"), Added(1, "</s>")};
  tj["post_processor"] = {{"type", "RobertaProcessing"}, {"sep", {"</s>", 1}}, {"cls", {"<s>", 0}}};
  EXPECT_THAT(Make(tj).Encode("a", Add::kYes), ElementsAre(0, 2, 1));
  tj["post_processor"]["type"] = "BertProcessing";
  EXPECT_THAT(Make(tj).Encode("a", Add::kYes), ElementsAre(0, 2, 1));
  tj["post_processor"] = {
      {"type", "Sequence"},
      {"processors",
       {{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}},
        {{"type", "TemplateProcessing"},
         {"single", {{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}, {{"SpecialToken", {{"id", "</s>"}, {"type_id", 0}}}}}},
         {"special_tokens", {{"</s>", {{"id", "</s>"}, {"ids", {1}}, {"tokens", {"</s>"}}}}}}}}}};
  const Tokenizer t = Make(tj);
  EXPECT_THAT(t.Encode("a", Add::kYes), ElementsAre(2, 1));
  EXPECT_THAT(t.Encode("a"), ElementsAre(2));
  EXPECT_THAT(t.special_suffix_ids(), ElementsAre(1));
  // Without a decoder, decode joins the tokens with spaces.
  EXPECT_EQ(t.Decode(std::vector<int32_t>{2, 1, 2}), "a </s> a");
  EXPECT_EQ(Streamed(t, std::vector<int32_t>{2, 1, 2}), "a </s> a");

  tj["post_processor"] = {{"type", "RobertaProcessing"}, {"sep", {"</s>", 7}}, {"cls", {"<s>", 0}}};
  StatusOr<Tokenizer> bad = Tokenizer::FromJson(tj.dump(), "", "", "");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("sep"));
}

TEST(TokenizerErrorsNamed, UnsupportedComponentsAreRefusedAtLoad) {
  Json tj = Base({"a"}, {});
  for (const auto& [field, node, name] : std::vector<std::tuple<std::string, Json, std::string>>{
           {"normalizer", {{"type", "Precompiled"}}, "Precompiled"},
           {"pre_tokenizer", {{"type", "BertPreTokenizer"}}, "BertPreTokenizer"},
           {"decoder", {{"type", "CTC"}}, "CTC"},
           {"post_processor", {{"type", "BlahProcessing"}}, "BlahProcessing"},
           {"pre_tokenizer", {{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", "Sideways"}}, "Sideways"},
           {"pre_tokenizer", {{"type", "Split"}, {"pattern", {{"Regex", "[^\\W]"}}}, {"behavior", "Isolated"}}, "\\W"},
           {"pre_tokenizer", {{"type", "Split"}, {"pattern", {{"Regex", "\\p{Mn}"}}}, {"behavior", "Isolated"}}, "Mn"},
           {"pre_tokenizer", {{"type", "Split"}, {"pattern", {{"Regex", "[\\P{L}]"}}}, {"behavior", "Isolated"}}, "negated"},
           // What BERT, T5 and other published files use, alone and inside sequences.
           {"normalizer", {{"type", "BertNormalizer"}, {"lowercase", true}}, "BertNormalizer"},
           {"normalizer", {{"type", "StripAccents"}}, "StripAccents"},
           {"normalizer", {{"type", "Sequence"}, {"normalizers", {{{"type", "NFKC"}}, {{"type", "Precompiled"}, {"precompiled_charsmap", "AAAA"}}}}}, "Precompiled"},
           {"pre_tokenizer", {{"type", "Whitespace"}}, "Whitespace"},
           {"pre_tokenizer", {{"type", "WhitespaceSplit"}}, "WhitespaceSplit"},
           {"pre_tokenizer", {{"type", "Punctuation"}, {"behavior", "Isolated"}}, "Punctuation"},
           {"pre_tokenizer", {{"type", "UnicodeScripts"}}, "UnicodeScripts"},
           {"pre_tokenizer", {{"type", "CharDelimiterSplit"}, {"delimiter", " "}}, "CharDelimiterSplit"},
           {"pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", {{{"type", "WhitespaceSplit"}}, {{"type", "Metaspace"}, {"replacement", "_"}}}}}, "WhitespaceSplit"},
           {"decoder", {{"type", "WordPiece"}, {"prefix", "##"}}, "WordPiece"},
           {"decoder", {{"type", "BPEDecoder"}, {"suffix", "</w>"}}, "BPEDecoder"},
           {"post_processor", {{"type", "Sequence"}, {"processors", {{{"type", "Whatever"}}}}}, "Whatever"}}) {
    Json bad = tj;
    bad[field] = node;
    StatusOr<Tokenizer> t = Tokenizer::FromJson(bad.dump(), "", "", "");
    ASSERT_FALSE(t.ok()) << name;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument) << name;
    EXPECT_THAT(t.status().message(), HasSubstr(name));
  }
  // Models other than BPE, with their own vocabulary layouts (Unigram's is a list of pairs).
  for (const auto& [model, name] : std::vector<std::pair<Json, std::string>>{
           {{{"type", "WordPiece"}, {"unk_token", "[UNK]"}, {"continuing_subword_prefix", "##"}, {"vocab", {{"[UNK]", 0}}}}, "WordPiece"},
           {{{"type", "Unigram"}, {"unk_id", 0}, {"vocab", {{"<unk>", 0.0}, {"\u2581a", -1.5}}}}, "Unigram"},
           {{{"type", "WordLevel"}, {"unk_token", "<unk>"}, {"vocab", {{"<unk>", 0}}}}, "WordLevel"},
           {{{"vocab", {{"a", 0}}}, {"merges", Json::array()}, {"continuing_subword_prefix", "##"}}, "continuing_subword_prefix"}}) {
    Json bad = tj;
    bad["model"] = model;
    StatusOr<Tokenizer> t = Tokenizer::FromJson(bad.dump(), "", "", "");
    ASSERT_FALSE(t.ok()) << name;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument) << name;
    EXPECT_THAT(t.status().message(), HasSubstr(name));
  }
  // An empty prefix or suffix is none (GPT-2's and tiktoken conversions' files write "").
  Json empty_affix = tj;
  empty_affix["model"]["continuing_subword_prefix"] = "";
  empty_affix["model"]["end_of_word_suffix"] = "";
  EXPECT_TRUE(Tokenizer::FromJson(empty_affix.dump(), "", "", "").ok());
}

}  // namespace
}  // namespace rote::inference
