#include "inference/model/safetensors.h"

#include <sys/mman.h>  // mmap
#include <unistd.h>    // close

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>  // header-only JSON parser

#include "inference/model/model_files.h"

namespace rote::inference {

using Json = nlohmann::json;

StatusOr<std::unique_ptr<MappedFile>> MappedFile::Open(const std::string& path) {
  uint64_t size = 0;
  ROTE_ASSIGN_OR_RETURN(const int fd, OpenRegularFile(path, &size));
  if (size > std::numeric_limits<size_t>::max()) {
    ::close(fd);
    return FailedPrecondition(path + ": " + std::to_string(size) + " bytes do not fit the address space");
  }
  std::unique_ptr<MappedFile> f(new MappedFile());
  f->path_ = path;
  f->size_ = static_cast<size_t>(size);
  if (f->size_ > 0) {
    void* p = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return FailedPrecondition(path + ": cannot map: " + std::strerror(err));
    }
    f->data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return f;
}

StatusOr<std::unique_ptr<MappedFile>> MappedFile::Anonymous(size_t size, const std::string& label,
                                                            const std::function<Status(uint8_t*)>& fill) {
  std::unique_ptr<MappedFile> f(new MappedFile());
  f->path_ = label;
  f->size_ = size;
  if (size == 0) return f;
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return ResourceExhausted(label + ": cannot map " + std::to_string(size) + " bytes: " + std::strerror(errno));
  }
  f->data_ = static_cast<const uint8_t*>(p);  // unmapped by the destructor on any return below
  ROTE_RETURN_IF_ERROR(fill(static_cast<uint8_t*>(p)));
  if (::mprotect(p, size, PROT_READ) != 0) {
    return FailedPrecondition(label + ": cannot make read-only: " + std::strerror(errno));
  }
  return f;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

namespace {

Status Malformed(std::string_view file, std::string_view tensor, const std::string& what) {
  std::string m(file);
  if (!tensor.empty()) m += ": tensor '" + std::string(tensor) + "'";
  return DataLoss(m + ": " + what);
}

}  // namespace

StatusOr<std::vector<SafetensorsTensor>> ParseSafetensors(const uint8_t* data, size_t size,
                                                          std::string_view file_name) {
  if (size < 8) return Malformed(file_name, "", "file is " + std::to_string(size) + " bytes, too short for a header");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | data[i];
  if (header_len > size - 8) {
    return Malformed(file_name, "", "header length " + std::to_string(header_len) + " runs past the end of the " +
                                        std::to_string(size) + "-byte file");
  }
  if (header_len > kMaxSafetensorsHeaderBytes) {
    return Malformed(file_name, "", "header length " + std::to_string(header_len) + " is more than the " +
                                        std::to_string(kMaxSafetensorsHeaderBytes) + " bytes a header may have");
  }
  const char* header = reinterpret_cast<const char*>(data + 8);
  if (!JsonNestingWithin(std::string_view(header, header_len))) {
    return Malformed(file_name, "", "header nests deeper than " + std::to_string(kMaxModelJsonDepth) + " levels");
  }
  Json j = Json::parse(header, header + header_len, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Malformed(file_name, "", "header is not a JSON object");
  const uint8_t* body = data + 8 + header_len;
  const uint64_t body_size = size - 8 - header_len;

  std::vector<SafetensorsTensor> tensors;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // (begin, end) per tensor
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") continue;
    const Json& t = it.value();
    if (!t.is_object()) return Malformed(file_name, name, "entry is not an object");
    auto dt = t.find("dtype");
    if (dt == t.end() || !dt->is_string()) return Malformed(file_name, name, "missing dtype");
    SafetensorsTensor out;
    out.name = name;
    const std::string dtype = dt->get<std::string>();
    if (dtype == "BF16") {
      out.dtype = DType::kBF16;
    } else if (dtype == "F16") {
      out.dtype = DType::kF16;
    } else if (dtype == "F32") {
      out.dtype = DType::kF32;
    } else {
      return Malformed(file_name, name, "unsupported dtype '" + dtype + "' (BF16, F16 or F32)");
    }
    auto sh = t.find("shape");
    if (sh == t.end() || !sh->is_array()) return Malformed(file_name, name, "missing shape");
    uint64_t numel = 1;
    for (const Json& d : *sh) {
      if (!d.is_number_unsigned()) return Malformed(file_name, name, "shape holds a non-integer or negative value");
      const uint64_t dim = d.get<uint64_t>();
      if (dim > (uint64_t{1} << 40) || (dim != 0 && numel > (uint64_t{1} << 40) / dim)) {
        return Malformed(file_name, name, "shape is too large");
      }
      numel *= dim;
      out.shape.push_back(static_cast<int64_t>(dim));
    }
    auto off = t.find("data_offsets");
    if (off == t.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
        !(*off)[1].is_number_unsigned()) {
      return Malformed(file_name, name, "data_offsets must be two non-negative integers");
    }
    const uint64_t begin = (*off)[0].get<uint64_t>();
    const uint64_t end = (*off)[1].get<uint64_t>();
    if (begin > end) return Malformed(file_name, name, "data_offsets begin after they end");
    if (end > body_size) {
      return Malformed(file_name, name, "data_offsets end " + std::to_string(end) + " is past the end of the data (" +
                                            std::to_string(body_size) + " bytes)");
    }
    const uint64_t want = numel * static_cast<uint64_t>(DTypeSize(out.dtype));
    if (end - begin != want) {
      return Malformed(file_name, name, "shape and dtype " + dtype + " need " + std::to_string(want) +
                                            " bytes but data_offsets span " + std::to_string(end - begin));
    }
    out.data = body + begin;
    out.size_bytes = static_cast<int64_t>(want);
    tensors.push_back(std::move(out));
    ranges.emplace_back(begin, end);
  }
  // The byte ranges must tile the data exactly: no overlap, no gap, nothing left over.
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return ranges[a] != ranges[b] ? ranges[a] < ranges[b] : tensors[a].name < tensors[b].name;
  });
  uint64_t pos = 0;
  for (size_t k = 0; k < order.size(); ++k) {
    const size_t i = order[k];
    if (ranges[i].first < pos) {
      return Malformed(file_name, tensors[i].name,
                       "data_offsets [" + std::to_string(ranges[i].first) + ", " + std::to_string(ranges[i].second) +
                           ") overlap tensor '" + tensors[order[k - 1]].name + "'");
    }
    if (ranges[i].first > pos) {
      return Malformed(file_name, tensors[i].name,
                       "gap of " + std::to_string(ranges[i].first - pos) + " unused bytes before its data_offsets");
    }
    pos = ranges[i].second;
  }
  if (pos != body_size) {
    return Malformed(file_name, "", std::to_string(body_size - pos) + " bytes after the last tensor belong to none");
  }
  std::sort(tensors.begin(), tensors.end(),
            [](const SafetensorsTensor& a, const SafetensorsTensor& b) { return a.name < b.name; });
  return tensors;
}

StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  ROTE_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> mapped, MappedFile::Open(path));
  return FromMapping(std::move(mapped));
}

StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::FromMapping(std::unique_ptr<MappedFile> mapped) {
  ROTE_ASSIGN_OR_RETURN(std::vector<SafetensorsTensor> tensors,
                        ParseSafetensors(mapped->data(), mapped->size(), mapped->path()));
  auto f = std::make_unique<SafetensorsFile>();
  f->file_ = std::move(mapped);
  f->tensors_ = std::move(tensors);
  return f;
}

StatusOr<std::map<std::string, std::string>> ParseSafetensorsIndex(std::string_view index_json,
                                                                  std::string_view file_name) {
  const std::string where(file_name);
  StatusOr<Json> parsed = ParseJsonObject(index_json, where);
  if (!parsed.ok()) return DataLoss(parsed.status().message());
  const Json& j = *parsed;
  auto wm = j.find("weight_map");
  if (wm == j.end() || !wm->is_object()) return DataLoss(where + ": field 'weight_map' is missing or not an object");
  std::map<std::string, std::string> index;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    const std::string field = "field 'weight_map[\"" + it.key() + "\"]'";
    if (!it.value().is_string()) return DataLoss(where + ": " + field + " is not a file name");
    const std::string& file = it.value().get_ref<const std::string&>();
    // A shard is a plain file of this directory: no path (so no "../" and no absolute path), no
    // hidden or control characters, and the safetensors suffix, so it cannot name config.json or
    // anything else the directory holds.
    constexpr std::string_view kSuffix = ".safetensors";
    const bool plain = !file.empty() && file.size() <= 255 && file[0] != '.' &&
                       std::none_of(file.begin(), file.end(), [](char ch) {
                         const auto c = static_cast<unsigned char>(ch);
                         return c == '/' || c == '\\' || c < 0x20 || c == 0x7f;
                       });
    if (!plain || file.size() <= kSuffix.size() ||
        file.compare(file.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0) {
      return DataLoss(where + ": " + field + " names '" + file +
                      "', not a *.safetensors file directly inside the model directory");
    }
    index.emplace(it.key(), file);
  }
  return index;
}

const SafetensorsTensor* SafetensorsFile::Find(std::string_view name) const {
  auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                             [](const SafetensorsTensor& t, std::string_view n) { return t.name < n; });
  if (it == tensors_.end() || it->name != name) return nullptr;
  return &*it;
}

std::string SerializeSafetensors(const std::vector<SafetensorsWriteTensor>& tensors) {
  Json header = Json::object();
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    Json e;
    e["dtype"] = std::string(DTypeName(t.dtype));
    e["shape"] = t.shape;
    e["data_offsets"] = {offset, offset + t.bytes.size()};
    offset += t.bytes.size();
    header[t.name] = e;
  }
  header["__metadata__"] = {{"format", "pt"}};
  std::string h = header.dump();
  while (h.size() % 8 != 0) h.push_back(' ');
  std::string out;
  out.reserve(8 + h.size() + offset);
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out += h;
  for (const auto& t : tensors) out += t.bytes;
  return out;
}

}  // namespace rote::inference
