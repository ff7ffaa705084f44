// The `rote` command's subcommands. Each lives in its own cli/cmd_*.cc; main.cc dispatches.
// A subcommand receives the arguments after its name and returns the process exit code
// (see cli/exit_codes.h).
#pragma once

#include <string>
#include <vector>

namespace rote::cli {

using Args = std::vector<std::string>;

int CmdServe(const Args& args);       // cmd_serve.cc: the gRPC server
int CmdDemo(const Args& args);        // cmd_demo.cc: the README's main job
int CmdHealth(const Args& args);      // cmd_client.cc
int CmdApi(const Args& args);         // cmd_client.cc: the API over reflection
int CmdBlueprints(const Args& args);  // cmd_client.cc
int CmdRuns(const Args& args);        // cmd_client.cc
int CmdArtifacts(const Args& args);   // cmd_client.cc
int CmdArtifactsTry(const Args& args);  // cmd_try.cc: artifacts try, backtest, backtest-result
int CmdGenerate(const Args& args);    // cmd_generate.cc: local model (--model) or server
int CmdModel(const Args& args);       // cmd_model.cc: model info / synth
int CmdScript(const Args& args);      // cmd_script.cc: script run (sandbox)
int CmdRegex(const Args& args);       // cmd_regex.cc: regex find (sandbox)
int CmdBackup(const Args& args);      // cmd_backup.cc: online backup of the store
int CmdGenerations(const Args& args); // cmd_generations.cc: generation requests and their attempts
int CmdAttempts(const Args& args);    // cmd_generations.cc: one attempt's prompt, output and code

// The command table (commands.cc): each command, its one-line summary and the subcommands it
// takes (empty for commands without any). `rote --help` prints it; tests walk it.
struct CommandInfo {
  const char* name;
  int (*run)(const Args&);
  const char* summary;
  std::vector<std::string> subcommands;
};
const std::vector<CommandInfo>& CommandTable();
const CommandInfo* FindCommand(const std::string& name);  // nullptr when unknown

// Whether `args` ask for help (--help or -h before any `--`).
bool IsHelpRequest(const Args& args);

// Client flags given before the command (`rote --server H:P runs list`): copies the leading
// ones in `args` to `globals` and returns how many words they took. They mean what they mean
// after the command, where each command parses them.
size_t TakeGlobalFlags(const Args& args, Args* globals);

}  // namespace rote::cli
