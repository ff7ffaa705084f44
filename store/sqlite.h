// Thin RAII layer over the SQLite C API, private to store/. One Connection is used by one
// thread at a time (the writer thread, or a reader that leased it from the pool).
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace rote::store::internal {

// Maps a SQLite result code to a status whose code says whether retrying can help.
absl::Status SqliteStatus(int rc, std::string_view what, sqlite3* db);

// A prepared statement borrowed from a Connection's cache; reset and unbound when destroyed.
class Statement {
 public:
  Statement(sqlite3* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}
  Statement(Statement&& other) noexcept : db_(other.db_), stmt_(other.stmt_) {
    other.stmt_ = nullptr;
  }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  Statement& operator=(Statement&&) = delete;
  ~Statement();

  // Parameters are 1-based, as in SQLite.
  Statement& BindInt(int index, int64_t value);
  Statement& BindText(int index, std::string_view value);
  Statement& BindBlob(int index, std::string_view value);
  Statement& BindNull(int index);
  // NULL for an empty string: optional references (foreign keys) use NULL for "none".
  Statement& BindTextOrNull(int index, std::string_view value);

  // One step: true when a row is available, false when done.
  absl::StatusOr<bool> Step();
  // Steps until done (for statements without rows).
  absl::Status Run();

  // Columns are 0-based, as in SQLite.
  int64_t ColumnInt(int column) const;
  std::string ColumnText(int column) const;  // "" for NULL
  std::string ColumnBlob(int column) const;
  bool ColumnIsNull(int column) const;

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_;
};

struct ConnectionOptions {
  int busy_timeout_ms = 5000;
  bool synchronous_full = true;
  bool query_only = false;
};

class Connection {
 public:
  static absl::StatusOr<std::unique_ptr<Connection>> Open(const std::string& path,
                                                          const ConnectionOptions& options);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // A cached prepared statement for `sql` (one statement).
  absl::StatusOr<Statement> Prepare(std::string_view sql);
  // Runs one or more statements without caching (schema, pragmas).
  absl::Status ExecScript(const std::string& sql);
  // Runs one cached statement to completion.
  absl::Status Exec(std::string_view sql);
  // The single value of a one-row query such as "PRAGMA user_version".
  absl::StatusOr<std::string> QueryText(std::string_view sql);

  bool InTransaction() const { return sqlite3_get_autocommit(db_) == 0; }
  sqlite3* raw() const { return db_; }

 private:
  explicit Connection(sqlite3* db) : db_(db) {}
  sqlite3* db_;
  std::unordered_map<std::string, sqlite3_stmt*> cache_;
};

}  // namespace rote::store::internal
