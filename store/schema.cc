#include "store/schema.h"

#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "store/str_util.h"

namespace rote::store::internal {
namespace {

// 9: every generation request, passed or failed, with its attempts; attempts gain the
// extracted code, token counts and times. Generations an earlier rote recorded are carried
// over: passed ones from their artifacts' provenance, failed ones from the key-value
// records it kept under 'generation/failed' (which this removes).
constexpr char kMigration9Generations[] = R"sql(
ALTER TABLE artifact_attempts ADD COLUMN code_digest TEXT REFERENCES blobs (digest);
ALTER TABLE artifact_attempts ADD COLUMN prompt_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE artifact_attempts ADD COLUMN output_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE artifact_attempts ADD COLUMN start_ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE artifact_attempts ADD COLUMN duration_ms INTEGER NOT NULL DEFAULT 0;

CREATE TABLE generations (
  id                      INTEGER PRIMARY KEY,
  request_digest          TEXT NOT NULL UNIQUE,
  generation_point        TEXT NOT NULL,
  spec_digest             TEXT NOT NULL,
  model_digest            TEXT NOT NULL,
  numerics_profile        TEXT NOT NULL,
  prompt_template_version TEXT NOT NULL,
  decoding_json           TEXT NOT NULL,
  device                  TEXT NOT NULL,
  passed                  INTEGER NOT NULL CHECK (passed IN (0, 1)),
  artifact_digest         TEXT REFERENCES artifacts (digest),
  failure                 TEXT NOT NULL,
  create_ms               INTEGER NOT NULL,
  CHECK ((passed = 1) = (artifact_digest IS NOT NULL))
) STRICT;
CREATE INDEX generations_by_point ON generations (generation_point, id);
CREATE INDEX generations_by_outcome ON generations (passed, id);

CREATE TABLE generation_attempts (
  generation_id INTEGER NOT NULL REFERENCES generations (id),
  idx           INTEGER NOT NULL,
  prompt_digest TEXT REFERENCES blobs (digest),
  output_digest TEXT REFERENCES blobs (digest),
  code_digest   TEXT REFERENCES blobs (digest),
  failure       TEXT NOT NULL,
  prompt_tokens INTEGER NOT NULL,
  output_tokens INTEGER NOT NULL,
  start_ms      INTEGER NOT NULL,
  duration_ms   INTEGER NOT NULL,
  PRIMARY KEY (generation_id, idx)
) STRICT, WITHOUT ROWID;

INSERT OR IGNORE INTO generations (request_digest, generation_point, spec_digest, model_digest,
    numerics_profile, prompt_template_version, decoding_json, device, passed, artifact_digest,
    failure, create_ms)
  SELECT request_digest, generation_point, spec_digest, model_digest, numerics_profile,
         prompt_template_version, decoding_json, device, 1, digest, '', create_ms
  FROM artifacts WHERE author = 'model' AND request_digest <> '' ORDER BY id;
INSERT INTO generation_attempts (generation_id, idx, prompt_digest, output_digest, code_digest,
    failure, prompt_tokens, output_tokens, start_ms, duration_ms)
  SELECT g.id, t.idx, t.prompt_digest, t.output_digest, NULL, t.failure, 0, 0, 0, 0
  FROM generations g JOIN artifacts a ON a.digest = g.artifact_digest
                     JOIN artifact_attempts t ON t.artifact_id = a.id;

INSERT OR IGNORE INTO generations (request_digest, generation_point, spec_digest, model_digest,
    numerics_profile, prompt_template_version, decoding_json, device, passed, artifact_digest,
    failure, create_ms)
  SELECT COALESCE(json_extract(v, '$.request_digest'), ''),
         COALESCE(json_extract(v, '$.generation_point'), ''),
         COALESCE(json_extract(v, '$.spec_digest'), ''),
         COALESCE(json_extract(v, '$.model_digest'), ''), '',
         COALESCE(json_extract(v, '$.prompt_template_version'), ''),
         COALESCE(json_extract(v, '$.decoding'), ''), '', 0, NULL,
         COALESCE((SELECT json_extract(e.value, '$.failure')
                   FROM json_each(json_extract(v, '$.attempts')) e
                   ORDER BY json_extract(e.value, '$.index') DESC LIMIT 1), ''),
         update_ms
  FROM (SELECT CAST(value AS TEXT) AS v, update_ms, key FROM kv
        WHERE namespace = 'generation/failed' AND json_valid(CAST(value AS TEXT))
        ORDER BY update_ms, key);
INSERT OR IGNORE INTO generation_attempts (generation_id, idx, prompt_digest, output_digest,
    code_digest, failure, prompt_tokens, output_tokens, start_ms, duration_ms)
  SELECT g.id, json_extract(e.value, '$.index'),
         NULLIF(json_extract(e.value, '$.prompt_digest'), ''),
         NULLIF(json_extract(e.value, '$.output_digest'), ''), NULL,
         COALESCE(json_extract(e.value, '$.failure'), ''), 0, 0, 0, 0
  FROM kv JOIN generations g ON g.request_digest = json_extract(CAST(kv.value AS TEXT), '$.request_digest'),
       json_each(json_extract(CAST(kv.value AS TEXT), '$.attempts')) e
  WHERE kv.namespace = 'generation/failed' AND json_valid(CAST(kv.value AS TEXT));
DELETE FROM kv WHERE namespace = 'generation/failed';
)sql";

// Append-only: a released migration never changes, because databases in the field have
// already run it. Every table is STRICT so a value of the wrong type is an error, not a
// silent conversion. Optional references are NULL (not '') so foreign keys can check them.
// The migrations, in order: entry i takes a database from user_version i to i + 1.
constexpr const char* kMigrations[] = {
      // 1: blobs, specs, blueprints, artifacts, review log, bindings.
      R"sql(
CREATE TABLE meta (
  key   TEXT PRIMARY KEY,
  value BLOB NOT NULL
) STRICT;
-- Keys page tokens (HMAC); random per database so tokens of one store mean nothing to another.
INSERT INTO meta (key, value) VALUES ('page_token_secret', randomblob(32));

CREATE TABLE blobs (
  digest    TEXT PRIMARY KEY,
  size      INTEGER NOT NULL CHECK (size >= 0),
  placement TEXT NOT NULL CHECK (placement IN ('inline', 'file')),
  data      BLOB,
  create_ms INTEGER NOT NULL,
  CHECK ((placement = 'inline') = (data IS NOT NULL))
) STRICT;

CREATE TABLE generation_specs (
  digest    TEXT PRIMARY KEY,
  kind      TEXT NOT NULL,
  name      TEXT NOT NULL,
  canonical TEXT NOT NULL,
  create_ms INTEGER NOT NULL
) STRICT;

CREATE TABLE blueprints (
  id        INTEGER PRIMARY KEY,
  digest    TEXT NOT NULL UNIQUE,
  name      TEXT NOT NULL,
  version   TEXT NOT NULL,
  source    TEXT NOT NULL,
  create_ms INTEGER NOT NULL
) STRICT;
CREATE INDEX blueprints_by_name ON blueprints (name, id);

CREATE TABLE blueprint_points (
  blueprint_id INTEGER NOT NULL REFERENCES blueprints (id),
  ordinal      INTEGER NOT NULL,
  spec_digest  TEXT NOT NULL REFERENCES generation_specs (digest),
  PRIMARY KEY (blueprint_id, ordinal)
) STRICT, WITHOUT ROWID;

CREATE TABLE artifacts (
  id                      INTEGER PRIMARY KEY,
  digest                  TEXT NOT NULL UNIQUE,
  kind                    TEXT NOT NULL,
  generation_point        TEXT NOT NULL,
  revision                INTEGER NOT NULL CHECK (revision >= 1),
  source                  TEXT NOT NULL,
  options_json            TEXT NOT NULL,
  validation_report_json  TEXT NOT NULL,
  spec_digest             TEXT NOT NULL,
  model_digest            TEXT NOT NULL,
  numerics_profile        TEXT NOT NULL,
  prompt_template_version TEXT NOT NULL,
  decoding_json           TEXT NOT NULL,
  request_digest          TEXT NOT NULL,
  device                  TEXT NOT NULL,
  author                  TEXT NOT NULL,
  state                   TEXT NOT NULL CHECK (state IN ('pending', 'approved', 'rejected')),
  -- Bumped by every review; the etag is derived from (digest, state_version).
  state_version           INTEGER NOT NULL,
  create_ms               INTEGER NOT NULL,
  UNIQUE (generation_point, revision)
) STRICT;
CREATE INDEX artifacts_by_state ON artifacts (state, id);

CREATE TABLE artifact_attempts (
  artifact_id   INTEGER NOT NULL REFERENCES artifacts (id),
  idx           INTEGER NOT NULL,
  prompt_digest TEXT REFERENCES blobs (digest),
  output_digest TEXT REFERENCES blobs (digest),
  failure       TEXT NOT NULL,
  PRIMARY KEY (artifact_id, idx)
) STRICT, WITHOUT ROWID;

CREATE TABLE reviews (
  id          INTEGER PRIMARY KEY,
  artifact_id INTEGER NOT NULL REFERENCES artifacts (id),
  principal   TEXT NOT NULL,
  decision    TEXT NOT NULL CHECK (decision IN ('pending', 'approved', 'rejected')),
  comment     TEXT NOT NULL,
  time_ms     INTEGER NOT NULL
) STRICT;
CREATE INDEX reviews_by_artifact ON reviews (artifact_id, id);

CREATE TABLE bindings (
  blueprint_digest TEXT NOT NULL REFERENCES blueprints (digest),
  generation_point TEXT NOT NULL,
  artifact_digest  TEXT NOT NULL REFERENCES artifacts (digest),
  source           TEXT NOT NULL,
  update_ms        INTEGER NOT NULL,
  PRIMARY KEY (blueprint_digest, generation_point)
) STRICT, WITHOUT ROWID;
)sql",
      // 2: runs, their bindings, the step journal and events.
      R"sql(
CREATE TABLE runs (
  id                  INTEGER PRIMARY KEY,
  blueprint_digest    TEXT NOT NULL REFERENCES blueprints (digest),
  input_digest        TEXT NOT NULL REFERENCES blobs (digest),
  state               TEXT NOT NULL
                      CHECK (state IN ('pending', 'running', 'succeeded', 'failed', 'cancelled')),
  engine_profile_json TEXT NOT NULL,
  output_digest       TEXT REFERENCES blobs (digest),
  error               TEXT NOT NULL,
  submitter           TEXT NOT NULL,
  request_id          TEXT NOT NULL,
  step_count          INTEGER NOT NULL DEFAULT 0,
  create_ms           INTEGER NOT NULL,
  start_ms            INTEGER,
  end_ms              INTEGER
) STRICT;
CREATE INDEX runs_by_blueprint ON runs (blueprint_digest, id);
CREATE INDEX runs_by_state ON runs (state, id);
-- At most one run per (submitter, request_id): the backstop under the writer's check.
CREATE UNIQUE INDEX runs_by_request ON runs (submitter, request_id) WHERE request_id <> '';

CREATE TABLE run_bindings (
  run_id           INTEGER NOT NULL REFERENCES runs (id),
  generation_point TEXT NOT NULL,
  artifact_digest  TEXT NOT NULL REFERENCES artifacts (digest),
  source           TEXT NOT NULL,
  PRIMARY KEY (run_id, generation_point)
) STRICT, WITHOUT ROWID;

CREATE TABLE run_steps (
  run_id           INTEGER NOT NULL REFERENCES runs (id),
  idx              INTEGER NOT NULL,
  generation_point TEXT NOT NULL,
  artifact_digest  TEXT NOT NULL REFERENCES artifacts (digest),
  input_digest     TEXT NOT NULL,
  output_digest    TEXT NOT NULL,
  PRIMARY KEY (run_id, idx)
) STRICT, WITHOUT ROWID;

CREATE TABLE run_events (
  run_id  INTEGER NOT NULL REFERENCES runs (id),
  seq     INTEGER NOT NULL,
  time_ms INTEGER NOT NULL,
  kind    TEXT NOT NULL,
  payload BLOB NOT NULL,
  PRIMARY KEY (run_id, seq)
) STRICT, WITHOUT ROWID;
)sql",
      // 3: caches and idempotency records.
      R"sql(
