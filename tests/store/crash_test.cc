// Kill -9 a writer process at random moments; after every kill the database must open, pass
// PRAGMA integrity_check and hold every write the child had been told was committed.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <random>
#include <set>
#include <sstream>

#include "gtest/gtest.h"
#include "store/digest.h"
#include "store/store.h"
#include "tests/store/test_util.h"

namespace rote::store {
namespace {

using testing::TempDir;

struct Child {
  pid_t pid = -1;
  int out = -1;  // read end of the child's stdout
};

Child Spawn(const std::string& data_dir, int generation) {
  int fds[2];
  if (::pipe(fds) != 0) std::abort();
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(fds[1], STDOUT_FILENO);
    ::close(fds[0]);
    ::close(fds[1]);
    std::string gen = std::to_string(generation);
    ::execl(ROTE_STORE_CRASH_WRITER, ROTE_STORE_CRASH_WRITER, data_dir.c_str(), gen.c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(fds[1]);
  return Child{pid, fds[0]};
}

// Reads what the child wrote until `deadline`, or until EOF when `until_eof`.
void Drain(int fd, std::string& into, std::chrono::steady_clock::time_point deadline,
           bool until_eof) {
  char buf[4096];
  while (true) {
    int timeout_ms = -1;
    if (!until_eof) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return;
      timeout_ms = static_cast<int>(left.count());
    }
    pollfd p{fd, POLLIN, 0};
    int ready = ::poll(&p, 1, timeout_ms);
    if (ready <= 0) {
      if (ready < 0 && errno == EINTR) continue;
      return;
    }
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n <= 0) return;
    into.append(buf, static_cast<size_t>(n));
  }
}

TEST(CrashTest, SigkillLosesNoAcknowledgedWrite) {
  TempDir dir;
  std::mt19937 rng(20261120);  // fixed seed: the same kill moments on every run
  std::set<int64_t> created, finished;
  std::set<std::string> reviews;
  const std::string artifact_digest = Sha256Digest("return function(x) return x end");
  constexpr int kKills = 24;
  int kills_during_setup = 0;
  for (int round = 0; round < kKills; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    Child child = Spawn(dir.path(), round);
    std::string out;
    const auto start = std::chrono::steady_clock::now();
    if (round % 4 == 3) {
      // Kill while the child may still be opening, migrating or seeding the database.
      Drain(child.out, out,
            start + std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 25)(rng)),
            false);
      if (out.find("READY") == std::string::npos) ++kills_during_setup;
    } else {
      while (out.find("READY") == std::string::npos &&
             std::chrono::steady_clock::now() < start + std::chrono::seconds(10)) {
        Drain(child.out, out, std::chrono::steady_clock::now() + std::chrono::milliseconds(2),
              false);
      }
      const int run_ms = std::uniform_int_distribution<int>(5, 150)(rng);
      Drain(child.out, out, std::chrono::steady_clock::now() + std::chrono::milliseconds(run_ms),
            false);
    }
    ::kill(child.pid, SIGKILL);
    int status = 0;
    ::waitpid(child.pid, &status, 0);
    Drain(child.out, out, {}, true);
    ::close(child.out);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << "the writer exited on its own (status " << status << "); output:\n"
        << out;

    std::istringstream lines(out);
    std::string line;
    while (std::getline(lines, line)) {
      if (lines.eof()) break;  // the last line may be cut short by the kill
      if (line.rfind("R ", 0) == 0) created.insert(std::stoll(line.substr(2)));
      if (line.rfind("F ", 0) == 0) finished.insert(std::stoll(line.substr(2)));
      if (line.rfind("V ", 0) == 0) reviews.insert(line.substr(2));
    }

    StoreOptions options;
    options.path = dir.path();
    options.full_integrity_check_on_open = true;
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(options);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->CheckIntegrity(true).ok());
    for (int64_t id : created) {
      absl::StatusOr<RunRecord> run = (*store)->GetRun(id);
      ASSERT_TRUE(run.ok()) << "acknowledged run " << id << " lost: " << run.status();
    }
    for (int64_t id : finished) {
      absl::StatusOr<RunRecord> run = (*store)->GetRun(id);
      ASSERT_TRUE(run.ok()) << run.status();
      EXPECT_EQ(run->state, RunState::kSucceeded) << "run " << id;
      EXPECT_EQ(run->step_count, 1) << "run " << id;
    }
    if (!reviews.empty()) {
      absl::StatusOr<std::vector<ReviewEntry>> log = (*store)->ListReviews(artifact_digest);
      ASSERT_TRUE(log.ok()) << log.status();
      std::set<std::string> stored;
      for (const ReviewEntry& e : *log) stored.insert(e.comment);
      for (const std::string& c : reviews) {
        ASSERT_TRUE(stored.count(c)) << "acknowledged review '" << c << "' lost";
      }
    }
  }
  std::cout << "[ crash ] " << kKills << " kills (" << kills_during_setup
            << " during setup); verified " << created.size() << " runs, " << finished.size()
            << " finished runs, " << reviews.size() << " reviews\n";
  EXPECT_GE(finished.size(), 24u) << "the writer made too little progress to test anything";
}

}  // namespace
}  // namespace rote::store
