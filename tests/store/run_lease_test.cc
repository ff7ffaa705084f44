// Run leases (Store::ClaimRuns and the fence on a claimed run's writes) and generation claims, for
// several replicas on one PostgreSQL database; each "replica" here is a store object of its own on one schema, as
// each `rote serve` process has. SQLite keeps its runs to one process: it answers UNIMPLEMENTED,
// and its CreateRunWithEvents / FinishRunWithEvent are the two writes one after the other.
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/store/test_util.h"

namespace rote::store {
namespace {

using testing::MakeArtifact;
using testing::MakeBlueprint;
using testing::OpenOrDie;

class RunLeaseTest : public testing::BackendTest {
 protected:
  void SetUp() override {
    BackendTest::SetUp();
    if (!Ready()) return;
    a_ = Open();
    b_ = Open();
    bp_ = *a_->PutBlueprint(MakeBlueprint("invoice_totals", "1.0.0"));
    artifact_ = *a_->PutArtifact(MakeArtifact("invoice_totals/parse", "return 1"));
    output_ = a_->PutBlob("{\"EUR\":1}")->digest;
  }

  std::unique_ptr<Store> Open() {
    StoreOptions options;
    options.path = StorePath();
    return OpenOrDie(options);
  }

  int64_t NewRunId(Store& s) {
    NewRun run;
    run.blueprint_digest = bp_.digest;
    run.input_digest = s.PutBlob("{}")->digest;
    run.bindings = {{"parse", artifact_.digest, "lockfile"}};
    run.submitter = "alice";
    return s.CreateRun(run)->run.id;
  }

  static ClaimRequest Claim(const std::string& replica, int max, int64_t lease_ms = 60000) {
    return ClaimRequest{replica, max, lease_ms, "events", "taken over"};
  }

  StepRecord Step(int64_t index) const {
    return StepRecord{index, "parse", artifact_.digest, Sha256Digest("in"), Sha256Digest("out")};
  }

  bool Postgres() const { return GetParam() == testing::Backend::kPostgres; }

