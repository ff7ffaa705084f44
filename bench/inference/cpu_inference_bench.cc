// CPU inference benchmark: decode tokens/s at batch 1 and 8 and prefill tokens/s on a
// synthesized Qwen2.5-0.5B-shape model (bf16), next to the machine's measured memory bandwidth
// and the fraction of it decode achieves. One JSON object per line.
//
//   bench_cpu_inference [--model DIR] [--threads N] [--steps N] [--shape 0.5b|1.5b|small]
//
// Without --model it synthesizes the model into a temporary directory (a few seconds).
#include <immintrin.h>  // AVX2 loads for the bandwidth probe

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "inference/backend.h"
#include "inference/model/synth.h"
#include "inference/model/weights.h"

namespace rote::inference {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

__attribute__((target("avx2"))) double SumRange(const float* p, size_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  for (size_t i = 0; i + 32 <= n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_loadu_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_loadu_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_loadu_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_loadu_ps(p + i + 24));
  }
  alignas(32) float t[8];
  _mm256_store_ps(t, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  double s = 0;
  for (float x : t) s += x;
  return s;
}

// Read bandwidth: `threads` threads each stream their slice of a 1 GiB buffer; best of 5.
double MeasureReadBandwidth(int threads) {
  const size_t bytes = size_t{1} << 30;
  std::vector<float> buf(bytes / 4);
  for (size_t i = 0; i < buf.size(); i += 1024) buf[i] = 1.0f;  // touch every page
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    std::vector<double> sums(threads);
    const double t0 = Now();
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t) {
      ts.emplace_back([&, t] {
        const size_t n = buf.size() / threads;
        sums[t] = SumRange(buf.data() + t * n, n);
      });
    }
    for (auto& t : ts) t.join();
    const double dt = Now() - t0;
    if (sums[0] < 0) std::printf("impossible\n");
    best = std::max(best, static_cast<double>(bytes) / dt);
  }
  return best;
}

// The 1-minute load average: the machine is shared, and figures taken under load say so.
double LoadAverage() {
  double l = -1;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &l) != 1) l = -1;
    std::fclose(f);
  }
  return l;
}

struct SeqState {
  std::vector<int32_t> tokens;
  std::vector<int32_t> blocks;
};

}  // namespace
}  // namespace rote::inference

