// Live revisions and the audit log: promotion on approval, fallback and unbinding when the
// live revision is rejected, explicit promotion, proposals and unreviewed runs, each audited
// in the transaction of its decision.
#include <string>

#include "gtest/gtest.h"
#include "store/store.h"
#include "tests/store/test_util.h"

namespace rote::store {
namespace {

using testing::FakeClock;
using testing::MakeArtifact;
using testing::OpenOrDie;
using testing::TempDir;

class LiveRevisionTest : public testing::BackendTest {
 protected:
  void SetUp() override {
    BackendTest::SetUp();
    if (!Ready()) return;
    StoreOptions o;
    o.path = StorePath();
    o.clock_ms = clock_.Fn();
    store_ = OpenOrDie(o);
  }

  ArtifactRecord Put(const std::string& source, const std::string& spec = "sha256:spec") {
    ArtifactRecord a = MakeArtifact("bp/parse", source);
    a.provenance.spec_digest = Sha256Digest(spec);
    absl::StatusOr<ArtifactRecord> stored = store_->PutArtifact(a);
    EXPECT_TRUE(stored.ok()) << stored.status();
    return *stored;
  }

  ArtifactRecord Review(const ArtifactRecord& a, ReviewState decision, bool promote = true) {
    ReviewRequest r;
    r.artifact_digest = a.digest;
    r.principal = "carol";
    r.decision = decision;
    r.comment = "looked at it";
    r.promote = promote;
    absl::StatusOr<ArtifactRecord> out = store_->ReviewArtifact(r);
    EXPECT_TRUE(out.ok()) << out.status();
    return *out;
  }

  std::string Live(const std::string& spec = "sha256:spec") {
    absl::StatusOr<LiveRevision> live = store_->GetLiveRevision("bp/parse", Sha256Digest(spec));
    if (absl::IsNotFound(live.status())) return "";
    EXPECT_TRUE(live.ok()) << live.status();
    return live.ok() ? live->artifact_digest : "";
  }

  std::vector<std::string> Actions() {
    std::vector<std::string> out;
    absl::StatusOr<Page<AuditEntry>> page = store_->ListAuditEntries({}, {});
    EXPECT_TRUE(page.ok()) << page.status();
    for (const AuditEntry& e : page->items) out.push_back(e.action + ":" + std::to_string(e.revision));
    return out;
  }

