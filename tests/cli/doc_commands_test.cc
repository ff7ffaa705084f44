// Every command a reference document shows is run by this test against a real server, and
// what it prints must be what the document says it prints. A document is read as:
//
//   ```lua file=NAME     (any fence with file=NAME) its text is written to NAME in the working
//                         directory before the commands run;
//   ```console           lines starting with "$ " are commands; the lines after one, up to the
//                         next command or the fence, are its output (stdout, then stderr).
//
// A command is `rote ...`, optionally after VAR=VALUE assignments (ROTE_TOKEN=$BOB), split like
// a shell does with '...' and "..." quoting; $ALICE, $BOB and $CAROL stand for the tokens of the
// document's principals. Times in the output are compared as <time>, durations as "<n> ms".
// ROTE_UPDATE_GOLDEN=1 rewrites the document's outputs with what the commands printed.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "orchestrator/server.h"

extern char** environ;

namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Command {
  std::string line;                 // as written, after "$ "
  std::vector<std::string> expect;  // output lines
  size_t first_output_line = 0;     // index in the document's lines
  size_t end_output_line = 0;       // one past the last output line
};

// Shell-like words: whitespace separates, '...' is literal, "..." is literal but for $VAR.
std::vector<std::string> Words(const std::string& line, const std::map<std::string, std::string>& vars) {
  std::vector<std::string> out;
  std::string cur;
  bool in_word = false;
  auto expand = [&](size_t* i) {
    size_t j = *i + 1;
    while (j < line.size() && (std::isalnum(static_cast<unsigned char>(line[j])) || line[j] == '_')) ++j;
    const std::string name = line.substr(*i + 1, j - *i - 1);
    auto it = vars.find(name);
    cur += it != vars.end() ? it->second : "$" + name;
    *i = j - 1;
  };
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (c == ' ' || c == '\t') {
      if (in_word) out.push_back(cur), cur.clear(), in_word = false;
      continue;
    }
    in_word = true;
    if (c == '\'') {
      const size_t end = line.find('\'', i + 1);
      cur += line.substr(i + 1, end - i - 1);
      i = end;
    } else if (c == '"') {
      for (++i; i < line.size() && line[i] != '"'; ++i) {
        if (line[i] == '$') expand(&i); else cur += line[i];
      }
    } else if (c == '$') {
      expand(&i);
    } else {
      cur += c;
    }
  }
  if (in_word) out.push_back(cur);
  return out;
}

std::string Normalize(std::string text) {
  static const std::regex time(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z)");
  static const std::regex duration(R"(\b\d+ ms\b)");
  return std::regex_replace(std::regex_replace(text, time, "<time>"), duration, "<n> ms");
}

// Runs rote with the document's environment; returns stdout then stderr.
std::string RunCommand(const std::vector<std::string>& words, const std::string& cwd, const std::string& server) {
  std::vector<std::string> env_s;
  for (char** e = environ; *e; ++e) {
    if (std::string(*e).rfind("ROTE_", 0) != 0) env_s.push_back(*e);
  }
  env_s.push_back("ROTE_SERVER=" + server);
  size_t i = 0;
  for (; i < words.size() && words[i].find('=') != std::string::npos && words[i] != "rote"; ++i) {
    env_s.push_back(words[i]);
  }
  EXPECT_LT(i, words.size());
  EXPECT_EQ(words[i], "rote") << "documents show rote commands only";
  std::vector<std::string> argv_s = {ROTE_BINARY};
  argv_s.insert(argv_s.end(), words.begin() + static_cast<long>(i) + 1, words.end());
  const std::string out_path = cwd + "/.out", err_path = cwd + "/.err";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<char*> argv, envp;
  for (auto& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);
  for (auto& s : env_s) envp.push_back(s.data());
  envp.push_back(nullptr);
  const std::filesystem::path previous = std::filesystem::current_path();
  std::filesystem::current_path(cwd);
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, ROTE_BINARY, &actions, nullptr, argv.data(), envp.data());
  std::filesystem::current_path(previous);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) return "spawn failed";
  int status = 0;
  waitpid(pid, &status, 0);
  return Slurp(out_path) + Slurp(err_path);
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string line;
  while (std::getline(ss, line)) out.push_back(line);
  return out;
}

class DocCommandsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string base =
        (std::filesystem::temp_directory_path() / ("rote-doc-" + std::to_string(::getpid()))).string();
    std::filesystem::remove_all(base);
    work_ = base + "/work";
    std::filesystem::create_directories(work_);
    rote::orchestrator::ServerOptions opt;
    opt.listen = "127.0.0.1:0";
    opt.metrics_listen = "off";
    opt.data_dir = base + "/data";
    opt.keys_file = base + "/keys";
    opt.run_workers = 2;
    // A tiny model with random weights (2 layers): its answers are noise, short and the same on
    // every machine, which is what a document about reading them needs.
    opt.model_dir = std::string(ROTE_FIXTURES_DIR) + "/qwen2";
    opt.generation_attempts = 2;
    opt.generation_max_tokens = 16;
    std::filesystem::create_directories(opt.data_dir);
    std::ofstream(opt.keys_file) << "doc-alice-token-0123456789 alice submit\n"
                                    "doc-bob-token-0123456789   bob   submit,review\n"
                                    "doc-carol-token-0123456789 carol review\n";
    vars_ = {{"ALICE", "doc-alice-token-0123456789"},
             {"BOB", "doc-bob-token-0123456789"},
             {"CAROL", "doc-carol-token-0123456789"}};
    auto server = rote::orchestrator::Server::Start(opt);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    address_ = "127.0.0.1:" + std::to_string(server_->port());
    base_ = base;
  }
  void TearDown() override {
    server_.reset();
    std::filesystem::remove_all(base_);
  }

  // Runs the document's commands in order; compares (or, with ROTE_UPDATE_GOLDEN=1, rewrites).
  void RunDocument(const std::string& path) {
    const std::string text = Slurp(path);
    ASSERT_FALSE(text.empty()) << path;
    std::vector<std::string> lines = Lines(text);
    std::vector<Command> commands;
    static const std::regex file_fence(R"(^```\w*\s+file=(\S+)\s*$)");
    for (size_t i = 0; i < lines.size(); ++i) {
      std::smatch m;
      if (std::regex_match(lines[i], m, file_fence)) {
        std::string content;
        for (++i; i < lines.size() && lines[i] != "```"; ++i) content += lines[i] + "\n";
        // Files are written as the commands reach them: a later block may replace one.
        commands.push_back(Command{"#file " + m[1].str() + "\n" + content, {}, 0, 0});
        continue;
      }
      if (lines[i] != "```console") continue;
      for (++i; i < lines.size() && lines[i] != "```";) {
        if (lines[i].rfind("$ ", 0) != 0) {
          ADD_FAILURE() << path << ":" << i + 1 << ": output without a command: " << lines[i];
          ++i;
          continue;
        }
        Command c;
        c.line = lines[i].substr(2);
        c.first_output_line = ++i;
        while (i < lines.size() && lines[i] != "```" && lines[i].rfind("$ ", 0) != 0) c.expect.push_back(lines[i++]);
        c.end_output_line = i;
        commands.push_back(std::move(c));
      }
    }
    ASSERT_FALSE(commands.empty()) << path << " shows no commands";
    const bool update = std::getenv("ROTE_UPDATE_GOLDEN") && std::string(std::getenv("ROTE_UPDATE_GOLDEN")) == "1";
    std::vector<std::pair<Command, std::vector<std::string>>> results;
    for (const Command& c : commands) {
      if (c.line.rfind("#file ", 0) == 0) {
        const size_t nl = c.line.find('\n');
        std::ofstream(work_ + "/" + c.line.substr(6, nl - 6)) << c.line.substr(nl + 1);
        continue;
      }
      std::vector<std::string> actual = Lines(Normalize(RunCommand(Words(c.line, vars_), work_, address_)));
      if (!update) {
        EXPECT_EQ(actual, c.expect) << path << ":" << c.first_output_line << ": $ " << c.line;
      }
      results.push_back({c, std::move(actual)});
    }
    if (!update) return;
    // Rewrite from the end so earlier line numbers stay valid.
    for (auto it = results.rbegin(); it != results.rend(); ++it) {
      lines.erase(lines.begin() + static_cast<long>(it->first.first_output_line),
                  lines.begin() + static_cast<long>(it->first.end_output_line));
      lines.insert(lines.begin() + static_cast<long>(it->first.first_output_line), it->second.begin(), it->second.end());
    }
    std::ofstream out(path, std::ios::binary);
    for (const std::string& l : lines) out << l << "\n";
  }

  std::unique_ptr<rote::orchestrator::Server> server_;
  std::string address_, work_, base_;
  std::map<std::string, std::string> vars_;
};

TEST_F(DocCommandsTest, ReviewGuide) { RunDocument(std::string(ROTE_DOCS_DIR) + "/review.md"); }

}  // namespace
