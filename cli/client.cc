#include "cli/client.h"

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/exit_codes.h"
#include "google/protobuf/util/json_util.h"

namespace rote::cli {

void AddClientFlags(FlagSpec* spec) {
  spec->with_value.insert({"server", "token", "tls-ca", "timeout"});
  spec->boolean.insert({"json", "help"});
}

const char* ClientFlagsHelp() {
  return "Client flags:\n"
         "  --server HOST:PORT  server address (default $ROTE_SERVER or 127.0.0.1:7878)\n"
         "  --token TOKEN       bearer token (default $ROTE_TOKEN)\n"
         "  --tls-ca FILE       use TLS, trusting this CA bundle\n"
         "  --timeout SECONDS   deadline of each call (default 30)\n"
         "  --json              print JSON instead of tables\n";
}

ClientOptions ClientOptionsFrom(const ParsedFlags& flags) {
  ClientOptions o;
  if (const char* env = std::getenv("ROTE_SERVER"); env && *env) o.server = env;
  if (const char* env = std::getenv("ROTE_TOKEN"); env && *env) o.token = env;
  if (auto v = flags.Get("server")) o.server = *v;
  if (auto v = flags.Get("token")) o.token = *v;
  if (auto v = flags.Get("tls-ca")) o.tls_ca_file = *v;
  if (auto v = flags.Get("timeout")) o.timeout = std::chrono::seconds(std::max(1, std::atoi(v->c_str())));
  o.json = flags.Has("json");
  return o;
}

bool ReadWholeFile(const std::string& path, std::string* out, std::string* error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = "cannot read " + path;
    return false;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

Client::Client(ClientOptions options) : options_(std::move(options)) {
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (!options_.tls_ca_file.empty()) {
    grpc::SslCredentialsOptions ssl;
    std::string error;
    if (!ReadWholeFile(options_.tls_ca_file, &ssl.pem_root_certs, &error)) {
      std::cerr << "rote: " << error << " (given to --tls-ca)\n";
    }
    creds = grpc::SslCredentials(ssl);
  } else {
    creds = grpc::InsecureChannelCredentials();
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetMaxSendMessageSize(64 << 20);
  channel_ = grpc::CreateCustomChannel(options_.server, creds, args);
}

std::unique_ptr<grpc::ClientContext> Client::Context(bool streaming) const {
  auto ctx = std::make_unique<grpc::ClientContext>();
  if (!options_.token.empty()) ctx->AddMetadata("authorization", "Bearer " + options_.token);
  if (!streaming) ctx->set_deadline(std::chrono::system_clock::now() + options_.timeout);
  return ctx;
}

int ExitCodeFor(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK: return kExitOk;
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED: return kExitUnavailable;
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::PERMISSION_DENIED: return kExitAuth;
    case grpc::StatusCode::NOT_FOUND: return kExitNotFound;
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::ABORTED:
    case grpc::StatusCode::ALREADY_EXISTS:
    case grpc::StatusCode::OUT_OF_RANGE: return kExitInvalid;
    case grpc::StatusCode::DATA_LOSS: return kExitDataLoss;
    default: return kExitInternal;
  }
}

int Client::Fail(const grpc::Status& status, std::string_view what) const {
  std::cerr << "rote: " << what << " failed: ";
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
      std::cerr << "cannot reach a rote server at " << options_.server << " ("
                << status.error_message() << ").\n"
                << "  Start one with `rote serve` (it listens on 127.0.0.1:7878 by default),\n"
                << "  or point at a running one with --server HOST:PORT or $ROTE_SERVER.\n";
      break;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      std::cerr << "no answer from " << options_.server << " within " << options_.timeout.count()
                << "s; raise --timeout or check the server's log.\n";
      break;
    case grpc::StatusCode::UNAUTHENTICATED:
      std::cerr << status.error_message()
                << "\n  Pass a token from the server's key file with --token or $ROTE_TOKEN.\n";
      break;
    case grpc::StatusCode::PERMISSION_DENIED:
      std::cerr << status.error_message()
                << "\n  Ask the server's operator for a token with that role.\n";
      break;
    default:
      std::cerr << status.error_message() << "\n";
  }
  return ExitCodeFor(status.error_code());
}

void Client::PrintJson(const google::protobuf::Message& message, std::ostream& out) {
  google::protobuf::util::JsonPrintOptions opts;
  opts.preserve_proto_field_names = true;
  opts.add_whitespace = true;
  std::string json;
  (void)google::protobuf::util::MessageToJsonString(message, &json, opts);
  out << json;
  if (json.empty() || json.back() != '\n') out << "\n";
}

}  // namespace rote::cli