CREATE TABLE generation_cache (
  request_digest  TEXT PRIMARY KEY,
  artifact_digest TEXT NOT NULL REFERENCES artifacts (digest),
  create_ms       INTEGER NOT NULL
) STRICT;

CREATE TABLE idempotency (
  principal      TEXT NOT NULL,
  request_id     TEXT NOT NULL,
  request_digest TEXT NOT NULL,
  response       BLOB NOT NULL,
  create_ms      INTEGER NOT NULL,
  PRIMARY KEY (principal, request_id)
) STRICT, WITHOUT ROWID;

CREATE TABLE kv (
  namespace TEXT NOT NULL,
  key       TEXT NOT NULL,
  value     BLOB NOT NULL,
  update_ms INTEGER NOT NULL,
  PRIMARY KEY (namespace, key)
) STRICT, WITHOUT ROWID;
)sql",
      // 4: whether a failed run was interrupted before a verdict (not replayable). Runs failed
      // by an earlier rote's recovery or shutdown are recognized by the errors it wrote.
      R"sql(
ALTER TABLE runs ADD COLUMN interrupted INTEGER NOT NULL DEFAULT 0 CHECK (interrupted IN (0, 1));
UPDATE runs SET interrupted = 1
  WHERE state = 'failed' AND (error LIKE 'interrupted:%' OR error LIKE 'the server shut down%'
                              OR error LIKE 'infrastructure timeout%');
)sql",
      // 5: runs by submitter (a run belongs to its submitter; lists show a principal its own).
      R"sql(
