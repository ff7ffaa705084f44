#include "store/sqlite.h"

#include "store/str_util.h"

namespace rote::store::internal {

absl::Status SqliteStatus(int rc, std::string_view what, sqlite3* db) {
  if (rc == SQLITE_OK || rc == SQLITE_DONE || rc == SQLITE_ROW) return absl::OkStatus();
  std::string detail = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  std::string msg = Cat("store: ", what, ": ", detail, " (sqlite code ", rc, ")");
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::UnavailableError(
          Cat(msg, "; the database is locked by another connection, retry later"));
    case SQLITE_FULL:
      return absl::ResourceExhaustedError(
          Cat(msg, "; the disk is full, free space and retry"));
    case SQLITE_NOMEM:
      return absl::ResourceExhaustedError(msg);
    case SQLITE_IOERR:
      return absl::UnavailableError(Cat(msg, "; I/O error, retry later"));
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return absl::DataLossError(Cat(msg, "; the database file is damaged"));
    case SQLITE_CONSTRAINT:
      return absl::FailedPreconditionError(msg);
    case SQLITE_READONLY:
    case SQLITE_CANTOPEN:
    case SQLITE_PERM:
    case SQLITE_AUTH:
      return absl::FailedPreconditionError(msg);
    case SQLITE_INTERRUPT:
      return absl::CancelledError(msg);
    default:
      return absl::InternalError(msg);
  }
}

Statement::~Statement() {
  if (stmt_ != nullptr) {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
}

Statement& Statement::BindInt(int index, int64_t value) {
  sqlite3_bind_int64(stmt_, index, value);
  return *this;
}

Statement& Statement::BindText(int index, std::string_view value) {
  // SQLITE_TRANSIENT: the caller's buffer may not outlive the statement's next step.
  sqlite3_bind_text64(stmt_, index, value.data(), value.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
  return *this;
}

Statement& Statement::BindBlob(int index, std::string_view value) {
  // A zero-length blob must still be a BLOB, not NULL: sqlite binds NULL for a null pointer.
  static const char kEmpty = 0;
  sqlite3_bind_blob64(stmt_, index, value.empty() ? &kEmpty : value.data(), value.size(),
                      SQLITE_TRANSIENT);
  return *this;
}

Statement& Statement::BindNull(int index) {
  sqlite3_bind_null(stmt_, index);
  return *this;
}

Statement& Statement::BindTextOrNull(int index, std::string_view value) {
  return value.empty() ? BindNull(index) : BindText(index, value);
}

absl::StatusOr<bool> Statement::Step() {
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return SqliteStatus(rc, sqlite3_sql(stmt_), db_);
}

absl::Status Statement::Run() {
  while (true) {
    absl::StatusOr<bool> row = Step();
    if (!row.ok()) return row.status();
    if (!*row) return absl::OkStatus();
  }
}

int64_t Statement::ColumnInt(int column) const { return sqlite3_column_int64(stmt_, column); }

std::string Statement::ColumnText(int column) const {
  const unsigned char* p = sqlite3_column_text(stmt_, column);
  if (p == nullptr) return "";
  return std::string(reinterpret_cast<const char*>(p),
                     static_cast<size_t>(sqlite3_column_bytes(stmt_, column)));
}

std::string Statement::ColumnBlob(int column) const {
  const void* p = sqlite3_column_blob(stmt_, column);
  if (p == nullptr) return "";
  return std::string(static_cast<const char*>(p),
                     static_cast<size_t>(sqlite3_column_bytes(stmt_, column)));
}

bool Statement::ColumnIsNull(int column) const {
  return sqlite3_column_type(stmt_, column) == SQLITE_NULL;
}

absl::StatusOr<std::unique_ptr<Connection>> Connection::Open(const std::string& path,
                                                             const ConnectionOptions& options) {
  sqlite3* db = nullptr;
  // NOMUTEX: a connection is only ever used by one thread at a time (writer thread or a
  // leased reader), so SQLite's per-connection mutex would be pure overhead.
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
  int rc = sqlite3_open_v2(path.c_str(), &db, flags, nullptr);
  if (rc != SQLITE_OK) {
    absl::Status status = SqliteStatus(rc, Cat("open ", path), db);
    sqlite3_close(db);
    return status;
  }
  std::unique_ptr<Connection> conn(new Connection(db));
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, options.busy_timeout_ms);
  std::string pragmas = Cat(
      "PRAGMA foreign_keys = ON;"
      "PRAGMA synchronous = ",
      options.synchronous_full ? "FULL" : "NORMAL", ";",
      options.query_only ? "PRAGMA query_only = ON;" : "");
  if (absl::Status s = conn->ExecScript(pragmas); !s.ok()) return s;
  return conn;
}

Connection::~Connection() {
  for (auto& [sql, stmt] : cache_) sqlite3_finalize(stmt);
  sqlite3_close(db_);
}

absl::StatusOr<Statement> Connection::Prepare(std::string_view sql) {
  auto it = cache_.find(std::string(sql));
  if (it != cache_.end()) return Statement(db_, it->second);
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()),
                              SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
  if (rc != SQLITE_OK) {
    return SqliteStatus(rc, Cat("prepare \"", sql, "\""), db_);
  }
  cache_.emplace(std::string(sql), stmt);
  return Statement(db_, stmt);
}

absl::Status Connection::ExecScript(const std::string& sql) {
  char* err = nullptr;
  int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err);
  sqlite3_free(err);
  return SqliteStatus(rc, "exec", db_);
}

absl::Status Connection::Exec(std::string_view sql) {
  absl::StatusOr<Statement> stmt = Prepare(sql);
  if (!stmt.ok()) return stmt.status();
  return stmt->Run();
}

absl::StatusOr<std::string> Connection::QueryText(std::string_view sql) {
  absl::StatusOr<Statement> stmt = Prepare(sql);
  if (!stmt.ok()) return stmt.status();
  absl::StatusOr<bool> row = stmt->Step();
  if (!row.ok()) return row.status();
  if (!*row) return absl::InternalError(Cat("store: no row from \"", sql, "\""));
  return stmt->ColumnText(0);
}

}  // namespace rote::store::internal
