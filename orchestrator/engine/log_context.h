// Who and what a log line is about: the principal, the run and the client's request id. Set for
// the scope of an RPC's log line or of a run's execution on the thread that logs; the JSON log
// format (rote serve --log-format json) writes them as fields.
#pragma once

#include <string>
#include <utility>

namespace rote::orchestrator::engine {

struct LogContext {
  std::string principal;
  std::string run;         // "runs/{id}"
  std::string request_id;  // SubmitRun's request_id
};

// This thread's context (empty fields: unknown).
LogContext& ThreadLogContext();

// Sets this thread's context for its lifetime, then restores the one before.
class ScopedLogContext {
 public:
  explicit ScopedLogContext(LogContext context) : saved_(std::move(ThreadLogContext())) {
    ThreadLogContext() = std::move(context);
  }
  ~ScopedLogContext() { ThreadLogContext() = std::move(saved_); }
  ScopedLogContext(const ScopedLogContext&) = delete;
  ScopedLogContext& operator=(const ScopedLogContext&) = delete;

 private:
  LogContext saved_;
};

}  // namespace rote::orchestrator::engine