CREATE INDEX runs_by_submitter ON runs (submitter, id);
)sql",
      // 6: live revisions (one per generation point and spec: what runs use) and the audit log
      // of review decisions. The newest approved revision of each point and spec starts live.
      R"sql(
CREATE TABLE live_revisions (
  generation_point TEXT NOT NULL,
  spec_digest      TEXT NOT NULL,
  artifact_digest  TEXT NOT NULL UNIQUE REFERENCES artifacts (digest),
  update_ms        INTEGER NOT NULL,
  PRIMARY KEY (generation_point, spec_digest)
) STRICT, WITHOUT ROWID;
INSERT INTO live_revisions (generation_point, spec_digest, artifact_digest, update_ms)
  SELECT a.generation_point, a.spec_digest, a.digest, a.create_ms FROM artifacts a
  WHERE a.state = 'approved' AND a.revision = (
    SELECT MAX(b.revision) FROM artifacts b WHERE b.generation_point = a.generation_point
      AND b.spec_digest = a.spec_digest AND b.state = 'approved');
CREATE TABLE audit_log (
  id               INTEGER PRIMARY KEY,
  time_ms          INTEGER NOT NULL,
  principal        TEXT NOT NULL,
  action           TEXT NOT NULL CHECK (action IN ('approve', 'reject', 'promote', 'fallback',
                                                   'unbind', 'propose', 'lockfile',
                                                   'run_unreviewed')),
  generation_point TEXT NOT NULL,
  artifact_digest  TEXT NOT NULL,
  revision         INTEGER NOT NULL,
  detail           TEXT NOT NULL,
  run_id           INTEGER
) STRICT;
CREATE INDEX audit_by_point ON audit_log (generation_point, id);
CREATE INDEX audit_by_artifact ON audit_log (artifact_digest, id);
ALTER TABLE runs ADD COLUMN unreviewed_allowed_by TEXT NOT NULL DEFAULT '';
)sql",
      // 7: bare generation point names: which blueprints declare a point of a given name.
      R"sql(
