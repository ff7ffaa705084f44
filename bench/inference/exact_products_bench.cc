// The exact profile's batched products alone (LaunchLinear, kernels.h), at the real matrix
// shapes of the 0.5B, 1.5B and 7B models and prefill-sized token counts: each kernel variant's
// time, GFLOP/s and fraction of the card's measured fp32 FMA rate, and its bits, checked against
// the first variant listed (whole outputs) and against the scalar canonical order of
// docs/numerics.md on sampled outputs. One JSON object per line.
//
//   exact_products_bench [--shapes 0.5b,1.5b,7b] [--tokens 256,1000,4096] [--variants -1,0]
//                        [--products qkv,o,gate_up,down] [--reps 10] [--samples 256]
//
// A variant is a CudaTuning::large_batch_tile value (-1: the default choice, the shared-memory
// tiles; 0: the 8 x 8 register tile, a kernel of its own; tuning.h lists the rest). Weights bf16,
// activations fp32 lane rows; each product with its epilogue in the model (q|k|v plus bias, o and
// down added to the residual, gate|up through SiLU).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "inference/cuda/kernels.h"
#include "inference/numerics/canonical.h"

namespace rote::bench {
double MeasureFmaRate();  // cuda_ceilings.cu
}  // namespace rote::bench

namespace {

using rote::inference::CudaLaunchStats;
using rote::inference::CudaTuning;
using namespace rote::inference::cuda;

std::string Arg(int argc, char** argv, const char* name, const std::string& def) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  return def;
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = s.find(',', start);
    const std::string item = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

struct ModelShape {
  const char* name;
  int hidden, intermediate, heads, kv_heads, head_dim;
};
constexpr ModelShape kShapes[] = {
    {"0.5b", 896, 4864, 14, 2, 64},
    {"1.5b", 1536, 8960, 12, 2, 128},
    {"7b", 3584, 18944, 28, 4, 128},
};

struct Product {
  std::string name;
  int rows, cols;
  LinearEpilogue epilogue;
};

std::vector<Product> Products(const ModelShape& m) {
  const int qkv = (m.heads + 2 * m.kv_heads) * m.head_dim;
  return {{"qkv", qkv, m.hidden, LinearEpilogue::kAddBias},
          {"o", m.hidden, m.heads * m.head_dim, LinearEpilogue::kAddResidual},
          {"gate_up", 2 * m.intermediate, m.hidden, LinearEpilogue::kSiluMul},
          {"down", m.hidden, m.intermediate, LinearEpilogue::kAddResidual}};
}

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
float Uniform(uint64_t i, uint64_t seed) {  // [-1, 1)
  return static_cast<float>(static_cast<double>(Mix(i * 0x100000001b3ull + seed) >> 40) / (1ull << 23) - 1.0);
}

#define CK(x)                                                                                   \
  do {                                                                                          \
    const cudaError_t e_ = (x);                                                                 \
    if (e_ != cudaSuccess) {                                                                    \
      std::printf("{\"error\":\"%s at %s:%d\"}\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)

// One product's operands on the device and host (for the reference).
struct Operands {
  Product p;
  int tokens = 0;
  int out_width = 0, out_stride = 0;
  bool lane_out = false;
  std::vector<uint16_t> w;  // (rows, cols) bf16 bits, permuted rows (cols are whole groups)
  std::vector<float> x, bias, out0;
  void *dw = nullptr;
  float *dx = nullptr, *dbias = nullptr, *dout = nullptr, *dout0 = nullptr;
};

void Upload(Operands& o) {
  const Product& p = o.p;
  o.w.resize(static_cast<size_t>(p.rows) * p.cols);
  for (size_t i = 0; i < o.w.size(); ++i) {
    const float f = 0.05f * Uniform(i, 11);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    o.w[i] = static_cast<uint16_t>(bits >> 16);
  }
  o.x.resize(static_cast<size_t>(o.tokens) * p.cols);
  for (size_t i = 0; i < o.x.size(); ++i) o.x[i] = Uniform(i, 23);
  o.bias.resize(p.rows);
  for (int i = 0; i < p.rows; ++i) o.bias[i] = Uniform(i, 37);
  o.out_width = p.epilogue == LinearEpilogue::kSiluMul ? p.rows / 2 : p.rows;
  o.lane_out = p.epilogue != LinearEpilogue::kAddBias;  // the residual stream and the MLP activation
  o.out_stride = o.lane_out ? static_cast<int>(PaddedCols(o.out_width)) : o.out_width;
  o.out0.assign(static_cast<size_t>(o.tokens) * o.out_stride, 0.0f);
  if (p.epilogue == LinearEpilogue::kAddResidual)
    for (int m = 0; m < o.tokens; ++m)
      for (int n = 0; n < o.out_width; ++n) o.out0[static_cast<size_t>(m) * o.out_stride + PermutedIndex(n)] = Uniform(m * 7919 + n, 41);
  CK(cudaMalloc(&o.dw, o.w.size() * 2));
  CK(cudaMalloc(&o.dx, o.x.size() * 4));
  CK(cudaMalloc(&o.dbias, o.bias.size() * 4));
  CK(cudaMalloc(&o.dout, o.out0.size() * 4));
  CK(cudaMalloc(&o.dout0, o.out0.size() * 4));
  CK(cudaMemcpy(o.dw, o.w.data(), o.w.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(o.dx, o.x.data(), o.x.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(o.dbias, o.bias.data(), o.bias.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(o.dout0, o.out0.data(), o.out0.size() * 4, cudaMemcpyHostToDevice));
}

void Release(Operands& o) {
  cudaFree(o.dw);
  cudaFree(o.dx);
  cudaFree(o.dbias);
  cudaFree(o.dout);
  cudaFree(o.dout0);
}

// The scalar canonical dot of weight row `row` and activation row m (both permuted alike, so
// logical term k sits at PermutedIndex(k) in each).
float RefDot(const Operands& o, int row, int m) {
  float acc[32] = {};
  const int K = o.p.cols;
  for (int k = 0; k < K; ++k) {
    const size_t pk = static_cast<size_t>(PermutedIndex(k));
    const uint32_t bits = static_cast<uint32_t>(o.w[static_cast<size_t>(row) * K + pk]) << 16;
    float wf;
    std::memcpy(&wf, &bits, 4);
    acc[k % 32] = std::fmaf(wf, o.x[static_cast<size_t>(m) * K + pk], acc[k % 32]);
  }
  return rote::numerics::canonical_tree32(acc);
}

// Sampled outputs against the scalar reference: the number that differ in any bit.
int RefMismatches(const Operands& o, const std::vector<float>& out, int samples) {
  int bad = 0;
  for (int s = 0; s < samples; ++s) {
    const int m = static_cast<int>(Mix(s * 3 + 1) % o.tokens);
    const int n = static_cast<int>(Mix(s * 3 + 2) % o.out_width);
    const size_t at = static_cast<size_t>(m) * o.out_stride + (o.lane_out ? PermutedIndex(n) : n);
    float want;
    if (o.p.epilogue == LinearEpilogue::kSiluMul) {
      want = rote::numerics::canonical_silu(RefDot(o, 2 * n, m)) * RefDot(o, 2 * n + 1, m);
    } else if (o.p.epilogue == LinearEpilogue::kAddBias) {
      want = RefDot(o, n, m) + o.bias[n];
    } else {
      want = o.out0[at] + RefDot(o, n, m);
    }
    if (std::memcmp(&want, &out[at], 4) != 0) ++bad;
  }
  return bad;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> shapes = Split(Arg(argc, argv, "--shapes", "0.5b,1.5b,7b"));
  const std::vector<std::string> tokens_list = Split(Arg(argc, argv, "--tokens", "256,1000,4096"));
  const std::vector<std::string> variants = Split(Arg(argc, argv, "--variants", "-1,0"));
  const std::vector<std::string> products = Split(Arg(argc, argv, "--products", "qkv,o,gate_up,down"));
  const int reps = std::stoi(Arg(argc, argv, "--reps", "10"));
  const int samples = std::stoi(Arg(argc, argv, "--samples", "256"));

  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  const double fma_rate = rote::bench::MeasureFmaRate();  // fma/s
  std::printf("{\"device\":\"%s\",\"sms\":%d,\"fp32_fma_tflops\":%.2f}\n", prop.name, prop.multiProcessorCount,
              2 * fma_rate * 1e-12);
  cudaStream_t stream;
  CK(cudaStreamCreate(&stream));
  // Split tiles' scratch and tickets (LinearArgs::split_*), as the backend provides them.
  const int64_t scratch_floats = int64_t{64} << 20;
  const int32_t tickets = 1 << 16;
  float* scratch = nullptr;
  uint32_t* dtickets = nullptr;
  CK(cudaMalloc(&scratch, scratch_floats * 4));
  CK(cudaMalloc(&dtickets, tickets * 4));
  CK(cudaMemset(dtickets, 0, tickets * 4));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));

  for (const ModelShape& shape : kShapes) {
    if (std::find(shapes.begin(), shapes.end(), shape.name) == shapes.end()) continue;
    for (const Product& p : Products(shape)) {
      if (std::find(products.begin(), products.end(), p.name) == products.end()) continue;
      for (const std::string& ts : tokens_list) {
        Operands o;
        o.p = p;
        o.tokens = std::stoi(ts);
        Upload(o);
        LinearArgs a;
        a.w.data = o.dw;
        a.w.type = WeightType::kBF16;
        a.w.rows = p.rows;
        a.w.cols = p.cols;
        a.w.cols_padded = p.cols;
        a.x = o.dx;
        a.x_stride = p.cols;
        a.tokens = o.tokens;
        a.epilogue = p.epilogue;
        a.bias = o.dbias;
        a.out = o.dout;
        a.out_stride = o.out_stride;
        a.out_lane_rows = o.lane_out;
        a.split_scratch = scratch;
        a.split_scratch_floats = scratch_floats;
        a.split_tickets = dtickets;
        a.split_tickets_count = tickets;
        std::vector<float> first;
        for (const std::string& vs : variants) {
          const int variant = std::stoi(vs);
          CudaTuning tuning;
          tuning.large_batch_tile = variant;
          CudaLaunchStats stats;
          LaunchContext ctx{&tuning, &stats};
          // The checked run from the initial residual, then the timed ones.
          CK(cudaMemcpyAsync(o.dout, o.dout0, o.out0.size() * 4, cudaMemcpyDeviceToDevice, stream));
          CK(LaunchLinear(a, ctx, stream));
          CK(cudaStreamSynchronize(stream));
          std::vector<float> out(o.out0.size());
          CK(cudaMemcpy(out.data(), o.dout, out.size() * 4, cudaMemcpyDeviceToHost));
          const bool same = first.empty() || std::memcmp(first.data(), out.data(), out.size() * 4) == 0;
          if (first.empty()) first = out;
          const int bad = RefMismatches(o, out, samples);
          std::vector<float> ms_list;
          for (int r = 0; r < reps + 2; ++r) {
            CK(cudaEventRecord(e0, stream));
            CK(LaunchLinear(a, ctx, stream));
            CK(cudaEventRecord(e1, stream));
            CK(cudaEventSynchronize(e1));
            float ms = 0;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            if (r >= 2) ms_list.push_back(ms);
          }
          std::sort(ms_list.begin(), ms_list.end());
          const double ms = ms_list[ms_list.size() / 2];
          const double fmas = static_cast<double>(p.rows) * p.cols * o.tokens;
          std::printf(
              "{\"shape\":\"%s\",\"product\":\"%s\",\"rows\":%d,\"cols\":%d,\"tokens\":%d,\"variant\":%d,"
              "\"tiled_launches\":%lld,\"ms\":%.4f,\"gflops\":%.1f,\"fma_fraction\":%.3f,"
              "\"bits_equal_first\":%s,\"ref_mismatches\":%d,\"ref_samples\":%d}\n",
              shape.name, p.name.c_str(), p.rows, p.cols, o.tokens, variant,
              static_cast<long long>(stats.tiled_linear_launches), ms,
              2 * fmas / (ms * 1e-3) * 1e-9, fmas / (ms * 1e-3) / fma_rate, same ? "true" : "false", bad, samples);
          std::fflush(stdout);
        }
        Release(o);
      }
    }
  }
  return 0;
}
