// Safetensors files, memory-mapped read-only and checked before any tensor is used: a malformed
// file (header past the end, overlapping or gapped offsets, shape and dtype that disagree with
// the byte length, unknown dtype) is an error naming the file and tensor, never a crash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "inference/model/config.h"
#include "inference/status.h"

namespace rote::inference {

// A whole regular file mapped read-only (PROT_READ, MAP_PRIVATE); unmapped on destruction. Opened
// without blocking; a FIFO, device or directory is refused (FAILED_PRECONDITION).
class MappedFile {
 public:
  static StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path);
  // `size` bytes of anonymous memory that `fill` writes, then made read-only; `label` is its
  // path() in messages. An error from `fill` is returned (the memory is released).
  static StatusOr<std::unique_ptr<MappedFile>> Anonymous(size_t size, const std::string& label,
                                                         const std::function<Status(uint8_t*)>& fill);
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

// The largest header a safetensors file may have (the reference implementation's limit).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// Parses and checks a safetensors image held in memory (the bytes must outlive the result).
// `file_name` is used in error messages. Tensors are returned in name order. Memory taken is
// bounded by the header's length. A fuzzing entry point: any bytes give a result or an error.
StatusOr<std::vector<SafetensorsTensor>> ParseSafetensors(const uint8_t* data, size_t size,
                                                          std::string_view file_name);

// Parses model.safetensors.index.json: its weight_map, tensor name -> shard file. Each shard must be
// a *.safetensors file directly inside the model directory (no path separator, no leading dot, no
// control character), so an index cannot reach outside it. Errors (DATA_LOSS) name `file_name`
// and the field. A fuzzing entry point.
StatusOr<std::map<std::string, std::string>> ParseSafetensorsIndex(std::string_view index_json,
                                                                  std::string_view file_name);

class SafetensorsFile {
 public:
  static StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  // The same checks over a mapping already made (MappedFile::Anonymous).
  static StatusOr<std::unique_ptr<SafetensorsFile>> FromMapping(std::unique_ptr<MappedFile> mapped);
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
