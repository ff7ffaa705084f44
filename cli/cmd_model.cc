// `rote model info DIR` and `rote model synth ...`: the implementation lives in the inference
// module (inference/commands.h) so the standalone rote-infer shares it.
#include <iostream>

#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "inference/commands.h"

namespace rote::cli {

// Exit code for an inference tool's status (shared with cmd_generate.cc).
int InferenceToolExitCode(const rote::inference::Status& s, const char* command) {
  using rote::inference::StatusCode;
  if (s.ok()) return kExitOk;
  std::cerr << "rote " << command << ": " << s.message() << "\n";
  if (rote::inference::tool::IsUsageError(s)) return kExitUsage;
  switch (s.code()) {
    case StatusCode::kNotFound: return kExitNotFound;
    case StatusCode::kInvalidArgument:
    case StatusCode::kFailedPrecondition: return kExitInvalid;
    case StatusCode::kDataLoss: return kExitDataLoss;
    case StatusCode::kResourceExhausted:
    case StatusCode::kCancelled: return kExitFailure;
    default: return kExitInternal;
  }
}

int CmdModel(const Args& args) {
  return InferenceToolExitCode(rote::inference::tool::ModelCommand(args, std::cout, std::cerr), "model");
}

}  // namespace rote::cli
