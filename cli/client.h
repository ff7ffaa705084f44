// What every client subcommand shares: where the server is, the bearer token, output format,
// and turning a gRPC status into a message that says what to do plus an exit code.
#pragma once

#include <chrono>
#include <iosfwd>
#include <memory>
#include <string>

#include "cli/flags.h"
#include "google/protobuf/message.h"
#include "grpcpp/grpcpp.h"

namespace rote::cli {

inline constexpr char kDefaultServer[] = "127.0.0.1:7878";

// Flags every client subcommand accepts.
void AddClientFlags(FlagSpec* spec);
// The client flags' help text, appended to each subcommand's usage.
const char* ClientFlagsHelp();

struct ClientOptions {
  std::string server = kDefaultServer;
  std::string token;
  std::string tls_ca_file;  // when set, TLS with this CA bundle
  bool json = false;
  std::chrono::seconds timeout{30};
};

// From flags, then the environment (ROTE_SERVER, ROTE_TOKEN), then defaults.
ClientOptions ClientOptionsFrom(const ParsedFlags& flags);

class Client {
 public:
  explicit Client(ClientOptions options);

  const ClientOptions& options() const { return options_; }
  std::shared_ptr<grpc::Channel> channel() const { return channel_; }
  // A context with the bearer token and, for unary calls, the deadline.
  std::unique_ptr<grpc::ClientContext> Context(bool streaming = false) const;

  // Prints the error for `status` to stderr and returns the exit code.
  int Fail(const grpc::Status& status, std::string_view what) const;
  // Prints `message` as JSON (snake_case field names) on stdout.
  static void PrintJson(const google::protobuf::Message& message, std::ostream& out);

 private:
  ClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
};

int ExitCodeFor(grpc::StatusCode code);

// Reads a file whole; empty optional-like error text on failure.
bool ReadWholeFile(const std::string& path, std::string* out, std::string* error);

}  // namespace rote::cli
