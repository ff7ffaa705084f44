// The lossless binary encoding of a Value, and the little-endian primitives it is built from.
// Canonical JSON cannot carry arbitrary bytes, so values cross the worker's socket in this
// encoding, and the Lua value codec (lua_value_codec.h) writes and reads it directly.
//
// Dependencies go one way: value.h <- value_encoding.h <- lua_value_codec / worker_protocol.
// This file knows nothing of Lua or of the worker's messages.
//
// Every value has one spelling (map keys strictly increasing bytewise), and decoding treats
// its input as untrusted: bounds-checked, depth-limited to kMaxJsonDepth.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "sandbox/value.h"

namespace rote::sandbox::protocol {

// Tags of the binary value encoding.
enum ValueTag : uint8_t { kTagNil = 0, kTagFalse = 1, kTagTrue = 2, kTagInt = 3, kTagFloat = 4, kTagString = 5,
                          kTagArray = 6, kTagMap = 7 };

void PutU8(std::string& out, uint8_t v);
void PutU32(std::string& out, uint32_t v);
void PutU64(std::string& out, uint64_t v);
// A u64 length, then the bytes.
void PutBytes(std::string& out, std::string_view s);

void EncodeValue(const Value& v, std::string& out);
absl::StatusOr<Value> DecodeValue(std::string_view bytes);

// Reads the primitives and values back from a buffer; every read returns false instead of
// reading past the end or accepting a second spelling.
class Reader {
 public:
  explicit Reader(std::string_view s) : s_(s) {}
  bool U8(uint8_t* v) {
    if (pos_ + 1 > s_.size()) return false;
    *v = static_cast<uint8_t>(s_[pos_++]);
    return true;
  }
  bool U32(uint32_t* v) {
    if (pos_ + 4 > s_.size()) return false;
    *v = 0;
    for (int i = 0; i < 4; ++i) *v |= static_cast<uint32_t>(static_cast<uint8_t>(s_[pos_ + i])) << (8 * i);
    pos_ += 4;
    return true;
  }
  bool U64(uint64_t* v) {
    if (pos_ + 8 > s_.size()) return false;
    *v = 0;
    for (int i = 0; i < 8; ++i) *v |= static_cast<uint64_t>(static_cast<uint8_t>(s_[pos_ + i])) << (8 * i);
    pos_ += 8;
    return true;
  }
  bool Bytes(std::string* out) {
    uint64_t n;
    if (!U64(&n) || n > s_.size() - pos_) return false;
    out->assign(s_.substr(pos_, n));
    pos_ += n;
    return true;
  }
  bool Value(rote::sandbox::Value* out, int depth);
  // Validates one value without building it.
  bool Skip(int depth);
  size_t pos() const { return pos_; }
  bool AtEnd() const { return pos_ == s_.size(); }

 private:
  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace rote::sandbox::protocol
