// A synthetic vocabulary shaped like a byte-level BPE one, for the grammar and workload
// benchmarks: the 256 bytes, then the most frequent pieces (words with and without a leading
// space, punctuation and whitespace runs, digits, UTF-8) of the repository's own sources and docs,
// then CJK pieces, until it has `size` entries. A pure function of the sources: runs of one tree
// compare. The ranked pieces can be written to a file (WritePieces) and read back (ReadPieces), so
// a benchmark's tokenization stays the same while the tree changes (the workload benchmark's
// `<workload>.vocab`).
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

#include "nlohmann/json.hpp"

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

// The source tree's pieces, most frequent (count times length) first, at most `limit`.
inline std::vector<std::string> RankedSourcePieces(const fs::path& root, size_t limit) {
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
  std::vector<std::string> ranked;
  for (size_t i = 0; i < pieces.size() && i < limit; ++i) ranked.push_back(std::move(pieces[i].first));
  return ranked;
}

// The vocabulary of `size` entries from ranked pieces: the bytes, the pieces, then CJK.
inline std::vector<std::string> VocabFromPieces(int size, const std::vector<std::string>& ranked) {
  std::vector<std::string> vocab;
  for (int b = 0; b < 256; ++b) vocab.push_back(std::string(1, static_cast<char>(b)));
  const int cjk_share = size / 5;
  for (const std::string& p : ranked) {
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

inline std::vector<std::string> SyntheticVocab(int size, const fs::path& root) {
  return VocabFromPieces(size, RankedSourcePieces(root, static_cast<size_t>(std::max(size, 0))));
}

// How many ranked pieces a workload's `.vocab` holds: enough for vocabularies of 250,000 entries.
constexpr size_t kWorkloadPieces = 200000;

// Ranked pieces as a file: a header line, one piece a line in hex (pieces are bytes, not always
// whole UTF-8 characters), and a last line "end N" with their count, so a cut file is refused.
constexpr const char* kPiecesHeader = "rote synthetic vocabulary pieces v1";
inline bool WritePieces(const fs::path& path, const std::vector<std::string>& pieces) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << kPiecesHeader << "\n";
  static const char* hex = "0123456789abcdef";
  for (const std::string& p : pieces) {
    std::string line;
    for (unsigned char c : p) {
      line.push_back(hex[c >> 4]);
      line.push_back(hex[c & 15]);
    }
    out << line << "\n";
  }
  out << "end " << pieces.size() << "\n";
  out.flush();
  return static_cast<bool>(out);
}

// The pieces of a WritePieces file; false (and `error` says why) for anything else.
inline bool ReadPieces(const fs::path& path, std::vector<std::string>* pieces, std::string* error) {
  std::ifstream in(path, std::ios::binary);
  std::string line;
  if (!in) {
    *error = "cannot read " + path.string();
    return false;
  }
  if (!std::getline(in, line) || line != kPiecesHeader) {
    *error = path.string() + " is not a pieces file (its first line must be '" + kPiecesHeader + "')";
    return false;
  }
  pieces->clear();
  bool ended = false;
  auto nibble = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; };
  for (size_t n = 2; std::getline(in, line); ++n) {
    if (ended) {
      *error = path.string() + ":" + std::to_string(n) + ": text after the end line";
      return false;
    }
    if (line.rfind("end ", 0) == 0) {
      if (line != "end " + std::to_string(pieces->size())) {
        *error = path.string() + ":" + std::to_string(n) + ": '" + line + "' but " + std::to_string(pieces->size()) +
                 " pieces were read";
        return false;
      }
      ended = true;
      continue;
    }
    std::string p;
    for (size_t i = 0; i < line.size(); i += 2) {
      const int hi = nibble(line[i]), lo = i + 1 < line.size() ? nibble(line[i + 1]) : -1;
      if (hi < 0 || lo < 0) {
        *error = path.string() + ":" + std::to_string(n) + ": not an even run of lowercase hex digits";
        return false;
      }
      p.push_back(static_cast<char>(hi * 16 + lo));
    }
    if (p.size() < 2) {
      *error = path.string() + ":" + std::to_string(n) + ": a piece has at least two bytes";
      return false;
    }
    pieces->push_back(std::move(p));
  }
  if (!ended) {
    *error = path.string() + ": no end line (a cut file?)";
    return false;
  }
  return true;
}

// GPT-2's byte-to-unicode map: how byte-level BPE vocabularies spell bytes in tokenizer.json.
inline std::string ByteLevel(const std::string& bytes) {
  static const std::vector<uint32_t> map = [] {
    std::vector<uint32_t> m(256, 0);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      m[b] = printable ? static_cast<uint32_t>(b) : static_cast<uint32_t>(256 + n++);
    }
    return m;
  }();
  std::string out;
  for (unsigned char c : bytes) {
    const uint32_t cp = map[c];
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp));
    } else {
      out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }
  return out;
}

// Replaces the synthesized tokenizer's vocabulary (256 bytes, then the special tokens) by the
// bytes, the special tokens at their ids, and synthetic pieces up to the model's vocabulary.
// The pieces come with no merges, so byte-level BPE never reaches them and text encodes byte by
// byte; with whole_pieces, the tokenizer takes a pre-token found in the vocabulary as one token
// (tokenizers' ignore_merges, as Llama 3's files set it), which brings prompts near a real code
// model's token counts (the workload's first prompt: 1,460 bytes, 691 tokens).
// `ranked` (RankedSourcePieces or ReadPieces) gives the pieces.
inline bool WidenVocabularyWith(const std::string& dir, int32_t vocab_size, const std::vector<std::string>& ranked,
                                bool whole_pieces = false) {
  std::ifstream in(dir + "/tokenizer.json");
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded()) return false;
  int32_t first_free = 256;
  for (const auto& t : j["added_tokens"]) first_free = std::max(first_free, t["id"].get<int32_t>() + 1);
  const std::vector<std::string> pieces = VocabFromPieces(vocab_size - (first_free - 256), ranked);
  nlohmann::json vocab = nlohmann::json::object();
  int32_t id = 0;
  for (size_t i = 0; i < pieces.size() && id < vocab_size; ++i) {
    if (id == 256) id = first_free;  // the special tokens' ids
    const std::string key = ByteLevel(pieces[i]);
    if (vocab.contains(key)) continue;
    vocab[key] = id++;
  }
  j["model"]["vocab"] = vocab;
  if (whole_pieces) j["model"]["ignore_merges"] = true;
  std::ofstream out(dir + "/tokenizer.json", std::ios::trunc);
  out << j.dump();
  return static_cast<bool>(out);
}

inline bool WidenVocabulary(const std::string& dir, int32_t vocab_size, const fs::path& source_root,
                            bool whole_pieces = false) {
  return WidenVocabularyWith(dir, vocab_size, RankedSourcePieces(source_root, static_cast<size_t>(std::max(vocab_size, 0))),
                             whole_pieces);
}

}  // namespace rote::bench
