// The generation workload (docs/performance.md, "The generation workload"): N generation points
// (prompts as the pipeline builds them: bench/orchestrator/workload_prompts.cc), three attempts
// each, all points of an attempt submitted together as the pipeline submits them; attempt k+1
// quotes attempt k's reply (cut at 4,000 bytes, as the pipeline cuts it). Replies are the
// workload file's 100-400 tokens each (ignore_eos, so every system writes the same lengths):
// attempt 1 greedy, retries sampled at 0.75 as `rote serve`'s default retry temperature. A
// synthesized model (random weights) with a realistic vocabulary of its size
// (bench/inference/synthetic_vocab.h), so prompts have realistic token counts.
//
// Prints per N: the time from the first submission to the last attempt's output, tokens/s of
// prefill and of decode (the engine's own split of its step time), and the share of prompt
// tokens served from the prefix cache. --replay FILE writes every request's prompt ids and reply
// length, in rounds, for bench/inference/workload_peer.py to run the same work.
//
//   bench_workload --workload FILE [--points 1,8,32] [--shape 0.5b] [--device cuda]
//                  [--numerics exact|fast] [--replay FILE] [--max-batch 16] [--prefill-chunk 256]
//                  [--max-step-tokens 512]
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

// At most `max_bytes` of `text`, cut before a UTF-8 continuation byte, with the note the
// pipeline's Truncated adds.
std::string Quoted(const std::string& text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  size_t cut = max_bytes;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return text.substr(0, cut) + "\n[... " + std::to_string(text.size() - cut) + " more bytes]";
}

