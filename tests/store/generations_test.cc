// Generation records: every request, passed or failed, with its attempts; their pages and
// filters; the attempt fields artifacts carry too; the paged step journal; and the migration
// that carries an earlier rote's records over.
#include <sqlite3.h>

#include "gtest/gtest.h"
#include "store/digest.h"
#include "store/schema.h"
#include "store/sqlite.h"
#include "store/store.h"
#include "tests/store/test_util.h"

namespace rote::store {
namespace {

using testing::FakeClock;
using testing::MakeArtifact;
using testing::MakeBlueprint;
using testing::OpenOrDie;
using testing::TempDir;

class GenerationsTest : public testing::BackendTest {
 protected:
  void SetUp() override {
    BackendTest::SetUp();
    if (!Ready()) return;
    StoreOptions o;
    o.path = StorePath();
    o.clock_ms = clock_.Fn();
    store_ = OpenOrDie(o);
  }

  GenerationAttempt Attempt(int32_t index, const std::string& prompt, const std::string& output,
                            const std::string& failure) {
    GenerationAttempt a;
    a.index = index;
    a.prompt_digest = store_->PutBlob(prompt)->digest;
    a.output_digest = store_->PutBlob(output)->digest;
    a.code_digest = store_->PutBlob("code of " + output)->digest;
    a.failure = failure;
    a.prompt_tokens = 100 + index;
    a.output_tokens = 10 + index;
    a.start_ms = 1000 * index;
    a.duration_ms = 7 * index;
    return a;
  }

  GenerationRecord Failed(const std::string& request, const std::string& point) {
    GenerationRecord g;
    g.request_digest = Sha256Digest(request);
    g.generation_point = point;
    g.spec_digest = Sha256Digest("spec");
    g.model_digest = Sha256Digest("model");
    g.numerics_profile = "exact";
    g.prompt_template_version = "lua-v1";
    g.decoding_json = "{}";
    g.device = "cpu";
    g.attempts = {Attempt(1, "p1 " + request, "o1", "it failed 1"),
                  Attempt(2, "p2 " + request, "o2", "it failed 2")};
    g.failure = "it failed 2";
    return g;
  }

  FakeClock clock_;
  std::unique_ptr<Store> store_;
};

ROTE_BOTH_BACKENDS(GenerationsTest);

TEST_P(GenerationsTest, FailedGenerationRoundTripsWithEveryAttemptField) {
  const GenerationRecord g = Failed("r1", "bp/p");
  absl::StatusOr<GenerationRecord> put = store_->PutGeneration(g);
  ASSERT_TRUE(put.ok()) << put.status();
  absl::StatusOr<GenerationRecord> got = store_->GetGeneration(g.request_digest);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_FALSE(got->passed);
  EXPECT_EQ(got->artifact_digest, "");
  EXPECT_EQ(got->failure, "it failed 2");
  EXPECT_EQ(got->device, "cpu");
  ASSERT_EQ(got->attempts.size(), 2u);
  EXPECT_EQ(got->attempts[1].index, 2);
  EXPECT_EQ(got->attempts[1].prompt_digest, g.attempts[1].prompt_digest);
  EXPECT_EQ(got->attempts[1].code_digest, g.attempts[1].code_digest);
  EXPECT_EQ(got->attempts[1].prompt_tokens, 102);
  EXPECT_EQ(got->attempts[1].output_tokens, 12);
  EXPECT_EQ(got->attempts[1].start_ms, 2000);
  EXPECT_EQ(got->attempts[1].duration_ms, 14);
  EXPECT_GT(got->create_ms, 0);
  // The first record of a request stays.
  GenerationRecord other = Failed("r1", "bp/other");
  EXPECT_EQ(store_->PutGeneration(other)->generation_point, "bp/p");
}

TEST_P(GenerationsTest, RejectsMissingBlobsArtifactsAndBadDigests) {
  GenerationRecord g = Failed("r2", "bp/p");
  g.attempts[0].code_digest = Sha256Digest("never stored");
  EXPECT_EQ(store_->PutGeneration(g).status().code(), absl::StatusCode::kFailedPrecondition);
  g = Failed("r2", "bp/p");
  g.passed = true;
  g.artifact_digest = Sha256Digest("no such artifact");
  EXPECT_EQ(store_->PutGeneration(g).status().code(), absl::StatusCode::kFailedPrecondition);
  g.artifact_digest = "";
  EXPECT_EQ(store_->PutGeneration(g).status().code(), absl::StatusCode::kInvalidArgument);
  g = Failed("r2", "bp/p");
  g.attempts[0].duration_ms = -1;
  EXPECT_EQ(store_->PutGeneration(g).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->GetGeneration("sha256:xyz").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->GetGeneration(Sha256Digest("r2")).status().code(), absl::StatusCode::kNotFound);
}

TEST_P(GenerationsTest, PassedGenerationLinksItsArtifactWhoseAttemptsKeepTheNewFields) {
  ArtifactRecord a = MakeArtifact("bp/p", "return 1");
  a.provenance.attempts = {Attempt(1, "prompt", "output", "")};
  absl::StatusOr<ArtifactRecord> stored = store_->PutArtifact(a);
  ASSERT_TRUE(stored.ok()) << stored.status();
  ASSERT_EQ(stored->provenance.attempts.size(), 1u);
  EXPECT_EQ(stored->provenance.attempts[0].code_digest, a.provenance.attempts[0].code_digest);
  EXPECT_EQ(stored->provenance.attempts[0].prompt_tokens, 101);
  EXPECT_EQ(stored->provenance.attempts[0].duration_ms, 7);

  GenerationRecord g = Failed("r3", "bp/p");
  g.passed = true;
  g.failure = "";
  g.artifact_digest = stored->digest;
  ASSERT_TRUE(store_->PutGeneration(g).ok());
  EXPECT_EQ(store_->GetGeneration(g.request_digest)->artifact_digest, stored->digest);
}

TEST_P(GenerationsTest, ListPagesOldestFirstAndFilters) {
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(store_->PutGeneration(Failed("req" + std::to_string(i), i % 2 ? "bp/odd" : "bp/even")).ok());
  }
  ArtifactRecord a = *store_->PutArtifact(MakeArtifact("bp/even", "return 2"));
  GenerationRecord passed = Failed("req-passed", "bp/even");
  passed.passed = true;
  passed.failure = "";
  passed.artifact_digest = a.digest;
  ASSERT_TRUE(store_->PutGeneration(passed).ok());

