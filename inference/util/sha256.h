// SHA-256 (FIPS 180-4), small and dependency-free: `inference` may not link OpenSSL. Used for the
// model digest (every byte of the weights at each load) and the orchestrator's content hashes;
// tested against the standard vectors. Where the CPU has the SHA extensions (x86 SHA-NI), blocks
// run on them, 4x-8x faster than the portable code (bench_sha256); the digest is the same
// (tested against it).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace rote::inference {

class Sha256 {
 public:
  Sha256();
  void Update(const void* data, size_t size);
  void Update(std::string_view s) { Update(s.data(), s.size()); }
  std::array<uint8_t, 32> Finish();  // the hasher must not be used afterwards
  std::string FinishHex();

  // Whether blocks run on the CPU's SHA extensions. Testing: false forces the portable code
  // (process-wide; the digests are the same either way).
  static bool UsesShaExtensions();
  static void SetShaExtensionsForTesting(bool on);

 private:
  void Blocks(const uint8_t* p, size_t count);  // `count` 64-byte blocks
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

std::string Sha256Hex(std::string_view data);

}  // namespace rote::inference
