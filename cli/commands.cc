#include "cli/commands.h"

#include "cli/client.h"

namespace rote::cli {

const std::vector<CommandInfo>& CommandTable() {
  static const std::vector<CommandInfo> commands = {
      {"api", CmdApi, "list a server's services and methods over reflection", {}},
      {"artifacts", CmdArtifacts, "list, show, review, promote, propose, diff, try and backtest code",
       {"list", "get", "revisions", "approve", "reject", "promote", "propose", "audit", "diff", "regenerate", "try",
        "backtest", "backtest-result"}},
      {"attempts", CmdAttempts, "read one generation attempt: prompt, raw output, code", {"get"}},
      {"backup", CmdBackup, "online backup of a server's store", {}},
      {"blueprints", CmdBlueprints, "register, show, list and lock blueprints", {"register", "get", "list", "lock"}},
      {"demo", CmdDemo, "the main job on the embedded defaults (README quick start)", {}},
      {"generate", CmdGenerate, "generate text with a local model directory", {}},
      {"generations", CmdGenerations, "list and read generation requests, passed and failed", {"list", "get"}},
      {"health", CmdHealth, "ask a server's health service", {}},
      {"model", CmdModel, "inspect or synthesize model directories", {"info", "synth"}},
      {"regex", CmdRegex, "find RE2 matches in a file or stdin", {"find"}},
      {"runs", CmdRuns, "submit, watch, show, list, replay and cancel runs; read their steps",
       {"submit", "get", "list", "watch", "replay", "cancel", "steps"}},
      {"script", CmdScript, "run a Lua function artifact in the sandbox", {"run"}},
      {"serve", CmdServe, "run the gRPC server", {}},
  };
  return commands;
}

const CommandInfo* FindCommand(const std::string& name) {
  for (const CommandInfo& c : CommandTable())
    if (name == c.name) return &c;
  return nullptr;
}

bool IsHelpRequest(const Args& args) {
  for (const std::string& a : args) {
    if (a == "--") return false;
    if (a == "--help" || a == "-h") return true;
  }
  return false;
}

size_t TakeGlobalFlags(const Args& args, Args* globals) {
  FlagSpec client;
  AddClientFlags(&client);
  size_t i = 0;
  while (i < args.size()) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) != 0 || a == "--" || a == "--help") break;
    std::string name = a.substr(2);
    const bool inline_value = name.find('=') != std::string::npos;
    if (inline_value) name = name.substr(0, name.find('='));
    if (client.boolean.count(name) && !inline_value) {
      globals->push_back(a);
      ++i;
    } else if (client.with_value.count(name) && (inline_value || i + 1 < args.size())) {
      globals->push_back(a);
      if (!inline_value) globals->push_back(args[i + 1]);
      i += inline_value ? 1 : 2;
    } else {
      break;
    }
  }
  return i;
}

}  // namespace rote::cli
