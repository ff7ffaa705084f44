// Built instead of the CUDA backend when nvcc was not found: the device is still selectable at
// run time and asking for it says why it is not there.
#include "inference/cuda/cuda_backend.h"

namespace rote::inference {

StatusOr<std::unique_ptr<CudaBackend>> CreateCudaBackend(std::shared_ptr<const Model>, const CudaBackendOptions&) {
  return Unimplemented("this build of rote has no CUDA backend (nvcc was not found when it was configured)");
}

int CudaDeviceCount() { return 0; }
int CudaCurrentDeviceForTesting() { return -1; }

void SetCudaLargeBatchTileForTesting(int) {}
void SetCudaAttentionVariantForTesting(int) {}
void SetCudaWeightEvictFirstForTesting(bool) {}
void SetCudaSkipKernelsForBenchmark(uint32_t) {}
void SetCudaOneTokenKernelForTesting(int) {}
void SetCudaMlpBlockMaxWarpsForTesting(int) {}
int64_t CudaDecodeStepsForTesting() { return 0; }
int64_t CudaTiledLinearLaunchesForTesting() { return 0; }
int64_t CudaFastLinearLaunchesForTesting() { return 0; }
int64_t CudaFastMergedLaunchesForTesting() { return 0; }
StatusOr<std::vector<int32_t>> CudaArgmaxForTesting(const std::vector<float>&, int32_t, int32_t) {
  return Unimplemented("this build of rote has no CUDA backend");
}
StatusOr<std::vector<int32_t>> CudaSampleRowsForTesting(const std::vector<float>&, int32_t, int32_t,
                                                       const std::vector<RowSampling>&, int*) {
  return Unimplemented("this build of rote has no CUDA backend");
}
void SetCudaSampleCandidatesForTesting(int) {}
void SetCudaFastMergedSlicesForTesting(int, int) {}
int64_t CudaFastStreamLaunchesForTesting() { return 0; }
void SetCudaFastStreamForTesting(int, int) {}
void SetCudaFastLinearTileForTesting(int, int) {}
void SetCudaFastSplitTargetForBenchmark(int) {}
void SetCudaFastSplitsForBenchmark(int, int, int) {}
void SetCudaFastShapeForRowsForBenchmark(int, int, int, int) {}
void SetCudaFastShapeRuleForBenchmark(int) {}
void SetCudaFastRopeFusedForTesting(bool) {}
void SetCudaFastNormStagedForTesting(bool) {}
void SetCudaLatePrefetchForTesting(int) {}
int64_t CudaLatePrefetchLaunchesForTesting() { return 0; }
int64_t CudaFastNormStagedLaunchesForTesting() { return 0; }
void SetCudaProgrammaticLaunchForBenchmark(bool) {}
int64_t CudaAttentionPartsLaunchesForTesting() { return 0; }
int64_t CudaDecodeStepsInPartsForTesting() { return 0; }
void SetCudaStepTraceForBenchmark(bool) {}
void SetCudaStepPrefetchTilesForTesting(int) {}
void SetCudaStepAttentionSplitForTesting(int) {}
void SetCudaAttentionPartsForTesting(int) {}
void SetCudaKernelTimelineForBenchmark(bool) {}
std::vector<CudaKernelTime> CudaKernelTimelineForBenchmark() { return {}; }
std::vector<int64_t> CudaStepTraceForBenchmark(int32_t* blocks, int32_t* slots) {
  *blocks = 0;
  *slots = 0;
  return {};
}

}  // namespace rote::inference
