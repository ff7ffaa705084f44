#include "inference/util/thread_pool.h"

#include <algorithm>

namespace rote::inference {

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::RunChunks(Job& job) {
  for (;;) {
    const int64_t c = job.next.fetch_add(1, std::memory_order_relaxed);
    if (c >= job.num_chunks) return;
    const int64_t begin = c * job.chunk;
    (*job.fn)(begin, std::min(job.n, begin + job.chunk));
  }
}

void ThreadPool::WorkerLoop() {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    Job* job = current_;
    if (job == nullptr) continue;  // woke after the job was already finished
    ++job->busy;
    lock.unlock();
    RunChunks(*job);
    lock.lock();
    if (--job->busy == 0) done_cv_.notify_all();
  }
}

void ThreadPool::ParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (workers_.empty() || n == 1) {
    fn(0, n);
    return;
  }
  Job job;
  job.fn = &fn;
  job.n = n;
  // A few chunks per thread, so a late thread's share can be taken by the others.
  job.num_chunks = std::min<int64_t>(n, 4 * size());
  job.chunk = (n + job.num_chunks - 1) / job.num_chunks;
  job.num_chunks = (n + job.chunk - 1) / job.chunk;
  {
    std::lock_guard<std::mutex> lock(mu_);
    current_ = &job;
    ++generation_;
  }
  start_cv_.notify_all();
  RunChunks(job);
  std::unique_lock<std::mutex> lock(mu_);
  current_ = nullptr;  // from here no worker can join the job; wait for those inside it
  done_cv_.wait(lock, [&] { return job.busy == 0; });
}

}  // namespace rote::inference
