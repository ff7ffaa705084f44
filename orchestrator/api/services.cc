#include "orchestrator/api/services.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "google/protobuf/timestamp.pb.h"
#include "orchestrator/engine/backtest.h"
#include "orchestrator/engine/generations.h"
#include "orchestrator/generate/prompt.h"
#include "spdlog/spdlog.h"
#include "store/digest.h"

namespace rote::orchestrator {

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // The message travels in metadata, which clients cap (8 KiB by default, and a byte outside
  // printable ASCII takes three); a longer one would reach the client as an unrelated INTERNAL.
  // Input a message quotes is already bounded (engine::QuoteInput); this bounds everything else,
  // such as a Lua error that a blueprint raised with a huge string.
  constexpr size_t kMaxMessageBytes = 2048;
  std::string message(status.message());
  if (message.size() > kMaxMessageBytes) {
    size_t cut = kMaxMessageBytes;
    while (cut > 0 && (static_cast<unsigned char>(message[cut]) & 0xC0) == 0x80) --cut;
    message = absl::StrCat(message.substr(0, cut), "... (", message.size() - cut, " more bytes)");
  }
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), message);
}

namespace {

constexpr std::string_view kEngine = "the blueprint runtime (orchestrator/engine)";

// Generation needs the model the server was started with.
absl::Status NoModel(std::string_view method) {
  return absl::FailedPreconditionError(absl::StrCat(
      std::string(method), " needs a model, and this server runs without one: start it with rote serve --model DIR"));
}

// Every handler starts here: the caller must be allowed to call `method`, and the engine must
// be built into this server.
absl::StatusOr<Principal> Admit(const ServiceDeps& deps, grpc::ServerContext* ctx, std::string_view method) {
  absl::StatusOr<Principal> principal = deps.auth->Authorize(*ctx, method);
  if (!principal.ok()) return principal.status();
  if (deps.engine == nullptr) {
    return absl::UnimplementedError(absl::StrCat(std::string(method), " needs ", std::string(kEngine),
                                                 ", which this server does not have"));
  }
  return principal;
}

// A run belongs to its submitter: anyone else needs admin. Every method that names a run
// resolves it here.
absl::StatusOr<store::RunRecord> OwnedRun(const ServiceDeps& deps, const Principal& principal, std::string_view name) {
  absl::StatusOr<store::RunRecord> run = deps.engine->GetRun(name);
  if (!run.ok()) return run.status();
  if (run->submitter != principal.name && !principal.Has(Role::kAdmin)) {
    return absl::PermissionDeniedError(absl::StrCat("runs/", run->id, " belongs to the principal who submitted it; `",
                                                    principal.name, "` may use only its own runs (admin may use all)"));
  }
  return run;
}

// Whether `principal` may approve `artifact`: the review role, and the four-eyes rule of the
// review policy. The one check for every path that approves code: ReviewArtifact, and a
// lockfile at registration.
absl::Status MayApprove(const ServiceDeps& deps, const Principal& principal, const store::ArtifactRecord& artifact) {
  if (!principal.Has(Role::kReview)) {
    return absl::PermissionDeniedError(absl::StrCat("approving artifact ", artifact.digest, " needs the review role, which `",
                                                    principal.name, "` lacks"));
  }
  if (deps.review_policy == nullptr) return absl::OkStatus();
  return generate::CheckMayReview(deps.engine->store(), *deps.review_policy, artifact, store::ReviewState::kApproved,
                                  principal.name, deps.auth->local_mode());
}

void SetTime(int64_t ms, google::protobuf::Timestamp* t) {
  if (ms <= 0) return;
  t->set_seconds(ms / 1000);
  t->set_nanos(static_cast<int32_t>((ms % 1000) * 1000000));
}

std::string Hex(const std::string& digest) { return digest.size() > 7 ? digest.substr(7) : digest; }

rote::v1::ArtifactKind ProtoKind(std::string_view kind) {
  if (kind == "lua_function") return rote::v1::ARTIFACT_KIND_LUA_FUNCTION;
  if (kind == "re2_pattern") return rote::v1::ARTIFACT_KIND_RE2_PATTERN;
  return rote::v1::ARTIFACT_KIND_UNSPECIFIED;
}

rote::v1::RunState ProtoRunState(store::RunState s) {
  switch (s) {
    case store::RunState::kPending: return rote::v1::RUN_STATE_PENDING;
    case store::RunState::kRunning: return rote::v1::RUN_STATE_RUNNING;
    case store::RunState::kSucceeded: return rote::v1::RUN_STATE_SUCCEEDED;
    case store::RunState::kFailed: return rote::v1::RUN_STATE_FAILED;
    case store::RunState::kCancelled: return rote::v1::RUN_STATE_CANCELLED;
  }
  return rote::v1::RUN_STATE_UNSPECIFIED;
}

absl::StatusOr<std::optional<store::RunState>> StoreRunState(rote::v1::RunState s) {
  switch (s) {
    case rote::v1::RUN_STATE_UNSPECIFIED: return std::optional<store::RunState>();
    case rote::v1::RUN_STATE_PENDING: return std::optional(store::RunState::kPending);
    case rote::v1::RUN_STATE_RUNNING: return std::optional(store::RunState::kRunning);
    case rote::v1::RUN_STATE_SUCCEEDED: return std::optional(store::RunState::kSucceeded);
    case rote::v1::RUN_STATE_FAILED: return std::optional(store::RunState::kFailed);
    case rote::v1::RUN_STATE_CANCELLED: return std::optional(store::RunState::kCancelled);
    default: return absl::InvalidArgumentError("unknown run state");
  }
}

rote::v1::ReviewState ProtoReviewState(store::ReviewState s) {
  switch (s) {
    case store::ReviewState::kPending: return rote::v1::REVIEW_STATE_PENDING;
    case store::ReviewState::kApproved: return rote::v1::REVIEW_STATE_APPROVED;
    case store::ReviewState::kRejected: return rote::v1::REVIEW_STATE_REJECTED;
  }
  return rote::v1::REVIEW_STATE_UNSPECIFIED;
}

absl::StatusOr<std::optional<store::ReviewState>> StoreReviewState(rote::v1::ReviewState s) {
  switch (s) {
    case rote::v1::REVIEW_STATE_UNSPECIFIED: return std::optional<store::ReviewState>();
    case rote::v1::REVIEW_STATE_PENDING: return std::optional(store::ReviewState::kPending);
    case rote::v1::REVIEW_STATE_APPROVED: return std::optional(store::ReviewState::kApproved);
    case rote::v1::REVIEW_STATE_REJECTED: return std::optional(store::ReviewState::kRejected);
    default: return absl::InvalidArgumentError("unknown review state");
  }
}

absl::StatusOr<store::PageRequest> Page(int32_t size, const std::string& token) {
  if (size < 0) return absl::InvalidArgumentError("page_size must not be negative");
  return store::PageRequest{size, token};
}

void ToProto(const engine::RunEvent& e, rote::v1::RunEvent* out) {
  out->set_sequence(e.sequence);
  if (e.time_ms) {
    out->mutable_time()->set_seconds(*e.time_ms / 1000);
    out->mutable_time()->set_nanos(static_cast<int32_t>((*e.time_ms % 1000) * 1000000));
  }
  switch (e.kind) {
    case engine::RunEvent::Kind::kNone: break;
    case engine::RunEvent::Kind::kState: out->set_state(ProtoRunState(e.state)); break;
    case engine::RunEvent::Kind::kGenerationProgress: out->set_generation_progress(e.text); break;
    case engine::RunEvent::Kind::kLog: out->set_log(e.text); break;
    case engine::RunEvent::Kind::kStep: {
      rote::v1::Step* s = out->mutable_step();
      s->set_index(e.step.index);
      s->set_generation_point(e.step.generation_point);
      s->set_artifact_digest(e.step.artifact_digest);
      s->set_input_digest(e.step.input_digest);
      s->set_output_digest(e.step.output_digest);
      break;
    }
  }
}

void ToProto(const store::Binding& b, rote::v1::Binding* out) {
  out->set_generation_point(b.generation_point);
  out->set_artifact_digest(b.artifact_digest);
  out->set_source(b.source);
}

// Whether a message describes one item whole (Get, Register, Review) or is an item of a list.
// List items leave out what can be as large as a registration may be (sources, tasks and
// examples, validation reports) and name it by digest and size instead: a page of many large
// items would otherwise exceed the message limit of the server and of every client, for every
// caller of the list.
enum class Detail { kWhole, kListItem };

void ToProto(const engine::BlueprintView& v, Detail detail, rote::v1::Blueprint* out) {
  const bool whole = detail == Detail::kWhole;
  out->set_name(absl::StrCat("blueprints/", Hex(v.record.digest)));
  out->set_digest(v.record.digest);
  out->set_display_name(v.record.name);
  out->set_version(v.record.version);
  out->set_source_size_bytes(static_cast<int64_t>(v.record.source.size()));
  if (whole) out->set_source(v.record.source); else out->set_source_omitted(true);
  for (const engine::GenerationPoint& p : v.points) {
    rote::v1::GenerationSpec* g = out->add_generation_points();
    g->set_name(p.name);
    g->set_kind(ProtoKind(engine::KindName(p.kind)));
    if (whole) {
      g->set_task(p.task);
      g->set_signature(p.signature);
      for (std::string& e : p.ExamplesJson()) g->add_examples_json(std::move(e));
    }
    g->set_spec_digest(p.digest);
  }
  for (size_t i = 0; i < v.bindings.size(); ++i) {
    rote::v1::Binding* b = out->add_bindings();
    ToProto(v.bindings[i], b);
    if (i < v.binding_revisions.size()) b->set_revision(v.binding_revisions[i]);
  }
  SetTime(v.record.create_ms, out->mutable_create_time());
}

// The output travels in output_json only up to `inline_max` bytes (0: never, as in lists), so a
// response stays far below the message limits of server and clients whatever a run produced;
// a larger one is flagged output_omitted and read with ReadRunPayload.
absl::Status ToProto(engine::Engine& engine, const store::RunRecord& r, int64_t inline_max, rote::v1::Run* out) {
  out->set_name(absl::StrCat("runs/", r.id));
  out->set_blueprint(absl::StrCat("blueprints/", Hex(r.blueprint_digest)));
  out->set_blueprint_digest(r.blueprint_digest);
  out->set_state(ProtoRunState(r.state));
  out->set_input_digest(r.input_digest);
  absl::StatusOr<store::BlobRef> input = engine.store()->StatBlob(r.input_digest);
  if (!input.ok()) return input.status();
  out->set_input_size_bytes(input->size);
  if (r.state == store::RunState::kSucceeded) {
    absl::StatusOr<store::BlobRef> stat = engine.store()->StatBlob(r.output_digest);
    if (!stat.ok()) return stat.status();
    out->set_output_size_bytes(stat->size);
    if (stat->size <= inline_max) {
      absl::StatusOr<std::string> output = engine.OutputJson(r);
      if (!output.ok()) return output.status();
      out->set_output_json(*std::move(output));
    } else {
      out->set_output_omitted(true);
    }
  }
  out->set_output_digest(r.output_digest);
  for (const store::Binding& b : r.bindings) {
    rote::v1::Binding* x = out->add_bindings();
    ToProto(b, x);
    absl::StatusOr<store::ArtifactRecord> a = engine.store()->GetArtifact(b.artifact_digest);
    if (!a.ok()) return a.status();
    x->set_revision(a->revision);
  }
  out->set_engine_profile_json(r.engine_profile_json);
  out->set_error(r.error);
  out->set_step_count(r.step_count);
  out->set_submitter(r.submitter);
  out->set_request_id(r.request_id);
  out->set_unreviewed_allowed_by(r.unreviewed_allowed_by);
  SetTime(r.create_ms, out->mutable_create_time());
  SetTime(r.start_ms, out->mutable_start_time());
  SetTime(r.end_ms, out->mutable_end_time());
  return absl::OkStatus();
}

void ToProto(const store::BacktestRecord& b, rote::v1::BacktestSummary* out) {
  out->set_calls(b.calls);
  out->set_equal(b.equal);
  out->set_different(b.different);
  out->set_errors(b.errors);
  out->set_runs(b.runs);
  out->set_runs_equal(b.runs_equal);
  out->set_runs_different(b.runs_different);
  SetTime(b.create_ms, out->mutable_create_time());
}

void ToProto(const store::BacktestRecord& b, rote::v1::Backtest* out) {
  out->set_name(absl::StrCat("artifacts/", Hex(b.artifact_digest), "/backtest"));
  out->set_artifact_digest(b.artifact_digest);
  out->set_live_artifact_digest(b.live_artifact_digest);
  ToProto(b, out->mutable_summary());
  for (const store::BacktestDifferenceRecord& d : b.differences) {
    rote::v1::BacktestDifference* x = out->add_differences();
    x->set_run(absl::StrCat("runs/", d.run_id));
    x->set_step(d.step);
    x->set_input_json(d.input_json);
    x->set_recorded_json(d.recorded_json);
    x->set_candidate_json(d.candidate_json);
    x->set_error(d.error);
    x->set_recorded_artifact_digest(d.recorded_artifact_digest);
    x->set_truncated(d.truncated);
  }
  out->set_principal(b.principal);
  out->set_duration_ms(b.duration_ms);
}

void ToProto(const store::GenerationAttempt& at, rote::v1::Attempt* out) {
  out->set_index(at.index);
  out->set_prompt_digest(at.prompt_digest);
  out->set_output_digest(at.output_digest);
  out->set_failure(at.failure);
  out->set_prompt_tokens(at.prompt_tokens);
  out->set_output_tokens(at.output_tokens);
  out->set_code_digest(at.code_digest);
  SetTime(at.start_ms, out->mutable_start_time());
  out->set_duration_ms(at.duration_ms);
}

void ToProto(const store::GenerationRecord& g, rote::v1::Generation* out) {
  out->set_name(engine::GenerationName(g.request_digest));
  out->set_request_digest(g.request_digest);
  out->set_generation_point(g.generation_point);
  out->set_spec_digest(g.spec_digest);
  out->set_model_digest(g.model_digest);
  out->set_numerics_profile(g.numerics_profile);
  out->set_prompt_template_version(g.prompt_template_version);
  out->set_decoding_json(g.decoding_json);
  out->set_device(g.device);
  out->set_passed(g.passed);
  if (g.passed) out->set_artifact(absl::StrCat("artifacts/", Hex(g.artifact_digest)));
  for (const store::GenerationAttempt& at : g.attempts) ToProto(at, out->add_attempts());
  out->set_failure(g.failure);
  SetTime(g.create_ms, out->mutable_create_time());
}

// A text of an attempt as a proto string: bytes that are not UTF-8 replaced, then cut at
// `max_bytes` (at a character boundary) with its flag set.
void SetAttemptText(const std::string& bytes, int64_t max_bytes, std::string* text, bool* truncated) {
  *text = engine::CutUtf8(generate::ValidUtf8(bytes), max_bytes, truncated);
}

void ToProto(const engine::AttemptView& v, int64_t max_text_bytes, rote::v1::AttemptDetail* out) {
  out->set_name(v.name);
  ToProto(v.attempt, out->mutable_attempt());
  bool cut = false;
  SetAttemptText(v.prompt, max_text_bytes, out->mutable_prompt(), &cut);
  out->set_prompt_truncated(cut);
  SetAttemptText(v.output, max_text_bytes, out->mutable_output(), &cut);
  out->set_output_truncated(cut);
  SetAttemptText(v.code, max_text_bytes, out->mutable_code(), &cut);
  out->set_code_truncated(cut);
  out->set_model_digest(v.model_digest);
  out->set_decoding_json(v.decoding_json);
  out->set_device(v.device);
  out->set_numerics_profile(v.numerics_profile);
  out->set_prompt_template_version(v.prompt_template_version);
  out->set_generation(v.generation);
}

void ToProto(const engine::StepView& v, rote::v1::Step* out) {
  out->set_index(v.step.index);
  out->set_generation_point(v.step.generation_point);
  out->set_artifact_digest(v.step.artifact_digest);
  out->set_input_digest(v.step.input_digest);
  out->set_output_digest(v.step.output_digest);
  out->set_input_json(v.input_json);
  out->set_output_json(v.output_json);
  out->set_input_omitted(v.input_omitted);
  out->set_output_omitted(v.output_omitted);
  out->set_input_size_bytes(v.input_size_bytes);
  out->set_output_size_bytes(v.output_size_bytes);
}

void ToProto(const engine::ArtifactView& v, Detail detail, rote::v1::Artifact* out) {
  const bool whole = detail == Detail::kWhole;
  const store::ArtifactRecord& a = v.record;
  out->set_name(absl::StrCat("artifacts/", Hex(a.digest)));
  out->set_digest(a.digest);
  out->set_kind(ProtoKind(a.kind));
  out->set_source_size_bytes(static_cast<int64_t>(a.source.size()));
  if (whole) out->set_source(a.source); else out->set_source_omitted(true);
  out->set_options_json(a.options_json);
  out->set_generation_point(a.generation_point);
  out->set_revision(a.revision);
  out->set_state(ProtoReviewState(a.state));
  out->set_etag(a.etag);
  out->set_live(a.live);
  out->set_author(a.provenance.author.empty() ? "model" : a.provenance.author);
  rote::v1::Provenance* p = out->mutable_provenance();
  p->set_spec_digest(a.provenance.spec_digest);
  p->set_model_digest(a.provenance.model_digest);
  p->set_numerics_profile(a.provenance.numerics_profile);
  p->set_prompt_template_version(a.provenance.prompt_template_version);
  p->set_decoding_json(a.provenance.decoding_json);
  p->set_request_digest(a.provenance.request_digest);
  for (const store::GenerationAttempt& at : a.provenance.attempts) ToProto(at, p->add_attempts());
  p->set_device(a.provenance.device);
  p->set_author(a.provenance.author);
  if (a.provenance.author == "model" && !a.provenance.request_digest.empty()) {
    p->set_generation(engine::GenerationName(a.provenance.request_digest));
  }
  if (whole) out->set_validation_report_json(a.validation_report_json);
  for (const store::ReviewEntry& r : v.reviews) {
    rote::v1::ReviewEntry* e = out->add_reviews();
    e->set_principal(r.principal);
    e->set_decision(ProtoReviewState(r.decision));
    e->set_comment(r.comment);
    SetTime(r.time_ms, e->mutable_time());
  }
  SetTime(a.create_ms, out->mutable_create_time());
  if (v.backtest) ToProto(*v.backtest, out->mutable_backtest());
}

class BlueprintServiceImpl final : public rote::v1::BlueprintService::Service {
 public:
  explicit BlueprintServiceImpl(ServiceDeps deps) : deps_(deps) {}
  grpc::Status RegisterBlueprint(grpc::ServerContext* ctx, const rote::v1::RegisterBlueprintRequest* req,
                                 rote::v1::Blueprint* resp) override {
    auto principal = Admit(deps_, ctx, "/rote.v1.BlueprintService/RegisterBlueprint");
    if (!principal.ok()) return ToGrpc(principal.status());
    auto view = deps_.engine->RegisterBlueprint(
        req->source(), req->lockfile(), req->filename(), principal->name,
        [&](const store::ArtifactRecord& artifact) { return MayApprove(deps_, *principal, artifact); });
    if (!view.ok()) return ToGrpc(view.status());
    ToProto(*view, Detail::kWhole, resp);
    return grpc::Status::OK;
  }
  grpc::Status GetBlueprint(grpc::ServerContext* ctx, const rote::v1::GetBlueprintRequest* req,
                            rote::v1::Blueprint* resp) override {
    auto principal = Admit(deps_, ctx, "/rote.v1.BlueprintService/GetBlueprint");
    if (!principal.ok()) return ToGrpc(principal.status());
    auto view = deps_.engine->GetBlueprint(req->name());
    if (!view.ok()) return ToGrpc(view.status());
    ToProto(*view, Detail::kWhole, resp);
    return grpc::Status::OK;
  }
  grpc::Status ListBlueprints(grpc::ServerContext* ctx, const rote::v1::ListBlueprintsRequest* req,
                              rote::v1::ListBlueprintsResponse* resp) override {
    auto principal = Admit(deps_, ctx, "/rote.v1.BlueprintService/ListBlueprints");
    if (!principal.ok()) return ToGrpc(principal.status());
    auto page = Page(req->page_size(), req->page_token());
    if (!page.ok()) return ToGrpc(page.status());
    auto list = deps_.engine->ListBlueprints(req->display_name(), *page);
    if (!list.ok()) return ToGrpc(list.status());
    for (const engine::BlueprintView& v : list->items) ToProto(v, Detail::kListItem, resp->add_blueprints());
    resp->set_next_page_token(list->next_page_token);
    return grpc::Status::OK;
  }
  grpc::Status LockBlueprint(grpc::ServerContext* ctx, const rote::v1::LockBlueprintRequest* req,
                             rote::v1::LockBlueprintResponse* resp) override {
    auto principal = Admit(deps_, ctx, "/rote.v1.BlueprintService/LockBlueprint");
    if (!principal.ok()) return ToGrpc(principal.status());
    auto lock = deps_.engine->LockBlueprint(req->name(), req->skeleton());
    if (!lock.ok()) return ToGrpc(lock.status());
    resp->set_lockfile(std::move(lock->text));
    for (std::string& m : lock->missing) resp->add_missing(std::move(m));
    return grpc::Status::OK;
  }

