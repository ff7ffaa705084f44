#include "store/page_token.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "store/str_util.h"
#include "store/digest.h"

namespace rote::store::internal {
namespace {

constexpr size_t kMacBytes = 16;  // 128 bits is plenty against forgery; keeps tokens short
constexpr std::string_view kVersion = "p1";
constexpr int kDefaultPageSize = 50;
constexpr int kMaxPageSize = 1000;

// The filter travels as a short hash: the token need not reveal it, only prove it unchanged.
std::string FilterHash(std::string_view filter) {
  return Sha256Digest(filter).substr(kDigestPrefix.size(), 16);
}

}  // namespace

std::string PageTokenCodec::Mac(std::string_view payload) const {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int md_len = 0;
  HMAC(EVP_sha256(), secret_.data(), static_cast<int>(secret_.size()),
       reinterpret_cast<const unsigned char*>(payload.data()), payload.size(), md, &md_len);
  return std::string(reinterpret_cast<const char*>(md), std::min<size_t>(md_len, kMacBytes));
}

std::string PageTokenCodec::Encode(std::string_view collection, std::string_view filter,
                                   int64_t last_key) const {
  std::string payload =
      Cat(kVersion, "|", collection, "|", FilterHash(filter), "|", last_key);
  return absl::WebSafeBase64Escape(Cat(payload, Mac(payload)));
}

absl::StatusOr<int64_t> PageTokenCodec::Decode(std::string_view token,
                                               std::string_view collection,
                                               std::string_view filter) const {
  const absl::Status invalid = absl::InvalidArgumentError(
      "page_token is not a token this server issued (damaged or edited); start again from the "
      "first page with an empty page_token");
  std::string raw;
  if (!absl::WebSafeBase64Unescape(absl::string_view(token.data(), token.size()), &raw) ||
      raw.size() <= kMacBytes) {
    return invalid;
  }
  // Base64 can spell the same bytes several ways (unused low bits in the last character); only
  // the spelling this server issued is accepted, so every edit to a token is rejected.
  if (absl::WebSafeBase64Escape(raw) != token) return invalid;
  std::string_view payload(raw.data(), raw.size() - kMacBytes);
  std::string_view mac(raw.data() + payload.size(), kMacBytes);
  std::string expected = Mac(payload);
  if (CRYPTO_memcmp(expected.data(), mac.data(), kMacBytes) != 0) return invalid;
  std::vector<std::string_view> parts;
  for (size_t start = 0;;) {
    size_t bar = payload.find('|', start);
    parts.push_back(payload.substr(start, bar == std::string_view::npos ? bar : bar - start));
    if (bar == std::string_view::npos) break;
    start = bar + 1;
  }
  int64_t last_key = 0;
  if (parts.size() != 4 || parts[0] != kVersion ||
      !absl::SimpleAtoi(absl::string_view(parts[3].data(), parts[3].size()), &last_key)) {
    return invalid;
  }
  if (parts[1] != collection || parts[2] != FilterHash(filter)) {
    return absl::InvalidArgumentError(
        "page_token was issued for a different list or filter; keep the filter unchanged "
        "while paging, or start again with an empty page_token");
  }
  return last_key;
}

absl::StatusOr<int> EffectivePageSize(int32_t requested) {
  if (requested < 0) {
    return absl::InvalidArgumentError(
        Cat("page_size must not be negative (got ", requested, ")"));
  }
  if (requested == 0) return kDefaultPageSize;
  return std::min<int>(requested, kMaxPageSize);
}

std::string FilterKey(std::initializer_list<std::string_view> parts) {
  std::string out;
  for (std::string_view p : parts) Append(out, p.size(), ":", p, ";");
  return out;
}

}  // namespace rote::store::internal
