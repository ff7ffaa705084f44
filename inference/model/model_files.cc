#include "inference/model/model_files.h"

#include <fcntl.h>     // open
#include <sys/stat.h>  // fstat
#include <unistd.h>    // read, close

#include <cerrno>
#include <cmath>
#include <cstring>

namespace rote::inference {

namespace {

std::string FileKind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

std::string Short(double x) {
  std::string s = std::to_string(x);
  while (s.size() > 1 && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

std::string Range(int64_t lo, int64_t hi) { return "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]"; }

}  // namespace

StatusOr<int> OpenRegularFile(const std::string& path, uint64_t* size) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, forever.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return NotFound(path + ": no such file");
    return FailedPrecondition(path + ": cannot open: " + std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return FailedPrecondition(path + ": cannot stat: " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return FailedPrecondition(path + ": is " + FileKind(st.st_mode) + ", not a regular file");
  }
  *size = static_cast<uint64_t>(st.st_size);
  return fd;
}

StatusOr<std::string> ReadModelFile(const std::string& path, bool required, size_t max_bytes) {
  uint64_t size = 0;
  StatusOr<int> fd = OpenRegularFile(path, &size);
  if (!fd.ok()) {
    if (!required && fd.status().code() == StatusCode::kNotFound) return std::string();
    return fd.status();
  }
  if (size > max_bytes) {
    ::close(*fd);
    return InvalidArgument(path + ": " + std::to_string(size) + " bytes, more than the " +
                           std::to_string(max_bytes) + " a model directory's file may have here");
  }
  // The size fstat gave bounds the buffer; a file that grows meanwhile is read only that far,
  // one that shrinks ends the read early.
  std::string out(static_cast<size_t>(size), '\0');
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::read(*fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(*fd);
      return FailedPrecondition(path + ": cannot read: " + std::strerror(err));
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(*fd);
  out.resize(done);
  return out;
}

bool JsonNestingWithin(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character cannot end the string
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

StatusOr<nlohmann::json> ParseJsonObject(std::string_view text, std::string_view file) {
  if (!JsonNestingWithin(text)) {
    return InvalidArgument(std::string(file) + ": JSON nests deeper than " + std::to_string(kMaxModelJsonDepth) +
                           " levels");
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument(std::string(file) + ": not valid JSON: " + e.what());
  }
  if (!j.is_object()) return InvalidArgument(std::string(file) + ": not a JSON object");
  return j;
}

JsonFields::JsonFields(const nlohmann::json& j, std::string_view file, std::string prefix)
    : j_(j), file_(file), prefix_(std::move(prefix)) {}

Status JsonFields::Error(std::string_view key, const std::string& what) const {
  return InvalidArgument(std::string(file_) + ": field '" + prefix_ + std::string(key) + "' " + what);
}

const nlohmann::json* JsonFields::Find(const char* key) const {
  if (!j_.is_object()) return nullptr;
  auto it = j_.find(key);
  return it == j_.end() || it->is_null() ? nullptr : &*it;
}

Status JsonFields::Int(const char* key, int64_t fallback, int64_t lo, int64_t hi, int64_t* out) const {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) {
    *out = fallback;
    return OkStatus();
  }
  if (!v->is_number_integer()) return Error(key, "must be an integer");
  // An unsigned value above INT64_MAX would wrap to a negative int64_t.
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi)) {
    return Error(key, "= " + v->dump() + " is out of range " + Range(lo, hi));
  }
  const int64_t x = v->get<int64_t>();
  if (x < lo || x > hi) return Error(key, "= " + v->dump() + " is out of range " + Range(lo, hi));
  *out = x;
  return OkStatus();
}

Status JsonFields::Number(const char* key, double fallback, double lo, bool open_lo, double hi, double* out) const {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) {
    *out = fallback;
    return OkStatus();
  }
  if (!v->is_number()) return Error(key, "must be a number");
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || (open_lo && x == lo) || x > hi) {
    return Error(key, "= " + v->dump() + " is out of range " + (open_lo ? "(" : "[") + Short(lo) + ", " + Short(hi) + "]");
  }
  *out = x;
  return OkStatus();
}

Status JsonFields::Bool(const char* key, bool fallback, bool* out) const {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) {
    *out = fallback;
    return OkStatus();
  }
  if (!v->is_boolean()) return Error(key, "must be true or false");
  *out = v->get<bool>();
  return OkStatus();
}

Status JsonFields::String(const char* key, const std::string& fallback, std::string* out) const {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) {
    *out = fallback;
    return OkStatus();
  }
  if (!v->is_string()) return Error(key, "must be a string");
  *out = v->get<std::string>();
  return OkStatus();
}

Status JsonFields::TokenIds(const char* key, int64_t limit, std::vector<int32_t>* out) const {
  const nlohmann::json* v = Find(key);
  if (v == nullptr) return OkStatus();
  std::vector<int32_t> ids;
  auto one = [&](const nlohmann::json& x) -> Status {
    if (!x.is_number_integer()) return Error(key, "must be an integer or a list of integers");
    const bool negative = !x.is_number_unsigned() && x.get<int64_t>() < 0;
    if (negative || x.get<uint64_t>() >= static_cast<uint64_t>(limit)) {
      return Error(key, "holds " + x.dump() + ", not a token id below " + std::to_string(limit));
    }
    ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
    return OkStatus();
  };
  if (v->is_array()) {
    for (const nlohmann::json& x : *v) ROTE_RETURN_IF_ERROR(one(x));
  } else {
    ROTE_RETURN_IF_ERROR(one(*v));
  }
  *out = std::move(ids);
  return OkStatus();
}

}  // namespace rote::inference
