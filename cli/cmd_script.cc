// Placeholder until the module behind `rote script` lands; says so rather than pretending.
#include <iostream>

#include "cli/commands.h"
#include "cli/exit_codes.h"

namespace rote::cli {

int CmdScript(const Args&) {
  std::cerr << "rote script: not built yet: needs the sandbox (sandbox/)\n";
  return kExitInternal;
}

}  // namespace rote::cli
