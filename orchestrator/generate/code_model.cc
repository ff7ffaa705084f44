#include "orchestrator/generate/code_model.h"

#include <charconv>
#include <chrono>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "sandbox/value.h"

namespace rote::orchestrator::generate {

using sandbox::Map;
using sandbox::Value;

int64_t UnixNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string DecodingJson(const Decoding& d) {
  Map m;
  m["max_attempts"] = Value::Int(d.max_attempts);
  m["max_tokens"] = Value::Int(d.max_tokens);
  // The seed is a uint64; JSON integers here are int64, so it travels as its decimal string.
  m["seed"] = Value::String(std::to_string(d.seed));
  // Floats widen exactly to double and come back exactly.
  m["temperature"] = Value::Float(static_cast<double>(d.temperature));
  m["top_k"] = Value::Int(d.top_k);
  m["top_p"] = Value::Float(static_cast<double>(d.top_p));
  if (d.retry_temperature != 0.0f) m["retry_temperature"] = Value::Float(static_cast<double>(d.retry_temperature));
  if (d.retry != 0) m["retry"] = Value::Int(d.retry);
  if (!d.grammar.empty()) m["grammar"] = Value::String(d.grammar);
  absl::StatusOr<std::string> json = sandbox::CanonicalJson(Value::FromMap(std::move(m)));
  // Only NaN or infinity could fail, and CheckDecoding refuses those before anything is encoded.
  return json.ok() ? *json : std::string("{\"error\":\"decoding has no canonical form\"}");
}

absl::StatusOr<Decoding> ParseDecodingJson(std::string_view json) {
  absl::StatusOr<Value> v = sandbox::ParseJson(json);
  if (!v.ok()) return absl::InvalidArgumentError(absl::StrCat("decoding JSON: ", v.status().message()));
  if (!v->is_map()) return absl::InvalidArgumentError("decoding JSON must be an object");
  const Map& m = v->as_map();
  auto field = [&](const char* name) -> const Value* {
    auto it = m.find(name);
    return it == m.end() ? nullptr : &it->second;
  };
  Decoding d;
  const Value* max_attempts = field("max_attempts");
  const Value* max_tokens = field("max_tokens");
  const Value* seed = field("seed");
  const Value* temperature = field("temperature");
  const Value* top_k = field("top_k");
  const Value* top_p = field("top_p");
  if (max_attempts == nullptr || !max_attempts->is_int()) return absl::InvalidArgumentError("decoding: max_attempts must be an integer");
  if (max_tokens == nullptr || !max_tokens->is_int()) return absl::InvalidArgumentError("decoding: max_tokens must be an integer");
  if (seed == nullptr || !seed->is_string()) return absl::InvalidArgumentError("decoding: seed must be a decimal string");
  if (temperature == nullptr || !temperature->is_float()) return absl::InvalidArgumentError("decoding: temperature must be a float");
  if (top_k == nullptr || !top_k->is_int()) return absl::InvalidArgumentError("decoding: top_k must be an integer");
  if (top_p == nullptr || !top_p->is_float()) return absl::InvalidArgumentError("decoding: top_p must be a float");
  const Value* retry_temperature = field("retry_temperature");
  const Value* retry = field("retry");
  if (retry_temperature != nullptr && !retry_temperature->is_float()) {
    return absl::InvalidArgumentError("decoding: retry_temperature must be a float");
  }
  if (retry != nullptr && !retry->is_int()) return absl::InvalidArgumentError("decoding: retry must be an integer");
  const Value* grammar = field("grammar");
  if (grammar != nullptr && !grammar->is_string()) return absl::InvalidArgumentError("decoding: grammar must be a string");
  if (m.size() != 6u + (retry_temperature != nullptr) + (retry != nullptr) + (grammar != nullptr)) {
    return absl::InvalidArgumentError(
        "decoding: unknown fields (expected max_attempts, max_tokens, seed, temperature, top_k, top_p and "
        "optionally retry_temperature, retry, grammar)");
  }
  if (grammar != nullptr) d.grammar = grammar->as_string();
  if (retry_temperature != nullptr) d.retry_temperature = static_cast<float>(retry_temperature->as_float());
  if (retry != nullptr) d.retry = static_cast<int32_t>(retry->as_int());
  d.max_attempts = static_cast<int32_t>(max_attempts->as_int());
  d.max_tokens = static_cast<int32_t>(max_tokens->as_int());
  {
    const std::string& text = seed->as_string();
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), d.seed);
    if (ec != std::errc() || end != text.data() + text.size() || text.empty()) {
      return absl::InvalidArgumentError("decoding: seed must be a decimal string");
    }
  }
  d.temperature = static_cast<float>(temperature->as_float());
  d.top_k = static_cast<int32_t>(top_k->as_int());
  d.top_p = static_cast<float>(top_p->as_float());
  if (absl::Status s = CheckDecoding(d); !s.ok()) return s;
  return d;
}

absl::Status CheckDecoding(const Decoding& d) {
  if (!std::isfinite(d.temperature) || d.temperature < 0.0f) {
    return absl::InvalidArgumentError("decoding: temperature must be a finite number >= 0 (0 is greedy)");
  }
  if (!std::isfinite(d.top_p) || d.top_p <= 0.0f || d.top_p > 1.0f) {
    return absl::InvalidArgumentError("decoding: top_p must be in (0, 1]");
  }
  if (d.top_k < 0) return absl::InvalidArgumentError("decoding: top_k must be >= 0 (0 keeps every token)");
  if (d.max_tokens < 1 || d.max_tokens > 8192) {
    return absl::InvalidArgumentError("decoding: max_tokens must be between 1 and 8192");
  }
  if (d.max_attempts < 1 || d.max_attempts > 10) {
    return absl::InvalidArgumentError("decoding: max_attempts must be between 1 and 10");
  }
  if (!std::isfinite(d.retry_temperature) || d.retry_temperature < 0.0f) {
    return absl::InvalidArgumentError("decoding: retry_temperature must be a finite number >= 0 (0: greedy retries)");
  }
  if (d.retry < 0 || d.retry > 1000) return absl::InvalidArgumentError("decoding: retry must be between 0 and 1000");
  if (!d.grammar.empty() &&
      (d.grammar.size() != 64 || d.grammar.find_first_not_of("0123456789abcdef") != std::string::npos)) {
    return absl::InvalidArgumentError("decoding: grammar must be a sha256 digest (64 lowercase hex digits)");
  }
  return absl::OkStatus();
}

Decoding AttemptDecoding(const Decoding& d, int32_t attempt) {
  Decoding out = d;
  if (attempt > 1 && d.temperature == 0.0f && d.retry_temperature > 0.0f) out.temperature = d.retry_temperature;
  return out;
}

}  // namespace rote::orchestrator::generate
