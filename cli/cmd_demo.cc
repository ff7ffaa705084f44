// `rote demo`: the README's main job on the embedded defaults, through the gRPC API: start a
// server, register the blueprints that ship with rote, run their sample inputs, watch the runs,
// print the outputs, replay each run and report that the replay matched.
#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/flags.h"
#include "cli/reflection_client.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "orchestrator/server.h"
#include "rote/v1/blueprints.grpc.pb.h"
#include "rote/v1/runs.grpc.pb.h"
#include "spdlog/spdlog.h"

namespace rote::cli {

namespace {
const char kUsage[] =
    "Usage: rote demo [--data DIR] [--blueprints DIR]\n"
    "Starts a server on a free loopback port with the data directory (default ./rote-data),\n"
    "checks its health over gRPC and lists its API over reflection; then registers the\n"
    "blueprints that ship with rote (default ./blueprints: invoice_totals, access_log, contacts)\n"
    "with their lockfiles, submits each sample input, watches the run, prints the output,\n"
    "replays the run and checks that the replay matched. Exit 0 only when every run succeeded\n"
    "and every replay matched.\n";

// The blueprints the demo runs, in order; each is NAME.lua, NAME.lock, NAME.sample.json.
const char* const kShippedBlueprints[] = {"invoice_totals", "access_log", "contacts"};

std::string Health(Client& client) {
  grpc::health::v1::Health::Stub stub(client.channel());
  grpc::health::v1::HealthCheckRequest req;
  grpc::health::v1::HealthCheckResponse resp;
  auto ctx = client.Context();
  grpc::Status st = stub.Check(ctx.get(), req, &resp);
  if (!st.ok()) return absl::StrCat("error: ", st.error_message());
  return grpc::health::v1::HealthCheckResponse::ServingStatus_Name(resp.status());
}

std::string Indent(const std::string& canonical_json) {
  nlohmann::json j = nlohmann::json::parse(canonical_json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return canonical_json;
  std::string out = j.dump(2);
  std::string indented = "    ";
  for (char c : out) {
    indented.push_back(c);
    if (c == '\n') indented += "    ";
  }
  return indented;
}

// Registers, runs, watches and replays one shipped blueprint. False when anything failed.
bool RunOne(Client& client, const std::string& dir, const std::string& name) {
  const std::string base = dir + "/" + name;
  rote::v1::RegisterBlueprintRequest reg;
  std::string error;
  std::string sample;
  if (!ReadWholeFile(base + ".lua", kDefaultMaxMessageBytes, reg.mutable_source(), &error) ||
      !ReadWholeFile(base + ".lock", kDefaultMaxMessageBytes, reg.mutable_lockfile(), &error) ||
      !ReadWholeFile(base + ".sample.json", kDefaultMaxMessageBytes, &sample, &error)) {
    std::cerr << "rote demo: " << error << " (pass --blueprints DIR)\n";
    return false;
  }
  reg.set_filename(base + ".lua");
  rote::v1::BlueprintService::Stub blueprints(client.channel());
  rote::v1::RunService::Stub runs(client.channel());

  std::cout << "\n== " << name << "\n";
  rote::v1::Blueprint bp;
  {
    auto ctx = client.Context();
    grpc::Status st = blueprints.RegisterBlueprint(ctx.get(), reg, &bp);
    if (!st.ok()) {
      client.Fail(st, "registering " + base + ".lua");
      return false;
    }
  }
  std::cout << "registered " << bp.name() << " (" << bp.display_name() << " " << bp.version() << "), "
            << bp.generation_points_size() << " generation points bound by its lockfile:\n";
  for (const auto& b : bp.bindings()) {
    std::cout << "  " << b.generation_point() << " -> " << b.artifact_digest().substr(0, 19) << "...\n";
  }

  rote::v1::SubmitRunRequest submit;
  submit.set_blueprint(bp.name());
  submit.set_input_json(sample);
  rote::v1::Run run;
  const auto started = std::chrono::steady_clock::now();
  {
    auto ctx = client.Context();
    grpc::Status st = runs.SubmitRun(ctx.get(), submit, &run);
    if (!st.ok()) {
      client.Fail(st, "submitting " + name + ".sample.json");
      return false;
    }
  }
  std::cout << "submitted " << run.name() << " with " << name << ".sample.json; watching:\n";
  {
    auto ctx = client.Context(/*streaming=*/true);
    rote::v1::WatchRunRequest watch;
    watch.set_name(run.name());
    auto reader = runs.WatchRun(ctx.get(), watch);
    rote::v1::RunEvent ev;
    int steps = 0;
    while (reader->Read(&ev)) {
      switch (ev.event_case()) {
        case rote::v1::RunEvent::kState:
          std::cout << "  state " << rote::v1::RunState_Name(ev.state()) << "\n";
          break;
        case rote::v1::RunEvent::kStep:
          ++steps;
          std::cout << "  step " << ev.step().index() << ": " << ev.step().generation_point() << "\n";
          break;
        case rote::v1::RunEvent::kLog:
          std::cout << "  log  " << ev.log() << "\n";
          break;
        case rote::v1::RunEvent::kGenerationProgress:
          std::cout << "  generation " << ev.generation_progress() << "\n";
          break;
        default:
          break;
      }
    }
    grpc::Status st = reader->Finish();
    if (!st.ok()) {
      client.Fail(st, "watching " + run.name());
      return false;
    }
  }
  const double run_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  {
    rote::v1::GetRunRequest get;
    get.set_name(run.name());
    auto ctx = client.Context();
    grpc::Status st = runs.GetRun(ctx.get(), get, &run);
    if (!st.ok()) {
      client.Fail(st, "reading " + run.name());
      return false;
    }
  }
  if (run.state() != rote::v1::RUN_STATE_SUCCEEDED) {
    std::cerr << "rote demo: " << run.name() << " ended " << rote::v1::RunState_Name(run.state()) << ": "
              << run.error() << "\n";
    return false;
  }
  std::cout << "output (" << run.output_digest() << ", " << run.step_count() << " steps, "
            << static_cast<int64_t>(run_ms) << " ms from submit to the end of the watch):\n"
            << Indent(run.output_json()) << "\n";

  rote::v1::ReplayRunRequest replay_req;
  replay_req.set_name(run.name());
  rote::v1::ReplayRunResponse replay;
  {
    auto ctx = client.Context();
    grpc::Status st = runs.ReplayRun(ctx.get(), replay_req, &replay);
    if (!st.ok()) {
      client.Fail(st, "replaying " + run.name());
      return false;
    }
  }
  if (!replay.matched()) {
    std::cout << "replay MISMATCH at "
              << (replay.first_mismatch_step() < 0 ? std::string("the output")
                                                   : absl::StrCat("step ", replay.first_mismatch_step()))
              << "\n  recorded: " << replay.recorded_json() << "\n  replayed: " << replay.replayed_json() << "\n";
    return false;
  }
  std::cout << "replay matched: " << replay.steps_compared() << " steps compared, output "
            << replay.output_digest() << (replay.output_digest() == run.output_digest() ? " (identical)" : "")
            << "\n";
  return replay.output_digest() == run.output_digest();
}
}  // namespace

int CmdDemo(const Args& args) {
  auto flags = ParseFlags(args, {{"data", "blueprints"}, {"help"}});
  if (!flags.ok()) {
    std::cerr << "rote demo: " << flags.status().message() << "\n\n" << kUsage;
    return kExitUsage;
  }
  if (flags->Has("help")) {
    std::cout << kUsage;
    return kExitOk;
  }
  spdlog::set_level(spdlog::level::warn);
  orchestrator::ServerOptions opt;
  opt.listen = "127.0.0.1:0";
  opt.metrics_listen = "127.0.0.1:0";
  opt.data_dir = flags->GetOr("data", "rote-data");
  auto server = orchestrator::Server::Start(opt);
  if (!server.ok()) {
    std::cerr << "rote demo: cannot start the server: " << server.status().message() << "\n";
    return kExitFailure;
  }
  ClientOptions copt;
  copt.server = absl::StrCat("127.0.0.1:", (*server)->port());
  Client client(copt);
  std::cout << "== rote demo: server on " << copt.server << ", data in " << opt.data_dir << "\n";
  const std::string health = Health(client);
  std::cout << "health: " << health << "\n";
  if (health != "SERVING") return kExitFailure;

  auto services = ListServicesByReflection(client.channel(), "");
  if (!services.ok()) {
    std::cerr << "rote demo: reflection failed: " << services.status().message() << "\n";
    return kExitFailure;
  }
  std::cout << "API (over server reflection):\n";
  for (const auto& s : *services) {
    std::cout << "  " << s.name << "\n";
    for (const auto& m : s.methods) std::cout << "    " << m << "\n";
  }

  const std::string dir = flags->GetOr("blueprints", "blueprints");
  int failures = 0;
  for (const char* name : kShippedBlueprints) {
    if (!RunOne(client, dir, name)) ++failures;
  }
  (*server)->Shutdown();
  std::cout << "\nserver stopped cleanly\n";
  if (failures > 0) {
    std::cout << failures << " of " << std::size(kShippedBlueprints) << " blueprints failed\n";
    return kExitFailure;
  }
  std::cout << "all " << std::size(kShippedBlueprints) << " runs succeeded and replayed byte for byte\n";
  return kExitOk;
}

}  // namespace rote::cli
