// Thin RAII layer over libpq, private to store/. One PgConn is used by one thread at a time
// (leased from PgPool). Parameters and results travel in binary format: bytea values are
// passed as raw bytes (no escaping), integers as int8.
#pragma once

#include <libpq-fe.h>

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace rote::store::internal {

// One query parameter: its type and its binary value.
struct PgParam {
  static PgParam Text(std::string_view v) { return {25, std::string(v), false}; }
  // NULL for an empty string: optional references use NULL for "none".
  static PgParam TextOrNull(std::string_view v) { return {25, std::string(v), v.empty()}; }
  static PgParam Bytes(std::string_view v) { return {17, std::string(v), false}; }
  static PgParam Int(int64_t v);
  static PgParam Bool(bool v) { return {16, std::string(1, v ? '\1' : '\0'), false}; }
  unsigned int type = 0;  // a type Oid: 25 text, 17 bytea, 20 int8, 16 bool
  std::string value;
  bool null = false;
};

class PgResult {
 public:
  explicit PgResult(PGresult* res) : res_(res) {}
  PgResult(PgResult&& o) noexcept : res_(o.res_) { o.res_ = nullptr; }
  PgResult(const PgResult&) = delete;
  PgResult& operator=(const PgResult&) = delete;
  PgResult& operator=(PgResult&&) = delete;
  ~PgResult() { if (res_ != nullptr) PQclear(res_); }

  int rows() const { return PQntuples(res_); }
  // Columns are 0-based. Integers of any width and booleans read as int64; NULL as 0 / "".
  int64_t Int(int row, int col) const;
  std::string Text(int row, int col) const;  // text and bytea alike: the raw bytes
  bool IsNull(int row, int col) const { return PQgetisnull(res_, row, col) != 0; }

 private:
  PGresult* res_;
};

class PgConn {
 public:
  // `conninfo`: a postgresql:// URL or key=value string, as libpq takes it.
  static absl::StatusOr<std::unique_ptr<PgConn>> Open(const std::string& conninfo);
  ~PgConn();
  PgConn(const PgConn&) = delete;
  PgConn& operator=(const PgConn&) = delete;

  // Runs one statement with parameters $1, $2, ... and returns its rows.
  absl::StatusOr<PgResult> Exec(std::string_view sql, const std::vector<PgParam>& params = {});
  // Runs one or more statements without parameters (schema, settings).
  absl::Status ExecScript(const std::string& sql);

  // Whether a statement since ClearRetryable() failed with a serialization failure or deadlock:
  // the transaction can be retried from its start. Sticky, because the statements after such a
  // failure fail too, for another reason ("current transaction is aborted").
  bool last_error_retryable() const { return last_error_retryable_; }
  void ClearRetryable() { last_error_retryable_ = false; }
  bool broken() const { return PQstatus(conn_) != CONNECTION_OK; }
  // Waits up to timeout_ms for notifications (after LISTEN) and calls `on_notify` with the
  // payload of each; UNAVAILABLE when the connection broke.
  absl::Status WaitForNotifications(int timeout_ms,
                                    const std::function<void(std::string_view payload)>& on_notify);

 private:
  explicit PgConn(PGconn* conn) : conn_(conn) {}
  absl::Status ResultStatus(PGresult* res, std::string_view sql);
  PGconn* conn_;
  bool last_error_retryable_ = false;
};

// A fixed pool of connections; a caller leases one for the length of its transaction.
class PgPool {
 public:
  // `setup_sql` runs on every connection the pool opens (per-connection settings such as synchronous_commit).
  absl::Status Init(const std::string& conninfo, int size, std::string setup_sql);

  class Lease {
   public:
    Lease(PgPool* pool, std::unique_ptr<PgConn> conn) : pool_(pool), conn_(std::move(conn)) {}
    Lease(Lease&&) = default;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    Lease& operator=(Lease&&) = delete;
    ~Lease() { if (conn_ != nullptr) pool_->Release(std::move(conn_)); }
    PgConn& operator*() { return *conn_; }

   private:
    PgPool* pool_;
    std::unique_ptr<PgConn> conn_;
  };
  Lease Acquire();

 private:
  void Release(std::unique_ptr<PgConn> conn);
  absl::StatusOr<std::unique_ptr<PgConn>> Connect() const;
  std::string conninfo_;
  std::string setup_sql_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<PgConn>> free_;
};

}  // namespace rote::store::internal
