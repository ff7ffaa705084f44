#include "sandbox/worker_pool.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "sandbox/worker_protocol.h"

namespace rote::sandbox {
namespace {

using Clock = std::chrono::steady_clock;

bool IsExecutable(const std::string& path) { return !path.empty() && access(path.c_str(), X_OK) == 0; }

int RemainingMs(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 1 << 30));
}

// Sends everything or fails at the deadline. MSG_NOSIGNAL: a dead worker must not SIGPIPE
// the server.
absl::Status SendAll(int fd, const char* data, size_t n, Clock::time_point deadline) {
  while (n > 0) {
    ssize_t w = send(fd, data, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      data += w;
      n -= static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      int ms = RemainingMs(deadline);
      if (ms == 0) return absl::DeadlineExceededError("sending to worker");
      struct pollfd p{fd, POLLOUT, 0};
      poll(&p, 1, ms);
      continue;
    }
    return absl::UnavailableError(absl::StrCat("worker socket closed while sending: ", strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status RecvAll(int fd, char* data, size_t n, Clock::time_point deadline) {
  while (n > 0) {
    ssize_t r = recv(fd, data, n, MSG_DONTWAIT);
    if (r > 0) {
      data += r;
      n -= static_cast<size_t>(r);
      continue;
    }
    if (r == 0) return absl::UnavailableError("worker closed its socket");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      int ms = RemainingMs(deadline);
      if (ms == 0) return absl::DeadlineExceededError("waiting for worker");
      struct pollfd p{fd, POLLIN, 0};
      poll(&p, 1, ms);
      continue;
    }
    return absl::UnavailableError(absl::StrCat("worker socket error: ", strerror(errno)));
  }
  return absl::OkStatus();
}

std::string DescribeExit(int status) {
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    std::string what = absl::StrCat("killed by signal ", sig, " (", strsignal(sig), ")");
    if (sig == SIGSYS) what += ": a system call outside the seccomp allow-list";
    if (sig == SIGXCPU) what += ": CPU time rlimit";
    return what;
  }
  if (WIFEXITED(status)) return absl::StrCat("exited with status ", WEXITSTATUS(status));
  return "ended";
}

}  // namespace

absl::StatusOr<std::string> DefaultWorkerPath() {
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  std::string next_to_self;
  if (!ec) {
    next_to_self = (self.parent_path() / "rote-sandbox-worker").string();
    if (IsExecutable(next_to_self)) return next_to_self;
  }
#ifdef ROTE_SANDBOX_WORKER_BUILD_PATH
  if (IsExecutable(ROTE_SANDBOX_WORKER_BUILD_PATH)) return std::string(ROTE_SANDBOX_WORKER_BUILD_PATH);
  const char* built = ROTE_SANDBOX_WORKER_BUILD_PATH;
#else
  const char* built = "(none)";
#endif
  return absl::NotFoundError(absl::StrCat("rote-sandbox-worker not found (tried ", next_to_self, " and ", built,
                                          "); set WorkerPoolOptions::worker_path"));
}

absl::StatusOr<std::unique_ptr<WorkerPool>> WorkerPool::Start(WorkerPoolOptions options) {
  if (options.worker_path.empty()) {
    auto path = DefaultWorkerPath();
    if (!path.ok()) return path.status();
    options.worker_path = *path;
  }
  if (!IsExecutable(options.worker_path)) {
    return absl::NotFoundError(absl::StrCat("worker executable not found: ", options.worker_path));
  }
  if (options.num_workers < 1) return absl::InvalidArgumentError("num_workers must be at least 1");
  std::unique_ptr<WorkerPool> pool(new WorkerPool(std::move(options)));
  for (int i = 0; i < pool->options_.num_workers; ++i) {
    auto w = pool->Spawn();
    if (!w.ok()) return w.status();
    pool->idle_.push_back(*w);
    pool->live_++;
  }
  return pool;
}

WorkerPool::~WorkerPool() {
  std::unique_lock lock(mu_);
  idle_cv_.wait(lock, [&] { return static_cast<int>(idle_.size()) == live_; });
  for (Worker& w : idle_) Retire(w);
}

absl::StatusOr<WorkerPool::Worker> WorkerPool::Spawn() {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    return absl::InternalError(absl::StrCat("socketpair: ", strerror(errno)));
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, sv[1], 0);
  posix_spawn_file_actions_adddup2(&fa, sv[1], 1);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);
  std::string as = std::to_string(options_.address_space_bytes);
  std::string cpu = std::to_string(options_.cpu_seconds);
  std::vector<char*> argv = {const_cast<char*>(options_.worker_path.c_str()), const_cast<char*>("--address-space"),
                             as.data(), const_cast<char*>("--cpu-seconds"), cpu.data(), nullptr};
  char* envp[] = {nullptr};
  pid_t pid;
  int rc = posix_spawn(&pid, options_.worker_path.c_str(), &fa, nullptr, argv.data(), envp);
  posix_spawn_file_actions_destroy(&fa);
  close(sv[1]);
  if (rc != 0) {
    close(sv[0]);
    return absl::InternalError(absl::StrCat("spawning ", options_.worker_path, ": ", strerror(rc)));
  }
  {
    std::lock_guard lock(mu_);
    stats_.spawned++;
  }
  return Worker{pid, sv[0]};
}

