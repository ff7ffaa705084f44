// Blueprints and artifacts of any accepted size never make lists too large: list items carry
// digests and sizes, not sources, so a few large registrations cannot break ListBlueprints,
// ListArtifacts or ListRevisions for every caller. Get returns each item whole, and
// registration refuses what a response could not carry. The test clients keep gRPC's default
// 4 MiB receive limit, as any client may.
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/e2e/e2e_util.h"

namespace rote::e2e {
namespace {

constexpr int64_t kMiB = 1 << 20;
constexpr int kBlueprints = 4;

// A blueprint named `name` whose source holds a long Lua comment, with one generation point.
std::string LargeBlueprint(const std::string& name, int64_t comment_bytes) {
  return absl::StrCat("local bp = rote.blueprint { name = \"", name, "\", version = \"1.0.0\" }\n",
                      "--[[", std::string(static_cast<size_t>(comment_bytes), 'c'), "]]\n",
                      R"lua(local shout = bp:lua {
  name = "shout",
  task = "Upper-case a word.",
  signature = "function(word) -> string",
  tests = { { "hi", "HI" } },
}
function bp.run(input) return shout(input.word) end
return bp
)lua");
}

// Binds `shout` to an artifact whose source holds a long comment (distinct per `tag`).
std::string LargeLock(const std::string& name, const std::string& tag, int64_t comment_bytes) {
  return absl::StrCat("format = 1\nblueprint = \"", name, "\"\n\n[[point]]\nname = \"shout\"\nkind = \"lua_function\"\n",
                      "source = '''\n-- ", tag, " ", std::string(static_cast<size_t>(comment_bytes), 'a'),
                      "\nreturn function(word) return string.upper(word) end\n'''\n");
}

TEST(LargeListsE2e, ListsOfLargeBlueprintsAndArtifactsFitADefaultClient) {
  TestServer server;
  server.Start();
  std::vector<std::string> sources;
  for (int i = 0; i < kBlueprints; ++i) {
    const std::string name = absl::StrCat("large_", i);
    sources.push_back(LargeBlueprint(name, 3 * kMiB));
    rote::v1::Blueprint bp;
    grpc::Status st = server.TryRegister(sources.back(), LargeLock(name, name, 3 * kMiB), name + ".lua", &bp);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }

  // 12 MiB of sources, listed through a client that accepts 4 MiB.
  rote::v1::ListBlueprintsResponse list;
  {
    rote::v1::ListBlueprintsRequest req;
    auto ctx = server.Context();
    grpc::Status st = server.blueprints().ListBlueprints(ctx.get(), req, &list);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  ASSERT_EQ(list.blueprints_size(), kBlueprints);
  for (const rote::v1::Blueprint& b : list.blueprints()) {
    EXPECT_LT(b.ByteSizeLong(), 4096u) << b.display_name();
    EXPECT_TRUE(b.source().empty());
    EXPECT_TRUE(b.source_omitted());
    const int i = b.display_name().back() - '0';
    ASSERT_GE(i, 0);
    ASSERT_LT(i, kBlueprints);
    EXPECT_EQ(b.source_size_bytes(), static_cast<int64_t>(sources[static_cast<size_t>(i)].size()));
    ASSERT_EQ(b.generation_points_size(), 1);
    EXPECT_EQ(b.generation_points(0).name(), "shout");
    EXPECT_FALSE(b.generation_points(0).spec_digest().empty());
    EXPECT_TRUE(b.generation_points(0).task().empty());
    EXPECT_EQ(b.bindings_size(), 1);

    // GetBlueprint returns the whole source (3 MiB fits the default limit).
    rote::v1::GetBlueprintRequest get;
    get.set_name(b.name());
    rote::v1::Blueprint whole;
    auto ctx = server.Context();
    grpc::Status st = server.blueprints().GetBlueprint(ctx.get(), get, &whole);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_FALSE(whole.source_omitted());
    EXPECT_EQ(whole.source(), sources[static_cast<size_t>(i)]);
    EXPECT_EQ(whole.source_size_bytes(), b.source_size_bytes());
    EXPECT_EQ(whole.generation_points(0).task(), "Upper-case a word.");
  }

  // The lockfiles' 3 MiB artifacts: listed small, read whole with GetArtifact.
  rote::v1::ListArtifactsResponse artifacts;
  {
    rote::v1::ListArtifactsRequest req;
    auto ctx = server.Context();
    grpc::Status st = server.artifacts().ListArtifacts(ctx.get(), req, &artifacts);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  ASSERT_EQ(artifacts.artifacts_size(), kBlueprints);
  for (const rote::v1::Artifact& a : artifacts.artifacts()) {
    EXPECT_LT(a.ByteSizeLong(), 4096u) << a.name();
    EXPECT_TRUE(a.source().empty());
    EXPECT_TRUE(a.source_omitted());
    EXPECT_TRUE(a.validation_report_json().empty());
    EXPECT_GT(a.source_size_bytes(), 3 * kMiB);

    rote::v1::GetArtifactRequest get;
    get.set_name(a.name());
    rote::v1::Artifact whole;
    auto ctx = server.Context();
    grpc::Status st = server.artifacts().GetArtifact(ctx.get(), get, &whole);
    ASSERT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(static_cast<int64_t>(whole.source().size()), a.source_size_bytes());
    EXPECT_NE(whole.source().find("return function(word)"), std::string::npos);
    EXPECT_FALSE(whole.validation_report_json().empty());
  }
  rote::v1::ListRevisionsResponse revisions;
  {
    rote::v1::ListRevisionsRequest req;
    req.set_generation_point("large_0/shout");
    auto ctx = server.Context();
    grpc::Status st = server.artifacts().ListRevisions(ctx.get(), req, &revisions);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  ASSERT_EQ(revisions.revisions_size(), 1);
  EXPECT_TRUE(revisions.revisions(0).source_omitted());
  EXPECT_LT(revisions.revisions(0).ByteSizeLong(), 4096u);
}

TEST(LargeListsE2e, RegistrationRefusesWhatAResponseCouldNotCarry) {
  TestServer server;
  server.Start();  // --max-message-bytes 64 MiB: blueprints and artifacts up to 32 MiB
  const int64_t cap = 32 * kMiB;

  rote::v1::Blueprint bp;
  grpc::Status st = server.TryRegister(LargeBlueprint("over", cap), "", "over.lua", &bp);
  ASSERT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_NE(st.error_message().find("over.lua: the source is"), std::string::npos) << st.error_message();
  EXPECT_NE(st.error_message().find(absl::StrCat("more than the ", cap, " bytes")), std::string::npos)
      << st.error_message();

  st = server.TryRegister(LargeBlueprint("over_lock", 16), LargeLock("over_lock", "x", cap), "over_lock.lua", &bp);
  ASSERT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_NE(st.error_message().find("the artifact locked for 'shout'"), std::string::npos) << st.error_message();

  rote::v1::ListBlueprintsResponse list;
  auto ctx = server.Context();
  ASSERT_TRUE(server.blueprints().ListBlueprints(ctx.get(), rote::v1::ListBlueprintsRequest(), &list).ok());
  EXPECT_EQ(list.blueprints_size(), 0);

  // Just under the cap: accepted, and GetBlueprint returns it whole to a client that allows
  // the message limit (as the rote CLI does).
  const std::string near = LargeBlueprint("near", cap - kMiB);
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 * kMiB);
  auto channel = grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", server.port()), grpc::InsecureChannelCredentials(), args);
  auto stub = rote::v1::BlueprintService::NewStub(channel);
  rote::v1::RegisterBlueprintRequest reg;
  reg.set_source(near);
  reg.set_filename("near.lua");
  {
    auto c = server.Context(120);
    st = stub->RegisterBlueprint(c.get(), reg, &bp);
    ASSERT_TRUE(st.ok()) << st.error_message();
  }
  rote::v1::GetBlueprintRequest get;
  get.set_name(bp.name());
  rote::v1::Blueprint whole;
  auto c = server.Context(120);
  st = stub->GetBlueprint(c.get(), get, &whole);
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(whole.source(), near);
}

// A review comment travels with its artifact in every list: it is bounded.
TEST(LargeListsE2e, ReviewCommentsAreBounded) {
  TestServer server;
  server.Start();
  server.Register(LargeBlueprint("small", 16), LargeLock("small", "x", 16), "small.lua");
  rote::v1::ListArtifactsResponse list;
  {
    auto ctx = server.Context();
    ASSERT_TRUE(server.artifacts().ListArtifacts(ctx.get(), rote::v1::ListArtifactsRequest(), &list).ok());
  }
  ASSERT_EQ(list.artifacts_size(), 1);
  rote::v1::ReviewArtifactRequest req;
  req.set_name(list.artifacts(0).name());
  req.set_decision(rote::v1::REVIEW_STATE_REJECTED);
  req.set_etag(list.artifacts(0).etag());
  req.set_comment(std::string(3 * kMiB, 'r'));
  rote::v1::Artifact out;
  auto ctx = server.Context();
  grpc::Status st = server.artifacts().ReviewArtifact(ctx.get(), req, &out);
  ASSERT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
  EXPECT_NE(st.error_message().find("review comment"), std::string::npos) << st.error_message();
}

}  // namespace
}  // namespace rote::e2e
