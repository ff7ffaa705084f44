// model.safetensors.index.json: the map from tensor name to shard file of a sharded model.
// ParseSafetensorsIndex must answer with a status; every shard it accepts must be a plain
// *.safetensors file name inside the model directory, so the index cannot reach outside it.
#include <cstdint>
#include <string>

#include "bench/fuzz/fuzz_util.h"
#include "inference/model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rote::inference;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto index = ParseSafetensorsIndex(text, "fuzz/model.safetensors.index.json");
  if (!index.ok()) return 0;
  constexpr std::string_view kSuffix = ".safetensors";
  for (const auto& [tensor, file] : *index) {
    ROTE_FUZZ_CHECK(file.size() > kSuffix.size() && file.ends_with(kSuffix));
    ROTE_FUZZ_CHECK(file[0] != '.');
    ROTE_FUZZ_CHECK(file.find('/') == std::string::npos && file.find('\\') == std::string::npos);
    for (char ch : file) ROTE_FUZZ_CHECK(static_cast<unsigned char>(ch) >= 0x20 && ch != 0x7f);
  }
  return 0;
}
