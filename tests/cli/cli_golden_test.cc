// Runs the real `rote` binary and compares what it prints with golden files.
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>  // mkfifo
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <thread>

#include "absl/strings/ascii.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/table.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "orchestrator/server.h"
#include "store/digest.h"
#include "store/store.h"
#include "rote/v1/runs.pb.h"

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
  // A command that blocks (reading a FIFO, serving) is killed rather than hanging the suite.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
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

// Every command and subcommand in the CLI's own table answers --help with its usage on stdout
// and exit 0 (`rote generate --help` and `rote model --help` were usage errors).
TEST(CliHelpTest, EveryCommandAndSubcommandAnswersHelp) {
  ASSERT_FALSE(rote::cli::CommandTable().empty());
  for (const rote::cli::CommandInfo& cmd : rote::cli::CommandTable()) {
    const std::string usage = std::string("usage: rote ") + cmd.name;
    for (const char* flag : {"--help", "-h"}) {
      Result r = RunRote({cmd.name, flag});
      EXPECT_EQ(r.exit_code, 0) << cmd.name << " " << flag << ": " << r.err;
      EXPECT_THAT(absl::AsciiStrToLower(r.out), HasSubstr(usage)) << cmd.name << " " << flag;
    }
    for (const std::string& sub : cmd.subcommands) {
      Result r = RunRote({cmd.name, sub, "--help"});
      EXPECT_EQ(r.exit_code, 0) << cmd.name << " " << sub << ": " << r.err;
      EXPECT_THAT(absl::AsciiStrToLower(r.out), HasSubstr(usage)) << cmd.name << " " << sub;
      EXPECT_THAT(r.out, HasSubstr(sub)) << cmd.name << " " << sub;
    }
  }
}

