// Generation requests: every request the generation pipeline ran, passed or failed, with its
// attempts (prompt, raw output and extracted code as blobs, failure, tokens, times). And the
// attempt rows shared with artifacts' provenance, whose table has the same columns.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "store/records.h"
#include "store/sqlite_db.h"

namespace rote::store::internal {

// The columns of an attempt row (artifact_attempts and generation_attempts), in the order
// ReadAttemptRow reads them.
inline constexpr std::string_view kAttemptColumns =
    "idx, prompt_digest, output_digest, failure, code_digest, prompt_tokens, output_tokens, "
    "start_ms, duration_ms";
GenerationAttempt ReadAttemptRow(const Statement& stmt);
// FAILED_PRECONDITION when a blob an attempt names is not stored.
absl::Status RequireAttemptBlobs(Connection& conn, const std::vector<GenerationAttempt>& attempts);
// Inserts the attempts of the row `owner_id` into `table` (its owner column `owner_column`).
absl::Status InsertAttempts(Connection& conn, std::string_view table, std::string_view owner_column,
                            int64_t owner_id, const std::vector<GenerationAttempt>& attempts);

class SqliteGenerations {
 public:
  explicit SqliteGenerations(SqliteDb& db) : db_(db) {}

  absl::StatusOr<GenerationRecord> PutGeneration(const GenerationRecord& generation);
  absl::StatusOr<GenerationRecord> GetGeneration(std::string_view request_digest);
  absl::StatusOr<std::vector<std::string>> FindGenerationsByPrefix(std::string_view prefix, int limit);
  absl::StatusOr<Page<GenerationRecord>> ListGenerations(const GenerationFilter& filter,
                                                         const PageRequest& page);
  absl::StatusOr<Page<StepRecord>> ListStepsPage(int64_t run_id, const PageRequest& page);

 private:
  SqliteDb& db_;
};

}  // namespace rote::store::internal
