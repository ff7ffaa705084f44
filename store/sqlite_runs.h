// Runs (their state machine and bindings) and each run's journal: its steps and events.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "store/records.h"
#include "store/sqlite_db.h"

namespace rote::store::internal {

class SqliteRuns {
 public:
  explicit SqliteRuns(SqliteDb& db) : db_(db) {}

  absl::StatusOr<CreateRunResult> CreateRun(const NewRun& run);
  absl::StatusOr<RunRecord> GetRun(int64_t run_id);
  absl::StatusOr<RunRecord> StartRun(int64_t run_id);
  absl::Status AddRunBindings(int64_t run_id, const std::vector<Binding>& bindings);
  absl::StatusOr<RunRecord> FinishRun(int64_t run_id, const RunOutcome& outcome);
  absl::StatusOr<Page<RunRecord>> ListRuns(const RunFilter& filter, const PageRequest& page);
  absl::StatusOr<RunRecord> RequeueRun(int64_t run_id, std::string_view event_kind,
                                       std::string_view event_payload);

  absl::Status AppendSteps(int64_t run_id, const std::vector<StepRecord>& steps);
  absl::StatusOr<std::vector<StepRecord>> ListSteps(int64_t run_id);
  absl::StatusOr<int64_t> AppendRunEvent(int64_t run_id, std::string_view kind,
                                         std::string_view payload);
  absl::StatusOr<std::vector<RunEvent>> ListRunEvents(int64_t run_id, int64_t after_sequence,
                                                      int32_t limit);

 private:
  // To `to`, recording `outcome` when it is terminal (null for pending -> running).
  absl::StatusOr<RunRecord> Transition(int64_t run_id, RunState to, const RunOutcome* outcome);

  SqliteDb& db_;
};

}  // namespace rote::store::internal
