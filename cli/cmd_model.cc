// `rote model info DIR`, `rote model synth ...` and `rote model tokenize | detokenize | chat DIR`:
// the implementation lives in the inference module (inference/commands.h,
// inference/tokenizer/tokenizer_tool.h) so the standalone rote-infer shares it; the CLI reaches
// it through orchestrator/offline.h.
#include <iostream>
#include <sstream>

#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "orchestrator/offline.h"

namespace rote::cli {

// Exit code for an inference tool's status (shared with cmd_generate.cc).
int InferenceToolExitCode(const orchestrator::offline::ToolStatus& s, const char* command) {
  if (s.status.ok()) return kExitOk;
  std::cerr << "rote " << command << ": " << s.status.message() << "\n";
  if (s.usage_error) return kExitUsage;
  switch (s.status.code()) {
    case absl::StatusCode::kNotFound: return kExitNotFound;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition: return kExitInvalid;
    case absl::StatusCode::kDataLoss: return kExitDataLoss;
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kCancelled: return kExitFailure;
    default: return kExitInternal;
  }
}

// The inference tool's own usage line: the first line of the usage error it gives for `args`.
std::string InferenceToolUsage(
    orchestrator::offline::ToolStatus (*tool)(const std::vector<std::string>&, std::ostream&, std::ostream&),
    const std::vector<std::string>& args) {
  std::ostringstream out;
  std::ostringstream err;
  const orchestrator::offline::ToolStatus s = tool(args, out, err);
  const std::string message(s.status.message());
  return message.substr(0, message.find('\n')) + "\n";
}

int CmdModel(const Args& args) {
  if (IsHelpRequest(args)) {
    std::cout << "Usage: rote model info DIR | rote model synth ... | rote model tokenize|detokenize|chat DIR ...\n"
                 "Inspects a model directory (config, tokenizer, tensors) or writes a synthetic one;\n"
                 "shows how its tokenizer encodes a text (ids and pieces), decodes ids, and renders a chat.\n"
              << InferenceToolUsage(orchestrator::offline::ModelTool, {})
              << "usage: model tokenize DIR [--text TEXT | --file PATH] [--add-special-tokens] [--special-as-text] [--json]\n"
                 "       model detokenize DIR [--ids 1,2,3 | ID...] [--skip-special] [--json]\n"
                 "       model chat DIR [--system TEXT] [--user TEXT] [--assistant TEXT] [--tool TEXT]... [--messages FILE]\n"
                 "                  [--no-generation-prompt] [--json]\n"
                 "Without --text/--file or ids the input is standard input. Exit codes: 0 ok, 2 usage,\n"
                 "5 not found (no tokenizer.json), 6 invalid (bad ids, bad tokenizer files, bad message file).\n";
    return kExitOk;
  }
  return InferenceToolExitCode(orchestrator::offline::ModelTool(args, std::cout, std::cerr), "model");
}

}  // namespace rote::cli