int main(int argc, char** argv) {
  using namespace rote::inference;
  std::string model_dir, shape = "0.5b";
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int steps = 16;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--model") model_dir = argv[i + 1];
    else if (a == "--threads") threads = std::atoi(argv[i + 1]);
    else if (a == "--steps") steps = std::atoi(argv[i + 1]);
    else if (a == "--shape") shape = argv[i + 1];
  }
  bool synthesized = false;
  if (model_dir.empty()) {
    model_dir = (std::filesystem::temp_directory_path() / ("rote_bench_qwen2_" + shape)).string();
    SynthOptions o;
    o.family = ModelFamily::kQwen2;
    o.shape = shape;
    const double t0 = Now();
    Status s = SynthesizeModel(o, model_dir);
    if (!s.ok()) {
      std::fprintf(stderr, "synth: %s\n", s.ToString().c_str());
      return 1;
    }
    std::printf("{\"bench\":\"cpu_inference\",\"event\":\"synth\",\"shape\":\"%s\",\"seconds\":%.2f}\n", shape.c_str(),
                Now() - t0);
    synthesized = true;
  }
  const double bw = MeasureReadBandwidth(threads);
  std::printf("{\"bench\":\"cpu_inference\",\"metric\":\"memory_read_bandwidth\",\"threads\":%d,\"gb_per_s\":%.2f,"
              "\"load_average\":%.2f}\n",
              threads, bw / 1e9, LoadAverage());
  std::fflush(stdout);

  auto model = Model::Load(model_dir);
  if (!model.ok()) {
    std::fprintf(stderr, "load: %s\n", model.status().ToString().c_str());
    return 1;
  }
  const ModelConfig& c = (*model)->config();
  CpuBackendOptions bo;
  bo.threads = threads;
  bo.max_positions = 1024;
  auto backend = CreateCpuBackend(*model, bo).value();
  const int32_t blocks_per_seq = 1024 / kKvBlockSize;
  const int max_batch = 8;
  if (!backend->AllocateKvCache(blocks_per_seq * max_batch).ok()) return 1;
  const int64_t weight_bytes = (*model)->weight_bytes_per_token();
  const int64_t kv_bytes_per_pos = KvBytesPerBlock(c) / kKvBlockSize;  // K and V, all layers

  // Prefill: one sequence of 128 tokens in one step.
  const int prefill_len = 128;
  std::vector<int32_t> prompt(prefill_len);
  for (int i = 0; i < prefill_len; ++i) prompt[i] = (i * 7919) % c.vocab_size;
  std::vector<int32_t> seq_blocks(blocks_per_seq);
  for (int b = 0; b < blocks_per_seq; ++b) seq_blocks[b] = b;
  {
    BatchPlan plan;
    plan.sequences.push_back({prompt, 0, seq_blocks, 1});
    std::vector<float> logits;
    const double t0 = Now();
    if (!backend->Forward(plan, &logits).ok()) return 1;
    const double dt = Now() - t0;
    std::printf("{\"bench\":\"cpu_inference\",\"metric\":\"prefill\",\"model\":\"qwen2-%s-bf16\",\"threads\":%d,"
                "\"tokens\":%d,\"seconds\":%.3f,\"tokens_per_s\":%.1f}\n",
                shape.c_str(), threads, prefill_len, dt, prefill_len / dt);
    std::fflush(stdout);
  }

  for (int batch : {1, 8}) {
    // Each sequence has a 16-token context, then decodes `steps` tokens.
    std::vector<SeqState> seqs(batch);
    BatchPlan warm;
    for (int s = 0; s < batch; ++s) {
      seqs[s].tokens.assign(prompt.begin(), prompt.begin() + 16);
      for (int b = 0; b < blocks_per_seq; ++b) seqs[s].blocks.push_back(s * blocks_per_seq + b);
    }
    for (int s = 0; s < batch; ++s) warm.sequences.push_back({seqs[s].tokens, 0, seqs[s].blocks, 1});
    std::vector<float> logits;
    if (!backend->Forward(warm, &logits).ok()) return 1;
    double elapsed = 0;
    int64_t kv_read = 0;
    for (int step = 0; step < steps; ++step) {
      BatchPlan plan;
      std::vector<int32_t> next(batch);
      for (int s = 0; s < batch; ++s) next[s] = (step * 31 + s) % c.vocab_size;
      for (int s = 0; s < batch; ++s) {
        const int32_t pos = static_cast<int32_t>(seqs[s].tokens.size());
        plan.sequences.push_back({std::span<const int32_t>(&next[s], 1), pos, seqs[s].blocks, 1});
        kv_read += static_cast<int64_t>(pos + 1) * kv_bytes_per_pos;
      }
      const double t0 = Now();
      if (!backend->Forward(plan, &logits).ok()) return 1;
      elapsed += Now() - t0;
      for (int s = 0; s < batch; ++s) seqs[s].tokens.push_back(next[s]);
    }
    const double step_s = elapsed / steps;
    const double bytes_per_step = static_cast<double>(weight_bytes) + static_cast<double>(kv_read) / steps;
    const double achieved = bytes_per_step / step_s;
    std::printf("{\"bench\":\"cpu_inference\",\"metric\":\"decode\",\"model\":\"qwen2-%s-bf16\",\"threads\":%d,"
                "\"batch\":%d,\"steps\":%d,\"ms_per_step\":%.2f,\"tokens_per_s\":%.2f,\"bytes_read_per_token\":%.0f,"
                "\"achieved_gb_per_s\":%.2f,\"memory_gb_per_s\":%.2f,\"fraction_of_bandwidth\":%.3f,"
                "\"load_average\":%.2f}\n",
                shape.c_str(), threads, batch, steps, step_s * 1e3, batch / step_s, bytes_per_step / batch,
                achieved / 1e9, bw / 1e9, achieved / bw, LoadAverage());
    std::fflush(stdout);
  }
  if (synthesized) std::filesystem::remove_all(model_dir);
  return 0;
}
