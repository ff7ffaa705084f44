// Backtests: the recorded calls of a generation point across runs (with their values, read in
// bulk) and the stored backtest results of artifacts.
#pragma once

#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "store/records.h"
#include "store/sqlite_db.h"

namespace rote::store::internal {

class SqliteBacktests {
 public:
  explicit SqliteBacktests(SqliteDb& db) : db_(db) {}

  absl::StatusOr<std::vector<PointStep>> ListPointSteps(const PointStepQuery& query);
  absl::StatusOr<BacktestRecord> PutBacktest(const BacktestRecord& backtest);
  absl::StatusOr<BacktestRecord> GetBacktest(std::string_view artifact_digest, bool with_differences);

 private:
  SqliteDb& db_;
};

}  // namespace rote::store::internal
