// The writer thread on its own: writes share commits, and a failing write undoes only itself.
#include "store/group_commit.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "store/sqlite.h"
#include "tests/store/test_util.h"

namespace rote::store::internal {
namespace {

using rote::store::testing::TempDir;

TEST(GroupCommitTest, FailedWriteUndoesOnlyItselfAndGroupsShareCommits) {
  TempDir dir;
  const std::string path = dir.path() + "/g.db";
  {
    auto setup = Connection::Open(path, {});
    ASSERT_TRUE(setup.ok());
    ASSERT_TRUE((*setup)->QueryText("PRAGMA journal_mode = WAL").ok());
    ASSERT_TRUE((*setup)->ExecScript("CREATE TABLE t (k INTEGER PRIMARY KEY) STRICT").ok());
  }
  auto conn = Connection::Open(path, {});
  ASSERT_TRUE(conn.ok());
  GroupCommitWriter writer(*std::move(conn), 1024, 1000);

  constexpr int kThreads = 8;
  constexpr int kPerThread = 40;
  std::atomic<int> ok{0}, failed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const int key = t * kPerThread + i;
        absl::Status s = writer.Write([key](Connection& c) -> absl::Status {
          auto stmt = c.Prepare("INSERT INTO t (k) VALUES (?)");
          if (!stmt.ok()) return stmt.status();
          stmt->BindInt(1, key);
          if (absl::Status st = stmt->Run(); !st.ok()) return st;
          // Odd keys fail after their insert: the savepoint must take the row back out.
          if (key % 2 == 1) return absl::AbortedError("odd");
          return absl::OkStatus();
        });
        if (s.ok()) ++ok;
        if (s.code() == absl::StatusCode::kAborted) ++failed;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok.load(), kThreads * kPerThread / 2);
  EXPECT_EQ(failed.load(), kThreads * kPerThread / 2);
  GroupCommitWriter::Stats stats = writer.stats();
  EXPECT_EQ(stats.writes, kThreads * kPerThread);
  EXPECT_LT(stats.commits, stats.writes / 2) << "writes were not grouped";

  auto reader = Connection::Open(path, {});
  ASSERT_TRUE(reader.ok());
  EXPECT_EQ(*(*reader)->QueryText("SELECT count(*) FROM t"),
            std::to_string(kThreads * kPerThread / 2));
  EXPECT_EQ(*(*reader)->QueryText("SELECT count(*) FROM t WHERE k % 2 = 1"), "0");
}

TEST(GroupCommitTest, LoneWriterDoesNotWaitToGather) {
  TempDir dir;
  const std::string path = dir.path() + "/g.db";
  auto conn = Connection::Open(path, {5000, false, false});
  ASSERT_TRUE(conn.ok());
  ASSERT_TRUE((*conn)->ExecScript("CREATE TABLE t (k INTEGER) STRICT").ok());
  // A gather wait of a whole second would make 20 sequential writes take 20 s if a lone
  // writer waited for company.
  GroupCommitWriter writer(*std::move(conn), 1024, 1'000'000);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(writer.Write([](Connection& c) { return c.Exec("INSERT INTO t VALUES (1)"); }).ok());
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(writer.stats().commits, 20);
}

}  // namespace
}  // namespace rote::store::internal
