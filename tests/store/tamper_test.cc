// Bytes altered on disk are reported as DATA_LOSS, never returned.
#include <fstream>
#include <iterator>

#include "gtest/gtest.h"
#include "store/store.h"
#include "tests/store/test_util.h"

namespace rote::store {
namespace {

using testing::OpenOrDie;
using testing::TempDir;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

TEST(TamperTest, InlineBlobAlteredInDatabaseFileIsDataLoss) {
  TempDir dir;
  StoreOptions options;
  options.path = dir.path();
  const std::string victim = "UNIQUE-PATTERN-" + std::string(500, 'v') + "-END";
  std::string victim_digest, bystander_digest;
  {
    std::unique_ptr<Store> store = OpenOrDie(options);
    victim_digest = store->PutBlob(victim)->digest;
    bystander_digest = store->PutBlob("bystander")->digest;
  }  // closing checkpoints the WAL into rote.db
  const std::string db = dir.path() + "/rote.db";
  std::string file = ReadAll(db);
  size_t at = file.find("UNIQUE-PATTERN-");
  ASSERT_NE(at, std::string::npos) << "blob bytes not found in the database file";
  file[at + 20] = 'W';
  WriteAll(db, file);

  std::unique_ptr<Store> store = OpenOrDie(options);  // pages are intact: open succeeds
  absl::StatusOr<std::string> got = store->GetBlob(victim_digest);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << got.status();
  EXPECT_EQ(*store->GetBlob(bystander_digest), "bystander");
}

TEST(TamperTest, FileBlobAlteredOrRemovedIsDataLoss) {
  TempDir dir;
  StoreOptions options;
  options.path = dir.path();
  options.inline_blob_max_bytes = 16;
  std::unique_ptr<Store> store = OpenOrDie(options);
  std::string bytes(4096, 'f');
  BlobRef ref = *store->PutBlob(bytes);
  std::string hex = ref.digest.substr(7);
  const std::string path = dir.path() + "/blobs/" + hex.substr(0, 2) + "/" + hex;
  ASSERT_EQ(ReadAll(path), bytes);

  bytes[100] = 'g';  // same size, one byte different
  WriteAll(path, bytes);
  EXPECT_EQ(store->GetBlob(ref.digest).status().code(), absl::StatusCode::kDataLoss);
  WriteAll(path, bytes.substr(0, 10));  // truncated
  EXPECT_EQ(store->GetBlob(ref.digest).status().code(), absl::StatusCode::kDataLoss);
  std::filesystem::remove(path);
  EXPECT_EQ(store->GetBlob(ref.digest).status().code(), absl::StatusCode::kDataLoss);
  // A backup refuses to copy a damaged blob.
  EXPECT_EQ(store->Backup(dir.path() + "/b.db").code(), absl::StatusCode::kDataLoss);
  // Putting the bytes again repairs nothing silently: the row exists, so the put is a no-op,
  // and the damage stays visible.
  EXPECT_EQ(store->GetBlob(ref.digest).status().code(), absl::StatusCode::kDataLoss);
}

TEST(TamperTest, CorruptDatabaseFailsOpen) {
  TempDir dir;
  StoreOptions options;
  options.path = dir.path();
  {
    std::unique_ptr<Store> store = OpenOrDie(options);
    for (int i = 0; i < 200; ++i) store->KvPut("ns", std::to_string(i), std::string(100, 'k')).IgnoreError();
  }
  const std::string db = dir.path() + "/rote.db";
  std::string file = ReadAll(db);
  ASSERT_GT(file.size(), 3 * 4096u);
  // Scribble over the middle of a b-tree page (not the header page).
  for (size_t i = 2 * 4096 + 8; i < 2 * 4096 + 64; ++i) file[i] = '\x5a';
  WriteAll(db, file);
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(options);
  EXPECT_EQ(store.status().code(), absl::StatusCode::kDataLoss) << store.status();
}

}  // namespace
}  // namespace rote::store
