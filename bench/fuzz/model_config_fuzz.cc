// config.json and generation_config.json of a model directory, cut at fuzz_util.h's separator.
// ParseModelConfig and ValidateModelConfig must answer with a status, never crash; a config they
// accept must have the sizes the engine allocates by (positive, heads dividing evenly).
#include <cstdint>

#include "bench/fuzz/fuzz_util.h"
#include "inference/model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rote::inference;
  std::vector<std::string_view> parts = rote::fuzz::SplitParts(data, size, 2);
  StatusOr<ModelConfig> config = ParseModelConfig(parts[0], parts[1], "fuzz/config.json");
  if (!config.ok()) return 0;
  if (!ValidateModelConfig(*config).ok()) return 0;
  const ModelConfig& c = *config;
  ROTE_FUZZ_CHECK(c.vocab_size > 0 && c.hidden_size > 0 && c.intermediate_size > 0);
  ROTE_FUZZ_CHECK(c.num_layers > 0 && c.num_heads > 0 && c.num_kv_heads > 0 && c.head_dim > 0);
  ROTE_FUZZ_CHECK(c.num_heads % c.num_kv_heads == 0);
  ROTE_FUZZ_CHECK(c.head_dim % 2 == 0);
  // The products the engine sizes its buffers by must not overflow int32.
  ROTE_FUZZ_CHECK(static_cast<int64_t>(c.num_heads) * c.head_dim == c.q_dim());
  ROTE_FUZZ_CHECK(static_cast<int64_t>(c.num_kv_heads) * c.head_dim == c.kv_dim());
  return 0;
}
