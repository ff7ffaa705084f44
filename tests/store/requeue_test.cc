// Store::RequeueRun: a running run a draining server gives back becomes pending again in one
// transaction, without the steps of its abandoned attempt, with the event that says why.
#include "gtest/gtest.h"
#include "tests/store/test_util.h"

namespace rote::store {
namespace {

using testing::MakeArtifact;
using testing::MakeBlueprint;
using testing::OpenOrDie;
using testing::TempDir;

class RequeueTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StoreOptions options;
    options.path = dir_.path();
    store_ = OpenOrDie(options);
    bp_ = *store_->PutBlueprint(MakeBlueprint("invoice_totals", "1.0.0"));
    artifact_ = *store_->PutArtifact(MakeArtifact("invoice_totals/parse", "return 1"));
    NewRun run;
    run.blueprint_digest = bp_.digest;
    run.input_digest = store_->PutBlob("{}")->digest;
    run.bindings = {{"parse", artifact_.digest, "lockfile"}};
    run.submitter = "alice";
    id_ = store_->CreateRun(run)->run.id;
  }

  TempDir dir_;
  std::unique_ptr<Store> store_;
  BlueprintRecord bp_;
  ArtifactRecord artifact_;
  int64_t id_ = 0;
};

TEST_F(RequeueTest, ARunningRunBecomesPendingWithoutItsStepsAndWithTheEvent) {
  ASSERT_TRUE(store_->StartRun(id_).ok());
  StepRecord step{0, "parse", artifact_.digest, Sha256Digest("in"), Sha256Digest("out")};
  StepRecord second = step;
  second.index = 1;
  ASSERT_TRUE(store_->AppendSteps(id_, {step, second}).ok());
  ASSERT_TRUE(store_->AppendRunEvent(id_, "events", "running").ok());

  absl::StatusOr<RunRecord> requeued = store_->RequeueRun(id_, "events", "re-queued");
  ASSERT_TRUE(requeued.ok()) << requeued.status();
  EXPECT_EQ(requeued->state, RunState::kPending);
  EXPECT_EQ(requeued->step_count, 0);
  EXPECT_EQ(requeued->start_ms, 0);
  EXPECT_EQ(requeued->bindings.size(), 1u) << "bindings stay: the next attempt runs the same code";
  EXPECT_TRUE(store_->ListSteps(id_)->empty());
  std::vector<RunEvent> events = *store_->ListRunEvents(id_, 0, 0);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].payload, "re-queued");

  // The next attempt journals from index 0 and finishes normally.
  ASSERT_TRUE(store_->StartRun(id_).ok());
  ASSERT_TRUE(store_->AppendSteps(id_, {step}).ok());
  EXPECT_EQ(store_->GetRun(id_)->step_count, 1);
}

TEST_F(RequeueTest, OnlyARunningRunCanBeRequeued) {
  EXPECT_EQ(store_->RequeueRun(id_, "events", "x").status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(store_->FinishRun(id_, {RunState::kCancelled, "", "user"}).ok());
  EXPECT_EQ(store_->RequeueRun(id_, "events", "x").status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->GetRun(id_)->state, RunState::kCancelled);
  EXPECT_EQ(store_->RequeueRun(424242, "events", "x").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->RequeueRun(id_, "", "x").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(store_->ListRunEvents(id_, 0, 0)->empty()) << "a refused re-queue records nothing";
}

}  // namespace
}  // namespace rote::store
