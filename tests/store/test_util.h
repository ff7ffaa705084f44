// Shared by the store tests: a temporary data directory, fresh stores of either backend (the
// conformance suite runs every Store test against SQLite and PostgreSQL) and small record
// builders.
#pragma once

#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <ostream>
#include <string>

#include "gtest/gtest.h"
#include "store/digest.h"
#include "store/store.h"
#include "tests/store/pg_test_util.h"

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

enum class Backend { kSqlite, kPostgres };

// Where one fresh store lives: a new data directory, or a new schema of the test cluster.
class StoreLocation {
 public:
  StoreLocation(Backend backend, const std::string& pg_url) : backend_(backend) {
    if (backend == Backend::kSqlite) {
      path_ = dir_.path() + "/data";
    } else {
      schema_ = std::make_unique<PgSchema>(pg_url);
      path_ = schema_->path();
    }
  }
  const std::string& path() const { return path_; }  // for StoreOptions.path
  std::string error() const { return schema_ == nullptr ? "" : schema_->error(); }
  const TempDir& dir() const { return dir_; }

 private:
  Backend backend_;
  TempDir dir_;
  std::unique_ptr<PgSchema> schema_;
  std::string path_;
};

// Base of the suites that run against both stores (INSTANTIATE_TEST_SUITE_P with
// kBothBackends). Derived SetUp()s call this one first and return when IsSkipped().
class BackendTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    if (GetParam() == Backend::kPostgres) {
      PgUrl pg = TestPgUrl();
      if (!pg.error.empty()) FAIL() << pg.error;
      if (pg.url.empty()) {
        GTEST_SKIP() << "no PostgreSQL cluster: run through ctest (which starts one), or start "
                        "one with scripts/pg_test_cluster.sh start DIR and set ROTE_TEST_PG_URL "
                        "to the URL it prints";
      }
      pg_url_ = pg.url;
    }
    location_ = NewLocation();
    if (!location_->error().empty()) FAIL() << "PostgreSQL: " << location_->error();
  }
  // A further fresh location of this test's backend.
  std::unique_ptr<StoreLocation> NewLocation() const {
    return std::make_unique<StoreLocation>(GetParam(), pg_url_);
  }
  bool Ready() const { return !IsSkipped() && !HasFailure(); }
  const std::string& StorePath() const { return location_->path(); }
  // A scratch directory (on both backends), for files beside the store.
  const std::string& ScratchDir() const { return location_->dir().path(); }

  std::string pg_url_;
  std::unique_ptr<StoreLocation> location_;
};

inline void PrintTo(Backend backend, std::ostream* os) {
  *os << (backend == Backend::kSqlite ? "Sqlite" : "Postgres");
}

inline std::string BackendName(const ::testing::TestParamInfo<Backend>& info) {
  return info.param == Backend::kSqlite ? "Sqlite" : "Postgres";
}

#define ROTE_BOTH_BACKENDS(suite)                                                     \
  INSTANTIATE_TEST_SUITE_P(Backends, suite,                                           \
                           ::testing::Values(::rote::store::testing::Backend::kSqlite, \
                                             ::rote::store::testing::Backend::kPostgres), \
                           ::rote::store::testing::BackendName)
#define ROTE_SQLITE_ONLY(suite)                                                        \
  INSTANTIATE_TEST_SUITE_P(Backends, suite,                                            \
                           ::testing::Values(::rote::store::testing::Backend::kSqlite), \
                           ::rote::store::testing::BackendName)

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
