// The seam between the generation pipeline and the model that writes code. The server plugs in
// the in-process inference engine (inference_code_model.h); tests plug in a scripted double.
//
// The pipeline hands over every prompt it has at one moment in one CompleteAll call (all the
// generation points of a run, attempt k of each), so they share the engine's batches. With the
// exact numerics profile a completion's bytes do not depend on what else is in the batch, so
// the result is the same whether a prompt goes alone or with others.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace rote::orchestrator::generate {

struct ChatTurn {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

// Decoding parameters: part of every request digest and of the artifact's provenance.
struct Decoding {
  float temperature = 0.0f;  // 0: greedy
  int32_t top_k = 0;
  float top_p = 1.0f;
  uint64_t seed = 0;
  int32_t max_tokens = 512;
  // Attempts of the pipeline's retry chain (the model itself never sees this). Part of the
  // request: the chain is deterministic, but a request allowing fewer attempts may fail where
  // one allowing more succeeds.
  int32_t max_attempts = 3;
  // The temperature of attempts 2 and later when `temperature` is 0: the first attempt is
  // greedy, later ones sample with a key derived from the request digest and the attempt number,
  // so a retry explores instead of repeating what failed, and the same request still gives the
  // same bytes. 0: every attempt greedy.
  float retry_temperature = 0.0f;
  // Asking again on purpose: a failed request is answered from its record without calling the
  // model; the same request with retry N + 1 is another request (its digest differs).
  int32_t retry = 0;
  // The digest (inference::GrammarDigest) of the grammar every attempt was held to: the point
  // kind's reply grammar with the sandbox's names (ReplyConstraint); empty: unconstrained.
  // The pipeline sets it, never a client: it follows from the server's --grammar setting.
  std::string grammar;
};

// The grammar a completion must follow (inference::GrammarConstraint without its dependency):
// a shipped grammar's name or a grammar's text, and the globals a Lua reply may read.
struct CompletionConstraint {
  std::string grammar;  // empty: unconstrained
  std::optional<std::vector<std::string>> allowed_globals;
};

// The decoding of attempt `attempt` (from 1) of a request decoded with `d`.
Decoding AttemptDecoding(const Decoding& d, int32_t attempt);

// {"max_attempts":..,"max_tokens":..,"seed":"..","temperature":..,"top_k":..,"top_p":..} as
// canonical JSON (the seed as a decimal string: it is a uint64), plus "retry_temperature" and
// "retry" only when they are not 0 and "grammar" only when set, so requests made without them
// keep their digests.
std::string DecodingJson(const Decoding& decoding);
// Reads DecodingJson's output back; INVALID_ARGUMENT names the bad field.
absl::StatusOr<Decoding> ParseDecodingJson(std::string_view json);
// Ranges the pipeline accepts (temperature and retry_temperature >= 0, 0 < top_p <= 1,
// 1 <= max_tokens <= 8192, 1 <= max_attempts <= 10, 0 <= retry <= 1000); INVALID_ARGUMENT names
// the field.
absl::Status CheckDecoding(const Decoding& decoding);

// The wall clock in unix milliseconds, for the times attempts record.
int64_t UnixNowMs();

struct CompletionRequest {
  std::vector<ChatTurn> messages;
  Decoding decoding;
  // Keys the sampling random numbers (with decoding.seed and the position); the pipeline derives
  // it from the request digest and the attempt, so sampling never depends on submission order.
  uint64_t sampling_key = 0;
  CompletionConstraint constraint;
  // Called on the thread that called CompleteAll with newly generated text and the number of
  // tokens generated so far. May be empty.
  std::function<void(std::string_view text, int32_t tokens)> on_text;
  // Called on the same thread with the prompt tokens read so far and the prompt's length, as
  // the model reads a prompt (a model that cannot tell does not call it). May be empty.
  std::function<void(int32_t read, int32_t prompt)> on_prefill;
};

struct Completion {
  std::string text;  // the raw output (bytes as decoded; not necessarily valid UTF-8)
  int32_t tokens = 0;
  std::string finish_reason;  // "eos", "stop", "length", "cancelled", "grammar"
  // Tokens of the prompt as the model read it (0: not known).
  int32_t prompt_tokens = 0;
  // When the model started on the request (unix ms) and how long it took (0: not known; the
  // pipeline then records the batch's wall time). Metadata only, never part of a digest.
  int64_t start_ms = 0;
  int64_t duration_ms = 0;
  // The digest of the grammar the model was held to, as the model reports it (empty: none).
  std::string grammar_digest{};
};

// What the provenance of a generated artifact says about the model.
struct ModelIdentity {
  std::string digest;                      // over config, tokenizer and weights
  std::string numerics_profile = "exact";  // "exact", or the fast profile's versioned name ("fast5-sm90")
  std::string device;                      // "cpu", "cuda:0", ...
};

class CodeModel {
 public:
  virtual ~CodeModel() = default;
  virtual ModelIdentity identity() const = 0;
  // The exact text the model reads for these messages (its chat template applied, the
  // generation prompt added): what the pipeline stores as an attempt's prompt.
  virtual std::string RenderPrompt(const std::vector<ChatTurn>& messages) const = 0;
  // Runs the requests together and returns one result per request, in order. `cancelled` is
  // polled while they run; once it returns true every request is cancelled (its result is then
  // CANCELLED). Thread-safe: concurrent calls share the model.
  virtual std::vector<absl::StatusOr<Completion>> CompleteAll(std::vector<CompletionRequest> requests,
                                                              const std::function<bool()>& cancelled) = 0;
};

}  // namespace rote::orchestrator::generate
