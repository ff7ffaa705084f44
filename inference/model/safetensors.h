// Safetensors files, memory-mapped read-only and checked before any tensor is used: a malformed
// file (header past the end, overlapping or gapped offsets, shape and dtype that disagree with
// the byte length, unknown dtype) is an error naming the file and tensor, never a crash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "inference/model/config.h"
#include "inference/status.h"

namespace rote::inference {

// A whole file mapped read-only (PROT_READ, MAP_PRIVATE); unmapped on destruction.
class MappedFile {
 public:
  static StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

struct SafetensorsTensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // inside the mapping; not necessarily aligned
  int64_t size_bytes = 0;
};

// Parses and checks a safetensors image held in memory (the bytes must outlive the result).
// `file_name` is used in error messages. Tensors are returned in name order.
StatusOr<std::vector<SafetensorsTensor>> ParseSafetensors(const uint8_t* data, size_t size,
                                                          std::string_view file_name);

class SafetensorsFile {
 public:
  static StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsTensor* Find(std::string_view name) const;
  const std::string& path() const { return file_->path(); }
  std::unique_ptr<MappedFile> ReleaseMapping() { return std::move(file_); }

 private:
  std::unique_ptr<MappedFile> file_;
  std::vector<SafetensorsTensor> tensors_;
};

// Writes a safetensors image: tensors in the order given, header padded with spaces to a
// multiple of 8 bytes (as the reference writer does). Used by `model synth` and tests.
struct SafetensorsWriteTensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::string bytes;  // numel * DTypeSize(dtype) bytes, little-endian
};
std::string SerializeSafetensors(const std::vector<SafetensorsWriteTensor>& tensors);

}  // namespace rote::inference
