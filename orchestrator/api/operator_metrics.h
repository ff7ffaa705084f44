// The metrics an operator watches beyond RPCs (docs/operations.md, "Metrics"): runs by blueprint
// and state, run durations, the queue, re-queues by drain; generation attempts, their outcomes
// and tokens, cache hits; the inference engine's tokens, batches, KV cache and waiting requests;
// sandbox worker restarts and limit hits. Events (a run ended, an attempt finished) are counted
// as they happen; states (queue depth, KV blocks in use) are read from their owners at each
// scrape.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "inference/engine.h"
#include "orchestrator/engine/engine.h"
#include "sandbox/worker_pool.h"
#include "store/records.h"

namespace prometheus {
class Registry;
class Collectable;
}  // namespace prometheus

namespace rote::orchestrator {

// Bounded label values from user data (blueprint names): the first `max_values` distinct values
// keep their own label, every later one is "other", so /metrics cannot grow without bound.
// Thread-safe.
class LabelCap {
 public:
  explicit LabelCap(size_t max_values = 100) : max_values_(max_values) {}
  std::string operator()(const std::string& value);

 private:
  std::mutex mu_;
  std::set<std::string> kept_;
  const size_t max_values_;
};

// The generation failure reasons counted apart; any other failure is "other".
// Keep in step with docs/operations.md.
inline constexpr const char* kGenerationFailureReasons[] = {
    "no_code", "invalid_utf8", "compile_error", "unknown_names", "tests_failed", "refused", "other"};

// Where the scrape-time values come from; any may be empty (e.g. no model).
struct MetricSources {
  std::function<engine::Engine::QueueStats()> runs;
  std::function<sandbox::WorkerPoolStats()> workers;
  std::function<inference::EngineStats()> model;
  int32_t kv_blocks_total = 0;
};

class OperatorMetrics {
 public:
  // Registers the event families in `registry`; the caller exposes Collectable() beside it.
  explicit OperatorMetrics(prometheus::Registry& registry);
  ~OperatorMetrics();

  // Replaces the sources; returns once no scrape reads the old ones (so SetSources({}) before
  // their owners go away makes them safe to destroy).
  void SetSources(MetricSources sources);
  std::shared_ptr<prometheus::Collectable> Collectable();

  // A run reached a terminal state; `seconds` from its start (negative: it never started).
  void RunEnded(const std::string& blueprint, store::RunState state, double seconds);
  // One generation attempt: passed, or failed for `reason` (one of kGenerationFailureReasons).
  void GenerationAttempt(bool passed, const std::string& reason, int64_t prompt_tokens, int64_t output_tokens,
                         double seconds);
  // A generation request answered without the model: "artifact" (the cache) or "failure" (the
  // record of the same failed request).
  void GenerationCacheHit(const std::string& kind);

 private:
  struct Families;
  class Snapshot;
  LabelCap blueprints_;
  std::unique_ptr<Families> families_;
  std::shared_ptr<Snapshot> snapshot_;
};

}  // namespace rote::orchestrator
