// Shared by the fuzz targets: one input carrying several files, and invariant checks that stop
// the fuzzer (libFuzzer saves the input) when a parser accepts something it cannot stand behind.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

namespace rote::fuzz {

// Targets that read several files (config.json + generation_config.json, the tokenizer's four)
// take them from one input, cut at this line. Seeds and dictionaries spell it the same way.
inline constexpr std::string_view kPartSeparator = "\n=====8<=====\n";

// Exactly `n` parts: missing ones are empty, and the last keeps any further separators.
inline std::vector<std::string_view> SplitParts(const uint8_t* data, size_t size, size_t n) {
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  std::vector<std::string_view> parts;
  while (parts.size() + 1 < n) {
    size_t cut = rest.find(kPartSeparator);
    if (cut == std::string_view::npos) break;
    parts.push_back(rest.substr(0, cut));
    rest.remove_prefix(cut + kPartSeparator.size());
  }
  parts.push_back(rest);
  parts.resize(n);
  return parts;
}

[[noreturn]] inline void Fail(const char* what, const char* file, int line) {
  std::fprintf(stderr, "%s:%d: invariant violated: %s\n", file, line, what);
  std::abort();
}

}  // namespace rote::fuzz

#define ROTE_FUZZ_CHECK(cond) \
  do {                        \
    if (!(cond)) ::rote::fuzz::Fail(#cond, __FILE__, __LINE__); \
  } while (0)
