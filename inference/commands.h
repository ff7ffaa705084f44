// The model tools, shared by the `rote` command (cli/cmd_model.cc, cli/cmd_generate.cc) and the
// standalone `rote-infer` (inference/tool/), which links only this module so it runs on the GPU
// machine:
//   model info DIR
//   model synth --family qwen2|llama|qwen3 --shape tiny|small|0.5b|1.5b --out DIR
//               [--dtype bf16|f16|f32] [--seed N]
//   generate --model DIR (--prompt TEXT | --chat TEXT | --tokens 1,2,3) [--system TEXT]
//            [--max-tokens N] [--temperature T] [--top-k K] [--top-p P] [--seed N]
//            [--stop TEXT]... [--ignore-eos] [--threads N] [--device cpu|cuda]
//            [--kv-cache-mb N] [--max-context N]
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "inference/status.h"

namespace rote::inference::tool {

// `args` are the words after "model" / "generate". Output goes to `out`, diagnostics to `err`.
Status ModelCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
Status GenerateCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// A bad command line (as opposed to a failure of the operation): the message starts "usage".
bool IsUsageError(const Status& status);

}  // namespace rote::inference::tool
