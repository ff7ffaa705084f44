// The offline tools' backup of a store (the rest of the facade is orchestrator/offline.h). Inline,
// so that `rote backup` links with rote_store alone: the store's suite compiles cli/cmd_backup.cc
// without the orchestrator.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "store/store.h"

namespace rote::orchestrator::offline {

// Copies the store at `data_dir` (a data directory, or a .db file) into one self-contained
// SQLite file at `out`, from one snapshot. A store that does not open says "cannot open
// DATA_DIR: ...".
inline absl::Status BackupStore(const std::string& data_dir, const std::string& out) {
  store::StoreOptions options;
  options.path = data_dir;
  options.reader_pool_size = 1;
  absl::StatusOr<std::unique_ptr<store::Store>> store = store::Store::Open(options);
  if (!store.ok()) {
    return absl::Status(store.status().code(),
                        absl::StrCat("cannot open ", data_dir, ": ", std::string(store.status().message())));
  }
  return (*store)->Backup(out);
}

}  // namespace rote::orchestrator::offline
