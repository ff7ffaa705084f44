// The `rote` command: the server (`rote serve`), a client for every API method, and local tools.
#include <iostream>
#include <string>

#include "cli/client.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"

namespace {

void PrintHelp(std::ostream& out) {
  out << "rote: code, not answers. A model writes code once; rote runs it deterministically.\n\n"
         "Usage: rote [client flags] <command> [args]   (rote <command> --help for each command's flags)\n\n"
         "Commands:\n";
  for (const rote::cli::CommandInfo& cmd : rote::cli::CommandTable()) {
    const std::string name = cmd.name;
    out << "  " << name << std::string(name.size() < 12 ? 12 - name.size() : 1, ' ') << cmd.summary << "\n";
  }
  out << "\nClient commands talk to --server HOST:PORT (default 127.0.0.1:7878, or $ROTE_SERVER)\n"
         "with --token (or $ROTE_TOKEN); --json prints JSON for scripts. Client flags go before\n"
         "or after the command.\n"
         "Exit codes: 0 ok, 1 failed, 2 usage, 3 server unreachable, 4 auth, 5 not found,\n"
         "6 invalid or precondition, 7 data loss, 8 internal, 9 resource exhausted.\n";
}

}  // namespace

int main(int argc, char** argv) {
  const rote::cli::Args all(argv + 1, argv + argc);
  rote::cli::Args globals;
  const size_t at = rote::cli::TakeGlobalFlags(all, &globals);
  if (at >= all.size()) {
    PrintHelp(std::cerr);
    return rote::cli::kExitUsage;
  }
  const std::string name = all[at];
  if (name == "--help" || name == "-h" || name == "help") {
    PrintHelp(std::cout);
    return rote::cli::kExitOk;
  }
  if (name == "--version" || name == "version") {
    std::cout << "rote " << ROTE_VERSION << "\n";
    return rote::cli::kExitOk;
  }
  rote::cli::FlagSpec client_flags;
  rote::cli::AddClientFlags(&client_flags);
  if (name.rfind("--", 0) == 0 && client_flags.with_value.count(name.substr(2))) {
    std::cerr << "rote: " << name << " needs a value\n";
    return rote::cli::kExitUsage;
  }
  const rote::cli::CommandInfo* cmd = rote::cli::FindCommand(name);
  if (cmd == nullptr) {
    std::cerr << "rote: unknown command `" << name << "`\n\n";
    PrintHelp(std::cerr);
    return rote::cli::kExitUsage;
  }
  // Flags given before the command go first, so a `--` among the command's words still ends
  // flags only for what follows it.
  rote::cli::Args args = globals;
  args.insert(args.end(), all.begin() + static_cast<long>(at) + 1, all.end());
  return cmd->run(args);
}
