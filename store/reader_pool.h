// A fixed pool of read-only connections; a reader leases one for the length of its read.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "store/sqlite.h"

namespace rote::store::internal {

class ReaderPool {
 public:
  // Opens max(size, 1) connections.
  absl::Status Init(const std::string& path, const ConnectionOptions& options, int size);

  class Lease {
   public:
    Lease(ReaderPool* pool, Connection* conn) : pool_(pool), conn_(conn) {}
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { pool_->Release(conn_); }
    Connection& operator*() const { return *conn_; }

   private:
    ReaderPool* pool_;
    Connection* conn_;
  };

  // Waits while every connection is leased.
  Lease Acquire();

 private:
  void Release(Connection* conn);

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Connection*> free_;
  std::vector<std::unique_ptr<Connection>> all_;
};

}  // namespace rote::store::internal
