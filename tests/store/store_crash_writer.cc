// Child process of the crash test: writes runs and reviews in a loop from several threads
// and reports each acknowledged write on stdout, one line per write, until it is killed:
//   R <run id>           the run was created
//   F <run id>           the run was finished (succeeded, one step)
//   V <comment>          a review with this comment was recorded
// Each line is written with one write(2) of fewer than PIPE_BUF bytes, so lines from
// different threads never interleave.
#include <unistd.h>

#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "store/digest.h"
#include "store/store.h"

namespace {

void Report(const std::string& line) {
  std::string l = line + "\n";
  if (::write(STDOUT_FILENO, l.data(), l.size()) != static_cast<ssize_t>(l.size())) _exit(3);
}

int Fail(const char* what, const absl::Status& status) {
  std::fprintf(stderr, "store_crash_writer: %s: %s\n", what, status.ToString().c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace rote::store;
  if (argc != 3) {
    std::fprintf(stderr, "usage: store_crash_writer DATA_DIR GENERATION\n");
    return 2;
  }
  const std::string generation = argv[2];
  StoreOptions options;
  options.path = argv[1];
  absl::StatusOr<std::unique_ptr<Store>> opened = Store::Open(options);
  if (!opened.ok()) return Fail("open", opened.status());
  Store& store = **opened;

  BlueprintRecord bp;
  bp.name = "crash";
  bp.version = "1";
  bp.source = "return rote.blueprint { name = 'crash', version = '1' }";
  bp.digest = Sha256Digest(bp.source);
  if (auto s = store.PutBlueprint(bp); !s.ok()) return Fail("blueprint", s.status());
  ArtifactRecord art;
  art.kind = "lua_function";
  art.generation_point = "crash/p";
  art.source = "return function(x) return x end";
  art.options_json = "{}";
  art.validation_report_json = "{}";
  art.digest = Sha256Digest(art.source);
  if (auto s = store.PutArtifact(art); !s.ok()) return Fail("artifact", s.status());
  absl::StatusOr<BlobRef> input = store.PutBlob("crash input");
  absl::StatusOr<BlobRef> output = store.PutBlob("crash output");
  if (!input.ok() || !output.ok()) return Fail("blobs", input.status());
  Report("READY");

  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0;; ++i) {
        NewRun nr{bp.digest, input->digest, {{"p", art.digest, "lockfile"}}, "{}", "crash", ""};
        absl::StatusOr<CreateRunResult> run = store.CreateRun(nr);
        if (!run.ok()) _exit(Fail("create run", run.status()));
        const int64_t id = run->run.id;
        Report("R " + std::to_string(id));
        if (t % 2 == 0) {
          std::string comment = generation + "-" + std::to_string(t) + "-" + std::to_string(i);
          absl::StatusOr<ArtifactRecord> review = store.ReviewArtifact(
              {art.digest, "crash", i % 2 ? ReviewState::kApproved : ReviewState::kRejected,
               comment, ""});
          if (!review.ok()) _exit(Fail("review", review.status()));
          Report("V " + comment);
        }
        if (!store.StartRun(id).ok() ||
            !store.AppendSteps(id, {{0, "p", art.digest, input->digest, output->digest}}).ok() ||
            !store.FinishRun(id, {RunState::kSucceeded, output->digest, ""}).ok()) {
          _exit(Fail("finish run", absl::InternalError("a run write failed")));
        }
        Report("F " + std::to_string(id));
      }
    });
  }
  for (auto& th : threads) th.join();
  return 0;
}
