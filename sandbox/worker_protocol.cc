#include "sandbox/worker_protocol.h"

#include "absl/status/status.h"

namespace rote::sandbox::protocol {

namespace {

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
  if (encoded_value.empty()) PutU8(out, kTagNil);
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
