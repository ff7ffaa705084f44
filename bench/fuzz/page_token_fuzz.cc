// Page tokens (store/page_token.h): opaque strings a client hands back to list the next page.
// The first byte picks what the rest is:
//   0: a token, a collection and a filter as a client could send them;
//   1: a payload signed with the fuzzer's own secret, so the parser behind the MAC is reached too;
//   2: a key, a collection and a filter to encode, and a byte of the token to change: the issued
//      token must decode to the key, and no edited token may decode at all.
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "absl/strings/escaping.h"
#include "bench/fuzz/fuzz_util.h"
#include "store/page_token.h"

namespace {

constexpr char kSecret[] = "fuzz-page-token-secret";

// The token PageTokenCodec would issue for `payload` under kSecret (HMAC-SHA256, first 16 bytes).
std::string Sign(std::string_view payload) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int md_len = 0;
  HMAC(EVP_sha256(), kSecret, static_cast<int>(sizeof kSecret - 1),
       reinterpret_cast<const unsigned char*>(payload.data()), payload.size(), md, &md_len);
  std::string raw(payload);
  raw.append(reinterpret_cast<const char*>(md), 16);
  return absl::WebSafeBase64Escape(raw);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using rote::store::internal::PageTokenCodec;
  if (size < 1) return 0;
  const PageTokenCodec codec(kSecret);
  const uint8_t mode = data[0] % 3;
  std::vector<std::string_view> parts = rote::fuzz::SplitParts(data + 1, size - 1, 3);
  switch (mode) {
    case 0: {
      (void)codec.Decode(parts[0], parts[1], parts[2]);
      return 0;
    }
    case 1: {
      absl::StatusOr<int64_t> key = codec.Decode(Sign(parts[0]), parts[1], parts[2]);
      if (key.ok()) {
        absl::StatusOr<int64_t> reissued = codec.Decode(codec.Encode(parts[1], parts[2], *key), parts[1], parts[2]);
        ROTE_FUZZ_CHECK(reissued.ok() && *reissued == *key);
      }
      return 0;
    }
    default: {
      int64_t last_key = 0;
      std::string_view rest = parts[0];
      if (rest.size() < 9) return 0;
      std::memcpy(&last_key, rest.data(), 8);
      const uint8_t edit = static_cast<uint8_t>(rest[8]);
      // Collections are the server's own names; '|' separates the token's fields.
      if (parts[1].find('|') != std::string_view::npos) return 0;
      const std::string token = codec.Encode(parts[1], parts[2], last_key);
      absl::StatusOr<int64_t> key = codec.Decode(token, parts[1], parts[2]);
      ROTE_FUZZ_CHECK(key.ok() && *key == last_key);
      std::string edited = token;
      const size_t at = rest.size() > 9 ? static_cast<uint8_t>(rest[9]) % edited.size() : 0;
      edited[at] = static_cast<char>(edited[at] ^ (edit | 1));
      ROTE_FUZZ_CHECK(!codec.Decode(edited, parts[1], parts[2]).ok());
      edited = token + static_cast<char>(edit);
      ROTE_FUZZ_CHECK(!codec.Decode(edited, parts[1], parts[2]).ok());
      if (token.size() > 1) ROTE_FUZZ_CHECK(!codec.Decode(token.substr(0, token.size() - 1), parts[1], parts[2]).ok());
      return 0;
    }
  }
}
