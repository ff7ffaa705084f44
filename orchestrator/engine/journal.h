// The recorder of a run: values as blobs, steps in the journal, events for watchers.
#pragma once

#include <chrono>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "orchestrator/engine/blueprint_runtime.h"
#include "orchestrator/engine/event_bus.h"
#include "store/store.h"

namespace rote::orchestrator::engine {

// Buffers and writes in batches, because each store write is a commit. Flush() before the run's
// outcome is recorded; the first failed write is kept and returned from then on.
class Journal final : public StepObserver {
 public:
  Journal(store::Store* store, EventBus* events, int64_t run_id)
      : store_(store), events_(events), run_id_(run_id) {}

  absl::Status BeforeCall(const StepCall&) override { return absl::OkStatus(); }
  absl::Status AfterCall(const StepCall& step) override;
  void Log(std::string_view line) override;
  absl::Status Flush();

 private:
  void AddBlob(const Canonical& c);
  absl::Status MaybeFlush();

  store::Store* const store_;
  EventBus* const events_;
  const int64_t run_id_;
  std::set<std::string> stored_;
  std::vector<std::string> blobs_;
  std::vector<store::StepRecord> steps_;
  std::vector<RunEvent> pending_events_;
  absl::Status status_;
  std::chrono::steady_clock::time_point last_flush_ = std::chrono::steady_clock::now();
};

}  // namespace rote::orchestrator::engine
