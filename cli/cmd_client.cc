// Client subcommands mirroring the API: health, api, blueprints, runs, artifacts.
#include <filesystem>
#include <fstream>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_join.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/reflection_client.h"
#include "cli/table.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "rote/v1/artifacts.grpc.pb.h"
#include "rote/v1/blueprints.grpc.pb.h"
#include "rote/v1/runs.grpc.pb.h"
#include "orchestrator/offline.h"

namespace rote::cli {

namespace {


// Blueprint sources, lockfiles and run inputs travel in proto string fields, which must be
// UTF-8: protobuf would refuse other bytes as an INTERNAL error with no message. So they are
// checked here: exit 6 (invalid) with the file and the offset of the first bad byte.
std::optional<int> RejectNonUtf8(const std::string& bytes, const std::string& what) {
  const std::optional<size_t> bad = FirstInvalidUtf8(bytes);
  if (!bad) return std::nullopt;
  std::cerr << "rote: " << what << " is not UTF-8 text: byte 0x" << std::hex << std::uppercase
            << static_cast<int>(static_cast<unsigned char>(bytes[*bad])) << std::dec << std::nouppercase
            << " at offset " << *bad << " does not begin a valid UTF-8 sequence\n";
  return kExitInvalid;
}

int Usage(const std::string& text, const std::string& error = "") {
  if (!error.empty()) {
    std::cerr << "rote: " << error << "\n\n" << text << ClientFlagsHelp();
    return kExitUsage;
  }
  std::cout << text << ClientFlagsHelp();
  return kExitOk;
}

// Parses flags for a client subcommand and the client options they give; on --help or a usage
// error (a bad flag, a --tls-ca that is missing or not PEM), prints and sets *exit_code.
std::optional<ParsedFlags> Parse(const Args& args, FlagSpec spec, const std::string& usage,
                                 int* exit_code, ClientOptions* client_options) {
  AddClientFlags(&spec);
  // Every argument of a client command ends up in a proto string field (names, request ids,
  // etags, comments, file names), which must be UTF-8; refuse other bytes here, naming the
  // argument, rather than as an INTERNAL error from inside protobuf.
  for (size_t i = 0; i < args.size(); ++i) {
    if (auto refused = RejectNonUtf8(args[i], "argument " + std::to_string(i + 1))) {
      *exit_code = *refused;
      return std::nullopt;
    }
  }
  auto flags = ParseFlags(args, spec);
  if (!flags.ok()) {
    *exit_code = Usage(usage, std::string(flags.status().message()));
    return std::nullopt;
  }
  if (flags->Has("help")) {
    *exit_code = Usage(usage);
    return std::nullopt;
  }
  absl::StatusOr<ClientOptions> options = ClientOptionsFrom(*flags);
  if (!options.ok()) {
    *exit_code = Usage(usage, std::string(options.status().message()));
    return std::nullopt;
  }
  *client_options = *std::move(options);
  return std::move(*flags);
}

// --- lists ----------------------------------------------------------------------------------

const char kListFlagsHelp[] =
    "List flags (every list; rows come oldest first):\n"
    "  --page-size N       rows per page (default 50, at most 1000)\n"
    "  --page-token T      the page after the one that printed `next page: --page-token T`\n"
    "  --all               follow the page tokens to the end\n";

void AddListFlags(FlagSpec* spec) {
  spec->with_value.insert({"page-size", "page-token"});
  spec->boolean.insert("all");
}

// Lists one page (the one --page-token names, or the first) or, with --all, every page from
// there to the end into `out`; its next_page_token is the one of the last page fetched.
template <typename Req, typename Resp, typename Call>
grpc::Status ListPages(const Client& client, const ParsedFlags& flags, Req req, Resp* out, Call call) {
  req.set_page_size(std::atoi(flags.GetOr("page-size", "0").c_str()));
  req.set_page_token(flags.GetOr("page-token", ""));
  for (;;) {
    auto ctx = client.Context();
    Resp page;
    grpc::Status st = call(ctx.get(), req, &page);
    if (!st.ok()) return st;
    out->MergeFrom(page);
    out->set_next_page_token(page.next_page_token());
    if (!flags.Has("all") || page.next_page_token().empty()) return grpc::Status::OK;
    req.set_page_token(page.next_page_token());
  }
}

// A list's table, then the flag that reads the next page when there is one (--json has it as
// next_page_token).
void PrintListPage(const Table& table, const std::string& next_page_token) {
  table.Print(std::cout);
  if (!next_page_token.empty()) std::cout << "next page: --page-token " << next_page_token << "\n";
}

std::string Time(const google::protobuf::Timestamp& t) { return UtcMillisText(t.seconds(), t.nanos()); }

std::string Short(const std::string& digest) {
  // "sha256:" + 12 hex digits is enough for people; --json has the whole digest.
  return digest.size() > 19 ? digest.substr(0, 19) : digest;
}

std::string StateName(rote::v1::RunState s) {
  std::string n = rote::v1::RunState_Name(s);
  return n.rfind("RUN_STATE_", 0) == 0 ? absl::AsciiStrToLower(n.substr(10)) : n;
}
std::string ReviewName(rote::v1::ReviewState s) {
  std::string n = rote::v1::ReviewState_Name(s);
  return n.rfind("REVIEW_STATE_", 0) == 0 ? absl::AsciiStrToLower(n.substr(13)) : n;
}
std::string KindName(rote::v1::ArtifactKind k) {
  switch (k) {
    case rote::v1::ARTIFACT_KIND_LUA_FUNCTION: return "lua";
    case rote::v1::ARTIFACT_KIND_RE2_PATTERN: return "re2";
    default: return "-";
  }
}

// Accepts "runs/abc" or "abc"; a digest as the CLI prints it ("sha256:<hex>", whole or the 12
// hex digits of a listing) names the resource "<collection>/<hex>"; the server resolves a
// prefix of 8 or more hex digits.
std::string Qualify(const std::string& collection, const std::string& id) {
  if (id.rfind(collection + "/", 0) == 0) return id;
  constexpr std::string_view kDigestPrefix = "sha256:";
  if (id.rfind(kDigestPrefix, 0) == 0) return collection + "/" + id.substr(kDigestPrefix.size());
  return collection + "/" + id;
}

void PrintBlueprint(const rote::v1::Blueprint& b) {
  PrintFields(std::cout, {{"name", b.name()},
                          {"digest", b.digest()},
                          {"blueprint", absl::StrCat(b.display_name(), " ", b.version())},
                          {"created", Time(b.create_time())}});
  if (b.generation_points_size() > 0) {
    std::cout << "\n";
    Table t({"GENERATION POINT", "KIND", "SPEC", "LIVE REVISION"});
    for (const auto& g : b.generation_points()) {
      std::string bound = "none";
      for (const auto& bd : b.bindings())
        if (bd.generation_point() == g.name())
          bound = absl::StrCat(bd.revision(), " (", Short(bd.artifact_digest()), ")");
      t.Add({g.name(), KindName(g.kind()), Short(g.spec_digest()), bound});
    }
    t.Print(std::cout);
  }
}

void PrintRun(const rote::v1::Run& r) {
  std::vector<std::pair<std::string, std::string>> f = {
      {"name", r.name()},
      {"state", StateName(r.state())},
      {"blueprint", r.blueprint()},
      {"input", absl::StrCat(r.input_digest(), " (", r.input_size_bytes(), " bytes)")},
      {"output", r.output_digest().empty() ? "-" : absl::StrCat(r.output_digest(), " (", r.output_size_bytes(), " bytes)")},
      {"steps", absl::StrCat(r.step_count())},
      {"submitter", r.submitter()},
      {"created", Time(r.create_time())},
      {"ended", Time(r.end_time())}};
  if (!r.unreviewed_allowed_by().empty()) {
    std::string pending;
    for (const auto& b : r.bindings())
      if (b.source() == "pending") absl::StrAppend(&pending, pending.empty() ? "" : ", ", b.generation_point(), " ", Short(b.artifact_digest()));
    f.push_back({"unreviewed code", absl::StrCat(pending, " (allowed by ", r.unreviewed_allowed_by(), ")")});
  }
  if (!r.error().empty()) f.push_back({"error", r.error()});
  PrintFields(std::cout, f);
  if (!r.output_json().empty()) std::cout << "\n" << r.output_json() << "\n";
}

void PrintArtifact(const rote::v1::Artifact& a) {
  PrintFields(std::cout, {{"name", a.name()},
                          {"generation point", absl::StrCat(a.generation_point(), " revision ", a.revision())},
                          {"kind", KindName(a.kind())},
                          {"state", ReviewName(a.state())},
                          {"live", a.live() ? "yes: runs use this revision" : "no"},
                          {"etag", a.etag()},
                          {"author", a.author()},
                          {"model", a.provenance().model_digest().empty() ? "-" : a.provenance().model_digest()},
                          {"created", Time(a.create_time())}});
  std::cout << "\n" << a.source() << (a.source().empty() || a.source().back() == '\n' ? "" : "\n");
  if (!a.validation_report_json().empty()) std::cout << "\nvalidation: " << a.validation_report_json() << "\n";
  for (const auto& r : a.reviews())
    std::cout << "review: " << ReviewName(r.decision()) << " by " << r.principal() << " at "
              << Time(r.time()) << (r.comment().empty() ? "" : ": " + r.comment()) << "\n";
}

// --- health and api -------------------------------------------------------------------------

const char kHealthUsage[] =
    "Usage: rote health [--service NAME]\n"
    "Asks the server's standard gRPC health service; prints SERVING or NOT_SERVING.\n"
    "Exit code 0 only when SERVING.\n\n";

const char kApiUsage[] =
    "Usage: rote api\n"
    "Lists the services and methods the server exposes, over gRPC server reflection.\n\n";

}  // namespace

int CmdHealth(const Args& args) {
  int code = 0;
  ClientOptions client_options;
  auto flags = Parse(args, {{"service"}, {}}, kHealthUsage, &code, &client_options);
  if (!flags) return code;
  Client client(client_options);
  grpc::health::v1::Health::Stub stub(client.channel());
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(flags->GetOr("service", ""));
  grpc::health::v1::HealthCheckResponse resp;
  auto ctx = client.Context();
  grpc::Status st = stub.Check(ctx.get(), req, &resp);
  if (!st.ok()) return client.Fail(st, "health check");
  if (client.options().json) {
    Client::PrintJson(resp, std::cout);
  } else {
    std::cout << grpc::health::v1::HealthCheckResponse::ServingStatus_Name(resp.status()) << "\n";
  }
  return resp.status() == grpc::health::v1::HealthCheckResponse::SERVING ? kExitOk : kExitFailure;
}

int CmdApi(const Args& args) {
  int code = 0;
  ClientOptions client_options;
  auto flags = Parse(args, {}, kApiUsage, &code, &client_options);
  if (!flags) return code;
  Client client(client_options);
  auto services = ListServicesByReflection(client.channel(), client.options().token);
  if (!services.ok()) {
    return client.Fail(grpc::Status(static_cast<grpc::StatusCode>(services.status().code()),
                                    std::string(services.status().message())),
                       "listing the API");
  }
  for (const auto& s : *services) {
    std::cout << s.name << "\n";
    for (const auto& m : s.methods) std::cout << "  " << m << "\n";
  }
  return kExitOk;
}

// --- blueprints ------------------------------------------------------------------------------

int CmdBlueprints(const Args& args) {
  static const std::string usage =
      "Usage: rote blueprints <command>\n"
      "  register FILE.lua [--lockfile FILE]  register a blueprint (and its lockfile; default:\n"
      "                                       FILE.lock beside it when present)\n"
      "  get NAME                             show a blueprint: blueprints/<digest> or its name\n"
      "  list [--name NAME] [list flags]      list blueprints, oldest first\n"
      "  lock NAME [--write FILE] [--skeleton]\n"
      "                                       print (or write) the lockfile of the live revisions;\n"
      "                                       --skeleton: entries to fill in for points without one\n\n" +
      std::string(kListFlagsHelp) + "\n";
  int code = 0;
  ClientOptions client_options;
  FlagSpec spec{{"lockfile", "name", "write"}, {"skeleton"}};
  AddListFlags(&spec);
  auto flags = Parse(args, spec, usage, &code, &client_options);
  if (!flags) return code;
  if (flags->positionals.empty()) return Usage(usage, "missing command");
  const std::string cmd = flags->positionals[0];
  Client client(client_options);
  rote::v1::BlueprintService::Stub stub(client.channel());
  auto ctx = client.Context();

  if (cmd == "register") {
    if (flags->positionals.size() != 2) return Usage(usage, "register needs FILE.lua");
    const std::string path = flags->positionals[1];
    rote::v1::RegisterBlueprintRequest req;
    std::string error;
    const int64_t max_bytes = client.options().max_message_bytes;
    if (!ReadWholeFile(path, max_bytes, req.mutable_source(), &error)) return Usage(usage, error);
    if (auto exit_code = RejectNonUtf8(req.source(), path)) return *exit_code;
    std::string lock_path = flags->GetOr("lockfile", "");
    if (lock_path.empty()) {
      std::string candidate = path.size() > 4 && path.substr(path.size() - 4) == ".lua"
                                  ? path.substr(0, path.size() - 4) + ".lock" : path + ".lock";
      // The lockfile beside the source is optional; one that is there must read like any other.
      std::error_code ec;
      if (std::filesystem::exists(candidate, ec)) lock_path = candidate;
    }
    if (!lock_path.empty()) {
      if (!ReadWholeFile(lock_path, max_bytes, req.mutable_lockfile(), &error)) return Usage(usage, error);
      if (auto exit_code = RejectNonUtf8(req.lockfile(), lock_path)) return *exit_code;
    }
    req.set_filename(path);
    rote::v1::Blueprint resp;
    grpc::Status st = stub.RegisterBlueprint(ctx.get(), req, &resp);
    if (!st.ok()) return client.Fail(st, "registering " + path);
    if (client.options().json) Client::PrintJson(resp, std::cout); else PrintBlueprint(resp);
    return kExitOk;
  }
  if (cmd == "get") {
    if (flags->positionals.size() != 2) return Usage(usage, "get needs NAME");
    rote::v1::GetBlueprintRequest req;
    req.set_name(Qualify("blueprints", flags->positionals[1]));
    rote::v1::Blueprint resp;
    grpc::Status st = stub.GetBlueprint(ctx.get(), req, &resp);
    if (!st.ok()) return client.Fail(st, "getting " + req.name());
    if (client.options().json) Client::PrintJson(resp, std::cout); else PrintBlueprint(resp);
    return kExitOk;
  }
  if (cmd == "list") {
    rote::v1::ListBlueprintsRequest req;
    req.set_display_name(flags->GetOr("name", ""));
    rote::v1::ListBlueprintsResponse resp;
    grpc::Status st = ListPages(client, *flags, req, &resp, [&](auto* c, const auto& r, auto* p) {
      return stub.ListBlueprints(c, r, p);
    });
    if (!st.ok()) return client.Fail(st, "listing blueprints");
    if (client.options().json) { Client::PrintJson(resp, std::cout); return kExitOk; }
    // List items carry no sources (rote blueprints get prints one); the size says how large.
    Table t({"NAME", "BLUEPRINT", "VERSION", "POINTS", "SOURCE BYTES", "CREATED"});
    for (const auto& b : resp.blueprints())
      t.Add({Short(b.digest()), b.display_name(), b.version(), absl::StrCat(b.generation_points_size()),
             absl::StrCat(b.source_size_bytes()), Time(b.create_time())});
    PrintListPage(t, resp.next_page_token());
    return kExitOk;
  }
  if (cmd == "lock") {
    if (flags->positionals.size() != 2) return Usage(usage, "lock needs NAME");
    rote::v1::LockBlueprintRequest req;
    req.set_name(Qualify("blueprints", flags->positionals[1]));
    req.set_skeleton(flags->Has("skeleton"));
    rote::v1::LockBlueprintResponse resp;
    grpc::Status st = stub.LockBlueprint(ctx.get(), req, &resp);
    if (!st.ok()) return client.Fail(st, "locking " + req.name());
    if (!resp.missing().empty() && !client.options().json) {
      std::cerr << "rote: no live approved revision for: " << absl::StrJoin(resp.missing(), ", ")
                << (req.skeleton() ? " (entries to fill in are written)" : " (not locked; --skeleton writes entries to fill in)")
                << "\n";
    }
    if (auto out = flags->Get("write")) {
      std::ofstream f(*out, std::ios::binary);
      f << resp.lockfile();
      if (!f) { std::cerr << "rote: cannot write " << *out << "\n"; return kExitFailure; }
      std::cout << "wrote " << *out << "\n";
    } else if (client.options().json) {
      Client::PrintJson(resp, std::cout);
    } else {
      std::cout << resp.lockfile();
    }
    return kExitOk;
  }
  return Usage(usage, "unknown command `" + cmd + "`");
}

// --- runs ------------------------------------------------------------------------------------

namespace {
// Reads one value of `run` through ReadRunPayload (an empty digest: its output) and reassembles
// the chunks; DATA_LOSS unless they come in order and hash to the digest asked for (or, for the
// output, to the digest the server named).
grpc::Status ReadRunPayload(const Client& client, rote::v1::RunService::Stub& stub, const std::string& run,
                            const std::string& digest, std::string* out) {
  auto ctx = client.Context(/*streaming=*/true);
  rote::v1::ReadRunPayloadRequest req;
  req.set_name(run);
  req.set_digest(digest);
  auto reader = stub.ReadRunPayload(ctx.get(), req);
  rote::v1::RunPayloadChunk chunk;
  std::string named = digest;
  bool in_order = true;
  out->clear();
  while (reader->Read(&chunk)) {
    if (named.empty()) named = chunk.digest();
    if (chunk.offset() != static_cast<int64_t>(out->size()) || chunk.digest() != named) in_order = false;
    out->append(chunk.data());
  }
  grpc::Status st = reader->Finish();
  if (!st.ok()) return st;
  if (!in_order || named.empty() || orchestrator::offline::Sha256Digest(*out) != named) {
    return grpc::Status(grpc::StatusCode::DATA_LOSS,
                        absl::StrCat("the ", out->size(), " bytes received for ", run, " do not hash to ",
                                     named.empty() ? std::string("a digest") : named,
                                     "; they were damaged in transit or by the server; try again"));
  }
  return grpc::Status::OK;
}

// A run whose output the server left out (too large to travel inline) gets it read in chunks,
// so it prints the same whatever its size.
grpc::Status CompleteOutput(const Client& client, rote::v1::RunService::Stub& stub, rote::v1::Run* run) {
  if (!run->output_omitted()) return grpc::Status::OK;
  grpc::Status st = ReadRunPayload(client, stub, run->name(), run->output_digest(), run->mutable_output_json());
  if (st.ok()) run->set_output_omitted(false);
  return st;
}

int WatchRun(Client& client, const std::string& name) {
  rote::v1::RunService::Stub stub(client.channel());
  auto ctx = client.Context(/*streaming=*/true);
  rote::v1::WatchRunRequest req;
  req.set_name(name);
  auto reader = stub.WatchRun(ctx.get(), req);
  rote::v1::RunEvent ev;
  rote::v1::RunState last = rote::v1::RUN_STATE_UNSPECIFIED;
  while (reader->Read(&ev)) {
    if (client.options().json) { Client::PrintJson(ev, std::cout); }
    switch (ev.event_case()) {
      case rote::v1::RunEvent::kState:
        last = ev.state();
        if (!client.options().json) std::cout << "state: " << StateName(ev.state()) << "\n";
        break;
      case rote::v1::RunEvent::kGenerationProgress:
        if (!client.options().json) std::cout << "generation: " << ev.generation_progress() << "\n";
        break;
      case rote::v1::RunEvent::kStep:
        if (!client.options().json)
          std::cout << "step " << ev.step().index() << ": " << ev.step().generation_point() << " "
                    << Short(ev.step().input_digest()) << " -> " << Short(ev.step().output_digest()) << "\n";
        break;
      case rote::v1::RunEvent::kLog:
        if (!client.options().json) std::cout << "log: " << ev.log() << "\n";
        break;
      default: break;
    }
    // Each event as it arrives, also when stdout is a pipe (where it is block-buffered).
    std::cout.flush();
  }
  grpc::Status st = reader->Finish();
  if (!st.ok()) return client.Fail(st, "watching " + name);
  if (last != rote::v1::RUN_STATE_SUCCEEDED) return kExitFailure;
  if (!client.options().json) {
    std::string output;
    st = ReadRunPayload(client, stub, name, "", &output);
    if (!st.ok()) return client.Fail(st, "reading the output of " + name);
    std::cout << "\n" << output << "\n";
  }
  return kExitOk;
}
}  // namespace

int CmdRuns(const Args& args) {
  static const std::string usage =
      "Usage: rote runs <command>\n"
      "  submit BLUEPRINT (--input JSON | --input-file FILE) [--request-id ID]\n"
      "         [--allow-generation [--generation-retry N]] [--allow-pending] [--watch]\n"
      "                       submit a run; BLUEPRINT is blueprints/<digest> or a name;\n"
      "                       --generation-retry N asks the model again for points whose\n"
      "                       generation failed (N = 1 for the first retry, 2 for the next)\n"
      "  get RUN              show a run and its output\n"
      "  list [--blueprint B] [--state pending|running|succeeded|failed|cancelled] [list flags]\n"
      "  watch RUN            stream a run's events until it ends (exit 0 if it succeeded)\n"
      "  replay RUN           re-execute with the recorded bindings and compare every step\n"
      "  cancel RUN           cancel a pending or running run\n"
      "  steps RUN [--max-value-bytes N] [list flags]\n"
      "                       the run's journaled steps in order with the values that went in\n"
      "                       and out (inline up to N bytes, default 4096; larger ones by digest,\n"
      "                       read with --json's digests and ReadRunPayload)\n\n" +
      std::string(kListFlagsHelp) + "\n";
  int code = 0;
  ClientOptions client_options;
  FlagSpec spec{{"input", "input-file", "request-id", "blueprint", "state", "max-value-bytes", "generation-retry"},
                {"allow-generation", "allow-pending", "watch"}};
  AddListFlags(&spec);
  auto flags = Parse(args, spec, usage, &code, &client_options);
  if (!flags) return code;
  if (flags->positionals.empty()) return Usage(usage, "missing command");
  const std::string cmd = flags->positionals[0];
  Client client(client_options);
  rote::v1::RunService::Stub stub(client.channel());
  auto ctx = client.Context();
  auto need_name = [&]() -> std::optional<std::string> {
    if (flags->positionals.size() != 2) return std::nullopt;
    return Qualify("runs", flags->positionals[1]);
  };

  if (cmd == "submit") {
    if (flags->positionals.size() != 2) return Usage(usage, "submit needs BLUEPRINT");
    rote::v1::SubmitRunRequest req;
    req.set_blueprint(Qualify("blueprints", flags->positionals[1]));
    if (auto in = flags->Get("input")) {
      req.set_input_json(*in);
      if (auto exit_code = RejectNonUtf8(req.input_json(), "--input")) return *exit_code;
    } else if (auto file = flags->Get("input-file")) {
      std::string error;
      if (!ReadWholeFile(*file, client.options().max_message_bytes, req.mutable_input_json(), &error))
        return Usage(usage, error);
      if (auto exit_code = RejectNonUtf8(req.input_json(), *file)) return *exit_code;
    } else {
      return Usage(usage, "submit needs --input JSON or --input-file FILE");
    }
    req.set_request_id(flags->GetOr("request-id", ""));
    req.mutable_policy()->set_allow_generation(flags->Has("allow-generation"));
    req.mutable_policy()->set_allow_pending(flags->Has("allow-pending"));
    req.mutable_policy()->set_generation_retry(std::atoi(flags->GetOr("generation-retry", "0").c_str()));
    rote::v1::Run resp;
    grpc::Status st = stub.SubmitRun(ctx.get(), req, &resp);
    if (!st.ok()) return client.Fail(st, "submitting a run of " + req.blueprint());
    if (flags->Has("watch")) {
      if (!client.options().json) std::cout << "run: " << resp.name() << "\n" << std::flush;
      return WatchRun(client, resp.name());
    }
    st = CompleteOutput(client, stub, &resp);
    if (!st.ok()) return client.Fail(st, "reading the output of " + resp.name());
    if (client.options().json) Client::PrintJson(resp, std::cout); else PrintRun(resp);
    return kExitOk;
  }
  if (cmd == "get" || cmd == "cancel") {
    auto name = need_name();
    if (!name) return Usage(usage, cmd + " needs RUN");
    rote::v1::Run resp;
    grpc::Status st;
    if (cmd == "get") {
      rote::v1::GetRunRequest req;
      req.set_name(*name);
      st = stub.GetRun(ctx.get(), req, &resp);
    } else {
      rote::v1::CancelRunRequest req;
      req.set_name(*name);
      st = stub.CancelRun(ctx.get(), req, &resp);
    }
    if (!st.ok()) return client.Fail(st, cmd + " " + *name);
    st = CompleteOutput(client, stub, &resp);
    if (!st.ok()) return client.Fail(st, "reading the output of " + *name);
    if (client.options().json) Client::PrintJson(resp, std::cout); else PrintRun(resp);
    return kExitOk;
  }
  if (cmd == "list") {
    rote::v1::ListRunsRequest req;
    if (auto b = flags->Get("blueprint")) req.set_blueprint(Qualify("blueprints", *b));
    if (auto s = flags->Get("state")) {
      rote::v1::RunState state;
      if (!rote::v1::RunState_Parse("RUN_STATE_" + absl::AsciiStrToUpper(*s), &state))
        return Usage(usage, "unknown state `" + *s + "`");
      req.set_state(state);
    }
    rote::v1::ListRunsResponse resp;
    grpc::Status st = ListPages(client, *flags, req, &resp, [&](auto* c, const auto& r, auto* p) {
      return stub.ListRuns(c, r, p);
    });
    if (!st.ok()) return client.Fail(st, "listing runs");
    if (client.options().json) { Client::PrintJson(resp, std::cout); return kExitOk; }
    Table t({"RUN", "STATE", "BLUEPRINT", "STEPS", "OUTPUT", "BYTES", "CREATED"});
    for (const auto& r : resp.runs())
      t.Add({r.name(), StateName(r.state()), r.blueprint(), absl::StrCat(r.step_count()),
             r.output_digest().empty() ? "-" : Short(r.output_digest()),
             r.output_digest().empty() ? "-" : absl::StrCat(r.output_size_bytes()), Time(r.create_time())});
    PrintListPage(t, resp.next_page_token());
    return kExitOk;
  }
  if (cmd == "steps") {
    auto name = need_name();
    if (!name) return Usage(usage, "steps needs RUN");
    rote::v1::ListRunStepsRequest req;
    req.set_name(*name);
    req.set_max_value_bytes(std::atoll(flags->GetOr("max-value-bytes", "0").c_str()));
    rote::v1::ListRunStepsResponse resp;
    grpc::Status st = ListPages(client, *flags, req, &resp, [&](auto* c, const auto& r, auto* p) {
      return stub.ListRunSteps(c, r, p);
    });
    if (!st.ok()) return client.Fail(st, "listing the steps of " + *name);
    if (client.options().json) { Client::PrintJson(resp, std::cout); return kExitOk; }
    auto value = [](bool omitted, const std::string& json, int64_t size, const std::string& digest) {
      return omitted ? absl::StrCat("(", size, " bytes, left out: ", digest, ")") : json;
    };
    for (const auto& s : resp.steps()) {
      std::cout << "step " << s.index() << "  " << s.generation_point() << "  " << Short(s.artifact_digest()) << "\n"
                << "  in:  " << value(s.input_omitted(), s.input_json(), s.input_size_bytes(), s.input_digest()) << "\n"
                << "  out: " << value(s.output_omitted(), s.output_json(), s.output_size_bytes(), s.output_digest())
                << "\n";
    }
    if (!resp.next_page_token().empty()) std::cout << "next page: --page-token " << resp.next_page_token() << "\n";
    return kExitOk;
  }
  if (cmd == "watch") {
    auto name = need_name();
    if (!name) return Usage(usage, "watch needs RUN");
    return WatchRun(client, *name);
  }
  if (cmd == "replay") {
    auto name = need_name();
    if (!name) return Usage(usage, "replay needs RUN");
    rote::v1::ReplayRunRequest req;
    req.set_name(*name);
    rote::v1::ReplayRunResponse resp;
    grpc::Status st = stub.ReplayRun(ctx.get(), req, &resp);
    if (!st.ok()) return client.Fail(st, "replaying " + *name);
    if (client.options().json) {
      Client::PrintJson(resp, std::cout);
    } else if (resp.matched()) {
      std::cout << "replay matched: " << resp.steps_compared() << " steps, output " << resp.output_digest() << "\n";
    } else {
      auto value = [](bool omitted, const std::string& json, const std::string& digest) {
        return omitted ? absl::StrCat("(too large to show: ", digest, ")") : json;
      };
      std::cout << "replay MISMATCH at "
                << (resp.first_mismatch_step() < 0 ? std::string("the output") : absl::StrCat("step ", resp.first_mismatch_step()))
                << "\n  recorded: " << value(resp.recorded_omitted(), resp.recorded_json(), resp.recorded_digest())
                << "\n  replayed: " << value(resp.replayed_omitted(), resp.replayed_json(), resp.replayed_digest()) << "\n";
    }
    return resp.matched() ? kExitOk : kExitFailure;
  }
  return Usage(usage, "unknown command `" + cmd + "`");
}

// --- artifacts -------------------------------------------------------------------------------

int CmdArtifacts(const Args& args) {
  static const std::string usage =
      "Usage: rote artifacts <command>\n"
      "  list [--point NAME] [--state pending|approved|rejected] [list flags]\n"
      "  get NAME                        source, provenance, validation report, reviews;\n"
      "                                  NAME is artifacts/<digest> (or 8+ of its hex digits, e.g.\n"
      "                                  the sha256:<12 hex> a list prints) or\n"
      "                                  artifacts/<point>/revisions/<n>; POINT is <blueprint>/<point>\n"
      "                                  or a point name only one blueprint declares\n"
      "  revisions POINT [list flags]    the revision history of a generation point\n"
      "  approve NAME --etag ETAG [--comment TEXT]\n"
      "                                  approve (and, unless the server promotes manually, make live)\n"
      "  reject NAME --etag ETAG --comment TEXT\n"
      "                                  reject; a rejected live revision gives way to the previous\n"
      "                                  approved one, or leaves the point without one\n"
      "  promote NAME [--comment TEXT]   make an approved revision the live one\n"
      "  propose POINT --source-file F [--options JSON] [--blueprint B] [--comment TEXT]\n"
      "                                  offer your own code for a point; it is validated against\n"
      "                                  the point's examples and waits for another reviewer\n"
      "  audit [--point POINT] [--artifact DIGEST] [list flags]\n"
      "                                  approvals, rejections, promotions, proposals, unreviewed runs\n"
      "  diff POINT --to N [--from M|live]\n"
      "                                  unified diff between two revisions (default: N-1; live: the\n"
      "                                  point's live revision)\n"
      "  regenerate NAME                 re-derive from the recorded request; report if bytes match\n"
      "  try NAME --input JSON           run a revision on one input (rote artifacts try --help)\n"
      "  backtest NAME                   re-run the point's recorded calls through a revision\n"
      "  backtest-result NAME            a revision's stored backtest\n\n" +
      std::string(kListFlagsHelp) + "\n";
  Args globals;
  if (size_t first = TakeGlobalFlags(args, &globals); first < args.size() &&
      (args[first] == "try" || args[first] == "backtest" || args[first] == "backtest-result")) {
    return CmdArtifactsTry(args);  // cmd_try.cc
  }
  int code = 0;
  ClientOptions client_options;
  FlagSpec spec{{"point", "state", "etag", "comment", "to", "from", "source-file", "options", "blueprint", "artifact"}, {}};
  AddListFlags(&spec);
  auto flags = Parse(args, spec, usage, &code, &client_options);
  if (!flags) return code;
  if (flags->positionals.empty()) return Usage(usage, "missing command");
  const std::string cmd = flags->positionals[0];
  Client client(client_options);
  rote::v1::ArtifactService::Stub stub(client.channel());
  auto ctx = client.Context();
  auto print_list = [&](const auto& artifacts, const std::string& next_page_token) {
    Table t({"ARTIFACT", "POINT", "REV", "KIND", "STATE", "LIVE", "AUTHOR", "SOURCE BYTES", "CREATED"});
    for (const auto& a : artifacts)
      t.Add({Short(a.digest()), a.generation_point(), absl::StrCat(a.revision()), KindName(a.kind()),
             ReviewName(a.state()), a.live() ? "live" : "-", a.author(), absl::StrCat(a.source_size_bytes()),
             Time(a.create_time())});
    PrintListPage(t, next_page_token);
  };

  if (cmd == "list") {
    rote::v1::ListArtifactsRequest req;
    req.set_generation_point(flags->GetOr("point", ""));
    if (auto s = flags->Get("state")) {
      rote::v1::ReviewState state;
      if (!rote::v1::ReviewState_Parse("REVIEW_STATE_" + absl::AsciiStrToUpper(*s), &state))
        return Usage(usage, "unknown state `" + *s + "`");
      req.set_state(state);
    }
    rote::v1::ListArtifactsResponse resp;
    grpc::Status st = ListPages(client, *flags, req, &resp, [&](auto* c, const auto& r, auto* p) {
      return stub.ListArtifacts(c, r, p);
    });
    if (!st.ok()) return client.Fail(st, "listing artifacts");
    if (client.options().json) Client::PrintJson(resp, std::cout); else print_list(resp.artifacts(), resp.next_page_token());
    return kExitOk;
  }
  if (cmd == "revisions") {
    if (flags->positionals.size() != 2) return Usage(usage, "revisions needs POINT");
    rote::v1::ListRevisionsRequest req;
    req.set_generation_point(flags->positionals[1]);
    rote::v1::ListRevisionsResponse resp;
    grpc::Status st = ListPages(client, *flags, req, &resp, [&](auto* c, const auto& r, auto* p) {
      return stub.ListRevisions(c, r, p);
    });
    if (!st.ok()) return client.Fail(st, "listing revisions of " + req.generation_point());
    if (client.options().json) Client::PrintJson(resp, std::cout); else print_list(resp.revisions(), resp.next_page_token());
    return kExitOk;
  }
  if (cmd == "get" || cmd == "approve" || cmd == "reject" || cmd == "regenerate") {
    if (flags->positionals.size() != 2) return Usage(usage, cmd + " needs NAME");
    const std::string name = Qualify("artifacts", flags->positionals[1]);
    if (cmd == "get") {
      rote::v1::GetArtifactRequest req;
      req.set_name(name);
      rote::v1::Artifact resp;
      grpc::Status st = stub.GetArtifact(ctx.get(), req, &resp);
      if (!st.ok()) return client.Fail(st, "getting " + name);
      if (client.options().json) Client::PrintJson(resp, std::cout); else PrintArtifact(resp);
      return kExitOk;
    }
    if (cmd == "regenerate") {
      rote::v1::RegenerateArtifactRequest req;
      req.set_name(name);
      rote::v1::RegenerateArtifactResponse resp;
      auto sctx = client.Context(/*streaming=*/true);  // generation can take minutes
      grpc::Status st = stub.RegenerateArtifact(sctx.get(), req, &resp);
      if (!st.ok()) return client.Fail(st, "regenerating " + name);
      if (client.options().json) Client::PrintJson(resp, std::cout);
      else std::cout << (resp.matched() ? "regeneration matched: " : "regeneration DIFFERS: ")
                     << resp.original_digest() << " vs " << resp.regenerated_digest() << "\n";
      return resp.matched() ? kExitOk : kExitFailure;
    }
    rote::v1::ReviewArtifactRequest req;
    req.set_name(name);
    req.set_decision(cmd == "approve" ? rote::v1::REVIEW_STATE_APPROVED : rote::v1::REVIEW_STATE_REJECTED);
    if (!flags->Get("etag")) return Usage(usage, cmd + " needs --etag (from `rote artifacts get`)");
    req.set_etag(*flags->Get("etag"));
    req.set_comment(flags->GetOr("comment", ""));
    if (auto exit_code = RejectNonUtf8(req.comment(), "--comment")) return *exit_code;
    if (cmd == "reject" && req.comment().empty()) return Usage(usage, "reject needs --comment saying why");
    rote::v1::Artifact resp;
    grpc::Status st = stub.ReviewArtifact(ctx.get(), req, &resp);
    if (!st.ok()) return client.Fail(st, cmd + " " + name);
    if (client.options().json) Client::PrintJson(resp, std::cout);
    else std::cout << name << ": " << ReviewName(resp.state()) << " (etag " << resp.etag() << ")\n";
    return kExitOk;
  }
  if (cmd == "promote") {
    if (flags->positionals.size() != 2) return Usage(usage, "promote needs NAME");
    rote::v1::PromoteRevisionRequest req;
    req.set_name(Qualify("artifacts", flags->positionals[1]));
    req.set_comment(flags->GetOr("comment", ""));
    if (auto exit_code = RejectNonUtf8(req.comment(), "--comment")) return *exit_code;
    rote::v1::Artifact resp;
    grpc::Status st = stub.PromoteRevision(ctx.get(), req, &resp);
    if (!st.ok()) return client.Fail(st, "promoting " + req.name());
    if (client.options().json) Client::PrintJson(resp, std::cout);
    else std::cout << resp.generation_point() << ": revision " << resp.revision() << " (" << resp.name() << ") is live\n";
    return kExitOk;
  }
  if (cmd == "propose") {
    if (flags->positionals.size() != 2 || !flags->Get("source-file")) {
      return Usage(usage, "propose needs POINT and --source-file FILE");
    }
    rote::v1::ProposeRevisionRequest req;
    req.set_generation_point(flags->positionals[1]);
    req.set_blueprint(flags->Has("blueprint") ? Qualify("blueprints", *flags->Get("blueprint")) : "");
    std::string error;
    const std::string path = *flags->Get("source-file");
    if (!ReadWholeFile(path, client.options().max_message_bytes, req.mutable_source(), &error)) return Usage(usage, error);
    if (auto exit_code = RejectNonUtf8(req.source(), path)) return *exit_code;
    req.set_options_json(flags->GetOr("options", ""));
    req.set_comment(flags->GetOr("comment", ""));
    if (auto exit_code = RejectNonUtf8(req.comment(), "--comment")) return *exit_code;
    rote::v1::Artifact resp;
    grpc::Status st = stub.ProposeRevision(ctx.get(), req, &resp);
    if (!st.ok()) return client.Fail(st, "proposing a revision of " + req.generation_point());
    if (client.options().json) Client::PrintJson(resp, std::cout);
    else std::cout << resp.generation_point() << ": proposed revision " << resp.revision() << " (" << resp.name()
                   << "), pending review\n";
    return kExitOk;
  }
  if (cmd == "audit") {
    rote::v1::ListAuditEntriesRequest req;
    req.set_generation_point(flags->GetOr("point", ""));
    req.set_artifact_digest(flags->GetOr("artifact", ""));
    rote::v1::ListAuditEntriesResponse resp;
    grpc::Status st = ListPages(client, *flags, req, &resp, [&](auto* c, const auto& r, auto* p) {
      return stub.ListAuditEntries(c, r, p);
    });
    if (!st.ok()) return client.Fail(st, "listing the audit log");
    if (client.options().json) { Client::PrintJson(resp, std::cout); return kExitOk; }
    Table t({"SEQ", "TIME", "PRINCIPAL", "ACTION", "POINT", "REV", "ARTIFACT", "DETAIL"});
    for (const auto& e : resp.entries())
      t.Add({absl::StrCat(e.sequence()), Time(e.time()), e.principal(), e.action(), e.generation_point(),
             absl::StrCat(e.revision()), Short(e.artifact_digest()),
             e.run().empty() ? e.detail() : absl::StrCat(e.run(), ": ", e.detail())});
    PrintListPage(t, resp.next_page_token());
    return kExitOk;
  }
  if (cmd == "diff") {
    if (flags->positionals.size() != 2 || !flags->Get("to")) return Usage(usage, "diff needs POINT and --to N");
    rote::v1::DiffRevisionsRequest req;
    req.set_generation_point(flags->positionals[1]);
    req.set_to_revision(std::atoll(flags->Get("to")->c_str()));
    const std::string from = flags->GetOr("from", "0");
    req.set_from_revision(from == "live" ? -1 : std::atoll(from.c_str()));
    rote::v1::DiffRevisionsResponse resp;
    grpc::Status st = stub.DiffRevisions(ctx.get(), req, &resp);
    if (!st.ok()) return client.Fail(st, "diffing " + req.generation_point());
    if (client.options().json) Client::PrintJson(resp, std::cout); else std::cout << resp.unified_diff();
    return kExitOk;
  }
  return Usage(usage, "unknown command `" + cmd + "`");
}

}  // namespace rote::cli
