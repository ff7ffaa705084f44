#include "cli/reflection_client.h"

#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/descriptor.pb.h"
#include "google/protobuf/descriptor_database.h"
#include "google/protobuf/dynamic_message.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/generic/generic_stub.h"

namespace rote::cli {

namespace {
using google::protobuf::Descriptor;
using google::protobuf::DescriptorPool;
using google::protobuf::DynamicMessageFactory;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

constexpr char kMethod[] = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo";

// One bidirectional reflection stream driven synchronously over a completion queue.
class ReflectionStream {
 public:
  ReflectionStream(const std::shared_ptr<grpc::Channel>& channel, const std::string& token)
      : stub_(channel) {
    if (!token.empty()) ctx_.AddMetadata("authorization", "Bearer " + token);
    ctx_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    call_ = stub_.PrepareCall(&ctx_, kMethod, &cq_);
    call_->StartCall(Tag(1));
    ok_ = Await(1);
  }
  ~ReflectionStream() {
    if (call_) {
      grpc::Status st;
      call_->WritesDone(Tag(4));
      Await(4);
      call_->Finish(&st, Tag(5));
      Await(5);
    }
    cq_.Shutdown();
    void* tag;
    bool ok;
    while (cq_.Next(&tag, &ok)) {
    }
  }

  absl::StatusOr<std::string> RoundTrip(const std::string& request) {
    if (!ok_) return Finish("cannot open the reflection stream");
    grpc::Slice slice(request);
    grpc::ByteBuffer out(&slice, 1);
    call_->Write(out, Tag(2));
    if (!Await(2)) return Finish("reflection write failed");
    grpc::ByteBuffer in;
    call_->Read(&in, Tag(3));
    if (!Await(3)) return Finish("reflection read failed");
    std::vector<grpc::Slice> slices;
    (void)in.Dump(&slices);
    std::string bytes;
    for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    return bytes;
  }

 private:
  static void* Tag(intptr_t i) { return reinterpret_cast<void*>(i); }
  bool Await(intptr_t want) {
    void* tag = nullptr;
    bool ok = false;
    if (!cq_.Next(&tag, &ok)) return false;
    return ok && tag == Tag(want);
  }
  absl::Status Finish(const char* what) {
    grpc::Status st;
    call_->Finish(&st, Tag(5));
    Await(5);
    call_.reset();
    ok_ = false;
    return absl::Status(static_cast<absl::StatusCode>(st.error_code()),
                        absl::StrCat(what, ": ", st.error_message()));
  }

  grpc::GenericStub stub_;
  grpc::ClientContext ctx_;
  grpc::CompletionQueue cq_;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call_;
  bool ok_ = false;
};
}  // namespace

absl::StatusOr<std::vector<ReflectedService>> ListServicesByReflection(
    const std::shared_ptr<grpc::Channel>& channel, const std::string& bearer_token) {
  // Linking the plugin registers the reflection messages in the generated pool.
  (void)&grpc::reflection::InitProtoReflectionServerBuilderPlugin;
  const DescriptorPool* pool = DescriptorPool::generated_pool();
  const Descriptor* req_type = pool->FindMessageTypeByName("grpc.reflection.v1alpha.ServerReflectionRequest");
  const Descriptor* resp_type = pool->FindMessageTypeByName("grpc.reflection.v1alpha.ServerReflectionResponse");
  if (!req_type || !resp_type) {
    return absl::InternalError("this build of rote lacks the gRPC reflection descriptors");
  }
  DynamicMessageFactory factory(pool);
  ReflectionStream stream(channel, bearer_token);

  auto ask = [&](const std::string& field, const std::string& value) -> absl::StatusOr<std::unique_ptr<Message>> {
    std::unique_ptr<Message> req(factory.GetPrototype(req_type)->New());
    req->GetReflection()->SetString(req.get(), req_type->FindFieldByName(field), value);
    auto bytes = stream.RoundTrip(req->SerializeAsString());
    if (!bytes.ok()) return bytes.status();
    std::unique_ptr<Message> resp(factory.GetPrototype(resp_type)->New());
    if (!resp->ParseFromString(*bytes)) return absl::InternalError("malformed reflection response");
    const FieldDescriptor* err = resp_type->FindFieldByName("error_response");
    if (resp->GetReflection()->HasField(*resp, err)) {
      const Message& e = resp->GetReflection()->GetMessage(*resp, err);
      return absl::Status(
          static_cast<absl::StatusCode>(e.GetReflection()->GetInt32(e, e.GetDescriptor()->FindFieldByName("error_code"))),
          e.GetReflection()->GetString(e, e.GetDescriptor()->FindFieldByName("error_message")));
    }
    return resp;
  };

  auto listing = ask("list_services", "*");
  if (!listing.ok()) return listing.status();
  const Message& list = (*listing)->GetReflection()->GetMessage(
      **listing, resp_type->FindFieldByName("list_services_response"));
  const FieldDescriptor* services_field = list.GetDescriptor()->FindFieldByName("service");
  std::vector<std::string> names;
  for (int i = 0; i < list.GetReflection()->FieldSize(list, services_field); ++i) {
    const Message& s = list.GetReflection()->GetRepeatedMessage(list, services_field, i);
    names.push_back(s.GetReflection()->GetString(s, s.GetDescriptor()->FindFieldByName("name")));
  }

  // Fetch each service's file (the server sends its dependencies too) into a local pool.
  google::protobuf::SimpleDescriptorDatabase db;
  for (const std::string& name : names) {
    auto files = ask("file_containing_symbol", name);
    if (!files.ok()) return files.status();
    const Message& fdr = (*files)->GetReflection()->GetMessage(
        **files, resp_type->FindFieldByName("file_descriptor_response"));
    const FieldDescriptor* protos = fdr.GetDescriptor()->FindFieldByName("file_descriptor_proto");
    for (int i = 0; i < fdr.GetReflection()->FieldSize(fdr, protos); ++i) {
      google::protobuf::FileDescriptorProto file;
      if (file.ParseFromString(fdr.GetReflection()->GetRepeatedString(fdr, protos, i))) {
        google::protobuf::FileDescriptorProto existing;
        if (!db.FindFileByName(file.name(), &existing)) db.Add(file);
      }
    }
  }
  DescriptorPool remote(&db);
  std::vector<ReflectedService> out;
  for (const std::string& name : names) {
    ReflectedService svc{name, {}};
    if (const auto* sd = remote.FindServiceByName(name)) {
      for (int m = 0; m < sd->method_count(); ++m) {
        const auto* md = sd->method(m);
        svc.methods.push_back(absl::StrCat(md->name(), "(", md->client_streaming() ? "stream " : "",
                                           md->input_type()->name(), ") returns (",
                                           md->server_streaming() ? "stream " : "",
                                           md->output_type()->name(), ")"));
      }
    }
    out.push_back(std::move(svc));
  }
  return out;
}

}  // namespace rote::cli
