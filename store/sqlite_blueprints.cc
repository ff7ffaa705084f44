#include "store/sqlite_blueprints.h"

#include <sqlite3.h>

#include <string>
#include <utility>

#include "store/checks.h"
#include "store/digest.h"
#include "store/page_token.h"
#include "store/status_macros.h"
#include "store/str_util.h"

namespace rote::store::internal {
namespace {

// ---- row loaders (used by readers and, for read-your-own-write results, by the writer) ----

constexpr std::string_view kBlueprintColumns = "id, digest, name, version, source, create_ms";

absl::Status LoadBlueprintPoints(Connection& conn, int64_t blueprint_id, BlueprintRecord& bp) {
  ASSIGN_OR_RETURN(Statement stmt,
                   conn.Prepare("SELECT s.digest, s.kind, s.name, s.canonical "
                                "FROM blueprint_points p JOIN generation_specs s "
                                "ON s.digest = p.spec_digest WHERE p.blueprint_id = ? "
                                "ORDER BY p.ordinal"));
  stmt.BindInt(1, blueprint_id);
  while (true) {
    ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) return absl::OkStatus();
    bp.generation_points.push_back(GenerationSpecRecord{
        stmt.ColumnText(0), stmt.ColumnText(1), stmt.ColumnText(2), stmt.ColumnText(3)});
  }
}

std::pair<int64_t, BlueprintRecord> ReadBlueprintRow(const Statement& stmt) {
  BlueprintRecord bp;
  bp.digest = stmt.ColumnText(1);
  bp.name = stmt.ColumnText(2);
  bp.version = stmt.ColumnText(3);
  bp.source = stmt.ColumnText(4);
  bp.create_ms = stmt.ColumnInt(5);
  return {stmt.ColumnInt(0), std::move(bp)};
}

// Runs `sql` (selecting kBlueprintColumns, parameters bound by `bind`) and loads each row.
template <typename Bind>
absl::StatusOr<std::vector<std::pair<int64_t, BlueprintRecord>>> QueryBlueprints(
    Connection& conn, const std::string& sql, Bind bind) {
  return QueryRows<std::pair<int64_t, BlueprintRecord>>(
      conn, sql, bind, ReadBlueprintRow,
      [](Connection& c, auto& row) { return LoadBlueprintPoints(c, row.first, row.second); });
}

absl::StatusOr<BlueprintRecord> LoadBlueprint(Connection& conn, std::string_view digest) {
  static const std::string sql =
      Cat("SELECT ", kBlueprintColumns, " FROM blueprints WHERE digest = ?");
  ASSIGN_OR_RETURN(auto rows,
                   QueryBlueprints(conn, sql, [&](Statement& s) { s.BindText(1, digest); }));
  if (rows.empty()) {
    return absl::NotFoundError(Cat("blueprint ", digest, " is not stored"));
  }
  return std::move(rows.front().second);
}

absl::Status InsertSpec(Connection& conn, const GenerationSpecRecord& spec, int64_t now) {
  ASSIGN_OR_RETURN(Statement stmt, conn.Prepare(
                                       "INSERT INTO generation_specs (digest, kind, name, "
                                       "canonical, create_ms) VALUES (?, ?, ?, ?, ?) "
                                       "ON CONFLICT (digest) DO NOTHING"));
  stmt.BindText(1, spec.digest)
      .BindText(2, spec.kind)
      .BindText(3, spec.name)
      .BindText(4, spec.canonical)
      .BindInt(5, now);
  return stmt.Run();
}

}  // namespace

// ---- specs and blueprints ---------------------------------------------------------------------

absl::Status SqliteBlueprints::PutGenerationSpec(const GenerationSpecRecord& spec) {
  RETURN_IF_ERROR(ValidateSpec(spec));
  const int64_t now = db_.clock_ms();
  return db_.Write([&](Connection& conn) { return InsertSpec(conn, spec, now); });
}

