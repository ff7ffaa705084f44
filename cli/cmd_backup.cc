// Placeholder until the module behind `rote backup` lands; says so rather than pretending.
#include <iostream>

#include "cli/commands.h"
#include "cli/exit_codes.h"

namespace rote::cli {

int CmdBackup(const Args&) {
  std::cerr << "rote backup: not built yet: needs the store (store/)\n";
  return kExitInternal;
}

}  // namespace rote::cli