 private:
  ServiceDeps deps_;
};

class RunServiceImpl final : public rote::v1::RunService::Service {
 public:
  explicit RunServiceImpl(ServiceDeps deps) : deps_(deps) {}
  grpc::Status SubmitRun(grpc::ServerContext* ctx, const rote::v1::SubmitRunRequest* req,
                         rote::v1::Run* resp) override {
    auto principal = Admit(deps_, ctx, "/rote.v1.RunService/SubmitRun");
    if (!principal.ok()) return ToGrpc(principal.status());
    engine::SubmitRequest sr;
    sr.blueprint = req->blueprint();
    sr.input_json = req->input_json();
    sr.policy.allow_generation = req->policy().allow_generation();
    sr.policy.allow_pending = req->policy().allow_pending();
    sr.policy.generation_retry = req->policy().generation_retry();
    sr.policy.max_instructions = req->policy().max_instructions();
    sr.policy.max_memory_bytes = req->policy().max_memory_bytes();
    sr.policy.max_output_bytes = req->policy().max_output_bytes();
    sr.request_id = req->request_id();
    sr.principal = principal->name;
    sr.may_run_unreviewed = deps_.allow_unreviewed_for_reviewers && principal->Has(Role::kReview);
    auto run = deps_.engine->SubmitRun(sr);
    if (!run.ok()) return ToGrpc(run.status());
    return ToGrpc(ToProto(*deps_.engine, *run, deps_.max_inline_payload_bytes, resp));
  }
  grpc::Status GetRun(grpc::ServerContext* ctx, const rote::v1::GetRunRequest* req, rote::v1::Run* resp) override {
    auto principal = Admit(deps_, ctx, "/rote.v1.RunService/GetRun");
    if (!principal.ok()) return ToGrpc(principal.status());
    auto run = OwnedRun(deps_, *principal, req->name());
    if (!run.ok()) return ToGrpc(run.status());
    return ToGrpc(ToProto(*deps_.engine, *run, deps_.max_inline_payload_bytes, resp));
  }
  grpc::Status ListRuns(grpc::ServerContext* ctx, const rote::v1::ListRunsRequest* req,
                        rote::v1::ListRunsResponse* resp) override {
    auto principal = Admit(deps_, ctx, "/rote.v1.RunService/ListRuns");
    if (!principal.ok()) return ToGrpc(principal.status());
    auto page = Page(req->page_size(), req->page_token());
    if (!page.ok()) return ToGrpc(page.status());
    auto state = StoreRunState(req->state());
    if (!state.ok()) return ToGrpc(state.status());
    // Admin sees every run; anyone else their own.
    auto list = deps_.engine->ListRuns(req->blueprint(), *state, principal->Has(Role::kAdmin) ? "" : principal->name,
                                       *page);
    if (!list.ok()) return ToGrpc(list.status());
    for (const store::RunRecord& r : list->items) {
      if (absl::Status s = ToProto(*deps_.engine, r, /*inline_max=*/0, resp->add_runs()); !s.ok()) return ToGrpc(s);
    }
    resp->set_next_page_token(list->next_page_token);
    return grpc::Status::OK;
  }
  grpc::Status ReadRunPayload(grpc::ServerContext* ctx, const rote::v1::ReadRunPayloadRequest* req,
                              grpc::ServerWriter<rote::v1::RunPayloadChunk>* writer) override {
    auto principal = Admit(deps_, ctx, "/rote.v1.RunService/ReadRunPayload");
    if (!principal.ok()) return ToGrpc(principal.status());
    auto run = OwnedRun(deps_, *principal, req->name());
    if (!run.ok()) return ToGrpc(run.status());
    // Read whole and verified before the first chunk: a client never receives bytes of a
    // damaged value.
    auto bytes = deps_.engine->RunValue(*run, req->digest());
    if (!bytes.ok()) return ToGrpc(bytes.status());
    const std::string digest = req->digest().empty() ? run->output_digest : req->digest();
    const size_t chunk = static_cast<size_t>(std::max<int64_t>(1, deps_.max_inline_payload_bytes));
    size_t offset = 0;
    do {
      const size_t n = std::min(chunk, bytes->size() - offset);
      rote::v1::RunPayloadChunk c;
      c.set_offset(static_cast<int64_t>(offset));
      c.set_data(bytes->data() + offset, n);
      c.set_digest(digest);
      c.set_size_bytes(static_cast<int64_t>(bytes->size()));
      if (!writer->Write(c)) return grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
      offset += n;
    } while (offset < bytes->size());
    return grpc::Status::OK;
  }
  grpc::Status WatchRun(grpc::ServerContext* ctx, const rote::v1::WatchRunRequest* req,
                        grpc::ServerWriter<rote::v1::RunEvent>* writer) override {
    auto principal = Admit(deps_, ctx, "/rote.v1.RunService/WatchRun");
    if (!principal.ok()) return ToGrpc(principal.status());
    if (auto owned = OwnedRun(deps_, *principal, req->name()); !owned.ok()) return ToGrpc(owned.status());
    return ToGrpc(deps_.engine->WatchRun(
        req->name(),
        [&](const engine::RunEvent& e) {
          rote::v1::RunEvent message;
          ToProto(e, &message);
          return writer->Write(message);
        },
        [&] { return ctx->IsCancelled(); }));
  }
  grpc::Status ReplayRun(grpc::ServerContext* ctx, const rote::v1::ReplayRunRequest* req,
                         rote::v1::ReplayRunResponse* resp) override {
    auto principal = Admit(deps_, ctx, "/rote.v1.RunService/ReplayRun");
    if (!principal.ok()) return ToGrpc(principal.status());
    if (auto owned = OwnedRun(deps_, *principal, req->name()); !owned.ok()) return ToGrpc(owned.status());
    auto r = deps_.engine->ReplayRun(req->name());
    if (!r.ok()) return ToGrpc(r.status());
    resp->set_matched(r->matched);
    resp->set_steps_compared(r->steps_compared);
    resp->set_first_mismatch_step(r->first_mismatch_step);
    if (!r->matched) {
      // Both values of a mismatched output can be as large as outputs get: each travels inline
      // only while small, like Run.output_json, and is named by its digest either way.
      resp->set_recorded_digest(store::Sha256Digest(r->recorded_json));
      resp->set_replayed_digest(store::Sha256Digest(r->replayed_json));
      const auto fits = [&](const std::string& v) {
        return static_cast<int64_t>(v.size()) <= deps_.max_inline_payload_bytes;
      };
      if (fits(r->recorded_json)) resp->set_recorded_json(r->recorded_json); else resp->set_recorded_omitted(true);
      if (fits(r->replayed_json)) resp->set_replayed_json(r->replayed_json); else resp->set_replayed_omitted(true);
    }
    resp->set_output_digest(r->output_digest);
    return grpc::Status::OK;
  }
  grpc::Status CancelRun(grpc::ServerContext* ctx, const rote::v1::CancelRunRequest* req,
                         rote::v1::Run* resp) override {
    auto principal = Admit(deps_, ctx, "/rote.v1.RunService/CancelRun");
    if (!principal.ok()) return ToGrpc(principal.status());
    if (auto owned = OwnedRun(deps_, *principal, req->name()); !owned.ok()) return ToGrpc(owned.status());
    auto run = deps_.engine->CancelRun(req->name(), principal->name);
    if (!run.ok()) return ToGrpc(run.status());
    return ToGrpc(ToProto(*deps_.engine, *run, deps_.max_inline_payload_bytes, resp));
  }
  grpc::Status ListRunSteps(grpc::ServerContext* ctx, const rote::v1::ListRunStepsRequest* req,
                            rote::v1::ListRunStepsResponse* resp) override {
    auto principal = Admit(deps_, ctx, "/rote.v1.RunService/ListRunSteps");
    if (!principal.ok()) return ToGrpc(principal.status());
    if (req->max_value_bytes() < 0) return ToGrpc(absl::InvalidArgumentError("max_value_bytes must not be negative"));
    auto page = Page(req->page_size(), req->page_token());
    if (!page.ok()) return ToGrpc(page.status());
    auto run = OwnedRun(deps_, *principal, req->name());
    if (!run.ok()) return ToGrpc(run.status());
    // A page of steps is at most 1000 items of two values each: the default keeps it small, and
    // no value passes the inline limit whatever the caller asks.
    constexpr int64_t kDefaultMaxValueBytes = 4096;
    const int64_t max_value = std::min(req->max_value_bytes() == 0 ? kDefaultMaxValueBytes : req->max_value_bytes(),
                                       deps_.max_inline_payload_bytes);
    auto steps = engine::ProvenanceReader(deps_.engine->store()).ListRunSteps(*run, max_value, *page);
    if (!steps.ok()) return ToGrpc(steps.status());
    for (const engine::StepView& v : steps->items) ToProto(v, resp->add_steps());
    resp->set_next_page_token(steps->next_page_token);
    return grpc::Status::OK;
  }

