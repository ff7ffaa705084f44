#include "sandbox/value_encoding.h"

#include <cstring>

#include "absl/status/status.h"

namespace rote::sandbox::protocol {

namespace {

constexpr uint8_t kNil = kTagNil, kFalse = kTagFalse, kTrue = kTagTrue, kInt = kTagInt, kFloat = kTagFloat,
                  kString = kTagString, kArray = kTagArray, kMap = kTagMap;

// One spelling per value: map keys strictly increasing bytewise, the order EncodeValue and the
// Lua encoder write. An unsorted or repeated key is malformed, so no two decoders (this one, the
// worker's PushEncoded) can read one message as two different values.
bool KeyFollows(std::string_view prev, std::string_view key) { return prev < key; }

}  // namespace

void PutU8(std::string& out, uint8_t v) { out.push_back(static_cast<char>(v)); }

void PutU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}

void PutU64(std::string& out, uint64_t v) {
  char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<char>(v >> (8 * i));
  out.append(b, 8);
}

void PutBytes(std::string& out, std::string_view s) {
  PutU64(out, s.size());
  out.append(s);
}

bool Reader::Value(rote::sandbox::Value* out, int depth) {
  if (depth > kMaxJsonDepth) return false;
  uint8_t tag;
  if (!U8(&tag)) return false;
  switch (tag) {
    case kNil: *out = Value::Nil(); return true;
    case kFalse: *out = Value::Bool(false); return true;
    case kTrue: *out = Value::Bool(true); return true;
    case kInt: {
      uint64_t u;
      if (!U64(&u)) return false;
      *out = Value::Int(static_cast<int64_t>(u));
      return true;
    }
    case kFloat: {
      uint64_t u;
      if (!U64(&u)) return false;
      double d;
      std::memcpy(&d, &u, sizeof d);
      *out = Value::Float(d);
      return true;
    }
    case kString: {
      std::string s;
      if (!Bytes(&s)) return false;
      *out = Value::String(std::move(s));
      return true;
    }
    case kArray: {
      uint64_t n;
      // Each element takes at least one byte: a count beyond the remaining bytes is a lie.
      if (!U64(&n) || n > s_.size() - pos_) return false;
      Array a;
      a.reserve(n);
      for (uint64_t i = 0; i < n; ++i) {
        rote::sandbox::Value e;
        if (!Value(&e, depth + 1)) return false;
        a.push_back(std::move(e));
      }
      *out = Value::FromArray(std::move(a));
      return true;
    }
    case kMap: {
      uint64_t n;
      if (!U64(&n) || n > s_.size() - pos_) return false;
      Map m;
      for (uint64_t i = 0; i < n; ++i) {
        std::string k;
        rote::sandbox::Value e;
        if (!Bytes(&k) || (!m.empty() && !KeyFollows(m.rbegin()->first, k)) || !Value(&e, depth + 1)) {
          return false;
        }
        m.emplace_hint(m.end(), std::move(k), std::move(e));
      }
      *out = Value::FromMap(std::move(m));
      return true;
    }
    default: return false;
  }
}

bool Reader::Skip(int depth) {
  if (depth > kMaxJsonDepth) return false;
  uint8_t tag;
  uint64_t n;
  if (!U8(&tag)) return false;
  switch (tag) {
    case kNil: case kFalse: case kTrue: return true;
    case kInt: case kFloat: return U64(&n);
    case kString:
      if (!U64(&n) || n > s_.size() - pos_) return false;
      pos_ += n;
      return true;
    case kArray:
      if (!U64(&n) || n > s_.size() - pos_) return false;
      for (uint64_t i = 0; i < n; ++i) if (!Skip(depth + 1)) return false;
      return true;
    case kMap: {
      if (!U64(&n) || n > s_.size() - pos_) return false;
      std::string_view prev;
      for (uint64_t i = 0; i < n; ++i) {
        uint64_t len;
        if (!U64(&len) || len > s_.size() - pos_) return false;
        const std::string_view key = s_.substr(pos_, len);
        if (i > 0 && !KeyFollows(prev, key)) return false;
        prev = key;
        pos_ += len;
        if (!Skip(depth + 1)) return false;
      }
      return true;
    }
    default: return false;
  }
}

void EncodeValue(const Value& v, std::string& out) {
  switch (v.kind()) {
    case Value::Kind::kNil: PutU8(out, kNil); return;
    case Value::Kind::kBool: PutU8(out, v.as_bool() ? kTrue : kFalse); return;
    case Value::Kind::kInt: PutU8(out, kInt); PutU64(out, static_cast<uint64_t>(v.as_int())); return;
    case Value::Kind::kFloat: {
      PutU8(out, kFloat);
      double d = v.as_float();
      uint64_t u;
      std::memcpy(&u, &d, sizeof u);
      PutU64(out, u);
      return;
    }
    case Value::Kind::kString: PutU8(out, kString); PutBytes(out, v.as_string()); return;
    case Value::Kind::kArray:
      PutU8(out, kArray);
      PutU64(out, v.as_array().size());
      for (const Value& e : v.as_array()) EncodeValue(e, out);
      return;
    case Value::Kind::kMap:
      PutU8(out, kMap);
      PutU64(out, v.as_map().size());
      for (const auto& [k, e] : v.as_map()) {
        PutBytes(out, k);
        EncodeValue(e, out);
      }
      return;
  }
}

absl::StatusOr<Value> DecodeValue(std::string_view bytes) {
  Reader rd(bytes);
  Value v;
  if (!rd.Value(&v, 0) || !rd.AtEnd()) return absl::DataLossError("malformed encoded value");
  return v;
}

}  // namespace rote::sandbox::protocol
