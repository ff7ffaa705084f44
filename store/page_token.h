// Opaque page tokens: the last key of a page, bound to its collection and filter, with an
// HMAC under a per-database secret so a client cannot forge or edit one.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace rote::store::internal {

class PageTokenCodec {
 public:
  explicit PageTokenCodec(std::string secret) : secret_(std::move(secret)) {}

  // `filter` is a canonical description of the list's filter (FilterKey builds one).
  std::string Encode(std::string_view collection, std::string_view filter, int64_t last_key) const;
  // The last key, or INVALID_ARGUMENT for a tampered token or one issued for another
  // collection or filter.
  absl::StatusOr<int64_t> Decode(std::string_view token, std::string_view collection,
                                 std::string_view filter) const;

 private:
  std::string Mac(std::string_view payload) const;
  std::string secret_;
};

// Page size after defaults and clamping; INVALID_ARGUMENT when negative.
absl::StatusOr<int> EffectivePageSize(int32_t requested);

}  // namespace rote::store::internal
