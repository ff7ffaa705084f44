// Blobs: content-addressed bytes, deduplicated, verified on every read. Small ones live in the
// database, larger ones as files beside it (BlobFiles).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/statusor.h"
#include "store/blob_files.h"
#include "store/records.h"
#include "store/sqlite_db.h"

namespace rote::store::internal {

class SqliteBlobs {
 public:
  SqliteBlobs(SqliteDb& db, std::string blob_root, int64_t inline_blob_max_bytes)
      : db_(db), blob_files_(std::move(blob_root)), inline_blob_max_bytes_(inline_blob_max_bytes) {}

  absl::StatusOr<BlobRef> PutBlob(std::string_view bytes);
  // DATA_LOSS when the stored bytes no longer hash to `digest`; the bytes are never returned.
  absl::StatusOr<std::string> GetBlob(std::string_view digest);
  absl::StatusOr<BlobRef> StatBlob(std::string_view digest);

 private:
  SqliteDb& db_;
  BlobFiles blob_files_;
  int64_t inline_blob_max_bytes_;
};

}  // namespace rote::store::internal
