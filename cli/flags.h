// A small command-line parser for rote's subcommands: `--name value`, `--name=value`, boolean
// `--name`, positionals, and `--` to end flags. Unknown flags are usage errors.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace rote::cli {

struct FlagSpec {
  std::set<std::string> with_value;  // e.g. {"server", "token"}
  std::set<std::string> boolean;     // e.g. {"json", "help"}
};

struct ParsedFlags {
  std::map<std::string, std::string> values;
  std::set<std::string> set;
  std::vector<std::string> positionals;

  bool Has(const std::string& name) const { return set.count(name) > 0 || values.count(name) > 0; }
  std::optional<std::string> Get(const std::string& name) const;
  std::string GetOr(const std::string& name, const std::string& fallback) const;
};

absl::StatusOr<ParsedFlags> ParseFlags(const std::vector<std::string>& args, const FlagSpec& spec);

}  // namespace rote::cli
