// Reading the files of a model directory, which rote treats as untrusted input (docs/inference.md,
// "What a model directory must satisfy"). Every file is opened without blocking and must be a
// regular file: a FIFO, device or directory is refused before a byte is read, so loading cannot
// hang on one. Its size is taken from the opened descriptor (fstat), never from an earlier stat
// of the path, so what was checked is what is read. JSON files are capped in size and nesting
// depth before they are parsed, which bounds the memory a parse takes by the file's own size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>  // header-only JSON parser

#include "inference/status.h"

namespace rote::inference {

// Largest JSON file a model directory may hold (published tokenizer.json files are under 20 MiB).
inline constexpr size_t kMaxModelJsonBytes = size_t{64} << 20;
// Deepest nesting of arrays and objects in those files (published ones nest 5 levels). nlohmann's
// copies and comparisons recurse, so an unbounded depth could exhaust the stack.
inline constexpr int kMaxModelJsonDepth = 64;

// Opens `path` read-only (O_NONBLOCK, O_CLOEXEC) and checks through fstat that it is a regular
// file. Returns the descriptor, which the caller closes, and stores the file's size in `size`.
// NotFound when absent; FailedPrecondition when it is not a regular file or cannot be opened.
StatusOr<int> OpenRegularFile(const std::string& path, uint64_t* size);

// Reads a whole regular file of at most `max_bytes` bytes (InvalidArgument when larger). A missing
// file is NotFound when `required`, otherwise an empty string.
StatusOr<std::string> ReadModelFile(const std::string& path, bool required, size_t max_bytes = kMaxModelJsonBytes);

// True when no array or object in `json_text` nests deeper than `max_depth`. Exact for valid JSON;
// text that is not JSON may be misjudged either way, and its parse fails anyway.
bool JsonNestingWithin(std::string_view json_text, int max_depth = kMaxModelJsonDepth);

// Parses one JSON object of a model directory: nesting checked first, the parser's own error in
// the message; InvalidArgument naming `file` when it is not JSON or not an object.
StatusOr<nlohmann::json> ParseJsonObject(std::string_view text, std::string_view file);

// Typed, range-checked fields of one JSON object of a model directory: each getter takes what it
// reads only when the JSON type and range fit, and every error (INVALID_ARGUMENT) names the file
// and the field. An absent or null field gives the fallback, which is not range-checked.
class JsonFields {
 public:
  // `prefix` qualifies field names in errors (e.g. "rope_scaling."). `j` and `file` must outlive
  // this object.
  JsonFields(const nlohmann::json& j, std::string_view file, std::string prefix = "");

  Status Error(std::string_view key, const std::string& what) const;
  // The field, or nullptr when absent or null (or when the value is not an object).
  const nlohmann::json* Find(const char* key) const;

  Status Int(const char* key, int64_t fallback, int64_t lo, int64_t hi, int64_t* out) const;
  // A finite number in [lo, hi]; lo itself excluded when open_lo.
  Status Number(const char* key, double fallback, double lo, bool open_lo, double hi, double* out) const;
  Status Bool(const char* key, bool fallback, bool* out) const;
  Status String(const char* key, const std::string& fallback, std::string* out) const;
  // A token id or a list of them (eos_token_id), each in [0, limit). Absent or null: `out` unchanged.
  Status TokenIds(const char* key, int64_t limit, std::vector<int32_t>* out) const;

 private:
  const nlohmann::json& j_;
  std::string_view file_;
  std::string prefix_;
};

}  // namespace rote::inference
