// The fast profile's matrix product (docs/fast_profile.md): bf16 weights times fp32 activations
// on the tensor cores. Each activation is split exactly into three bf16 pieces (hi + mid + lo,
// by truncation), so every product is exact; the sums are the tensor cores' fp32 accumulation,
// whose rounding is the architecture's. The weights are read from their tile copy
// (DeviceMatrix::fast_tiles, fast_tiles.h). The order of the sums depends only on the matrix's
// shape:
//   - K (the padded columns) is cut into 16-column steps, and the steps into `splits` slices
//     (FastLinearSplits: a function of rows and cols_padded only);
//   - per step, one mma.m16n8k16 per piece, lo, mid, hi, over the step's 16 columns (in the
//     fixed permutation of fast_tiles.h);
//   - inside a slice, step s belongs to warp (s - first) % 8, which accumulates its steps in
//     increasing order from zero; the 8 warps' sums are added in warp order;
//   - the slices' sums are added in increasing slice order (inside the slices' cluster, or the
//     block that runs them all: merged slices, fast_shapes.h FastMergesSlices).
// Which block computes an output, how many rows and tokens share a block, and the rest of the
// batch never enter that order, so the profile is batch-invariant on one GPU architecture (the
// tensor cores' accumulation is not specified across architectures). Plain pointers; LinearArgs
// as the exact kernels take them.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "inference/cuda/fast_shapes.h"
#include "inference/cuda/kernels.h"

namespace rote::inference::cuda {

// K slices of a (rows, cols_padded) matrix: more for matrices of few rows, so that small
// products still spread over the device; never more than 16, and at least two steps per warp.
int32_t FastLinearSplits(int32_t rows, int32_t cols_padded);
// Whether LaunchFastLinear runs `args`: bf16 weights with their tile copy, no rotary epilogue,
// activation rows 16-byte aligned. With norm_weight set, x is the residual stream and the product
// is its RMSNorm's: rms_scale(sum of x^2 over the row) * (W (x * norm_weight)), the squares
// summed in the order of the products' sums (fast_linear.cu), the scale applied to the finished
// sums before the epilogue. That is the fast profile's norm at every token count (its bits are
// not the exact profile's norm followed by the product). The slices of a tile run as one thread-block
// cluster (up to 16 blocks, Hopper's non-portable limit) and add their sums through distributed
// shared memory, or, 2 or 3 short ones, in one block of 16 or 24 warps: LinearArgs::split_* are
// not used.
bool CanRunFastLinear(const LinearArgs& args);
// The block shape LaunchFastLinear uses for up to 64 tokens: ChooseFastLinearShapeFor
// (fast_shapes.h) with this matrix's slices. Host code.
FastLinearShape ChooseFastLinearShape(int32_t rows, int32_t cols_padded, int32_t tokens, int32_t multiprocessors);
cudaError_t LaunchFastLinear(const LinearArgs& args, cudaStream_t stream);
// Benchmarks, ROTE_CUDA_TIMELINE builds (kernels.h, SetKernelTimeline calls it): this file's
// kernels record into device_buffer.
cudaError_t SetFastLinearTimeline(KernelTimeline* device_buffer, cudaStream_t stream);
// Tests: launches issued so far (graph captures count once), and those of merged slices.
int64_t FastLinearLaunches();
int64_t FastLinearMergedLaunches();
// FastLinearKernel launches that staged their norm weights in shared memory (tests).
int64_t FastLinearNormStagedLaunches();
// Tests: launches of FastStreamKernel (weights streamed past resident activations, the lm_head)
// issued so far.
int64_t FastLinearStreamLaunches();
// Benchmarking and tests: where FastStreamKernel runs unsliced products of up to 64 tokens
// (store, bias or residual epilogues): 0 never, 1 (the default; negative: the default) matrices
// of at least 8 x 64 rows per multiprocessor (the lm_head), 2 wherever it can; row_tiles, the
// rows per warp's unit for 32-token tiles in 16-row tiles, 2 or 3 (0: the default, 3). Same bits.
void SetFastLinearStream(int mode, int row_tiles = 0);
// Benchmarking and tests: products of at most `max_slices` K slices (2 or 3) of at most
// `max_steps_per_warp` steps per warp run them in one block (merged slices) instead of a cluster;
// max_slices 0 or 1: always a cluster; negative: the defaults (kFastMergeMaxSlices,
// kFastMergeMaxStepsPerWarp). Same bits.
void SetFastLinearMergedSlices(int max_slices, int max_steps_per_warp = -1);
// Benchmarking and tests: whether products with the norm stage its weights in shared memory
// before their wait (true, the default, where they fit beside two blocks' rings) or read them from
// global memory at every step. Set before capturing graphs. Same bits.
void SetFastLinearNormStaged(bool staged);
// Benchmarking and tests only: 16-row tiles per block (1 to 6; 0, the default: by size; above 4,
// blocks of more than 16 tokens take 16).
// Same bits.
void SetFastLinearTile(int row_tiles_per_block);
// Benchmarking and tests only: the most token rows per block (8, 16 or 32; 0, the default: up
// to 32). Same bits.
void SetFastLinearTokenTile(int tokens);
// Benchmarking only, and NOT the same bits: the slice target of FastLinearSplits (0: the
// default, 32).
void SetFastLinearSplitTargetForBenchmark(int target);
// Benchmarking only, and NOT the same bits: matrices of `rows` rows and `cols_padded` padded
// columns run in `splits` K slices (1 to 16, at most one 16-column step each), whatever the
// target. rows <= 0 clears every override; false when the table is full.
bool SetFastLinearSplitsForBenchmark(int rows, int cols_padded, int splits);
// Benchmarking only: matrices of `rows` rows (and `cols` columns, unless 0) run blocks of row_tiles 16-row tiles by
// token_groups 8-token groups (among the instantiated shapes; others fail with
// cudaErrorInvalidValue). rows <= 0 clears every override; false when the table is full. Same bits.
bool SetFastLinearShapeForRowsForBenchmark(int rows, int cols, int row_tiles, int token_groups);
// Benchmarking only: 0, the default, chooses decode-sized block shapes by the wave model
// (fast_linear.cu, ChooseFastShape); 1, the rule before it (64-row blocks where they give every
// multiprocessor one). Same bits.
void SetFastLinearShapeRuleForBenchmark(int rule);

}  // namespace rote::inference::cuda
