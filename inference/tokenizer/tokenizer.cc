// Encoding and decoding through the loaded tables, and the streaming decoder. The pieces each
// step uses live beside this file (tokenizer_internal.h lists them); loading is tokenizer_json.cc.
#include "inference/tokenizer/tokenizer.h"

#include "inference/tokenizer/tokenizer_internal.h"
#include "inference/tokenizer/utf8.h"

namespace rote::inference {

using tokenizer_internal::Piece;
using tokenizer_internal::SplitOnAddedTokens;

void Tokenizer::Impl::EncodePiece(std::string_view text, bool at_start, bool parse_special,
                                  std::vector<int32_t>& out) const {
  std::string normalized_storage;
  std::string_view normalized = text;
  if (!normalizer.empty()) {
    normalized_storage = tokenizer_internal::Normalize(normalizer, text);
    normalized = normalized_storage;
  }
  for (const Piece& piece : SplitOnAddedTokens(normalized, normalized_added, !parse_special)) {
    if (piece.token_id >= 0) {
      out.push_back(piece.token_id);
    } else {
      PreTokenizeAndBpe(piece.text, at_start && piece.text.data() == normalized.data(), out);
    }
  }
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool parse_special) const {
  std::vector<int32_t> out;
  const std::string valid = utf8::Sanitize(text);
  for (const Piece& piece : SplitOnAddedTokens(valid, impl_->raw_added, !parse_special)) {
    if (piece.token_id >= 0) {
      out.push_back(piece.token_id);
    } else {
      impl_->EncodePiece(piece.text, piece.text.data() == valid.data(), parse_special, out);
    }
  }
  return out;
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, AddSpecialTokens add_special_tokens,
                                       bool parse_special) const {
  if (add_special_tokens == AddSpecialTokens::kNo) return Encode(text, parse_special);
  std::vector<int32_t> out = impl_->prefix_ids;
  const std::vector<int32_t> body = Encode(text, parse_special);
  out.insert(out.end(), body.begin(), body.end());
  out.insert(out.end(), impl_->suffix_ids.begin(), impl_->suffix_ids.end());
  return out;
}

const std::vector<int32_t>& Tokenizer::special_prefix_ids() const { return impl_->prefix_ids; }
const std::vector<int32_t>& Tokenizer::special_suffix_ids() const { return impl_->suffix_ids; }

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool skip_special) const {
  return impl_->DecodeIds(ids, skip_special);
}

std::string Tokenizer::TokenText(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->id_token.size()) return {};
  return impl_->id_token[id];
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
  const Tokenizer::Impl& impl = *tokenizer_.impl_;
  if (impl.byte_level_decoder) {
    pending_ += tokenizer_.TokenBytes(id);
    const size_t ready = utf8::StreamablePrefixLength(pending_);
    std::string out = utf8::Sanitize(std::string_view(pending_).substr(0, ready));
    pending_.erase(0, ready);
    return out;
  }
  window_.push_back(id);
  // A byte-fallback token's byte joins its run, which decodes only once the run ends.
  if (impl.decoder_has_byte_fallback && id >= 0 && static_cast<size_t>(id) < impl.id_token.size() &&
      tokenizer_internal::ByteFallbackValue(impl.id_token[id]) >= 0) {
    return {};
  }
  if (impl.stream_holds_all) return {};
  const std::string text = impl.DecodeIds(window_, skip_special_, continuation_);
  size_t ready = text.size();
  if (impl.decoder_has_byte_level) {
    // A character cut between tokens reads as U+FFFD until its last byte arrives.
    while (ready >= 3 && text.compare(ready - 3, 3, utf8::kReplacement) == 0) ready -= 3;
  }
  std::string out;
  // The decoders extend the text of a window as tokens join it; what was emitted stays.
  if (ready > window_emitted_) {
    out = text.substr(window_emitted_, ready - window_emitted_);
    window_emitted_ = ready;
  }
  // Decoding can restart after this token once the text has begun: the decoders' first-token
  // rules (Metaspace's prefix, Strip at the start) are spent.
  if (impl.stream_restartable && ready == text.size() && (continuation_ || window_emitted_ > 0)) {
    window_.clear();
    window_emitted_ = 0;
    continuation_ = true;
  }
  return out;
}

std::string StreamDecoder::Finish() {
  std::string out = utf8::Sanitize(pending_);
  pending_.clear();
  if (!window_.empty()) {
    const std::string text = tokenizer_.impl_->DecodeIds(window_, skip_special_, continuation_);
    if (text.size() > window_emitted_) out += text.substr(window_emitted_);
    window_.clear();
    window_emitted_ = 0;
  }
  return out;
}

}  // namespace rote::inference
