// Opaque page tokens: the last key of a page, bound to its collection and filter, with an
// HMAC under a per-database secret so a client cannot forge or edit one. And the pages the
// list calls build with them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "store/records.h"

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

// A length-prefixed encoding, so ("a", "bc") and ("ab", "c") differ.
std::string FilterKey(std::initializer_list<std::string_view> parts);

// Pages: fetch one row more than asked for, to know whether a next page exists.
template <typename T, typename KeyOf>
Page<T> MakePage(std::vector<T> rows, int page_size, const PageTokenCodec& codec,
                 std::string_view collection, std::string_view filter, KeyOf key_of) {
  Page<T> page;
  if (rows.size() > static_cast<size_t>(page_size)) {
    rows.resize(static_cast<size_t>(page_size));
    page.next_page_token = codec.Encode(collection, filter, key_of(rows.back()));
  }
  page.items = std::move(rows);
  return page;
}

// The page without the row ids its token was made from.
template <typename T>
Page<T> StripIds(Page<std::pair<int64_t, T>> page) {
  Page<T> out;
  out.next_page_token = std::move(page.next_page_token);
  for (auto& [id, item] : page.items) out.items.push_back(std::move(item));
  return out;
}

}  // namespace rote::store::internal
