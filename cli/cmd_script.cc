// rote script run: runs a Lua function artifact exactly as generated code runs in the server
// (a rote-sandbox-worker process under seccomp, the deterministic profile, the same limits).
#include <chrono>
#include <iostream>
#include <utility>

#include "cli/client.h"  // ReadWholeFile
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/flags.h"
#include "orchestrator/offline.h"

namespace rote::cli {
namespace {

constexpr const char* kUsage = R"(usage: rote script run FILE.lua [--input JSON | --input-file PATH] [options]

Runs a Lua function artifact: a chunk that returns a function. The function is called with
the input value and its result is printed as canonical JSON on stdout; what the script
prints goes to stderr. By default it runs in a sandbox worker process, exactly as generated
code runs in the server.

options:
  --input JSON           the input value (default: null)
  --input-file PATH      read the input value from a JSON file
  --max-instructions N   instruction budget (default 100000000)
  --max-memory BYTES     Lua heap budget (default 67108864)
  --max-output BYTES     print budget (default 1048576)
  --deadline-ms MS       wall-clock safety net (default 30000)
  --in-process           run in this process with the same profile instead of a worker
  --worker PATH          the rote-sandbox-worker executable
  -h, --help             this text

exit codes: 0 result printed; 1 the script failed or hit a limit; 2 bad command line;
6 compile error or a result that has no JSON form; 8 sandbox infrastructure failure
(deadline, crashed worker).
)";

int ExitCodeFor(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kOk: return kExitOk;
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kResourceExhausted: return kExitFailure;
    case absl::StatusCode::kInvalidArgument: return kExitInvalid;
    default: return kExitInternal;
  }
}

bool ParseCount(const ParsedFlags& f, const char* name, uint64_t* out) {
  auto v = f.Get(name);
  if (!v) return true;
  try {
    size_t used = 0;
    *out = std::stoull(*v, &used);
    return used == v->size();
  } catch (...) {
    return false;
  }
}

}  // namespace

int CmdScript(const Args& args) {
  FlagSpec spec{{"input", "input-file", "max-instructions", "max-memory", "max-output", "deadline-ms", "worker"},
                {"help", "in-process"}};
  auto flags = ParseFlags(args, spec);
  if (!flags.ok()) {
    std::cerr << "rote script: " << flags.status().message() << "\n" << kUsage;
    return kExitUsage;
  }
  if (flags->Has("help")) {
    std::cout << kUsage;
    return kExitOk;
  }
  if (flags->positionals.size() != 2 || flags->positionals[0] != "run") {
    std::cerr << kUsage;
    return kExitUsage;
  }
  const std::string& path = flags->positionals[1];
  std::string source;
  std::string error;
  if (!ReadWholeFile(path, kDefaultMaxMessageBytes, &source, &error)) {
    std::cerr << "rote script: " << error << "\n";
    return kExitUsage;
  }

  std::string input_text = flags->GetOr("input", "null");
  if (auto input_file = flags->Get("input-file")) {
    if (!ReadWholeFile(*input_file, kDefaultMaxMessageBytes, &input_text, &error)) {
      std::cerr << "rote script: " << error << "\n";
      return kExitUsage;
    }
  }
  if (absl::Status input = orchestrator::offline::CheckJson(input_text); !input.ok()) {
    std::cerr << "rote script: --input: " << input.message() << "\n";
    return kExitUsage;
  }
  orchestrator::offline::ScriptLimits limits = orchestrator::offline::DefaultScriptLimits();
  uint64_t deadline_ms = 30'000;
  if (!ParseCount(*flags, "max-instructions", &limits.max_instructions) ||
      !ParseCount(*flags, "max-memory", &limits.max_memory_bytes) ||
      !ParseCount(*flags, "max-output", &limits.max_output_bytes) || !ParseCount(*flags, "deadline-ms", &deadline_ms)) {
    std::cerr << "rote script: limits must be non-negative integers\n";
    return kExitUsage;
  }
  orchestrator::offline::ScriptRequest request;
  request.source = std::move(source);
  request.chunkname = path.substr(path.find_last_of('/') + 1);
  request.input_json = std::move(input_text);
  request.limits = limits;
  request.deadline = std::chrono::milliseconds(deadline_ms);
  request.in_process = flags->Has("in-process");
  request.worker_path = flags->GetOr("worker", "");

  using Failure = orchestrator::offline::ScriptOutcome::Failure;
  const orchestrator::offline::ScriptOutcome r = orchestrator::offline::RunScript(request);
  switch (r.failure) {
    case Failure::kInput:
      std::cerr << "rote script: --input: " << r.status.message() << "\n";
      return kExitUsage;
    case Failure::kWorkerStart:
      std::cerr << "rote script: " << r.status.message() << "\n";
      return kExitInternal;
    case Failure::kCall:
      std::cerr << "error: " << r.status.message() << "\n";
      return ExitCodeFor(r.status);
    case Failure::kScript:
      std::cerr << r.output << "error: " << r.status.message() << "\n";
      return ExitCodeFor(r.status);
    case Failure::kResult:
      std::cerr << r.output << "error: result: " << r.status.message() << "\n";
      return kExitInvalid;
    case Failure::kNone: break;
  }
  std::cerr << r.output;
  std::cout << r.result_json << "\n";
  return kExitOk;
}

}  // namespace rote::cli
