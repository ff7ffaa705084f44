// Trying and backtesting a revision before approval.
//
// Try runs one artifact (any review state) on one input under the run limits, exactly as a run
// calls it (Lua functions in the sandbox workers through the LuaArtifactRunner, RE2 patterns
// through RegexArtifact), and reports the result or error with what the call used.
//
// A backtest re-runs every recorded call of the artifact's generation point ("{blueprint}/
// {point}": steps named after the point in runs of blueprints with that name), newest run first,
// through the candidate, and compares each result with the recorded one. Calls are read page by
// page (no read transaction spans the backtest) and run in batches on several workers at once;
// results are compared in run and step order, so the outcome does not depend on the timing.
//   equal      the candidate's result (or error, as the journal writes it) is the recorded one
//   different  it returned something else (both values are kept)
//   error      it failed where the recorded call did not fail the same way
// With whole_runs, past runs of the blueprint are also executed again with the candidate bound
// in place of the recorded artifact, and their final outputs (or errors) compared.
//
// How a step is re-run follows from its journaled input: a pattern step names its method
// ({"method": "find_all", "text": ...}); a function step whose input is a list and whose recorded
// result is a list of the same length (or an "element N: ..." error) was a f:map(list) step and
// is mapped again, every other function step is one call.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "orchestrator/engine/engine.h"
#include "orchestrator/engine/lua_runner.h"
#include "sandbox/lua_runtime.h"
#include "store/store.h"

namespace rote::orchestrator::engine {

// Values kept with a difference are cut past this many bytes (and flagged truncated).
inline constexpr size_t kMaxBacktestValueBytes = 64 * 1024;

struct TryOutcome {
  std::string artifact_digest;
  std::string output_json;  // canonical; empty when it failed
  std::string error;        // empty when it succeeded
  sandbox::Usage usage;
  sandbox::Limits limits;
};

struct BacktestRequest {
  int64_t max_calls = 0;  // 0: all
  bool whole_runs = false;
  int64_t max_runs = 0;  // 0: 100
  std::string principal;
};

struct BacktesterOptions {
  // Batches in flight at once (each goes to one sandbox worker): at most the workers the Lua
  // runner has, beyond that calls wait for a worker.
  int parallelism = 4;
  // Calls per batch (one worker round trip).
  int batch_size = 256;
  // Recorded calls read per store query, and the most bytes of recorded values a page holds
  // (a page ends early at the call that passes it).
  int page_size = 4096;
  int64_t page_bytes = 64 << 20;
  // The live revision of the candidate's point, or "" when it has none; unset: always "".
  LiveRevisionLookup live_revision;
  // Polled between batches: true stops the backtest (CANCELLED).
  std::function<bool()> cancelled;
};

// Runs `code` on one input. `input_json` for a pattern is the text (a JSON string) or a step
// input {"method": ..., "text"/"texts": ...}; a string input means find_all.
absl::StatusOr<TryOutcome> TryCode(LuaArtifactRunner* lua_runner, const store::ArtifactRecord& artifact,
                                   std::string_view input_json, const sandbox::Limits& limits,
                                   std::chrono::milliseconds deadline);

// Sets view->backtest to the artifact's newest backtest (summary only), if it has one.
absl::Status AddBacktestSummary(store::Store* store, ArtifactView* view);

class Backtester {
 public:
  // `store` and `lua_runner` must outlive the backtester; `engine_options` gives the limits for
  // loading blueprints and the wall-clock deadline of each batch and whole run.
  Backtester(store::Store* store, LuaArtifactRunner* lua_runner, const EngineOptions& engine_options,
             BacktesterOptions options)
      : store_(store), lua_runner_(lua_runner), engine_options_(engine_options), options_(std::move(options)) {}

  // Backtests `candidate` and stores the result (the artifact's backtest from then on).
  // FAILED_PRECONDITION for an artifact outside any blueprint's point, CANCELLED when asked
  // to stop, UNAVAILABLE / DEADLINE_EXCEEDED when the sandbox fails (no verdict).
  absl::StatusOr<store::BacktestRecord> Run(const store::ArtifactRecord& candidate, const BacktestRequest& request);

 private:
  class Calls;
  absl::Status WholeRuns(const store::ArtifactRecord& candidate, const std::string& blueprint_name,
                         const std::string& point, const BacktestRequest& request, store::BacktestRecord* out);
  bool Cancelled() const { return options_.cancelled && options_.cancelled(); }

  store::Store* const store_;
  LuaArtifactRunner* const lua_runner_;
  const EngineOptions& engine_options_;
  const BacktesterOptions options_;
};

}  // namespace rote::orchestrator::engine
