// The blueprint runtime: loads a blueprint in the deterministic sandbox (in-process; blueprints
// are expert-written), collects its generation points, binds them to artifacts and executes
// run(input), journaling every artifact call through a StepObserver.
//
// What a blueprint sees (docs/blueprints.md is the author's guide):
//   rote.blueprint { name = "...", version = "..." }  -> bp (call once; `return bp` at the end)
//   bp:regex { name, task, examples = { { "text", { "match", ... } }, ... } }  -> pattern handle
//   bp:lua { name, task, signature, tests = { { input, expected }, ... } }      -> function handle
//   function bp.run(input) ... end
//   rote.log(...)                         a log line of the run (space-separated, tostring'd)
// Pattern handles: re:match(text), re:find_all(text), re:captures(text), and the batch forms
// re:match_each(texts), re:find_all_each(texts), re:captures_each(texts).
// Function handles: f(x), and the batch form f:map(list).
// Each call of a handle (a batch form counts once) is one journaled step.
#pragma once

#include <atomic>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "orchestrator/engine/artifact.h"
#include "orchestrator/engine/canonical.h"
#include "orchestrator/engine/lua_runner.h"
#include "orchestrator/engine/spec.h"
#include "sandbox/lua_runtime.h"

struct lua_State;

namespace rote::orchestrator::engine {

struct BlueprintDecl {
  std::string name;     // rote.blueprint { name = ... }
  std::string version;  // rote.blueprint { version = ... }
  int line = 0;         // of the rote.blueprint call
  std::vector<GenerationPoint> points;  // in declaration order, sealed
};

// Loads the blueprint without running it. INVALID_ARGUMENT with "<chunkname>:<line>: ..." for
// syntax errors, errors raised while loading, a missing `run`, duplicate generation point names,
// examples that do not fit the kind, and a chunk that does not return the blueprint.
absl::StatusOr<BlueprintDecl> LoadBlueprint(std::string_view source, std::string_view chunkname,
                                            const sandbox::Limits& limits);

// An artifact bound to a generation point for one execution.
struct BoundArtifact {
  std::string point;
  std::string digest;
  ArtifactCode code;
};

// One call of an artifact, as journaled.
struct StepCall {
  int64_t index = 0;
  std::string point;
  std::string artifact_digest;
  Canonical input;   // for patterns: {"method": "...", "text": "..."} or {"method", "texts"}
  Canonical output;  // the result, or {"error": "..."} when the artifact failed
};

// Receives the journal as the run executes: the recorder of a run, or replay's comparator.
// Called on the executing thread.
class StepObserver {
 public:
  virtual ~StepObserver() = default;
  // Before the artifact runs (`step.output` is empty). A non-OK status stops the execution and
  // becomes its result.
  virtual absl::Status BeforeCall(const StepCall& step) = 0;
  // After it ran. A non-OK status stops the execution and becomes its result.
  virtual absl::Status AfterCall(const StepCall& step) = 0;
  virtual void Log(std::string_view line) = 0;
};

// Stops an execution from another thread (cancellation, shutdown): the blueprint's next Lua
// instruction raises, and ExecuteBlueprint returns `reason`. Thread-safe.
class RunInterrupt {
 public:
  void Interrupt(absl::Status reason);
  bool interrupted() const { return interrupted_.load(std::memory_order_acquire); }
  absl::Status reason() const;

  // Used by ExecuteBlueprint: the state to interrupt while it runs.
  void Attach(lua_State* L);
  void Detach();

 private:
  mutable std::mutex mu_;
  lua_State* L_ = nullptr;
  std::atomic<bool> interrupted_{false};
  absl::Status reason_;
};

struct ExecuteOptions {
  // For the blueprint's state and for each artifact call.
  sandbox::Limits limits;
  // Wall-clock safety net (DEADLINE_EXCEEDED is an infrastructure failure, not a result).
  std::optional<sandbox::LuaState::Clock::time_point> deadline;
  LuaArtifactRunner* lua_runner = nullptr;  // required when a Lua function is bound
  StepObserver* observer = nullptr;         // optional
  RunInterrupt* interrupt = nullptr;        // optional
};

// Executes run(input) with `artifacts` bound by generation point name; returns the canonical
// output. FAILED_PRECONDITION for errors of the blueprint ("<chunkname>:<line>: ...") and for
// unbound points, RESOURCE_EXHAUSTED for limits (an output whose canonical JSON is larger than
// limits.max_memory_bytes is one), CANCELLED (or the interrupt's reason) when
// interrupted, and whatever the observer returned when it stopped the execution.
absl::StatusOr<Canonical> ExecuteBlueprint(std::string_view source, std::string_view chunkname,
                                           const std::vector<BoundArtifact>& artifacts,
                                           const sandbox::Value& input,
                                           const ExecuteOptions& options);

}  // namespace rote::orchestrator::engine
