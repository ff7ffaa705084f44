// Provenance you can read, over real gRPC: a failed generation's error names a generation that
// GetGeneration returns with every attempt; GetAttempt returns the exact prompt the model read
// and its output; a passed generation and its artifact name each other; ListRunSteps carries
// step values inline and leaves large ones out; runs stay their submitter's; bad names are
// INVALID_ARGUMENT. The model is the scripted double, behind the real services and engine.
#include <unistd.h>

#include <filesystem>
#include <mutex>
#include <regex>

#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "orchestrator/api/auth.h"
#include "orchestrator/api/services.h"
#include "orchestrator/generate/pipeline.h"
#include "rote/v1/artifacts.grpc.pb.h"
#include "rote/v1/blueprints.grpc.pb.h"
#include "rote/v1/generation.grpc.pb.h"
#include "rote/v1/runs.grpc.pb.h"
#include "store/store.h"
#include "tests/orchestrator/generate_scripted_model.h"

namespace rote::e2e {
namespace {

using ::testing::HasSubstr;
using orchestrator::generate::ChatTurn;
using orchestrator::generate::testing::PointAndAttempt;
using orchestrator::generate::testing::ScriptedCodeModel;

constexpr const char* kAlice = "Bearer alice-token-0123456789";
constexpr const char* kCarol = "Bearer carol-token-0123456789";
constexpr const char* kRoot = "Bearer root-token-0123456789a";

constexpr const char* kAmounts = R"lua(
local bp = rote.blueprint { name = "amounts", version = "1.0.0" }
local parse = bp:lua {
  name = "parse_amount",
  task = "Parse a decimal number written with a comma.",
  signature = "function(text) -> number",
  tests = { { "1,5", 1.5 }, { "10,25", 10.25 } },
}
function bp.run(input)
  local out = {}
  for i, text in ipairs(input) do out[i] = parse(text) end
  return out
end
return bp
)lua";

constexpr const char* kBroken = R"lua(
local bp = rote.blueprint { name = "broken", version = "1.0.0" }
local never = bp:lua {
  name = "never",
  task = "Return the answer.",
  tests = { { "q", 42 }, { "r", 43 } },
}
function bp.run(input) return never(input) end
return bp
)lua";

constexpr const char* kProse = "I am not sure what you mean. \xC3\xA9\xFF";

class ProvenanceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::temp_directory_path() / ("rote-provenance-test-" + std::to_string(::getpid()))).string();
    std::filesystem::remove_all(dir_);
    store::StoreOptions o;
    o.path = dir_;
    o.synchronous = store::SyncMode::kNormal;
    auto s = store::Store::Open(o);
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = *std::move(s);
    runner_ = orchestrator::engine::MakeInProcessLuaRunner();
    model_ = std::make_unique<ScriptedCodeModel>([this](const std::vector<ChatTurn>& m) { return Answer(m); });
    policy_ = orchestrator::generate::ReviewPolicy(orchestrator::generate::ReviewMode::kAuto);
    pipeline_ = std::make_unique<orchestrator::generate::GenerationPipeline>(
        store_.get(), model_.get(), runner_.get(), policy_, orchestrator::generate::PipelineOptions{});
    auto e = orchestrator::engine::Engine::Create(store_.get(), runner_.get(), pipeline_.get(),
                                                  orchestrator::engine::EngineOptions{});
    ASSERT_TRUE(e.ok()) << e.status();
    engine_ = *std::move(e);
    auto auth = orchestrator::Authenticator::FromKeyText("alice-token-0123456789 alice submit,review\n"
                                                         "carol-token-0123456789 carol submit\n"
                                                         "root-token-0123456789a root admin\n",
                                                         "test keys");
    ASSERT_TRUE(auth.ok()) << auth.status();
    auth_ = *std::move(auth);
    channel_ = StartServer(1 << 20);
  }
  void TearDown() override {
    for (auto& s : servers_) s->Shutdown();
    if (engine_) engine_->Shutdown();
    std::filesystem::remove_all(dir_);
  }

  // The real services on a port of their own, sending texts inline up to `inline_max` bytes.
  std::shared_ptr<grpc::Channel> StartServer(int64_t inline_max) {
    orchestrator::ServiceDeps deps;
    deps.auth = &auth_;
    deps.engine = engine_.get();
    deps.generation = pipeline_.get();
    deps.review_policy = &policy_;
    deps.max_inline_payload_bytes = inline_max;
    services_.push_back(orchestrator::MakeServices(deps));
    orchestrator::Services& s = services_.back();
    int port = 0;
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(s.blueprints.get());
    builder.RegisterService(s.runs.get());
    builder.RegisterService(s.artifacts.get());
    builder.RegisterService(s.generation.get());
    servers_.push_back(builder.BuildAndStart());
    EXPECT_NE(servers_.back(), nullptr);
    return grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials());
  }

  // parse_amount: attempt 1 wrong, attempt 2 right; anything else: prose with bytes that are not
  // UTF-8. Every prompt is kept as the model read it.
  std::string Answer(const std::vector<ChatTurn>& m) {
    {
      std::lock_guard lock(mu_);
      prompts_.push_back(model_->RenderPrompt(m));
    }
    const auto [point, attempt] = PointAndAttempt(m);
    if (point != "parse_amount") return kProse;
    if (attempt == 1) return "```lua\nreturn function(text) return 0 end\n```";
    return "```lua\nreturn function(text)\n  return tonumber((text:gsub(',', '.')))\nend\n```";
  }

  static std::unique_ptr<grpc::ClientContext> As(const char* token) {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->AddMetadata("authorization", token);
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    return ctx;
  }

  // Registers `source` and runs it on `input_json` as alice; the finished run.
  rote::v1::Run RunToEnd(const char* source, const std::string& input_json) {
    rote::v1::BlueprintService::Stub blueprints(channel_);
    rote::v1::RegisterBlueprintRequest reg;
    reg.set_source(source);
    rote::v1::Blueprint bp;
    grpc::Status registered = blueprints.RegisterBlueprint(As(kAlice).get(), reg, &bp);
    EXPECT_TRUE(registered.ok()) << registered.error_message();
    rote::v1::RunService::Stub runs(channel_);
    rote::v1::SubmitRunRequest submit;
    submit.set_blueprint(bp.name());
    submit.set_input_json(input_json);
    submit.mutable_policy()->set_allow_generation(true);
    rote::v1::Run run;
    grpc::Status submitted = runs.SubmitRun(As(kAlice).get(), submit, &run);
    EXPECT_TRUE(submitted.ok()) << submitted.error_message();
    rote::v1::WatchRunRequest watch;
    watch.set_name(run.name());
    auto ctx = As(kAlice);
    auto reader = runs.WatchRun(ctx.get(), watch);
    rote::v1::RunEvent ev;
    while (reader->Read(&ev)) {
    }
    EXPECT_TRUE(reader->Finish().ok());
    rote::v1::GetRunRequest get;
    get.set_name(run.name());
    rote::v1::Run done;
    EXPECT_TRUE(runs.GetRun(As(kAlice).get(), get, &done).ok());
    return done;
  }

  grpc::Status GetGeneration(const std::string& name, rote::v1::Generation* out, const char* token = kAlice) {
    rote::v1::GenerationService::Stub stub(channel_);
    rote::v1::GetGenerationRequest req;
    req.set_name(name);
    return stub.GetGeneration(As(token).get(), req, out);
  }
  grpc::Status GetAttempt(const std::string& name, rote::v1::AttemptDetail* out,
                          std::shared_ptr<grpc::Channel> channel = nullptr) {
    rote::v1::ArtifactService::Stub stub(channel ? channel : channel_);
    rote::v1::GetAttemptRequest req;
    req.set_name(name);
    return stub.GetAttempt(As(kAlice).get(), req, out);
  }
  grpc::Status ListSteps(const char* token, const std::string& run, int64_t max_value_bytes,
                         rote::v1::ListRunStepsResponse* out, std::shared_ptr<grpc::Channel> channel = nullptr) {
    rote::v1::RunService::Stub stub(channel ? channel : channel_);
    rote::v1::ListRunStepsRequest req;
    req.set_name(run);
    req.set_max_value_bytes(max_value_bytes);
    return stub.ListRunSteps(As(token).get(), req, out);
  }

  std::string dir_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<orchestrator::engine::LuaArtifactRunner> runner_;
  std::unique_ptr<ScriptedCodeModel> model_;
  orchestrator::generate::ReviewPolicy policy_;
  std::unique_ptr<orchestrator::generate::GenerationPipeline> pipeline_;
  std::unique_ptr<orchestrator::engine::Engine> engine_;
  orchestrator::Authenticator auth_ = orchestrator::Authenticator::LocalMode();
  std::vector<orchestrator::Services> services_;
  std::vector<std::unique_ptr<grpc::Server>> servers_;
  std::shared_ptr<grpc::Channel> channel_;
  std::mutex mu_;
  std::vector<std::string> prompts_;
};

