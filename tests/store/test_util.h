// Shared by the store tests: a temporary data directory and small record builders.
#pragma once

#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <string>

#include "gtest/gtest.h"
#include "store/digest.h"
#include "store/store.h"

namespace rote::store::testing {

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "rote-store-XXXXXX").string();
    char* made = mkdtemp(pattern.data());
    if (made == nullptr) std::abort();
    path_ = made;
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A clock that advances 1 ms per reading, so recorded times are predictable.
struct FakeClock {
  std::atomic<int64_t> now{1'700'000'000'000};
  std::function<int64_t()> Fn() {
    return [this] { return now.fetch_add(1); };
  }
};

inline std::unique_ptr<Store> OpenOrDie(StoreOptions options) {
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(options);
  if (!store.ok()) {
    ADD_FAILURE() << "Store::Open: " << store.status();
    std::abort();
  }
  return *std::move(store);
}

inline GenerationSpecRecord MakeSpec(const std::string& name) {
  GenerationSpecRecord spec;
  spec.kind = "lua_function";
  spec.name = name;
  spec.canonical = "{\"kind\":\"lua_function\",\"name\":\"" + name + "\"}";
  spec.digest = Sha256Digest(spec.canonical);
  return spec;
}

inline BlueprintRecord MakeBlueprint(const std::string& name, const std::string& version) {
  BlueprintRecord bp;
  bp.name = name;
  bp.version = version;
  bp.source = "local bp = rote.blueprint { name = '" + name + "', version = '" + version +
              "' }\nreturn bp\n";
  bp.digest = Sha256Digest(bp.source);
  bp.generation_points = {MakeSpec(name + ".parse"), MakeSpec(name + ".find")};
  return bp;
}

inline ArtifactRecord MakeArtifact(const std::string& point, const std::string& source) {
  ArtifactRecord a;
  a.kind = "lua_function";
  a.generation_point = point;
  a.source = source;
  a.options_json = "{}";
  a.validation_report_json = "{\"passed\":true}";
  a.provenance.model_digest = Sha256Digest("model");
  a.provenance.numerics_profile = "exact";
  a.digest = Sha256Digest("lua_function\n{}\n" + source);
  return a;
}

}  // namespace rote::store::testing
