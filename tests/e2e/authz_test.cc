// Authorization: what each role may call, who owns a run, and the four-eyes rule on every path
// that approves code (ReviewArtifact and lockfiles).
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "google/protobuf/descriptor.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "orchestrator/api/auth.h"
#include "orchestrator/api/services.h"
#include "orchestrator/generate/pipeline.h"
#include "store/store.h"
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/word_stats.h"
#include "tests/orchestrator/generate_scripted_model.h"

namespace rote::e2e {
namespace {

// ---- the role matrix ------------------------------------------------------------------------

// The documented matrix (docs/architecture.md, "Security"), written out independently of
// MethodRoles(): the roles besides admin that may call each method. Admin may call all.
const std::map<std::string, std::set<std::string>>& DocumentedRoles() {
  static const auto* m = new std::map<std::string, std::set<std::string>>{
      {"/rote.v1.BlueprintService/RegisterBlueprint", {"submit"}},
      {"/rote.v1.BlueprintService/GetBlueprint", {"submit", "review"}},
      {"/rote.v1.BlueprintService/ListBlueprints", {"submit", "review"}},
      {"/rote.v1.BlueprintService/LockBlueprint", {"submit"}},
      {"/rote.v1.RunService/SubmitRun", {"submit"}},
      {"/rote.v1.RunService/GetRun", {"submit"}},
      {"/rote.v1.RunService/ListRuns", {"submit"}},
      {"/rote.v1.RunService/ReadRunPayload", {"submit"}},
      {"/rote.v1.RunService/WatchRun", {"submit"}},
      {"/rote.v1.RunService/ReplayRun", {"submit"}},
      {"/rote.v1.RunService/CancelRun", {"submit"}},
      {"/rote.v1.ArtifactService/ListArtifacts", {"submit", "review"}},
      {"/rote.v1.ArtifactService/GetArtifact", {"submit", "review"}},
      {"/rote.v1.ArtifactService/ListRevisions", {"submit", "review"}},
      {"/rote.v1.ArtifactService/ReviewArtifact", {"review"}},
      {"/rote.v1.ArtifactService/DiffRevisions", {"submit", "review"}},
      {"/rote.v1.ArtifactService/RegenerateArtifact", {}},
      {"/rote.v1.GenerationService/Generate", {"submit"}},
      {"/rote.v1.GenerationService/GetModel", {"submit", "review"}},
      {"/rote.v1.RunService/ListRunSteps", {"submit"}},
      {"/rote.v1.ArtifactService/GetAttempt", {"submit", "review"}},
      {"/rote.v1.GenerationService/GetGeneration", {"submit", "review"}},
      {"/rote.v1.GenerationService/ListGenerations", {"submit", "review"}},
  };
  return *m;
}

// Every method of the rote.v1 services, from the proto descriptors.
std::vector<std::string> ApiMethods() {
  std::vector<std::string> out;
  for (const char* service : {"rote.v1.BlueprintService", "rote.v1.RunService", "rote.v1.ArtifactService",
                              "rote.v1.GenerationService"}) {
    const google::protobuf::ServiceDescriptor* d =
        google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(service);
    if (d == nullptr) {
      ADD_FAILURE() << "no descriptor for " << service;
      continue;
    }
    for (int i = 0; i < d->method_count(); ++i) out.push_back("/" + std::string(service) + "/" + d->method(i)->name());
  }
  return out;
}

// Calls `method` with an empty request (valid for every proto3 message) and returns the
// status: authorization is decided before anything looks at the request.
grpc::Status CallWithEmptyRequest(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                                  const std::string& token) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
  grpc::CompletionQueue cq;
  void* tag = nullptr;
  bool ok = false;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call = stub.PrepareCall(&ctx, method, &cq);
  call->StartCall(reinterpret_cast<void*>(1));
  cq.Next(&tag, &ok);
  grpc::Slice empty("");
  grpc::ByteBuffer request(&empty, 1);
  call->WriteLast(request, grpc::WriteOptions(), reinterpret_cast<void*>(2));
  cq.Next(&tag, &ok);
  while (true) {
    grpc::ByteBuffer response;
    call->Read(&response, reinterpret_cast<void*>(3));
    cq.Next(&tag, &ok);
    if (!ok) break;
  }
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(4));
  cq.Next(&tag, &ok);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return status;
}

struct Caller {
  std::string label;
  std::string token;           // empty: no token at all
  std::set<std::string> roles;  // as in the key file
};

