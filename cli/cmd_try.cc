// `rote artifacts try | backtest | backtest-result`: run a revision on one input, and test it
// against the inputs its generation point was called with in past runs (docs/backtest.md).
#include <cstdlib>
#include <iostream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/table.h"
#include "rote/v1/artifacts.grpc.pb.h"

namespace rote::cli {
namespace {

const char kTryUsage[] =
    "Usage: rote artifacts try NAME (--input JSON | --input-file FILE) [limits] [--json]\n"
    "       rote artifacts backtest NAME [--max-calls N] [--whole-runs [--max-runs N]] [--json]\n"
    "       rote artifacts backtest-result NAME [--json]\n"
    "  try               run the revision on one input in the sandbox: its result (stdout) or\n"
    "                    error (exit 1), and what it used (stderr); limits: --max-instructions N\n"
    "                    --max-memory-bytes N --max-output-bytes N (default: the run defaults)\n"
    "  backtest          re-run the point's recorded calls from past runs through the revision\n"
    "                    and compare with what was recorded; --whole-runs also re-runs whole\n"
    "                    runs with it bound. Stored with the revision; exit 1 when anything\n"
    "                    differs or failed\n"
    "  backtest-result   the revision's newest stored backtest\n"
    "NAME is artifacts/<digest> or artifacts/<blueprint>/<point>/revisions/<n>. Role: review\n"
    "(backtest-result: submit or review).\n";

int TryUsage(const std::string& error) {
  std::ostream& out = error.empty() ? std::cout : std::cerr;
  if (!error.empty()) out << "rote: " << error << "\n\n";
  out << kTryUsage << ClientFlagsHelp();
  return error.empty() ? kExitOk : kExitUsage;
}

std::string ArtifactName(const std::string& id) {
  if (id.rfind("artifacts/", 0) == 0) return id;
  if (id.rfind("sha256:", 0) == 0) return "artifacts/" + id.substr(7);
  return "artifacts/" + id;
}

// A flag that must be a non-negative integer; false (after printing the usage error) otherwise.
bool IntFlag(const ParsedFlags& flags, const std::string& name, int64_t* out, int* exit_code) {
  auto v = flags.Get(name);
  if (!v) return true;
  if (!absl::SimpleAtoi(*v, out) || *out < 0) {
    *exit_code = TryUsage("--" + name + " takes a non-negative integer, got `" + *v + "`");
    return false;
  }
  return true;
}

void PrintBacktest(const rote::v1::Backtest& b) {
  const rote::v1::BacktestSummary& s = b.summary();
  PrintFields(std::cout, {{"backtest", b.name()},
                          {"live revision", b.live_artifact_digest().empty() ? "-" : b.live_artifact_digest()},
                          {"by", b.principal()},
                          {"calls", absl::StrCat(s.calls())},
                          {"equal", absl::StrCat(s.equal())},
                          {"different", absl::StrCat(s.different())},
                          {"errors", absl::StrCat(s.errors())}});
  if (s.runs() > 0) {
    PrintFields(std::cout, {{"runs", absl::StrCat(s.runs())},
                            {"runs equal", absl::StrCat(s.runs_equal())},
                            {"runs different", absl::StrCat(s.runs_different())}});
  }
  for (const rote::v1::BacktestDifference& d : b.differences()) {
    std::cout << "\n" << d.run() << (d.step() < 0 ? " (whole run)" : absl::StrCat(" step ", d.step()))
              << (d.error().empty() ? ": different" : ": error") << (d.truncated() ? " (values cut)" : "") << "\n";
    std::cout << "  input:     " << d.input_json() << "\n";
    std::cout << "  recorded:  " << d.recorded_json() << "\n";
    if (d.error().empty()) {
      std::cout << "  candidate: " << d.candidate_json() << "\n";
    } else {
      std::cout << "  error:     " << d.error() << "\n";
    }
  }
  const int64_t shown = b.differences_size();
  if (s.different() + s.errors() + s.runs_different() > shown) {
    std::cout << "\n(the first " << shown << " differences are kept)\n";
  }
}

}  // namespace

int CmdArtifactsTry(const Args& args) {
  FlagSpec spec{{"input", "input-file", "max-instructions", "max-memory-bytes", "max-output-bytes", "max-calls",
                 "max-runs"},
                {"whole-runs", "help"}};
  AddClientFlags(&spec);
  auto flags = ParseFlags(args, spec);
  if (!flags.ok()) return TryUsage(std::string(flags.status().message()));
  if (flags->Has("help")) return TryUsage("");
  absl::StatusOr<ClientOptions> options = ClientOptionsFrom(*flags);
  if (!options.ok()) return TryUsage(std::string(options.status().message()));
  if (flags->positionals.size() != 2) return TryUsage(flags->positionals.empty() ? "missing command" : "needs NAME");
  const std::string cmd = flags->positionals[0];
  const std::string name = ArtifactName(flags->positionals[1]);
  Client client(*options);
  rote::v1::ArtifactService::Stub stub(client.channel());
  int code = kExitOk;

  if (cmd == "try") {
    rote::v1::TryArtifactRequest req;
    req.set_name(name);
    if (flags->Has("input") == flags->Has("input-file")) return TryUsage("try needs one of --input and --input-file");
    if (auto file = flags->Get("input-file")) {
      std::string text, error;
      if (!ReadWholeFile(*file, options->max_message_bytes, &text, &error)) {
        std::cerr << "rote: " << error << "\n";
        return kExitInvalid;
      }
      req.set_input_json(text);
    } else {
      req.set_input_json(*flags->Get("input"));
    }
    if (FirstInvalidUtf8(req.input_json())) {
      std::cerr << "rote: the input is not UTF-8 text\n";
      return kExitInvalid;
    }
    int64_t v = 0;
    if (!IntFlag(*flags, "max-instructions", &v, &code)) return code;
    req.set_max_instructions(v);
    v = 0;
    if (!IntFlag(*flags, "max-memory-bytes", &v, &code)) return code;
    req.set_max_memory_bytes(v);
    v = 0;
    if (!IntFlag(*flags, "max-output-bytes", &v, &code)) return code;
    req.set_max_output_bytes(v);
    rote::v1::TryArtifactResponse resp;
    auto ctx = client.Context();
    grpc::Status st = stub.TryArtifact(ctx.get(), req, &resp);
    if (!st.ok()) return client.Fail(st, "trying " + name);
    if (options->json) {
      Client::PrintJson(resp, std::cout);
    } else {
      if (resp.error().empty()) {
        std::cout << resp.output_json() << "\n";
      } else {
        std::cout << "error: " << resp.error() << "\n";
      }
      std::cerr << "used " << resp.instructions_used() << " of " << resp.max_instructions() << " instructions, "
                << resp.memory_peak_bytes() << " of " << resp.max_memory_bytes() << " memory bytes, "
                << resp.output_bytes() << " of " << resp.max_output_bytes() << " output bytes\n";
    }
    return resp.error().empty() ? kExitOk : kExitFailure;
  }
  if (cmd == "backtest") {
    rote::v1::BacktestRevisionRequest req;
    req.set_name(name);
    int64_t v = 0;
    if (!IntFlag(*flags, "max-calls", &v, &code)) return code;
    req.set_max_calls(v);
    v = 0;
    if (!IntFlag(*flags, "max-runs", &v, &code)) return code;
    req.set_max_runs(v);
    req.set_whole_runs(flags->Has("whole-runs"));
    rote::v1::Backtest resp;
    auto ctx = client.Context(/*streaming=*/true);  // a backtest of many calls takes a while
    grpc::Status st = stub.BacktestRevision(ctx.get(), req, &resp);
    if (!st.ok()) return client.Fail(st, "backtesting " + name);
    if (options->json) Client::PrintJson(resp, std::cout); else PrintBacktest(resp);
    const rote::v1::BacktestSummary& s = resp.summary();
    return s.different() + s.errors() + s.runs_different() == 0 ? kExitOk : kExitFailure;
  }
  if (cmd == "backtest-result") {
    rote::v1::GetBacktestRequest req;
    req.set_name(name);
    rote::v1::Backtest resp;
    auto ctx = client.Context();
    grpc::Status st = stub.GetBacktest(ctx.get(), req, &resp);
    if (!st.ok()) return client.Fail(st, "getting the backtest of " + name);
    if (options->json) Client::PrintJson(resp, std::cout); else PrintBacktest(resp);
    return kExitOk;
  }
  return TryUsage("unknown command `" + cmd + "`");
}

}  // namespace rote::cli