// Every list documents the page flags in its --help.
TEST(CliHelpTest, ListsDocumentTheirPageFlags) {
  for (const char* cmd : {"blueprints", "runs", "artifacts", "generations"}) {
    Result r = RunRote({cmd, "list", "--help"});
    EXPECT_EQ(r.exit_code, 0) << cmd;
    for (const char* flag : {"--page-size N", "--page-token T", "--all", "oldest first"})
      EXPECT_THAT(r.out, HasSubstr(flag)) << cmd;
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
// anything starts, never an exception out of main (abort, exit 134).
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
      {{"serve", "--model", "/nonexistent", "--device", "tpu"}, "--device must be cpu, cuda, cuda:N, cuda:N,M,... or cuda:all"},
      {{"serve", "--model", "/nonexistent", "--device", "cuda:0,0"}, "--device must be cpu, cuda, cuda:N"},
      {{"serve", "--model", "/nonexistent", "--device", "cuda:"}, "got `cuda:`"},
      {{"serve", "--model", "/nonexistent", "--device", "cuda:-1"}, "got `cuda:-1`"},
      {{"serve", "--model", "/nonexistent", "--device", "cuda1"}, "got `cuda1`"},
      {{"serve", "--model", "/nonexistent", "--numerics", "approximate"}, "--numerics must be exact or fast"},
      {{"serve", "--model", "/nonexistent", "--numerics", "fast"}, "--numerics fast needs --device cuda"},
      {{"serve", "--model", "/nonexistent", "--device", "cpu", "--numerics", "fast"}, "--numerics fast needs --device cuda"},
      {{"serve", "--kv-cache-mb", "512"}, "need --model DIR"},
      {{"serve", "--max-batch", "8"}, "need --model DIR"},
      {{"serve", "--model", "/nonexistent", "--max-batch", "0"}, "--max-batch must be between 1 and"},
      {{"serve", "--model", "/nonexistent", "--max-batch", "257"}, "--max-batch must be between 1 and"},
      {{"serve", "--model", "/nonexistent", "--max-batch", "eight"}, "--max-batch"},
      {{"serve", "--numerics", "exact"}, "need --model DIR"},
      {{"serve", "--store", "mysql://db/rote"}, "--store takes a postgresql:// URL"},
      {{"serve", "--store", "rote-data"}, "--store takes a postgresql:// URL"},
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

// Client flags mean the same before the command as after it.
TEST_F(CliTest, ClientFlagsAreAcceptedBeforeTheCommand) {
  const std::string token = "cli-test-token-0123456789";
  Result before = RunRote({"--server", address_, "--token", token, "--json", "runs", "list"});
  Result after = RunRote({"runs", "list", "--server", address_, "--token", token, "--json"});
  EXPECT_EQ(before.exit_code, 0) << before.err;
  EXPECT_EQ(after.exit_code, 0) << after.err;
  EXPECT_EQ(before.out, after.out);
  EXPECT_TRUE(nlohmann::json::accept(before.out)) << before.out;

  Result mixed = RunRote({"--server=" + address_, "health", "--json"});
  EXPECT_EQ(mixed.exit_code, 0) << mixed.err;
  EXPECT_THAT(mixed.out, HasSubstr("SERVING"));
  Result no_token = RunRote({"--server", address_, "runs", "list"});
  EXPECT_EQ(no_token.exit_code, 4) << no_token.err;
  // Before the command they are still checked, and a word that is no client flag is no command.
  Result bad = RunRote({"--max-message-bytes", "1", "runs", "list"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("--max-message-bytes must be"));
  Result unknown = RunRote({"--frobnicate", "runs", "list"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_THAT(unknown.err, HasSubstr("unknown command `--frobnicate`"));
  Result missing = RunRote({"--server"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.err, HasSubstr("--server needs a value"));
  Result help = RunRote({"--server", address_, "runs", "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.out, HasSubstr("Usage: rote runs"));
}

TEST_F(CliTest, TokenFromFlagIsAccepted) {
  Result r = RunRote({"runs", "list", "--server", address_, "--token", "cli-test-token-0123456789"});
  EXPECT_NE(r.exit_code, 4) << r.err;
}

// An output above what travels inline (1 MiB) is read in chunks and printed whole, checked
// against its digest, by `runs submit --watch` and `runs get`; the list shows its size.
TEST_F(CliTest, LargeOutputIsPrintedWhole) {
  const std::string file = (std::filesystem::temp_directory_path() /
                            ("cli_big_" + std::to_string(::getpid()) + ".lua")).string();
  std::ofstream(file) << "local bp = rote.blueprint { name = \"cli_big\", version = \"1.0.0\" }\n"
                         "function bp.run(input) return string.rep(input.unit, input.count) end\n"
                         "return bp\n";
  const std::vector<std::string> auth = {"--server", address_, "--token", "cli-test-token-0123456789"};
  auto rote = [&](std::vector<std::string> args) {
    args.insert(args.end(), auth.begin(), auth.end());
    return RunRote(args);
  };
  Result reg = rote({"blueprints", "register", file});
  std::filesystem::remove(file);
  ASSERT_EQ(reg.exit_code, 0) << reg.err;
  const std::string output = "\"" + std::string(3'000'000, 'x') + "\"";

  Result watched = rote({"runs", "submit", "cli_big", "--input", R"({"count":3000000,"unit":"x"})", "--watch"});
  ASSERT_EQ(watched.exit_code, 0) << watched.err;
  EXPECT_THAT(watched.out, HasSubstr("state: succeeded\n\n" + output + "\n"));
  const size_t at = watched.out.find("run: runs/");
  ASSERT_NE(at, std::string::npos) << watched.out.substr(0, 200);
  const std::string run = watched.out.substr(at + 5, watched.out.find('\n', at) - at - 5);

  Result got = rote({"runs", "get", run});
  ASSERT_EQ(got.exit_code, 0) << got.err;
  EXPECT_THAT(got.out, HasSubstr("\n" + output + "\n"));

  Result listed = rote({"runs", "list"});
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_THAT(listed.out, HasSubstr("BYTES"));
  EXPECT_THAT(listed.out, HasSubstr(" 3000002 "));
  EXPECT_LT(listed.out.size(), 4096u);
}

// Files the CLI reads are regular files of bounded size: `blueprints register /dev/zero` read
// until the kernel killed the CLI, a FIFO blocked it forever.
TEST_F(CliTest, DevicesAndFifosAreRefusedAsFiles) {
  const std::string fifo = (std::filesystem::temp_directory_path() /
                            ("rote-cli-fifo-" + std::to_string(::getpid()))).string();
  std::filesystem::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string token = "cli-test-token-0123456789";
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"blueprints", "register", "/dev/zero", "--server", address_, "--token", token}, "/dev/zero is a character device"},
      {{"blueprints", "register", fifo, "--server", address_, "--token", token}, fifo + " is a FIFO"},
      {{"runs", "submit", "x", "--input-file", "/dev/zero", "--server", address_, "--token", token}, "is a character device"},
      {{"runs", "submit", "x", "--input-file", fifo, "--server", address_, "--token", token}, "is a FIFO"},
      {{"script", "run", "/dev/zero"}, "is a character device"},
      {{"script", "run", fifo}, "is a FIFO"},
      {{"regex", "find", "a", "/dev/zero"}, "is a character device"},
      {{"serve", "--keys", "/dev/zero", "--listen", "127.0.0.1:0", "--metrics-listen", "off", "--http-listen", "off"}, "is a character device"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args[0] + " " + c.args[1] + " " + c.args[2]);
    Result r = RunRote(c.args);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.says));
  }
  std::filesystem::remove(fifo);
}

TEST_F(CliTest, FilesLargerThanTheMessageLimitAreRefused) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("rote-cli-big-" + std::to_string(::getpid()) + ".lua")).string();
  std::ofstream(path) << std::string(5000, '-');
  Result r = RunRote({"blueprints", "register", path, "--server", address_, "--token", "cli-test-token-0123456789",
                      "--max-message-bytes", "4096"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("is 5000 bytes, more than the limit of 4096"));
  std::filesystem::remove(path);
}

// Text that is not UTF-8 is invalid input (exit 6), named with the offset of the bad byte, not
// protobuf's INTERNAL (exit 8) with an empty message and a libprotobuf error line.
TEST_F(CliTest, NonUtf8SourceAndInputNameTheFileAndOffset) {
  const std::string base = (std::filesystem::temp_directory_path() /
                            ("rote-cli-latin1-" + std::to_string(::getpid()))).string();
  std::ofstream(base + ".lua", std::ios::binary) << "-- caf\xe9\nreturn 1\n";
  std::ofstream(base + ".json", std::ios::binary) << "{\"name\": \"Jos\xe9\"}";
  const std::string token = "cli-test-token-0123456789";
  Result reg = RunRote({"blueprints", "register", base + ".lua", "--server", address_, "--token", token});
  EXPECT_EQ(reg.exit_code, 6) << reg.err;
  EXPECT_THAT(reg.err, HasSubstr(base + ".lua is not UTF-8 text: byte 0xE9 at offset 6"));
  EXPECT_THAT(reg.err, ::testing::Not(HasSubstr("libprotobuf")));
  Result run = RunRote({"runs", "submit", "any", "--input-file", base + ".json", "--server", address_, "--token", token});
  EXPECT_EQ(run.exit_code, 6) << run.err;
  EXPECT_THAT(run.err, HasSubstr(base + ".json is not UTF-8 text: byte 0xE9 at offset 13"));
  std::filesystem::remove(base + ".lua");
  std::filesystem::remove(base + ".json");
}

// Names, request ids, etags and comments given on the command line travel in proto string
// fields; non-UTF-8 bytes there are invalid (exit 6) and named, not protobuf's exit 8 with no
// message.
TEST_F(CliTest, NonUtf8ArgumentsAreInvalidAndNamed) {
  const std::string token = "cli-test-token-0123456789";
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"runs", "get", "runs/\xff" "1"},
        std::vector<std::string>{"runs", "submit", "bp\xc3", "--input", "{}"},
        std::vector<std::string>{"runs", "submit", "bp", "--input", "{}", "--request-id", "id-\x80"},
        std::vector<std::string>{"artifacts", "approve", "artifacts/x", "--etag", "\xfe", "--comment", "ok"}}) {
    std::vector<std::string> full = args;
    full.insert(full.end(), {"--server", address_, "--token", token});
    Result r = RunRote(full);
    EXPECT_EQ(r.exit_code, 6) << args[0] << " " << args[1] << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr("is not UTF-8 text"));
    EXPECT_THAT(r.err, ::testing::Not(HasSubstr("libprotobuf")));
  }
}

