// SHA-256 (FIPS 180-4), small and dependency-free: `inference` may not link OpenSSL. Used for the
// model digest; tested against the standard vectors.
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

 private:
  void Block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

std::string Sha256Hex(std::string_view data);

}  // namespace rote::inference
