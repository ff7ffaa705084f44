// Placeholder until the module behind `rote model` lands; says so rather than pretending.
#include <iostream>

#include "cli/commands.h"
#include "cli/exit_codes.h"

namespace rote::cli {

int CmdModel(const Args&) {
  std::cerr << "rote model: not built yet: needs the inference engine (inference/)\n";
  return kExitInternal;
}

}  // namespace rote::cli
