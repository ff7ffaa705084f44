// What every client subcommand shares: where the server is, the bearer token, output format,
// and turning a gRPC status into a message that says what to do plus an exit code.
#pragma once

#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "cli/flags.h"
#include "google/protobuf/message.h"
#include "grpcpp/grpcpp.h"

namespace rote::cli {

inline constexpr char kDefaultServer[] = "127.0.0.1:7878";
// The largest message either way and the largest file the CLI reads (--max-message-bytes).
inline constexpr int64_t kDefaultMaxMessageBytes = 64 << 20;

// Flags every client subcommand accepts.
void AddClientFlags(FlagSpec* spec);
// The client flags' help text, appended to each subcommand's usage.
const char* ClientFlagsHelp();

struct ClientOptions {
  std::string server = kDefaultServer;
  std::string token;
  std::string tls_ca_file;  // when set, TLS with the CA bundle it held
  std::string tls_ca_pem;   // that bundle, read and checked by ClientOptionsFrom
  bool json = false;
  std::chrono::seconds timeout{30};
  int64_t max_message_bytes = kDefaultMaxMessageBytes;
};

// From flags, then the environment (ROTE_SERVER, ROTE_TOKEN), then defaults. A bad value or a
// --tls-ca that is missing or holds no PEM certificate is an error naming the flag (a usage error).
absl::StatusOr<ClientOptions> ClientOptionsFrom(const ParsedFlags& flags);

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

// The offset of the first byte that does not begin a valid UTF-8 sequence (overlong forms,
// surrogates and code points past U+10FFFF are invalid, as protobuf holds them), or nullopt.
std::optional<size_t> FirstInvalidUtf8(std::string_view text);

// Reads a file named on the command line whole: a regular file of at most max_bytes (a FIFO or
// /dev/zero would block or never end). False with the error text, naming the file, on failure.
bool ReadWholeFile(const std::string& path, int64_t max_bytes, std::string* out, std::string* error);

}  // namespace rote::cli
