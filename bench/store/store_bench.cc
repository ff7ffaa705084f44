// Store benchmark: one JSON object per line, {"metric": ..., "value": ..., "unit": ...}.
//
//   store_bench [--dir DIR] [--seconds S] [--records-only]
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

// The median latency of overwriting one 4 KiB page and fdatasync-ing it, as a WAL commit does.
double FsyncLatencyMs(const std::string& dir) {
  std::string path = dir + "/fsync-probe";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  std::string page(4096, 'x');
  std::vector<double> ms;
  for (int i = 0; i < 64; ++i) {
    auto t0 = Clock::now();
    if (::pwrite(fd, page.data(), page.size(), (i % 16) * 4096) < 0 || ::fdatasync(fd) != 0) {
      std::perror("fsync probe");
      std::exit(1);
    }
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  ::close(fd);
  ::unlink(path.c_str());
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
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
                                 int readers) {
  StoreOptions options;
  options.path = path;
  options.synchronous = sync;
  options.inline_blob_max_bytes = inline_max;
  options.reader_pool_size = readers;
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(options);
  if (!store.ok()) Die("open " + path, store.status());
  return *std::move(store);
}

void RecordAndReadBench(const std::string& root, SyncMode sync, double seconds,
                        double fsync_ms) {
  const std::string mode = sync == SyncMode::kFull ? "full" : "normal";
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::unique_ptr<Store> store = OpenStore(root + "/records-" + mode, sync, 256 * 1024, 8);
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
  double runs_per_s = Throughput(kWriters, seconds, [&](int t, int64_t) {
    NewRun run{bp.digest, input, {{"p", art.digest, "lockfile"}}, "{}", "bench", ""};
    absl::StatusOr<CreateRunResult> r = store->CreateRun(run);
    if (!r.ok()) Die("create run", r.status());
    ids[static_cast<size_t>(t)].push_back(r->run.id);
  });
  Emit("store.run_records_per_s.writers8.sync_" + mode, runs_per_s, "records/s");
  const StoreStats after = store->Stats();
  Emit("store.writes_per_commit.writers8.sync_" + mode,
       static_cast<double>(after.writes - before.writes) /
           static_cast<double>(std::max<int64_t>(1, after.commits - before.commits)),
       "writes/commit");
  if (sync == SyncMode::kFull) {
    // One fsync per group; a group holds at most one write per synchronous writer.
    Emit("store.run_records_ceiling_per_s.writers8.sync_full", kWriters * 1000.0 / fsync_ms,
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
  Emit("store.artifact_puts_per_s.writers8.sync_" + mode, artifacts_per_s, "puts/s");

  std::vector<int64_t> all;
  for (auto& v : ids) all.insert(all.end(), v.begin(), v.end());
  for (int threads : {cores, 8}) {
    double reads_per_s = Throughput(threads, seconds, [&](int t, int64_t i) {
      // A cheap deterministic spread over the runs written above.
      size_t k = static_cast<size_t>((i * 2654435761u + static_cast<uint64_t>(t)) % all.size());
      absl::StatusOr<RunRecord> r = store->GetRun(all[k]);
      if (!r.ok()) Die("get run", r.status());
    });
    Emit("store.point_reads_per_s.get_run.threads" + std::to_string(threads) + ".sync_" + mode,
         reads_per_s, "reads/s");
  }
  double blob_reads_per_s = Throughput(cores, seconds, [&](int, int64_t) {
    absl::StatusOr<std::string> b = store->GetBlob(input);
    if (!b.ok()) Die("get blob", b.status());
  });
  Emit("store.point_reads_per_s.get_blob_small.threads" + std::to_string(cores) + ".sync_" + mode,
       blob_reads_per_s, "reads/s");
}

// Inline in SQLite versus a file per blob, at the sizes rote stores: 1 KiB (specs, small
// outputs), 64 KiB (prompts, raw model outputs), 4 MiB (inputs).
void BlobPlacementBench(const std::string& root, double seconds) {
  for (int64_t size : {int64_t{1} << 10, int64_t{64} << 10, int64_t{4} << 20}) {
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
  bool records_only = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--dir" && i + 1 < argc) {
      dir = argv[++i];
    } else if (arg == "--records-only") {
      records_only = true;
    } else if (arg == "--seconds" && i + 1 < argc) {
      seconds = std::stod(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: store_bench [--dir DIR] [--seconds S] [--records-only]\n");
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
  Emit("store.disk_fdatasync_latency_ms", fsync_ms, "ms");
  RecordAndReadBench(dir, SyncMode::kFull, seconds, fsync_ms);
  RecordAndReadBench(dir, SyncMode::kNormal, seconds, fsync_ms);
  if (!records_only) BlobPlacementBench(dir, seconds);
  if (made_dir) std::filesystem::remove_all(dir);
  return 0;
}
