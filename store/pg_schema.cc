#include "store/pg_schema.h"

#include <iterator>
#include <string>
#include <vector>

#include "store/status_macros.h"
#include "store/str_util.h"

namespace rote::store::internal {
namespace {

// Append-only, like the SQLite list: a released migration never changes. Optional references
// are NULL (not '') so foreign keys can check them. Ids are identity columns, except the audit
// log's, which the store assigns densely inside the writing transaction. Text compares
// bytewise (COLLATE "C"), as in SQLite, whatever the database's locale: digest prefix ranges
// and the order of names must not depend on it.
constexpr const char* kPgMigrations[] = {
    // 1: everything the SQLite schema holds at its version 9.
    R"sql(
CREATE TABLE meta (
  key   TEXT COLLATE "C" PRIMARY KEY,
  value BYTEA NOT NULL
);

-- Blobs up to one chunk are kept in `data`; larger ones in blob_chunks, 1 MiB each, in order.
CREATE TABLE blobs (
  digest    TEXT COLLATE "C" PRIMARY KEY,
  size      BIGINT NOT NULL CHECK (size >= 0),
  chunks    INTEGER NOT NULL CHECK (chunks >= 0),
  data      BYTEA,
  create_ms BIGINT NOT NULL,
  CHECK ((chunks = 0) = (data IS NOT NULL))
);
CREATE TABLE blob_chunks (
  digest TEXT COLLATE "C" NOT NULL REFERENCES blobs (digest),
  idx    INTEGER NOT NULL,
  data   BYTEA NOT NULL,
  PRIMARY KEY (digest, idx)
);

CREATE TABLE generation_specs (
  digest    TEXT COLLATE "C" PRIMARY KEY,
  kind      TEXT COLLATE "C" NOT NULL,
  name      TEXT COLLATE "C" NOT NULL,
  canonical TEXT COLLATE "C" NOT NULL,
  create_ms BIGINT NOT NULL
);
CREATE INDEX generation_specs_by_name ON generation_specs (name);

CREATE TABLE blueprints (
  id        BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  digest    TEXT COLLATE "C" NOT NULL UNIQUE,
  name      TEXT COLLATE "C" NOT NULL,
  version   TEXT COLLATE "C" NOT NULL,
  source    TEXT COLLATE "C" NOT NULL,
  create_ms BIGINT NOT NULL
);
CREATE INDEX blueprints_by_name ON blueprints (name, id);

CREATE TABLE blueprint_points (
  blueprint_id BIGINT NOT NULL REFERENCES blueprints (id),
  ordinal      BIGINT NOT NULL,
  spec_digest  TEXT COLLATE "C" NOT NULL REFERENCES generation_specs (digest),
  PRIMARY KEY (blueprint_id, ordinal)
);
CREATE INDEX blueprint_points_by_spec ON blueprint_points (spec_digest);

CREATE TABLE artifacts (
  id                      BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  digest                  TEXT COLLATE "C" NOT NULL UNIQUE,
  kind                    TEXT COLLATE "C" NOT NULL,
  generation_point        TEXT COLLATE "C" NOT NULL,
  revision                BIGINT NOT NULL CHECK (revision >= 1),
  source                  TEXT COLLATE "C" NOT NULL,
  options_json            TEXT COLLATE "C" NOT NULL,
  validation_report_json  TEXT COLLATE "C" NOT NULL,
  spec_digest             TEXT COLLATE "C" NOT NULL,
  model_digest            TEXT COLLATE "C" NOT NULL,
  numerics_profile        TEXT COLLATE "C" NOT NULL,
  prompt_template_version TEXT COLLATE "C" NOT NULL,
  decoding_json           TEXT COLLATE "C" NOT NULL,
  request_digest          TEXT COLLATE "C" NOT NULL,
  device                  TEXT COLLATE "C" NOT NULL,
  author                  TEXT COLLATE "C" NOT NULL,
  state                   TEXT COLLATE "C" NOT NULL CHECK (state IN ('pending', 'approved', 'rejected')),
  state_version           BIGINT NOT NULL,
  create_ms               BIGINT NOT NULL,
  UNIQUE (generation_point, revision)
);
CREATE INDEX artifacts_by_state ON artifacts (state, id);

CREATE TABLE artifact_attempts (
  artifact_id   BIGINT NOT NULL REFERENCES artifacts (id),
  idx           BIGINT NOT NULL,
  prompt_digest TEXT COLLATE "C" REFERENCES blobs (digest),
  output_digest TEXT COLLATE "C" REFERENCES blobs (digest),
  failure       TEXT COLLATE "C" NOT NULL,
  code_digest   TEXT COLLATE "C" REFERENCES blobs (digest),
  prompt_tokens BIGINT NOT NULL,
  output_tokens BIGINT NOT NULL,
  start_ms      BIGINT NOT NULL,
  duration_ms   BIGINT NOT NULL,
  PRIMARY KEY (artifact_id, idx)
);

CREATE TABLE reviews (
  id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  artifact_id BIGINT NOT NULL REFERENCES artifacts (id),
  principal   TEXT COLLATE "C" NOT NULL,
  decision    TEXT COLLATE "C" NOT NULL CHECK (decision IN ('pending', 'approved', 'rejected')),
  comment     TEXT COLLATE "C" NOT NULL,
  time_ms     BIGINT NOT NULL
);
CREATE INDEX reviews_by_artifact ON reviews (artifact_id, id);

CREATE TABLE bindings (
  blueprint_digest TEXT COLLATE "C" NOT NULL REFERENCES blueprints (digest),
  generation_point TEXT COLLATE "C" NOT NULL,
  artifact_digest  TEXT COLLATE "C" NOT NULL REFERENCES artifacts (digest),
  source           TEXT COLLATE "C" NOT NULL,
  update_ms        BIGINT NOT NULL,
  PRIMARY KEY (blueprint_digest, generation_point)
);

CREATE TABLE live_revisions (
  generation_point TEXT COLLATE "C" NOT NULL,
  spec_digest      TEXT COLLATE "C" NOT NULL,
  artifact_digest  TEXT COLLATE "C" NOT NULL UNIQUE REFERENCES artifacts (digest),
  update_ms        BIGINT NOT NULL,
  PRIMARY KEY (generation_point, spec_digest)
);

CREATE TABLE audit_log (
  id               BIGINT PRIMARY KEY,
  time_ms          BIGINT NOT NULL,
  principal        TEXT COLLATE "C" NOT NULL,
  action           TEXT COLLATE "C" NOT NULL CHECK (action IN ('approve', 'reject', 'promote', 'fallback',
                                                   'unbind', 'propose', 'lockfile',
                                                   'run_unreviewed')),
  generation_point TEXT COLLATE "C" NOT NULL,
  artifact_digest  TEXT COLLATE "C" NOT NULL,
  revision         BIGINT NOT NULL,
  detail           TEXT COLLATE "C" NOT NULL,
  run_id           BIGINT
);
CREATE INDEX audit_by_point ON audit_log (generation_point, id);
CREATE INDEX audit_by_artifact ON audit_log (artifact_digest, id);

CREATE TABLE runs (
  id                    BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  blueprint_digest      TEXT COLLATE "C" NOT NULL REFERENCES blueprints (digest),
  input_digest          TEXT COLLATE "C" NOT NULL REFERENCES blobs (digest),
  state                 TEXT COLLATE "C" NOT NULL
                        CHECK (state IN ('pending', 'running', 'succeeded', 'failed', 'cancelled')),
  engine_profile_json   TEXT COLLATE "C" NOT NULL,
  output_digest         TEXT COLLATE "C" REFERENCES blobs (digest),
  error                 TEXT COLLATE "C" NOT NULL,
  submitter             TEXT COLLATE "C" NOT NULL,
  request_id            TEXT COLLATE "C" NOT NULL,
  step_count            BIGINT NOT NULL DEFAULT 0,
  create_ms             BIGINT NOT NULL,
  start_ms              BIGINT,
  end_ms                BIGINT,
  interrupted           BOOLEAN NOT NULL DEFAULT false,
  unreviewed_allowed_by TEXT COLLATE "C" NOT NULL DEFAULT ''
);
CREATE INDEX runs_by_blueprint ON runs (blueprint_digest, id);
CREATE INDEX runs_by_state ON runs (state, id);
CREATE INDEX runs_by_submitter ON runs (submitter, id);
CREATE UNIQUE INDEX runs_by_request ON runs (submitter, request_id) WHERE request_id <> '';

CREATE TABLE run_bindings (
  run_id           BIGINT NOT NULL REFERENCES runs (id),
  generation_point TEXT COLLATE "C" NOT NULL,
  artifact_digest  TEXT COLLATE "C" NOT NULL REFERENCES artifacts (digest),
  source           TEXT COLLATE "C" NOT NULL,
  PRIMARY KEY (run_id, generation_point)
);

CREATE TABLE run_steps (
  run_id           BIGINT NOT NULL REFERENCES runs (id),
  idx              BIGINT NOT NULL,
  generation_point TEXT COLLATE "C" NOT NULL,
  artifact_digest  TEXT COLLATE "C" NOT NULL REFERENCES artifacts (digest),
  input_digest     TEXT COLLATE "C" NOT NULL,
  output_digest    TEXT COLLATE "C" NOT NULL,
  PRIMARY KEY (run_id, idx)
);
CREATE INDEX run_steps_by_point ON run_steps (generation_point, run_id DESC, idx);

CREATE TABLE run_events (
  run_id  BIGINT NOT NULL REFERENCES runs (id),
  seq     BIGINT NOT NULL,
  time_ms BIGINT NOT NULL,
  kind    TEXT COLLATE "C" NOT NULL,
  payload BYTEA NOT NULL,
  PRIMARY KEY (run_id, seq)
);

CREATE TABLE generation_cache (
  request_digest  TEXT COLLATE "C" PRIMARY KEY,
  artifact_digest TEXT COLLATE "C" NOT NULL REFERENCES artifacts (digest),
  create_ms       BIGINT NOT NULL
);

CREATE TABLE idempotency (
  principal      TEXT COLLATE "C" NOT NULL,
  request_id     TEXT COLLATE "C" NOT NULL,
  request_digest TEXT COLLATE "C" NOT NULL,
  response       BYTEA NOT NULL,
  create_ms      BIGINT NOT NULL,
  PRIMARY KEY (principal, request_id)
);

CREATE TABLE kv (
  namespace TEXT COLLATE "C" NOT NULL,
  key       TEXT COLLATE "C" NOT NULL,
  value     BYTEA NOT NULL,
  update_ms BIGINT NOT NULL,
  PRIMARY KEY (namespace, key)
);

CREATE TABLE backtests (
  id                   BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  artifact_digest      TEXT COLLATE "C" NOT NULL REFERENCES artifacts (digest),
  live_artifact_digest TEXT COLLATE "C" NOT NULL,
  principal            TEXT COLLATE "C" NOT NULL,
  calls                BIGINT NOT NULL,
  equal                BIGINT NOT NULL,
  different            BIGINT NOT NULL,
  errors               BIGINT NOT NULL,
  runs                 BIGINT NOT NULL,
  runs_equal           BIGINT NOT NULL,
  runs_different       BIGINT NOT NULL,
  duration_ms          BIGINT NOT NULL,
  create_ms            BIGINT NOT NULL
);
CREATE INDEX backtests_by_artifact ON backtests (artifact_digest, id);

CREATE TABLE backtest_differences (
  backtest_id              BIGINT NOT NULL REFERENCES backtests (id),
  ordinal                  BIGINT NOT NULL,
  run_id                   BIGINT NOT NULL,
  step                     BIGINT NOT NULL,
  input_json               TEXT COLLATE "C" NOT NULL,
  recorded_json            TEXT COLLATE "C" NOT NULL,
  candidate_json           TEXT COLLATE "C" NOT NULL,
  error                    TEXT COLLATE "C" NOT NULL,
  recorded_artifact_digest TEXT COLLATE "C" NOT NULL,
  truncated                BOOLEAN NOT NULL,
  PRIMARY KEY (backtest_id, ordinal)
);

CREATE TABLE generations (
  id                      BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  request_digest          TEXT COLLATE "C" NOT NULL UNIQUE,
  generation_point        TEXT COLLATE "C" NOT NULL,
  spec_digest             TEXT COLLATE "C" NOT NULL,
  model_digest            TEXT COLLATE "C" NOT NULL,
  numerics_profile        TEXT COLLATE "C" NOT NULL,
  prompt_template_version TEXT COLLATE "C" NOT NULL,
  decoding_json           TEXT COLLATE "C" NOT NULL,
  device                  TEXT COLLATE "C" NOT NULL,
  passed                  BOOLEAN NOT NULL,
  artifact_digest         TEXT COLLATE "C" REFERENCES artifacts (digest),
  failure                 TEXT COLLATE "C" NOT NULL,
  create_ms               BIGINT NOT NULL,
  CHECK (passed = (artifact_digest IS NOT NULL))
);
CREATE INDEX generations_by_point ON generations (generation_point, id);
CREATE INDEX generations_by_outcome ON generations (passed, id);

CREATE TABLE generation_attempts (
  generation_id BIGINT NOT NULL REFERENCES generations (id),
  idx           BIGINT NOT NULL,
  prompt_digest TEXT COLLATE "C" REFERENCES blobs (digest),
  output_digest TEXT COLLATE "C" REFERENCES blobs (digest),
  failure       TEXT COLLATE "C" NOT NULL,
  code_digest   TEXT COLLATE "C" REFERENCES blobs (digest),
  prompt_tokens BIGINT NOT NULL,
  output_tokens BIGINT NOT NULL,
  start_ms      BIGINT NOT NULL,
  duration_ms   BIGINT NOT NULL,
  PRIMARY KEY (generation_id, idx)
);
)sql",
    // 2: run leases and generation claims, for several replicas on one database. A run's lease
    // (owner, epoch, expiry on the database's clock) is set when a replica claims it; every
    // appended run event notifies the channel rote_run_events with the run's id, so watchers on
    // any replica learn of events at once.
    R"sql(
ALTER TABLE runs ADD COLUMN lease_owner TEXT COLLATE "C";
ALTER TABLE runs ADD COLUMN lease_epoch BIGINT NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN lease_expires_ms BIGINT;
CREATE INDEX runs_queue ON runs (id) WHERE state IN ('pending', 'running');

-- Generations in progress on some replica (Store::ClaimGeneration).
CREATE TABLE generation_claims (
  request_digest TEXT COLLATE "C" PRIMARY KEY,
  replica_id     TEXT COLLATE "C" NOT NULL,
  expires_ms     BIGINT NOT NULL
);

CREATE FUNCTION rote_notify_run_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('rote_run_events', NEW.run_id::text);
  RETURN NULL;
END
$$;
CREATE TRIGGER run_events_notify AFTER INSERT ON run_events
  FOR EACH ROW EXECUTE FUNCTION rote_notify_run_event();
)sql",
};