  FakeClock clock_;
  std::unique_ptr<Store> store_;
};

ROTE_BOTH_BACKENDS(LiveRevisionTest);

TEST_P(LiveRevisionTest, ApprovalPromotesAndRejectionFallsBackThenUnbinds) {
  ArtifactRecord r1 = Put("return 1");
  ArtifactRecord r2 = Put("return 2");
  EXPECT_EQ(Live(), "");
  EXPECT_TRUE(Review(r1, ReviewState::kApproved).live);
  EXPECT_EQ(Live(), r1.digest);
  EXPECT_TRUE(Review(r2, ReviewState::kApproved).live);
  EXPECT_EQ(Live(), r2.digest);
  EXPECT_FALSE(store_->GetArtifact(r1.digest)->live);

  // Rejecting the live revision 2 makes revision 1 live again; rejecting 1 leaves none.
  EXPECT_FALSE(Review(r2, ReviewState::kRejected).live);
  EXPECT_EQ(Live(), r1.digest);
  Review(r1, ReviewState::kRejected);
  EXPECT_EQ(Live(), "");
  EXPECT_EQ(Actions(), (std::vector<std::string>{"approve:1", "promote:1", "approve:2", "promote:2",
                                                 "reject:2", "fallback:1", "reject:1", "unbind:1"}));
}

TEST_P(LiveRevisionTest, ApprovalWithoutPromotionOnlyMakesEligibleThenPromoteMakesLive) {
  ArtifactRecord r1 = Put("return 1");
  ArtifactRecord r2 = Put("return 2");
  Review(r1, ReviewState::kApproved);
  Review(r2, ReviewState::kApproved, /*promote=*/false);
  EXPECT_EQ(Live(), r1.digest);
  absl::StatusOr<ArtifactRecord> promoted = store_->PromoteRevision({r2.digest, "dave", "promote", "ship it"});
  ASSERT_TRUE(promoted.ok()) << promoted.status();
  EXPECT_TRUE(promoted->live);
  EXPECT_EQ(Live(), r2.digest);
  absl::StatusOr<Page<AuditEntry>> audit = store_->ListAuditEntries({"", r2.digest}, {});
  ASSERT_TRUE(audit.ok());
  ASSERT_EQ(audit->items.size(), 2u);
  EXPECT_EQ(audit->items[1].action, "promote");
  EXPECT_EQ(audit->items[1].principal, "dave");
  EXPECT_NE(audit->items[1].detail.find("ship it"), std::string::npos);
  EXPECT_NE(audit->items[1].detail.find(r1.digest), std::string::npos);
}

TEST_P(LiveRevisionTest, OnlyApprovedRevisionsBecomeLive) {
  ArtifactRecord pending = Put("return 1");
  absl::StatusOr<ArtifactRecord> p = store_->PromoteRevision({pending.digest, "dave"});
  EXPECT_EQ(p.status().code(), absl::StatusCode::kFailedPrecondition) << p.status();
  Review(pending, ReviewState::kRejected);
  p = store_->PromoteRevision({pending.digest, "dave"});
  EXPECT_EQ(p.status().code(), absl::StatusCode::kFailedPrecondition) << p.status();
  EXPECT_EQ(Live(), "");
  EXPECT_EQ(Actions(), (std::vector<std::string>{"reject:1"}));
}

TEST_P(LiveRevisionTest, LockfilePromotionFillsGapsOnly) {
  ArtifactRecord r1 = Put("return 1");
  ArtifactRecord r2 = Put("return 2");
  Review(r1, ReviewState::kApproved);
  Review(r2, ReviewState::kApproved, false);
  PromoteRequest lock{r2.digest, "erin", "lockfile", "", /*only_if_unset=*/true};
  ASSERT_TRUE(store_->PromoteRevision(lock).ok());
  EXPECT_EQ(Live(), r1.digest);
}

TEST_P(LiveRevisionTest, EachSpecOfAPointHasItsOwnLiveRevision) {
  ArtifactRecord v1 = Put("return 1", "spec v1");
  ArtifactRecord v2 = Put("return 2", "spec v2");
  Review(v1, ReviewState::kApproved);
  Review(v2, ReviewState::kApproved);
  EXPECT_EQ(Live("spec v1"), v1.digest);
  EXPECT_EQ(Live("spec v2"), v2.digest);
  // Rejecting v2's live revision never falls back to another spec's code.
  Review(v2, ReviewState::kRejected);
  EXPECT_EQ(Live("spec v2"), "");
  EXPECT_EQ(Live("spec v1"), v1.digest);
}

TEST_P(LiveRevisionTest, ProposalIsStoredPendingAndAuditedTogether) {
  ArtifactRecord a = MakeArtifact("bp/parse", "return 7");
  a.provenance.author = "frank";
  AuditEntry audit;
  audit.principal = "frank";
  audit.action = "propose";
  audit.detail = "handles negative amounts";
  absl::StatusOr<ArtifactRecord> stored = store_->ProposeArtifact(a, audit);
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->state, ReviewState::kPending);
  absl::StatusOr<Page<AuditEntry>> page = store_->ListAuditEntries({"bp/parse", ""}, {});
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->items.size(), 1u);
  EXPECT_EQ(page->items[0].artifact_digest, stored->digest);
  EXPECT_EQ(page->items[0].revision, 1);
  EXPECT_EQ(page->items[0].sequence, 1);
}

TEST_P(LiveRevisionTest, UnreviewedRunIsAuditedWithWhoAllowedIt) {
  ArtifactRecord a = Put("return 1");
  BlueprintRecord bp = testing::MakeBlueprint("bp", "1");
  ASSERT_TRUE(store_->PutBlueprint(bp).ok());
  absl::StatusOr<BlobRef> input = store_->PutBlob("{}");
  ASSERT_TRUE(input.ok());
  NewRun run;
  run.blueprint_digest = bp.digest;
  run.input_digest = input->digest;
  run.bindings = {Binding{"parse", a.digest, "pending"}};
  run.submitter = "gina";
  // Unreviewed code needs someone who allowed it.
  EXPECT_EQ(store_->CreateRun(run).status().code(), absl::StatusCode::kInvalidArgument);
  run.unreviewed_allowed_by = "gina";
  absl::StatusOr<CreateRunResult> created = store_->CreateRun(run);
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(created->run.unreviewed_allowed_by, "gina");
  absl::StatusOr<Page<AuditEntry>> page = store_->ListAuditEntries({}, {});
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->items.size(), 1u);
  EXPECT_EQ(page->items[0].action, "run_unreviewed");
  EXPECT_EQ(page->items[0].run_id, created->run.id);
  EXPECT_EQ(page->items[0].principal, "gina");
}

TEST_P(LiveRevisionTest, AuditPagesAreDenseAndTokensBoundToTheirFilter) {
  for (int i = 0; i < 5; ++i) Review(Put("return " + std::to_string(i)), ReviewState::kApproved);
  PageRequest req;
  req.page_size = 3;
  absl::StatusOr<Page<AuditEntry>> first = store_->ListAuditEntries({}, req);
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(first->items.size(), 3u);
  req.page_token = first->next_page_token;
  absl::StatusOr<Page<AuditEntry>> second = store_->ListAuditEntries({}, req);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->items.front().sequence, 4);
  EXPECT_EQ(store_->ListAuditEntries({"bp/parse", ""}, req).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace rote::store
