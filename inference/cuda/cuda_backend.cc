// The CUDA backend. One stream; every step uploads its metadata (tokens, positions, block
// tables) in one copy, runs six kernels per layer, and copies the requested logits (or greedy
// tokens) back. Decode steps of the same shape replay one captured graph. The implementation's
// files: backend_impl.h.
#include "inference/cuda/backend_impl.h"

namespace rote::inference {
namespace cuda_impl {

std::vector<int64_t> CudaBackendImpl::StepTrace(int32_t* blocks, int32_t* slots) const {
  DeviceScope scope(options_.device);
  *blocks = step_trace_blocks_;
  *slots = step_trace_slots_;
  std::vector<int64_t> host(static_cast<size_t>(*blocks) * *slots * 2);
  if (host.empty() ||
      cudaMemcpy(host.data(), step_trace_.as<void>(), host.size() * sizeof(int64_t), cudaMemcpyDeviceToHost) != cudaSuccess)
    return {};
  return host;
}

std::vector<CudaKernelTime> CudaBackendImpl::KernelTimeline() const {
  DeviceScope scope(options_.device);
  if (!timeline_recorded_) return {};
  return ReadKernelTimeline(timeline_.as<void>());
}

}  // namespace cuda_impl

int CudaDeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

int CudaCurrentDevice() {
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return device;
}

StatusOr<std::unique_ptr<CudaBackend>> CreateCudaBackend(std::shared_ptr<const Model> model,
                                                         const CudaBackendOptions& options) {
  if (model == nullptr) return InvalidArgument("CreateCudaBackend: no model");
  const int count = CudaDeviceCount();
  if (count == 0) return FailedPrecondition("CUDA backend: no CUDA device is present (or no driver)");
  if (options.device < 0 || options.device >= count)
    return InvalidArgument("CUDA backend: device " + std::to_string(options.device) + " does not exist (" +
                           std::to_string(count) + " present)");
  auto backend = std::make_unique<cuda_impl::CudaBackendImpl>(std::move(model), options);
  Status s = backend->Init();
  if (!s.ok()) return s;
  return std::unique_ptr<CudaBackend>(std::move(backend));
}

}  // namespace rote::inference
