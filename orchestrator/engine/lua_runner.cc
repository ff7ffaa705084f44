#include "orchestrator/engine/lua_runner.h"

namespace rote::orchestrator::engine {

namespace {
class InProcessLuaRunner final : public LuaArtifactRunner {
 public:
  absl::StatusOr<std::vector<sandbox::CallResult>> Run(
      std::string_view source, std::string_view chunkname,
      const std::vector<sandbox::Value>& inputs, const sandbox::Limits& limits,
      std::optional<sandbox::LuaState::Clock::time_point> deadline) override {
    return sandbox::RunFunctionArtifact(source, chunkname, inputs, limits, deadline);
  }
};
class WorkerPoolLuaRunner final : public LuaArtifactRunner {
 public:
  explicit WorkerPoolLuaRunner(sandbox::WorkerPool* pool) : pool_(pool) {}
  absl::StatusOr<std::vector<sandbox::CallResult>> Run(
      std::string_view source, std::string_view chunkname,
      const std::vector<sandbox::Value>& inputs, const sandbox::Limits& limits,
      std::optional<sandbox::LuaState::Clock::time_point> deadline) override {
    std::optional<std::chrono::milliseconds> timeout;
    if (deadline) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - sandbox::LuaState::Clock::now());
      if (left.count() <= 0) return absl::DeadlineExceededError("the run's wall-clock deadline passed");
      timeout = left;
    }
    return pool_->Call(source, chunkname, inputs, limits, timeout);
  }

 private:
  sandbox::WorkerPool* pool_;
};

}  // namespace

std::unique_ptr<LuaArtifactRunner> MakeWorkerPoolLuaRunner(sandbox::WorkerPool* pool) {
  return std::make_unique<WorkerPoolLuaRunner>(pool);
}

std::unique_ptr<LuaArtifactRunner> MakeInProcessLuaRunner() {
  return std::make_unique<InProcessLuaRunner>();
}

}  // namespace rote::orchestrator::engine
