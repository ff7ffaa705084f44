// Content digests: "sha256:" followed by 64 lowercase hex digits.
#pragma once

#include <string>
#include <string_view>

namespace rote::store {

inline constexpr std::string_view kDigestPrefix = "sha256:";
inline constexpr size_t kDigestLength = 7 + 64;

// The digest of `bytes` in the form above (OpenSSL EVP SHA-256).
std::string Sha256Digest(std::string_view bytes);

// Whether `digest` is exactly "sha256:" + 64 lowercase hex digits.
bool IsValidDigest(std::string_view digest);

}  // namespace rote::store
