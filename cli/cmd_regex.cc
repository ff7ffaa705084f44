// Placeholder until the module behind `rote regex` lands; says so rather than pretending.
#include <iostream>

#include "cli/commands.h"
#include "cli/exit_codes.h"

namespace rote::cli {

int CmdRegex(const Args&) {
  std::cerr << "rote regex: not built yet: needs the sandbox (sandbox/)\n";
  return kExitInternal;
}

}  // namespace rote::cli
