// What every resource family of the SQLite store works through: the single writer (group
// commit), the pool of reader connections, the clock and the page token codec. SqliteStore
// owns one and opens it; the families hold a reference.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "store/group_commit.h"
#include "store/page_token.h"
#include "store/reader_pool.h"
#include "store/sqlite.h"
#include "store/status_macros.h"

namespace rote::store::internal {

struct SqliteDb {
  std::function<int64_t()> clock_ms;  // unix milliseconds, for every time the store records
  PageTokenCodec tokens{""};
  ReaderPool readers;
  // Declared last so it is destroyed first: its queued writes commit while the rest is alive.
  std::unique_ptr<GroupCommitWriter> writer;

  absl::Status Write(GroupCommitWriter::WriteFn fn) { return writer->Write(std::move(fn)); }

  // A read in one transaction, so multi-statement reads see one snapshot.
  template <typename F>
  auto ReadTx(F&& fn) -> decltype(fn(std::declval<Connection&>())) {
    ReaderPool::Lease lease = readers.Acquire();
    Connection& conn = *lease;
    RETURN_IF_ERROR(conn.Exec("BEGIN"));
    auto result = fn(conn);
    // Ending a read transaction cannot lose anything; its status adds nothing to `result`.
    conn.Exec("COMMIT").IgnoreError();
    return result;
  }
};

// Runs `sql` (parameters bound by `bind`), reads each row with `read_row`, then completes each
// row with `complete(conn, row)`, which may query again: the first statement is reset by then.
template <typename Row, typename Bind, typename Read, typename Complete>
absl::StatusOr<std::vector<Row>> QueryRows(Connection& conn, const std::string& sql, Bind bind,
                                           Read read_row, Complete complete) {
  std::vector<Row> rows;
  {
    ASSIGN_OR_RETURN(Statement stmt, conn.Prepare(sql));
    bind(stmt);
    while (true) {
      ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (!row) break;
      rows.push_back(read_row(stmt));
    }
  }
  for (Row& row : rows) RETURN_IF_ERROR(complete(conn, row));
  return rows;
}

}  // namespace rote::store::internal
