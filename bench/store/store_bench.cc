// Store benchmark: one JSON object per line, {"metric": ..., "value": ..., "unit": ...}.
//
//   store_bench [--dir DIR] [--seconds S] [--only records|blobs] [--pg URL --pg-dir DIR]
//
// --pg URL also runs the record benchmark on the PostgreSQL store at URL (a database of its
// own: it writes there), as "store.postgresql.*", beside the fsync ceiling of --pg-dir (a
// directory on the disk of the cluster's data directory).
//
// DIR (default: a fresh directory under /tmp) must be on the disk being measured. Every write
// figure is next to the physical limit it runs into: the measured fsync latency of that disk,
// and the ceiling it implies for W synchronous writers (one fsync per group commit of at most
// W writes).
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "store/digest.h"
#include "store/store.h"

namespace {

using namespace rote::store;
using Clock = std::chrono::steady_clock;

void Emit(const std::string& metric, double value, const std::string& unit) {
  std::printf("{\"metric\": \"%s\", \"value\": %.6g, \"unit\": \"%s\"}\n", metric.c_str(), value,
              unit.c_str());
  std::fflush(stdout);
}

[[noreturn]] void Die(const std::string& what, const absl::Status& status) {
  std::fprintf(stderr, "store_bench: %s: %s\n", what.c_str(), status.ToString().c_str());
  std::exit(1);
}

// The mean latency of writing 6 pages (24 KiB, about what one group commit of 8 run records
// appends to the WAL) over older data and fdatasync-ing them, cycling through 4 MiB as the WAL
// does between checkpoints. The mean, not the median: throughput pays for the slow ones too.
double FsyncLatencyMs(const std::string& dir) {
  std::string path = dir + "/fsync-probe";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  constexpr size_t kChunk = 6 * 4096;
  constexpr size_t kRegion = 4 << 20;
  std::string chunk(kChunk, 'x');
  for (size_t off = 0; off < kRegion; off += kChunk) {
    if (::pwrite(fd, chunk.data(), chunk.size(), static_cast<off_t>(off)) < 0) std::exit(1);
  }
  ::fsync(fd);
  constexpr int kSamples = 100;
  const auto t0 = Clock::now();
  for (int i = 0; i < kSamples; ++i) {
    off_t off = static_cast<off_t>((static_cast<size_t>(i) * kChunk) % kRegion);
    if (::pwrite(fd, chunk.data(), chunk.size(), off) < 0 || ::fdatasync(fd) != 0) {
      std::perror("fsync probe");
      std::exit(1);
    }
  }
  const double mean_ms =
      std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / kSamples;
  ::close(fd);
  ::unlink(path.c_str());
  return mean_ms;
}

// Runs `op(thread, i)` from `threads` threads for `seconds`; returns completed ops per second.
double Throughput(int threads, double seconds, const std::function<void(int, int64_t)>& op) {
  std::atomic<int64_t> done{0};
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  const auto start = Clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      int64_t i = 0;
      while (Clock::now() < deadline) {
        op(t, i++);
        done.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  for (auto& th : pool) th.join();
  return static_cast<double>(done.load()) /
         std::chrono::duration<double>(Clock::now() - start).count();
}

std::unique_ptr<Store> OpenStore(const std::string& path, SyncMode sync, int64_t inline_max,
                                 int readers, int group_commit_wait_us = 1000) {
  StoreOptions options;
  options.group_commit_wait_us = group_commit_wait_us;
  options.path = path;
  options.synchronous = sync;
  options.inline_blob_max_bytes = inline_max;
  options.reader_pool_size = readers;
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(options);
  if (!store.ok()) Die("open " + path, store.status());
  return *std::move(store);
}

// With `pg_url`, on the PostgreSQL store there (metrics "store.postgresql.*"); else on a SQLite
// store under `root`.
void RecordAndReadBench(const std::string& root, SyncMode sync, double seconds,
                        double fsync_ms, int group_commit_wait_us = 1000,
                        const std::string& pg_url = "") {
  const std::string prefix = pg_url.empty() ? "store." : "store.postgresql.";
  const bool writes_only = group_commit_wait_us != 1000;
  const std::string mode = std::string(sync == SyncMode::kFull ? "full" : "normal") +
                           (writes_only ? ".gather_wait_us" + std::to_string(group_commit_wait_us)
                                        : "");
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::unique_ptr<Store> store =
      OpenStore(pg_url.empty() ? root + "/records-" + mode : pg_url, sync, 256 * 1024, 8, group_commit_wait_us);
  BlueprintRecord bp;
  bp.name = "bench";
  bp.version = "1";
  bp.source = "return rote.blueprint { name = 'bench', version = '1' }";
  bp.digest = Sha256Digest(bp.source);
  if (auto s = store->PutBlueprint(bp); !s.ok()) Die("blueprint", s.status());
  ArtifactRecord art;
  art.kind = "lua_function";
  art.generation_point = "bench/p";
  art.source = "return 1";
  art.digest = Sha256Digest(art.source);
  if (auto s = store->PutArtifact(art); !s.ok()) Die("artifact", s.status());
  const std::string input = store->PutBlob("bench input")->digest;

  constexpr int kWriters = 8;
  std::vector<std::vector<int64_t>> ids(kWriters);
  const StoreStats before = store->Stats();
  const auto write_start = Clock::now();
  double runs_per_s = Throughput(kWriters, seconds, [&](int t, int64_t) {
    NewRun run{bp.digest, input, {{"p", art.digest, "lockfile"}}, "{}", "bench", ""};
    absl::StatusOr<CreateRunResult> r = store->CreateRun(run);
    if (!r.ok()) Die("create run", r.status());
    ids[static_cast<size_t>(t)].push_back(r->run.id);
  });
  Emit(prefix + "run_records_per_s.writers8.sync_" + mode, runs_per_s, "records/s");
  const double write_ms =
      std::chrono::duration<double, std::milli>(Clock::now() - write_start).count();
  const StoreStats after = store->Stats();
  Emit(prefix + "commit_latency_ms.writers8.sync_" + mode,
       write_ms / static_cast<double>(std::max<int64_t>(1, after.commits - before.commits)), "ms");
  Emit(prefix + "writes_per_commit.writers8.sync_" + mode,
       static_cast<double>(after.writes - before.writes) /
           static_cast<double>(std::max<int64_t>(1, after.commits - before.commits)),
       "writes/commit");
  if (writes_only) return;
  if (sync == SyncMode::kFull) {
    // One fsync per group; a group holds at most one write per synchronous writer.
    Emit(prefix + "run_records_ceiling_per_s.writers8.sync_full", kWriters * 1000.0 / fsync_ms,
         "records/s");
  }

  double artifacts_per_s = Throughput(kWriters, seconds, [&](int t, int64_t i) {
    ArtifactRecord a;
    a.kind = "lua_function";
    a.generation_point = "bench/p" + std::to_string(t);
    a.source = "return " + std::to_string(t) + " * " + std::to_string(i) + " -- " + mode;
    a.options_json = "{}";
    a.validation_report_json = "{\"passed\":true}";
    a.digest = Sha256Digest(a.source);
    absl::StatusOr<ArtifactRecord> r = store->PutArtifact(a);
    if (!r.ok()) Die("put artifact", r.status());
  });
  Emit(prefix + "artifact_puts_per_s.writers8.sync_" + mode, artifacts_per_s, "puts/s");

  std::vector<int64_t> all;
  for (auto& v : ids) all.insert(all.end(), v.begin(), v.end());
  for (int threads : {cores, 8}) {
    double reads_per_s = Throughput(threads, seconds, [&](int t, int64_t i) {
      // A cheap deterministic spread over the runs written above.
      size_t k = static_cast<size_t>((i * 2654435761u + static_cast<uint64_t>(t)) % all.size());
      absl::StatusOr<RunRecord> r = store->GetRun(all[k]);
      if (!r.ok()) Die("get run", r.status());
    });
    Emit(prefix + "point_reads_per_s.get_run.threads" + std::to_string(threads) + ".sync_" + mode,
         reads_per_s, "reads/s");
  }
  double blob_reads_per_s = Throughput(cores, seconds, [&](int, int64_t) {
    absl::StatusOr<std::string> b = store->GetBlob(input);
    if (!b.ok()) Die("get blob", b.status());
  });
  Emit(prefix + "point_reads_per_s.get_blob_small.threads" + std::to_string(cores) + ".sync_" + mode,
       blob_reads_per_s, "reads/s");
}

// Inline in SQLite versus a file per blob, at the sizes rote stores: 1 KiB (specs, small
// outputs), 64 KiB (prompts, raw model outputs), 4 MiB (inputs), and two sizes between to
// place the threshold.
void BlobPlacementBench(const std::string& root, double seconds) {
  for (int64_t size : {int64_t{1} << 10, int64_t{64} << 10, int64_t{256} << 10,
                       int64_t{1} << 20, int64_t{4} << 20}) {
    for (bool inline_blob : {true, false}) {
      const std::string label =
          std::to_string(size >> 10) + "KiB." + (inline_blob ? "inline" : "file");
      std::unique_ptr<Store> store =
          OpenStore(root + "/blobs-" + label, SyncMode::kFull,
                    inline_blob ? (int64_t{1} << 40) : 0, 2);
      std::vector<std::string> digests;
      std::mt19937_64 rng(42);
      std::string bytes(static_cast<size_t>(size), '\0');
      const auto start = Clock::now();
      const auto deadline = start + std::chrono::duration<double>(seconds);
      while (Clock::now() < deadline || digests.size() < 8) {
        for (size_t i = 0; i < bytes.size(); i += 8) {
          uint64_t r = rng();
          std::memcpy(bytes.data() + i, &r, std::min<size_t>(8, bytes.size() - i));
        }
        absl::StatusOr<BlobRef> ref = store->PutBlob(bytes);
        if (!ref.ok()) Die("put blob", ref.status());
        digests.push_back(ref->digest);
      }
      double put_s = std::chrono::duration<double>(Clock::now() - start).count();
      Emit("store.blob_put_per_s." + label, static_cast<double>(digests.size()) / put_s, "puts/s");
      Emit("store.blob_put_mib_per_s." + label,
           static_cast<double>(digests.size()) * static_cast<double>(size) / put_s / (1 << 20),
           "MiB/s");
      double get_per_s = Throughput(1, seconds, [&](int, int64_t i) {
        absl::StatusOr<std::string> b =
            store->GetBlob(digests[static_cast<size_t>(i) % digests.size()]);
        if (!b.ok()) Die("get blob", b.status());
      });
      Emit("store.blob_get_per_s." + label, get_per_s, "gets/s");
      Emit("store.blob_get_mib_per_s." + label,
           get_per_s * static_cast<double>(size) / (1 << 20), "MiB/s");
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  double seconds = 3.0;
  std::string only;  // "records", "blobs" or everything
  std::string pg_url;
  std::string pg_dir;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--dir" && i + 1 < argc) {
      dir = argv[++i];
    } else if (arg == "--only" && i + 1 < argc) {
      only = argv[++i];
    } else if (arg == "--seconds" && i + 1 < argc) {
      seconds = std::stod(argv[++i]);
    } else if (arg == "--pg" && i + 1 < argc) {
      pg_url = argv[++i];
    } else if (arg == "--pg-dir" && i + 1 < argc) {
      pg_dir = argv[++i];
    } else {
      std::fprintf(stderr, "usage: store_bench [--dir DIR] [--seconds S] [--only records|blobs] "
                           "[--pg URL --pg-dir DIR]\n");
      return 2;
    }
  }
  bool made_dir = false;
  if (dir.empty()) {
    std::string pattern = "/tmp/rote-store-bench-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) return 1;
    dir = pattern;
    made_dir = true;
  }
  const double fsync_ms = FsyncLatencyMs(dir);
  Emit("store.disk_write24k_fdatasync_mean_ms", fsync_ms, "ms");
  if (only.empty() || only == "records") {
    RecordAndReadBench(dir, SyncMode::kFull, seconds, fsync_ms);
    // Side by side: the same writers without waiting to gather a group.
    RecordAndReadBench(dir, SyncMode::kFull, seconds, fsync_ms, 0);
    RecordAndReadBench(dir, SyncMode::kNormal, seconds, fsync_ms);
    if (!pg_url.empty()) {
      // PostgreSQL flushes the WAL of concurrent commits together too: the same ceiling, on
      // the disk of its data directory.
      const double pg_fsync_ms = FsyncLatencyMs(pg_dir.empty() ? dir : pg_dir);
      Emit("store.postgresql.disk_write24k_fdatasync_mean_ms", pg_fsync_ms, "ms");
      RecordAndReadBench(dir, SyncMode::kFull, seconds, pg_fsync_ms, 1000, pg_url);
    }
  }
  if (only.empty() || only == "blobs") BlobPlacementBench(dir, seconds);
  if (made_dir) std::filesystem::remove_all(dir);
  return 0;
}
