#include "store/group_commit.h"

#include <algorithm>
#include <utility>

#include "store/str_util.h"

namespace rote::store::internal {

GroupCommitWriter::GroupCommitWriter(std::unique_ptr<Connection> conn, int max_writes_per_commit,
                                     int gather_wait_us)
    : conn_(std::move(conn)),
      max_group_(static_cast<size_t>(max_writes_per_commit > 0 ? max_writes_per_commit : 1)),
      gather_wait_(std::max(gather_wait_us, 0)),
      thread_([this] { Loop(); }) {}

GroupCommitWriter::Stats GroupCommitWriter::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

GroupCommitWriter::~GroupCommitWriter() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
}

absl::Status GroupCommitWriter::Write(WriteFn fn) {
  Pending pending{std::move(fn), false, absl::OkStatus()};
  std::unique_lock<std::mutex> lock(mu_);
  if (stopping_) return absl::UnavailableError("store: closing, write refused");
  queue_.push_back(&pending);
  work_cv_.notify_one();
  done_cv_.wait(lock, [&] { return pending.done; });
  return pending.result;
}

void GroupCommitWriter::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    work_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping and drained
    // Callers that were answered by the last commit come back one by one; committing the
    // first alone would split them into a group of one and a group of the rest, halving
    // the writes per fsync. So when fewer are queued than the last group held, wait a
    // little (bounded) for the others. A lone writer (last group of 1) never waits.
    if (queue_.size() < last_group_size_ && gather_wait_.count() > 0) {
      work_cv_.wait_for(lock, gather_wait_,
                        [&] { return stopping_ || queue_.size() >= last_group_size_; });
    }
    std::deque<Pending*> group;
    while (!queue_.empty() && group.size() < max_group_) {
      group.push_back(queue_.front());
      queue_.pop_front();
    }
    // Callers keep queueing while this group commits; they form the next group.
    lock.unlock();
    CommitGroup(group);
    lock.lock();
    last_group_size_ = group.size();
    ++stats_.commits;
    stats_.writes += static_cast<int64_t>(group.size());
    for (Pending* p : group) p->done = true;
    done_cv_.notify_all();
  }
}

void GroupCommitWriter::CommitGroup(std::deque<Pending*>& group) {
  auto fail_all = [&](const absl::Status& status) {
    for (Pending* p : group) {
      if (p->result.ok()) p->result = status;
    }
  };
  // IMMEDIATE takes the write lock now (waiting at most busy_timeout), so no statement
  // inside the group can hit SQLITE_BUSY halfway through.
  if (absl::Status s = conn_->Exec("BEGIN IMMEDIATE"); !s.ok()) {
    fail_all(s);
    return;
  }
  for (size_t i = 0; i < group.size(); ++i) {
    Pending* p = group[i];
    absl::Status s = conn_->Exec("SAVEPOINT write");
    if (s.ok()) s = p->fn(*conn_);
    if (!conn_->InTransaction()) {
      // SQLite rolled the whole transaction back (disk full, I/O error): every write of the
      // group is gone, including those that had succeeded.
      absl::Status lost = s.ok() ? absl::InternalError("store: transaction ended unexpectedly")
                                 : s;
      for (Pending* q : group) q->result = lost;
      return;
    }
    if (s.ok()) {
      s = conn_->Exec("RELEASE write");
    } else {
      absl::Status undo = conn_->Exec("ROLLBACK TO write");
      if (undo.ok()) undo = conn_->Exec("RELEASE write");
      if (!undo.ok()) {
        conn_->ExecScript("ROLLBACK").IgnoreError();
        for (Pending* q : group) q->result = undo;
        p->result = s;
        return;
      }
    }
    p->result = s;
  }
  if (absl::Status s = conn_->Exec("COMMIT"); !s.ok()) {
    if (conn_->InTransaction()) conn_->ExecScript("ROLLBACK").IgnoreError();
    fail_all(absl::Status(s.code(), Cat("store: commit failed, nothing written: ",
                                                 s.message())));
  }
}

}  // namespace rote::store::internal
