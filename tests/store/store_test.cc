// Functional tests of the Store interface: blobs, blueprints, artifacts and review (etags),
// bindings, runs and their state machine, steps, events, caches, idempotency, pages; each runs
// against SQLite and PostgreSQL. SqliteStoreTest: the SQLite files, backup and locking.
#include "store/store.h"

#include <sqlite3.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <set>
#include <thread>

#include "gtest/gtest.h"
#include "store/digest.h"
#include "tests/store/test_util.h"

namespace rote::store {
namespace {

using testing::FakeClock;
using testing::MakeArtifact;
using testing::MakeBlueprint;
using testing::OpenOrDie;
using testing::TempDir;

class StoreTest : public testing::BackendTest {
 protected:
  StoreOptions Options() {
    StoreOptions o;
    o.path = StorePath();
    o.clock_ms = clock_.Fn();
    return o;
  }
  void SetUp() override {
    BackendTest::SetUp();
    if (!Ready()) return;
    store_ = OpenOrDie(Options());
  }

  // A stored blueprint, input blob and artifact that runs can refer to.
  void Seed() {
    bp_ = *store_->PutBlueprint(MakeBlueprint("invoice_totals", "1.0.0"));
    input_ = store_->PutBlob("{\"mails\":[]}")->digest;
    output_ = store_->PutBlob("{\"EUR\":1234.5}")->digest;
    artifact_ = *store_->PutArtifact(MakeArtifact("invoice_totals/parse", "return 1"));
  }

  NewRun MakeRun(const std::string& request_id = "") {
    NewRun run;
    run.blueprint_digest = bp_.digest;
    run.input_digest = input_;
    run.bindings = {{"parse", artifact_.digest, "lockfile"}};
    run.engine_profile_json = "{\"rote\":\"0.1.0\"}";
    run.submitter = "alice";
    run.request_id = request_id;
    return run;
  }