  std::unique_ptr<Store> a_, b_;
  BlueprintRecord bp_;
  ArtifactRecord artifact_;
  std::string output_;
};

ROTE_BOTH_BACKENDS(RunLeaseTest);

// The leases themselves: PostgreSQL only.
class RunLeasePgTest : public RunLeaseTest {};
INSTANTIATE_TEST_SUITE_P(Backends, RunLeasePgTest, ::testing::Values(testing::Backend::kPostgres),
                         testing::BackendName);

TEST_P(RunLeaseTest, OnlyAStoreSharedByProcessesLeasesRuns) {
  EXPECT_EQ(a_->SupportsRunLeases(), Postgres());
  if (Postgres()) return;
  EXPECT_EQ(a_->ClaimRuns(Claim("a", 1)).status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(a_->RenewRunLeases(1000).status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(a_->SetRunEventListener([](int64_t) {}).code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(a_->ClaimGeneration(Sha256Digest("r"), "a", 1000).status().code(), absl::StatusCode::kUnimplemented);
}

TEST_P(RunLeaseTest, CreateAndFinishWithEventsWriteBoth) {
  NewRun run;
  run.blueprint_digest = bp_.digest;
  run.input_digest = a_->PutBlob("{}")->digest;
  run.submitter = "alice";
  run.request_id = "r1";
  absl::StatusOr<CreateRunResult> created =
      a_->CreateRunWithEvents(run, {{"events", "pending"}, {"policy", "allow_generation=1"}});
  ASSERT_TRUE(created.ok()) << created.status();
  const int64_t id = created->run.id;
  // A repeated request adds no events.
  ASSERT_TRUE(b_->CreateRunWithEvents(run, {{"events", "again"}}).ok());
  std::vector<RunEvent> events = *a_->ListRunEvents(id, 0, 0);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].payload, "pending");
  EXPECT_EQ(events[1].kind, "policy");
  ASSERT_TRUE(a_->StartRun(id).ok());
  absl::StatusOr<RunRecord> done = a_->FinishRunWithEvent(id, {RunState::kSucceeded, output_, ""}, {"events", "end"});
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->state, RunState::kSucceeded);
  events = *a_->ListRunEvents(id, 0, 0);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[2].payload, "end");
  // A finished run takes no second outcome, and no event with it.
  EXPECT_EQ(b_->FinishRunWithEvent(id, {RunState::kFailed, "", "x"}, {"events", "again"}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(a_->ListRunEvents(id, 0, 0)->size(), 3u);
}

TEST_P(RunLeasePgTest, ClaimsTakePendingRunsOldestFirstAndNeverOneTwice) {
  std::vector<int64_t> ids;
  for (int i = 0; i < 40; ++i) ids.push_back(NewRunId(*a_));
  absl::StatusOr<std::vector<ClaimedRun>> first = a_->ClaimRuns(Claim("a", 3));
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ((*first)[i].run.id, ids[i]);
    EXPECT_EQ((*first)[i].run.state, RunState::kRunning);
    EXPECT_EQ((*first)[i].epoch, 1);
    EXPECT_FALSE((*first)[i].taken_over);
  }
  // Two replicas claiming at once share the rest without overlap.
  std::mutex mu;
  std::multiset<int64_t> claimed;
  auto claimer = [&](Store* s, const std::string& who) {
    for (;;) {
      absl::StatusOr<std::vector<ClaimedRun>> got = s->ClaimRuns(Claim(who, 2));
      ASSERT_TRUE(got.ok()) << got.status();
      if (got->empty()) return;
      std::lock_guard lock(mu);
      for (const ClaimedRun& c : *got) claimed.insert(c.run.id);
    }
  };
  std::unique_ptr<Store> c = Open();
  std::thread t1(claimer, b_.get(), "b");
  std::thread t2(claimer, c.get(), "c");
  t1.join();
  t2.join();
  EXPECT_EQ(claimed.size(), 37u);
  EXPECT_EQ(std::set<int64_t>(claimed.begin(), claimed.end()).size(), 37u) << "no run claimed twice";
  absl::StatusOr<std::vector<std::pair<RunState, int64_t>>> counts = a_->CountRunsByState();
  ASSERT_TRUE(counts.ok()) << counts.status();
  EXPECT_EQ(*counts, (std::vector<std::pair<RunState, int64_t>>{{RunState::kPending, 0}, {RunState::kRunning, 40}}));
}

TEST_P(RunLeasePgTest, AnExpiredLeaseIsTakenOverAndTheStaleReplicaIsFenced) {
  const int64_t id = NewRunId(*a_);
  ASSERT_EQ(a_->ClaimRuns(Claim("a", 1, /*lease_ms=*/300))->size(), 1u);
  ASSERT_TRUE(a_->AppendSteps(id, {Step(0), Step(1)}).ok());
  ASSERT_TRUE(a_->AppendRunEvent(id, "events", "step").ok());
  // Renewed in time, the lease holds: B finds nothing to claim.
  ASSERT_TRUE(a_->RenewRunLeases(300)->empty());
  EXPECT_TRUE(b_->ClaimRuns(Claim("b", 1))->empty());
  // A stops renewing; past the lease B takes the run over, its journal dropped.
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  absl::StatusOr<std::vector<ClaimedRun>> taken = b_->ClaimRuns(Claim("b", 1));
  ASSERT_TRUE(taken.ok()) << taken.status();
  ASSERT_EQ(taken->size(), 1u);
  EXPECT_TRUE((*taken)[0].taken_over);
  EXPECT_EQ((*taken)[0].previous_owner, "a");
  EXPECT_EQ((*taken)[0].epoch, 2);
  EXPECT_EQ((*taken)[0].run.step_count, 0);
  EXPECT_TRUE(a_->ListSteps(id)->empty());
  std::vector<RunEvent> events = *a_->ListRunEvents(id, 0, 0);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].payload, "taken over");

  // The attack: A, awake again, tries every write a replica makes to a run. Each is refused
  // and changes nothing.
  for (absl::Status st : {a_->AppendSteps(id, {Step(0)}), a_->AppendRunEvent(id, "events", "stale").status(),
                          a_->AddRunBindings(id, {{"find", artifact_.digest, "generated"}}),
                          a_->FinishRun(id, {RunState::kSucceeded, output_, ""}).status(),
                          a_->FinishRunWithEvent(id, {RunState::kFailed, "", "stale"}, {"events", "x"}).status(),
                          a_->RequeueRun(id, "events", "stale").status()}) {
    EXPECT_EQ(st.code(), absl::StatusCode::kAborted) << st;
    EXPECT_NE(std::string(st.message()).find("replica 'b' holds it now"), std::string::npos) << st;
  }
  RunRecord now = *a_->GetRun(id);
  EXPECT_EQ(now.state, RunState::kRunning);
  EXPECT_EQ(now.step_count, 0);
  EXPECT_EQ(now.bindings.size(), 1u);
  EXPECT_EQ(a_->ListRunEvents(id, 0, 0)->size(), 2u);
  // A's heartbeat learns it lost the run, once.
  EXPECT_EQ(*a_->RenewRunLeases(300), std::vector<int64_t>{id});
  EXPECT_TRUE(a_->RenewRunLeases(300)->empty());