const std::vector<Caller>& Callers() {
  static const auto* c = new std::vector<Caller>{
      {"submit", "sub-token-0123456789abc", {"submit"}},
      {"review", "rev-token-0123456789abc", {"review"}},
      {"admin", "adm-token-0123456789abc", {"admin"}},
      {"submit+review", "both-token-0123456789ab", {"submit", "review"}},
      {"no roles", "none-token-0123456789ab", {}},
  };
  return *c;
}

std::string WriteKeys(const std::string& dir) {
  const std::string path = dir + "/keys";
  std::ofstream f(path);
  f << "# token principal roles\n"
       "sub-token-0123456789abc   sub   submit\n"
       "rev-token-0123456789abc   rev   review\n"
       "adm-token-0123456789abc   adm   admin\n"
       "both-token-0123456789ab   both  submit,review\n"
       "none-token-0123456789ab   none  ,\n"
       "carol-token-0123456789a   carol submit\n";
  return path;
}

TEST(AuthzE2e, EveryMethodAnswersEachRoleAsDocumented) {
  TestServer server;
  server.Start(1, WriteKeys(server.data_dir()));
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(server.port()), grpc::InsecureChannelCredentials());
  const std::vector<std::string> methods = ApiMethods();
  ASSERT_GE(methods.size(), 18u);
  for (const std::string& method : methods) {
    auto documented = DocumentedRoles().find(method);
    ASSERT_NE(documented, DocumentedRoles().end()) << method << " is missing from the documented role matrix";
    for (const Caller& caller : Callers()) {
      bool allowed = caller.roles.count("admin") != 0;
      for (const std::string& r : caller.roles) allowed = allowed || documented->second.count(r) != 0;
      grpc::Status st = CallWithEmptyRequest(channel, method, caller.token);
      SCOPED_TRACE(method + " as " + caller.label + ": " + st.error_message());
      EXPECT_NE(st.error_code(), grpc::StatusCode::UNAUTHENTICATED);
      if (allowed) {
        EXPECT_NE(st.error_code(), grpc::StatusCode::PERMISSION_DENIED);
      } else {
        EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED);
      }
    }
    EXPECT_EQ(CallWithEmptyRequest(channel, method, "").error_code(), grpc::StatusCode::UNAUTHENTICATED) << method;
  }
}

