// The generation pipeline against a scripted model: validation, the retry chain, what every
// attempt leaves in the store, caching, batching, review policy and the four-eyes rule,
// regeneration.
#include <unistd.h>

#include <filesystem>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "orchestrator/generate/constraint.h"
#include "orchestrator/generate/pipeline.h"
#include "orchestrator/generate/prompt.h"
#include "orchestrator/generate/review_policy.h"
#include "store/digest.h"
#include "store/store.h"
#include "tests/orchestrator/generate_scripted_model.h"

namespace rote::orchestrator::generate {
namespace {

using engine::ArtifactKind;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::ScriptedCodeModel;

constexpr const char* kGoodParse = "```lua\nreturn function(text)\n  return tonumber((text:gsub(',', '.')))\nend\n```";

std::string FreshDir(const std::string& name) {
  static int counter = 0;  // tests that open a second store get a second directory
  auto dir = std::filesystem::temp_directory_path() / ("rote-generate-test-" + name + "-" + std::to_string(::getpid()) +
                                                       "-" + std::to_string(++counter));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

store::GenerationSpecRecord LuaSpec(const std::string& name = "parse_amount") {
  auto p = PointFromParts(name, ArtifactKind::kLuaFunction, "Parse a decimal number written with a comma.",
                          "function(text) -> number",
                          {R"({"input":"1,5","output":1.5})", R"({"input":"10,25","output":10.25})"});
  EXPECT_TRUE(p.ok()) << p.status();
  return p->ToRecord();
}

store::GenerationSpecRecord InvoicePattern() {
  auto p = PointFromParts("invoice_number", ArtifactKind::kRe2Pattern, "Invoice numbers like INV-2024-0001.", "",
                          {R"({"input":"pay INV-2024-0001 and INV-2023-0420","matches":["INV-2024-0001","INV-2023-0420"]})",
                           R"({"input":"nothing","matches":[]})"});
  EXPECT_TRUE(p.ok()) << p.status();
  return p->ToRecord();
}

engine::GenerateContext Context(const std::string& point, const std::string& principal = "alice") {
  engine::GenerateContext c;
  c.generation_point_key = "invoices/" + point;
  c.principal = principal;
  return c;
}

class PipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store::StoreOptions o;
    o.path = FreshDir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    o.synchronous = store::SyncMode::kNormal;
    auto s = store::Store::Open(o);
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = *std::move(s);
    runner_ = engine::MakeInProcessLuaRunner();
  }

  std::unique_ptr<GenerationPipeline> Pipeline(CodeModel* model, ReviewMode mode = ReviewMode::kApproval,
                                               int attempts = 3) {
    PipelineOptions o;
    o.decoding.max_attempts = attempts;
    return std::make_unique<GenerationPipeline>(store_.get(), model, runner_.get(), ReviewPolicy(mode), o);
  }

  store::ArtifactRecord Artifact(const std::string& digest) {
    auto a = store_->GetArtifact(digest);
    EXPECT_TRUE(a.ok()) << a.status();
    return a.ok() ? *a : store::ArtifactRecord{};
  }

