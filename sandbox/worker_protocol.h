// Wire format between WorkerPool and rote-sandbox-worker over a Unix stream socket.
// Every message is a u64 little-endian length followed by that many bytes of payload. Values
// travel in a lossless binary encoding (canonical JSON cannot carry arbitrary bytes), and the
// parent decodes everything a worker sends as untrusted input: bounds-checked, depth-limited.
// Each message has one spelling (map keys strictly increasing, no message on an OK status):
// anything else is malformed, so decoding and encoding again gives the same bytes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "sandbox/lua_runtime.h"
#include "sandbox/value.h"

namespace rote::sandbox::protocol {

inline constexpr uint32_t kRequestMagic = 0x31515352;   // "RSQ1"
inline constexpr uint32_t kResponseMagic = 0x31505352;  // "RSP1"
// A message larger than this is refused by both sides.
inline constexpr uint64_t kMaxMessageBytes = 1ull << 31;

struct Request {
  std::string chunkname;
  std::string source;
  Limits limits;
  std::vector<Value> inputs;
};

// A batch's results come back in one or more frames, so the parent decodes earlier results
// while the worker computes later ones; every frame but the last has `more` set.
inline constexpr size_t kResultsPerFrame = 1024;

struct Response {
  bool more = false;
  absl::Status batch_status;  // compile errors: apply to the whole batch
  std::vector<CallResult> results;
};

// Tags of the binary value encoding.
enum ValueTag : uint8_t { kTagNil = 0, kTagFalse = 1, kTagTrue = 2, kTagInt = 3, kTagFloat = 4, kTagString = 5,
                          kTagArray = 6, kTagMap = 7 };
// Little-endian fixed-width helpers shared with the Lua converters.
void PutU64(std::string& out, uint64_t v);

void EncodeValue(const Value& v, std::string& out);
absl::StatusOr<Value> DecodeValue(std::string_view bytes);

// A request whose inputs are left encoded: spans into the payload, each one validated value.
struct EncodedRequest {
  std::string chunkname;
  std::string source;
  Limits limits;
  std::vector<std::string_view> inputs;
};
absl::StatusOr<EncodedRequest> DecodeRequestLazily(std::string_view payload);

// Response building in pieces, so a worker can write results as it produces them.
void BeginResponse(std::string& out, bool more, const absl::Status& batch_status, uint64_t count);
void AppendResult(std::string& out, const absl::Status& status, std::string_view encoded_value,
                  std::string_view output, const Usage& usage);
std::string EncodeRequest(const Request& r);
// The same bytes as EncodeRequest, without copying the inputs into a Request first.
std::string EncodeRequest(std::string_view chunkname, std::string_view source, const Limits& limits,
                          const std::vector<Value>& inputs);
absl::StatusOr<Request> DecodeRequest(std::string_view payload);
std::string EncodeResponse(const Response& r);
absl::StatusOr<Response> DecodeResponse(std::string_view payload);

}  // namespace rote::sandbox::protocol
