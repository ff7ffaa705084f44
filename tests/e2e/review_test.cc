// Review the server enforces, over real gRPC: live revisions (approval promotes, rejection
// falls back or unbinds), proposals validated like model output, four eyes on proposals,
// unreviewed code only for reviewers on a server that allows it, lockfiles of live revisions,
// and the audit log of every decision.
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/word_stats.h"

namespace rote::e2e {
namespace {

constexpr char kAlice[] = "alice-token-0123456789";  // submit
constexpr char kBob[] = "bob-token-0123456789";      // submit, review
constexpr char kCarol[] = "carol-token-0123456789";  // review

// word_stats with only its pattern locked: `shout` starts without code.
constexpr char kPatternOnlyLock[] = R"(format = 1
blueprint = "word_stats"

[[point]]
name = "words"
kind = "re2_pattern"
source = '[A-Za-z]+'
)";

class ReviewE2e : public ::testing::Test {
 protected:
  void StartServer(const std::string& allow_unreviewed = "never", const std::string& promotion = "on-approval") {
    const std::string keys = server_.data_dir() + "/keys";
    std::ofstream(keys) << "alice-token-0123456789 alice submit\n"
                           "bob-token-0123456789   bob   submit,review\n"
                           "carol-token-0123456789 carol review\n";
    server_.set_configure([=](orchestrator::ServerOptions* o) {
      o->allow_unreviewed = allow_unreviewed;
      o->promotion = promotion;
    });
    server_.Start(2, keys);
  }

  grpc::Status Propose(const char* token, const std::string& source, rote::v1::Artifact* out,
                       const std::string& point = "word_stats/shout") {
    server_.set_token(token);
    rote::v1::ProposeRevisionRequest req;
    req.set_generation_point(point);
    req.set_source(source);
    req.set_comment("by hand");
    return server_.artifacts().ProposeRevision(server_.Context().get(), req, out);
  }

  grpc::Status Review(const char* token, const rote::v1::Artifact& a, rote::v1::ReviewState decision,
                      rote::v1::Artifact* out) {
    server_.set_token(token);
    rote::v1::GetArtifactRequest get;
    get.set_name(a.name());
    rote::v1::Artifact current;
    grpc::Status st = server_.artifacts().GetArtifact(server_.Context().get(), get, &current);
    if (!st.ok()) return st;
    rote::v1::ReviewArtifactRequest req;
    req.set_name(a.name());
    req.set_decision(decision);
    req.set_etag(current.etag());
    req.set_comment(decision == rote::v1::REVIEW_STATE_REJECTED ? "wrong" : "fine");
    return server_.artifacts().ReviewArtifact(server_.Context().get(), req, out);
  }

  rote::v1::Artifact Get(const std::string& name) {
    rote::v1::GetArtifactRequest get;
    get.set_name(name);
    rote::v1::Artifact a;
    EXPECT_TRUE(server_.artifacts().GetArtifact(server_.Context().get(), get, &a).ok());
    return a;
  }

  grpc::Status SubmitAs(const char* token, bool allow_pending, rote::v1::Run* out) {
    server_.set_token(token);
    rote::v1::SubmitRunRequest req;
    req.set_blueprint("blueprints/word_stats");
    req.set_input_json(R"({"text": "hi there"})");
    req.mutable_policy()->set_allow_pending(allow_pending);
    return server_.runs().SubmitRun(server_.Context().get(), req, out);
  }

