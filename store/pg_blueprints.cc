// The PostgreSQL store: generation specs, blueprints and their bindings. See pg_store.h.
#include <string>
#include <utility>
#include <vector>

#include "store/checks.h"
#include "store/pg_store.h"
#include "store/str_util.h"

namespace rote::store::internal {
namespace {

using P = PgParam;

constexpr std::string_view kBlueprintColumns = "id, digest, name, version, source, create_ms";

absl::StatusOr<std::vector<std::pair<int64_t, BlueprintRecord>>> QueryBlueprints(
    PgConn& conn, const std::string& sql, const std::vector<PgParam>& params) {
  ASSIGN_OR_RETURN(PgResult res, conn.Exec(sql, params));
  std::vector<std::pair<int64_t, BlueprintRecord>> rows;
  for (int i = 0; i < res.rows(); ++i) {
    BlueprintRecord bp;
    bp.digest = res.Text(i, 1);
    bp.name = res.Text(i, 2);
    bp.version = res.Text(i, 3);
    bp.source = res.Text(i, 4);
    bp.create_ms = res.Int(i, 5);
    rows.emplace_back(res.Int(i, 0), std::move(bp));
  }
  for (auto& [id, bp] : rows) {
    ASSIGN_OR_RETURN(PgResult points,
                     conn.Exec("SELECT s.digest, s.kind, s.name, s.canonical "
                               "FROM blueprint_points p JOIN generation_specs s "
                               "ON s.digest = p.spec_digest WHERE p.blueprint_id = $1 "
                               "ORDER BY p.ordinal",
                               {P::Int(id)}));
    for (int i = 0; i < points.rows(); ++i) {
      bp.generation_points.push_back(GenerationSpecRecord{
          points.Text(i, 0), points.Text(i, 1), points.Text(i, 2), points.Text(i, 3)});
    }
  }
  return rows;
}

absl::StatusOr<BlueprintRecord> LoadBlueprint(PgConn& conn, std::string_view digest) {
  ASSIGN_OR_RETURN(auto rows,
                   QueryBlueprints(conn, Cat("SELECT ", kBlueprintColumns,
                                             " FROM blueprints WHERE digest = $1"),
                                   {P::Text(digest)}));
  if (rows.empty()) return absl::NotFoundError(Cat("blueprint ", digest, " is not stored"));
  return std::move(rows.front().second);
}

absl::Status InsertSpec(PgConn& conn, const GenerationSpecRecord& spec, int64_t now) {
  return conn
      .Exec("INSERT INTO generation_specs (digest, kind, name, canonical, create_ms) "
            "VALUES ($1, $2, $3, $4, $5) ON CONFLICT (digest) DO NOTHING",
            {P::Text(spec.digest), P::Text(spec.kind), P::Text(spec.name),
             P::Text(spec.canonical), P::Int(now)})
      .status();
}

}  // namespace

// ---- specs and blueprints ---------------------------------------------------------------------

absl::Status PgStore::PutGenerationSpec(const GenerationSpecRecord& spec) {
  RETURN_IF_ERROR(ValidateSpec(spec));
  const int64_t now = db_.clock_ms();
  return db_.Write([&](PgConn& conn) { return InsertSpec(conn, spec, now); });
}

absl::StatusOr<GenerationSpecRecord> PgStore::GetGenerationSpec(std::string_view digest) {
  RETURN_IF_ERROR(CheckDigest(digest, "generation spec digest"));
  return db_.Read([&](PgConn& conn) -> absl::StatusOr<GenerationSpecRecord> {
    ASSIGN_OR_RETURN(PgResult res, conn.Exec("SELECT digest, kind, name, canonical FROM "
                                             "generation_specs WHERE digest = $1",
                                             {P::Text(digest)}));
    if (res.rows() == 0) {
      return absl::NotFoundError(Cat("generation spec ", digest, " is not stored"));
    }
    return GenerationSpecRecord{res.Text(0, 0), res.Text(0, 1), res.Text(0, 2), res.Text(0, 3)};
  });
}

absl::StatusOr<BlueprintRecord> PgStore::PutBlueprint(const BlueprintRecord& blueprint) {
  RETURN_IF_ERROR(CheckNewBlueprint(blueprint));
  const int64_t now = db_.clock_ms();
  BlueprintRecord stored;
  RETURN_IF_ERROR(db_.Write([&](PgConn& conn) -> absl::Status {
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
    ASSIGN_OR_RETURN(PgResult res,
                     conn.Exec("INSERT INTO blueprints (digest, name, version, source, "
                               "create_ms) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (digest) "
                               "DO NOTHING RETURNING id",
                               {P::Text(blueprint.digest), P::Text(blueprint.name),
                                P::Text(blueprint.version), P::Text(blueprint.source),
                                P::Int(now)}));
    if (res.rows() == 0) {
      // Another writer stored it meanwhile: the same checks as when it was there before.
      ASSIGN_OR_RETURN(BlueprintRecord other, LoadBlueprint(conn, blueprint.digest));
      RETURN_IF_ERROR(CheckSameBlueprint(other, blueprint));
      stored = std::move(other);
      return absl::OkStatus();
    }
    const int64_t id = res.Int(0, 0);
    for (size_t i = 0; i < blueprint.generation_points.size(); ++i) {
      RETURN_IF_ERROR(conn.Exec("INSERT INTO blueprint_points (blueprint_id, ordinal, "
                                "spec_digest) VALUES ($1, $2, $3)",
                                {P::Int(id), P::Int(static_cast<int64_t>(i)),
                                 P::Text(blueprint.generation_points[i].digest)})
                          .status());
    }
    ASSIGN_OR_RETURN(stored, LoadBlueprint(conn, blueprint.digest));
    return absl::OkStatus();
  }));
  return stored;
}

absl::StatusOr<BlueprintRecord> PgStore::GetBlueprint(std::string_view digest) {
  RETURN_IF_ERROR(CheckDigest(digest, "blueprint digest"));
  return db_.Read([&](PgConn& conn) { return LoadBlueprint(conn, digest); });
}

absl::StatusOr<std::vector<BlueprintRecord>> PgStore::FindBlueprintsByName(std::string_view name) {
  return db_.Read([&](PgConn& conn) -> absl::StatusOr<std::vector<BlueprintRecord>> {
    ASSIGN_OR_RETURN(auto rows, QueryBlueprints(conn, Cat("SELECT ", kBlueprintColumns,
                                                          " FROM blueprints WHERE name = $1 "
                                                          "ORDER BY id"),
                                                {P::Text(name)}));
    std::vector<BlueprintRecord> out;
    for (auto& [id, bp] : rows) out.push_back(std::move(bp));
    return out;
  });
}

absl::StatusOr<Page<BlueprintRecord>> PgStore::ListBlueprints(const BlueprintFilter& filter,
                                                              const PageRequest& page) {
  ASSIGN_OR_RETURN(const int size, EffectivePageSize(page.page_size));
  const std::string filter_key = FilterKey({filter.name});
  int64_t after = 0;
  if (!page.page_token.empty()) {
    ASSIGN_OR_RETURN(after, db_.tokens.Decode(page.page_token, "blueprints", filter_key));
  }
  const std::string sql =
      Cat("SELECT ", kBlueprintColumns, " FROM blueprints WHERE id > $1",
          filter.name.empty() ? "" : " AND name = $3", " ORDER BY id LIMIT $2");
  std::vector<PgParam> params{P::Int(after), P::Int(size + 1)};
  if (!filter.name.empty()) params.push_back(P::Text(filter.name));
  return db_.Read([&](PgConn& conn) -> absl::StatusOr<Page<BlueprintRecord>> {
    ASSIGN_OR_RETURN(auto rows, QueryBlueprints(conn, sql, params));
    return StripIds(MakePage(std::move(rows), size, db_.tokens, "blueprints", filter_key,
                             [](const auto& r) { return r.first; }));
  });
}

// ---- bindings -----------------------------------------------------------------------------------

absl::Status PgStore::SetBinding(std::string_view blueprint_digest, const Binding& binding) {
  RETURN_IF_ERROR(CheckDigest(blueprint_digest, "blueprint digest"));
  RETURN_IF_ERROR(ValidateBinding(binding));
  const int64_t now = db_.clock_ms();
  return db_.Write([&](PgConn& conn) -> absl::Status {
    ASSIGN_OR_RETURN(PgResult res, conn.Exec("SELECT 1 FROM blueprints WHERE digest = $1",
                                             {P::Text(blueprint_digest)}));
    if (res.rows() == 0) {
      return absl::FailedPreconditionError(
          Cat("blueprint ", blueprint_digest, " is not stored; PutBlueprint it first"));
    }
    RETURN_IF_ERROR(PgRequireArtifact(conn, binding.artifact_digest, "bound artifact"));
    return conn
        .Exec("INSERT INTO bindings (blueprint_digest, generation_point, artifact_digest, "
              "source, update_ms) VALUES ($1, $2, $3, $4, $5) "
              "ON CONFLICT (blueprint_digest, generation_point) DO UPDATE SET "
              "artifact_digest = excluded.artifact_digest, source = excluded.source, "
              "update_ms = excluded.update_ms",
              {P::Text(blueprint_digest), P::Text(binding.generation_point),
               P::Text(binding.artifact_digest), P::Text(binding.source), P::Int(now)})
        .status();
  });
}

absl::StatusOr<Binding> PgStore::GetBinding(std::string_view blueprint_digest,
                                            std::string_view generation_point) {
  RETURN_IF_ERROR(CheckDigest(blueprint_digest, "blueprint digest"));
  return db_.Read([&](PgConn& conn) -> absl::StatusOr<Binding> {
    ASSIGN_OR_RETURN(PgResult res,
                     conn.Exec("SELECT artifact_digest, source FROM bindings "
                               "WHERE blueprint_digest = $1 AND generation_point = $2",
                               {P::Text(blueprint_digest), P::Text(generation_point)}));
    if (res.rows() == 0) {
      return absl::NotFoundError(Cat("blueprint ", blueprint_digest, " has no binding for '",
                                     generation_point, "'"));
    }
    return Binding{std::string(generation_point), res.Text(0, 0), res.Text(0, 1)};
  });
}

absl::StatusOr<std::vector<Binding>> PgStore::ListBindings(std::string_view blueprint_digest) {
  RETURN_IF_ERROR(CheckDigest(blueprint_digest, "blueprint digest"));
  return db_.Read([&](PgConn& conn) -> absl::StatusOr<std::vector<Binding>> {
    ASSIGN_OR_RETURN(PgResult res,
                     conn.Exec("SELECT generation_point, artifact_digest, source FROM bindings "
                               "WHERE blueprint_digest = $1 ORDER BY generation_point",
                               {P::Text(blueprint_digest)}));
    std::vector<Binding> out;
    for (int i = 0; i < res.rows(); ++i) {
      out.push_back(Binding{res.Text(i, 0), res.Text(i, 1), res.Text(i, 2)});
    }
    return out;
  });
}

}  // namespace rote::store::internal
