// Generation through the gRPC API: the four-eyes rule in ReviewArtifact, Generate's event
// stream, RegenerateArtifact, GetModel; with a scripted model behind the real services, and a
// real server loading the tiny qwen2 fixture.
#include <unistd.h>

#include <filesystem>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "cli/commands.h"
#include "grpcpp/grpcpp.h"
#include "orchestrator/api/auth.h"
#include "orchestrator/api/services.h"
#include "orchestrator/generate/pipeline.h"
#include "orchestrator/server.h"
#include "store/store.h"
#include "tests/orchestrator/generate_scripted_model.h"

namespace rote::orchestrator::generate {
namespace {

using ::testing::HasSubstr;
using testing::ScriptedCodeModel;

constexpr const char* kAlice = "Bearer alice-token-0123456789";
constexpr const char* kBob = "Bearer bob-token-0123456789ab";
constexpr const char* kRoot = "Bearer root-token-0123456789a";

constexpr const char* kBlueprint = R"lua(
local bp = rote.blueprint { name = "amounts", version = "1.0.0" }
local parse = bp:lua {
  name = "parse_amount",
  task = "Parse a decimal number written with a comma.",
  tests = { { "1,5", 1.5 } },
}
function bp.run(input) return parse(input) end
return bp
)lua";

std::string FreshDir(const std::string& name) {
  static int counter = 0;
  auto dir = std::filesystem::temp_directory_path() /
             ("rote-generate-api-test-" + name + "-" + std::to_string(::getpid()) + "-" + std::to_string(++counter));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

// Attempt 1 of every Lua point is wrong, attempt 2 right.
std::string Answer(const std::vector<ChatTurn>& m) {
  if (testing::PointAndAttempt(m).second == 1) return "```lua\nreturn function(text) return 0 end\n```";
  return "```lua\nreturn function(text)\n  return tonumber((text:gsub(',', '.')))\nend\n```";
}

class GenerationApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store::StoreOptions o;
    o.path = FreshDir("api");
    o.synchronous = store::SyncMode::kNormal;
    auto s = store::Store::Open(o);
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = *std::move(s);
    runner_ = engine::MakeInProcessLuaRunner();
    model_ = std::make_unique<ScriptedCodeModel>(Answer);
    policy_ = ReviewPolicy(ReviewMode::kApproval);
    pipeline_ = std::make_unique<GenerationPipeline>(store_.get(), model_.get(), runner_.get(), policy_, PipelineOptions{});
    auto e = engine::Engine::Create(store_.get(), runner_.get(), pipeline_.get(), engine::EngineOptions{});
    ASSERT_TRUE(e.ok()) << e.status();
    engine_ = *std::move(e);
    auto auth = Authenticator::FromKeyText("alice-token-0123456789 alice submit,review\n"
                                           "bob-token-0123456789ab bob review\n"
                                           "root-token-0123456789a root admin\n",
                                           "test keys");
    ASSERT_TRUE(auth.ok()) << auth.status();
    auth_ = *std::move(auth);
    ServiceDeps deps;
    deps.auth = &auth_;
    deps.engine = engine_.get();
    deps.generation = pipeline_.get();
    deps.review_policy = &policy_;
    services_ = MakeServices(deps);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(services_.blueprints.get());
    builder.RegisterService(services_.runs.get());
    builder.RegisterService(services_.artifacts.get());
    builder.RegisterService(services_.generation.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(port_), grpc::InsecureChannelCredentials());
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
    if (engine_) engine_->Shutdown();
  }

  std::unique_ptr<grpc::ClientContext> As(const char* token) {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->AddMetadata("authorization", token);
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return ctx;
  }

  grpc::Status Review(const char* token, const rote::v1::Artifact& a, rote::v1::ReviewState decision,
                      rote::v1::Artifact* out) {
    rote::v1::ArtifactService::Stub stub(channel_);
    rote::v1::ReviewArtifactRequest req;
    req.set_name(a.name());
    req.set_decision(decision);
    req.set_etag(a.etag());
    return stub.ReviewArtifact(As(token).get(), req, out);
  }

