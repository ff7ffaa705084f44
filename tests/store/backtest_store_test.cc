// The store's backtest section: the recorded calls of a generation point across runs (order,
// pages, the blueprint-name filter, values read and verified in bulk) and stored backtests.
#include <sqlite3.h>

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "store/digest.h"
#include "store/store.h"
#include "tests/store/test_util.h"

namespace rote::store {
namespace {

using testing::FakeClock;
using testing::MakeArtifact;
using testing::MakeBlueprint;
using testing::OpenOrDie;
using testing::TempDir;

class BacktestStoreTest : public testing::BackendTest {
 protected:
  void SetUp() override {
    BackendTest::SetUp();
    if (!Ready()) return;
    StoreOptions o;
    o.path = StorePath();
    o.clock_ms = clock_.Fn();
    store_ = OpenOrDie(o);
    bp_ = *store_->PutBlueprint(MakeBlueprint("mail", "1"));
    other_ = *store_->PutBlueprint(MakeBlueprint("other", "1"));
    artifact_ = *store_->PutArtifact(MakeArtifact("mail/parse", "return 1"));
  }

  // A run of `bp` whose steps alternate points "parse" and "find"; inputs "in<run>-<i>".
  int64_t RunWithSteps(const BlueprintRecord& bp, int steps) {
    NewRun run;
    run.blueprint_digest = bp.digest;
    run.input_digest = store_->PutBlob("{}")->digest;
    run.submitter = "alice";
    int64_t id = store_->CreateRun(run)->run.id;
    std::vector<StepRecord> records;
    for (int i = 0; i < steps; ++i) {
      std::string in = "\"in" + std::to_string(id) + "-" + std::to_string(i) + "\"";
      std::string out = "\"out" + std::to_string(id) + "-" + std::to_string(i) + "\"";
      records.push_back({i, i % 2 == 0 ? "parse" : "find", artifact_.digest, store_->PutBlob(in)->digest,
                         store_->PutBlob(out)->digest});
    }
    EXPECT_TRUE(store_->AppendSteps(id, records).ok());
    return id;
  }

