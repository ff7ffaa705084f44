#include "orchestrator/http/console.h"

#include <arpa/inet.h>
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <regex>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/dynamic_message.h"
#include "google/protobuf/message.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "nlohmann/json.hpp"
#include "orchestrator/server.h"
#include "rote/v1/runs.grpc.pb.h"
#include "spdlog/spdlog.h"

namespace rote::orchestrator::http {

namespace {

namespace pb = google::protobuf;

// One API route: an HTTP method and path (a regex whose first group, if any, is the resource
// name) mapped to a gRPC method. The request message is built from the JSON body (POST), the
// query parameters (fields by name) and the name from the path, in that order.
struct Route {
  const char* method;  // "GET" or "POST"
  std::regex path;
  std::string rpc;         // "rote.v1.ArtifactService.GetArtifact"
  const char* name_field;  // the field the path's resource name goes to; nullptr for none
};

std::vector<Route> MakeRoutes() {
  // Resource names hold '/', never ':' (the custom-method separator).
  const std::string artifact = "(artifacts/[^:]+)";
  const std::string run = "(runs/[^/:]+)";
  std::vector<Route> r;
  auto add = [&](const char* method, const std::string& path, const std::string& rpc, const char* field = nullptr) {
    r.push_back(Route{method, std::regex("^/v1/" + path + "$"), "rote.v1." + rpc, field});
  };
  add("GET", "artifacts", "ArtifactService.ListArtifacts");
  add("POST", "artifacts:propose", "ArtifactService.ProposeRevision");
  add("GET", "(artifacts/[^:]+/attempts/[0-9]+)", "ArtifactService.GetAttempt", "name");
  add("GET", "(generations/[^/:]+/attempts/[0-9]+)", "ArtifactService.GetAttempt", "name");
  add("GET", "(artifacts/[^:]+/backtest)", "ArtifactService.GetBacktest", "name");
  add("POST", artifact + ":backtest", "ArtifactService.BacktestRevision", "name");
  add("POST", artifact + ":review", "ArtifactService.ReviewArtifact", "name");
  add("POST", artifact + ":promote", "ArtifactService.PromoteRevision", "name");
  add("POST", artifact + ":try", "ArtifactService.TryArtifact", "name");
  add("POST", artifact + ":regenerate", "ArtifactService.RegenerateArtifact", "name");
  add("GET", artifact, "ArtifactService.GetArtifact", "name");
  add("GET", "revisions", "ArtifactService.ListRevisions");
  add("GET", "revisions:diff", "ArtifactService.DiffRevisions");
  add("GET", "auditEntries", "ArtifactService.ListAuditEntries");
  add("GET", "blueprints", "BlueprintService.ListBlueprints");
  add("POST", "blueprints", "BlueprintService.RegisterBlueprint");
  add("POST", "(blueprints/[^:]+):lock", "BlueprintService.LockBlueprint", "name");
  add("GET", "(blueprints/[^:]+)", "BlueprintService.GetBlueprint", "name");
  add("GET", "runs", "RunService.ListRuns");
  add("POST", "runs", "RunService.SubmitRun");
  add("GET", run + "/steps", "RunService.ListRunSteps", "name");
  add("POST", run + ":replay", "RunService.ReplayRun", "name");
  add("POST", run + ":cancel", "RunService.CancelRun", "name");
  add("GET", run, "RunService.GetRun", "name");
  add("GET", "model", "GenerationService.GetModel");
  add("GET", "generations", "GenerationService.ListGenerations");
  add("GET", "(generations/[^/:]+)", "GenerationService.GetGeneration", "name");
  return r;
}

const char* CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK: return "OK";
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::UNKNOWN: return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND: return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS: return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED: return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED: return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE: return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED: return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL: return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS: return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED: return "UNAUTHENTICATED";
    default: return "UNKNOWN";
  }
}

