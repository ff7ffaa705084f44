#include "inference/tokenizer/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <deque>
#include <cstdlib>
#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "inference/model/model_files.h"
#include "inference/tokenizer/chat_format.h"
#include "inference/tokenizer/utf8.h"

namespace rote::inference {

namespace {

using Json = nlohmann::json;

// GPT-2's bytes_to_unicode: printable bytes stand for themselves, the others are moved to
// U+0100 and up so every byte has a visible, non-space character.
struct ByteLevelAlphabet {
  static constexpr char32_t kLimit = 256 + 68;  // the moved bytes end at U+0143
  std::array<char32_t, 256> byte_to_char{};
  std::array<int16_t, kLimit> char_to_byte{};  // -1: not in the alphabet

  ByteLevelAlphabet() {
    char_to_byte.fill(-1);
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      byte_to_char[b] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + next++);
      char_to_byte[byte_to_char[b]] = static_cast<int16_t>(b);
    }
  }

  int ByteOf(char32_t cp) const { return cp < kLimit ? char_to_byte[cp] : -1; }
};

const ByteLevelAlphabet& Alphabet() {
  static const ByteLevelAlphabet alphabet;
  return alphabet;
}

// The ByteLevel decoder's rule for one token: if every character is in the alphabet, the
// bytes they stand for; otherwise the token's own UTF-8. `in_alphabet` tells which.
std::string ByteLevelDecodeToken(std::string_view token, bool* in_alphabet = nullptr) {
  const auto& alphabet = Alphabet();
  std::string bytes;
  bytes.reserve(token.size());
  size_t pos = 0;
  while (pos < token.size()) {
    const int b = alphabet.ByteOf(utf8::DecodeAt(token, pos));
    if (b < 0) {
      if (in_alphabet) *in_alphabet = false;
      return std::string(token);
    }
    bytes.push_back(static_cast<char>(b));
  }
  if (in_alphabet) *in_alphabet = true;
  return bytes;
}

struct Pcre2CodeDeleter {
  void operator()(pcre2_code* code) const { pcre2_code_free(code); }
};
using Pcre2Code = std::unique_ptr<pcre2_code, Pcre2CodeDeleter>;

StatusOr<Pcre2Code> CompileRegex(const std::string& pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof message);
    return InvalidArgument("tokenizer.json: pre-tokenizer regex does not compile with PCRE2 at offset " +
                           std::to_string(offset) + ": " + reinterpret_cast<char*>(message) +
                           " (pattern: " + pattern + ")");
  }
  // JIT is only a speed-up; the interpreter gives the same matches where it is unavailable.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return Pcre2Code(code);
}

std::string EscapeRegexLiteral(std::string_view s) {
  return "\\Q" + std::string(s) + "\\E";
}

// True when every code point is below U+0300: no such character changes under NFC, and none
// composes with another (combining marks start at U+0300, Hangul jamo at U+1100). In UTF-8 that
// is ASCII, lead bytes C2..CB and continuation bytes.
bool TriviallyNfc(std::string_view text) {
  for (char ch : text) {
    const auto b = static_cast<unsigned char>(ch);
    if (b >= 0xCC) return false;
  }
  return true;
}

std::string NormalizeNfc(std::string_view text) {
  if (TriviallyNfc(text)) return std::string(text);
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                   static_cast<utf8proc_ssize_t>(text.size()), &out,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) {
    // Only invalid UTF-8 fails, and Encode sanitizes first; keep the text rather than lose it.
    return std::string(text);
  }
  std::string result(reinterpret_cast<char*>(out), static_cast<size_t>(n));
  std::free(out);
  return result;
}

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

// GPT-2's pattern, which ByteLevel(use_regex=true) applies.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Hash maps keyed by std::string that string_views can query without a copy.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

uint64_t PairKey(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// tokenizer_config's bos_token / eos_token: a string, an AddedToken object, or absent / null.
StatusOr<std::optional<std::string>> TokenField(const Json& config, const char* key) {
  const JsonFields f(config, "tokenizer_config.json");
  const Json* v = f.Find(key);
  if (v == nullptr) return std::optional<std::string>();
  if (v->is_string()) return std::optional<std::string>(v->get<std::string>());
  if (v->is_object()) {
    if (auto c = v->find("content"); c != v->end() && c->is_string()) {
      return std::optional<std::string>(c->get<std::string>());
    }
  }
  return f.Error(key, "must be a string, an object with a string 'content', or null");
}

// tokenizer_config's chat_template: a string, or a list of {"name", "template"} of which the one
// named "default" applies (transformers' form for several templates); absent or null: none.
StatusOr<std::string> ChatTemplateField(const Json& config) {
  const JsonFields f(config, "tokenizer_config.json");
  const Json* v = f.Find("chat_template");
  if (v == nullptr) return std::string();
  if (v->is_string()) return v->get<std::string>();
  if (v->is_array()) {
    std::string chosen;
    for (const Json& entry : *v) {
      const JsonFields e(entry, "tokenizer_config.json", "chat_template[].");
      std::string name, text;
      if (!entry.is_object()) return f.Error("chat_template", "must hold objects with a name and a template");
      ROTE_RETURN_IF_ERROR(e.String("name", "", &name));
      ROTE_RETURN_IF_ERROR(e.String("template", "", &text));
      if (name == "default") chosen = std::move(text);
    }
    return chosen;
  }
  return f.Error("chat_template", "must be a string, a list of named templates, or null");
}

}  // namespace

