// The PostgreSQL store: runs, their journals and events, backtests, generations and lookups by
// prefix (caches: pg_caches.cc; leases: pg_leases.cc). See pg_store.h.
#include <algorithm>
#include <limits>
#include <string>
#include <utility>

#include "store/checks.h"
#include "store/digest.h"
#include "store/pg_store.h"
#include "store/str_util.h"

namespace rote::store::internal {
namespace {

using P = PgParam;

constexpr std::string_view kRunColumns =
    "id, blueprint_digest, input_digest, state, engine_profile_json, output_digest, error, "
    "submitter, request_id, step_count, create_ms, start_ms, end_ms, interrupted, "
    "unreviewed_allowed_by";

absl::StatusOr<std::vector<RunRecord>> QueryRuns(PgConn& conn, const std::string& sql,
                                                 const std::vector<PgParam>& params) {
  ASSIGN_OR_RETURN(PgResult res, conn.Exec(sql, params));
  std::vector<RunRecord> runs;
  for (int i = 0; i < res.rows(); ++i) {
    RunRecord r;
    r.id = res.Int(i, 0);
    r.blueprint_digest = res.Text(i, 1);
    r.input_digest = res.Text(i, 2);
    r.state = ParseRunState(res.Text(i, 3)).value_or(RunState::kPending);
    r.engine_profile_json = res.Text(i, 4);
    r.output_digest = res.Text(i, 5);
    r.error = res.Text(i, 6);
    r.submitter = res.Text(i, 7);
    r.request_id = res.Text(i, 8);
    r.step_count = res.Int(i, 9);
    r.create_ms = res.Int(i, 10);
    r.start_ms = res.Int(i, 11);  // NULL reads as 0
    r.end_ms = res.Int(i, 12);
    r.interrupted = res.Int(i, 13) != 0;
    r.unreviewed_allowed_by = res.Text(i, 14);
    runs.push_back(std::move(r));
  }
  for (RunRecord& run : runs) {
    ASSIGN_OR_RETURN(PgResult b, conn.Exec("SELECT generation_point, artifact_digest, source "
                                           "FROM run_bindings WHERE run_id = $1 "
                                           "ORDER BY generation_point",
                                           {P::Int(run.id)}));
    for (int i = 0; i < b.rows(); ++i) {
      run.bindings.push_back(Binding{b.Text(i, 0), b.Text(i, 1), b.Text(i, 2)});
    }
  }
  return runs;
}

absl::StatusOr<RunRecord> LoadRun(PgConn& conn, int64_t run_id) {
  ASSIGN_OR_RETURN(auto runs, QueryRuns(conn, Cat("SELECT ", kRunColumns,
                                                  " FROM runs WHERE id = $1"),
                                        {P::Int(run_id)}));
  if (runs.empty()) return absl::NotFoundError(Cat("run ", run_id, " does not exist"));
  return std::move(runs.front());
}

absl::StatusOr<RunState> CurrentRunState(PgConn& conn, int64_t run_id) {
  ASSIGN_OR_RETURN(PgResult res,
                   conn.Exec("SELECT state FROM runs WHERE id = $1", {P::Int(run_id)}));
  if (res.rows() == 0) return absl::NotFoundError(Cat("run ", run_id, " does not exist"));
  return ParseRunState(res.Text(0, 0)).value_or(RunState::kPending);
}

// The run's state, its row locked to the end of the transaction: the writes of one run
// (transitions, bindings, steps, events) take turns, those of different runs do not wait.
absl::StatusOr<RunState> LockRun(PgConn& conn, int64_t run_id) {
  ASSIGN_OR_RETURN(PgResult res, conn.Exec("SELECT state FROM runs WHERE id = $1 FOR UPDATE",
                                           {P::Int(run_id)}));
  if (res.rows() == 0) return absl::NotFoundError(Cat("run ", run_id, " does not exist"));
  return ParseRunState(res.Text(0, 0)).value_or(RunState::kPending);
}

// Appends an event with the run's next sequence number; the caller holds the run's row lock,
// so two appends to one run never compute the same number.
absl::StatusOr<int64_t> InsertRunEvent(PgConn& conn, int64_t run_id, int64_t now_ms,
                                       std::string_view kind, std::string_view payload) {
  ASSIGN_OR_RETURN(PgResult res,
                   conn.Exec("INSERT INTO run_events (run_id, seq, time_ms, kind, payload) "
                             "SELECT $1, COALESCE(MAX(seq), 0) + 1, $2, $3, $4 FROM run_events "
                             "WHERE run_id = $1 RETURNING seq",
                             {P::Int(run_id), P::Int(now_ms), P::Text(kind), P::Bytes(payload)}));
  return res.Int(0, 0);
}

absl::Status InsertRunBindings(PgConn& conn, int64_t run_id,
                               const std::vector<Binding>& bindings) {
  for (const Binding& b : bindings) {
    RETURN_IF_ERROR(PgRequireArtifact(conn, b.artifact_digest, "bound artifact"));
    ASSIGN_OR_RETURN(PgResult res, conn.Exec("SELECT artifact_digest FROM run_bindings WHERE "
                                             "run_id = $1 AND generation_point = $2",
                                             {P::Int(run_id), P::Text(b.generation_point)}));
    if (res.rows() > 0) {
      if (res.Text(0, 0) == b.artifact_digest) continue;
      return absl::FailedPreconditionError(
          Cat("run ", run_id, " already binds '", b.generation_point, "' to ", res.Text(0, 0),
              "; a run's bindings cannot change"));
    }
    RETURN_IF_ERROR(conn.Exec("INSERT INTO run_bindings (run_id, generation_point, "
                              "artifact_digest, source) VALUES ($1, $2, $3, $4)",
                              {P::Int(run_id), P::Text(b.generation_point),
                               P::Text(b.artifact_digest), P::Text(b.source)})
                        .status());
  }
  return absl::OkStatus();
}

// Audits each binding of unreviewed code ("pending") a run got, naming who allowed it.
absl::Status AuditUnreviewed(PgConn& conn, int64_t run_id, std::string_view allowed_by,
                             const std::vector<Binding>& bindings, int64_t now_ms) {
  for (const Binding& b : bindings) {
    if (b.source != "pending") continue;
    if (allowed_by.empty()) {
      return absl::InvalidArgumentError(Cat("run ", run_id, " binds unreviewed artifact ",
                                            b.artifact_digest,
                                            " but names nobody who allowed it"));
    }
    ASSIGN_OR_RETURN(PgResult res, conn.Exec("SELECT generation_point, revision FROM artifacts "
                                             "WHERE digest = $1",
                                             {P::Text(b.artifact_digest)}));
    if (res.rows() == 0) {
      return absl::FailedPreconditionError(Cat("artifact ", b.artifact_digest, " is not stored"));
    }
    AuditEntry e;
    e.principal = std::string(allowed_by);
    e.action = "run_unreviewed";
    e.generation_point = res.Text(0, 0);
    e.artifact_digest = b.artifact_digest;
    e.revision = res.Int(0, 1);
    e.detail = Cat("run ", run_id, " runs pending code for '", b.generation_point, "'");
    e.run_id = run_id;
    RETURN_IF_ERROR(PgAppendAudit(conn, e, now_ms));
  }
  return absl::OkStatus();
}

// The total of `count_sql` and the first `limit` strings of `rows_sql` (which takes the limit
// as its last parameter), in one snapshot.
absl::StatusOr<Store::Matches> Collect(PgDb& db, const std::string& rows_sql,
                                       const std::string& count_sql, int limit,
                                       std::vector<PgParam> params) {
  return db.Read([&](PgConn& conn) -> absl::StatusOr<Store::Matches> {
    Store::Matches out;
    ASSIGN_OR_RETURN(PgResult count, conn.Exec(count_sql, params));
    if (count.rows() > 0) out.total = count.Int(0, 0);
    if (limit <= 0 || out.total == 0) return out;
    params.push_back(P::Int(limit));
    ASSIGN_OR_RETURN(PgResult res, conn.Exec(rows_sql, params));
    for (int i = 0; i < res.rows(); ++i) out.items.push_back(res.Text(i, 0));
    return out;
  });
}

constexpr std::string_view kGenerationColumns =
    "id, request_digest, generation_point, spec_digest, model_digest, numerics_profile, "
    "prompt_template_version, decoding_json, device, passed, artifact_digest, failure, create_ms";

absl::StatusOr<std::vector<std::pair<int64_t, GenerationRecord>>> QueryGenerations(
    PgConn& conn, const std::string& sql, const std::vector<PgParam>& params) {
  ASSIGN_OR_RETURN(PgResult res, conn.Exec(sql, params));
  std::vector<std::pair<int64_t, GenerationRecord>> rows;
  for (int i = 0; i < res.rows(); ++i) {
    GenerationRecord g;
    g.request_digest = res.Text(i, 1);
    g.generation_point = res.Text(i, 2);
    g.spec_digest = res.Text(i, 3);
    g.model_digest = res.Text(i, 4);
    g.numerics_profile = res.Text(i, 5);
    g.prompt_template_version = res.Text(i, 6);
    g.decoding_json = res.Text(i, 7);
    g.device = res.Text(i, 8);
    g.passed = res.Int(i, 9) != 0;
    g.artifact_digest = res.Text(i, 10);
    g.failure = res.Text(i, 11);
    g.create_ms = res.Int(i, 12);
    rows.emplace_back(res.Int(i, 0), std::move(g));
  }
  for (auto& [id, g] : rows) {
    ASSIGN_OR_RETURN(PgResult attempts,
                     conn.Exec(Cat("SELECT ", kPgAttemptColumns, " FROM generation_attempts "
                                   "WHERE generation_id = $1 ORDER BY idx"),
                               {P::Int(id)}));
    for (int i = 0; i < attempts.rows(); ++i) g.attempts.push_back(ReadPgAttempt(attempts, i, 0));
  }
  return rows;
}

absl::StatusOr<GenerationRecord> LoadGeneration(PgConn& conn, std::string_view digest) {
  ASSIGN_OR_RETURN(auto rows, QueryGenerations(conn, Cat("SELECT ", kGenerationColumns,
                                                         " FROM generations WHERE "
                                                         "request_digest = $1"),
                                               {P::Text(digest)}));
  if (rows.empty()) {
    return absl::NotFoundError(Cat("no generation is recorded for request ", digest));
  }
  return std::move(rows.front().second);
}

}  // namespace

absl::StatusOr<RunRecord> PgLoadRun(PgConn& conn, int64_t run_id) { return LoadRun(conn, run_id); }
absl::StatusOr<int64_t> PgInsertRunEvent(PgConn& conn, int64_t run_id, int64_t now_ms,
                                         std::string_view kind, std::string_view payload) {
  return InsertRunEvent(conn, run_id, now_ms, kind, payload);
}
absl::Status PgInsertNewRunEvents(PgConn& conn, int64_t run_id, int64_t now_ms,
                                  const std::vector<NewRunEvent>& events) {
  for (const NewRunEvent& e : events) {
    RETURN_IF_ERROR(CheckNonEmpty(e.kind, "run event kind"));
    RETURN_IF_ERROR(InsertRunEvent(conn, run_id, now_ms, e.kind, e.payload).status());
  }
  return absl::OkStatus();
}

// ---- runs -------------------------------------------------------------------------------------

absl::StatusOr<CreateRunResult> PgStore::CreateRun(const NewRun& run) {
  return CreateRunWithEvents(run, {});
}

absl::StatusOr<CreateRunResult> PgStore::CreateRunWithEvents(const NewRun& run,
                                                             const std::vector<NewRunEvent>& events) {
  RETURN_IF_ERROR(CheckDigest(run.blueprint_digest, "run blueprint_digest"));
  RETURN_IF_ERROR(CheckDigest(run.input_digest, "run input_digest"));
  for (const Binding& b : run.bindings) RETURN_IF_ERROR(ValidateBinding(b));
  const int64_t now = db_.clock_ms();
  CreateRunResult result;
  RETURN_IF_ERROR(db_.Write([&](PgConn& conn) -> absl::Status {
    if (!run.request_id.empty()) {
      // The usual case of a repeated request; a race of two is settled by the unique index
      // below.
      ASSIGN_OR_RETURN(PgResult res, conn.Exec("SELECT id FROM runs WHERE submitter = $1 AND "
                                               "request_id = $2",
                                               {P::Text(run.submitter), P::Text(run.request_id)}));
      if (res.rows() > 0) {
        ASSIGN_OR_RETURN(result.run, LoadRun(conn, res.Int(0, 0)));
        result.created = false;
        return absl::OkStatus();
      }
    }
    ASSIGN_OR_RETURN(PgResult found, conn.Exec("SELECT 1 FROM blueprints WHERE digest = $1",
                                               {P::Text(run.blueprint_digest)}));
    if (found.rows() == 0) {
      return absl::FailedPreconditionError(Cat(
          "run blueprint ", run.blueprint_digest, " is not stored; PutBlueprint it first"));
    }
    RETURN_IF_ERROR(PgRequireBlob(conn, run.input_digest, "run input"));
    ASSIGN_OR_RETURN(PgResult res,
                     conn.Exec("INSERT INTO runs (blueprint_digest, input_digest, state, "
                               "engine_profile_json, error, submitter, request_id, create_ms, "
                               "unreviewed_allowed_by) VALUES ($1, $2, 'pending', $3, '', $4, "
                               "$5, $6, $7) ON CONFLICT (submitter, request_id) "
                               "WHERE request_id <> '' DO NOTHING RETURNING id",
                               {P::Text(run.blueprint_digest), P::Text(run.input_digest),
                                P::Text(run.engine_profile_json), P::Text(run.submitter),
                                P::Text(run.request_id), P::Int(now),
                                P::Text(run.unreviewed_allowed_by)}));
    if (res.rows() == 0) {
      // A concurrent submission of this request_id committed first (the insert waited for it):
      // its run is the answer.
      ASSIGN_OR_RETURN(PgResult other, conn.Exec("SELECT id FROM runs WHERE submitter = $1 AND "
                                                 "request_id = $2",
                                                 {P::Text(run.submitter), P::Text(run.request_id)}));
      if (other.rows() == 0) return absl::AbortedError("store: a concurrent run vanished");
      ASSIGN_OR_RETURN(result.run, LoadRun(conn, other.Int(0, 0)));
      result.created = false;
      return absl::OkStatus();
    }
    const int64_t id = res.Int(0, 0);
    RETURN_IF_ERROR(InsertRunBindings(conn, id, run.bindings));
    RETURN_IF_ERROR(AuditUnreviewed(conn, id, run.unreviewed_allowed_by, run.bindings, now));
    RETURN_IF_ERROR(PgInsertNewRunEvents(conn, id, now, events));
    ASSIGN_OR_RETURN(result.run, LoadRun(conn, id));
    result.created = true;
    return absl::OkStatus();
  }));
  return result;
}

absl::StatusOr<RunRecord> PgStore::GetRun(int64_t run_id) {
  return db_.Read([&](PgConn& conn) { return LoadRun(conn, run_id); });
}

absl::StatusOr<RunRecord> PgStore::Transition(int64_t run_id, RunState to,
                                              const RunOutcome* outcome, const NewRunEvent* event) {
  const int64_t now = db_.clock_ms();
  RunRecord stored;
  RETURN_IF_ERROR(db_.Write([&](PgConn& conn) -> absl::Status {
    ASSIGN_OR_RETURN(RunState from, LockRun(conn, run_id));
    RETURN_IF_ERROR(leases_.Check(conn, run_id));
    if (!IsLegalTransition(from, to)) {
      return absl::FailedPreconditionError(Cat("run ", run_id, " is ", RunStateName(from),
                                               "; it cannot become ", RunStateName(to)));
    }
    if (outcome == nullptr) {
      RETURN_IF_ERROR(conn.Exec("UPDATE runs SET state = $1, start_ms = $2 WHERE id = $3",
                                {P::Text(RunStateName(to)), P::Int(now), P::Int(run_id)})
                          .status());
    } else {
      if (!outcome->output_digest.empty()) {
        RETURN_IF_ERROR(PgRequireBlob(conn, outcome->output_digest, "run output"));
      }
      RETURN_IF_ERROR(conn.Exec("UPDATE runs SET state = $1, output_digest = $2, error = $3, "
                                "end_ms = $4, interrupted = $5 WHERE id = $6",
                                {P::Text(RunStateName(to)), P::TextOrNull(outcome->output_digest),
                                 P::Text(outcome->error), P::Int(now),
                                 P::Bool(outcome->interrupted), P::Int(run_id)})
                          .status());
    }
    if (event != nullptr) {
      RETURN_IF_ERROR(InsertRunEvent(conn, run_id, now, event->kind, event->payload).status());
    }
    ASSIGN_OR_RETURN(stored, LoadRun(conn, run_id));
    return absl::OkStatus();
  }));
  if (outcome != nullptr) leases_.End(run_id);
  return stored;
}

absl::StatusOr<RunRecord> PgStore::StartRun(int64_t run_id) {
  return Transition(run_id, RunState::kRunning, nullptr, nullptr);
}

absl::StatusOr<RunRecord> PgStore::FinishRun(int64_t run_id, const RunOutcome& outcome) {
  RETURN_IF_ERROR(CheckRunOutcome(outcome));
  return Transition(run_id, outcome.state, &outcome, nullptr);
}

absl::Status PgStore::AddRunBindings(int64_t run_id, const std::vector<Binding>& bindings) {
  for (const Binding& b : bindings) RETURN_IF_ERROR(ValidateBinding(b));
  const int64_t now = db_.clock_ms();
  return db_.Write([&](PgConn& conn) -> absl::Status {
    ASSIGN_OR_RETURN(RunState state, LockRun(conn, run_id));
    RETURN_IF_ERROR(leases_.Check(conn, run_id));
    if (IsTerminal(state)) {
      return absl::FailedPreconditionError(Cat("run ", run_id, " is ", RunStateName(state),
                                               "; its bindings can no longer change"));
    }
    RETURN_IF_ERROR(InsertRunBindings(conn, run_id, bindings));
    ASSIGN_OR_RETURN(RunRecord run, LoadRun(conn, run_id));
    return AuditUnreviewed(conn, run_id, run.unreviewed_allowed_by, bindings, now);
  });
}

absl::StatusOr<RunRecord> PgStore::RequeueRun(int64_t run_id, std::string_view event_kind,
                                              std::string_view event_payload) {
  RETURN_IF_ERROR(CheckNonEmpty(event_kind, "run event kind"));
  const int64_t now = db_.clock_ms();
  RunRecord stored;
  RETURN_IF_ERROR(db_.Write([&](PgConn& conn) -> absl::Status {
    // The row lock orders this after a concurrent FinishRun or AppendSteps of the same run:
    // either the run is still running here, or the re-queue is refused.
    ASSIGN_OR_RETURN(RunState from, LockRun(conn, run_id));
    RETURN_IF_ERROR(leases_.Check(conn, run_id));
    if (from != RunState::kRunning) {
      return absl::FailedPreconditionError(
          Cat("run ", run_id, " is ", RunStateName(from), "; only a running run can be re-queued"));
    }
    RETURN_IF_ERROR(
        conn.Exec("DELETE FROM run_steps WHERE run_id = $1", {P::Int(run_id)}).status());
    // Without its lease, so any replica claims it at once.
    RETURN_IF_ERROR(conn.Exec("UPDATE runs SET state = 'pending', start_ms = NULL, "
                              "step_count = 0, lease_owner = NULL, lease_expires_ms = NULL "
                              "WHERE id = $1",
                              {P::Int(run_id)})
                        .status());
    RETURN_IF_ERROR(InsertRunEvent(conn, run_id, now, event_kind, event_payload).status());
    ASSIGN_OR_RETURN(stored, LoadRun(conn, run_id));
    return absl::OkStatus();
  }));
  leases_.End(run_id);
  return stored;
}

absl::StatusOr<Page<RunRecord>> PgStore::ListRuns(const RunFilter& filter,
                                                  const PageRequest& page) {
  if (!filter.blueprint_digest.empty()) {
    RETURN_IF_ERROR(CheckDigest(filter.blueprint_digest, "filter blueprint_digest"));
  }
  ASSIGN_OR_RETURN(const int size, EffectivePageSize(page.page_size));
  const std::string state_name =
      filter.state.has_value() ? std::string(RunStateName(*filter.state)) : "";
  const std::string filter_key =
      FilterKey({filter.blueprint_digest, state_name, filter.submitter});
  int64_t after = 0;
  if (!page.page_token.empty()) {
    ASSIGN_OR_RETURN(after, db_.tokens.Decode(page.page_token, "runs", filter_key));
  }
  std::vector<PgParam> params{P::Int(after), P::Int(size + 1)};
  std::string where;
  if (!filter.blueprint_digest.empty()) {
    params.push_back(P::Text(filter.blueprint_digest));
    where += Cat(" AND blueprint_digest = $", params.size());
  }
  if (!state_name.empty()) {
    params.push_back(P::Text(state_name));
    where += Cat(" AND state = $", params.size());
  }
  if (!filter.submitter.empty()) {
    params.push_back(P::Text(filter.submitter));
    where += Cat(" AND submitter = $", params.size());
  }
  const std::string sql =
      Cat("SELECT ", kRunColumns, " FROM runs WHERE id > $1", where, " ORDER BY id LIMIT $2");
  return db_.Read([&](PgConn& conn) -> absl::StatusOr<Page<RunRecord>> {
    ASSIGN_OR_RETURN(auto rows, QueryRuns(conn, sql, params));
    return MakePage(std::move(rows), size, db_.tokens, "runs", filter_key,
                    [](const RunRecord& r) { return r.id; });
  });
}

// ---- steps and events ---------------------------------------------------------------------------

absl::Status PgStore::AppendSteps(int64_t run_id, const std::vector<StepRecord>& steps) {
  for (const StepRecord& s : steps) {
    RETURN_IF_ERROR(CheckDigest(s.artifact_digest, "step artifact_digest"));
    RETURN_IF_ERROR(CheckDigest(s.input_digest, "step input_digest"));
    RETURN_IF_ERROR(CheckDigest(s.output_digest, "step output_digest"));
  }
  return db_.Write([&](PgConn& conn) -> absl::Status {
    ASSIGN_OR_RETURN(PgResult res, conn.Exec("SELECT state, step_count FROM runs WHERE id = $1 "
                                             "FOR UPDATE",
                                             {P::Int(run_id)}));
    if (res.rows() == 0) return absl::NotFoundError(Cat("run ", run_id, " does not exist"));
    RETURN_IF_ERROR(leases_.Check(conn, run_id));
    const RunState state = ParseRunState(res.Text(0, 0)).value_or(RunState::kPending);
    if (IsTerminal(state)) {
      return absl::FailedPreconditionError(
          Cat("run ", run_id, " is ", RunStateName(state), "; its step journal is closed"));
    }
    const int64_t count = res.Int(0, 1);
    for (size_t i = 0; i < steps.size(); ++i) {
      const StepRecord& s = steps[i];
      if (s.index != count + static_cast<int64_t>(i)) {
        return absl::FailedPreconditionError(
            Cat("run ", run_id, " has ", count + static_cast<int64_t>(i),
                " steps; the next step's index must be that, not ", s.index));
      }
      RETURN_IF_ERROR(PgRequireArtifact(conn, s.artifact_digest, "step artifact"));
      RETURN_IF_ERROR(conn.Exec("INSERT INTO run_steps (run_id, idx, generation_point, "
                                "artifact_digest, input_digest, output_digest) "
                                "VALUES ($1, $2, $3, $4, $5, $6)",
                                {P::Int(run_id), P::Int(s.index), P::Text(s.generation_point),
                                 P::Text(s.artifact_digest), P::Text(s.input_digest),
                                 P::Text(s.output_digest)})
                          .status());
    }
    return conn
        .Exec("UPDATE runs SET step_count = step_count + $1 WHERE id = $2",
              {P::Int(static_cast<int64_t>(steps.size())), P::Int(run_id)})
        .status();
  });
}

absl::StatusOr<std::vector<StepRecord>> PgStore::ListSteps(int64_t run_id) {
  return db_.Read([&](PgConn& conn) -> absl::StatusOr<std::vector<StepRecord>> {
    RETURN_IF_ERROR(CurrentRunState(conn, run_id).status());
    ASSIGN_OR_RETURN(PgResult res,
                     conn.Exec("SELECT idx, generation_point, artifact_digest, input_digest, "
                               "output_digest FROM run_steps WHERE run_id = $1 ORDER BY idx",
                               {P::Int(run_id)}));
    std::vector<StepRecord> out;
    for (int i = 0; i < res.rows(); ++i) {
      out.push_back(StepRecord{res.Int(i, 0), res.Text(i, 1), res.Text(i, 2), res.Text(i, 3),
                               res.Text(i, 4)});
    }
    return out;
  });
}

absl::StatusOr<int64_t> PgStore::AppendRunEvent(int64_t run_id, std::string_view kind,
                                                std::string_view payload) {
  RETURN_IF_ERROR(CheckNonEmpty(kind, "run event kind"));
  const int64_t now = db_.clock_ms();
  int64_t sequence = 0;
  RETURN_IF_ERROR(db_.Write([&](PgConn& conn) -> absl::Status {
    RETURN_IF_ERROR(LockRun(conn, run_id).status());
    RETURN_IF_ERROR(leases_.Check(conn, run_id));
    ASSIGN_OR_RETURN(sequence, InsertRunEvent(conn, run_id, now, kind, payload));
    return absl::OkStatus();
  }));
  return sequence;
}

absl::StatusOr<std::vector<RunEvent>> PgStore::ListRunEvents(int64_t run_id,
                                                             int64_t after_sequence,
                                                             int32_t limit) {
  return db_.Read([&](PgConn& conn) -> absl::StatusOr<std::vector<RunEvent>> {
    RETURN_IF_ERROR(CurrentRunState(conn, run_id).status());
    ASSIGN_OR_RETURN(PgResult res,
                     conn.Exec("SELECT seq, time_ms, kind, payload FROM run_events "
                               "WHERE run_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
                               {P::Int(run_id), P::Int(after_sequence),
                                limit > 0 ? P::Int(limit) : PgParam{20, "", true}}));
    std::vector<RunEvent> out;
    for (int i = 0; i < res.rows(); ++i) {
      out.push_back(RunEvent{res.Int(i, 0), res.Int(i, 1), res.Text(i, 2), res.Text(i, 3)});
    }
    return out;
  });
}

// ---- backtests --------------------------------------------------------------------------------

absl::StatusOr<std::vector<PointStep>> PgStore::ListPointSteps(const PointStepQuery& query) {
  RETURN_IF_ERROR(CheckNonEmpty(query.blueprint_name, "blueprint name"));
  RETURN_IF_ERROR(CheckNonEmpty(query.point, "generation point"));
  const int64_t limit = std::clamp<int64_t>(query.limit, 1, 10000);
  const bool first_page = query.after_run_id == 0;
  // Values come along when both are kept in their blob's row (not chunked).
  static constexpr std::string_view kSql =
      "SELECT s.run_id, s.idx, s.artifact_digest, s.input_digest, s.output_digest, "
      "bi.size, bi.chunks, bi.data, bo.size, bo.chunks, bo.data, "
      "bi.digest IS NULL OR bo.digest IS NULL "
      "FROM run_steps s "
      "JOIN runs r ON r.id = s.run_id "
      "JOIN blueprints b ON b.digest = r.blueprint_digest "
      "LEFT JOIN blobs bi ON bi.digest = s.input_digest "
      "LEFT JOIN blobs bo ON bo.digest = s.output_digest "
      "WHERE s.generation_point = $1 AND b.name = $2 "
      "AND s.run_id <= $3 AND (s.run_id < $3 OR s.idx > $4) "
      "ORDER BY s.run_id DESC, s.idx ASC LIMIT $5";
  return db_.Read([&](PgConn& conn) -> absl::StatusOr<std::vector<PointStep>> {
    ASSIGN_OR_RETURN(
        PgResult res,
        conn.Exec(kSql, {P::Text(query.point), P::Text(query.blueprint_name),
                         P::Int(first_page ? std::numeric_limits<int64_t>::max()
                                           : query.after_run_id),
                         P::Int(first_page ? -1 : query.after_index), P::Int(limit)}));
    std::vector<PointStep> steps;
    int64_t bytes = 0;
    for (int i = 0; i < res.rows(); ++i) {
      PointStep s;
      s.run_id = res.Int(i, 0);
      s.index = res.Int(i, 1);
      s.artifact_digest = res.Text(i, 2);
      s.input_digest = res.Text(i, 3);
      s.output_digest = res.Text(i, 4);
      const bool inline_values = res.Int(i, 11) == 0 && res.Int(i, 6) == 0 && res.Int(i, 9) == 0;
      if (inline_values) {
        s.input = res.Text(i, 7);
        s.output = res.Text(i, 10);
        RETURN_IF_ERROR(VerifyBlobBytes(s.input_digest, res.Int(i, 5), s.input));
        RETURN_IF_ERROR(VerifyBlobBytes(s.output_digest, res.Int(i, 8), s.output));
        s.values_read = true;
        bytes += static_cast<int64_t>(s.input.size() + s.output.size());
      }
      steps.push_back(std::move(s));
      if (bytes >= query.max_value_bytes) break;
    }
    return steps;
  });
}

absl::StatusOr<BacktestRecord> PgStore::PutBacktest(const BacktestRecord& backtest) {
  RETURN_IF_ERROR(CheckDigest(backtest.artifact_digest, "artifact digest"));
  if (backtest.differences.size() > kMaxBacktestDifferences) {
    return absl::InvalidArgumentError(Cat("a backtest keeps at most ", kMaxBacktestDifferences,
                                          " differences, got ", backtest.differences.size()));
  }
  BacktestRecord stored = backtest;
  stored.create_ms = db_.clock_ms();
  RETURN_IF_ERROR(db_.Write([&](PgConn& conn) -> absl::Status {
    RETURN_IF_ERROR(PgRequireArtifact(conn, backtest.artifact_digest, "backtested artifact"));
    ASSIGN_OR_RETURN(
        PgResult res,
        conn.Exec("INSERT INTO backtests (artifact_digest, live_artifact_digest, principal, "
                  "calls, equal, different, errors, runs, runs_equal, runs_different, "
                  "duration_ms, create_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, "
                  "$12) RETURNING id",
                  {P::Text(stored.artifact_digest), P::Text(stored.live_artifact_digest),
                   P::Text(stored.principal), P::Int(stored.calls), P::Int(stored.equal),
                   P::Int(stored.different), P::Int(stored.errors), P::Int(stored.runs),
                   P::Int(stored.runs_equal), P::Int(stored.runs_different),
                   P::Int(stored.duration_ms), P::Int(stored.create_ms)}));
    stored.id = res.Int(0, 0);
    int64_t ordinal = 0;
    for (const BacktestDifferenceRecord& d : stored.differences) {
      RETURN_IF_ERROR(conn.Exec("INSERT INTO backtest_differences (backtest_id, ordinal, run_id, "
                                "step, input_json, recorded_json, candidate_json, error, "
                                "recorded_artifact_digest, truncated) VALUES ($1, $2, $3, $4, "
                                "$5, $6, $7, $8, $9, $10)",
                                {P::Int(stored.id), P::Int(ordinal++), P::Int(d.run_id),
                                 P::Int(d.step), P::Text(d.input_json), P::Text(d.recorded_json),
                                 P::Text(d.candidate_json), P::Text(d.error),
                                 P::Text(d.recorded_artifact_digest), P::Bool(d.truncated)})
                          .status());
    }
    return absl::OkStatus();
  }));
  return stored;
}

absl::StatusOr<BacktestRecord> PgStore::GetBacktest(std::string_view artifact_digest,
                                                    bool with_differences) {
  RETURN_IF_ERROR(CheckDigest(artifact_digest, "artifact digest"));
  return db_.Read([&](PgConn& conn) -> absl::StatusOr<BacktestRecord> {
    ASSIGN_OR_RETURN(PgResult res,
                     conn.Exec("SELECT id, live_artifact_digest, principal, calls, equal, "
                               "different, errors, runs, runs_equal, runs_different, "
                               "duration_ms, create_ms FROM backtests WHERE artifact_digest = $1 "
                               "ORDER BY id DESC LIMIT 1",
                               {P::Text(artifact_digest)}));
    if (res.rows() == 0) {
      return absl::NotFoundError(Cat("artifact ", artifact_digest, " has no backtest"));
    }
    BacktestRecord r;
    r.id = res.Int(0, 0);
    r.artifact_digest = std::string(artifact_digest);
    r.live_artifact_digest = res.Text(0, 1);
    r.principal = res.Text(0, 2);
    r.calls = res.Int(0, 3);
    r.equal = res.Int(0, 4);
    r.different = res.Int(0, 5);
    r.errors = res.Int(0, 6);
    r.runs = res.Int(0, 7);
    r.runs_equal = res.Int(0, 8);
    r.runs_different = res.Int(0, 9);
    r.duration_ms = res.Int(0, 10);
    r.create_ms = res.Int(0, 11);
    if (!with_differences) return r;
    ASSIGN_OR_RETURN(PgResult d, conn.Exec("SELECT run_id, step, input_json, recorded_json, "
                                           "candidate_json, error, recorded_artifact_digest, "
                                           "truncated FROM backtest_differences WHERE "
                                           "backtest_id = $1 ORDER BY ordinal",
                                           {P::Int(r.id)}));
    for (int i = 0; i < d.rows(); ++i) {
      r.differences.push_back(BacktestDifferenceRecord{d.Int(i, 0), d.Int(i, 1), d.Text(i, 2),
                                                       d.Text(i, 3), d.Text(i, 4), d.Text(i, 5),
                                                       d.Text(i, 6), d.Int(i, 7) != 0});
    }
    return r;
  });
}

// ---- generations ------------------------------------------------------------------------------

absl::StatusOr<GenerationRecord> PgStore::PutGeneration(const GenerationRecord& g) {
  RETURN_IF_ERROR(CheckNewGeneration(g));
  const int64_t now = db_.clock_ms();
  GenerationRecord stored;
  RETURN_IF_ERROR(db_.Write([&](PgConn& conn) -> absl::Status {
    absl::StatusOr<GenerationRecord> existing = LoadGeneration(conn, g.request_digest);
    if (existing.ok()) {
      stored = *std::move(existing);
      return absl::OkStatus();
    }
    if (!absl::IsNotFound(existing.status())) return existing.status();
    if (g.passed) RETURN_IF_ERROR(PgRequireArtifact(conn, g.artifact_digest, "generated artifact"));
    RETURN_IF_ERROR(PgRequireAttemptBlobs(conn, g.attempts));
    ASSIGN_OR_RETURN(
        PgResult res,
        conn.Exec("INSERT INTO generations (request_digest, generation_point, spec_digest, "
                  "model_digest, numerics_profile, prompt_template_version, decoding_json, "
                  "device, passed, artifact_digest, failure, create_ms) "
                  "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) "
                  "ON CONFLICT (request_digest) DO NOTHING RETURNING id",
                  {P::Text(g.request_digest), P::Text(g.generation_point), P::Text(g.spec_digest),
                   P::Text(g.model_digest), P::Text(g.numerics_profile),
                   P::Text(g.prompt_template_version), P::Text(g.decoding_json),
                   P::Text(g.device), P::Bool(g.passed), P::TextOrNull(g.artifact_digest),
                   P::Text(g.failure), P::Int(now)}));
    // No row: a concurrent writer recorded this request first; the first record is kept.
    if (res.rows() > 0) {
      RETURN_IF_ERROR(PgInsertAttempts(conn, "generation_attempts", "generation_id",
                                       res.Int(0, 0), g.attempts));
    }
    ASSIGN_OR_RETURN(stored, LoadGeneration(conn, g.request_digest));
    return absl::OkStatus();
  }));
  return stored;
}

absl::StatusOr<GenerationRecord> PgStore::GetGeneration(std::string_view request_digest) {
  RETURN_IF_ERROR(CheckDigest(request_digest, "request digest"));
  return db_.Read([&](PgConn& conn) { return LoadGeneration(conn, request_digest); });
}

absl::StatusOr<std::vector<std::string>> PgStore::FindGenerationsByPrefix(
    std::string_view prefix, int limit) {
  RETURN_IF_ERROR(CheckGenerationPrefix(prefix));
  return db_.Read([&](PgConn& conn) -> absl::StatusOr<std::vector<std::string>> {
    ASSIGN_OR_RETURN(PgResult res,
                     conn.Exec("SELECT request_digest FROM generations WHERE request_digest >= "
                               "$1 AND request_digest < $2 ORDER BY request_digest LIMIT $3",
                               {P::Text(prefix), P::Text(Cat(prefix, "~")),
                                P::Int(std::max(limit, 0))}));
    std::vector<std::string> out;
    for (int i = 0; i < res.rows(); ++i) out.push_back(res.Text(i, 0));
    return out;
  });
}

absl::StatusOr<Page<GenerationRecord>> PgStore::ListGenerations(const GenerationFilter& filter,
                                                                const PageRequest& page) {
  ASSIGN_OR_RETURN(const int size, EffectivePageSize(page.page_size));
  const std::string filter_key =
      FilterKey({filter.generation_point, filter.failed_only ? "failed" : "all"});
  int64_t after = 0;
  if (!page.page_token.empty()) {
    ASSIGN_OR_RETURN(after, db_.tokens.Decode(page.page_token, "generations", filter_key));
  }
  std::vector<PgParam> params{P::Int(after), P::Int(size + 1)};
  if (!filter.generation_point.empty()) params.push_back(P::Text(filter.generation_point));
  const std::string sql =
      Cat("SELECT ", kGenerationColumns, " FROM generations WHERE id > $1",
          filter.generation_point.empty() ? "" : " AND generation_point = $3",
          filter.failed_only ? " AND NOT passed" : "", " ORDER BY id LIMIT $2");
  return db_.Read([&](PgConn& conn) -> absl::StatusOr<Page<GenerationRecord>> {
    ASSIGN_OR_RETURN(auto rows, QueryGenerations(conn, sql, params));
    return StripIds(MakePage(std::move(rows), size, db_.tokens, "generations", filter_key,
                             [](const auto& r) { return r.first; }));
  });
}

absl::StatusOr<Page<StepRecord>> PgStore::ListStepsPage(int64_t run_id, const PageRequest& page) {
  ASSIGN_OR_RETURN(const int size, EffectivePageSize(page.page_size));
  const std::string filter_key = FilterKey({std::to_string(run_id)});
  // Keys are step index + 1, so the first page starts after key 0 like every other list.
  int64_t after = 0;
  if (!page.page_token.empty()) {
    ASSIGN_OR_RETURN(after, db_.tokens.Decode(page.page_token, "steps", filter_key));
  }
  return db_.Read([&](PgConn& conn) -> absl::StatusOr<Page<StepRecord>> {
    RETURN_IF_ERROR(CurrentRunState(conn, run_id).status());
    ASSIGN_OR_RETURN(PgResult res,
                     conn.Exec("SELECT idx, generation_point, artifact_digest, input_digest, "
                               "output_digest FROM run_steps WHERE run_id = $1 AND idx >= $2 "
                               "ORDER BY idx LIMIT $3",
                               {P::Int(run_id), P::Int(after), P::Int(size + 1)}));
    std::vector<StepRecord> rows;
    for (int i = 0; i < res.rows(); ++i) {
      rows.push_back(StepRecord{res.Int(i, 0), res.Text(i, 1), res.Text(i, 2), res.Text(i, 3),
                                res.Text(i, 4)});
    }
    return MakePage(std::move(rows), size, db_.tokens, "steps", filter_key,
                    [](const StepRecord& s) { return s.index + 1; });
  });
}

// ---- lookup by prefix -------------------------------------------------------------------------

absl::StatusOr<Store::Matches> PgStore::FindByDigestPrefix(std::string_view table,
                                                           std::string_view prefix, int limit) {
  RETURN_IF_ERROR(CheckDigestPrefix(prefix));
  std::string end(prefix);
  end.back() = static_cast<char>(end.back() + 1);  // a hex digit: never overflows
  const std::string range = Cat(" FROM ", table, " WHERE digest >= $1 AND digest < $2");
  return Collect(db_, Cat("SELECT digest", range, " ORDER BY digest LIMIT $3"),
                 Cat("SELECT COUNT(*)", range), limit, {P::Text(prefix), P::Text(end)});
}

absl::StatusOr<Store::Matches> PgStore::FindArtifactsByDigestPrefix(std::string_view prefix,
                                                                    int limit) {
  return FindByDigestPrefix("artifacts", prefix, limit);
}

absl::StatusOr<Store::Matches> PgStore::FindBlueprintsByDigestPrefix(std::string_view prefix,
                                                                     int limit) {
  return FindByDigestPrefix("blueprints", prefix, limit);
}

absl::StatusOr<Store::Matches> PgStore::FindBlueprintNamesDeclaringPoint(std::string_view point,
                                                                         int limit) {
  static constexpr std::string_view kJoin =
      " FROM generation_specs s JOIN blueprint_points p ON p.spec_digest = s.digest "
      "JOIN blueprints b ON b.id = p.blueprint_id WHERE s.name = $1";
  return Collect(db_, Cat("SELECT DISTINCT b.name", kJoin, " ORDER BY b.name LIMIT $2"),
                 Cat("SELECT COUNT(DISTINCT b.name)", kJoin), limit, {P::Text(point)});
}

// ---- opening ----------------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<Store>> OpenPgStore(const StoreOptions& options) {
  auto store = std::make_unique<PgStore>(options);
  RETURN_IF_ERROR(store->Init());
  return std::unique_ptr<Store>(std::move(store));
}

}  // namespace rote::store::internal
