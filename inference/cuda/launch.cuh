// Launch plumbing shared by the kernel files: programmatic dependent launch (Hopper) and the
// chained launch every kernel of a step goes through. Device code only (.cu files).
#pragma once

#include <cuda_runtime.h>

#include <mutex>

namespace rote::inference::cuda {

// Programmatic dependent launch: every kernel lets the next one start as soon as all its blocks
// are resident, and waits for the previous one to complete before reading what it wrote. The
// matrix kernels issue their first weight loads before the wait, so a layer's weight stream does
// not pause at kernel boundaries. Ordering and results are unchanged: the wait returns only when
// the previous grid has finished and its writes are visible.
__device__ __forceinline__ void WaitForPrevious() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void LetNextStart() { asm volatile("griddepcontrol.launch_dependents;" :::); }

// cooperative: every block must be resident at once (a grid barrier inside): the launch fails
// instead of starting when they cannot be, e.g. under MPS with part of the device.
template <typename... KernelArgs, typename... Args>
cudaError_t LaunchChainedImpl(bool cooperative, void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem,
                              cudaStream_t stream, Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  attr[1].id = cudaLaunchAttributeCooperative;
  attr[1].val.cooperative = 1;
  cfg.attrs = attr;
  cfg.numAttrs = cooperative ? 2 : 1;
  return cudaLaunchKernelEx(&cfg, kernel, static_cast<KernelArgs>(args)...);
}
template <typename... KernelArgs, typename... Args>
cudaError_t LaunchChained(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                          Args... args) {
  return LaunchChainedImpl(false, kernel, grid, block, smem, stream, args...);
}

// L2 policy for weight reads: a step streams every weight once, hundreds of MB through a 50 MB
// L2, so by default each weight line evicts something the next kernels need again (K/V rows,
// activations, norm weights, kernel code). evict_first makes the weight lines the first to go.
__device__ __forceinline__ unsigned long long EvictFirstPolicy() {
  unsigned long long policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

// Multiprocessors of the current device (132 if it cannot be read).
int MultiprocessorCount();

// A value computed once per device: CUDA's function attributes (cudaFuncSetAttribute) and the
// device's properties belong to the current device, so a process with backends on two devices
// must set each kernel's attributes on both. Get(compute) runs compute the first time the
// calling thread's current device asks, and returns that result on that device afterwards.
constexpr int kMaxCachedDevices = 64;
template <typename T>
class PerDevice {
 public:
  template <typename F>
  T Get(F&& compute) {
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kMaxCachedDevices) return compute();
    std::call_once(once_[device], [&] { values_[device] = compute(); });
    return values_[device];
  }

 private:
  std::once_flag once_[kMaxCachedDevices];
  T values_[kMaxCachedDevices] = {};
};

}  // namespace rote::inference::cuda
