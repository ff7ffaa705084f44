// Provenance you can read: `rote generations list|get` and `rote attempts get` show every
// generation request (passed or failed), its attempts, and each attempt's prompt as the model
// read it, raw output and extracted code.
#include <cstdlib>
#include <iostream>
#include <optional>

#include "absl/strings/str_cat.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/table.h"
#include "rote/v1/artifacts.grpc.pb.h"
#include "rote/v1/generation.grpc.pb.h"

namespace rote::cli {

namespace {

const char kGenerationsUsage[] =
    "Usage: rote generations <command>\n"
    "  list [--point BLUEPRINT/POINT] [--failed] [--page-size N] [--page-token T] [--all]\n"
    "                       generation requests, passed and failed, oldest first\n"
    "  get NAME             one generation: model, decoding, device and every attempt with its\n"
    "                       prompt as the model read it and its raw output; NAME is\n"
    "                       generations/<hex> or the request digest (as a failed run's error names it),\n"
    "                       or 8 or more of its first hex digits\n\n"
    "List flags (rows come oldest first):\n"
    "  --page-size N       rows per page (default 50, at most 1000)\n"
    "  --page-token T      the page after the one that printed `next page: --page-token T`\n"
    "  --all               follow the page tokens to the end\n\n";

const char kAttemptsUsage[] =
    "Usage: rote attempts <command>\n"
    "  get NAME             one attempt whole: the prompt as the model read it, the raw output, the\n"
    "                       extracted code, failure, tokens and time; NAME is\n"
    "                       generations/<hex>/attempts/<n> or artifacts/<hex>/attempts/<n>\n\n";

int Usage(const std::string& text, const std::string& error = "") {
  if (!error.empty()) {
    std::cerr << "rote: " << error << "\n\n" << text << ClientFlagsHelp();
    return kExitUsage;
  }
  std::cout << text << ClientFlagsHelp();
  return kExitOk;
}

// Flags, client options and the command word; on --help or a usage error sets *exit_code.
std::optional<ParsedFlags> Parse(const Args& args, FlagSpec spec, const std::string& usage, int* exit_code,
                                 ClientOptions* client_options) {
  AddClientFlags(&spec);
  for (size_t i = 0; i < args.size(); ++i) {
    if (FirstInvalidUtf8(args[i])) {
      std::cerr << "rote: argument " << i + 1 << " is not UTF-8 text\n";
      *exit_code = kExitInvalid;
      return std::nullopt;
    }
  }
  auto flags = ParseFlags(args, spec);
  if (!flags.ok() || flags->Has("help")) {
    *exit_code = Usage(usage, flags.ok() ? "" : std::string(flags.status().message()));
    return std::nullopt;
  }
  absl::StatusOr<ClientOptions> options = ClientOptionsFrom(*flags);
  if (!options.ok()) {
    *exit_code = Usage(usage, std::string(options.status().message()));
    return std::nullopt;
  }
  if (flags->positionals.empty()) {
    *exit_code = Usage(usage, "missing command");
    return std::nullopt;
  }
  *client_options = *std::move(options);
  return std::move(*flags);
}

std::string Time(const google::protobuf::Timestamp& t) { return UtcMillisText(t.seconds(), t.nanos()); }

// "generations/<hex>" from that name, "sha256:<hex>" or the bare hex.
std::string GenerationName(const std::string& id) {
  if (id.rfind("generations/", 0) == 0) return id;
  if (id.rfind("sha256:", 0) == 0) return "generations/" + id.substr(7);
  return "generations/" + id;
}

std::string AttemptSummary(const rote::v1::Attempt& a) {
  return absl::StrCat("attempt ", a.index(), ": ", a.failure().empty() ? "passed" : "failed", ", ",
                      a.prompt_tokens(), " prompt tokens, ", a.output_tokens(), " output tokens, ",
                      a.duration_ms(), " ms, started ", Time(a.start_time()));
}

// A text as a block people can read: each line indented, the end marked when it was cut.
void PrintText(const std::string& label, const std::string& text, bool truncated, const std::string& digest) {
  std::cout << label << " (" << (digest.empty() ? "none" : digest) << "):\n";
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::cout << "  | " << text.substr(start, end - start) << "\n";
    start = end + 1;
  }
  if (truncated) std::cout << "  ... (cut; the whole text is blob " << digest << ")\n";
}

void PrintAttemptTexts(const rote::v1::AttemptDetail& d) {
  const rote::v1::Attempt& a = d.attempt();
  if (!a.failure().empty()) std::cout << "failure: " << a.failure() << "\n";
  PrintText("prompt", d.prompt(), d.prompt_truncated(), a.prompt_digest());
  PrintText("output", d.output(), d.output_truncated(), a.output_digest());
  PrintText("code", d.code(), d.code_truncated(), a.code_digest());
}

}  // namespace

