// Encoding and decoding through the loaded tables, and the streaming decoder. The pieces each
// step uses live beside this file (tokenizer_internal.h lists them); loading is tokenizer_json.cc.
#include "inference/tokenizer/tokenizer.h"

#include "inference/tokenizer/tokenizer_internal.h"
#include "inference/tokenizer/utf8.h"

namespace rote::inference {

using tokenizer_internal::Piece;
using tokenizer_internal::SplitOnAddedTokens;

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
    const std::string normalized = tokenizer_internal::NormalizeNfc(text);
    EncodeNormalizedPiece(normalized, parse_special, out);
  } else {
    EncodeNormalizedPiece(text, parse_special, out);
  }
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