TEST_F(ProvenanceTest, FailedGenerationIsAResourceWithEveryAttemptsPromptAndOutput) {
  rote::v1::Run run = RunToEnd(kBroken, "\"q\"");
  ASSERT_EQ(run.state(), rote::v1::RUN_STATE_FAILED);
  std::smatch m;
  const std::string error = run.error();
  ASSERT_TRUE(std::regex_search(error, m, std::regex("generations/([0-9a-f]{64})"))) << error;
  const std::string name = m[0];
  EXPECT_THAT(error, HasSubstr("`rote generations get " + m[1].str() + "`"));

  rote::v1::Generation g;
  grpc::Status st = GetGeneration(name, &g);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(g.name(), name);
  EXPECT_EQ(g.request_digest(), "sha256:" + m[1].str());
  EXPECT_EQ(g.generation_point(), "broken/never");
  EXPECT_FALSE(g.passed());
  EXPECT_EQ(g.artifact(), "");
  EXPECT_EQ(g.model_digest(), model_->identity().digest);
  EXPECT_EQ(g.device(), "scripted");
  EXPECT_THAT(g.decoding_json(), HasSubstr("\"max_attempts\":3"));
  ASSERT_EQ(g.attempts_size(), 3);
  EXPECT_EQ(g.failure(), g.attempts(2).failure());

  std::vector<std::string> prompts;
  {
    std::lock_guard lock(mu_);
    prompts = prompts_;
  }
  ASSERT_EQ(prompts.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    const rote::v1::Attempt& a = g.attempts(i);
    EXPECT_EQ(a.index(), i + 1);
    EXPECT_FALSE(a.failure().empty());
    EXPECT_GT(a.prompt_tokens(), 0);
    EXPECT_GT(a.output_tokens(), 0);
    EXPECT_TRUE(a.has_start_time());
    rote::v1::AttemptDetail d;
    st = GetAttempt(name + "/attempts/" + std::to_string(i + 1), &d);
    ASSERT_TRUE(st.ok()) << st.error_message();
    // The exact prompt the model read; the output with its non-UTF-8 byte replaced.
    EXPECT_EQ(d.prompt(), prompts[static_cast<size_t>(i)]);
    EXPECT_FALSE(d.prompt_truncated());
    EXPECT_EQ(d.output(), "I am not sure what you mean. \xC3\xA9\xEF\xBF\xBD");
    EXPECT_EQ(d.attempt().prompt_digest(), a.prompt_digest());
    EXPECT_EQ(d.generation(), name);
    EXPECT_EQ(d.model_digest(), g.model_digest());
    EXPECT_EQ(d.decoding_json(), g.decoding_json());
  }
  // Each retry quotes the attempt before it.
  EXPECT_NE(prompts[0], prompts[1]);

  // An unambiguous prefix of 8 or more hex digits names it too; an ambiguous one lists the
  // candidates.
  rote::v1::Generation by_prefix;
  st = GetGeneration("generations/" + m[1].str().substr(0, 8), &by_prefix);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(by_prefix.name(), name);
  for (const char* tail : {"1", "2"}) {
    store::GenerationRecord twin;
    twin.request_digest = "sha256:" + std::string(63, 'c') + tail;
    twin.generation_point = "broken/never";
    twin.failure = "seeded";
    ASSERT_TRUE(store_->PutGeneration(twin).ok());
  }
  st = GetGeneration("generations/cccccccc", &by_prefix);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("is ambiguous: it starts generations/" + std::string(63, 'c') + "1, "
                                            "generations/" + std::string(63, 'c') + "2"));

  // Listed among the failed generations.
  rote::v1::GenerationService::Stub stub(channel_);
  rote::v1::ListGenerationsRequest list;
  list.set_failed_only(true);
  rote::v1::ListGenerationsResponse resp;
  ASSERT_TRUE(stub.ListGenerations(As(kCarol).get(), list, &resp).ok());
  ASSERT_EQ(resp.generations_size(), 3);  // with the two seeded above, oldest first
  EXPECT_EQ(resp.generations(0).name(), name);

  // The same request again is answered from the record, without the model.
  const int calls = model_->calls();
  rote::v1::Run again = RunToEnd(kBroken, "\"r\"");
  EXPECT_EQ(again.state(), rote::v1::RUN_STATE_FAILED);
  EXPECT_THAT(again.error(), HasSubstr(name));
  EXPECT_EQ(model_->calls(), calls);
}

