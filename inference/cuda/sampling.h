// Sampling on the device (docs/numerics.md section 6): each logits row's token by its rule,
// the same token SampleTokenWithUniform (inference/sampler.h) chooses on the host, so that a
// sampled step's logits need not cross to the host.
#pragma once

#include <cuda_runtime.h>  // cudaStream_t, cudaError_t

#include <cstdint>

namespace rote::inference::cuda {

// One row's rule (RowSampling's fields): temperature <= 0 is greedy; the uniform is drawn on the
// host.
struct RowRule {
  float temperature;
  int32_t top_k;
  float top_p;
  float uniform;
};

// Whether SampleRows runs `rows` rows of `cols` logits: a row's keys carry the column in 18 bits
// and the row in 8.
bool CanSampleRows(int32_t rows, int32_t cols);
// Bytes of device scratch SampleRows needs for `rows` x `cols` (the sort's keys twice, the
// weights and the lanes' running sums, the sort's own temporary storage).
int64_t SampleRowsScratchBytes(int32_t rows, int32_t cols);
// out[r] (device) = the token rule r (device array) chooses from logits row r (device, rows x
// cols, row-major). Returns the launch's error (cudaErrorInvalidValue where CanSampleRows is
// false or the scratch is too small).
cudaError_t SampleRows(const float* logits, int32_t rows, int32_t cols, const RowRule* rules, int32_t* out,
                       void* scratch, int64_t scratch_bytes, cudaStream_t stream);

}  // namespace rote::inference::cuda