  // B, the holder, records the run once.
  ASSERT_TRUE(b_->AppendSteps(id, {Step(0)}).ok());
  ASSERT_TRUE(b_->FinishRunWithEvent(id, {RunState::kSucceeded, output_, ""}, {"events", "end"}).ok());
  now = *a_->GetRun(id);
  EXPECT_EQ(now.state, RunState::kSucceeded);
  EXPECT_EQ(now.step_count, 1);
  EXPECT_EQ(a_->FinishRun(id, {RunState::kSucceeded, output_, ""}).status().code(), absl::StatusCode::kAborted);
}

TEST_P(RunLeasePgTest, ARunCancelledElsewhereIsALostLeaseAndARequeueGivesTheRunBack) {
  const int64_t cancelled = NewRunId(*a_);
  const int64_t given_back = NewRunId(*a_);
  ASSERT_EQ(a_->ClaimRuns(Claim("a", 2))->size(), 2u);
  // Another replica cancels the first (it holds no lease on it: its write is not fenced).
  ASSERT_TRUE(b_->FinishRun(cancelled, {RunState::kCancelled, "", "cancelled by carol"}).ok());
  EXPECT_EQ(*a_->RenewRunLeases(60000), std::vector<int64_t>{cancelled});
  // A drains: the second goes back to the queue without its lease, and B claims it at once.
  ASSERT_TRUE(a_->RequeueRun(given_back, "events", "re-queued").ok());
  absl::StatusOr<std::vector<ClaimedRun>> claimed = b_->ClaimRuns(Claim("b", 5));
  ASSERT_EQ(claimed->size(), 1u);
  EXPECT_EQ((*claimed)[0].run.id, given_back);
  EXPECT_FALSE((*claimed)[0].taken_over);
  EXPECT_EQ((*claimed)[0].epoch, 2);
  EXPECT_TRUE(a_->RenewRunLeases(60000)->empty()) << "A holds nothing any more";
}

TEST_P(RunLeasePgTest, AGenerationClaimIsHeldByOneReplicaUntilReleasedOrExpired) {
  const std::string digest = Sha256Digest("request");
  EXPECT_TRUE(*a_->ClaimGeneration(digest, "a", 60000));
  EXPECT_FALSE(*b_->ClaimGeneration(digest, "b", 60000)) << "a holds it";
  EXPECT_TRUE(*a_->ClaimGeneration(digest, "a", 60000)) << "its holder renews it";
  ASSERT_TRUE(b_->ReleaseGeneration(digest, "b").ok());
  EXPECT_FALSE(*b_->ClaimGeneration(digest, "b", 60000)) << "only the holder releases it";
  ASSERT_TRUE(a_->ReleaseGeneration(digest, "a").ok());
  EXPECT_TRUE(*b_->ClaimGeneration(digest, "b", 200));
  EXPECT_FALSE(*a_->ClaimGeneration(digest, "a", 60000));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_TRUE(*a_->ClaimGeneration(digest, "a", 60000)) << "an expired claim is taken over";
  EXPECT_FALSE(*b_->ClaimGeneration(digest, "b", 60000));
  EXPECT_TRUE(*b_->ClaimGeneration(Sha256Digest("another request"), "b", 60000));
}

TEST_P(RunLeasePgTest, EventsAppendedByAnyStoreAreNotified) {
  const int64_t id = NewRunId(*a_);
  std::mutex mu;
  std::condition_variable cv;
  std::set<int64_t> heard;
  ASSERT_TRUE(b_->SetRunEventListener([&](int64_t run_id) {
                  std::lock_guard lock(mu);
                  heard.insert(run_id);
                  cv.notify_all();
                }).ok());
  // The listener connection starts in the background; append until it hears one.
  std::unique_lock lock(mu);
  for (int i = 0; i < 50 && heard.count(id) == 0; ++i) {
    lock.unlock();
    ASSERT_TRUE(a_->AppendRunEvent(id, "events", "x").ok());
    lock.lock();
    cv.wait_for(lock, std::chrono::milliseconds(100), [&] { return heard.count(id) != 0; });
  }
  EXPECT_EQ(heard.count(id), 1u);
  lock.unlock();
  ASSERT_TRUE(b_->SetRunEventListener({}).ok());
}

}  // namespace
}  // namespace rote::store
