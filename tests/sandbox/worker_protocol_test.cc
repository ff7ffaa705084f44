// The worker wire protocol read as untrusted input: one spelling per message, so what the parent
// decodes is exactly what an encoder wrote (bench/fuzz/worker_protocol_fuzz.cc checks the same
// property on random bytes).
#include "sandbox/worker_protocol.h"

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <utility>

namespace rote::sandbox::protocol {
namespace {

// A map in the binary encoding with its entries in the order given (EncodeValue sorts them).
std::string RawMap(std::initializer_list<std::pair<std::string, Value>> entries) {
  std::string out(1, static_cast<char>(kTagMap));
  PutU64(out, entries.size());
  for (const auto& [key, value] : entries) {
    PutU64(out, key.size());
    out += key;
    EncodeValue(value, out);
  }
  return out;
}

std::string RequestWithInput(const std::string& encoded_input) {
  std::string out = EncodeRequest("=t", "return function(x) return x end", Limits{}, {});
  // EncodeRequest ends with the input count (0 here): replace it by one input.
  out.resize(out.size() - 8);
  PutU64(out, 1);
  return out + encoded_input;
}

TEST(WorkerProtocol, EncodingRoundTripsByteForByte) {
  Map inner;
  inner["z"] = Value::Float(-0.0);
  inner["\xff"] = Value::String(std::string("\0\1", 2));
  Map m;
  m["b"] = Value::FromArray({Value::Int(-1), Value::Nil(), Value::FromMap(inner)});
  m["a"] = Value::Bool(true);
  std::string bytes;
  EncodeValue(Value::FromMap(m), bytes);
  absl::StatusOr<Value> v = DecodeValue(bytes);
  ASSERT_TRUE(v.ok()) << v.status();
  std::string again;
  EncodeValue(*v, again);
  EXPECT_EQ(again, bytes);
  EXPECT_TRUE(DecodeValue(RawMap({{"a", Value::Int(1)}, {"b", Value::Int(2)}})).ok());
}

TEST(WorkerProtocol, MapKeysOutOfOrderAreMalformed) {
  const std::string unsorted = RawMap({{"b", Value::Int(2)}, {"a", Value::Int(1)}});
  EXPECT_FALSE(DecodeValue(unsorted).ok());
  // Keys compare as unsigned bytes: "\xff" sorts after "a".
  EXPECT_FALSE(DecodeValue(RawMap({{"\xff", Value::Nil()}, {"a", Value::Nil()}})).ok());
  // Nested, and in both request decoders (the worker validates lazily).
  std::string nested(1, static_cast<char>(kTagArray));
  PutU64(nested, 1);
  nested += unsorted;
  EXPECT_FALSE(DecodeValue(nested).ok());
  EXPECT_FALSE(DecodeRequest(RequestWithInput(nested)).ok());
  EXPECT_FALSE(DecodeRequestLazily(RequestWithInput(nested)).ok());
  const std::string sorted = RawMap({{"a", Value::Int(1)}, {"b", Value::Int(2)}});
  EXPECT_TRUE(DecodeRequest(RequestWithInput(sorted)).ok());
  EXPECT_TRUE(DecodeRequestLazily(RequestWithInput(sorted)).ok());
}

TEST(WorkerProtocol, RepeatedMapKeyIsMalformed) {
  // Which of two equal keys wins is a policy nobody should depend on: the parent's decoder kept
  // the first, the worker's Lua decoder the last.
  const std::string repeated = RawMap({{"k", Value::Int(1)}, {"k", Value::Int(2)}});
  EXPECT_FALSE(DecodeValue(repeated).ok());
  EXPECT_FALSE(DecodeRequest(RequestWithInput(repeated)).ok());
  EXPECT_FALSE(DecodeRequestLazily(RequestWithInput(repeated)).ok());
}

TEST(WorkerProtocol, OkStatusWithMessageIsMalformed) {
  Response r;
  r.results.push_back(CallResult{absl::OkStatus(), Value::Int(7), "out", Usage{}});
  std::string bytes = EncodeResponse(r);
  ASSERT_TRUE(DecodeResponse(bytes).ok());
  // The batch status follows the magic and the `more` byte: code 0, then an empty message. An
  // OK status cannot carry one (absl drops it), so a message there is not what an encoder wrote.
  const size_t message_length_at = 4 + 1 + 4;
  std::string tampered = bytes.substr(0, message_length_at);
  PutU64(tampered, 2);
  tampered += "hi";
  tampered += bytes.substr(message_length_at + 8);
  EXPECT_FALSE(DecodeResponse(tampered).ok());
}

}  // namespace
}  // namespace rote::sandbox::protocol