  // Generate's events, and its final status.
  std::pair<std::vector<rote::v1::GenerateEvent>, grpc::Status> Generate(const rote::v1::GenerateRequest& req) {
    rote::v1::GenerationService::Stub stub(channel_);
    auto ctx = As(kRoot);
    auto reader = stub.Generate(ctx.get(), req);
    std::vector<rote::v1::GenerateEvent> events;
    rote::v1::GenerateEvent e;
    while (reader->Read(&e)) events.push_back(e);
    return {events, reader->Finish()};
  }

  static rote::v1::GenerateRequest LuaRequest() {
    rote::v1::GenerateRequest req;
    rote::v1::GenerationSpec* s = req.mutable_spec();
    s->set_name("parse_amount");
    s->set_kind(rote::v1::ARTIFACT_KIND_LUA_FUNCTION);
    s->set_task("Parse a decimal number written with a comma.");
    s->add_examples_json(R"({"input":"1,5","output":1.5})");
    return req;
  }

  std::unique_ptr<store::Store> store_;
  std::unique_ptr<engine::LuaArtifactRunner> runner_;
  std::unique_ptr<ScriptedCodeModel> model_;
  ReviewPolicy policy_;
  std::unique_ptr<GenerationPipeline> pipeline_;
  std::unique_ptr<engine::Engine> engine_;
  Authenticator auth_ = Authenticator::LocalMode();
  Services services_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(GenerationApiTest, SubmitterCannotApproveWhatTheirRunGenerated) {
  rote::v1::BlueprintService::Stub blueprints(channel_);
  rote::v1::RegisterBlueprintRequest reg;
  reg.set_source(kBlueprint);
  rote::v1::Blueprint bp;
  ASSERT_TRUE(blueprints.RegisterBlueprint(As(kAlice).get(), reg, &bp).ok());

  rote::v1::RunService::Stub runs(channel_);
  rote::v1::SubmitRunRequest submit;
  submit.set_blueprint(bp.name());
  submit.set_input_json("\"2,5\"");
  submit.mutable_policy()->set_allow_generation(true);
  rote::v1::Run run;
  grpc::Status submitted = runs.SubmitRun(As(kAlice).get(), submit, &run);
  ASSERT_TRUE(submitted.ok()) << submitted.error_message();
  rote::v1::WatchRunRequest watch;
  watch.set_name(run.name());
  auto ctx = As(kAlice);
  auto reader = runs.WatchRun(ctx.get(), watch);
  std::vector<std::string> progress;
  rote::v1::RunEvent ev;
  while (reader->Read(&ev)) {
    if (ev.has_generation_progress()) progress.push_back(ev.generation_progress());
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_THAT(progress, ::testing::Contains(HasSubstr("parse_amount: attempt 1/3 failed")));
  EXPECT_THAT(progress, ::testing::Contains(HasSubstr("parse_amount: attempt 2/3 passed")));

  rote::v1::ArtifactService::Stub artifacts(channel_);
  rote::v1::ListArtifactsRequest list;
  list.set_state(rote::v1::REVIEW_STATE_PENDING);
  rote::v1::ListArtifactsResponse pending;
  ASSERT_TRUE(artifacts.ListArtifacts(As(kAlice).get(), list, &pending).ok());
  ASSERT_EQ(pending.artifacts_size(), 1);
  const rote::v1::Artifact& a = pending.artifacts(0);
  EXPECT_EQ(a.provenance().attempts_size(), 2);

  rote::v1::Artifact out;
  grpc::Status denied = Review(kAlice, a, rote::v1::REVIEW_STATE_APPROVED, &out);
  EXPECT_EQ(denied.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(denied.error_message(), HasSubstr("'alice' asked for the generation of artifact"));
  grpc::Status approved = Review(kBob, a, rote::v1::REVIEW_STATE_APPROVED, &out);
  ASSERT_TRUE(approved.ok()) << approved.error_message();
  EXPECT_EQ(out.state(), rote::v1::REVIEW_STATE_APPROVED);
  ASSERT_EQ(out.reviews_size(), 1);
  EXPECT_EQ(out.reviews(0).principal(), "bob");

  // With the artifact approved, alice's next run goes through without the model.
  const int calls = model_->calls();
  rote::v1::Run second;
  ASSERT_TRUE(runs.SubmitRun(As(kAlice).get(), submit, &second).ok());
  auto ctx2 = As(kAlice);
  watch.set_name(second.name());
  auto reader2 = runs.WatchRun(ctx2.get(), watch);
  while (reader2->Read(&ev)) {
  }
  rote::v1::GetRunRequest get;
  get.set_name(second.name());
  rote::v1::Run done;
  ASSERT_TRUE(runs.GetRun(As(kAlice).get(), get, &done).ok());
  EXPECT_EQ(done.state(), rote::v1::RUN_STATE_SUCCEEDED) << done.error();
  EXPECT_EQ(done.output_json(), "2.5");
  EXPECT_EQ(model_->calls(), calls);
}

TEST_F(GenerationApiTest, GenerateStreamsAttemptsThenTheArtifactAndRegenerationMatches) {
  auto [events, status] = Generate(LuaRequest());
  ASSERT_TRUE(status.ok()) << status.error_message();
  std::vector<std::string> kinds;
  for (const auto& e : events) {
    switch (e.event_case()) {
      case rote::v1::GenerateEvent::kAttemptStarted: kinds.push_back("started " + std::to_string(e.attempt_started())); break;
      case rote::v1::GenerateEvent::kTokenText: kinds.push_back("text"); break;
      case rote::v1::GenerateEvent::kAttemptFailed: kinds.push_back("failed: " + e.attempt_failed()); break;
      case rote::v1::GenerateEvent::kArtifact: kinds.push_back("artifact"); break;
      default: kinds.push_back("?");
    }
  }
  EXPECT_THAT(kinds, ::testing::ElementsAre("started 1", "text", HasSubstr("failed: it failed test 1"), "started 2",
                                            "text", "artifact"));
  const rote::v1::Artifact& a = events.back().artifact();
  EXPECT_EQ(a.generation_point(), "_adhoc/parse_amount");
  EXPECT_EQ(a.state(), rote::v1::REVIEW_STATE_PENDING);
  EXPECT_EQ(a.provenance().author(), "model");
  EXPECT_EQ(a.provenance().attempts_size(), 2);

  // Again: answered from the cache, nothing but the artifact.
  auto [cached, cached_status] = Generate(LuaRequest());
  ASSERT_TRUE(cached_status.ok());
  ASSERT_EQ(cached.size(), 1u);
  EXPECT_EQ(cached[0].artifact().digest(), a.digest());

  rote::v1::ArtifactService::Stub artifacts(channel_);
  rote::v1::RegenerateArtifactRequest regen;
  regen.set_name(a.name());
  rote::v1::RegenerateArtifactResponse resp;
  grpc::Status st = artifacts.RegenerateArtifact(As(kRoot).get(), regen, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_TRUE(resp.matched());
  EXPECT_EQ(resp.original_digest(), a.digest());
  EXPECT_EQ(resp.regenerated_digest(), a.digest());
}

TEST_F(GenerationApiTest, CliStreamsAttemptsAndPrintsTheArtifact) {
  const std::string spec = FreshDir("cli") + "/spec.json";
  std::ofstream(spec) << R"({"name": "parse_amount", "kind": "lua_function",
    "task": "Parse a decimal number written with a comma.",
    "examples": [{"input": "1,5", "output": 1.5}]})";
  ::testing::internal::CaptureStdout();
  const int rc = cli::CmdGenerate({"--spec", spec, "--server", "127.0.0.1:" + std::to_string(port_), "--token",
                                   "root-token-0123456789a"});
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("--- attempt 1\n```lua\nreturn function(text) return 0 end\n```\n--- refused: it failed test 1"));
  EXPECT_THAT(out, HasSubstr("--- attempt 2\n"));
  EXPECT_THAT(out, HasSubstr("(_adhoc/parse_amount revision 1, REVIEW_STATE_PENDING, 2 attempt(s))\nreturn function(text)\n"));
}

TEST_F(GenerationApiTest, GenerateChecksItsRequest) {
  rote::v1::GenerateRequest bad_kind = LuaRequest();
  bad_kind.mutable_spec()->set_kind(rote::v1::ARTIFACT_KIND_UNSPECIFIED);
  EXPECT_EQ(Generate(bad_kind).second.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  rote::v1::GenerateRequest too_many = LuaRequest();
  too_many.set_max_attempts(11);
  auto [events, status] = Generate(too_many);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("max_attempts"));
  // A scripted model is no loaded model: GetModel has nothing to describe.
  rote::v1::GenerationService::Stub stub(channel_);
  rote::v1::Model model;
  EXPECT_EQ(stub.GetModel(As(kAlice).get(), rote::v1::GetModelRequest(), &model).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

std::string FixtureDir() {
  return (std::filesystem::path(ROTE_SOURCE_DIR) / "tests" / "fixtures" / "qwen2").string();
}

ServerOptions LocalServer(const std::string& name) {
  ServerOptions o;
  o.listen = "127.0.0.1:0";
  o.metrics_listen = "off";
  o.data_dir = FreshDir(name);
  o.run_workers = 1;
  return o;
}

TEST(GenerationServerTest, ServeWithModelDescribesItAndFailsCleanlyOnRandomWeights) {
  ServerOptions o = LocalServer("model");
  o.model_dir = FixtureDir();
  o.generation_attempts = 2;
  o.generation_max_tokens = 8;
  auto server = Server::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string((*server)->port()), grpc::InsecureChannelCredentials());
  rote::v1::GenerationService::Stub stub(channel);
  {
    grpc::ClientContext ctx;
    rote::v1::Model model;
    grpc::Status st = stub.GetModel(&ctx, rote::v1::GetModelRequest(), &model);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(model.family(), "qwen2");
    EXPECT_EQ(model.num_layers(), 2);
    EXPECT_EQ(model.hidden_size(), 64);
    EXPECT_EQ(model.vocab_size(), 896);
    EXPECT_GT(model.parameter_count(), 896 * 64);
    EXPECT_EQ(model.digest().rfind("sha256:", 0), 0u);
    EXPECT_EQ(model.device().rfind("cpu", 0), 0u);
    EXPECT_EQ(model.numerics_profile(), "exact");
  }
  grpc::ClientContext ctx;
  rote::v1::GenerateRequest req;
  req.mutable_spec()->set_name("word");
  req.mutable_spec()->set_kind(rote::v1::ARTIFACT_KIND_RE2_PATTERN);
  req.mutable_spec()->set_task("Words of lowercase letters.");
  req.mutable_spec()->add_examples_json(R"({"input":"ab cd","matches":["ab","cd"]})");
  auto reader = stub.Generate(&ctx, req);
  int started = 0;
  int failed = 0;
  rote::v1::GenerateEvent e;
  while (reader->Read(&e)) {
    started += e.has_attempt_started();
    failed += e.has_attempt_failed();
  }
  grpc::Status st = reader->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr("passed validation in 2 attempts"));
  EXPECT_EQ(started, 2);
  EXPECT_EQ(failed, 2);
}

TEST(GenerationServerTest, WithoutAModelGenerationSaysHowToGetOne) {
  auto server = Server::Start(LocalServer("nomodel"));
  ASSERT_TRUE(server.ok()) << server.status();
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string((*server)->port()), grpc::InsecureChannelCredentials());
  rote::v1::GenerationService::Stub stub(channel);
  grpc::ClientContext ctx;
  rote::v1::Model model;
  grpc::Status st = stub.GetModel(&ctx, rote::v1::GetModelRequest(), &model);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(st.error_message(), HasSubstr("--model DIR"));
  grpc::ClientContext gctx;
  auto reader = stub.Generate(&gctx, rote::v1::GenerateRequest());
  rote::v1::GenerateEvent e;
  while (reader->Read(&e)) {
  }
  st = reader->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(st.error_message(), HasSubstr("rote serve --model DIR"));
}

TEST(GenerationServerTest, BadReviewPolicyIsRefusedAtStart) {
  ServerOptions o = LocalServer("policy");
  o.review_policy = "sometimes";
  auto server = Server::Start(o);
  EXPECT_TRUE(absl::IsInvalidArgument(server.status()));
  EXPECT_THAT(std::string(server.status().message()), HasSubstr("'sometimes'"));
}

}  // namespace
}  // namespace rote::orchestrator::generate
