// `model tokenize | detokenize | chat`: how rote tokenizes a text, decodes ids and renders a chat
// prompt for a model directory. Shared by `rote model ...` (through inference/commands.h) and
// `rote-infer model ...`:
//   model tokenize DIR [--text TEXT | --file PATH] [--add-special-tokens] [--special-as-text] [--json]
//   model detokenize DIR [--ids 1,2,3 | ID...] [--skip-special] [--json]
//   model chat DIR [--system TEXT] [--user TEXT] [--assistant TEXT] [--tool TEXT]... [--messages FILE]
//              [--no-generation-prompt] [--json]
// Without --text/--file (tokenize) or ids (detokenize) the input is standard input.
#pragma once

#include <istream>
#include <ostream>
#include <string>
#include <vector>

#include "inference/status.h"

namespace rote::inference::tool {

// Whether `subcommand` is one of tokenize, detokenize, chat.
bool IsTokenizerSubcommand(const std::string& subcommand);

// `args` are the words after "model" (the subcommand first). A bad command line is
// INVALID_ARGUMENT whose message starts "usage:"; a missing directory NOT_FOUND; bad ids or a
// bad message file INVALID_ARGUMENT naming them.
Status TokenizerCommand(const std::vector<std::string>& args, std::istream& in, std::ostream& out);

}  // namespace rote::inference::tool
