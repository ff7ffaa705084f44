// Replay: executes a recorded run again and compares it with its journal step by step, then
// its output (or error), without generating, reviewing or recording anything.
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "orchestrator/engine/engine.h"
#include "orchestrator/engine/lua_runner.h"
#include "store/store.h"

namespace rote::orchestrator::engine {

class Replayer {
 public:
  // `store` and `lua_runner` must outlive the replayer; `options` gives the limits for loading
  // the blueprint and the wall-clock deadline.
  Replayer(store::Store* store, LuaArtifactRunner* lua_runner, const EngineOptions& options)
      : store_(store), lua_runner_(lua_runner), options_(options) {}

  // FAILED_PRECONDITION for a run that has no complete record (not ended, interrupted, failed
  // before its blueprint executed) or whose blueprint, specs or semantic engine profile differ
  // from `current_profile`'s; DATA_LOSS for recorded values that do not match their digests.
  absl::StatusOr<ReplayResult> Replay(const store::RunRecord& run, std::string_view current_profile);

 private:
  store::Store* const store_;
  LuaArtifactRunner* const lua_runner_;
  const EngineOptions& options_;
};

}  // namespace rote::orchestrator::engine
