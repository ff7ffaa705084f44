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
int CmdGenerate(const Args& args);    // cmd_generate.cc: local model (--model) or server
int CmdModel(const Args& args);       // cmd_model.cc: model info / synth
int CmdScript(const Args& args);      // cmd_script.cc: script run (sandbox)
int CmdRegex(const Args& args);       // cmd_regex.cc: regex find (sandbox)
int CmdBackup(const Args& args);      // cmd_backup.cc: online backup of the store

}  // namespace rote::cli
