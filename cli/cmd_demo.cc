// `rote demo`: the README's main job on the embedded defaults.
#include <iostream>

#include "absl/strings/str_cat.h"
#include "cli/client.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/flags.h"
#include "cli/reflection_client.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "orchestrator/server.h"
#include "spdlog/spdlog.h"

namespace rote::cli {

namespace {
const char kUsage[] =
    "Usage: rote demo [--data DIR] [--blueprints DIR]\n"
    "Starts a server on a free loopback port with the data directory (default ./rote-data),\n"
    "checks its health over gRPC, lists its API over reflection, and shuts it down cleanly.\n";

std::string Health(Client& client) {
  grpc::health::v1::Health::Stub stub(client.channel());
  grpc::health::v1::HealthCheckRequest req;
  grpc::health::v1::HealthCheckResponse resp;
  auto ctx = client.Context();
  grpc::Status st = stub.Check(ctx.get(), req, &resp);
  if (!st.ok()) return absl::StrCat("error: ", st.error_message());
  return grpc::health::v1::HealthCheckResponse::ServingStatus_Name(resp.status());
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
  (*server)->Shutdown();
  std::cout << "server stopped cleanly\n";
  return kExitOk;
}

}  // namespace rote::cli
