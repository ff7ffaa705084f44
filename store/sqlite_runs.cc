#include "store/sqlite_runs.h"

#include <sqlite3.h>

#include <string>
#include <utility>

#include "store/checks.h"
#include "store/page_token.h"
#include "store/sqlite_review.h"
#include "store/status_macros.h"
#include "store/str_util.h"

namespace rote::store::internal {
namespace {

// ---- row loaders (used by readers and, for read-your-own-write results, by the writer) ----

constexpr std::string_view kRunColumns =
    "id, blueprint_digest, input_digest, state, engine_profile_json, output_digest, error, "
    "submitter, request_id, step_count, create_ms, start_ms, end_ms, interrupted, "
    "unreviewed_allowed_by";

RunRecord ReadRunRow(const Statement& stmt) {
  RunRecord r;
  r.id = stmt.ColumnInt(0);
  r.blueprint_digest = stmt.ColumnText(1);
  r.input_digest = stmt.ColumnText(2);
  r.state = ParseRunState(stmt.ColumnText(3)).value_or(RunState::kPending);
  r.engine_profile_json = stmt.ColumnText(4);
  r.output_digest = stmt.ColumnText(5);
  r.error = stmt.ColumnText(6);
  r.submitter = stmt.ColumnText(7);
  r.request_id = stmt.ColumnText(8);
  r.step_count = stmt.ColumnInt(9);
  r.create_ms = stmt.ColumnInt(10);
  r.start_ms = stmt.ColumnInt(11);  // NULL reads as 0
  r.end_ms = stmt.ColumnInt(12);
  r.interrupted = stmt.ColumnInt(13) != 0;
  r.unreviewed_allowed_by = stmt.ColumnText(14);
  return r;
}

absl::Status LoadRunBindings(Connection& conn, RunRecord& run) {
  ASSIGN_OR_RETURN(Statement stmt,
                   conn.Prepare("SELECT generation_point, artifact_digest, source FROM "
                                "run_bindings WHERE run_id = ? ORDER BY generation_point"));
  stmt.BindInt(1, run.id);
  while (true) {
    ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) return absl::OkStatus();
    run.bindings.push_back(Binding{stmt.ColumnText(0), stmt.ColumnText(1), stmt.ColumnText(2)});
  }
}

template <typename Bind>
absl::StatusOr<std::vector<RunRecord>> QueryRuns(Connection& conn, const std::string& sql,
                                                 Bind bind) {
  return QueryRows<RunRecord>(conn, sql, bind, ReadRunRow, LoadRunBindings);
}

absl::StatusOr<RunRecord> LoadRun(Connection& conn, int64_t run_id) {
  static const std::string sql = Cat("SELECT ", kRunColumns, " FROM runs WHERE id = ?");
  ASSIGN_OR_RETURN(auto runs, QueryRuns(conn, sql, [&](Statement& s) { s.BindInt(1, run_id); }));
  if (runs.empty()) return absl::NotFoundError(Cat("run ", run_id, " does not exist"));
  return std::move(runs.front());
}

absl::Status InsertRunBindings(Connection& conn, int64_t run_id,
                               const std::vector<Binding>& bindings) {
  for (const Binding& b : bindings) {
    RETURN_IF_ERROR(RequireArtifact(conn, b.artifact_digest, "bound artifact"));
    {
      ASSIGN_OR_RETURN(Statement stmt,
                       conn.Prepare("SELECT artifact_digest FROM run_bindings WHERE run_id = ? "
                                    "AND generation_point = ?"));
      stmt.BindInt(1, run_id).BindText(2, b.generation_point);
      ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (row) {
        if (stmt.ColumnText(0) == b.artifact_digest) continue;
        return absl::FailedPreconditionError(
            Cat("run ", run_id, " already binds '", b.generation_point, "' to ",
                stmt.ColumnText(0), "; a run's bindings cannot change"));
      }
    }
    ASSIGN_OR_RETURN(Statement stmt,
                     conn.Prepare("INSERT INTO run_bindings (run_id, generation_point, "
                                  "artifact_digest, source) VALUES (?, ?, ?, ?)"));
    stmt.BindInt(1, run_id)
        .BindText(2, b.generation_point)
        .BindText(3, b.artifact_digest)
        .BindText(4, b.source);
    RETURN_IF_ERROR(stmt.Run());
  }
  return absl::OkStatus();
}

absl::StatusOr<RunState> CurrentRunState(Connection& conn, int64_t run_id) {
  ASSIGN_OR_RETURN(Statement stmt, conn.Prepare("SELECT state FROM runs WHERE id = ?"));
  stmt.BindInt(1, run_id);
  ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return absl::NotFoundError(Cat("run ", run_id, " does not exist"));
  return ParseRunState(stmt.ColumnText(0)).value_or(RunState::kPending);
}

// Audits each binding of unreviewed code ("pending") a run got, naming who allowed it.
absl::Status AuditUnreviewed(Connection& conn, int64_t run_id, std::string_view allowed_by,
                             const std::vector<Binding>& bindings, int64_t now_ms) {
  for (const Binding& b : bindings) {
    if (b.source != "pending") continue;
    if (allowed_by.empty()) {
      return absl::InvalidArgumentError(Cat("run ", run_id, " binds unreviewed artifact ",
                                            b.artifact_digest, " but names nobody who allowed it"));
    }
    ASSIGN_OR_RETURN(Statement stmt, conn.Prepare("SELECT generation_point, revision FROM "
                                                  "artifacts WHERE digest = ?"));
    stmt.BindText(1, b.artifact_digest);
    ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) return absl::FailedPreconditionError(Cat("artifact ", b.artifact_digest, " is not stored"));
    AuditEntry e;
    e.principal = std::string(allowed_by);
    e.action = "run_unreviewed";
    e.generation_point = stmt.ColumnText(0);
    e.artifact_digest = b.artifact_digest;
    e.revision = stmt.ColumnInt(1);
    e.detail = Cat("run ", run_id, " runs pending code for '", b.generation_point, "'");
    e.run_id = run_id;
    RETURN_IF_ERROR(AppendAuditTx(conn, e, now_ms));
  }
  return absl::OkStatus();
}