void WorkerPool::Retire(Worker& w) {
  if (w.fd >= 0) close(w.fd);
  if (w.pid > 0) {
    kill(w.pid, SIGKILL);
    int status;
    while (waitpid(w.pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  w = Worker{};
}

absl::StatusOr<std::vector<CallResult>> WorkerPool::RoundTrip(Worker& w, const std::string& request,
                                                              size_t expected_results, Clock::time_point deadline,
                                                              bool* worker_lost) {
  char header[8];
  for (int i = 0; i < 8; ++i) header[i] = static_cast<char>(static_cast<uint64_t>(request.size()) >> (8 * i));
  absl::Status s = SendAll(w.fd, header, sizeof header, deadline);
  if (s.ok()) s = SendAll(w.fd, request.data(), request.size(), deadline);
  std::vector<CallResult> results;
  results.reserve(expected_results);
  std::string payload;
  // Frames until one without `more`; decoding a frame overlaps the worker computing the next.
  while (s.ok()) {
    s = RecvAll(w.fd, header, sizeof header, deadline);
    if (!s.ok()) break;
    uint64_t len = 0;
    for (int i = 0; i < 8; ++i) len |= static_cast<uint64_t>(static_cast<unsigned char>(header[i])) << (8 * i);
    if (len > protocol::kMaxMessageBytes) {
      *worker_lost = true;
      return absl::DataLossError("worker response too large");
    }
    payload.resize(len);
    s = RecvAll(w.fd, payload.data(), len, deadline);
    if (!s.ok()) break;
    auto frame = protocol::DecodeResponse(payload);
    if (!frame.ok()) {
      *worker_lost = true;
      return frame.status();
    }
    if (!frame->batch_status.ok()) return frame->batch_status;
    if (results.size() + frame->results.size() > expected_results) break;
    for (CallResult& r : frame->results) results.push_back(std::move(r));
    if (!frame->more) {
      if (results.size() != expected_results) break;
      return results;
    }
  }
  *worker_lost = true;
  if (s.ok()) return absl::DataLossError("worker returned a different number of results than inputs");
  if (absl::IsDeadlineExceeded(s)) {
    return absl::DeadlineExceededError(
        "infrastructure timeout: the sandbox worker passed the wall-clock deadline and was killed");
  }
  // Find out how it died: kill is a no-op on a dead process, waitpid reports the cause.
  kill(w.pid, SIGKILL);
  int status = 0;
  while (waitpid(w.pid, &status, 0) < 0 && errno == EINTR) {
  }
  std::string how = DescribeExit(status);
  w.pid = -1;
  return absl::UnavailableError(absl::StrCat("sandbox worker failed: ", how, " (", s.message(), ")"));
}

absl::StatusOr<std::vector<CallResult>> WorkerPool::Call(std::string_view source, std::string_view chunkname,
                                                         const std::vector<Value>& inputs, const Limits& limits,
                                                         std::optional<std::chrono::milliseconds> deadline) {
  Clock::time_point until = Clock::now() + deadline.value_or(options_.default_deadline);
  std::string request = protocol::EncodeRequest(chunkname, source, limits, inputs);
  if (request.size() > protocol::kMaxMessageBytes) return absl::InvalidArgumentError("batch too large");

  Worker w;
  {
    std::unique_lock lock(mu_);
    stats_.calls++;
    idle_cv_.wait(lock, [&] { return !idle_.empty(); });
    w = idle_.back();
    idle_.pop_back();
  }
  bool lost = false;
  auto result = RoundTrip(w, request, inputs.size(), until, &lost);
  if (lost) {
    Retire(w);
    auto replacement = Spawn();
    std::lock_guard lock(mu_);
    if (absl::IsDeadlineExceeded(result.status())) stats_.timeouts++;
    else stats_.crashes++;
    if (replacement.ok()) idle_.push_back(*replacement);
    else live_--;
  } else {
    std::lock_guard lock(mu_);
    idle_.push_back(w);
    if (result.ok()) CountLimitHits(*result);
  }
  idle_cv_.notify_one();
  return result;
}

void WorkerPool::CountLimitHits(const std::vector<CallResult>& results) {
  for (const CallResult& r : results) {
    if (!absl::IsResourceExhausted(r.status)) continue;
    const absl::string_view message = r.status.message();
    if (message.find("instruction limit") != absl::string_view::npos) stats_.instruction_limit_hits++;
    else if (message.find("memory limit") != absl::string_view::npos) stats_.memory_limit_hits++;
    else if (message.find("output limit") != absl::string_view::npos) stats_.output_limit_hits++;
  }
}

WorkerPoolStats WorkerPool::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

std::vector<pid_t> WorkerPool::idle_worker_pids() const {
  std::lock_guard lock(mu_);
  std::vector<pid_t> out;
  for (const Worker& w : idle_) out.push_back(w.pid);
  return out;
}

}  // namespace rote::sandbox
