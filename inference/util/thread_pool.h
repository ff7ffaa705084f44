// A small fixed pool for the CPU backend and the engine's host sampling. Work is always split
// across independent outputs (matrix rows, (token, head) pairs, sampled rows), never across the
// terms of one reduction, so results do not depend on the number of threads or on which thread
// ran which range.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace rote::inference {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);  // threads >= 1; the caller's thread is one of them
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) on contiguous, disjoint ranges covering [0, n) and returns when all
  // are done. Ranges are claimed from a shared counter, the caller's thread included, so a
  // worker that the OS schedules late (a busy machine) delays nothing: the caller takes its
  // share. Not reentrant.
  void ParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& fn);

 private:
  struct Job {
    const std::function<void(int64_t, int64_t)>* fn = nullptr;
    int64_t n = 0;
    int64_t chunk = 1;
    int64_t num_chunks = 0;
    std::atomic<int64_t> next{0};
    int busy = 0;  // workers inside RunChunks; guarded by mu_
  };
  static void RunChunks(Job& job);
  void WorkerLoop();

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_cv_;
  std::condition_variable done_cv_;
  Job* current_ = nullptr;  // guarded by mu_
  uint64_t generation_ = 0; // guarded by mu_
  bool stop_ = false;       // guarded by mu_
};

}  // namespace rote::inference
