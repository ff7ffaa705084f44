#include "cli/flags.h"

#include "absl/strings/str_cat.h"

namespace rote::cli {

std::optional<std::string> ParsedFlags::Get(const std::string& name) const {
  auto it = values.find(name);
  if (it == values.end()) return std::nullopt;
  return it->second;
}

std::string ParsedFlags::GetOr(const std::string& name, const std::string& fallback) const {
  auto v = Get(name);
  return v ? *v : fallback;
}

absl::StatusOr<ParsedFlags> ParseFlags(const std::vector<std::string>& args, const FlagSpec& spec) {
  ParsedFlags out;
  bool flags_done = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (flags_done || a.size() < 2 || a.rfind("--", 0) != 0) {
      if (a == "-h" && !flags_done) {
        out.set.insert("help");
        continue;
      }
      out.positionals.push_back(a);
      continue;
    }
    if (a == "--") {
      flags_done = true;
      continue;
    }
    std::string name = a.substr(2);
    std::optional<std::string> inline_value;
    if (auto eq = name.find('='); eq != std::string::npos) {
      inline_value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (spec.boolean.count(name)) {
      if (inline_value) return absl::InvalidArgumentError(absl::StrCat("--", name, " takes no value"));
      out.set.insert(name);
    } else if (spec.with_value.count(name)) {
      if (inline_value) {
        out.values[name] = *inline_value;
      } else if (i + 1 < args.size()) {
        out.values[name] = args[++i];
      } else {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    }
  }
  return out;
}

}  // namespace rote::cli
