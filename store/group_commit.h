// The single writer: one thread owns the write connection and commits whatever writes have
// queued up in one transaction (group commit), so N concurrent writers share one fsync.
// Write() returns only after COMMIT, so an OK result is durable.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "absl/status/status.h"
#include "store/sqlite.h"

namespace rote::store::internal {

class GroupCommitWriter {
 public:
  // Runs inside the group's transaction, isolated by a savepoint: an error undoes only this
  // write. It must use only `conn` and must not begin or end transactions.
  using WriteFn = std::function<absl::Status(Connection& conn)>;

  // `gather_wait_us`: how long the writer may wait for the rest of a group (see Loop).
  GroupCommitWriter(std::unique_ptr<Connection> conn, int max_writes_per_commit,
                    int gather_wait_us);
  // Commits what is queued, then stops the thread.
  ~GroupCommitWriter();

  absl::Status Write(WriteFn fn);

  struct Stats {
    int64_t commits = 0;  // transactions committed (or attempted)
    int64_t writes = 0;   // writes they carried
  };
  Stats stats() const;

 private:
  struct Pending {
    WriteFn fn;
    bool done = false;
    absl::Status result;
  };

  void Loop();
  void CommitGroup(std::deque<Pending*>& group);

  std::unique_ptr<Connection> conn_;
  const size_t max_group_;
  const std::chrono::microseconds gather_wait_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;  // the writer waits for work
  std::condition_variable done_cv_;  // callers wait for their result
  std::deque<Pending*> queue_;
  bool stopping_ = false;
  size_t last_group_size_ = 1;
  Stats stats_;
  std::thread thread_;
};

}  // namespace rote::store::internal
