#include "store/sqlite_generations.h"

#include <sqlite3.h>

#include <algorithm>
#include <string>
#include <utility>

#include "store/checks.h"
#include "store/page_token.h"
#include "store/status_macros.h"
#include "store/str_util.h"

namespace rote::store::internal {

GenerationAttempt ReadAttemptRow(const Statement& stmt) {
  GenerationAttempt a;
  a.index = static_cast<int32_t>(stmt.ColumnInt(0));
  a.prompt_digest = stmt.ColumnText(1);
  a.output_digest = stmt.ColumnText(2);
  a.failure = stmt.ColumnText(3);
  a.code_digest = stmt.ColumnText(4);
  a.prompt_tokens = static_cast<int32_t>(stmt.ColumnInt(5));
  a.output_tokens = static_cast<int32_t>(stmt.ColumnInt(6));
  a.start_ms = stmt.ColumnInt(7);
  a.duration_ms = stmt.ColumnInt(8);
  return a;
}

absl::Status RequireAttemptBlobs(Connection& conn, const std::vector<GenerationAttempt>& attempts) {
  for (const GenerationAttempt& a : attempts) {
    if (!a.prompt_digest.empty()) RETURN_IF_ERROR(RequireBlob(conn, a.prompt_digest, "attempt prompt"));
    if (!a.output_digest.empty()) RETURN_IF_ERROR(RequireBlob(conn, a.output_digest, "attempt output"));
    if (!a.code_digest.empty()) RETURN_IF_ERROR(RequireBlob(conn, a.code_digest, "attempt code"));
  }
  return absl::OkStatus();
}

absl::Status InsertAttempts(Connection& conn, std::string_view table, std::string_view owner_column,
                            int64_t owner_id, const std::vector<GenerationAttempt>& attempts) {
  const std::string sql = Cat("INSERT INTO ", table, " (", owner_column, ", ", kAttemptColumns,
                              ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  for (const GenerationAttempt& a : attempts) {
    ASSIGN_OR_RETURN(Statement stmt, conn.Prepare(sql));
    stmt.BindInt(1, owner_id)
        .BindInt(2, a.index)
        .BindTextOrNull(3, a.prompt_digest)
        .BindTextOrNull(4, a.output_digest)
        .BindText(5, a.failure)
        .BindTextOrNull(6, a.code_digest)
        .BindInt(7, a.prompt_tokens)
        .BindInt(8, a.output_tokens)
        .BindInt(9, a.start_ms)
        .BindInt(10, a.duration_ms);
    RETURN_IF_ERROR(stmt.Run());
  }
  return absl::OkStatus();
}

namespace {

constexpr std::string_view kGenerationColumns =
    "id, request_digest, generation_point, spec_digest, model_digest, numerics_profile, "
    "prompt_template_version, decoding_json, device, passed, artifact_digest, failure, create_ms";

std::pair<int64_t, GenerationRecord> ReadGenerationRow(const Statement& stmt) {
  GenerationRecord g;
  g.request_digest = stmt.ColumnText(1);
  g.generation_point = stmt.ColumnText(2);
  g.spec_digest = stmt.ColumnText(3);
  g.model_digest = stmt.ColumnText(4);
  g.numerics_profile = stmt.ColumnText(5);
  g.prompt_template_version = stmt.ColumnText(6);
  g.decoding_json = stmt.ColumnText(7);
  g.device = stmt.ColumnText(8);
  g.passed = stmt.ColumnInt(9) != 0;
  g.artifact_digest = stmt.ColumnText(10);
  g.failure = stmt.ColumnText(11);
  g.create_ms = stmt.ColumnInt(12);
  return {stmt.ColumnInt(0), std::move(g)};
}

absl::Status LoadGenerationAttempts(Connection& conn, std::pair<int64_t, GenerationRecord>& row) {
  ASSIGN_OR_RETURN(Statement stmt,
                   conn.Prepare(Cat("SELECT ", kAttemptColumns,
                                    " FROM generation_attempts WHERE generation_id = ? ORDER BY idx")));
  stmt.BindInt(1, row.first);
  while (true) {
    ASSIGN_OR_RETURN(bool more, stmt.Step());
    if (!more) return absl::OkStatus();
    row.second.attempts.push_back(ReadAttemptRow(stmt));
  }
}

template <typename Bind>
absl::StatusOr<std::vector<std::pair<int64_t, GenerationRecord>>> QueryGenerations(
    Connection& conn, const std::string& sql, Bind bind) {
  return QueryRows<std::pair<int64_t, GenerationRecord>>(conn, sql, bind, ReadGenerationRow,
                                                         LoadGenerationAttempts);
}

absl::StatusOr<GenerationRecord> LoadGeneration(Connection& conn, std::string_view digest) {
  static const std::string sql =
      Cat("SELECT ", kGenerationColumns, " FROM generations WHERE request_digest = ?");
  ASSIGN_OR_RETURN(auto rows,
                   QueryGenerations(conn, sql, [&](Statement& s) { s.BindText(1, digest); }));
  if (rows.empty()) return absl::NotFoundError(Cat("no generation is recorded for request ", digest));
  return std::move(rows.front().second);
}

}  // namespace

absl::StatusOr<GenerationRecord> SqliteGenerations::PutGeneration(const GenerationRecord& g) {
  RETURN_IF_ERROR(CheckNewGeneration(g));
  const int64_t now = db_.clock_ms();
  GenerationRecord stored;
  RETURN_IF_ERROR(db_.Write([&](Connection& conn) -> absl::Status {
    absl::StatusOr<GenerationRecord> existing = LoadGeneration(conn, g.request_digest);
    if (existing.ok()) {
      stored = *std::move(existing);
      return absl::OkStatus();
    }
    if (!absl::IsNotFound(existing.status())) return existing.status();
    if (g.passed) RETURN_IF_ERROR(RequireArtifact(conn, g.artifact_digest, "generated artifact"));
    RETURN_IF_ERROR(RequireAttemptBlobs(conn, g.attempts));
    {
      ASSIGN_OR_RETURN(
          Statement stmt,
          conn.Prepare("INSERT INTO generations (request_digest, generation_point, spec_digest, "
                       "model_digest, numerics_profile, prompt_template_version, decoding_json, "
                       "device, passed, artifact_digest, failure, create_ms) "
                       "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"));
      stmt.BindText(1, g.request_digest)
          .BindText(2, g.generation_point)
          .BindText(3, g.spec_digest)
          .BindText(4, g.model_digest)
          .BindText(5, g.numerics_profile)
          .BindText(6, g.prompt_template_version)
          .BindText(7, g.decoding_json)
          .BindText(8, g.device)
          .BindInt(9, g.passed ? 1 : 0)
          .BindTextOrNull(10, g.artifact_digest)
          .BindText(11, g.failure)
          .BindInt(12, now);
      RETURN_IF_ERROR(stmt.Run());
    }
    const int64_t id = sqlite3_last_insert_rowid(conn.raw());
    RETURN_IF_ERROR(InsertAttempts(conn, "generation_attempts", "generation_id", id, g.attempts));
    ASSIGN_OR_RETURN(stored, LoadGeneration(conn, g.request_digest));
    return absl::OkStatus();
  }));
  return stored;
}

absl::StatusOr<GenerationRecord> SqliteGenerations::GetGeneration(std::string_view request_digest) {
  RETURN_IF_ERROR(CheckDigest(request_digest, "request digest"));
  return db_.ReadTx([&](Connection& conn) { return LoadGeneration(conn, request_digest); });
}

absl::StatusOr<std::vector<std::string>> SqliteGenerations::FindGenerationsByPrefix(
    std::string_view prefix, int limit) {
  RETURN_IF_ERROR(CheckGenerationPrefix(prefix));
  // A range on the unique index: every digest d with prefix <= d < prefix + '~' ('~' sorts after
  // every hex digit).
  return db_.ReadTx([&](Connection& conn) -> absl::StatusOr<std::vector<std::string>> {
    ASSIGN_OR_RETURN(Statement stmt,
                     conn.Prepare("SELECT request_digest FROM generations WHERE request_digest >= ? "
                                  "AND request_digest < ? ORDER BY request_digest LIMIT ?"));
    stmt.BindText(1, prefix).BindText(2, Cat(prefix, "~")).BindInt(3, std::max(limit, 0));
    std::vector<std::string> out;
    while (true) {
      ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (!row) return out;
      out.push_back(stmt.ColumnText(0));
    }
  });
}

absl::StatusOr<Page<GenerationRecord>> SqliteGenerations::ListGenerations(
    const GenerationFilter& filter, const PageRequest& page) {
  ASSIGN_OR_RETURN(const int size, EffectivePageSize(page.page_size));
  const std::string filter_key =
      FilterKey({filter.generation_point, filter.failed_only ? "failed" : "all"});
  int64_t after = 0;
  if (!page.page_token.empty()) {
    ASSIGN_OR_RETURN(after, db_.tokens.Decode(page.page_token, "generations", filter_key));
  }
  const std::string sql =
      Cat("SELECT ", kGenerationColumns, " FROM generations WHERE id > ?1",
          filter.generation_point.empty() ? "" : " AND generation_point = ?3",
          filter.failed_only ? " AND passed = 0" : "", " ORDER BY id LIMIT ?2");
  return db_.ReadTx([&](Connection& conn) -> absl::StatusOr<Page<GenerationRecord>> {
    ASSIGN_OR_RETURN(auto rows, QueryGenerations(conn, sql, [&](Statement& s) {
                       s.BindInt(1, after).BindInt(2, size + 1);
                       if (!filter.generation_point.empty()) s.BindText(3, filter.generation_point);
                     }));
    return StripIds(MakePage(std::move(rows), size, db_.tokens, "generations", filter_key,
                             [](const auto& r) { return r.first; }));
  });
}

absl::StatusOr<Page<StepRecord>> SqliteGenerations::ListStepsPage(int64_t run_id,
                                                                  const PageRequest& page) {
  ASSIGN_OR_RETURN(const int size, EffectivePageSize(page.page_size));
  const std::string filter_key = FilterKey({std::to_string(run_id)});
  // Keys are step index + 1, so the first page starts after key 0 like every other list.
  int64_t after = 0;
  if (!page.page_token.empty()) {
    ASSIGN_OR_RETURN(after, db_.tokens.Decode(page.page_token, "steps", filter_key));
  }
  return db_.ReadTx([&](Connection& conn) -> absl::StatusOr<Page<StepRecord>> {
    {
      ASSIGN_OR_RETURN(Statement stmt, conn.Prepare("SELECT 1 FROM runs WHERE id = ?"));
      stmt.BindInt(1, run_id);
      ASSIGN_OR_RETURN(bool found, stmt.Step());
      if (!found) return absl::NotFoundError(Cat("run ", run_id, " does not exist"));
    }
    ASSIGN_OR_RETURN(Statement stmt,
                     conn.Prepare("SELECT idx, generation_point, artifact_digest, input_digest, "
                                  "output_digest FROM run_steps WHERE run_id = ? AND idx >= ? "
                                  "ORDER BY idx LIMIT ?"));
    stmt.BindInt(1, run_id).BindInt(2, after).BindInt(3, size + 1);
    std::vector<StepRecord> rows;
    while (true) {
      ASSIGN_OR_RETURN(bool row, stmt.Step());
      if (!row) break;
      rows.push_back(StepRecord{stmt.ColumnInt(0), stmt.ColumnText(1), stmt.ColumnText(2),
                                stmt.ColumnText(3), stmt.ColumnText(4)});
    }
    return MakePage(std::move(rows), size, db_.tokens, "steps", filter_key,
                    [](const StepRecord& s) { return s.index + 1; });
  });
}

}  // namespace rote::store::internal
