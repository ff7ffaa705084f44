// Kernel lab: attention of one decode step (lab/cuda/README.md).
//
// Version 1 is production: cuda::LaunchAttention with the default tuning (the variant chosen by
// grid size). The others are AttentionKernel's variants that no default reaches:
//   2  plain loops, rows of earlier steps prefetched into L2 with evict_last (kept over the
//      weight stream) instead of L1
//   3  loops of 8 positions in flight, rows prefetched into L2 (evict_last)
//   4  loops of 8 positions, rows prefetched into L1 and L2
//   5  loops of 8 positions, their first batch of rows loaded into registers before the wait
//      (head_dim <= 64): twice the registers, no faster
//   6  batches of 2 positions, rows not prefetched
//   7  batches of 2 positions, rows prefetched into L2 (evict_last)
// Every variant computes the same canonical sums in the same order; each version's output is
// compared bit for bit with version 1 (which the test suite holds equal to the CPU backend,
// tests/inference/cuda_backend_test.cc), then timed; the K/V bytes read over the time against
// the card's copy bandwidth is the ceiling of a decode step's attention.
//
//   attention_lab [tokens context]   (default: 0.5B's heads, batches 1, 8 and 32, contexts 128 and 1,024)
#include "inference/cuda/kernels.cu"  // production's kernels: version 1 and the variants below

#include <array>
#include <functional>
#include <string>

#include "lab/cuda/lab_common.h"

