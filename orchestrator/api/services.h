// The gRPC services of rote.v1. Each handler first authorizes the caller for its method (see
// MethodRoles in auth.h), then does its work through the engine, store and generation modules.
#pragma once

#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"
#include "orchestrator/api/auth.h"
#include "orchestrator/engine/engine.h"
#include "orchestrator/generate/inference_code_model.h"
#include "orchestrator/generate/pipeline.h"
#include "orchestrator/generate/review_policy.h"
#include "rote/v1/artifacts.grpc.pb.h"
#include "rote/v1/blueprints.grpc.pb.h"
#include "rote/v1/generation.grpc.pb.h"
#include "rote/v1/runs.grpc.pb.h"

namespace rote::orchestrator {

// absl::Status -> grpc::Status (the codes share their numbering).
grpc::Status ToGrpc(const absl::Status& status);

// What the services share: the authenticator, and the modules behind the API.
struct ServiceDeps {
  const Authenticator* auth = nullptr;
  // Blueprints, runs and artifacts; when null those methods answer UNIMPLEMENTED.
  engine::Engine* engine = nullptr;
  // The generation pipeline and its model (orchestrator/generate); null / unset when the server
  // runs without a model (Generate and RegenerateArtifact: FAILED_PRECONDITION, GetModel:
  // NOT_FOUND).
  generate::GenerationPipeline* generation = nullptr;
  std::optional<generate::ModelDescription> model;
  // Whether a principal with the review role may run unreviewed code (RunPolicy.allow_pending);
  // rote serve --allow-unreviewed=reviewers. Off: nobody may.
  bool allow_unreviewed_for_reviewers = false;
  // The four-eyes rule in ReviewArtifact; null: no rule.
  const generate::ReviewPolicy* review_policy = nullptr;
  // The largest run value a response carries inline (Run.output_json, replay values), and the
  // chunk size of ReadRunPayload: well below the message limit (the server sets a quarter of
  // it, at most 1 MiB), so responses fit any client's default limit too.
  int64_t max_inline_payload_bytes = 1 << 20;
};

// Builds the four rote.v1 services.
struct Services {
  std::unique_ptr<rote::v1::BlueprintService::Service> blueprints;
  std::unique_ptr<rote::v1::RunService::Service> runs;
  std::unique_ptr<rote::v1::ArtifactService::Service> artifacts;
  std::unique_ptr<rote::v1::GenerationService::Service> generation;
};
Services MakeServices(const ServiceDeps& deps);

}  // namespace rote::orchestrator
