// The tokenizer's pieces, shared by the files that implement them (not part of the module's
// interface). Encoding runs, in order: added tokens on the raw text (added_tokens.cc), the
// normalizer (normalizer.cc), added tokens on the normalized text, the pre-tokenizer's splits
// (pre_tokenizer.cc), then byte-level BPE on each piece (bpe.cc). Decoding maps each id to the
// bytes the ByteLevel decoder gives (byte_level.cc). tokenizer_json.cc reads tokenizer.json and
// the config files into a Tokenizer::Impl; each component's file checks and loads its own part.
#pragma once

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "inference/model/model_files.h"
#include "inference/status.h"
#include "inference/tokenizer/chat_format.h"
#include "inference/tokenizer/tokenizer.h"

namespace rote::inference {
namespace tokenizer_internal {

using Json = nlohmann::json;

inline constexpr const char* kTokenizerJson = "tokenizer.json";

struct Pcre2CodeDeleter {
  void operator()(pcre2_code* code) const { pcre2_code_free(code); }
};
using Pcre2Code = std::unique_ptr<pcre2_code, Pcre2CodeDeleter>;

struct AddedToken {
  int32_t id = 0;
  std::string content;  // as matched: normalized tokens hold their normalized content
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;
};

// Added tokens of one matching pass, indexed by first byte so that scanning text costs one
// table look-up per position.
struct AddedTokenSet {
  std::vector<AddedToken> tokens;
  std::array<std::vector<uint32_t>, 256> by_first_byte;

