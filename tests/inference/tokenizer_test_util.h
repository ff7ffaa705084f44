// Helpers shared by the tokenizer suites: reading fixture files and the inputs corpus cases
// stand for.
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace rote::inference::tokenizer_test {

// The file's bytes; empty when it cannot be read.
inline std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::string FromHex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

// The input a corpus case stands for: raw bytes for invalid-UTF-8 ("hex") cases.
inline std::string CaseInput(const nlohmann::json& c) {
  return c.contains("hex") ? FromHex(c["hex"].get<std::string>()) : c["text"].get<std::string>();
}

}  // namespace rote::inference::tokenizer_test
