// The byte-level alphabet (GPT-2's bytes_to_unicode) and the ByteLevel decoder: how token text
// maps to the bytes it stands for (decoder.cc runs it as one decoder step).
#include "inference/tokenizer/tokenizer_internal.h"
#include "inference/tokenizer/utf8.h"

namespace rote::inference {
namespace tokenizer_internal {

namespace {

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

}  // namespace

std::string ByteLevelDecodeToken(std::string_view token, bool* in_alphabet) {
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

}  // namespace tokenizer_internal
}  // namespace rote::inference