// `rote artifacts list` prints digests as sha256:<hex>; pasting one names the artifact (the
// server accepts only artifacts/<hex>, so the CLI spells it that way).
TEST_F(CliTest, DigestAsPrintedNamesTheResource) {
  const std::string token = "cli-test-token-0123456789";
  const std::string hex(64, 'a');
  Result prefixed = RunRote({"artifacts", "get", "sha256:" + hex, "--server", address_, "--token", token});
  Result bare = RunRote({"artifacts", "get", "artifacts/" + hex, "--server", address_, "--token", token});
  EXPECT_EQ(bare.exit_code, 5) << bare.err;
  EXPECT_EQ(prefixed.exit_code, bare.exit_code) << prefixed.err;
}

// Registers a blueprint from `source` through the CLI; false (with a test failure) when refused.
bool RegisterBlueprint(const std::string& address, const std::string& token, const std::string& stem,
                       const std::string& source) {
  const std::string file = (std::filesystem::temp_directory_path() /
                            (stem + "_" + std::to_string(::getpid()) + ".lua")).string();
  std::ofstream(file) << source;
  Result reg = RunRote({"blueprints", "register", file, "--server", address, "--token", token});
  std::filesystem::remove(file);
  EXPECT_EQ(reg.exit_code, 0) << reg.err;
  return reg.exit_code == 0;
}