// Any constant names the lock; this one spells "rote" in ASCII.
constexpr int64_t kMigrationLock = 0x726f7465;

}  // namespace

int PgLatestSchemaVersion() { return static_cast<int>(std::size(kPgMigrations)); }

absl::Status PgMigrate(PgConn& conn, int target) {
  for (;;) {
    RETURN_IF_ERROR(conn.ExecScript("BEGIN"));
    absl::Status st = [&]() -> absl::Status {
      RETURN_IF_ERROR(conn.Exec("SELECT pg_advisory_xact_lock($1)",
                                {PgParam::Int(kMigrationLock)}).status());
      RETURN_IF_ERROR(conn.ExecScript(
          "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)"));
      ASSIGN_OR_RETURN(PgResult res, conn.Exec("SELECT COALESCE(MAX(version), 0)::bigint "
                                               "FROM schema_version"));
      const int version = static_cast<int>(res.Int(0, 0));
      if (version > PgLatestSchemaVersion()) {
        return absl::FailedPreconditionError(Cat(
            "store: the database is at schema version ", version,
            " but this build knows only up to ", PgLatestSchemaVersion(),
            "; open it with a newer rote"));
      }
      if (version >= target) return absl::CancelledError("done");
      absl::Status m = conn.ExecScript(kPgMigrations[version]);
      if (!m.ok()) {
        return absl::Status(m.code(), Cat("store: migration to schema version ", version + 1,
                                          " failed: ", m.message()));
      }
      RETURN_IF_ERROR(conn.Exec("DELETE FROM schema_version").status());
      return conn.Exec("INSERT INTO schema_version (version) VALUES ($1::int)",
                       {PgParam::Int(version + 1)}).status();
    }();
    if (!st.ok()) {
      conn.ExecScript("ROLLBACK").IgnoreError();
      return absl::IsCancelled(st) ? absl::OkStatus() : st;
    }
    RETURN_IF_ERROR(conn.ExecScript("COMMIT"));
  }
}

}  // namespace rote::store::internal
