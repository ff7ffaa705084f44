// The pipeline end to end on the real inference engine, with the committed tiny Qwen2 fixture
// (tests/fixtures/qwen2: 2 layers, dim 64, random weights). Its candidates are noise, so every
// generation fails validation: what is checked is that the failure is clean, every attempt is
// stored, and the attempts are the same bytes however the request is run.
#include <unistd.h>

#include <filesystem>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "inference/backend.h"
#include "inference/engine.h"
#include "orchestrator/generate/inference_code_model.h"
#include "orchestrator/generate/pipeline.h"
#include "store/store.h"

namespace rote::orchestrator::generate {
namespace {

using ::testing::HasSubstr;

std::string FixtureDir() {
  // tests/orchestrator/<this file> -> tests/fixtures/qwen2
  return (std::filesystem::path(ROTE_SOURCE_DIR) / "tests" / "fixtures" / "qwen2").string();
}

store::GenerationSpecRecord Spec(const std::string& name) {
  auto p = PointFromParts(name, engine::ArtifactKind::kLuaFunction, "Parse a decimal number written with a comma.",
                          "function(text) -> number", {R"({"input":"1,5","output":1.5})"});
  EXPECT_TRUE(p.ok()) << p.status();
  return p->ToRecord();
}

class GenerateRealModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    inference::EngineOptions o;
    o.threads = 1;
    o.kv_cache_bytes = 64ll << 20;
    auto m = InferenceCodeModel::Load(FixtureDir(), "cpu", o);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = m->release();
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }

  // A fresh store and pipeline: `attempts` attempts of at most 12 tokens.
  std::unique_ptr<GenerationPipeline> Fresh(int attempts = 2, bool constrain = false, int max_tokens = 12) {
    auto dir = std::filesystem::temp_directory_path() /
               ("rote-generate-real-test-" + std::to_string(::getpid()) + "-" + std::to_string(++counter_));
    std::filesystem::remove_all(dir);
    store::StoreOptions o;
    o.path = dir.string();
    o.synchronous = store::SyncMode::kNormal;
    auto s = store::Store::Open(o);
    EXPECT_TRUE(s.ok()) << s.status();
    stores_.push_back(*std::move(s));
    PipelineOptions po;
    po.decoding.max_attempts = attempts;
    po.decoding.max_tokens = max_tokens;
    po.constrain_replies = constrain;
    return std::make_unique<GenerationPipeline>(stores_.back().get(), model_, runner_.get(),
                                                ReviewPolicy(ReviewMode::kAuto), po);
  }

  std::vector<store::GenerationAttempt> AttemptsOf(GenerationPipeline& p, const std::string& name) {
    const engine::GenerationPoint point = *engine::PointFromRecord(Spec(name));
    Decoding decoding = p.options().decoding;
    EXPECT_TRUE(p.SetGrammar(point, &decoding).ok());
    auto digest = p.RequestDigest(point, decoding);
    EXPECT_TRUE(digest.ok());
    auto failed = p.GetFailedGeneration(*digest);
    EXPECT_TRUE(failed.ok()) << failed.status();
    return failed.ok() ? failed->attempts : std::vector<store::GenerationAttempt>{};
  }

  static InferenceCodeModel* model_;
  static int counter_;
  std::unique_ptr<engine::LuaArtifactRunner> runner_ = engine::MakeInProcessLuaRunner();
  std::vector<std::unique_ptr<store::Store>> stores_;
};
InferenceCodeModel* GenerateRealModelTest::model_ = nullptr;
int GenerateRealModelTest::counter_ = 0;

engine::GenerateContext Context(const std::string& name) {
  engine::GenerateContext c;
  c.generation_point_key = "real/" + name;
  c.principal = "alice";
  return c;
}

