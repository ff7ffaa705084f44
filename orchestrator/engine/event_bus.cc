#include "orchestrator/engine/event_bus.h"

#include <chrono>
#include <utility>

#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "rote/v1/runs.pb.h"

namespace rote::orchestrator::engine {
namespace {

// Stored under this kind in the store's run events.
constexpr std::string_view kEventsKind = "events";

// The stored encoding is the API's RunEvent message: the journals already in stores hold it,
// and protobuf's parser brings its framing and UTF-8 checks.
rote::v1::RunState ProtoState(store::RunState s) {
  switch (s) {
    case store::RunState::kPending: return rote::v1::RUN_STATE_PENDING;
    case store::RunState::kRunning: return rote::v1::RUN_STATE_RUNNING;
    case store::RunState::kSucceeded: return rote::v1::RUN_STATE_SUCCEEDED;
    case store::RunState::kFailed: return rote::v1::RUN_STATE_FAILED;
    case store::RunState::kCancelled: return rote::v1::RUN_STATE_CANCELLED;
  }
  return rote::v1::RUN_STATE_UNSPECIFIED;
}

std::optional<store::RunState> StateOf(int s) {
  switch (s) {
    case rote::v1::RUN_STATE_PENDING: return store::RunState::kPending;
    case rote::v1::RUN_STATE_RUNNING: return store::RunState::kRunning;
    case rote::v1::RUN_STATE_SUCCEEDED: return store::RunState::kSucceeded;
    case rote::v1::RUN_STATE_FAILED: return store::RunState::kFailed;
    case rote::v1::RUN_STATE_CANCELLED: return store::RunState::kCancelled;
    default: return std::nullopt;
  }
}

rote::v1::RunEvent ToMessage(const RunEvent& e) {
  rote::v1::RunEvent m;
  switch (e.kind) {
    case RunEvent::Kind::kNone: break;
    case RunEvent::Kind::kState: m.set_state(ProtoState(e.state)); break;
    case RunEvent::Kind::kGenerationProgress: m.set_generation_progress(e.text); break;
    case RunEvent::Kind::kLog: m.set_log(e.text); break;
    case RunEvent::Kind::kStep: {
      rote::v1::Step* s = m.mutable_step();
      s->set_index(e.step.index);
      s->set_generation_point(e.step.generation_point);
      s->set_artifact_digest(e.step.artifact_digest);
      s->set_input_digest(e.step.input_digest);
      s->set_output_digest(e.step.output_digest);
      break;
    }
  }
  return m;
}

absl::StatusOr<RunEvent> FromMessage(const rote::v1::RunEvent& m) {
  RunEvent e;
  switch (m.event_case()) {
    case rote::v1::RunEvent::kState: {
      std::optional<store::RunState> state = StateOf(m.state());
      if (!state) return absl::DataLossError("a stored run event does not parse");
      e.kind = RunEvent::Kind::kState;
      e.state = *state;
      break;
    }
    case rote::v1::RunEvent::kGenerationProgress:
      e.kind = RunEvent::Kind::kGenerationProgress;
      e.text = m.generation_progress();
      break;
    case rote::v1::RunEvent::kLog:
      e.kind = RunEvent::Kind::kLog;
      e.text = m.log();
      break;
    case rote::v1::RunEvent::kStep:
      e.kind = RunEvent::Kind::kStep;
      e.step = store::StepRecord{m.step().index(), m.step().generation_point(), m.step().artifact_digest(),
                                 m.step().input_digest(), m.step().output_digest()};
      break;
    case rote::v1::RunEvent::EVENT_NOT_SET: break;
  }
  return e;
}

}  // namespace

RunEvent RunEvent::State(store::RunState state) {
  RunEvent e;
  e.kind = Kind::kState;
  e.state = state;
  return e;
}

RunEvent RunEvent::Log(std::string_view line) {
  RunEvent e;
  e.kind = Kind::kLog;
  e.text = std::string(line);
  return e;
}

RunEvent RunEvent::GenerationProgress(std::string_view line) {
  RunEvent e;
  e.kind = Kind::kGenerationProgress;
  e.text = std::string(line);
  return e;
}

RunEvent RunEvent::Step(store::StepRecord step) {
  RunEvent e;
  e.kind = Kind::kStep;
  e.step = std::move(step);
  return e;
}

std::string EncodeRunEvents(const std::vector<RunEvent>& events) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream stream(&out);
    google::protobuf::io::CodedOutputStream coded(&stream);
    for (const RunEvent& event : events) {
      const rote::v1::RunEvent e = ToMessage(event);
      coded.WriteVarint32(static_cast<uint32_t>(e.ByteSizeLong()));
      e.SerializeWithCachedSizes(&coded);
    }
  }
  return out;
}