absl::StatusOr<GenerationSpecRecord> SqliteBlueprints::GetGenerationSpec(std::string_view digest) {
  RETURN_IF_ERROR(CheckDigest(digest, "generation spec digest"));
  ReaderPool::Lease lease = db_.readers.Acquire();
  ASSIGN_OR_RETURN(Statement stmt,
                   (*lease).Prepare("SELECT digest, kind, name, canonical FROM generation_specs "
                                    "WHERE digest = ?"));
  stmt.BindText(1, digest);
  ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return absl::NotFoundError(Cat("generation spec ", digest, " is not stored"));
  return GenerationSpecRecord{stmt.ColumnText(0), stmt.ColumnText(1), stmt.ColumnText(2),
                              stmt.ColumnText(3)};
}

absl::StatusOr<BlueprintRecord> SqliteBlueprints::PutBlueprint(const BlueprintRecord& blueprint) {
  RETURN_IF_ERROR(CheckNewBlueprint(blueprint));
  const int64_t now = db_.clock_ms();
  BlueprintRecord stored;
  RETURN_IF_ERROR(db_.Write([&](Connection& conn) -> absl::Status {
    absl::StatusOr<BlueprintRecord> existing = LoadBlueprint(conn, blueprint.digest);
    if (existing.ok()) {
      RETURN_IF_ERROR(CheckSameBlueprint(*existing, blueprint));
      stored = *std::move(existing);
      return absl::OkStatus();
    }
    if (!absl::IsNotFound(existing.status())) return existing.status();
    for (const GenerationSpecRecord& spec : blueprint.generation_points) {
      RETURN_IF_ERROR(InsertSpec(conn, spec, now));
    }
    {
      ASSIGN_OR_RETURN(Statement stmt,
                       conn.Prepare("INSERT INTO blueprints (digest, name, version, source, "
                                    "create_ms) VALUES (?, ?, ?, ?, ?)"));
      stmt.BindText(1, blueprint.digest)
          .BindText(2, blueprint.name)
          .BindText(3, blueprint.version)
          .BindText(4, blueprint.source)
          .BindInt(5, now);
      RETURN_IF_ERROR(stmt.Run());
    }
    const int64_t id = sqlite3_last_insert_rowid(conn.raw());
    for (size_t i = 0; i < blueprint.generation_points.size(); ++i) {
      ASSIGN_OR_RETURN(Statement stmt,
                       conn.Prepare("INSERT INTO blueprint_points (blueprint_id, ordinal, "
                                    "spec_digest) VALUES (?, ?, ?)"));
      stmt.BindInt(1, id)
          .BindInt(2, static_cast<int64_t>(i))
          .BindText(3, blueprint.generation_points[i].digest);
      RETURN_IF_ERROR(stmt.Run());
    }
    ASSIGN_OR_RETURN(stored, LoadBlueprint(conn, blueprint.digest));
    return absl::OkStatus();
  }));
  return stored;
}

absl::StatusOr<BlueprintRecord> SqliteBlueprints::GetBlueprint(std::string_view digest) {
  RETURN_IF_ERROR(CheckDigest(digest, "blueprint digest"));
  return db_.ReadTx([&](Connection& conn) { return LoadBlueprint(conn, digest); });
}

absl::StatusOr<std::vector<BlueprintRecord>> SqliteBlueprints::FindBlueprintsByName(
    std::string_view name) {
  static const std::string sql = Cat("SELECT ", kBlueprintColumns,
                                     " FROM blueprints WHERE name = ? ORDER BY id");
  return db_.ReadTx([&](Connection& conn) -> absl::StatusOr<std::vector<BlueprintRecord>> {
    ASSIGN_OR_RETURN(auto rows,
                     QueryBlueprints(conn, sql, [&](Statement& s) { s.BindText(1, name); }));
    std::vector<BlueprintRecord> out;
    for (auto& [id, bp] : rows) out.push_back(std::move(bp));
    return out;
  });
}