struct Tokenizer::Impl {
  bool nfc = false;
  std::vector<SplitStep> split_steps;
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
  void PreTokenizeAndBpe(std::string_view text, std::vector<int32_t>& out) const;
  void Bpe(std::string_view word, std::vector<int32_t>& out) const;
};

namespace {

// A piece of input: either a matched added token or text still to be tokenized.
struct Piece {
  std::string_view text;
  int32_t token_id = -1;
};

size_t LastCharStart(std::string_view s) {
  size_t i = s.size() - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  return i;
}

bool EndsWithWordChar(std::string_view s) {
  if (s.empty()) return false;
  size_t pos = LastCharStart(s);
  return utf8::IsWordChar(utf8::DecodeAt(s, pos));
}

bool StartsWithWordChar(std::string_view s) {
  if (s.empty()) return false;
  size_t pos = 0;
  return utf8::IsWordChar(utf8::DecodeAt(s, pos));
}

// tokenizers' AddedVocabulary::find_matches: leftmost-longest matches of the added tokens,
// then the single_word, lstrip and rstrip rules. `skip_special` drops matches of special
// tokens (encode_special_tokens), which leaves their text to the model.
std::vector<Piece> SplitOnAddedTokens(std::string_view text, const AddedTokenSet& set,
                                      bool skip_special) {
  std::vector<Piece> pieces;
  if (set.tokens.empty() || text.empty()) {
    pieces.push_back({text, -1});
    return pieces;
  }
  size_t start_offset = 0;
  size_t search = 0;
  while (search < text.size()) {
    // Leftmost position where some token matches, longest token there.
    const AddedToken* best = nullptr;
    size_t best_at = text.size();
    for (size_t at = search; at < text.size() && best == nullptr; ++at) {
      for (uint32_t index : set.by_first_byte[static_cast<unsigned char>(text[at])]) {
        const AddedToken& t = set.tokens[index];
        if (t.content.size() > text.size() - at) continue;
        if (text.compare(at, t.content.size(), t.content) != 0) continue;
        if (best == nullptr || t.content.size() > best->content.size()) {
          best = &t;
          best_at = at;
        }
      }
    }
    if (best == nullptr) break;
    size_t start = best_at;
    size_t stop = best_at + best->content.size();
    search = stop;
    if (skip_special && best->special) continue;
    if (best->single_word) {
      const bool start_space = start == 0 || !EndsWithWordChar(text.substr(0, start));
      const bool stop_space = stop == text.size() || !StartsWithWordChar(text.substr(stop));
      if (!start_space || !stop_space) continue;
    }
    if (best->lstrip) {
      size_t s = start;
      while (s > 0) {
        size_t c = LastCharStart(text.substr(0, s));
        size_t probe = c;
        if (!utf8::IsWhitespace(utf8::DecodeAt(text, probe))) break;
        s = c;
      }
      // Spaces an earlier match already took stay with it.
      start = std::max(s, start_offset);
    }
    if (best->rstrip) {
      while (stop < text.size()) {
        size_t probe = stop;
        if (!utf8::IsWhitespace(utf8::DecodeAt(text, probe))) break;
        stop = probe;
      }
    }
    if (start_offset < start) pieces.push_back({text.substr(start_offset, start - start_offset), -1});
    pieces.push_back({text.substr(start, stop - start), best->id});
    start_offset = stop;
  }
  if (start_offset < text.size() || pieces.empty()) {
    pieces.push_back({text.substr(start_offset), -1});
  }
  return pieces;
}

// Splits `text` by `regex` with behavior Isolated: every match and every gap between matches is
// a piece. Empty matches produce nothing.
void SplitIsolated(const pcre2_code* regex, std::string_view text,
                   std::vector<std::string_view>& out) {
  if (text.empty()) return;
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(regex, nullptr);
  size_t last = 0;
  size_t offset = 0;
  std::vector<std::pair<size_t, size_t>> matches;
  while (offset <= text.size()) {
    // PCRE2 validates the whole subject on every call unless told not to; checking it once
    // keeps splitting linear in the text length.
    const uint32_t options = offset == 0 ? 0 : PCRE2_NO_UTF_CHECK;
    const int rc = pcre2_match(regex, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(),
                               offset, options, md, nullptr);
    if (rc < 0) break;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t s = ov[0];
    const size_t e = ov[1];
    if (e == s) {
      // Step over one whole character so matching resumes on a boundary.
      if (s >= text.size()) break;
      size_t next = s;
      utf8::DecodeAt(text, next);
      offset = next;
      continue;
    }
    matches.emplace_back(s, e);
    offset = e;
  }
  pcre2_match_data_free(md);
  for (const auto& [s, e] : matches) {
    if (last < s) out.push_back(text.substr(last, s - last));
    out.push_back(text.substr(s, e - s));
    last = e;
  }
  if (last < text.size()) out.push_back(text.substr(last));
}

}  // namespace

