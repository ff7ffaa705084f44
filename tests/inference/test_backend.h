// The backend the inference suites (engine, invariance, reference) drive, chosen by
// ROTE_TEST_BACKEND:
// - unset (CI, any machine): the CPU backend;
// - `cuda`: the CUDA backend in the exact profile, so the same suites hold it to the same contract
//   as the CPU. Where CUDA cannot run, the tests fail with the backend's error: whoever set the
//   variable wanted CUDA;
// - `cuda-if-present`: the same where a CUDA device is present, and every test of the binary
//   skipped where none is. ctest runs each of these suites a second time this way (prefix
//   `cuda_backend.`), so a machine with a GPU runs them against the CUDA backend too.
// docs/cuda.md, "Tests".
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "inference/backend.h"
#include "inference/cuda/cuda_backend.h"

namespace rote::inference::testing {

inline std::string TestBackendMode() {
  const char* v = std::getenv("ROTE_TEST_BACKEND");
  return v != nullptr ? std::string(v) : std::string();
}

inline bool CudaTestBackend() {
  const std::string mode = TestBackendMode();
  return mode == "cuda" || mode == "cuda-if-present";
}

// The CPU backend with `cpu`, or the CUDA backend with its max_positions.
inline StatusOr<std::unique_ptr<Backend>> CreateTestBackend(std::shared_ptr<const Model> model,
                                                            const CpuBackendOptions& cpu) {
  if (!CudaTestBackend()) return CreateCpuBackend(std::move(model), cpu);
  CudaBackendOptions o;
  o.max_positions = cpu.max_positions;
  StatusOr<std::unique_ptr<CudaBackend>> cuda = CreateCudaBackend(std::move(model), o);
  if (!cuda.ok()) return cuda.status();
  return std::unique_ptr<Backend>(std::move(*cuda));
}

// Skips every test of the binary under `cuda-if-present` where no CUDA device is present, and
// rejects a mode it does not know (a typo would otherwise test the CPU again in silence).
class TestBackendEnvironment final : public ::testing::Environment {
 public:
  void SetUp() override {
    const std::string mode = TestBackendMode();
    if (!mode.empty() && mode != "cuda" && mode != "cuda-if-present")
      FAIL() << "ROTE_TEST_BACKEND must be unset, cuda or cuda-if-present, not `" << mode << "`";
    if (mode == "cuda-if-present" && CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device: the CUDA run skips";
  }
};
inline ::testing::Environment* const kTestBackendEnvironment =
    ::testing::AddGlobalTestEnvironment(new TestBackendEnvironment);

}  // namespace rote::inference::testing