std::string Replace(std::string s, const std::string& marker, const std::string& with) {
  for (size_t at = 0; (at = s.find(marker, at)) != std::string::npos; at += with.size()) s.replace(at, marker.size(), with);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> args = {
      {"workload", ""},      {"points", "1,8,32"}, {"shape", "0.5b"},         {"device", "cuda"},
      {"numerics", "exact"}, {"replay", ""},       {"max-batch", "16"},       {"prefill-chunk", "256"},
      {"max-step-tokens", "512"}, {"threads", "0"}};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k.rfind("--", 0) != 0 || !args.count(k.substr(2))) {
      fprintf(stderr, "usage: bench_workload --workload FILE [--points 1,8,32] [--shape S] [--device D] "
                      "[--numerics exact|fast] [--replay FILE] [--max-batch N] [--prefill-chunk N] [--max-step-tokens N]\n");
      return 2;
    }
    args[k.substr(2)] = argv[i + 1];
  }
  std::vector<nlohmann::json> points;
  {
    std::ifstream in(args["workload"]);
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) points.push_back(nlohmann::json::parse(line));
  }
  if (points.empty()) {
    fprintf(stderr, "no points in '%s' (make them with workload_prompts)\n", args["workload"].c_str());
    return 1;
  }
  const std::string dir = (fs::temp_directory_path() / ("rote-workload-" + args["shape"])).string();
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
  eo.max_batch = std::stoi(args["max-batch"]);
  eo.prefill_chunk = std::stoi(args["prefill-chunk"]);
  eo.max_step_tokens = std::stoi(args["max-step-tokens"]);
  eo.threads = std::stoi(args["threads"]);
  eo.max_context = 8192;
  // As `rote serve` sizes it: on CUDA every block free memory holds after the weights.
  eo.kv_cache_bytes = eo.device == Device::kCpu ? 4ll << 30 : 0;
  std::ofstream replay;
  if (!args["replay"].empty()) replay.open(args["replay"], std::ios::trunc);

  for (int n : ParseList(args["points"])) {
    // A fresh engine per N: nothing cached from another N's prompts.
    auto engine = Engine::Load(dir, eo);
    if (!engine.ok()) {
      fprintf(stderr, "engine: %s\n", engine.status().message().c_str());
      return 1;
    }
    {  // graphs captured, kernels loaded
      GenerationRequest w;
      w.prompt = "warm up";
      w.sampling.max_tokens = 4;
      (void)(*engine)->Generate(w);
    }
    const EngineStats before = (*engine)->stats();
    std::vector<std::string> previous(static_cast<size_t>(n));
    int64_t prompt_tokens = 0, reused = 0, generated = 0;
    std::vector<double> round_s;
    const double t0 = NowS();
    for (int attempt = 0; attempt < 3; ++attempt) {
      std::vector<GenerationRequest> reqs;
      for (int i = 0; i < n; ++i) {
        const nlohmann::json& a = points[static_cast<size_t>(i) % points.size()]["attempts"][static_cast<size_t>(attempt)];
        GenerationRequest r;
        for (const auto& m : a["messages"]) {
          r.messages.push_back({m["role"].get<std::string>(),
                                Replace(m["content"].get<std::string>(), "@@CANDIDATE@@", Quoted(previous[static_cast<size_t>(i)], 4000))});
        }
        r.sampling.max_tokens = a["reply_tokens"].get<int>();
        r.sampling.ignore_eos = true;
        r.sampling.temperature = attempt == 0 ? 0.0f : 0.75f;
        r.sampling.seed = 1;
        r.sampling_key = static_cast<uint64_t>(i * 3 + attempt);
        reqs.push_back(std::move(r));
      }
      const double r0 = NowS();
      auto ids = (*engine)->SubmitAll(std::move(reqs));
      if (!ids.ok()) {
        fprintf(stderr, "submit: %s\n", ids.status().message().c_str());
        return 1;
      }
      for (int i = 0; i < n; ++i) {
        auto r = (*engine)->Wait((*ids)[static_cast<size_t>(i)]);
        if (!r.ok()) {
          fprintf(stderr, "wait: %s\n", r.status().message().c_str());
          return 1;
        }
        prompt_tokens += static_cast<int64_t>(r->prompt_tokens.size());
        reused += r->prompt_tokens_reused;
        generated += static_cast<int64_t>(r->tokens.size());
        previous[static_cast<size_t>(i)] = r->text;
        if (replay.is_open()) {
          nlohmann::json line = {{"points", n}, {"attempt", attempt + 1}, {"prompt_ids", r->prompt_tokens},
                                 {"reply_tokens", r->tokens.size()}};
          replay << line.dump() << "\n";
        }
      }
      round_s.push_back(NowS() - r0);
    }
    const double wall = NowS() - t0;
    const EngineStats after = (*engine)->stats();
    const double prefill_s = after.prefill_seconds - before.prefill_seconds;
    const double decode_s = after.decode_seconds - before.decode_seconds;
    const int64_t computed = after.prefill_tokens - before.prefill_tokens;
    printf("{\"system\":\"rote %s\",\"shape\":\"%s\",\"device\":\"%s\",\"points\":%d,\"attempts\":3,\"seconds\":%.3f,"
           "\"rounds_s\":[%.3f,%.3f,%.3f],\"prompt_tokens\":%lld,\"prompt_tokens_computed\":%lld,"
           "\"prefix_cache_share\":%.3f,\"generated_tokens\":%lld,\"prefill_s\":%.3f,\"decode_s\":%.3f,"
           "\"prefill_tok_s\":%.1f,\"decode_tok_s\":%.1f}\n",
           args["numerics"].c_str(), args["shape"].c_str(), (*engine)->device().c_str(), n, wall, round_s[0], round_s[1],
           round_s[2], static_cast<long long>(prompt_tokens), static_cast<long long>(computed),
           prompt_tokens ? static_cast<double>(reused) / prompt_tokens : 0.0, static_cast<long long>(generated), prefill_s,
           decode_s, prefill_s > 0 ? computed / prefill_s : 0.0, decode_s > 0 ? generated / decode_s : 0.0);
    fflush(stdout);
  }
  return 0;
}
