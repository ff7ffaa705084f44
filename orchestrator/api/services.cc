#include "orchestrator/api/services.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace rote::orchestrator {

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

namespace {

// Authorizes the call, then answers UNIMPLEMENTED naming the module the method still needs.
// Replaced method by method as the modules land; nothing pretends to work.
grpc::Status NotBuilt(const ServiceDeps& deps, grpc::ServerContext* ctx, std::string_view method,
                      std::string_view missing) {
  auto principal = deps.auth->Authorize(*ctx, method);
  if (!principal.ok()) return ToGrpc(principal.status());
  return grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                      absl::StrCat(std::string(method), " needs ", std::string(missing), ", which this server does not have yet"));
}

constexpr std::string_view kEngine = "the blueprint runtime (orchestrator/engine)";
constexpr std::string_view kGenerate = "the generation pipeline (orchestrator/generate) and a model";

class BlueprintServiceImpl final : public rote::v1::BlueprintService::Service {
 public:
  explicit BlueprintServiceImpl(ServiceDeps deps) : deps_(deps) {}
  grpc::Status RegisterBlueprint(grpc::ServerContext* ctx, const rote::v1::RegisterBlueprintRequest*,
                                 rote::v1::Blueprint*) override {
    return NotBuilt(deps_, ctx, "/rote.v1.BlueprintService/RegisterBlueprint", kEngine);
  }
  grpc::Status GetBlueprint(grpc::ServerContext* ctx, const rote::v1::GetBlueprintRequest*,
                            rote::v1::Blueprint*) override {
    return NotBuilt(deps_, ctx, "/rote.v1.BlueprintService/GetBlueprint", kEngine);
  }
  grpc::Status ListBlueprints(grpc::ServerContext* ctx, const rote::v1::ListBlueprintsRequest*,
                              rote::v1::ListBlueprintsResponse*) override {
    return NotBuilt(deps_, ctx, "/rote.v1.BlueprintService/ListBlueprints", kEngine);
  }
  grpc::Status LockBlueprint(grpc::ServerContext* ctx, const rote::v1::LockBlueprintRequest*,
                             rote::v1::LockBlueprintResponse*) override {
    return NotBuilt(deps_, ctx, "/rote.v1.BlueprintService/LockBlueprint", kEngine);
  }

 private:
  ServiceDeps deps_;
};

class RunServiceImpl final : public rote::v1::RunService::Service {
 public:
  explicit RunServiceImpl(ServiceDeps deps) : deps_(deps) {}
  grpc::Status SubmitRun(grpc::ServerContext* ctx, const rote::v1::SubmitRunRequest*,
                         rote::v1::Run*) override {
    return NotBuilt(deps_, ctx, "/rote.v1.RunService/SubmitRun", kEngine);
  }
  grpc::Status GetRun(grpc::ServerContext* ctx, const rote::v1::GetRunRequest*, rote::v1::Run*) override {
    return NotBuilt(deps_, ctx, "/rote.v1.RunService/GetRun", kEngine);
  }
  grpc::Status ListRuns(grpc::ServerContext* ctx, const rote::v1::ListRunsRequest*,
                        rote::v1::ListRunsResponse*) override {
    return NotBuilt(deps_, ctx, "/rote.v1.RunService/ListRuns", kEngine);
  }
  grpc::Status WatchRun(grpc::ServerContext* ctx, const rote::v1::WatchRunRequest*,
                        grpc::ServerWriter<rote::v1::RunEvent>*) override {
    return NotBuilt(deps_, ctx, "/rote.v1.RunService/WatchRun", kEngine);
  }
  grpc::Status ReplayRun(grpc::ServerContext* ctx, const rote::v1::ReplayRunRequest*,
                         rote::v1::ReplayRunResponse*) override {
    return NotBuilt(deps_, ctx, "/rote.v1.RunService/ReplayRun", kEngine);
  }
  grpc::Status CancelRun(grpc::ServerContext* ctx, const rote::v1::CancelRunRequest*,
                         rote::v1::Run*) override {
    return NotBuilt(deps_, ctx, "/rote.v1.RunService/CancelRun", kEngine);
  }

 private:
  ServiceDeps deps_;
};

class ArtifactServiceImpl final : public rote::v1::ArtifactService::Service {
 public:
  explicit ArtifactServiceImpl(ServiceDeps deps) : deps_(deps) {}
  grpc::Status ListArtifacts(grpc::ServerContext* ctx, const rote::v1::ListArtifactsRequest*,
                             rote::v1::ListArtifactsResponse*) override {
    return NotBuilt(deps_, ctx, "/rote.v1.ArtifactService/ListArtifacts", kEngine);
  }
  grpc::Status GetArtifact(grpc::ServerContext* ctx, const rote::v1::GetArtifactRequest*,
                           rote::v1::Artifact*) override {
    return NotBuilt(deps_, ctx, "/rote.v1.ArtifactService/GetArtifact", kEngine);
  }
  grpc::Status ListRevisions(grpc::ServerContext* ctx, const rote::v1::ListRevisionsRequest*,
                             rote::v1::ListRevisionsResponse*) override {
    return NotBuilt(deps_, ctx, "/rote.v1.ArtifactService/ListRevisions", kEngine);
  }
  grpc::Status ReviewArtifact(grpc::ServerContext* ctx, const rote::v1::ReviewArtifactRequest*,
                              rote::v1::Artifact*) override {
    return NotBuilt(deps_, ctx, "/rote.v1.ArtifactService/ReviewArtifact", kEngine);
  }
  grpc::Status DiffRevisions(grpc::ServerContext* ctx, const rote::v1::DiffRevisionsRequest*,
                             rote::v1::DiffRevisionsResponse*) override {
    return NotBuilt(deps_, ctx, "/rote.v1.ArtifactService/DiffRevisions", kEngine);
  }
  grpc::Status RegenerateArtifact(grpc::ServerContext* ctx, const rote::v1::RegenerateArtifactRequest*,
                                  rote::v1::RegenerateArtifactResponse*) override {
    return NotBuilt(deps_, ctx, "/rote.v1.ArtifactService/RegenerateArtifact", kGenerate);
  }

 private:
  ServiceDeps deps_;
};

class GenerationServiceImpl final : public rote::v1::GenerationService::Service {
 public:
  explicit GenerationServiceImpl(ServiceDeps deps) : deps_(deps) {}
  grpc::Status Generate(grpc::ServerContext* ctx, const rote::v1::GenerateRequest*,
                        grpc::ServerWriter<rote::v1::GenerateEvent>*) override {
    return NotBuilt(deps_, ctx, "/rote.v1.GenerationService/Generate", kGenerate);
  }
  grpc::Status GetModel(grpc::ServerContext* ctx, const rote::v1::GetModelRequest*,
                        rote::v1::Model*) override {
    return NotBuilt(deps_, ctx, "/rote.v1.GenerationService/GetModel", kGenerate);
  }

 private:
  ServiceDeps deps_;
};

}  // namespace

Services MakeServices(const ServiceDeps& deps) {
  Services s;
  s.blueprints = std::make_unique<BlueprintServiceImpl>(deps);
  s.runs = std::make_unique<RunServiceImpl>(deps);
  s.artifacts = std::make_unique<ArtifactServiceImpl>(deps);
  s.generation = std::make_unique<GenerationServiceImpl>(deps);
  return s;
}

}  // namespace rote::orchestrator
