// The generation pipeline: spec -> prompt -> model -> extract -> validate in the sandbox ->
// retry with the failure -> store the artifact (pending, or approved by an 'auto' policy).
//
// A request is fully described by its digest: the spec, the model digest, the numerics
// profile, the prompt template version, the decoding parameters (attempts included), the
// sandbox profile, the RE2 options and the validation limits. Everything downstream of it is
// deterministic: the prompt of attempt k depends only on the request and attempts 1..k-1, the
// sampling key on the request digest and k, and the model's bytes (exact profile) not on what
// else runs. So the digest keys a cache (a repeated request never calls the model) and a
// regeneration check (re-derive, compare bytes).
//
// Every attempt stores its full prompt (as the model read it, chat template applied), its raw
// output and the code extracted from it as blobs; the artifact's provenance lists them with each
// attempt's failure, tokens and times. Every request, passed or failed, is recorded as a
// generation (store::GenerationRecord, the API's `generations/{request hex}`); a failed one has
// no artifact, its error names the generation, and its record answers repeats of that request
// without calling the model.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "orchestrator/engine/artifact.h"
#include "orchestrator/engine/generator.h"
#include "orchestrator/engine/lua_runner.h"
#include "orchestrator/engine/spec.h"
#include "orchestrator/generate/code_model.h"
#include "orchestrator/generate/review_policy.h"
#include "sandbox/lua_runtime.h"
#include "store/store.h"

namespace rote::orchestrator::generate {

struct PipelineOptions {
  // Decoding of generations the engine asks for (runs); the Generate RPC may choose its own.
  Decoding decoding;
  // Limits of each test run while validating a candidate.
  sandbox::Limits validation_limits{100'000'000, 64ull << 20, 1ull << 20};
  // A progress line every this many generated tokens of an attempt.
  int32_t progress_every_tokens = 64;
  // Hold every reply to its point kind's grammar (ReplyConstraint): the model can then write
  // only a fenced block of Lua that parses and reads only the sandbox's names, or a pattern RE2
  // accepts. Its digest is part of the decoding, and so of the request digest.
  bool constrain_replies = false;
  // Metrics hooks (may be empty): each attempt once judged (`reason`: why it failed, one of
  // no_code, invalid_utf8, compile_error, unknown_names, tests_failed, refused; empty when it
  // passed), and each request answered without the model ("artifact": from the generation
  // cache; "failure": from the record of the same failed request).
  std::function<void(bool passed, const std::string& reason, int64_t prompt_tokens, int64_t output_tokens,
                     double seconds)>
      on_attempt;
  std::function<void(const std::string& kind)> on_answered;
  // Several replicas on one database (docs/operations.md, "Several replicas on PostgreSQL"):
  // with a store that shares generations, a request this replica generates is claimed in the
  // database under `replica_id` (renewed while it generates, for `claim_lease` each time), and an
  // identical request on another replica waits for its result instead of asking its own model;
  // a claim whose replica died expires and is taken over. Empty: not shared.
  std::string replica_id;
  std::chrono::milliseconds claim_lease{10000};
};

// Live events of one generation, for the Generate RPC. Any may be empty.
struct GenerationEvents {
  std::function<void(int32_t attempt)> attempt_started;
  std::function<void(std::string_view text)> token_text;
  std::function<void(int32_t attempt, const std::string& failure)> attempt_failed;
};

// One generation point to generate, as GenerateAll takes them.
struct GenerationJob {
  store::GenerationSpecRecord spec;
  engine::GenerateContext context;
  std::optional<Decoding> decoding;  // unset: PipelineOptions::decoding
  GenerationEvents events;
};

// The generation record of a request whose every attempt failed.
using FailedGeneration = store::GenerationRecord;

struct Regeneration {
  bool matched = false;
  std::string original_digest;
  std::string regenerated_digest;  // empty when no attempt passed this time
  // The attempts of the re-derivation; matched also requires them to equal the recorded ones.
  std::vector<store::GenerationAttempt> attempts;
  std::string detail;  // what differed, for people
};

// Builds and seals a spec from the API's fields (examples as GenerationSpec.examples_json).
absl::StatusOr<engine::GenerationPoint> PointFromParts(std::string_view name, engine::ArtifactKind kind,
                                                       std::string_view task, std::string_view signature,
                                                       const std::vector<std::string>& examples_json);

// The key under which artifacts generated through the Generate RPC (outside any blueprint)
// are stored: "_adhoc/<point name>" (blueprint names start with a letter, so no clash).
std::string AdhocGenerationPointKey(std::string_view point_name);

class GenerationPipeline final : public engine::Generator {
 public:
  // `store`, `model` and `lua_runner` must outlive the pipeline.
  GenerationPipeline(store::Store* store, CodeModel* model, engine::LuaArtifactRunner* lua_runner,
                     ReviewPolicy review_policy, PipelineOptions options);