// Appends one event to a run's history (inside the caller's write); returns its sequence.
absl::StatusOr<int64_t> InsertRunEvent(Connection& conn, int64_t run_id, int64_t now_ms,
                                       std::string_view kind, std::string_view payload) {
  int64_t sequence = 0;
  {
    ASSIGN_OR_RETURN(Statement stmt, conn.Prepare("SELECT COALESCE(MAX(seq), 0) + 1 FROM "
                                                  "run_events WHERE run_id = ?"));
    stmt.BindInt(1, run_id);
    RETURN_IF_ERROR(stmt.Step().status());
    sequence = stmt.ColumnInt(0);
  }
  ASSIGN_OR_RETURN(Statement stmt,
                   conn.Prepare("INSERT INTO run_events (run_id, seq, time_ms, kind, payload) "
                                "VALUES (?, ?, ?, ?, ?)"));
  stmt.BindInt(1, run_id).BindInt(2, sequence).BindInt(3, now_ms).BindText(4, kind).BindBlob(
      5, payload);
  RETURN_IF_ERROR(stmt.Run());
  return sequence;
}

}  // namespace

// ---- runs -------------------------------------------------------------------------------------

absl::StatusOr<CreateRunResult> SqliteRuns::CreateRun(const NewRun& run) {
  RETURN_IF_ERROR(CheckDigest(run.blueprint_digest, "run blueprint_digest"));
  RETURN_IF_ERROR(CheckDigest(run.input_digest, "run input_digest"));
  for (const Binding& b : run.bindings) RETURN_IF_ERROR(ValidateBinding(b));
  const int64_t now = db_.clock_ms();
  CreateRunResult result;
  RETURN_IF_ERROR(db_.Write([&](Connection& conn) -> absl::Status {
    if (!run.request_id.empty()) {
      // The writer runs one write at a time, so this check and the insert below are atomic:
      // concurrent submits of one request_id create one run.
      ASSIGN_OR_RETURN(Statement stmt, conn.Prepare("SELECT id FROM runs WHERE submitter = ? "
                                                    "AND request_id = ?"));
      stmt.BindText(1, run.submitter).BindText(2, run.request_id);
      ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (row) {
        const int64_t existing_id = stmt.ColumnInt(0);
        ASSIGN_OR_RETURN(result.run, LoadRun(conn, existing_id));
        result.created = false;
        return absl::OkStatus();
      }
    }
    ASSIGN_OR_RETURN(bool found, Exists(conn, "SELECT 1 FROM blueprints WHERE digest = ?",
                                        run.blueprint_digest));
    if (!found) {
      return absl::FailedPreconditionError(Cat(
          "run blueprint ", run.blueprint_digest, " is not stored; PutBlueprint it first"));
    }
    RETURN_IF_ERROR(RequireBlob(conn, run.input_digest, "run input"));
    {
      ASSIGN_OR_RETURN(
          Statement stmt,
          conn.Prepare("INSERT INTO runs (blueprint_digest, input_digest, state, "
                       "engine_profile_json, error, submitter, request_id, create_ms, "
                       "unreviewed_allowed_by) VALUES (?, ?, 'pending', ?, '', ?, ?, ?, ?)"));
      stmt.BindText(1, run.blueprint_digest)
          .BindText(2, run.input_digest)
          .BindText(3, run.engine_profile_json)
          .BindText(4, run.submitter)
          .BindText(5, run.request_id)
          .BindInt(6, now)
          .BindText(7, run.unreviewed_allowed_by);
      RETURN_IF_ERROR(stmt.Run());
    }
    const int64_t id = sqlite3_last_insert_rowid(conn.raw());
    RETURN_IF_ERROR(InsertRunBindings(conn, id, run.bindings));
    RETURN_IF_ERROR(AuditUnreviewed(conn, id, run.unreviewed_allowed_by, run.bindings, now));
    ASSIGN_OR_RETURN(result.run, LoadRun(conn, id));
    result.created = true;
    return absl::OkStatus();
  }));
  return result;
}

