// Decode throughput with and without the Lua reply grammar, side by side in one process: a
// synthesized model of the given shape (random weights) whose tokenizer holds a realistic
// byte-level vocabulary of the model's size (bench/inference/synthetic_vocab.h), so masks cost
// what they cost with a real one. Each round runs the unconstrained batch and then the
// constrained one; JSON lines give tokens/s of each, their ratio (the target: >= 0.9 on the GPU,
// >= 0.95 on the CPU) and the mask fill time per row.
//
//   bench_grammar_decode [--shape 0.5b] [--device cpu|cuda] [--numerics exact|fast]
//                        [--batches 1,32] [--tokens 96] [--rounds 2] [--threads N] [--closing 48]
//
// --closing: EngineOptions::grammar_closing_tokens (0: constrained replies are never closed
// early, so both sides decode the same number of tokens).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "bench/inference/synthetic_vocab.h"
#include "inference/engine.h"
#include "inference/grammar/grammar.h"
#include "inference/model/synth.h"
#include "nlohmann/json.hpp"

namespace fs = std::filesystem;
using namespace rote::inference;

namespace {

double NowS() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

std::vector<int> ParseList(const std::string& s) {
  std::vector<int> v;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, ',')) v.push_back(std::stoi(part));
  return v;
}

const std::vector<std::string> kSandboxNames = {
    "_G",  "_VERSION", "assert", "error", "getmetatable", "ipairs", "next",  "pairs", "pcall",     "print",
    "rawequal", "rawget", "rawlen", "rawset", "select", "setmetatable", "tonumber", "tostring", "type", "xpcall",
    "coroutine", "math", "string", "table", "utf8"};

struct Measured {
  int64_t tokens = 0;
  double seconds = 0;
};

Measured RunBatch(Engine& engine, int batch, int tokens, bool constrained, int round) {
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < batch; ++i) {
    GenerationRequest r;
    r.prompt = "Write a Lua function for case " + std::to_string(round * 1000 + i) +
               " that parses a decimal number written with a comma.\n";
    r.sampling.max_tokens = tokens;
    if (constrained) {
      r.constraint.grammar = "lua_reply";
      r.constraint.allowed_globals = kSandboxNames;
    } else {
      r.sampling.ignore_eos = true;
    }
    reqs.push_back(std::move(r));
  }
  const double t0 = NowS();
  auto ids = engine.SubmitAll(std::move(reqs));
  Measured m;
  if (!ids.ok()) {
    fprintf(stderr, "submit: %s\n", ids.status().message().c_str());
    return m;
  }
  for (RequestId id : *ids) {
    auto r = engine.Wait(id);
    if (r.ok()) m.tokens += static_cast<int64_t>(r->tokens.size());
  }
  m.seconds = NowS() - t0;
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> args = {{"shape", "0.5b"}, {"device", "cpu"}, {"numerics", "exact"},
                                             {"batches", "1,32"}, {"tokens", "96"},  {"rounds", "2"},
                                             {"threads", "0"}, {"closing", "48"}};
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k.rfind("--", 0) != 0 || !args.count(k.substr(2))) {
      fprintf(stderr, "usage: bench_grammar_decode [--shape S] [--device cpu|cuda] [--numerics exact|fast] "
                      "[--batches 1,32] [--tokens N] [--rounds R] [--threads N] [--closing N]\n");
      return 2;
    }
    args[k.substr(2)] = argv[i + 1];
  }
  const std::string dir = (fs::temp_directory_path() / ("rote-grammar-decode-" + args["shape"])).string();
  SynthOptions so;
  so.shape = args["shape"];
  auto config = SynthConfig(so);
  if (!config.ok() || !SynthesizeModel(so, dir).ok() || !rote::bench::WidenVocabulary(dir, config->vocab_size, ROTE_SOURCE_DIR)) {
    fprintf(stderr, "cannot synthesize the %s model\n", args["shape"].c_str());
    return 1;
  }
  EngineOptions eo;
  if (!ParseDeviceName(args["device"], &eo).ok()) return 2;
  eo.numerics_profile = args["numerics"] == "fast" ? NumericsProfile::kFast : NumericsProfile::kExact;
  eo.threads = std::stoi(args["threads"]);
  eo.grammar_closing_tokens = std::stoi(args["closing"]);
  eo.max_batch = 64;
  eo.max_step_tokens = 4096;
  eo.max_context = 2048;
  if (eo.device == Device::kCpu) eo.kv_cache_bytes = 2ll << 30;
  auto engine = Engine::Load(dir, eo);
  if (!engine.ok()) {
    fprintf(stderr, "engine: %s\n", engine.status().message().c_str());
    return 1;
  }
  // Compile the grammar (and build its first token tables) before timing.
  {
    const double t0 = NowS();
    RunBatch(**engine, 1, 4, true, 99);
    printf("{\"event\":\"warmup\",\"grammar_compile_and_first_request_s\":%.3f,\"vocab\":%d}\n", NowS() - t0,
           config->vocab_size);
    RunBatch(**engine, 1, 4, false, 99);
  }
  const int tokens = std::stoi(args["tokens"]);
  for (int batch : ParseList(args["batches"])) {
    // One constrained batch before timing: the grammar's token tables of the lexer states the
    // replies (and their closings) pass through are built on first use and then shared by every
    // later request, as in a server that has run for a while. Its time is printed as "cold".
    const Measured cold = RunBatch(**engine, batch, tokens, true, 98);
    printf("{\"event\":\"cold\",\"batch\":%d,\"lua_tok_s\":%.1f}\n", batch, cold.tokens / cold.seconds);
    Measured free_total, lua_total;
    for (int round = 0; round < std::stoi(args["rounds"]); ++round) {
      // Alternated, so that neither side always runs first.
      Measured f, g;
      if (round % 2 == 0) {
        f = RunBatch(**engine, batch, tokens, false, round);
        g = RunBatch(**engine, batch, tokens, true, round);
      } else {
        g = RunBatch(**engine, batch, tokens, true, round);
        f = RunBatch(**engine, batch, tokens, false, round);
      }
      free_total.tokens += f.tokens;
      free_total.seconds += f.seconds;
      lua_total.tokens += g.tokens;
      lua_total.seconds += g.seconds;
    }
    const double free_rate = free_total.tokens / free_total.seconds;
    const double lua_rate = lua_total.tokens / lua_total.seconds;
    printf("{\"shape\":\"%s\",\"device\":\"%s\",\"numerics\":\"%s\",\"closing\":%d,\"batch\":%d,\"max_tokens\":%d,"
           "\"free_tok_s\":%.1f,\"lua_tok_s\":%.1f,\"ratio\":%.3f,\"target\":%.2f,\"free_tokens\":%lld,"
           "\"lua_tokens\":%lld}\n",
           args["shape"].c_str(), (*engine)->device().c_str(), (*engine)->numerics_profile().c_str(),
           eo.grammar_closing_tokens, batch, tokens,
           free_rate, lua_rate, lua_rate / free_rate, eo.device == Device::kCpu ? 0.95 : 0.9,
           static_cast<long long>(free_total.tokens), static_cast<long long>(lua_total.tokens));
    fflush(stdout);
  }
  return 0;
}