  void Add(AddedToken t) {
    if (t.content.empty()) return;
    by_first_byte[static_cast<unsigned char>(t.content[0])].push_back(
        static_cast<uint32_t>(tokens.size()));
    tokens.push_back(std::move(t));
  }
};

// tokenizers' Pattern::find_matches: the text cut into matches and the gaps between them, in
// order, covering it whole. Empty matches are kept (they matter to some behaviors).
struct Match {
  size_t start = 0;
  size_t end = 0;
  bool is_match = false;
};

// Split's delimiter behaviors (tokenizers' SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// One normalizer of tokenizer.json, Sequences flattened.
struct NormalizerStep {
  enum class Kind { kNfc, kNfd, kNfkc, kNfkd, kLowercase, kStrip, kReplace, kPrepend };
  Kind kind = Kind::kNfc;
  bool strip_left = false;   // Strip
  bool strip_right = false;  // Strip
  Pcre2Code pattern;         // Replace
  std::string literal;       // Replace with a String pattern: that string
  std::string content;       // Replace: the replacement; Prepend: the prefix
};

// One pre-tokenizer of tokenizer.json, Sequences flattened.
struct PreTokenizerStep {
  enum class Kind { kSplit, kByteLevel, kDigits, kMetaspace };
  enum class Prepend { kAlways, kFirst, kNever };
  Kind kind = Kind::kSplit;
  Pcre2Code regex;  // Split; ByteLevel with use_regex (GPT-2's pattern)
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;             // Split
  bool add_prefix_space = false;   // ByteLevel
  bool individual_digits = false;  // Digits
  std::string replacement;         // Metaspace (one character, UTF-8)
  Prepend prepend = Prepend::kAlways;
  bool split = true;               // Metaspace
};

// One decoder of tokenizer.json, Sequences flattened.
struct DecoderStep {
  enum class Kind { kByteLevel, kMetaspace, kReplace, kByteFallback, kFuse, kStrip };
  Kind kind = Kind::kByteLevel;
  Pcre2Code pattern;        // Replace
  std::string literal;      // Replace with a String pattern: that string
  std::string content;      // Replace: the replacement; Metaspace: the replacement character
  bool prepend_never = false;  // Metaspace
  char32_t strip_char = 0;  // Strip
  size_t strip_start = 0;
  size_t strip_stop = 0;
};

// Hash maps keyed by std::string that string_views can query without a copy.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

inline uint64_t PairKey(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// A piece of input: either a matched added token or text still to be tokenized.
struct Piece {
  std::string_view text;
  int32_t token_id = -1;
};

// --- byte_level.cc
// The ByteLevel decoder's rule for one token: if every character is in the alphabet, the
// bytes they stand for; otherwise the token's own UTF-8. `in_alphabet` tells which.
std::string ByteLevelDecodeToken(std::string_view token, bool* in_alphabet = nullptr);

// --- decoder.cc
// Reads tokenizer.json's decoder (ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, a
// Sequence of them, or null) into steps.
Status LoadDecoder(const Json& d, const std::string& field, std::vector<DecoderStep>& steps);
// tokenizers' Decoder::decode: the steps' decode_chain over the token strings, joined.
// `continuation`: the tokens follow earlier ones whose text began, so Metaspace's first-token
// rule and Strip's start do not apply.
std::string RunDecoder(const std::vector<DecoderStep>& steps, std::vector<std::string> tokens,
                       bool continuation = false);
// The bytes one token stands for alone under the steps (a byte-fallback token: its byte).
std::string DecodeTokenAlone(const std::vector<DecoderStep>& steps, const std::string& token);
// "<0xAB>" -> 0xAB as tokenizers' ByteFallback decoder reads it; -1 otherwise.
int ByteFallbackValue(std::string_view token);

// --- regex.cc
// Compiles a tokenizer.json regex, written for Oniguruma (which tokenizers runs), for PCRE2 with
// the classes meaning what they mean in Oniguruma (docs/tokenizer.md, "Regular expressions").
StatusOr<Pcre2Code> CompileOnigRegex(const std::string& pattern, const std::string& field);
// A {"Regex": ...} or {"String": ...} pattern node; for a String, `literal` (when given) receives
// it, so callers can replace it without the regex engine.
StatusOr<Pcre2Code> CompilePatternNode(const Json* pattern, const std::string& field, std::string* literal = nullptr);
// find_matches of a regex, with Oniguruma's find_iter rules for empty matches.
void FindRegexMatches(const pcre2_code* regex, std::string_view text, std::vector<Match>& out);
// find_matches of a character predicate: every matching character is one match.
void FindCharMatches(std::string_view text, const std::function<bool(char32_t)>& pred, std::vector<Match>& out);
// NormalizedString::split: the pieces `behavior` keeps, as [start, end) offsets, empty ones
// dropped.
void ApplySplitBehavior(const std::vector<Match>& matches, SplitBehavior behavior,
                        std::vector<std::pair<size_t, size_t>>& out);
// Every match of `pattern` replaced by `content` (NormalizedString::replace).
std::string ReplaceAll(const pcre2_code* pattern, std::string_view text, std::string_view content);
// The same for a literal pattern: non-overlapping occurrences, left to right.
std::string ReplaceLiteral(std::string_view text, std::string_view from, std::string_view to);

// --- normalizer.cc
enum class UnicodeForm { kNfc, kNfd, kNfkc, kNfkd };
// The normalization form with tokenizers' Unicode 9.0 tables: code points assigned after 9.0
// are left alone and stop composition and reordering across them.
std::string NormalizeUnicode(std::string_view text, UnicodeForm form);
std::string NormalizeNfc(std::string_view text);
// Every step in order.
std::string Normalize(const std::vector<NormalizerStep>& steps, std::string_view text);
// Reads tokenizer.json's normalizer (NFC, NFD, NFKC, NFKD, Lowercase, Strip, Replace, Prepend,
// a Sequence of them, or null).
Status LoadNormalizer(const Json& n, const std::string& field, std::vector<NormalizerStep>& steps);
// Whether Unicode 9.0 assigned the code point.
bool InUnicode9(char32_t cp);

// --- pre_tokenizer.cc
// Reads tokenizer.json's pre_tokenizer (Sequence, Split, ByteLevel, Digits, Metaspace) into steps.
Status LoadPreTokenizer(const Json& p, const std::string& field, std::vector<PreTokenizerStep>& steps);

// --- post_processor.cc
// Reads tokenizer.json's post_processor (TemplateProcessing, ByteLevel, RobertaProcessing,
// BertProcessing, a Sequence of them, or null): the ids add_special_tokens puts around a single
// sequence. `known_id` tells which ids name tokens.
Status LoadPostProcessor(const Json& p, const std::string& field, const std::function<bool(uint64_t)>& known_id,
                         std::vector<int32_t>& prefix, std::vector<int32_t>& suffix);

// --- added_tokens.cc
// tokenizers' AddedVocabulary::find_matches: leftmost-longest matches of the added tokens,
// then the single_word, lstrip and rstrip rules. `skip_special` drops matches of special
// tokens (encode_special_tokens), which leaves their text to the model.
std::vector<Piece> SplitOnAddedTokens(std::string_view text, const AddedTokenSet& set, bool skip_special);
// One entry of tokenizer.json's added_tokens, checked: an object with an integer id in
// [0, entries), non-empty string content and boolean flags.
Status ReadAddedToken(const Json& a, size_t index, int64_t entries, AddedToken* t);

// --- tokenizer_json.cc
// A component's "type" (normalizer, pre_tokenizer, decoder): the node must be an object holding
// a string "type".
StatusOr<std::string> ComponentType(const Json& node, const std::string& field);
// A string field that must hold exactly one character (Metaspace's replacement, Strip's
// content); absent: `fallback`.
Status OneCharField(const JsonFields& f, const char* key, const std::string& fallback, std::string* out);
// A Sequence's children: `key` must be an array.
StatusOr<const Json*> Children(const Json& node, const char* key, const std::string& field);

}  // namespace tokenizer_internal

struct Tokenizer::Impl {
  using AddedTokenSet = tokenizer_internal::AddedTokenSet;
  template <typename V>
  using StringMap = tokenizer_internal::StringMap<V>;

