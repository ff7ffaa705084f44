// Host helpers of the kernel lab (lab/cuda/README.md): random operands in the backend's device
// layout, bit-exact comparison, timing with CUDA events, and the card's ceilings. Included by each
// lab program after the production kernels it compiles in.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <array>
#include <random>
#include <string>
#include <vector>

#include "inference/cuda/host_layout.h"
#include "inference/numerics/canonical.h"

namespace rote::lab {

#define LAB_CHECK(expr)                                                                          \
  do {                                                                                           \
    const cudaError_t lab_e = (expr);                                                            \
    if (lab_e != cudaSuccess) {                                                                  \
      std::printf("{\"what\":\"error\",\"at\":\"%s\",\"cuda\":\"%s\"}\n", #expr, cudaGetErrorString(lab_e)); \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

// Random bf16 values of a moderate range (exact in fp32), as raw 16-bit words.
inline std::vector<uint16_t> RandomBf16(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<uint16_t> out(static_cast<size_t>(n));
  for (auto& h : out) {
    const float f = u(rng);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    h = static_cast<uint16_t>(bits >> 16);
  }
  return out;
}

inline std::vector<float> RandomFloats(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> out(static_cast<size_t>(n));
  for (auto& f : out) f = u(rng);
  return out;
}

// Rows of `cols` elements of `esize` bytes, each permuted into lane order and zero-padded to
// cols_padded (inference/cuda/kernels.h), uploaded.
inline void* UploadLaneRows(const void* rows, int64_t count, int64_t cols, int64_t cols_padded, int esize) {
  std::vector<uint8_t> host(static_cast<size_t>(count * cols_padded * esize), 0);
  for (int64_t r = 0; r < count; ++r)
    rote::inference::cuda::RowToLaneOrder(static_cast<const uint8_t*>(rows) + r * cols * esize, cols, esize,
                                          host.data() + r * cols_padded * esize);
  void* d = nullptr;
  LAB_CHECK(cudaMalloc(&d, host.size()));
  LAB_CHECK(cudaMemcpy(d, host.data(), host.size(), cudaMemcpyHostToDevice));
  return d;
}

// Index of the first float whose bits differ, or -1.
inline int64_t FirstDifference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], 4) != 0) return static_cast<int64_t>(i);
  return -1;
}

// Seconds per call of `launch` (which enqueues on the default stream), the median of `rounds`
// rounds of `reps` back-to-back calls.
template <typename F>
double TimePerCall(F&& launch, int reps = 50, int rounds = 5) {
  cudaEvent_t a, b;
  LAB_CHECK(cudaEventCreate(&a));
  LAB_CHECK(cudaEventCreate(&b));
  launch();  // warm: function attributes, caches
  LAB_CHECK(cudaDeviceSynchronize());
  std::vector<float> ms;
  for (int r = 0; r < rounds; ++r) {
    LAB_CHECK(cudaEventRecord(a));
    for (int i = 0; i < reps; ++i) launch();
    LAB_CHECK(cudaEventRecord(b));
    LAB_CHECK(cudaEventSynchronize(b));
    float t = 0;
    LAB_CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  LAB_CHECK(cudaEventDestroy(a));
  LAB_CHECK(cudaEventDestroy(b));
  return 1e-3 * ms[ms.size() / 2] / reps;
}

// A device range of `bytes` (rounded up to whole chunks) whose every 8 MiB chunk is the same
// physical memory, holding the first 8 MiB of `src` (the driver's virtual memory management): a
// kernel reading it issues every load it would issue on `src` while L2 serves almost all of them.
// Kept for the program's life.
inline void* AliasedCopy(const void* src, int64_t bytes) {
#define LAB_CU_CHECK(expr)                                                                  \
  do {                                                                                      \
    if ((expr) != CUDA_SUCCESS) {                                                           \
      std::printf("{\"what\":\"error\",\"at\":\"%s\"}\n", #expr);                   \
      std::exit(1);                                                                         \
    }                                                                                       \
  } while (0)
  int device = 0;
  LAB_CHECK(cudaGetDevice(&device));
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  size_t granularity = 0;
  LAB_CU_CHECK(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  const size_t chunk = (size_t{8} << 20) / granularity * granularity;
  const size_t total = (static_cast<size_t>(bytes) + chunk - 1) / chunk * chunk;
  CUmemGenericAllocationHandle handle;
  LAB_CU_CHECK(cuMemCreate(&handle, chunk, &prop, 0));
  CUdeviceptr base = 0;
  LAB_CU_CHECK(cuMemAddressReserve(&base, total, 0, 0, 0));
  for (size_t off = 0; off < total; off += chunk) LAB_CU_CHECK(cuMemMap(base + off, chunk, 0, handle, 0));
  CUmemAccessDesc access = {};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  LAB_CU_CHECK(cuMemSetAccess(base, total, &access, 1));
  void* out = reinterpret_cast<void*>(base);
  LAB_CHECK(cudaMemcpy(out, src, std::min(chunk, static_cast<size_t>(bytes)), cudaMemcpyDeviceToDevice));
  return out;
#undef LAB_CU_CHECK
}

// The card's copy bandwidth (bytes/s): a device-to-device copy of 1 GiB, read and written.
inline double CopyBandwidth() {
  const size_t bytes = size_t{1} << 30;
  void *src = nullptr, *dst = nullptr;
  LAB_CHECK(cudaMalloc(&src, bytes));
  LAB_CHECK(cudaMalloc(&dst, bytes));
  LAB_CHECK(cudaMemset(src, 0, bytes));
  const double s = TimePerCall([&] { LAB_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice)); }, 5, 5);
  LAB_CHECK(cudaFree(src));
  LAB_CHECK(cudaFree(dst));
  return 2.0 * static_cast<double>(bytes) / s;
}

// A lab program's start: false (after saying so) without a device; else the card's ceilings,
// printed as the first JSON line.
inline bool Start(double* copy_bandwidth) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("{\"what\":\"error\",\"message\":\"no CUDA device\"}\n");
    return false;
  }
  *copy_bandwidth = CopyBandwidth();
  std::printf("{\"what\":\"ceilings\",\"copy_bandwidth_TBps\":%.3f}\n", *copy_bandwidth / 1e12);
  return true;
}

// The products a program runs: `rows cols tokens` from the command line, or by default the 0.5B
// shapes' o (896 x 896), gate|up (9,728 x 896) and down (896 x 4,864) at 1, 8 and 32 tokens.
inline std::vector<std::array<int32_t, 3>> ProductShapes(int argc, char** argv) {
  std::vector<std::array<int32_t, 3>> shapes;
  if (argc == 4) {
    shapes.push_back({std::stoi(argv[1]), std::stoi(argv[2]), std::stoi(argv[3])});
    return shapes;
  }
  const std::array<int32_t, 2> products[] = {{896, 896}, {9728, 896}, {896, 4864}};
  for (int32_t tokens : {1, 8, 32})
    for (const auto& [rows, cols] : products) shapes.push_back({rows, cols, tokens});
  return shapes;
}

}  // namespace rote::lab
