// A server on the PostgreSQL store (`rote serve --store postgresql://...`), end to end: the
// shipped blueprints give the same bytes as on SQLite, runs survive a restart, replay matches,
// and nothing is written to a SQLite file. Runs on the throwaway cluster of the PgCluster ctest
// fixture (tests/store/pg_test_util.h).
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>

#include "gtest/gtest.h"
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/pg_e2e.h"

namespace rote::e2e {
namespace {

TEST(PostgresStoreE2e, ShippedBlueprintsGiveTheSameBytesAsOnSqliteAndSurviveARestart) {
  ROTE_PG_SCHEMA_OR_RETURN(schema);
  TestServer sqlite_server;
  sqlite_server.Start();
  TestServer pg_server;
  pg_server.set_configure([&](orchestrator::ServerOptions* opt) { opt->store_url = schema.path(); });
  pg_server.Start();

  std::map<std::string, std::string> run_names;
  for (const std::string name : {"invoice_totals", "access_log", "contacts"}) {
    std::string digest;
    for (TestServer* server : {&sqlite_server, &pg_server}) {
      rote::v1::Blueprint bp =
          server->Register(ShippedBlueprint(name), ShippedLockfile(name), name + ".lua");
      ASSERT_EQ(bp.bindings_size(), bp.generation_points_size()) << name;
      rote::v1::Run run = server->WaitDone(server->Submit(bp.name(), ShippedSample(name)).name());
      ASSERT_EQ(run.state(), rote::v1::RUN_STATE_SUCCEEDED) << name << ": " << run.error();
      if (server == &sqlite_server) {
        digest = run.output_digest();
        continue;
      }
      EXPECT_EQ(run.output_digest(), digest) << name << ": the same bytes on both stores";
      rote::v1::ReplayRunResponse replay;
      grpc::Status st = server->Replay(run.name(), &replay);
      ASSERT_TRUE(st.ok()) << st.error_message();
      EXPECT_TRUE(replay.matched()) << name;
      EXPECT_EQ(replay.steps_compared(), run.step_count());
      run_names[name] = run.name();
      // Idempotent submission: the same request id gives the same run.
      rote::v1::Run first = server->Submit(bp.name(), ShippedSample(name), "req-" + name);
      rote::v1::Run again = server->Submit(bp.name(), ShippedSample(name), "req-" + name);
      EXPECT_EQ(first.name(), again.name()) << name;
      server->WaitDone(first.name());
    }
  }
  // The server's data directory holds its lock, never a SQLite store.
  EXPECT_FALSE(std::filesystem::exists(pg_server.data_dir() + "/rote.db"));

  // A restart (a fresh data directory would do as well: everything is in the database).
  pg_server.Stop();
  pg_server.Start();
  for (const auto& [name, run_name] : run_names) {
    rote::v1::Run before = pg_server.Get(run_name);
    EXPECT_EQ(before.state(), rote::v1::RUN_STATE_SUCCEEDED) << name;
    rote::v1::Run run =
        pg_server.WaitDone(pg_server.Submit("blueprints/" + name, ShippedSample(name)).name());
    ASSERT_EQ(run.state(), rote::v1::RUN_STATE_SUCCEEDED) << name << ": " << run.error();
    EXPECT_EQ(run.output_digest(), before.output_digest()) << name;
    EXPECT_EQ(pg_server.Watch(run_name).empty(), false) << name << ": events are stored";
  }
}

TEST(PostgresStoreE2e, UnreachableDatabaseFailsTheStartWithoutShowingThePassword) {
  // A port nothing listens on (the server refuses to start; it never falls back to SQLite).
  orchestrator::ServerOptions opt;
  opt.listen = "127.0.0.1:0";
  opt.metrics_listen = "off";
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("rote-pg-e2e-" + std::to_string(::getpid())))
          .string();
  opt.data_dir = dir;
  opt.store_url = "postgresql://rote:s3cret-pass@127.0.0.1:1/nothing?connect_timeout=5";
  absl::StatusOr<std::unique_ptr<orchestrator::Server>> server = orchestrator::Server::Start(opt);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kUnavailable) << server.status();
  EXPECT_EQ(std::string(server.status().message()).find("s3cret-pass"), std::string::npos)
      << server.status();
  EXPECT_FALSE(std::filesystem::exists(dir + "/rote.db"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace rote::e2e
