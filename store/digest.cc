#include "store/digest.h"

#include <openssl/evp.h>

#include <array>
#include <cstdint>
#include <cstdlib>

namespace rote::store {

std::string Sha256Digest(std::string_view bytes) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
  unsigned int md_len = 0;
  // EVP_Digest is the one-shot form; it cannot fail for SHA-256 short of allocation failure,
  // which OpenSSL reports by returning 0 (and we then abort rather than return a wrong digest).
  if (EVP_Digest(bytes.data(), bytes.size(), md.data(), &md_len, EVP_sha256(), nullptr) != 1 ||
      md_len != 32) {
    std::abort();
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(kDigestPrefix);
  out.reserve(kDigestLength);
  for (unsigned int i = 0; i < md_len; ++i) {
    out.push_back(kHex[md[i] >> 4]);
    out.push_back(kHex[md[i] & 0xf]);
  }
  return out;
}

bool IsValidDigest(std::string_view digest) {
  if (digest.size() != kDigestLength || digest.substr(0, kDigestPrefix.size()) != kDigestPrefix) {
    return false;
  }
  for (char c : digest.substr(kDigestPrefix.size())) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace rote::store