// Every list pages: --page-size, --page-token (the table's last line names the next one, --json
// has next_page_token) and --all; rows come oldest first.
TEST_F(CliTest, ListsPageOldestFirst) {
  const std::string token = "cli-test-token-0123456789";
  const std::string name = "cli_pages_" + std::to_string(::getpid());
  for (const char* version : {"1.0.0", "1.0.1", "1.0.2"}) {
    ASSERT_TRUE(RegisterBlueprint(address_, token, name + "_" + version,
                                  "local bp = rote.blueprint { name = \"" + name + "\", version = \"" + version +
                                      "\" }\nfunction bp.run(input) return input end\nreturn bp\n"));
  }
  auto rote = [&](std::vector<std::string> args) {
    for (const std::string& a : {std::string("--server"), address_, std::string("--token"), token}) args.push_back(a);
    return RunRote(args);
  };
  auto versions = [](const std::string& json) {
    std::vector<std::string> out;
    for (const auto& b : nlohmann::json::parse(json).value("blueprints", nlohmann::json::array()))
      out.push_back(b.at("version").get<std::string>());
    return out;
  };
  using V = std::vector<std::string>;

  Result first = rote({"blueprints", "list", "--name", name, "--page-size", "2", "--json"});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_EQ(versions(first.out), (V{"1.0.0", "1.0.1"}));
  const std::string next = nlohmann::json::parse(first.out).value("next_page_token", "");
  ASSERT_FALSE(next.empty()) << first.out;

  Result table = rote({"blueprints", "list", "--name", name, "--page-size", "2"});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_THAT(table.out, ::testing::EndsWith("\nnext page: --page-token " + next + "\n"));

  Result second = rote({"blueprints", "list", "--name", name, "--page-size", "2", "--page-token", next, "--json"});
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_EQ(versions(second.out), (V{"1.0.2"}));
  EXPECT_FALSE(nlohmann::json::parse(second.out).contains("next_page_token")) << second.out;
  Result last_table = rote({"blueprints", "list", "--name", name, "--page-size", "2", "--page-token", next});
  ASSERT_EQ(last_table.exit_code, 0) << last_table.err;
  EXPECT_THAT(last_table.out, ::testing::Not(HasSubstr("next page")));
  EXPECT_THAT(last_table.out, HasSubstr("1.0.2"));

  Result all = rote({"blueprints", "list", "--name", name, "--page-size", "1", "--all", "--json"});
  ASSERT_EQ(all.exit_code, 0) << all.err;
  EXPECT_EQ(versions(all.out), (V{"1.0.0", "1.0.1", "1.0.2"}));
  EXPECT_FALSE(nlohmann::json::parse(all.out).contains("next_page_token")) << all.out;

  // Runs page the same way.
  for (const char* input : {"1", "2", "3"}) {
    Result run = rote({"runs", "submit", name, "--input", input});
    ASSERT_EQ(run.exit_code, 0) << run.err;
  }
  Result runs = rote({"runs", "list", "--page-size", "2", "--all", "--json"});
  ASSERT_EQ(runs.exit_code, 0) << runs.err;
  EXPECT_GE(nlohmann::json::parse(runs.out).at("runs").size(), 3u);
  Result runs_page = rote({"runs", "list", "--page-size", "1"});
  ASSERT_EQ(runs_page.exit_code, 0) << runs_page.err;
  EXPECT_THAT(runs_page.out, HasSubstr("next page: --page-token "));
  // An altered token is the server's INVALID_ARGUMENT.
  Result bad = rote({"runs", "list", "--page-token", "not-a-token"});
  EXPECT_EQ(bad.exit_code, 6) << bad.err;
  for (const std::vector<std::string>& list :
       {std::vector<std::string>{"artifacts", "list", "--all"}, {"artifacts", "revisions", name + "/p", "--all", "--page-size", "5"}}) {
    Result r = rote(list);
    EXPECT_EQ(r.exit_code, 0) << list[1] << ": " << r.err;
  }
}

