// `rote generate --model DIR ...`: runs a local model in-process and streams the tokens to the
// terminal (flags in inference/commands.h).
// `rote generate --spec FILE.json [client flags]`: asks a server's generation pipeline
// (GenerationService.Generate) to write code for a spec, streaming attempts and tokens.
#include <algorithm>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "orchestrator/offline.h"
#include "rote/v1/generation.grpc.pb.h"

namespace rote::cli {

// cmd_model.cc
int InferenceToolExitCode(const orchestrator::offline::ToolStatus& s, const char* command);
std::string InferenceToolUsage(
    orchestrator::offline::ToolStatus (*tool)(const std::vector<std::string>&, std::ostream&, std::ostream&),
    const std::vector<std::string>& args);

namespace {

const char kServerUsage[] =
    "Usage: rote generate --spec FILE.json [--attempts N] [--seed N] [--temperature T]\n"
    "                     [--max-tokens N] [client flags]\n"
    "Asks the server's model to write code for a spec: prompt, inference, validation in the\n"
    "sandbox, retries (docs/generation.md). Streams each attempt's tokens and failure, then\n"
    "prints the stored artifact (pending review). A request made before is answered from the\n"
    "cache without the model. The spec file:\n"
    "  {\"name\": \"parse_amount\", \"kind\": \"lua_function\" | \"re2_pattern\",\n"
    "   \"task\": \"...\", \"signature\": \"function(text) -> number\",\n"
    "   \"examples\": [{\"input\": \"1,5\", \"output\": 1.5}]}      (patterns: \"matches\": [...])\n\n";

// Reads the spec file into the request; false with a message on stderr.
bool ReadSpec(const std::string& path, int64_t max_bytes, rote::v1::GenerateRequest* req) {
  std::string text;
  std::string error;
  if (!ReadWholeFile(path, max_bytes, &text, &error)) {
    std::cerr << "rote generate: " << error << "\n";
    return false;
  }
  absl::StatusOr<orchestrator::offline::GenerationSpecFile> file =
      orchestrator::offline::ParseGenerationSpec(text, path);
  if (!file.ok()) {
    std::cerr << "rote generate: " << file.status().message() << "\n";
    return false;
  }
  rote::v1::GenerationSpec* spec = req->mutable_spec();
  spec->set_name(file->name);
  spec->set_task(file->task);
  spec->set_signature(file->signature);
  spec->set_kind(file->kind == "lua_function" ? rote::v1::ARTIFACT_KIND_LUA_FUNCTION
                                              : rote::v1::ARTIFACT_KIND_RE2_PATTERN);
  for (const std::string& example : file->examples_json) spec->add_examples_json(example);
  return true;
}

int GenerateOnServer(const Args& args) {
  FlagSpec spec{{"spec", "attempts", "seed", "temperature", "max-tokens"}, {"help"}};
  AddClientFlags(&spec);
  absl::StatusOr<ParsedFlags> flags = ParseFlags(args, spec);
  if (!flags.ok() || flags->Has("help") || !flags->positionals.empty()) {
    if (!flags.ok()) std::cerr << "rote generate: " << flags.status().message() << "\n\n";
    (flags.ok() && flags->Has("help") ? std::cout : std::cerr) << kServerUsage << ClientFlagsHelp();
    return flags.ok() && flags->Has("help") ? kExitOk : kExitUsage;
  }
  absl::StatusOr<ClientOptions> client_options = ClientOptionsFrom(*flags);
  if (!client_options.ok()) {
    std::cerr << "rote generate: " << client_options.status().message() << "\n\n" << kServerUsage << ClientFlagsHelp();
    return kExitUsage;
  }
  rote::v1::GenerateRequest req;
  if (!ReadSpec(*flags->Get("spec"), client_options->max_message_bytes, &req)) return kExitUsage;
  try {
    if (auto v = flags->Get("attempts")) req.set_max_attempts(std::stoi(*v));
    if (auto v = flags->Get("seed")) req.mutable_decoding()->set_seed(std::stoull(*v));
    if (auto v = flags->Get("temperature")) req.mutable_decoding()->set_temperature(std::stof(*v));
    if (auto v = flags->Get("max-tokens")) req.mutable_decoding()->set_max_tokens(std::stoi(*v));
  } catch (const std::exception&) {
    std::cerr << "rote generate: --attempts, --seed, --temperature and --max-tokens take numbers\n";
    return kExitUsage;
  }
  Client client(*client_options);
  rote::v1::GenerationService::Stub stub(client.channel());
  auto ctx = client.Context(/*streaming=*/true);  // generation can take minutes
  auto reader = stub.Generate(ctx.get(), req);
  rote::v1::GenerateEvent e;
  rote::v1::Artifact artifact;
  bool in_text = false;
  auto end_text = [&] {
    if (in_text && !client.options().json) std::cout << "\n";
    in_text = false;
  };
  while (reader->Read(&e)) {
    if (client.options().json) {
      Client::PrintJson(e, std::cout);
      continue;
    }
    switch (e.event_case()) {
      case rote::v1::GenerateEvent::kAttemptStarted:
        end_text();
        std::cout << "--- attempt " << e.attempt_started() << "\n";
        break;
      case rote::v1::GenerateEvent::kTokenText:
        std::cout << e.token_text() << std::flush;
        in_text = true;
        break;
      case rote::v1::GenerateEvent::kAttemptFailed:
        end_text();
        std::cout << "--- refused: " << e.attempt_failed() << "\n";
        break;
      case rote::v1::GenerateEvent::kArtifact:
        end_text();
        artifact = e.artifact();
        std::cout << "--- artifact " << artifact.name() << " (" << artifact.generation_point() << " revision "
                  << artifact.revision() << ", " << rote::v1::ReviewState_Name(artifact.state()) << ", "
                  << artifact.provenance().attempts_size() << " attempt(s))\n"
                  << artifact.source() << (artifact.source().empty() || artifact.source().back() == '\n' ? "" : "\n");
        break;
      default:
        break;
    }
    std::cout.flush();  // each event as it arrives, also into a pipe
  }
  end_text();
  grpc::Status st = reader->Finish();
  if (!st.ok()) return client.Fail(st, "generating " + req.spec().name());
  return kExitOk;
}

}  // namespace

int CmdGenerate(const Args& args) {
  // With --spec the pipeline on a server does the work; otherwise the local model tool.
  if (std::any_of(args.begin(), args.end(), [](const std::string& a) { return a == "--spec" || a.rfind("--spec=", 0) == 0; })) {
    return GenerateOnServer(args);
  }
  if (IsHelpRequest(args)) {
    std::cout << "Usage: rote generate --model DIR ...   (a local model, in this process)\n"
              << InferenceToolUsage(orchestrator::offline::GenerateTool, {}) << "\n"
              << kServerUsage << ClientFlagsHelp();
    return kExitOk;
  }
  return InferenceToolExitCode(orchestrator::offline::GenerateTool(args, std::cout, std::cerr), "generate");
}

}  // namespace rote::cli
