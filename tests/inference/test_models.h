// Synthesized model directories shared by the inference tests (made once per process).
#pragma once

#include <string>

#include "inference/model/config.h"

namespace rote::inference::testing {

// A random-weight model directory of this family and synth shape, seed 7.
std::string SynthModelDir(ModelFamily family, const std::string& shape, DType dtype = DType::kBF16);

// A fresh empty directory under the test temp dir.
std::string FreshDir(const std::string& name);

}  // namespace rote::inference::testing
