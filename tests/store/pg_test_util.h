// Fresh PostgreSQL stores for tests: each location is a schema of its own in the test cluster
// (scripts/pg_test_cluster.sh), so tests run in parallel on one database.
//
// The cluster's URL comes from ROTE_TEST_PG_URL_FILE (ctest sets it; the file is written by the
// PgTestClusterStart fixture, so a cluster that did not start fails the tests) or from
// ROTE_TEST_PG_URL (by hand). With neither, the PostgreSQL tests are skipped.
#pragma once

#include <unistd.h>

#include <atomic>
#include <fstream>
#include <random>
#include <string>

#ifdef ROTE_TEST_POSTGRESQL
#include <libpq-fe.h>
#endif

namespace rote::store::testing {

struct PgUrl {
  std::string url;    // empty: no cluster
  std::string error;  // why not, when the tests must fail rather than skip
};

inline PgUrl TestPgUrl() {
  if (const char* file = std::getenv("ROTE_TEST_PG_URL_FILE"); file != nullptr && *file) {
    std::ifstream in(file);
    std::string url;
    std::getline(in, url);
    if (url.empty()) {
      return {"", std::string("the test PostgreSQL cluster is not running: ") + file +
                      " is missing or empty (see the PgTestClusterStart test's output)"};
    }
    return {url, ""};
  }
  if (const char* url = std::getenv("ROTE_TEST_PG_URL"); url != nullptr && *url) return {url, ""};
  return {"", ""};
}

#ifdef ROTE_TEST_POSTGRESQL
// Runs one statement on `url`; the error message, or "" when it worked.
inline std::string PgExec(const std::string& url, const std::string& sql) {
  PGconn* conn = PQconnectdb(url.c_str());
  std::string error;
  if (PQstatus(conn) != CONNECTION_OK) {
    error = PQerrorMessage(conn);
  } else {
    PQsetNoticeProcessor(conn, [](void*, const char*) {}, nullptr);  // "drop cascades to ..."
    PGresult* res = PQexec(conn, sql.c_str());
    if (PQresultStatus(res) != PGRES_COMMAND_OK && PQresultStatus(res) != PGRES_TUPLES_OK) {
      error = PQresultErrorMessage(res);
    }
    PQclear(res);
  }
  PQfinish(conn);
  return error;
}
#endif

// A schema of its own; dropped (with everything in it) when this goes away.
class PgSchema {
 public:
  // `url` must name a running cluster; on failure, error() says why.
  explicit PgSchema(const std::string& url) {
#ifdef ROTE_TEST_POSTGRESQL
    static std::atomic<int> counter{0};
    std::random_device rd;
    name_ = "t" + std::to_string(::getpid()) + "_" + std::to_string(counter.fetch_add(1)) + "_" +
            std::to_string(rd() % 1000000);
    admin_url_ = url;
    error_ = PgExec(url, "CREATE SCHEMA " + name_);
    path_ = url + (url.find('?') == std::string::npos ? "?" : "&") +
            "options=-csearch_path%3D" + name_;
#else
    error_ = "this build has no PostgreSQL store (libpq was not found)";
    (void)url;
#endif
  }
  ~PgSchema() {
#ifdef ROTE_TEST_POSTGRESQL
    if (error_.empty()) PgExec(admin_url_, "DROP SCHEMA " + name_ + " CASCADE");
#endif
  }
  PgSchema(const PgSchema&) = delete;
  PgSchema& operator=(const PgSchema&) = delete;

  const std::string& path() const { return path_; }  // a URL for StoreOptions.path
  const std::string& name() const { return name_; }
  const std::string& error() const { return error_; }

 private:
  std::string name_, admin_url_, path_, error_;
};

}  // namespace rote::store::testing