  std::unique_ptr<store::Store> store_;
  std::unique_ptr<engine::LuaArtifactRunner> runner_;
};

TEST_F(PipelineTest, PassingFirstAttemptIsStoredPendingWithFullProvenance) {
  ScriptedCodeModel model(ScriptedCodeModel::Table({{{"parse_amount", 1}, kGoodParse}}));
  auto pipeline = Pipeline(&model);
  std::vector<std::string> progress;
  engine::GenerateContext ctx = Context("parse_amount");
  ctx.progress = [&](const std::string& line) { progress.push_back(line); };
  auto g = pipeline->Generate(LuaSpec(), ctx);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_FALSE(g->from_cache);
  const store::ArtifactRecord a = Artifact(g->artifact_digest);
  EXPECT_EQ(a.state, store::ReviewState::kPending);
  EXPECT_EQ(a.kind, "lua_function");
  EXPECT_EQ(a.generation_point, "invoices/parse_amount");
  EXPECT_EQ(a.source, "return function(text)\n  return tonumber((text:gsub(',', '.')))\nend\n");
  EXPECT_EQ(a.provenance.author, "model");
  EXPECT_EQ(a.provenance.model_digest, model.identity().digest);
  EXPECT_EQ(a.provenance.numerics_profile, "exact");
  EXPECT_EQ(a.provenance.prompt_template_version, kLuaTemplateVersion);
  EXPECT_EQ(a.provenance.spec_digest, LuaSpec().digest);
  EXPECT_THAT(a.provenance.decoding_json, HasSubstr("\"max_attempts\":3"));
  EXPECT_THAT(a.validation_report_json, HasSubstr("\"passed\":true"));
  ASSERT_EQ(a.provenance.attempts.size(), 1u);
  const store::GenerationAttempt& at = a.provenance.attempts[0];
  EXPECT_EQ(at.index, 1);
  EXPECT_EQ(at.failure, "");
  auto prompt = store_->GetBlob(at.prompt_digest);
  ASSERT_TRUE(prompt.ok());
  EXPECT_THAT(*prompt, HasSubstr("<|system|>"));
  EXPECT_THAT(*prompt, HasSubstr("Task: Parse a decimal number written with a comma."));
  auto output = store_->GetBlob(at.output_digest);
  ASSERT_TRUE(output.ok());
  EXPECT_EQ(*output, kGoodParse);
  auto digest = pipeline->RequestDigest(*engine::PointFromRecord(LuaSpec()), pipeline->options().decoding);
  ASSERT_TRUE(digest.ok());
  EXPECT_EQ(a.provenance.request_digest, *digest);
  EXPECT_THAT(progress, ElementsAre("parse_amount: attempt 1/3 started", HasSubstr("attempt 1/3 passed")));
  // The spec is stored so the artifact can be regenerated later.
  EXPECT_TRUE(store_->GetGenerationSpec(LuaSpec().digest).ok());
}

TEST_F(PipelineTest, RetriesCarryThePreviousCandidateAndWhyItFailed) {
  std::vector<std::vector<ChatTurn>> prompts;
  ScriptedCodeModel model([&](const std::vector<ChatTurn>& messages) -> std::string {
    prompts.push_back(messages);
    switch (testing::PointAndAttempt(messages).second) {
      case 1: return "```lua\nreturn function(text) return os.time() end\n```";           // a name the sandbox lacks
      case 2: return "```lua\nreturn function(text) return #text * 0.5 end\n```";         // fails test 2
      case 3: return "```lua\nreturn function(text\n```";                                  // does not compile
      default: return kGoodParse;
    }
  });
  auto pipeline = Pipeline(&model, ReviewMode::kApproval, 4);
  auto g = pipeline->Generate(LuaSpec(), Context("parse_amount"));
  ASSERT_TRUE(g.ok()) << g.status();
  const store::ArtifactRecord a = Artifact(g->artifact_digest);
  ASSERT_EQ(a.provenance.attempts.size(), 4u);
  EXPECT_EQ(a.provenance.attempts[0].failure, "it uses names the sandbox does not provide: os (line 1)");
  EXPECT_THAT(a.provenance.attempts[1].failure, HasSubstr("it failed test 2 (input \"10,25\"): expected 10.25, got 2.5"));
  EXPECT_THAT(a.provenance.attempts[2].failure, HasSubstr("it does not compile: "));
  EXPECT_EQ(a.provenance.attempts[3].failure, "");
  for (int i = 0; i < 4; ++i) EXPECT_EQ(a.provenance.attempts[i].index, i + 1);
  ASSERT_EQ(prompts.size(), 4u);
  // Attempt 2 quotes attempt 1's code and its failure.
  ASSERT_EQ(prompts[1].size(), 4u);
  EXPECT_THAT(prompts[1][2].content, HasSubstr("os.time()"));
  EXPECT_THAT(prompts[1][3].content, HasSubstr("does not provide: os (line 1)"));
  EXPECT_THAT(prompts[2][3].content, HasSubstr("expected 10.25, got 2.5"));
}

TEST_F(PipelineTest, AllAttemptsFailingIsACleanFailureWithEveryAttemptRecorded) {
  ScriptedCodeModel model([](const std::vector<ChatTurn>&) { return std::string("```lua\nreturn 42\n```"); });
  auto pipeline = Pipeline(&model, ReviewMode::kApproval, 3);
  auto g = pipeline->Generate(LuaSpec(), Context("parse_amount"));
  ASSERT_TRUE(absl::IsFailedPrecondition(g.status())) << g.status();
  const std::string message(g.status().message());
  EXPECT_THAT(message, HasSubstr("no candidate for 'parse_amount' passed validation in 3 attempts"));
  auto digest = pipeline->RequestDigest(*engine::PointFromRecord(LuaSpec()), pipeline->options().decoding);
  ASSERT_TRUE(digest.ok());
  const std::string hex = digest->substr(store::kDigestPrefix.size());
  EXPECT_THAT(message, HasSubstr("recorded in generations/" + hex));
  EXPECT_THAT(message, HasSubstr("`rote generations get " + hex + "`"));
  EXPECT_EQ(model.calls(), 3);

  auto failed = pipeline->GetFailedGeneration(*digest);
  ASSERT_TRUE(failed.ok()) << failed.status();
  EXPECT_EQ(failed->generation_point, "invoices/parse_amount");
  EXPECT_EQ(failed->model_digest, model.identity().digest);
  ASSERT_EQ(failed->attempts.size(), 3u);
  EXPECT_FALSE(failed->passed);
  EXPECT_EQ(failed->failure, failed->attempts.back().failure);
  EXPECT_EQ(failed->device, "scripted");
  for (const store::GenerationAttempt& at : failed->attempts) {
    EXPECT_FALSE(at.failure.empty());
    EXPECT_TRUE(store_->GetBlob(at.prompt_digest).ok());
    EXPECT_EQ(*store_->GetBlob(at.output_digest), "```lua\nreturn 42\n```");
    // The code extracted from the output, the tokens and the times are recorded too.
    EXPECT_EQ(*store_->GetBlob(at.code_digest), "return 42\n");
    EXPECT_GT(at.prompt_tokens, 0);
    EXPECT_GT(at.output_tokens, 0);
    EXPECT_GT(at.start_ms, 0);
    EXPECT_GE(at.duration_ms, 0);
  }
  // The prompts differ (each retry quotes the one before), the outputs are the same bytes.
  EXPECT_NE(failed->attempts[0].prompt_digest, failed->attempts[1].prompt_digest);
  EXPECT_EQ(failed->attempts[0].output_digest, failed->attempts[2].output_digest);
  // Nothing was stored as an artifact.
  auto page = store_->ListArtifacts(store::ArtifactFilter{}, store::PageRequest{});
  ASSERT_TRUE(page.ok());
  EXPECT_TRUE(page->items.empty());

  // The same request again: the same answer, without the model.
  auto again = pipeline->Generate(LuaSpec(), Context("parse_amount"));
  EXPECT_TRUE(absl::IsFailedPrecondition(again.status()));
  EXPECT_THAT(std::string(again.status().message()), HasSubstr("in 3 attempts"));
  EXPECT_EQ(model.calls(), 3);
}

// Attempt 1 is greedy; later attempts sample at the retry temperature, each with its own key
// from the request digest and the attempt number, so they explore and still repeat exactly.
TEST_F(PipelineTest, RetriesSampleWithTheirOwnKeysAndARetryAsksAgain) {
  ScriptedCodeModel model([](const std::vector<ChatTurn>&) { return std::string("```lua\nreturn 42\n```"); });
  PipelineOptions o;
  o.decoding.max_attempts = 3;
  o.decoding.retry_temperature = 0.75f;
  GenerationPipeline pipeline(store_.get(), &model, runner_.get(), ReviewPolicy(ReviewMode::kApproval), o);
  auto g = pipeline.Generate(LuaSpec(), Context("parse_amount"));
  ASSERT_TRUE(absl::IsFailedPrecondition(g.status())) << g.status();
  std::vector<std::pair<float, uint64_t>> d = model.decodings();
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0].first, 0.0f);
  EXPECT_EQ(d[1].first, 0.75f);
  EXPECT_EQ(d[2].first, 0.75f);
  EXPECT_NE(d[0].second, d[1].second);
  EXPECT_NE(d[1].second, d[2].second);
  // The retry temperature is part of the request: its decoding JSON names it.
  auto digest = pipeline.RequestDigest(*engine::PointFromRecord(LuaSpec()), o.decoding);
  ASSERT_TRUE(digest.ok());
  auto failed = pipeline.GetFailedGeneration(*digest);
  ASSERT_TRUE(failed.ok()) << failed.status();
  EXPECT_THAT(failed->decoding_json, HasSubstr("\"retry_temperature\":0.75"));

  // Asked again, the failed request is answered from its record; a retry asks the model anew,
  // with other sampling keys.
  EXPECT_TRUE(absl::IsFailedPrecondition(pipeline.Generate(LuaSpec(), Context("parse_amount")).status()));
  EXPECT_EQ(model.calls(), 3);
  engine::GenerateContext retry = Context("parse_amount");
  retry.retry = 1;
  auto again = pipeline.Generate(LuaSpec(), retry);
  EXPECT_TRUE(absl::IsFailedPrecondition(again.status()));
  EXPECT_EQ(model.calls(), 6);
  d = model.decodings();
  EXPECT_NE(d[4].second, d[1].second);
  Decoding with_retry = o.decoding;
  with_retry.retry = 1;
  auto retry_digest = pipeline.RequestDigest(*engine::PointFromRecord(LuaSpec()), with_retry);
  ASSERT_TRUE(retry_digest.ok());
  EXPECT_NE(*retry_digest, *digest);
  EXPECT_THAT(std::string(again.status().message()), HasSubstr(retry_digest->substr(store::kDigestPrefix.size())));
}

