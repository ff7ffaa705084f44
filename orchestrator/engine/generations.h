// Reading provenance: generation requests (passed and failed) with their attempts, one attempt
// whole (the prompt the model read, its raw output, the extracted code), and a run's journaled
// steps with the values that went in and out. Reads only; the generation pipeline writes.
//
// Names:
//   generations/{request hex}                     64 lowercase hex digits
//   generations/{request hex}/attempts/{n}        n: 1, 2, ... (no leading zeros)
//   artifacts/{digest hex}/attempts/{n}
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "store/store.h"

namespace rote::orchestrator::engine {

// One attempt with its texts and the generation it belongs to.
struct AttemptView {
  std::string name;  // as asked for
  store::GenerationAttempt attempt;
  // The texts whole, as stored (the raw output need not be UTF-8); empty when not recorded.
  std::string prompt, output, code;
  std::string model_digest, decoding_json, device, numerics_profile, prompt_template_version;
  std::string generation;  // generations/{request hex}; empty for hand-written code
};

// A journaled step with its values inline when small enough.
struct StepView {
  store::StepRecord step;
  std::string input_json, output_json;
  bool input_omitted = false, output_omitted = false;
  int64_t input_size_bytes = 0, output_size_bytes = 0;
};

// generations/{hex} -> "sha256:{hex}"; INVALID_ARGUMENT for anything else.
absl::StatusOr<std::string> ParseGenerationName(std::string_view name);
// "generations/{hex}" for a request digest.
std::string GenerationName(std::string_view request_digest);
// UTF-8 `text` cut to at most `max_bytes` without splitting a character; sets *truncated
// when it cut.
std::string CutUtf8(std::string text, int64_t max_bytes, bool* truncated);

class ProvenanceReader {
 public:
  explicit ProvenanceReader(store::Store* store) : store_(store) {}

  absl::StatusOr<store::GenerationRecord> GetGeneration(std::string_view name);
  // `generation_point` empty or a point key ("{blueprint}/{point}", "_adhoc/{point}").
  absl::StatusOr<store::Page<store::GenerationRecord>> ListGenerations(std::string_view generation_point,
                                                                       bool failed_only,
                                                                       const store::PageRequest& page);
  absl::StatusOr<AttemptView> GetAttempt(std::string_view name);
  // Values larger than `max_value_bytes` are omitted (flagged, with size and digest).
  absl::StatusOr<store::Page<StepView>> ListRunSteps(const store::RunRecord& run, int64_t max_value_bytes,
                                                     const store::PageRequest& page);

 private:
  store::Store* const store_;
};

}  // namespace rote::orchestrator::engine
