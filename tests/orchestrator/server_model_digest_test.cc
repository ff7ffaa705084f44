// The model digest is cached in the store by the files' identity: a restart with unchanged
// files reuses it (no re-hash), and a rewritten file makes the server hash again.
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "inference/model/weights.h"
#include "orchestrator/server.h"
#include "rote/v1/generation.grpc.pb.h"
#include "store/digest.h"
#include "store/store.h"

namespace rote::orchestrator {
namespace {

namespace fs = std::filesystem;

constexpr char kNamespace[] = "model-digest/by-file-identity";

std::string ModelDigestFromServer(const ServerOptions& o) {
  auto server = Server::Start(o);
  if (!server.ok()) return "start failed: " + std::string(server.status().message());
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string((*server)->port()), grpc::InsecureChannelCredentials());
  rote::v1::GenerationService::Stub stub(channel);
  grpc::ClientContext ctx;
  rote::v1::Model model;
  grpc::Status st = stub.GetModel(&ctx, rote::v1::GetModelRequest(), &model);
  if (!st.ok()) return "GetModel failed: " + st.error_message();
  return model.digest();
}

TEST(ModelDigestCacheTest, ReusedWhileFilesAreUnchangedAndRecomputedAfterARewrite) {
  const fs::path root = fs::temp_directory_path() / ("rote-model-digest-" + std::to_string(::getpid()));
  fs::remove_all(root);
  const fs::path model_dir = root / "model";
  fs::create_directories(root);
  fs::copy(fs::path(ROTE_SOURCE_DIR) / "tests" / "fixtures" / "qwen2", model_dir, fs::copy_options::recursive);

  ServerOptions o;
  o.listen = "127.0.0.1:0";
  o.metrics_listen = "off";
  o.data_dir = (root / "data").string();
  o.run_workers = 1;
  o.model_dir = model_dir.string();

  const std::string real = ModelDigestFromServer(o);
  ASSERT_EQ(real.rfind("sha256:", 0), 0u) << real;

  // The first start cached the digest under the files' identity.
  auto identity = inference::Model::FileIdentity(model_dir.string());
  ASSERT_TRUE(identity.ok()) << identity.status().ToString();
  const std::string key = store::Sha256Digest(*identity);
  {
    store::StoreOptions so;
    so.path = o.data_dir;
    auto st = store::Store::Open(so);
    ASSERT_TRUE(st.ok()) << st.status();
    auto cached = (*st)->KvGet(kNamespace, key);
    ASSERT_TRUE(cached.ok()) << cached.status();
    EXPECT_EQ("sha256:" + *cached, real);
    // Plant a different value: if the next start reports it, the server used the cache
    // instead of hashing the weights again.
    ASSERT_TRUE((*st)->KvPut(kNamespace, key, std::string(64, 'a')).ok());
  }
  EXPECT_EQ(ModelDigestFromServer(o), "sha256:" + std::string(64, 'a'));

  // Rewriting a file changes its identity: the server hashes again and gets the real digest.
  const fs::path config = model_dir / "config.json";
  fs::last_write_time(config, fs::last_write_time(config) + std::chrono::seconds(5));
  EXPECT_EQ(ModelDigestFromServer(o), real);
  fs::remove_all(root);
}

// The generation model's numerics and KV options: a profile the device cannot run, or a value out
// of range, stops the start with INVALID_ARGUMENT (nothing listens); the model's description
// names the profile it runs.
TEST(ServerModelOptionsTest, NumericsAndKvCacheAreCheckedAndReported) {
  const fs::path root = fs::temp_directory_path() / ("rote-model-options-" + std::to_string(::getpid()));
  fs::remove_all(root);
  ServerOptions o;
  o.listen = "127.0.0.1:0";
  o.metrics_listen = "off";
  o.data_dir = (root / "data").string();
  o.run_workers = 1;
  o.model_dir = (fs::path(ROTE_SOURCE_DIR) / "tests" / "fixtures" / "qwen2").string();
  {
    ServerOptions fast_on_cpu = o;
    fast_on_cpu.numerics = "fast";
    auto server = Server::Start(fast_on_cpu);
    ASSERT_FALSE(server.ok());
    EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument) << server.status();
    EXPECT_NE(std::string(server.status().message()).find("CUDA only"), std::string::npos) << server.status();
  }
  {
    ServerOptions unknown = o;
    unknown.numerics = "approximate";
    auto server = Server::Start(unknown);
    ASSERT_FALSE(server.ok());
    EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument) << server.status();
  }
  {
    ServerOptions negative = o;
    negative.kv_cache_mb = -1;
    auto server = Server::Start(negative);
    ASSERT_FALSE(server.ok());
    EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument) << server.status();
  }
  for (int32_t bad : {-1, 257}) {
    ServerOptions wrong_batch = o;
    wrong_batch.max_batch = bad;
    auto server = Server::Start(wrong_batch);
    ASSERT_FALSE(server.ok());
    EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument) << server.status();
    EXPECT_NE(std::string(server.status().message()).find("max_batch"), std::string::npos) << server.status();
  }
  ServerOptions small_kv = o;
  small_kv.kv_cache_mb = 8;
  small_kv.max_batch = 32;
  auto server = Server::Start(small_kv);
  ASSERT_TRUE(server.ok()) << server.status();
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string((*server)->port()), grpc::InsecureChannelCredentials());
  rote::v1::GenerationService::Stub stub(channel);
  grpc::ClientContext ctx;
  rote::v1::Model model;
  ASSERT_TRUE(stub.GetModel(&ctx, rote::v1::GetModelRequest(), &model).ok());
  EXPECT_EQ(model.numerics_profile(), "exact");
  (*server)->Shutdown();
  server->reset();
  fs::remove_all(root);
}

TEST(ModelDigestCacheTest, FileIdentityCoversJsonAndSafetensorsOnly) {
  const fs::path dir = fs::temp_directory_path() / ("rote-model-identity-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << "{}";
  std::ofstream(dir / "model.safetensors") << "x";
  auto before = inference::Model::FileIdentity(dir.string());
  ASSERT_TRUE(before.ok());
  std::ofstream(dir / "README.md") << "not part of the model";
  auto with_readme = inference::Model::FileIdentity(dir.string());
  ASSERT_TRUE(with_readme.ok());
  EXPECT_EQ(*before, *with_readme);
  std::ofstream(dir / "model.safetensors", std::ios::app) << "y";
  auto grown = inference::Model::FileIdentity(dir.string());
  ASSERT_TRUE(grown.ok());
  EXPECT_NE(*before, *grown);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace rote::orchestrator
