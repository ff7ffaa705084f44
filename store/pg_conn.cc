#include "store/pg_conn.h"

#include <poll.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "store/str_util.h"

namespace rote::store::internal {
namespace {

constexpr unsigned int kBoolOid = 16;
constexpr unsigned int kInt8Oid = 20;
constexpr unsigned int kInt2Oid = 21;
constexpr unsigned int kInt4Oid = 23;

uint64_t ReadBigEndian(const char* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

// The status code for a SQLSTATE: whether retrying can help, and whose fault it is.
absl::StatusCode CodeFor(std::string_view state) {
  if (state == "40001" || state == "40P01" || state == "55P03") return absl::StatusCode::kAborted;
  if (state.starts_with("23")) return absl::StatusCode::kFailedPrecondition;  // constraints
  if (state.starts_with("22")) return absl::StatusCode::kInvalidArgument;     // data
  if (state == "53100" || state == "53200" || state == "54000") {
    return absl::StatusCode::kResourceExhausted;  // disk full, out of memory, too large
  }
  if (state.starts_with("08") || state.starts_with("53") || state.starts_with("57") ||
      state.starts_with("58")) {
    return absl::StatusCode::kUnavailable;  // connection, resources, shutdown, I/O
  }
  if (state.starts_with("XX")) return absl::StatusCode::kDataLoss;
  return absl::StatusCode::kInternal;
}

}  // namespace

PgParam PgParam::Int(int64_t v) {
  std::string bytes(8, '\0');
  const auto u = static_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i) bytes[static_cast<size_t>(i)] = static_cast<char>(u >> (56 - 8 * i));
  return {kInt8Oid, std::move(bytes), false};
}

int64_t PgResult::Int(int row, int col) const {
  if (PQgetisnull(res_, row, col)) return 0;
  const char* p = PQgetvalue(res_, row, col);
  switch (PQftype(res_, col)) {
    case kInt8Oid: return static_cast<int64_t>(ReadBigEndian(p, 8));
    case kInt4Oid: return static_cast<int32_t>(ReadBigEndian(p, 4));
    case kInt2Oid: return static_cast<int16_t>(ReadBigEndian(p, 2));
    case kBoolOid: return p[0] != 0 ? 1 : 0;
    default: return 0;
  }
}

std::string PgResult::Text(int row, int col) const {
  if (PQgetisnull(res_, row, col)) return "";
  return std::string(PQgetvalue(res_, row, col),
                     static_cast<size_t>(PQgetlength(res_, row, col)));
}

absl::StatusOr<std::unique_ptr<PgConn>> PgConn::Open(const std::string& conninfo) {
  PGconn* conn = PQconnectdb(conninfo.c_str());
  if (conn == nullptr) return absl::ResourceExhaustedError("store: libpq cannot allocate a connection");
  if (PQstatus(conn) != CONNECTION_OK) {
    std::string message = PQerrorMessage(conn);
    PQfinish(conn);
    while (!message.empty() && message.back() == '\n') message.pop_back();
    return absl::UnavailableError(Cat("store: cannot connect to PostgreSQL: ", message));
  }
  auto out = std::unique_ptr<PgConn>(new PgConn(conn));
  // Notices (e.g. "relation already exists, skipping") are not errors; keep stderr quiet.
  PQsetNoticeProcessor(conn, [](void*, const char*) {}, nullptr);
  return out;
}

PgConn::~PgConn() { PQfinish(conn_); }

absl::Status PgConn::ResultStatus(PGresult* res, std::string_view sql) {
  const ExecStatusType st = res == nullptr ? PGRES_FATAL_ERROR : PQresultStatus(res);
  if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) return absl::OkStatus();
  const char* state_c = res == nullptr ? nullptr : PQresultErrorField(res, PG_DIAG_SQLSTATE);
  const std::string state = state_c == nullptr ? "" : state_c;
  std::string message = res == nullptr ? PQerrorMessage(conn_) : PQresultErrorMessage(res);
  while (!message.empty() && message.back() == '\n') message.pop_back();
  absl::StatusCode code = state.empty() ? absl::StatusCode::kUnavailable : CodeFor(state);
  if (state == "40001" || state == "40P01") last_error_retryable_ = true;
  return absl::Status(code, Cat("store: PostgreSQL ", state.empty() ? "" : Cat("[", state, "] "),
                                message, " (in: ", sql.substr(0, 120), ")"));
}