  FakeClock clock_;
  std::unique_ptr<Store> store_;
  BlueprintRecord bp_, other_;
  ArtifactRecord artifact_;
};

ROTE_BOTH_BACKENDS(BacktestStoreTest);

TEST_P(BacktestStoreTest, PointStepsNewestRunFirstInStepOrderWithValues) {
  int64_t r1 = RunWithSteps(bp_, 4);
  RunWithSteps(other_, 4);  // same point name, other blueprint: not listed
  int64_t r3 = RunWithSteps(bp_, 3);
  auto steps = store_->ListPointSteps({"mail", "parse", 0, -1, 100});
  ASSERT_TRUE(steps.ok()) << steps.status();
  ASSERT_EQ(steps->size(), 4u);
  EXPECT_EQ((*steps)[0].run_id, r3);
  EXPECT_EQ((*steps)[0].index, 0);
  EXPECT_EQ((*steps)[1].run_id, r3);
  EXPECT_EQ((*steps)[1].index, 2);
  EXPECT_EQ((*steps)[2].run_id, r1);
  EXPECT_EQ((*steps)[3].index, 2);
  EXPECT_TRUE((*steps)[0].values_read);
  EXPECT_EQ((*steps)[0].input, "\"in" + std::to_string(r3) + "-0\"");
  EXPECT_EQ((*steps)[0].output, "\"out" + std::to_string(r3) + "-0\"");
  EXPECT_EQ((*steps)[0].artifact_digest, artifact_.digest);
  EXPECT_TRUE(store_->ListPointSteps({"mail", "nothing", 0, -1, 100})->empty());
  EXPECT_EQ(store_->ListPointSteps({"", "parse", 0, -1, 100}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(BacktestStoreTest, PointStepsPageAfterTheLastOne) {
  RunWithSteps(bp_, 5);
  RunWithSteps(bp_, 5);
  RunWithSteps(bp_, 5);
  std::vector<std::pair<int64_t, int64_t>> all;
  PointStepQuery q{"mail", "parse", 0, -1, 2};
  while (true) {
    auto page = store_->ListPointSteps(q);
    ASSERT_TRUE(page.ok()) << page.status();
    if (page->empty()) break;
    for (const PointStep& s : *page) all.emplace_back(s.run_id, s.index);
    q.after_run_id = page->back().run_id;
    q.after_index = page->back().index;
  }
  auto whole = store_->ListPointSteps({"mail", "parse", 0, -1, 100});
  ASSERT_EQ(all.size(), 9u);
  // A page ends at the step whose values pass the byte budget (each step here holds 15 bytes).
  auto budget = store_->ListPointSteps({"mail", "parse", 0, -1, 100, 20});
  ASSERT_TRUE(budget.ok()) << budget.status();
  EXPECT_EQ(budget->size(), 2u);
  EXPECT_EQ(store_->ListPointSteps({"mail", "parse", 0, -1, 100, 1})->size(), 1u);
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(all[i].first, (*whole)[i].run_id);
    EXPECT_EQ(all[i].second, (*whole)[i].index);
  }
}

TEST_P(BacktestStoreTest, DamagedValueIsDataLoss) {
  int64_t r = RunWithSteps(bp_, 1);
  store_.reset();
  std::string digest = Sha256Digest("\"in" + std::to_string(r) + "-0\"");
  const std::string damaged = "'\"XX" + std::to_string(r) + "-0\"'";
  if (GetParam() == testing::Backend::kSqlite) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((ScratchDir() + "/data/rote.db").c_str(), &db), SQLITE_OK);
    std::string sql = "UPDATE blobs SET data = CAST(" + damaged + " AS BLOB) WHERE digest = '" + digest + "'";
    ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
  } else {
#ifdef ROTE_TEST_POSTGRESQL
    ASSERT_EQ(testing::PgExec(StorePath(), "UPDATE blobs SET data = convert_to(" + damaged +
                                               ", 'UTF8') WHERE digest = '" + digest + "'"),
              "");
#endif
  }
  StoreOptions o;
  o.path = StorePath();
  store_ = OpenOrDie(o);
  EXPECT_EQ(store_->ListPointSteps({"mail", "parse", 0, -1, 100}).status().code(), absl::StatusCode::kDataLoss);
}

TEST_P(BacktestStoreTest, NewestBacktestWinsAndDifferencesAreCapped) {
  EXPECT_EQ(store_->GetBacktest(artifact_.digest, true).status().code(), absl::StatusCode::kNotFound);
  BacktestRecord b;
  b.artifact_digest = artifact_.digest;
  b.principal = "rita";
  b.calls = 3;
  b.equal = 1;
  b.different = 1;
  b.errors = 1;
  b.differences.push_back({7, 2, "\"a\"", "\"A\"", "\"a\"", "", artifact_.digest, false});
  b.differences.push_back({7, 4, "\"b\"", "\"B\"", "", "boom", artifact_.digest, true});
  ASSERT_TRUE(store_->PutBacktest(b).ok());
  b.calls = 5;
  b.differences.resize(1);
  ASSERT_TRUE(store_->PutBacktest(b).ok());
  auto got = store_->GetBacktest(artifact_.digest, true);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->calls, 5);
  EXPECT_EQ(got->principal, "rita");
  ASSERT_EQ(got->differences.size(), 1u);
  EXPECT_EQ(got->differences[0].recorded_json, "\"A\"");
  EXPECT_EQ(got->differences[0].run_id, 7);
  EXPECT_GT(got->create_ms, 0);
  EXPECT_TRUE(store_->GetBacktest(artifact_.digest, false)->differences.empty());

  b.differences.assign(kMaxBacktestDifferences + 1, b.differences[0]);
  EXPECT_EQ(store_->PutBacktest(b).status().code(), absl::StatusCode::kInvalidArgument);
  b.differences.clear();
  b.artifact_digest = Sha256Digest("not stored");
  EXPECT_EQ(store_->PutBacktest(b).status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace rote::store