// `--watch` prints each event as it arrives when stdout is a pipe: the first line comes while
// the run is still running, not with the rest when the command exits.
TEST_F(CliTest, WatchPrintsEachEventAsItArrivesIntoAPipe) {
  const std::string token = "cli-test-token-0123456789";
  const std::string name = "cli_slow_" + std::to_string(::getpid());
  ASSERT_TRUE(RegisterBlueprint(address_, token, name,
                                "local bp = rote.blueprint { name = \"" + name + "\", version = \"1.0.0\" }\n"
                                "function bp.run(input)\n"
                                "  local x = 0\n"
                                "  for i = 1, input.n do x = (x + i) % 7 end\n"
                                "  return x\n"
                                "end\nreturn bp\n"));
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  posix_spawn_file_actions_addclose(&actions, fds[1]);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  std::vector<std::string> argv_s = {ROTE_BINARY, "runs", "submit", name, "--input", R"({"n":100000000})",
                                     "--watch", "--server", address_, "--token", token};
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid;
  ASSERT_EQ(posix_spawn(&pid, ROTE_BINARY, &actions, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  std::string out;
  char buf[4096];
  std::optional<std::chrono::steady_clock::time_point> first_line;
  for (;;) {
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (!first_line && out.find('\n') != std::string::npos) first_line = std::chrono::steady_clock::now();
  }
  const auto eof = std::chrono::steady_clock::now();
  ::close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << out;
  EXPECT_THAT(out, HasSubstr("state: succeeded"));
  ASSERT_TRUE(first_line.has_value()) << out;
  // The loop takes about a second on a 2-core machine; printed at exit, the lines would come
  // within a few milliseconds of each other.
  EXPECT_GT(eof - *first_line, std::chrono::milliseconds(100)) << out;
}

// A bad TLS file (`--tls-ca /nonexistent`) is a usage error, not a warning followed by an
// "unreachable" failure (exit 3).
TEST(CliTlsTest, BadTlsFilesAreUsageErrors) {
  const std::string dir = (std::filesystem::temp_directory_path() / ("rote-cli-tls-" + std::to_string(::getpid()))).string();
  std::filesystem::create_directories(dir);
  for (const char* name : {"a", "b"}) {
    const std::string cmd = std::string("openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost -keyout ") +
                            dir + "/" + name + "-key.pem -out " + dir + "/" + name + "-cert.pem >/dev/null 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }
  std::ofstream(dir + "/junk.pem") << "not a certificate\n";
  Result missing_ca = RunRote({"health", "--server", "127.0.0.1:1", "--tls-ca", dir + "/nonexistent.pem"});
  EXPECT_EQ(missing_ca.exit_code, 2) << missing_ca.err;
  EXPECT_THAT(missing_ca.err, HasSubstr("CA bundle (--tls-ca) " + dir + "/nonexistent.pem does not exist"));
  Result junk_ca = RunRote({"health", "--server", "127.0.0.1:1", "--tls-ca", dir + "/junk.pem"});
  EXPECT_EQ(junk_ca.exit_code, 2) << junk_ca.err;
  EXPECT_THAT(junk_ca.err, HasSubstr("--tls-ca " + dir + "/junk.pem holds no PEM certificate"));
  const std::vector<std::string> serve = {"serve", "--listen", "127.0.0.1:0", "--metrics-listen", "off",
                                          "--http-listen", "off", "--data", dir + "/data"};
  auto serve_with = [&](const std::string& cert, const std::string& key) {
    std::vector<std::string> args = serve;
    args.insert(args.end(), {"--tls-cert", cert, "--tls-key", key});
    return RunRote(args);
  };
  Result mismatch = serve_with(dir + "/a-cert.pem", dir + "/b-key.pem");
  EXPECT_EQ(mismatch.exit_code, 2) << mismatch.err;
  EXPECT_THAT(mismatch.err, HasSubstr("does not match the certificate in " + dir + "/a-cert.pem"));
  EXPECT_THAT(mismatch.err, ::testing::Not(HasSubstr("in use or invalid")));
  EXPECT_EQ(mismatch.out, "");
  Result junk_cert = serve_with(dir + "/junk.pem", dir + "/a-key.pem");
  EXPECT_EQ(junk_cert.exit_code, 2) << junk_cert.err;
  EXPECT_THAT(junk_cert.err, HasSubstr("--tls-cert " + dir + "/junk.pem holds no PEM certificate"));
  Result missing_key = serve_with(dir + "/a-cert.pem", dir + "/nonexistent-key.pem");
  EXPECT_EQ(missing_key.exit_code, 2) << missing_key.err;
  EXPECT_THAT(missing_key.err, HasSubstr("nonexistent-key.pem does not exist"));
  std::filesystem::remove_all(dir);
}

// A time the server has not set (a run not ended yet) is left out, not printed as
// 1970-01-01T00:00:00Z.
TEST(CliJsonTest, UnsetTimestampsAreLeftOut) {
  rote::v1::Run run;
  run.set_name("runs/1");
  run.mutable_create_time()->set_seconds(1700000000);
  run.mutable_end_time();  // present, but zero
  std::ostringstream out;
  rote::cli::Client::PrintJson(run, out);
  EXPECT_THAT(out.str(), HasSubstr("\"create_time\": \"2023-11-14T22:13:20Z\""));
  EXPECT_THAT(out.str(), ::testing::Not(HasSubstr("end_time")));
  EXPECT_THAT(out.str(), ::testing::Not(HasSubstr("1970")));
}

// Times for people are one width whatever their milliseconds, so a table's columns never move
// when a time falls on a whole second; an unset time prints as "-".
TEST(CliTimeTest, TimesPrintAtOneWidth) {
  EXPECT_EQ(rote::cli::UtcMillisText(1700000000, 0), "2023-11-14T22:13:20.000Z");
  EXPECT_EQ(rote::cli::UtcMillisText(1700000000, 5000000), "2023-11-14T22:13:20.005Z");
  EXPECT_EQ(rote::cli::UtcMillisText(1700000000, 999999999), "2023-11-14T22:13:20.999Z");
  EXPECT_EQ(rote::cli::UtcMillisText(0, 0), "-");
  rote::cli::Table t({"TIME", "WHO"});
  t.Add({rote::cli::UtcMillisText(1700000000, 0), "a"});
  t.Add({rote::cli::UtcMillisText(1700000001, 123000000), "b"});
  std::ostringstream out;
  t.Print(out);
  EXPECT_EQ(out.str(),
            "TIME                      WHO\n"
            "2023-11-14T22:13:20.000Z  a\n"
            "2023-11-14T22:13:21.123Z  b\n");
}

TEST(CliExitCodeTest, ResourceExhaustedHasItsOwnCode) {
  EXPECT_EQ(rote::cli::ExitCodeFor(grpc::StatusCode::RESOURCE_EXHAUSTED), rote::cli::kExitResourceExhausted);
  EXPECT_EQ(rote::cli::kExitResourceExhausted, 9);
  EXPECT_EQ(rote::cli::ExitCodeFor(grpc::StatusCode::INTERNAL), rote::cli::kExitInternal);
}

TEST(CliUtf8Test, FirstInvalidUtf8FindsTheFirstBadByte) {
  using rote::cli::FirstInvalidUtf8;
  EXPECT_EQ(FirstInvalidUtf8("plain ascii"), std::nullopt);
  EXPECT_EQ(FirstInvalidUtf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"), std::nullopt);
  EXPECT_EQ(FirstInvalidUtf8("caf\xe9"), 3u);                       // Latin-1
  EXPECT_EQ(FirstInvalidUtf8("ab\xc0\xaf"), 2u);                    // overlong '/'
  EXPECT_EQ(FirstInvalidUtf8("\xed\xa0\x80"), 0u);                 // a surrogate
  EXPECT_EQ(FirstInvalidUtf8("\xf4\x90\x80\x80"), 0u);            // past U+10FFFF
  EXPECT_EQ(FirstInvalidUtf8("ok\xe2\x82"), 2u);                    // cut short
  EXPECT_EQ(FirstInvalidUtf8(std::string("a\0b", 3)), std::nullopt);  // NUL is valid UTF-8
}

// --- model directories (docs/inference.md, "What a model directory must satisfy") ---

// A copy of a checked-in fixture model directory, with `edit` applied to the JSON file `file`.
std::string DamagedModel(const std::string& name, const std::string& file,
                         const std::function<void(nlohmann::json&)>& edit) {
  const std::string src = std::string(ROTE_GOLDEN_DIR) + "/../../fixtures/qwen2";
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("rote-cli-model-" + std::to_string(::getpid()) + "-" + name)).string();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  for (const char* f : {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                        "model.safetensors"}) {
    std::filesystem::copy_file(src + "/" + f, dir + "/" + f);
  }
  if (!file.empty()) {
    nlohmann::json j = nlohmann::json::parse(Slurp(dir + "/" + file));
    edit(j);
    std::ofstream(dir + "/" + file, std::ios::trunc) << j.dump();
  }
  return dir;
}

// `rote model info` on damaged directories: an exit code and a message naming the file and field,
// never a crash (SIGSEGV, 139), an abort (134), a hang, or success without a tokenizer.
TEST(CliModelTest, ModelInfoOnDamagedDirectoriesExitsWithTheError) {
  const std::string ok = DamagedModel("ok", "", nullptr);
  Result r = RunRote({"model", "info", ok});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("tokenizer:        841 tokens"));

  const std::string negative_id =
      DamagedModel("negative_id", "tokenizer.json", [](nlohmann::json& j) { j["added_tokens"][0]["id"] = -1; });
  r = RunRote({"model", "info", negative_id});
  EXPECT_EQ(r.exit_code, rote::cli::kExitInvalid) << r.err;
  EXPECT_THAT(r.err, HasSubstr(negative_id + "/tokenizer.json: field 'added_tokens[0].id' = -1"));

  const std::string layers =
      DamagedModel("layers", "config.json", [](nlohmann::json& j) { j["num_hidden_layers"] = 1000000000; });
  r = RunRote({"model", "info", layers});
  EXPECT_EQ(r.exit_code, rote::cli::kExitInvalid) << r.err;
  EXPECT_THAT(r.err, HasSubstr(layers + "/config.json: field 'num_hidden_layers' = 1000000000 is out of range"));

  const std::string fifo = DamagedModel("fifo", "", nullptr);
  std::filesystem::remove(fifo + "/model.safetensors");
  ASSERT_EQ(mkfifo((fifo + "/model.safetensors").c_str(), 0600), 0);
  r = RunRote({"model", "info", fifo});
  EXPECT_EQ(r.exit_code, rote::cli::kExitInvalid) << r.err;
  EXPECT_THAT(r.err, HasSubstr(fifo + "/model.safetensors: is a FIFO, not a regular file"));

  for (const std::string& dir : {ok, negative_id, layers, fifo}) std::filesystem::remove_all(dir);
}

// A model without a usable tokenizer is an error, not "tokenizer: not loadable" and exit 0.
TEST(CliModelTest, ModelInfoExitsNonZeroWhenTheTokenizerCannotLoad) {
  const std::string dir = DamagedModel("no_tokenizer", "", nullptr);
  std::filesystem::remove(dir + "/tokenizer.json");
  Result r = RunRote({"model", "info", dir});
  EXPECT_EQ(r.exit_code, rote::cli::kExitNotFound) << r.err;
  EXPECT_THAT(r.err, HasSubstr(dir + "/tokenizer.json: no such file"));
  EXPECT_EQ(r.out, "");
  std::filesystem::remove_all(dir);
}

TEST(CliModelTest, ServeWithADamagedModelExitsWithTheError) {
  const std::string dir =
      DamagedModel("serve_bad", "tokenizer.json", [](nlohmann::json& j) { j["added_tokens"][2]["id"] = 1 << 30; });
  const std::string data = dir + "-data";
  Result r = RunRote({"serve", "--model", dir, "--data", data, "--listen", "127.0.0.1:0", "--metrics-listen", "off",
                      "--http-listen", "off"});
  EXPECT_EQ(r.exit_code, rote::cli::kExitFailure) << r.err;
  EXPECT_THAT(r.err, HasSubstr(dir + "/tokenizer.json: field 'added_tokens[2].id' = 1073741824"));
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(data);
}

// A model whose weights take seconds to read and hash: a sparse file of about 1 GiB (the
// embedding of a 131072-token, 4096-wide vocabulary), zeros that take no disk space.
std::string SlowLoadingModel(const std::string& name) {
  const std::string dir = DamagedModel(name, "config.json", [](nlohmann::json& j) {
    j["hidden_size"] = 4096;
    j["num_attention_heads"] = 32;
    j["num_key_value_heads"] = 1;
    j["intermediate_size"] = 1;
    j["num_hidden_layers"] = 1;
    j["vocab_size"] = 131072;
    j["tie_word_embeddings"] = true;
  });
  const int64_t h = 4096, kv = 128;
  const std::vector<std::pair<std::string, std::vector<int64_t>>> tensors = {
      {"model.embed_tokens.weight", {131072, h}},
      {"model.norm.weight", {h}},
      {"model.layers.0.input_layernorm.weight", {h}},
      {"model.layers.0.self_attn.q_proj.weight", {h, h}},
      {"model.layers.0.self_attn.q_proj.bias", {h}},
      {"model.layers.0.self_attn.k_proj.weight", {kv, h}},
      {"model.layers.0.self_attn.k_proj.bias", {kv}},
      {"model.layers.0.self_attn.v_proj.weight", {kv, h}},
      {"model.layers.0.self_attn.v_proj.bias", {kv}},
      {"model.layers.0.self_attn.o_proj.weight", {h, h}},
      {"model.layers.0.post_attention_layernorm.weight", {h}},
      {"model.layers.0.mlp.gate_proj.weight", {1, h}},
      {"model.layers.0.mlp.up_proj.weight", {1, h}},
      {"model.layers.0.mlp.down_proj.weight", {h, 1}},
  };
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const auto& [tensor, shape] : tensors) {
    uint64_t bytes = 2;
    for (int64_t d : shape) bytes *= static_cast<uint64_t>(d);
    header[tensor] = {{"dtype", "BF16"}, {"shape", shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  while (text.size() % 8 != 0) text.push_back(' ');
  std::string image(8, '\0');
  for (int i = 0; i < 8; ++i) image[i] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  const std::string path = dir + "/model.safetensors";
  std::ofstream(path, std::ios::binary | std::ios::trunc) << image << text;
  std::filesystem::resize_file(path, 8 + text.size() + offset);
  return dir;
}

// SIGTERM while `rote serve --model` loads ends the process at once, saying why, rather than
// after the whole load.
TEST(CliModelTest, ServeExitsPromptlyOnSigtermWhileLoadingTheModel) {
  const std::string dir = SlowLoadingModel("serve_sigterm");
  const std::string data = dir + "-data";
  const std::string out = dir + ".out", err = dir + ".err";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<std::string> args = {ROTE_BINARY, "serve",           "--model",          dir, "--data", data,
                                   "--listen",  "127.0.0.1:0",     "--metrics-listen", "off", "--http-listen", "off"};
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, ROTE_BINARY, &actions, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&actions);
  // The server logs before it loads the model; the signal goes as soon as that line is out.
  int status = 0;
  bool exited = false;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (Slurp(out).find("loading model from") == std::string::npos && std::chrono::steady_clock::now() < give_up) {
    if (waitpid(pid, &status, WNOHANG) == pid) {
      exited = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_FALSE(exited) << "rote serve ended before loading: " << Slurp(err);
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  const auto sent = std::chrono::steady_clock::now();
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() - sent > std::chrono::seconds(30)) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      ADD_FAILURE() << "rote serve did not end within 30 s of SIGTERM";
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const auto took = std::chrono::steady_clock::now() - sent;
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM) << Slurp(err);
  EXPECT_THAT(Slurp(err), HasSubstr("rote serve: received SIGTERM while starting (loading the model)"));
  EXPECT_THAT(Slurp(out), ::testing::Not(HasSubstr("listening on port")));
  EXPECT_LT(took, std::chrono::seconds(2));
  for (const std::string& p : {dir, data, out, err}) std::filesystem::remove_all(p);
}

// `rote generations list|get`, `rote attempts get` and `rote runs steps` on a store that holds a
// failed generation and a run with two steps (one value too large to show inline), written
// before the server starts, as an earlier server would have left them.
TEST(CliProvenanceTest, GenerationsAttemptsAndStepsAreReadable) {
  namespace st = rote::store;
  const std::string data =
      (std::filesystem::temp_directory_path() / ("rote-cli-prov-" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(data);
  const std::string prompt = "<|user|>\nName: parse_amount\nWrite the function.\n<|assistant|>\n";
  const std::string big(5000, 'x');
  std::string request, run_name;
  {
    st::StoreOptions o;
    o.path = data;
    auto store = st::Store::Open(o);
    ASSERT_TRUE(store.ok()) << store.status();
    st::GenerationRecord g;
    g.request_digest = request = st::Sha256Digest("request");
    g.generation_point = "seeded/parse_amount";
    g.spec_digest = st::Sha256Digest("spec");
    g.model_digest = st::Sha256Digest("model");
    g.numerics_profile = "exact";
    g.prompt_template_version = "lua-v1";
    g.decoding_json = "{\"max_attempts\":1}";
    g.device = "cpu";
    st::GenerationAttempt a;
    a.index = 1;
    a.prompt_digest = (*store)->PutBlob(prompt)->digest;
    a.output_digest = (*store)->PutBlob("I cannot help with that.")->digest;
    a.failure = "no code block in the output";
    a.prompt_tokens = 17;
    a.output_tokens = 6;
    a.start_ms = 1700000000000;
    a.duration_ms = 42;
    g.attempts = {a};
    g.failure = a.failure;
    ASSERT_TRUE((*store)->PutGeneration(g).ok());

    st::BlueprintRecord bp;
    bp.name = "seeded";
    bp.version = "1.0.0";
    bp.source = "local bp = rote.blueprint { name = 'seeded', version = '1.0.0' }\nreturn bp\n";
    bp.digest = st::Sha256Digest(bp.source);
    ASSERT_TRUE((*store)->PutBlueprint(bp).ok());
    st::ArtifactRecord art;
    art.kind = "lua_function";
    art.generation_point = "seeded/p";
    art.source = "return function(x) return x end";
    art.options_json = "{}";
    art.validation_report_json = "{}";
    art.digest = st::Sha256Digest("seeded artifact");
    ASSERT_TRUE((*store)->PutArtifact(art).ok());
    st::NewRun run;
    run.blueprint_digest = bp.digest;
    run.input_digest = (*store)->PutBlob("\"in\"")->digest;
    run.engine_profile_json = "{}";
    run.submitter = "carol";
    auto created = (*store)->CreateRun(run);
    ASSERT_TRUE(created.ok()) << created.status();
    const int64_t id = created->run.id;
    run_name = "runs/" + std::to_string(id);
    ASSERT_TRUE((*store)->StartRun(id).ok());
    const std::string small_out = (*store)->PutBlob("\"small\"")->digest;
    const std::string big_in = (*store)->PutBlob("\"" + big + "\"")->digest;
    ASSERT_TRUE((*store)->AppendSteps(id, {{0, "p", art.digest, run.input_digest, small_out},
                                           {1, "p", art.digest, big_in, small_out}}).ok());
    st::RunOutcome done;
    done.output_digest = small_out;
    ASSERT_TRUE((*store)->FinishRun(id, done).ok());
  }
  rote::orchestrator::ServerOptions opt;
  opt.listen = "127.0.0.1:0";
  opt.metrics_listen = "off";
  opt.data_dir = data;
  opt.keys_file = data + ".keys";
  std::ofstream(opt.keys_file) << "cli-test-token-0123456789 carol submit\n";
  auto server = rote::orchestrator::Server::Start(opt);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = "127.0.0.1:" + std::to_string((*server)->port());
  auto rote = [&](std::vector<std::string> args) {
    for (const std::string& a : {std::string("--server"), address, std::string("--token"),
                                 std::string("cli-test-token-0123456789")})
      args.push_back(a);
    return RunRote(args);
  };
  const std::string hex = request.substr(7);

  Result list = rote({"generations", "list", "--failed"});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  EXPECT_THAT(list.out, HasSubstr("generations/" + hex));
  EXPECT_THAT(list.out, HasSubstr("seeded/parse_amount"));
  Result list_json = rote({"generations", "list", "--point", "seeded/parse_amount", "--json"});
  ASSERT_EQ(list_json.exit_code, 0) << list_json.err;
  EXPECT_EQ(nlohmann::json::parse(list_json.out).at("generations").size(), 1u);

  // Named as the error names it, or by the bare digest: the prompt and output are printed.
  for (const std::string& name : {"generations/" + hex, hex, request}) {
    Result get = rote({"generations", "get", name});
    ASSERT_EQ(get.exit_code, 0) << name << ": " << get.err;
    EXPECT_THAT(get.out, HasSubstr("attempt 1: failed, 17 prompt tokens, 6 output tokens, 42 ms"));
    EXPECT_THAT(get.out, HasSubstr("  | Name: parse_amount\n"));
    EXPECT_THAT(get.out, HasSubstr("  | I cannot help with that.\n"));
    EXPECT_THAT(get.out, HasSubstr("failure: no code block in the output"));
  }
  Result get_json = rote({"generations", "get", hex, "--json"});
  ASSERT_EQ(get_json.exit_code, 0) << get_json.err;
  EXPECT_EQ(nlohmann::json::parse(get_json.out).at("attempts").at(0).at("prompt_tokens"), 17);

  Result attempt = rote({"attempts", "get", "generations/" + hex + "/attempts/1", "--json"});
  ASSERT_EQ(attempt.exit_code, 0) << attempt.err;
  EXPECT_EQ(nlohmann::json::parse(attempt.out).at("prompt"), prompt);
  Result attempt_text = rote({"attempts", "get", "generations/" + hex + "/attempts/1"});
  ASSERT_EQ(attempt_text.exit_code, 0) << attempt_text.err;
  EXPECT_THAT(attempt_text.out, HasSubstr("  | Write the function.\n"));
  EXPECT_EQ(rote({"attempts", "get", "generations/" + hex + "/attempts/2"}).exit_code, 5);
  EXPECT_EQ(rote({"attempts", "get", "generations/" + hex + "/attempts/0"}).exit_code, 6);
  EXPECT_EQ(rote({"generations", "get", "nothex"}).exit_code, 6);
  EXPECT_EQ(rote({"generations", "get", std::string(64, 'a')}).exit_code, 5);

  Result steps = rote({"runs", "steps", run_name});
  ASSERT_EQ(steps.exit_code, 0) << steps.err;
  EXPECT_THAT(steps.out, HasSubstr("step 0  p  "));
  EXPECT_THAT(steps.out, HasSubstr("  in:  \"in\"\n  out: \"small\"\n"));
  EXPECT_THAT(steps.out, HasSubstr("  in:  (5002 bytes, left out: sha256:"));
  Result steps_json = rote({"runs", "steps", run_name, "--max-value-bytes", "8000", "--page-size", "1", "--all", "--json"});
  ASSERT_EQ(steps_json.exit_code, 0) << steps_json.err;
  auto parsed = nlohmann::json::parse(steps_json.out);
  ASSERT_EQ(parsed.at("steps").size(), 2u);
  EXPECT_EQ(parsed.at("steps").at(1).at("input_json"), "\"" + big + "\"");
  EXPECT_EQ(rote({"runs", "steps", "runs/x"}).exit_code, 6);

  (*server)->Shutdown();
  server->reset();
  std::filesystem::remove_all(data);
  std::filesystem::remove(opt.keys_file);
}

}  // namespace