CREATE INDEX generation_specs_by_name ON generation_specs (name);
CREATE INDEX blueprint_points_by_spec ON blueprint_points (spec_digest);
)sql",
      // 8: backtests: the recorded calls of a generation point, found by point name, and
      // the stored results (the newest per artifact is its backtest).
      R"sql(
CREATE INDEX run_steps_by_point ON run_steps (generation_point, run_id DESC, idx);

CREATE TABLE backtests (
  id                   INTEGER PRIMARY KEY,
  artifact_digest      TEXT NOT NULL REFERENCES artifacts (digest),
  live_artifact_digest TEXT NOT NULL,
  principal            TEXT NOT NULL,
  calls                INTEGER NOT NULL,
  equal                INTEGER NOT NULL,
  different            INTEGER NOT NULL,
  errors               INTEGER NOT NULL,
  runs                 INTEGER NOT NULL,
  runs_equal           INTEGER NOT NULL,
  runs_different       INTEGER NOT NULL,
  duration_ms          INTEGER NOT NULL,
  create_ms            INTEGER NOT NULL
) STRICT;
CREATE INDEX backtests_by_artifact ON backtests (artifact_digest, id);

CREATE TABLE backtest_differences (
  backtest_id              INTEGER NOT NULL REFERENCES backtests (id),
  ordinal                  INTEGER NOT NULL,
  run_id                   INTEGER NOT NULL,
  step                     INTEGER NOT NULL,
  input_json               TEXT NOT NULL,
  recorded_json            TEXT NOT NULL,
  candidate_json           TEXT NOT NULL,
  error                    TEXT NOT NULL,
  recorded_artifact_digest TEXT NOT NULL,
  truncated                INTEGER NOT NULL CHECK (truncated IN (0, 1)),
  PRIMARY KEY (backtest_id, ordinal)
) STRICT, WITHOUT ROWID;
)sql",
    // 9: generations (kMigration9Generations).
    kMigration9Generations,
};