  std::vector<rote::v1::AuditEntry> Audit() {
    server_.set_token(kCarol);
    rote::v1::ListAuditEntriesRequest req;
    req.set_page_size(1000);
    rote::v1::ListAuditEntriesResponse resp;
    grpc::Status st = server_.artifacts().ListAuditEntries(server_.Context().get(), req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return {resp.entries().begin(), resp.entries().end()};
  }

  rote::v1::LockBlueprintResponse Lock(bool skeleton) {
    server_.set_token(kBob);
    rote::v1::LockBlueprintRequest req;
    req.set_name("blueprints/word_stats");
    req.set_skeleton(skeleton);
    rote::v1::LockBlueprintResponse resp;
    grpc::Status st = server_.blueprints().LockBlueprint(server_.Context().get(), req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return resp;
  }

  TestServer server_;
};

TEST_F(ReviewE2e, ASubmitOnlyPrincipalCannotRunPendingCode) {
  StartServer("reviewers");
  server_.set_token(kAlice);
  server_.Register(kWordStats, kPatternOnlyLock, "word_stats.lua");
  rote::v1::Artifact proposed;
  ASSERT_TRUE(Propose(kAlice, "return function(w) return string.upper(w) end", &proposed).ok());
  EXPECT_EQ(proposed.state(), rote::v1::REVIEW_STATE_PENDING);
  EXPECT_EQ(proposed.author(), "alice");

  rote::v1::Run run;
  grpc::Status st = SubmitAs(kAlice, /*allow_pending=*/true, &run);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
  EXPECT_NE(st.error_message().find("review role"), std::string::npos) << st.error_message();
  // Without asking, the pending code does not run either: the run is refused, naming it.
  st = SubmitAs(kAlice, false, &run);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(st.error_message().find("pending review"), std::string::npos) << st.error_message();
  EXPECT_NE(st.error_message().find("rote artifacts approve " + proposed.name()), std::string::npos)
      << st.error_message();

  // A reviewer, on a server that allows it, may; the run and the audit log say who.
  ASSERT_TRUE(SubmitAs(kBob, true, &run).ok());
  server_.set_token(kBob);
  run = server_.WaitDone(run.name());
  EXPECT_EQ(run.state(), rote::v1::RUN_STATE_SUCCEEDED) << run.error();
  EXPECT_EQ(run.unreviewed_allowed_by(), "bob");
  bool pending_bound = false;
  for (const auto& b : run.bindings()) pending_bound |= b.source() == "pending" && b.artifact_digest() == proposed.digest();
  EXPECT_TRUE(pending_bound);
  std::vector<rote::v1::AuditEntry> audit = Audit();
  ASSERT_FALSE(audit.empty());
  EXPECT_EQ(audit.back().action(), "run_unreviewed");
  EXPECT_EQ(audit.back().principal(), "bob");
  EXPECT_EQ(audit.back().run(), run.name());
  EXPECT_EQ(audit.back().artifact_digest(), proposed.digest());
}

TEST_F(ReviewE2e, NoServerSettingMeansNobodyRunsPendingCode) {
  StartServer("never");
  server_.set_token(kBob);
  server_.Register(kWordStats, kPatternOnlyLock, "word_stats.lua");
  rote::v1::Run run;
  grpc::Status st = SubmitAs(kBob, true, &run);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
  EXPECT_NE(st.error_message().find("--allow-unreviewed=reviewers"), std::string::npos);
}

TEST_F(ReviewE2e, ARejectedLiveRevisionIsNeverRunAgainAndNeverLocked) {
  StartServer();
  server_.set_token(kBob);  // a reviewer's lockfile approves and makes its code live
  rote::v1::Blueprint bp = server_.Register(kWordStats, kWordStatsLock, "word_stats.lua");
  ASSERT_EQ(bp.bindings_size(), 2);
  const std::string first = bp.bindings(1).artifact_digest();  // shout, revision 1
  EXPECT_EQ(bp.bindings(1).generation_point(), "shout");
  EXPECT_EQ(bp.bindings(1).revision(), 1);

  // Alice proposes revision 2; Carol approves it, which makes it live.
  rote::v1::Artifact r2;
  ASSERT_TRUE(Propose(kAlice, "return function(w) return (string.upper(w)) end", &r2).ok());
  EXPECT_EQ(r2.revision(), 2);
  rote::v1::Artifact out;
  ASSERT_TRUE(Review(kCarol, r2, rote::v1::REVIEW_STATE_APPROVED, &out).ok());
  EXPECT_TRUE(out.live());
  EXPECT_FALSE(Get("artifacts/" + first.substr(7)).live());
  rote::v1::Run run;
  ASSERT_TRUE(SubmitAs(kAlice, false, &run).ok());
  server_.set_token(kAlice);
  run = server_.WaitDone(run.name());
  ASSERT_EQ(run.state(), rote::v1::RUN_STATE_SUCCEEDED) << run.error();
  for (const auto& b : run.bindings()) {
    if (b.generation_point() == "shout") {
      EXPECT_EQ(b.artifact_digest(), r2.digest());
      EXPECT_EQ(b.revision(), 2);
    }
    EXPECT_EQ(b.source(), "live");
  }

  // Rejecting the live revision 2 brings revision 1 back.
  ASSERT_TRUE(Review(kCarol, r2, rote::v1::REVIEW_STATE_REJECTED, &out).ok());
  EXPECT_FALSE(out.live());
  EXPECT_TRUE(Get("artifacts/" + first.substr(7)).live());
  ASSERT_TRUE(SubmitAs(kAlice, false, &run).ok());
  server_.set_token(kAlice);
  run = server_.WaitDone(run.name());
  for (const auto& b : run.bindings()) EXPECT_NE(b.artifact_digest(), r2.digest()) << "a rejected revision ran";
  EXPECT_EQ(Lock(false).lockfile().find(r2.digest()), std::string::npos);

  // Rejecting revision 1 too leaves the point without code: runs are refused, lock says so.
  ASSERT_TRUE(Review(kCarol, Get("artifacts/" + first.substr(7)), rote::v1::REVIEW_STATE_REJECTED, &out).ok());
  grpc::Status st = SubmitAs(kAlice, false, &run);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(st.error_message().find("shout"), std::string::npos) << st.error_message();
  rote::v1::LockBlueprintResponse lock = Lock(false);
  EXPECT_EQ(lock.lockfile().find(first), std::string::npos);
  EXPECT_EQ(lock.lockfile().find(r2.digest()), std::string::npos);
  ASSERT_EQ(lock.missing_size(), 1);
  EXPECT_EQ(lock.missing(0), "shout");
  EXPECT_NE(lock.lockfile().find("--skeleton"), std::string::npos);
  // The skeleton has an entry to fill in for shout, with its task and examples.
  rote::v1::LockBlueprintResponse skeleton = Lock(true);
  EXPECT_NE(skeleton.lockfile().find("name = \"shout\""), std::string::npos) << skeleton.lockfile();
  EXPECT_NE(skeleton.lockfile().find("Upper-case a word."), std::string::npos);
  EXPECT_EQ(skeleton.lockfile().find("name = \"words\""), std::string::npos);
  // Registering the skeleton as it is fails: its code does not pass the examples.
  server_.set_token(kBob);
  rote::v1::Blueprint again;
  st = server_.TryRegister(kWordStats, skeleton.lockfile(), "word_stats.lua", &again);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  // A rejected revision in a lockfile is refused, naming commands that exist.
  st = server_.TryRegister(kWordStats, kWordStatsLock, "word_stats.lua", &again);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(st.error_message().find("rote artifacts approve"), std::string::npos) << st.error_message();
  EXPECT_EQ(st.error_message().find("artifacts review"), std::string::npos) << st.error_message();

  std::vector<std::string> actions;
  for (const auto& e : Audit()) actions.push_back(e.action());
  EXPECT_EQ(actions, (std::vector<std::string>{"approve", "lockfile", "approve", "lockfile", "propose", "approve",
                                                "promote", "reject", "fallback", "reject", "unbind"}));
}

TEST_F(ReviewE2e, AProposalThatFailsItsExamplesIsRefusedWithTheFailingExample) {
  StartServer();
  server_.set_token(kBob);
  server_.Register(kWordStats, kPatternOnlyLock, "word_stats.lua");
  rote::v1::Artifact out;
  grpc::Status st = Propose(kAlice, "return function(w) return string.lower(w) end", &out);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(st.error_message().find("\"hi\""), std::string::npos) << st.error_message();
  EXPECT_NE(st.error_message().find("HI"), std::string::npos) << st.error_message();
  // Code that does not load, a point nobody declares, a bad role: refused.
  EXPECT_EQ(Propose(kAlice, "return function(", &out).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(Propose(kAlice, "return 1", &out, "word_stats/nope").error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Propose(kAlice, "return 1", &out, "no slash or name!").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // The same code again is not a new revision.
  ASSERT_TRUE(Propose(kAlice, "return function(w) return string.upper(w) end", &out).ok());
  EXPECT_EQ(Propose(kBob, "return function(w) return string.upper(w) end", &out).error_code(),
            grpc::StatusCode::ALREADY_EXISTS);
  // A bare point name works when one blueprint declares it.
  EXPECT_TRUE(Propose(kAlice, "return function(w) return string.upper(w) .. '' end", &out, "shout").ok());
  EXPECT_EQ(out.generation_point(), "word_stats/shout");
}

TEST_F(ReviewE2e, FourEyesApplyToProposals) {
  StartServer();
  server_.set_token(kBob);
  server_.Register(kWordStats, kPatternOnlyLock, "word_stats.lua");
  rote::v1::Artifact proposed;
  ASSERT_TRUE(Propose(kBob, "return function(w) return string.upper(w) end", &proposed).ok());
  rote::v1::Artifact out;
  grpc::Status st = Review(kBob, proposed, rote::v1::REVIEW_STATE_APPROVED, &out);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED) << st.error_message();
  EXPECT_NE(st.error_message().find("proposed"), std::string::npos) << st.error_message();
  ASSERT_TRUE(Review(kCarol, proposed, rote::v1::REVIEW_STATE_APPROVED, &out).ok());
  EXPECT_TRUE(out.live());
}

TEST_F(ReviewE2e, ManualPromotionKeepsTheLiveRevisionUntilPromoted) {
  StartServer("never", "manual");
  server_.set_token(kBob);
  rote::v1::Blueprint bp = server_.Register(kWordStats, kWordStatsLock, "word_stats.lua");
  rote::v1::Artifact r2;
  ASSERT_TRUE(Propose(kAlice, "return function(w) return (string.upper(w)) end", &r2).ok());
  rote::v1::Artifact out;
  ASSERT_TRUE(Review(kCarol, r2, rote::v1::REVIEW_STATE_APPROVED, &out).ok());
  EXPECT_FALSE(out.live());
  server_.set_token(kAlice);
  rote::v1::PromoteRevisionRequest promote;
  promote.set_name(r2.name());
  EXPECT_EQ(server_.artifacts().PromoteRevision(server_.Context().get(), promote, &out).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  server_.set_token(kCarol);
  promote.set_comment("after the backtest");
  ASSERT_TRUE(server_.artifacts().PromoteRevision(server_.Context().get(), promote, &out).ok());
  EXPECT_TRUE(out.live());
  std::vector<rote::v1::AuditEntry> audit = Audit();
  EXPECT_EQ(audit.back().action(), "promote");
  EXPECT_NE(audit.back().detail().find("after the backtest"), std::string::npos);
  // The diff to the live revision is empty now; against revision 1 it shows the change.
  rote::v1::DiffRevisionsRequest diff;
  diff.set_generation_point("word_stats/shout");
  diff.set_to_revision(2);
  diff.set_from_revision(-1);
  rote::v1::DiffRevisionsResponse d;
  ASSERT_TRUE(server_.artifacts().DiffRevisions(server_.Context().get(), diff, &d).ok());
  EXPECT_EQ(d.unified_diff(), "");
}

}  // namespace
}  // namespace rote::e2e