TEST_F(GenerateRealModelTest, CleanFailureAfterNAttemptsWithEveryAttemptStored) {
  auto pipeline = Fresh();
  auto g = pipeline->Generate(Spec("parse_amount"), Context("parse_amount"));
  ASSERT_TRUE(absl::IsFailedPrecondition(g.status())) << g.status();
  EXPECT_THAT(std::string(g.status().message()), HasSubstr("passed validation in 2 attempts"));
  const std::vector<store::GenerationAttempt> attempts = AttemptsOf(*pipeline, "parse_amount");
  ASSERT_EQ(attempts.size(), 2u);
  store::Store& store = *stores_.back();
  for (const store::GenerationAttempt& at : attempts) {
    EXPECT_FALSE(at.failure.empty());
    auto prompt = store.GetBlob(at.prompt_digest);
    ASSERT_TRUE(prompt.ok()) << prompt.status();
    EXPECT_THAT(*prompt, HasSubstr("<|im_start|>system"));  // the chat template the model read
    EXPECT_THAT(*prompt, HasSubstr("Task: Parse a decimal number written with a comma."));
    EXPECT_TRUE(store.GetBlob(at.output_digest).ok());
    // The engine's token counts and times of the request.
    EXPECT_GT(at.prompt_tokens, 100);
    EXPECT_GT(at.output_tokens, 0);
    EXPECT_LE(at.output_tokens, 12);  // max_tokens
    EXPECT_GT(at.start_ms, 0);
  }
  // Attempt 2 quotes attempt 1 and its failure.
  EXPECT_THAT(*store.GetBlob(attempts[1].prompt_digest), HasSubstr("was refused: " + attempts[0].failure.substr(0, 20)));
  EXPECT_EQ(model_->identity().device.substr(0, 3), "cpu");
}

TEST_F(GenerateRealModelTest, IdenticalRequestsGiveIdenticalAttemptDigests) {
  auto first = Fresh();
  ASSERT_FALSE(first->Generate(Spec("parse_amount"), Context("parse_amount")).ok());
  auto second = Fresh();
  ASSERT_FALSE(second->Generate(Spec("parse_amount"), Context("parse_amount")).ok());
  const auto a = AttemptsOf(*first, "parse_amount");
  const auto b = AttemptsOf(*second, "parse_amount");
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].prompt_digest, b[i].prompt_digest);
    EXPECT_EQ(a[i].output_digest, b[i].output_digest);
    EXPECT_EQ(a[i].failure, b[i].failure);
  }
}

// One attempt each keeps this under 10 s on two loaded cores; the retry chain is covered above.
TEST_F(GenerateRealModelTest, BatchDoesNotChangeAttempts) {
  auto alone = Fresh(1);
  ASSERT_FALSE(alone->Generate(Spec("target"), Context("target")).ok());
  auto together = Fresh(1);
  std::vector<GenerationJob> jobs;
  for (int i = 0; i < 11; ++i) {
    const std::string name = i == 4 ? "target" : "other_" + std::to_string(i);
    GenerationJob j;
    j.spec = Spec(name);
    j.context = Context(name);
    jobs.push_back(j);
  }
  auto results = together->GenerateAll(jobs);
  ASSERT_EQ(results.size(), 11u);
  for (const auto& r : results) EXPECT_TRUE(absl::IsFailedPrecondition(r.status())) << r.status();
  const auto a = AttemptsOf(*alone, "target");
  const auto b = AttemptsOf(*together, "target");
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 1u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].prompt_digest, b[i].prompt_digest);
    EXPECT_EQ(a[i].output_digest, b[i].output_digest) << "attempt " << i + 1;
  }
  // The other points really were different requests (their outputs are their own).
  EXPECT_NE(AttemptsOf(*together, "other_0")[0].prompt_digest, b[0].prompt_digest);
}

// The CPU backend under another profile's name, as the CUDA backend reports its fast profile
// ("fast5-sm90"): what the model's identity, and so every artifact's provenance, must carry.
class RenamedProfileBackend final : public inference::Backend {
 public:
  RenamedProfileBackend(std::unique_ptr<inference::Backend> inner, std::string profile)
      : inner_(std::move(inner)), profile_(std::move(profile)) {}
  std::string device() const override { return inner_->device(); }
  std::string numerics_profile() const override { return profile_; }
  int64_t KvBytesPerBlock() const override { return inner_->KvBytesPerBlock(); }
  inference::Status AllocateKvCache(int32_t n) override { return inner_->AllocateKvCache(n); }
  inference::Status Forward(const inference::BatchPlan& plan, std::vector<float>* logits) override {
    return inner_->Forward(plan, logits);
  }

