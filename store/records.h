// Plain records exchanged with the Store. No SQL, no SQLite types: a different backend
// (e.g. PostgreSQL) could produce and accept the same structs.
//
// Times are int64 unix milliseconds, taken from StoreOptions::clock_ms. Digests are
// "sha256:<64 hex>" (store/digest.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rote::store {

// ---- blobs ----------------------------------------------------------------------------------

struct BlobRef {
  std::string digest;
  int64_t size = 0;
};

// ---- blueprints -----------------------------------------------------------------------------

// A generation point's spec. `digest` must be Sha256Digest(canonical): the store checks it, so a
// spec can never be stored under a digest that does not describe it.
struct GenerationSpecRecord {
  std::string digest;
  std::string kind;       // "lua_function" or "re2_pattern" (not interpreted by the store)
  std::string name;       // the generation point's name inside its blueprint
  std::string canonical;  // the canonical encoding the digest was computed over
};

struct BlueprintRecord {
  std::string digest;
  std::string name;     // declared by the blueprint: rote.blueprint { name = ... }
  std::string version;  // declared by the blueprint
  std::string source;   // the Lua chunk
  std::vector<GenerationSpecRecord> generation_points;  // in declaration order
  int64_t create_ms = 0;  // set by the store
};

// ---- artifacts and review -------------------------------------------------------------------

enum class ReviewState { kPending, kApproved, kRejected };
std::string_view ReviewStateName(ReviewState state);  // "pending", "approved", "rejected"
std::optional<ReviewState> ParseReviewState(std::string_view name);

struct GenerationAttempt {
  int32_t index = 0;
  std::string prompt_digest;  // blob digest, or empty; must already be stored as a blob
  std::string output_digest;  // blob digest of the raw model output, or empty; likewise
  std::string failure;        // why validation rejected it; empty for the accepted attempt
  // Blob digest of the code extracted from the output, or empty when none could be extracted;
  // like the others, it must already be stored as a blob.
  std::string code_digest;
  int32_t prompt_tokens = 0;
  int32_t output_tokens = 0;
  // When the attempt started (unix ms) and how long it took: metadata, never part of a digest.
  int64_t start_ms = 0;
  int64_t duration_ms = 0;
};

struct Provenance {
  std::string spec_digest;
  std::string model_digest;
  std::string numerics_profile;
  std::string prompt_template_version;
  std::string decoding_json;
  std::string request_digest;
  std::vector<GenerationAttempt> attempts;
  std::string device;
  std::string author;  // a principal, for hand-written artifacts
};

// Immutable once stored, except for the review fields the store maintains.
struct ArtifactRecord {
  std::string digest;
  std::string kind;
  std::string generation_point;  // opaque key chosen by the caller, e.g. "<blueprint>/<point>"
  std::string source;
  std::string options_json;
  Provenance provenance;
  std::string validation_report_json;
  // Maintained by the store; ignored by PutArtifact.
  int64_t revision = 0;  // 1, 2, ... per generation point, in insertion order
  ReviewState state = ReviewState::kPending;
  std::string etag;  // changes with every review; pass it back to ReviewArtifact
  int64_t create_ms = 0;
  bool live = false;  // the live revision of its (generation_point, spec digest)
};

struct ReviewRequest {
  std::string artifact_digest;
  std::string principal;
  ReviewState decision = ReviewState::kApproved;
  std::string comment;
  // The etag the reviewer saw. Empty means unconditional; a different one is ABORTED.
  std::string expected_etag;
  // kApproved: also make the artifact the live revision of its point (promotion on approval).
  // kRejected always takes a live artifact out: the newest other approved revision of the same
  // (generation_point, spec digest) becomes live, or the point is left without one.
  bool promote = false;
};

// ---- live revisions and the audit log -------------------------------------------------------

// The revision runs use for one generation point (key and spec digest): at most one.
struct LiveRevision {
  std::string generation_point;
  std::string spec_digest;
  std::string artifact_digest;
  int64_t revision = 0;
  int64_t update_ms = 0;
};