// A JSON string literal of `s` (the error messages quote user input); bytes that are not
// UTF-8 become U+FFFD.
std::string JsonQuote(std::string_view s) {
  return nlohmann::json(std::string(s)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void SetError(httplib::Response& res, int http_status, const char* status, std::string_view message) {
  res.status = http_status;
  res.set_content(absl::StrCat("{\"error\":{\"code\":", http_status, ",\"status\":\"", status,
                               "\",\"message\":", JsonQuote(message), "}}\n"),
                  "application/json");
}

void SetGrpcError(httplib::Response& res, const grpc::Status& st) {
  SetError(res, HttpStatusOf(static_cast<int>(st.error_code())), CodeName(st.error_code()), st.error_message());
}

// Sets one singular scalar field of `msg` from a query parameter's text.
absl::Status SetFieldFromText(pb::Message* msg, const pb::FieldDescriptor* f, const std::string& text) {
  const pb::Reflection* r = msg->GetReflection();
  auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat("query parameter ", f->name(), ": cannot read `", text, "` as ",
                                                   f->type_name()));
  };
  if (f->is_repeated()) return absl::InvalidArgumentError(absl::StrCat("query parameter ", f->name(), " is a list"));
  switch (f->cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_STRING: r->SetString(msg, f, text); return absl::OkStatus();
    case pb::FieldDescriptor::CPPTYPE_INT32: {
      int32_t v = 0;
      if (!absl::SimpleAtoi(text, &v)) return bad();
      r->SetInt32(msg, f, v);
      return absl::OkStatus();
    }
    case pb::FieldDescriptor::CPPTYPE_INT64: {
      int64_t v = 0;
      if (!absl::SimpleAtoi(text, &v)) return bad();
      r->SetInt64(msg, f, v);
      return absl::OkStatus();
    }
    case pb::FieldDescriptor::CPPTYPE_BOOL: {
      bool v = false;
      if (!absl::SimpleAtob(text, &v)) return bad();
      r->SetBool(msg, f, v);
      return absl::OkStatus();
    }
    case pb::FieldDescriptor::CPPTYPE_ENUM: {
      const pb::EnumValueDescriptor* v = f->enum_type()->FindValueByName(text);
      int number = 0;
      if (v == nullptr && absl::SimpleAtoi(text, &number)) v = f->enum_type()->FindValueByNumber(number);
      if (v == nullptr) return bad();
      r->SetEnum(msg, f, v);
      return absl::OkStatus();
    }
    default:
      return absl::InvalidArgumentError(absl::StrCat("query parameter ", f->name(), " cannot be given in a URL"));
  }
}

