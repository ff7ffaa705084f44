// rote regex find: RE2 matches with the sandbox's pinned options, one per line.
#include <iostream>

#include "cli/client.h"  // ReadWholeFile
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/flags.h"
#include "orchestrator/offline.h"

namespace rote::cli {
namespace {

constexpr const char* kUsage = R"(usage: rote regex find PATTERN [FILE] [options]

Prints every leftmost non-overlapping match of the RE2 PATTERN in FILE (or stdin), one per
line, with the options rote pins for pattern artifacts. Unsupported syntax (backreferences,
lookaround, atomic groups, possessive quantifiers, ...) is an error naming the construct and
its byte offset.

options:
  --ignore-case          case-insensitive matching
  --dot-nl               '.' also matches newline
  --longest              leftmost-longest instead of leftmost-first
  --literal              PATTERN is a literal string
  --max-memory BYTES     RE2 memory budget (default 8388608)
  --named                print one canonical JSON record of the named groups per match
  --options              print the options' canonical JSON and exit
  -h, --help             this text

exit codes: 0 at least one match; 1 no match; 2 bad command line; 6 invalid or
unsupported pattern.
)";

}  // namespace

int CmdRegex(const Args& args) {
  FlagSpec spec{{"max-memory"}, {"help", "ignore-case", "dot-nl", "longest", "literal", "named", "options"}};
  auto flags = ParseFlags(args, spec);
  if (!flags.ok()) {
    std::cerr << "rote regex: " << flags.status().message() << "\n" << kUsage;
    return kExitUsage;
  }
  if (flags->Has("help")) {
    std::cout << kUsage;
    return kExitOk;
  }
  orchestrator::offline::RegexFlags options;
  options.ignore_case = flags->Has("ignore-case");
  options.dot_matches_newline = flags->Has("dot-nl");
  options.longest_match = flags->Has("longest");
  options.literal = flags->Has("literal");
  if (auto mem = flags->Get("max-memory")) {
    try {
      options.max_memory_bytes = std::stoll(*mem);
    } catch (...) {
      std::cerr << "rote regex: --max-memory must be an integer\n";
      return kExitUsage;
    }
  }
  if (flags->Has("options")) {
    std::cout << orchestrator::offline::RegexOptionsJson(options) << "\n";
    return kExitOk;
  }
  const auto& pos = flags->positionals;
  if (pos.size() < 2 || pos.size() > 3 || pos[0] != "find") {
    std::cerr << kUsage;
    return kExitUsage;
  }
  absl::StatusOr<orchestrator::offline::Regex> re = orchestrator::offline::Regex::Compile(pos[1], options);
  if (!re.ok()) {
    std::cerr << "rote regex: " << re.status().message() << "\n";
    return kExitInvalid;
  }
  std::string text;
  if (pos.size() == 3) {
    std::string error;
    if (!ReadWholeFile(pos[2], kDefaultMaxMessageBytes, &text, &error)) {
      std::cerr << "rote regex: " << error << "\n";
      return kExitUsage;
    }
  } else {
    // Standard input may be endless (`< /dev/zero`): read at most the same limit.
    char buf[1 << 16];
    while (std::cin.read(buf, sizeof buf) || std::cin.gcount() > 0) {
      text.append(buf, static_cast<size_t>(std::cin.gcount()));
      if (static_cast<int64_t>(text.size()) > kDefaultMaxMessageBytes) {
        std::cerr << "rote regex: standard input is more than " << kDefaultMaxMessageBytes << " bytes\n";
        return kExitUsage;
      }
    }
  }
  // Named records are printed as they come; plain matches are collected and written at once.
  const bool named = flags->Has("named");
  size_t count = 0;
  std::string out;
  re->Find(text, named, [&](std::string_view line) {
    if (named) {
      std::cout << line << "\n";
    } else {
      out.append(line);
      out += '\n';
    }
    ++count;
  });
  std::cout << out;
  return count > 0 ? kExitOk : kExitFailure;
}

}  // namespace rote::cli