const std::vector<std::string>& Migrations() {
  static const std::vector<std::string> migrations(std::begin(kMigrations), std::end(kMigrations));
  return migrations;
}

absl::StatusOr<int> UserVersion(Connection& conn) {
  absl::StatusOr<std::string> text = conn.QueryText("PRAGMA user_version");
  if (!text.ok()) return text.status();
  int version = 0;
  if (!absl::SimpleAtoi(*text, &version)) {
    return absl::InternalError(Cat("store: unreadable user_version '", *text, "'"));
  }
  return version;
}

}  // namespace

int LatestSchemaVersion() { return static_cast<int>(Migrations().size()); }

absl::Status Migrate(Connection& conn, int target) {
  absl::StatusOr<int> version = UserVersion(conn);
  if (!version.ok()) return version.status();
  if (*version > LatestSchemaVersion()) {
    return absl::FailedPreconditionError(Cat(
        "store: the database is at schema version ", *version, " but this build knows only up to ",
        LatestSchemaVersion(), "; open it with a newer rote"));
  }
  for (int v = *version; v < target; ++v) {
    // user_version lives in the database header and is written by the same transaction, so a
    // crash mid-migration leaves both the tables and the version as they were.
    std::string script = Cat("BEGIN IMMEDIATE;", Migrations()[static_cast<size_t>(v)],
                                      "PRAGMA user_version = ", v + 1, ";COMMIT;");
    if (absl::Status s = conn.ExecScript(script); !s.ok()) {
      if (conn.InTransaction()) conn.ExecScript("ROLLBACK").IgnoreError();
      return absl::Status(s.code(), Cat("store: migration to schema version ", v + 1,
                                                 " failed: ", s.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace rote::store::internal