bool IsLoopbackHostHeader(std::string_view host) {
  // Strip the port: "[::1]:7880", "127.0.0.1:7880", "localhost:7880", "localhost".
  std::string h(host);
  if (!h.empty() && h.front() == '[') {
    const size_t close = h.find(']');
    if (close == std::string::npos) return false;
    h = h.substr(1, close - 1);
    return h == "::1";
  }
  if (const size_t colon = h.rfind(':'); colon != std::string::npos) h.resize(colon);
  h = absl::AsciiStrToLower(h);
  if (h == "localhost") return true;
  // A dotted IPv4 literal in 127.0.0.0/8.
  in_addr a{};
  return ::inet_pton(AF_INET, h.c_str(), &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

// "HOST:PORT" or "[V6]:PORT" split for httplib, which takes a bare host.
bool SplitHostPort(const std::string& host_port, std::string* host, int* port) {
  std::string port_text;
  if (!host_port.empty() && host_port.front() == '[') {
    const size_t close = host_port.find(']');
    if (close == std::string::npos || host_port.compare(close, 2, "]:") != 0) return false;
    *host = host_port.substr(1, close - 1);
    port_text = host_port.substr(close + 2);
  } else {
    const size_t colon = host_port.rfind(':');
    if (colon == std::string::npos || colon == 0) return false;
    *host = host_port.substr(0, colon);
    if (host->find(':') != std::string::npos) return false;
    port_text = host_port.substr(colon + 1);
  }
  return !port_text.empty() && absl::SimpleAtoi(port_text, port) && *port >= 0 && *port <= 65535;
}

}  // namespace

int HttpStatusOf(int grpc_code) {
  switch (static_cast<grpc::StatusCode>(grpc_code)) {
    case grpc::StatusCode::OK: return 200;
    case grpc::StatusCode::CANCELLED: return 499;
    case grpc::StatusCode::INVALID_ARGUMENT: return 400;
    case grpc::StatusCode::DEADLINE_EXCEEDED: return 504;
    case grpc::StatusCode::NOT_FOUND: return 404;
    case grpc::StatusCode::ALREADY_EXISTS: return 409;
    case grpc::StatusCode::PERMISSION_DENIED: return 403;
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return 429;
    case grpc::StatusCode::FAILED_PRECONDITION: return 412;
    case grpc::StatusCode::ABORTED: return 409;
    case grpc::StatusCode::OUT_OF_RANGE: return 400;
    case grpc::StatusCode::UNIMPLEMENTED: return 501;
    case grpc::StatusCode::UNAVAILABLE: return 503;
    case grpc::StatusCode::UNAUTHENTICATED: return 401;
    default: return 500;
  }
}

struct Console::State {
  ConsoleOptions options;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<grpc::GenericStub> stub;
  std::unique_ptr<rote::v1::RunService::Stub> runs;
  std::vector<Route> routes = MakeRoutes();
  bool loopback = false;
  std::unique_ptr<httplib::Server> server;
  std::thread thread;
  int port = 0;

  // Live event streams, cancelled at shutdown (a stream otherwise waits for the run's next event).
  std::mutex mu;
  std::set<grpc::ClientContext*> watches;
  bool stopping = false;
  std::once_flag shutdown_once;

  void Handle(const httplib::Request& req, httplib::Response& res);
  void CallUnary(const Route& route, const std::smatch& match, const httplib::Request& req, httplib::Response& res);
  void Watch(const std::string& run, const httplib::Request& req, httplib::Response& res);
};

namespace {
void SetSecurityHeaders(httplib::Response& res) {
  // The page's own files only: no inline script or style attribute, no eval, no frames, no
  // plugins, no form posts, and fetches only to this origin.
  res.set_header("Content-Security-Policy",
                 "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                 "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; "
                 "frame-ancestors 'none'");
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("Referrer-Policy", "no-referrer");
  res.set_header("X-Frame-Options", "DENY");
  res.set_header("Cross-Origin-Opener-Policy", "same-origin");
  res.set_header("Cross-Origin-Resource-Policy", "same-origin");
}

void AddAuthorization(const httplib::Request& req, grpc::ClientContext* ctx) {
  if (req.has_header("Authorization")) ctx->AddMetadata("authorization", req.get_header_value("Authorization"));
}
}  // namespace

void Console::State::Handle(const httplib::Request& req, httplib::Response& res) {
  SetSecurityHeaders(res);
  if (loopback && !IsLoopbackHostHeader(req.get_header_value("Host"))) {
    SetError(res, 421, "MISDIRECTED", "this console answers only to a loopback host name (127.0.0.1, ::1, localhost)");
    return;
  }
  if (!absl::StartsWith(req.path, "/v1/")) {
    if (req.method != "GET" && req.method != "HEAD") {
      SetError(res, 405, "METHOD_NOT_ALLOWED", "the console's pages are read with GET");
      return;
    }
    size_t count = 0;
    const ConsoleAsset* assets = ConsoleAssets(&count);
    const std::string path = req.path == "/index.html" ? "/" : req.path;
    for (size_t i = 0; i < count; ++i) {
      if (assets[i].path == path) {
        res.set_header("Cache-Control", "no-cache");
        res.set_content(std::string(assets[i].body), std::string(assets[i].content_type));
        return;
      }
    }
    if (count == 0 && path == "/") {
      SetError(res, 404, "NOT_FOUND", "this rote was built without the review console (-DROTE_CONSOLE=OFF); the /v1/ API is served");
      return;
    }
    SetError(res, 404, "NOT_FOUND", absl::StrCat("no page ", req.path));
    return;
  }
  res.set_header("Cache-Control", "no-store");
  if (req.method == "POST") {
    // Forces a CORS preflight on any cross-site attempt, and this server grants none.
    const std::string type = absl::AsciiStrToLower(req.get_header_value("Content-Type"));
    if (!absl::StartsWith(type, "application/json")) {
      SetError(res, 415, "UNSUPPORTED_MEDIA_TYPE", "API requests with a body must be Content-Type: application/json");
      return;
    }
    if (req.has_header("Origin")) {
      const std::string origin = req.get_header_value("Origin");
      const std::string host = req.get_header_value("Host");
      if (origin != "http://" + host && origin != "https://" + host) {
        SetError(res, 403, "CROSS_ORIGIN", absl::StrCat("requests from ", origin, " are not taken"));
        return;
      }
    }
  }
  static const std::regex kWatch("^/v1/(runs/[^/:]+):watch$");
  std::smatch match;
  if (req.method == "GET" && std::regex_match(req.path, match, kWatch)) {
    Watch(match[1].str(), req, res);
    return;
  }
  bool path_known = false;
  for (const Route& route : routes) {
    if (!std::regex_match(req.path, match, route.path)) continue;
    path_known = true;
    if (req.method != route.method) continue;
    CallUnary(route, match, req, res);
    return;
  }
  if (path_known) {
    SetError(res, 405, "METHOD_NOT_ALLOWED", absl::StrCat(req.method, " is not a method of ", req.path));
  } else {
    SetError(res, 404, "NOT_FOUND", absl::StrCat("no API method at ", req.path));
  }
}

void Console::State::CallUnary(const Route& route, const std::smatch& match, const httplib::Request& req,
                               httplib::Response& res) {
  const pb::MethodDescriptor* method = pb::DescriptorPool::generated_pool()->FindMethodByName(route.rpc);
  if (method == nullptr) {
    SetError(res, 500, "INTERNAL", absl::StrCat("no method ", route.rpc));
    return;
  }
  pb::MessageFactory* factory = pb::MessageFactory::generated_factory();
  std::unique_ptr<pb::Message> request(factory->GetPrototype(method->input_type())->New());
  std::unique_ptr<pb::Message> response(factory->GetPrototype(method->output_type())->New());
  if (req.method == "POST" && !req.body.empty()) {
    pb::util::JsonParseOptions parse;
    if (auto st = pb::util::JsonStringToMessage(req.body, request.get(), parse); !st.ok()) {
      SetError(res, 400, "INVALID_ARGUMENT",
               absl::StrCat("the body is not a ", method->input_type()->full_name(), " in JSON: ", st.message().as_string()));
      return;
    }
  }
  for (const auto& [key, value] : req.params) {
    const pb::FieldDescriptor* f = method->input_type()->FindFieldByName(key);
    if (f == nullptr) f = method->input_type()->FindFieldByCamelcaseName(key);
    if (f == nullptr) {
      SetError(res, 400, "INVALID_ARGUMENT",
               absl::StrCat("unknown query parameter ", key, " (fields of ", method->input_type()->full_name(), ")"));
      return;
    }
    if (absl::Status st = SetFieldFromText(request.get(), f, value); !st.ok()) {
      SetError(res, 400, "INVALID_ARGUMENT", std::string(st.message()));
      return;
    }
  }
  if (route.name_field != nullptr && match.size() > 1) {
    const pb::FieldDescriptor* f = method->input_type()->FindFieldByName(route.name_field);
    request->GetReflection()->SetString(request.get(), f, match[1].str());
  }

  std::string wire;
  if (!request->SerializeToString(&wire)) {
    SetError(res, 500, "INTERNAL", "cannot encode the request");
    return;
  }
  grpc::Slice slice(wire);
  grpc::ByteBuffer send(&slice, 1);
  grpc::ClientContext ctx;
  AddAuthorization(req, &ctx);
  grpc::CompletionQueue cq;
  const std::string full_name = absl::StrCat("/", method->service()->full_name(), "/", method->name());
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> call = stub->PrepareUnaryCall(&ctx, full_name, send, &cq);
  call->StartCall();
  grpc::ByteBuffer received;
  grpc::Status status;
  call->Finish(&received, &status, reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  cq.Next(&tag, &ok);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  if (!status.ok()) {
    SetGrpcError(res, status);
    return;
  }
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (received.Dump(&slices).ok()) {
    for (const grpc::Slice& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  if (!response->ParseFromString(bytes)) {
    SetError(res, 502, "INTERNAL", "cannot decode the response");
    return;
  }
  pb::util::JsonPrintOptions print;
  print.preserve_proto_field_names = true;
  print.always_print_primitive_fields = true;
  std::string json;
  if (auto st = pb::util::MessageToJsonString(*response, &json, print); !st.ok()) {
    SetError(res, 500, "INTERNAL", st.message().as_string());
    return;
  }
  res.status = 200;
  res.set_content(std::move(json), "application/json");
}

// GET /v1/runs/{id}:watch: WatchRun's events as newline-delimited JSON, one RunEvent a line,
// relayed as they come (a browser reads it with fetch, which can send the Authorization header;
// EventSource cannot).
void Console::State::Watch(const std::string& run, const httplib::Request& req, httplib::Response& res) {
  struct Stream {
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientReader<rote::v1::RunEvent>> reader;
    bool first_sent = false;
  };
  auto stream = std::make_shared<Stream>();
  AddAuthorization(req, &stream->ctx);
  {
    std::lock_guard lock(mu);
    if (stopping) {
      SetError(res, 503, "UNAVAILABLE", "the server is shutting down");
      return;
    }
    watches.insert(&stream->ctx);
  }
  rote::v1::WatchRunRequest request;
  request.set_name(run);
  stream->reader = runs->WatchRun(&stream->ctx, request);
  // The first event (or the error that ends the stream at once: a wrong run, a missing role)
  // decides the HTTP status before any byte is sent.
  rote::v1::RunEvent first;
  if (!stream->reader->Read(&first)) {
    const grpc::Status st = stream->reader->Finish();
    {
      std::lock_guard lock(mu);
      watches.erase(&stream->ctx);
    }
    if (!st.ok()) {
      SetGrpcError(res, st);
    } else {
      res.set_content("", "application/x-ndjson");
    }
    return;
  }
  auto pending = std::make_shared<rote::v1::RunEvent>(std::move(first));
  pb::util::JsonPrintOptions print;
  print.preserve_proto_field_names = true;
  res.set_chunked_content_provider(
      "application/x-ndjson",
      [stream, pending, print](size_t, httplib::DataSink& sink) {
        rote::v1::RunEvent event;
        if (!stream->first_sent) {
          event = *pending;
          stream->first_sent = true;
        } else if (!stream->reader->Read(&event)) {
          sink.done();
          return true;
        }
        std::string line;
        if (!pb::util::MessageToJsonString(event, &line, print).ok()) return false;
        line.push_back('\n');
        return sink.write(line.data(), line.size());
      },
      [this, stream](bool) {
        stream->ctx.TryCancel();
        (void)stream->reader->Finish();
        std::lock_guard lock(mu);
        watches.erase(&stream->ctx);
      });
}

Console::Console(std::unique_ptr<State> state) : state_(std::move(state)) {}

Console::~Console() { Shutdown(); }

int Console::port() const { return state_->port; }

void Console::Shutdown() {
  std::call_once(state_->shutdown_once, [this] {
    {
      std::lock_guard lock(state_->mu);
      state_->stopping = true;
      for (grpc::ClientContext* ctx : state_->watches) ctx->TryCancel();
    }
    if (state_->server) state_->server->stop();
    if (state_->thread.joinable()) state_->thread.join();
  });
}

absl::StatusOr<std::unique_ptr<Console>> Console::Start(const ConsoleOptions& options,
                                                        std::shared_ptr<grpc::Channel> channel) {
  auto state = std::make_unique<State>();
  state->options = options;
  std::string host;
  int port = 0;
  if (!SplitHostPort(options.listen, &host, &port)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--http-listen takes HOST:PORT (or off), got `", options.listen, "`"));
  }
  const absl::StatusOr<bool> loopback = IsLoopbackAddress(options.listen);
  if (!loopback.ok()) return absl::FailedPreconditionError(loopback.status().message());
  state->loopback = *loopback;
  if (!options.has_keys && !*loopback) {
    return absl::FailedPreconditionError(absl::StrCat(
        "refusing to serve the console on ", options.listen,
        " without a key file: anyone who can reach it could approve code and run it. Pass --keys FILE, "
        "or use --http-listen 127.0.0.1:PORT"));
  }
  const bool tls = !options.tls_cert_file.empty() && !options.tls_key_file.empty();
  if (tls) {
    auto ssl = std::make_unique<httplib::SSLServer>(options.tls_cert_file.c_str(), options.tls_key_file.c_str());
    if (!ssl->is_valid()) {
      return absl::InvalidArgumentError(absl::StrCat("the console cannot use the TLS certificate ",
                                                     options.tls_cert_file, " and key ", options.tls_key_file));
    }
    state->server = std::move(ssl);
  } else {
    state->server = std::make_unique<httplib::Server>();
  }
  state->channel = std::move(channel);
  state->stub = std::make_unique<grpc::GenericStub>(state->channel);
  state->runs = rote::v1::RunService::NewStub(state->channel);
  httplib::Server& server = *state->server;
  // Live event streams each hold a thread while they last.
  server.new_task_queue = [] { return new httplib::ThreadPool(32); };
  server.set_payload_max_length(static_cast<size_t>(options.max_message_bytes));
  State* s = state.get();
  auto handler = [s](const httplib::Request& req, httplib::Response& res) { s->Handle(req, res); };
  server.Get(".*", handler);
  server.Post(".*", handler);
  server.Put(".*", handler);
  server.Patch(".*", handler);
  server.Delete(".*", handler);
  server.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    SetSecurityHeaders(res);
    if (res.body.empty()) SetError(res, res.status, "ERROR", "the request could not be served");
  });
  server.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    SetSecurityHeaders(res);
    SetError(res, 500, "INTERNAL", "the request failed");
  });
  if (port == 0) {
    port = server.bind_to_any_port(host);
    if (port < 0) port = 0;
  } else if (!server.bind_to_port(host, port)) {
    port = 0;
  }
  if (port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot serve the console on ", options.listen,
                                               ": the address is in use or invalid (pick another with "
                                               "--http-listen HOST:PORT, or --http-listen off)"));
  }
  state->port = port;
  state->thread = std::thread([s] { s->server->listen_after_bind(); });
  spdlog::info("review console on {}://{}:{}/", tls ? "https" : "http",
               host.find(':') != std::string::npos ? absl::StrCat("[", host, "]") : host, port);
  return std::unique_ptr<Console>(new Console(std::move(state)));
}

}  // namespace rote::orchestrator::http
