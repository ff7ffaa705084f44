// rote backup --data DIR --out FILE: an online, consistent copy of the store in one file.
// Safe while a server uses the same data directory: SQLite's backup API reads one snapshot,
// and in WAL mode that does not block the server's writes.
#include <sys/stat.h>

#include <cstdio>
#include <string>

#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "cli/flags.h"
#include "orchestrator/offline_backup.h"

namespace rote::cli {
namespace {

constexpr const char* kBackupUsage =
    "usage: rote backup --data DIR --out FILE\n"
    "  --data DIR   the server's data directory (holding rote.db), or a .db file\n"
    "  --out FILE   where to write the backup: one self-contained SQLite file\n";

int ExitCodeFor(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk: return kExitOk;
    case absl::StatusCode::kNotFound: return kExitNotFound;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAborted: return kExitInvalid;
    case absl::StatusCode::kDataLoss: return kExitDataLoss;
    case absl::StatusCode::kUnavailable: return kExitUnavailable;
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnauthenticated: return kExitAuth;
    case absl::StatusCode::kResourceExhausted: return kExitResourceExhausted;
    default: return kExitInternal;
  }
}

bool PathExists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace

int CmdBackup(const Args& args) {
  absl::StatusOr<ParsedFlags> flags = ParseFlags(args, {{"data", "out"}, {"help"}});
  if (!flags.ok()) {
    std::fprintf(stderr, "rote backup: %s\n%s", std::string(flags.status().message()).c_str(),
                 kBackupUsage);
    return kExitUsage;
  }
  if (flags->Has("help")) {
    std::fputs(kBackupUsage, stdout);
    return kExitOk;
  }
  const std::string data_dir = flags->GetOr("data", "");
  const std::string out = flags->GetOr("out", "");
  if (data_dir.empty() || out.empty() || !flags->positionals.empty()) {
    std::fprintf(stderr, "rote backup: --data and --out are required, nothing else\n%s",
                 kBackupUsage);
    return kExitUsage;
  }
  const bool is_file = data_dir.size() > 3 && data_dir.compare(data_dir.size() - 3, 3, ".db") == 0;
  const std::string db_path = is_file ? data_dir : data_dir + "/rote.db";
  // Opening a store creates one; a backup of a path that holds none is a mistake to report.
  if (!PathExists(db_path)) {
    std::fprintf(stderr, "rote backup: no store at %s (expected %s)\n", data_dir.c_str(),
                 db_path.c_str());
    return kExitNotFound;
  }
  absl::Status status = orchestrator::offline::BackupStore(data_dir, out);
  if (!status.ok()) {
    std::fprintf(stderr, "rote backup: %s\n", std::string(status.message()).c_str());
    return ExitCodeFor(status);
  }
  std::printf("backed up %s to %s\n", db_path.c_str(), out.c_str());
  return kExitOk;
}

}  // namespace rote::cli
