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

// Rows whose rule keeps at most kSampleCandidateMaxTopK ranks (top_k; a greedy row keeps 1) need
// only their first ranks in order, not every column's: SampleRows' candidate path histograms each
// row's keys by their top 12 bits, keeps the keys of the bins up to the one holding its k-th rank
// (at most kSampleCandidateCap of them) and sorts only those. The first k ranks, and so the token,
// are the full sort's.
inline constexpr int32_t kSampleCandidateMaxTopK = 1024;
inline constexpr int32_t kSampleCandidateCap = 4096;
// Whether every one of `rows` rules (host memory) can take the candidate path over `cols` columns.
bool SampleByCandidates(const RowRule* rules, int32_t rows, int32_t cols);
// Bytes of device scratch SampleRows needs for `rows` x `cols` (the candidate path's overflow
// flag and histogram, the sort's keys twice, the weights and the lanes' running sums, the
// candidate path's per-row bounds, the sort's own temporary storage).
int64_t SampleRowsScratchBytes(int32_t rows, int32_t cols);
// out[r] (device) = the token rule r (device array) chooses from logits row r (device, rows x
// cols, row-major). by_candidates (only where SampleByCandidates holds for the same rules): the
// candidate path, which sets the device int SampleRowsOverflow(scratch) to 1 where a row had more
// than kSampleCandidateCap candidates (ties, NaN rows); `out` is then not valid and the caller
// samples again without it. Returns the launch's error (cudaErrorInvalidValue where CanSampleRows
// is false or the scratch is too small).
cudaError_t SampleRows(const float* logits, int32_t rows, int32_t cols, const RowRule* rules, int32_t* out,
                       void* scratch, int64_t scratch_bytes, cudaStream_t stream, bool by_candidates = false);
// logits[r][c] = -inf wherever bit c % 64 of mask[r * words + c / 64] is clear, for rows r of
// `cols` logits; a row with no bit set is left as it is (inference/sampler.h ApplyTokenMask:
// the same rule, so the device sampler then picks the host's token). row_any: device scratch of
// `rows` ints. rows at most 65,535.
cudaError_t LaunchApplyTokenMask(float* logits, int32_t rows, int32_t cols, const uint64_t* mask, int64_t words,
                                 int32_t* row_any, cudaStream_t stream);
// The candidate path's overflow flag in `scratch` (device int32; 0 after a call without overflow).
int32_t* SampleRowsOverflow(void* scratch);

}  // namespace rote::inference::cuda
