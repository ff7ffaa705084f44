// Trying and backtesting a revision over real gRPC: a pending revision runs on an input with its
// usage reported, a backtest re-runs the point's recorded calls and shows each difference with
// both values, counts errors, stores its result for GetBacktest and the artifact's summary, and
// both are for reviewers only.
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/word_stats.h"

namespace rote::e2e {
namespace {

constexpr char kBoth[] = "both-token-0123456789ab";
constexpr char kSub[] = "sub-token-0123456789abc";
constexpr char kRev[] = "rev-token-0123456789abc";

std::string WriteKeys(const std::string& dir) {
  const std::string path = dir + "/keys";
  std::ofstream f(path);
  f << "sub-token-0123456789abc   sub   submit\n"
       "rev-token-0123456789abc   rev   review\n"
       "both-token-0123456789ab   both  submit,review\n";
  return path;
}

std::string WithShout(const std::string& source) {
  std::string out = kWordStatsLock;
  const std::string old = "return function(word) return string.upper(word) end\n";
  out.replace(out.find(old), old.size(), source);
  return out;
}

// Recorded: runs of word_stats with shout = string.upper; then `candidate` proposed by a
// submitter (pending) as the next revision of word_stats/shout.
class BacktestE2e : public ::testing::Test {
 protected:
  void SetUp() override {
    server_.Start(2, WriteKeys(server_.data_dir()));
    server_.set_token(kBoth);
    rote::v1::Blueprint bp = server_.Register(kWordStats, kWordStatsLock, "word_stats.lua");
    for (const char* text : {"one two", "three", "four five six"}) {
      rote::v1::Run run = server_.WaitDone(server_.Submit(bp.name(), std::string(R"({"text":")") + text + "\"}").name());
      ASSERT_EQ(run.state(), rote::v1::RUN_STATE_SUCCEEDED) << run.error();
    }
  }

  std::string Propose(const std::string& source) {
    server_.set_token(kSub);
    server_.Register(kWordStats, WithShout(source), "word_stats.lua");
    rote::v1::ListRevisionsRequest lr;
    lr.set_generation_point("word_stats/shout");
    rote::v1::ListRevisionsResponse revisions;
    auto ctx = server_.Context();
    EXPECT_TRUE(server_.artifacts().ListRevisions(ctx.get(), lr, &revisions).ok());
    server_.set_token(kRev);
    if (revisions.revisions_size() == 0) return "";
    const rote::v1::Artifact& last = revisions.revisions(revisions.revisions_size() - 1);
    EXPECT_EQ(last.state(), rote::v1::REVIEW_STATE_PENDING);
    return last.name();
  }

  grpc::Status Backtest(const std::string& name, rote::v1::Backtest* out, bool whole_runs = false) {
    rote::v1::BacktestRevisionRequest req;
    req.set_name(name);
    req.set_whole_runs(whole_runs);
    auto ctx = server_.Context();
    return server_.artifacts().BacktestRevision(ctx.get(), req, out);
  }