TEST_F(ProvenanceTest, PassedGenerationAndItsArtifactNameEachOther) {
  rote::v1::Run run = RunToEnd(kAmounts, R"(["1,5","2,25"])");
  ASSERT_EQ(run.state(), rote::v1::RUN_STATE_SUCCEEDED) << run.error();
  ASSERT_EQ(run.bindings_size(), 1);
  rote::v1::ArtifactService::Stub artifacts(channel_);
  rote::v1::GetArtifactRequest get;
  get.set_name("artifacts/" + run.bindings(0).artifact_digest().substr(7));
  rote::v1::Artifact a;
  ASSERT_TRUE(artifacts.GetArtifact(As(kAlice).get(), get, &a).ok());
  ASSERT_FALSE(a.provenance().generation().empty());
  ASSERT_EQ(a.provenance().attempts_size(), 2);
  EXPECT_GT(a.provenance().attempts(1).output_tokens(), 0);
  EXPECT_FALSE(a.provenance().attempts(1).code_digest().empty());

  rote::v1::Generation g;
  ASSERT_TRUE(GetGeneration(a.provenance().generation(), &g).ok());
  EXPECT_TRUE(g.passed());
  EXPECT_EQ(g.artifact(), a.name());
  EXPECT_EQ(g.failure(), "");
  ASSERT_EQ(g.attempts_size(), 2);
  EXPECT_EQ(g.attempts(0).prompt_digest(), a.provenance().attempts(0).prompt_digest());

  // The artifact's attempt and the generation's attempt are the same texts; the code is what
  // the artifact stores.
  rote::v1::AttemptDetail via_artifact, via_generation;
  ASSERT_TRUE(GetAttempt(a.name() + "/attempts/2", &via_artifact).ok());
  ASSERT_TRUE(GetAttempt(g.name() + "/attempts/2", &via_generation).ok());
  EXPECT_EQ(via_artifact.prompt(), via_generation.prompt());
  EXPECT_EQ(via_artifact.output(), via_generation.output());
  EXPECT_EQ(via_artifact.code(), a.source());
  EXPECT_EQ(via_artifact.generation(), g.name());
  rote::v1::AttemptDetail first;
  ASSERT_TRUE(GetAttempt(a.name() + "/attempts/1", &first).ok());
  EXPECT_THAT(first.attempt().failure(), HasSubstr("it was refused as trivially wrong"));
  EXPECT_EQ(first.code(), "return function(text) return 0 end\n");

  rote::v1::GenerationService::Stub stub(channel_);
  rote::v1::ListGenerationsRequest list;
  list.set_generation_point("amounts/parse_amount");
  rote::v1::ListGenerationsResponse resp;
  ASSERT_TRUE(stub.ListGenerations(As(kAlice).get(), list, &resp).ok());
  ASSERT_EQ(resp.generations_size(), 1);
  list.set_failed_only(true);
  resp.Clear();
  ASSERT_TRUE(stub.ListGenerations(As(kAlice).get(), list, &resp).ok());
  EXPECT_EQ(resp.generations_size(), 0);
}