absl::StatusOr<RunRecord> SqliteRuns::GetRun(int64_t run_id) {
  return db_.ReadTx([&](Connection& conn) { return LoadRun(conn, run_id); });
}

absl::StatusOr<RunRecord> SqliteRuns::Transition(int64_t run_id, RunState to,
                                                 const RunOutcome* outcome) {
  const int64_t now = db_.clock_ms();
  RunRecord stored;
  RETURN_IF_ERROR(db_.Write([&](Connection& conn) -> absl::Status {
    ASSIGN_OR_RETURN(RunState from, CurrentRunState(conn, run_id));
    if (!IsLegalTransition(from, to)) {
      return absl::FailedPreconditionError(Cat("run ", run_id, " is ",
                                               RunStateName(from), "; it cannot become ",
                                               RunStateName(to)));
    }
    if (outcome == nullptr) {
      ASSIGN_OR_RETURN(Statement stmt,
                       conn.Prepare("UPDATE runs SET state = ?, start_ms = ? WHERE id = ?"));
      stmt.BindText(1, RunStateName(to)).BindInt(2, now).BindInt(3, run_id);
      RETURN_IF_ERROR(stmt.Run());
    } else {
      if (!outcome->output_digest.empty()) {
        RETURN_IF_ERROR(RequireBlob(conn, outcome->output_digest, "run output"));
      }
      ASSIGN_OR_RETURN(Statement stmt,
                       conn.Prepare("UPDATE runs SET state = ?, output_digest = ?, error = ?, "
                                    "end_ms = ?, interrupted = ? WHERE id = ?"));
      stmt.BindText(1, RunStateName(to))
          .BindTextOrNull(2, outcome->output_digest)
          .BindText(3, outcome->error)
          .BindInt(4, now)
          .BindInt(5, outcome->interrupted ? 1 : 0)
          .BindInt(6, run_id);
      RETURN_IF_ERROR(stmt.Run());
    }
    ASSIGN_OR_RETURN(stored, LoadRun(conn, run_id));
    return absl::OkStatus();
  }));
  return stored;
}

absl::StatusOr<RunRecord> SqliteRuns::StartRun(int64_t run_id) {
  return Transition(run_id, RunState::kRunning, nullptr);
}

absl::StatusOr<RunRecord> SqliteRuns::FinishRun(int64_t run_id, const RunOutcome& outcome) {
  RETURN_IF_ERROR(CheckRunOutcome(outcome));
  return Transition(run_id, outcome.state, &outcome);
}

absl::Status SqliteRuns::AddRunBindings(int64_t run_id, const std::vector<Binding>& bindings) {
  for (const Binding& b : bindings) RETURN_IF_ERROR(ValidateBinding(b));
  const int64_t now = db_.clock_ms();
  return db_.Write([&](Connection& conn) -> absl::Status {
    ASSIGN_OR_RETURN(RunState state, CurrentRunState(conn, run_id));
    if (IsTerminal(state)) {
      return absl::FailedPreconditionError(Cat(
          "run ", run_id, " is ", RunStateName(state), "; its bindings can no longer change"));
    }
    RETURN_IF_ERROR(InsertRunBindings(conn, run_id, bindings));
    ASSIGN_OR_RETURN(RunRecord run, LoadRun(conn, run_id));
    return AuditUnreviewed(conn, run_id, run.unreviewed_allowed_by, bindings, now);
  });
}

