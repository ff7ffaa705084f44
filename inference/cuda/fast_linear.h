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
// (fast_shapes.h) with this matrix's slices and the tuning's merged slices. Host code.
FastLinearShape ChooseFastLinearShape(int32_t rows, int32_t cols_padded, int32_t tokens, int32_t multiprocessors,
                                      const CudaTuning& tuning);
// Block shapes, merged slices, staged norm weights and streamed weights follow ctx.tuning
// (CudaTuning's fast_* fields): the same bits whatever they are.
cudaError_t LaunchFastLinear(const LinearArgs& args, const LaunchContext& ctx, cudaStream_t stream);
// Device memory the products of `tokens` tokens over at most `cols_padded` columns need in
// LinearArgs::fast_scratch to run on wgmma (fast_wgmma.cuh; from CudaTuning::fast_wgmma_min_tokens
// tokens): the activations' three bf16 pieces in 128-token tiles and the norm's scales.
int64_t FastWgmmaScratchBytesFor(int32_t tokens, int32_t cols_padded);
// Benchmarks, ROTE_CUDA_TIMELINE builds (kernels.h, SetKernelTimeline calls it): this file's
// kernels record into device_buffer.
cudaError_t SetFastLinearTimeline(KernelTimeline* device_buffer, cudaStream_t stream);

}  // namespace rote::inference::cuda
