// The model half of the constrained-generation benchmark (bench/orchestrator/constrained_specs.cc
// writes the prompts and checks the replies; docs/generation.md, "Constrained replies"): reads
// prompts as JSON lines ({"id","kind","messages":[{"role","content"}],"grammar","allowed_globals"}),
// answers each twice with a synthesized model (random weights, a realistic vocabulary), held to
// its grammar and free, greedy, and writes one JSON line per reply:
// {"id","constrained","finish","tokens","text_hex"} (hex: an unconstrained reply need not be
// UTF-8). Inference only, so it runs where the rest of rote is not built.
//
//   bench_grammar_specs --prompts FILE --out FILE [--shape 0.5b] [--device cuda] [--max-tokens 256]
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "bench/inference/synthetic_vocab.h"
#include "inference/engine.h"
#include "inference/model/synth.h"
#include "nlohmann/json.hpp"

namespace fs = std::filesystem;
using namespace rote::inference;

namespace {

std::string Hex(const std::string& s) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out.push_back(d[c >> 4]);
    out.push_back(d[c & 15]);
  }
  return out;
}

double NowS() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> args = {{"prompts", ""}, {"out", ""}, {"shape", "0.5b"}, {"device", "cuda"},
                                             {"max-tokens", "256"}, {"numerics", "exact"}};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k.rfind("--", 0) != 0 || !args.count(k.substr(2))) {
      fprintf(stderr, "usage: bench_grammar_specs --prompts FILE --out FILE [--shape S] [--device D] [--max-tokens N]\n");
      return 2;
    }
    args[k.substr(2)] = argv[i + 1];
  }
  std::ifstream in(args["prompts"]);
  std::vector<nlohmann::json> prompts;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) prompts.push_back(nlohmann::json::parse(line));
  if (prompts.empty()) {
    fprintf(stderr, "no prompts in %s\n", args["prompts"].c_str());
    return 1;
  }
  const std::string dir = (fs::temp_directory_path() / ("rote-grammar-specs-" + args["shape"])).string();
  SynthOptions so;
  so.shape = args["shape"];
  auto config = SynthConfig(so);
  if (!config.ok() || !SynthesizeModel(so, dir).ok() ||
      !rote::bench::WidenVocabulary(dir, config->vocab_size, ROTE_SOURCE_DIR)) {
    fprintf(stderr, "cannot synthesize the %s model\n", args["shape"].c_str());
    return 1;
  }
  EngineOptions eo;
  if (!ParseDeviceName(args["device"], &eo).ok()) return 2;
  eo.numerics_profile = args["numerics"] == "fast" ? NumericsProfile::kFast : NumericsProfile::kExact;
  eo.max_batch = 64;
  eo.max_step_tokens = 8192;
  eo.prefill_chunk = 1024;
  eo.max_context = 4096;
  auto engine = Engine::Load(dir, eo);
  if (!engine.ok()) {
    fprintf(stderr, "engine: %s\n", engine.status().message().c_str());
    return 1;
  }
  std::ofstream out(args["out"], std::ios::trunc);
  const int max_tokens = std::stoi(args["max-tokens"]);
  for (const bool constrained : {true, false}) {
    std::vector<GenerationRequest> reqs;
    for (const nlohmann::json& p : prompts) {
      GenerationRequest r;
      for (const auto& m : p["messages"]) r.messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
      r.sampling.max_tokens = max_tokens;
      if (constrained) {
        r.constraint.grammar = p["grammar"].get<std::string>();
        if (p.contains("allowed_globals")) r.constraint.allowed_globals = p["allowed_globals"].get<std::vector<std::string>>();
      }
      reqs.push_back(std::move(r));
    }
    const double t0 = NowS();
    auto ids = (*engine)->SubmitAll(std::move(reqs));
    if (!ids.ok()) {
      fprintf(stderr, "submit: %s\n", ids.status().message().c_str());
      return 1;
    }
    int64_t tokens = 0;
    for (size_t i = 0; i < ids->size(); ++i) {
      auto r = (*engine)->Wait((*ids)[i]);
      if (!r.ok()) {
        fprintf(stderr, "request %zu: %s\n", i, r.status().message().c_str());
        return 1;
      }
      tokens += static_cast<int64_t>(r->tokens.size());
      nlohmann::json line = {{"id", prompts[i]["id"]},
                             {"constrained", constrained},
                             {"finish", FinishReasonName(r->finish_reason)},
                             {"tokens", r->tokens.size()},
                             {"text_hex", Hex(r->text)}};
      out << line.dump() << "\n";
    }
    fprintf(stderr, "%s: %zu replies, %lld tokens in %.1f s on %s\n", constrained ? "constrained" : "free",
            ids->size(), static_cast<long long>(tokens), NowS() - t0, (*engine)->device().c_str());
  }
  return out ? 0 : 1;
}
