// A synthetic vocabulary shaped like a byte-level BPE one, for the grammar benchmarks: the 256
// bytes, then the most frequent pieces (words with and without a leading space, punctuation and
// whitespace runs, digits, UTF-8) of the repository's own sources and docs, then CJK pieces,
// until it has `size` entries. A pure function of the sources, so runs compare.
#pragma once

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

namespace rote::bench {

namespace fs = std::filesystem;

inline std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

enum CharClass { kLetter, kDigit, kSpace, kPunct, kHigh };
inline CharClass ClassOf(unsigned char c) {
  if (c >= 0x80) return kHigh;
  if (std::isalpha(c) || c == '_') return kLetter;
  if (std::isdigit(c)) return kDigit;
  if (std::isspace(c)) return kSpace;
  return kPunct;
}

// Pre-tokens the way GPT-style pre-tokenizers cut text: an optional space glued to a word,
// digit runs of up to 3, punctuation runs, whitespace runs, UTF-8 runs.
inline std::vector<std::string> PreTokens(const std::string& text) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < text.size()) {
    size_t j = i;
    const bool lead_space = text[i] == ' ' && i + 1 < text.size() && ClassOf(text[i + 1]) != kSpace;
    if (lead_space) ++j;
    const CharClass c = ClassOf(text[j]);
    size_t k = j + 1;
    while (k < text.size() && ClassOf(text[k]) == c && (c != kDigit || k - j < 3)) ++k;
    out.push_back(text.substr(i, k - i));
    i = k;
  }
  return out;
}

inline std::vector<std::string> SyntheticVocab(int size, const fs::path& root) {
  std::vector<std::string> vocab;
  for (int b = 0; b < 256; ++b) vocab.push_back(std::string(1, static_cast<char>(b)));
  std::string corpus;
  std::vector<fs::path> files;
  for (const char* dir : {"blueprints", "docs", "inference", "orchestrator", "sandbox", "store", "cli", "tests"}) {
    if (!fs::exists(root / dir)) continue;
    for (const auto& e : fs::recursive_directory_iterator(root / dir)) {
      const auto ext = e.path().extension().string();
      if (ext == ".lua" || ext == ".md" || ext == ".cc" || ext == ".h" || ext == ".lock") files.push_back(e.path());
    }
  }
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    if (corpus.size() > (6u << 20)) break;
    corpus += ReadFile(f);
  }
  std::unordered_map<std::string, int> count;
  for (const auto& pt : PreTokens(corpus)) {
    for (size_t a = 0; a < pt.size(); ++a) {
      if (a > 0 && pt[0] == ' ' && a == 1) continue;
      for (size_t len = 2; len <= 16 && a + len <= pt.size(); ++len) ++count[pt.substr(a, len)];
    }
  }
  std::vector<std::pair<std::string, int>> pieces(count.begin(), count.end());
  std::sort(pieces.begin(), pieces.end(), [](const auto& x, const auto& y) {
    const long sx = static_cast<long>(x.second) * static_cast<long>(x.first.size());
    const long sy = static_cast<long>(y.second) * static_cast<long>(y.first.size());
    return sx != sy ? sx > sy : x.first < y.first;
  });
  const int cjk_share = size / 5;
  for (const auto& [p, n] : pieces) {
    if (static_cast<int>(vocab.size()) >= size - cjk_share) break;
    vocab.push_back(p);
  }
  // CJK: single characters, then pairs of them (multilingual vocabularies hold many).
  auto utf8 = [](uint32_t cp) {
    std::string s;
    s.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    s.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    return s;
  };
  for (uint32_t cp = 0x4E00; static_cast<int>(vocab.size()) < size && cp < 0x4E00 + 8000; ++cp) vocab.push_back(utf8(cp));
  for (uint32_t a = 0x4E00; static_cast<int>(vocab.size()) < size; ++a) {
    for (uint32_t b = 0x4E00; b < 0x4E00 + 40 && static_cast<int>(vocab.size()) < size; ++b) vocab.push_back(utf8(a) + utf8(b));
  }
  return vocab;
}

}  // namespace rote::bench