absl::StatusOr<Page<BlueprintRecord>> SqliteBlueprints::ListBlueprints(
    const BlueprintFilter& filter, const PageRequest& page) {
  ASSIGN_OR_RETURN(const int size, EffectivePageSize(page.page_size));
  const std::string filter_key = FilterKey({filter.name});
  int64_t after = 0;
  if (!page.page_token.empty()) {
    ASSIGN_OR_RETURN(after, db_.tokens.Decode(page.page_token, "blueprints", filter_key));
  }
  std::string sql = Cat("SELECT ", kBlueprintColumns, " FROM blueprints WHERE id > ?1",
                        filter.name.empty() ? "" : " AND name = ?3",
                        " ORDER BY id LIMIT ?2");
  return db_.ReadTx([&](Connection& conn) -> absl::StatusOr<Page<BlueprintRecord>> {
    ASSIGN_OR_RETURN(auto rows, QueryBlueprints(conn, sql, [&](Statement& s) {
                       s.BindInt(1, after).BindInt(2, size + 1);
                       if (!filter.name.empty()) s.BindText(3, filter.name);
                     }));
    return StripIds(MakePage(std::move(rows), size, db_.tokens, "blueprints", filter_key,
                             [](const auto& r) { return r.first; }));
  });
}

// ---- bindings -----------------------------------------------------------------------------------

absl::Status SqliteBlueprints::SetBinding(std::string_view blueprint_digest,
                                          const Binding& binding) {
  RETURN_IF_ERROR(CheckDigest(blueprint_digest, "blueprint digest"));
  RETURN_IF_ERROR(ValidateBinding(binding));
  const int64_t now = db_.clock_ms();
  return db_.Write([&](Connection& conn) -> absl::Status {
    ASSIGN_OR_RETURN(bool found, Exists(conn, "SELECT 1 FROM blueprints WHERE digest = ?",
                                        blueprint_digest));
    if (!found) {
      return absl::FailedPreconditionError(
          Cat("blueprint ", blueprint_digest, " is not stored; PutBlueprint it first"));
    }
    RETURN_IF_ERROR(RequireArtifact(conn, binding.artifact_digest, "bound artifact"));
    ASSIGN_OR_RETURN(
        Statement stmt,
        conn.Prepare("INSERT INTO bindings (blueprint_digest, generation_point, artifact_digest, "
                     "source, update_ms) VALUES (?, ?, ?, ?, ?) "
                     "ON CONFLICT (blueprint_digest, generation_point) DO UPDATE SET "
                     "artifact_digest = excluded.artifact_digest, source = excluded.source, "
                     "update_ms = excluded.update_ms"));
    stmt.BindText(1, blueprint_digest)
        .BindText(2, binding.generation_point)
        .BindText(3, binding.artifact_digest)
        .BindText(4, binding.source)
        .BindInt(5, now);
    return stmt.Run();
  });
}

absl::StatusOr<Binding> SqliteBlueprints::GetBinding(std::string_view blueprint_digest,
                                                     std::string_view generation_point) {
  RETURN_IF_ERROR(CheckDigest(blueprint_digest, "blueprint digest"));
  ReaderPool::Lease lease = db_.readers.Acquire();
  ASSIGN_OR_RETURN(Statement stmt,
                   (*lease).Prepare("SELECT artifact_digest, source FROM bindings "
                                    "WHERE blueprint_digest = ? AND generation_point = ?"));
  stmt.BindText(1, blueprint_digest).BindText(2, generation_point);
  ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) {
    return absl::NotFoundError(Cat("blueprint ", blueprint_digest,
                                   " has no binding for '", generation_point, "'"));
  }
  return Binding{std::string(generation_point), stmt.ColumnText(0), stmt.ColumnText(1)};
}

absl::StatusOr<std::vector<Binding>> SqliteBlueprints::ListBindings(
    std::string_view blueprint_digest) {
  RETURN_IF_ERROR(CheckDigest(blueprint_digest, "blueprint digest"));
  ReaderPool::Lease lease = db_.readers.Acquire();
  ASSIGN_OR_RETURN(Statement stmt,
                   (*lease).Prepare("SELECT generation_point, artifact_digest, source FROM "
                                    "bindings WHERE blueprint_digest = ? "
                                    "ORDER BY generation_point"));
  stmt.BindText(1, blueprint_digest);
  std::vector<Binding> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, stmt.Step());
    if (!row) return out;
    out.push_back(Binding{stmt.ColumnText(0), stmt.ColumnText(1), stmt.ColumnText(2)});
  }
}

}  // namespace rote::store::internal
