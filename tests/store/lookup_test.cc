// Lookup by prefix: digest prefixes of artifacts and blueprints (a range of the digest index,
// its edges exact), and the blueprints that declare a point of a given name.
#include <sqlite3.h>

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "store/digest.h"
#include "store/store.h"
#include "tests/store/test_util.h"

namespace rote::store {
namespace {

using testing::MakeArtifact;
using testing::MakeBlueprint;
using testing::MakeSpec;
using testing::OpenOrDie;
using testing::TempDir;

// "sha256:" + `head` padded with `fill` to 64 hex digits.
std::string Digest(const std::string& head, char fill = '0') {
  return "sha256:" + head + std::string(64 - head.size(), fill);
}

class LookupTest : public testing::BackendTest {
 protected:
  void SetUp() override {
    BackendTest::SetUp();
    if (!Ready()) return;
    StoreOptions o;
    o.path = StorePath();
    store_ = OpenOrDie(o);
  }
  // An artifact stored under a chosen digest: the store checks a digest's form, not its
  // content, which is what lets this test hold digests that share long prefixes.
  void PutArtifactAt(const std::string& digest) {
    ArtifactRecord a = MakeArtifact("invoice_totals/parse", "return '" + digest + "'");
    a.digest = digest;
    ASSERT_TRUE(store_->PutArtifact(a).ok());
  }

  std::unique_ptr<Store> store_;
};

ROTE_BOTH_BACKENDS(LookupTest);

// What only the SQLite store has: its database file.
class SqliteLookupTest : public LookupTest {};
ROTE_SQLITE_ONLY(SqliteLookupTest);

TEST_P(LookupTest, ArtifactDigestPrefixIsAnExactRange) {
  std::vector<std::string> shared;
  for (int i = 0; i < 12; ++i) {
    shared.push_back(Digest("abcd1234" + std::string(1, "0123456789ab"[i])));
    PutArtifactAt(shared.back());
  }
  // Neighbours on both sides of the range, and a range ending in 'f' and in '9'.
  for (const std::string& d : {Digest("abcd1233", 'f'), Digest("abcd1235"), Digest("abcd123f"), Digest("abcd1240"),
                               Digest("abcd1239"), Digest("abcd123a")}) {
    PutArtifactAt(d);
  }

  absl::StatusOr<Store::Matches> m = store_->FindArtifactsByDigestPrefix("sha256:abcd1234", 10);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->total, 12);
  EXPECT_EQ(m->items, std::vector<std::string>(shared.begin(), shared.begin() + 10)) << "digest order, cut at the limit";

  m = store_->FindArtifactsByDigestPrefix("sha256:abcd123f", 10);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->items, std::vector<std::string>{Digest("abcd123f")});
  m = store_->FindArtifactsByDigestPrefix("sha256:abcd1239", 10);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->items, std::vector<std::string>{Digest("abcd1239")});
  m = store_->FindArtifactsByDigestPrefix("sha256:abcd123", 100);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->total, 12 + 6 - 1) << "every abcd123* but abcd1240";

  // The whole digest is a prefix of itself only.
  m = store_->FindArtifactsByDigestPrefix(shared[3], 10);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->total, 1);
  EXPECT_EQ(m->items, std::vector<std::string>{shared[3]});

  m = store_->FindArtifactsByDigestPrefix("sha256:0000ffff", 10);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->total, 0);
  EXPECT_TRUE(m->items.empty());

  // A limit of 0 counts only.
  m = store_->FindArtifactsByDigestPrefix("sha256:abcd1234", 0);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->total, 12);
  EXPECT_TRUE(m->items.empty());

  // Artifacts only: a blueprint under the same prefix is not an artifact.
  BlueprintRecord bp = MakeBlueprint("invoice_totals", "1.0.0");
  bp.digest = Digest("abcd1234f");
  ASSERT_TRUE(store_->PutBlueprint(bp).ok());
  m = store_->FindArtifactsByDigestPrefix("sha256:abcd1234f", 10);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->total, 0);
}

