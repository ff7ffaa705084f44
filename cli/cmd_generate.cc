// Placeholder until the module behind `rote generate` lands; says so rather than pretending.
#include <iostream>

#include "cli/commands.h"
#include "cli/exit_codes.h"

namespace rote::cli {

int CmdGenerate(const Args&) {
  std::cerr << "rote generate: not built yet: needs the inference engine (inference/)\n";
  return kExitInternal;
}

}  // namespace rote::cli
