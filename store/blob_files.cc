#include "store/blob_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "store/str_util.h"
#include "store/digest.h"

namespace rote::store::internal {
namespace {

absl::Status ErrnoStatus(int err, std::string_view what, std::string_view path) {
  std::string msg = Cat("store: ", what, " ", path, ": ", std::strerror(err));
  if (err == ENOSPC || err == EDQUOT) {
    return absl::ResourceExhaustedError(Cat(msg, "; the disk is full"));
  }
  if (err == ENOENT) return absl::NotFoundError(msg);
  if (err == EACCES || err == EPERM || err == EROFS) return absl::FailedPreconditionError(msg);
  return absl::UnavailableError(msg);
}

absl::Status FsyncPath(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "open", path);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return ErrnoStatus(err, "fsync", path);
  return absl::OkStatus();
}

// A new directory's entry must reach the disk too, or a file renamed into it can vanish.
absl::Status MakeDir(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) != 0) {
    if (errno == EEXIST) return absl::OkStatus();
    return ErrnoStatus(errno, "mkdir", path);
  }
  size_t slash = path.find_last_of('/');
  return FsyncPath(slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash)),
                   O_RDONLY | O_DIRECTORY);
}

}  // namespace

std::string BlobFiles::PathFor(std::string_view digest) const {
  std::string_view hex = digest.substr(kDigestPrefix.size());
  return Cat(root_, "/", hex.substr(0, 2), "/", hex);
}

absl::Status BlobFiles::Write(std::string_view digest, std::string_view bytes) const {
  if (absl::Status s = MakeDir(root_); !s.ok()) return s;
  std::string_view hex = digest.substr(kDigestPrefix.size());
  std::string dir = Cat(root_, "/", hex.substr(0, 2));
  if (absl::Status s = MakeDir(dir); !s.ok()) return s;
  std::string final_path = PathFor(digest);
  // Unique per writer so two threads putting the same blob never share a tmp file.
  static std::atomic<uint64_t> counter{0};
  std::string tmp_path = Cat(final_path, ".tmp.", ::getpid(), ".", counter.fetch_add(1));
  int fd = ::open(tmp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(errno, "create", tmp_path);
  size_t written = 0;
  while (written < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      ::unlink(tmp_path.c_str());
      return ErrnoStatus(err, "write", tmp_path);
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    int err = errno;
    ::close(fd);
    ::unlink(tmp_path.c_str());
    return ErrnoStatus(err, "fsync", tmp_path);
  }
  ::close(fd);
  if (::rename(tmp_path.c_str(), final_path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp_path.c_str());
    return ErrnoStatus(err, "rename", tmp_path);
  }
  // The rename is durable only once the directory entry is.
  return FsyncPath(dir, O_RDONLY | O_DIRECTORY);
}

absl::StatusOr<std::string> BlobFiles::Read(std::string_view digest) const {
  std::string path = PathFor(digest);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "open", path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return ErrnoStatus(err, "stat", path);
  }
  std::string out(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < out.size()) {
    ssize_t n = ::read(fd, out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  out.resize(got);
  return out;
}

}  // namespace rote::store::internal
