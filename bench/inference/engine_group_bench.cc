// Generation throughput at saturating load on one GPU against several (inference::EngineGroup),
// in one process on a synthesized model (random weights): every request is submitted at once,
// the clock runs from the submission to the last result. Each configuration's tokens are
// compared with the first's request by request, and the first --cpu-check requests' first 16
// tokens with the CPU's (a request's first k tokens do not depend on its max_tokens). JSON lines;
// the last line gives the speed-up of the last configuration over the first and its ideal (the
// number of GPUs it uses).
//
//   bench_engine_group [--shape 0.5b] [--numerics exact|fast] [--devices cuda:0/cuda:all]
//                      [--requests 256] [--prompt 512] [--tokens 128] [--cpu-check 2] [--threads 16]
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "inference/cuda/cuda_backend.h"
#include "inference/engine_group.h"
#include "inference/model/synth.h"

namespace fs = std::filesystem;
using namespace rote::inference;

namespace {

double NowS() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, sep)) v.push_back(part);
  return v;
}

// Prompts of prompt/2 to 3*prompt/2 byte tokens (never a stop token), alternately greedy and
// sampled, each with its own sampling key.
std::vector<GenerationRequest> MakeRequests(int n, int prompt, int tokens) {
  std::mt19937 rng(20261128);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_int_distribution<int> len(prompt / 2, prompt + prompt / 2);
  std::vector<GenerationRequest> out;
  for (int i = 0; i < n; ++i) {
    GenerationRequest r;
    const int l = std::max(1, len(rng));
    for (int k = 0; k < l; ++k) r.prompt_tokens.push_back(byte(rng));
    r.sampling.max_tokens = tokens;
    r.sampling.ignore_eos = true;
    r.sampling.temperature = i % 2 ? 0.7f : 0.0f;
    r.sampling.top_k = i % 2 ? 40 : 0;
    r.sampling.seed = 3;
    r.sampling_key = 1000 + static_cast<uint64_t>(i);
    out.push_back(std::move(r));
  }
  return out;
}

struct Run {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::string> devices;
  int64_t prompt_tokens = 0, generated = 0;
  double seconds = 0;
};