  std::vector<std::string> seen;
  PageRequest page{2, ""};
  do {
    absl::StatusOr<Page<GenerationRecord>> p = store_->ListGenerations({}, page);
    ASSERT_TRUE(p.ok()) << p.status();
    for (const GenerationRecord& g : p->items) seen.push_back(g.request_digest);
    page.page_token = p->next_page_token;
  } while (!page.page_token.empty());
  ASSERT_EQ(seen.size(), 6u);
  EXPECT_EQ(seen[0], Sha256Digest("req0"));
  EXPECT_EQ(seen[5], Sha256Digest("req-passed"));

  auto even = store_->ListGenerations({"bp/even", false}, {});
  ASSERT_TRUE(even.ok());
  EXPECT_EQ(even->items.size(), 4u);
  auto even_failed = store_->ListGenerations({"bp/even", true}, {});
  ASSERT_TRUE(even_failed.ok());
  EXPECT_EQ(even_failed->items.size(), 3u);
  for (const GenerationRecord& g : even_failed->items) EXPECT_FALSE(g.passed);

  // A token of one filter means nothing to another.
  auto first = store_->ListGenerations({"bp/even", false}, {1, ""});
  ASSERT_FALSE(first->next_page_token.empty());
  EXPECT_EQ(store_->ListGenerations({"bp/odd", false}, {1, first->next_page_token}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_P(GenerationsTest, FindsRequestDigestsByPrefix) {
  for (const char* tail : {"1", "2"}) {
    GenerationRecord g = Failed("x", "bp/p");
    g.request_digest = "sha256:" + std::string(63, 'a') + tail;
    ASSERT_TRUE(store_->PutGeneration(g).ok());
  }
  ASSERT_TRUE(store_->PutGeneration(Failed("other", "bp/p")).ok());
  auto both = store_->FindGenerationsByPrefix("sha256:aaaaaaaa", 6);
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(*both, (std::vector<std::string>{"sha256:" + std::string(63, 'a') + "1",
                                             "sha256:" + std::string(63, 'a') + "2"}));
  EXPECT_EQ(store_->FindGenerationsByPrefix("sha256:" + std::string(63, 'a') + "2", 6)->size(), 1u);
  EXPECT_EQ(store_->FindGenerationsByPrefix("sha256:aaaaaaaa", 1)->size(), 1u);
  EXPECT_TRUE(store_->FindGenerationsByPrefix("sha256:ffffffff", 6)->empty());
  EXPECT_EQ(store_->FindGenerationsByPrefix("sha256:AAAA", 6).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->FindGenerationsByPrefix("aaaa", 6).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->FindGenerationsByPrefix("sha256:aa%", 6).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(GenerationsTest, StepsPageInIndexOrder) {
  BlueprintRecord bp = *store_->PutBlueprint(MakeBlueprint("steps", "1.0.0"));
  ArtifactRecord a = *store_->PutArtifact(MakeArtifact("steps/p", "return 1"));
  NewRun run;
  run.blueprint_digest = bp.digest;
  run.input_digest = store_->PutBlob("{}")->digest;
  run.engine_profile_json = "{}";
  run.submitter = "alice";
  const int64_t id = store_->CreateRun(run)->run.id;
  ASSERT_TRUE(store_->StartRun(id).ok());
  std::vector<StepRecord> steps;
  for (int i = 0; i < 7; ++i) {
    steps.push_back(StepRecord{i, "p", a.digest, run.input_digest, run.input_digest});
  }
  ASSERT_TRUE(store_->AppendSteps(id, steps).ok());
  std::vector<int64_t> seen;
  PageRequest page{3, ""};
  do {
    auto p = store_->ListStepsPage(id, page);
    ASSERT_TRUE(p.ok()) << p.status();
    for (const StepRecord& s : p->items) seen.push_back(s.index);
    page.page_token = p->next_page_token;
  } while (!page.page_token.empty());
  EXPECT_EQ(seen, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(store_->ListStepsPage(id + 1, {}).status().code(), absl::StatusCode::kNotFound);
  auto p = store_->ListStepsPage(id, {3, ""});
  EXPECT_EQ(store_->ListStepsPage(id + 1, {3, p->next_page_token}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// An earlier rote kept failed generations as key-value records and passed ones only in the
// artifact's provenance; the migration carries both into the generations table.
TEST(GenerationsMigrationTest, CarriesFailedRecordsAndArtifactProvenanceOver) {
  TempDir dir;
  const std::string path = dir.path() + "/old.db";
  const std::string prompt = Sha256Digest("old prompt");
  const std::string output = Sha256Digest("old output");
  const std::string request = Sha256Digest("old request");
  const std::string passed_request = Sha256Digest("passed request");
  {
    auto conn = internal::Connection::Open(path, {});
    ASSERT_TRUE(conn.ok());
    ASSERT_TRUE((*conn)->QueryText("PRAGMA journal_mode = WAL").ok());
    ASSERT_TRUE(internal::Migrate(**conn, 5).ok());
    const std::string attempts =
        R"([{\"failure\":\"first\",\"index\":1,\"output_digest\":\")" + output +
        R"(\",\"prompt_digest\":\")" + prompt + R"(\"},{\"failure\":\"second\",\"index\":2,\"output_digest\":\"\",\"prompt_digest\":\")" +
        prompt + R"(\"}])";
    const std::string record = R"({"attempts":")" + attempts +
                               R"(","decoding":"{\"seed\":\"0\"}","generation_point":"old/p","model_digest":"m",)"
                               R"("prompt_template_version":"lua-v1","request_digest":")" +
                               request + R"(","spec_digest":"s"})";
    std::string sql =
        "INSERT INTO blobs VALUES ('" + prompt + "', 10, 'inline', CAST('old prompt' AS BLOB), 1);"
        "INSERT INTO blobs VALUES ('" + output + "', 10, 'inline', CAST('old output' AS BLOB), 1);"
        "INSERT INTO kv VALUES ('generation/failed', '" + request + "', CAST('" + record + "' AS BLOB), 5);"
        "INSERT INTO artifacts (digest, kind, generation_point, revision, source, options_json, "
        "validation_report_json, spec_digest, model_digest, numerics_profile, "
        "prompt_template_version, decoding_json, request_digest, device, author, state, "
        "state_version, create_ms) VALUES ('" + Sha256Digest("art") +
        "', 'lua_function', 'old/p', 1, 'return 0', '{}', '{}', 's', 'm', 'exact', 'lua-v1', '{}', '" +
        passed_request + "', 'cpu', 'model', 'pending', 0, 3);"
        "INSERT INTO artifact_attempts VALUES (1, 1, '" + prompt + "', '" + output + "', '');";
    ASSERT_TRUE((*conn)->ExecScript(sql).ok());
  }
  StoreOptions options;
  options.path = path;
  options.full_integrity_check_on_open = true;
  std::unique_ptr<Store> store = OpenOrDie(options);
  absl::StatusOr<GenerationRecord> failed = store->GetGeneration(request);
  ASSERT_TRUE(failed.ok()) << failed.status();
  EXPECT_FALSE(failed->passed);
  EXPECT_EQ(failed->generation_point, "old/p");
  EXPECT_EQ(failed->decoding_json, "{\"seed\":\"0\"}");
  EXPECT_EQ(failed->failure, "second");
  ASSERT_EQ(failed->attempts.size(), 2u);
  EXPECT_EQ(failed->attempts[0].output_digest, output);
  EXPECT_EQ(failed->attempts[1].output_digest, "");
  EXPECT_EQ(failed->attempts[1].prompt_digest, prompt);
  EXPECT_EQ(store->KvGet("generation/failed", request).status().code(), absl::StatusCode::kNotFound);

  absl::StatusOr<GenerationRecord> passed = store->GetGeneration(passed_request);
  ASSERT_TRUE(passed.ok()) << passed.status();
  EXPECT_TRUE(passed->passed);
  EXPECT_EQ(passed->artifact_digest, Sha256Digest("art"));
  ASSERT_EQ(passed->attempts.size(), 1u);
  EXPECT_EQ(passed->attempts[0].prompt_digest, prompt);
  EXPECT_EQ(store->GetArtifact(Sha256Digest("art"))->provenance.attempts[0].prompt_tokens, 0);
}

}  // namespace
}  // namespace rote::store
