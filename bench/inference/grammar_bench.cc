// Grammar-constrained decoding benchmark: compile time and memory of a grammar with a
// 151,936-token vocabulary (Qwen2's size), and the time of one token mask along real replies,
// printed as JSON lines with the targets of issue 46 beside them (median <= 100 us, p99 <= 1 ms
// per mask on one core).
//
// The vocabulary is synthetic but shaped like a byte-level BPE one: the 256 bytes, then the
// most frequent pieces (words with and without a leading space, punctuation and whitespace
// runs, digits, UTF-8) of the repository's own sources and docs, then CJK pieces, until it has
// 151,936 entries. It is a pure function of the sources, so runs compare.
//
//   bench_grammar [--vocab N] [--reps R]
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "bench/inference/synthetic_vocab.h"
#include "inference/grammar/closing.h"
#include "inference/grammar/grammar.h"

namespace fs = std::filesystem;
using rote::inference::grammar::BuiltinGrammar;
using rote::inference::grammar::CompiledGrammar;
using rote::inference::grammar::Matcher;

namespace {

double NowUs() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

size_t RssBytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

// Greedy longest-match tokenization of `text` over the vocabulary.
std::vector<int32_t> Tokenize(const std::string& text, const std::unordered_map<std::string, int32_t>& ids) {
  std::vector<int32_t> out;
  size_t i = 0;
  while (i < text.size()) {
    for (size_t len = std::min<size_t>(16, text.size() - i); len >= 1; --len) {
      auto it = ids.find(text.substr(i, len));
      if (it != ids.end()) {
        out.push_back(it->second);
        i += len;
        break;
      }
    }
  }
  return out;
}

const char* const kLuaReplies[] = {
    "```lua\n-- Currency from a symbol or an ISO code.\nlocal symbols = { [\"$\"] = \"USD\", [\"€\"] = \"EUR\", [\"£\"] = \"GBP\" }\n\n"
    "return function(text)\n  local currency\n  for symbol, code in pairs(symbols) do\n"
    "    if string.find(text, symbol, 1, true) then currency = code end\n  end\n"
    "  currency = currency or string.match(text, \"%u%u%u\")\n"
    "  local number = string.match(text, \"%d[%d., ]*%d\") or string.match(text, \"%d\")\n"
    "  local whole, fraction = string.match(number, \"^(.-)[.,](%d%d)$\")\n"
    "  if not whole then whole, fraction = number, \"00\" end\n  whole = string.gsub(whole, \"%D\", \"\")\n"
    "  return { currency = currency, cents = tonumber(whole) * 100 + tonumber(fraction) }\nend\n```",
    "```lua\nlocal function split(s, sep)\n  local out = {}\n  for piece in string.gmatch(s, \"([^\" .. sep .. \"]+)\") do\n"
    "    out[#out + 1] = piece\n  end\n  return out\nend\n\nreturn function(input)\n  local rows = {}\n"
    "  for i, line in ipairs(split(input.text, \"\\n\")) do\n    local fields = split(line, \",\")\n"
    "    if #fields >= 2 then\n      rows[#rows + 1] = { name = fields[1], value = tonumber(fields[2]) or 0, index = i }\n"
    "    end\n  end\n  table.sort(rows, function(a, b) return a.value > b.value end)\n  return rows\nend\n```",
    "```lua\nreturn function(x)\n  local total, count = 0, 0\n  for _, v in ipairs(x.values) do\n"
    "    if type(v) == \"number\" and v == v then\n      total = total + v\n      count = count + 1\n    end\n  end\n"
    "  if count == 0 then return { mean = 0 } end\n  return { mean = total / count, count = count, max = math.max(table.unpack(x.values)) }\nend\n```",
};
const char* const kRe2Replies[] = {
    "```re2\n\\bINV-\\d{4}-\\d{4}\\b\n```",
    "```re2\n[$€£] ?\\d(?:[., ]?\\d)*|\\b(?:EUR|USD|GBP|CHF) ?\\d(?:[., ]?\\d)*\n```",
    "```re2\n^(?P<client>\\S+) \\S+ \\S+ \\[[^\\]]+\\] \"(?P<method>[A-Z]+) (?P<path>\\S+)\" (?P<status>\\d{3})$\n```",
};
const char* const kJsonReplies[] = {
    "{\"name\": \"invoice\", \"items\": [{\"id\": 1, \"price\": 12.5, \"tags\": [\"a\", \"b\"]}, {\"id\": 2, \"price\": -3e2}], \"paid\": false, \"note\": null}",
};

const std::vector<std::string> kGlobals = {
    "assert", "error", "ipairs", "next", "pairs", "pcall", "rawequal", "rawget", "rawlen", "rawset", "select",
    "setmetatable", "getmetatable", "tonumber", "tostring", "type", "xpcall", "string", "table", "math", "utf8"};

void Percentiles(std::vector<double> v, double* median, double* p99, double* max, double* mean) {
  std::sort(v.begin(), v.end());
  *median = v[v.size() / 2];
  *p99 = v[std::min(v.size() - 1, static_cast<size_t>(v.size() * 0.99))];
  *max = v.back();
  double s = 0;
  for (double x : v) s += x;
  *mean = s / v.size();
}

void RunGrammar(const char* name, const std::vector<std::string>& vocab,
                const std::unordered_map<std::string, int32_t>& ids, const std::vector<std::string>& replies,
                bool restrict_names, int reps) {
  const size_t rss0 = RssBytes();
  const double t0 = NowUs();
  auto g = CompiledGrammar::Compile(BuiltinGrammar(name), vocab, {static_cast<int32_t>(vocab.size()) - 1});
  const double t1 = NowUs();
  if (!g.ok()) {
    std::fprintf(stderr, "%s: %s\n", name, g.status().message().c_str());
    std::exit(1);
  }
  std::printf("{\"bench\":\"grammar_compile\",\"grammar\":\"%s\",\"vocab\":%zu,\"compile_ms\":%.1f,"
              "\"memory_mb\":%.1f,\"rss_delta_mb\":%.1f}\n",
              name, vocab.size(), (t1 - t0) / 1000, (*g)->MemoryBytes() / 1048576.0, (RssBytes() - rss0) / 1048576.0);
  std::vector<uint64_t> bits((*g)->mask_words());
  for (int rep = 0; rep < reps; ++rep) {
    std::vector<double> times;
    int tokens = 0, rejected = 0;
    for (const auto& reply : replies) {
      auto m = Matcher::Create(*g, restrict_names ? std::optional(kGlobals) : std::nullopt);
      for (int32_t id : Tokenize(reply, ids)) {
        const double a = NowUs();
        m->FillNextTokenMask(bits.data());
        times.push_back(NowUs() - a);
        ++tokens;
        if (!((bits[id / 64] >> (id % 64)) & 1) || !m->AcceptToken(id)) { ++rejected; break; }
      }
      const double a = NowUs();
      m->FillNextTokenMask(bits.data());
      times.push_back(NowUs() - a);
    }
    double median, p99, max, mean;
    Percentiles(times, &median, &p99, &max, &mean);
    std::printf("{\"bench\":\"grammar_mask\",\"grammar\":\"%s\",\"pass\":\"%s\",\"vocab\":%zu,\"masks\":%zu,"
                "\"replies_rejected\":%d,\"median_us\":%.1f,\"p99_us\":%.1f,\"max_us\":%.1f,\"mean_us\":%.1f,"
                "\"target_median_us\":100,\"target_p99_us\":1000,\"memory_after_mb\":%.1f}\n",
                name, rep == 0 ? "cold" : "warm", vocab.size(), times.size(), rejected, median, p99, max, mean,
                (*g)->MemoryBytes() / 1048576.0);
    (void)tokens;
  }
  // Planning a closing (grammar/closing.h) at every 4th token of each reply, with the engine's
  // default budget of 47 bytes.
  std::vector<double> plan_times;
  int planned = 0;
  for (const auto& reply : replies) {
    auto m = Matcher::Create(*g, restrict_names ? std::optional(kGlobals) : std::nullopt);
    int step = 0;
    for (int32_t id : Tokenize(reply, ids)) {
      if (!m->AcceptToken(id)) break;
      if (++step % 4 != 0) continue;
      const double a = NowUs();
      const std::optional<std::string> plan = rote::inference::grammar::PlanClosing(
          *m, rote::inference::grammar::ClosingPieces(name), 47);
      plan_times.push_back(NowUs() - a);
      planned += plan.has_value() ? 1 : 0;
    }
  }
  if (!plan_times.empty()) {
    double median, p99, max, mean;
    Percentiles(plan_times, &median, &p99, &max, &mean);
    std::printf("{\"bench\":\"grammar_closing\",\"grammar\":\"%s\",\"plans\":%zu,\"found\":%d,\"median_us\":%.1f,"
                "\"p99_us\":%.1f,\"max_us\":%.1f}\n",
                name, plan_times.size(), planned, median, p99, max);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int size = 151936, reps = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--vocab")) size = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
  }
  const double t0 = NowUs();
  std::vector<std::string> vocab = rote::bench::SyntheticVocab(size - 1, fs::path(ROTE_SOURCE_DIR));
  vocab.push_back("");  // EOS
  std::unordered_map<std::string, int32_t> ids;
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(vocab.size()); ++i) ids.emplace(vocab[i], i);
  std::printf("{\"bench\":\"grammar_vocab\",\"vocab\":%zu,\"build_ms\":%.1f,\"cores\":1}\n", vocab.size(), (NowUs() - t0) / 1000);
  RunGrammar("lua_reply", vocab, ids, {std::begin(kLuaReplies), std::end(kLuaReplies)}, true, reps);
  RunGrammar("re2_reply", vocab, ids, {std::begin(kRe2Replies), std::end(kRe2Replies)}, false, reps);
  RunGrammar("json", vocab, ids, {std::begin(kJsonReplies), std::end(kJsonReplies)}, false, reps);
  return 0;
}