void Tokenizer::Impl::Bpe(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges) {
    auto it = bytes_to_id.find(word);
    if (it != bytes_to_id.end()) {
      out.push_back(it->second);
      return;
    }
  }
  // Symbols form a linked list over the word; a merge joins a symbol with its right neighbour.
  struct Symbol {
    int32_t id;
    int prev;
    int next;
    bool alive;
  };
  struct Candidate {
    int32_t rank;
    int pos;
    int32_t new_id;
  };
  // Heap order: the lowest rank first, the leftmost among equal ranks (tokenizers' order).
  auto later = [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  // Scratch reused across words; per thread, so concurrent Encode calls share nothing.
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<Candidate> heap;
  symbols.clear();
  heap.clear();
  for (unsigned char b : word) {
    const int32_t id = byte_id[b];
    if (id < 0) continue;  // no token for this byte and no unk: tokenizers drops it too
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({id, index - 1, index + 1, true});
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  auto consider = [&](int pos) {
    if (pos < 0) return;
    const int next = symbols[pos].next;
    if (next < 0) return;
    auto it = merges.find(PairKey(symbols[pos].id, symbols[next].id));
    if (it == merges.end()) return;
    heap.push_back({it->second.first, pos, it->second.second});
    std::push_heap(heap.begin(), heap.end(), later);
  };
  for (int i = 0; i + 1 < static_cast<int>(symbols.size()); ++i) consider(i);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Candidate top = heap.back();
    heap.pop_back();
    Symbol& left = symbols[top.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    // A stale entry: the pair at this position changed since it was queued.
    auto it = merges.find(PairKey(left.id, right.id));
    if (it == merges.end() || it->second.second != top.new_id) continue;
    left.id = top.new_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    consider(left.prev);
    consider(top.pos);
  }
  for (int i = 0; i >= 0; i = symbols[i].next) {
    out.push_back(symbols[i].id);
  }
}

void Tokenizer::Impl::PreTokenizeAndBpe(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::deque<std::string> prefixed;  // storage for pieces given a prefix space
  std::vector<std::string_view> pieces{text};
  for (const SplitStep& step : split_steps) {
    std::vector<std::string_view> next;
    for (std::string_view p : pieces) {
      if (step.add_prefix_space && !p.empty() && p.front() != ' ') {
        prefixed.push_back(" " + std::string(p));
        p = prefixed.back();
      }
      if (step.regex) {
        SplitIsolated(step.regex.get(), p, next);
      } else if (!p.empty()) {
        next.push_back(p);
      }
    }
    pieces = std::move(next);
  }
  for (std::string_view p : pieces) Bpe(p, out);
}

void Tokenizer::Impl::EncodeNormalizedPiece(std::string_view normalized, bool parse_special,
                                            std::vector<int32_t>& out) const {
  for (const Piece& piece : SplitOnAddedTokens(normalized, normalized_added, !parse_special)) {
    if (piece.token_id >= 0) {
      out.push_back(piece.token_id);
    } else {
      PreTokenizeAndBpe(piece.text, out);
    }
  }
}

void Tokenizer::Impl::EncodePiece(std::string_view text, bool parse_special,
                                  std::vector<int32_t>& out) const {
  if (nfc) {
    const std::string normalized = NormalizeNfc(text);
    EncodeNormalizedPiece(normalized, parse_special, out);
  } else {
    EncodeNormalizedPiece(text, parse_special, out);
  }
}

namespace {

constexpr const char* kTokenizerJson = "tokenizer.json";

// A component's "type" (normalizer, pre_tokenizer, decoder): the node must be an object holding
// a string "type".
StatusOr<std::string> ComponentType(const Json& node, const std::string& field) {
  if (!node.is_object()) return InvalidArgument(std::string(kTokenizerJson) + ": field '" + field + "' must be an object");
  std::string type;
  ROTE_RETURN_IF_ERROR(JsonFields(node, kTokenizerJson, field + ".").String("type", "", &type));
  return type;
}

// A Sequence's children: `key` must be an array.
StatusOr<const Json*> Children(const Json& node, const char* key, const std::string& field) {
  const Json* list = JsonFields(node, kTokenizerJson).Find(key);
  if (list == nullptr || !list->is_array()) {
    return InvalidArgument(std::string(kTokenizerJson) + ": field '" + field + "." + key + "' must be a list");
  }
  return list;
}

Status LoadNormalizer(const Json& n, const std::string& field, bool& nfc) {
  if (n.is_null()) return OkStatus();
  ROTE_ASSIGN_OR_RETURN(const std::string type, ComponentType(n, field));
  if (type == "NFC") {
    nfc = true;
    return OkStatus();
  }
  if (type == "Sequence") {
    ROTE_ASSIGN_OR_RETURN(const Json* children, Children(n, "normalizers", field));
    for (const Json& child : *children) ROTE_RETURN_IF_ERROR(LoadNormalizer(child, field + ".normalizers[]", nfc));
    return OkStatus();
  }
  return Unimplemented("tokenizer.json: normalizer type '" + type +
                       "' is not supported (supported: NFC, Sequence)");
}

Status LoadPreTokenizer(const Json& p, const std::string& field, std::vector<SplitStep>& steps,
                        bool& saw_byte_level) {
  if (p.is_null()) return OkStatus();
  ROTE_ASSIGN_OR_RETURN(const std::string type, ComponentType(p, field));
  if (saw_byte_level) {
    return Unimplemented("tokenizer.json: pre-tokenizer '" + type +
                         "' after ByteLevel is not supported");
  }
  const JsonFields f(p, kTokenizerJson, field + ".");
  if (type == "Sequence") {
    ROTE_ASSIGN_OR_RETURN(const Json* children, Children(p, "pretokenizers", field));
    for (const Json& child : *children) {
      ROTE_RETURN_IF_ERROR(LoadPreTokenizer(child, field + ".pretokenizers[]", steps, saw_byte_level));
    }
    return OkStatus();
  }
  if (type == "Split") {
    std::string behavior;
    ROTE_RETURN_IF_ERROR(f.String("behavior", "", &behavior));
    if (behavior != "Isolated") {
      return Unimplemented("tokenizer.json: Split behavior '" + behavior +
                           "' is not supported (supported: Isolated)");
    }
    static const Json kNone;
    const Json* pattern = f.Find("pattern");
    const JsonFields pf(pattern == nullptr ? kNone : *pattern, kTokenizerJson, field + ".pattern.");
    std::string regex;
    if (pf.Find("Regex") != nullptr) {
      ROTE_RETURN_IF_ERROR(pf.String("Regex", "", &regex));
    } else if (pf.Find("String") != nullptr) {
      std::string literal;
      ROTE_RETURN_IF_ERROR(pf.String("String", "", &literal));
      regex = EscapeRegexLiteral(literal);
    } else {
      return InvalidArgument("tokenizer.json: Split pre-tokenizer without a Regex or String pattern");
    }
    ROTE_ASSIGN_OR_RETURN(Pcre2Code code, CompileRegex(regex));
    bool invert = false;
    ROTE_RETURN_IF_ERROR(f.Bool("invert", false, &invert));
    if (invert) {
      return Unimplemented("tokenizer.json: Split with invert=true is not supported");
    }
    SplitStep step;
    step.regex = std::move(code);
    steps.push_back(std::move(step));
    return OkStatus();
  }
  if (type == "ByteLevel") {
    saw_byte_level = true;
    SplitStep step;
    ROTE_RETURN_IF_ERROR(f.Bool("add_prefix_space", false, &step.add_prefix_space));
    bool use_regex = true;
    ROTE_RETURN_IF_ERROR(f.Bool("use_regex", true, &use_regex));
    if (use_regex) {
      ROTE_ASSIGN_OR_RETURN(Pcre2Code code, CompileRegex(std::string(kGpt2Pattern)));
      step.regex = std::move(code);
    }
    if (step.add_prefix_space || step.regex) steps.push_back(std::move(step));
    return OkStatus();
  }
  return Unimplemented("tokenizer.json: pre-tokenizer type '" + type +
                       "' is not supported (supported: Sequence, Split, ByteLevel)");
}

Status CheckDecoder(const Json& d, const std::string& field, bool& saw_byte_level) {
  if (d.is_null()) return OkStatus();
  ROTE_ASSIGN_OR_RETURN(const std::string type, ComponentType(d, field));
  if (type == "ByteLevel") {
    saw_byte_level = true;
    return OkStatus();
  }
  if (type == "Sequence") {
    ROTE_ASSIGN_OR_RETURN(const Json* children, Children(d, "decoders", field));
    for (const Json& child : *children) ROTE_RETURN_IF_ERROR(CheckDecoder(child, field + ".decoders[]", saw_byte_level));
    return OkStatus();
  }
  return Unimplemented("tokenizer.json: decoder type '" + type +
                       "' is not supported (supported: ByteLevel, Sequence)");
}

StatusOr<ChatFamily> FamilyFor(const Json& config, const Tokenizer::Impl& impl) {
  std::string model_type;
  ROTE_RETURN_IF_ERROR(JsonFields(config, "config.json").String("model_type", "", &model_type));
  if (model_type == "qwen2") return ChatFamily::kQwen2;
  if (model_type == "llama") return ChatFamily::kLlama3;
  if (model_type == "qwen3") return ChatFamily::kQwen3;
  if (!model_type.empty()) {
    return Unimplemented("config.json: model_type '" + model_type +
                         "' is not supported (supported: qwen2, llama, qwen3)");
  }
  // No config.json: the added tokens tell the family apart.
  if (impl.token_to_id.count("<|start_header_id|>")) return ChatFamily::kLlama3;
  if (impl.token_to_id.count("<think>")) return ChatFamily::kQwen3;
  if (impl.token_to_id.count("<|im_start|>")) return ChatFamily::kQwen2;
  return FailedPrecondition(
      "tokenizer.json: cannot tell the model family: no config.json model_type and no family "
      "markers among the added tokens");
}

}  // namespace

StatusOr<Tokenizer> Tokenizer::Load(const std::string& model_dir) {
  const std::string dir = model_dir.empty() || model_dir.back() == '/' ? model_dir : model_dir + "/";
  ROTE_ASSIGN_OR_RETURN(std::string tokenizer_json, ReadModelFile(dir + "tokenizer.json", true));
  ROTE_ASSIGN_OR_RETURN(std::string tokenizer_config, ReadModelFile(dir + "tokenizer_config.json", false));
  ROTE_ASSIGN_OR_RETURN(std::string config, ReadModelFile(dir + "config.json", false));
  ROTE_ASSIGN_OR_RETURN(std::string generation_config, ReadModelFile(dir + "generation_config.json", false));
  StatusOr<Tokenizer> t = FromJson(tokenizer_json, tokenizer_config, config, generation_config);
  // FromJson's messages start with the file's name; put the directory in front of it.
  if (!t.ok()) return Status(t.status().code(), dir + t.status().message());
  return t;
}

namespace {

// One entry of tokenizer.json's added_tokens, checked: an object with an integer id in
// [0, entries), non-empty string content and boolean flags.
Status ReadAddedToken(const Json& a, size_t index, int64_t entries, AddedToken* t) {
  const std::string field = "added_tokens[" + std::to_string(index) + "]";
  if (!a.is_object()) return InvalidArgument("tokenizer.json: field '" + field + "' must be an object");
  const JsonFields f(a, kTokenizerJson, field + ".");
  if (f.Find("id") == nullptr) return f.Error("id", "is missing");
  int64_t id = -1;
  ROTE_RETURN_IF_ERROR(f.Int("id", -1, 0, entries - 1, &id));
  t->id = static_cast<int32_t>(id);
  ROTE_RETURN_IF_ERROR(f.String("content", "", &t->content));
  if (t->content.empty()) return f.Error("content", "must be a non-empty string");
  ROTE_RETURN_IF_ERROR(f.Bool("special", false, &t->special));
  ROTE_RETURN_IF_ERROR(f.Bool("lstrip", false, &t->lstrip));
  ROTE_RETURN_IF_ERROR(f.Bool("rstrip", false, &t->rstrip));
  ROTE_RETURN_IF_ERROR(f.Bool("single_word", false, &t->single_word));
  ROTE_RETURN_IF_ERROR(f.Bool("normalized", !t->special, &t->normalized));
  return OkStatus();
}

}  // namespace

StatusOr<Tokenizer> Tokenizer::FromJson(std::string_view tokenizer_json,
                                        std::string_view tokenizer_config_json,
                                        std::string_view config_json,
                                        std::string_view generation_config_json) {
  if (tokenizer_json.empty()) return InvalidArgument("tokenizer.json: empty");
  ROTE_ASSIGN_OR_RETURN(Json tj, ParseJsonObject(tokenizer_json, kTokenizerJson));
  Json tc = Json::object(), cj = Json::object(), gc = Json::object();
  if (!tokenizer_config_json.empty()) {
    ROTE_ASSIGN_OR_RETURN(tc, ParseJsonObject(tokenizer_config_json, "tokenizer_config.json"));
  }
  if (!config_json.empty()) {
    ROTE_ASSIGN_OR_RETURN(cj, ParseJsonObject(config_json, "config.json"));
  }
  if (!generation_config_json.empty()) {
    ROTE_ASSIGN_OR_RETURN(gc, ParseJsonObject(generation_config_json, "generation_config.json"));
  }

  auto impl = std::make_shared<Impl>();
  const JsonFields top(tj, kTokenizerJson);
  auto member = [&](const char* key) { return top.Find(key) == nullptr ? Json() : *top.Find(key); };
  try {
    ROTE_RETURN_IF_ERROR(LoadNormalizer(member("normalizer"), "normalizer", impl->nfc));
    bool pre_byte_level = false;
    ROTE_RETURN_IF_ERROR(LoadPreTokenizer(member("pre_tokenizer"), "pre_tokenizer", impl->split_steps, pre_byte_level));
    bool dec_byte_level = false;
    ROTE_RETURN_IF_ERROR(CheckDecoder(member("decoder"), "decoder", dec_byte_level));
    if (!pre_byte_level || !dec_byte_level) {
      return Unimplemented(
          "tokenizer.json: only byte-level BPE is supported (needs a ByteLevel pre-tokenizer and "
          "decoder)");
    }

    const Json* model_node = top.Find("model");
    if (model_node == nullptr || !model_node->is_object()) {
      return InvalidArgument("tokenizer.json: field 'model' must be an object");
    }
    const Json& model = *model_node;
    const JsonFields mf(model, kTokenizerJson, "model.");
    std::string model_type;
    ROTE_RETURN_IF_ERROR(mf.String("type", "BPE", &model_type));
    if (model_type != "BPE") {
      return Unimplemented("tokenizer.json: model type '" + model_type +
                           "' is not supported (supported: BPE)");
    }
    bool byte_fallback = false;
    ROTE_RETURN_IF_ERROR(mf.Bool("byte_fallback", false, &byte_fallback));
    if (byte_fallback) {
      return Unimplemented("tokenizer.json: BPE byte_fallback is not supported");
    }
    double dropout = 0.0;
    ROTE_RETURN_IF_ERROR(mf.Number("dropout", 0.0, 0.0, /*open_lo=*/false, 1.0, &dropout));
    if (dropout != 0.0) {
      return Unimplemented("tokenizer.json: BPE dropout is not supported (it is random)");
    }
    for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      std::string value;
      ROTE_RETURN_IF_ERROR(mf.String(affix, "", &value));
      if (!value.empty()) {
        return Unimplemented(std::string("tokenizer.json: BPE ") + affix + " is not supported");
      }
    }
    ROTE_RETURN_IF_ERROR(mf.Bool("ignore_merges", false, &impl->ignore_merges));

    // nlohmann keeps object keys sorted, so this walk (and every table built from it) has one
    // order whatever the file's.
    const Json* vocab_node = mf.Find("vocab");
    if (vocab_node == nullptr || !vocab_node->is_object()) {
      return InvalidArgument("tokenizer.json: field 'model.vocab' must be an object");
    }
    const Json& vocab = *vocab_node;
    const Json* added_node = top.Find("added_tokens");
    if (added_node != nullptr && !added_node->is_array()) {
      return InvalidArgument("tokenizer.json: field 'added_tokens' must be a list");
    }
    const Json no_added = Json::array();
    const Json& added_list = added_node == nullptr ? no_added : *added_node;

    // Ids index dense tables, so every id must lie below the number of entries the file holds:
    // the tables then take memory in proportion to the file, whatever ids it claims.
    const int64_t entries = static_cast<int64_t>(vocab.size() + added_list.size());
    std::vector<const std::string*> vocab_token(static_cast<size_t>(entries), nullptr);
    int32_t max_id = -1;
    impl->token_to_id.reserve(vocab.size() + added_list.size());
    impl->bytes_to_id.reserve(vocab.size());
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
      const Json& v = it.value();
      const bool in_range = v.is_number_unsigned() && v.get<uint64_t>() < static_cast<uint64_t>(entries);
      if (!in_range) {
        return InvalidArgument("tokenizer.json: field 'model.vocab[\"" + it.key() + "\"]' = " + v.dump() +
                               " is out of range [0, " + std::to_string(entries - 1) +
                               "] (ids index the vocabulary and the added tokens)");
      }
      const auto id = static_cast<int32_t>(v.get<uint64_t>());
      if (vocab_token[id] != nullptr) {
        return InvalidArgument("tokenizer.json: field 'model.vocab' gives id " + std::to_string(id) + " to both '" +
                               *vocab_token[id] + "' and '" + it.key() + "'");
      }
      vocab_token[id] = &it.key();
      impl->token_to_id[it.key()] = id;
      max_id = std::max(max_id, id);
    }
    std::vector<AddedToken> added;
    std::vector<uint8_t> added_id_seen(static_cast<size_t>(entries), 0);
    StringMap<int32_t> added_by_content;
    for (size_t i = 0; i < added_list.size(); ++i) {
      AddedToken t;
      ROTE_RETURN_IF_ERROR(ReadAddedToken(added_list[i], i, entries, &t));
      const std::string field = "tokenizer.json: field 'added_tokens[" + std::to_string(i) + "]";
      const std::string id = std::to_string(t.id);
      if (added_id_seen[t.id]) return InvalidArgument(field + ".id' = " + id + " is given to another added token too");
      added_id_seen[t.id] = 1;
      // An added token may repeat a vocabulary entry (GPT-2 style), not take another token's id.
      if (vocab_token[t.id] != nullptr && *vocab_token[t.id] != t.content) {
        return InvalidArgument(field + ".id' = " + id + " belongs to vocabulary token '" + *vocab_token[t.id] +
                               "', not '" + t.content + "'");
      }
      if (auto in_vocab = impl->token_to_id.find(t.content);
          in_vocab != impl->token_to_id.end() && in_vocab->second != t.id) {
        return InvalidArgument(field + ".content' = '" + t.content + "' is vocabulary token " +
                               std::to_string(in_vocab->second) + ", not " + id);
      }
      if (!added_by_content.emplace(t.content, t.id).second) {
        return InvalidArgument(field + ".content' = '" + t.content + "' appears twice");
      }
      max_id = std::max(max_id, t.id);
      added.push_back(std::move(t));
    }
    const size_t n = static_cast<size_t>(max_id + 1);
    impl->id_bytes.assign(n, std::string());
    impl->id_known.assign(n, 0);
    impl->id_special.assign(n, 0);
    impl->byte_id.fill(-1);
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
      const auto id = static_cast<int32_t>(it.value().get<uint64_t>());
      bool in_alphabet = false;
      std::string bytes = ByteLevelDecodeToken(it.key(), &in_alphabet);
      impl->id_known[id] = 1;
      // Only tokens written wholly in the alphabet can come out of byte-level BPE.
      if (in_alphabet) {
        if (bytes.size() == 1) impl->byte_id[static_cast<unsigned char>(bytes[0])] = id;
        impl->bytes_to_id.emplace(bytes, id);
      }
      impl->id_bytes[id] = std::move(bytes);
    }

    // Merges: "a b" strings (older files) or ["a", "b"] pairs (newer ones).
    const Json* merges = mf.Find("merges");
    if (merges == nullptr || !merges->is_array()) {
      return InvalidArgument("tokenizer.json: field 'model.merges' must be a list");
    }
    int32_t rank = 0;
    std::string joined;
    impl->merges.reserve(merges->size());
    for (const Json& m : *merges) {
      std::string_view a, b;
      if (m.is_string()) {
        const std::string& text = m.get_ref<const std::string&>();
        const size_t space = text.find(' ');
        if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos) {
          return InvalidArgument("tokenizer.json: merge '" + text + "' is not two tokens separated by one space");
        }
        a = std::string_view(text).substr(0, space);
        b = std::string_view(text).substr(space + 1);
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        a = m[0].get_ref<const std::string&>();
        b = m[1].get_ref<const std::string&>();
      } else {
        return InvalidArgument("tokenizer.json: merge #" + std::to_string(rank) +
                               " is neither \"a b\" nor [\"a\", \"b\"]");
      }
      joined.assign(a);
      joined.append(b);
      auto ia = impl->token_to_id.find(a);
      auto ib = impl->token_to_id.find(b);
      auto iab = impl->token_to_id.find(joined);
      if (ia == impl->token_to_id.end() || ib == impl->token_to_id.end() ||
          iab == impl->token_to_id.end()) {
        return InvalidArgument("tokenizer.json: merge '" + std::string(a) + " " + std::string(b) +
                               "' uses a token that is not in the vocabulary");
      }
      // The first (best-ranked) occurrence of a pair wins, as in tokenizers.
      impl->merges.emplace(PairKey(ia->second, ib->second), std::make_pair(rank, iab->second));
      ++rank;
    }

    for (AddedToken& t : added) {
      impl->id_bytes[t.id] = ByteLevelDecodeToken(t.content);
      impl->id_known[t.id] = 1;
      impl->id_special[t.id] = t.special ? 1 : 0;
      impl->token_to_id[t.content] = t.id;
      if (t.normalized) {
        // Matched after normalization, so match the normalized form.
        if (impl->nfc) t.content = NormalizeNfc(t.content);
        impl->normalized_added.Add(t);
      } else {
        impl->raw_added.Add(t);
      }
    }

    // Special ids and stop tokens.
    auto id_of = [&](const std::optional<std::string>& token) -> std::optional<int32_t> {
      if (!token) return std::nullopt;
      auto it = impl->token_to_id.find(*token);
      if (it == impl->token_to_id.end()) return std::nullopt;
      return it->second;
    };
    ROTE_ASSIGN_OR_RETURN(const std::optional<std::string> bos_token, TokenField(tc, "bos_token"));
    ROTE_ASSIGN_OR_RETURN(const std::optional<std::string> eos_token, TokenField(tc, "eos_token"));
    impl->bos = id_of(bos_token);
    impl->eos = id_of(eos_token);

    ROTE_ASSIGN_OR_RETURN(ChatFamily family, FamilyFor(cj, *impl));
    ROTE_ASSIGN_OR_RETURN(const std::string chat_template, ChatTemplateField(tc));
    impl->chat = ChatFormatFor(family, chat_template);
    if (family == ChatFamily::kLlama3) {
      if (!impl->bos) impl->bos = id_of(std::string("<|begin_of_text|>"));
      if (bos_token) impl->chat.bos_text = *bos_token;
    }

    // Stop ids need not name a tokenizer entry (a model's vocabulary may be larger), but must
    // be token ids.
    constexpr int64_t kIdLimit = std::numeric_limits<int32_t>::max();
    std::vector<int32_t> stops;
    const JsonFields gen_fields(gc, "generation_config.json");
    const JsonFields config_fields(cj, "config.json");
    if (gen_fields.Find("eos_token_id") != nullptr) {
      ROTE_RETURN_IF_ERROR(gen_fields.TokenIds("eos_token_id", kIdLimit, &stops));
    } else if (config_fields.Find("eos_token_id") != nullptr) {
      ROTE_RETURN_IF_ERROR(config_fields.TokenIds("eos_token_id", kIdLimit, &stops));
    } else if (impl->eos) {
      stops.push_back(*impl->eos);
    }
    // The chat format ends every turn with this token, so generation must stop there too.
    const char* turn_end = family == ChatFamily::kLlama3 ? "<|eot_id|>" : "<|im_end|>";
    if (auto t = id_of(std::string(turn_end))) stops.push_back(*t);
    std::sort(stops.begin(), stops.end());
    stops.erase(std::unique(stops.begin(), stops.end()), stops.end());
    impl->stop_ids = std::move(stops);
  } catch (const Json::exception& e) {
    // Every access above is typed; this is a second line against an exception escaping as an abort.
    return InvalidArgument(std::string("tokenizer.json: unexpected structure: ") + e.what());
  }
  return Tokenizer(std::move(impl));
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool parse_special) const {
  std::vector<int32_t> out;
  const std::string valid = utf8::Sanitize(text);
  for (const Piece& piece : SplitOnAddedTokens(valid, impl_->raw_added, !parse_special)) {
    if (piece.token_id >= 0) {
      out.push_back(piece.token_id);
    } else {
      impl_->EncodePiece(piece.text, parse_special, out);
    }
  }
  return out;
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  for (int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= impl_->id_known.size() || !impl_->id_known[id]) continue;
    if (skip_special && impl_->id_special[id]) continue;
    bytes += impl_->id_bytes[id];
  }
  return utf8::Sanitize(bytes);
}

