// The PostgreSQL store: run leases for several replicas on one database, the run event listener
// (LISTEN/NOTIFY) and generation claims. See store.h ("run leases") and docs/operations.md.
//
// Lease times are the database's clock (clock_timestamp()), never a replica's, so replicas whose
// clocks disagree still agree on when a lease expired.
#include <algorithm>
#include <chrono>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "store/checks.h"
#include "store/pg_store.h"
#include "store/str_util.h"

namespace rote::store::internal {
namespace {

using P = PgParam;

// Now on the database's clock, in unix milliseconds.
constexpr std::string_view kDbNowMs = "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint";

constexpr std::string_view kRunEventsChannel = "rote_run_events";

std::string JoinInts(const std::vector<int64_t>& values) {
  std::string out;
  for (int64_t v : values) {
    if (!out.empty()) out += ',';
    out += std::to_string(v);
  }
  return out;
}

}  // namespace

// ---- the fence ----------------------------------------------------------------------------------

void PgLeases::Hold(int64_t run_id, std::string owner, int64_t epoch) {
  std::lock_guard lock(mu_);
  leases_[run_id] = Lease{std::move(owner), epoch, false};
}

void PgLeases::End(int64_t run_id) {
  std::lock_guard lock(mu_);
  leases_.erase(run_id);
}

bool PgLeases::MarkLost(int64_t run_id) {
  std::lock_guard lock(mu_);
  auto it = leases_.find(run_id);
  if (it == leases_.end() || it->second.lost) return false;
  it->second.lost = true;
  return true;
}

std::vector<std::pair<int64_t, PgLeases::Lease>> PgLeases::Held() {
  std::lock_guard lock(mu_);
  std::vector<std::pair<int64_t, Lease>> out;
  for (const auto& [id, lease] : leases_) {
    if (!lease.lost) out.emplace_back(id, lease);
  }
  return out;
}

absl::Status PgLeases::Check(PgConn& conn, int64_t run_id) {
  Lease held;
  {
    std::lock_guard lock(mu_);
    auto it = leases_.find(run_id);
    if (it == leases_.end()) return absl::OkStatus();
    held = it->second;
  }
  ASSIGN_OR_RETURN(PgResult res, conn.Exec("SELECT lease_owner, lease_epoch FROM runs WHERE id = $1",
                                           {P::Int(run_id)}));
  if (res.rows() == 0) return absl::NotFoundError(Cat("run ", run_id, " does not exist"));
  const std::string owner = res.Text(0, 0);
  const int64_t epoch = res.Int(0, 1);
  if (owner == held.owner && epoch == held.epoch) return absl::OkStatus();
  return absl::AbortedError(Cat(
      "run ", run_id, ": replica '", held.owner, "' lost its lease (epoch ", held.epoch, "); ",
      owner.empty() ? std::string("the run was given back to the queue")
                    : Cat("replica '", owner, "' holds it now (epoch ", epoch, ")"),
      ", so this replica records nothing more of the run"));
}

// ---- claims and renewals ------------------------------------------------------------------------

absl::StatusOr<std::vector<ClaimedRun>> PgStore::ClaimRuns(const ClaimRequest& request) {
  RETURN_IF_ERROR(CheckNonEmpty(request.replica_id, "replica id"));
  if (request.lease_ms <= 0) return absl::InvalidArgumentError("lease_ms must be positive");
  if (request.max_runs <= 0) return std::vector<ClaimedRun>();
  const int64_t now = db_.clock_ms();
  std::vector<ClaimedRun> claimed;
  RETURN_IF_ERROR(db_.Write([&](PgConn& conn) -> absl::Status {
    claimed.clear();
    // Rows another transaction holds (a claim, or a write of the run's owner) are passed over,
    // so replicas claiming at once never wait for each other nor claim one run twice.
    ASSIGN_OR_RETURN(
        PgResult rows,
        conn.Exec(Cat("SELECT id, state, COALESCE(lease_owner, '') FROM runs "
                      "WHERE state = 'pending' OR (state = 'running' AND "
                      "(lease_expires_ms IS NULL OR lease_expires_ms < ", kDbNowMs, ")) "
                      "ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED"),
                  {P::Int(request.max_runs)}));
    for (int i = 0; i < rows.rows(); ++i) {
      ClaimedRun c;
      const int64_t id = rows.Int(i, 0);
      c.taken_over = rows.Text(i, 1) == "running";
      c.previous_owner = c.taken_over ? rows.Text(i, 2) : "";
      if (c.taken_over) {
        // The abandoned attempt's journal goes; its events stay in the history, before the
        // takeover event.
        RETURN_IF_ERROR(conn.Exec("DELETE FROM run_steps WHERE run_id = $1", {P::Int(id)}).status());
        if (!request.takeover_event_kind.empty()) {
          RETURN_IF_ERROR(PgInsertRunEvent(conn, id, now, request.takeover_event_kind,
                                           request.takeover_event_payload)
                              .status());
        }
      }
      ASSIGN_OR_RETURN(PgResult lease,
                       conn.Exec(Cat("UPDATE runs SET state = 'running', start_ms = $2, "
                                     "step_count = 0, lease_owner = $3, "
                                     "lease_epoch = lease_epoch + 1, lease_expires_ms = ",
                                     kDbNowMs, " + $4 WHERE id = $1 RETURNING lease_epoch"),
                                 {P::Int(id), P::Int(now), P::Text(request.replica_id),
                                  P::Int(request.lease_ms)}));
      c.epoch = lease.Int(0, 0);
      ASSIGN_OR_RETURN(c.run, PgLoadRun(conn, id));
      claimed.push_back(std::move(c));
    }
    return absl::OkStatus();
  }));
  for (const ClaimedRun& c : claimed) leases_.Hold(c.run.id, request.replica_id, c.epoch);
  return claimed;
}

absl::StatusOr<std::vector<int64_t>> PgStore::RenewRunLeases(int64_t lease_ms) {
  if (lease_ms <= 0) return absl::InvalidArgumentError("lease_ms must be positive");
  std::map<std::string, std::pair<std::vector<int64_t>, std::vector<int64_t>>> by_owner;
  for (const auto& [id, lease] : leases_.Held()) {
    by_owner[lease.owner].first.push_back(id);
    by_owner[lease.owner].second.push_back(lease.epoch);
  }
  std::vector<int64_t> lost;
  for (const auto& entry : by_owner) {
    // Named references, not structured bindings: the lambda below captures them.
    const std::string& owner = entry.first;
    const auto& runs = entry.second;
    std::set<int64_t> kept;
    RETURN_IF_ERROR(db_.Write([&](PgConn& conn) -> absl::Status {
      kept.clear();
      ASSIGN_OR_RETURN(
          PgResult res,
          conn.Exec(Cat("UPDATE runs AS r SET lease_expires_ms = ", kDbNowMs,
                        " + $3 FROM unnest(string_to_array($1, ',')::bigint[], "
                        "string_to_array($2, ',')::bigint[]) AS l(id, epoch) "
                        "WHERE r.id = l.id AND r.lease_epoch = l.epoch AND r.lease_owner = $4 "
                        "AND r.state = 'running' RETURNING r.id"),
                    {P::Text(JoinInts(runs.first)), P::Text(JoinInts(runs.second)),
                     P::Int(lease_ms), P::Text(owner)}));
      for (int i = 0; i < res.rows(); ++i) kept.insert(res.Int(i, 0));
      return absl::OkStatus();
    }));
    for (int64_t id : runs.first) {
      if (kept.count(id) == 0 && leases_.MarkLost(id)) lost.push_back(id);
    }
  }
  return lost;
}

absl::StatusOr<std::vector<std::pair<RunState, int64_t>>> PgStore::CountRunsByState() {
  return db_.Read([&](PgConn& conn) -> absl::StatusOr<std::vector<std::pair<RunState, int64_t>>> {
    // Only the states of the queue, which the partial index covers; terminal runs only grow.
    ASSIGN_OR_RETURN(PgResult res, conn.Exec("SELECT state, COUNT(*)::bigint FROM runs WHERE state "
                                             "IN ('pending', 'running') GROUP BY state"));
    std::vector<std::pair<RunState, int64_t>> out = {{RunState::kPending, 0}, {RunState::kRunning, 0}};
    for (int i = 0; i < res.rows(); ++i) {
      const RunState state = ParseRunState(res.Text(i, 0)).value_or(RunState::kPending);
      for (auto& [s, n] : out) {
        if (s == state) n = res.Int(i, 1);
      }
    }
    return out;
  });
}

// ---- writes that end in one transaction -------------------------------------------------------

absl::StatusOr<RunRecord> PgStore::FinishRunWithEvent(int64_t run_id, const RunOutcome& outcome,
                                                      const NewRunEvent& event) {
  RETURN_IF_ERROR(CheckRunOutcome(outcome));
  RETURN_IF_ERROR(CheckNonEmpty(event.kind, "run event kind"));
  return Transition(run_id, outcome.state, &outcome, &event);
}

// ---- run event notifications ------------------------------------------------------------------

absl::Status PgStore::SetRunEventListener(std::function<void(int64_t run_id)> listener) {
  {
    std::lock_guard lock(listener_mu_);
    listener_ = std::move(listener);
    if (!listener_ || listening_.load()) return absl::OkStatus();
    listening_ = true;
  }
  listen_thread_ = std::thread([this] { ListenLoop(); });
  return absl::OkStatus();
}

void PgStore::ListenLoop() {
  std::unique_ptr<PgConn> conn;
  while (listening_.load()) {
    if (conn == nullptr) {
      absl::StatusOr<std::unique_ptr<PgConn>> opened = PgConn::Open(options_.path);
      if (!opened.ok() || !(*opened)->ExecScript(Cat("LISTEN ", kRunEventsChannel)).ok()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        continue;
      }
      conn = *std::move(opened);
    }
    absl::Status st = conn->WaitForNotifications(200, [&](std::string_view payload) {
      int64_t run_id = 0;
      if (!absl::SimpleAtoi(absl::string_view(payload.data(), payload.size()), &run_id)) return;
      std::lock_guard lock(listener_mu_);
      if (listener_) listener_(run_id);
    });
    // Notifications sent while the connection was down are gone; watchers poll as well.
    if (!st.ok()) conn.reset();
  }
}

PgStore::~PgStore() {
  listening_ = false;
  if (listen_thread_.joinable()) listen_thread_.join();
}

// ---- generation claims --------------------------------------------------------------------------

absl::StatusOr<bool> PgStore::ClaimGeneration(std::string_view request_digest,
                                              std::string_view replica_id, int64_t lease_ms) {
  RETURN_IF_ERROR(CheckNonEmpty(request_digest, "generation request digest"));
  RETURN_IF_ERROR(CheckNonEmpty(replica_id, "replica id"));
  if (lease_ms <= 0) return absl::InvalidArgumentError("lease_ms must be positive");
  bool held = false;
  RETURN_IF_ERROR(db_.Write([&](PgConn& conn) -> absl::Status {
    // The row is taken, kept (the same replica: extended) or taken over (expired) in one
    // statement; the unique key settles two replicas claiming at once.
    ASSIGN_OR_RETURN(
        PgResult res,
        conn.Exec(Cat("INSERT INTO generation_claims (request_digest, replica_id, expires_ms) "
                      "VALUES ($1, $2, ", kDbNowMs, " + $3) ON CONFLICT (request_digest) DO UPDATE "
                      "SET replica_id = EXCLUDED.replica_id, expires_ms = EXCLUDED.expires_ms "
                      "WHERE generation_claims.replica_id = EXCLUDED.replica_id "
                      "OR generation_claims.expires_ms < ", kDbNowMs, " RETURNING replica_id"),
                  {P::Text(request_digest), P::Text(replica_id), P::Int(lease_ms)}));
    held = res.rows() > 0;
    return absl::OkStatus();
  }));
  return held;
}

absl::Status PgStore::ReleaseGeneration(std::string_view request_digest,
                                        std::string_view replica_id) {
  return db_.Write([&](PgConn& conn) -> absl::Status {
    return conn
        .Exec("DELETE FROM generation_claims WHERE request_digest = $1 AND replica_id = $2",
              {P::Text(request_digest), P::Text(replica_id)})
        .status();
  });
}

}  // namespace rote::store::internal