 private:
  ServiceDeps deps_;
};

class ArtifactServiceImpl final : public rote::v1::ArtifactService::Service {
 public:
  explicit ArtifactServiceImpl(ServiceDeps deps) : deps_(deps) {}
  grpc::Status ListArtifacts(grpc::ServerContext* ctx, const rote::v1::ListArtifactsRequest* req,
                             rote::v1::ListArtifactsResponse* resp) override {
    auto principal = Admit(deps_, ctx, "/rote.v1.ArtifactService/ListArtifacts");
    if (!principal.ok()) return ToGrpc(principal.status());
    auto page = Page(req->page_size(), req->page_token());
    if (!page.ok()) return ToGrpc(page.status());
    auto state = StoreReviewState(req->state());
    if (!state.ok()) return ToGrpc(state.status());
    auto list = deps_.engine->ListArtifacts(req->generation_point(), *state, *page);
    if (!list.ok()) return ToGrpc(list.status());
    for (const engine::ArtifactView& v : list->items) ToProto(v, Detail::kListItem, resp->add_artifacts());
    resp->set_next_page_token(list->next_page_token);
    return grpc::Status::OK;
  }
  grpc::Status GetArtifact(grpc::ServerContext* ctx, const rote::v1::GetArtifactRequest* req,
                           rote::v1::Artifact* resp) override {
    auto principal = Admit(deps_, ctx, "/rote.v1.ArtifactService/GetArtifact");
    if (!principal.ok()) return ToGrpc(principal.status());
    auto view = deps_.engine->GetArtifact(req->name());
    if (!view.ok()) return ToGrpc(view.status());
    ToProto(*view, Detail::kWhole, resp);
    return grpc::Status::OK;
  }
  grpc::Status ListRevisions(grpc::ServerContext* ctx, const rote::v1::ListRevisionsRequest* req,
                             rote::v1::ListRevisionsResponse* resp) override {
    auto principal = Admit(deps_, ctx, "/rote.v1.ArtifactService/ListRevisions");
    if (!principal.ok()) return ToGrpc(principal.status());
    auto page = Page(req->page_size(), req->page_token());
    if (!page.ok()) return ToGrpc(page.status());
    auto list = deps_.engine->ListRevisions(req->generation_point(), *page);
    if (!list.ok()) return ToGrpc(list.status());
    for (const engine::ArtifactView& v : list->items) ToProto(v, Detail::kListItem, resp->add_revisions());
    resp->set_next_page_token(list->next_page_token);
    return grpc::Status::OK;
  }
  grpc::Status ReviewArtifact(grpc::ServerContext* ctx, const rote::v1::ReviewArtifactRequest* req,
                              rote::v1::Artifact* resp) override {
    auto principal = Admit(deps_, ctx, "/rote.v1.ArtifactService/ReviewArtifact");
    if (!principal.ok()) return ToGrpc(principal.status());
    auto decision = StoreReviewState(req->decision());
    if (!decision.ok()) return ToGrpc(decision.status());
    if (!decision->has_value()) {
      return ToGrpc(absl::InvalidArgumentError("decision must be REVIEW_STATE_APPROVED or REVIEW_STATE_REJECTED"));
    }
    if (**decision == store::ReviewState::kApproved) {
      auto current = deps_.engine->GetArtifact(req->name());
      if (!current.ok()) return ToGrpc(current.status());
      if (absl::Status allowed = MayApprove(deps_, *principal, current->record); !allowed.ok()) return ToGrpc(allowed);
    }
    auto view = deps_.engine->ReviewArtifact(req->name(), **decision, req->comment(), req->etag(), principal->name);
    if (!view.ok()) return ToGrpc(view.status());
    ToProto(*view, Detail::kWhole, resp);
    return grpc::Status::OK;
  }
  grpc::Status PromoteRevision(grpc::ServerContext* ctx, const rote::v1::PromoteRevisionRequest* req,
                               rote::v1::Artifact* resp) override {
    auto principal = Admit(deps_, ctx, "/rote.v1.ArtifactService/PromoteRevision");
    if (!principal.ok()) return ToGrpc(principal.status());
    auto view = deps_.engine->PromoteRevision(req->name(), req->comment(), principal->name);
    if (!view.ok()) return ToGrpc(view.status());
    ToProto(*view, Detail::kWhole, resp);
    return grpc::Status::OK;
  }
  grpc::Status ProposeRevision(grpc::ServerContext* ctx, const rote::v1::ProposeRevisionRequest* req,
                               rote::v1::Artifact* resp) override {
    auto principal = Admit(deps_, ctx, "/rote.v1.ArtifactService/ProposeRevision");
    if (!principal.ok()) return ToGrpc(principal.status());
    engine::Proposal p;
    p.generation_point = req->generation_point();
    p.blueprint = req->blueprint();
    p.source = req->source();
    p.options_json = req->options_json();
    p.comment = req->comment();
    p.principal = principal->name;
    auto view = deps_.engine->ProposeRevision(p);
    if (!view.ok()) return ToGrpc(view.status());
    ToProto(*view, Detail::kWhole, resp);
    return grpc::Status::OK;
  }
  grpc::Status ListAuditEntries(grpc::ServerContext* ctx, const rote::v1::ListAuditEntriesRequest* req,
                                rote::v1::ListAuditEntriesResponse* resp) override {
    auto principal = Admit(deps_, ctx, "/rote.v1.ArtifactService/ListAuditEntries");
    if (!principal.ok()) return ToGrpc(principal.status());
    auto page = Page(req->page_size(), req->page_token());
    if (!page.ok()) return ToGrpc(page.status());
    auto list = deps_.engine->ListAuditEntries(req->generation_point(), req->artifact_digest(), *page);
    if (!list.ok()) return ToGrpc(list.status());
    for (const store::AuditEntry& e : list->items) {
      rote::v1::AuditEntry* x = resp->add_entries();
      x->set_sequence(e.sequence);
      SetTime(e.time_ms, x->mutable_time());
      x->set_principal(e.principal);
      x->set_action(e.action);
      x->set_generation_point(e.generation_point);
      x->set_artifact_digest(e.artifact_digest);
      x->set_revision(e.revision);
      x->set_detail(e.detail);
      if (e.run_id > 0) x->set_run(absl::StrCat("runs/", e.run_id));
    }
    resp->set_next_page_token(list->next_page_token);
    return grpc::Status::OK;
  }
  grpc::Status DiffRevisions(grpc::ServerContext* ctx, const rote::v1::DiffRevisionsRequest* req,
                             rote::v1::DiffRevisionsResponse* resp) override {
    auto principal = Admit(deps_, ctx, "/rote.v1.ArtifactService/DiffRevisions");
    if (!principal.ok()) return ToGrpc(principal.status());
    auto diff = deps_.engine->DiffRevisions(req->generation_point(), req->from_revision(), req->to_revision());
    if (!diff.ok()) return ToGrpc(diff.status());
    resp->set_unified_diff(*std::move(diff));
    return grpc::Status::OK;
  }
  grpc::Status RegenerateArtifact(grpc::ServerContext* ctx, const rote::v1::RegenerateArtifactRequest* req,
                                  rote::v1::RegenerateArtifactResponse* resp) override {
    auto principal = Admit(deps_, ctx, "/rote.v1.ArtifactService/RegenerateArtifact");
    if (!principal.ok()) return ToGrpc(principal.status());
    if (deps_.generation == nullptr) return ToGrpc(NoModel("RegenerateArtifact"));
    auto view = deps_.engine->GetArtifact(req->name());
    if (!view.ok()) return ToGrpc(view.status());
    auto r = deps_.generation->Regenerate(view->record, [ctx] { return ctx->IsCancelled(); });
    if (!r.ok()) return ToGrpc(r.status());
    spdlog::info("regenerated {}: {} ({})", r->original_digest, r->matched ? "matched" : "DIFFERS", r->detail);
    resp->set_matched(r->matched);
    resp->set_original_digest(r->original_digest);
    resp->set_regenerated_digest(r->regenerated_digest);
    return grpc::Status::OK;
  }
  // Try and backtest (orchestrator/engine/backtest.h).
  grpc::Status TryArtifact(grpc::ServerContext* ctx, const rote::v1::TryArtifactRequest* req,
                           rote::v1::TryArtifactResponse* resp) override {
    auto principal = Admit(deps_, ctx, "/rote.v1.ArtifactService/TryArtifact");
    if (!principal.ok()) return ToGrpc(principal.status());
    engine::RunPolicy limits;
    limits.max_instructions = req->max_instructions();
    limits.max_memory_bytes = req->max_memory_bytes();
    limits.max_output_bytes = req->max_output_bytes();
    auto r = deps_.engine->TryArtifact(req->name(), req->input_json(), limits);
    if (!r.ok()) return ToGrpc(r.status());
    resp->set_artifact_digest(r->artifact_digest);
    resp->set_output_json(r->output_json);
    resp->set_error(r->error);
    resp->set_instructions_used(static_cast<int64_t>(r->usage.instructions));
    resp->set_memory_peak_bytes(static_cast<int64_t>(r->usage.peak_memory_bytes));
    resp->set_output_bytes(static_cast<int64_t>(r->usage.output_bytes));
    resp->set_max_instructions(static_cast<int64_t>(r->limits.max_instructions));
    resp->set_max_memory_bytes(static_cast<int64_t>(r->limits.max_memory_bytes));
    resp->set_max_output_bytes(static_cast<int64_t>(r->limits.max_output_bytes));
    return grpc::Status::OK;
  }
  grpc::Status BacktestRevision(grpc::ServerContext* ctx, const rote::v1::BacktestRevisionRequest* req,
                                rote::v1::Backtest* resp) override {
    auto principal = Admit(deps_, ctx, "/rote.v1.ArtifactService/BacktestRevision");
    if (!principal.ok()) return ToGrpc(principal.status());
    engine::BacktestRequest request;
    request.max_calls = req->max_calls();
    request.whole_runs = req->whole_runs();
    request.max_runs = req->max_runs();
    request.principal = principal->name;
    auto b = deps_.engine->BacktestRevision(req->name(), request, [ctx] { return ctx->IsCancelled(); });
    if (!b.ok()) return ToGrpc(b.status());
    spdlog::info("backtest of {} by {}: {} calls, {} equal, {} different, {} errors", b->artifact_digest,
                 principal->name, b->calls, b->equal, b->different, b->errors);
    ToProto(*b, resp);
    return grpc::Status::OK;
  }
  grpc::Status GetBacktest(grpc::ServerContext* ctx, const rote::v1::GetBacktestRequest* req,
                           rote::v1::Backtest* resp) override {
    auto principal = Admit(deps_, ctx, "/rote.v1.ArtifactService/GetBacktest");
    if (!principal.ok()) return ToGrpc(principal.status());
    std::string name = req->name();
    if (absl::EndsWith(name, "/backtest")) name.resize(name.size() - 9);
    auto b = deps_.engine->GetBacktest(name);
    if (!b.ok()) return ToGrpc(b.status());
    ToProto(*b, resp);
    return grpc::Status::OK;
  }
  grpc::Status GetAttempt(grpc::ServerContext* ctx, const rote::v1::GetAttemptRequest* req,
                          rote::v1::AttemptDetail* resp) override {
    auto principal = Admit(deps_, ctx, "/rote.v1.ArtifactService/GetAttempt");
    if (!principal.ok()) return ToGrpc(principal.status());
    auto view = engine::ProvenanceReader(deps_.engine->store()).GetAttempt(req->name());
    if (!view.ok()) return ToGrpc(view.status());
    ToProto(*view, deps_.max_inline_payload_bytes, resp);
    return grpc::Status::OK;
  }