// One recorded decision. Actions: "approve", "reject", "promote", "fallback", "unbind",
// "propose", "lockfile", "run_unreviewed".
struct AuditEntry {
  int64_t sequence = 0;  // assigned by the store, dense from 1
  int64_t time_ms = 0;   // assigned by the store
  std::string principal;
  std::string action;
  std::string generation_point;
  std::string artifact_digest;
  int64_t revision = 0;
  std::string detail;
  int64_t run_id = 0;  // run_unreviewed only
};

struct AuditFilter {
  std::string generation_point;  // empty: any
  std::string artifact_digest;   // empty: any
};

struct PromoteRequest {
  std::string artifact_digest;  // must be approved
  std::string principal;
  std::string action = "promote";  // or "lockfile"
  std::string comment{};
  // Only when the point has no live revision yet (a lockfile fills gaps, never replaces).
  bool only_if_unset = false;
};

struct ReviewEntry {
  int64_t id = 0;
  std::string artifact_digest;
  std::string principal;
  ReviewState decision = ReviewState::kPending;
  std::string comment;
  int64_t time_ms = 0;
};

struct Binding {
  std::string generation_point;
  std::string artifact_digest;
  std::string source;  // where it came from: "live", "pending", "generated", "lockfile"
};

// ---- generations ----------------------------------------------------------------------------

// One generation request and its attempts, passed or failed. Keyed by the request digest; the
// first record of a request is kept (a request is deterministic, so a repeat says the same).
struct GenerationRecord {
  std::string request_digest;
  std::string generation_point;  // the key the artifact would be stored under
  std::string spec_digest;
  std::string model_digest;
  std::string numerics_profile;
  std::string prompt_template_version;
  std::string decoding_json;
  std::string device;
  bool passed = false;
  std::string artifact_digest;  // the stored artifact when passed (must be stored); else empty
  std::string failure;          // when failed: the last attempt's failure
  std::vector<GenerationAttempt> attempts;
  int64_t create_ms = 0;  // set by the store
};

struct GenerationFilter {
  std::string generation_point;  // empty: any
  bool failed_only = false;
};

// ---- runs -----------------------------------------------------------------------------------

enum class RunState { kPending, kRunning, kSucceeded, kFailed, kCancelled };
std::string_view RunStateName(RunState state);  // "pending", "running", ...
std::optional<RunState> ParseRunState(std::string_view name);
bool IsTerminal(RunState state);
// pending -> running | failed | cancelled; running -> succeeded | failed | cancelled.
bool IsLegalTransition(RunState from, RunState to);

struct NewRun {
  std::string blueprint_digest;  // must be a stored blueprint
  std::string input_digest;      // must be a stored blob
  std::vector<Binding> bindings;
  std::string engine_profile_json;
  std::string submitter;   // principal
  std::string request_id;  // optional; (submitter, request_id) creates at most one run
  // Who allowed bindings with source "pending" (unreviewed code); each is audited
  // ("run_unreviewed") in the run's creating transaction. Empty when none.
  std::string unreviewed_allowed_by{};
};

struct RunRecord {
  int64_t id = 0;
  std::string blueprint_digest;
  std::string input_digest;
  RunState state = RunState::kPending;
  std::vector<Binding> bindings;  // sorted by generation_point
  std::string engine_profile_json;
  std::string output_digest;  // empty until succeeded
  std::string error;
  std::string submitter;
  std::string request_id;
  int64_t step_count = 0;
  int64_t create_ms = 0;
  int64_t start_ms = 0;  // 0 until running
  int64_t end_ms = 0;    // 0 until terminal
  bool interrupted = false;  // see RunOutcome
  std::string unreviewed_allowed_by;  // see NewRun
};

struct CreateRunResult {
  RunRecord run;
  bool created = false;  // false: an earlier call with the same request_id made `run`
};

// The terminal outcome of a run.
struct RunOutcome {
  RunState state = RunState::kSucceeded;  // kSucceeded, kFailed or kCancelled
  std::string output_digest;              // required for kSucceeded (a stored blob)
  std::string error;
  // kFailed only: the run stopped before its blueprint reached a verdict (the server stopped,
  // an infrastructure limit or fault), so its journal is no complete record to replay.
  bool interrupted = false;
};

// One call of a generated artifact during a run.
struct StepRecord {
  int64_t index = 0;  // 0, 1, ... per run; AppendSteps requires them contiguous
  std::string generation_point;
  std::string artifact_digest;
  std::string input_digest;
  std::string output_digest;
};