TEST_P(LookupTest, MalformedPrefixesAreInvalid) {
  for (const std::string& bad : {std::string("abcd1234"), std::string("sha256:"), std::string("sha256:ABCD1234"),
                                 std::string("sha256:abcd123g"), std::string("sha256:abcd%"), std::string("sha256:_"),
                                 std::string("sha256:abcd 1234"), std::string("SHA256:abcd1234"),
                                 "sha256:" + std::string(65, 'a'), std::string("sha256:abcd1234\0", 16)}) {
    EXPECT_EQ(store_->FindArtifactsByDigestPrefix(bad, 10).status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(store_->FindBlueprintsByDigestPrefix(bad, 10).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST_P(LookupTest, BlueprintDigestPrefix) {
  for (const char* tail : {"1", "2", "3"}) {
    BlueprintRecord bp = MakeBlueprint(std::string("b") + tail, "1.0.0");
    bp.digest = Digest(std::string("0123abcd") + tail);
    ASSERT_TRUE(store_->PutBlueprint(bp).ok());
  }
  absl::StatusOr<Store::Matches> m = store_->FindBlueprintsByDigestPrefix("sha256:0123abcd", 2);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->total, 3);
  EXPECT_EQ(m->items, (std::vector<std::string>{Digest("0123abcd1"), Digest("0123abcd2")}));
  m = store_->FindBlueprintsByDigestPrefix("sha256:0123abcd3", 2);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->items, std::vector<std::string>{Digest("0123abcd3")});
}

TEST_P(LookupTest, BlueprintsDeclaringAPointByName) {
  // Two versions of invoice_totals and one of receipts declare "parse"; only receipts declares
  // "total".
  auto with_points = [](const std::string& name, const std::string& version, std::vector<std::string> points) {
    BlueprintRecord bp = MakeBlueprint(name, version);
    bp.generation_points.clear();
    for (const std::string& p : points) bp.generation_points.push_back(MakeSpec(p));
    return bp;
  };
  ASSERT_TRUE(store_->PutBlueprint(with_points("invoice_totals", "1.0.0", {"parse", "find"})).ok());
  ASSERT_TRUE(store_->PutBlueprint(with_points("invoice_totals", "1.1.0", {"parse"})).ok());
  ASSERT_TRUE(store_->PutBlueprint(with_points("receipts", "1.0.0", {"total", "parse"})).ok());

  absl::StatusOr<Store::Matches> m = store_->FindBlueprintNamesDeclaringPoint("parse", 10);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->total, 2) << "a blueprint name counts once, whatever its versions";
  EXPECT_EQ(m->items, (std::vector<std::string>{"invoice_totals", "receipts"}));
  m = store_->FindBlueprintNamesDeclaringPoint("parse", 1);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->total, 2);
  EXPECT_EQ(m->items, std::vector<std::string>{"invoice_totals"});
  m = store_->FindBlueprintNamesDeclaringPoint("total", 10);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->items, std::vector<std::string>{"receipts"});
  m = store_->FindBlueprintNamesDeclaringPoint("find", 10);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->items, std::vector<std::string>{"invoice_totals"});
  m = store_->FindBlueprintNamesDeclaringPoint("nothing", 10);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->total, 0);
}

// The schema gives each lookup an index: the query plans search, they never scan a table.
TEST_P(SqliteLookupTest, LookupsUseIndexes) {
  store_.reset();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2((ScratchDir() + "/data/rote.db").c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  auto plan = [&](const std::string& sql) {
    sqlite3_stmt* stmt = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db, ("EXPLAIN QUERY PLAN " + sql).c_str(), -1, &stmt, nullptr), SQLITE_OK)
        << sqlite3_errmsg(db);
    std::string out;
    while (sqlite3_step(stmt) == SQLITE_ROW) {
      out += reinterpret_cast<const char*>(sqlite3_column_text(stmt, 3));
      out += "\n";
    }
    sqlite3_finalize(stmt);
    return out;
  };
  for (const std::string table : {"artifacts", "blueprints"}) {
    const std::string p = plan("SELECT digest FROM " + table + " WHERE digest >= ?1 AND digest < ?2 ORDER BY digest");
    EXPECT_NE(p.find("SEARCH"), std::string::npos) << p;
    EXPECT_EQ(p.find("SCAN"), std::string::npos) << p;
  }
  const std::string p = plan(
      "SELECT DISTINCT b.name FROM generation_specs s JOIN blueprint_points p ON p.spec_digest = s.digest "
      "JOIN blueprints b ON b.id = p.blueprint_id WHERE s.name = ?1");
  EXPECT_NE(p.find("generation_specs_by_name"), std::string::npos) << p;
  EXPECT_NE(p.find("blueprint_points_by_spec"), std::string::npos) << p;
  EXPECT_EQ(p.find("SCAN s"), std::string::npos) << p;
  EXPECT_EQ(p.find("SCAN p"), std::string::npos) << p;
  sqlite3_close(db);
}

}  // namespace
}  // namespace rote::store
