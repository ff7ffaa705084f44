// The default CreateRunWithEvents and FinishRunWithEvent of Store: one write after the other,
// for stores whose runs only one process writes (SQLite). PostgreSQL does each in one
// transaction (store/pg_leases.cc).
#include "store/store.h"

namespace rote::store {

absl::StatusOr<CreateRunResult> Store::CreateRunWithEvents(const NewRun& run,
                                                           const std::vector<NewRunEvent>& events) {
  absl::StatusOr<CreateRunResult> created = CreateRun(run);
  if (!created.ok() || !created->created) return created;
  for (const NewRunEvent& e : events) {
    if (absl::StatusOr<int64_t> seq = AppendRunEvent(created->run.id, e.kind, e.payload); !seq.ok()) {
      return seq.status();
    }
  }
  return created;
}

absl::StatusOr<RunRecord> Store::FinishRunWithEvent(int64_t run_id, const RunOutcome& outcome,
                                                    const NewRunEvent& event) {
  absl::StatusOr<RunRecord> finished = FinishRun(run_id, outcome);
  if (!finished.ok()) return finished;
  if (absl::StatusOr<int64_t> seq = AppendRunEvent(run_id, event.kind, event.payload); !seq.ok()) {
    return seq.status();
  }
  return finished;
}

}  // namespace rote::store
