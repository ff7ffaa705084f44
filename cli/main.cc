// The `rote` command: the server (`rote serve`), a client for every API method, and local tools.
#include <iostream>
#include <map>
#include <string>

#include "cli/commands.h"
#include "cli/exit_codes.h"

namespace {

struct Command {
  int (*run)(const rote::cli::Args&);
  const char* summary;
};

const std::map<std::string, Command>& Commands() {
  using namespace rote::cli;
  static const std::map<std::string, Command> commands = {
      {"serve", {CmdServe, "run the gRPC server"}},
      {"demo", {CmdDemo, "the main job on the embedded defaults (README quick start)"}},
      {"health", {CmdHealth, "ask a server's health service"}},
      {"api", {CmdApi, "list a server's services and methods over reflection"}},
      {"blueprints", {CmdBlueprints, "register, show, list and lock blueprints"}},
      {"runs", {CmdRuns, "submit, watch, show, list, replay and cancel runs"}},
      {"artifacts", {CmdArtifacts, "list, show, review, diff and regenerate generated code"}},
      {"generate", {CmdGenerate, "generate text with a local model directory"}},
      {"model", {CmdModel, "inspect or synthesize model directories"}},
      {"script", {CmdScript, "run a Lua function artifact in the sandbox"}},
      {"regex", {CmdRegex, "find RE2 matches in a file or stdin"}},
      {"backup", {CmdBackup, "online backup of a server's store"}},
  };
  return commands;
}

void PrintHelp(std::ostream& out) {
  out << "rote: code, not answers. A model writes code once; rote runs it deterministically.\n\n"
         "Usage: rote <command> [args]   (rote <command> --help for each command's flags)\n\n"
         "Commands:\n";
  for (const auto& [name, cmd] : Commands()) {
    out << "  " << name << std::string(12 - name.size(), ' ') << cmd.summary << "\n";
  }
  out << "\nClient commands talk to --server HOST:PORT (default 127.0.0.1:7878, or $ROTE_SERVER)\n"
         "with --token (or $ROTE_TOKEN); --json prints JSON for scripts.\n"
         "Exit codes: 0 ok, 1 failed, 2 usage, 3 server unreachable, 4 auth, 5 not found,\n"
         "6 invalid or precondition, 7 data loss, 8 internal, 9 resource exhausted.\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    PrintHelp(std::cerr);
    return rote::cli::kExitUsage;
  }
  const std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    PrintHelp(std::cout);
    return rote::cli::kExitOk;
  }
  if (name == "--version" || name == "version") {
    std::cout << "rote " << ROTE_VERSION << "\n";
    return rote::cli::kExitOk;
  }
  auto it = Commands().find(name);
  if (it == Commands().end()) {
    std::cerr << "rote: unknown command `" << name << "`\n\n";
    PrintHelp(std::cerr);
    return rote::cli::kExitUsage;
  }
  rote::cli::Args args(argv + 2, argv + argc);
  return it->second.run(args);
}
