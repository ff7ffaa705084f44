// Runs one function artifact on one JSON input and prints the canonical result, the printed
// output and the error, so the determinism test can compare fresh processes byte for byte.
#include <fstream>
#include <iostream>
#include <sstream>

#include "sandbox/lua_runtime.h"
#include "sandbox/value.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: sandbox_run_script FILE.lua INPUT_JSON\n";
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  std::stringstream src;
  src << in.rdbuf();
  auto input = rote::sandbox::ParseJson(argv[2]);
  if (!input.ok()) {
    std::cout << "input error: " << input.status() << "\n";
    return 1;
  }
  auto results = rote::sandbox::RunFunctionArtifact(src.str(), "script.lua", {*input}, {});
  if (!results.ok()) {
    std::cout << "error: " << results.status() << "\n";
    return 0;
  }
  const auto& r = (*results)[0];
  std::cout << "output: " << r.output << "\n";
  if (!r.status.ok()) {
    std::cout << "error: " << r.status << "\n";
  } else {
    auto json = rote::sandbox::CanonicalJson(r.value);
    std::cout << "result: " << (json.ok() ? *json : json.status().ToString()) << "\n";
  }
  std::cout << "instructions: " << r.usage.instructions << "\n";
  std::cout << "peak_memory_bytes: " << r.usage.peak_memory_bytes << "\n";
  return 0;
}
