// The artifact service over the engine: revisions per generation point, review with etags,
// diffs between revisions, and what a lockfile registration leaves behind.
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/word_stats.h"

namespace rote::e2e {
namespace {

std::string WithShoutSource(const std::string& lock, const std::string& source) {
  std::string out = lock;
  const std::string old = "return function(word) return string.upper(word) end\n";
  out.replace(out.find(old), old.size(), source);
  return out;
}

TEST(ArtifactsE2e, RevisionsReviewAndDiff) {
  TestServer server;
  server.Start();
  server.Register(kWordStats, kWordStatsLock, "word_stats.lua");
  // The same blueprint with a second reference implementation: a new revision, bound instead.
  const std::string v2 = "-- upper-cases ASCII letters\nreturn function(word)\n  return (string.upper(word))\nend\n";
  rote::v1::Blueprint bp = server.Register(kWordStats, WithShoutSource(kWordStatsLock, v2), "word_stats.lua");

  rote::v1::ListRevisionsRequest lr;
  lr.set_generation_point("word_stats/shout");
  rote::v1::ListRevisionsResponse revisions;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(server.artifacts().ListRevisions(&ctx, lr, &revisions).ok());
  }
  ASSERT_EQ(revisions.revisions_size(), 2);
  EXPECT_EQ(revisions.revisions(0).revision(), 1);
  EXPECT_EQ(revisions.revisions(1).revision(), 2);
  // Revisions, as any list, name sources by digest and size; GetArtifact returns them whole.
  EXPECT_TRUE(revisions.revisions(1).source().empty());
  EXPECT_TRUE(revisions.revisions(1).source_omitted());
  EXPECT_EQ(revisions.revisions(1).source_size_bytes(), static_cast<int64_t>(v2.size()));
  for (const auto& a : revisions.revisions()) {
    EXPECT_EQ(a.state(), rote::v1::REVIEW_STATE_APPROVED);
    EXPECT_EQ(a.provenance().author(), "expert");
    EXPECT_EQ(a.kind(), rote::v1::ARTIFACT_KIND_LUA_FUNCTION);
    ASSERT_EQ(a.reviews_size(), 1);
    EXPECT_EQ(a.reviews(0).principal(), "local");
    EXPECT_TRUE(a.validation_report_json().empty());
    rote::v1::GetArtifactRequest get;
    get.set_name(a.name());
    rote::v1::Artifact whole;
    grpc::ClientContext ctx;
    ASSERT_TRUE(server.artifacts().GetArtifact(&ctx, get, &whole).ok());
    EXPECT_FALSE(whole.source_omitted());
    EXPECT_EQ(static_cast<int64_t>(whole.source().size()), a.source_size_bytes());
    EXPECT_NE(whole.validation_report_json().find(R"("passed":true)"), std::string::npos);
  }
  {
    rote::v1::GetArtifactRequest get;
    get.set_name(revisions.revisions(1).name());
    rote::v1::Artifact whole;
    grpc::ClientContext ctx;
    ASSERT_TRUE(server.artifacts().GetArtifact(&ctx, get, &whole).ok());
    EXPECT_EQ(whole.source(), v2);
  }
  bool bound_to_v2 = false;
  for (const auto& b : bp.bindings()) {
    if (b.generation_point() == "shout") bound_to_v2 = b.artifact_digest() == revisions.revisions(1).digest();
  }
  EXPECT_TRUE(bound_to_v2);

  // A run uses revision 2 and gives the same answer.
  rote::v1::Run run = server.WaitDone(server.Submit(bp.name(), R"({"text": "two"})").name());
  ASSERT_EQ(run.state(), rote::v1::RUN_STATE_SUCCEEDED) << run.error();
  EXPECT_EQ(run.output_json(), R"({"count":1,"first":"TWO","loud":["TWO"]})");

  rote::v1::DiffRevisionsRequest dr;
  dr.set_generation_point("word_stats/shout");
  dr.set_to_revision(2);
  rote::v1::DiffRevisionsResponse diff;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(server.artifacts().DiffRevisions(&ctx, dr, &diff).ok());
  }
  EXPECT_NE(diff.unified_diff().find("\n-return function(word) return string.upper(word) end\n"), std::string::npos)
      << diff.unified_diff();
  EXPECT_NE(diff.unified_diff().find("\n+-- upper-cases ASCII letters\n"), std::string::npos) << diff.unified_diff();
  EXPECT_EQ(diff.unified_diff().rfind("--- word_stats/shout/revisions/1", 0), 0u) << diff.unified_diff();

