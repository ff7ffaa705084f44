// String concatenation that accepts std::string_view. (This abseil build has its own
// absl::string_view, which absl::StrCat takes but std::string_view does not convert to.)
#pragma once

#include <string>
#include <string_view>
#include <type_traits>

namespace rote::store::internal {

template <typename T>
void AppendPiece(std::string& out, const T& piece) {
  if constexpr (std::is_same_v<T, char>) {
    out.push_back(piece);
  } else if constexpr (std::is_integral_v<T>) {
    out += std::to_string(piece);
  } else if constexpr (std::is_convertible_v<const T&, std::string_view>) {
    out += std::string_view(piece);
  } else {
    out.append(piece.data(), piece.size());  // absl::string_view and other views
  }
}

template <typename... Pieces>
void Append(std::string& out, const Pieces&... pieces) {
  (AppendPiece(out, pieces), ...);
}

template <typename... Pieces>
std::string Cat(const Pieces&... pieces) {
  std::string out;
  Append(out, pieces...);
  return out;
}

}  // namespace rote::store::internal