std::string Tokenizer::TokenBytes(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->id_bytes.size()) return {};
  return impl_->id_bytes[id];
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->id_bytes.size()); }

std::optional<int32_t> Tokenizer::TokenToId(std::string_view token) const {
  auto it = impl_->token_to_id.find(token);
  if (it == impl_->token_to_id.end()) return std::nullopt;
  return it->second;
}

bool Tokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->id_special.size() && impl_->id_special[id];
}

const std::vector<int32_t>& Tokenizer::stop_token_ids() const { return impl_->stop_ids; }
std::optional<int32_t> Tokenizer::bos_id() const { return impl_->bos; }
std::optional<int32_t> Tokenizer::eos_id() const { return impl_->eos; }
ChatFamily Tokenizer::chat_family() const { return impl_->chat.family; }

std::string Tokenizer::ApplyChatTemplate(const std::vector<ChatMessage>& messages,
                                         bool add_generation_prompt) const {
  return FormatChat(impl_->chat, messages, add_generation_prompt);
}

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(tokenizer), skip_special_(skip_special) {}

std::string StreamDecoder::Push(int32_t id) {
  if (skip_special_ && tokenizer_.IsSpecial(id)) return {};
  pending_ += tokenizer_.TokenBytes(id);
  const size_t ready = utf8::StreamablePrefixLength(pending_);
  std::string out = utf8::Sanitize(std::string_view(pending_).substr(0, ready));
  pending_.erase(0, ready);
  return out;
}

std::string StreamDecoder::Finish() {
  std::string out = utf8::Sanitize(pending_);
  pending_.clear();
  return out;
}

}  // namespace rote::inference