// Decodings without the retry fields keep the JSON, and so the request digests, they always had.
TEST(DecodingJsonTest, RetryFieldsAppearOnlyWhenSet) {
  Decoding d;
  EXPECT_EQ(DecodingJson(d),
            R"({"max_attempts":3,"max_tokens":512,"seed":"0","temperature":0.0,"top_k":0,"top_p":1.0})");
  d.retry_temperature = 0.5f;
  d.retry = 2;
  const std::string json = DecodingJson(d);
  EXPECT_THAT(json, HasSubstr("\"retry\":2"));
  EXPECT_THAT(json, HasSubstr("\"retry_temperature\":0.5"));
  absl::StatusOr<Decoding> back = ParseDecodingJson(json);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->retry, 2);
  EXPECT_EQ(back->retry_temperature, 0.5f);
  EXPECT_EQ(DecodingJson(*back), json);
  EXPECT_FALSE(ParseDecodingJson(R"({"max_attempts":3,"max_tokens":512,"seed":"0","temperature":0.0,"top_k":0,"top_p":1.0,"retry":-1})").ok());
  EXPECT_FALSE(ParseDecodingJson(R"({"max_attempts":3,"max_tokens":512,"seed":"0","temperature":0.0,"top_k":0,"top_p":1.0,"other":1})").ok());
}

