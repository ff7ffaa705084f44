// Choosing the next token from fp32 logits (docs/numerics.md section 6). Runs on the host for
// every backend. Random numbers are keyed on (seed, request key, position), never on a
// stream's history, so sampling is batch-invariant like the logits.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace rote::inference {

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy (argmax, lowest index on ties)
  int32_t top_k = 0;         // keep the k most likely; 0: all
  float top_p = 1.0f;        // nucleus: smallest prefix of the sorted tokens with mass >= top_p
  uint64_t seed = 0;
  int32_t max_tokens = 256;         // generated tokens at most
  std::vector<std::string> stop;    // stop sequences (text); the match is not part of the output
  bool ignore_eos = false;          // keep going past the model's end-of-sequence tokens
};

// Argmax, lowest index on ties; NaN never wins (all NaN: 0).
int32_t ArgmaxLowestIndex(std::span<const float> logits);

// The uniform number in [0, 1) for this (seed, request key, position): 24 random bits.
float SamplingUniform(uint64_t seed, uint64_t request_key, uint64_t position);

// Greedy when temperature is 0, otherwise temperature / top-k / top-p sampling with the
// canonical sums. `position` is the absolute position of the token being chosen.
int32_t SampleToken(std::span<const float> logits, const SamplingParams& params, uint64_t request_key,
                    uint64_t position);

// Sets logits[t] to -inf for every token t whose bit (bit t % 64 of mask[t / 64]) is clear: the
// grammar mask, applied before a rule chooses. A row with no bit set is left as it is (the
// caller ends such a request rather than choose from nothing).
void ApplyTokenMask(std::span<float> logits, std::span<const uint64_t> mask);
// Whether any of the first `vocab` bits of the mask is set.
bool AnyTokenAllowed(std::span<const uint64_t> mask, size_t vocab);

// One logits row's rule with its uniform already drawn (SamplingUniform): what a backend that
// samples where the logits are needs from the host.
struct RowSampling {
  float temperature = 0.0f;  // <= 0: greedy
  int32_t top_k = 0;
  float top_p = 1.0f;
  float uniform = 0.0f;
};
RowSampling RowSamplingFor(const SamplingParams& params, uint64_t request_key, uint64_t position);

// SampleToken's rule with the uniform given: SampleToken(l, p, key, pos) ==
// SampleTokenWithUniform(l, RowSamplingFor(p, key, pos)).
int32_t SampleTokenWithUniform(std::span<const float> logits, const RowSampling& rule);

}  // namespace rote::inference
