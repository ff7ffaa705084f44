// The card's ceilings, measured where the benchmark runs: device-to-device copy bandwidth (bytes
// read + written), the fp32 FMA rate of the CUDA cores and, on Hopper, the bf16 rate of its
// warpgroup tensor-core instruction (wgmma, fp32 accumulators): what the fast profile's prefill
// products run on.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "inference/cuda/wgmma.cuh"

namespace rote::bench {

namespace {

// 8 independent fma chains per thread keep the pipes full; the result is stored so the chains
// are not removed.
__global__ void FmaKernel(float* out, int iters, float a, float b) {
  float v[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = threadIdx.x * 1e-3f + i;
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = fmaf(v[i], a, b);
  }
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) s = s + v[i];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

// Each warpgroup issues kTensorBurst wgmma.m64n128k16 (A from registers, B a 16 x 128 bf16
// tile in shared memory, nonzero values) onto one accumulator, then waits; two warpgroups a
// block, two blocks a multiprocessor, so one's wait is another's issue. The accumulators are
// stored so nothing is removed.
constexpr int kTensorBurst = 8;
__global__ void __launch_bounds__(256, 2) Bf16TensorKernel(float* out, int iters) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __shared__ __align__(128) uint16_t b_tile[16 * 128];
  for (int i = threadIdx.x; i < 16 * 128; i += blockDim.x) b_tile[i] = 0x3c00 + (i % 7);  // ~2^-7
  __syncthreads();
  const uint32_t smem = static_cast<uint32_t>(__cvta_generic_to_shared(b_tile));
  // No-swizzle K-major: core matrices of 8 rows x 16 bytes, k halves 128 bytes apart, 8-column
  // groups 256 apart.
  const uint64_t desc = rote::inference::cuda::WgDescriptor(smem, 128, 256);
  const uint32_t av = 0x3c003c00u + threadIdx.x % 5;
  const uint4 a = make_uint4(av, av + 1, av + 2, av + 3);
  float d[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) d[i] = 0.0f;
  using rote::inference::cuda::WgCommit;
  using rote::inference::cuda::WgFence;
  using rote::inference::cuda::WgMma;
  using rote::inference::cuda::WgWait;
  for (int it = 0; it < iters; ++it) {
    WgFence();
#pragma unroll
    for (int k = 0; k < kTensorBurst; ++k) WgMma(d, a, desc);
    WgCommit();
    WgWait<0>(d);
  }
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < 64; ++i) s = s + d[i];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
#else
  // Built without sm_90a's instructions: a NaN tells the host that nothing was measured.
  (void)iters;
  out[blockIdx.x * blockDim.x + threadIdx.x] = __int_as_float(0x7fc00000);
#endif
}

float MedianMs(std::vector<float> t) {
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// The median of 8 timed runs of `launch` (a kernel or a copy; after 2 untimed), in ms; -1 on a
// CUDA error.
template <typename Launch>
float MedianKernelMs(Launch launch) {
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<float> times;
  for (int rep = 0; rep < 10; ++rep) {
    cudaEventRecord(e0);
    launch();
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    if (rep >= 2) times.push_back(ms);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return cudaGetLastError() == cudaSuccess ? MedianMs(times) : -1.0f;
}

}  // namespace

// Returns bytes/s (read + written), or a negative number on a CUDA error.
double MeasureCopyBandwidth() {
  const size_t bytes = size_t{2} << 30;
  void *src = nullptr, *dst = nullptr;
  if (cudaMalloc(&src, bytes) != cudaSuccess) return -1;
  if (cudaMalloc(&dst, bytes) != cudaSuccess) return -1;
  cudaMemset(src, 1, bytes);
  const float ms = MedianKernelMs([&] { cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice); });
  cudaFree(src);
  cudaFree(dst);
  if (ms < 0 || cudaGetLastError() != cudaSuccess) return -1;
  return 2.0 * bytes / (ms * 1e-3);
}

// Returns fma/s (one fma = 2 flops), or a negative number on a CUDA error.
double MeasureFmaRate() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const int blocks = sms * 8, threads = 256, iters = 4096;
  float* out = nullptr;
  if (cudaMalloc(&out, sizeof(float) * blocks * threads) != cudaSuccess) return -1;
  const float ms = MedianKernelMs([&] { FmaKernel<<<blocks, threads>>>(out, iters, 0.999f, 1e-3f); });
  cudaFree(out);
  if (ms < 0 || cudaGetLastError() != cudaSuccess) return -1;
  return static_cast<double>(blocks) * threads * iters * 8 / (ms * 1e-3);
}

// Returns bf16 tensor-core flop/s (wgmma, fp32 accumulate), 0 where the device is not Hopper
// (compute capability 9.0) or the build has no sm_90a code, or a negative number on a CUDA error.
double MeasureBf16TensorRate() {
  int device = 0, major = 0, minor = 0, sms = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (major != 9 || minor != 0) return 0;
  const int blocks = sms * 2, threads = 256, iters = 2048;
  float* out = nullptr;
  if (cudaMalloc(&out, sizeof(float) * blocks * threads) != cudaSuccess) return -1;
  const float ms = MedianKernelMs([&] { Bf16TensorKernel<<<blocks, threads>>>(out, iters); });
  float first = 0.0f;
  cudaMemcpy(&first, out, sizeof(first), cudaMemcpyDeviceToHost);
  cudaFree(out);
  if (std::isnan(first)) return 0;  // a build without sm_90a's wgmma
  if (ms < 0 || cudaGetLastError() != cudaSuccess) return -1;
  const double flops_per_instruction = 2.0 * 64 * 128 * 16;
  return static_cast<double>(blocks) * (threads / 128) * iters * kTensorBurst * flops_per_instruction / (ms * 1e-3);
}

// Free and total bytes of the current device (0, 0 on an error).
void DeviceMemory(int64_t* free_bytes, int64_t* total_bytes) {
  size_t f = 0, t = 0;
  if (cudaMemGetInfo(&f, &t) != cudaSuccess) f = t = 0;
  *free_bytes = static_cast<int64_t>(f);
  *total_bytes = static_cast<int64_t>(t);
}

// Takes `bytes` of device memory away (a smaller card's worth left); nullptr on failure.
void* AllocateBallast(int64_t bytes) {
  void* p = nullptr;
  if (bytes <= 0 || cudaMalloc(&p, static_cast<size_t>(bytes)) != cudaSuccess) return nullptr;
  return p;
}

void FreeBallast(void* p) {
  if (p != nullptr) cudaFree(p);
}

}  // namespace rote::bench
