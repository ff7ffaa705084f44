// Added tokens: special and other tokens tokenizer.json lists outside the BPE vocabulary, found
// in the text before the pre-tokenizer runs, as tokenizers' AddedVocabulary does.
#include <algorithm>

#include "inference/tokenizer/tokenizer_internal.h"
#include "inference/tokenizer/utf8.h"

namespace rote::inference {
namespace tokenizer_internal {

namespace {

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

}  // namespace

std::vector<Piece> SplitOnAddedTokens(std::string_view text, const AddedTokenSet& set, bool skip_special) {
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

}  // namespace tokenizer_internal
}  // namespace rote::inference