  // Review by revision name with the etag; a stale etag is ABORTED, a missing one INVALID_ARGUMENT.
  rote::v1::GetArtifactRequest gr;
  gr.set_name("artifacts/word_stats/shout/revisions/1");
  rote::v1::Artifact first;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(server.artifacts().GetArtifact(&ctx, gr, &first).ok());
  }
  EXPECT_EQ(first.digest(), revisions.revisions(0).digest());
  rote::v1::ReviewArtifactRequest review;
  review.set_name(first.name());
  review.set_decision(rote::v1::REVIEW_STATE_REJECTED);
  review.set_comment("superseded by revision 2");
  review.set_etag(first.etag());
  rote::v1::Artifact rejected;
  {
    grpc::ClientContext ctx;
    grpc::Status st = server.artifacts().ReviewArtifact(&ctx, review, &rejected);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  EXPECT_EQ(rejected.state(), rote::v1::REVIEW_STATE_REJECTED);
  EXPECT_NE(rejected.etag(), first.etag());
  ASSERT_EQ(rejected.reviews_size(), 2);
  EXPECT_EQ(rejected.reviews(1).comment(), "superseded by revision 2");
  {
    grpc::ClientContext ctx;
    rote::v1::Artifact out;
    EXPECT_EQ(server.artifacts().ReviewArtifact(&ctx, review, &out).error_code(), grpc::StatusCode::ABORTED);
  }
  review.clear_etag();
  {
    grpc::ClientContext ctx;
    rote::v1::Artifact out;
    EXPECT_EQ(server.artifacts().ReviewArtifact(&ctx, review, &out).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }

  rote::v1::ListArtifactsRequest la;
  la.set_state(rote::v1::REVIEW_STATE_REJECTED);
  rote::v1::ListArtifactsResponse listed;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(server.artifacts().ListArtifacts(&ctx, la, &listed).ok());
  }
  ASSERT_EQ(listed.artifacts_size(), 1);
  EXPECT_EQ(listed.artifacts(0).digest(), first.digest());

  // Registering the old lockfile again would bind a rejected artifact: refused.
  rote::v1::Blueprint again;
  grpc::Status st = server.TryRegister(kWordStats, kWordStatsLock, "word_stats.lua", &again);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << st.error_message();
  EXPECT_NE(st.error_message().find("rejected in review"), std::string::npos);

  // Unknown names.
  gr.set_name("artifacts/word_stats/shout/revisions/9");
  {
    grpc::ClientContext ctx;
    rote::v1::Artifact out;
    EXPECT_EQ(server.artifacts().GetArtifact(&ctx, gr, &out).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  gr.set_name("artifacts/oops");
  {
    grpc::ClientContext ctx;
    rote::v1::Artifact out;
    EXPECT_EQ(server.artifacts().GetArtifact(&ctx, gr, &out).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
}

}  // namespace
}  // namespace rote::e2e

namespace rote::e2e {
namespace {

TEST(ArtifactsE2e, OnlyReviewersApproveLockfileArtifacts) {
  TestServer server;
  const std::string keys = server.data_dir() + "/keys";
  {
    std::ofstream f(keys);
    f << "# token principal roles\n"
         "alice-token-0123456789 alice submit\n"
         "bob-token-0123456789   bob   submit,review\n";
  }
  server.Start(4, keys);
  server.set_token("alice-token-0123456789");
  rote::v1::Blueprint bp = server.Register(kWordStats, kWordStatsLock, "word_stats.lua");
  // The lockfile's code is stored pending: no point has a live revision yet.
  ASSERT_EQ(bp.bindings_size(), 0);
  rote::v1::SubmitRunRequest req;
  req.set_blueprint(bp.name());
  req.set_input_json(R"({"text": "x"})");
  rote::v1::Run run;
  {
    auto ctx = server.Context();
    grpc::Status st = server.runs().SubmitRun(ctx.get(), req, &run);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_NE(st.error_message().find("pending review"), std::string::npos) << st.error_message();
  }
  // A reviewer registering the same lockfile approves the artifacts; now anyone may run it.
  server.set_token("bob-token-0123456789");
  server.Register(kWordStats, kWordStatsLock, "word_stats.lua");
  server.set_token("alice-token-0123456789");
  run = server.WaitDone(server.Submit(bp.name(), R"({"text": "x"})").name());
  EXPECT_EQ(run.state(), rote::v1::RUN_STATE_SUCCEEDED) << run.error();
  EXPECT_EQ(run.submitter(), "alice");
}

}  // namespace
}  // namespace rote::e2e