TEST_F(PipelineTest, IdenticalRequestsGiveIdenticalAttemptDigests) {
  auto failing = [](const std::vector<ChatTurn>& m) {
    return "```lua\nreturn function(x) return '" + std::to_string(testing::PointAndAttempt(m).second) + "' end\n```";
  };
  ScriptedCodeModel model_a(failing);
  ScriptedCodeModel model_b(failing);
  auto a = Pipeline(&model_a);
  std::vector<store::GenerationAttempt> first;
  {
    ASSERT_FALSE(a->Generate(LuaSpec(), Context("parse_amount")).ok());
    auto digest = a->RequestDigest(*engine::PointFromRecord(LuaSpec()), a->options().decoding);
    first = a->GetFailedGeneration(*digest)->attempts;
  }
  // A second store, a second pipeline: the bytes of every attempt are the same.
  SetUp();
  auto b = Pipeline(&model_b);
  ASSERT_FALSE(b->Generate(LuaSpec(), Context("parse_amount")).ok());
  auto digest = b->RequestDigest(*engine::PointFromRecord(LuaSpec()), b->options().decoding);
  std::vector<store::GenerationAttempt> second = b->GetFailedGeneration(*digest)->attempts;
  ASSERT_EQ(first.size(), 3u);
  ASSERT_EQ(second.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(first[i].prompt_digest, second[i].prompt_digest);
    EXPECT_EQ(first[i].output_digest, second[i].output_digest);
    EXPECT_EQ(first[i].failure, second[i].failure);
  }
}

TEST_F(PipelineTest, RepeatedRequestIsAnsweredFromTheCache) {
  ScriptedCodeModel model(ScriptedCodeModel::Table({{{"parse_amount", 1}, kGoodParse}}));
  auto pipeline = Pipeline(&model);
  auto before = pipeline->Lookup(LuaSpec(), Context("parse_amount"));
  ASSERT_TRUE(before.ok());
  EXPECT_FALSE(before->has_value());
  auto first = pipeline->Generate(LuaSpec(), Context("parse_amount"));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(model.calls(), 1);
  auto second = pipeline->Generate(LuaSpec(), Context("parse_amount", "bob"));
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(second->from_cache);
  EXPECT_EQ(second->artifact_digest, first->artifact_digest);
  auto looked_up = pipeline->Lookup(LuaSpec(), Context("parse_amount"));
  ASSERT_TRUE(looked_up.ok());
  ASSERT_TRUE(looked_up->has_value());
  EXPECT_EQ((*looked_up)->artifact_digest, first->artifact_digest);
  EXPECT_EQ(model.calls(), 1);

  // Another seed is another request: the model is asked again.
  GenerationJob job;
  job.spec = LuaSpec();
  job.context = Context("parse_amount");
  Decoding other = pipeline->options().decoding;
  other.seed = 7;
  job.decoding = other;
  auto third = pipeline->GenerateAll({job});
  ASSERT_TRUE(third[0].ok()) << third[0].status();
  EXPECT_FALSE(third[0]->from_cache);
  EXPECT_EQ(third[0]->artifact_digest, first->artifact_digest);  // same code, same artifact
  EXPECT_EQ(model.calls(), 2);
}

