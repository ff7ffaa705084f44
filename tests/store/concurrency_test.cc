// 8 writer and 8 reader threads for a few seconds: no errors, and the counts come out exact.
#include <atomic>
#include <chrono>
#include <mutex>
#include <random>
#include <thread>

#include "gtest/gtest.h"
#include "store/store.h"
#include "tests/store/test_util.h"

namespace rote::store {
namespace {

using testing::MakeArtifact;
using testing::MakeBlueprint;
using testing::OpenOrDie;
using testing::TempDir;

TEST(ConcurrencyTest, EightWritersEightReadersExactCounts) {
  TempDir dir;
  StoreOptions options;
  options.path = dir.path();
  options.reader_pool_size = 4;  // fewer connections than readers: leases must be shared
  std::unique_ptr<Store> store = OpenOrDie(options);
  BlueprintRecord bp = *store->PutBlueprint(MakeBlueprint("bp", "1"));
  ArtifactRecord art = *store->PutArtifact(MakeArtifact("bp/p", "return 1"));
  const std::string input = store->PutBlob("input")->digest;

  constexpr int kWriters = 8;
  constexpr int kReaders = 8;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  std::atomic<int> errors{0};
  std::vector<std::vector<int64_t>> finished(kWriters);
  std::mutex known_mu;
  std::vector<int64_t> known;  // finished run ids, for readers to look up
  std::atomic<int64_t> reads{0};
  std::atomic<bool> writers_done{false};

  std::vector<std::thread> threads;
  for (int w = 0; w < kWriters; ++w) {
    threads.emplace_back([&, w] {
      int i = 0;
      while (std::chrono::steady_clock::now() < deadline) {
        NewRun nr{bp.digest, input, {{"p", art.digest, "lockfile"}}, "{}", "w", ""};
        absl::StatusOr<CreateRunResult> created = store->CreateRun(nr);
        if (!created.ok()) { ++errors; ADD_FAILURE() << created.status(); return; }
        const int64_t id = created->run.id;
        std::string out = "out-" + std::to_string(w) + "-" + std::to_string(i++);
        absl::StatusOr<BlobRef> out_blob = store->PutBlob(out);
        absl::StatusOr<RunRecord> started = store->StartRun(id);
        absl::Status steps = store->AppendSteps(
            id, {{0, "p", art.digest, input, out_blob->digest},
                 {1, "p", art.digest, out_blob->digest, out_blob->digest}});
        absl::StatusOr<int64_t> event = store->AppendRunEvent(id, "state", "succeeded");
        absl::StatusOr<RunRecord> done =
            store->FinishRun(id, {RunState::kSucceeded, out_blob->digest, ""});
        if (!out_blob.ok() || !started.ok() || !steps.ok() || !event.ok() || !done.ok()) {
          ++errors;
          ADD_FAILURE() << "writer " << w << " failed";
          return;
        }
        finished[static_cast<size_t>(w)].push_back(id);
        std::lock_guard<std::mutex> lock(known_mu);
        known.push_back(id);
      }
    });
  }
  for (int r = 0; r < kReaders; ++r) {
    threads.emplace_back([&, r] {
      std::mt19937 rng(static_cast<uint32_t>(r));
      while (!writers_done.load()) {
        int64_t id = 0;
        {
          std::lock_guard<std::mutex> lock(known_mu);
          if (!known.empty()) id = known[rng() % known.size()];
        }
        if (id != 0) {
          // A finished run is finished in every read after it was acknowledged.
          absl::StatusOr<RunRecord> run = store->GetRun(id);
          if (!run.ok() || run->state != RunState::kSucceeded || run->step_count != 2) {
            ++errors;
            ADD_FAILURE() << "read of run " << id << ": " << run.status();
            return;
          }
          if (!store->GetBlob(run->output_digest).ok()) ++errors;
        }
        if (!store->ListRuns({}, {20, ""}).ok()) ++errors;
        reads += 2;
      }
    });
  }
  for (int w = 0; w < kWriters; ++w) threads[static_cast<size_t>(w)].join();
  writers_done = true;
  for (size_t t = kWriters; t < threads.size(); ++t) threads[t].join();
  EXPECT_EQ(errors.load(), 0);

  size_t total = 0;
  for (const auto& ids : finished) total += ids.size();
  ASSERT_GT(total, 50u) << "too little progress to mean anything";
  std::vector<int64_t> listed;
  PageRequest page{1000, ""};
  do {
    absl::StatusOr<Page<RunRecord>> p = store->ListRuns({bp.digest, RunState::kSucceeded}, page);
    ASSERT_TRUE(p.ok()) << p.status();
    for (const RunRecord& run : p->items) {
      listed.push_back(run.id);
      EXPECT_EQ(run.step_count, 2);
    }
    page.page_token = p->next_page_token;
  } while (!page.page_token.empty());
  EXPECT_EQ(listed.size(), total);
  EXPECT_EQ(store->ListRuns({}, {1000, ""})->items.size(), std::min<size_t>(total, 1000));
  for (const auto& ids : finished) {
    for (int64_t id : ids) {
      ASSERT_EQ(store->ListSteps(id)->size(), 2u);
      ASSERT_EQ(store->ListRunEvents(id, 0, 0)->size(), 1u);
    }
  }
  EXPECT_TRUE(store->CheckIntegrity(true).ok());
  std::cout << "[ concurrency ] " << total << " runs finished (5 writes each), " << reads.load()
            << " reads\n";
}

}  // namespace
}  // namespace rote::store
