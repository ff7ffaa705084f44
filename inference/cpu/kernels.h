// CPU kernels of the exact profile. Each has a scalar form and an AVX2+FMA form that computes
// the same canonical order (docs/numerics.md section 2), so both give the same bits; tests hold
// them to it. The AVX2 forms are chosen at run time when the CPU has AVX2 and FMA.
#pragma once

#include <cstdint>

#include "inference/model/config.h"

namespace rote::inference::cpu {

bool CpuHasAvx2Fma();

// Canonical dot product (32 lanes, fixed tree).
float DotScalar(const float* a, const float* b, int64_t n);
float DotAvx2(const float* a, const float* b, int64_t n);
// Canonical dot of a stored row (bf16 / fp16 / fp32, possibly unaligned) with fp32 x,
// converting as it loads: the batch-1 decode path, where the row is read once.
float DotStoredAvx2(DType dtype, const void* row, const float* x, int64_t n);
// out[k] = canonical_dot(w, xs[k], n) for k < count (1..3): one pass over w serves up to three
// tokens. Any n (tails handled per lane).
void DotMultiAvx2(const float* w, const float* const* xs, int count, int64_t n, float* out);
// NOT canonical: one accumulator, terms in order. Only for the test-only backend option that
// proves the invariance tests catch a non-canonical reduction.
float DotSequential(const float* a, const float* b, int64_t n);

// n stored elements (bf16, fp16 or fp32, possibly unaligned) converted exactly to fp32.
void ConvertToF32(DType dtype, const void* src, int64_t n, float* dst, bool avx2);

// out[x] = canonical reduction over j < n of w[j] * rows[j][x] (lane j % 32, fmaf, tree), for
// x < d: the attention value accumulation. scratch holds 32 * d floats.
void WeightedRowSumScalar(const float* w, const float* const* rows, int64_t n, int64_t d, float* scratch, float* out);
void WeightedRowSumAvx2(const float* w, const float* const* rows, int64_t n, int64_t d, float* scratch, float* out);

}  // namespace rote::inference::cpu
