// Short names: digest prefixes (8 or more hex digits) and bare point names resolve to the one
// resource they stand for; an ambiguous one is INVALID_ARGUMENT naming the candidates, a short
// prefix is INVALID_ARGUMENT saying the minimum, one that matches nothing is NOT_FOUND.
//
// The ambiguous digest prefixes over gRPC are real: the blueprint sources and artifact sources
// below differ only in a comment, whose number was found by a birthday search so that the two
// digests share their first 8 hex digits (the test checks that they do).
#include <unistd.h>

#include <filesystem>
#include <string>

#include "gtest/gtest.h"
#include "orchestrator/engine/artifact.h"
#include "orchestrator/engine/resolve.h"
#include "store/digest.h"
#include "tests/e2e/e2e_util.h"
#include "tests/e2e/word_stats.h"

namespace rote::e2e {
namespace {

using ::grpc::StatusCode;

// The word_stats lockfile with a comment after the shout function.
std::string Lock(int shout_comment) {
  std::string lock = kWordStatsLock;
  const std::string end = "upper(word) end\n";
  lock.replace(lock.find(end), end.size(), "upper(word) end -- " + std::to_string(shout_comment) + "\n");
  return lock;
}

std::string Source(int comment) { return std::string(kWordStats) + "-- " + std::to_string(comment) + "\n"; }

// A second blueprint that also declares a point named "shout".
constexpr char kLoud[] = R"lua(local bp = rote.blueprint { name = "loud", version = "1.0.0" }
local shout = bp:lua { name = "shout", task = "Upper-case a word.", signature = "function(word) -> string",
                       tests = { { "hi", "HI" } } }
function bp.run(input) return shout(input.text) end
return bp
)lua";

size_t CommonPrefix(const std::string& a, const std::string& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

struct Result {
  grpc::Status status;
  std::string digest;
};

Result GetBlueprint(TestServer& server, const std::string& name) {
  rote::v1::GetBlueprintRequest req;
  req.set_name(name);
  rote::v1::Blueprint bp;
  grpc::Status st = server.blueprints().GetBlueprint(server.Context().get(), req, &bp);
  return {st, bp.digest()};
}

Result GetArtifact(TestServer& server, const std::string& name) {
  rote::v1::GetArtifactRequest req;
  req.set_name(name);
  rote::v1::Artifact a;
  grpc::Status st = server.artifacts().GetArtifact(server.Context().get(), req, &a);
  return {st, a.digest()};
}

grpc::Status ListRevisions(TestServer& server, const std::string& point, rote::v1::ListRevisionsResponse* out) {
  rote::v1::ListRevisionsRequest req;
  req.set_generation_point(point);
  return server.artifacts().ListRevisions(server.Context().get(), req, out);
}

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(ShortNamesE2e, DigestPrefixesResolveAndAmbiguousOnesListTheCandidates) {
  const std::string shout_a = "return function(word) return string.upper(word) end -- 113317\n";
  const std::string shout_b = "return function(word) return string.upper(word) end -- 127527\n";
  absl::StatusOr<std::string> art_a = orchestrator::engine::ArtifactDigest({orchestrator::engine::ArtifactKind::kLuaFunction, shout_a, "{}"});
  absl::StatusOr<std::string> art_b = orchestrator::engine::ArtifactDigest({orchestrator::engine::ArtifactKind::kLuaFunction, shout_b, "{}"});
  ASSERT_TRUE(art_a.ok() && art_b.ok());
  ASSERT_NE(*art_a, *art_b);
  ASSERT_GE(CommonPrefix(*art_a, *art_b), 7 + 8) << *art_a << " " << *art_b;
  ASSERT_GE(CommonPrefix(store::Sha256Digest(Source(118397)), store::Sha256Digest(Source(152959))), 7 + 8);

  TestServer server;
  server.Start();
  rote::v1::Blueprint bp_a = server.Register(Source(118397), Lock(113317), "word_stats.lua");
  rote::v1::Blueprint bp_b = server.Register(Source(152959), Lock(127527), "word_stats.lua");
  const std::string hex_a = bp_a.digest().substr(7), hex_b = bp_b.digest().substr(7);
  ASSERT_NE(hex_a, hex_b);
  const size_t bp_common = CommonPrefix(hex_a, hex_b);
  ASSERT_GE(bp_common, 8u);

  // Blueprints: the shortest unique prefix resolves; the shared one lists both full names.
  Result r = GetBlueprint(server, "blueprints/" + hex_a.substr(0, bp_common + 1));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.digest, bp_a.digest());
  r = GetBlueprint(server, "blueprints/" + hex_b.substr(0, std::max<size_t>(bp_common + 1, 20)));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.digest, bp_b.digest());
  r = GetBlueprint(server, "blueprints/" + hex_a.substr(0, 8));
  EXPECT_EQ(r.status.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(Contains(r.status.error_message(), "blueprints/" + hex_a)) << r.status.error_message();
  EXPECT_TRUE(Contains(r.status.error_message(), "blueprints/" + hex_b)) << r.status.error_message();
  EXPECT_TRUE(Contains(r.status.error_message(), "ambiguous")) << r.status.error_message();
  // The full name behaves as before, and a run can be submitted by a prefix.
  EXPECT_TRUE(GetBlueprint(server, bp_a.name()).status.ok());
  rote::v1::Run run = server.WaitDone(server.Submit("blueprints/" + hex_b.substr(0, bp_common + 1), R"({"text": "hi"})").name());
  EXPECT_EQ(run.state(), rote::v1::RUN_STATE_SUCCEEDED) << run.error();
  EXPECT_EQ(run.blueprint_digest(), bp_b.digest());
  rote::v1::ListRunsRequest runs;
  runs.set_blueprint("blueprints/" + hex_b.substr(0, bp_common + 1));
  rote::v1::ListRunsResponse runs_out;
  ASSERT_TRUE(server.runs().ListRuns(server.Context().get(), runs, &runs_out).ok());
  EXPECT_EQ(runs_out.runs_size(), 1);
  runs.set_blueprint("blueprints/" + hex_b.substr(0, 8));
  EXPECT_EQ(server.runs().ListRuns(server.Context().get(), runs, &runs_out).error_code(), StatusCode::INVALID_ARGUMENT);

  // Artifacts: the same, with the two locked revisions of word_stats/shout.
  const std::string ahex_a = art_a->substr(7), ahex_b = art_b->substr(7);
  const size_t art_common = CommonPrefix(ahex_a, ahex_b);
  r = GetArtifact(server, "artifacts/" + ahex_a.substr(0, art_common + 1));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.digest, *art_a);
  r = GetArtifact(server, "artifacts/" + ahex_b.substr(0, 63));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.digest, *art_b);
  r = GetArtifact(server, "artifacts/" + ahex_a.substr(0, 8));
  EXPECT_EQ(r.status.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(Contains(r.status.error_message(), "artifacts/" + ahex_a)) << r.status.error_message();
  EXPECT_TRUE(Contains(r.status.error_message(), "artifacts/" + ahex_b)) << r.status.error_message();
  EXPECT_TRUE(GetArtifact(server, "artifacts/" + ahex_a).status.ok());

  // A review names its artifact by prefix too.
  rote::v1::ReviewArtifactRequest review;
  review.set_name("artifacts/" + ahex_b.substr(0, art_common + 1));
  review.set_decision(rote::v1::REVIEW_STATE_REJECTED);
  review.set_etag("stale");
  rote::v1::Artifact reviewed;
  EXPECT_EQ(server.artifacts().ReviewArtifact(server.Context().get(), review, &reviewed).error_code(),
            StatusCode::ABORTED) << "resolved, then refused for its etag";

  // Too short, too long, nothing there.
  for (const std::string& name : {"blueprints/" + hex_a.substr(0, 7), "artifacts/" + ahex_a.substr(0, 7),
                                  std::string("artifacts/0")}) {
    r = name.starts_with("blueprints/") ? GetBlueprint(server, name) : GetArtifact(server, name);
    EXPECT_EQ(r.status.error_code(), StatusCode::INVALID_ARGUMENT) << name;
    EXPECT_TRUE(Contains(r.status.error_message(), "at least 8 hex digits")) << r.status.error_message();
  }
  EXPECT_EQ(GetArtifact(server, "artifacts/" + ahex_a + "0").status.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(GetBlueprint(server, "blueprints/" + hex_a + "0").status.error_code(), StatusCode::INVALID_ARGUMENT);
  const std::string absent = ahex_a[0] == '0' ? "11111111" : "00000000";
  EXPECT_EQ(GetArtifact(server, "artifacts/" + absent).status.error_code(), StatusCode::NOT_FOUND);
  EXPECT_EQ(GetBlueprint(server, "blueprints/" + absent).status.error_code(), StatusCode::NOT_FOUND);
  // An id that could be a display name or a prefix: neither exists.
  EXPECT_EQ(GetBlueprint(server, "blueprints/deadbeefcafe").status.error_code(), StatusCode::NOT_FOUND);
}

TEST(ShortNamesE2e, BarePointNamesResolveWhileOneBlueprintDeclaresThem) {
  TestServer server;
  server.Start();
  server.Register(kWordStats, kWordStatsLock, "word_stats.lua");
  server.Register(Source(1), Lock(1), "word_stats.lua");  // revision 2 of word_stats/shout

  rote::v1::ListRevisionsResponse revisions;
  ASSERT_TRUE(ListRevisions(server, "shout", &revisions).ok());
  ASSERT_EQ(revisions.revisions_size(), 2);
  EXPECT_EQ(revisions.revisions(0).generation_point(), "word_stats/shout");

  rote::v1::ListArtifactsRequest list;
  list.set_generation_point("shout");
  rote::v1::ListArtifactsResponse listed;
  ASSERT_TRUE(server.artifacts().ListArtifacts(server.Context().get(), list, &listed).ok());
  EXPECT_EQ(listed.artifacts_size(), 2);

  rote::v1::DiffRevisionsRequest diff;
  diff.set_generation_point("shout");
  diff.set_to_revision(2);
  rote::v1::DiffRevisionsResponse diffed;
  ASSERT_TRUE(server.artifacts().DiffRevisions(server.Context().get(), diff, &diffed).ok());
  EXPECT_TRUE(Contains(diffed.unified_diff(), "word_stats/shout/revisions/2")) << diffed.unified_diff();

  Result r = GetArtifact(server, "artifacts/shout/revisions/2");
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.digest, revisions.revisions(1).digest());

  EXPECT_EQ(ListRevisions(server, "nothing_declares_this", &revisions).error_code(), StatusCode::NOT_FOUND);
  EXPECT_EQ(ListRevisions(server, "Shout", &revisions).error_code(), StatusCode::INVALID_ARGUMENT);

  // A second blueprint declares "shout": the bare name is ambiguous, the keys still work.
  server.Register(kLoud, "", "loud.lua");
  grpc::Status st = ListRevisions(server, "shout", &revisions);
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(Contains(st.error_message(), "loud/shout, word_stats/shout")) << st.error_message();
  st = server.artifacts().ListArtifacts(server.Context().get(), list, &listed);
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT);
  st = server.artifacts().DiffRevisions(server.Context().get(), diff, &diffed);
  EXPECT_EQ(st.error_code(), StatusCode::INVALID_ARGUMENT);
  r = GetArtifact(server, "artifacts/shout/revisions/2");
  EXPECT_EQ(r.status.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(Contains(r.status.error_message(), "loud/shout, word_stats/shout")) << r.status.error_message();
  ASSERT_TRUE(ListRevisions(server, "word_stats/shout", &revisions).ok());
  EXPECT_EQ(revisions.revisions_size(), 2);
  EXPECT_TRUE(GetArtifact(server, "artifacts/word_stats/shout/revisions/2").status.ok());
  // "words" is still declared by word_stats alone.
  ASSERT_TRUE(ListRevisions(server, "words", &revisions).ok());
  EXPECT_EQ(revisions.revisions(0).generation_point(), "word_stats/words");
}

