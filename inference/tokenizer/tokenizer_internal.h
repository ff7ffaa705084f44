// The tokenizer's pieces, shared by the files that implement them (not part of the module's
// interface). Encoding runs, in order: added tokens on the raw text (added_tokens.cc), the
// normalizer (normalizer.cc), added tokens on the normalized text, the pre-tokenizer's splits
// (pre_tokenizer.cc), then byte-level BPE on each piece (bpe.cc). Decoding maps each id to the
// bytes the ByteLevel decoder gives (byte_level.cc). tokenizer_json.cc reads tokenizer.json and
// the config files into a Tokenizer::Impl; each component's file checks and loads its own part.
#pragma once

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
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

// One step of the pre-tokenizer: a regex split with behavior Isolated (matches and the gaps
// between them become pieces), optionally preceded by ByteLevel's add_prefix_space.
struct SplitStep {
  Pcre2Code regex;
  bool add_prefix_space = false;  // ByteLevel(add_prefix_space) before splitting
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
// Checks tokenizer.json's decoder (ByteLevel, or a Sequence of them); sets saw_byte_level.
Status CheckDecoder(const Json& d, const std::string& field, bool& saw_byte_level);

// --- normalizer.cc
std::string NormalizeNfc(std::string_view text);
// Reads tokenizer.json's normalizer (NFC, a Sequence of them, or null); sets nfc.
Status LoadNormalizer(const Json& n, const std::string& field, bool& nfc);

// --- pre_tokenizer.cc
// Splits `text` by `regex` with behavior Isolated: every match and every gap between matches is
// a piece. Empty matches produce nothing.
void SplitIsolated(const pcre2_code* regex, std::string_view text, std::vector<std::string_view>& out);
// Reads tokenizer.json's pre_tokenizer (Sequence, Split, ByteLevel) into split steps; sets
// saw_byte_level once a ByteLevel step is read.
Status LoadPreTokenizer(const Json& p, const std::string& field, std::vector<SplitStep>& steps,
                        bool& saw_byte_level);

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
// A Sequence's children: `key` must be an array.
StatusOr<const Json*> Children(const Json& node, const char* key, const std::string& field);

}  // namespace tokenizer_internal

struct Tokenizer::Impl {
  using AddedTokenSet = tokenizer_internal::AddedTokenSet;
  template <typename V>
  using StringMap = tokenizer_internal::StringMap<V>;

  bool nfc = false;
  std::vector<tokenizer_internal::SplitStep> split_steps;
  bool ignore_merges = false;

  // The model vocabulary: token text (in the byte-level alphabet) and the bytes it stands for.
  StringMap<int32_t> token_to_id;  // vocab and added tokens
  StringMap<int32_t> bytes_to_id;  // vocab entries by their bytes
  std::array<int32_t, 256> byte_id{};                     // -1: byte not in vocab
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges;  // pair -> (rank, new id)

  std::vector<std::string> id_bytes;  // decoded bytes per id (ByteLevel decoder rule)
  std::vector<uint8_t> id_known;      // 1 if the id names a token
  std::vector<uint8_t> id_special;

  // Added tokens matched on the raw text (normalized=false) and after normalization.
  AddedTokenSet raw_added;
  AddedTokenSet normalized_added;

  std::vector<int32_t> stop_ids;
  std::optional<int32_t> bos;
  std::optional<int32_t> eos;
  ChatFormat chat;

  void EncodePiece(std::string_view text, bool parse_special, std::vector<int32_t>& out) const;
  void EncodeNormalizedPiece(std::string_view normalized, bool parse_special,
                             std::vector<int32_t>& out) const;
  void PreTokenizeAndBpe(std::string_view text, std::vector<int32_t>& out) const;  // pre_tokenizer.cc
  void Bpe(std::string_view word, std::vector<int32_t>& out) const;                // bpe.cc
  // tokenizer.json's model.merges ("a b" strings or ["a", "b"] pairs; null: absent) into
  // `merges` (bpe.cc).
  Status LoadMerges(const tokenizer_internal::Json* merges_list);
};

}  // namespace rote::inference