  // engine::Generator
  absl::StatusOr<std::optional<engine::GeneratedArtifact>> Lookup(const store::GenerationSpecRecord& spec,
                                                                  const engine::GenerateContext& context) override;
  absl::StatusOr<engine::GeneratedArtifact> Generate(const store::GenerationSpecRecord& spec,
                                                     const engine::GenerateContext& context) override;
  // GenerateAll with the pipeline's decoding.
  std::vector<absl::StatusOr<engine::GeneratedArtifact>> GenerateTogether(
      const std::vector<engine::Generator::Request>& requests) override;

  // Generates several points together: attempt k of every point still without a passing
  // candidate goes to the model in one CompleteAll. Results in the order of `jobs`.
  std::vector<absl::StatusOr<engine::GeneratedArtifact>> GenerateAll(const std::vector<GenerationJob>& jobs);

  // The request digest of a spec under this pipeline's model, options and templates.
  absl::StatusOr<std::string> RequestDigest(const engine::GenerationPoint& point, const Decoding& decoding) const;
  // Sets decoding->grammar from PipelineOptions::constrain_replies: the digest of the point
  // kind's reply grammar, or empty.
  absl::Status SetGrammar(const engine::GenerationPoint& point, Decoding* decoding) const;

  // Re-derives a generated artifact from its recorded request (bypassing every cache) and
  // compares. FAILED_PRECONDITION when the request cannot be reproduced here (another model,
  // template version or validation setup), naming what differs.
  absl::StatusOr<Regeneration> Regenerate(const store::ArtifactRecord& artifact, const std::function<bool()>& cancelled);

  // NOT_FOUND when the request has no record of a failed generation.
  absl::StatusOr<FailedGeneration> GetFailedGeneration(std::string_view request_digest);

  const ReviewPolicy& review_policy() const { return review_policy_; }
  CodeModel& model() const { return *model_; }
  const PipelineOptions& options() const { return options_; }

 private:
  struct Chain;
  struct Verdict;
  absl::StatusOr<Verdict> Evaluate(const engine::GenerationPoint& point, std::string_view output);
  // Runs the retry chains together; stores blobs, nothing else.
  void RunChains(std::vector<Chain*>& chains, const std::function<bool()>& cancelled);
  absl::StatusOr<engine::GeneratedArtifact> StoreOutcome(const GenerationJob& job, const Chain& chain);
  absl::StatusOr<std::optional<absl::StatusOr<engine::GeneratedArtifact>>> Answered(const GenerationJob& job,
                                                                                    const Chain& chain);
  // Generations shared between replicas (PipelineOptions::replica_id): claims the requests of
  // `to_run` in the database and returns those another replica is generating (taken out of
  // `to_run` and of in_flight_); waits for one of those to be answered, or generates it here
  // when its claim expired without an answer.
  std::vector<size_t> ClaimShared(std::vector<Chain>& chains, std::vector<size_t>* to_run);
  absl::StatusOr<engine::GeneratedArtifact> WaitForReplica(const GenerationJob& job, Chain& chain);
  class ClaimKeeper;

  store::Store* const store_;
  CodeModel* const model_;
  engine::LuaArtifactRunner* const lua_runner_;
  const ReviewPolicy review_policy_;
  const PipelineOptions options_;

  // Request digests being generated right now: a second request for one waits for the first
  // and is then answered from the cache or the failure record, instead of asking the model.
  std::mutex mu_;
  std::condition_variable in_flight_cv_;
  std::set<std::string> in_flight_;
};

}  // namespace rote::orchestrator::generate
