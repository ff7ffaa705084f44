#include "store/reader_pool.h"

#include <algorithm>
#include <utility>

#include "store/status_macros.h"

namespace rote::store::internal {

absl::Status ReaderPool::Init(const std::string& path, const ConnectionOptions& options,
                              int size) {
  for (int i = 0; i < std::max(size, 1); ++i) {
    ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn, Connection::Open(path, options));
    free_.push_back(conn.get());
    all_.push_back(std::move(conn));
  }
  return absl::OkStatus();
}

ReaderPool::Lease ReaderPool::Acquire() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !free_.empty(); });
  Connection* conn = free_.back();
  free_.pop_back();
  return Lease(this, conn);
}

void ReaderPool::Release(Connection* conn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(conn);
  }
  cv_.notify_one();
}

}  // namespace rote::store::internal
