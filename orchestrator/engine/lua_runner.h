// Where Lua function artifacts execute. The design puts generated code in isolated worker
// processes (sandbox/worker); the engine only needs "run this chunk on these inputs under these
// limits", so it holds this interface and the server picks the implementation.
#pragma once

#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "sandbox/lua_runtime.h"
#include "sandbox/worker_pool.h"

namespace rote::orchestrator::engine {

class LuaArtifactRunner {
 public:
  virtual ~LuaArtifactRunner() = default;
  // Same contract as sandbox::RunFunctionArtifact: one result per input; a compile error fails
  // the whole batch; DEADLINE_EXCEEDED (wall clock) is an infrastructure failure.
  virtual absl::StatusOr<std::vector<sandbox::CallResult>> Run(
      std::string_view source, std::string_view chunkname,
      const std::vector<sandbox::Value>& inputs, const sandbox::Limits& limits,
      std::optional<sandbox::LuaState::Clock::time_point> deadline) = 0;
};

// Runs artifacts in the isolated worker processes of `pool` (which must outlive the runner): what
// the server uses.
std::unique_ptr<LuaArtifactRunner> MakeWorkerPoolLuaRunner(sandbox::WorkerPool* pool);

// Runs artifacts in this process, in a fresh deterministic Lua state per batch and a fresh
// environment per input (sandbox::RunFunctionArtifact): the same profile and limits as the
// workers, without their process isolation. For tools and tests that exercise the engine alone.
std::unique_ptr<LuaArtifactRunner> MakeInProcessLuaRunner();

}  // namespace rote::orchestrator::engine
