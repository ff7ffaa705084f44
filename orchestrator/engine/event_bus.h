// A run's events (state changes, journaled steps, log lines, generation progress): how they are
// stored and how watchers follow them as they are appended.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "store/store.h"

namespace rote::orchestrator::engine {

struct RunEvent {
  enum class Kind { kNone, kState, kGenerationProgress, kStep, kLog };
  Kind kind = Kind::kNone;
  store::RunState state = store::RunState::kPending;  // kState
  std::string text;                                   // kGenerationProgress, kLog
  store::StepRecord step;                             // kStep
  // Assigned when read: dense from 0 per run, and the time the batch was stored (absent on the
  // terminal event a watcher makes up for a run whose last write was lost).
  int64_t sequence = 0;
  std::optional<int64_t> time_ms;

  static RunEvent State(store::RunState state);
  static RunEvent Log(std::string_view line);
  static RunEvent GenerationProgress(std::string_view line);
  static RunEvent Step(store::StepRecord step);
};

// A batch of events as stored: each event (without sequence and time) prefixed with its varint
// length, so a journal flush is one store write however many steps it holds.
std::string EncodeRunEvents(const std::vector<RunEvent>& events);
absl::StatusOr<std::vector<RunEvent>> DecodeRunEvents(std::string_view payload);

// Appends events to the store and wakes the watchers. Thread-safe.
class EventBus {
 public:
  explicit EventBus(store::Store* store) : store_(store) {}

  absl::Status Append(int64_t run_id, const std::vector<RunEvent>& events);
  // The events as one stored event (for Store::CreateRunWithEvents and ClaimRuns).
  static store::NewRunEvent Stored(const std::vector<RunEvent>& events);
  // Store::FinishRunWithEvent with `events`, then wakes the watchers.
  absl::StatusOr<store::RunRecord> Finish(int64_t run_id, const store::RunOutcome& outcome,
                                          const std::vector<RunEvent>& events);
  // Store::RequeueRun with the events `why` (a log line) and the state pending, then wakes the
  // watchers.
  absl::Status Requeue(int64_t run_id, std::string_view why);
  // Wakes the watchers without an event (a run left the worker pool).
  void Notify();
  // Sends the run's events from the start and returns after the terminal state. `send` returns
  // false when the watcher has gone; `stop` is polled; `active` says whether a worker still
  // holds the run.
  absl::Status Watch(int64_t run_id, const std::function<bool(const RunEvent&)>& send,
                     const std::function<bool()>& stop, const std::function<bool()>& active);

 private:
  store::Store* const store_;
  // Watchers wait for the epoch to change (bumped whenever events are appended).
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t epoch_ = 0;
};

}  // namespace rote::orchestrator::engine