namespace {

using rote::inference::CudaTuning;
using namespace rote::inference::cuda;
namespace lab = rote::lab;

constexpr int32_t kBlockSize = 16;  // the backend's KV block (inference/backend.h, kKvBlockSize)

struct Step {
  AttentionShape shape{14, 2, 64, kBlockSize};  // Qwen2.5-0.5B's heads
  int32_t tokens = 0, context = 0, max_context = 0, out_stride = 0;
  StepTokens step;
  LayerKv kv;
  const float* q = nullptr;
  float* out = nullptr;
  float scale = 0.125f;
};

Step Make(int32_t tokens, int32_t context) {
  Step s;
  s.tokens = tokens;
  s.context = context;
  s.max_context = 256;
  while (s.max_context < context) s.max_context *= 2;
  const int32_t kv_dim = s.shape.num_kv_heads * s.shape.head_dim, q_dim = s.shape.num_heads * s.shape.head_dim;
  const int32_t max_blocks = s.max_context / kBlockSize;
  // Token t: its own sequence of `context` positions in blocks [t * max_blocks, ...), at its last.
  std::vector<int32_t> pos(tokens, context - 1), table(static_cast<size_t>(tokens) * max_blocks);
  for (int32_t t = 0; t < tokens; ++t)
    for (int32_t b = 0; b < max_blocks; ++b) table[static_cast<size_t>(t) * max_blocks + b] = t * max_blocks + b;
  int32_t* d_pos = nullptr;
  int32_t* d_table = nullptr;
  LAB_CHECK(cudaMalloc(&d_pos, sizeof(int32_t) * pos.size()));
  LAB_CHECK(cudaMalloc(&d_table, sizeof(int32_t) * table.size()));
  LAB_CHECK(cudaMemcpy(d_pos, pos.data(), sizeof(int32_t) * pos.size(), cudaMemcpyHostToDevice));
  LAB_CHECK(cudaMemcpy(d_table, table.data(), sizeof(int32_t) * table.size(), cudaMemcpyHostToDevice));
  s.step = StepTokens{d_pos, d_table, max_blocks, tokens};
  const int64_t kv_floats = int64_t{tokens} * max_blocks * kBlockSize * kv_dim;
  const std::vector<float> k = lab::RandomFloats(kv_floats, 3), v = lab::RandomFloats(kv_floats, 4);
  const std::vector<float> q = lab::RandomFloats(int64_t{tokens} * q_dim, 5);
  float *d_k = nullptr, *d_v = nullptr, *d_q = nullptr;
  LAB_CHECK(cudaMalloc(&d_k, sizeof(float) * kv_floats));
  LAB_CHECK(cudaMalloc(&d_v, sizeof(float) * kv_floats));
  LAB_CHECK(cudaMalloc(&d_q, sizeof(float) * q.size()));
  LAB_CHECK(cudaMemcpy(d_k, k.data(), sizeof(float) * kv_floats, cudaMemcpyHostToDevice));
  LAB_CHECK(cudaMemcpy(d_v, v.data(), sizeof(float) * kv_floats, cudaMemcpyHostToDevice));
  LAB_CHECK(cudaMemcpy(d_q, q.data(), sizeof(float) * q.size(), cudaMemcpyHostToDevice));
  s.kv = LayerKv{d_k, d_v};
  s.q = d_q;
  s.out_stride = static_cast<int32_t>(PaddedCols(q_dim));
  LAB_CHECK(cudaMalloc(&s.out, sizeof(float) * tokens * s.out_stride));
  LAB_CHECK(PrepareAttention(s.max_context));
  LAB_CHECK(cudaFuncSetAttribute(AttentionKernel<1, 8, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(AttentionSharedBytes(s.max_context))));
  return s;
}

std::vector<float> Output(const Step& s) {
  std::vector<float> out(static_cast<size_t>(s.tokens) * s.out_stride);
  LAB_CHECK(cudaMemcpy(out.data(), s.out, sizeof(float) * out.size(), cudaMemcpyDeviceToHost));
  return out;
}

void Run(const Step& s, int version, const char* what, const std::function<cudaError_t()>& launch,
         const std::vector<float>* reference, double bw) {
  LAB_CHECK(cudaMemset(s.out, 0, sizeof(float) * s.tokens * s.out_stride));
  LAB_CHECK(launch());
  LAB_CHECK(cudaDeviceSynchronize());
  const std::vector<float> got = Output(s);
  const int64_t diff = reference == nullptr ? -1 : lab::FirstDifference(got, *reference);
  const double t = lab::TimePerCall([&] { launch(); });
  const double kv_bytes = 2.0 * 4 * s.tokens * s.context * s.shape.num_kv_heads * s.shape.head_dim;
  std::printf("{\"what\":\"attention\",\"version\":%d,\"kernel\":\"%s\",\"tokens\":%d,\"context\":%d,"
              "\"equals_version_1\":%s,\"first_difference\":%lld,\"us\":%.2f,\"kv_TBps\":%.3f,"
              "\"fraction_of_copy_bandwidth\":%.3f}\n",
              version, what, s.tokens, s.context, diff < 0 ? "true" : "false", static_cast<long long>(diff), 1e6 * t,
              kv_bytes / t / 1e12, kv_bytes / t / bw);
  std::fflush(stdout);
}

void Versions(const Step& s, double bw) {
  const CudaTuning tuning;
  const LaunchContext ctx{&tuning, nullptr};
  auto production = [&] {
    return LaunchAttention(s.q, s.step, s.shape, s.kv, s.scale, s.max_context, s.out, s.out_stride, ctx, nullptr);
  };
  Run(s, 1, "production", production, nullptr, bw);
  const std::vector<float> reference = Output(s);
  const dim3 grid(s.shape.num_heads, s.tokens);
  const size_t smem = static_cast<size_t>(AttentionSharedBytes(s.max_context));
  auto variant = [&](void (*kernel)(const float*, StepTokens, AttentionShape, LayerKv, float, float*, int32_t, int32_t,
                                    int32_t),
                     int32_t prefetch) {
    return [=, &s] {
      return LaunchChained(kernel, grid, dim3(kAttnThreads), smem, nullptr, s.q, s.step, s.shape, s.kv, s.scale, s.out,
                           s.out_stride, s.max_context, prefetch);
    };
  };
  Run(s, 2, "plain_l2_evict_last", variant(AttentionKernel<1, 0>, 1), &reference, bw);
  Run(s, 3, "batch8_l2_evict_last", variant(AttentionKernel<1, 8>, 1), &reference, bw);
  Run(s, 4, "batch8_l1_and_l2", variant(AttentionKernel<1, 8>, 2), &reference, bw);
  Run(s, 5, "batch8_first_batch_in_registers", variant(AttentionKernel<1, 8, true>, 0), &reference, bw);
  Run(s, 6, "batch2_no_prefetch", variant(AttentionKernel<1, 2>, 3), &reference, bw);
  Run(s, 7, "batch2_l2_evict_last", variant(AttentionKernel<1, 2>, 1), &reference, bw);
}

}  // namespace

int main(int argc, char** argv) {
  double bw = 0;
  if (!lab::Start(&bw)) return 1;
  std::vector<std::array<int32_t, 2>> cases;
  if (argc == 3) {
    cases.push_back({std::stoi(argv[1]), std::stoi(argv[2])});
  } else {
    for (int32_t tokens : {1, 8, 32})
      for (int32_t context : {128, 1024}) cases.push_back({tokens, context});
  }
  for (const auto& [tokens, context] : cases) Versions(Make(tokens, context), bw);
  return 0;
}
