// Built instead of the CUDA backend when nvcc was not found: the device is still selectable at
// run time and asking for it says why it is not there.
#include "inference/cuda/cuda_backend.h"

namespace rote::inference {

StatusOr<std::unique_ptr<CudaBackend>> CreateCudaBackend(std::shared_ptr<const Model>, const CudaBackendOptions&) {
  return Unimplemented("this build of rote has no CUDA backend (nvcc was not found when it was configured)");
}

int CudaDeviceCount() { return 0; }
int CudaCurrentDevice() { return -1; }

StatusOr<std::vector<int32_t>> CudaArgmax(const std::vector<float>&, int32_t, int32_t) {
  return Unimplemented("this build of rote has no CUDA backend");
}
StatusOr<std::vector<int32_t>> CudaSampleRows(const std::vector<float>&, int32_t, int32_t,
                                              const std::vector<RowSampling>&, int, int*) {
  return Unimplemented("this build of rote has no CUDA backend");
}

}  // namespace rote::inference
