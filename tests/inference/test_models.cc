#include "tests/inference/test_models.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "inference/model/synth.h"

namespace rote::inference::testing {

std::string FreshDir(const std::string& name) {
  const std::filesystem::path p =
      std::filesystem::path(::testing::TempDir()) / ("rote_infer_" + std::to_string(::getpid()) + "_" + name);
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p.string();
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteAll(const std::string& path, const std::string& data) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << data;
}

std::string SynthModelDir(ModelFamily family, const std::string& shape, DType dtype) {
  static std::mutex mu;
  static std::map<std::string, std::string> made;
  const std::string key = std::string(ModelFamilyName(family)) + "_" + shape + "_" + std::string(DTypeName(dtype));
  std::lock_guard<std::mutex> lock(mu);
  auto it = made.find(key);
  if (it != made.end()) return it->second;
  const std::string dir = FreshDir(key);
  SynthOptions o;
  o.family = family;
  o.shape = shape;
  o.dtype = dtype;
  o.seed = 7;
  Status s = SynthesizeModel(o, dir);
  EXPECT_TRUE(s.ok()) << s.ToString();
  made[key] = dir;
  return dir;
}

}  // namespace rote::inference::testing
