// Wire format between WorkerPool and rote-sandbox-worker over a Unix stream socket.
// Every message is a u64 little-endian length followed by that many bytes of payload. Values
// travel in the binary encoding of value_encoding.h, and the parent decodes everything a
// worker sends as untrusted input: bounds-checked, depth-limited. Each message has one
// spelling (map keys strictly increasing, no message on an OK status): anything else is
// malformed, so decoding and encoding again gives the same bytes.
//
// Dependencies go one way: the protocol frames the runtime's requests and results
// (lua_runtime.h: Limits, Usage, CallResult) and the values of value_encoding.h; the Lua
// runtime never includes this file.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "sandbox/lua_runtime.h"
#include "sandbox/value.h"
#include "sandbox/value_encoding.h"

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