// Past 10 candidates an ambiguity error names 10 and counts the rest. The store holds artifacts
// under chosen digests here (it checks a digest's form, not its content): 8 shared hex digits
// among 15 real artifacts would take a search far too long for a test.
TEST(ShortNamesResolve, AmbiguityListsTenCandidatesAndCountsTheRest) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("rote-short-names-" + std::to_string(::getpid()))).string();
  std::unique_ptr<store::Store> store = OpenFreshStore(dir);
  ASSERT_NE(store, nullptr);
  std::vector<std::string> digests;
  for (int i = 0; i < 15; ++i) {
    store::ArtifactRecord a;
    a.kind = "lua_function";
    a.generation_point = "invoice_totals/parse";
    a.source = "return " + std::to_string(i);
    a.options_json = "{}";
    a.validation_report_json = "{}";
    a.digest = "sha256:abcdef01" + std::string(1, "0123456789abcde"[i]) + std::string(55, '0');
    ASSERT_TRUE(store->PutArtifact(a).ok());
    digests.push_back(a.digest);
  }
  absl::StatusOr<orchestrator::engine::ArtifactName> n =
      orchestrator::engine::ResolveArtifactName(store.get(), "artifacts/abcdef01");
  ASSERT_EQ(n.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(n.status().message());
  for (int i = 0; i < 15; ++i) {
    EXPECT_EQ(Contains(message, "artifacts/" + digests[i].substr(7)), i < 10) << i << ": " << message;
  }
  EXPECT_TRUE(Contains(message, "15 artifacts")) << message;
  EXPECT_TRUE(Contains(message, "and 5 more")) << message;
  EXPECT_LE(message.size(), 2048u);

  n = orchestrator::engine::ResolveArtifactName(store.get(), "artifacts/abcdef01e");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(n->digest, digests[14]);

  // Where a request field takes a digest ("sha256:..."), a prefix resolves the same way.
  absl::StatusOr<std::string> d = orchestrator::engine::ResolveArtifactDigest(store.get(), "sha256:abcdef01e", "artifact_digest");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(*d, digests[14]);
  EXPECT_EQ(orchestrator::engine::ResolveArtifactDigest(store.get(), "sha256:abcdef01", "artifact_digest").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(orchestrator::engine::ResolveArtifactDigest(store.get(), "sha256:abcdef0", "artifact_digest").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(orchestrator::engine::ResolveArtifactDigest(store.get(), "abcdef01e", "artifact_digest").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(orchestrator::engine::ResolveArtifactDigest(store.get(), "sha256:12345678", "artifact_digest").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(*orchestrator::engine::ResolveArtifactDigest(store.get(), digests[3], "artifact_digest"), digests[3]);
  store.reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace rote::e2e