 private:
  ServiceDeps deps_;
};

class GenerationServiceImpl final : public rote::v1::GenerationService::Service {
 public:
  explicit GenerationServiceImpl(ServiceDeps deps) : deps_(deps) {}
  grpc::Status Generate(grpc::ServerContext* ctx, const rote::v1::GenerateRequest* req,
                        grpc::ServerWriter<rote::v1::GenerateEvent>* writer) override {
    auto principal = Admit(deps_, ctx, "/rote.v1.GenerationService/Generate");
    if (!principal.ok()) return ToGrpc(principal.status());
    if (deps_.generation == nullptr) return ToGrpc(NoModel("Generate"));
    const rote::v1::GenerationSpec& spec = req->spec();
    engine::ArtifactKind kind;
    if (spec.kind() == rote::v1::ARTIFACT_KIND_LUA_FUNCTION) {
      kind = engine::ArtifactKind::kLuaFunction;
    } else if (spec.kind() == rote::v1::ARTIFACT_KIND_RE2_PATTERN) {
      kind = engine::ArtifactKind::kRe2Pattern;
    } else {
      return ToGrpc(absl::InvalidArgumentError("spec.kind must be ARTIFACT_KIND_LUA_FUNCTION or ARTIFACT_KIND_RE2_PATTERN"));
    }
    auto point = generate::PointFromParts(spec.name(), kind, spec.task(), spec.signature(),
                                          {spec.examples_json().begin(), spec.examples_json().end()});
    if (!point.ok()) return ToGrpc(point.status());
    generate::Decoding decoding = deps_.generation->options().decoding;
    if (req->has_decoding()) {
      const rote::v1::Decoding& d = req->decoding();
      decoding.temperature = d.temperature();
      decoding.top_k = d.top_k();
      decoding.top_p = d.top_p() == 0.0f ? 1.0f : d.top_p();  // unset: keep every token
      decoding.seed = d.seed();
      if (d.max_tokens() != 0) decoding.max_tokens = d.max_tokens();
      // Unset keeps the server's retry temperature.
      if (d.has_retry_temperature()) decoding.retry_temperature = d.retry_temperature();
      decoding.retry = d.retry();
    }
    if (req->max_attempts() != 0) decoding.max_attempts = req->max_attempts();
    if (absl::Status s = generate::CheckDecoding(decoding); !s.ok()) return ToGrpc(s);

    generate::GenerationJob job;
    job.spec = point->ToRecord();
    job.decoding = decoding;
    job.context.generation_point_key = generate::AdhocGenerationPointKey(point->name);
    job.context.principal = principal->name;
    job.context.cancelled = [ctx] { return ctx->IsCancelled(); };
    // A client that went away stops the stream; the generation still finishes and is cached.
    job.events.attempt_started = [writer](int32_t attempt) {
      rote::v1::GenerateEvent e;
      e.set_attempt_started(attempt);
      writer->Write(e);
    };
    job.events.token_text = [writer](std::string_view text) {
      rote::v1::GenerateEvent e;
      e.set_token_text(generate::ValidUtf8(text));  // proto strings must be UTF-8
      writer->Write(e);
    };
    job.events.attempt_failed = [writer](int32_t, const std::string& failure) {
      rote::v1::GenerateEvent e;
      e.set_attempt_failed(failure);
      writer->Write(e);
    };
    auto result = std::move(deps_.generation->GenerateAll({job})[0]);
    if (!result.ok()) return ToGrpc(result.status());
    auto view = deps_.engine->GetArtifact(absl::StrCat("artifacts/", Hex(result->artifact_digest)));
    if (!view.ok()) return ToGrpc(view.status());
    rote::v1::GenerateEvent done;
    ToProto(*view, Detail::kWhole, done.mutable_artifact());
    writer->Write(done);
    return grpc::Status::OK;
  }
  grpc::Status GetModel(grpc::ServerContext* ctx, const rote::v1::GetModelRequest*, rote::v1::Model* resp) override {
    auto principal = deps_.auth->Authorize(*ctx, "/rote.v1.GenerationService/GetModel");
    if (!principal.ok()) return ToGrpc(principal.status());
    if (!deps_.model.has_value()) {
      return ToGrpc(absl::NotFoundError("this server runs without a model; start it with rote serve --model DIR"));
    }
    const generate::ModelDescription& m = *deps_.model;
    resp->set_name("models/current");
    resp->set_family(m.family);
    resp->set_directory(m.directory);
    resp->set_digest(m.digest);
    resp->set_parameter_count(m.parameter_count);
    resp->set_num_layers(m.num_layers);
    resp->set_hidden_size(m.hidden_size);
    resp->set_vocab_size(m.vocab_size);
    resp->set_device(m.device);
    resp->set_numerics_profile(m.numerics_profile);
    return grpc::Status::OK;
  }
  grpc::Status GetGeneration(grpc::ServerContext* ctx, const rote::v1::GetGenerationRequest* req,
                             rote::v1::Generation* resp) override {
    auto principal = Admit(deps_, ctx, "/rote.v1.GenerationService/GetGeneration");
    if (!principal.ok()) return ToGrpc(principal.status());
    auto g = engine::ProvenanceReader(deps_.engine->store()).GetGeneration(req->name());
    if (!g.ok()) return ToGrpc(g.status());
    ToProto(*g, resp);
    return grpc::Status::OK;
  }
  grpc::Status ListGenerations(grpc::ServerContext* ctx, const rote::v1::ListGenerationsRequest* req,
                               rote::v1::ListGenerationsResponse* resp) override {
    auto principal = Admit(deps_, ctx, "/rote.v1.GenerationService/ListGenerations");
    if (!principal.ok()) return ToGrpc(principal.status());
    auto page = Page(req->page_size(), req->page_token());
    if (!page.ok()) return ToGrpc(page.status());
    auto list = engine::ProvenanceReader(deps_.engine->store())
                    .ListGenerations(req->generation_point(), req->failed_only(), *page);
    if (!list.ok()) return ToGrpc(list.status());
    for (const store::GenerationRecord& g : list->items) ToProto(g, resp->add_generations());
    resp->set_next_page_token(list->next_page_token);
    return grpc::Status::OK;
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
