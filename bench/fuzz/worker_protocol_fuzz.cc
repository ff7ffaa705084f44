// The wire protocol between WorkerPool and rote-sandbox-worker (sandbox/worker_protocol.h).
// The parent decodes everything a worker sends as untrusted input. The first byte picks the
// decoder the rest goes to: 0 a request (eagerly and lazily), 1 a response, 2 a value. Whatever
// decodes must encode back to the same bytes: the encoding is lossless and has one spelling per
// value, so no two decoders (the parent's, the worker's Lua one) can read one message two ways.
#include <cstdint>

#include "bench/fuzz/fuzz_util.h"
#include "sandbox/worker_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rote::sandbox;
  if (size < 1) return 0;
  const std::string_view payload(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 3) {
    case 0: {
      absl::StatusOr<protocol::Request> eager = protocol::DecodeRequest(payload);
      absl::StatusOr<protocol::EncodedRequest> lazy = protocol::DecodeRequestLazily(payload);
      ROTE_FUZZ_CHECK(eager.ok() == lazy.ok());
      if (!eager.ok()) return 0;
      ROTE_FUZZ_CHECK(eager->inputs.size() == lazy->inputs.size());
      ROTE_FUZZ_CHECK(eager->chunkname == lazy->chunkname && eager->source == lazy->source);
      for (size_t i = 0; i < eager->inputs.size(); ++i) {
        absl::StatusOr<Value> v = protocol::DecodeValue(lazy->inputs[i]);
        ROTE_FUZZ_CHECK(v.ok() && *v == eager->inputs[i]);
      }
      ROTE_FUZZ_CHECK(protocol::EncodeRequest(*eager) == payload);
      return 0;
    }
    case 1: {
      absl::StatusOr<protocol::Response> response = protocol::DecodeResponse(payload);
      if (!response.ok()) return 0;
      ROTE_FUZZ_CHECK(protocol::EncodeResponse(*response) == payload);
      return 0;
    }
    default: {
      absl::StatusOr<Value> value = protocol::DecodeValue(payload);
      if (!value.ok()) return 0;
      std::string wire;
      protocol::EncodeValue(*value, wire);
      ROTE_FUZZ_CHECK(wire == payload);
      return 0;
    }
  }
}
