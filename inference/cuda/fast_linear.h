// The fast profile's matrix product (docs/fast_profile.md): bf16 weights times fp32 activations
// on the tensor cores. Each activation is split exactly into three bf16 pieces (hi + mid + lo),
// so every product is exact; the sums are the tensor cores' fp32 accumulation, whose rounding is
// the architecture's. The order of the sums depends only on the matrix's shape:
//   - K (the padded columns) is cut into 64-column chunks, and the chunks into `splits` slices
//     (FastLinearSplits: a function of rows and cols_padded only);
//   - inside a chunk, two 32-column steps; per step the pieces lo, mid, hi, each as two
//     mma.m16n8k16 in increasing k (the columns of a 16-k group are a fixed permutation);
//   - a slice accumulates its chunks in increasing order from zero; the slices' sums are added
//     in increasing slice order.
// Which thread, warp or block computes an output, and how many token rows share a tile, never
// enter that order, so a token's outputs do not depend on the rest of the batch: the profile is
// batch-invariant on one GPU architecture (the tensor cores' accumulation is not specified
// across architectures). Plain pointers; LinearArgs as the exact kernels take them.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "inference/cuda/kernels.h"

namespace rote::inference::cuda {

// K slices of a (rows, cols_padded) matrix: more for matrices of few rows, so that small
// products still spread over the device; never more than 4 or than half the 64-column chunks.
int32_t FastLinearSplits(int32_t rows, int32_t cols_padded);
// Scratch a product of `tokens` rows needs in LinearArgs::split_scratch (floats) and
// split_tickets (zeroed counters; every launch leaves them zero again). 0 when not split.
int64_t FastLinearScratchFloats(int32_t rows, int32_t cols_padded, int32_t tokens);
int64_t FastLinearTickets(int32_t rows, int32_t cols_padded, int32_t tokens);
// Whether LaunchFastLinear runs `args`: bf16 weights, no fused norm, no rotary epilogue, and the
// split scratch it needs.
bool CanRunFastLinear(const LinearArgs& args);
cudaError_t LaunchFastLinear(const LinearArgs& args, cudaStream_t stream);
// Tests: launches issued so far (graph captures count once).
int64_t FastLinearLaunches();
// Benchmarking only: the warp tile's width in 8-row groups (1, 2 or 4; 0, the default: by size).
// Same bits.
void SetFastLinearTile(int n8_per_warp);

}  // namespace rote::inference::cuda
