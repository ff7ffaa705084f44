#include "store/sqlite_blobs.h"

#include <utility>

#include "store/checks.h"
#include "store/digest.h"
#include "store/status_macros.h"
#include "store/str_util.h"

namespace rote::store::internal {

absl::StatusOr<BlobRef> SqliteBlobs::PutBlob(std::string_view bytes) {
  BlobRef ref{Sha256Digest(bytes), static_cast<int64_t>(bytes.size())};
  // Deduplicate without queueing a write when the blob is already there.
  if (absl::StatusOr<BlobRef> existing = StatBlob(ref.digest); existing.ok()) {
    return *existing;
  } else if (!absl::IsNotFound(existing.status())) {
    return existing.status();
  }
  const bool inline_blob = ref.size <= inline_blob_max_bytes_;
  // The file is durable before the row that refers to it commits.
  if (!inline_blob) RETURN_IF_ERROR(blob_files_.Write(ref.digest, bytes));
  const int64_t now = db_.clock_ms();
  RETURN_IF_ERROR(db_.Write([&](Connection& conn) -> absl::Status {
    ASSIGN_OR_RETURN(Statement stmt,
                     conn.Prepare("INSERT INTO blobs (digest, size, placement, data, create_ms) "
                                  "VALUES (?, ?, ?, ?, ?) ON CONFLICT (digest) DO NOTHING"));
    stmt.BindText(1, ref.digest).BindInt(2, ref.size).BindText(3, inline_blob ? "inline" : "file");
    if (inline_blob) {
      stmt.BindBlob(4, bytes);
    } else {
      stmt.BindNull(4);
    }
    stmt.BindInt(5, now);
    return stmt.Run();
  }));
  return ref;
}

absl::StatusOr<BlobRef> SqliteBlobs::StatBlob(std::string_view digest) {
  RETURN_IF_ERROR(CheckDigest(digest, "blob digest"));
  ReaderPool::Lease lease = db_.readers.Acquire();
  ASSIGN_OR_RETURN(Statement stmt, (*lease).Prepare("SELECT size FROM blobs WHERE digest = ?"));
  stmt.BindText(1, digest);
  ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return absl::NotFoundError(Cat("blob ", digest, " is not stored"));
  return BlobRef{std::string(digest), stmt.ColumnInt(0)};
}

absl::StatusOr<std::string> SqliteBlobs::GetBlob(std::string_view digest) {
  RETURN_IF_ERROR(CheckDigest(digest, "blob digest"));
  int64_t size = 0;
  bool in_file = false;
  std::string bytes;
  {
    ReaderPool::Lease lease = db_.readers.Acquire();
    ASSIGN_OR_RETURN(Statement stmt,
                     (*lease).Prepare("SELECT size, placement, data FROM blobs WHERE digest = ?"));
    stmt.BindText(1, digest);
    ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) return absl::NotFoundError(Cat("blob ", digest, " is not stored"));
    size = stmt.ColumnInt(0);
    in_file = stmt.ColumnText(1) == "file";
    if (!in_file) bytes = stmt.ColumnBlob(2);
  }
  if (in_file) {
    absl::StatusOr<std::string> file = blob_files_.Read(digest);
    if (absl::IsNotFound(file.status())) {
      return absl::DataLossError(Cat("blob ", digest, " is recorded but its file ",
                                     blob_files_.PathFor(digest), " is missing"));
    }
    if (!file.ok()) return file.status();
    bytes = std::move(*file);
  }
  // Verified on every read: bytes that do not match their digest are never returned.
  RETURN_IF_ERROR(VerifyBlobBytes(digest, size, bytes));
  return bytes;
}

}  // namespace rote::store::internal
