// SHA-256 throughput (the model digest hashes every byte of the weights at each load): the SHA
// extensions and the portable code side by side on the same 256 MiB, best of 3 each, alternated.
// One JSON object per line.
//
//   bench_sha256 [--mib 256]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "inference/util/sha256.h"

int main(int argc, char** argv) {
  using rote::inference::Sha256;
  size_t mib = 256;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--mib") == 0) mib = static_cast<size_t>(std::max(1, std::atoi(argv[i + 1])));
  std::vector<unsigned char> data(mib << 20);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i * 2654435761u >> 13);
  const bool hardware = Sha256::UsesShaExtensions();
  double best[2] = {1e30, 1e30};
  std::string digest[2];
  for (int round = 0; round < 3; ++round) {
    for (int path = hardware ? 0 : 1; path < 2; ++path) {  // 0: SHA extensions, 1: portable
      Sha256::SetShaExtensionsForTesting(path == 0);
      const auto t0 = std::chrono::steady_clock::now();
      Sha256 h;
      h.Update(data.data(), data.size());
      digest[path] = h.FinishHex();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best[path] = std::min(best[path], s);
    }
  }
  Sha256::SetShaExtensionsForTesting(hardware);
  const double bytes = static_cast<double>(data.size());
  std::printf("{\"what\":\"sha256\",\"mib\":%zu,\"sha_extensions\":%s,\"portable_MBps\":%.1f", mib,
              hardware ? "true" : "false", bytes / best[1] / 1e6);
  if (hardware)
    std::printf(",\"sha_extensions_MBps\":%.1f,\"speedup\":%.2f,\"same_digest\":%s", bytes / best[0] / 1e6,
                best[1] / best[0], digest[0] == digest[1] ? "true" : "false");
  std::printf("}\n");
  return 0;
}