absl::StatusOr<PgResult> PgConn::Exec(std::string_view sql, const std::vector<PgParam>& params) {
  std::vector<unsigned int> types;
  std::vector<const char*> values;
  std::vector<int> lengths;
  std::vector<int> formats;
  for (const PgParam& p : params) {
    types.push_back(p.type);
    values.push_back(p.null ? nullptr : p.value.data());
    lengths.push_back(static_cast<int>(p.value.size()));
    formats.push_back(1);
  }
  const std::string text(sql);
  PGresult* res = PQexecParams(conn_, text.c_str(), static_cast<int>(params.size()), types.data(),
                               values.data(), lengths.data(), formats.data(), /*resultFormat=*/1);
  absl::Status st = ResultStatus(res, sql);
  if (!st.ok()) {
    if (res != nullptr) PQclear(res);
    return st;
  }
  return PgResult(res);
}

absl::Status PgConn::ExecScript(const std::string& sql) {
  PGresult* res = PQexec(conn_, sql.c_str());
  absl::Status st = ResultStatus(res, sql);
  if (res != nullptr) PQclear(res);
  return st;
}

absl::Status PgConn::WaitForNotifications(
    int timeout_ms, const std::function<void(std::string_view payload)>& on_notify) {
  const int fd = PQsocket(conn_);
  if (fd < 0) return absl::UnavailableError("store: the PostgreSQL connection is closed");
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, timeout_ms) < 0 && errno != EINTR) {
    return absl::UnavailableError("store: waiting on the PostgreSQL connection failed");
  }
  if (PQconsumeInput(conn_) == 0) {
    return absl::UnavailableError(Cat("store: the PostgreSQL connection broke: ", PQerrorMessage(conn_)));
  }
  while (PGnotify* n = PQnotifies(conn_)) {
    on_notify(n->extra == nullptr ? std::string_view() : std::string_view(n->extra));
    PQfreemem(n);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<PgConn>> PgPool::Connect() const {
  absl::StatusOr<std::unique_ptr<PgConn>> conn = PgConn::Open(conninfo_);
  if (conn.ok() && !setup_sql_.empty()) {
    if (absl::Status st = (*conn)->ExecScript(setup_sql_); !st.ok()) return st;
  }
  return conn;
}

absl::Status PgPool::Init(const std::string& conninfo, int size, std::string setup_sql) {
  conninfo_ = conninfo;
  setup_sql_ = std::move(setup_sql);
  for (int i = 0; i < size; ++i) {
    absl::StatusOr<std::unique_ptr<PgConn>> conn = Connect();
    if (!conn.ok()) return conn.status();
    free_.push_back(*std::move(conn));
  }
  return absl::OkStatus();
}

PgPool::Lease PgPool::Acquire() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !free_.empty(); });
  std::unique_ptr<PgConn> conn = std::move(free_.back());
  free_.pop_back();
  lock.unlock();
  if (conn->broken()) {
    // The server restarted or the network dropped: a fresh connection, or the broken one again
    // (its calls then fail UNAVAILABLE, and the next lease tries again).
    if (absl::StatusOr<std::unique_ptr<PgConn>> fresh = Connect(); fresh.ok()) {
      conn = *std::move(fresh);
    }
  }
  return Lease(this, std::move(conn));
}

void PgPool::Release(std::unique_ptr<PgConn> conn) {
  {
    std::lock_guard lock(mu_);
    free_.push_back(std::move(conn));
  }
  cv_.notify_one();
}

}  // namespace rote::store::internal
