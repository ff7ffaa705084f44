// The engine's formats: spec and artifact digests (pinned: they identify stored things across
// versions), lockfiles (round trip, errors with lines), unified diffs, stored run events (pinned:
// the stores' journals hold them).
#include <string>

#include "gtest/gtest.h"
#include "orchestrator/engine/artifact.h"
#include "orchestrator/engine/event_bus.h"
#include "orchestrator/engine/lockfile.h"
#include "orchestrator/engine/spec.h"
#include "orchestrator/engine/unified_diff.h"
#include "store/digest.h"

namespace rote::orchestrator::engine {
namespace {

using sandbox::Value;

GenerationPoint WordsPoint() {
  GenerationPoint p;
  p.name = "words";
  p.kind = ArtifactKind::kRe2Pattern;
  p.task = "Words: runs of ASCII letters.";
  p.examples.push_back({Value::String("hi there"), Value::FromArray({Value::String("hi"), Value::String("there")})});
  p.examples.push_back({Value::String("42"), Value::FromArray({})});
  return p;
}

TEST(EngineSpec, CanonicalEncodingAndDigestArePinned) {
  GenerationPoint p = WordsPoint();
  ASSERT_TRUE(Seal(&p).ok());
  EXPECT_EQ(p.canonical,
            R"({"examples":[{"input":"hi there","matches":["hi","there"]},{"input":"42","matches":[]}],)"
            R"("kind":"re2_pattern","name":"words","signature":"","task":"Words: runs of ASCII letters."})");
  EXPECT_EQ(p.digest, store::Sha256Digest(p.canonical));
  auto back = PointFromRecord(p.ToRecord());
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->digest, p.digest);
  ASSERT_EQ(back->examples.size(), 2u);
  EXPECT_TRUE(back->examples[0].expected == p.examples[0].expected);
}

TEST(EngineSpec, SealRejectsWhatDoesNotFit) {
  GenerationPoint p = WordsPoint();
  p.name = "Bad-Name";
  EXPECT_TRUE(absl::IsInvalidArgument(Seal(&p)));
  p = WordsPoint();
  p.examples[0].expected = Value::FromArray({Value::Int(1)});
  absl::Status s = Seal(&p);
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_NE(std::string(s.message()).find("must be a string"), std::string::npos);
  p = WordsPoint();
  p.signature = "function(x)";
  EXPECT_TRUE(absl::IsInvalidArgument(Seal(&p)));
  p = WordsPoint();
  p.task.clear();
  EXPECT_TRUE(absl::IsInvalidArgument(Seal(&p)));
}

TEST(EngineArtifact, DigestCoversKindOptionsAndBytes) {
  auto opts = NormalizeOptions(ArtifactKind::kRe2Pattern, "");
  ASSERT_TRUE(opts.ok());
  ArtifactCode re{ArtifactKind::kRe2Pattern, "[a-z]+", *opts};
  auto d1 = ArtifactDigest(re);
  ASSERT_TRUE(d1.ok());
  // sha256 over {"bytes":"[a-z]+","kind":"re2_pattern","options":{...}} in canonical JSON.
  EXPECT_EQ(*d1, store::Sha256Digest(R"({"bytes":"[a-z]+","kind":"re2_pattern","options":)" + *opts + "}"));
  auto ci = NormalizeOptions(ArtifactKind::kRe2Pattern, R"({"case_insensitive": true})");
  ASSERT_TRUE(ci.ok()) << ci.status().message();
  EXPECT_NE(*ci, *opts);
  EXPECT_NE(*ArtifactDigest({ArtifactKind::kRe2Pattern, "[a-z]+", *ci}), *d1);
  EXPECT_NE(*ArtifactDigest({ArtifactKind::kLuaFunction, "[a-z]+", "{}"}), *d1);
  EXPECT_FALSE(NormalizeOptions(ArtifactKind::kRe2Pattern, R"({"dot_nl": true})").ok());
  EXPECT_FALSE(NormalizeOptions(ArtifactKind::kLuaFunction, R"({"x": 1})").ok());

  store::ArtifactRecord rec;
  rec.digest = *d1;
  rec.kind = "re2_pattern";
  rec.source = "[a-z]+";
  rec.options_json = *opts;
  EXPECT_TRUE(VerifiedCode(rec).ok());
  rec.source = "[a-z]*";
  EXPECT_TRUE(absl::IsDataLoss(VerifiedCode(rec).status()));
}

TEST(EngineLockfile, FormatParsesBackExactly) {
  Lockfile lock;
  lock.blueprint = "demo";
  lock.version = "1.2.3";
  lock.entries.push_back({"multi", ArtifactKind::kLuaFunction, "sha256:aa", "sha256:bb", "",
                          "-- a 'quoted' comment\nreturn function(x)\n  return x .. \"\\t\"\nend\n", 0});
  lock.entries.push_back({"single", ArtifactKind::kRe2Pattern, "", "", "{\"x\":1}", "\\d+'s", 0});
  lock.entries.push_back({"no_newline", ArtifactKind::kLuaFunction, "", "", "", "return function() end", 0});
  lock.entries.push_back({"awkward", ArtifactKind::kLuaFunction, "", "", "", "a '''triple''' \r\x01 end'", 0});
  const std::string text = FormatLockfile(lock);
  auto back = ParseLockfile(text, "demo.lock");
  ASSERT_TRUE(back.ok()) << back.status().message() << "\n" << text;
  EXPECT_EQ(back->blueprint, "demo");
  EXPECT_EQ(back->version, "1.2.3");
  ASSERT_EQ(back->entries.size(), lock.entries.size());
  for (size_t i = 0; i < lock.entries.size(); ++i) {
    EXPECT_EQ(back->entries[i].point, lock.entries[i].point);
    EXPECT_EQ(back->entries[i].kind, lock.entries[i].kind);
    EXPECT_EQ(back->entries[i].source, lock.entries[i].source) << i;
    EXPECT_EQ(back->entries[i].spec_digest, lock.entries[i].spec_digest);
    EXPECT_EQ(back->entries[i].artifact_digest, lock.entries[i].artifact_digest);
  }
  EXPECT_EQ(back->entries[1].options_json, "{\"x\":1}");
  // Multi-line sources are written verbatim, so lockfiles diff like code.
  EXPECT_NE(text.find("source = '''\n-- a 'quoted' comment\nreturn function(x)\n"), std::string::npos) << text;
}

TEST(EngineLockfile, ErrorsNameTheLine) {
  auto expect_error = [](const std::string& text, const std::string& fragment) {
    auto r = ParseLockfile(text, "x.lock");
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_TRUE(absl::IsInvalidArgument(r.status()));
    EXPECT_NE(std::string(r.status().message()).find(fragment), std::string::npos) << r.status().message();
  };
  expect_error("format = 2\n", "x.lock:1: lockfile format 2 is not supported");
  expect_error("format = 1\n\n[[point]]\nname = \"a\"\nkind = \"cobol\"\n", "x.lock:5: unknown kind 'cobol'");
  expect_error("[[point]]\nname = \"a\"\nsource = 'x'\n", "x.lock:1: point 'a' has no kind");
  expect_error("[[point]]\nname = \"a\"\nname = \"b\"\n", "x.lock:3: 'name' is set twice (first at line 2)");
  expect_error("[[point]]\nkind = \"lua_function\"\nsource = '''\nunterminated\n", "unterminated ''' string");
  expect_error("[table]\n", "x.lock:1: expected [[point]]");
  expect_error("[[point]]\nname = \"a\" trailing\n", "x.lock:2: unexpected text after the value");
}

TEST(EngineUnifiedDiff, HunksWithContext) {
  EXPECT_EQ(UnifiedDiff("a\nb\n", "a\nb\n", "x", "y"), "");
  EXPECT_EQ(UnifiedDiff("1\n2\n3\n4\n5\n6\n7\n8\n9\n", "1\n2\n3\n4\nFIVE\n6\n7\n8\n9\n", "old", "new"),
            "--- old\n+++ new\n@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+FIVE\n 6\n 7\n 8\n");
  EXPECT_EQ(UnifiedDiff("", "x\n", "/dev/null", "new"), "--- /dev/null\n+++ new\n@@ -0,0 +1 @@\n+x\n");
  // Two changes far apart are two hunks.
  std::string a, b;
  for (int i = 0; i < 20; ++i) {
    a += std::to_string(i) + "\n";
    b += (i == 1 || i == 18 ? "x" : std::to_string(i)) + "\n";
  }
  const std::string d = UnifiedDiff(a, b, "a", "b");
  EXPECT_NE(d.find("@@ -1,5 +1,5 @@"), std::string::npos) << d;
  EXPECT_NE(d.find("@@ -16,5 +16,5 @@"), std::string::npos) << d;
}

TEST(EngineRunEvents, StoredEncodingIsPinnedAndRoundTrips) {
  const std::vector<RunEvent> events = {
      RunEvent::State(store::RunState::kRunning),
      RunEvent::Step(store::StepRecord{3, "p", "sha256:a", "sha256:b", "sha256:c"}),
      RunEvent::Log("hi"),
      RunEvent::GenerationProgress(""),
      RunEvent::State(store::RunState::kSucceeded),
  };
  // Each event prefixed with its length: state (field 3), step (field 5: index, point and
  // digests), log (field 6), generation progress (field 4, present even when empty).
  const std::string expected = std::string("\x02\x18\x02", 3) +
                               "\x25\x2a\x23\x08\x03\x12\x01p\x1a\x08sha256:a\x22\x08sha256:b\x2a\x08sha256:c" +
                               std::string("\x04\x32\x02hi\x02\x22\x00\x02\x18\x03", 11);
  const std::string encoded = EncodeRunEvents(events);
  EXPECT_EQ(encoded, expected);
  absl::StatusOr<std::vector<RunEvent>> decoded = DecodeRunEvents(encoded);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ASSERT_EQ(decoded->size(), events.size());
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ((*decoded)[i].kind, events[i].kind) << i;
    EXPECT_EQ((*decoded)[i].state, events[i].state) << i;
    EXPECT_EQ((*decoded)[i].text, events[i].text) << i;
    EXPECT_EQ((*decoded)[i].step.index, events[i].step.index) << i;
    EXPECT_EQ((*decoded)[i].step.output_digest, events[i].step.output_digest) << i;
  }
  EXPECT_EQ(DecodeRunEvents(encoded.substr(0, encoded.size() - 1)).status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace rote::orchestrator::engine
