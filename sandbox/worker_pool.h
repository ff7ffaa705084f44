// Isolated execution of generated Lua: a pool of pre-started rote-sandbox-worker processes.
//
// Each worker is exec'ed (posix_spawn, never a fork of the multithreaded server) with an empty
// environment, no file descriptors but its socket, rlimits on address space, CPU, files and
// processes, and a seccomp allow-list installed after start-up (read/write on its socket,
// memory management, exit). A call sends one batch (a function artifact and many inputs) and
// gets one result per input back, so isolation costs one round trip per batch.
//
// Deterministic outcomes (script errors, instruction/memory/output limits) come back per
// input exactly as RunFunctionArtifact produces them in-process. Infrastructure failures fail
// the whole call: DEADLINE_EXCEEDED when the wall-clock deadline passes (the worker is
// killed), UNAVAILABLE when a worker crashes or is killed (the message says how). Either way
// the worker is replaced and the next call works.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "sandbox/lua_runtime.h"
#include "sandbox/value.h"

namespace rote::sandbox {

struct WorkerPoolOptions {
  // Empty: rote-sandbox-worker next to /proc/self/exe, else the path baked in at build time.
  std::string worker_path;
  int num_workers = 2;
  std::chrono::milliseconds default_deadline{30'000};
  // RLIMIT_AS of each worker. A Lua state reserves 2 * max_memory_bytes + 4 MiB of address space
  // and a worker may hold two (its cached artifact and a new one), so keep this above
  // 4 * max_memory_bytes + 64 MiB or large limits fail with "cannot map the Lua heap arena".
  uint64_t address_space_bytes = 2ull << 30;
  uint64_t cpu_seconds = 600;                 // RLIMIT_CPU of each worker (lifetime)
};

struct WorkerPoolStats {
  uint64_t calls = 0;
  uint64_t timeouts = 0;
  uint64_t crashes = 0;
  uint64_t spawned = 0;
  // Inputs whose call a limit stopped (RESOURCE_EXHAUSTED), by limit.
  uint64_t instruction_limit_hits = 0;
  uint64_t memory_limit_hits = 0;
  uint64_t output_limit_hits = 0;
};

// Resolves the worker executable as described for WorkerPoolOptions::worker_path.
absl::StatusOr<std::string> DefaultWorkerPath();

class WorkerPool {
 public:
  static absl::StatusOr<std::unique_ptr<WorkerPool>> Start(WorkerPoolOptions options);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Applies the function artifact `source` to every input in one worker. Thread-safe; blocks
  // while all workers are busy. A compile error is returned for the whole batch.
  absl::StatusOr<std::vector<CallResult>> Call(std::string_view source, std::string_view chunkname,
                                               const std::vector<Value>& inputs, const Limits& limits,
                                               std::optional<std::chrono::milliseconds> deadline = std::nullopt);

  WorkerPoolStats stats() const;
  // Process ids of the idle workers (tests kill them to check recovery).
  std::vector<pid_t> idle_worker_pids() const;

 private:
  struct Worker {
    pid_t pid = -1;
    int fd = -1;  // parent's end of the socket pair
  };
  explicit WorkerPool(WorkerPoolOptions options) : options_(std::move(options)) {}
  absl::StatusOr<Worker> Spawn();
  void Retire(Worker& w);
  absl::StatusOr<std::vector<CallResult>> RoundTrip(Worker& w, const std::string& request, size_t expected_results,
                                                    std::chrono::steady_clock::time_point deadline,
                                                    bool* worker_lost);

  WorkerPoolOptions options_;
  mutable std::mutex mu_;
  std::condition_variable idle_cv_;
  std::vector<Worker> idle_;
  int live_ = 0;  // workers idle or busy
  WorkerPoolStats stats_;
  // Adds the limit hits of a batch's results to stats_ (mu_ held).
  void CountLimitHits(const std::vector<CallResult>& results);
};

}  // namespace rote::sandbox
