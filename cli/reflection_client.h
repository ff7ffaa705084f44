// A client of the standard gRPC server reflection protocol (grpc.reflection.v1alpha), the one
// generic tools use. Debian's gRPC ships the server side without the .proto, so the messages
// are built from the descriptors that grpc++_reflection registers.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"

namespace rote::cli {

struct ReflectedService {
  std::string name;                  // "rote.v1.RunService"
  std::vector<std::string> methods;  // "SubmitRun(SubmitRunRequest) returns (Run)"
};

// Lists the services the server exposes, each with its methods, over reflection only.
absl::StatusOr<std::vector<ReflectedService>> ListServicesByReflection(
    const std::shared_ptr<grpc::Channel>& channel, const std::string& bearer_token);

}  // namespace rote::cli
