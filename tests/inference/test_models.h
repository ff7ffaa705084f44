// Synthesized model directories shared by the inference tests (made once per process).
#pragma once

#include <string>

#include "inference/model/config.h"

namespace rote::inference::testing {

// A random-weight model directory of this family and synth shape, seed 7.
std::string SynthModelDir(ModelFamily family, const std::string& shape, DType dtype = DType::kBF16);

// A fresh empty directory under the test temp dir.
std::string FreshDir(const std::string& name);

// A whole file's bytes ("" when it cannot be read), and writing them back (truncating).
std::string ReadAll(const std::string& path);
void WriteAll(const std::string& path, const std::string& data);

}  // namespace rote::inference::testing
