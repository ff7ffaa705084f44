// Migrations: a database created at every earlier schema version upgrades on open and keeps
// its data; a failed migration leaves the database at its previous version.
#include <sqlite3.h>

#include "gtest/gtest.h"
#include "store/schema.h"
#include "store/sqlite.h"
#include "store/store.h"
#include "tests/store/test_util.h"

namespace rote::store {
namespace {

using internal::Connection;
using testing::OpenOrDie;
using testing::TempDir;

int UserVersion(const std::string& path) {
  auto conn = Connection::Open(path, {});
  EXPECT_TRUE(conn.ok());
  return std::stoi(*(*conn)->QueryText("PRAGMA user_version"));
}

bool TableExists(const std::string& path, const std::string& table) {
  auto conn = Connection::Open(path, {});
  auto stmt = (*conn)->Prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?");
  stmt->BindText(1, table);
  return *stmt->Step();
}

// Builds a database at `version` holding rows that version can hold, as an old rote would
// have written them (plain SQL, not through today's Store).
void CreateAtVersion(const std::string& path, int version) {
  auto conn = Connection::Open(path, {});
  ASSERT_TRUE(conn.ok()) << conn.status();
  ASSERT_TRUE((*conn)->QueryText("PRAGMA journal_mode = WAL").ok());
  ASSERT_TRUE(internal::Migrate(**conn, version).ok());
  if (version >= 1) {
    std::string blob = "old input";
    std::string sql =
        "INSERT INTO blobs VALUES ('" + Sha256Digest(blob) + "', 9, 'inline', CAST('" + blob +
        "' AS BLOB), 1);"
        "INSERT INTO blueprints (digest, name, version, source, create_ms) VALUES ('" +
        Sha256Digest("bp") + "', 'old', '0.9', 'bp', 2);" +
        "INSERT INTO artifacts (digest, kind, generation_point, revision, source, options_json, "
        "validation_report_json, spec_digest, model_digest, numerics_profile, "
        "prompt_template_version, decoding_json, request_digest, device, author, state, "
        "state_version, create_ms) VALUES ('" +
        Sha256Digest("art") +
        "', 'lua_function', 'old/p', 1, 'return 0', '{}', '{}', '', '', '', '', '', '', '', "
        "'', 'approved', 1, 3);";
    ASSERT_TRUE((*conn)->ExecScript(sql).ok());
  }
  if (version >= 2) {
    std::string sql = "INSERT INTO runs (blueprint_digest, input_digest, state, "
                      "engine_profile_json, error, submitter, request_id, create_ms) VALUES ('" +
                      Sha256Digest("bp") + "', '" + Sha256Digest("old input") +
                      "', 'pending', '{}', '', 'old', '', 4);";
    ASSERT_TRUE((*conn)->ExecScript(sql).ok());
  }
}

TEST(MigrationTest, UpgradesFromEveryEarlierVersion) {
  const int latest = internal::LatestSchemaVersion();
  ASSERT_GE(latest, 3);
  for (int version = 0; version < latest; ++version) {
    SCOPED_TRACE("from version " + std::to_string(version));
    TempDir dir;
    const std::string path = dir.path() + "/old.db";
    CreateAtVersion(path, version);
    ASSERT_EQ(UserVersion(path), version);

    StoreOptions options;
    options.path = path;
    options.full_integrity_check_on_open = true;
    std::unique_ptr<Store> store = OpenOrDie(options);
    EXPECT_EQ(store->SchemaVersion(), latest);
    if (version >= 1) {
      EXPECT_EQ(*store->GetBlob(Sha256Digest("old input")), "old input");
      EXPECT_EQ(store->GetBlueprint(Sha256Digest("bp"))->version, "0.9");
      EXPECT_EQ(store->GetArtifact(Sha256Digest("art"))->state, ReviewState::kApproved);
    }
    if (version >= 2) {
      absl::StatusOr<RunRecord> run = store->GetRun(1);
      ASSERT_TRUE(run.ok()) << run.status();
      EXPECT_EQ(run->submitter, "old");
    }
    // Tables of every later version work.
    EXPECT_TRUE(store->KvPut("ns", "k", "v").ok());
    EXPECT_TRUE(store->PutIdempotency({"p", "r", Sha256Digest("q"), "resp", 0}).ok());
    EXPECT_TRUE(store->CheckIntegrity(true).ok());
    store.reset();
    EXPECT_EQ(UserVersion(path), latest);
  }
}

TEST(MigrationTest, FailedMigrationLeavesPreviousVersion) {
  TempDir dir;
  const std::string path = dir.path() + "/old.db";
  CreateAtVersion(path, 1);
  {
    // A stray table that migration 2 wants to create last: the migration fails halfway.
    auto conn = Connection::Open(path, {});
    ASSERT_TRUE((*conn)->ExecScript("CREATE TABLE run_events (x INTEGER) STRICT").ok());
  }
  StoreOptions options;
  options.path = path;
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(options);
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find("migration to schema version 2"), std::string::npos)
      << store.status();
  EXPECT_EQ(UserVersion(path), 1);
  EXPECT_FALSE(TableExists(path, "runs"));  // created earlier in the failed migration
}

TEST(MigrationTest, NewerDatabaseIsRefused) {
  TempDir dir;
  const std::string path = dir.path() + "/new.db";
  CreateAtVersion(path, internal::LatestSchemaVersion());
  {
    auto conn = Connection::Open(path, {});
    ASSERT_TRUE((*conn)->ExecScript("PRAGMA user_version = 99").ok());
  }
  StoreOptions options;
  options.path = path;
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(options);
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(MigrationTest, TablesAreStrict) {
  TempDir dir;
  const std::string path = dir.path() + "/s.db";
  CreateAtVersion(path, internal::LatestSchemaVersion());
  auto conn = Connection::Open(path, {});
  // A text where an integer belongs is an error, not a silent conversion.
  absl::Status st = (*conn)->ExecScript(
      "INSERT INTO kv (namespace, key, value, update_ms) VALUES ('a', 'b', x'00', 'soon')");
  EXPECT_FALSE(st.ok());
}

}  // namespace
}  // namespace rote::store
