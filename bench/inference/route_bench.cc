// The host's cost of numerics::RouteToken (the mixture-of-experts route the CPU backend takes for
// every token and layer): milliseconds to route N tokens' router logits (random, fixed seed), the
// median of several runs. One JSON object per line, per (tokens, experts, experts a token).
//
//   bench_route [--tokens 1,64,1000] [--experts 8,128] [--per-token 2,8] [--reps 10]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "inference/numerics/routing.h"

namespace {

std::vector<int> IntList(const char* text) {
  std::vector<int> out;
  std::string s(text);
  for (size_t at = 0; at <= s.size();) {
    const size_t comma = std::min(s.find(',', at), s.size());
    out.push_back(std::stoi(s.substr(at, comma - at)));
    at = comma + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> tokens = {1, 64, 1000}, experts = {8, 128}, per_token = {2, 8};
  int reps = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--tokens") == 0) tokens = IntList(argv[i + 1]);
    else if (std::strcmp(argv[i], "--experts") == 0) experts = IntList(argv[i + 1]);
    else if (std::strcmp(argv[i], "--per-token") == 0) per_token = IntList(argv[i + 1]);
    else if (std::strcmp(argv[i], "--reps") == 0) reps = std::max(1, std::stoi(argv[i + 1]));
    else {
      std::fprintf(stderr, "unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  for (int e : experts) {
    for (int k : per_token) {
      if (k > e) continue;
      for (int t : tokens) {
        std::mt19937 rng(7);
        std::normal_distribution<float> normal;
        std::vector<float> logits(static_cast<size_t>(t) * e);
        for (float& v : logits) v = normal(rng);
        std::vector<double> ms;
        int64_t checksum = 0;
        for (int r = 0; r < reps; ++r) {
          const auto t0 = std::chrono::steady_clock::now();
          const rote::numerics::Routes routes = rote::numerics::RouteTokens(logits.data(), t, e, k, true);
          const auto t1 = std::chrono::steady_clock::now();
          ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
          checksum += routes.experts.back();
        }
        std::sort(ms.begin(), ms.end());
        std::printf("{\"what\":\"route\",\"tokens\":%d,\"experts\":%d,\"per_token\":%d,\"ms\":%.4f,"
                    "\"us_per_token\":%.3f,\"checksum\":%lld}\n",
                    t, e, k, ms[ms.size() / 2], 1e3 * ms[ms.size() / 2] / t, static_cast<long long>(checksum));
      }
    }
  }
  return 0;
}
