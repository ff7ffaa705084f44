// `rote generate --model DIR ...`: runs a local model in-process and streams the tokens to the
// terminal (flags in inference/commands.h).
#include <iostream>

#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "inference/commands.h"

namespace rote::cli {

int InferenceToolExitCode(const rote::inference::Status& s, const char* command);  // cmd_model.cc

int CmdGenerate(const Args& args) {
  return InferenceToolExitCode(rote::inference::tool::GenerateCommand(args, std::cout, std::cerr), "generate");
}

}  // namespace rote::cli