absl::StatusOr<RunRecord> SqliteRuns::RequeueRun(int64_t run_id, std::string_view event_kind,
                                                 std::string_view event_payload) {
  RETURN_IF_ERROR(CheckNonEmpty(event_kind, "run event kind"));
  const int64_t now = db_.clock_ms();
  RunRecord stored;
  RETURN_IF_ERROR(db_.Write([&](Connection& conn) -> absl::Status {
    ASSIGN_OR_RETURN(RunState from, CurrentRunState(conn, run_id));
    if (from != RunState::kRunning) {
      return absl::FailedPreconditionError(
          Cat("run ", run_id, " is ", RunStateName(from), "; only a running run can be re-queued"));
    }
    {
      ASSIGN_OR_RETURN(Statement stmt, conn.Prepare("DELETE FROM run_steps WHERE run_id = ?"));
      stmt.BindInt(1, run_id);
      RETURN_IF_ERROR(stmt.Run());
    }
    {
      ASSIGN_OR_RETURN(Statement stmt,
                       conn.Prepare("UPDATE runs SET state = 'pending', start_ms = NULL, "
                                    "step_count = 0 WHERE id = ?"));
      stmt.BindInt(1, run_id);
      RETURN_IF_ERROR(stmt.Run());
    }
    RETURN_IF_ERROR(InsertRunEvent(conn, run_id, now, event_kind, event_payload).status());
    ASSIGN_OR_RETURN(stored, LoadRun(conn, run_id));
    return absl::OkStatus();
  }));
  return stored;
}

absl::StatusOr<Page<RunRecord>> SqliteRuns::ListRuns(const RunFilter& filter,
                                                     const PageRequest& page) {
  if (!filter.blueprint_digest.empty()) {
    RETURN_IF_ERROR(CheckDigest(filter.blueprint_digest, "filter blueprint_digest"));
  }
  ASSIGN_OR_RETURN(const int size, EffectivePageSize(page.page_size));
  const std::string state_name =
      filter.state.has_value() ? std::string(RunStateName(*filter.state)) : "";
  const std::string filter_key = FilterKey({filter.blueprint_digest, state_name, filter.submitter});
  int64_t after = 0;
  if (!page.page_token.empty()) {
    ASSIGN_OR_RETURN(after, db_.tokens.Decode(page.page_token, "runs", filter_key));
  }
  std::string sql = Cat(
      "SELECT ", kRunColumns, " FROM runs WHERE id > ?1",
      filter.blueprint_digest.empty() ? "" : " AND blueprint_digest = ?3",
      state_name.empty() ? "" : " AND state = ?4",
      filter.submitter.empty() ? "" : " AND submitter = ?5", " ORDER BY id LIMIT ?2");
  return db_.ReadTx([&](Connection& conn) -> absl::StatusOr<Page<RunRecord>> {
    ASSIGN_OR_RETURN(auto rows, QueryRuns(conn, sql, [&](Statement& s) {
                       s.BindInt(1, after).BindInt(2, size + 1);
                       if (!filter.blueprint_digest.empty()) s.BindText(3, filter.blueprint_digest);
                       if (!state_name.empty()) s.BindText(4, state_name);
                       if (!filter.submitter.empty()) s.BindText(5, filter.submitter);
                     }));
    return MakePage(std::move(rows), size, db_.tokens, "runs", filter_key,
                    [](const RunRecord& r) { return r.id; });
  });
}

// ---- steps and events ---------------------------------------------------------------------------

