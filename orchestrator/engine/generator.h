// The seam between the blueprint engine and the generation pipeline (orchestrator/generate).
//
// When a run resolves its generation points, the engine looks, in order, for
//   1. a binding stored for the blueprint (from its lockfile, or set earlier),
//   2. an approved artifact of the generation point whose spec digest matches,
//   3. a cached generation (Generator::Lookup; never calls the model),
//   4. a new generation (Generator::Generate), only when the run's policy allows it.
// Steps 3 and 4 need a Generator. The engine holds an optional pointer to one; without it, a
// point left unbound after steps 1-2 makes SubmitRun fail with FAILED_PRECONDITION naming the
// unbound points and how to bind them (a lockfile, or a server started with --model).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "store/records.h"

namespace rote::orchestrator::engine {

// What the engine tells the generator about the request, besides the spec itself.
struct GenerateContext {
  // The key artifacts of this generation point are stored under (ArtifactRecord::
  // generation_point): "<blueprint name>/<point name>", e.g. "invoice_totals/parse_amount".
  std::string generation_point_key;
  std::string blueprint_digest;
  // The run that asked (0 outside runs) and its submitter, for provenance and four-eyes review.
  int64_t run_id = 0;
  std::string principal;
  // Human-readable progress ("parse_amount: attempt 2/3, 41 tokens"); each call becomes a
  // generation_progress event of the run. May be empty.
  std::function<void(const std::string&)> progress;
  // True once the run was cancelled or the server is stopping: give up early (CANCELLED).
  std::function<bool()> cancelled;
  // Ask the model again on purpose (RunPolicy.generation_retry): part of the request, so a
  // request that failed is generated anew instead of answered from its failure record.
  int32_t retry = 0;
};

struct GeneratedArtifact {
  // The artifact, already stored with Store::PutArtifact (state pending) by the generator.
  std::string artifact_digest;
  // True when answered from the generation cache without calling the model.
  bool from_cache = false;
};

class Generator {
 public:
  virtual ~Generator() = default;

  // The cached generation for this spec under the generator's current model and decoding
  // parameters, or nullopt. Must not call the model.
  virtual absl::StatusOr<std::optional<GeneratedArtifact>> Lookup(
      const store::GenerationSpecRecord& spec, const GenerateContext& context) = 0;

  // Generates, validates against the spec's examples and stores an artifact (pending review).
  // FAILED_PRECONDITION when every attempt failed validation (the message says why).
  virtual absl::StatusOr<GeneratedArtifact> Generate(const store::GenerationSpecRecord& spec,
                                                     const GenerateContext& context) = 0;

  // The unbound points of one run, generated together so that their attempts share the
  // model's batches (orchestrator/generate does; this default asks one at a time). One result
  // per request, in order.
  struct Request {
    store::GenerationSpecRecord spec;
    GenerateContext context;
  };
  virtual std::vector<absl::StatusOr<GeneratedArtifact>> GenerateTogether(const std::vector<Request>& requests) {
    std::vector<absl::StatusOr<GeneratedArtifact>> out;
    for (const Request& r : requests) out.push_back(Generate(r.spec, r.context));
    return out;
  }
};

}  // namespace rote::orchestrator::engine
