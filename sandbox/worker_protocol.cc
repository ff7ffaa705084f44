#include "sandbox/worker_protocol.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace rote::sandbox::protocol {

void PutU64(std::string& out, uint64_t v) {
  char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<char>(v >> (8 * i));
  out.append(b, 8);
}

namespace {

constexpr uint8_t kNil = kTagNil, kFalse = kTagFalse, kTrue = kTagTrue, kInt = kTagInt, kFloat = kTagFloat,
                  kString = kTagString, kArray = kTagArray, kMap = kTagMap;

void PutU8(std::string& out, uint8_t v) { out.push_back(static_cast<char>(v)); }
void PutU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}
void PutBytes(std::string& out, std::string_view s) {
  PutU64(out, s.size());
  out.append(s);
}

// One spelling per value: map keys strictly increasing bytewise, the order EncodeValue and the
// Lua encoder write. An unsorted or repeated key is malformed, so no two decoders (this one, the
// worker's PushEncoded) can read one message as two different values.
bool KeyFollows(std::string_view prev, std::string_view key) { return prev < key; }

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
  bool Value(rote::sandbox::Value* out, int depth) {
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
  // Validates one value without building it.
  bool Skip(int depth) {
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
  size_t pos() const { return pos_; }
  bool AtEnd() const { return pos_ == s_.size(); }

 private:
  std::string_view s_;
  size_t pos_ = 0;
};

void PutStatus(std::string& out, const absl::Status& s) {
  PutU32(out, static_cast<uint32_t>(s.code()));
  PutBytes(out, std::string_view(s.message().data(), s.message().size()));
}

bool GetStatus(Reader& r, absl::Status* s) {
  uint32_t code;
  std::string msg;
  // An OK status has no message (absl drops it): one carrying one is not what an encoder wrote.
  if (!r.U32(&code) || !r.Bytes(&msg) || code > 16 || (code == 0 && !msg.empty())) return false;
  *s = absl::Status(static_cast<absl::StatusCode>(code), msg);
  return true;
}

}  // namespace

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

std::string EncodeRequest(std::string_view chunkname, std::string_view source, const Limits& limits,
                          const std::vector<Value>& inputs) {
  std::string out;
  out.reserve(64 + chunkname.size() + source.size() + 32 * inputs.size());
  PutU32(out, kRequestMagic);
  PutU64(out, limits.max_instructions);
  PutU64(out, limits.max_memory_bytes);
  PutU64(out, limits.max_output_bytes);
  PutBytes(out, chunkname);
  PutBytes(out, source);
  PutU64(out, inputs.size());
  for (const Value& v : inputs) EncodeValue(v, out);
  return out;
}

std::string EncodeRequest(const Request& r) { return EncodeRequest(r.chunkname, r.source, r.limits, r.inputs); }

absl::StatusOr<Request> DecodeRequest(std::string_view payload) {
  Reader rd(payload);
  Request r;
  uint32_t magic;
  uint64_t n;
  if (!rd.U32(&magic) || magic != kRequestMagic || !rd.U64(&r.limits.max_instructions) ||
      !rd.U64(&r.limits.max_memory_bytes) || !rd.U64(&r.limits.max_output_bytes) ||
      !rd.Bytes(&r.chunkname) || !rd.Bytes(&r.source) || !rd.U64(&n) || n > payload.size()) {
    return absl::InvalidArgumentError("malformed worker request header");
  }
  r.inputs.resize(n);
  for (auto& v : r.inputs) {
    if (!rd.Value(&v, 0)) return absl::InvalidArgumentError("malformed worker request value");
  }
  if (!rd.AtEnd()) return absl::InvalidArgumentError("trailing bytes in worker request");
  return r;
}

absl::StatusOr<Value> DecodeValue(std::string_view bytes) {
  Reader rd(bytes);
  Value v;
  if (!rd.Value(&v, 0) || !rd.AtEnd()) return absl::DataLossError("malformed encoded value");
  return v;
}

absl::StatusOr<EncodedRequest> DecodeRequestLazily(std::string_view payload) {
  Reader rd(payload);
  EncodedRequest r;
  uint32_t magic;
  uint64_t n;
  if (!rd.U32(&magic) || magic != kRequestMagic || !rd.U64(&r.limits.max_instructions) ||
      !rd.U64(&r.limits.max_memory_bytes) || !rd.U64(&r.limits.max_output_bytes) ||
      !rd.Bytes(&r.chunkname) || !rd.Bytes(&r.source) || !rd.U64(&n) || n > payload.size()) {
    return absl::InvalidArgumentError("malformed worker request header");
  }
  r.inputs.reserve(n);
  for (uint64_t i = 0; i < n; ++i) {
    size_t start = rd.pos();
    if (!rd.Skip(0)) return absl::InvalidArgumentError("malformed worker request value");
    r.inputs.push_back(payload.substr(start, rd.pos() - start));
  }
  if (!rd.AtEnd()) return absl::InvalidArgumentError("trailing bytes in worker request");
  return r;
}

void BeginResponse(std::string& out, bool more, const absl::Status& batch_status, uint64_t count) {
  PutU32(out, kResponseMagic);
  PutU8(out, more ? 1 : 0);
  PutStatus(out, batch_status);
  PutU64(out, count);
}

void AppendResult(std::string& out, const absl::Status& status, std::string_view encoded_value,
                  std::string_view output, const Usage& usage) {
  PutStatus(out, status);
  if (encoded_value.empty()) PutU8(out, kNil);
  else out.append(encoded_value);
  PutBytes(out, output);
  PutU64(out, usage.instructions);
  PutU64(out, usage.peak_memory_bytes);
  PutU64(out, usage.output_bytes);
}

std::string EncodeResponse(const Response& r) {
  std::string out;
  out.reserve(64 + 64 * r.results.size());
  BeginResponse(out, r.more, r.batch_status, r.results.size());
  std::string value;
  for (const CallResult& c : r.results) {
    value.clear();
    EncodeValue(c.value, value);
    AppendResult(out, c.status, value, c.output, c.usage);
  }
  return out;
}

absl::StatusOr<Response> DecodeResponse(std::string_view payload) {
  Reader rd(payload);
  Response r;
  uint32_t magic;
  uint8_t more;
  uint64_t n;
  if (!rd.U32(&magic) || magic != kResponseMagic || !rd.U8(&more) || more > 1 || !GetStatus(rd, &r.batch_status) ||
      !rd.U64(&n) || n > payload.size()) {
    return absl::DataLossError("malformed worker response header");
  }
  r.more = more == 1;
  r.results.resize(n);
  for (auto& c : r.results) {
    if (!GetStatus(rd, &c.status) || !rd.Value(&c.value, 0) || !rd.Bytes(&c.output) ||
        !rd.U64(&c.usage.instructions) || !rd.U64(&c.usage.peak_memory_bytes) ||
        !rd.U64(&c.usage.output_bytes)) {
      return absl::DataLossError("malformed worker response");
    }
  }
  if (!rd.AtEnd()) return absl::DataLossError("trailing bytes in worker response");
  return r;
}

}  // namespace rote::sandbox::protocol