TEST(AuthzE2e, ReviewRoleAloneCannotRegisterSubmitOrCancel) {
  TestServer server;
  server.Start(1, WriteKeys(server.data_dir()));
  server.set_token("rev-token-0123456789abc");
  rote::v1::Blueprint bp;
  grpc::Status st = server.TryRegister(kWordStats, kWordStatsLock, "word_stats.lua", &bp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
  EXPECT_NE(st.error_message().find("lacks role `submit`"), std::string::npos) << st.error_message();

  server.set_token("adm-token-0123456789abc");
  bp = server.Register(kWordStats, kWordStatsLock, "word_stats.lua");
  rote::v1::Run run = server.WaitDone(server.Submit(bp.name(), R"({"text": "x"})").name());
  server.set_token("rev-token-0123456789abc");
  rote::v1::SubmitRunRequest submit;
  submit.set_blueprint(bp.name());
  submit.set_input_json("{}");
  rote::v1::Run out;
  EXPECT_EQ(server.runs().SubmitRun(server.Context().get(), submit, &out).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  rote::v1::CancelRunRequest cancel;
  cancel.set_name(run.name());
  EXPECT_EQ(server.runs().CancelRun(server.Context().get(), cancel, &out).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  // What a review needs stays readable.
  rote::v1::ListArtifactsRequest list;
  rote::v1::ListArtifactsResponse artifacts;
  EXPECT_TRUE(server.artifacts().ListArtifacts(server.Context().get(), list, &artifacts).ok());
  EXPECT_EQ(artifacts.artifacts_size(), 2);
}

// ---- ownership of runs ----------------------------------------------------------------------

grpc::StatusCode GetRunAs(TestServer& server, const std::string& token, const std::string& name) {
  server.set_token(token);
  rote::v1::GetRunRequest req;
  req.set_name(name);
  rote::v1::Run run;
  return server.runs().GetRun(server.Context().get(), req, &run).error_code();
}

std::vector<std::string> ListRunNamesAs(TestServer& server, const std::string& token) {
  server.set_token(token);
  rote::v1::ListRunsRequest req;
  rote::v1::ListRunsResponse resp;
  grpc::Status st = server.runs().ListRuns(server.Context().get(), req, &resp);
  EXPECT_TRUE(st.ok()) << st.error_message();
  std::vector<std::string> names;
  for (const rote::v1::Run& r : resp.runs()) names.push_back(r.name());
  return names;
}

TEST(AuthzE2e, ARunBelongsToItsSubmitter) {
  TestServer server;
  server.Start(1, WriteKeys(server.data_dir()));
  const std::string sub = "sub-token-0123456789abc";
  const std::string carol = "carol-token-0123456789a";
  const std::string admin = "adm-token-0123456789abc";
  server.set_token(admin);
  rote::v1::Blueprint bp = server.Register(kWordStats, kWordStatsLock, "word_stats.lua");
  server.set_token(sub);
  rote::v1::Run mine = server.WaitDone(server.Submit(bp.name(), R"({"text": "mine"})").name());
  ASSERT_EQ(mine.state(), rote::v1::RUN_STATE_SUCCEEDED) << mine.error();
  EXPECT_EQ(mine.submitter(), "sub");
  server.set_token(carol);
  rote::v1::Run theirs = server.WaitDone(server.Submit(bp.name(), R"({"text": "theirs"})").name());

  EXPECT_EQ(GetRunAs(server, sub, mine.name()), grpc::StatusCode::OK);
  EXPECT_EQ(GetRunAs(server, carol, mine.name()), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(GetRunAs(server, admin, mine.name()), grpc::StatusCode::OK);
  EXPECT_EQ(GetRunAs(server, carol, "runs/999"), grpc::StatusCode::NOT_FOUND);

  server.set_token(carol);
  {
    rote::v1::WatchRunRequest req;
    req.set_name(mine.name());
    auto ctx = server.Context();
    auto reader = server.runs().WatchRun(ctx.get(), req);
    rote::v1::RunEvent e;
    int events = 0;
    while (reader->Read(&e)) ++events;
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::PERMISSION_DENIED);
    EXPECT_EQ(events, 0) << "not one of another principal's events";
  }
  rote::v1::ReplayRunResponse replay;
  grpc::Status st = server.Replay(mine.name(), &replay);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
  EXPECT_NE(st.error_message().find("belongs to the principal who submitted it"), std::string::npos);
  {
    rote::v1::CancelRunRequest req;
    req.set_name(mine.name());
    rote::v1::Run out;
    EXPECT_EQ(server.runs().CancelRun(server.Context().get(), req, &out).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
  }

  EXPECT_EQ(ListRunNamesAs(server, sub), std::vector<std::string>{mine.name()});
  EXPECT_EQ(ListRunNamesAs(server, carol), std::vector<std::string>{theirs.name()});
  EXPECT_EQ(ListRunNamesAs(server, admin).size(), 2u);
  server.set_token(admin);
  EXPECT_TRUE(server.Replay(mine.name(), &replay).ok());
}

TEST(AuthzE2e, ARequestIdNeverReturnsAnotherPrincipalsRun) {
  TestServer server;
  server.Start(1, WriteKeys(server.data_dir()));
  server.set_token("adm-token-0123456789abc");
  rote::v1::Blueprint bp = server.Register(kWordStats, kWordStatsLock, "word_stats.lua");
  server.set_token("sub-token-0123456789abc");
  rote::v1::Run first = server.Submit(bp.name(), R"({"text": "once"})", "shared-id");
  server.set_token("carol-token-0123456789a");
  rote::v1::Run other = server.Submit(bp.name(), R"({"text": "once"})", "shared-id");
  EXPECT_NE(other.name(), first.name());
  EXPECT_EQ(other.submitter(), "carol");
  // The same principal repeating it gets its own first run back.
  rote::v1::Run again = server.Submit(bp.name(), R"({"text": "once"})", "shared-id");
  EXPECT_EQ(again.name(), other.name());
}

// ---- four eyes through lockfiles ------------------------------------------------------------

constexpr const char* kAlice = "alice-token-0123456789";
constexpr const char* kCarol = "carol-token-0123456789";
constexpr const char* kBob = "bob-token-0123456789ab";

std::string Amounts(const std::string& version) {
  return R"lua(local bp = rote.blueprint { name = "amounts", version = ")lua" + version + R"lua(" }
local parse = bp:lua {
  name = "parse_amount",
  task = "Parse a decimal number written with a comma.",
  tests = { { "1,5", 1.5 } },
}
function bp.run(input) return parse(input) end
return bp
)lua";
}

constexpr const char* kParseSource = "return function(text)\n  return tonumber((text:gsub(',', '.')))\nend\n";

std::string AmountsLock(const std::string& source) {
  return "format = 1\nblueprint = \"amounts\"\n\n[[point]]\nname = \"parse_amount\"\n"
         "kind = \"lua_function\"\nsource = '''\n" +
         source + "'''\n";
}

// The real services with a scripted model, under the approval policy.
class FourEyesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("rote-authz-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    store::StoreOptions o;
    o.path = dir_.string();
    o.synchronous = store::SyncMode::kNormal;
    auto s = store::Store::Open(o);
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = *std::move(s);
    runner_ = orchestrator::engine::MakeInProcessLuaRunner();
    model_ = std::make_unique<orchestrator::generate::testing::ScriptedCodeModel>(
        [](const std::vector<orchestrator::generate::ChatTurn>&) { return "```lua\n" + std::string(kParseSource) + "```"; });
    policy_ = orchestrator::generate::ReviewPolicy(orchestrator::generate::ReviewMode::kApproval);
    pipeline_ = std::make_unique<orchestrator::generate::GenerationPipeline>(store_.get(), model_.get(), runner_.get(),
                                                                             policy_,
                                                                             orchestrator::generate::PipelineOptions{});
    auto e = orchestrator::engine::Engine::Create(store_.get(), runner_.get(), pipeline_.get(),
                                                  orchestrator::engine::EngineOptions{});
    ASSERT_TRUE(e.ok()) << e.status();
    engine_ = *std::move(e);
    auto auth = orchestrator::Authenticator::FromKeyText("alice-token-0123456789 alice submit,review\n"
                                                         "carol-token-0123456789 carol submit,review\n"
                                                         "bob-token-0123456789ab bob review\n",
                                                         "test keys");
    ASSERT_TRUE(auth.ok()) << auth.status();
    auth_ = *std::move(auth);
    orchestrator::ServiceDeps deps;
    deps.auth = &auth_;
    deps.engine = engine_.get();
    deps.generation = pipeline_.get();
    deps.review_policy = &policy_;
    services_ = orchestrator::MakeServices(deps);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(services_.blueprints.get());
    builder.RegisterService(services_.runs.get());
    builder.RegisterService(services_.artifacts.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(port_), grpc::InsecureChannelCredentials());
    blueprints_ = rote::v1::BlueprintService::NewStub(channel);
    runs_ = rote::v1::RunService::NewStub(channel);
    artifacts_ = rote::v1::ArtifactService::NewStub(channel);
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
    if (engine_) engine_->Shutdown();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  static std::unique_ptr<grpc::ClientContext> As(const char* token) {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->AddMetadata("authorization", std::string("Bearer ") + token);
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return ctx;
  }

  grpc::Status Register(const char* token, const std::string& source, const std::string& lockfile,
                        rote::v1::Blueprint* out) {
    rote::v1::RegisterBlueprintRequest req;
    req.set_source(source);
    req.set_lockfile(lockfile);
    req.set_filename("amounts.lua");
    return blueprints_->RegisterBlueprint(As(token).get(), req, out);
  }

  // Runs blueprint `name` as `token` with generation allowed, to its end.
  rote::v1::Run RunGenerating(const char* token, const std::string& name) {
    rote::v1::SubmitRunRequest submit;
    submit.set_blueprint(name);
    submit.set_input_json("\"2,5\"");
    submit.mutable_policy()->set_allow_generation(true);
    submit.mutable_policy()->set_allow_pending(true);
    rote::v1::Run run;
    grpc::Status st = runs_->SubmitRun(As(token).get(), submit, &run);
    EXPECT_TRUE(st.ok()) << st.error_message();
    rote::v1::WatchRunRequest watch;
    watch.set_name(run.name());
    auto ctx = As(token);
    auto reader = runs_->WatchRun(ctx.get(), watch);
    rote::v1::RunEvent e;
    while (reader->Read(&e)) {
    }
    EXPECT_TRUE(reader->Finish().ok());
    return run;
  }

  rote::v1::Artifact TheArtifact() {
    rote::v1::ListArtifactsRequest req;
    rote::v1::ListArtifactsResponse resp;
    EXPECT_TRUE(artifacts_->ListArtifacts(As(kAlice).get(), req, &resp).ok());
    EXPECT_EQ(resp.artifacts_size(), 1);
    if (resp.artifacts_size() == 0) return rote::v1::Artifact();
    // List items leave the source out; GetArtifact returns the artifact whole.
    rote::v1::GetArtifactRequest get;
    get.set_name(resp.artifacts(0).name());
    rote::v1::Artifact whole;
    EXPECT_TRUE(artifacts_->GetArtifact(As(kAlice).get(), get, &whole).ok());
    return whole;
  }

  grpc::Status Approve(const char* token, const rote::v1::Artifact& a, rote::v1::Artifact* out) {
    rote::v1::ReviewArtifactRequest req;
    req.set_name(a.name());
    req.set_decision(rote::v1::REVIEW_STATE_APPROVED);
    req.set_etag(a.etag());
    return artifacts_->ReviewArtifact(As(token).get(), req, out);
  }

  std::filesystem::path dir_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<orchestrator::engine::LuaArtifactRunner> runner_;
  std::unique_ptr<orchestrator::generate::testing::ScriptedCodeModel> model_;
  orchestrator::generate::ReviewPolicy policy_;
  std::unique_ptr<orchestrator::generate::GenerationPipeline> pipeline_;
  std::unique_ptr<orchestrator::engine::Engine> engine_;
  orchestrator::Authenticator auth_ = orchestrator::Authenticator::LocalMode();
  orchestrator::Services services_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<rote::v1::BlueprintService::Stub> blueprints_;
  std::unique_ptr<rote::v1::RunService::Stub> runs_;
  std::unique_ptr<rote::v1::ArtifactService::Stub> artifacts_;
};

TEST_F(FourEyesTest, ALockfileNeverApprovesWhatItsRegistrantAskedFor) {
  rote::v1::Blueprint v1;
  ASSERT_TRUE(Register(kAlice, Amounts("1.0.0"), "", &v1).ok());
  RunGenerating(kAlice, v1.name());
  const rote::v1::Artifact generated = TheArtifact();
  ASSERT_EQ(generated.state(), rote::v1::REVIEW_STATE_PENDING);
  ASSERT_EQ(generated.provenance().author(), "model");
  rote::v1::Artifact out;
  EXPECT_EQ(Approve(kAlice, generated, &out).error_code(), grpc::StatusCode::PERMISSION_DENIED);

  // Version 2 with a lockfile holding the very source the model wrote for alice.
  rote::v1::Blueprint v2;
  grpc::Status st = Register(kAlice, Amounts("2.0.0"), AmountsLock(generated.source()), &v2);
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_EQ(v2.bindings_size(), 1);
  EXPECT_EQ(v2.bindings(0).artifact_digest(), generated.digest()) << "the lockfile binds the same artifact";
  rote::v1::Artifact after = TheArtifact();
  EXPECT_EQ(after.state(), rote::v1::REVIEW_STATE_PENDING) << "the lockfile approved what alice asked for";
  for (const rote::v1::ReviewEntry& r : after.reviews()) EXPECT_NE(r.principal(), "alice");

  // Anyone else who may review approves it, through a lockfile as through ReviewArtifact.
  rote::v1::Blueprint again;
  ASSERT_TRUE(Register(kCarol, Amounts("2.0.0"), AmountsLock(generated.source()), &again).ok());
  after = TheArtifact();
  EXPECT_EQ(after.state(), rote::v1::REVIEW_STATE_APPROVED);
  ASSERT_EQ(after.reviews_size(), 1);
  EXPECT_EQ(after.reviews(0).principal(), "carol");
}

TEST_F(FourEyesTest, ASecondReviewerStillApprovesWhatTheLockfileLeftPending) {
  rote::v1::Blueprint v1;
  ASSERT_TRUE(Register(kAlice, Amounts("1.0.0"), "", &v1).ok());
  RunGenerating(kAlice, v1.name());
  rote::v1::Blueprint v2;
  ASSERT_TRUE(Register(kAlice, Amounts("2.0.0"), AmountsLock(TheArtifact().source()), &v2).ok());
  const rote::v1::Artifact pending = TheArtifact();
  ASSERT_EQ(pending.state(), rote::v1::REVIEW_STATE_PENDING);
  rote::v1::Artifact out;
  grpc::Status st = Approve(kBob, pending, &out);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(out.state(), rote::v1::REVIEW_STATE_APPROVED);
}

TEST_F(FourEyesTest, ExpertCodeFromALockfileIsApprovedByItsReviewingRegistrant) {
  // Nobody asked the model for this source: the registrant's review role approves it, as the
  // shipped blueprints rely on.
  rote::v1::Blueprint bp;
  ASSERT_TRUE(Register(kAlice, Amounts("1.0.0"), AmountsLock(kParseSource), &bp).ok());
  const rote::v1::Artifact a = TheArtifact();
  EXPECT_EQ(a.state(), rote::v1::REVIEW_STATE_APPROVED);
  EXPECT_EQ(a.provenance().author(), "expert");
  ASSERT_EQ(a.reviews_size(), 1);
  EXPECT_EQ(a.reviews(0).principal(), "alice");
}

}  // namespace
}  // namespace rote::e2e
