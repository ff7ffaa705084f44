#include "orchestrator/engine/journal.h"

namespace rote::orchestrator::engine {

absl::Status Journal::AfterCall(const StepCall& step) {
  AddBlob(step.input);
  AddBlob(step.output);
  store::StepRecord record{step.index, step.point, step.artifact_digest, step.input.digest, step.output.digest};
  steps_.push_back(record);
  pending_events_.push_back(RunEvent::Step(std::move(record)));
  return MaybeFlush();
}

void Journal::Log(std::string_view line) {
  pending_events_.push_back(RunEvent::Log(line));
  status_.Update(MaybeFlush());
}

absl::Status Journal::Flush() {
  if (!status_.ok()) return status_;
  for (const std::string& json : blobs_) {
    absl::StatusOr<store::BlobRef> ref = store_->PutBlob(json);
    if (!ref.ok()) return status_ = ref.status();
  }
  blobs_.clear();
  if (!steps_.empty()) {
    if (absl::Status s = store_->AppendSteps(run_id_, steps_); !s.ok()) return status_ = s;
    steps_.clear();
  }
  if (!pending_events_.empty()) {
    if (absl::Status s = events_->Append(run_id_, pending_events_); !s.ok()) return status_ = s;
    pending_events_.clear();
  }
  last_flush_ = std::chrono::steady_clock::now();
  return absl::OkStatus();
}

void Journal::AddBlob(const Canonical& c) {
  if (stored_.insert(c.digest).second) blobs_.push_back(c.json);
}

absl::Status Journal::MaybeFlush() {
  if (!status_.ok()) return status_;
  // Watchers see progress at least every 200 ms; long runs do not hold everything in memory.
  if (blobs_.size() + pending_events_.size() >= 512 ||
      std::chrono::steady_clock::now() - last_flush_ > std::chrono::milliseconds(200)) {
    return Flush();
  }
  return absl::OkStatus();
}

}  // namespace rote::orchestrator::engine