TEST_F(PipelineTest, PatternsValidateAgainstTheirExamples) {
  ScriptedCodeModel model(ScriptedCodeModel::Table({
      {{"invoice_number", 1}, "```re2\nINV-\\d{4}\n```"},                    // too short
      {{"invoice_number", 2}, "```re2\n(?<year>INV)\n```"},                   // RE2 refuses (?<
      {{"invoice_number", 3}, "```re2\nINV-\\d{4}-\\d{4}\n```"},
  }));
  auto pipeline = Pipeline(&model);
  auto g = pipeline->Generate(InvoicePattern(), Context("invoice_number"));
  ASSERT_TRUE(g.ok()) << g.status();
  const store::ArtifactRecord a = Artifact(g->artifact_digest);
  EXPECT_EQ(a.kind, "re2_pattern");
  EXPECT_EQ(a.source, "INV-\\d{4}-\\d{4}");
  EXPECT_EQ(a.options_json, *engine::NormalizeOptions(ArtifactKind::kRe2Pattern, ""));  // the pinned defaults
  EXPECT_EQ(a.provenance.prompt_template_version, kRe2TemplateVersion);
  ASSERT_EQ(a.provenance.attempts.size(), 3u);
  EXPECT_THAT(a.provenance.attempts[0].failure, HasSubstr("example 1"));
  EXPECT_THAT(a.provenance.attempts[0].failure, HasSubstr("[\"INV-2024\",\"INV-2023\"]"));
  EXPECT_THAT(a.provenance.attempts[1].failure, HasSubstr("(?<"));
}

TEST_F(PipelineTest, SameSpecAloneOrWithTenOthersGivesTheSameArtifact) {
  // Each point's answer depends only on its prompt, as with the exact profile.
  auto script = [](const std::vector<ChatTurn>& m) {
    const std::string name = testing::PointAndAttempt(m).first;
    return "```lua\nreturn function(text)\n  -- " + name + "\n  return tonumber((text:gsub(',', '.')))\nend\n```";
  };
  ScriptedCodeModel alone_model(script);
  auto alone = Pipeline(&alone_model)->Generate(LuaSpec("target"), Context("target"));
  ASSERT_TRUE(alone.ok()) << alone.status();

  SetUp();
  ScriptedCodeModel batch_model(script);
  auto pipeline = Pipeline(&batch_model);
  std::vector<GenerationJob> jobs;
  for (int i = 0; i < 11; ++i) {
    GenerationJob j;
    const std::string name = i == 5 ? "target" : "other_" + std::to_string(i);
    j.spec = LuaSpec(name);
    j.context = Context(name);
    jobs.push_back(j);
  }
  auto together = pipeline->GenerateAll(jobs);
  ASSERT_EQ(together.size(), 11u);
  for (const auto& r : together) ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(together[5]->artifact_digest, alone->artifact_digest);
  // They went to the model together, as one batch of 11.
  EXPECT_THAT(batch_model.batch_sizes(), ElementsAre(11u));
  EXPECT_EQ(Artifact(together[5]->artifact_digest).provenance.attempts[0].prompt_digest,
            Artifact(alone->artifact_digest).provenance.attempts[0].prompt_digest);
}

