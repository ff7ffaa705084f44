// Tokenizer throughput: one JSON line per model directory (default: the three fixtures).
//   bench_tokenizer [model_dir...]
// Encode/decode of 1 MiB of mixed English, code, CJK and emoji, and of 1 MiB of ASCII English
// and code, one thread. Times are CPU
// time of this process (std::clock), which shared machines disturb less than wall time.
#include <cstdio>
#include <ctime>
#include <string>
#include <vector>

#include "inference/tokenizer/tokenizer.h"

namespace {

double CpuSeconds(std::clock_t start) { return double(std::clock() - start) / CLOCKS_PER_SEC; }

}  // namespace

int main(int argc, char** argv) {
  using rote::inference::Tokenizer;
  std::vector<std::string> dirs(argv + 1, argv + argc);
  if (dirs.empty()) {
    for (const char* family : {"qwen2", "llama3", "qwen3"}) {
      dirs.push_back(std::string(ROTE_SOURCE_DIR) + "/tests/fixtures/" + family);
    }
  }
  const std::string english_code =
      "The quick brown fox jumps over the lazy dog. It's 2024, and we've 1,234 lines of code:\n"
      "def main():\n    for i in range(10):\n        print(i, i * i)\n    return 0\n";
  const std::string mixed_unit =
      english_code +
      "\u4f60\u597d\u4e16\u754c\u3002 \U0001F600 caf\u00e9 r\u00e9sum\u00e9 <|im_end|>\n";
  constexpr int kRounds = 3;
  for (const std::string& dir : dirs)
  for (const auto& [text_name, unit] : {std::pair<const char*, std::string>{"mixed", mixed_unit},
                                        {"ascii", english_code}}) {
    std::string text;
    while (text.size() < (1u << 20)) text += unit;
    std::clock_t start = std::clock();
    auto tok = Tokenizer::Load(dir);
    const double load_s = CpuSeconds(start);
    if (!tok.ok()) {
      std::fprintf(stderr, "%s: %s\n", dir.c_str(), tok.status().ToString().c_str());
      return 1;
    }
    std::vector<int32_t> ids;
    start = std::clock();
    for (int r = 0; r < kRounds; ++r) ids = tok->Encode(text);
    const double encode_s = CpuSeconds(start) / kRounds;
    size_t decoded = 0;
    start = std::clock();
    for (int r = 0; r < kRounds; ++r) decoded += tok->Decode(ids).size();
    const double decode_s = CpuSeconds(start) / kRounds;
    std::printf(
        "{\"bench\": \"tokenizer\", \"model_dir\": \"%s\", \"text\": \"%s\", \"vocab\": %d, \"load_ms\": %.2f, "
        "\"text_bytes\": %zu, \"tokens\": %zu, \"encode_MB_per_s\": %.2f, "
        "\"encode_tokens_per_s\": %.0f, \"decode_MB_per_s\": %.1f, \"decoded_bytes\": %zu}\n",
        dir.c_str(), text_name, tok->vocab_size(), load_s * 1e3, text.size(), ids.size(),
        text.size() / encode_s / 1e6, ids.size() / encode_s, text.size() / decode_s / 1e6,
        decoded / kRounds);
  }
  return 0;
}
