// Large blobs as files: <root>/<2 hex>/<64 hex>, written atomically and durably before the
// row that points at them commits, so a committed row never points at a missing or partial
// file. (A crash between the file and the row leaves an unreferenced file, which is harmless:
// the next put of the same bytes rewrites it.)
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace rote::store::internal {

class BlobFiles {
 public:
  explicit BlobFiles(std::string root) : root_(std::move(root)) {}

  std::string PathFor(std::string_view digest) const;
  // tmp file + fsync + rename + fsync of the directory.
  absl::Status Write(std::string_view digest, std::string_view bytes) const;
  // NOT_FOUND when the file is missing.
  absl::StatusOr<std::string> Read(std::string_view digest) const;

 private:
  std::string root_;
};

}  // namespace rote::store::internal