struct RunEvent {
  int64_t sequence = 0;  // 1, 2, ... per run, assigned by the store
  int64_t time_ms = 0;
  std::string kind;
  std::string payload;  // bytes, opaque to the store
};

// ---- caches ---------------------------------------------------------------------------------

struct IdempotencyRecord {
  std::string principal;
  std::string request_id;
  std::string request_digest;  // digest of the request; reuse with another request is rejected
  std::string response;        // bytes of the original response
  int64_t create_ms = 0;
};

// ---- backtests ------------------------------------------------------------------------------

// One recorded call of a generation point, with its values: what a backtest re-runs.
struct PointStep {
  int64_t run_id = 0;
  int64_t index = 0;  // the step's index in its run
  std::string artifact_digest;
  std::string input_digest;
  std::string output_digest;
  // The values, read and verified together with the step (empty for blobs kept as files:
  // read those with GetBlob).
  std::string input;
  std::string output;
  bool values_read = false;
};

// Which recorded calls: steps whose generation_point is `point` in runs of blueprints named
// `blueprint_name`, newest run first and in step order within a run. A page continues after
// (after_run_id, after_index); after_run_id = 0 starts from the newest run.
struct PointStepQuery {
  std::string blueprint_name;
  std::string point;
  int64_t after_run_id = 0;
  int64_t after_index = -1;
  int32_t limit = 1000;  // at most this many steps (clamped to 1..10000)
  // The page ends after the step whose values bring the bytes read past this (at least one step).
  int64_t max_value_bytes = 64 << 20;
};

struct BacktestDifferenceRecord {
  int64_t run_id = 0;
  int64_t step = 0;  // -1: a whole run's final output
  std::string input_json;
  std::string recorded_json;
  std::string candidate_json;
  std::string error;
  std::string recorded_artifact_digest;
  bool truncated = false;
};

struct BacktestRecord {
  int64_t id = 0;  // set by the store
  std::string artifact_digest;
  std::string live_artifact_digest;  // empty: the point had none
  std::string principal;
  int64_t calls = 0;
  int64_t equal = 0;
  int64_t different = 0;
  int64_t errors = 0;
  int64_t runs = 0;
  int64_t runs_equal = 0;
  int64_t runs_different = 0;
  int64_t duration_ms = 0;
  std::vector<BacktestDifferenceRecord> differences;  // at most kMaxBacktestDifferences
  int64_t create_ms = 0;  // set by the store
};

inline constexpr size_t kMaxBacktestDifferences = 100;

// ---- pages ----------------------------------------------------------------------------------

struct PageRequest {
  int32_t page_size = 0;   // 0: default (50); larger than 1000 is clamped to 1000
  std::string page_token;  // empty for the first page
};

template <typename T>
struct Page {
  std::vector<T> items;
  std::string next_page_token;  // empty on the last page
};

struct BlueprintFilter {
  std::string name;  // empty: any
};

struct ArtifactFilter {
  std::string generation_point;      // empty: any
  std::optional<ReviewState> state;  // unset: any
};

struct RunFilter {
  std::string blueprint_digest;   // empty: any
  std::optional<RunState> state;  // unset: any
  std::string submitter{};        // empty: any
};

// ---- run leases: several replicas on one database (Store::ClaimRuns) --------------------------

struct ClaimRequest {
  std::string replica_id;  // who holds the leases (non-empty)
  int32_t max_runs = 1;
  int64_t lease_ms = 10000;  // from the claim, on the database's clock
  // Appended to the history of a run taken over from a replica whose lease expired.
  std::string takeover_event_kind;
  std::string takeover_event_payload;
};

struct ClaimedRun {
  RunRecord run;  // running, its journal empty
  int64_t epoch = 0;  // of the lease: 1 for the first claim of a run, one more per takeover
  bool taken_over = false;  // it was running under an expired lease of another claim
  std::string previous_owner;  // the replica whose lease expired (taken_over only)
};

// A run event to append (Store::CreateRunWithEvents, Store::FinishRunWithEvent).
struct NewRunEvent {
  std::string kind;
  std::string payload;
};

}  // namespace rote::store
