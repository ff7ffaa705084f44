// Resource names are parsed strictly (one spelling per resource), and errors quote at most a
// bounded prefix of what the caller sent.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/word_stats.h"

namespace rote::e2e {
namespace {

grpc::Status GetRun(TestServer& server, const std::string& name) {
  rote::v1::GetRunRequest req;
  req.set_name(name);
  rote::v1::Run run;
  return server.runs().GetRun(server.Context().get(), req, &run);
}

grpc::Status GetBlueprint(TestServer& server, const std::string& name) {
  rote::v1::GetBlueprintRequest req;
  req.set_name(name);
  rote::v1::Blueprint bp;
  return server.blueprints().GetBlueprint(server.Context().get(), req, &bp);
}

grpc::Status GetArtifact(TestServer& server, const std::string& name) {
  rote::v1::GetArtifactRequest req;
  req.set_name(name);
  rote::v1::Artifact a;
  return server.artifacts().GetArtifact(server.Context().get(), req, &a);
}

TEST(NamesE2e, OnlyTheCanonicalSpellingNamesAResource) {
  TestServer server;
  server.Start();
  rote::v1::Blueprint bp = server.Register(kWordStats, kWordStatsLock, "word_stats.lua");
  rote::v1::Run run = server.WaitDone(server.Submit(bp.name(), R"({"text": "hi"})").name());
  ASSERT_EQ(run.name(), "runs/1");

  EXPECT_TRUE(GetRun(server, "runs/1").ok());
  EXPECT_EQ(GetRun(server, "runs/2").error_code(), grpc::StatusCode::NOT_FOUND);
  for (const std::string bad : {"runs/1 ", " runs/1", "runs/+1", "runs/0001", "runs/01", "runs/1/", "1", "runs/",
                                "runs/0", "runs/-1", "runs/1e0", "runs/0x1", "Runs/1", "runs//1",
                                "runs/99999999999999999999"}) {
    grpc::Status st = GetRun(server, bad);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << "'" << bad << "': " << st.error_message();
  }

  const std::string hex = bp.digest().substr(7);
  EXPECT_TRUE(GetBlueprint(server, bp.name()).ok());
  EXPECT_TRUE(GetBlueprint(server, "blueprints/word_stats").ok());
  EXPECT_EQ(GetBlueprint(server, "blueprints/nothing_here").error_code(), grpc::StatusCode::NOT_FOUND);
  std::string upper = hex;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (const std::string& bad : {std::string("blueprints/word_stats "), std::string("word_stats"),
                                std::string("blueprints/Word_stats"), std::string("blueprints/word_stats/"),
                                std::string("blueprints/"), "blueprints/sha256:" + hex, "blueprints/" + upper,
                                "blueprints/" + hex + " ", std::string("blueprints/1word")}) {
    grpc::Status st = GetBlueprint(server, bad);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << "'" << bad << "': " << st.error_message();
  }

  const std::string artifact_hex = run.bindings(0).artifact_digest().substr(7);
  EXPECT_TRUE(GetArtifact(server, "artifacts/" + artifact_hex).ok());
  EXPECT_TRUE(GetArtifact(server, "artifacts/word_stats/shout/revisions/1").ok());
  for (const std::string& bad :
       {"artifacts/sha256:" + artifact_hex, artifact_hex, "artifacts/" + artifact_hex + "/",
        std::string("artifacts/word_stats/shout/revisions/01"), std::string("artifacts/word_stats/shout/revisions/+1"),
        std::string("artifacts/word_stats/shout/revisions/1 "), std::string("artifacts/word_stats//revisions/1"),
        std::string("artifacts/word_stats/Shout/revisions/1"), std::string("artifacts/word_stats/shout/revisions/0")}) {
    grpc::Status st = GetArtifact(server, bad);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << "'" << bad << "': " << st.error_message();
  }

  // Generation point keys, in the list and diff filters.
  rote::v1::ListRevisionsRequest revisions;
  rote::v1::ListRevisionsResponse revisions_out;
  revisions.set_generation_point("word_stats/shout ");
  EXPECT_EQ(server.artifacts().ListRevisions(server.Context().get(), revisions, &revisions_out).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  revisions.set_generation_point("word_stats/shout");
  EXPECT_TRUE(server.artifacts().ListRevisions(server.Context().get(), revisions, &revisions_out).ok());
  rote::v1::ListArtifactsRequest list;
  rote::v1::ListArtifactsResponse list_out;
  list.set_generation_point("Word_stats/shout");
  EXPECT_EQ(server.artifacts().ListArtifacts(server.Context().get(), list, &list_out).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  rote::v1::DiffRevisionsRequest diff;
  rote::v1::DiffRevisionsResponse diff_out;
  diff.set_generation_point("word_stats/shout/");
  diff.set_to_revision(1);
  EXPECT_EQ(server.artifacts().DiffRevisions(server.Context().get(), diff, &diff_out).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  rote::v1::ListRunsRequest runs;
  rote::v1::ListRunsResponse runs_out;
  runs.set_blueprint("blueprints/word_stats ");
  EXPECT_EQ(server.runs().ListRuns(server.Context().get(), runs, &runs_out).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

// What a status message may be: well inside gRPC's 8 KiB metadata limit.
constexpr size_t kBoundedMessage = 2048 + 64;

TEST(NamesE2e, ErrorsQuoteABoundedPrefixOfHugeInput) {
  TestServer server;
  server.Start();
  server.Register(kWordStats, kWordStatsLock, "word_stats.lua");
  const std::string huge(20 * 1024, 'x');

  struct Case {
    std::string what;
    grpc::Status status;
  };
  std::vector<Case> cases;
  cases.push_back({"run name", GetRun(server, "runs/" + huge)});
  cases.push_back({"blueprint name", GetBlueprint(server, "blueprints/" + huge)});
  cases.push_back({"artifact name", GetArtifact(server, "artifacts/" + huge)});
  {
    rote::v1::SubmitRunRequest req;
    req.set_blueprint("blueprints/" + huge);
    req.set_input_json("{}");
    rote::v1::Run run;
    cases.push_back({"submitted blueprint", server.runs().SubmitRun(server.Context().get(), req, &run)});
  }
  {
    rote::v1::ListRevisionsRequest req;
    req.set_generation_point(huge + "/x");
    rote::v1::ListRevisionsResponse out;
    cases.push_back({"generation point", server.artifacts().ListRevisions(server.Context().get(), req, &out)});
  }
  {
    rote::v1::Blueprint bp;
    cases.push_back({"lockfile key", server.TryRegister(kWordStats, huge + " = 1\n", "word_stats.lua", &bp)});
    cases.push_back({"lockfile point", server.TryRegister(kWordStats,
                                                          "[[point]]\nname = '" + huge +
                                                              "'\nkind = 'lua_function'\nsource = 'x'\n",
                                                          "word_stats.lua", &bp)});
    cases.push_back({"file name", server.TryRegister(kWordStats, kWordStatsLock, huge + ".lua", &bp)});
    // A blueprint that raises a huge error while it loads.
    cases.push_back({"blueprint error", server.TryRegister("error(string.rep('y', 20000))", "", "big.lua", &bp)});
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    EXPECT_EQ(c.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.status.error_message().substr(0, 300);
    EXPECT_LE(c.status.error_message().size(), kBoundedMessage);
    if (c.what != "blueprint error") {
      EXPECT_NE(c.status.error_message().find(std::string(80, 'x').substr(0, 40)), std::string::npos)
          << "it quotes a prefix";
      EXPECT_NE(c.status.error_message().find("bytes)"), std::string::npos) << "and says how long the input was";
    }
  }
}

}  // namespace
}  // namespace rote::e2e
