// Runs the real `rote` binary and compares what it prints with golden files.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "orchestrator/server.h"

extern char** environ;

namespace {

using ::testing::HasSubstr;

struct Result {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs rote with `args`; stdout and stderr go to files (no pipe deadlocks), env is cleaned of
// ROTE_* so the developer's settings don't leak into golden output.
Result RunRote(const std::vector<std::string>& args) {
  static int counter = 0;
  const std::string base = (std::filesystem::temp_directory_path() /
                            ("rote-cli-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++))).string();
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, (base + ".out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, (base + ".err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<std::string> argv_s = {ROTE_BINARY};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_s;
  for (char** e = environ; *e; ++e) {
    if (std::string(*e).rfind("ROTE_", 0) != 0) env_s.push_back(*e);
  }
  std::vector<char*> envp;
  for (auto& s : env_s) envp.push_back(s.data());
  envp.push_back(nullptr);
  pid_t pid;
  Result r;
  if (posix_spawn(&pid, ROTE_BINARY, &actions, nullptr, argv.data(), envp.data()) != 0) return r;
  posix_spawn_file_actions_destroy(&actions);
  int status = 0;
  waitpid(pid, &status, 0);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = Slurp(base + ".out");
  r.err = Slurp(base + ".err");
  std::filesystem::remove(base + ".out");
  std::filesystem::remove(base + ".err");
  return r;
}

void ExpectGolden(const std::string& name, const std::string& actual) {
  const std::string path = std::string(ROTE_GOLDEN_DIR) + "/" + name;
  if (const char* update = std::getenv("ROTE_UPDATE_GOLDEN"); update && std::string(update) == "1") {
    std::ofstream(path, std::ios::binary) << actual;
    return;
  }
  ASSERT_TRUE(std::filesystem::exists(path)) << "missing golden file " << path
                                             << " (run with ROTE_UPDATE_GOLDEN=1 to create it)";
  EXPECT_EQ(actual, Slurp(path)) << "output differs from " << path;
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    rote::orchestrator::ServerOptions opt;
    opt.listen = "127.0.0.1:0";
    opt.metrics_listen = "off";
    opt.data_dir = (std::filesystem::temp_directory_path() / ("rote-cli-data-" + std::to_string(::getpid()))).string();
    opt.keys_file = opt.data_dir + ".keys";
    std::filesystem::create_directories(opt.data_dir);
    std::ofstream(opt.keys_file) << "cli-test-token-0123456789 carol submit\n";
    auto server = rote::orchestrator::Server::Start(opt);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    address_ = "127.0.0.1:" + std::to_string(server_->port());
  }
  std::unique_ptr<rote::orchestrator::Server> server_;
  std::string address_;
};

TEST(CliHelpTest, TopLevelHelpIsGolden) {
  Result r = RunRote({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  ExpectGolden("help.txt", r.out);
}

TEST(CliHelpTest, SubcommandHelpIsGolden) {
  for (const char* cmd : {"serve", "runs", "blueprints", "artifacts", "health"}) {
    Result r = RunRote({cmd, "--help"});
    EXPECT_EQ(r.exit_code, 0) << cmd;
    ExpectGolden(std::string(cmd) + "_help.txt", r.out);
  }
}

TEST(CliHelpTest, UnknownCommandIsAUsageError) {
  Result r = RunRote({"frobnicate"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown command `frobnicate`"));
  Result f = RunRote({"runs", "list", "--no-such-flag"});
  EXPECT_EQ(f.exit_code, 2);
  EXPECT_THAT(f.err, HasSubstr("unknown flag --no-such-flag"));
}

// Bad values of `rote serve`'s flags are usage errors (exit 2, the flag named), found before
// anything starts: a number that does not parse used to throw out of main (abort, exit 134).
TEST(CliHelpTest, ServeFlagValuesAreCheckedBeforeStarting) {
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"serve", "--grace-ms", "soon"}, "--grace-ms needs an integer, got `soon`"},
      {{"serve", "--drain-ms", "5x"}, "--drain-ms needs an integer, got `5x`"},
      {{"serve", "--max-message-bytes", "99999999999999999999"}, "--max-message-bytes needs an integer"},
      {{"serve", "--max-message-bytes", "12"}, "--max-message-bytes must be between 1024 and"},
      {{"serve", "--model", "/nonexistent", "--attempts", "11"}, "--attempts must be between 1 and 10, got 11"},
      {{"serve", "--model", "/nonexistent", "--kv-cache-mb", "0"}, "--kv-cache-mb must be between 1 and"},
      {{"serve", "--model", "/nonexistent", "--device", "tpu"}, "--device must be cpu, cuda or cuda:N"},
      {{"serve", "--model", "/nonexistent", "--device", "cuda:"}, "got `cuda:`"},
      {{"serve", "--model", "/nonexistent", "--device", "cuda:-1"}, "got `cuda:-1`"},
      {{"serve", "--model", "/nonexistent", "--device", "cuda1"}, "got `cuda1`"},
      {{"serve", "--model", "/nonexistent", "--numerics", "approximate"}, "--numerics must be exact or fast"},
      {{"serve", "--model", "/nonexistent", "--numerics", "fast"}, "--numerics fast needs --device cuda"},
      {{"serve", "--model", "/nonexistent", "--device", "cpu", "--numerics", "fast"}, "--numerics fast needs --device cuda"},
      {{"serve", "--kv-cache-mb", "512"}, "need --model DIR"},
      {{"serve", "--numerics", "exact"}, "need --model DIR"},
  };
  for (const Case& c : cases) {
    Result r = RunRote(c.args);
    SCOPED_TRACE(c.args.back());
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.says));
    EXPECT_EQ(r.out, "");  // nothing started: no "listening" line
  }
}

TEST(CliHelpTest, UnreachableServerSaysHowToStartOne) {
  Result r = RunRote({"health", "--server", "127.0.0.1:1"});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_THAT(r.err, HasSubstr("cannot reach a rote server at 127.0.0.1:1"));
  EXPECT_THAT(r.err, HasSubstr("Start one with `rote serve`"));
}

TEST_F(CliTest, HealthPrintsServing) {
  Result r = RunRote({"health", "--server", address_});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  ExpectGolden("health.txt", r.out);
}

TEST_F(CliTest, ApiListsServicesOverReflection) {
  Result r = RunRote({"api", "--server", address_});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  ExpectGolden("api.txt", r.out);
}

TEST_F(CliTest, MissingTokenExitsWithAuthCode) {
  Result r = RunRote({"runs", "list", "--server", address_});
  EXPECT_EQ(r.exit_code, 4);
  EXPECT_THAT(r.err, HasSubstr("missing bearer token"));
  EXPECT_THAT(r.err, HasSubstr("--token"));
}

TEST_F(CliTest, TokenFromFlagIsAccepted) {
  Result r = RunRote({"runs", "list", "--server", address_, "--token", "cli-test-token-0123456789"});
  EXPECT_NE(r.exit_code, 4) << r.err;
}

}  // namespace
