#include "cli/client.h"

#include <cstdlib>
#include <iostream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cli/exit_codes.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/util/json_util.h"
#include "orchestrator/server.h"  // ReadBoundedFile, CheckPemCertificates

namespace rote::cli {

void AddClientFlags(FlagSpec* spec) {
  spec->with_value.insert({"server", "token", "tls-ca", "timeout", "max-message-bytes"});
  spec->boolean.insert({"json", "help"});
}

const char* ClientFlagsHelp() {
  return "Client flags:\n"
         "  --server HOST:PORT  server address (default $ROTE_SERVER or 127.0.0.1:7878)\n"
         "  --token TOKEN       bearer token (default $ROTE_TOKEN)\n"
         "  --tls-ca FILE       use TLS, trusting this CA bundle\n"
         "  --timeout SECONDS   deadline of each call (default 30)\n"
         "  --max-message-bytes N  largest message and largest file read (default 67108864)\n"
         "  --json              print JSON instead of tables\n";
}

absl::StatusOr<ClientOptions> ClientOptionsFrom(const ParsedFlags& flags) {
  ClientOptions o;
  if (const char* env = std::getenv("ROTE_SERVER"); env && *env) o.server = env;
  if (const char* env = std::getenv("ROTE_TOKEN"); env && *env) o.token = env;
  if (auto v = flags.Get("server")) o.server = *v;
  if (auto v = flags.Get("token")) o.token = *v;
  if (auto v = flags.Get("timeout")) o.timeout = std::chrono::seconds(std::max(1, std::atoi(v->c_str())));
  if (auto v = flags.Get("max-message-bytes")) {
    int64_t bytes = 0;
    if (!absl::SimpleAtoi(*v, &bytes) || bytes < 1024 || bytes > (int64_t{1} << 30)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--max-message-bytes must be an integer from 1024 to 1073741824, got `", *v, "`"));
    }
    o.max_message_bytes = bytes;
  }
  if (auto v = flags.Get("tls-ca")) {
    // Without this check a missing bundle only warned, and every call then failed as if the
    // server were unreachable.
    o.tls_ca_file = *v;
    auto pem = orchestrator::ReadBoundedFile(*v, o.max_message_bytes, "CA bundle (--tls-ca)");
    if (!pem.ok()) return pem.status();
    if (absl::Status s = orchestrator::CheckPemCertificates(*pem, *v, "--tls-ca"); !s.ok()) return s;
    o.tls_ca_pem = *std::move(pem);
  }
  o.json = flags.Has("json");
  return o;
}

bool ReadWholeFile(const std::string& path, int64_t max_bytes, std::string* out, std::string* error) {
  absl::StatusOr<std::string> bytes = orchestrator::ReadBoundedFile(path, max_bytes, "file");
  if (!bytes.ok()) {
    *error = std::string(bytes.status().message());
    return false;
  }
  *out = *std::move(bytes);
  return true;
}

Client::Client(ClientOptions options) : options_(std::move(options)) {
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (!options_.tls_ca_file.empty()) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = options_.tls_ca_pem;
    creds = grpc::SslCredentials(ssl);
  } else {
    creds = grpc::InsecureChannelCredentials();
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(static_cast<int>(options_.max_message_bytes));
  args.SetMaxSendMessageSize(static_cast<int>(options_.max_message_bytes));
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
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return kExitResourceExhausted;
    default: return kExitInternal;
  }
}

std::optional<size_t> FirstInvalidUtf8(std::string_view text) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  for (size_t i = 0; i < text.size();) {
    const unsigned char lead = byte(i);
    if (lead < 0x80) {
      ++i;
      continue;
    }
    size_t length = 0;
    uint32_t code_point = 0;
    uint32_t smallest = 0;  // below it the form is overlong
    if ((lead & 0xE0) == 0xC0) {
      length = 2, code_point = lead & 0x1F, smallest = 0x80;
    } else if ((lead & 0xF0) == 0xE0) {
      length = 3, code_point = lead & 0x0F, smallest = 0x800;
    } else if ((lead & 0xF8) == 0xF0) {
      length = 4, code_point = lead & 0x07, smallest = 0x10000;
    } else {
      return i;
    }
    if (i + length > text.size()) return i;
    for (size_t k = 1; k < length; ++k) {
      if ((byte(i + k) & 0xC0) != 0x80) return i;
      code_point = (code_point << 6) | (byte(i + k) & 0x3F);
    }
    if (code_point < smallest || code_point > 0x10FFFF || (code_point >= 0xD800 && code_point <= 0xDFFF)) return i;
    i += length;
  }
  return std::nullopt;
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

namespace {
// The server leaves a time it does not know yet (a run that has not ended) at zero, which JSON
// would print as 1970-01-01T00:00:00Z; clears such fields, in nested messages too, so they are
// left out as the tables show them as "-". (One element of a repeated field cannot be left out.)
void ClearZeroTimestamps(google::protobuf::Message* message) {
  const google::protobuf::Reflection* reflection = message->GetReflection();
  std::vector<const google::protobuf::FieldDescriptor*> fields;
  reflection->ListFields(*message, &fields);
  for (const google::protobuf::FieldDescriptor* field : fields) {
    if (field->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) continue;
    if (field->is_repeated()) {
      for (int i = 0; i < reflection->FieldSize(*message, field); ++i)
        ClearZeroTimestamps(reflection->MutableRepeatedMessage(message, field, i));
      continue;
    }
    google::protobuf::Message* sub = reflection->MutableMessage(message, field);
    if (field->message_type()->full_name() != "google.protobuf.Timestamp") {
      ClearZeroTimestamps(sub);
      continue;
    }
    const google::protobuf::Descriptor* ts = field->message_type();
    const google::protobuf::Reflection* ts_reflection = sub->GetReflection();
    if (ts_reflection->GetInt64(*sub, ts->FindFieldByName("seconds")) == 0 &&
        ts_reflection->GetInt32(*sub, ts->FindFieldByName("nanos")) == 0) {
      reflection->ClearField(message, field);
    }
  }
}
}  // namespace

void Client::PrintJson(const google::protobuf::Message& message, std::ostream& out) {
  std::unique_ptr<google::protobuf::Message> copy(message.New());
  copy->CopyFrom(message);
  ClearZeroTimestamps(copy.get());
  google::protobuf::util::JsonPrintOptions opts;
  opts.preserve_proto_field_names = true;
  opts.add_whitespace = true;
  std::string json;
  (void)google::protobuf::util::MessageToJsonString(*copy, &json, opts);
  out << json;
  if (json.empty() || json.back() != '\n') out << "\n";
}

}  // namespace rote::cli