int CmdGenerations(const Args& args) {
  int code = 0;
  ClientOptions client_options;
  FlagSpec spec{{"point", "page-size", "page-token"}, {"failed", "all"}};
  auto flags = Parse(args, spec, kGenerationsUsage, &code, &client_options);
  if (!flags) return code;
  const std::string cmd = flags->positionals[0];
  Client client(client_options);
  rote::v1::GenerationService::Stub stub(client.channel());

  if (cmd == "list") {
    if (flags->positionals.size() != 1) return Usage(kGenerationsUsage, "list takes no NAME");
    rote::v1::ListGenerationsRequest req;
    req.set_generation_point(flags->GetOr("point", ""));
    req.set_failed_only(flags->Has("failed"));
    req.set_page_size(std::atoi(flags->GetOr("page-size", "0").c_str()));
    req.set_page_token(flags->GetOr("page-token", ""));
    rote::v1::ListGenerationsResponse resp;
    for (;;) {
      auto ctx = client.Context();
      rote::v1::ListGenerationsResponse page;
      grpc::Status st = stub.ListGenerations(ctx.get(), req, &page);
      if (!st.ok()) return client.Fail(st, "listing generations");
      resp.MergeFrom(page);
      resp.set_next_page_token(page.next_page_token());
      if (!flags->Has("all") || page.next_page_token().empty()) break;
      req.set_page_token(page.next_page_token());
    }
    if (client.options().json) {
      Client::PrintJson(resp, std::cout);
      return kExitOk;
    }
    Table t({"GENERATION", "POINT", "OUTCOME", "ATTEMPTS", "CREATED"});
    for (const auto& g : resp.generations()) {
      t.Add({g.name(), g.generation_point(), g.passed() ? g.artifact() : "failed",
             absl::StrCat(g.attempts_size()), Time(g.create_time())});
    }
    t.Print(std::cout);
    if (!resp.next_page_token().empty()) std::cout << "next page: --page-token " << resp.next_page_token() << "\n";
    return kExitOk;
  }
  if (cmd == "get") {
    if (flags->positionals.size() != 2) return Usage(kGenerationsUsage, "get needs NAME");
    rote::v1::GetGenerationRequest req;
    req.set_name(GenerationName(flags->positionals[1]));
    rote::v1::Generation g;
    auto ctx = client.Context();
    grpc::Status st = stub.GetGeneration(ctx.get(), req, &g);
    if (!st.ok()) return client.Fail(st, "reading " + req.name());
    if (client.options().json) {
      Client::PrintJson(g, std::cout);
      return kExitOk;
    }
    std::vector<std::pair<std::string, std::string>> fields = {
        {"name", g.name()},
        {"generation point", g.generation_point()},
        {"outcome", g.passed() ? "passed: " + g.artifact() : "failed"},
        {"model", g.model_digest()},
        {"numerics", g.numerics_profile()},
        {"device", g.device()},
        {"template", g.prompt_template_version()},
        {"decoding", g.decoding_json()},
        {"spec", g.spec_digest()},
        {"created", Time(g.create_time())}};
    if (!g.passed()) fields.push_back({"failure", g.failure()});
    PrintFields(std::cout, fields);
    rote::v1::ArtifactService::Stub artifacts(client.channel());
    for (const rote::v1::Attempt& a : g.attempts()) {
      std::cout << "\n" << AttemptSummary(a) << "\n";
      rote::v1::GetAttemptRequest areq;
      areq.set_name(absl::StrCat(g.name(), "/attempts/", a.index()));
      rote::v1::AttemptDetail detail;
      auto actx = client.Context();
      grpc::Status ast = artifacts.GetAttempt(actx.get(), areq, &detail);
      if (!ast.ok()) return client.Fail(ast, "reading " + areq.name());
      PrintAttemptTexts(detail);
    }
    return kExitOk;
  }
  return Usage(kGenerationsUsage, "unknown command `" + cmd + "`");
}

int CmdAttempts(const Args& args) {
  int code = 0;
  ClientOptions client_options;
  auto flags = Parse(args, FlagSpec{}, kAttemptsUsage, &code, &client_options);
  if (!flags) return code;
  const std::string cmd = flags->positionals[0];
  if (cmd != "get") return Usage(kAttemptsUsage, "unknown command `" + cmd + "`");
  if (flags->positionals.size() != 2) return Usage(kAttemptsUsage, "get needs NAME");
  Client client(client_options);
  rote::v1::ArtifactService::Stub stub(client.channel());
  rote::v1::GetAttemptRequest req;
  req.set_name(flags->positionals[1]);
  rote::v1::AttemptDetail d;
  auto ctx = client.Context();
  grpc::Status st = stub.GetAttempt(ctx.get(), req, &d);
  if (!st.ok()) return client.Fail(st, "reading " + req.name());
  if (client.options().json) {
    Client::PrintJson(d, std::cout);
    return kExitOk;
  }
  PrintFields(std::cout, {{"name", d.name()},
                          {"generation", d.generation().empty() ? "-" : d.generation()},
                          {"model", d.model_digest()},
                          {"numerics", d.numerics_profile()},
                          {"device", d.device()},
                          {"template", d.prompt_template_version()},
                          {"decoding", d.decoding_json()}});
  std::cout << "\n" << AttemptSummary(d.attempt()) << "\n";
  PrintAttemptTexts(d);
  return kExitOk;
}

}  // namespace rote::cli
