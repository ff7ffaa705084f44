// The value model shared by rote: what goes into and comes out of scripts, blueprints and
// patterns. Integers and floats are kept apart (1 and 1.0 are different values with different
// canonical encodings), strings are bytes, maps have their keys sorted bytewise so that every
// traversal, comparison and serialization is independent of insertion order.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"

namespace rote::sandbox {

class Value;
using Array = std::vector<Value>;
// std::map with the default std::less<std::string> orders keys bytewise (char_traits compare
// is memcmp-like on unsigned bytes), which is the canonical key order.
using Map = std::map<std::string, Value>;

class Value {
 public:
  enum class Kind { kNil, kBool, kInt, kFloat, kString, kArray, kMap };

  Value() = default;
  static Value Nil() { return Value(); }
  static Value Bool(bool b) { return Value(std::in_place_type<bool>, b); }
  static Value Int(int64_t i) { return Value(std::in_place_type<int64_t>, i); }
  static Value Float(double d) { return Value(std::in_place_type<double>, d); }
  static Value String(std::string s) { return Value(std::in_place_type<std::string>, std::move(s)); }
  static Value FromArray(Array a) { return Value(std::in_place_type<Array>, std::move(a)); }
  static Value FromMap(Map m) { return Value(std::in_place_type<Map>, std::move(m)); }

  Kind kind() const { return static_cast<Kind>(storage_.index()); }
  bool is_nil() const { return kind() == Kind::kNil; }
  bool is_bool() const { return kind() == Kind::kBool; }
  bool is_int() const { return kind() == Kind::kInt; }
  bool is_float() const { return kind() == Kind::kFloat; }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_array() const { return kind() == Kind::kArray; }
  bool is_map() const { return kind() == Kind::kMap; }

  // Accessors require the matching kind (std::get throws std::bad_variant_access otherwise).
  bool as_bool() const { return std::get<bool>(storage_); }
  int64_t as_int() const { return std::get<int64_t>(storage_); }
  double as_float() const { return std::get<double>(storage_); }
  const std::string& as_string() const { return std::get<std::string>(storage_); }
  const Array& as_array() const { return std::get<Array>(storage_); }
  Array& as_array() { return std::get<Array>(storage_); }
  const Map& as_map() const { return std::get<Map>(storage_); }
  Map& as_map() { return std::get<Map>(storage_); }

  // Structural equality; floats compare by bit pattern so that NaN == NaN and 0.0 != -0.0,
  // matching what the canonical encoding would distinguish.
  friend bool operator==(const Value& a, const Value& b);

 private:
  using Storage = std::variant<std::monostate, bool, int64_t, double, std::string, Array, Map>;
  // The factories build the alternative in place: a temporary variant moved into storage_
  // would make g++ warn (-Wmaybe-uninitialized) about the moved-from temporary at -O2.
  template <typename T, typename... Args>
  explicit Value(std::in_place_type_t<T> type, Args&&... args) : storage_(type, std::forward<Args>(args)...) {}
  Storage storage_;
};

const char* KindName(Value::Kind kind);

// Parses JSON (RFC 8259, whole input, surrounding whitespace allowed). Numbers without a
// fraction or exponent become Int (error if outside int64), all others Float. Duplicate object
// keys are an error (which one would win is a policy nobody should depend on). Strings must be
// valid UTF-8; \u escapes (including surrogate pairs) are decoded to UTF-8. Nesting is limited
// to kMaxJsonDepth.
inline constexpr int kMaxJsonDepth = 200;
absl::StatusOr<Value> ParseJson(std::string_view text);

// Canonical JSON: no whitespace, map keys sorted bytewise, integers in decimal, floats in the
// shortest form that round-trips (std::to_chars) and always with a '.' or an exponent so they
// parse back as floats ("3.0", "1e+300"), -0.0 as "-0.0". NaN and infinities are errors (JSON
// cannot carry them and no silent substitute is safe). Strings must be valid UTF-8; '"', '\\'
// and control characters below 0x20 are escaped (\b \f \n \r \t, else \u00xx lowercase), all
// other characters are written as raw UTF-8. Nil is "null".
absl::StatusOr<std::string> CanonicalJson(const Value& value);

// Returns the offset of the first byte that is not part of valid UTF-8 (no overlongs, no
// surrogates, at most U+10FFFF), or npos when the whole string is valid.
size_t FindInvalidUtf8(std::string_view s);

}  // namespace rote::sandbox
