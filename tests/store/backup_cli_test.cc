// `rote backup` (cli/cmd_backup.cc) against a store that is open and being written.
#include <atomic>
#include <thread>

#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "gtest/gtest.h"
#include "store/store.h"
#include "tests/store/test_util.h"

namespace rote::store {
namespace {

using testing::MakeBlueprint;
using testing::OpenOrDie;
using testing::TempDir;

TEST(BackupCliTest, BacksUpALiveStore) {
  TempDir dir;
  StoreOptions options;
  options.path = dir.path() + "/data";
  std::unique_ptr<Store> live = OpenOrDie(options);
  BlueprintRecord bp = *live->PutBlueprint(MakeBlueprint("bp", "1"));
  // A writer keeps going while the backup runs: the backup must not block it or fail.
  std::atomic<bool> stop{false};
  std::atomic<int> writes{0};
  std::thread writer([&] {
    for (int i = 0; !stop.load(); ++i) {
      if (live->KvPut("ns", std::to_string(i), "v").ok()) ++writes;
    }
  });
  const std::string out = dir.path() + "/backup.db";
  int code = cli::CmdBackup({"--data", options.path, "--out", out});
  stop = true;
  writer.join();
  ASSERT_EQ(code, cli::kExitOk);
  EXPECT_GT(writes.load(), 0);

  StoreOptions restored_options;
  restored_options.path = out;
  restored_options.full_integrity_check_on_open = true;
  std::unique_ptr<Store> restored = OpenOrDie(restored_options);
  EXPECT_EQ(restored->GetBlueprint(bp.digest)->source, bp.source);
}

TEST(BackupCliTest, ExitCodes) {
  TempDir dir;
  EXPECT_EQ(cli::CmdBackup({"--data", dir.path()}), cli::kExitUsage);
  EXPECT_EQ(cli::CmdBackup({"--data", dir.path(), "--out", "x.db", "--fast"}), cli::kExitUsage);
  EXPECT_EQ(cli::CmdBackup({"--data", dir.path() + "/nothing", "--out", dir.path() + "/b.db"}),
            cli::kExitNotFound);
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/nothing"));  // not created by the attempt
  EXPECT_EQ(cli::CmdBackup({"--help"}), cli::kExitOk);
}

}  // namespace
}  // namespace rote::store