absl::StatusOr<std::vector<RunEvent>> DecodeRunEvents(std::string_view payload) {
  std::vector<RunEvent> out;
  google::protobuf::io::CodedInputStream coded(reinterpret_cast<const uint8_t*>(payload.data()),
                                               static_cast<int>(payload.size()));
  while (!coded.ExpectAtEnd()) {
    uint32_t size = 0;
    if (!coded.ReadVarint32(&size)) return absl::DataLossError("a stored run event is truncated");
    auto limit = coded.PushLimit(static_cast<int>(size));
    rote::v1::RunEvent e;
    if (!e.ParseFromCodedStream(&coded) || !coded.ConsumedEntireMessage()) {
      return absl::DataLossError("a stored run event does not parse");
    }
    coded.PopLimit(limit);
    absl::StatusOr<RunEvent> event = FromMessage(e);
    if (!event.ok()) return event.status();
    out.push_back(*std::move(event));
  }
  return out;
}

absl::Status EventBus::Append(int64_t run_id, const std::vector<RunEvent>& events) {
  absl::StatusOr<int64_t> seq = store_->AppendRunEvent(run_id, kEventsKind, EncodeRunEvents(events));
  Notify();
  return seq.status();
}

store::NewRunEvent EventBus::Stored(const std::vector<RunEvent>& events) {
  return store::NewRunEvent{std::string(kEventsKind), EncodeRunEvents(events)};
}

absl::StatusOr<store::RunRecord> EventBus::Finish(int64_t run_id, const store::RunOutcome& outcome,
                                                  const std::vector<RunEvent>& events) {
  absl::StatusOr<store::RunRecord> run = store_->FinishRunWithEvent(run_id, outcome, Stored(events));
  Notify();
  return run;
}

absl::Status EventBus::Requeue(int64_t run_id, std::string_view why) {
  absl::StatusOr<store::RunRecord> run = store_->RequeueRun(
      run_id, kEventsKind, EncodeRunEvents({RunEvent::Log(why), RunEvent::State(store::RunState::kPending)}));
  Notify();
  return run.status();
}

void EventBus::Notify() {
  {
    std::lock_guard lock(mu_);
    ++epoch_;
  }
  cv_.notify_all();
}

absl::Status EventBus::Watch(int64_t run_id, const std::function<bool(const RunEvent&)>& send,
                             const std::function<bool()>& stop, const std::function<bool()>& active) {
  int64_t after = 0;
  int64_t sequence = 0;
  int idle_checks_after_end = 0;
  while (true) {
    uint64_t epoch;
    {
      std::lock_guard lock(mu_);
      epoch = epoch_;
    }
    absl::StatusOr<std::vector<store::RunEvent>> events = store_->ListRunEvents(run_id, after, 256);
    if (!events.ok()) return events.status();
    for (const store::RunEvent& stored : *events) {
      after = stored.sequence;
      if (stored.kind != kEventsKind) continue;
      absl::StatusOr<std::vector<RunEvent>> decoded = DecodeRunEvents(stored.payload);
      if (!decoded.ok()) return decoded.status();
      for (RunEvent& e : *decoded) {
        e.sequence = sequence++;
        e.time_ms = stored.time_ms;
        if (!send(e)) return absl::CancelledError("the watcher went away");
        if (e.kind == RunEvent::Kind::kState && store::IsTerminal(e.state)) return absl::OkStatus();
      }
    }
    if (!events->empty()) continue;
    if (stop()) return absl::CancelledError("the watch was cancelled");
    absl::StatusOr<store::RunRecord> now = store_->GetRun(run_id);
    if (!now.ok()) return now.status();
    if (store::IsTerminal(now->state) && !active() && ++idle_checks_after_end > 1) {
      // Finished without a terminal event (the process stopped between the two writes).
      RunEvent e = RunEvent::State(now->state);
      e.sequence = sequence;
      send(e);
      return absl::OkStatus();
    }
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::milliseconds(250), [&] { return epoch_ != epoch; });
  }
}

}  // namespace rote::orchestrator::engine