  FakeClock clock_;
  std::unique_ptr<Store> store_;
  BlueprintRecord bp_;
  std::string input_, output_;
  ArtifactRecord artifact_;
};

// The files, backup and locking of the SQLite store.
class SqliteStoreTest : public StoreTest {};

ROTE_BOTH_BACKENDS(StoreTest);
ROTE_SQLITE_ONLY(SqliteStoreTest);

TEST(DigestTest, Sha256OfKnownStrings) {
  EXPECT_EQ(Sha256Digest(""),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Digest("abc"),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_TRUE(IsValidDigest(Sha256Digest("x")));
  EXPECT_FALSE(IsValidDigest("sha256:ABC"));
  EXPECT_FALSE(IsValidDigest(
      "sha256:E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855"));
  EXPECT_FALSE(IsValidDigest(
      "md5:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855xxx"));
}

TEST_P(SqliteStoreTest, OpensAtLatestSchemaWithDataFileInDirectory) {
  EXPECT_EQ(store_->SchemaVersion(), 9);
  EXPECT_TRUE(std::filesystem::exists(ScratchDir() + "/data/rote.db"));
  EXPECT_TRUE(store_->CheckIntegrity(true).ok());
}

TEST_P(StoreTest, OpensAtLatestSchemaAndChecksIntegrity) {
  EXPECT_GE(store_->SchemaVersion(), 1);
  EXPECT_TRUE(store_->CheckIntegrity(false).ok());
  EXPECT_TRUE(store_->CheckIntegrity(true).ok());
  // Opening again finds the schema in place and migrates nothing.
  const int version = store_->SchemaVersion();
  store_.reset();
  store_ = OpenOrDie(Options());
  EXPECT_EQ(store_->SchemaVersion(), version);
}

// Several MiB: kept as a file by SQLite, in 1 MiB chunks by PostgreSQL.
TEST_P(StoreTest, LargeBlobsRoundTripAndSurviveReopening) {
  std::string big(3 * 1024 * 1024 + 12345, 'q');
  for (size_t i = 0; i < big.size(); i += 7) big[i] = static_cast<char>('a' + i % 26);
  BlobRef ref = *store_->PutBlob(big);
  EXPECT_EQ(ref.size, static_cast<int64_t>(big.size()));
  EXPECT_EQ(store_->PutBlob(big)->digest, ref.digest);
  EXPECT_EQ(*store_->GetBlob(ref.digest), big);
  std::string exact(1024 * 1024, 'e');  // exactly one chunk
  EXPECT_EQ(*store_->GetBlob(store_->PutBlob(exact)->digest), exact);
  store_.reset();
  store_ = OpenOrDie(Options());
  EXPECT_EQ(*store_->GetBlob(ref.digest), big);
  EXPECT_EQ(store_->StatBlob(ref.digest)->size, static_cast<int64_t>(big.size()));
  EXPECT_TRUE(store_->CheckIntegrity(true).ok());
}

TEST_P(StoreTest, BlobsAreDeduplicatedAndVerified) {
  std::string bytes("a\0b\xff", 4);
  absl::StatusOr<BlobRef> ref = store_->PutBlob(bytes);
  ASSERT_TRUE(ref.ok()) << ref.status();
  EXPECT_EQ(ref->digest, Sha256Digest(bytes));
  EXPECT_EQ(ref->size, 4);
  EXPECT_EQ(store_->PutBlob(bytes)->digest, ref->digest);
  EXPECT_EQ(*store_->GetBlob(ref->digest), bytes);
  EXPECT_EQ(store_->StatBlob(ref->digest)->size, 4);
  EXPECT_EQ(*store_->GetBlob(store_->PutBlob("")->digest), "");
  EXPECT_EQ(store_->GetBlob(Sha256Digest("never stored")).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->GetBlob("sha256:nope").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(SqliteStoreTest, LargeBlobsGoToFilesAndRoundTrip) {
  std::string big(300 * 1024, 'q');
  for (size_t i = 0; i < big.size(); i += 7) big[i] = static_cast<char>('a' + i % 26);
  BlobRef ref = *store_->PutBlob(big);
  std::string hex = ref.digest.substr(7);
  EXPECT_TRUE(std::filesystem::exists(ScratchDir() + "/data/blobs/" + hex.substr(0, 2) + "/" + hex));
  EXPECT_EQ(*store_->GetBlob(ref.digest), big);
}

TEST_P(StoreTest, BlueprintsAreIdempotentAndFoundByName) {
  BlueprintRecord bp = MakeBlueprint("invoice_totals", "1.0.0");
  absl::StatusOr<BlueprintRecord> stored = store_->PutBlueprint(bp);
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->create_ms, 1'700'000'000'000);
  ASSERT_EQ(stored->generation_points.size(), 2u);
  EXPECT_EQ(stored->generation_points[0].name, "invoice_totals.parse");
  EXPECT_EQ(stored->generation_points[1].name, "invoice_totals.find");
  // Again: same record, not a second one.
  EXPECT_EQ(store_->PutBlueprint(bp)->create_ms, stored->create_ms);
  store_->PutBlueprint(MakeBlueprint("invoice_totals", "1.1.0")).IgnoreError();
  store_->PutBlueprint(MakeBlueprint("other", "1.0.0")).IgnoreError();
  absl::StatusOr<std::vector<BlueprintRecord>> found = store_->FindBlueprintsByName("invoice_totals");
  ASSERT_TRUE(found.ok());
  ASSERT_EQ(found->size(), 2u);
  EXPECT_EQ((*found)[0].version, "1.0.0");
  EXPECT_EQ((*found)[1].version, "1.1.0");
  EXPECT_EQ(store_->GetBlueprint(bp.digest)->source, bp.source);
  EXPECT_EQ(store_->GetGenerationSpec(bp.generation_points[0].digest)->canonical,
            bp.generation_points[0].canonical);

  BlueprintRecord changed = bp;
  changed.source += "-- edited\n";
  EXPECT_EQ(store_->PutBlueprint(changed).status().code(),
            absl::StatusCode::kFailedPrecondition);
  BlueprintRecord bad_spec = MakeBlueprint("x", "1");
  bad_spec.generation_points[0].canonical += " ";
  EXPECT_EQ(store_->PutBlueprint(bad_spec).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(StoreTest, ArtifactsGetRevisionsPerGenerationPoint) {
  ArtifactRecord a1 = *store_->PutArtifact(MakeArtifact("bp/parse", "return 1"));
  ArtifactRecord a2 = *store_->PutArtifact(MakeArtifact("bp/parse", "return 2"));
  ArtifactRecord b1 = *store_->PutArtifact(MakeArtifact("bp/find", "return 3"));
  EXPECT_EQ(a1.revision, 1);
  EXPECT_EQ(a2.revision, 2);
  EXPECT_EQ(b1.revision, 1);
  EXPECT_EQ(a1.state, ReviewState::kPending);
  // Immutable and idempotent by digest.
  EXPECT_EQ(store_->PutArtifact(MakeArtifact("bp/parse", "return 1"))->revision, 1);
  ArtifactRecord forged = MakeArtifact("bp/parse", "return 1");
  forged.source = "return 666";
  EXPECT_EQ(store_->PutArtifact(forged).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->GetRevision("bp/parse", 2)->digest, a2.digest);
  EXPECT_EQ(store_->GetRevision("bp/parse", 3).status().code(), absl::StatusCode::kNotFound);
  absl::StatusOr<Page<ArtifactRecord>> revs = store_->ListRevisions("bp/parse", {});
  ASSERT_TRUE(revs.ok());
  ASSERT_EQ(revs->items.size(), 2u);
  EXPECT_EQ(revs->items[0].digest, a1.digest);
  EXPECT_EQ(revs->items[1].digest, a2.digest);
  EXPECT_TRUE(revs->next_page_token.empty());
}

TEST_P(StoreTest, ArtifactProvenanceAttemptsNeedStoredBlobs) {
  ArtifactRecord a = MakeArtifact("bp/parse", "return 1");
  a.provenance.attempts = {{0, Sha256Digest("prompt"), Sha256Digest("out"), "no match", "", 0, 0, 0, 0}};
  EXPECT_EQ(store_->PutArtifact(a).status().code(), absl::StatusCode::kFailedPrecondition);
  store_->PutBlob("prompt").IgnoreError();
  store_->PutBlob("out").IgnoreError();
  absl::StatusOr<ArtifactRecord> stored = store_->PutArtifact(a);
  ASSERT_TRUE(stored.ok()) << stored.status();
  ASSERT_EQ(stored->provenance.attempts.size(), 1u);
  EXPECT_EQ(stored->provenance.attempts[0].failure, "no match");
  EXPECT_EQ(*store_->GetBlob(stored->provenance.attempts[0].prompt_digest), "prompt");
}

TEST_P(StoreTest, ReviewWithStaleEtagIsAborted) {
  ArtifactRecord a = *store_->PutArtifact(MakeArtifact("bp/parse", "return 1"));
  ASSERT_FALSE(a.etag.empty());
  absl::StatusOr<ArtifactRecord> approved =
      store_->ReviewArtifact({a.digest, "bob", ReviewState::kApproved, "looks right", a.etag});
  ASSERT_TRUE(approved.ok()) << approved.status();
  EXPECT_EQ(approved->state, ReviewState::kApproved);
  EXPECT_NE(approved->etag, a.etag);
  // Someone acting on the old view loses.
  absl::StatusOr<ArtifactRecord> stale =
      store_->ReviewArtifact({a.digest, "carol", ReviewState::kRejected, "no", a.etag});
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(store_->GetArtifact(a.digest)->state, ReviewState::kApproved);
  EXPECT_TRUE(store_->ReviewArtifact({a.digest, "carol", ReviewState::kRejected, "regex too wide",
                                      approved->etag})
                  .ok());
  std::vector<ReviewEntry> log = *store_->ListReviews(a.digest);
  ASSERT_EQ(log.size(), 2u);
  EXPECT_EQ(log[0].principal, "bob");
  EXPECT_EQ(log[0].decision, ReviewState::kApproved);
  EXPECT_EQ(log[1].principal, "carol");
  EXPECT_EQ(log[1].comment, "regex too wide");
  EXPECT_LT(log[0].time_ms, log[1].time_ms);
  EXPECT_EQ(store_->GetArtifact(a.digest)->state, ReviewState::kRejected);
}

TEST_P(StoreTest, ConcurrentReviewsWithOneEtagHaveOneWinner) {
  ArtifactRecord a = *store_->PutArtifact(MakeArtifact("bp/parse", "return 1"));
  std::atomic<int> ok{0}, aborted{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      absl::StatusOr<ArtifactRecord> r = store_->ReviewArtifact(
          {a.digest, "p" + std::to_string(i), ReviewState::kApproved, "", a.etag});
      if (r.ok()) ++ok;
      if (r.status().code() == absl::StatusCode::kAborted) ++aborted;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 1);
  EXPECT_EQ(aborted.load(), 7);
  EXPECT_EQ(store_->ListReviews(a.digest)->size(), 1u);
}

// Two stores open on one database at once, as two servers (replicas) would be: their writes
// race and still keep one run per request id, one winner per etag, distinct revision and event
// numbers and a dense audit log.
TEST_P(StoreTest, TwoStoresOnOneDatabaseKeepTheInvariants) {
  Seed();
  std::unique_ptr<Store> other = OpenOrDie(Options());
  Store* stores[2] = {store_.get(), other.get()};
  constexpr int kThreads = 8;
  auto race = [&](const std::function<void(Store&, int)>& fn) {
    std::vector<std::thread> threads;
    for (int i = 0; i < kThreads; ++i) threads.emplace_back([&, i] { fn(*stores[i % 2], i); });
    for (auto& t : threads) t.join();
  };

  std::vector<int64_t> ids(kThreads);
  std::atomic<int> created{0};
  race([&](Store& s, int i) {
    absl::StatusOr<CreateRunResult> r = s.CreateRun(MakeRun("req-replicas"));
    ASSERT_TRUE(r.ok()) << r.status();
    ids[static_cast<size_t>(i)] = r->run.id;
    if (r->created) ++created;
  });
  EXPECT_EQ(created.load(), 1);
  EXPECT_EQ(std::set<int64_t>(ids.begin(), ids.end()).size(), 1u);

  std::vector<int64_t> sequences(kThreads);
  race([&](Store& s, int i) {
    absl::StatusOr<int64_t> seq = s.AppendRunEvent(ids[0], "progress", std::to_string(i));
    ASSERT_TRUE(seq.ok()) << seq.status();
    sequences[static_cast<size_t>(i)] = *seq;
  });
  std::set<int64_t> distinct(sequences.begin(), sequences.end());
  EXPECT_EQ(distinct.size(), static_cast<size_t>(kThreads));
  EXPECT_EQ(*distinct.begin(), 1);
  EXPECT_EQ(*distinct.rbegin(), kThreads);

  std::vector<int64_t> revisions(kThreads);
  race([&](Store& s, int i) {
    AuditEntry audit;
    audit.principal = "p" + std::to_string(i);
    audit.action = "propose";
    absl::StatusOr<ArtifactRecord> a =
        s.ProposeArtifact(MakeArtifact("replicas/parse", "return " + std::to_string(i) + " -- r"), audit);
    ASSERT_TRUE(a.ok()) << a.status();
    revisions[static_cast<size_t>(i)] = a->revision;
  });
  EXPECT_EQ(std::set<int64_t>(revisions.begin(), revisions.end()).size(),
            static_cast<size_t>(kThreads));

  ArtifactRecord target = *store_->GetRevision("replicas/parse", 1);
  std::atomic<int> ok{0}, aborted{0};
  race([&](Store& s, int i) {
    absl::StatusOr<ArtifactRecord> r = s.ReviewArtifact(
        {target.digest, "r" + std::to_string(i), ReviewState::kApproved, "", target.etag, true});
    if (r.ok()) ++ok;
    if (r.status().code() == absl::StatusCode::kAborted) ++aborted;
  });
  EXPECT_EQ(ok.load(), 1);
  EXPECT_EQ(aborted.load(), kThreads - 1);
  EXPECT_EQ(other->GetLiveRevision("replicas/parse", target.provenance.spec_digest)->artifact_digest,
            target.digest);

  // kThreads proposals, then one approval and its promotion: sequences 1, 2, ... without gaps.
  absl::StatusOr<Page<AuditEntry>> audit = other->ListAuditEntries({}, {100, ""});
  ASSERT_TRUE(audit.ok()) << audit.status();
  ASSERT_EQ(audit->items.size(), static_cast<size_t>(kThreads + 2));
  for (size_t i = 0; i < audit->items.size(); ++i) {
    EXPECT_EQ(audit->items[i].sequence, static_cast<int64_t>(i + 1));
  }
}

TEST_P(StoreTest, ListArtifactsFiltersByState) {
  std::vector<ArtifactRecord> all;
  for (int i = 0; i < 6; ++i) {
    all.push_back(*store_->PutArtifact(MakeArtifact("p" + std::to_string(i % 2), std::to_string(i))));
  }
  store_->ReviewArtifact({all[1].digest, "r", ReviewState::kApproved, "", ""}).IgnoreError();
  store_->ReviewArtifact({all[4].digest, "r", ReviewState::kApproved, "", ""}).IgnoreError();
  ArtifactFilter approved;
  approved.state = ReviewState::kApproved;
  absl::StatusOr<Page<ArtifactRecord>> page = store_->ListArtifacts(approved, {});
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->items.size(), 2u);
  EXPECT_EQ(page->items[0].digest, all[1].digest);
  EXPECT_EQ(page->items[1].digest, all[4].digest);
  ArtifactFilter p0_pending{"p0", ReviewState::kPending};
  page = store_->ListArtifacts(p0_pending, {});
  ASSERT_EQ(page->items.size(), 2u);  // 0 and 2 (4 is approved)
  EXPECT_EQ(page->items[0].digest, all[0].digest);
  EXPECT_EQ(page->items[1].digest, all[2].digest);
}

TEST_P(StoreTest, BindingsReplaceAndRequireStoredTargets) {
  Seed();
  ArtifactRecord v2 = *store_->PutArtifact(MakeArtifact("invoice_totals/parse", "return 2"));
  EXPECT_TRUE(store_->SetBinding(bp_.digest, {"parse", artifact_.digest, "generated"}).ok());
  EXPECT_EQ(store_->GetBinding(bp_.digest, "parse")->artifact_digest, artifact_.digest);
  EXPECT_TRUE(store_->SetBinding(bp_.digest, {"parse", v2.digest, "approved"}).ok());
  std::vector<Binding> bindings = *store_->ListBindings(bp_.digest);
  ASSERT_EQ(bindings.size(), 1u);
  EXPECT_EQ(bindings[0].artifact_digest, v2.digest);
  EXPECT_EQ(bindings[0].source, "approved");
  EXPECT_EQ(store_->SetBinding(bp_.digest, {"parse", Sha256Digest("nothing"), "x"}).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->GetBinding(bp_.digest, "find").status().code(), absl::StatusCode::kNotFound);
}

TEST_P(StoreTest, RunStateMachineRejectsIllegalTransitions) {
  Seed();
  absl::StatusOr<CreateRunResult> created = store_->CreateRun(MakeRun());
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_TRUE(created->created);
  const RunRecord& run = created->run;
  EXPECT_EQ(run.state, RunState::kPending);
  ASSERT_EQ(run.bindings.size(), 1u);
  EXPECT_EQ(run.bindings[0].artifact_digest, artifact_.digest);
  EXPECT_EQ(store_->FinishRun(run.id, {RunState::kSucceeded, output_, ""}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<RunRecord> running = store_->StartRun(run.id);
  ASSERT_TRUE(running.ok()) << running.status();
  EXPECT_EQ(running->state, RunState::kRunning);
  EXPECT_GT(running->start_ms, run.create_ms);
  EXPECT_EQ(store_->StartRun(run.id).status().code(), absl::StatusCode::kFailedPrecondition);

  StepRecord step{0, "parse", artifact_.digest, Sha256Digest("in"), Sha256Digest("out")};
  StepRecord wrong = step;
  wrong.index = 1;
  EXPECT_EQ(store_->AppendSteps(run.id, {wrong}).code(), absl::StatusCode::kFailedPrecondition);
  StepRecord second = step;
  second.index = 1;
  EXPECT_TRUE(store_->AppendSteps(run.id, {step, second}).ok());
  EXPECT_TRUE(store_->AddRunBindings(run.id, {{"find", artifact_.digest, "generated"}}).ok());
  EXPECT_EQ(store_->AddRunBindings(run.id, {{"parse", Sha256Digest("x"), "generated"}}).code(),
            absl::StatusCode::kFailedPrecondition);
  // A run's bindings never change once recorded.
  ArtifactRecord v2 = *store_->PutArtifact(MakeArtifact("invoice_totals/parse", "return 2"));
  EXPECT_EQ(store_->AddRunBindings(run.id, {{"parse", v2.digest, "generated"}}).code(),
            absl::StatusCode::kFailedPrecondition);

  absl::StatusOr<RunRecord> done = store_->FinishRun(run.id, {RunState::kSucceeded, output_, ""});
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->state, RunState::kSucceeded);
  EXPECT_EQ(done->output_digest, output_);
  EXPECT_EQ(done->step_count, 2);
  EXPECT_EQ(done->bindings.size(), 2u);
  EXPECT_GT(done->end_ms, done->start_ms);
  EXPECT_EQ(store_->FinishRun(run.id, {RunState::kFailed, "", "late"}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->AppendSteps(run.id, {step}).code(), absl::StatusCode::kFailedPrecondition);
  std::vector<StepRecord> steps = *store_->ListSteps(run.id);
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[1].index, 1);
  EXPECT_EQ(steps[0].output_digest, Sha256Digest("out"));

  // Cancel from pending is legal; success needs an output blob.
  RunRecord other = store_->CreateRun(MakeRun())->run;
  EXPECT_EQ(store_->FinishRun(other.id, {RunState::kRunning, "", ""}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->FinishRun(other.id, {RunState::kCancelled, "", "user"})->state,
            RunState::kCancelled);
  EXPECT_EQ(store_->GetRun(999999).status().code(), absl::StatusCode::kNotFound);
}

TEST_P(StoreTest, RunsNeedStoredBlueprintAndInput) {
  Seed();
  NewRun run = MakeRun();
  run.input_digest = Sha256Digest("not stored");
  EXPECT_EQ(store_->CreateRun(run).status().code(), absl::StatusCode::kFailedPrecondition);
  run = MakeRun();
  run.blueprint_digest = Sha256Digest("no blueprint");
  EXPECT_EQ(store_->CreateRun(run).status().code(), absl::StatusCode::kFailedPrecondition);
  RunRecord r = store_->CreateRun(MakeRun())->run;
  store_->StartRun(r.id).IgnoreError();
  EXPECT_EQ(
      store_->FinishRun(r.id, {RunState::kSucceeded, Sha256Digest("missing"), ""}).status().code(),
      absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->GetRun(r.id)->state, RunState::kRunning);
}

TEST_P(StoreTest, RunEventsReplayInOrder) {
  Seed();
  RunRecord r = store_->CreateRun(MakeRun())->run;
  EXPECT_EQ(*store_->AppendRunEvent(r.id, "state", "running"), 1);
  EXPECT_EQ(*store_->AppendRunEvent(r.id, "log", std::string("a\0b", 3)), 2);
  EXPECT_EQ(*store_->AppendRunEvent(r.id, "state", "succeeded"), 3);
  std::vector<RunEvent> events = *store_->ListRunEvents(r.id, 1, 0);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].sequence, 2);
  EXPECT_EQ(events[0].payload, std::string("a\0b", 3));
  EXPECT_EQ(events[1].kind, "state");
  EXPECT_EQ(store_->ListRunEvents(r.id, 0, 1)->size(), 1u);
  EXPECT_EQ(store_->AppendRunEvent(424242, "log", "x").status().code(),
            absl::StatusCode::kNotFound);
}

TEST_P(StoreTest, IdempotentCreateRunMakesOneRunUnderRace) {
  Seed();
  std::vector<int64_t> ids(8);
  std::atomic<int> created{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      absl::StatusOr<CreateRunResult> r = store_->CreateRun(MakeRun("req-1"));
      ASSERT_TRUE(r.ok()) << r.status();
      ids[static_cast<size_t>(i)] = r->run.id;
      if (r->created) ++created;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(created.load(), 1);
  EXPECT_EQ(std::set<int64_t>(ids.begin(), ids.end()).size(), 1u);
  EXPECT_EQ(store_->ListRuns({}, {})->items.size(), 1u);
  // The same request_id from another principal is another request.
  NewRun bob = MakeRun("req-1");
  bob.submitter = "bob";
  EXPECT_TRUE(store_->CreateRun(bob)->created);
}

TEST_P(StoreTest, IdempotencyRecordsFirstWriterWins) {
  EXPECT_EQ(store_->GetIdempotency("alice", "r1").status().code(), absl::StatusCode::kNotFound);
  IdempotencyRecord first{"alice", "r1", Sha256Digest("req"), "response-1", 0};
  absl::StatusOr<IdempotencyRecord> stored = store_->PutIdempotency(first);
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->response, "response-1");
  IdempotencyRecord second = first;
  second.response = "response-2";
  EXPECT_EQ(store_->PutIdempotency(second)->response, "response-1");
  IdempotencyRecord other_request = first;
  other_request.request_digest = Sha256Digest("another request");
  EXPECT_EQ(store_->PutIdempotency(other_request).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->GetIdempotency("alice", "r1")->response, "response-1");
  EXPECT_EQ(store_->GetIdempotency("bob", "r1").status().code(), absl::StatusCode::kNotFound);

  std::atomic<int> firsts{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      IdempotencyRecord rec{"carol", "r2", Sha256Digest("req"), "resp-" + std::to_string(i), 0};
      absl::StatusOr<IdempotencyRecord> r = store_->PutIdempotency(rec);
      if (r.ok() && r->response == rec.response) ++firsts;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(firsts.load(), 1);
}

TEST_P(StoreTest, GenerationCacheKeepsFirstArtifact) {
  Seed();
  ArtifactRecord other = *store_->PutArtifact(MakeArtifact("invoice_totals/parse", "return 9"));
  std::string request = Sha256Digest("request");
  EXPECT_EQ(store_->GetCachedGeneration(request).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(*store_->PutCachedGeneration(request, artifact_.digest), artifact_.digest);
  EXPECT_EQ(*store_->PutCachedGeneration(request, other.digest), artifact_.digest);
  EXPECT_EQ(*store_->GetCachedGeneration(request), artifact_.digest);
  EXPECT_EQ(store_->PutCachedGeneration(Sha256Digest("r2"), Sha256Digest("none")).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_P(StoreTest, KeyValueCache) {
  EXPECT_EQ(store_->KvGet("model", "/m:1:2").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(store_->KvPut("model", "/m:1:2", "sha256:aa").ok());
  EXPECT_TRUE(store_->KvPut("model", "/m:1:2", "sha256:bb").ok());
  EXPECT_EQ(*store_->KvGet("model", "/m:1:2"), "sha256:bb");
  EXPECT_EQ(store_->KvGet("other", "/m:1:2").status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(store_->KvDelete("model", "/m:1:2").ok());
  EXPECT_EQ(store_->KvGet("model", "/m:1:2").status().code(), absl::StatusCode::kNotFound);
}

TEST_P(StoreTest, PagesCoverEverythingOnceAndRejectTampering) {
  for (int i = 0; i < 23; ++i) {
    store_->PutBlueprint(MakeBlueprint(i % 3 == 0 ? "a" : "b", std::to_string(i))).IgnoreError();
  }
  std::vector<std::string> seen;
  PageRequest req{10, ""};
  int pages = 0;
  while (true) {
    absl::StatusOr<Page<BlueprintRecord>> page = store_->ListBlueprints({}, req);
    ASSERT_TRUE(page.ok()) << page.status();
    ++pages;
    for (const auto& bp : page->items) seen.push_back(bp.version);
    if (page->next_page_token.empty()) break;
    req.page_token = page->next_page_token;
  }
  EXPECT_EQ(pages, 3);
  ASSERT_EQ(seen.size(), 23u);
  for (int i = 0; i < 23; ++i) EXPECT_EQ(seen[static_cast<size_t>(i)], std::to_string(i));

  // Filtered pages.
  absl::StatusOr<Page<BlueprintRecord>> a1 = store_->ListBlueprints({"a"}, {5, ""});
  ASSERT_EQ(a1->items.size(), 5u);
  absl::StatusOr<Page<BlueprintRecord>> a2 = store_->ListBlueprints({"a"}, {5, a1->next_page_token});
  ASSERT_TRUE(a2.ok());
  EXPECT_EQ(a2->items.size(), 3u);  // 0,3,...,21: eight in all
  EXPECT_TRUE(a2->next_page_token.empty());

  // The token belongs to its filter and its list.
  EXPECT_EQ(store_->ListBlueprints({"b"}, {5, a1->next_page_token}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->ListBlueprints({}, {5, a1->next_page_token}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->ListRuns({}, {5, a1->next_page_token}).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Every single-character edit is caught.
  const std::string& token = a1->next_page_token;
  for (size_t i = 0; i < token.size(); ++i) {
    std::string edited = token;
    edited[i] = edited[i] == 'A' ? 'B' : 'A';
    EXPECT_EQ(store_->ListBlueprints({"a"}, {5, edited}).status().code(),
              absl::StatusCode::kInvalidArgument)
        << "edit at " << i;
  }
  EXPECT_EQ(store_->ListBlueprints({"a"}, {5, "garbage!"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->ListBlueprints({}, {-1, ""}).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Another database has another secret.
  std::unique_ptr<testing::StoreLocation> other_location = NewLocation();
  StoreOptions other_options;
  other_options.path = other_location->path();
  std::unique_ptr<Store> other = OpenOrDie(other_options);
  for (int i = 0; i < 7; ++i) other->PutBlueprint(MakeBlueprint("a", std::to_string(i))).IgnoreError();
  EXPECT_EQ(other->ListBlueprints({"a"}, {5, a1->next_page_token}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_P(StoreTest, ListRunsFiltersAndPages) {
  Seed();
  BlueprintRecord bp2 = *store_->PutBlueprint(MakeBlueprint("second", "1"));
  std::vector<int64_t> first_bp_running;
  for (int i = 0; i < 12; ++i) {
    NewRun run = MakeRun();
    if (i % 4 == 3) run.blueprint_digest = bp2.digest;
    RunRecord r = store_->CreateRun(run)->run;
    if (i % 2 == 0) {
      store_->StartRun(r.id).IgnoreError();
      if (i % 4 != 3) first_bp_running.push_back(r.id);
    }
  }
  RunFilter filter{bp_.digest, RunState::kRunning};
  std::vector<int64_t> got;
  PageRequest req{2, ""};
  do {
    absl::StatusOr<Page<RunRecord>> page = store_->ListRuns(filter, req);
    ASSERT_TRUE(page.ok()) << page.status();
    for (const RunRecord& r : page->items) {
      EXPECT_EQ(r.state, RunState::kRunning);
      EXPECT_EQ(r.blueprint_digest, bp_.digest);
      got.push_back(r.id);
    }
    req.page_token = page->next_page_token;
  } while (!req.page_token.empty());
  EXPECT_EQ(got, first_bp_running);
  EXPECT_EQ(store_->ListRuns({bp2.digest, std::nullopt}, {100, ""})->items.size(), 3u);
}

TEST_P(SqliteStoreTest, BackupIsOneSelfContainedFile) {
  Seed();
  std::string big(200 * 1024, 'z');
  big[12345] = 'y';
  StoreOptions small_inline = Options();
  store_.reset();
  small_inline.inline_blob_max_bytes = 1024;
  store_ = OpenOrDie(small_inline);
  BlobRef big_ref = *store_->PutBlob(big);
  RunRecord r = store_->CreateRun(MakeRun())->run;
  const std::string backup_path = ScratchDir() + "/backup.db";
  absl::Status st = store_->Backup(backup_path);
  ASSERT_TRUE(st.ok()) << st;
  // Writes after the backup are not in it.
  store_->CreateRun(MakeRun()).IgnoreError();

  StoreOptions restored_options;
  restored_options.path = backup_path;
  restored_options.full_integrity_check_on_open = true;
  std::unique_ptr<Store> restored = OpenOrDie(restored_options);
  EXPECT_FALSE(std::filesystem::exists(backup_path + ".blobs"));
  EXPECT_EQ(*restored->GetBlob(big_ref.digest), big);
  EXPECT_EQ(restored->GetRun(r.id)->input_digest, input_);
  EXPECT_EQ(restored->ListRuns({}, {})->items.size(), 1u);
  EXPECT_EQ(restored->GetArtifact(artifact_.digest)->source, artifact_.source);
}

// A database locked by another process must produce a retryable error, not a hang.
TEST_P(SqliteStoreTest, BusyDatabaseIsUnavailableNotAHang) {
  Seed();
  StoreOptions options = Options();
  options.busy_timeout_ms = 200;
  store_.reset();
  store_ = OpenOrDie(options);
  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open((ScratchDir() + "/data/rote.db").c_str(), &other), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(other, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
  auto start = std::chrono::steady_clock::now();
  absl::StatusOr<CreateRunResult> blocked = store_->CreateRun(MakeRun());
  auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(blocked.status().code(), absl::StatusCode::kUnavailable) << blocked.status();
  EXPECT_LT(waited, std::chrono::seconds(3));
  // Reads still work while another process writes (WAL).
  EXPECT_TRUE(store_->GetArtifact(artifact_.digest).ok());
  ASSERT_EQ(sqlite3_exec(other, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(other);
  EXPECT_TRUE(store_->CreateRun(MakeRun()).ok());
}

}  // namespace
}  // namespace rote::store

namespace rote::store {
namespace {

// A full database is RESOURCE_EXHAUSTED, loses nothing acknowledged, and stays readable.
TEST(FullDatabaseTest, FullIsResourceExhaustedAndLosesNothing) {
  TempDir dir;
  StoreOptions options;
  options.path = dir.path();
  options.max_database_bytes = 512 * 1024;
  std::unique_ptr<Store> store = OpenOrDie(options);
  std::vector<std::string> stored;
  absl::Status last;
  for (int i = 0; i < 100; ++i) {
    std::string bytes(32 * 1024, static_cast<char>('a' + i % 26));
    bytes += std::to_string(i);
    absl::StatusOr<BlobRef> ref = store->PutBlob(bytes);
    if (!ref.ok()) {
      last = ref.status();
      break;
    }
    stored.push_back(ref->digest);
  }
  EXPECT_EQ(last.code(), absl::StatusCode::kResourceExhausted) << last;
  EXPECT_NE(last.message().find("full"), absl::string_view::npos) << last;
  EXPECT_GT(stored.size(), 3u);
  EXPECT_LT(stored.size(), 16u);
  // Many writers at once against a full database: each gets the error, none hangs.
  std::vector<std::thread> threads;
  std::atomic<int> exhausted{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      absl::StatusOr<BlobRef> r = store->PutBlob(std::string(64 * 1024, static_cast<char>(t)));
      if (r.status().code() == absl::StatusCode::kResourceExhausted) ++exhausted;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(exhausted.load(), 8);
  for (const std::string& digest : stored) EXPECT_TRUE(store->GetBlob(digest).ok()) << digest;
  EXPECT_TRUE(store->CheckIntegrity(true).ok());
  // Small writes still fit in partly used pages or fail the same clear way.
  absl::Status small = store->KvPut("ns", "k", "v");
  EXPECT_TRUE(small.ok() || small.code() == absl::StatusCode::kResourceExhausted) << small;
}

}  // namespace
}  // namespace rote::store
