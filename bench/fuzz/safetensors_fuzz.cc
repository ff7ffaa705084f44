// A safetensors file as downloaded: the 8-byte header length, the JSON header, the data.
// ParseSafetensors must reject anything malformed with a status; what it accepts must describe
// tensors that lie inside the data, tile it, and are as long as shape and dtype say.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "bench/fuzz/fuzz_util.h"
#include "inference/model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rote::inference;
  StatusOr<std::vector<SafetensorsTensor>> parsed = ParseSafetensors(data, size, "fuzz.safetensors");
  if (!parsed.ok()) {
    ROTE_FUZZ_CHECK(!parsed.status().message().empty());
    return 0;
  }
  uint64_t header_len = 0;
  std::memcpy(&header_len, data, 8);  // little-endian hosts only, as rote itself
  const uint8_t* body = data + 8 + header_len;
  const uint8_t* end = data + size;
  uint64_t covered = 0;
  uint8_t sink = 0;
  for (size_t i = 0; i < parsed->size(); ++i) {
    const SafetensorsTensor& t = (*parsed)[i];
    if (i > 0) ROTE_FUZZ_CHECK((*parsed)[i - 1].name < t.name);
    ROTE_FUZZ_CHECK(t.name != "__metadata__");
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      ROTE_FUZZ_CHECK(d >= 0);
      numel *= static_cast<uint64_t>(d);
    }
    ROTE_FUZZ_CHECK(t.size_bytes >= 0);
    ROTE_FUZZ_CHECK(numel * static_cast<uint64_t>(DTypeSize(t.dtype)) == static_cast<uint64_t>(t.size_bytes));
    ROTE_FUZZ_CHECK(t.data >= body && t.data <= end && static_cast<uint64_t>(end - t.data) >= static_cast<uint64_t>(t.size_bytes));
    // Read every byte the tensor claims: ASan reports any that are not the input's.
    for (int64_t b = 0; b < t.size_bytes; ++b) sink ^= t.data[b];
    covered += static_cast<uint64_t>(t.size_bytes);
  }
  // The tensors tile the data exactly, so their lengths add up to it.
  ROTE_FUZZ_CHECK(covered == static_cast<uint64_t>(end - body));
  volatile uint8_t keep = sink;
  (void)keep;
  return 0;
}