bool RunAll(EngineGroup& g, const std::vector<GenerationRequest>& reqs, Run* run) {
  const double t0 = NowS();
  auto ids = g.SubmitAll(reqs);
  if (!ids.ok()) {
    fprintf(stderr, "submit: %s\n", ids.status().message().c_str());
    return false;
  }
  run->tokens.clear();
  run->devices.clear();
  for (RequestId id : *ids) {
    auto r = g.Wait(id);
    if (!r.ok()) {
      fprintf(stderr, "wait: %s\n", r.status().message().c_str());
      return false;
    }
    run->prompt_tokens += static_cast<int64_t>(r->prompt_tokens.size());
    run->generated += static_cast<int64_t>(r->tokens.size());
    run->tokens.push_back(r->tokens);
    run->devices.push_back(r->provenance.device);
  }
  run->seconds = NowS() - t0;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> args = {{"shape", "0.5b"},   {"numerics", "exact"},  {"devices", "cuda:0/cuda:all"},
                                             {"requests", "256"}, {"prompt", "512"},      {"tokens", "128"},
                                             {"cpu-check", "2"},  {"threads", "16"},      {"max-batch", "64"}};
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k.rfind("--", 0) != 0 || !args.count(k.substr(2))) {
      fprintf(stderr, "usage: bench_engine_group [--shape S] [--numerics exact|fast] [--devices A/B/...] "
                      "[--requests N] [--prompt N] [--tokens N] [--cpu-check N] [--threads N] [--max-batch N]\n");
      return 2;
    }
    args[k.substr(2)] = argv[i + 1];
  }
  const std::string dir = (fs::temp_directory_path() / ("rote-engine-group-" + args["shape"])).string();
  SynthOptions so;
  so.shape = args["shape"];
  if (!SynthesizeModel(so, dir).ok()) {
    fprintf(stderr, "cannot synthesize the %s model\n", args["shape"].c_str());
    return 1;
  }
  const int n = std::stoi(args["requests"]), prompt = std::stoi(args["prompt"]), tokens = std::stoi(args["tokens"]);
  const std::vector<GenerationRequest> reqs = MakeRequests(n, prompt, tokens);
  EngineOptions eo;
  eo.numerics_profile = args["numerics"] == "fast" ? NumericsProfile::kFast : NumericsProfile::kExact;
  eo.max_batch = std::stoi(args["max-batch"]);
  eo.max_step_tokens = 4096;
  eo.max_context = 4096;
  printf("{\"event\":\"setup\",\"shape\":\"%s\",\"numerics\":\"%s\",\"requests\":%d,\"prompt\":%d,\"tokens\":%d,"
         "\"cuda_devices\":%d}\n",
         args["shape"].c_str(), args["numerics"].c_str(), n, prompt, tokens, CudaDeviceCount());
  fflush(stdout);

  std::vector<Run> runs;
  std::vector<int> sizes;
  for (const std::string& name : Split(args["devices"], '/')) {
    DeviceSet set;
    if (Status s = ParseDeviceSet(name, &set); !s.ok()) {
      fprintf(stderr, "%s\n", s.message().c_str());
      return 2;
    }
    const double l0 = NowS();
    auto group = EngineGroup::Load(dir, set, eo);
    if (!group.ok()) {
      fprintf(stderr, "%s: %s\n", name.c_str(), group.status().message().c_str());
      return 1;
    }
    const double load_s = NowS() - l0;
    // A short untimed batch first: graphs captured, kernels loaded on every device.
    Run warm;
    RunAll(**group, MakeRequests(2 * (*group)->size(), 64, 8), &warm);
    Run run;
    if (!RunAll(**group, reqs, &run)) return 1;
    std::map<std::string, int> per_device;
    for (const std::string& d : run.devices) ++per_device[d];
    std::string spread;
    for (const auto& [d, k] : per_device) spread += (spread.empty() ? "" : ",") + ("\"" + d + "\":" + std::to_string(k));
    printf("{\"event\":\"run\",\"devices\":\"%s\",\"engines\":%d,\"load_s\":%.2f,\"seconds\":%.3f,"
           "\"prompt_tok_s\":%.1f,\"generated_tok_s\":%.1f,\"total_tok_s\":%.1f,\"requests_per_device\":{%s}}\n",
           (*group)->device().c_str(), (*group)->size(), load_s, run.seconds, run.prompt_tokens / run.seconds,
           run.generated / run.seconds, (run.prompt_tokens + run.generated) / run.seconds, spread.c_str());
    fflush(stdout);
    sizes.push_back((*group)->size());
    runs.push_back(std::move(run));
  }
  int differing = 0;
  for (size_t k = 1; k < runs.size(); ++k) {
    for (int i = 0; i < n; ++i) differing += runs[k].tokens[static_cast<size_t>(i)] != runs[0].tokens[static_cast<size_t>(i)];
  }
  printf("{\"event\":\"same_tokens\",\"requests_compared\":%d,\"differing\":%d}\n",
         n * static_cast<int>(runs.size() - 1), differing);
  // The CPU: the first requests' first 16 tokens.
  const int cpu_check = std::min(n, std::stoi(args["cpu-check"]));
  int cpu_differing = 0;
  if (cpu_check > 0) {
    EngineOptions co = eo;
    co.numerics_profile = NumericsProfile::kExact;
    co.threads = std::stoi(args["threads"]);
    co.kv_cache_bytes = 1ll << 30;
    DeviceSet cpu;
    auto g = EngineGroup::Load(dir, cpu, co);
    if (!g.ok()) {
      fprintf(stderr, "cpu: %s\n", g.status().message().c_str());
      return 1;
    }
    std::vector<GenerationRequest> first(reqs.begin(), reqs.begin() + cpu_check);
    for (GenerationRequest& r : first) r.sampling.max_tokens = std::min(16, tokens);
    Run c;
    if (!RunAll(**g, first, &c)) return 1;
    for (int i = 0; i < cpu_check; ++i) {
      const std::vector<int32_t>& gpu = runs.back().tokens[static_cast<size_t>(i)];
      const std::vector<int32_t> prefix(gpu.begin(), gpu.begin() + std::min(gpu.size(), c.tokens[static_cast<size_t>(i)].size()));
      cpu_differing += prefix != c.tokens[static_cast<size_t>(i)];
    }
    printf("{\"event\":\"cpu_check\",\"requests\":%d,\"tokens_each\":%d,\"differing\":%d,\"note\":\"%s\"}\n", cpu_check,
           std::min(16, tokens), cpu_differing,
           eo.numerics_profile == NumericsProfile::kExact ? "exact: must be 0" : "fast profile: not expected to match");
  }
  if (runs.size() >= 2) {
    const double first = (runs.front().prompt_tokens + runs.front().generated) / runs.front().seconds;
    const double last = (runs.back().prompt_tokens + runs.back().generated) / runs.back().seconds;
    printf("{\"event\":\"speedup\",\"engines\":%d,\"over_engines\":%d,\"total_tok_s_ratio\":%.3f,\"ideal\":%.1f}\n",
           sizes.back(), sizes.front(), last / first, static_cast<double>(sizes.back()) / sizes.front());
  }
  return differing == 0 && (eo.numerics_profile != NumericsProfile::kExact || cpu_differing == 0) ? 0 : 3;
}
