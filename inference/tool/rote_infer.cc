// rote-infer: the model tools without the rest of rote (no gRPC, Lua, SQLite), for the GPU
// machine and for benchmarks:  rote-infer model info DIR | model synth ... | generate ...
// | model tokenize DIR | model detokenize DIR | model chat DIR (inference/commands.h and
// inference/tokenizer/tokenizer_tool.h list the flags).
#include <iostream>
#include <string>
#include <vector>

#include "inference/commands.h"
#include "inference/tokenizer/tokenizer_tool.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || (args[0] != "model" && args[0] != "generate")) {
    std::cerr << "usage: rote-infer model info DIR | rote-infer model synth ... | rote-infer model tokenize|detokenize|chat DIR ..."
                 " | rote-infer generate --model DIR ...\n";
    return 2;
  }
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  namespace tool = rote::inference::tool;
  rote::inference::Status s;
  if (args[0] == "model" && !rest.empty() && tool::IsTokenizerSubcommand(rest[0])) {
    s = tool::TokenizerCommand(rest, std::cin, std::cout);
  } else {
    s = args[0] == "model" ? tool::ModelCommand(rest, std::cout, std::cerr) : tool::GenerateCommand(rest, std::cout, std::cerr);
  }
  if (s.ok()) return 0;
  std::cerr << "rote-infer " << args[0] << ": " << s.message() << "\n";
  return rote::inference::tool::IsUsageError(s) ? 2 : 1;
}
