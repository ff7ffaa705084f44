// Store::RequeueRun: a running run a draining server gives back becomes pending again in one
// transaction, without the steps of its abandoned attempt, with the event that says why; on
// SQLite and on PostgreSQL.
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/store/test_util.h"

namespace rote::store {
namespace {

using testing::MakeArtifact;
using testing::MakeBlueprint;
using testing::OpenOrDie;

class RequeueTest : public testing::BackendTest {
 protected:
  void SetUp() override {
    BackendTest::SetUp();
    if (!Ready()) return;
    StoreOptions options;
    options.path = StorePath();
    store_ = OpenOrDie(options);
    bp_ = *store_->PutBlueprint(MakeBlueprint("invoice_totals", "1.0.0"));
    artifact_ = *store_->PutArtifact(MakeArtifact("invoice_totals/parse", "return 1"));
    output_ = store_->PutBlob("{\"EUR\":1}")->digest;
    id_ = NewRunId();
  }

  int64_t NewRunId() {
    NewRun run;
    run.blueprint_digest = bp_.digest;
    run.input_digest = store_->PutBlob("{}")->digest;
    run.bindings = {{"parse", artifact_.digest, "lockfile"}};
    run.submitter = "alice";
    return store_->CreateRun(run)->run.id;
  }

  std::unique_ptr<Store> store_;
  BlueprintRecord bp_;
  ArtifactRecord artifact_;
  std::string output_;
  int64_t id_ = 0;
};

ROTE_BOTH_BACKENDS(RequeueTest);

TEST_P(RequeueTest, ARunningRunBecomesPendingWithoutItsStepsAndWithTheEvent) {
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
  EXPECT_EQ(store_->GetRun(id_)->state, RunState::kPending) << "the change is committed";
  EXPECT_TRUE(store_->ListSteps(id_)->empty());
  std::vector<RunEvent> events = *store_->ListRunEvents(id_, 0, 0);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].sequence, 2);
  EXPECT_EQ(events[1].kind, "events");
  EXPECT_EQ(events[1].payload, "re-queued");
  EXPECT_EQ(*store_->AppendRunEvent(id_, "events", "next"), 3) << "sequence numbers go on";

  // The next attempt journals from index 0 and finishes normally.
  ASSERT_TRUE(store_->StartRun(id_).ok());
  ASSERT_TRUE(store_->AppendSteps(id_, {step}).ok());
  EXPECT_EQ(store_->GetRun(id_)->step_count, 1);
  EXPECT_TRUE(store_->FinishRun(id_, {RunState::kSucceeded, output_, ""}).ok());
}

TEST_P(RequeueTest, OnlyARunningRunCanBeRequeued) {
  EXPECT_EQ(store_->RequeueRun(id_, "events", "x").status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(store_->FinishRun(id_, {RunState::kCancelled, "", "user"}).ok());
  EXPECT_EQ(store_->RequeueRun(id_, "events", "x").status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->GetRun(id_)->state, RunState::kCancelled);
  EXPECT_EQ(store_->RequeueRun(424242, "events", "x").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->RequeueRun(id_, "", "x").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(store_->ListRunEvents(id_, 0, 0)->empty()) << "a refused re-queue records nothing";
}

TEST_P(RequeueTest, AnEmptyKindIsRefusedEvenForARunningRun) {
  ASSERT_TRUE(store_->StartRun(id_).ok());
  EXPECT_EQ(store_->RequeueRun(id_, "", "x").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->GetRun(id_)->state, RunState::kRunning) << "nothing changed";
  EXPECT_TRUE(store_->ListRunEvents(id_, 0, 0)->empty());
}

// A re-queue racing the run's finish: the run's writes take turns, so exactly one of the two
// wins and the other sees the state it left (FAILED_PRECONDITION), never a mix of both.
TEST_P(RequeueTest, ARequeueRacingTheFinishLetsExactlyOneWin) {
  constexpr int kRuns = 8;
  std::vector<int64_t> ids;
  for (int i = 0; i < kRuns; ++i) {
    ids.push_back(NewRunId());
    ASSERT_TRUE(store_->StartRun(ids.back()).ok());
    StepRecord step{0, "parse", artifact_.digest, Sha256Digest("in"), Sha256Digest("out")};
    ASSERT_TRUE(store_->AppendSteps(ids.back(), {step}).ok());
  }
  std::vector<absl::StatusCode> requeue(kRuns), finish(kRuns);
  std::thread requeuer([&] {
    for (int i = 0; i < kRuns; ++i) {
      requeue[i] = store_->RequeueRun(ids[i], "events", "re-queued").status().code();
    }
  });
  std::thread finisher([&] {
    for (int i = 0; i < kRuns; ++i) {
      finish[i] = store_->FinishRun(ids[i], {RunState::kSucceeded, output_, ""}).status().code();
    }
  });
  requeuer.join();
  finisher.join();
  for (int i = 0; i < kRuns; ++i) {
    const RunRecord run = *store_->GetRun(ids[i]);
    const size_t events = store_->ListRunEvents(ids[i], 0, 0)->size();
    const size_t steps = store_->ListSteps(ids[i])->size();
    if (requeue[i] == absl::StatusCode::kOk) {
      // Re-queued first: the finish then found a pending run, which cannot succeed.
      EXPECT_EQ(events, 1u) << "run " << ids[i];
      EXPECT_EQ(steps, 0u) << "run " << ids[i];
      EXPECT_EQ(run.step_count, 0) << "run " << ids[i];
      EXPECT_EQ(finish[i], absl::StatusCode::kFailedPrecondition) << "run " << ids[i];
      EXPECT_EQ(run.state, RunState::kPending) << "run " << ids[i];
    } else {
      EXPECT_EQ(requeue[i], absl::StatusCode::kFailedPrecondition) << "run " << ids[i];
      EXPECT_EQ(finish[i], absl::StatusCode::kOk) << "run " << ids[i];
      EXPECT_EQ(run.state, RunState::kSucceeded) << "run " << ids[i];
      EXPECT_EQ(events, 0u) << "run " << ids[i];
      EXPECT_EQ(steps, 1u) << "run " << ids[i];
    }
  }
}

}  // namespace
}  // namespace rote::store