  std::vector<tokenizer_internal::NormalizerStep> normalizer;
  std::vector<tokenizer_internal::PreTokenizerStep> pre_tokenizer;
  std::vector<tokenizer_internal::DecoderStep> decoder;
  bool has_decoder = false;        // without one, decode joins the tokens with spaces
  bool byte_level_decoder = false;  // the decoder is ByteLevel alone: id_bytes decodes
  bool byte_level = false;          // a ByteLevel pre-tokenizer: BPE runs over bytes
  // What StreamDecoder needs to know of the decoder (tokenizer.cc).
  bool decoder_has_byte_fallback = false;
  bool decoder_has_byte_level = false;
  bool stream_restartable = false;  // no Strip at the end, no ByteLevel among other steps
  bool stream_holds_all = false;    // a Replace over joined text: nothing is final before Finish
  // The BPE model's options.
  bool ignore_merges = false;
  bool byte_fallback = false;
  bool fuse_unk = false;
  int32_t unk_id = -1;
  std::array<int32_t, 256> byte_fallback_id{};  // "<0xAB>" tokens; -1: absent
  // The post-processor's ids around a single sequence (add_special_tokens).
  std::vector<int32_t> prefix_ids;
  std::vector<int32_t> suffix_ids;

  // The model vocabulary: token text (in the byte-level alphabet) and the bytes it stands for.
  StringMap<int32_t> token_to_id;  // vocab and added tokens
  StringMap<int32_t> bytes_to_id;  // vocab entries by their bytes
  std::array<int32_t, 256> byte_id{};                     // -1: byte not in vocab
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges;  // pair -> (rank, new id)

  std::vector<std::string> id_bytes;  // the bytes each id stands for alone (DecodeTokenAlone)
  std::vector<std::string> id_token;  // token text per id (vocab entry or added token)
  std::vector<uint8_t> id_known;      // 1 if the id names a token
  std::vector<uint8_t> id_in_vocab;   // 1 if the id is a model vocabulary entry
  std::vector<uint8_t> id_special;

  // Added tokens matched on the raw text (normalized=false) and after normalization.
  AddedTokenSet raw_added;
  AddedTokenSet normalized_added;

  std::vector<int32_t> stop_ids;
  std::optional<int32_t> bos;
  std::optional<int32_t> eos;
  ChatFormat chat;

  // `at_start`: the text begins at the start of the input (Metaspace's prepend_scheme "first").
  void EncodePiece(std::string_view text, bool at_start, bool parse_special, std::vector<int32_t>& out) const;
  void PreTokenizeAndBpe(std::string_view text, bool at_start, std::vector<int32_t>& out) const;  // pre_tokenizer.cc
  void Bpe(std::string_view word, std::vector<int32_t>& out) const;                // bpe.cc
  // The vocabulary id of a token's text, or -1 (added tokens not in the vocabulary excluded).
  int32_t VocabId(std::string_view token) const;
  // tokenizers' decode over known ids (decoder.cc). `continuation`: the ids follow earlier ones
  // whose text began (no first-token rules; without a decoder, a separating space first).
  std::string DecodeIds(std::span<const int32_t> ids, bool skip_special, bool continuation = false) const;
  // tokenizer.json's model.merges ("a b" strings or ["a", "b"] pairs; null: absent) into
  // `merges` (bpe.cc).
  Status LoadMerges(const tokenizer_internal::Json* merges_list);
};

}  // namespace rote::inference
