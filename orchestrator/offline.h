// The tools the `rote` command runs without a server: a backup of the store, the sandbox's
// regex and script runners, the inference module's model and generate tools, and the few checks
// the client makes itself. cli/ reaches store, sandbox and inference only through this facade
// (docs/architecture.md, "Dependency rule"), so their headers stay out of the command's code.
// The backup is in offline_backup.h.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace rote::sandbox {
class Re2Matcher;
}  // namespace rote::sandbox

namespace rote::orchestrator::offline {

// ---- regex: RE2 with the options rote pins for pattern artifacts
struct RegexFlags {
  bool ignore_case = false;
  bool dot_matches_newline = false;
  bool longest_match = false;
  bool literal = false;
  std::optional<int64_t> max_memory_bytes;  // unset: the sandbox's default budget
};
// The options' canonical JSON, as pattern artifacts record them.
std::string RegexOptionsJson(const RegexFlags& flags);
class Regex {
 public:
  // The error is the pattern's: invalid or unsupported syntax, named with its byte offset.
  static absl::StatusOr<Regex> Compile(std::string_view pattern, const RegexFlags& flags);
  // Calls `emit` with every leftmost non-overlapping match in `text`, or with `named` one
  // canonical JSON record of the named groups per match ("error: ..." for a record without one).
  void Find(std::string_view text, bool named, const std::function<void(std::string_view)>& emit) const;

 private:
  explicit Regex(std::shared_ptr<const sandbox::Re2Matcher> matcher) : matcher_(std::move(matcher)) {}
  std::shared_ptr<const sandbox::Re2Matcher> matcher_;
};

// ---- script: one Lua function artifact in the deterministic sandbox
struct ScriptLimits {
  uint64_t max_instructions = 0;
  uint64_t max_memory_bytes = 0;
  uint64_t max_output_bytes = 0;
};
// The sandbox's default limits.
ScriptLimits DefaultScriptLimits();

struct ScriptRequest {
  std::string source;
  std::string chunkname;
  std::string input_json;
  ScriptLimits limits;
  std::chrono::milliseconds deadline{30'000};
  bool in_process = false;  // otherwise in a sandbox worker process
  std::string worker_path;  // empty: the worker beside the running binary
};

struct ScriptOutcome {
  // Where it stopped: the input is not JSON, no worker started, the call failed (deadline, a
  // crashed worker), the script raised or hit a limit, or its result has no JSON form.
  enum class Failure { kNone, kInput, kWorkerStart, kCall, kScript, kResult };
  Failure failure = Failure::kNone;
  absl::Status status;
  std::string output;       // what the script printed (kScript, kResult and kNone)
  std::string result_json;  // canonical JSON of its result (kNone)
};
ScriptOutcome RunScript(const ScriptRequest& request);

// Whether `text` is JSON as the sandbox reads it; the parse error otherwise.
absl::Status CheckJson(std::string_view text);

// ---- generation specs, as `rote generate --spec FILE.json` reads them
struct GenerationSpecFile {
  std::string name;
  std::string kind;  // "lua_function" or "re2_pattern"
  std::string task;
  std::string signature;
  std::vector<std::string> examples_json;  // canonical JSON of each example
};
// `text` is the content of `path`; INVALID_ARGUMENT naming `path` and what is wrong.
absl::StatusOr<GenerationSpecFile> ParseGenerationSpec(std::string_view text, std::string_view path);

// ---- the inference module's tools (`rote model ...`, `rote generate --model ...`)
struct ToolStatus {
  absl::Status status;       // the inference status, same codes
  bool usage_error = false;  // the command line was wrong; the message is the usage text
};
ToolStatus ModelTool(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);
ToolStatus GenerateTool(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// ---- checks the client makes itself
// Whether a `--device` name (cpu, cuda, cuda:N, cuda:N,M,..., cuda:all) names CUDA devices;
// INVALID_ARGUMENT when it names none.
absl::StatusOr<bool> DeviceIsCuda(std::string_view device);
// "sha256:" and 64 lowercase hex digits, as the server names its blobs.
std::string Sha256Digest(std::string_view bytes);

}  // namespace rote::orchestrator::offline
