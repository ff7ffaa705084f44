#include "orchestrator/offline.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "inference/commands.h"
#include "inference/engine.h"
#include "inference/engine_group.h"
#include "sandbox/lua_runtime.h"
#include "sandbox/regex.h"
#include "sandbox/value.h"
#include "sandbox/worker_pool.h"
#include "store/digest.h"

namespace rote::orchestrator::offline {
namespace {

sandbox::RegexOptions OptionsOf(const RegexFlags& flags) {
  sandbox::RegexOptions options;
  options.case_insensitive = flags.ignore_case;
  options.dot_matches_newline = flags.dot_matches_newline;
  options.longest_match = flags.longest_match;
  options.literal = flags.literal;
  if (flags.max_memory_bytes) options.max_memory_bytes = *flags.max_memory_bytes;
  return options;
}

// The inference module reports its own status type with absl's codes.
ToolStatus FromInference(const inference::Status& s) {
  ToolStatus out;
  out.usage_error = inference::tool::IsUsageError(s);
  if (!s.ok()) out.status = absl::Status(static_cast<absl::StatusCode>(s.code()), s.message());
  return out;
}

}  // namespace

std::string RegexOptionsJson(const RegexFlags& flags) { return OptionsOf(flags).CanonicalJson(); }

absl::StatusOr<Regex> Regex::Compile(std::string_view pattern, const RegexFlags& flags) {
  absl::StatusOr<sandbox::Re2Matcher> re = sandbox::Re2Matcher::Compile(pattern, OptionsOf(flags));
  if (!re.ok()) return re.status();
  return Regex(std::make_shared<const sandbox::Re2Matcher>(*std::move(re)));
}

void Regex::Find(std::string_view text, bool named, const std::function<void(std::string_view)>& emit) const {
  if (named) {
    sandbox::Value records = matcher_->NamedCaptures(text);
    for (const sandbox::Value& rec : records.as_array()) {
      absl::StatusOr<std::string> json = sandbox::CanonicalJson(rec);
      emit(json.ok() ? *json : "error: " + std::string(json.status().message()));
    }
  } else {
    matcher_->ForEachMatch(text, [&](size_t off, size_t len) { emit(text.substr(off, len)); });
  }
}

ScriptLimits DefaultScriptLimits() {
  const sandbox::Limits limits;
  return ScriptLimits{limits.max_instructions, limits.max_memory_bytes, limits.max_output_bytes};
}

absl::Status CheckJson(std::string_view text) { return sandbox::ParseJson(text).status(); }

ScriptOutcome RunScript(const ScriptRequest& request) {
  ScriptOutcome outcome;
  const auto fail = [&](ScriptOutcome::Failure failure, absl::Status status) {
    outcome.failure = failure;
    outcome.status = std::move(status);
    return outcome;
  };
  absl::StatusOr<sandbox::Value> input = sandbox::ParseJson(request.input_json);
  if (!input.ok()) return fail(ScriptOutcome::Failure::kInput, input.status());
  sandbox::Limits limits;
  limits.max_instructions = request.limits.max_instructions;
  limits.max_memory_bytes = request.limits.max_memory_bytes;
  limits.max_output_bytes = request.limits.max_output_bytes;

  absl::StatusOr<std::vector<sandbox::CallResult>> results;
  if (request.in_process) {
    results = sandbox::RunFunctionArtifact(request.source, request.chunkname, {*input}, limits,
                                           sandbox::LuaState::Clock::now() + request.deadline);
  } else {
    sandbox::WorkerPoolOptions options;
    options.num_workers = 1;
    options.worker_path = request.worker_path;
    auto pool = sandbox::WorkerPool::Start(options);
    if (!pool.ok()) return fail(ScriptOutcome::Failure::kWorkerStart, pool.status());
    results = (*pool)->Call(request.source, request.chunkname, {*input}, limits, request.deadline);
  }
  if (!results.ok()) return fail(ScriptOutcome::Failure::kCall, results.status());
  sandbox::CallResult& r = results->front();
  outcome.output = std::move(r.output);
  if (!r.status.ok()) return fail(ScriptOutcome::Failure::kScript, r.status);
  absl::StatusOr<std::string> json = sandbox::CanonicalJson(r.value);
  if (!json.ok()) return fail(ScriptOutcome::Failure::kResult, json.status());
  outcome.result_json = *std::move(json);
  return outcome;
}

absl::StatusOr<GenerationSpecFile> ParseGenerationSpec(std::string_view text, std::string_view path) {
  const std::string file(path);
  absl::StatusOr<sandbox::Value> v = sandbox::ParseJson(text);
  if (!v.ok() || !v->is_map()) {
    return absl::InvalidArgumentError(
        absl::StrCat(file, " is not a JSON object", v.ok() ? "" : absl::StrCat(": ", v.status().message())));
  }
  const sandbox::Map& m = v->as_map();
  auto str = [&](const char* key) {
    auto it = m.find(key);
    return it != m.end() && it->second.is_string() ? it->second.as_string() : std::string();
  };
  GenerationSpecFile spec;
  spec.name = str("name");
  spec.task = str("task");
  spec.signature = str("signature");
  spec.kind = str("kind");
  if (spec.kind != "lua_function" && spec.kind != "re2_pattern") {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": \"kind\" must be \"lua_function\" or \"re2_pattern\""));
  }
  auto examples = m.find("examples");
  if (examples == m.end() || !examples->second.is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": \"examples\" must be an array of {\"input\", ...} objects"));
  }
  for (const sandbox::Value& e : examples->second.as_array()) {
    absl::StatusOr<std::string> json = sandbox::CanonicalJson(e);
    if (!json.ok()) return absl::InvalidArgumentError(absl::StrCat(file, ": an example has no canonical JSON form"));
    spec.examples_json.push_back(*std::move(json));
  }
  return spec;
}

ToolStatus ModelTool(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  return FromInference(inference::tool::ModelCommand(args, out, err));
}

ToolStatus GenerateTool(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  return FromInference(inference::tool::GenerateCommand(args, out, err));
}

absl::StatusOr<bool> DeviceIsCuda(std::string_view device) {
  inference::DeviceSet devices;
  if (inference::Status s = inference::ParseDeviceSet(device, &devices); !s.ok()) {
    return absl::InvalidArgumentError(s.message());
  }
  return devices.device == inference::Device::kCuda;
}

std::string Sha256Digest(std::string_view bytes) { return store::Sha256Digest(bytes); }

}  // namespace rote::orchestrator::offline