TEST_F(ProvenanceTest, RunStepsCarryValuesInlineAndLargeOnesByDigest) {
  const std::string big = std::string(6000, '0') + "1,5";
  rote::v1::Run run = RunToEnd(kAmounts, "[\"1,5\",\"" + big + "\"]");
  ASSERT_EQ(run.state(), rote::v1::RUN_STATE_SUCCEEDED) << run.error();
  rote::v1::ListRunStepsResponse steps;
  grpc::Status st = ListSteps(kAlice, run.name(), 0, &steps);
  ASSERT_TRUE(st.ok()) << st.error_message();
  ASSERT_EQ(steps.steps_size(), 2);
  const rote::v1::Step& small = steps.steps(0);
  EXPECT_EQ(small.index(), 0);
  EXPECT_EQ(small.generation_point(), "parse_amount");
  EXPECT_EQ(small.input_json(), "\"1,5\"");
  EXPECT_EQ(small.output_json(), "1.5");
  EXPECT_FALSE(small.input_omitted());
  EXPECT_EQ(small.input_size_bytes(), 5);
  // 6005 bytes of input: past the default 4096, so left out and named by digest.
  const rote::v1::Step& large = steps.steps(1);
  EXPECT_TRUE(large.input_omitted());
  EXPECT_EQ(large.input_json(), "");
  EXPECT_EQ(large.input_size_bytes(), static_cast<int64_t>(big.size() + 2));
  EXPECT_FALSE(large.input_digest().empty());
  EXPECT_EQ(large.output_json(), "1.5");
  // Asked for, it comes inline; ReadRunPayload reads it by digest either way.
  steps.Clear();
  ASSERT_TRUE(ListSteps(kAlice, run.name(), 8192, &steps).ok());
  EXPECT_EQ(steps.steps(1).input_json(), "\"" + big + "\"");
  // Paged: one step a page.
  rote::v1::RunService::Stub runs(channel_);
  rote::v1::ListRunStepsRequest paged;
  paged.set_name(run.name());
  paged.set_page_size(1);
  rote::v1::ListRunStepsResponse first, second;
  ASSERT_TRUE(runs.ListRunSteps(As(kAlice).get(), paged, &first).ok());
  ASSERT_EQ(first.steps_size(), 1);
  ASSERT_FALSE(first.next_page_token().empty());
  paged.set_page_token(first.next_page_token());
  ASSERT_TRUE(runs.ListRunSteps(As(kAlice).get(), paged, &second).ok());
  ASSERT_EQ(second.steps_size(), 1);
  EXPECT_EQ(second.steps(0).index(), 1);
  EXPECT_TRUE(second.next_page_token().empty());

  // Another principal's run is not theirs to read; admin reads every run.
  rote::v1::ListRunStepsResponse denied;
  EXPECT_EQ(ListSteps(kCarol, run.name(), 0, &denied).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  rote::v1::ListRunStepsResponse admin;
  EXPECT_TRUE(ListSteps(kRoot, run.name(), 0, &admin).ok());
  EXPECT_EQ(ListSteps(kAlice, run.name(), -1, &denied).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(ProvenanceTest, ServerInlineLimitCutsTextsAndCapsStepValues) {
  rote::v1::Run run = RunToEnd(kAmounts, R"(["1,5","2,25"])");
  ASSERT_EQ(run.state(), rote::v1::RUN_STATE_SUCCEEDED) << run.error();
  auto small = StartServer(100);
  rote::v1::AttemptDetail whole, cut;
  const std::string name = "artifacts/" + run.bindings(0).artifact_digest().substr(7) + "/attempts/1";
  ASSERT_TRUE(GetAttempt(name, &whole).ok());
  ASSERT_TRUE(GetAttempt(name, &cut, small).ok());
  ASSERT_GT(whole.prompt().size(), 100u);
  EXPECT_TRUE(cut.prompt_truncated());
  EXPECT_LE(cut.prompt().size(), 100u);
  EXPECT_EQ(whole.prompt().substr(0, cut.prompt().size()), cut.prompt());
  EXPECT_FALSE(cut.code_truncated());
  // A step value larger than the server's limit stays out however much the caller asks for.
  rote::v1::Run long_run = RunToEnd(kAmounts, "[\"" + std::string(200, '0') + "1,5\"]");
  rote::v1::ListRunStepsResponse steps;
  ASSERT_TRUE(ListSteps(kAlice, long_run.name(), 1 << 20, &steps, small).ok());
  ASSERT_EQ(steps.steps_size(), 1);
  EXPECT_TRUE(steps.steps(0).input_omitted());
  EXPECT_FALSE(steps.steps(0).output_omitted());
}

TEST_F(ProvenanceTest, BadNamesAreInvalidArgumentAndMissingOnesNotFound) {
  rote::v1::Generation g;
  for (const std::string& bad : {std::string("generations/xyz"), std::string("generations/") + std::string(7, 'a'),
                                 std::string("sha256:") + std::string(64, 'a'), std::string("generations/"),
                                 std::string("generations/") + std::string(64, 'A'),
                                 std::string("generations/") + std::string(1 << 20, 'a')}) {
    grpc::Status st = GetGeneration(bad, &g);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << bad.substr(0, 80);
    EXPECT_LT(st.error_message().size(), 600u);
  }
  EXPECT_EQ(GetGeneration("generations/" + std::string(64, 'a'), &g).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(GetGeneration("generations/" + std::string(63, 'a'), &g).error_code(), grpc::StatusCode::NOT_FOUND);
  rote::v1::AttemptDetail d;
  const std::string hex(64, 'b');
  for (const std::string& bad :
       {"generations/" + hex + "/attempts/0", "generations/" + hex + "/attempts/01", "generations/" + hex + "/attempts/",
        "artifacts/" + hex + "/attempts/x", std::string("runs/1/attempts/1"),
        std::string("artifacts/amounts/parse_amount/revisions/1/attempts/1"),
        "generations/" + hex}) {
    EXPECT_EQ(GetAttempt(bad, &d).error_code(), grpc::StatusCode::INVALID_ARGUMENT) << bad;
  }
  EXPECT_EQ(GetAttempt("artifacts/" + hex + "/attempts/1", &d).error_code(), grpc::StatusCode::NOT_FOUND);
  rote::v1::Run run = RunToEnd(kAmounts, R"(["1,5"])");
  const std::string artifact = "artifacts/" + run.bindings(0).artifact_digest().substr(7);
  grpc::Status missing = GetAttempt(artifact + "/attempts/9", &d);
  EXPECT_EQ(missing.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(missing.error_message(), HasSubstr("has no attempt 9; it has 2 attempts"));
  rote::v1::GenerationService::Stub stub(channel_);
  rote::v1::ListGenerationsRequest list;
  list.set_generation_point("not a point");
  rote::v1::ListGenerationsResponse resp;
  EXPECT_EQ(stub.ListGenerations(As(kAlice).get(), list, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  list.set_generation_point("");
  list.set_page_token("forged");
  EXPECT_EQ(stub.ListGenerations(As(kAlice).get(), list, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  rote::v1::ListRunStepsResponse steps;
  EXPECT_EQ(ListSteps(kAlice, "runs/x", 0, &steps).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(ListSteps(kAlice, "runs/999", 0, &steps).error_code(), grpc::StatusCode::NOT_FOUND);
  // Without a token nothing is readable.
  grpc::ClientContext anonymous;
  EXPECT_EQ(stub.ListGenerations(&anonymous, rote::v1::ListGenerationsRequest(), &resp).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
}

}  // namespace
}  // namespace rote::e2e
