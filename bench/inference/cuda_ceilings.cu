// The card's two ceilings, measured where the benchmark runs: device-to-device copy bandwidth
// (bytes read + written) and the fp32 FMA rate of the CUDA cores.
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

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

float MedianMs(std::vector<float> t) {
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

// Returns bytes/s (read + written), or a negative number on a CUDA error.
double MeasureCopyBandwidth() {
  const size_t bytes = size_t{2} << 30;
  void *src = nullptr, *dst = nullptr;
  if (cudaMalloc(&src, bytes) != cudaSuccess) return -1;
  if (cudaMalloc(&dst, bytes) != cudaSuccess) return -1;
  cudaMemset(src, 1, bytes);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<float> times;
  for (int rep = 0; rep < 12; ++rep) {
    cudaEventRecord(e0);
    cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    if (rep >= 2) times.push_back(ms);
  }
  cudaFree(src);
  cudaFree(dst);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  if (cudaGetLastError() != cudaSuccess) return -1;
  return 2.0 * bytes / (MedianMs(times) * 1e-3);
}

// Returns fma/s (one fma = 2 flops), or a negative number on a CUDA error.
double MeasureFmaRate() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const int blocks = sms * 8, threads = 256, iters = 4096;
  float* out = nullptr;
  if (cudaMalloc(&out, sizeof(float) * blocks * threads) != cudaSuccess) return -1;
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<float> times;
  for (int rep = 0; rep < 10; ++rep) {
    cudaEventRecord(e0);
    FmaKernel<<<blocks, threads>>>(out, iters, 0.999f, 1e-3f);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    if (rep >= 2) times.push_back(ms);
  }
  cudaFree(out);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  if (cudaGetLastError() != cudaSuccess) return -1;
  return static_cast<double>(blocks) * threads * iters * 8 / (MedianMs(times) * 1e-3);
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