  TestServer server_;
};

TEST_F(BacktestE2e, TryRunsAPendingRevisionWithItsUsage) {
  // Passes its spec ("hi" -> "HI"), doubles every other word.
  const std::string name =
      Propose("return function(word) if word == 'hi' then return 'HI' end print(word) return word:rep(2) end\n");
  rote::v1::TryArtifactRequest req;
  req.set_name(name);
  req.set_input_json(R"("ab")");
  rote::v1::TryArtifactResponse resp;
  auto ctx = server_.Context();
  grpc::Status st = server_.artifacts().TryArtifact(ctx.get(), req, &resp);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(resp.output_json(), R"("abab")");
  EXPECT_TRUE(resp.error().empty());
  EXPECT_GT(resp.instructions_used(), 0);
  EXPECT_GT(resp.memory_peak_bytes(), 0);
  EXPECT_EQ(resp.output_bytes(), 3);  // "ab\n"
  EXPECT_EQ(resp.max_instructions(), 1'000'000'000);

  // Deterministic: the same answer and usage again.
  rote::v1::TryArtifactResponse again;
  auto ctx2 = server_.Context();
  ASSERT_TRUE(server_.artifacts().TryArtifact(ctx2.get(), req, &again).ok());
  EXPECT_EQ(again.SerializeAsString(), resp.SerializeAsString());

  // A limit is a result, reported with the limit it ran under.
  req.set_max_instructions(1);
  auto ctx3 = server_.Context();
  ASSERT_TRUE(server_.artifacts().TryArtifact(ctx3.get(), req, &resp).ok());
  EXPECT_TRUE(resp.output_json().empty());
  EXPECT_NE(resp.error().find("instruction"), std::string::npos) << resp.error();
  EXPECT_EQ(resp.max_instructions(), 1);

  // A pattern by digest: find_all on the text.
  rote::v1::ListArtifactsRequest lr;
  lr.set_generation_point("word_stats/words");
  rote::v1::ListArtifactsResponse words;
  auto ctx4 = server_.Context();
  ASSERT_TRUE(server_.artifacts().ListArtifacts(ctx4.get(), lr, &words).ok());
  ASSERT_EQ(words.artifacts_size(), 1);
  rote::v1::TryArtifactRequest re;
  re.set_name(words.artifacts(0).name());
  re.set_input_json(R"("hi 42 there")");
  auto ctx5 = server_.Context();
  ASSERT_TRUE(server_.artifacts().TryArtifact(ctx5.get(), re, &resp).ok());
  EXPECT_EQ(resp.output_json(), R"(["hi","there"])");
}

TEST_F(BacktestE2e, TryRefusesBadInputAndNonReviewers) {
  const std::string name = Propose("return function(word) return (string.upper(word)) end\n");
  rote::v1::TryArtifactRequest req;
  req.set_name(name);
  rote::v1::TryArtifactResponse resp;
  for (const char* bad : {"", "{not json", "[1,"}) {
    req.set_input_json(bad);
    auto ctx = server_.Context();
    EXPECT_EQ(server_.artifacts().TryArtifact(ctx.get(), req, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << bad;
  }
  req.set_input_json(R"("x")");
  req.set_max_instructions(-1);
  {
    auto ctx = server_.Context();
    EXPECT_EQ(server_.artifacts().TryArtifact(ctx.get(), req, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  req.set_max_instructions(0);
  req.set_max_memory_bytes(int64_t{1} << 40);  // above the server's maximum
  {
    auto ctx = server_.Context();
    EXPECT_EQ(server_.artifacts().TryArtifact(ctx.get(), req, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  req.set_max_memory_bytes(0);
  // An input larger than the memory limit is refused before it reaches the sandbox.
  req.set_max_memory_bytes(1 << 20);
  req.set_input_json("\"" + std::string(2 << 20, 'a') + "\"");
  {
    auto ctx = server_.Context();
    EXPECT_EQ(server_.artifacts().TryArtifact(ctx.get(), req, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  req.set_max_memory_bytes(0);
  req.set_input_json(R"("x")");
  req.set_name("artifacts/word_stats/shout/revisions/99");
  {
    auto ctx = server_.Context();
    EXPECT_EQ(server_.artifacts().TryArtifact(ctx.get(), req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  // Try and backtest run code: reviewers only.
  server_.set_token(kSub);
  req.set_name(name);
  {
    auto ctx = server_.Context();
    EXPECT_EQ(server_.artifacts().TryArtifact(ctx.get(), req, &resp).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
  }
  rote::v1::Backtest b;
  EXPECT_EQ(Backtest(name, &b).error_code(), grpc::StatusCode::PERMISSION_DENIED);
}

TEST_F(BacktestE2e, BacktestShowsEachDifferenceWithBothValuesAndCountsErrors) {
  // "two" becomes "deux"; words longer than four letters fail.
  const std::string name = Propose(
      "return function(word)\n"
      "  if word == 'two' then return 'deux' end\n"
      "  if #word > 4 then error('too long: ' .. word) end\n"
      "  return string.upper(word)\n"
      "end\n");
  rote::v1::Backtest b;
  grpc::Status st = Backtest(name, &b, /*whole_runs=*/true);
  ASSERT_TRUE(st.ok()) << st.error_message();
  // Each run made two calls of shout: shout:map(words) and shout(first word).
  EXPECT_EQ(b.summary().calls(), 6);
  // Run "one two": map ["one","two"] differs, "one" equal. Run "three": both fail.
  // Run "four five six": map and "four" equal.
  EXPECT_EQ(b.summary().equal(), 3);
  EXPECT_EQ(b.summary().different(), 1);
  EXPECT_EQ(b.summary().errors(), 2);
  EXPECT_EQ(b.summary().runs(), 3);
  EXPECT_EQ(b.summary().runs_equal(), 1);
  EXPECT_EQ(b.summary().runs_different(), 2);
  EXPECT_EQ(b.principal(), "rev");
  bool saw_difference = false, saw_error = false, saw_run = false;
  for (const rote::v1::BacktestDifference& d : b.differences()) {
    if (d.input_json() == R"(["one","two"])") {
      saw_difference = true;
      EXPECT_EQ(d.recorded_json(), R"(["ONE","TWO"])");
      EXPECT_EQ(d.candidate_json(), R"(["ONE","deux"])");
      EXPECT_TRUE(d.error().empty());
      EXPECT_EQ(d.step(), 1);  // after words:find_all
    }
    if (d.input_json() == R"("three")") {
      saw_error = true;
      EXPECT_EQ(d.recorded_json(), R"("THREE")");
      EXPECT_NE(d.error().find("too long: three"), std::string::npos) << d.error();
    }
    if (d.step() == -1 && d.input_json() == R"({"text":"one two"})") {
      saw_run = true;
      EXPECT_EQ(d.recorded_json(), R"({"count":2,"first":"ONE","loud":["ONE","TWO"]})");
      EXPECT_EQ(d.candidate_json(), R"({"count":2,"first":"ONE","loud":["ONE","deux"]})");
    }
    EXPECT_FALSE(d.recorded_artifact_digest().empty());
  }
  EXPECT_TRUE(saw_difference);
  EXPECT_TRUE(saw_error);
  EXPECT_TRUE(saw_run);

  // Stored: every reviewer (and submitter) reads the same result, and the artifact carries its
  // summary.
  server_.set_token(kSub);
  rote::v1::GetBacktestRequest get;
  get.set_name(name);
  rote::v1::Backtest stored;
  {
    auto ctx = server_.Context();
    ASSERT_TRUE(server_.artifacts().GetBacktest(ctx.get(), get, &stored).ok());
  }
  EXPECT_EQ(stored.SerializeAsString(), b.SerializeAsString());
  // Its own name, `artifacts/{hex}/backtest`, reads it too.
  get.set_name(b.name());
  rote::v1::Backtest by_name;
  {
    auto ctx = server_.Context();
    ASSERT_TRUE(server_.artifacts().GetBacktest(ctx.get(), get, &by_name).ok());
  }
  EXPECT_EQ(by_name.SerializeAsString(), b.SerializeAsString());
  rote::v1::GetArtifactRequest ga;
  ga.set_name(name);
  rote::v1::Artifact artifact;
  {
    auto ctx = server_.Context();
    ASSERT_TRUE(server_.artifacts().GetArtifact(ctx.get(), ga, &artifact).ok());
  }
  EXPECT_EQ(artifact.backtest().calls(), 6);
  EXPECT_EQ(artifact.backtest().different(), 1);
  EXPECT_EQ(artifact.backtest().errors(), 2);

  // max_calls: the newest run's calls first.
  server_.set_token(kRev);
  rote::v1::BacktestRevisionRequest req;
  req.set_name(name);
  req.set_max_calls(2);
  rote::v1::Backtest few;
  {
    auto ctx = server_.Context();
    ASSERT_TRUE(server_.artifacts().BacktestRevision(ctx.get(), req, &few).ok());
  }
  EXPECT_EQ(few.summary().calls(), 2);
  EXPECT_EQ(few.summary().equal(), 2);  // "four five six" is unchanged
  req.set_max_calls(-1);
  {
    auto ctx = server_.Context();
    EXPECT_EQ(server_.artifacts().BacktestRevision(ctx.get(), req, &few).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
}

TEST_F(BacktestE2e, GetBacktestOfAnUntestedRevisionIsNotFound) {
  const std::string name = Propose("return function(word) return (string.upper(word)) end\n");
  rote::v1::GetBacktestRequest get;
  get.set_name(name);
  rote::v1::Backtest b;
  auto ctx = server_.Context();
  EXPECT_EQ(server_.artifacts().GetBacktest(ctx.get(), get, &b).error_code(), grpc::StatusCode::NOT_FOUND);
}

}  // namespace
}  // namespace rote::e2e