 private:
  std::unique_ptr<inference::Backend> inner_;
  std::string profile_;
};

// identity() names the profile the engine runs: were it to say "exact" under the fast profile,
// artifacts made there would be recorded, and accepted for re-derivation, as exact ones.
TEST(InferenceCodeModelTest, IdentityNamesTheProfileTheEngineRuns) {
  auto model = inference::Model::Load(FixtureDir());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  auto tokenizer = inference::Tokenizer::Load(FixtureDir());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  auto cpu = inference::CreateCpuBackend(*model, inference::CpuBackendOptions{});
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  inference::EngineOptions o;
  o.kv_cache_bytes = 4 << 20;
  auto engine = inference::Engine::Create(
      *model, std::move(*tokenizer), std::make_unique<RenamedProfileBackend>(std::move(*cpu), "fast9-test"), o);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  EXPECT_EQ((*engine)->kv_cache_bytes(), int64_t{(*engine)->kv_blocks()} * inference::KvBytesPerBlock((*model)->config()));
  EXPECT_LE((*engine)->kv_cache_bytes(), int64_t{4} << 20);
  EXPECT_GT((*engine)->kv_blocks(), 0);
  InferenceCodeModel renamed(std::move(*engine));
  EXPECT_EQ(renamed.identity().numerics_profile, "fast9-test");
  EXPECT_EQ(renamed.Describe().numerics_profile, "fast9-test");
  // The loaded CPU model says exact.
  inference::EngineOptions plain;
  plain.threads = 1;
  plain.kv_cache_bytes = 4 << 20;
  auto loaded = InferenceCodeModel::Load(FixtureDir(), "cpu", plain);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->identity().numerics_profile, "exact");
  const int64_t per_block = inference::KvBytesPerBlock((*model)->config());
  EXPECT_EQ((*loaded)->engine().kv_cache_bytes(), (int64_t{4} << 20) / per_block * per_block);  // the CPU: the size
}

// The fixture model with random weights writes no code of its own accord; held to the reply
// grammars, every attempt is a prefix of a ```lua block of Lua that reads only sandbox names, or
// of a ```re2 block (the real engine behind InferenceCodeModel, masks and all).
TEST_F(GenerateRealModelTest, ConstrainedAttemptsAreFencedBlocksOfTheirKind) {
  auto pipeline = Fresh(2, /*constrain=*/true, 40);
  (void)pipeline->Generate(Spec("parse_amount"), Context("parse_amount"));
  const std::vector<store::GenerationAttempt> attempts = AttemptsOf(*pipeline, "parse_amount");
  ASSERT_EQ(attempts.size(), 2u);
  for (const store::GenerationAttempt& at : attempts) {
    auto output = stores_.back()->GetBlob(at.output_digest);
    ASSERT_TRUE(output.ok());
    EXPECT_EQ(output->rfind("```lua\n", 0), 0u) << *output;
    EXPECT_EQ(output->find("os."), std::string::npos) << *output;
  }
  auto free = Fresh(1, /*constrain=*/false, 40);
  (void)free->Generate(Spec("parse_amount"), Context("parse_amount"));
  const std::vector<store::GenerationAttempt> unconstrained = AttemptsOf(*free, "parse_amount");
  ASSERT_EQ(unconstrained.size(), 1u);
  EXPECT_NE(stores_.back()->GetBlob(unconstrained[0].output_digest)->rfind("```lua\n", 0), 0u);
}

// The fixture's prompts are about a thousand tokens: reading one is reported at fixed counts.
TEST_F(GenerateRealModelTest, LongPromptsReportTheirReading) {
  auto pipeline = Fresh(1);
  std::vector<std::string> progress;
  engine::GenerateContext ctx = Context("parse_amount");
  ctx.progress = [&](const std::string& line) { progress.push_back(line); };
  (void)pipeline->Generate(Spec("parse_amount"), ctx);
  bool read_line = false;
  for (const std::string& line : progress) read_line |= line.find("attempt 1/1, prompt 512/") != std::string::npos;
  EXPECT_TRUE(read_line) << ::testing::PrintToString(progress);
}

}  // namespace
}  // namespace rote::orchestrator::generate