TEST_F(PipelineTest, ConcurrentIdenticalRequestsAskTheModelOnce) {
  ScriptedCodeModel model(ScriptedCodeModel::Table({{{"parse_amount", 1}, kGoodParse}}));
  auto pipeline = Pipeline(&model);
  model.SetGateOpen(false);
  absl::StatusOr<engine::GeneratedArtifact> first = absl::UnknownError("unset");
  absl::StatusOr<engine::GeneratedArtifact> second = absl::UnknownError("unset");
  std::thread a([&] { first = pipeline->Generate(LuaSpec(), Context("parse_amount", "alice")); });
  model.WaitEntered(1);  // the first request is inside the model
  std::thread b([&] { second = pipeline->Generate(LuaSpec(), Context("parse_amount", "bob")); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  model.SetGateOpen(true);
  a.join();
  b.join();
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(first->artifact_digest, second->artifact_digest);
  EXPECT_EQ(model.calls(), 1);
  // Both asked for it: neither may approve it under the approval policy.
  for (const char* who : {"alice", "bob"}) {
    auto asked = IsRequester(store_.get(), first->artifact_digest, who);
    ASSERT_TRUE(asked.ok());
    EXPECT_TRUE(*asked) << who;
  }
}

TEST_F(PipelineTest, CancelledGenerationStopsWithCancelled) {
  ScriptedCodeModel model(ScriptedCodeModel::Table({{{"parse_amount", 1}, kGoodParse}}));
  auto pipeline = Pipeline(&model);
  engine::GenerateContext ctx = Context("parse_amount");
  ctx.cancelled = [] { return true; };
  auto g = pipeline->Generate(LuaSpec(), ctx);
  EXPECT_TRUE(absl::IsCancelled(g.status())) << g.status();
  // Nothing cached: a later request generates.
  auto later = pipeline->Generate(LuaSpec(), Context("parse_amount"));
  ASSERT_TRUE(later.ok()) << later.status();
  EXPECT_FALSE(later->from_cache);
}

TEST_F(PipelineTest, AutoPolicyApprovesArtifactsWhoseTestsPass) {
  ScriptedCodeModel model(ScriptedCodeModel::Table({{{"parse_amount", 1}, kGoodParse}}));
  auto pipeline = Pipeline(&model, ReviewMode::kAuto);
  auto g = pipeline->Generate(LuaSpec(), Context("parse_amount"));
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(Artifact(g->artifact_digest).state, store::ReviewState::kApproved);
  auto log = store_->ListReviews(g->artifact_digest);
  ASSERT_TRUE(log.ok());
  ASSERT_EQ(log->size(), 1u);
  EXPECT_EQ((*log)[0].principal, kPolicyReviewer);
  EXPECT_EQ((*log)[0].comment, "review policy 'auto': all 2 tests passed");
}

TEST_F(PipelineTest, AutoPolicyApprovesOnlyWhenHeldOutTestsPassToo) {
  auto spec = PointFromParts("parse_amount", ArtifactKind::kLuaFunction, "Parse a decimal number written with a comma.",
                             "", {R"({"input":"1,5","output":1.5})", R"({"input":"10,25","output":10.25})",
                                  R"({"input":"731,125","output":731.125,"held_out":true})"});
  ASSERT_TRUE(spec.ok()) << spec.status();
  std::vector<std::string> prompts;
  ScriptedCodeModel model([&](const std::vector<ChatTurn>& messages) -> std::string {
    std::string prompt;
    for (const ChatTurn& t : messages) prompt += t.content;
    prompts.push_back(prompt);
    if (testing::PointAndAttempt(messages).second == 1) {
      // Passes the two tests it was shown and nothing else.
      return "```lua\nreturn function(t) if t == '1,5' then return 1.5 end return 10.25 end\n```";
    }
    return kGoodParse;
  });
  auto pipeline = Pipeline(&model, ReviewMode::kAuto);
  auto g = pipeline->Generate(spec->ToRecord(), Context("parse_amount"));
  ASSERT_TRUE(g.ok()) << g.status();
  const store::ArtifactRecord a = Artifact(g->artifact_digest);
  ASSERT_EQ(a.provenance.attempts.size(), 2u);
  EXPECT_THAT(a.provenance.attempts[0].failure, HasSubstr("it failed held-out test 3"));
  EXPECT_THAT(a.provenance.attempts[0].failure, ::testing::Not(HasSubstr("731")));
  ASSERT_EQ(prompts.size(), 2u);
  for (const std::string& prompt : prompts) EXPECT_THAT(prompt, ::testing::Not(HasSubstr("731")));
  EXPECT_THAT(prompts[1], HasSubstr("held-out test 3"));
  EXPECT_EQ(a.state, store::ReviewState::kApproved);
  EXPECT_THAT(a.validation_report_json, HasSubstr(R"("held_out":true,"input":"731,125","passed":true)"));
  auto log = store_->ListReviews(g->artifact_digest);
  ASSERT_TRUE(log.ok());
  ASSERT_EQ(log->size(), 1u);
  EXPECT_EQ((*log)[0].comment, "review policy 'auto': all 3 tests passed (1 of them held out)");
}

TEST_F(PipelineTest, AutoPolicyNeverApprovesTheSingleNulPattern) {
  auto spec = PointFromParts("invoice_number", ArtifactKind::kRe2Pattern, "Invoice numbers like INV-2024-0001.", "",
                             {R"({"input":"no invoice here","matches":[]})"});
  ASSERT_TRUE(spec.ok()) << spec.status();
  for (const std::string& pattern : {std::string("\\x00"), std::string(1, '\0')}) {
    SetUp();
    ScriptedCodeModel model([&](const std::vector<ChatTurn>&) { return "```re2\n" + pattern + "\n```"; });
    auto pipeline = Pipeline(&model, ReviewMode::kAuto);
    std::vector<std::string> progress;
    engine::GenerateContext ctx = Context("invoice_number");
    ctx.progress = [&](const std::string& line) { progress.push_back(line); };
    auto g = pipeline->Generate(spec->ToRecord(), ctx);
    ASSERT_TRUE(g.ok()) << g.status();
    // Stored for a person, with the reason in the report and the progress lines.
    const store::ArtifactRecord a = Artifact(g->artifact_digest);
    EXPECT_EQ(a.source, pattern);
    EXPECT_EQ(a.state, store::ReviewState::kPending);
    EXPECT_THAT(a.validation_report_json, HasSubstr("no example expects a match"));
    auto log = store_->ListReviews(g->artifact_digest);
    ASSERT_TRUE(log.ok());
    EXPECT_TRUE(log->empty());
    EXPECT_THAT(progress, ::testing::Contains(HasSubstr("waits for a reviewer: no example expects a match")));
  }
}

TEST_F(PipelineTest, AutoPolicyRefusesAPatternThatMatchesTheEmptyString) {
  ScriptedCodeModel model(ScriptedCodeModel::Table({{{"invoice_number", 1}, "```re2\n(INV-\\d{4}-\\d{4})?\n```"},
                                                    {{"invoice_number", 2}, "```re2\nINV-\\d{4}-\\d{4}\n```"}}));
  auto pipeline = Pipeline(&model, ReviewMode::kAuto);
  auto g = pipeline->Generate(InvoicePattern(), Context("invoice_number"));
  ASSERT_TRUE(g.ok()) << g.status();
  const store::ArtifactRecord a = Artifact(g->artifact_digest);
  ASSERT_EQ(a.provenance.attempts.size(), 2u);
  EXPECT_THAT(a.provenance.attempts[0].failure,
              HasSubstr("it was refused as trivially wrong: the pattern matches the empty string"));
  EXPECT_EQ(a.source, "INV-\\d{4}-\\d{4}");
  EXPECT_EQ(a.state, store::ReviewState::kApproved);
}

TEST_F(PipelineTest, PerBlueprintPolicyOverridesTheServer) {
  ScriptedCodeModel model(ScriptedCodeModel::Table({{{"parse_amount", 1}, kGoodParse}}));
  ReviewPolicy policy(ReviewMode::kAuto);
  policy.Set("invoices", ReviewMode::kApproval);
  GenerationPipeline pipeline(store_.get(), &model, runner_.get(), policy, PipelineOptions{});
  auto g = pipeline.Generate(LuaSpec(), Context("parse_amount"));
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(Artifact(g->artifact_digest).state, store::ReviewState::kPending);
}

TEST_F(PipelineTest, FourEyesRuleKeepsRequestersFromApproving) {
  ScriptedCodeModel model(ScriptedCodeModel::Table({{{"parse_amount", 1}, kGoodParse}}));
  auto pipeline = Pipeline(&model, ReviewMode::kApproval);
  auto g = pipeline->Generate(LuaSpec(), Context("parse_amount", "alice"));
  ASSERT_TRUE(g.ok()) << g.status();
  const store::ArtifactRecord a = Artifact(g->artifact_digest);
  const ReviewPolicy approval(ReviewMode::kApproval);
  absl::Status denied = CheckMayReview(store_.get(), approval, a, store::ReviewState::kApproved, "alice", false);
  EXPECT_TRUE(absl::IsPermissionDenied(denied)) << denied;
  EXPECT_THAT(std::string(denied.message()), HasSubstr("'alice' asked for the generation of artifact"));
  EXPECT_THAT(std::string(denied.message()), HasSubstr("another principal with the review role"));
  EXPECT_TRUE(CheckMayReview(store_.get(), approval, a, store::ReviewState::kApproved, "carol", false).ok());
  // Refusing your own is fine; so is approving under 'auto'.
  EXPECT_TRUE(CheckMayReview(store_.get(), approval, a, store::ReviewState::kRejected, "alice", false).ok());
  EXPECT_TRUE(
      CheckMayReview(store_.get(), ReviewPolicy(ReviewMode::kAuto), a, store::ReviewState::kApproved, "alice", false).ok());
  absl::Status local = CheckMayReview(store_.get(), approval, a, store::ReviewState::kApproved, "alice", true);
  EXPECT_THAT(std::string(local.message()), HasSubstr("--review-policy auto"));
}

TEST_F(PipelineTest, RejectedArtifactIsNotHandedOutAgain) {
  ScriptedCodeModel model(ScriptedCodeModel::Table({{{"parse_amount", 1}, kGoodParse}}));
  auto pipeline = Pipeline(&model);
  auto g = pipeline->Generate(LuaSpec(), Context("parse_amount"));
  ASSERT_TRUE(g.ok());
  store::ReviewRequest reject;
  reject.artifact_digest = g->artifact_digest;
  reject.principal = "carol";
  reject.decision = store::ReviewState::kRejected;
  ASSERT_TRUE(store_->ReviewArtifact(reject).ok());
  auto again = pipeline->Generate(LuaSpec(), Context("parse_amount"));
  EXPECT_TRUE(absl::IsFailedPrecondition(again.status()));
  EXPECT_THAT(std::string(again.status().message()), HasSubstr("which a reviewer rejected"));
}

TEST_F(PipelineTest, RegenerationReproducesTheBytesOrSaysWhatDiffers) {
  std::atomic<bool> drift{false};
  ScriptedCodeModel model([&](const std::vector<ChatTurn>& m) -> std::string {
    if (testing::PointAndAttempt(m).second == 1) return "```lua\nreturn nil\n```";
    return drift ? std::string("```lua\nreturn function(t) return tonumber((t:gsub(',', '.'))) end\n```")
                 : std::string(kGoodParse);
  });
  auto pipeline = Pipeline(&model);
  auto g = pipeline->Generate(LuaSpec(), Context("parse_amount"));
  ASSERT_TRUE(g.ok()) << g.status();
  const int calls = model.calls();
  auto same = pipeline->Regenerate(Artifact(g->artifact_digest), nullptr);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_TRUE(same->matched) << same->detail;
  EXPECT_EQ(same->regenerated_digest, g->artifact_digest);
  EXPECT_EQ(model.calls(), calls + 2);  // regeneration bypasses the cache

  drift = true;
  auto differs = pipeline->Regenerate(Artifact(g->artifact_digest), nullptr);
  ASSERT_TRUE(differs.ok()) << differs.status();
  EXPECT_FALSE(differs->matched);
  EXPECT_NE(differs->regenerated_digest, g->artifact_digest);
  EXPECT_THAT(differs->detail, HasSubstr("attempt 2: output"));

  // Another model cannot re-derive it.
  ScriptedCodeModel other([](const std::vector<ChatTurn>&) { return std::string(kGoodParse); },
                          std::string("sha256:") + std::string(64, 'b'));
  auto elsewhere = Pipeline(&other)->Regenerate(Artifact(g->artifact_digest), nullptr);
  EXPECT_TRUE(absl::IsFailedPrecondition(elsewhere.status()));
  EXPECT_THAT(std::string(elsewhere.status().message()), HasSubstr("was generated by model sha256:aaaa"));
}

// Under constrain_replies every attempt is held to its kind's reply grammar: the model gets the
// Lua grammar with exactly the sandbox's names (no os, io, load) or the RE2 grammar; the grammar's
// digest is in the recorded decoding and so in the request digest; an artifact made under a
// grammar regenerates under it whatever the regenerating server's own setting.
TEST_F(PipelineTest, ConstrainedRepliesNameTheirGrammarInTheRequest) {
  ScriptedCodeModel model(ScriptedCodeModel::Table(
      {{{"parse_amount", 1}, kGoodParse}, {{"invoice_number", 1}, "```re2\nINV-\\d{4}-\\d{4}\n```"}}));
  PipelineOptions o;
  o.constrain_replies = true;
  GenerationPipeline constrained(store_.get(), &model, runner_.get(), ReviewPolicy(ReviewMode::kApproval), o);
  auto lua = constrained.Generate(LuaSpec(), Context("parse_amount"));
  ASSERT_TRUE(lua.ok()) << lua.status();
  auto re2 = constrained.Generate(InvoicePattern(), Context("invoice_number"));
  ASSERT_TRUE(re2.ok()) << re2.status();
  const std::vector<CompletionConstraint> seen = model.constraints();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].grammar, "lua_reply");
  ASSERT_TRUE(seen[0].allowed_globals.has_value());
  const std::vector<std::string>& names = *seen[0].allowed_globals;
  for (const char* present : {"string", "table", "math", "pairs", "tonumber", "utf8"})
    EXPECT_NE(std::find(names.begin(), names.end(), present), names.end()) << present;
  for (const char* absent : {"os", "io", "load", "require", "debug", "dofile"})
    EXPECT_EQ(std::find(names.begin(), names.end(), absent), names.end()) << absent;
  EXPECT_EQ(seen[1].grammar, "re2_reply");
  EXPECT_FALSE(seen[1].allowed_globals.has_value());

  const store::ArtifactRecord a = Artifact(lua->artifact_digest);
  auto decoding = ParseDecodingJson(a.provenance.decoding_json);
  ASSERT_TRUE(decoding.ok()) << decoding.status();
  EXPECT_EQ(decoding->grammar, ConstraintDigest(seen[0]));
  EXPECT_EQ(ParseDecodingJson(Artifact(re2->artifact_digest).provenance.decoding_json)->grammar,
            ConstraintDigest(seen[1]));
  EXPECT_NE(ConstraintDigest(seen[0]), ConstraintDigest(seen[1]));
  // The same spec unconstrained is another request.
  auto free = Pipeline(&model);
  auto free_digest = free->RequestDigest(*engine::PointFromRecord(LuaSpec()), free->options().decoding);
  ASSERT_TRUE(free_digest.ok());
  EXPECT_NE(*free_digest, a.provenance.request_digest);
  // Regenerated by a server that does not constrain: the recorded grammar still holds.
  auto again = free->Regenerate(a, nullptr);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->matched) << again->detail;
  EXPECT_EQ(model.constraints().back().grammar, "lua_reply");
}

TEST(DecodingJsonTest, GrammarAppearsOnlyWhenSetAndMustBeADigest) {
  Decoding d;
  EXPECT_EQ(DecodingJson(d).find("grammar"), std::string::npos);
  d.grammar = std::string(64, 'a');
  EXPECT_THAT(DecodingJson(d), HasSubstr("\"grammar\":\"" + std::string(64, 'a') + "\""));
  auto back = ParseDecodingJson(DecodingJson(d));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->grammar, d.grammar);
  for (const std::string& bad : {std::string("lua_reply"), std::string(63, 'a'), std::string(64, 'A')}) {
    d.grammar = bad;
    EXPECT_TRUE(absl::IsInvalidArgument(CheckDecoding(d))) << bad;
  }
}

}  // namespace
}  // namespace rote::orchestrator::generate
