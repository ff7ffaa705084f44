// What the files defining Engine's members share. Not for use outside orchestrator/engine/.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "orchestrator/engine/engine.h"

namespace rote::orchestrator::engine {

// A run this process queued or executes.
struct Engine::RunControl {
  RunInterrupt interrupt;
  std::mutex mu;
  bool started = false;    // a worker took it
  bool cancelled = false;  // CancelRun finished it before a worker took it
  bool requeue = false;    // Drain's grace ran out: stopped to be run again, not failed
  RunPolicy policy;
  std::string principal;
  std::string blueprint;  // its declared name, for metrics
  std::vector<GenerationPoint> deferred;  // points to generate before executing
  // Runs queued in the database: the run as claimed (already running, under this replica's
  // lease), and whether the lease was lost (another replica took the run over, or it ended
  // elsewhere): then nothing more of this attempt is recorded.
  std::optional<store::RunRecord> claimed;
  bool lease_lost = false;
};

// Artifacts of a generation point are stored under "{blueprint name}/{point name}".
std::string ArtifactKey(std::string_view blueprint_name, std::string_view point);
std::string StateWord(store::RunState s);
std::string RunName(int64_t id);

// A failed run's error as recorded. A blueprint may raise a string of any size, and every run
// listing carries the error, so it is cut (at a UTF-8 boundary) past kMaxRunErrorBytes; replay
// cuts a replayed error the same way before comparing.
std::string RecordedError(std::string_view message);

// The code of each bound artifact, verified against its digest.
absl::StatusOr<std::vector<BoundArtifact>> LoadArtifacts(store::Store* store,
                                                         const std::vector<store::Binding>& bindings);

// The limits a run was recorded with, from its engine profile.
absl::StatusOr<sandbox::Limits> LimitsFromProfile(std::string_view profile_json);

}  // namespace rote::orchestrator::engine