absl::Status SqliteRuns::AppendSteps(int64_t run_id, const std::vector<StepRecord>& steps) {
  for (const StepRecord& s : steps) {
    RETURN_IF_ERROR(CheckDigest(s.artifact_digest, "step artifact_digest"));
    RETURN_IF_ERROR(CheckDigest(s.input_digest, "step input_digest"));
    RETURN_IF_ERROR(CheckDigest(s.output_digest, "step output_digest"));
  }
  return db_.Write([&](Connection& conn) -> absl::Status {
    int64_t count = 0;
    {
      ASSIGN_OR_RETURN(Statement stmt,
                       conn.Prepare("SELECT state, step_count FROM runs WHERE id = ?"));
      stmt.BindInt(1, run_id);
      ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (!row) return absl::NotFoundError(Cat("run ", run_id, " does not exist"));
      RunState state = ParseRunState(stmt.ColumnText(0)).value_or(RunState::kPending);
      if (IsTerminal(state)) {
        return absl::FailedPreconditionError(Cat(
            "run ", run_id, " is ", RunStateName(state), "; its step journal is closed"));
      }
      count = stmt.ColumnInt(1);
    }
    for (size_t i = 0; i < steps.size(); ++i) {
      const StepRecord& s = steps[i];
      if (s.index != count + static_cast<int64_t>(i)) {
        return absl::FailedPreconditionError(
            Cat("run ", run_id, " has ", count + static_cast<int64_t>(i),
                " steps; the next step's index must be that, not ", s.index));
      }
      RETURN_IF_ERROR(RequireArtifact(conn, s.artifact_digest, "step artifact"));
      ASSIGN_OR_RETURN(Statement stmt,
                       conn.Prepare("INSERT INTO run_steps (run_id, idx, generation_point, "
                                    "artifact_digest, input_digest, output_digest) "
                                    "VALUES (?, ?, ?, ?, ?, ?)"));
      stmt.BindInt(1, run_id)
          .BindInt(2, s.index)
          .BindText(3, s.generation_point)
          .BindText(4, s.artifact_digest)
          .BindText(5, s.input_digest)
          .BindText(6, s.output_digest);
      RETURN_IF_ERROR(stmt.Run());
    }
    ASSIGN_OR_RETURN(Statement stmt,
                     conn.Prepare("UPDATE runs SET step_count = step_count + ? WHERE id = ?"));
    stmt.BindInt(1, static_cast<int64_t>(steps.size())).BindInt(2, run_id);
    return stmt.Run();
  });
}

absl::StatusOr<std::vector<StepRecord>> SqliteRuns::ListSteps(int64_t run_id) {
  return db_.ReadTx([&](Connection& conn) -> absl::StatusOr<std::vector<StepRecord>> {
    RETURN_IF_ERROR(CurrentRunState(conn, run_id).status());
    ASSIGN_OR_RETURN(Statement stmt,
                     conn.Prepare("SELECT idx, generation_point, artifact_digest, input_digest, "
                                  "output_digest FROM run_steps WHERE run_id = ? ORDER BY idx"));
    stmt.BindInt(1, run_id);
    std::vector<StepRecord> out;
    while (true) {
      ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (!row) return out;
      out.push_back(StepRecord{stmt.ColumnInt(0), stmt.ColumnText(1), stmt.ColumnText(2),
                               stmt.ColumnText(3), stmt.ColumnText(4)});
    }
  });
}

absl::StatusOr<int64_t> SqliteRuns::AppendRunEvent(int64_t run_id, std::string_view kind,
                                                   std::string_view payload) {
  RETURN_IF_ERROR(CheckNonEmpty(kind, "run event kind"));
  const int64_t now = db_.clock_ms();
  int64_t sequence = 0;
  RETURN_IF_ERROR(db_.Write([&](Connection& conn) -> absl::Status {
    RETURN_IF_ERROR(CurrentRunState(conn, run_id).status());
    ASSIGN_OR_RETURN(sequence, InsertRunEvent(conn, run_id, now, kind, payload));
    return absl::OkStatus();
  }));
  return sequence;
}

absl::StatusOr<std::vector<RunEvent>> SqliteRuns::ListRunEvents(int64_t run_id,
                                                                int64_t after_sequence,
                                                                int32_t limit) {
  return db_.ReadTx([&](Connection& conn) -> absl::StatusOr<std::vector<RunEvent>> {
    RETURN_IF_ERROR(CurrentRunState(conn, run_id).status());
    ASSIGN_OR_RETURN(Statement stmt,
                     conn.Prepare("SELECT seq, time_ms, kind, payload FROM run_events "
                                  "WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?"));
    stmt.BindInt(1, run_id).BindInt(2, after_sequence).BindInt(3, limit > 0 ? limit : -1);
    std::vector<RunEvent> out;
    while (true) {
      ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (!row) return out;
      out.push_back(RunEvent{stmt.ColumnInt(0), stmt.ColumnInt(1), stmt.ColumnText(2),
                             stmt.ColumnBlob(3)});
    }
  });
}

}  // namespace rote::store::internal
