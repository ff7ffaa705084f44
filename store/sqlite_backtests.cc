#include "store/sqlite_backtests.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "store/checks.h"
#include "store/digest.h"
#include "store/status_macros.h"
#include "store/str_util.h"

namespace rote::store::internal {

absl::StatusOr<std::vector<PointStep>> SqliteBacktests::ListPointSteps(const PointStepQuery& query) {
  RETURN_IF_ERROR(CheckNonEmpty(query.blueprint_name, "blueprint name"));
  RETURN_IF_ERROR(CheckNonEmpty(query.point, "generation point"));
  const int64_t limit = std::clamp<int64_t>(query.limit, 1, 10000);
  const bool first_page = query.after_run_id == 0;
  // run_steps_by_point walks the point's steps newest run first; the joins keep the runs of
  // blueprints with this name, and the values come along when they are stored inline (one
  // read instead of two lookups per step). `run_id <= ?3` is the index range a page starts at.
  static constexpr std::string_view kSql =
      "SELECT s.run_id, s.idx, s.artifact_digest, s.input_digest, s.output_digest, "
      "bi.size, bi.placement, bi.data, bo.size, bo.placement, bo.data "
      "FROM run_steps s INDEXED BY run_steps_by_point "
      "JOIN runs r ON r.id = s.run_id "
      "JOIN blueprints b ON b.digest = r.blueprint_digest "
      "LEFT JOIN blobs bi ON bi.digest = s.input_digest "
      "LEFT JOIN blobs bo ON bo.digest = s.output_digest "
      "WHERE s.generation_point = ?1 AND b.name = ?2 "
      "AND s.run_id <= ?3 AND (s.run_id < ?3 OR s.idx > ?4) "
      "ORDER BY s.run_id DESC, s.idx ASC LIMIT ?5";
  return db_.ReadTx([&](Connection& conn) -> absl::StatusOr<std::vector<PointStep>> {
    std::vector<PointStep> steps;
    int64_t bytes = 0;
    ASSIGN_OR_RETURN(Statement stmt, conn.Prepare(kSql));
    stmt.BindText(1, query.point)
        .BindText(2, query.blueprint_name)
        .BindInt(3, first_page ? std::numeric_limits<int64_t>::max() : query.after_run_id)
        .BindInt(4, first_page ? -1 : query.after_index)
        .BindInt(5, limit);
    while (true) {
      ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (!row) break;
      PointStep s;
      s.run_id = stmt.ColumnInt(0);
      s.index = stmt.ColumnInt(1);
      s.artifact_digest = stmt.ColumnText(2);
      s.input_digest = stmt.ColumnText(3);
      s.output_digest = stmt.ColumnText(4);
      const bool inline_values = !stmt.ColumnIsNull(5) && !stmt.ColumnIsNull(8) &&
                                 stmt.ColumnText(6) == "inline" && stmt.ColumnText(9) == "inline";
      if (inline_values) {
        s.input = stmt.ColumnBlob(7);
        s.output = stmt.ColumnBlob(10);
        RETURN_IF_ERROR(VerifyBlobBytes(s.input_digest, stmt.ColumnInt(5), s.input));
        RETURN_IF_ERROR(VerifyBlobBytes(s.output_digest, stmt.ColumnInt(8), s.output));
        s.values_read = true;
        bytes += static_cast<int64_t>(s.input.size() + s.output.size());
      }
      steps.push_back(std::move(s));
      if (bytes >= query.max_value_bytes) break;
    }
    return steps;
  });
}

absl::StatusOr<BacktestRecord> SqliteBacktests::PutBacktest(const BacktestRecord& backtest) {
  RETURN_IF_ERROR(CheckDigest(backtest.artifact_digest, "artifact digest"));
  if (backtest.differences.size() > kMaxBacktestDifferences) {
    return absl::InvalidArgumentError(Cat("a backtest keeps at most ", kMaxBacktestDifferences,
                                          " differences, got ", backtest.differences.size()));
  }
  BacktestRecord stored = backtest;
  stored.create_ms = db_.clock_ms();
  RETURN_IF_ERROR(db_.Write([&](Connection& conn) -> absl::Status {
    RETURN_IF_ERROR(RequireArtifact(conn, backtest.artifact_digest, "backtested artifact"));
    {
      ASSIGN_OR_RETURN(Statement stmt,
                       conn.Prepare("INSERT INTO backtests (artifact_digest, live_artifact_digest, principal, "
                                    "calls, equal, different, errors, runs, runs_equal, runs_different, "
                                    "duration_ms, create_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"));
      stmt.BindText(1, stored.artifact_digest)
          .BindText(2, stored.live_artifact_digest)
          .BindText(3, stored.principal)
          .BindInt(4, stored.calls)
          .BindInt(5, stored.equal)
          .BindInt(6, stored.different)
          .BindInt(7, stored.errors)
          .BindInt(8, stored.runs)
          .BindInt(9, stored.runs_equal)
          .BindInt(10, stored.runs_different)
          .BindInt(11, stored.duration_ms)
          .BindInt(12, stored.create_ms);
      RETURN_IF_ERROR(stmt.Run());
    }
    stored.id = sqlite3_last_insert_rowid(conn.raw());
    int64_t ordinal = 0;
    for (const BacktestDifferenceRecord& d : stored.differences) {
      ASSIGN_OR_RETURN(Statement stmt,
                       conn.Prepare("INSERT INTO backtest_differences (backtest_id, ordinal, run_id, step, "
                                    "input_json, recorded_json, candidate_json, error, "
                                    "recorded_artifact_digest, truncated) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"));
      stmt.BindInt(1, stored.id)
          .BindInt(2, ordinal++)
          .BindInt(3, d.run_id)
          .BindInt(4, d.step)
          .BindText(5, d.input_json)
          .BindText(6, d.recorded_json)
          .BindText(7, d.candidate_json)
          .BindText(8, d.error)
          .BindText(9, d.recorded_artifact_digest)
          .BindInt(10, d.truncated ? 1 : 0);
      RETURN_IF_ERROR(stmt.Run());
    }
    return absl::OkStatus();
  }));
  return stored;
}

absl::StatusOr<BacktestRecord> SqliteBacktests::GetBacktest(std::string_view artifact_digest,
                                                            bool with_differences) {
  RETURN_IF_ERROR(CheckDigest(artifact_digest, "artifact digest"));
  return db_.ReadTx([&](Connection& conn) -> absl::StatusOr<BacktestRecord> {
    BacktestRecord r;
    {
      ASSIGN_OR_RETURN(Statement stmt,
                       conn.Prepare("SELECT id, live_artifact_digest, principal, calls, equal, different, errors, "
                                    "runs, runs_equal, runs_different, duration_ms, create_ms FROM backtests "
                                    "WHERE artifact_digest = ? ORDER BY id DESC LIMIT 1"));
      stmt.BindText(1, artifact_digest);
      ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (!row) return absl::NotFoundError(Cat("artifact ", artifact_digest, " has no backtest"));
      r.id = stmt.ColumnInt(0);
      r.artifact_digest = std::string(artifact_digest);
      r.live_artifact_digest = stmt.ColumnText(1);
      r.principal = stmt.ColumnText(2);
      r.calls = stmt.ColumnInt(3);
      r.equal = stmt.ColumnInt(4);
      r.different = stmt.ColumnInt(5);
      r.errors = stmt.ColumnInt(6);
      r.runs = stmt.ColumnInt(7);
      r.runs_equal = stmt.ColumnInt(8);
      r.runs_different = stmt.ColumnInt(9);
      r.duration_ms = stmt.ColumnInt(10);
      r.create_ms = stmt.ColumnInt(11);
    }
    if (!with_differences) return r;
    ASSIGN_OR_RETURN(Statement stmt,
                     conn.Prepare("SELECT run_id, step, input_json, recorded_json, candidate_json, error, "
                                  "recorded_artifact_digest, truncated FROM backtest_differences "
                                  "WHERE backtest_id = ? ORDER BY ordinal"));
    stmt.BindInt(1, r.id);
    while (true) {
      ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (!row) break;
      BacktestDifferenceRecord d;
      d.run_id = stmt.ColumnInt(0);
      d.step = stmt.ColumnInt(1);
      d.input_json = stmt.ColumnText(2);
      d.recorded_json = stmt.ColumnText(3);
      d.candidate_json = stmt.ColumnText(4);
      d.error = stmt.ColumnText(5);
      d.recorded_artifact_digest = stmt.ColumnText(6);
      d.truncated = stmt.ColumnInt(7) != 0;
      r.differences.push_back(std::move(d));
    }
    return r;
  });
}

}  // namespace rote::store::internal
