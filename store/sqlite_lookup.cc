#include "store/sqlite_lookup.h"

#include <algorithm>
#include <string>

#include "store/checks.h"
#include "store/digest.h"
#include "store/status_macros.h"
#include "store/str_util.h"

namespace rote::store::internal {
namespace {

// The smallest string above every string that starts with `prefix` (whose last character is a
// hex digit, so it never overflows): digest >= prefix AND digest < this is an index range.
std::string PrefixEnd(std::string_view prefix) {
  std::string end(prefix);
  end.back() = static_cast<char>(end.back() + 1);
  return end;
}

// The total of `count_sql` and the first `limit` strings of the one-column `rows_sql`, read in
// one transaction. Both take the parameters `bind` binds; `rows_sql` also takes the limit, as
// parameter number `limit_param`.
template <typename Bind>
absl::StatusOr<Store::Matches> Collect(SqliteDb& db, const std::string& rows_sql, const std::string& count_sql,
                                       int limit_param, int limit, Bind bind) {
  return db.ReadTx([&](Connection& conn) -> absl::StatusOr<Store::Matches> {
    Store::Matches out;
    {
      ASSIGN_OR_RETURN(Statement stmt, conn.Prepare(count_sql));
      bind(stmt);
      ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (row) out.total = stmt.ColumnInt(0);
    }
    if (limit <= 0 || out.total == 0) return out;
    ASSIGN_OR_RETURN(Statement stmt, conn.Prepare(rows_sql));
    bind(stmt);
    stmt.BindInt(limit_param, limit);
    while (true) {
      ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (!row) break;
      out.items.push_back(stmt.ColumnText(0));
    }
    return out;
  });
}

}  // namespace

absl::StatusOr<Store::Matches> SqliteLookup::FindByDigestPrefix(std::string_view table,
                                                                std::string_view digest_prefix, int limit) {
  RETURN_IF_ERROR(CheckDigestPrefix(digest_prefix));
  const std::string range = Cat(" FROM ", table, " WHERE digest >= ?1 AND digest < ?2");
  const std::string end = PrefixEnd(digest_prefix);
  return Collect(db_, Cat("SELECT digest", range, " ORDER BY digest LIMIT ?3"), Cat("SELECT COUNT(*)", range),
                 3, limit, [&](Statement& s) {
                   s.BindText(1, digest_prefix);
                   s.BindText(2, end);
                 });
}

absl::StatusOr<Store::Matches> SqliteLookup::FindArtifactsByDigestPrefix(std::string_view digest_prefix,
                                                                         int limit) {
  return FindByDigestPrefix("artifacts", digest_prefix, limit);
}

absl::StatusOr<Store::Matches> SqliteLookup::FindBlueprintsByDigestPrefix(std::string_view digest_prefix,
                                                                          int limit) {
  return FindByDigestPrefix("blueprints", digest_prefix, limit);
}

absl::StatusOr<Store::Matches> SqliteLookup::FindBlueprintNamesDeclaringPoint(std::string_view point, int limit) {
  // generation_specs_by_name and blueprint_points_by_spec make this a walk over the points of
  // that name only.
  static constexpr std::string_view kJoin =
      " FROM generation_specs s JOIN blueprint_points p ON p.spec_digest = s.digest "
      "JOIN blueprints b ON b.id = p.blueprint_id WHERE s.name = ?1";
  return Collect(db_, Cat("SELECT DISTINCT b.name", kJoin, " ORDER BY b.name LIMIT ?2"),
                 Cat("SELECT COUNT(DISTINCT b.name)", kJoin), 2, limit, [&](Statement& s) { s.BindText(1, point); });
}

}  // namespace rote::store::internal
